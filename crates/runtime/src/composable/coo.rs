//! SDDMM on COO (coordinate list) built from the catalog's CSR `sddmm` by `decompose_format`
//! with the COO rule (`crates/ops/rules/coo.rule.sp`): one flat iteration over the stored
//! elements, `[O_coo, I_coo, J_coo, K] "SSSR"`, each element carrying its row.
//!
//! # How the decomposition is expressed
//!
//! 1. [`coo_rule_for`] points the COO rule at the function's *input* CSR matrix: the sparse
//!    buffer over `[I, J]` that no statement writes (sddmm's `X`). The output `Y` is not
//!    rewritten: `decompose_format` only rewrites buffers that are read, because a rewritten
//!    buffer is filled by a copy (the preprocess) *before* the compute, and nothing would copy a
//!    rewritten output back into the original format after it.
//! 2. `decompose_format` then gives `sddmm_init` (zeroing `Y` over the CSR axes, since the COO
//!    axes are compressed and the clone does not "cover" the output by the pass's rule) and the
//!    clone `sddmm_coo` over the COO axes, which still addresses the CSR `Y[i, j]`: a
//!    coordinate lookup (binary search) per element. The preprocess copy is removed (the COO
//!    arrays are bound directly).
//! 3. [`coo_sddmm_stage1`] puts the output in COO as well. COO built from CSR stores the same
//!    elements in the same order (row after row), so a buffer over `[O_coo, I_coo, J_coo]` has
//!    exactly the value layout of one over the CSR `[I, J]`: re-declaring `Y` over the COO axes
//!    is the identity on its value array, and the copy back that step 1 misses is not needed.
//!    Every access `Y[i, j]` of the clone, at the clone's own row and column iterators, becomes
//!    `Y[o, i, j]`; the init moves back into the clone (it runs once per stored element, as in
//!    the CSR kernel), and `sddmm_init` goes.
//! 4. The COO format shares the CSR arrays: `X_coo`'s values are `x`, its columns `indices`,
//!    its sizes `m`, `n`, `nnz`. What nothing uses any more (the CSR `X`, the axis `J` with its
//!    `indptr`, the rule's own copies of the shared parameters) is dropped, so the kernel takes
//!    sddmm's arguments without `indptr`, plus `rows_coo`: the row of every stored element
//!    ([`coo_rows`], the whole conversion).

use std::collections::{HashMap, HashSet};

use sparsetir_eval::ArgValue;
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::{
    AxisId, BufferDecl, BufferId, BufferShape, Expr, IterAxis, PrimFunc, Stmt, VarId,
};
use sparsetir_transform::{FormatRewriteRule, RuleError};

use super::decomposed_stage1;
use crate::build::BuildError;
use crate::native::{CompileOptions, Kernel};

/// The COO rule script (CSR `A[I, J]` → COO `A[O, I, J]`, rule name `coo`).
pub const COO_RULE: &str = include_str!("../../../ops/rules/coo.rule.sp");

/// The stage-III block of [`coo_sddmm_stage1`]'s compute nest (loops `o`, `i`, `j`, `k`).
pub const COO_SDDMM_BLOCK: &str = "sddmm_coo0";

/// The parameter holding the row of every stored element.
pub const ROWS_PARAM: &str = "rows_coo";

/// The COO rule as its script says (it rewrites a buffer named `A`).
pub fn coo_rule() -> Result<FormatRewriteRule, RuleError> {
    FormatRewriteRule::from_script(COO_RULE)
}

