//! Shared helpers of the schedule tests: catalog kernels at each stage, running functions on
//! generated data, and comparing outputs.
#![allow(dead_code)]

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_ir::{IRModule, PrimFunc, Stage};
use sparsetir_ops::data::{random_args, Case, Pattern, Shape};
use sparsetir_transform::pipeline::{lower, PipelineOptions};

/// Catalog kernel `name` lowered to `stage`.
pub fn kernel(name: &str, stage: Stage) -> PrimFunc {
    let f = sparsetir_ops::load(name).expect("catalog kernel loads");
    if stage == Stage::I {
        return f;
    }
    lower_func(f, stage)
}

/// Catalog kernel `name` with each scalar parameter of `params` bound to its value at stage I
/// (see [`specialize`]), then lowered to `stage`. With `feat_size` constant, a reduction over
/// the feature axis cannot be empty, so lowering keeps its `T.init()` in the reduction block.
pub fn kernel_specialized(name: &str, stage: Stage, params: &[(&str, i64)]) -> PrimFunc {
    let mut f = sparsetir_ops::load(name).expect("catalog kernel loads");
    for (param, value) in params {
        f = specialize(f, param, *value);
    }
    if stage == Stage::I {
        return f;
    }
    lower_func(f, stage)
}

/// csrmm at stage III in the RFC form, built from the lowered kernel: the `csrmm1_init` nest is
/// dropped and its store becomes `csrmm1`'s `T.init()` (`C[vi, vk] = 0` at the first nonzero of
/// each row). An empty row never runs that init and keeps what `C` held, so this is a block
/// with an in-block init over a possibly-empty fiber, which lowering no longer produces (SPEC
/// §2.3). The random cases start `C` at zero, so it still matches the stage-I reference.
pub fn csrmm_rfc_form() -> PrimFunc {
    use sparsetir_ir::Stmt;
    use sparsetir_schedule::ir_util::{find_block, find_block_mut};
    let mut f = kernel("csrmm", Stage::III);
    let init_value = match &find_block(&f.body, "csrmm1_init").expect("init nest").body {
        Stmt::Store(st) => st.value.clone(),
        other => panic!("init body {other:?}"),
    };
    let b0 = find_block_mut(&mut f.body, "csrmm0").expect("csrmm0");
    let items = match std::mem::replace(&mut b0.body, Stmt::empty()) {
        Stmt::Seq(items) => items,
        other => panic!("csrmm0 body {other:?}"),
    };
    assert_eq!(items.len(), 2, "init nest, then the update nest");
    b0.body = items.into_iter().nth(1).unwrap();
    let b1 = find_block_mut(&mut f.body, "csrmm1").expect("csrmm1");
    let Stmt::Store(st) = &b1.body else {
        panic!("csrmm1 body")
    };
    let mut init = st.clone();
    init.value = init_value;
    b1.init = Some(Stmt::Store(init));
    sparsetir_ir::verify_func(&f).expect("RFC-form csrmm verifies");
    f
}

/// Lowers a function to `stage`.
pub fn lower_func(f: PrimFunc, stage: Stage) -> PrimFunc {
    let module = IRModule { funcs: vec![f] };
    let opts = PipelineOptions {
        check_invalid_binary_search: true,
        ..PipelineOptions::to_stage(stage)
    };
    let out = lower(&module, &opts).expect("lowers");
    out.funcs.into_iter().next().expect("one function")
}

/// The one function of script `src`, lowered to `stage` (a parse error panics with the source).
pub fn lower_script(src: &str, stage: Stage) -> PrimFunc {
    let module = sparsetir_syntax::parse_module(src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    lower_func(
        module.funcs.into_iter().next().expect("one function"),
        stage,
    )
}

/// The loops around block `block`, outermost first.
pub fn loops_of(
    sch: &mut sparsetir_schedule::Schedule,
    block: &str,
) -> Vec<sparsetir_schedule::LoopRV> {
    let b = sch.get_block(block).unwrap();
    sch.get_loops(b).unwrap()
}

/// A small random case of catalog kernel `name` (with empty rows).
pub fn case(name: &str, seed: u64) -> Case {
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 7, 9)
        .with_feat(5)
        .with_density(0.4);
    random_args(name, &shape, seed).expect("case generates")
}

/// Runs `f` (any stage) on a copy of `case` and returns the output arrays as f64.
pub fn run(f: &PrimFunc, case: &Case) -> Vec<(String, Vec<f64>)> {
    let mut args: HashMap<String, ArgValue> = case.args.clone();
    if f.stage() == Stage::I {
        sparsetir_eval::eval_func(f, &mut args).expect("stage I runs");
    } else {
        sparsetir_eval::run_func(f, &mut args).expect("stage II/III runs");
    }
    let mut out = Vec::new();
    for name in &case.outputs {
        match args.get(name) {
            Some(ArgValue::Array(t)) => out.push((name.clone(), t.to_f64_vec())),
            _ => panic!("output {name} missing"),
        }
    }
    out
}

/// Asserts two runs agree up to float rounding.
pub fn assert_close(a: &[(String, Vec<f64>)], b: &[(String, Vec<f64>)]) {
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(va.len(), vb.len(), "output {na} length");
        for (i, (x, y)) in va.iter().zip(vb).enumerate() {
            let tol = 1e-4 * (1.0 + x.abs().max(y.abs()));
            assert!((x - y).abs() <= tol, "output {na}[{i}]: {x} vs {y}");
        }
    }
}

