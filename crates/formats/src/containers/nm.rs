//! n:m structured sparse matrices (2:4 being NVIDIA's sparse tensor core format).
//!
//! Every row is cut into groups of `m` consecutive columns; each group stores exactly `n` slots:
//! a value and its position inside the group (the *metadata*, `0..m`). Slots of a group are in
//! strictly increasing position order. A group with fewer than `n` non-zeros fills its remaining
//! slots with zeros at unused positions (the smallest ones). This is the storage of SPEC §2.1's
//! `G = dense_fixed(rows * cols / m)`, `J = compressed_fixed(G, (m, n), metadata)`.
//!
//! Slots are numbered in storage order: row, then group, then slot (`values[k]` and
//! `metadata[k]` belong to slot `k`).
//!
//! # Packed metadata
//!
//! Each position takes `bits` bits: 1 for `m <= 2`, 2 for `m <= 4` (2:4), 4 for `m <= 16`, 8 for
//! `m <= 256`. Positions are packed little-end first as NVIDIA's sparse MMA metadata is: slot `k`
//! occupies bits `bits * (k % per_word) ..` of word `k / per_word`, where `per_word = 16 / bits`
//! for `u16` words (8 positions per word for 2:4, so one `u16` describes a 1x16 row chunk) and
//! `8 / bits` for bytes. The unused high bits of the last word are zero.
//!
//! # Metadata for sparse tensor cores
//!
//! [`tensor_core_metadata_2of4`] lays 2:4 positions out as the staged warpgroup kernels read
//! them (the CUDA writer's `packed_positions`): one `u32` word per row and *run* (32 columns of
//! the row: 8 groups, 16 slots), bits `2 i ..` holding slot `i` of the run, the words of a run
//! for all rows consecutive (`word[k * rows + r]`). A lane's `mma.sp` metadata is then half of
//! a word of each of its two rows, and the copy engine moves the metadata of a run for a block
//! of rows as one contiguous box: a quarter of the bytes of 8-bit positions.
//!
//! # Values for sparse tensor cores
//!
//! [`tensor_core_values_2of4`] lays a 2:4 matrix's values out the same way, run-major (the CUDA
//! writer's `packed_values`): the 16 values of run `k` of row `r` at `16 (k rows + r)`, so that
//! the values of a run for a block of rows are contiguous, and the copy engine fills a stage
//! with rows of 128 bytes instead of one 32-byte segment a row (a quarter of the requests).
//! Within a row, the two halves of 8 values are swapped in rows whose bit 2 is set
//! (`r & 4`): that is the image the copy engine's 32-byte swizzle made of row-major values in
//! shared memory, whose `ldmatrix` reads of 8 rows fall in distinct banks, so the kernels read
//! both layouts alike.

use super::{check_len, mul, FormatError, Value};

/// An n:m structured sparse matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Nm<V> {
    rows: usize,
    cols: usize,
    n: usize,
    m: usize,
    values: Vec<V>,
    metadata: Vec<u8>,
}

/// Checks an n:m pattern against a column count and returns the number of slots per row.
pub(crate) fn check_pattern(cols: usize, n: usize, m: usize) -> Result<usize, FormatError> {
    let bad = |why: &str| FormatError::NmPattern {
        n,
        m,
        why: why.to_string(),
    };
    if n == 0 || n > m {
        return Err(bad("needs 0 < n <= m"));
    }
    if m > 256 {
        return Err(bad("m must be at most 256 (metadata is one byte per slot)"));
    }
    if !cols.is_multiple_of(m) {
        return Err(bad(&format!("groups of {m} do not divide {cols} columns")));
    }
    Ok(cols / m * n)
}

/// Bits per packed position for groups of `m`.
fn meta_bits(m: usize) -> usize {
    match m {
        0..=2 => 1,
        3..=4 => 2,
        5..=16 => 4,
        _ => 8,
    }
}

