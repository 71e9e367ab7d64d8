//! Round-trip gaps closed after the core printer/parser landed: `let` statements followed by
//! other statements (scoped `with T.LetStmt(...) as x:` form), `T.allocate` over sparse axes,
//! black-style line breaking at 100 columns, loop/iterator dtypes with `int64` extents and typed
//! zero starts, and close-name notes on undefined names.

use sparsetir_ir::arbitrary::gen_func;
use sparsetir_ir::equal::{func_eq, func_hash};
use sparsetir_ir::printer::{print_func, LINE_WIDTH};
use sparsetir_ir::{
    verify_func, Buffer, BufferDecl, BufferShape, DType, Expr, LetStmt, PrimFunc, Span, Stage,
    Stmt, Store,
};
use sparsetir_syntax::{parse_func, render, Diagnostic};

fn parse_ok(src: &str) -> PrimFunc {
    match parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!(
            "does not parse:\n{}\n--- source ---\n{src}",
            render(&d, "t.py", src)
        ),
    }
}

fn parse_err(src: &str) -> Diagnostic {
    match parse_func(src) {
        Ok(_) => panic!("parsed without error:\n{src}"),
        Err(mut d) => d.remove(0),
    }
}

/// print → parse gives an equal function that verifies, and printing it again gives the same
/// text. Returns the printed text.
fn roundtrip(f: &PrimFunc) -> String {
    let text = print_func(f);
    let g = parse_ok(&text);
    assert!(func_eq(f, &g), "reparsed IR differs\n{text}");
    assert_eq!(func_hash(f), func_hash(&g));
    assert_eq!(print_func(&g), text, "print∘parse is not a fixed point");
    if let Err(e) = verify_func(&g) {
        panic!("reparsed function does not verify: {e:#?}\n{text}");
    }
    text
}

fn trimmed_lines(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).collect()
}

// ------------------------------------------------------------------------------ let statements

fn dense_param_buffer(f: &mut PrimFunc, pname: &str, bname: &str, n: i64, d: DType) -> usize {
    let p = f.add_var(pname, DType::Handle);
    f.params.push(p);
    let b = f.buffers.append(Buffer {
        name: bname.to_string(),
        decl: BufferDecl::Match { data: p },
        shape: BufferShape::Dense(vec![Expr::int(n)]),
        dtype: d,
        scope: "global".to_string(),
        strides: Vec::new(),
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    });
    f.buffer_decls.push(b);
    b.index()
}

fn store(f: &PrimFunc, buf: usize, at: i64, value: Expr) -> Stmt {
    let buffer = f.buffer_decls[buf];
    Stmt::Store(Store {
        buffer,
        indices: vec![Expr::int(at)],
        value,
        span: Span::default(),
    })
}

fn let_stmt(var: sparsetir_ir::VarId, value: Expr, body: Stmt) -> Stmt {
    Stmt::Let(Box::new(LetStmt {
        var,
        value,
        body,
        span: Span::default(),
    }))
}

/// `A[0] = x` under `x = 3`, then `A[1] = 7` outside it; `y: int64 = 5` (an int32 value) over
/// `A[2] = y`, then `A[3] = 1`; finally `z = 2` over the rest of the function.
fn lets_func() -> PrimFunc {
    let mut f = PrimFunc::new("lets");
    f.set_stage(Stage::III);
    let a = dense_param_buffer(&mut f, "a", "A", 4, DType::I64);
    let x = f.add_var("x", DType::I32);
    let y = f.add_var("y", DType::I64);
    let z = f.add_var("z", DType::I32);
    f.body = Stmt::Seq(vec![
        let_stmt(x, Expr::int(3), store(&f, a, 0, Expr::Var(x))),
        store(&f, a, 1, Expr::int(7)),
        let_stmt(y, Expr::int(5), store(&f, a, 2, Expr::Var(y))),
        store(&f, a, 3, Expr::int(1)),
        let_stmt(z, Expr::int(2), store(&f, a, 0, Expr::Var(z))),
    ]);
    f
}

