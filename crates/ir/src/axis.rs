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
    /// `assembled=True` (a `compressed_varied` axis of an output): its `indptr`, `indices` and
    /// `nnz` are computed by the kernel, not given — the stored coordinates are exactly the
    /// coordinates the function writes (see ARCHITECTURE.md, "Co-iteration and assembly").
    pub assembled: bool,
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
            assembled: false,
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
    /// `T.sp.union(X, Y, ...)` / `T.sp.intersect(X, Y, ...)`: co-iteration. One iterator variable
    /// walks, in increasing order, the coordinates stored in any (union) or every (intersection)
    /// of the parts' fibers. Each part is an [`IterAxis::Axis`] or an [`IterAxis::Attach`].
    CoIter { op: CoOp, parts: Vec<IterAxis> },
}

/// How a co-iteration combines its parts' coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoOp {
    Union,
    Intersect,
}

impl CoOp {
    /// The constructor name after `T.sp.`.
    pub fn name(self) -> &'static str {
        match self {
            CoOp::Union => "union",
            CoOp::Intersect => "intersect",
        }
    }
}

impl IterAxis {
    /// The axes this entry binds iterator variables for, in order (one per variable; a
    /// co-iteration gives its first part's axis — [`IterAxis::all_axes`] lists every part).
    pub fn axes(&self) -> Vec<AxisId> {
        match self {
            IterAxis::Axis(a) => vec![*a],
            IterAxis::Fuse(v) => v.clone(),
            IterAxis::Attach { axis, .. } => vec![*axis],
            IterAxis::CoIter { parts, .. } => parts
                .first()
                .map(|p| p.axes())
                .unwrap_or_default()
                .into_iter()
                .take(1)
                .collect(),
        }
    }
    /// Every axis the entry walks (a co-iteration's parts included), in order.
    pub fn all_axes(&self) -> Vec<AxisId> {
        match self {
            IterAxis::CoIter { parts, .. } => parts.iter().flat_map(|p| p.all_axes()).collect(),
            _ => self.axes(),
        }
    }
    /// The same entry with every axis replaced by `f(axis)`.
    pub fn map_axes(&self, f: &impl Fn(AxisId) -> AxisId) -> IterAxis {
        match self {
            IterAxis::Axis(a) => IterAxis::Axis(f(*a)),
            IterAxis::Fuse(v) => IterAxis::Fuse(v.iter().map(|a| f(*a)).collect()),
            IterAxis::Attach { axis, parent } => IterAxis::Attach {
                axis: f(*axis),
                parent: f(*parent),
            },
            IterAxis::CoIter { op, parts } => IterAxis::CoIter {
                op: *op,
                parts: parts.iter().map(|p| p.map_axes(f)).collect(),
            },
        }
    }
    /// True for `T.sp.union`/`T.sp.intersect` entries.
    pub fn is_coiter(&self) -> bool {
        matches!(self, IterAxis::CoIter { .. })
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