impl<V: Value> Nm<V> {
    /// A validated n:m matrix: `values` and `metadata` hold `rows * (cols / m) * n` slots.
    pub fn try_new(
        rows: usize,
        cols: usize,
        n: usize,
        m: usize,
        values: Vec<V>,
        metadata: Vec<u8>,
    ) -> Result<Self, FormatError> {
        let per_row = check_pattern(cols, n, m)?;
        let slots = mul(rows, per_row)?;
        let why = || format!("{rows} rows x {} groups x {n} slots", cols / m);
        check_len("values", values.len(), slots, why)?;
        check_len("metadata", metadata.len(), slots, why)?;
        for (pos, &p) in metadata.iter().enumerate() {
            if usize::from(p) >= m {
                return Err(FormatError::OutOfRange {
                    array: "metadata".into(),
                    pos,
                    value: i64::from(p),
                    extent: m,
                });
            }
            if pos % n != 0 && p <= metadata[pos - 1] {
                let group = pos / n;
                let groups = cols / m;
                return Err(FormatError::NmMetadataOrder {
                    row: group / groups,
                    group: group % groups,
                    pos,
                    value: p,
                    prev: metadata[pos - 1],
                });
            }
        }
        Ok(Nm {
            rows,
            cols,
            n,
            m,
            values,
            metadata,
        })
    }

