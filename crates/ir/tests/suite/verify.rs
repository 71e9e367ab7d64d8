//! Tests of the per-stage verifier: each rule accepted and rejected, with the message naming the
//! offending item and a span pointing at its declaration or statement.

use crate::common;

use common::*;
use sparsetir_ir::*;

fn base() -> PrimFunc {
    csrmm(&CsrmmOpts::default())
}

/// Asserts `f` is rejected with an error whose message contains every needle.
fn rejects(f: &PrimFunc, needles: &[&str]) -> VerifyError {
    let errs = verify_func(f).expect_err("expected verifier errors");
    let found = errs
        .iter()
        .find(|e| needles.iter().all(|n| e.message.contains(n)));
    match found {
        Some(e) => e.clone(),
        None => panic!("no error mentions {needles:?}; got {errs:#?}"),
    }
}

fn accepts(f: &PrimFunc) {
    if let Err(errs) = verify_func(f) {
        panic!("expected no errors, got {errs:#?}");
    }
}

fn iteration_mut(f: &mut PrimFunc) -> &mut SparseIteration {
    match &mut f.body {
        Stmt::SparseIteration(s) => s,
        other => panic!("not an iteration: {other:?}"),
    }
}

/// The block of the `rowsum` fixture.
fn block_mut(f: &mut PrimFunc) -> &mut Block {
    let Stmt::For(outer) = &mut f.body else {
        panic!()
    };
    let Stmt::For(inner) = &mut outer.body else {
        panic!()
    };
    let Stmt::Block(b) = &mut inner.body else {
        panic!()
    };
    b
}

fn main_store_mut(f: &mut PrimFunc) -> &mut Store {
    match &mut iteration_mut(f).body {
        Stmt::Store(s) => s,
        other => panic!("not a store: {other:?}"),
    }
}

#[test]
fn fixtures_are_valid() {
    accepts(&base());
    accepts(&csrmm(&CsrmmOpts {
        shuffle: true,
        ..Default::default()
    }));
    accepts(&rowsum(&RowSumOpts::default()));
    let mut stage2 = rowsum(&RowSumOpts::default());
    stage2.set_stage(Stage::II);
    accepts(&stage2);
}

#[test]
fn stage_attribute_values() {
    let mut f = base();
    f.attrs.set(STAGE_ATTR, AttrValue::Int(5));
    rejects(&f, &["sparse_tir_level"]);
    let mut f = base();
    f.attrs.set(STAGE_ATTR, AttrValue::Str("2".into()));
    rejects(&f, &["sparse_tir_level"]);
}

#[test]
fn handles_out_of_range() {
    let mut f = base();
    main_store_mut(&mut f).indices[0] = Expr::Var(VarId::from_index(999));
    rejects(&f, &["variable handle #999", "out of range"]);
    let mut f = base();
    main_store_mut(&mut f).buffer = BufferId::from_index(77);
    rejects(&f, &["buffer handle #77"]);
    let mut f = base();
    iteration_mut(&mut f).axes[2] = IterAxis::Axis(AxisId::from_index(50));
    rejects(&f, &["axis handle #50"]);
}

#[test]
fn variables_must_be_in_scope() {
    // iteration variable used after its iteration
    let mut f = base();
    let it = f.body.clone();
    let k_var = iteration_mut(&mut f).vars[2];
    let c = f.buffer_by_name("C").unwrap();
    let stray = Stmt::Store(Store {
        buffer: c,
        indices: vec![Expr::int(0), Expr::Var(k_var)],
        value: Expr::f32(1.0),
        span: Span::new(900, 910),
    });
    f.body = Stmt::Seq(vec![it, stray]);
    let e = rejects(&f, &["`k`", "outside its scope"]);
    assert_eq!(e.span, Span::new(900, 910));

    // block iterator used outside its block (in the inner loop's extent)
    let mut g = rowsum(&RowSumOpts::default());
    let vi = block_mut(&mut g).iters[0].var;
    let Stmt::For(outer) = &mut g.body else {
        panic!()
    };
    let Stmt::For(inner) = &mut outer.body else {
        panic!()
    };
    inner.extent = Expr::Var(vi);
    rejects(&g, &["`vi`", "outside its scope"]);

    // a let variable is visible in its body only
    let mut f = base();
    let t = f.add_var("t", DType::F32);
    let store = main_store_mut(&mut f).clone();
    let mut use_t = store.clone();
    use_t.value = Expr::Var(t);
    let let_stmt = Stmt::Let(Box::new(LetStmt {
        var: t,
        value: Expr::f32(2.0),
        body: Stmt::Store(use_t.clone()),
        span: Span::new(1, 2),
    }));
    iteration_mut(&mut f).body = let_stmt.clone();
    accepts(&f);
    iteration_mut(&mut f).body = Stmt::Seq(vec![let_stmt, Stmt::Store(use_t)]);
    rejects(&f, &["`t`", "outside its scope"]);
}

