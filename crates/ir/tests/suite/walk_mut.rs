//! The mutable walkers `Expr::rewrite_post_order` and `Stmt::visit_exprs_mut` against the
//! immutable `visit` / `for_each_expr` traversals and hand-written expected orders.

use sparsetir_ir::{Expr, IfThenElse, Span, Stmt};

/// `1 + 2 * 3`.
fn sample() -> Expr {
    Expr::add(Expr::int(1), Expr::mul(Expr::int(2), Expr::int(3)))
}

#[test]
fn rewrite_post_order_visits_children_first_and_may_replace() {
    let mut e = sample();
    let mut seen = Vec::new();
    e.rewrite_post_order(&mut |x| {
        seen.push(x.as_int());
        if let Some(v) = x.as_int() {
            *x = Expr::int(v * 10);
        }
    });
    // Leaves 1, 2, 3 in order, then the product, then the sum (non-constants give None).
    assert_eq!(seen, vec![Some(1), Some(2), Some(3), None, None]);
    assert_eq!(
        e,
        Expr::add(Expr::int(10), Expr::mul(Expr::int(20), Expr::int(30)))
    );
}

#[test]
fn visit_exprs_mut_matches_the_immutable_traversal() {
    let mut s = Stmt::seq(vec![
        Stmt::Evaluate(Expr::int(1)),
        Stmt::If(Box::new(IfThenElse {
            cond: Expr::int(2),
            then_case: Stmt::Evaluate(sample()),
            else_case: Some(Stmt::Evaluate(Expr::int(4))),
            span: Span::default(),
        })),
    ]);
    let mut want = Vec::new();
    s.visit(&mut |st| st.for_each_expr(|e| want.push(e.clone())));
    assert_eq!(
        want,
        vec![Expr::int(1), Expr::int(2), sample(), Expr::int(4)]
    );
    let mut got = Vec::new();
    s.visit_exprs_mut(&mut |e| {
        got.push(e.clone());
        *e = Expr::int(0);
    });
    assert_eq!(got, want);
    let mut after = Vec::new();
    s.visit(&mut |st| st.for_each_expr(|e| after.push(e.clone())));
    assert_eq!(after, vec![Expr::int(0); 4]);
}