/// The COO rule pointed at `f`'s input CSR matrix: the one sparse buffer over the rule's
/// `axes_before` (`[I, J]`) that no statement writes (csrmm's and spmv's `A`, sddmm's `X`).
/// Outputs are never rewritten (see the module documentation).
pub fn coo_rule_for(f: &PrimFunc) -> Result<FormatRewriteRule, String> {
    let mut rule = coo_rule().map_err(|e| format!("the coo rule script: {e}"))?;
    let written = f.body.written_buffers();
    let candidates: Vec<String> = f
        .buffer_decls
        .iter()
        .filter(|b| {
            let buf = &f.buffers[**b];
            buf.is_sparse()
                && !written.contains(b)
                && buf
                    .axes()
                    .iter()
                    .map(|a| f.axes[*a].name.as_str())
                    .eq(rule.axes_before.iter().map(String::as_str))
        })
        .map(|b| f.buffers[*b].name.clone())
        .collect();
    match candidates.as_slice() {
        [one] => {
            rule.buffers_to_rewrite = vec![one.clone()];
            Ok(rule)
        }
        [] => Err(format!(
            "`{}` has no read-only sparse buffer over [{}] for the coo rule to rewrite",
            f.name,
            rule.axes_before.join(", ")
        )),
        many => Err(format!(
            "`{}` reads several sparse buffers over [{}] ({}): the coo rule rewrites one",
            f.name,
            rule.axes_before.join(", "),
            many.join(", ")
        )),
    }
}

/// The row of every stored element of a CSR matrix, in storage order (`indptr` of length
/// `rows + 1`): the COO format's only new array.
pub fn coo_rows(indptr: &[i32]) -> Vec<i32> {
    let nnz = indptr.last().copied().unwrap_or(0).max(0) as usize;
    let mut rows = Vec::with_capacity(nnz);
    for (i, w) in indptr.windows(2).enumerate() {
        let len = (w[1] - w[0]).max(0) as usize;
        rows.extend(std::iter::repeat_n(i as i32, len));
    }
    rows
}

/// The arguments the COO SDDMM takes besides sddmm's own (which it takes all, but `indptr`):
/// `rows_coo` ([`coo_rows`]).
pub fn coo_sddmm_arguments(rows: Vec<i32>) -> HashMap<String, ArgValue> {
    HashMap::from([(
        ROWS_PARAM.to_string(),
        ArgValue::Array(Tensor {
            shape: vec![rows.len()],
            data: TensorData::I32(rows),
        }),
    )])
}

fn lower_err(m: impl Into<String>) -> BuildError {
    BuildError::Lower(format!("coo sddmm: {}", m.into()))
}

/// The top-level statements of a body (a sequence or a single statement).
fn top_level(body: &mut Stmt) -> Vec<&mut Stmt> {
    match body {
        Stmt::Seq(v) => v.iter_mut().collect(),
        other => vec![other],
    }
}