#[test]
fn a_let_followed_by_statements_round_trips_in_scoped_form() {
    let f = lets_func();
    verify_func(&f).expect("hand-built function verifies");
    let text = roundtrip(&f);
    let lines = trimmed_lines(&text);
    assert!(lines.contains(&"with T.LetStmt(3) as x:"), "{text}");
    assert!(
        lines.contains(&"with T.LetStmt(5, \"int64\") as y:"),
        "{text}"
    );
    assert!(lines.contains(&"z: T.int32 = 2"), "{text}");
    // the statement after a scoped let is outside it: one level less indented
    let at = |needle: &str| {
        text.lines()
            .find(|l| l.trim() == needle)
            .map(|l| l.len() - l.trim_start().len())
            .unwrap_or_else(|| panic!("no line `{needle}` in\n{text}"))
    };
    assert_eq!(at("A[0] = x"), at("with T.LetStmt(3) as x:") + 4);
    assert_eq!(at("A[1] = 7"), at("with T.LetStmt(3) as x:"));
    // the parsed structure: five statements, the lets holding exactly one store each
    let g = parse_ok(&text);
    let Stmt::Seq(items) = &g.body else {
        panic!("expected a sequence")
    };
    assert_eq!(items.len(), 5);
    for (i, want) in [(0usize, 0i64), (2, 2), (4, 0)] {
        let Stmt::Let(l) = &items[i] else {
            panic!("item {i} is not a let")
        };
        let Stmt::Store(st) = &l.body else {
            panic!("the body of let {i} is not one store")
        };
        assert_eq!(st.indices, vec![Expr::int(want)]);
    }
    let Stmt::Let(ly) = &items[2] else { panic!() };
    assert_eq!(g.vars[ly.var].dtype, DType::I64);
    assert_eq!(ly.value, Expr::int(5));
}

#[test]
fn let_stmt_spellings() {
    let head = "@T.prim_func\ndef f(a: T.handle):\n    A = T.match_buffer(a, (4,), \"int64\")\n";
    for (with, dtype) in [
        ("with T.LetStmt(5) as y:", DType::I32),
        ("with T.LetStmt(5, \"int64\") as y:", DType::I64),
        ("with T.LetStmt(5, T.int64) as y:", DType::I64),
        (
            "with T.LetStmt(value=5, type_annotation=\"int16\") as y:",
            DType::I16,
        ),
        ("with T.LetStmt(T.int64(5)) as y:", DType::I64),
    ] {
        let src = format!("{head}    {with}\n        A[0] = y\n    A[1] = 1\n");
        let f = parse_ok(&src);
        let Stmt::Seq(items) = &f.body else {
            panic!("{with}: expected two statements")
        };
        assert_eq!(items.len(), 2, "{with}");
        let Stmt::Let(l) = &items[0] else {
            panic!("{with}: expected a let")
        };
        assert_eq!(f.vars[l.var].dtype, dtype, "{with}");
        assert!(matches!(l.body, Stmt::Store(_)), "{with}");
        assert!(matches!(items[1], Stmt::Store(_)), "{with}");
    }
    // the variable is not visible after the scoped body
    let src = format!("{head}    with T.LetStmt(5) as y:\n        A[0] = y\n    A[1] = y\n");
    let d = parse_err(&src);
    assert!(
        d.message.contains("undefined variable `y`"),
        "{}",
        d.message
    );
    // a target is required
    let src = format!("{head}    with T.LetStmt(5):\n        A[0] = 1\n");
    let d = parse_err(&src);
    assert!(d.message.contains("needs a variable"), "{}", d.message);
    let src = format!("{head}    with T.LetStmt(5, \"float77\") as y:\n        A[0] = 1\n");
    let d = parse_err(&src);
    assert!(d.message.contains("unknown dtype"), "{}", d.message);
}

/// Appends a copy of a store or evaluate of the same sequence after every sequence-ending `let`,
/// so that lets are followed by statements. Returns how many were appended.
fn untail_lets(s: &mut Stmt) -> usize {
    let mut n = 0;
    match s {
        Stmt::Seq(v) => {
            for c in v.iter_mut() {
                n += untail_lets(c);
            }
            if matches!(v.last(), Some(Stmt::Let(_))) {
                // a copy must not bind variables (an expression `let`) a second time
                let copy = v
                    .iter()
                    .find(|x| matches!(x, Stmt::Store(_) | Stmt::Evaluate(_)) && !binds(x))
                    .cloned();
                if let Some(c) = copy {
                    v.push(c);
                    n += 1;
                }
            }
        }
        Stmt::Let(l) => n += untail_lets(&mut l.body),
        Stmt::For(l) => n += untail_lets(&mut l.body),
        Stmt::Block(b) => {
            if let Some(i) = &mut b.init {
                n += untail_lets(i);
            }
            n += untail_lets(&mut b.body);
        }
        Stmt::SparseIteration(it) => {
            if let Some(i) = &mut it.init {
                n += untail_lets(i);
            }
            n += untail_lets(&mut it.body);
        }
        Stmt::If(i) => {
            n += untail_lets(&mut i.then_case);
            if let Some(e) = &mut i.else_case {
                n += untail_lets(e);
            }
        }
        _ => {}
    }
    n
}