#[test]
fn buffer_access_arity_and_index_type() {
    let mut f = base();
    main_store_mut(&mut f).indices.pop();
    rejects(&f, &["`C`", "2 dimension", "1 index"]);
    let mut f = base();
    main_store_mut(&mut f).indices[1] = Expr::f32(1.0);
    rejects(&f, &["index of buffer `C`", "float32"]);
    // a load with three indices
    let mut f = base();
    let a = f.buffer_by_name("A").unwrap();
    main_store_mut(&mut f).value = Expr::load(a, vec![Expr::int(0), Expr::int(0), Expr::int(0)]);
    rejects(&f, &["`A`", "3 index"]);
}

#[test]
fn store_value_types() {
    let mut f = base();
    main_store_mut(&mut f).value = Expr::Bool(true);
    rejects(&f, &["bool", "`C`"]);
    let mut f = base();
    main_store_mut(&mut f).value = Expr::Int(3, DType::I64);
    accepts(&f); // numeric to numeric
    let mut f = base();
    let a = f.param("a").unwrap();
    main_store_mut(&mut f).value = Expr::Var(a);
    rejects(&f, &["handle", "`C`"]);
}

#[test]
fn handles_never_in_arithmetic() {
    let mut f = base();
    let a = f.param("a").unwrap();
    let st = main_store_mut(&mut f);
    st.value = Expr::add(
        st.value.clone(),
        Expr::Cast(DType::F32, Box::new(Expr::Var(a))),
    );
    rejects(&f, &["handle variable `a`"]);
    let mut f = base();
    let b = f.param("b").unwrap();
    main_store_mut(&mut f).indices[0] = Expr::add(Expr::Var(b), Expr::int(1));
    rejects(&f, &["handle variable `b`"]);
}

#[test]
fn axis_parent_rules() {
    let mut f = base();
    let i = f.axis_by_name("I").unwrap();
    let k = f.axis_by_name("K").unwrap();
    f.axes[k].parent = Some(i);
    let e = rejects(&f, &["dense_fixed axis `K`", "parent"]);
    assert_eq!(e.span, f.axes[k].span);

    let mut f = base();
    let j = f.axis_by_name("J").unwrap();
    f.axes[j].parent = None;
    rejects(&f, &["compressed_varied axis `J`", "parent"]);

    let mut f = base();
    let jd = f.axis_by_name("J_detach").unwrap();
    f.axes[j].parent = Some(jd); // declared after J
    rejects(&f, &["`J`", "`J_detach`", "declared before"]);
}

#[test]
fn axis_structure_arrays_and_sizes() {
    let mut f = base();
    let j = f.axis_by_name("J").unwrap();
    f.axes[j].indptr = None;
    rejects(&f, &["`J`", "indptr"]);

    let mut f = base();
    f.axes[j].indices = None;
    rejects(&f, &["`J`", "indices"]);

    let mut f = base();
    let m = f.param("m").unwrap();
    f.axes[j].indptr = Some(m);
    rejects(&f, &["indptr of axis `J`", "`m`", "T.handle parameter"]);

    let mut f = base();
    let stray = f.add_var("h", DType::Handle);
    f.axes[j].indices = Some(stray);
    rejects(&f, &["indices of axis `J`", "`h`"]);

    let mut f = base();
    f.axes[j].kind = AxisKind::CompressedFixed;
    rejects(&f, &["compressed_fixed axis `J`", "nnz_cols"]);
    f.axes[j].nnz_cols = Some(Expr::int(4));
    accepts(&f);

    let mut f = base();
    f.axes[j].kind = AxisKind::DenseVaried;
    f.axes[j].indices = None;
    accepts(&f);

    let mut f = base();
    let loose = f.add_var("q", DType::I32);
    f.axes[j].length = Expr::Var(loose);
    rejects(&f, &["length of axis `J`", "`q`", "not a parameter"]);

    let mut f = base();
    f.axes[j].nnz = Some(Expr::f32(3.0));
    rejects(&f, &["nnz of axis `J`", "integer"]);

    let mut f = base();
    let a = f.buffer_by_name("A").unwrap();
    f.axes[j].length = Expr::load(a, vec![Expr::int(0), Expr::int(0)]);
    rejects(&f, &["length of axis `J`", "load"]);

    let mut f = base();
    let n = f.param("n").unwrap();
    f.axes[j].length = Expr::mul(Expr::Var(n), Expr::int(2));
    accepts(&f);
}

