//! `remove_preprocess` / `extract_preprocess` (SPEC §3.1): split a decomposed function into the
//! format conversion (run once, ahead of time) and the compute kernel (run many times).
//!
//! - **Stage I:** a preprocess part is a sparse iteration annotated `{"preprocess": True}` (the
//!   `rewrite_<buf>_<name>` copies of `decompose_format`), at the top level of the body (inside
//!   statement sequences).
//! - **Stages II/III:** a preprocess part is a top-level nest (statement of the body, or of the
//!   body of a root block named `root`) whose outermost block is annotated `preprocess` and that
//!   writes only buffers bound to parameters — the lowered format copies. The binary-search nests
//!   that `lower_sparse_iter` also annotates `preprocess` write intermediate buffers: the compute
//!   part may read them, so `remove_preprocess` keeps them, and `extract_preprocess` keeps them
//!   too (a copy may read them).
//!
//! Both functions keep every parameter and declaration, so one set of arguments serves the
//! original, the extracted and the remaining function alike; a function with no preprocess part
//! is returned unchanged by `remove_preprocess`, and with an empty body by `extract_preprocess`.

use sparsetir_ir::{BufferDecl, IRModule, PrimFunc, Stage, Stmt};

/// The function without its preprocess parts.
pub fn remove_preprocess(func: &PrimFunc) -> PrimFunc {
    split(func, false)
}

/// The function with only its preprocess parts.
pub fn extract_preprocess(func: &PrimFunc) -> PrimFunc {
    split(func, true)
}

/// [`remove_preprocess`] on every function of a module.
pub fn remove_preprocess_module(module: &IRModule) -> IRModule {
    IRModule {
        funcs: module.funcs.iter().map(remove_preprocess).collect(),
    }
}

/// [`extract_preprocess`] on every function of a module.
pub fn extract_preprocess_module(module: &IRModule) -> IRModule {
    IRModule {
        funcs: module.funcs.iter().map(extract_preprocess).collect(),
    }
}

fn split(func: &PrimFunc, keep_preprocess: bool) -> PrimFunc {
    let mut f = func.clone();
    let stage = func.stage();
    f.body = filter(func, &func.body, stage, keep_preprocess);
    if keep_preprocess && stage != Stage::I {
        f.body = filter_extracted(&func.body);
    }
    f
}

fn filter(func: &PrimFunc, s: &Stmt, stage: Stage, keep: bool) -> Stmt {
    match s {
        Stmt::Seq(v) => Stmt::seq(v.iter().map(|x| filter(func, x, stage, keep)).collect()),
        Stmt::Block(b) if stage != Stage::I && b.name == "root" && !is_preprocess_block(b) => {
            let mut nb = (**b).clone();
            nb.body = filter(func, &b.body, stage, keep);
            Stmt::Block(Box::new(nb))
        }
        other => {
            if is_preprocess(func, other, stage) == keep {
                other.clone()
            } else {
                Stmt::empty()
            }
        }
    }
}

/// Stages II/III, extraction: every nest whose outermost block is annotated `preprocess`.
fn filter_extracted(s: &Stmt) -> Stmt {
    match s {
        Stmt::Seq(v) => Stmt::seq(v.iter().map(filter_extracted).collect()),
        Stmt::Block(b) if b.name == "root" && !is_preprocess_block(b) => {
            let mut nb = (**b).clone();
            nb.body = filter_extracted(&b.body);
            Stmt::Block(Box::new(nb))
        }
        other => {
            if outer_is_preprocess(other) == Some(true) {
                other.clone()
            } else {
                Stmt::empty()
            }
        }
    }
}

fn is_preprocess_block(b: &sparsetir_ir::Block) -> bool {
    b.annotations.get_int("preprocess").unwrap_or(0) != 0
}

/// Whether a top-level statement is a preprocess part (see the module documentation).
fn is_preprocess(func: &PrimFunc, s: &Stmt, stage: Stage) -> bool {
    if stage == Stage::I {
        return match s {
            Stmt::SparseIteration(it) => it.annotations.get_int("preprocess").unwrap_or(0) != 0,
            _ => false,
        };
    }
    if outer_is_preprocess(s) != Some(true) {
        return false;
    }
    let mut only_params = true;
    let mut any = false;
    s.visit(&mut |x| {
        if let Stmt::Store(st) = x {
            any = true;
            let is_param = func
                .buffers
                .get(st.buffer)
                .is_some_and(|buf| matches!(buf.decl, BufferDecl::Match { .. }));
            only_params &= is_param;
        }
    });
    any && only_params
}

/// Whether the outermost block of a nest is annotated `preprocess` (`None`: no block).
fn outer_is_preprocess(s: &Stmt) -> Option<bool> {
    match s {
        Stmt::Block(b) => Some(is_preprocess_block(b)),
        _ => {
            let mut r = None;
            s.for_each_child(|c| {
                if r.is_none() {
                    r = outer_is_preprocess(c)
                }
            });
            r
        }
    }
}
