//! Runtime storage of the reference evaluator: validated axis structure (indptr/indices),
//! buffer layouts (value-array groups of the shared storage model), coordinate lookup by
//! plain linear scan, and the growing storage of buffers over assembled axes.

use std::collections::BTreeMap;

use half::{bf16, f16};
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::{AxisId, AxisKind, DType};

use crate::value::Value;

/// The largest number of elements a level or a value array may have.
pub const MAX_ELEMENTS: i64 = 1 << 31;

/// One axis with its evaluated sizes and validated structure arrays.
#[derive(Clone, Debug)]
pub struct AxisData {
    pub name: String,
    pub kind: AxisKind,
    pub parent: Option<AxisId>,
    /// Maximum coordinate + 1.
    pub length: i64,
    /// `compressed_fixed`: elements per parent position.
    pub per_parent: i64,
    /// Number of elements of the parent level (roots: 1).
    pub parent_count: i64,
    /// Varied axes: `parent_count + 1` offsets.
    pub indptr: Vec<i64>,
    /// Compressed axes: one coordinate per element of this level.
    pub indices: Vec<i64>,
    /// Number of stored elements of this level in total.
    pub level_count: i64,
}

impl AxisData {
    /// The global position of the first element under parent position `q` and how many there are.
    /// Roots ignore `q`.
    pub fn fiber(&self, q: i64) -> Result<(i64, i64), String> {
        if self.kind == AxisKind::DenseFixed {
            return Ok((0, self.length));
        }
        if q < 0 || q >= self.parent_count {
            return Err(format!(
                "axis `{}`: parent position {q} is outside 0..{}",
                self.name, self.parent_count
            ));
        }
        match self.kind {
            AxisKind::CompressedFixed => Ok((q * self.per_parent, self.per_parent)),
            _ => {
                let lo = self.indptr[q as usize];
                let hi = self.indptr[q as usize + 1];
                Ok((lo, hi - lo))
            }
        }
    }

    /// The coordinate of the element at global position `g`.
    pub fn coord_at(&self, start: i64, g: i64) -> i64 {
        if self.kind.is_compressed() {
            self.indices[g as usize]
        } else {
            g - start
        }
    }

    /// Finds the element with coordinate `coord` under parent position `q`, by linear scan:
    /// `(global position, local position)`, or `None` when it is not stored.
    pub fn find(&self, q: i64, coord: i64) -> Result<Option<(i64, i64)>, String> {
        let (start, count) = self.fiber(q)?;
        if self.kind.is_dense() {
            return Ok(if (0..count).contains(&coord) {
                Some((start + coord, coord))
            } else {
                None
            });
        }
        for p in 0..count {
            if self.indices[(start + p) as usize] == coord {
                return Ok(Some((start + p, p)));
            }
        }
        Ok(None)
    }
}

/// Checks an `indptr` array: `parent_count + 1` entries, starting at 0, monotone, ending at `nnz`
/// when given; returns the last value.
pub fn check_indptr(
    axis: &str,
    indptr: &[i64],
    parent_count: i64,
    nnz: Option<i64>,
) -> Result<i64, String> {
    if indptr.len() as i64 != parent_count + 1 {
        return Err(format!(
            "axis `{axis}`: indptr has {} entries, expected {} (parent element count + 1)",
            indptr.len(),
            parent_count + 1
        ));
    }
    if indptr[0] != 0 {
        return Err(format!(
            "axis `{axis}`: indptr[0] is {}, expected 0",
            indptr[0]
        ));
    }
    for (q, w) in indptr.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(format!(
                "axis `{axis}`: indptr is not monotone (indptr[{}] = {} > indptr[{}] = {})",
                q,
                w[0],
                q + 1,
                w[1]
            ));
        }
    }
    let last = indptr[indptr.len() - 1];
    if let Some(n) = nnz {
        if last != n {
            return Err(format!(
                "axis `{axis}`: indptr ends at {last}, but the axis nnz is {n}"
            ));
        }
    }
    if last > MAX_ELEMENTS {
        return Err(format!(
            "axis `{axis}`: {last} elements exceed the limit of 2^31"
        ));
    }
    Ok(last)
}

