//! Buffer layouts of the stage II/III interpreter: dense buffers (row-major or strided) addressed
//! by indices, and sparse buffers addressed by per-axis *positions* through the storage model
//! (root groups; varied axes chained under their parent through `indptr`).

use sparsetir_ir::AxisKind;

/// The largest number of values a buffer or a level may have.
pub(crate) const MAX_VALUES: i64 = 1 << 31;

/// One sparse axis with its sizes evaluated.
#[derive(Clone, Debug)]
pub(crate) struct AxisRt {
    pub name: String,
    pub kind: AxisKind,
    /// Index of the parent axis (none for `dense_fixed` roots).
    pub parent: Option<usize>,
    /// Maximum coordinate + 1.
    pub length: i64,
    /// `compressed_fixed`: elements per parent element.
    pub per_parent: i64,
    /// Varied axes: the array slot holding `indptr` (read live at every access).
    pub indptr: Option<usize>,
    /// Number of elements of the parent level (roots: 1).
    pub parent_count: i64,
    /// Number of stored elements of this level in total.
    pub level_count: i64,
}

/// A group of a sparse layout: one dimension of the value array.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    /// The buffer dimension whose position gives the offset inside the group.
    pub slot: usize,
    /// Offset = the global position of that axis (a chain) rather than its local position.
    pub global: bool,
    pub extent: i64,
}

/// How the values of a buffer are laid out in its array.
#[derive(Clone, Debug)]
pub(crate) enum Layout {
    Dense {
        extents: Vec<i64>,
        /// Resolved strides, one per dimension.
        strides: Vec<i64>,
    },
    Sparse {
        /// Axis index per buffer dimension.
        axes: Vec<usize>,
        /// The dimension holding each dimension's parent axis.
        parent_slot: Vec<Option<usize>>,
        groups: Vec<Group>,
    },
}

/// Resolves the strides of a dense buffer. An empty list means compact row-major; a shorter list
/// than the number of dimensions gives the strides of the innermost dimensions and the outer ones
/// are compact over them (so the RFC's `strides=[1]` on a 3-D buffer is row-major).
pub(crate) fn resolve_strides(
    buffer: &str,
    extents: &[i64],
    given: &[i64],
) -> Result<Vec<i64>, String> {
    let n = extents.len();
    if given.len() > n {
        return Err(format!(
            "buffer `{buffer}`: {} strides for {n} dimension(s)",
            given.len()
        ));
    }
    if let Some(s) = given.iter().find(|s| **s < 0) {
        return Err(format!("buffer `{buffer}`: negative stride {s}"));
    }
    let mut out = vec![0i64; n];
    let k = given.len();
    out[n - k..].copy_from_slice(given);
    if n > 0 && k == 0 {
        out[n - 1] = 1;
    }
    let first_given = if k == 0 { n.saturating_sub(1) } else { n - k };
    for d in (0..first_given).rev() {
        out[d] = out[d + 1]
            .checked_mul(extents[d + 1].max(1))
            .filter(|s| *s <= MAX_VALUES)
            .ok_or_else(|| format!("buffer `{buffer}`: stride overflow"))?;
    }
    Ok(out)
}

/// The number of array elements a dense layout spans (the largest offset + 1).
pub(crate) fn dense_size(buffer: &str, extents: &[i64], strides: &[i64]) -> Result<i64, String> {
    if let Some(e) = extents.iter().find(|e| **e < 0) {
        return Err(format!("buffer `{buffer}`: negative extent {e}"));
    }
    if extents.contains(&0) {
        return Ok(0);
    }
    let mut size: i64 = 1;
    for (&e, &s) in extents.iter().zip(strides) {
        size = (e - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(size))
            .filter(|x| *x <= MAX_VALUES)
            .ok_or_else(|| format!("buffer `{buffer}`: more than 2^31 values"))?;
    }
    Ok(size)
}