#[test]
fn sparse_buffer_rules() {
    let mut f = base();
    let a = f.buffer_by_name("A").unwrap();
    let i = f.axis_by_name("I").unwrap();
    let j = f.axis_by_name("J").unwrap();
    f.buffers[a].shape = BufferShape::Sparse(vec![j, i]);
    let e = rejects(&f, &["buffer `A`", "`J`'s parent `I`"]);
    assert_eq!(e.span, f.buffers[a].span);

    let mut f = base();
    f.buffers[a].shape = BufferShape::Sparse(vec![i, i]);
    rejects(&f, &["buffer `A`", "axis `I` twice"]);

    let mut f = base();
    let m = f.param("m").unwrap();
    f.buffers[a].decl = BufferDecl::Match { data: m };
    rejects(&f, &["data of buffer `A`", "`m`", "T.handle"]);
}

#[test]
fn stage_one_statement_kinds() {
    let mut f = base();
    let body = iteration_mut(&mut f).body.clone();
    let lv = f.add_var("l", DType::I32);
    iteration_mut(&mut f).body = Stmt::For(Box::new(For {
        var: lv,
        min: Expr::int(0),
        extent: Expr::int(2),
        kind: ForKind::Serial,
        thread: None,
        annotations: Attrs::new(),
        body,
        span: Span::new(3, 4),
    }));
    rejects(&f, &["stage I", "loop", "`l`"]);

    let mut f = base();
    let tmp = f.buffers.append(Buffer {
        name: "tmp".into(),
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(vec![Expr::int(4)]),
        dtype: DType::F32,
        scope: "local".into(),
        strides: vec![],
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    });
    let body = iteration_mut(&mut f).body.clone();
    iteration_mut(&mut f).body = Stmt::Seq(vec![Stmt::Allocate(tmp), body]);
    rejects(&f, &["stage I", "T.allocate", "`tmp`"]);

    let mut g = rowsum(&RowSumOpts::default());
    g.set_stage(Stage::I);
    rejects(&g, &["stage I", "block `rowsum`"]);
}

#[test]
fn iteration_arity() {
    let mut f = base();
    iteration_mut(&mut f).kinds.pop();
    rejects(&f, &["`csrmm`", "3 iterator", "\"SR\""]);
    let mut f = base();
    iteration_mut(&mut f).vars.pop();
    rejects(&f, &["`csrmm`", "2 variable"]);
}

#[test]
fn parent_must_be_iterated() {
    let mut f = base();
    let j = f.axis_by_name("J").unwrap();
    let k = f.axis_by_name("K").unwrap();
    let it = iteration_mut(&mut f);
    it.axes = vec![IterAxis::Axis(j), IterAxis::Axis(k)];
    it.kinds.pop();
    it.vars.remove(0);
    let errs = verify_func(&f).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.message.contains("axis J's parent I is not iterated")),
        "{errs:#?}"
    );

    // order matters within one iteration: [J, I, K] is rejected, [I, J, K] accepted
    let mut f = base();
    let i = f.axis_by_name("I").unwrap();
    iteration_mut(&mut f).axes = vec![IterAxis::Axis(j), IterAxis::Axis(i), IterAxis::Axis(k)];
    rejects(&f, &["axis J's parent I is not iterated"]);
}

