//! Launch-time validation on other axis kinds and data-dependent indexing (no C compiler
//! needed): valid random catalog data passes; each targeted corruption is refused by name.

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ops::data::{random_args, Pattern, Shape};
use sparsetir_runtime::{validate_args, RunError};

fn case(kernel: &str) -> (sparsetir_ir::PrimFunc, HashMap<String, ArgValue>) {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let shape = Shape::new(Pattern::Random { empty_rows: false }, 6, 8)
        .with_density(0.5)
        .with_feat(4)
        .with_block(2)
        .with_depth(3);
    let args = random_args(kernel, &shape, 7).expect("data").args;
    validate_args(&f, &args).expect("valid random data passes");
    (f, args)
}

fn ints(args: &HashMap<String, ArgValue>, name: &str) -> Vec<i64> {
    match args.get(name) {
        Some(ArgValue::Array(t)) => t.to_i64_vec(),
        _ => panic!("no array `{name}`"),
    }
}

fn set_ints(args: &mut HashMap<String, ArgValue>, name: &str, v: &[i64]) {
    let dt = match args.get(name) {
        Some(ArgValue::Array(t)) => t.dtype(),
        _ => panic!("no array `{name}`"),
    };
    args.insert(
        name.into(),
        ArgValue::Array(Tensor::from_i64(dt, v).expect("tensor")),
    );
}

#[test]
fn every_catalog_kernel_accepts_its_random_data() {
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).expect("kernel");
        for pattern in [
            Pattern::Random { empty_rows: true },
            Pattern::FullRows,
            Pattern::Empty,
            Pattern::OneByOne,
        ] {
            let shape = Shape::new(pattern, 5, 8).with_feat(3).with_density(0.4);
            let Ok(c) = random_args(k.name, &shape, 1) else {
                continue;
            };
            if let Err(e) = validate_args(&f, &c.args) {
                panic!("{} {pattern:?}: valid data refused: {e}", k.name);
            }
        }
    }
}

#[test]
fn ell_indices_unsorted_inside_a_row() {
    let (f, mut args) = case("ellmm");
    let mut idx = ints(&args, "indices");
    let ax = f.axis_by_name("J").expect("J");
    let nnz_cols = match &f.axes[ax].nnz_cols {
        Some(sparsetir_ir::Expr::Var(v)) => match args.get(&f.vars[*v].name) {
            Some(ArgValue::Int(c)) => *c as usize,
            _ => panic!("nnz_cols"),
        },
        Some(e) => e.as_int().expect("constant") as usize,
        None => panic!("compressed_fixed without nnz_cols"),
    };
    assert!(nnz_cols >= 2, "the case needs two columns per row");
    idx.swap(0, 1);
    set_ints(&mut args, "indices", &idx);
    let err = validate_args(&f, &args).expect_err("refused");
    assert!(
        matches!(&err, RunError::Indices { axis, message, .. } if axis == "J" && message.contains("parent position 0")),
        "{err:?}"
    );
    // Too few entries for parent count × nnz_cols.
    idx.swap(0, 1);
    idx.pop();
    set_ints(&mut args, "indices", &idx);
    let err = validate_args(&f, &args).expect_err("refused");
    assert!(
        matches!(&err, RunError::Indices { message, .. } if message.contains("nnz_cols")),
        "{err:?}"
    );
}

#[test]
fn ragged_row_longer_than_the_axis() {
    // segment_* iterate J = dense_varied(I, (100, nnz)): a row of 101 elements is refused.
    let (f, mut args) = case("segment_sum");
    let m = ints(&args, "indptr").len() - 1;
    let mut indptr = vec![0i64; m + 1];
    for (q, slot) in indptr.iter_mut().enumerate().skip(1) {
        *slot = if q == 1 { 101 } else { 101 + (q as i64 - 1) };
    }
    let nnz = indptr[m];
    set_ints(&mut args, "indptr", &indptr);
    args.insert("nnz".into(), ArgValue::Int(nnz));
    let err = validate_args(&f, &args).expect_err("refused");
    assert!(
        matches!(&err, RunError::Indptr { message, .. } if message.contains("101 elements")),
        "{err:?}"
    );
}

#[test]
fn edge_types_outside_the_declared_domain() {
    // rgcn_homo reads W[E[i, j], fo, fi] under T.assume_buffer_domain(E, (0, num_rels)).
    let (f, mut args) = case("rgcn_homo");
    let mut e = ints(&args, "etype");
    let rels = match args.get("num_rels") {
        Some(ArgValue::Int(r)) => *r,
        _ => panic!("num_rels"),
    };
    e[0] = rels;
    set_ints(&mut args, "etype", &e);
    let err = validate_args(&f, &args).expect_err("refused");
    assert!(
        matches!(&err, RunError::Domain { buffer, message } if buffer == "E" && message.contains("[0]")),
        "{err:?}"
    );
    e[0] = -1;
    set_ints(&mut args, "etype", &e);
    assert!(matches!(
        validate_args(&f, &args),
        Err(RunError::Domain { .. })
    ));
}