/// Builds the sparse layout of a buffer over `axes` (indices into `rt`): the layout and the
/// number of stored values (without extra storage).
///
/// Every fixed axis starts a group; a varied axis extends the group of its parent, which must be
/// the last axis of that group. A lone head's group has the head's extent (`length` for
/// `dense_fixed`, `nnz_cols` for `compressed_fixed`) and is addressed by the local position; a
/// chain's group has the level count of its last axis and is addressed by its global position.
pub(crate) fn sparse_layout(
    buffer: &str,
    axes: &[usize],
    rt: &[AxisRt],
) -> Result<(Layout, i64), String> {
    let mut parent_slot = Vec::with_capacity(axes.len());
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: Vec<usize> = Vec::with_capacity(axes.len());
    for (k, &a) in axes.iter().enumerate() {
        let ax = &rt[a];
        let ps = match ax.parent {
            None => None,
            Some(p) => match axes[..k].iter().rposition(|&x| x == p) {
                Some(s) => Some(s),
                None => {
                    return Err(format!(
                        "buffer `{buffer}`: axis `{}` is used without its parent `{}` before it",
                        ax.name, rt[p].name
                    ))
                }
            },
        };
        parent_slot.push(ps);
        if ax.kind.is_fixed() {
            group_of.push(groups.len());
            groups.push(vec![k]);
            continue;
        }
        let Some(ps) = ps else {
            return Err(format!(
                "buffer `{buffer}`: varied axis `{}` has no parent",
                ax.name
            ));
        };
        let g = group_of[ps];
        if groups[g].last() != Some(&ps) {
            return Err(format!(
                "buffer `{buffer}`: varied axis `{}` does not directly follow the chain of its \
                 parent `{}` (unsupported layout)",
                ax.name, rt[axes[ps]].name
            ));
        }
        if rt[axes[groups[g][0]]].kind == AxisKind::CompressedFixed {
            return Err(format!(
                "buffer `{buffer}`: compressed_fixed axis `{}` heads a varied chain \
                 (unsupported layout)",
                rt[axes[groups[g][0]]].name
            ));
        }
        groups[g].push(k);
        group_of.push(g);
    }
    let mut out = Vec::with_capacity(groups.len());
    let mut size: i64 = 1;
    for g in &groups {
        let head = &rt[axes[g[0]]];
        let group = if g.len() == 1 {
            let extent = match head.kind {
                AxisKind::CompressedFixed => head.per_parent,
                _ => head.length,
            };
            Group {
                slot: g[0],
                global: false,
                extent,
            }
        } else {
            let last = g[g.len() - 1];
            Group {
                slot: last,
                global: true,
                extent: rt[axes[last]].level_count,
            }
        };
        size = size
            .checked_mul(group.extent)
            .filter(|s| *s <= MAX_VALUES)
            .ok_or_else(|| format!("buffer `{buffer}`: more than 2^31 values"))?;
        out.push(group);
    }
    Ok((
        Layout::Sparse {
            axes: axes.to_vec(),
            parent_slot,
            groups: out,
        },
        size,
    ))
}

impl Layout {
    /// Number of indices an access takes.
    pub(crate) fn ndim(&self) -> usize {
        match self {
            Layout::Dense { extents, .. } => extents.len(),
            Layout::Sparse { axes, .. } => axes.len(),
        }
    }