#[test]
fn nested_iterations_provide_parents() {
    // outer [I] "S", inner [J, K] "RS": J's parent is iterated by the enclosing iteration
    let mut f = base();
    let i = f.axis_by_name("I").unwrap();
    let j = f.axis_by_name("J").unwrap();
    let k = f.axis_by_name("K").unwrap();
    let it = iteration_mut(&mut f).clone();
    let inner = SparseIteration {
        name: "inner".into(),
        axes: vec![IterAxis::Axis(j), IterAxis::Axis(k)],
        kinds: vec![IterKind::Reduce, IterKind::Spatial],
        vars: vec![it.vars[1], it.vars[2]],
        init: None,
        body: it.body.clone(),
        annotations: Attrs::new(),
        span: Span::new(7, 8),
    };
    let outer = SparseIteration {
        name: "outer".into(),
        axes: vec![IterAxis::Axis(i)],
        kinds: vec![IterKind::Spatial],
        vars: vec![it.vars[0]],
        init: None,
        body: Stmt::SparseIteration(Box::new(inner.clone())),
        annotations: Attrs::new(),
        span: Span::new(5, 6),
    };
    f.body = Stmt::SparseIteration(Box::new(outer.clone()));
    accepts(&f);
    // the same name twice is rejected
    let mut dup = outer.clone();
    dup.body = Stmt::SparseIteration(Box::new(SparseIteration {
        name: "outer".into(),
        ..inner
    }));
    f.body = Stmt::SparseIteration(Box::new(dup));
    rejects(&f, &["name `outer`", "more than once"]);
}

#[test]
fn fused_axes_form_a_chain() {
    let mut f = base();
    let i = f.axis_by_name("I").unwrap();
    let j = f.axis_by_name("J").unwrap();
    let k = f.axis_by_name("K").unwrap();
    iteration_mut(&mut f).axes = vec![IterAxis::Fuse(vec![i, j]), IterAxis::Axis(k)];
    accepts(&f);
    // a fused chain does not need the parent of its head iterated, and J via fuse counts as
    // iterated for later entries
    iteration_mut(&mut f).axes = vec![IterAxis::Fuse(vec![i, k]), IterAxis::Axis(j)];
    rejects(&f, &["fused axes I, K", "chain"]);
}

#[test]
fn attach_parent_must_be_iterated() {
    let mut f = base();
    let i = f.axis_by_name("I").unwrap();
    let j = f.axis_by_name("J").unwrap();
    let k = f.axis_by_name("K").unwrap();
    // attach J under K: K is iterated first, so fine (without an init: K is the reduction,
    // and the init could not run before it at each element of J, which hangs from K)
    iteration_mut(&mut f).axes = vec![
        IterAxis::Axis(i),
        IterAxis::Axis(k),
        IterAxis::Attach { axis: j, parent: k },
    ];
    iteration_mut(&mut f).init = None;
    accepts(&f);
    iteration_mut(&mut f).axes = vec![
        IterAxis::Axis(i),
        IterAxis::Attach { axis: j, parent: k },
        IterAxis::Axis(k),
    ];
    rejects(&f, &["attach parent K of axis J is not iterated"]);
}

#[test]
fn init_reads_only_spatial_iterators() {
    // csrmm "SRS" stores its init at `C[i, k]`: both spatial. Marking `k` a reduction leaves
    // the init an element it has no point of.
    let mut f = base();
    iteration_mut(&mut f).kinds = vec![IterKind::Spatial, IterKind::Reduce, IterKind::Reduce];
    let e = rejects(
        &f,
        &[
            "T.init() reads reduction iterator `k`",
            "spatial iterators (`i`)",
        ],
    );
    let init_span = iteration_mut(&mut f).init.as_ref().unwrap().span();
    assert_eq!(e.span, init_span, "located at the init's store");
    // Without the init the same kinds are fine.
    iteration_mut(&mut f).init = None;
    accepts(&f);
}

#[test]
fn init_needs_spatial_iterators_outside_the_reductions() {
    // [I, K, attach(J, K)] "SRS": the spatial J hangs from the reduction K.
    let mut f = base();
    let (i, j, k) = (
        f.axis_by_name("I").unwrap(),
        f.axis_by_name("J").unwrap(),
        f.axis_by_name("K").unwrap(),
    );
    iteration_mut(&mut f).axes = vec![
        IterAxis::Axis(i),
        IterAxis::Axis(k),
        IterAxis::Attach { axis: j, parent: k },
    ];
    rejects(
        &f,
        &["spatial iterator `k` walks a fiber of reduction iterator `j`"],
    );
    // (The variables keep their names: `k` is bound to J here, `j` to K.) Without the init
    // J may hang from the reduction.
    iteration_mut(&mut f).init = None;
    accepts(&f);
}

