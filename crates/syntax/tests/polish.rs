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