/// The catalog's `sddmm` (or any function of its form) as SDDMM on COO, stage I (see the module
/// documentation): one iteration `sddmm_coo` over `[O_coo, I_coo, J_coo, K]` with its init,
/// the input and the output over the COO axes.
pub fn coo_sddmm_stage1(sddmm: &PrimFunc) -> Result<PrimFunc, BuildError> {
    let rule = coo_rule_for(sddmm).map_err(lower_err)?;
    let input = rule.buffers_to_rewrite[0].clone();
    let mut f = decomposed_stage1(sddmm, std::slice::from_ref(&rule))?;
    let name = |n: &str| format!("{n}_{}", rule.name);
    let axis = |f: &PrimFunc, n: &str| {
        f.axis_by_name(n)
            .ok_or_else(|| lower_err(format!("the decomposed function has no axis `{n}`")))
    };
    let (o_ax, i_ax, j_ax) = (
        axis(&f, &name("O"))?,
        axis(&f, &name("I"))?,
        axis(&f, &name("J"))?,
    );
    let old = f
        .buffer_by_name(&input)
        .ok_or_else(|| lower_err(format!("no buffer `{input}`")))?;
    let new = f
        .buffer_by_name(&name(&input))
        .ok_or_else(|| lower_err(format!("no buffer `{}`", name(&input))))?;
    let old_axes = f.buffers[old].axes().to_vec();
    let (csr_i, csr_j) = match old_axes.as_slice() {
        [i, j] => (*i, *j),
        _ => return Err(lower_err(format!("`{input}` is not over two axes"))),
    };
    let coo_axes = vec![o_ax, i_ax, j_ax];

    // The clone over the COO axes and the init iteration the pass split off.
    let mut clone_idx = None;
    let mut init_idx = None;
    for (k, s) in top_level(&mut f.body).into_iter().enumerate() {
        if let Stmt::SparseIteration(it) = s {
            if it.axes.iter().any(|a| a.axes().contains(&o_ax)) {
                if clone_idx.replace(k).is_some() {
                    return Err(lower_err("more than one iteration reads the input"));
                }
            } else if it.name.ends_with("_init") {
                init_idx = Some(k);
            }
        }
    }
    let clone_idx = clone_idx.ok_or_else(|| lower_err("no iteration over the COO axes"))?;
    let mut stmts = match std::mem::replace(&mut f.body, Stmt::empty()) {
        Stmt::Seq(v) => v,
        other => vec![other],
    };
    let Stmt::SparseIteration(mut clone) = stmts[clone_idx].clone() else {
        return Err(lower_err("no iteration over the COO axes"));
    };
    // The clone's iterator of each COO axis.
    let var_of = |a: AxisId| -> Option<VarId> {
        let mut k = 0;
        for e in &clone.axes {
            for x in e.axes() {
                if x == a && matches!(e, IterAxis::Axis(_)) {
                    return clone.vars.get(k).copied();
                }
                k += 1;
            }
        }
        None
    };
    let (vo, vi, vj) = match (var_of(o_ax), var_of(i_ax), var_of(j_ax)) {
        (Some(o), Some(i), Some(j)) => (o, i, j),
        _ => return Err(lower_err("the clone does not iterate every COO axis")),
    };
    // The outputs: what the clone stores into over the CSR axes.
    let mut outputs: Vec<BufferId> = Vec::new();
    for s in clone.init.iter().chain(std::iter::once(&clone.body)) {
        s.visit(&mut |t| {
            if let Stmt::Store(st) = t {
                if f.buffers[st.buffer].axes() == old_axes.as_slice()
                    && !outputs.contains(&st.buffer)
                {
                    outputs.push(st.buffer);
                }
            }
        });
    }
    if outputs.is_empty() {
        return Err(lower_err(format!(
            "the clone writes no buffer over the axes of `{input}`"
        )));
    }
    // Every access of an output at the clone's (row, column) becomes one at (o, row, column).
    let mut failure: Option<String> = None;
    let at_coo = |s: &mut Stmt, failure: &mut Option<String>| {
        retarget(s, &outputs, &[vi, vj], &[vo, vi, vj], failure);
    };
    at_coo(&mut clone.body, &mut failure);
    if let Some(init) = clone.init.as_mut() {
        at_coo(init, &mut failure);
    }
    // The init the pass moved out (over the CSR axes) comes back into the clone.
    if let Some(k) = init_idx {
        let Stmt::SparseIteration(init_it) = &stmts[k] else {
            return Err(lower_err("the init is not an iteration"));
        };
        let csr_axes: Vec<AxisId> = init_it.axes.iter().flat_map(|a| a.axes()).collect();
        if csr_axes != [csr_i, csr_j] || clone.init.is_some() {
            return Err(lower_err(format!(
                "unexpected init iteration `{}`",
                init_it.name
            )));
        }
        let sub: HashMap<VarId, VarId> =
            HashMap::from([(init_it.vars[0], vi), (init_it.vars[1], vj)]);
        let mut body = init_it.body.clone();
        body.visit_exprs_mut(&mut |e| {
            e.rewrite_post_order(&mut |x| {
                if let Expr::Var(v) = x {
                    if let Some(n) = sub.get(v) {
                        *x = Expr::Var(*n);
                    }
                }
            })
        });
        body.visit(&mut |t| {
            if let Stmt::Store(st) = t {
                if !outputs.contains(&st.buffer) {
                    failure.get_or_insert(format!(
                        "the init writes `{}`, not an output",
                        f.buffers[st.buffer].name
                    ));
                }
            }
        });
        at_coo(&mut body, &mut failure);
        clone.init = Some(body);
    }
    if let Some(m) = failure {
        return Err(lower_err(m));
    }
    // No other statement may touch an output (its layout changes).
    for (k, s) in stmts.iter().enumerate() {
        if k == clone_idx || Some(k) == init_idx {
            continue;
        }
        let mut touches = false;
        s.visit(&mut |t| {
            if let Stmt::Store(st) = t {
                touches |= outputs.contains(&st.buffer);
            }
            t.for_each_expr(|e| {
                e.visit(&mut |x| {
                    touches |= matches!(x, Expr::Load { buffer, .. } if outputs.contains(buffer));
                })
            });
        });
        if touches {
            return Err(lower_err("another statement accesses the output"));
        }
    }
    stmts[clone_idx] = Stmt::SparseIteration(clone);
    if let Some(k) = init_idx {
        stmts.remove(k);
    }
    f.body = Stmt::seq(stmts);
    for b in &outputs {
        f.buffers[*b].shape = BufferShape::Sparse(coo_axes.clone());
    }

    // The COO arrays are the CSR ones: values, columns and sizes shared.
    let param = |f: &PrimFunc, n: &str| {
        f.param(&name(n))
            .ok_or_else(|| lower_err(format!("no parameter `{}`", name(n))))
    };
    let old_data = f.buffers[old]
        .data_param()
        .ok_or_else(|| lower_err(format!("`{input}` is not bound to a parameter")))?;
    let (ci, cj) = (f.axes[csr_i].clone(), f.axes[csr_j].clone());
    let (Some(indices), Some(nnz)) = (cj.indices, cj.nnz.clone()) else {
        return Err(lower_err(format!(
            "`{input}`'s second axis is not compressed_varied (CSR)"
        )));
    };
    let handles: HashMap<VarId, VarId> =
        HashMap::from([(param(&f, "a")?, old_data), (param(&f, "cols")?, indices)]);
    let scalars: HashMap<VarId, Expr> = HashMap::from([
        (param(&f, "m")?, ci.length.clone()),
        (param(&f, "n")?, cj.length.clone()),
        (param(&f, "nnz")?, nnz),
    ]);
    let subst = |e: &Expr| {
        let mut e = e.clone();
        e.rewrite_post_order(&mut |x| {
            if let Expr::Var(v) = x {
                if let Some(n) = scalars.get(v) {
                    *x = n.clone();
                }
            }
        });
        e
    };
    for a in [o_ax, i_ax, j_ax] {
        let ax = &mut f.axes[a];
        ax.length = subst(&ax.length);
        ax.nnz = ax.nnz.as_ref().map(&subst);
        ax.nnz_cols = ax.nnz_cols.as_ref().map(&subst);
        ax.indices = ax.indices.map(|v| handles.get(&v).copied().unwrap_or(v));
    }
    if let BufferDecl::Match { data } = &mut f.buffers[new].decl {
        *data = handles.get(data).copied().unwrap_or(*data);
    }
    Ok(compact(&f))
}

