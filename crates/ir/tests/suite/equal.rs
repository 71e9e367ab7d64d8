//! Tests of structural equality and hashing up to renaming (`func_eq`, `func_hash`).

use crate::common;

use common::*;
use sparsetir_ir::equal::{first_difference, func_eq, func_hash, module_eq};
use sparsetir_ir::*;

fn assert_equal(a: &PrimFunc, b: &PrimFunc) {
    assert!(func_eq(a, b), "expected equal:\n{a:#?}\n{b:#?}");
    assert!(func_eq(b, a));
    assert_eq!(func_hash(a), func_hash(b));
}

fn assert_unequal(a: &PrimFunc, b: &PrimFunc, what: &str) {
    assert!(!func_eq(a, b), "expected unequal after changing {what}");
    assert!(!func_eq(b, a), "expected unequal after changing {what}");
    assert_ne!(
        func_hash(a),
        func_hash(b),
        "hash should differ after changing {what}"
    );
}

#[test]
fn equal_to_itself_and_clone() {
    let f = csrmm(&CsrmmOpts::default());
    assert_equal(&f, &f);
    assert_equal(&f, &f.clone());
    let g = rowsum(&RowSumOpts::default());
    assert_equal(&g, &g.clone());
    assert!(!func_eq(&f, &g));
}

#[test]
fn equal_under_renaming() {
    let base = csrmm(&CsrmmOpts::default());
    let renamed = csrmm(&CsrmmOpts {
        rename: true,
        ..Default::default()
    });
    assert_ne!(base.name, renamed.name);
    assert_ne!(
        base.vars[base.params[0]].name,
        renamed.vars[renamed.params[0]].name
    );
    assert_equal(&base, &renamed);
    let base3 = rowsum(&RowSumOpts::default());
    let renamed3 = rowsum(&RowSumOpts {
        rename: true,
        ..Default::default()
    });
    assert_equal(&base3, &renamed3);
}

#[test]
fn equal_under_other_var_arena_order() {
    let base = csrmm(&CsrmmOpts::default());
    let shuffled = csrmm(&CsrmmOpts {
        shuffle: true,
        ..Default::default()
    });
    // the parameters really sit at other arena indices
    assert_ne!(base.params[0].index(), shuffled.params[0].index());
    assert_equal(&base, &shuffled);
    let both = csrmm(&CsrmmOpts {
        shuffle: true,
        rename: true,
        ..Default::default()
    });
    assert_equal(&base, &both);
}

#[test]
fn spans_are_ignored() {
    let base = csrmm(&CsrmmOpts::default());
    let mut moved = base.clone();
    for h in moved.axes.handles().collect::<Vec<_>>() {
        moved.axes[h].span = Span::new(1000, 2000);
    }
    moved.span = Span::new(5, 6);
    assert_equal(&base, &moved);
}

#[test]
fn unequal_for_each_single_change() {
    let base = csrmm(&CsrmmOpts::default());
    let d = CsrmmOpts::default;
    let cases: Vec<(&str, CsrmmOpts)> = vec![
        (
            "constant",
            CsrmmOpts {
                init_value: 1.0,
                ..d()
            },
        ),
        (
            "operator",
            CsrmmOpts {
                op: BinOp::Sub,
                ..d()
            },
        ),
        (
            "dtype",
            CsrmmOpts {
                c_dtype: DType::F64,
                ..d()
            },
        ),
        (
            "kind letter",
            CsrmmOpts {
                kinds: "SSS",
                ..d()
            },
        ),
        (
            "iteration name",
            CsrmmOpts {
                iter_name: "spmm",
                ..d()
            },
        ),
        (
            "attribute value",
            CsrmmOpts {
                attr_value: 2,
                ..d()
            },
        ),
        (
            "extra statement",
            CsrmmOpts {
                extra_stmt: true,
                ..d()
            },
        ),
        (
            "swapped operands",
            CsrmmOpts {
                swap_operands: true,
                ..d()
            },
        ),
        (
            "buffer used",
            CsrmmOpts {
                wrong_buffer: true,
                ..d()
            },
        ),
    ];
    for (what, opts) in cases {
        let changed = csrmm(&opts);
        assert_unequal(&base, &changed, what);
        // renaming on top of the change does not hide it
        let changed_renamed = csrmm(&CsrmmOpts {
            rename: true,
            ..opts
        });
        assert!(!func_eq(&base, &changed_renamed), "{what} + rename");
    }
}

