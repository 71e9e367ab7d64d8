//! Catalog tests: every script parses, verifies, prints, and round-trips through the printer;
//! alias-spelled scripts equal their canonical twins; the printed forms are snapshotted; the
//! main iteration of each kernel has the axes and iterator kinds SPEC §6 prescribes.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, AxisKind, IterAxis, PrimFunc, SparseIteration, Stmt};
use sparsetir_ops::{alias_of, catalog, get, Kernel};

fn parse(name: &str, source: &str) -> PrimFunc {
    match sparsetir_syntax::parse_module(source) {
        Ok(module) => {
            assert_eq!(
                module.funcs.len(),
                1,
                "{name}: expected exactly one function"
            );
            module.funcs.into_iter().next().expect("one function")
        }
        Err(diags) => panic!(
            "{name} does not parse:\n{}",
            sparsetir_syntax::render(&diags, name, source)
        ),
    }
}

fn canonical_kernels() -> impl Iterator<Item = &'static Kernel> {
    catalog().iter().filter(|k| alias_of(k.name).is_none())
}

#[test]
fn catalog_lookup() {
    let names: Vec<&str> = catalog().iter().map(|k| k.name).collect();
    for (i, a) in names.iter().enumerate() {
        assert!(!names[i + 1..].contains(a), "duplicate kernel {a}");
    }
    for want in [
        "csrmm",
        "csrmm_dense_iter",
        "sddmm",
        "fused_sddmm",
        "spmv",
        "bsrmm",
        "ellmm",
        "rgcn_hetero",
        "rgcn_homo",
        "csf_square_sum",
        "segment_sum",
        "segment_max",
        "segment_min",
        "segment_mean",
        "ragged_bmm",
        "sparse_softmax",
        "csr2bsr",
        "hyper_gnn",
        "spmm_24",
        "csrmm_alias",
        "sddmm_alias",
    ] {
        let k = get(want).unwrap_or_else(|| panic!("missing kernel {want}"));
        assert_eq!(k.name, want);
        assert!(k.source.contains("@T.prim_func"), "{want}: not a script");
    }
    assert!(get("no_such_kernel").is_none());
    assert_eq!(alias_of("csrmm_alias"), Some("csrmm"));
    assert_eq!(alias_of("sddmm_alias"), Some("sddmm"));
    assert_eq!(alias_of("csrmm"), None);
    assert!(matches!(
        sparsetir_ops::load("no_such_kernel"),
        Err(sparsetir_ops::LoadError::Unknown(_))
    ));
}

#[test]
fn every_kernel_parses_verifies_and_round_trips() {
    for k in catalog()
        .iter()
        .chain(sparsetir_ops::sparse_output())
        .chain(sparsetir_ops::aggregations())
    {
        let f = parse(k.name, k.source);
        assert_eq!(
            f.attrs.get_int("sparse_tir_level"),
            Some(2),
            "{}: stage attribute",
            k.name
        );
        if let Err(errs) = verify_func(&f) {
            let msgs: Vec<String> = errs.iter().map(|e| e.message.clone()).collect();
            panic!("{} does not verify: {msgs:?}", k.name);
        }
        let printed = print_func(&f);
        let again = parse(&format!("{} (printed)", k.name), &printed);
        assert!(
            func_eq(&f, &again),
            "{}: printed form is not structurally equal:\n{printed}",
            k.name
        );
        let reprinted = print_func(&again);
        assert_eq!(printed, reprinted, "{}: printing is not stable", k.name);
        if let Err(errs) = verify_func(&again) {
            panic!("{} (printed) does not verify: {:?}", k.name, errs);
        }
    }
}

#[test]
fn aliases_equal_their_canonical_twins() {
    let mut seen = 0;
    for k in catalog() {
        let Some(twin) = alias_of(k.name) else {
            continue;
        };
        seen += 1;
        let alias = parse(k.name, k.source);
        let canon_kernel = get(twin).expect("twin in catalog");
        let canon = parse(twin, canon_kernel.source);
        assert!(
            func_eq(&alias, &canon),
            "{} is not structurally equal to {twin}",
            k.name
        );
        let printed = print_func(&alias);
        assert_eq!(
            printed,
            print_func(&canon),
            "{} does not print in canonical form",
            k.name
        );
        for alias_word in [
            "T.dense_fixed",
            "T.sparse_variable",
            "T.match_sparse_buffer",
            "T.iter(",
        ] {
            assert!(
                k.source.contains(alias_word),
                "{} should use {alias_word}",
                k.name
            );
            assert!(
                !printed.contains(alias_word),
                "{}: printed form uses {alias_word}",
                k.name
            );
        }
    }
    assert_eq!(seen, 2);
}

#[test]
fn printed_forms_snapshot() {
    for k in canonical_kernels() {
        let printed = print_func(&parse(k.name, k.source));
        insta::assert_snapshot!(k.name, printed);
    }
}

/// Every sparse iteration of `f`, outer ones before the ones they contain.
fn iterations(f: &PrimFunc) -> Vec<SparseIteration> {
    let mut out = Vec::new();
    f.body.visit(&mut |s| {
        if let Stmt::SparseIteration(it) = s {
            out.push((**it).clone());
        }
    });
    out
}

