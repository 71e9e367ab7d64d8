//! The sparsetir IR: one family of types for all three stages (stage = the function attribute
//! `sparse_tir_level`), with declarations in per-function arenas addressed by typed handles.
//!
//! - [`func`]: `PrimFunc` and `IRModule`, owners of every declaration;
//! - [`axis`], [`buffer`]: sparse axes and buffers;
//! - [`expr`], [`stmt`]: expression and statement trees;
//! - [`scalar`]: what the operators compute on constants (shared by evaluators and folder);
//! - [`printer`]: canonical script text (parses back to an equal IR);
//! - [`equal`]: structural equality and hashing up to renaming;
//! - [`verify`]: the per-stage verifier run between passes.

pub mod arena;
pub mod attrs;
pub mod axis;
pub mod buffer;
pub mod dtype;
pub mod expr;
pub mod func;
pub mod scalar;
pub mod span;
pub mod stmt;
pub mod tensor_intrin;

pub use arena::{Arena, Handle};
pub use attrs::{
    AttrValue, Attrs, DistinctScope, ATOMIC_ATTR, DISTINCT_ATTR, MONOTONE_ATTR, WORKSPACE_ATTR,
};
pub use axis::{Axis, AxisId, AxisKind, CoOp, IterAxis, IterKind};
pub use buffer::{Buffer, BufferDecl, BufferShape};
pub use dtype::DType;
pub use expr::{BinOp, BufferId, Expr, Intrinsic, UnOp, Var, VarId};
pub use func::{IRModule, PickError, PrimFunc, Stage, STAGE_ATTR};
pub use span::Span;
pub use stmt::{
    Block, BlockIter, BufferRegion, For, ForKind, IfThenElse, LetStmt, SparseIteration, Stmt,
    Store, While,
};
pub use tensor_intrin::{TensorIntrin, TENSORIZE_ATTR};

pub mod equal;
pub mod printer;
pub mod verify;

#[cfg(feature = "arbitrary")]
pub mod arbitrary;

pub use verify::{verify_func, VerifyError};