/// True when a statement's expressions contain an expression `let`.
fn binds(s: &Stmt) -> bool {
    let mut found = false;
    s.for_each_expr(|e| e.visit(&mut |x| found |= matches!(x, Expr::Let { .. })));
    found
}

/// Gives every variable, axis and buffer a long name, so that lines need breaking.
fn lengthen_names(f: &mut PrimFunc, suffix: &str) {
    for h in f.vars.handles().collect::<Vec<_>>() {
        f.vars[h].name.push_str(suffix);
    }
    for h in f.axes.handles().collect::<Vec<_>>() {
        f.axes[h].name.push_str(suffix);
    }
    for h in f.buffers.handles().collect::<Vec<_>>() {
        f.buffers[h].name.push_str(suffix);
    }
}

#[test]
fn generated_functions_with_non_tail_lets_and_long_names_round_trip() {
    let mut untailed = 0;
    let mut long_lines = 0;
    let mut broken = 0;
    for seed in 0..40u64 {
        for stage in [Stage::I, Stage::II, Stage::III] {
            let mut f = gen_func(stage, seed, 8);
            untailed += untail_lets(&mut f.body);
            lengthen_names(&mut f, "_with_a_longer_name");
            if let Err(e) = verify_func(&f) {
                panic!("seed {seed}: transformed function does not verify: {e:#?}");
            }
            let text = roundtrip(&f);
            for l in text.lines() {
                if l.chars().count() > LINE_WIDTH {
                    long_lines += 1;
                    eprintln!("{l}");
                }
                if matches!(l.trim(), ")" | "]" | "}" | "):" | "]:") {
                    broken += 1;
                }
            }
        }
    }
    assert!(untailed > 10, "only {untailed} lets were made non-tail");
    assert!(broken > 10, "only {broken} lines were broken");
    assert_eq!(long_lines, 0);
}

// ------------------------------------------------------------------------- sparse allocations