/// Replaces the indices `[from...]` of every load and store of `bufs` in `s` by `[to...]`;
/// any other access is a failure (its element is not the iteration's own).
fn retarget(
    s: &mut Stmt,
    bufs: &[BufferId],
    from: &[VarId],
    to: &[VarId],
    failure: &mut Option<String>,
) {
    let is_from = |ix: &[Expr]| {
        ix.len() == from.len() && ix.iter().zip(from).all(|(e, v)| e.as_var() == Some(*v))
    };
    let new_ix = || to.iter().map(|v| Expr::Var(*v)).collect::<Vec<_>>();
    let fix_expr = |e: &mut Expr, failure: &mut Option<String>| {
        e.rewrite_post_order(&mut |x| {
            if let Expr::Load { buffer, indices } = x {
                if bufs.contains(buffer) {
                    if is_from(indices) {
                        *indices = new_ix();
                    } else {
                        failure.get_or_insert(
                            "an output is read at another element than the iteration's".into(),
                        );
                    }
                }
            }
        });
    };
    fn walk(s: &mut Stmt, g: &mut dyn FnMut(&mut Stmt)) {
        g(s);
        s.for_each_child_mut(|c| walk(c, g));
    }
    walk(s, &mut |t| {
        if let Stmt::Store(st) = t {
            if bufs.contains(&st.buffer) {
                if is_from(&st.indices) {
                    st.indices = new_ix();
                } else {
                    failure.get_or_insert(
                        "an output is written at another element than the iteration's".into(),
                    );
                }
            }
        }
        if !matches!(t, Stmt::SparseIteration(_)) {
            t.for_each_expr_mut(|e| fix_expr(e, failure));
        }
    });
}