#[test]
fn unequal_for_block_and_loop_changes() {
    let base = rowsum(&RowSumOpts::default());
    assert_unequal(
        &base,
        &rowsum(&RowSumOpts {
            block_name: Some("colsum"),
            ..Default::default()
        }),
        "block name",
    );
    assert_unequal(
        &base,
        &rowsum(&RowSumOpts {
            parallel: true,
            ..Default::default()
        }),
        "loop kind",
    );
}

#[test]
fn unequal_for_axis_and_binding_changes() {
    let base = csrmm(&CsrmmOpts::default());
    // an axis kind
    let mut g = base.clone();
    let j = g.axis_by_name("J").unwrap();
    g.axes[j].kind = AxisKind::DenseVaried;
    assert_unequal(&base, &g, "axis kind");
    // axis length referring to another parameter
    let mut g = base.clone();
    let k = g.param("k").unwrap();
    let i = g.axis_by_name("I").unwrap();
    g.axes[i].length = Expr::Var(k);
    assert_unequal(&base, &g, "axis length variable");
    // a buffer over other axes
    let mut g = base.clone();
    let c = g.buffer_by_name("C").unwrap();
    let jd = g.axis_by_name("J_detach").unwrap();
    let kk = g.axis_by_name("K").unwrap();
    g.buffers[c].shape = BufferShape::Sparse(vec![jd, kk]);
    assert_unequal(&base, &g, "buffer axes");
    // parameter order swapped (binding of buffers to parameters changes)
    let mut g = base.clone();
    g.params.swap(0, 1);
    assert_unequal(&base, &g, "parameter order");
    // a buffer scope
    let mut g = base.clone();
    let a = g.buffer_by_name("A").unwrap();
    g.buffers[a].scope = "shared".into();
    assert_unequal(&base, &g, "buffer scope");
}

#[test]
fn bijection_is_enforced() {
    // f uses two distinct loop variables, g uses the same variable twice in nested loops:
    // under a bijection `i -> a, j -> a` is not allowed when `i` is still visible.
    let mk = |same: bool| {
        let mut b = Builder::new("f");
        let x = b.param("x", DType::Handle);
        let buf = b.match_dense("X", x, vec![Expr::int(4), Expr::int(4)], DType::F32);
        let i = b.var("i", DType::I32);
        let j = if same { i } else { b.var("j", DType::I32) };
        let st = b.store(buf, vec![v(i), v(j)], Expr::f32(1.0));
        let inner = b.serial(j, Expr::int(4), st);
        let outer = b.serial(i, Expr::int(4), inner);
        b.finish(Stage::III, outer)
    };
    let distinct = mk(false);
    let shadowed = mk(true);
    assert!(!func_eq(&distinct, &shadowed));
}

#[test]
fn floats_compare_bitwise() {
    let mut a = csrmm(&CsrmmOpts {
        init_value: f64::NAN,
        ..Default::default()
    });
    let b = a.clone();
    assert_equal(&a, &b);
    a = csrmm(&CsrmmOpts {
        init_value: 0.0,
        ..Default::default()
    });
    let neg = csrmm(&CsrmmOpts {
        init_value: -0.0,
        ..Default::default()
    });
    assert!(!func_eq(&a, &neg), "0.0 and -0.0 differ bitwise");
}

#[test]
fn modules() {
    let m1 = IRModule {
        funcs: vec![csrmm(&CsrmmOpts::default()), rowsum(&RowSumOpts::default())],
    };
    let m2 = IRModule {
        funcs: vec![
            csrmm(&CsrmmOpts {
                rename: true,
                ..Default::default()
            }),
            rowsum(&RowSumOpts {
                rename: true,
                ..Default::default()
            }),
        ],
    };
    assert!(module_eq(&m1, &m2));
    let m3 = IRModule {
        funcs: vec![m1.funcs[1].clone(), m1.funcs[0].clone()],
    };
    assert!(!module_eq(&m1, &m3));
}

/// `first_difference` names the first token two unequal functions differ at (here the output's
/// dtype), and nothing for equal ones.
#[test]
fn first_difference_names_the_differing_token() {
    let base = csrmm(&CsrmmOpts::default());
    assert_eq!(first_difference(&base, &base.clone()), None);
    let f64_out = csrmm(&CsrmmOpts {
        c_dtype: DType::F64,
        ..CsrmmOpts::default()
    });
    let d = first_difference(&base, &f64_out).expect("unequal");
    assert!(d.contains("F32") && d.contains("F64"), "{d}");
}