const SPARSE_ALLOCATE: &str = "@T.prim_func
def f(a: T.handle, n: T.int32):
    T.func_attr({\"sparse_tir_level\": 1})
    I = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I,), \"float32\")
    for i in T.serial(n):
        X = T.allocate((I,), \"float32\", \"global\")
        A[i] = T.float32(0)
";

#[test]
fn allocate_over_a_sparse_axis_is_rejected_with_a_hint() {
    let d = parse_err(SPARSE_ALLOCATE);
    assert!(
        d.message.contains("`T.allocate` takes dense extents")
            && d.message.contains("`I` is a sparse axis"),
        "{}",
        d.message
    );
    // the caret is on the axis name inside the allocation
    let at = SPARSE_ALLOCATE.find("((I,)").unwrap() + 2;
    assert_eq!((d.span.start as usize, d.span.end as usize), (at, at + 1));
    assert!(
        d.notes.iter().any(|n| n.contains("T.sp.alloc_buffer")),
        "{:?}",
        d.notes
    );
    // the same with a single extent written without a tuple
    let d = parse_err(&SPARSE_ALLOCATE.replace("((I,)", "(I"));
    assert!(d.message.contains("`I` is a sparse axis"), "{}", d.message);
}

#[test]
fn a_sparse_allocate_never_prints_as_t_allocate() {
    // a valid dense allocation, then its buffer made sparse over I (IR outside the language)
    let src = SPARSE_ALLOCATE.replace("((I,)", "((n,)");
    let mut f = parse_ok(&src);
    let roundtrip_dense = roundtrip(&f);
    assert!(roundtrip_dense.contains("X = T.allocate((n,), \"float32\", \"global\")"));
    let i = f.axis_by_name("I").unwrap();
    let x = f.buffer_by_name("X").unwrap();
    f.buffers[x].shape = BufferShape::Sparse(vec![i]);
    let text = print_func(&f);
    assert!(!text.contains("T.allocate"), "{text}");
    assert!(
        text.contains("X = T.sp.alloc_buffer((I,), \"float32\")"),
        "{text}"
    );
    let d = parse_err(&text);
    assert!(
        d.message
            .contains("`T.sp.alloc_buffer` is only allowed at function level"),
        "{}",
        d.message
    );
    assert!(
        d.notes.iter().any(|n| n.contains("dense extents")),
        "{:?}",
        d.notes
    );
}

// ------------------------------------------------------------------------------------ dtypes

const INT64_LOOPS: &str = "@T.prim_func
def f(a: T.handle, b: T.handle, n: T.int64, m: T.int32):
    T.func_attr({\"sparse_tir_level\": 0})
    A = T.match_buffer(a, (n,), \"float32\")
    B = T.match_buffer(b, (m,), \"float32\")
    for i in T.serial(n):
        for j in T.serial(T.int64(0), n):
            for k in T.serial(T.int64(2), n):
                for l in T.serial(T.int64(0), m):
                    for p in T.grid(m):
                        with T.block(\"blk\"):
                            vi = T.axis.spatial(n, i)
                            vj = T.axis.spatial((T.int64(0), n), j)
                            vk = T.axis.reduce((T.int64(2), n), k)
                            T.reads(A[T.int64(0):n], B[0:m])
                            T.writes(A[vi])
                            A[vi] = A[vj] + B[p]
";

#[test]
fn int64_extents_and_typed_zero_starts_keep_their_dtypes() {
    let f = parse_ok(INT64_LOOPS);
    let n = Expr::Var(f.param("n").unwrap());
    let m = Expr::Var(f.param("m").unwrap());
    let mut loops = Vec::new();
    let mut blocks = Vec::new();
    f.body.visit(&mut |s| match s {
        Stmt::For(l) => loops.push((f.vars[l.var].dtype, l.min.clone(), l.extent.clone())),
        Stmt::Block(b) => blocks.push(b.clone()),
        _ => {}
    });
    let i64_0 = Expr::Int(0, DType::I64);
    let i64_2 = Expr::Int(2, DType::I64);
    assert_eq!(
        loops,
        vec![
            (DType::I64, Expr::int(0), n.clone()),
            (DType::I64, i64_0.clone(), n.clone()),
            (
                DType::I64,
                i64_2.clone(),
                Expr::sub(n.clone(), i64_2.clone())
            ),
            // the wider of the start and extent types, as TVMScript does
            (DType::I64, i64_0.clone(), m.clone()),
            (DType::I32, Expr::int(0), m.clone()),
        ]
    );
    let blk = &blocks[0];
    let iters: Vec<(DType, Expr, Expr)> = blk
        .iters
        .iter()
        .map(|it| (f.vars[it.var].dtype, it.min.clone(), it.extent.clone()))
        .collect();
    assert_eq!(
        iters,
        vec![
            (DType::I64, Expr::int(0), n.clone()),
            (DType::I64, i64_0.clone(), n.clone()),
            (DType::I64, i64_2.clone(), Expr::sub(n.clone(), i64_2)),
        ]
    );
    assert_eq!(blk.reads[0].ranges, vec![(i64_0, n)]);
    assert_eq!(blk.reads[1].ranges, vec![(Expr::int(0), m)]);
    let text = roundtrip(&f);
    // typed zero starts stay visible; the int32 zero start is omitted
    let lines = trimmed_lines(&text);
    assert!(lines.contains(&"for i in T.serial(n):"), "{text}");
    assert!(
        lines.contains(&"for j in T.serial(T.int64(0), n):"),
        "{text}"
    );
    assert!(
        lines.contains(&"vj = T.axis.spatial((T.int64(0), n), j)"),
        "{text}"
    );
    assert!(
        lines.contains(&"T.reads(A[T.int64(0):n], B[0:m])"),
        "{text}"
    );
}

const INT64_AXES: &str = "@T.prim_func
def f(a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, m: T.int64, n: T.int64, \
nnz: T.int64):
    T.func_attr({\"sparse_tir_level\": 2})
    I = T.sp.dense_fixed(m, idtype=\"int64\")
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), idtype=\"int64\")
    A = T.sp.match_buffer(a, (I, J), \"float32\")
    C = T.sp.match_buffer(c, (I,), \"float32\")
    with T.sp.iteration([I, J], \"SR\", \"rowsum\") as [i, j]:
        with T.init():
            C[i] = T.float32(0)
        C[i] = C[i] + A[i, j]
";

#[test]
fn sparse_iteration_over_int64_axes_binds_int64_iterators() {
    let f = parse_ok(INT64_AXES);
    let Stmt::SparseIteration(it) = &f.body else {
        panic!("expected one iteration")
    };
    let dtypes: Vec<DType> = it.vars.iter().map(|v| f.vars[*v].dtype).collect();
    assert_eq!(dtypes, [DType::I64, DType::I64]);
    let text = roundtrip(&f);
    assert!(text.contains("idtype=\"int64\""), "{text}");
}

// ------------------------------------------------------------------------ undefined names

#[test]
fn an_undefined_name_lists_close_names() {
    let src = "@T.prim_func
def f(a: T.handle, b: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), \"float32\")
    Bx = T.match_buffer(b, (n,), \"float32\")
    for i in T.serial(n):
        Bx[i] = A[i] + B[i]
";
    let d = parse_err(src);
    assert_eq!(d.message, "undefined buffer `B`");
    assert_eq!(d.notes, vec!["did you mean `Bx`?".to_string()]);
    // several candidates, closest first then alphabetically; only names of the wanted kind
    let src = "@T.prim_func
def f(a: T.handle, row: T.int32, rows: T.int32):
    A = T.match_buffer(a, (rows,), \"float32\")
    A[0] = T.Cast(\"float32\", rowz + 1)
";
    let d = parse_err(src);
    assert_eq!(d.message, "undefined variable `rowz`");
    assert_eq!(
        d.notes,
        vec!["did you mean one of `row`, `rows`?".to_string()]
    );
    // nothing close: no note
    let src = "@T.prim_func
def f(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), \"float32\")
    A[0] = T.Cast(\"float32\", completely_unrelated)
";
    let d = parse_err(src);
    assert!(d.message.starts_with("undefined variable"), "{}", d.message);
    assert!(d.notes.is_empty(), "{:?}", d.notes);
    // a name declared later keeps its own explanation
    let src = "@T.prim_func
def f(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), \"float32\")
    A[0] = T.Cast(\"float32\", x)
    x: T.int32 = 1
";
    let d = parse_err(src);
    assert!(
        d.message.contains("declared later at line 5"),
        "{}",
        d.message
    );
}

// ------------------------------------------------------------------------------ long lines

const WIDE: &str = "@T.prim_func
def wide(a_values_handle: T.handle, b_values_handle: T.handle, c_values_handle: T.handle, \
n: T.int32) -> None:
    T.func_attr({\"sparse_tir_level\": 0, \"global_symbol\": \
\"a_rather_long_global_symbol_name_for_testing\", \"tir.noalias\": True})
    first_input_buffer = T.match_buffer(a_values_handle, (n,), \"float32\")
    second_input_buffer = T.match_buffer(b_values_handle, (n,), \"float32\")
    output_buffer_with_long_name = T.match_buffer(c_values_handle, (n,), \"float32\")
    for i in T.serial(n):
        with T.block(\"an_elementwise_block_name\"):
            vi = T.axis.spatial(n, i)
            T.reads(first_input_buffer[vi], second_input_buffer[vi], \
output_buffer_with_long_name[vi])
            T.writes(output_buffer_with_long_name[vi])
            if first_input_buffer[vi] > T.float32(0) and second_input_buffer[vi] > T.float32(0) \
and vi < n - 1:
                output_buffer_with_long_name[vi] = first_input_buffer[vi] * \
second_input_buffer[vi] + output_buffer_with_long_name[vi] - first_input_buffer[vi]
            output_buffer_with_long_name[vi] = T.exp(first_input_buffer[vi] * \
second_input_buffer[vi] + output_buffer_with_long_name[vi])
            output_buffer_with_long_name[vi] = T.Select(first_input_buffer[vi] > \
second_input_buffer[vi] + T.float32(1), (first_input_buffer[vi] - second_input_buffer[vi]) * \
T.float32(2), T.float32(0))
";

/// The indentation (in columns) of the first line equal to `needle` once trimmed.
fn indent_of(text: &str, needle: &str) -> usize {
    text.lines()
        .find(|l| l.trim() == needle)
        .map(|l| l.len() - l.trim_start().len())
        .unwrap_or_else(|| panic!("no line `{needle}` in\n{text}"))
}

#[test]
fn long_lines_break_inside_brackets_like_black() {
    assert!(
        WIDE.lines().any(|l| l.len() > 150),
        "the input has long lines"
    );
    let f = parse_ok(WIDE);
    let text = roundtrip(&f);
    for l in text.lines() {
        assert!(
            l.chars().count() <= LINE_WIDTH,
            "line too long: {l}\n{text}"
        );
    }
    // the dict of attributes: one entry per line with a trailing comma, inside the call
    assert_eq!(indent_of(&text, "T.func_attr("), 4);
    assert_eq!(indent_of(&text, "{"), 8);
    assert_eq!(indent_of(&text, "\"tir.noalias\": True,"), 12);
    // the parameters: one per line
    assert_eq!(indent_of(&text, "n: T.int32,"), 4);
    assert_eq!(indent_of(&text, ") -> None:"), 0);
    // the reads fit on one indented line
    let reads = "first_input_buffer[vi], second_input_buffer[vi], output_buffer_with_long_name[vi]";
    assert_eq!(indent_of(&text, "T.reads("), 12);
    assert_eq!(indent_of(&text, reads), 16);
    // the condition gets parentheses and breaks before each `and`
    assert_eq!(indent_of(&text, "if ("), 12);
    assert_eq!(indent_of(&text, "and vi < n - 1"), 16);
    assert_eq!(indent_of(&text, "):"), 12);
    // the stored chain breaks before each `+`/`-` inside parentheses
    assert_eq!(indent_of(&text, "output_buffer_with_long_name[vi] = ("), 16);
    assert_eq!(indent_of(&text, "+ output_buffer_with_long_name[vi]"), 20);
    assert_eq!(indent_of(&text, "- first_input_buffer[vi]"), 20);
    // a call on the right breaks at its own parentheses; its lone argument is not parenthesised
    assert_eq!(
        indent_of(&text, "output_buffer_with_long_name[vi] = T.exp("),
        12
    );
    let arg = "first_input_buffer[vi] * second_input_buffer[vi] + output_buffer_with_long_name[vi]";
    assert_eq!(indent_of(&text, arg), 16);
    // several arguments that do not fit together: one per line, trailing comma
    assert_eq!(
        indent_of(&text, "output_buffer_with_long_name[vi] = T.Select("),
        12
    );
    assert_eq!(indent_of(&text, "T.float32(0),"), 16);
    assert_eq!(
        indent_of(
            &text,
            "(first_input_buffer[vi] - second_input_buffer[vi]) * T.float32(2),"
        ),
        16
    );
}

#[test]
fn long_iteration_headers_and_declarations_break() {
    let axes: Vec<String> = (0..8).map(|k| format!("AXIS_NUMBER_{k}")).collect();
    let vars: Vec<String> = (0..8).map(|k| format!("iterator_{k}")).collect();
    let mut src = String::from("@T.prim_func\ndef f(a: T.handle, n: T.int32):\n");
    for ax in &axes {
        src.push_str(&format!("    {ax} = T.sp.dense_fixed(n)\n"));
    }
    src.push_str(&format!(
        "    A = T.sp.match_buffer(a, ({}), \"float32\")\n",
        axes.join(", ")
    ));
    src.push_str(&format!(
        "    with T.sp.iteration([{}], \"SSSSSSSS\", \"it\") as [{}]:\n        A[{}] = \
         T.float32(1)\n",
        axes.join(", "),
        vars.join(", "),
        vars.join(", ")
    ));
    let f = parse_ok(&src);
    let text = roundtrip(&f);
    for l in text.lines() {
        assert!(
            l.chars().count() <= LINE_WIDTH,
            "line too long: {l}\n{text}"
        );
    }
    // the header breaks at the iteration's call (the `as [...]` part does not fit after it)
    assert_eq!(indent_of(&text, "with T.sp.iteration("), 4);
    assert_eq!(indent_of(&text, "\"SSSSSSSS\","), 8);
    let close = format!(") as [{}]:", vars.join(", "));
    if close.len() + 4 <= LINE_WIDTH {
        assert_eq!(indent_of(&text, &close), 4);
    }
    assert_eq!(indent_of(&text, "AXIS_NUMBER_7,"), 12);
}