#[test]
fn stage_two_rules() {
    let mut f = base();
    f.set_stage(Stage::II);
    rejects(&f, &["stage II", "sparse iteration `csrmm`"]);
    // sparse buffers are fine at stage II
    let mut g = base();
    g.set_stage(Stage::II);
    g.body = Stmt::empty();
    accepts(&g);
}

#[test]
fn stage_three_rules() {
    let mut f = base();
    f.set_stage(Stage::III);
    rejects(&f, &["stage III", "sparse iteration `csrmm`"]);
    rejects(&f, &["stage III", "sparse axes", "J_detach"]);
    rejects(&f, &["stage III", "sparse buffer `A`"]);
}

#[test]
fn block_binding_rules() {
    let mut g = rowsum(&RowSumOpts::default());
    let b = block_mut(&mut g);
    let vi = b.iters[0].var;
    b.iters[1].binding = Expr::Var(vi);
    // vi is not yet in scope at the binding: out of scope, not a loop variable
    rejects(&g, &["`vi`"]);

    // a let variable around the block used in a binding
    let mut g = rowsum(&RowSumOpts::default());
    let t = g.add_var("t", DType::I32);
    let Stmt::For(outer) = &mut g.body else {
        panic!()
    };
    let Stmt::For(inner) = &mut outer.body else {
        panic!()
    };
    let Stmt::Block(mut blk) = inner.body.clone() else {
        panic!()
    };
    blk.iters[1].binding = Expr::Var(t);
    inner.body = Stmt::Let(Box::new(LetStmt {
        var: t,
        value: Expr::int(0),
        body: Stmt::Block(blk),
        span: Span::new(1, 2),
    }));
    rejects(
        &g,
        &["block `rowsum`", "`vj`", "`t`", "not a loop variable"],
    );

    // params and arithmetic of loop variables are accepted
    let mut g = rowsum(&RowSumOpts::default());
    let n = g.param("n").unwrap();
    let b = block_mut(&mut g);
    let j = b.iters[1].binding.clone();
    b.iters[1].binding = Expr::binary(BinOp::FloorMod, Expr::add(j, Expr::Var(n)), Expr::Var(n));
    accepts(&g);
}

#[test]
fn block_regions_and_init() {
    let mut g = rowsum(&RowSumOpts::default());
    block_mut(&mut g).reads[1].ranges.pop();
    rejects(&g, &["block `rowsum`", "`X`", "1 range", "2 dimension"]);

    let mut g = rowsum(&RowSumOpts::default());
    block_mut(&mut g).iters[1].kind = IterKind::Spatial;
    rejects(&g, &["block `rowsum`", "T.init", "reduce"]);

    // the block's own alloc buffer is visible in its body but not after it
    let mut g = rowsum(&RowSumOpts::default());
    let scratch = g.buffers.append(Buffer {
        name: "scratch".into(),
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(vec![Expr::int(1)]),
        dtype: DType::F32,
        scope: "local".into(),
        strides: vec![],
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    });
    let b = block_mut(&mut g);
    b.alloc_buffers.push(scratch);
    let old = b.body.clone();
    b.body = Stmt::Seq(vec![
        Stmt::Store(Store {
            buffer: scratch,
            indices: vec![Expr::int(0)],
            value: Expr::f32(1.0),
            span: Span::default(),
        }),
        old,
    ]);
    accepts(&g);
    let Stmt::For(outer) = &mut g.body else {
        panic!()
    };
    let loop_body = outer.body.clone();
    outer.body = Stmt::Seq(vec![
        loop_body,
        Stmt::Store(Store {
            buffer: scratch,
            indices: vec![Expr::int(0)],
            value: Expr::f32(1.0),
            span: Span::new(40, 41),
        }),
    ]);
    rejects(&g, &["buffer `scratch`", "outside the scope"]);
}

#[test]
fn allocate_scopes_over_the_rest_of_the_sequence() {
    let mut g = rowsum(&RowSumOpts::default());
    let tmp = g.buffers.append(Buffer {
        name: "tmp".into(),
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(vec![Expr::int(2)]),
        dtype: DType::F32,
        scope: "local".into(),
        strides: vec![],
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    });
    let st = Stmt::Store(Store {
        buffer: tmp,
        indices: vec![Expr::int(1)],
        value: Expr::f32(0.5),
        span: Span::default(),
    });
    let old = g.body.clone();
    g.body = Stmt::Seq(vec![Stmt::Allocate(tmp), st.clone(), old.clone()]);
    accepts(&g);
    g.body = Stmt::Seq(vec![st, Stmt::Allocate(tmp), old]);
    rejects(&g, &["buffer `tmp`", "outside the scope"]);
}