#[test]
fn attached_axis_indexed_beyond_its_indptr() {
    // hyper_gnn attaches I_T (indptr over the n_edges hyper-edges of E) under J, whose
    // coordinates are hyper-edge ids. With J one longer than E, an id equal to n_edges is a
    // valid coordinate of J but would read past `indptr_t`.
    let (_, mut args) = case("hyper_gnn");
    let src = sparsetir_ops::get("hyper_gnn")
        .expect("hyper_gnn")
        .source
        .replace(
            "J = T.sp.compressed_varied(I, (n_edges, nnz)",
            "J = T.sp.compressed_varied(I, (n_edges + 1, nnz)",
        );
    assert!(
        src.contains("n_edges + 1"),
        "the script changed: update this test"
    );
    let f = sparsetir_syntax::parse_module(&src)
        .expect("parses")
        .funcs
        .remove(0);
    validate_args(&f, &args).expect("ids below n_edges pass");
    let n_edges = match args.get("n_edges") {
        Some(ArgValue::Int(n)) => *n,
        _ => panic!("n_edges"),
    };
    // The last stored id of the last non-empty row (ids grow inside a row) becomes n_edges.
    let mut idx = ints(&args, "indices");
    let last = idx.len() - 1;
    idx[last] = n_edges;
    set_ints(&mut args, "indices", &idx);
    let err = validate_args(&f, &args).expect_err("refused");
    assert!(
        matches!(&err, RunError::Size { subject, message } if subject == "axis `I_T`" && message.contains("`J`")),
        "{err:?}"
    );
}

#[test]
fn scalar_and_kind_errors() {
    let (f, mut args) = case("spmv");
    args.insert("indptr".into(), ArgValue::Int(3));
    assert!(matches!(
        validate_args(&f, &args),
        Err(RunError::ArgKind { name, .. }) if name == "indptr"
    ));
    let (f, mut args) = case("spmv");
    args.remove("indices");
    assert_eq!(
        validate_args(&f, &args),
        Err(RunError::MissingArg {
            name: "indices".into()
        })
    );
    let (f, mut args) = case("spmv");
    let floats = Tensor::from_f64(sparsetir_ir::DType::F32, &[0.0; 3]).expect("tensor");
    args.insert("indptr".into(), ArgValue::Array(floats));
    assert!(matches!(
        validate_args(&f, &args),
        Err(RunError::Indptr { message, .. }) if message.contains("integers")
    ));
}

/// An array of `t`'s dtype and length holding garbage: alternating huge and negative integers,
/// or NaN.
fn garbage(t: &Tensor) -> Tensor {
    let n = t.len();
    if t.dtype().is_float() {
        Tensor::from_f64(t.dtype(), &vec![f64::NAN; n]).expect("tensor")
    } else {
        // Unsigned types get a value above any extent here instead of a negative one.
        let low = if t.dtype().to_string().starts_with('u') {
            100
        } else {
            -3
        };
        let v: Vec<i64> = (0..n)
            .map(|i| if i % 2 == 0 { 1 << 14 } else { low })
            .collect();
        Tensor::from_i64(t.dtype(), &v).expect("tensor")
    }
}

/// `validate_reading` names every array whose elements decide the outcome (what frozen arrays'
/// memo relies on): for every catalog kernel, with its default CPU schedule's recorded
/// `assume_distinct`/`assume_monotone` where it has one, garbage in any array it does not name
/// leaves valid data valid; and the structure arrays it reads are among those named.
#[test]
fn arrays_validation_does_not_name_are_only_measured() {
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 6, 8)
        .with_density(0.5)
        .with_feat(4)
        .with_block(2)
        .with_depth(3);
    let mut checked = 0;
    for k in sparsetir_ops::catalog()
        .iter()
        .chain(sparsetir_ops::sparse_output())
    {
        let f = sparsetir_ops::load(k.name).expect("catalog kernel");
        let mut funcs = vec![("no schedule", f.clone())];
        if let Some(s) = sparsetir_ops::cpu_schedule(k.name) {
            let lowered = sparsetir_runtime::build::schedule_and_lower(&f, Some(s), &[])
                .unwrap_or_else(|e| panic!("{}: {e}", k.name));
            funcs.push(("default schedule", lowered.stage1));
        }
        let Ok(case) = random_args(k.name, &shape, 3) else {
            continue;
        };
        for (how, f) in funcs {
            let what = format!("{} ({how})", k.name);
            let launch = sparsetir_runtime::LaunchArgs::of_values(&case.args);
            let read = sparsetir_runtime::validate_reading(&f, &launch)
                .unwrap_or_else(|e| panic!("{what}: valid data refused: {e}"));
            for ax in f.axes.iter().map(|(_, a)| a).filter(|a| !a.assembled) {
                for p in [ax.indptr, ax.indices].into_iter().flatten() {
                    let name = &f.vars[p].name;
                    assert!(read.contains(name), "{what}: `{name}` read but not named");
                }
            }
            let mut args = case.args.clone();
            for (name, v) in case.args.iter() {
                if let ArgValue::Array(t) = v {
                    if !read.contains(name) {
                        args.insert(name.clone(), ArgValue::Array(garbage(t)));
                    }
                }
            }
            let launch = sparsetir_runtime::LaunchArgs::of_values(&args);
            let again = sparsetir_runtime::validate_reading(&f, &launch)
                .unwrap_or_else(|e| panic!("{what}: garbage outside {read:?} refused: {e}"));
            assert_eq!(again, read, "{what}");
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} kernels checked");
}