/// `f` without what nothing uses: buffers no statement accesses, axes no kept buffer or
/// iteration needs (with their ancestors kept), parameters nothing mentions (stage I).
fn compact(f: &PrimFunc) -> PrimFunc {
    // Buffers accessed by the body.
    let mut accessed: HashSet<BufferId> = HashSet::new();
    f.body.visit(&mut |s| {
        match s {
            Stmt::Store(st) => {
                accessed.insert(st.buffer);
            }
            Stmt::AssumeBufferDomain { buffer, .. } => {
                accessed.insert(*buffer);
            }
            _ => {}
        }
        s.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    accessed.insert(*buffer);
                }
            })
        });
    });
    // Inits are children of their iterations: `visit` reaches them.
    let mut used_axes: HashSet<AxisId> = HashSet::new();
    for b in &accessed {
        used_axes.extend(f.buffers[*b].axes().iter().copied());
    }
    f.body.visit(&mut |s| {
        if let Stmt::SparseIteration(it) = s {
            for e in &it.axes {
                used_axes.extend(e.axes());
                if let IterAxis::Attach { parent, .. } = e {
                    used_axes.insert(*parent);
                }
            }
        }
    });
    let mut stack: Vec<AxisId> = used_axes.iter().copied().collect();
    while let Some(a) = stack.pop() {
        if let Some(p) = f.axes[a].parent {
            if used_axes.insert(p) {
                stack.push(p);
            }
        }
    }
    let mut out = PrimFunc::new(f.name.clone());
    out.vars = f.vars.clone();
    out.attrs = f.attrs.clone();
    out.span = f.span;
    let mut axis_map: HashMap<AxisId, AxisId> = HashMap::new();
    for (h, a) in f.axes.iter() {
        if used_axes.contains(&h) {
            let mut a = a.clone();
            a.parent = a.parent.and_then(|p| axis_map.get(&p).copied());
            axis_map.insert(h, out.axes.append(a));
        }
    }
    let mut buf_map: HashMap<BufferId, BufferId> = HashMap::new();
    for (h, b) in f.buffers.iter() {
        if accessed.contains(&h) {
            let mut b = b.clone();
            if let BufferShape::Sparse(axes) = &b.shape {
                b.shape = BufferShape::Sparse(axes.iter().map(|a| axis_map[a]).collect());
            }
            buf_map.insert(h, out.buffers.append(b));
        }
    }
    out.buffer_decls = f
        .buffer_decls
        .iter()
        .filter_map(|b| buf_map.get(b).copied())
        .collect();
    let mut body = f.body.clone();
    remap(&mut body, &axis_map, &buf_map);
    out.body = body;
    // Parameters mentioned by a kept axis, a kept buffer or the body.
    let mut used_vars: HashSet<VarId> = HashSet::new();
    let note = |e: &Expr, used: &mut HashSet<VarId>| {
        e.visit(&mut |x| {
            if let Expr::Var(v) = x {
                used.insert(*v);
            }
        })
    };
    for (_, a) in out.axes.iter() {
        for e in std::iter::once(&a.length)
            .chain(a.nnz.as_ref())
            .chain(a.nnz_cols.as_ref())
        {
            note(e, &mut used_vars);
        }
        used_vars.extend(a.indptr);
        used_vars.extend(a.indices);
    }
    for (_, b) in out.buffers.iter() {
        used_vars.extend(b.data_param());
        if let BufferShape::Dense(d) = &b.shape {
            d.iter().for_each(|e| note(e, &mut used_vars));
        }
        for e in b
            .strides
            .iter()
            .chain(b.extra_storage.as_ref())
            .chain(b.default_value.as_ref())
        {
            note(e, &mut used_vars);
        }
    }
    out.body
        .visit(&mut |s| s.for_each_expr(|e| note(e, &mut used_vars)));
    out.params = f
        .params
        .iter()
        .copied()
        .filter(|p| used_vars.contains(p))
        .collect();
    out
}