#[test]
fn intrinsic_arity() {
    let mut f = base();
    let st = main_store_mut(&mut f);
    st.value = Expr::Call {
        op: Intrinsic::Exp,
        args: vec![Expr::f32(1.0), Expr::f32(2.0)],
        dtype: DType::F32,
    };
    rejects(&f, &["T.exp", "1 argument", "got 2"]);
}

/// A handle in arithmetic is reported once, at the handle, not again by every operator above it.
#[test]
fn a_handle_in_arithmetic_is_one_error() {
    let mut f = base();
    let handle = f
        .params
        .iter()
        .copied()
        .find(|v| f.vars[*v].dtype == DType::Handle)
        .expect("a handle parameter");
    let store = main_store_mut(&mut f);
    let nested = Expr::add(Expr::Var(handle), Expr::int(1));
    store.value = Expr::mul(
        store.value.clone(),
        Expr::Unary(UnOp::Neg, Box::new(nested)),
    );
    let errs = verify_func(&f).expect_err("a handle in arithmetic");
    let about: Vec<_> = errs
        .iter()
        .filter(|e| e.message.contains("arithmetic"))
        .collect();
    assert_eq!(about.len(), 1, "{errs:#?}");
    assert!(about[0].message.contains("handle variable"), "{errs:#?}");
}

/// Bit counts take an integer and give one.
#[test]
fn bit_counts_are_of_integers() {
    let mut f = base();
    let store = main_store_mut(&mut f);
    let float_arg = Expr::Call {
        op: Intrinsic::Popcount,
        args: vec![store.value.clone()],
        dtype: DType::I32,
    };
    store.value = Expr::Cast(DType::F32, Box::new(float_arg));
    rejects(&f, &["T.popcount takes an integer, got float32"]);
    let mut f = base();
    let store = main_store_mut(&mut f);
    store.value = Expr::Call {
        op: Intrinsic::Ctz,
        args: vec![Expr::int(6)],
        dtype: DType::F32,
    };
    rejects(&f, &["T.ctz gives an integer, not float32"]);
}

/// An integer divisor that is a constant 0 (`i % (2 % 2)`) is refused before anything runs it:
/// the evaluator would stop where it reaches it, and native code would trap.
#[test]
fn a_constant_zero_divisor_is_refused() {
    for op in [BinOp::Div, BinOp::FloorDiv, BinOp::FloorMod] {
        let mut f = base();
        let store = main_store_mut(&mut f);
        let i = store.indices[0].clone();
        let zero = Expr::binary(BinOp::FloorMod, Expr::int(2), Expr::int(2));
        store.indices[0] = Expr::binary(op, i.clone(), zero);
        rejects(&f, &["by zero", "constant 0"]);
        // A nonzero constant divisor is fine.
        let store = main_store_mut(&mut f);
        let one = Expr::binary(BinOp::Add, Expr::int(2), Expr::int(-1));
        store.indices[0] = Expr::binary(op, i, one);
        accepts(&f);
    }
}

/// A loop's variable has the wider of its start's and extent's types, as the parser infers it:
/// an `int32` variable over an `int64` extent would print and read back as `int64`.
#[test]
fn loop_variables_have_their_ranges_type() {
    let mut f = rowsum(&RowSumOpts::default());
    accepts(&f);
    let Stmt::For(outer) = &mut f.body else {
        panic!()
    };
    let v = outer.var;
    outer.extent = Expr::Cast(DType::I64, Box::new(outer.extent.clone()));
    let name = f.vars[v].name.clone();
    rejects(
        &f,
        &[&format!("loop `{name}` is int32"), "its range is int64"],
    );
    // The variable widened too: accepted.
    f.vars[v].dtype = DType::I64;
    let Stmt::For(outer) = &mut f.body else {
        panic!()
    };
    outer.min = Expr::Int(0, DType::I64);
    // (Uses of the variable elsewhere may now mix types; the loop itself is no error.)
    let errs = verify_func(&f).err().unwrap_or_default();
    assert!(
        errs.iter().all(|e| !e.message.contains("its range is")),
        "{errs:#?}"
    );
}
