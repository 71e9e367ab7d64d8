//! Packing COO data into the storage of a sparse buffer's axis list (`indptr` / `indices` per
//! axis plus the value array), unpacking it back, and validating user-supplied structure arrays.
//!
//! The storage model (one axis, `q` = global position of the current parent element):
//! - `dense_fixed(length)`: a root; elements `0..length`, position = coordinate.
//! - `dense_varied`: elements under `q` are coordinates `0..indptr[q+1]-indptr[q]`; global
//!   position `indptr[q] + coordinate`; level count `indptr[last]`.
//! - `compressed_fixed` with `c` per parent: element `p` under `q` has coordinate
//!   `indices[q*c + p]`, global position `q*c + p`; level count `parent_count * c`.
//! - `compressed_varied`: element `p` under `q` has coordinate `indices[indptr[q] + p]`, global
//!   position `indptr[q] + p`; level count `indptr[last]`.
//!
//! Value layout: see [`group_layout`]. Packing sums duplicate COO entries into one stored value,
//! always emits the indices of compressed axes sorted (strictly increasing inside each parent),
//! and stores zeros for stored tuples that no entry names (dense axes, `dense_varied` gaps).

use std::ops::Range;

use sparsetir_ir::{AxisKind, DType};

use crate::coo::{Coo, CooError, Field};
use crate::tensor::{NoHostDType, Tensor};

/// The declaration of one axis of a buffer's axis list, as packing needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelSpec {
    pub kind: AxisKind,
    /// Index of the parent axis in the same list (must be earlier); `None` for `dense_fixed`.
    pub parent: Option<usize>,
    /// Known axis length; else the COO's dimension.
    pub length: Option<usize>,
    /// `compressed_fixed`: known per-parent count `c`; else inferred from the first parent.
    pub nnz_cols: Option<usize>,
    /// Compressed axes: indices strictly increase inside each parent.
    pub sorted: bool,
}

impl LevelSpec {
    fn new(kind: AxisKind, parent: Option<usize>) -> LevelSpec {
        LevelSpec {
            kind,
            parent,
            length: None,
            nnz_cols: None,
            sorted: true,
        }
    }
    /// A `dense_fixed` root (length from the data unless given).
    pub fn dense_fixed(length: Option<usize>) -> LevelSpec {
        LevelSpec {
            length,
            ..LevelSpec::new(AxisKind::DenseFixed, None)
        }
    }
    pub fn dense_varied(parent: usize) -> LevelSpec {
        LevelSpec::new(AxisKind::DenseVaried, Some(parent))
    }
    pub fn compressed_fixed(parent: usize, nnz_cols: Option<usize>) -> LevelSpec {
        LevelSpec {
            nnz_cols,
            ..LevelSpec::new(AxisKind::CompressedFixed, Some(parent))
        }
    }
    pub fn compressed_varied(parent: usize) -> LevelSpec {
        LevelSpec::new(AxisKind::CompressedVaried, Some(parent))
    }
    /// Sets the known length.
    pub fn with_length(mut self, length: usize) -> LevelSpec {
        self.length = Some(length);
        self
    }
    /// Sets the `sorted` flag.
    pub fn with_sorted(mut self, sorted: bool) -> LevelSpec {
        self.sorted = sorted;
        self
    }
}

/// The storage of one axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedLevel {
    /// Axis length (coordinates lie in `0..length`).
    pub length: usize,
    /// Level element count (the axis's `nnz`).
    pub count: usize,
    /// `compressed_fixed`: elements per parent.
    pub nnz_cols: Option<usize>,
    /// Varied axes: `parent_count + 1` offsets.
    pub indptr: Option<Vec<i64>>,
    /// Compressed axes: `count` coordinates.
    pub indices: Option<Vec<i64>>,
}