/// Binds scalar parameter `param` to `value` in a stage-I function (axes, buffers and body), so
/// that loops get constant extents after lowering. The parameter itself stays.
pub fn specialize(mut f: PrimFunc, param: &str, value: i64) -> PrimFunc {
    use sparsetir_ir::{BufferShape, Expr};
    use sparsetir_schedule::ir_util::{subst_expr, subst_stmt};
    let v = f.param(param).expect("parameter exists");
    let mut map = std::collections::HashMap::new();
    map.insert(v, Expr::int(value));
    let handles: Vec<_> = f.axes.handles().collect();
    for h in handles {
        let a = &mut f.axes[h];
        subst_expr(&mut a.length, &map);
        if let Some(e) = &mut a.nnz {
            subst_expr(e, &map);
        }
        if let Some(e) = &mut a.nnz_cols {
            subst_expr(e, &map);
        }
    }
    let bufs: Vec<_> = f.buffers.handles().collect();
    for h in bufs {
        if let BufferShape::Dense(d) = &mut f.buffers[h].shape {
            d.iter_mut().for_each(|e| subst_expr(e, &map));
        }
    }
    subst_stmt(&mut f.body, &map);
    f
}

/// Asserts that the schedule's printed trace parses, prints the same, and replays on
/// `original` to a structurally equal function.
pub fn assert_replays(sch: &sparsetir_schedule::Schedule, original: &PrimFunc) {
    let text = sch.trace().to_text();
    let t = sparsetir_schedule::Trace::parse(&text).expect("trace parses");
    assert_eq!(t.to_text(), text);
    let replayed = sparsetir_schedule::apply_schedule_text(original.clone(), &text)
        .unwrap_or_else(|e| panic!("replay fails: {e}\n{text}"));
    assert!(
        sparsetir_ir::equal::func_eq(replayed.func(), sch.func()),
        "replayed function differs:\n{}\nvs\n{}",
        sparsetir_ir::printer::print_func(replayed.func()),
        sparsetir_ir::printer::print_func(sch.func())
    );
}

/// Asserts `f` computes the same as the stage-I reference of catalog kernel `name` on a few
/// random cases.
pub fn assert_same_as_reference(name: &str, f: &PrimFunc) {
    let reference = sparsetir_ops::load(name).expect("loads");
    for seed in 0..3 {
        let c = case(name, seed);
        assert_close(&run(f, &c), &run(&reference, &c));
    }
}

/// Asserts `a` and `b` compute the same on a few random cases of catalog kernel `name`.
pub fn assert_same(name: &str, a: &PrimFunc, b: &PrimFunc) {
    for seed in 0..3 {
        let c = case(name, seed);
        assert_close(&run(a, &c), &run(b, &c));
    }
}

/// The printed function.
pub fn print(f: &PrimFunc) -> String {
    sparsetir_ir::printer::print_func(f)
}

/// A small deterministic generator (xorshift), so the tests need no extra dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// In `[0, n)`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// In `[lo, hi]`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

/// A grid whose iteration `(i, j)` (`i < 6`, `j < 5`, declared `"SS"`) writes `Y[i + 1, j]`
/// from `Y[i, {read_j}]`: with `j + 1` each element waits for the one up and to the right (a
/// wavefront), which `j, i` would run after it; with `j` it waits for the one straight up,
/// which stays before it in any order.
pub fn grid_script(read_j: &str) -> String {
    format!(
        r#"@T.prim_func
def f(x: T.handle, y: T.handle) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed(6)
    J = T.sp.dense_fixed(5)
    I1 = T.sp.dense_fixed(7)
    J1 = T.sp.dense_fixed(6)
    X = T.sp.match_buffer(x, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I1, J1), "float32")
    with T.sp.iteration([I, J], "SS", "grid") as [i, j]:
        Y[i + 1, j] = Y[i, {read_j}] * 0.5 + X[i, j]
"#
    )
}

/// The grid's `X` (6 x 5) and `Y` (7 x 6): small integers, so that every result is exact.
pub fn grid_data() -> (Vec<f64>, Vec<f64>) {
    let x = (0..30).map(|v| (v % 7) as f64 - 3.0).collect();
    let y = (0..42).map(|v| (v % 5) as f64).collect();
    (x, y)
}

/// `Y` after running the grid function `f` (any stage) on [`grid_data`].
pub fn grid_y(f: &PrimFunc) -> Vec<f64> {
    use sparsetir_formats::Tensor;
    let (x, y) = grid_data();
    let mut args = HashMap::new();
    let array = |v: &[f64]| ArgValue::Array(Tensor::from_f64(sparsetir_ir::DType::F32, v).unwrap());
    args.insert("x".to_string(), array(&x));
    args.insert("y".to_string(), array(&y));
    if f.stage() == Stage::I {
        sparsetir_eval::eval_func(f, &mut args).expect("stage I runs");
    } else {
        sparsetir_eval::run_func(f, &mut args).expect("stage II/III runs");
    }
    match &args["y"] {
        ArgValue::Array(t) => t.to_f64_vec(),
        _ => unreachable!(),
    }
}
