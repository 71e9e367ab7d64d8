//! Sparse axes (the levels of a sparse tensor's storage tree) and the axis lists of sparse
//! iterations, including fused and attached axes.

use crate::arena::Handle;
use crate::dtype::DType;
use crate::expr::{Expr, VarId};
use crate::span::Span;

pub type AxisId = Handle<Axis>;

/// Dense/compressed × fixed/varied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AxisKind {
    /// `T.sp.dense_fixed(length)`: a root; positions are coordinates.
    DenseFixed,
    /// `T.sp.dense_varied(parent, (length, nnz), indptr)`.
    DenseVaried,
    /// `T.sp.compressed_fixed(parent, (length, nnz_cols), indices)`.
    CompressedFixed,
    /// `T.sp.compressed_varied(parent, (length, nnz), (indptr, indices))`.
    CompressedVaried,
}

impl AxisKind {
    pub fn is_dense(self) -> bool {
        matches!(self, AxisKind::DenseFixed | AxisKind::DenseVaried)
    }
    pub fn is_compressed(self) -> bool {
        !self.is_dense()
    }
    pub fn is_fixed(self) -> bool {
        matches!(self, AxisKind::DenseFixed | AxisKind::CompressedFixed)
    }
    pub fn is_varied(self) -> bool {
        !self.is_fixed()
    }
    /// The canonical constructor name after `T.sp.`.
    pub fn canonical_name(self) -> &'static str {
        match self {
            AxisKind::DenseFixed => "dense_fixed",
            AxisKind::DenseVaried => "dense_varied",
            AxisKind::CompressedFixed => "compressed_fixed",
            AxisKind::CompressedVaried => "compressed_varied",
        }
    }
}

/// One sparse axis declaration, e.g. `J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))`.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub name: String,
    pub kind: AxisKind,
    /// Required for every kind but `DenseFixed`.
    pub parent: Option<AxisId>,
    /// Maximum coordinate + 1.
    pub length: Expr,
    /// Total stored elements: varied axes only (`dense_varied` may leave it to the data: `None`).
    pub nnz: Option<Expr>,
    /// Elements per parent position: `compressed_fixed` only.
    pub nnz_cols: Option<Expr>,
    /// The handle parameter holding `indptr` (varied axes).
    pub indptr: Option<VarId>,
    /// The handle parameter holding `indices` (compressed axes).
    pub indices: Option<VarId>,
    pub idtype: DType,
    /// Indices strictly increase inside each parent (compressed axes).
    pub sorted: bool,
    pub span: Span,
}

impl Axis {
    /// A `dense_fixed` root of the given length.
    pub fn dense_fixed(name: impl Into<String>, length: Expr) -> Axis {
        Axis {
            name: name.into(),
            kind: AxisKind::DenseFixed,
            parent: None,
            length,
            nnz: None,
            nnz_cols: None,
            indptr: None,
            indices: None,
            idtype: DType::I32,
            sorted: true,
            span: Span::default(),
        }
    }
}

/// One entry of a sparse iteration's axis list.
#[derive(Clone, Debug, PartialEq)]
pub enum IterAxis {
    /// A declared axis.
    Axis(AxisId),
    /// `T.sp.fuse(I, J, ...)`: the stored elements of a parent→child chain as one loop. Binds one
    /// iterator variable per axis.
    Fuse(Vec<AxisId>),
    /// `T.sp.attach(axis, new_parent)`: `axis`'s structure, looked up by `new_parent`'s coordinate.
    Attach { axis: AxisId, parent: AxisId },
}

impl IterAxis {
    /// The axes this entry binds iterator variables for, in order.
    pub fn axes(&self) -> Vec<AxisId> {
        match self {
            IterAxis::Axis(a) => vec![*a],
            IterAxis::Fuse(v) => v.clone(),
            IterAxis::Attach { axis, .. } => vec![*axis],
        }
    }
    /// Number of iterator variables bound.
    pub fn arity(&self) -> usize {
        match self {
            IterAxis::Fuse(v) => v.len(),
            _ => 1,
        }
    }
}

/// Spatial (`S`) or reduction (`R`), for sparse iterations and block iterators alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IterKind {
    Spatial,
    Reduce,
}

impl IterKind {
    pub fn letter(self) -> char {
        match self {
            IterKind::Spatial => 'S',
            IterKind::Reduce => 'R',
        }
    }
    pub fn from_letter(c: char) -> Option<IterKind> {
        match c {
            'S' => Some(IterKind::Spatial),
            'R' => Some(IterKind::Reduce),
            _ => None,
        }
    }
}