/// A packed buffer: per-axis structure plus the value array.
#[derive(Clone, Debug, PartialEq)]
pub struct Packed {
    pub levels: Vec<PackedLevel>,
    /// `prod(shape) + extra_storage` values, row-major over `shape`.
    pub values: Vec<f64>,
    /// Group extents (the stage III shape of the value array).
    pub shape: Vec<usize>,
}

impl Packed {
    /// The value array as a 1-D tensor of `dtype` (the stage I / II value storage).
    pub fn values_tensor(&self, dtype: DType) -> Result<Tensor, NoHostDType> {
        Tensor::from_f64(dtype, &self.values)
    }
}

impl PackedLevel {
    /// `indptr` as a 1-D tensor of `idtype`, if the axis has one.
    pub fn indptr_tensor(&self, idtype: DType) -> Option<Result<Tensor, NoHostDType>> {
        self.indptr.as_ref().map(|v| Tensor::from_i64(idtype, v))
    }
    /// `indices` as a 1-D tensor of `idtype`, if the axis has one.
    pub fn indices_tensor(&self, idtype: DType) -> Option<Result<Tensor, NoHostDType>> {
        self.indices.as_ref().map(|v| Tensor::from_i64(idtype, v))
    }
}

/// Packing, unpacking and validation errors. Levels and entries are 0-based indices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("{levels} axes given but the COO has rank {rank}")]
    RankMismatch { levels: usize, rank: usize },
    #[error("{levels} axis declarations but {packed} packed levels")]
    LevelCountMismatch { levels: usize, packed: usize },
    #[error("axis {level}: {message}")]
    BadSpec { level: usize, message: String },
    #[error("axis {level}, entry {entry}: coordinate {coord} is outside 0..{bound}")]
    CoordOutOfRange {
        level: usize,
        entry: usize,
        coord: i64,
        bound: usize,
    },
    #[error(
        "axis {level}: parent position {parent} has {count} entries, expected nnz_cols = {expected}"
    )]
    NnzColsMismatch {
        level: usize,
        parent: usize,
        count: usize,
        expected: usize,
    },
    #[error("axis {level}: unsupported value layout: {message}")]
    UnsupportedLayout { level: usize, message: String },
    #[error("axis {level}: `{array}` is missing")]
    MissingArray { level: usize, array: &'static str },
    #[error("axis {level}: `{array}` has {found} entries, expected {expected}")]
    ArrayLength {
        level: usize,
        array: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("axis {level}: {array}[{index}]: {message}")]
    BadArray {
        level: usize,
        array: &'static str,
        index: usize,
        message: String,
    },
    #[error("axis {level}: element count is {found}, expected {expected}")]
    CountMismatch {
        level: usize,
        found: usize,
        expected: usize,
    },
    #[error("the value array has {found} entries, the layout needs {expected}")]
    ValuesTooShort { found: usize, expected: usize },
    #[error("storage too large: {0}")]
    TooLarge(String),
    #[error(transparent)]
    Coo(#[from] CooError),
}

/// One group of the value layout: a fixed head axis and the varied chain hanging under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub head: usize,
    /// Varied axes extending the head, in chain order (each the child of the previous).
    pub chain: Vec<usize>,
    /// Head alone: `length` (dense_fixed) or `c` (compressed_fixed); else the level count of
    /// the chain's last axis.
    pub extent: usize,
}

/// The value layout of a buffer: groups in the order of their heads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupLayout {
    pub groups: Vec<Group>,
    /// For each axis, the index of its group.
    pub level_group: Vec<usize>,
}

impl GroupLayout {
    /// The group extents.
    pub fn shape(&self) -> Vec<usize> {
        self.groups.iter().map(|g| g.extent).collect()
    }
    /// `prod(extents)`, or `None` on overflow.
    pub fn size(&self) -> Option<usize> {
        self.groups
            .iter()
            .try_fold(1usize, |a, g| a.checked_mul(g.extent))
    }
    /// The offset of a stored tuple given, per axis, its global and local positions (the local
    /// position is the index among the elements under the parent; for a root, the coordinate).
    pub fn offset(&self, global: &[usize], local: &[usize]) -> usize {
        self.groups.iter().fold(0usize, |acc, g| {
            let off = match g.chain.last() {
                None => local[g.head],
                Some(&last) => global[last],
            };
            acc * g.extent + off
        })
    }
}