/// Describes an iteration's axis list like `"I:DF J:CV K:DF"`, fused entries as `fuse(I:DF,J:CV)`
/// and attached ones as `attach(I_T:CV,J)`.
fn describe_axes(f: &PrimFunc, it: &SparseIteration) -> String {
    let short = |k: AxisKind| match k {
        AxisKind::DenseFixed => "DF",
        AxisKind::DenseVaried => "DV",
        AxisKind::CompressedFixed => "CF",
        AxisKind::CompressedVaried => "CV",
    };
    let one = |a| format!("{}:{}", f.axes[a].name, short(f.axes[a].kind));
    it.axes
        .iter()
        .map(|e| match e {
            IterAxis::Axis(a) => one(*a),
            IterAxis::Fuse(v) => {
                format!(
                    "fuse({})",
                    v.iter().map(|a| one(*a)).collect::<Vec<_>>().join(",")
                )
            }
            IterAxis::Attach { axis, parent } => {
                format!("attach({},{})", one(*axis), f.axes[*parent].name)
            }
            IterAxis::CoIter { op, .. } => format!("{}(...)", op.name()),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn main_iterations_follow_spec_section_6() {
    // kernel, iteration name, axes, kinds (written from SPEC §6, not from the scripts' output)
    let table: &[(&str, &str, &str, &str)] = &[
        ("csrmm", "csrmm", "I:DF J:CV K:DF", "SRS"),
        ("csrmm_dense_iter", "csrmm", "I:DF J_detach:DF K:DF", "SRS"),
        ("sddmm", "sddmm", "I:DF J:CV K:DF", "SSR"),
        ("fused_sddmm", "sddmm", "fuse(I:DF,J:CV) K:DF", "SSR"),
        ("spmv", "spmv", "I:DF J:CV", "SR"),
        ("bsrmm", "bsrmm", "I:DF BI:DF BJ:DF F:DF J:CV", "SSRSR"),
        ("ellmm", "ellmm", "I:DF J:CF BI:DF BJ:DF F:DF", "SRSRS"),
        (
            "rgcn_hetero",
            "rgcn_hetero",
            "F_out:DF R:DF I:CV J:CV F_in:DF",
            "SSSRR",
        ),
        (
            "rgcn_homo",
            "rgcn_homo",
            "I:DF F_out:DF J:CV F_in:DF",
            "SSRR",
        ),
        ("csf_square_sum", "csf_square_sum", "I:DF J:CV K:CV", "SRR"),
        ("segment_sum", "segment_sum", "I:DF J:DV", "SR"),
        ("segment_max", "segment_max", "I:DF J:DV", "SR"),
        ("segment_min", "segment_min", "I:DF J:DV", "SR"),
        ("segment_mean", "segment_mean_sum", "I:DF J:DV", "SR"),
        ("ragged_bmm", "ragged_bmm", "B:DF I:DV J:DV K:DV", "SSRS"),
        ("sparse_softmax", "sparse_softmax", "I:DF", "S"),
        ("sparse_softmax", "row_max", "J:CV", "R"),
        ("sparse_softmax", "row_sum", "J:CV", "R"),
        ("sparse_softmax", "row_div", "J:CV", "S"),
        ("csr2bsr", "csr2bsr", "I:DF J:CV", "SS"),
        (
            "hyper_gnn",
            "hyper_gnn",
            "I:DF F:DF J:CV attach(I_T:CV,J)",
            "SSRR",
        ),
        ("spmm_24", "spmm_24", "G:DF J:CF F:DF", "RRS"),
    ];
    for (kernel, iter_name, axes, kinds) in table {
        let k = get(kernel).expect("kernel");
        let f = parse(kernel, k.source);
        let its = iterations(&f);
        let it = its
            .iter()
            .find(|it| it.name == *iter_name)
            .unwrap_or_else(|| panic!("{kernel}: no iteration {iter_name}"));
        assert_eq!(describe_axes(&f, it), *axes, "{kernel}/{iter_name}: axes");
        let got_kinds: String = it.kinds.iter().map(|k| k.letter()).collect();
        assert_eq!(got_kinds, *kinds, "{kernel}/{iter_name}: iterator kinds");
        assert_eq!(
            it.vars.len(),
            kinds.len(),
            "{kernel}/{iter_name}: iterator count"
        );
    }
    // The softmax's reductions are nested in the row iteration.
    let f = parse(
        "sparse_softmax",
        get("sparse_softmax").expect("kernel").source,
    );
    let names: Vec<String> = iterations(&f).into_iter().map(|it| it.name).collect();
    assert_eq!(names, ["sparse_softmax", "row_max", "row_sum", "row_div"]);
}

/// The sparse-output kernels (issue 15): canonical text (the file is its own printed form),
/// co-iteration entries and assembled output axes where the scripts say.
#[test]
fn sparse_output_kernels_are_canonical() {
    for k in sparsetir_ops::sparse_output() {
        let f = parse(k.name, k.source);
        let body: String = k
            .source
            .lines()
            .skip_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(print_func(&f), body, "{}: not in canonical form", k.name);
        let assembled: Vec<&str> = f
            .axes
            .iter()
            .filter(|(_, a)| a.assembled)
            .map(|(_, a)| a.name.as_str())
            .collect();
        let want: &[&str] = if k.name == "masked_spgemm" {
            &[]
        } else {
            &["JC"]
        };
        assert_eq!(assembled, want, "{}: assembled axes", k.name);
        let coiter = iterations(&f)
            .iter()
            .flat_map(|it| it.axes.clone())
            .filter(|e| matches!(e, IterAxis::CoIter { .. }))
            .count();
        let want = usize::from(matches!(k.name, "spadd" | "spmul" | "masked_spgemm"));
        assert_eq!(coiter, want, "{}: co-iteration entries", k.name);
    }
}