/// Checks that every coordinate of `indices` lies in `0..length`.
pub fn check_indices(axis: &str, indices: &[i64], length: i64) -> Result<(), String> {
    for (i, &c) in indices.iter().enumerate() {
        if c < 0 || c >= length {
            return Err(format!(
                "axis `{axis}`: indices[{i}] = {c} is outside 0..{length}"
            ));
        }
    }
    Ok(())
}

/// Checks that the coordinates of every fiber of a compressed axis strictly increase (sorted,
/// no duplicates), as a co-iterated axis requires; `array` names its `indices` parameter.
pub fn check_increasing(ad: &AxisData, array: &str) -> Result<(), String> {
    if ad.kind.is_dense() {
        return Ok(());
    }
    for q in 0..ad.parent_count {
        let (start, count) = ad.fiber(q)?;
        for g in start + 1..start + count {
            let (a, b) = (ad.indices[(g - 1) as usize], ad.indices[g as usize]);
            if b <= a {
                return Err(format!(
                    "axis `{}`: indices `{array}` do not strictly increase under parent position \
                     {q}: {array}[{}] = {a} then {array}[{g}] = {b} (a co-iterated axis must be \
                     sorted, without duplicates)",
                    ad.name,
                    g - 1
                ));
            }
        }
    }
    Ok(())
}

/// The stored elements of a buffer `(I, JC)` whose last axis `JC` is assembled (its parent `I` a
/// `dense_fixed` root): one ordered map per row `i`, from column coordinate to value. It starts
/// empty; a store inserts the coordinate when absent, so after the run the stored coordinates
/// are exactly those written, in increasing order within each row.
#[derive(Clone, Debug)]
pub struct AssembledValues {
    pub rows: Vec<BTreeMap<i64, Value>>,
    /// The length of the assembled axis (columns lie in `0..cols`).
    pub cols: i64,
}

impl AssembledValues {
    pub fn new(rows: i64, cols: i64) -> AssembledValues {
        AssembledValues {
            rows: vec![BTreeMap::new(); rows.max(0) as usize],
            cols,
        }
    }

    /// The value stored at `(row, col)`, `None` when absent (also out of range).
    pub fn get(&self, row: i64, col: i64) -> Option<Value> {
        let r = usize::try_from(row).ok()?;
        self.rows.get(r)?.get(&col).copied()
    }

    /// Stores `v` at `(row, col)`, inserting the coordinate when absent; an error out of range.
    pub fn set(&mut self, buffer: &str, row: i64, col: i64, v: Value) -> Result<(), String> {
        let nrows = self.rows.len();
        let in_range = (0..nrows as i64).contains(&row) && (0..self.cols).contains(&col);
        if !in_range {
            return Err(format!(
                "buffer `{buffer}`: store at [{row}, {col}] is outside its axes (0..{nrows}, \
                 0..{}), so it cannot be assembled",
                self.cols
            ));
        }
        self.rows[row as usize].insert(col, v);
        Ok(())
    }

    /// Number of stored elements.
    pub fn nnz(&self) -> usize {
        self.rows.iter().map(|r| r.len()).sum()
    }

    /// Every stored value, row-major.
    pub fn values(&self) -> Vec<Value> {
        self.rows.iter().flat_map(|r| r.values().copied()).collect()
    }

    /// The CSR structure of the stored coordinates: `(indptr, indices)`, `indptr` with one entry
    /// per row + 1.
    pub fn structure(&self) -> (Vec<i64>, Vec<i64>) {
        let mut indptr = Vec::with_capacity(self.rows.len() + 1);
        let mut indices = Vec::with_capacity(self.nnz());
        indptr.push(0);
        for r in &self.rows {
            indices.extend(r.keys().copied());
            indptr.push(indices.len() as i64);
        }
        (indptr, indices)
    }
}