    /// The flat offset of the element at `idx` (dense indices, or sparse positions). With
    /// `open_last` (buffers with extra storage) the last index is only checked to be
    /// non-negative: the caller checks the offset against the array size. `indptr(slot, q)`
    /// reads element `q` of the array in `slot`.
    pub(crate) fn offset(
        &self,
        buffer: &str,
        idx: &[i64],
        open_last: bool,
        rt: &[AxisRt],
        indptr: &dyn Fn(usize, i64) -> Result<i64, String>,
    ) -> Result<i64, String> {
        if idx.len() != self.ndim() {
            return Err(format!(
                "buffer `{buffer}` takes {} indices, got {}",
                self.ndim(),
                idx.len()
            ));
        }
        let overflow = || format!("buffer `{buffer}`: offset overflow at {idx:?}");
        let n = idx.len();
        match self {
            Layout::Dense { extents, strides } => {
                let mut off: i64 = 0;
                for d in 0..n {
                    let (c, e) = (idx[d], extents[d]);
                    let open = open_last && d + 1 == n;
                    if c < 0 || (!open && c >= e) {
                        return Err(format!(
                            "buffer `{buffer}`: index {c} is out of range 0..{e} in dimension {d} \
                             (indices {idx:?})"
                        ));
                    }
                    off = c
                        .checked_mul(strides[d])
                        .and_then(|x| x.checked_add(off))
                        .ok_or_else(overflow)?;
                }
                Ok(off)
            }
            Layout::Sparse {
                axes,
                parent_slot,
                groups,
            } => {
                let mut global: Vec<i64> = Vec::with_capacity(n);
                for k in 0..n {
                    let ax = &rt[axes[k]];
                    let p = idx[k];
                    let q = parent_slot[k].map(|s| global[s]).unwrap_or(0);
                    let (start, count) = match ax.kind {
                        AxisKind::DenseFixed => (0, ax.length),
                        AxisKind::CompressedFixed => {
                            let s = q.checked_mul(ax.per_parent).ok_or_else(overflow)?;
                            (s, ax.per_parent)
                        }
                        AxisKind::DenseVaried | AxisKind::CompressedVaried => {
                            if q < 0 || q >= ax.parent_count {
                                return Err(format!(
                                    "buffer `{buffer}`: axis `{}`: parent position {q} is out \
                                     of range 0..{} (positions {idx:?})",
                                    ax.name, ax.parent_count
                                ));
                            }
                            let slot = ax
                                .indptr
                                .ok_or_else(|| format!("axis `{}` has no indptr array", ax.name))?;
                            let lo = indptr(slot, q)?;
                            let hi = indptr(slot, q + 1)?;
                            (lo, hi.checked_sub(lo).ok_or_else(overflow)?)
                        }
                    };
                    let open = open_last && k + 1 == n;
                    if p < 0 || (!open && p >= count) {
                        return Err(format!(
                            "buffer `{buffer}`: position {p} is out of range 0..{count} on axis \
                             `{}` (positions {idx:?})",
                            ax.name
                        ));
                    }
                    global.push(start.checked_add(p).ok_or_else(overflow)?);
                }
                let mut off: i64 = 0;
                for g in groups {
                    let x = if g.global {
                        global[g.slot]
                    } else {
                        idx[g.slot]
                    };
                    off = off
                        .checked_mul(g.extent)
                        .and_then(|o| o.checked_add(x))
                        .ok_or_else(overflow)?;
                }
                Ok(off)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides() {
        assert_eq!(resolve_strides("b", &[2, 3, 4], &[]), Ok(vec![12, 4, 1]));
        assert_eq!(resolve_strides("b", &[2, 3, 4], &[1]), Ok(vec![12, 4, 1]));
        assert_eq!(resolve_strides("b", &[2, 3, 4], &[2]), Ok(vec![24, 8, 2]));
        assert_eq!(resolve_strides("b", &[2, 3], &[1, 5]), Ok(vec![1, 5]));
        assert_eq!(resolve_strides("b", &[], &[]), Ok(vec![]));
        assert!(resolve_strides("b", &[2], &[1, 1]).is_err());
        assert!(resolve_strides("b", &[2], &[-1]).is_err());
        assert_eq!(dense_size("b", &[2, 3], &[1, 5]), Ok(1 + 1 + 10));
        assert_eq!(dense_size("b", &[2, 0], &[0, 1]), Ok(0));
        assert_eq!(dense_size("b", &[], &[]), Ok(1));
    }
}
