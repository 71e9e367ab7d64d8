//! Buffers: sparse buffers (shape = a list of sparse axes) and dense buffers (shape = expressions),
//! bound to a parameter (`match_buffer`) or allocated (`alloc_buffer`/`allocate`).

use crate::axis::AxisId;
use crate::dtype::DType;
use crate::expr::{Expr, VarId};
use crate::span::Span;

/// The shape of a buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferShape {
    /// A sparse buffer over axes (stages I and II).
    Sparse(Vec<AxisId>),
    /// A dense buffer with one extent per dimension (stages II and III, and dense stage-I helpers).
    Dense(Vec<Expr>),
}

/// How a buffer comes into being.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferDecl {
    /// `T.sp.match_buffer(param, ...)` / `T.match_buffer(param, ...)`: the values live in the
    /// memory behind the handle parameter.
    Match { data: VarId },
    /// `T.sp.alloc_buffer(...)` / `T.alloc_buffer(...)`: an intermediate.
    Alloc,
}

/// A buffer declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub decl: BufferDecl,
    pub shape: BufferShape,
    pub dtype: DType,
    /// `"global"`, `"shared"`, `"local"`, `"warp"`, ...
    pub scope: String,
    /// Dense buffers: explicit strides (empty = compact row-major).
    pub strides: Vec<Expr>,
    /// Sparse buffers: extra value slots after the stored elements (`extra_storage=1` for indptr).
    pub extra_storage: Option<Expr>,
    /// What a read of an unstored coordinate yields (default 0).
    pub default_value: Option<Expr>,
    pub span: Span,
}

impl Buffer {
    pub fn is_sparse(&self) -> bool {
        matches!(self.shape, BufferShape::Sparse(_))
    }
    /// The axes of a sparse buffer (empty for dense buffers).
    pub fn axes(&self) -> &[AxisId] {
        match &self.shape {
            BufferShape::Sparse(a) => a,
            BufferShape::Dense(_) => &[],
        }
    }
    /// Number of indices an access takes.
    pub fn ndim(&self) -> usize {
        match &self.shape {
            BufferShape::Sparse(a) => a.len(),
            BufferShape::Dense(d) => d.len(),
        }
    }
    pub fn data_param(&self) -> Option<VarId> {
        match self.decl {
            BufferDecl::Match { data } => Some(data),
            BufferDecl::Alloc => None,
        }
    }
}