/// Checks parents: `dense_fixed` has none, every other kind has an earlier one.
pub fn validate_spec(levels: &[LevelSpec]) -> Result<(), PackError> {
    for (l, s) in levels.iter().enumerate() {
        match (s.kind, s.parent) {
            (AxisKind::DenseFixed, None) => {}
            (AxisKind::DenseFixed, Some(_)) => {
                return Err(PackError::BadSpec {
                    level: l,
                    message: "a dense_fixed axis is a root and has no parent".into(),
                })
            }
            (k, None) => {
                return Err(PackError::BadSpec {
                    level: l,
                    message: format!("a {} axis needs a parent", k.canonical_name()),
                })
            }
            (_, Some(p)) if p >= l => {
                return Err(PackError::BadSpec {
                    level: l,
                    message: format!("parent {p} must appear earlier in the axis list"),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// The groups of an axis list without extents: `(head, chain)` pairs. Every fixed axis starts a
/// group; a varied axis joins its parent's group and must extend its chain (its parent is the
/// group's last axis so far). A `compressed_fixed` head with a parent cannot carry a chain.
pub fn group_structure(levels: &[LevelSpec]) -> Result<Vec<(usize, Vec<usize>)>, PackError> {
    validate_spec(levels)?;
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut level_group = vec![0usize; levels.len()];
    for (l, s) in levels.iter().enumerate() {
        if s.kind.is_fixed() {
            level_group[l] = groups.len();
            groups.push((l, Vec::new()));
            continue;
        }
        let p = s.parent.unwrap_or(0);
        let gi = level_group[p];
        let (head, chain) = &mut groups[gi];
        let last = chain.last().copied().unwrap_or(*head);
        if last != p {
            return Err(PackError::UnsupportedLayout {
                level: l,
                message: format!(
                    "a varied axis must extend the chain of its parent's group, but its parent \
                     {p} is not the last axis of that group (axis {last} is)"
                ),
            });
        }
        if levels[*head].kind == AxisKind::CompressedFixed {
            return Err(PackError::UnsupportedLayout {
                level: l,
                message: format!(
                    "a varied chain under the compressed_fixed axis {} (which has a parent)",
                    *head
                ),
            });
        }
        chain.push(l);
        level_group[l] = gi;
    }
    Ok(groups)
}

/// The value layout of an axis list with its packed structure (see [`group_structure`] for the
/// grouping rule and [`Group::extent`] for extents). Offsets inside a group: head alone → the
/// head's local position; with a chain → the global position of the chain's last axis; the
/// value offset is the row-major combination of group offsets with the group extents.
pub fn group_layout(
    levels: &[LevelSpec],
    packed_levels: &[PackedLevel],
) -> Result<GroupLayout, PackError> {
    if levels.len() != packed_levels.len() {
        return Err(PackError::LevelCountMismatch {
            levels: levels.len(),
            packed: packed_levels.len(),
        });
    }
    let structure = group_structure(levels)?;
    let mut level_group = vec![0usize; levels.len()];
    let mut groups = Vec::with_capacity(structure.len());
    for (gi, (head, chain)) in structure.into_iter().enumerate() {
        level_group[head] = gi;
        for &c in &chain {
            level_group[c] = gi;
        }
        let extent = match chain.last() {
            Some(&last) => packed_levels[last].count,
            None => match levels[head].kind {
                AxisKind::CompressedFixed => {
                    packed_levels[head].nnz_cols.ok_or(PackError::BadSpec {
                        level: head,
                        message: "nnz_cols is unknown".into(),
                    })?
                }
                _ => packed_levels[head].length,
            },
        };
        groups.push(Group {
            head,
            chain,
            extent,
        });
    }
    Ok(GroupLayout {
        groups,
        level_group,
    })
}

/// The global positions of the elements under parent position `q` (`q` is ignored for roots).
/// Returns `None` when the structure arrays do not cover `q`.
pub fn children(kind: AxisKind, level: &PackedLevel, q: usize) -> Option<Range<usize>> {
    match kind {
        AxisKind::DenseFixed => Some(0..level.length),
        AxisKind::CompressedFixed => {
            let c = level.nnz_cols?;
            let start = q.checked_mul(c)?;
            Some(start..start.checked_add(c)?)
        }
        AxisKind::DenseVaried | AxisKind::CompressedVaried => {
            let ip = level.indptr.as_ref()?;
            let a = usize::try_from(*ip.get(q)?).ok()?;
            let b = usize::try_from(*ip.get(q.checked_add(1)?)?).ok()?;
            (a <= b).then_some(a..b)
        }
    }
}

/// The coordinate of the element at global position `pos` whose fiber starts at `start`.
pub fn coordinate(kind: AxisKind, level: &PackedLevel, start: usize, pos: usize) -> Option<i64> {
    match kind {
        AxisKind::DenseFixed | AxisKind::DenseVaried => i64::try_from(pos - start).ok(),
        _ => level.indices.as_ref()?.get(pos).copied(),
    }
}

fn try_zeroed<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>, PackError> {
    crate::limits::check(n, std::mem::size_of::<T>())
        .map_err(|e| PackError::TooLarge(format!("{what}: {e}")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| PackError::TooLarge(format!("cannot allocate {n} entries for {what}")))?;
    v.resize(n, T::default());
    Ok(v)
}

/// Packs a COO (coordinate `l` of each entry goes to axis `l`) into the storage of the axis
/// list. Duplicate entries are summed. The value array gets `extra_storage` trailing zeros.
pub fn pack(levels: &[LevelSpec], coo: &Coo, extra_storage: usize) -> Result<Packed, PackError> {
    validate_spec(levels)?;
    group_structure(levels)?;
    if coo.rank() != levels.len() {
        return Err(PackError::RankMismatch {
            levels: levels.len(),
            rank: coo.rank(),
        });
    }
    if coo.coords.len() != coo.values.len() {
        return Err(CooError::LengthMismatch {
            coords: coo.coords.len(),
            values: coo.values.len(),
        }
        .into());
    }
    let n = coo.values.len();
    let rank = levels.len();
    for (e, c) in coo.coords.iter().enumerate() {
        if c.len() != rank {
            return Err(CooError::RankMismatch {
                entry: e,
                found: c.len(),
                rank,
            }
            .into());
        }
        for (l, &x) in c.iter().enumerate() {
            let bound = levels[l]
                .length
                .map_or(coo.dims[l], |len| len.min(coo.dims[l]));
            if x < 0 || x as u64 >= bound as u64 {
                return Err(PackError::CoordOutOfRange {
                    level: l,
                    entry: e,
                    coord: x,
                    bound,
                });
            }
        }
    }
    // Per axis: the global and local position of each entry's element.
    let mut global: Vec<Vec<usize>> = Vec::with_capacity(rank);
    let mut local: Vec<Vec<usize>> = Vec::with_capacity(rank);
    let mut packed: Vec<PackedLevel> = Vec::with_capacity(rank);
    for (l, spec) in levels.iter().enumerate() {
        let length = spec.length.unwrap_or(coo.dims[l]);
        let coord = |e: usize| coo.coords[e][l];
        let Some(p) = spec.parent else {
            let pos: Vec<usize> = (0..n).map(|e| coord(e) as usize).collect();
            local.push(pos.clone());
            global.push(pos);
            packed.push(PackedLevel {
                length,
                count: length,
                nnz_cols: None,
                indptr: None,
                indices: None,
            });
            continue;
        };
        let parent_count = packed[p].count;
        let mut keys: Vec<(usize, i64, usize)> =
            (0..n).map(|e| (global[p][e], coord(e), e)).collect();
        keys.sort_unstable();
        let mut gpos = vec![0usize; n];
        let mut lpos = vec![0usize; n];
        let level = match spec.kind {
            AxisKind::DenseFixed => unreachable_root(l)?,
            AxisKind::DenseVaried => {
                let mut indptr: Vec<i64> = try_zeroed(parent_count + 1, "indptr")?;
                for &(q, x, _) in &keys {
                    let len = x + 1;
                    if indptr[q + 1] < len {
                        indptr[q + 1] = len;
                    }
                }
                for q in 0..parent_count {
                    indptr[q + 1] += indptr[q];
                }
                for &(q, x, e) in &keys {
                    gpos[e] = indptr[q] as usize + x as usize;
                    lpos[e] = x as usize;
                }
                let count = indptr[parent_count] as usize;
                PackedLevel {
                    length,
                    count,
                    nnz_cols: None,
                    indptr: Some(indptr),
                    indices: None,
                }
            }
            AxisKind::CompressedVaried => {
                let mut indptr: Vec<i64> = try_zeroed(parent_count + 1, "indptr")?;
                let mut indices: Vec<i64> = Vec::new();
                let mut prev: Option<(usize, i64)> = None;
                for &(q, x, e) in &keys {
                    if prev != Some((q, x)) {
                        indices.push(x);
                        indptr[q + 1] += 1;
                        prev = Some((q, x));
                    }
                    gpos[e] = indices.len() - 1;
                }
                for q in 0..parent_count {
                    indptr[q + 1] += indptr[q];
                }
                for &(q, _, e) in &keys {
                    lpos[e] = gpos[e] - indptr[q] as usize;
                }
                let count = indices.len();
                PackedLevel {
                    length,
                    count,
                    nnz_cols: None,
                    indptr: Some(indptr),
                    indices: Some(indices),
                }
            }
            AxisKind::CompressedFixed => {
                let mut distinct: Vec<usize> = try_zeroed(parent_count, "per-parent counts")?;
                let mut indices: Vec<i64> = Vec::new();
                let mut prev: Option<(usize, i64)> = None;
                for &(q, x, e) in &keys {
                    if prev != Some((q, x)) {
                        indices.push(x);
                        distinct[q] += 1;
                        prev = Some((q, x));
                    }
                    lpos[e] = distinct[q] - 1;
                }
                let c = match spec.nnz_cols {
                    Some(c) => c,
                    None => distinct.first().copied().unwrap_or(0),
                };
                if let Some(q) = distinct.iter().position(|&k| k != c) {
                    return Err(PackError::NnzColsMismatch {
                        level: l,
                        parent: q,
                        count: distinct[q],
                        expected: c,
                    });
                }
                for &(q, _, e) in &keys {
                    gpos[e] = q * c + lpos[e];
                }
                let count = indices.len();
                PackedLevel {
                    length,
                    count,
                    nnz_cols: Some(c),
                    indptr: None,
                    indices: Some(indices),
                }
            }
        };
        packed.push(level);
        global.push(gpos);
        local.push(lpos);
    }
    let layout = group_layout(levels, &packed)?;
    let size = layout
        .size()
        .and_then(|s| s.checked_add(extra_storage))
        .ok_or_else(|| PackError::TooLarge(format!("value array of shape {:?}", layout.shape())))?;
    let mut values: Vec<f64> = try_zeroed(size, "values")?;
    let mut g = vec![0usize; rank];
    let mut lo = vec![0usize; rank];
    for e in 0..n {
        for l in 0..rank {
            g[l] = global[l][e];
            lo[l] = local[l][e];
        }
        values[layout.offset(&g, &lo)] += coo.values[e];
    }
    Ok(Packed {
        levels: packed,
        values,
        shape: layout.shape(),
    })
}

fn unreachable_root(level: usize) -> Result<PackedLevel, PackError> {
    Err(PackError::BadSpec {
        level,
        message: "a dense_fixed axis has no parent".into(),
    })
}

/// Checks structure arrays handed in by users against the axis declarations: `indptr` has
/// `parent_count + 1` entries, starts at 0, never decreases and ends at the level count;
/// `indices` has the level count of entries (`parent_count * c` for `compressed_fixed`), all in
/// `0..length`, strictly increasing inside each parent where `sorted`; `dense_varied` fibers are
/// no longer than `length`; `dense_fixed` counts equal their length.
pub fn validate_levels(
    levels: &[LevelSpec],
    packed_levels: &[PackedLevel],
) -> Result<(), PackError> {
    if levels.len() != packed_levels.len() {
        return Err(PackError::LevelCountMismatch {
            levels: levels.len(),
            packed: packed_levels.len(),
        });
    }
    validate_spec(levels)?;
    for (l, (spec, pl)) in levels.iter().zip(packed_levels).enumerate() {
        let Some(p) = spec.parent else {
            if pl.count != pl.length {
                return Err(PackError::CountMismatch {
                    level: l,
                    found: pl.count,
                    expected: pl.length,
                });
            }
            continue;
        };
        let parent_count = packed_levels[p].count;
        if spec.kind.is_varied() {
            let ip = pl.indptr.as_ref().ok_or(PackError::MissingArray {
                level: l,
                array: "indptr",
            })?;
            let expected = parent_count.checked_add(1).ok_or_else(|| {
                PackError::TooLarge(format!("axis {l}: parent count {parent_count}"))
            })?;
            if ip.len() != expected {
                return Err(PackError::ArrayLength {
                    level: l,
                    array: "indptr",
                    found: ip.len(),
                    expected,
                });
            }
            if ip[0] != 0 {
                return Err(PackError::BadArray {
                    level: l,
                    array: "indptr",
                    index: 0,
                    message: format!("must be 0, found {}", ip[0]),
                });
            }
            for i in 1..ip.len() {
                if ip[i] < ip[i - 1] {
                    return Err(PackError::BadArray {
                        level: l,
                        array: "indptr",
                        index: i,
                        message: format!("decreases ({} after {})", ip[i], ip[i - 1]),
                    });
                }
                if spec.kind == AxisKind::DenseVaried
                    && (ip[i] - ip[i - 1]) as u64 > pl.length as u64
                {
                    return Err(PackError::BadArray {
                        level: l,
                        array: "indptr",
                        index: i,
                        message: format!(
                            "parent {} has a fiber of {} elements, longer than the axis length {}",
                            i - 1,
                            ip[i] - ip[i - 1],
                            pl.length
                        ),
                    });
                }
            }
            let last = ip[ip.len() - 1];
            if last as u64 != pl.count as u64 {
                return Err(PackError::BadArray {
                    level: l,
                    array: "indptr",
                    index: ip.len() - 1,
                    message: format!(
                        "last value {last} differs from the element count {}",
                        pl.count
                    ),
                });
            }
        }
        if spec.kind == AxisKind::CompressedFixed {
            let c = pl.nnz_cols.ok_or_else(|| PackError::BadSpec {
                level: l,
                message: "compressed_fixed needs nnz_cols".into(),
            })?;
            let expected = parent_count.checked_mul(c).ok_or_else(|| {
                PackError::TooLarge(format!("axis {l}: {parent_count} x {c} elements"))
            })?;
            if pl.count != expected {
                return Err(PackError::CountMismatch {
                    level: l,
                    found: pl.count,
                    expected,
                });
            }
        }
        if spec.kind.is_compressed() {
            let ix = pl.indices.as_ref().ok_or(PackError::MissingArray {
                level: l,
                array: "indices",
            })?;
            if ix.len() != pl.count {
                return Err(PackError::ArrayLength {
                    level: l,
                    array: "indices",
                    found: ix.len(),
                    expected: pl.count,
                });
            }
            for (i, &x) in ix.iter().enumerate() {
                if x < 0 || x as u64 >= pl.length as u64 {
                    return Err(PackError::BadArray {
                        level: l,
                        array: "indices",
                        index: i,
                        message: format!("{x} is outside 0..{}", pl.length),
                    });
                }
            }
            // Fewer than two elements cannot be out of order: skip the walk over parents
            // (a `compressed_fixed` level of width 0 has no arrays bounding `parent_count`).
            if spec.sorted && pl.count > 1 {
                for q in 0..parent_count {
                    let r = children(spec.kind, pl, q).ok_or_else(|| PackError::BadArray {
                        level: l,
                        array: "indptr",
                        index: q,
                        message: "does not describe a fiber".into(),
                    })?;
                    for i in r.start + 1..r.end {
                        if ix[i] <= ix[i - 1] {
                            return Err(PackError::BadArray {
                                level: l,
                                array: "indices",
                                index: i,
                                message: format!(
                                    "not strictly increasing inside parent {q} ({} after {})",
                                    ix[i],
                                    ix[i - 1]
                                ),
                            });
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every stored tuple of the buffer with its value: the inverse of [`pack`] (tuples that no
/// entry named come back with their stored value, usually 0). Validates the structure first.
/// The result's `dims` are the axis lengths; entries are in storage order.
pub fn unpack(
    levels: &[LevelSpec],
    packed_levels: &[PackedLevel],
    values: &[f64],
) -> Result<Coo, PackError> {
    validate_levels(levels, packed_levels)?;
    let layout = group_layout(levels, packed_levels)?;
    let size = layout
        .size()
        .ok_or_else(|| PackError::TooLarge(format!("value array of shape {:?}", layout.shape())))?;
    if values.len() < size {
        return Err(PackError::ValuesTooShort {
            found: values.len(),
            expected: size,
        });
    }
    let rank = levels.len();
    let mut out = Coo::empty(packed_levels.iter().map(|p| p.length).collect());
    out.field = Field::Real;
    let mut st = Walk {
        levels,
        packed: packed_levels,
        layout: &layout,
        values,
        global: vec![0; rank],
        local: vec![0; rank],
        coord: vec![0; rank],
        out: &mut out,
    };
    st.walk(0)?;
    Ok(out)
}

struct Walk<'a> {
    levels: &'a [LevelSpec],
    packed: &'a [PackedLevel],
    layout: &'a GroupLayout,
    values: &'a [f64],
    global: Vec<usize>,
    local: Vec<usize>,
    coord: Vec<i64>,
    out: &'a mut Coo,
}

impl Walk<'_> {
    fn walk(&mut self, l: usize) -> Result<(), PackError> {
        if l == self.levels.len() {
            let off = self.layout.offset(&self.global, &self.local);
            self.out.coords.push(self.coord.clone());
            self.out.values.push(self.values[off]);
            return Ok(());
        }
        let spec = &self.levels[l];
        let q = spec.parent.map_or(0, |p| self.global[p]);
        let range = children(spec.kind, &self.packed[l], q).ok_or_else(|| PackError::BadArray {
            level: l,
            array: "indptr",
            index: q,
            message: "does not describe a fiber".into(),
        })?;
        for pos in range.clone() {
            let c = coordinate(spec.kind, &self.packed[l], range.start, pos).ok_or(
                PackError::BadArray {
                    level: l,
                    array: "indices",
                    index: pos,
                    message: "missing".into(),
                },
            )?;
            self.global[l] = pos;
            self.local[l] = pos - range.start;
            self.coord[l] = c;
            self.walk(l + 1)?;
        }
        Ok(())
    }
}
