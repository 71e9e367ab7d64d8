//! IR helpers shared by the primitives: finding statements by identity (block and iteration
//! names, loop variables), ancestor chains, in-place rewriting and variable substitution.

use std::collections::HashMap;

use sparsetir_ir::{Block, Expr, For, SparseIteration, Stmt, VarId};

/// True when `s` is the block named `name`.
pub fn is_block(s: &Stmt, name: &str) -> bool {
    matches!(s, Stmt::Block(b) if b.name == name)
}

/// True when `s` is the loop over `var`.
pub fn is_loop(s: &Stmt, var: VarId) -> bool {
    matches!(s, Stmt::For(l) if l.var == var)
}

/// True when `s` is the sparse iteration named `name`.
pub fn is_sp_iter(s: &Stmt, name: &str) -> bool {
    matches!(s, Stmt::SparseIteration(it) if it.name == name)
}

/// The chain of statements from `root` down to the first statement (pre-order) satisfying
/// `pred`, both ends included.
pub fn path_to<'a>(root: &'a Stmt, pred: &dyn Fn(&Stmt) -> bool) -> Option<Vec<&'a Stmt>> {
    fn go<'a>(s: &'a Stmt, pred: &dyn Fn(&Stmt) -> bool, path: &mut Vec<&'a Stmt>) -> bool {
        path.push(s);
        if pred(s) {
            return true;
        }
        let mut children: Vec<&'a Stmt> = Vec::new();
        push_children(s, &mut children);
        for c in children {
            if go(c, pred, path) {
                return true;
            }
        }
        path.pop();
        false
    }
    let mut path = Vec::new();
    if go(root, pred, &mut path) {
        Some(path)
    } else {
        None
    }
}

/// The direct child statements of `s` (init before body).
pub fn push_children<'a>(s: &'a Stmt, out: &mut Vec<&'a Stmt>) {
    match s {
        Stmt::Seq(v) => out.extend(v.iter()),
        Stmt::SparseIteration(it) => {
            if let Some(i) = &it.init {
                out.push(i)
            }
            out.push(&it.body)
        }
        Stmt::For(l) => out.push(&l.body),
        Stmt::While(w) => out.push(&w.body),
        Stmt::Block(b) => {
            if let Some(i) = &b.init {
                out.push(i)
            }
            out.push(&b.body)
        }
        Stmt::If(i) => {
            out.push(&i.then_case);
            if let Some(e) = &i.else_case {
                out.push(e)
            }
        }
        Stmt::Let(l) => out.push(&l.body),
        Stmt::Store(_)
        | Stmt::Evaluate(_)
        | Stmt::Allocate(_)
        | Stmt::AssumeBufferDomain { .. } => {}
    }
}

/// The direct child statements of `s`, mutably.
pub fn children_mut(s: &mut Stmt) -> Vec<&mut Stmt> {
    let mut out: Vec<&mut Stmt> = Vec::new();
    match s {
        Stmt::Seq(v) => out.extend(v.iter_mut()),
        Stmt::SparseIteration(it) => {
            let it = &mut **it;
            if let Some(i) = &mut it.init {
                out.push(i)
            }
            out.push(&mut it.body)
        }
        Stmt::For(l) => out.push(&mut l.body),
        Stmt::While(w) => out.push(&mut w.body),
        Stmt::Block(b) => {
            let b = &mut **b;
            if let Some(i) = &mut b.init {
                out.push(i)
            }
            out.push(&mut b.body)
        }
        Stmt::If(i) => {
            let i = &mut **i;
            out.push(&mut i.then_case);
            if let Some(e) = &mut i.else_case {
                out.push(e)
            }
        }
        Stmt::Let(l) => out.push(&mut l.body),
        Stmt::Store(_)
        | Stmt::Evaluate(_)
        | Stmt::Allocate(_)
        | Stmt::AssumeBufferDomain { .. } => {}
    }
    out
}

/// The first statement (pre-order) satisfying `pred`.
pub fn find<'a>(root: &'a Stmt, pred: &dyn Fn(&Stmt) -> bool) -> Option<&'a Stmt> {
    path_to(root, pred).and_then(|p| p.last().copied())
}

/// The first statement (pre-order) satisfying `pred`, mutably.
pub fn find_mut<'a>(root: &'a mut Stmt, pred: &dyn Fn(&Stmt) -> bool) -> Option<&'a mut Stmt> {
    if pred(root) {
        return Some(root);
    }
    for c in children_mut(root) {
        if let Some(found) = find_mut(c, pred) {
            return Some(found);
        }
    }
    None
}

/// The block named `name`.
pub fn find_block<'a>(root: &'a Stmt, name: &str) -> Option<&'a Block> {
    match find(root, &|s| is_block(s, name)) {
        Some(Stmt::Block(b)) => Some(b),
        _ => None,
    }
}