/// Where a group's offset comes from.
#[derive(Clone, Debug)]
pub struct Group {
    /// Slot (index into the buffer's axis list) whose position gives the offset.
    pub slot: usize,
    /// Use the global position (a varied chain) or the local one (a fixed head alone).
    pub global: bool,
    pub extent: i64,
}

/// The layout of a buffer's value array.
#[derive(Clone, Debug)]
pub enum Layout {
    /// Sparse: the buffer's axes, the slot of each axis's parent in the list, and the groups.
    Sparse {
        axes: Vec<AxisId>,
        parent_slot: Vec<Option<usize>>,
        groups: Vec<Group>,
    },
    /// Dense: extents and strides (row-major unless given).
    Dense {
        extents: Vec<i64>,
        strides: Vec<i64>,
    },
}

impl Layout {
    /// The axes of a sparse layout (none for a dense one).
    pub fn axes(&self) -> &[AxisId] {
        match self {
            Layout::Sparse { axes, .. } => axes,
            Layout::Dense { .. } => &[],
        }
    }
}

/// Computes the sparse layout of a buffer over `axes` (see the storage model): returns the
/// layout and the number of stored values (without extra storage).
pub fn sparse_layout(
    buffer: &str,
    axes: &[AxisId],
    data: &[AxisData],
) -> Result<(Layout, i64), String> {
    let mut parent_slot = Vec::with_capacity(axes.len());
    // Per group: (head slot, chain of slots).
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of_slot: Vec<usize> = Vec::with_capacity(axes.len());
    for (k, &a) in axes.iter().enumerate() {
        let ad = &data[a.index()];
        let ps = match ad.parent {
            None => None,
            Some(p) => match axes[..k].iter().rposition(|&x| x == p) {
                Some(s) => Some(s),
                None => {
                    return Err(format!(
                        "buffer `{buffer}`: axis `{}` appears without its parent `{}` before it",
                        ad.name,
                        data[p.index()].name
                    ))
                }
            },
        };
        parent_slot.push(ps);
        if ad.kind.is_fixed() {
            group_of_slot.push(groups.len());
            groups.push(vec![k]);
        } else {
            // A varied axis always has a parent, found above.
            let ps = ps.ok_or_else(|| format!("axis `{}` has no parent", ad.name))?;
            let g = group_of_slot[ps];
            if groups[g].last() != Some(&ps) {
                return Err(format!(
                    "buffer `{buffer}`: varied axis `{}` does not extend the chain of its parent \
                     `{}` (unsupported layout)",
                    ad.name,
                    data[axes[ps].index()].name
                ));
            }
            groups[g].push(k);
            group_of_slot.push(g);
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    let mut size: i64 = 1;
    for g in &groups {
        let head = &data[axes[g[0]].index()];
        let group = if g.len() == 1 {
            let extent = if head.kind == AxisKind::CompressedFixed {
                head.per_parent
            } else {
                head.length
            };
            Group {
                slot: g[0],
                global: false,
                extent,
            }
        } else {
            if head.kind == AxisKind::CompressedFixed {
                return Err(format!(
                    "buffer `{buffer}`: compressed_fixed axis `{}` heads a varied chain \
                     (unsupported layout)",
                    head.name
                ));
            }
            let last = g[g.len() - 1];
            Group {
                slot: last,
                global: true,
                extent: data[axes[last].index()].level_count,
            }
        };
        size = size
            .checked_mul(group.extent)
            .filter(|s| *s <= MAX_ELEMENTS)
            .ok_or_else(|| {
                format!("buffer `{buffer}`: the value array would exceed 2^31 elements")
            })?;
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

/// Number of values a dense layout needs.
pub fn dense_size(buffer: &str, extents: &[i64], strides: &[i64]) -> Result<i64, String> {
    let too_big = || format!("buffer `{buffer}`: the value array would exceed 2^31 elements");
    if let Some(e) = extents.iter().find(|e| **e < 0) {
        return Err(format!("buffer `{buffer}`: negative extent {e}"));
    }
    if extents.contains(&0) {
        return Ok(0);
    }
    let mut size: i64 = 1;
    for (d, &e) in extents.iter().enumerate() {
        if strides.is_empty() {
            size = size
                .checked_mul(e)
                .filter(|s| *s <= MAX_ELEMENTS)
                .ok_or_else(too_big)?;
        } else {
            let s = strides[d];
            if s < 0 {
                return Err(format!("buffer `{buffer}`: negative stride {s}"));
            }
            let add = (e - 1).checked_mul(s).ok_or_else(too_big)?;
            size = size
                .checked_add(add)
                .filter(|s| *s <= MAX_ELEMENTS)
                .ok_or_else(too_big)?;
        }
    }
    Ok(size)
}

impl Layout {
    /// The value offset of the element at `coords`: `Ok(None)` when the buffer does not store it
    /// (a sparse buffer's absent coordinates, a dense buffer's outside its shape); an error for
    /// a wrong number of indices.
    ///
    /// `hints[k]`, when present, is the element of the buffer's `k`-th axis that an enclosing
    /// iteration currently visits, `(global position, coordinate)`, given because index `k` is
    /// that iteration's own iterator variable. If the element lies under the parent found so far,
    /// the access resolves to it: identical to the search for unique coordinates, and the only
    /// sound choice where a fiber repeats a coordinate (padded ELL rows).
    pub fn offset(
        &self,
        buffer: &str,
        coords: &[i64],
        data: &[AxisData],
        hints: &[Option<(i64, i64)>],
    ) -> Result<Option<usize>, String> {
        match self {
            Layout::Dense { extents, strides } => {
                if coords.len() != extents.len() {
                    return Err(format!(
                        "buffer `{buffer}` takes {} indices, got {}",
                        extents.len(),
                        coords.len()
                    ));
                }
                let mut off: i64 = 0;
                for (d, (&c, &e)) in coords.iter().zip(extents).enumerate() {
                    if c < 0 || c >= e {
                        // Not stored (SPEC §2.3): a read gives the default, a write is skipped.
                        return Ok(None);
                    }
                    off = if strides.is_empty() {
                        off * e + c
                    } else {
                        off + c * strides[d]
                    };
                }
                Ok(Some(off as usize))
            }
            Layout::Sparse {
                axes,
                parent_slot,
                groups,
            } => {
                if coords.len() != axes.len() {
                    return Err(format!(
                        "buffer `{buffer}` takes {} indices, got {}",
                        axes.len(),
                        coords.len()
                    ));
                }
                // (global, local) position per slot.
                let mut pos: Vec<(i64, i64)> = Vec::with_capacity(axes.len());
                for (k, &a) in axes.iter().enumerate() {
                    let q = match parent_slot[k] {
                        Some(s) => pos[s].0,
                        None => 0,
                    };
                    let ad = &data[a.index()];
                    if let Some((g, c)) = hints.get(k).copied().flatten() {
                        let (start, count) = ad.fiber(q)?;
                        if c == coords[k] && (start..start + count).contains(&g) {
                            pos.push((g, g - start));
                            continue;
                        }
                    }
                    match ad.find(q, coords[k])? {
                        Some(p) => pos.push(p),
                        None => return Ok(None),
                    }
                }
                let mut off: i64 = 0;
                for g in groups {
                    let (global, local) = pos[g.slot];
                    off = off * g.extent + if g.global { global } else { local };
                }
                Ok(Some(off as usize))
            }
        }
    }
}

/// Reads element `i` of `t` as a value of the tensor's dtype.
pub fn load(t: &Tensor, i: usize) -> Option<Value> {
    Some(match &t.data {
        TensorData::Bool(v) => Value::Bool(*v.get(i)?),
        TensorData::I8(v) => Value::Int(*v.get(i)? as i128, DType::I8),
        TensorData::I16(v) => Value::Int(*v.get(i)? as i128, DType::I16),
        TensorData::I32(v) => Value::Int(*v.get(i)? as i128, DType::I32),
        TensorData::I64(v) => Value::Int(*v.get(i)? as i128, DType::I64),
        TensorData::U8(v) => Value::Int(*v.get(i)? as i128, DType::U8),
        TensorData::U16(v) => Value::Int(*v.get(i)? as i128, DType::U16),
        TensorData::U32(v) => Value::Int(*v.get(i)? as i128, DType::U32),
        TensorData::U64(v) => Value::Int(*v.get(i)? as i128, DType::U64),
        TensorData::F16(v) => Value::Float(v.get(i)?.to_f64(), DType::F16),
        TensorData::BF16(v) => Value::Float(v.get(i)?.to_f64(), DType::BF16),
        TensorData::F32(v) => Value::Float(*v.get(i)? as f64, DType::F32),
        TensorData::F64(v) => Value::Float(*v.get(i)?, DType::F64),
    })
}

/// Writes `x` (already converted to the tensor's dtype) to element `i`; false when out of range.
pub fn store(t: &mut Tensor, i: usize, x: Value) -> bool {
    let n = x.as_i128();
    let f = x.as_f64();
    match &mut t.data {
        TensorData::Bool(v) => v.get_mut(i).map(|s| *s = x.truthy()),
        TensorData::I8(v) => v.get_mut(i).map(|s| *s = n as i8),
        TensorData::I16(v) => v.get_mut(i).map(|s| *s = n as i16),
        TensorData::I32(v) => v.get_mut(i).map(|s| *s = n as i32),
        TensorData::I64(v) => v.get_mut(i).map(|s| *s = n as i64),
        TensorData::U8(v) => v.get_mut(i).map(|s| *s = n as u8),
        TensorData::U16(v) => v.get_mut(i).map(|s| *s = n as u16),
        TensorData::U32(v) => v.get_mut(i).map(|s| *s = n as u32),
        TensorData::U64(v) => v.get_mut(i).map(|s| *s = n as u64),
        TensorData::F16(v) => v.get_mut(i).map(|s| *s = f16::from_f64(f)),
        TensorData::BF16(v) => v.get_mut(i).map(|s| *s = bf16::from_f64(f)),
        TensorData::F32(v) => v.get_mut(i).map(|s| *s = f as f32),
        TensorData::F64(v) => v.get_mut(i).map(|s| *s = f),
    }
    .is_some()
}

/// An index array (`indptr`/`indices`) of any integer dtype as `i64` values.
pub fn index_array(t: &Tensor) -> Option<Vec<i64>> {
    let d = t.dtype();
    if !d.is_integer() {
        return None;
    }
    let mut out = Vec::with_capacity(t.len());
    for i in 0..t.len() {
        let v = load(t, i)?.as_i128();
        // u64 values beyond i64 range cannot be valid positions or coordinates anyway.
        out.push(i64::try_from(v).unwrap_or(i64::MAX));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsetir_ir::DType;

    #[test]
    fn round_trips_every_dtype() {
        for dt in DType::ALL {
            if dt == DType::Handle {
                continue;
            }
            let mut t = Tensor::zeros(dt, vec![3]).expect("host dtype");
            let x = Value::from_i128(-3, dt);
            assert!(store(&mut t, 1, x));
            assert_eq!(load(&t, 1), Some(x), "{dt}");
            assert_eq!(load(&t, 0), Some(Value::from_i128(0, dt)), "{dt}");
            assert_eq!(load(&t, 3), None);
            assert!(!store(&mut t, 3, x));
        }
        let mut t = Tensor::zeros(DType::U64, vec![1]).expect("host dtype");
        let big = Value::Int(u64::MAX as i128, DType::U64);
        assert!(store(&mut t, 0, big));
        assert_eq!(load(&t, 0), Some(big));
    }
}