/// Renames axes and buffers in a stage-I body.
fn remap(s: &mut Stmt, axes: &HashMap<AxisId, AxisId>, bufs: &HashMap<BufferId, BufferId>) {
    match s {
        Stmt::SparseIteration(it) => {
            for e in &mut it.axes {
                *e = e.map_axes(&|a| axes.get(&a).copied().unwrap_or(a));
            }
        }
        Stmt::Store(st) => st.buffer = bufs[&st.buffer],
        Stmt::AssumeBufferDomain { buffer, .. } => *buffer = bufs[buffer],
        Stmt::Allocate(b) => {
            if let Some(n) = bufs.get(b) {
                *b = *n;
            }
        }
        _ => {}
    }
    s.for_each_expr_mut(|e| {
        e.rewrite_post_order(&mut |x| {
            if let Expr::Load { buffer, .. } = x {
                *buffer = bufs[buffer];
            }
        })
    });
    s.for_each_child_mut(|c| remap(c, axes, bufs));
}

/// Builds the COO SDDMM of [`coo_sddmm_stage1`] (`schedule`: schedule-file text for it, e.g.
/// `sparsetir_ops::composable::SDDMM_COO_SCHEDULE`; `specialization` binds scalars such as
/// `feat_size`). The kernel takes sddmm's arguments but `indptr`, plus
/// [`coo_sddmm_arguments`].
pub fn build_coo_sddmm(
    sddmm: &PrimFunc,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
    opts: &CompileOptions,
) -> Result<Kernel, BuildError> {
    let stage1 = coo_sddmm_stage1(sddmm)?;
    crate::build::build(&stage1, schedule, specialization, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_repeat_each_row_once_per_element() {
        assert_eq!(coo_rows(&[0, 2, 2, 5, 6]), vec![0, 0, 2, 2, 2, 3]);
        assert_eq!(coo_rows(&[0, 0, 0]), Vec::<i32>::new());
        assert_eq!(coo_rows(&[0]), Vec::<i32>::new());
        assert_eq!(coo_rows(&[0, 1]), vec![0]);
    }

    #[test]
    fn the_rule_rewrites_the_read_only_csr_buffer() {
        let load = |k: &str| sparsetir_ops::load(k).unwrap();
        assert_eq!(
            coo_rule_for(&load("sddmm")).unwrap().buffers_to_rewrite,
            ["X"]
        );
        assert_eq!(
            coo_rule_for(&load("csrmm")).unwrap().buffers_to_rewrite,
            ["A"]
        );
        assert_eq!(
            coo_rule_for(&load("spmv")).unwrap().buffers_to_rewrite,
            ["A"]
        );
        let e = coo_rule_for(&load("bsrmm")).unwrap_err();
        assert!(e.contains("no read-only sparse buffer over [I, J]"), "{e}");
    }

    #[test]
    fn stage1_iterates_the_coo_axes_with_the_output_in_coo() {
        let f = coo_sddmm_stage1(&sparsetir_ops::load("sddmm").unwrap()).unwrap();
        sparsetir_ir::verify_func(&f).unwrap();
        let names = |axes: &[AxisId]| -> Vec<String> {
            axes.iter().map(|a| f.axes[*a].name.clone()).collect()
        };
        for b in ["X_coo", "Y"] {
            let h = f.buffer_by_name(b).unwrap();
            assert_eq!(
                names(f.buffers[h].axes()),
                ["O_coo", "I_coo", "J_coo"],
                "{b}"
            );
        }
        // The input's values are `x`, the columns `indices`; the CSR `X` and `J` are gone.
        let x = f.buffer_by_name("X_coo").unwrap();
        assert_eq!(f.vars[f.buffers[x].data_param().unwrap()].name, "x");
        let j = f.axis_by_name("J_coo").unwrap();
        assert_eq!(f.vars[f.axes[j].indices.unwrap()].name, "indices");
        assert!(f.buffer_by_name("X").is_none() && f.axis_by_name("J").is_none());
        let Stmt::SparseIteration(it) = &f.body else {
            panic!("one iteration: {:?}", f.body);
        };
        assert_eq!(it.name, "sddmm_coo");
        let axes: Vec<AxisId> = it.axes.iter().flat_map(|a| a.axes()).collect();
        assert_eq!(names(&axes), ["O_coo", "I_coo", "J_coo", "K"]);
        assert!(it.init.is_some());
    }
}