/// The block named `name`, mutably.
pub fn find_block_mut<'a>(root: &'a mut Stmt, name: &str) -> Option<&'a mut Block> {
    match find_mut(root, &|s| is_block(s, name)) {
        Some(Stmt::Block(b)) => Some(b),
        _ => None,
    }
}

/// The loop over `var`.
pub fn find_loop(root: &Stmt, var: VarId) -> Option<&For> {
    match find(root, &|s| is_loop(s, var)) {
        Some(Stmt::For(l)) => Some(l),
        _ => None,
    }
}

/// The loop over `var`, mutably.
pub fn find_loop_mut(root: &mut Stmt, var: VarId) -> Option<&mut For> {
    match find_mut(root, &|s| is_loop(s, var)) {
        Some(Stmt::For(l)) => Some(l),
        _ => None,
    }
}

/// The sparse iteration named `name`.
pub fn find_sp_iter<'a>(root: &'a Stmt, name: &str) -> Option<&'a SparseIteration> {
    match find(root, &|s| is_sp_iter(s, name)) {
        Some(Stmt::SparseIteration(it)) => Some(it),
        _ => None,
    }
}

/// The sparse iteration named `name`, mutably.
pub fn find_sp_iter_mut<'a>(root: &'a mut Stmt, name: &str) -> Option<&'a mut SparseIteration> {
    match find_mut(root, &|s| is_sp_iter(s, name)) {
        Some(Stmt::SparseIteration(it)) => Some(it),
        _ => None,
    }
}

/// Replaces the first statement satisfying `pred` by `f(old)`. Returns `None` when no statement
/// matches, else what `f` returned besides the new statement.
pub fn replace<R>(
    root: &mut Stmt,
    pred: &dyn Fn(&Stmt) -> bool,
    f: impl FnOnce(Stmt) -> (Stmt, R),
) -> Option<R> {
    let slot = find_mut(root, pred)?;
    let old = std::mem::replace(slot, Stmt::empty());
    let (new, r) = f(old);
    *slot = new;
    Some(r)
}

/// Names of every block, in pre-order.
pub fn block_names(root: &Stmt) -> Vec<String> {
    let mut out = Vec::new();
    root.visit(&mut |s| {
        if let Stmt::Block(b) = s {
            out.push(b.name.clone())
        }
    });
    out
}

/// Names of every sparse iteration, in pre-order.
pub fn sp_iter_names(root: &Stmt) -> Vec<String> {
    let mut out = Vec::new();
    root.visit(&mut |s| {
        if let Stmt::SparseIteration(it) = s {
            out.push(it.name.clone())
        }
    });
    out
}

/// The blocks directly under `s` (not through another block), in order; `s` itself is not
/// counted even when it is a block (its body and init are searched).
pub fn child_blocks(s: &Stmt) -> Vec<String> {
    fn go(s: &Stmt, out: &mut Vec<String>) {
        if let Stmt::Block(b) = s {
            out.push(b.name.clone());
            return;
        }
        let mut ch = Vec::new();
        push_children(s, &mut ch);
        for c in ch {
            go(c, out)
        }
    }
    let mut out = Vec::new();
    let mut ch = Vec::new();
    push_children(s, &mut ch);
    for c in ch {
        go(c, &mut out)
    }
    out
}

/// Calls `f` on every expression held by `s` and its descendants (loop ranges, block iterators,
/// predicates, regions, indices, values, conditions).
pub fn for_each_expr_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    s.visit_exprs_mut(f)
}

/// Replaces variables by expressions inside `e`.
pub fn subst_expr(e: &mut Expr, map: &HashMap<VarId, Expr>) {
    e.rewrite_post_order(&mut |x| {
        if let Expr::Var(v) = x {
            if let Some(r) = map.get(v) {
                *x = r.clone();
            }
        }
    });
}

/// Replaces variables by expressions everywhere inside `s`.
pub fn subst_stmt(s: &mut Stmt, map: &HashMap<VarId, Expr>) {
    if map.is_empty() {
        return;
    }
    for_each_expr_mut(s, &mut |e| subst_expr(e, map));
}

/// True when `e` mentions `v`.
pub fn uses_var(e: &Expr, v: VarId) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x, Expr::Var(w) if *w == v));
    found
}

/// True when `e` mentions any of `vs`.
pub fn uses_any(e: &Expr, vs: &[VarId]) -> bool {
    vs.iter().any(|v| uses_var(e, *v))
}

/// True when some expression of `s` or its descendants mentions `v`.
pub fn stmt_uses_var(s: &Stmt, v: VarId) -> bool {
    let mut found = false;
    s.visit(&mut |st| {
        st.for_each_expr(|e| found |= uses_var(e, v));
    });
    found
}
