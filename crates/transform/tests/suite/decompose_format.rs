//! `decompose_format` on the RFC's CSR → BSR(4, 16, 32) decomposition of csrmm: the result is
//! structurally equal to the RFC's `bsr_rewrite_with_preprocess`; rules read from scripts equal
//! rules built from Rust; malformed rules and unsupported programs give located errors;
//! `remove_preprocess` / `extract_preprocess` split the result.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, IRModule, PrimFunc, Stage, Stmt};
use sparsetir_syntax::parse_func;
use sparsetir_transform::format_rule::scripts;
use sparsetir_transform::{
    bsr_rule, decompose_format, extract_preprocess, lower, remove_preprocess, DecomposeError,
    FormatRewriteRule, IndexMap, MapExpr, PipelineOptions, RuleError,
};

const CSRMM: &str = r#"
@T.prim_func
def csrmm(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    C = T.sp.match_buffer(c, (I, K), "float32")
    with T.sp.iteration([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = 0.0
        C[i, k] = C[i, k] + A[i, j] * B[j, k]
"#;

/// The RFC's expected output, as printed there (the `dense_fixed(m_4, "int32")` forms kept),
/// except for the init: the RFC keeps `C = 0` in each clone, which is right only when every
/// clone holds the whole matrix; the three formats are parts of one matrix, and an init runs at
/// every output point (also where a clone's block row is empty), so it runs once, in
/// `csrmm_init`, before the clones accumulate.
const BSR_REWRITE_WITH_PREPROCESS: &str = r#"
@T.prim_func
def bsr_rewrite_with_preprocess(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
    a_4: T.handle,
    indptr_4: T.handle,
    indices_4: T.handle,
    m_4: T.int32,
    n_4: T.int32,
    nnz_4: T.int32,
    a_16: T.handle,
    indptr_16: T.handle,
    indices_16: T.handle,
    m_16: T.int32,
    n_16: T.int32,
    nnz_16: T.int32,
    a_32: T.handle,
    indptr_32: T.handle,
    indices_32: T.handle,
    m_32: T.int32,
    n_32: T.int32,
    nnz_32: T.int32,
) -> None:
    # function attr dict
    T.func_attr(
        {"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2, "composable": 1}
    )
    I = T.sp.dense_fixed(m, "int32")
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n, "int32")
    K = T.sp.dense_fixed(feat_size, "int32")
    IO_4 = T.sp.dense_fixed(m_4, "int32")
    JO_4 = T.sp.compressed_varied(IO_4, (n_4, nnz_4), (indptr_4, indices_4), "int32")
    II_4 = T.sp.dense_fixed(4, "int32")
    JI_4 = T.sp.dense_fixed(4, "int32")
    IO_16 = T.sp.dense_fixed(m_16, "int32")
    JO_16 = T.sp.compressed_varied(IO_16, (n_16, nnz_16), (indptr_16, indices_16), "int32")
    II_16 = T.sp.dense_fixed(16, "int32")
    JI_16 = T.sp.dense_fixed(16, "int32")
    IO_32 = T.sp.dense_fixed(m_32, "int32")
    JO_32 = T.sp.compressed_varied(IO_32, (n_32, nnz_32), (indptr_32, indices_32), "int32")
    II_32 = T.sp.dense_fixed(32, "int32")
    JI_32 = T.sp.dense_fixed(32, "int32")
    A = T.sp.match_buffer(a, [I, J], dtype="float32")
    B = T.sp.match_buffer(b, [J_detach, K], dtype="float32")
    C = T.sp.match_buffer(c, [I, K], dtype="float32")
    A_4 = T.sp.match_buffer(a_4, [IO_4, JO_4, II_4, JI_4], dtype="float32")
    A_16 = T.sp.match_buffer(a_16, [IO_16, JO_16, II_16, JI_16], dtype="float32")
    A_32 = T.sp.match_buffer(a_32, [IO_32, JO_32, II_32, JI_32], dtype="float32")
    # body
    # with T.block("root")
    with T.sp.iteration([IO_4, JO_4, II_4, JI_4], "SSSS", "rewrite_A_4") as [io_4, jo_4, ii_4, ji_4]:
        T.sp.iteration_attr({"preprocess": True})
        A_4[io_4, jo_4, ii_4, ji_4] = A[io_4 * 4 + ii_4, jo_4 * 4 + ji_4]
    with T.sp.iteration([IO_16, JO_16, II_16, JI_16], "SSSS", "rewrite_A_16") as [
        io_16,
        jo_16,
        ii_16,
        ji_16,
    ]:
        T.sp.iteration_attr({"preprocess": True})
        A_16[io_16, jo_16, ii_16, ji_16] = A[io_16 * 16 + ii_16, jo_16 * 16 + ji_16]
    with T.sp.iteration([IO_32, JO_32, II_32, JI_32], "SSSS", "rewrite_A_32") as [
        io_32,
        jo_32,
        ii_32,
        ji_32,
    ]:
        T.sp.iteration_attr({"preprocess": True})
        A_32[io_32, jo_32, ii_32, ji_32] = A[io_32 * 32 + ii_32, jo_32 * 32 + ji_32]
    with T.sp.iteration([I, K], "SS", "csrmm_init") as [i, k]:
        C[i, k] = T.float32(0)
    with T.sp.iteration([IO_4, II_4, JO_4, JI_4, K], "SSRRS", "csrmm_4") as [io_4, ii_4, jo_4, ji_4, k]:
        C[io_4 * 4 + ii_4, k] = (
            C[io_4 * 4 + ii_4, k] + A_4[io_4, jo_4, ii_4, ji_4] * B[jo_4 * 4 + ji_4, k]
        )
    with T.sp.iteration([IO_16, II_16, JO_16, JI_16, K], "SSRRS", "csrmm_16") as [
        io_16,
        ii_16,
        jo_16,
        ji_16,
        k,
    ]:
        C[io_16 * 16 + ii_16, k] = (
            C[io_16 * 16 + ii_16, k] + A_16[io_16, jo_16, ii_16, ji_16] * B[jo_16 * 16 + ji_16, k]
        )
    with T.sp.iteration([IO_32, II_32, JO_32, JI_32, K], "SSRRS", "csrmm_32") as [
        io_32,
        ii_32,
        jo_32,
        ji_32,
        k,
    ]:
        C[io_32 * 32 + ii_32, k] = (
            C[io_32 * 32 + ii_32, k] + A_32[io_32, jo_32, ii_32, ji_32] * B[jo_32 * 32 + ji_32, k]
        )
"#;

fn parse(src: &str) -> PrimFunc {
    match parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!("{}", sparsetir_syntax::render(&d, "test.sp", src)),
    }
}

fn module(f: PrimFunc) -> IRModule {
    IRModule { funcs: vec![f] }
}

fn bsr_rules() -> Vec<FormatRewriteRule> {
    [4, 16, 32]
        .iter()
        .map(|&b| bsr_rule(b).expect("bsr rule"))
        .collect()
}

fn decomposed_bsr(include: bool) -> PrimFunc {
    let m = decompose_format(&module(parse(CSRMM)), &bsr_rules(), include).expect("decompose");
    m.funcs.into_iter().next().expect("one function")
}

fn iteration_names(f: &PrimFunc) -> Vec<String> {
    let mut out = Vec::new();
    f.body.visit(&mut |s| {
        if let Stmt::SparseIteration(it) = s {
            out.push(it.name.clone());
        }
    });
    out
}

#[test]
fn rfc_csr_to_bsr_matches_the_rfc_output() {
    let got = decomposed_bsr(true);
    let want = parse(BSR_REWRITE_WITH_PREPROCESS);
    assert!(
        func_eq(&got, &want),
        "decomposed:\n{}\nexpected:\n{}",
        print_func(&got),
        print_func(&want)
    );
    assert_eq!(got.stage(), Stage::I);
    verify_func(&got).expect("verifies");
}

#[test]
fn rfc_decomposition_round_trips_and_lowers() {
    let got = decomposed_bsr(true);
    let text = print_func(&got);
    let back = parse(&text);
    assert!(func_eq(&got, &back), "round trip:\n{text}");
    assert_eq!(print_func(&back), text);
    let lowered = lower(&module(got), &PipelineOptions::to_stage(Stage::III)).expect("lowers");
    assert_eq!(lowered.funcs[0].stage(), Stage::III);
}

#[test]
fn without_rewrite_blocks_only_the_clones_remain() {
    let got = decomposed_bsr(false);
    assert_eq!(
        iteration_names(&got),
        ["csrmm_init", "csrmm_4", "csrmm_16", "csrmm_32"]
    );
    // Equal to the RFC output with its preprocess iterations removed.
    let want = remove_preprocess(&parse(BSR_REWRITE_WITH_PREPROCESS));
    assert!(func_eq(&got, &want), "{}", print_func(&got));
}

#[test]
fn remove_and_extract_preprocess_split_the_iterations() {
    let full = decomposed_bsr(true);
    let compute = remove_preprocess(&full);
    let pre = extract_preprocess(&full);
    assert_eq!(
        iteration_names(&compute),
        ["csrmm_init", "csrmm_4", "csrmm_16", "csrmm_32"]
    );
    assert_eq!(
        iteration_names(&pre),
        ["rewrite_A_4", "rewrite_A_16", "rewrite_A_32"]
    );
    // Parameters and declarations stay, so one set of arguments serves all three.
    assert_eq!(compute.params.len(), full.params.len());
    assert_eq!(pre.params.len(), full.params.len());
    verify_func(&compute).expect("compute verifies");
    verify_func(&pre).expect("preprocess verifies");
    // A function without preprocess parts: remove is the identity, extract empties the body.
    let plain = parse(CSRMM);
    assert!(func_eq(&remove_preprocess(&plain), &plain));
    assert!(extract_preprocess(&plain).body.is_empty());
}

#[test]
fn one_rule_is_not_composable() {
    let m = decompose_format(&module(parse(CSRMM)), &bsr_rules()[..1], true).expect("decompose");
    let f = &m.funcs[0];
    assert!(f.attrs.get("composable").is_none());
    assert_eq!(iteration_names(f), ["rewrite_A_4", "csrmm_4"]);
    verify_func(f).expect("verifies");
}

#[test]
fn script_rule_equals_rust_rule() {
    let from_script = bsr_rule(4).expect("rule");
    assert_eq!(from_script.name, "4");
    // The same rule from Rust: the format function without its rule parameter, the maps built
    // from expression trees.
    let format = parse(
        r#"
@T.prim_func
def bsr(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    IO = T.sp.dense_fixed(m)
    JO = T.sp.compressed_varied(IO, (n, nnz), (indptr, indices), "int32")
    II = T.sp.dense_fixed(4)
    JI = T.sp.dense_fixed(4)
    A = T.sp.match_buffer(a, (IO, JO, II, JI), "float32")
"#,
    );
    use sparsetir_ir::BinOp::{Add, FloorDiv, FloorMod, Mul};
    let b = |op, x, y| MapExpr::Binary(op, Box::new(x), Box::new(y));
    let p = MapExpr::Param;
    let four = || MapExpr::Int(4);
    let idx = IndexMap::new(
        vec!["i".into(), "j".into()],
        vec![
            b(FloorDiv, p(0), four()),
            b(FloorDiv, p(1), four()),
            b(FloorMod, p(0), four()),
            b(FloorMod, p(1), four()),
        ],
    );
    let inv = IndexMap::new(
        vec!["io".into(), "jo".into(), "ii".into(), "ji".into()],
        vec![
            b(Add, b(Mul, p(0), four()), p(2)),
            b(Add, b(Mul, p(1), four()), p(3)),
        ],
    );
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let from_rust = FormatRewriteRule::new(
        "4",
        format,
        names(&["A"]),
        names(&["I", "J"]),
        names(&["IO", "JO", "II", "JI"]),
        vec![
            ("I".into(), names(&["IO", "II"])),
            ("J".into(), names(&["JO", "JI"])),
        ],
        idx.clone(),
        inv.clone(),
    )
    .expect("valid rule");
    assert_eq!(from_script.idx_map, idx);
    assert_eq!(from_script.inv_idx_map, inv);
    assert_eq!(from_script.axis_map, from_rust.axis_map);
    assert_eq!(from_script.axes_after, from_rust.axes_after);
    assert!(func_eq(&from_script.new_format, &from_rust.new_format));
    // Both decompose csrmm identically.
    let a = decompose_format(&module(parse(CSRMM)), &[from_script], true).expect("script");
    let b2 = decompose_format(&module(parse(CSRMM)), &[from_rust], true).expect("rust");
    assert!(func_eq(&a.funcs[0], &b2.funcs[0]));
}

#[test]
fn index_maps_parse_and_print() {
    let m = IndexMap::parse("lambda i, j: (i // 4, j // 4, i % 4, j % 4)").expect("parses");
    assert_eq!(m.params, ["i", "j"]);
    assert_eq!(m.to_string(), "lambda i, j: (i // 4, j // 4, i % 4, j % 4)");
    // Without parentheses, with a symbol, precedence and unary minus.
    let m = IndexMap::parse("lambda a, b: a * (b + s) - -2, a").expect("parses");
    assert_eq!(m.results.len(), 2);
    assert_eq!(m.symbols(), ["s"]);
    assert_eq!(m.to_string(), "lambda a, b: (a * (b + s) - -2, a)");
    let one = IndexMap::parse("lambda o, i, j: (i,)").expect("one-tuple");
    assert_eq!(one.results, [MapExpr::Param(1)]);
    // Errors carry the byte range of the offending token.
    let err = |t: &str| match IndexMap::parse(t) {
        Err(RuleError::Invalid { span, message }) => (span.start as usize, message),
        other => panic!("expected an error for {t:?}, got {other:?}"),
    };
    let (at, msg) = err("lambda i, j: (i / 4, j)");
    assert_eq!(at, 16, "{msg}");
    assert!(msg.contains("//"), "{msg}");
    let (at, msg) = err("fn i: i");
    assert_eq!(at, 0, "{msg}");
    let (at, msg) = err("lambda i, i: i");
    assert_eq!(at, 10, "{msg}");
    let (_, msg) = err("lambda i: B[i]");
    assert!(msg.contains("no loads"), "{msg}");
    let (_, msg) = err("lambda i: (i, (i, i))");
    assert!(msg.contains("tuple"), "{msg}");
    assert!(IndexMap::parse("lambda i: ((((((((i))))))))").is_ok());
    let deep = format!("lambda i: {}i{}", "(".repeat(500), ")".repeat(500));
    assert!(IndexMap::parse(&deep).is_err());
}

#[test]
fn rule_script_errors_are_located() {
    // A bad lambda inside the attribute: the span points into the script at the bad token.
    let src = scripts::BSR.replace(
        "i % block_size, j % block_size)",
        "i % block_size, j / block_size)",
    );
    let e = FormatRewriteRule::from_script_with(&src, &[("block_size", 4)]).unwrap_err();
    let span = e.span();
    assert_eq!(&src[span.start as usize..span.end as usize], "/", "{e}");
    assert!(e.to_string().contains("idx_map"), "{e}");
    // Missing attribute.
    let src = scripts::BSR.replace("\"axis_map\"", "\"axis_mop\"");
    let e = FormatRewriteRule::from_script(&src).unwrap_err();
    assert!(e.to_string().contains("axis_map"), "{e}");
    // Unknown rule parameter.
    let e = FormatRewriteRule::from_script_with(scripts::BSR, &[("blocksize", 4)]).unwrap_err();
    assert!(e.to_string().contains("blocksize"), "{e}");
    // Syntax errors come back as diagnostics.
    let e = FormatRewriteRule::from_script("@T.prim_func\ndef f(:\n").unwrap_err();
    assert!(matches!(e, RuleError::Parse(_)));
    // Inconsistent rule: the map's arity does not match the axes.
    let src = scripts::BSR.replace("lambda i, j: (i // block_size,", "lambda i, j: (");
    let e = FormatRewriteRule::from_script_with(&src, &[("block_size", 4)]).unwrap_err();
    assert!(e.to_string().contains("idx_map"), "{e}");
    // Axis map naming an axis the format does not have.
    let src = scripts::BSR.replace("\"J\": [\"JO\", \"JI\"]", "\"J\": [\"JO\", \"JX\"]");
    let e = FormatRewriteRule::from_script_with(&src, &[("block_size", 4)]).unwrap_err();
    assert!(e.to_string().contains("JX"), "{e}");
    // An unbound rule parameter keeps its placeholder name, which is not a valid suffix.
    let unbound = FormatRewriteRule::from_script(scripts::BSR);
    assert!(unbound.is_err());
}

#[test]
fn decomposition_errors() {
    let csrmm = module(parse(CSRMM));
    let rule = bsr_rule(4).expect("rule");
    // Duplicate names.
    let e = decompose_format(&csrmm, &[rule.clone(), rule.clone()], true).unwrap_err();
    assert!(matches!(e, DecomposeError::DuplicateRule { .. }), "{e}");
    // A buffer whose axes are not the rule's.
    let mut r = rule.clone();
    r.buffers_to_rewrite = vec!["B".into()];
    let e = decompose_format(&csrmm, &[r], true).unwrap_err();
    assert!(matches!(e, DecomposeError::BufferAxes { .. }), "{e}");
    // Names that already exist.
    let clash = CSRMM.replace("nnz: T.int32,", "nnz: T.int32,\n    m_4: T.int32,");
    let e =
        decompose_format(&module(parse(&clash)), std::slice::from_ref(&rule), true).unwrap_err();
    assert!(
        matches!(e, DecomposeError::NameClash { ref name, .. } if name == "m_4"),
        "{e}"
    );
    // A rewritten buffer that is written.
    let writes = CSRMM.replace(
        "C[i, k] = C[i, k] + A[i, j] * B[j, k]",
        "A[i, j] = A[i, j] * B[j, k]",
    );
    let e =
        decompose_format(&module(parse(&writes)), std::slice::from_ref(&rule), true).unwrap_err();
    assert!(matches!(e, DecomposeError::Iteration { .. }), "{e}");
    assert!(e.to_string().contains("writes"), "{e}");
    assert!(e.span().end > e.span().start);
    // An iteration reading A without iterating J.
    let dense = CSRMM.replace("[I, J, K], \"SRS\"", "[I, J_detach, K], \"SRS\"");
    let e =
        decompose_format(&module(parse(&dense)), std::slice::from_ref(&rule), true).unwrap_err();
    assert!(e.to_string().contains("does not iterate"), "{e}");
    // Functions without the buffer, and functions of other stages, are untouched.
    let other = module(parse(
        &CSRMM
            .replace("A = T.sp.match_buffer", "X = T.sp.match_buffer")
            .replace("A[i, j]", "X[i, j]"),
    ));
    let same = decompose_format(&other, std::slice::from_ref(&rule), true).expect("no-op");
    assert!(func_eq(&same.funcs[0], &other.funcs[0]));
    let lowered = lower(&csrmm, &PipelineOptions::to_stage(Stage::II)).expect("lowers");
    let same = decompose_format(&lowered, &[rule], true).expect("no-op");
    assert!(func_eq(&same.funcs[0], &lowered.funcs[0]));
}

/// An iteration is decomposed only where its parts add up to it (found by the differential
/// fuzzer): each store accumulates a term that is 0 where the rewritten buffer's own element is
/// 0 (padding included), and the buffer is read at the iteration's own coordinates only.
#[test]
fn only_iterations_whose_parts_add_up_are_decomposed() {
    let rule = bsr_rule(4).expect("rule");
    let body = "C[i, k] = C[i, k] + A[i, j] * B[j, k]";
    assert!(CSRMM.contains(body));
    for (changed, why) in [
        (
            "C[i, k] = C[i, k] + A[i, j - 1] * B[j, k]",
            "coordinates other than",
        ),
        (
            "C[i, k] = C[i, k] + A[j, i] * B[j, k]",
            "coordinates other than",
        ),
        (
            "C[i, k] = (C[i, k] + A[i, j] * B[j, k]) * T.float32(2)",
            "must accumulate",
        ),
        (
            "C[i, k] = C[i, k] + (A[i, j] - T.float32(1)) * B[j, k]",
            "must accumulate",
        ),
    ] {
        let m = module(parse(&CSRMM.replace(body, changed)));
        let e = decompose_format(&m, std::slice::from_ref(&rule), true).unwrap_err();
        assert!(
            matches!(e, DecomposeError::Iteration { .. }),
            "{changed}: {e}"
        );
        assert!(e.to_string().contains(why), "{changed}: {e}");
    }
    // Forms whose parts do add up.
    for fine in [
        "C[i, k] = C[i, k] + -(A[i, j] * B[j, k])",
        "C[i, k] = B[j, k] * A[i, j] * T.float32(2) + C[i, k]",
        "C[i, k] = C[i, k] - T.Cast(\"float32\", A[i, j]) * B[j, k]",
    ] {
        let m = module(parse(&CSRMM.replace(body, fine)));
        decompose_format(&m, std::slice::from_ref(&rule), true)
            .unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
}