    /// A validated n:m matrix whose metadata comes packed in `u16` words (see the module docs).
    pub fn from_packed_u16(
        rows: usize,
        cols: usize,
        n: usize,
        m: usize,
        values: Vec<V>,
        words: &[u16],
    ) -> Result<Self, FormatError> {
        let slots = mul(rows, check_pattern(cols, n, m)?)?;
        let bits = meta_bits(m);
        let per_word = 16 / bits;
        check_len(
            "packed metadata",
            words.len(),
            slots.div_ceil(per_word),
            || format!("{slots} slots, {per_word} per u16"),
        )?;
        let mask = (1u16 << bits) - 1;
        let metadata = (0..slots)
            .map(|k| ((words[k / per_word] >> (bits * (k % per_word))) & mask) as u8)
            .collect();
        Self::try_new(rows, cols, n, m, values, metadata)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    /// `(n, m)`: at most `n` stored values per group of `m` columns.
    pub fn pattern(&self) -> (usize, usize) {
        (self.n, self.m)
    }
    /// Groups per row (`cols / m`).
    pub fn groups_per_row(&self) -> usize {
        self.cols / self.m
    }
    /// One value per slot (zeros included).
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// One in-group position per slot, unpacked.
    pub fn metadata(&self) -> &[u8] {
        &self.metadata
    }
    /// The column of slot `k`, or `None` when `k` is out of range.
    pub fn column_of_slot(&self, k: usize) -> Option<usize> {
        let p = *self.metadata.get(k)?;
        let group = (k / self.n) % self.groups_per_row();
        Some(group * self.m + usize::from(p))
    }
    /// The metadata packed into `u16` words (see the module docs).
    pub fn packed_metadata_u16(&self) -> Vec<u16> {
        let bits = meta_bits(self.m);
        let per_word = 16 / bits;
        let mut words = vec![0u16; self.metadata.len().div_ceil(per_word)];
        for (k, &p) in self.metadata.iter().enumerate() {
            words[k / per_word] |= u16::from(p) << (bits * (k % per_word));
        }
        words
    }
    /// The metadata packed into bytes (see the module docs).
    pub fn packed_metadata_u8(&self) -> Vec<u8> {
        let bits = meta_bits(self.m);
        let per_byte = 8 / bits;
        let mut bytes = vec![0u8; self.metadata.len().div_ceil(per_byte)];
        for (k, &p) in self.metadata.iter().enumerate() {
            bytes[k / per_byte] |= p << (bits * (k % per_byte));
        }
        bytes
    }
}

/// The slots of `rows` rows of `row_slots` that a tensor-core layout takes, checked: whole runs
/// of 16 slots a row, and `len` (of the `what` given) one a slot.
fn tensor_core_slots(
    what: &str,
    len: usize,
    rows: usize,
    row_slots: usize,
) -> Result<usize, FormatError> {
    if !row_slots.is_multiple_of(16) {
        return Err(FormatError::NmPattern {
            n: 2,
            m: 4,
            why: format!(
                "tensor-core {what} take rows of a multiple of 16 slots (32 columns), got \
                 {row_slots}"
            ),
        });
    }
    let slots = mul(rows, row_slots)?;
    check_len(what, len, slots, || {
        format!("{rows} rows x {row_slots} slots")
    })?;
    Ok(slots)
}

/// 2:4 values (`rows` rows of `row_slots` slots each, row by row: [`Nm::values`] or a kernel's
/// compressed values) laid out for sparse tensor cores (see the module documentation): slot
/// `16 k + 8 h + c` of row `r` at `16 (k rows + r) + 8 (h ^ (r >> 2 & 1)) + c`. `row_slots`
/// must be a multiple of 16 (the row's columns a multiple of 32).
pub fn tensor_core_values_2of4<T: Copy + Default>(
    values: &[T],
    rows: usize,
    row_slots: usize,
) -> Result<Vec<T>, FormatError> {
    tensor_core_values_2of4_by_unit(values, rows, row_slots, 1, 1)
}

/// [`tensor_core_values_2of4`] with the tiles of 16 rows of every block of `16 warps units`
/// rows reordered from warp-major to unit-major: tile `w units + u` of a block (warp `w`'s row
/// unit `u`) goes to place `u warps + w`, so that the tiles of one row unit of consecutive
/// warps are adjacent (what a warpgroup product reading `A` from shared memory through one
/// descriptor takes). `rows` must be whole blocks; `warps = units = 1` keeps the order.
pub fn tensor_core_values_2of4_by_unit<T: Copy + Default>(
    values: &[T],
    rows: usize,
    row_slots: usize,
    warps: usize,
    units: usize,
) -> Result<Vec<T>, FormatError> {
    let block = 16 * warps.max(1) * units.max(1);
    if !rows.is_multiple_of(block) && (warps, units) != (1, 1) {
        return Err(FormatError::NmPattern {
            n: 2,
            m: 4,
            why: format!(
                "tensor-core values by row unit take whole blocks of {block} rows, got {rows}"
            ),
        });
    }
    let (warps, units) = (warps.max(1), units.max(1));
    // The place of row `r`: its tile moved within its block, its row within the tile kept.
    let place = |r: usize| {
        let (b, within) = (r / block, r % block);
        let (tile, i) = (within / 16, within % 16);
        let (w, u) = (tile / units, tile % units);
        b * block + (u * warps + w) * 16 + i
    };
    let slots = tensor_core_slots("values", values.len(), rows, row_slots)?;
    let mut out = vec![T::default(); slots];
    for (r, row) in values.chunks_exact(row_slots.max(1)).enumerate() {
        let p = place(r);
        let swap = (p >> 2) & 1;
        for (k, run) in row.chunks_exact(16).enumerate() {
            let at = 16 * (k * rows + p);
            for (h, half) in run.chunks_exact(8).enumerate() {
                let to = at + 8 * (h ^ swap);
                out[to..to + 8].copy_from_slice(half);
            }
        }
    }
    Ok(out)
}

/// 2:4 positions (one 8-bit integer per slot, `0..4`, row by row: `rows` rows of `row_slots`
/// slots each; [`Nm::metadata`]'s bytes or a kernel's `int8` positions) packed for sparse tensor
/// cores (see the module documentation): `word[k * rows + r]` holds the 16 slots `16 k ..` of
/// row `r` two bits each, slot `16 k + i` at bits `2 i`. `row_slots` must be a multiple of 16
/// (the row's columns a multiple of 32); only the low two bits of each position are kept (the
/// callers validated them).
pub fn tensor_core_metadata_2of4<P: Copy + Into<i16>>(
    positions: &[P],
    rows: usize,
    row_slots: usize,
) -> Result<Vec<u32>, FormatError> {
    let slots = tensor_core_slots("positions", positions.len(), rows, row_slots)?;
    let mut words = vec![0u32; slots / 16];
    for (r, row) in positions.chunks_exact(row_slots.max(1)).enumerate() {
        for (k, run) in row.chunks_exact(16).enumerate() {
            words[k * rows + r] = run
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, &p)| w | (((p.into() & 3) as u32) << (2 * i)));
        }
    }
    Ok(words)
}
