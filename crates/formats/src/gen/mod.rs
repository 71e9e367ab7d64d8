//! Deterministic (by seed) generators of sparse matrices and attention masks, each returning a
//! 2-D [`Coo`] sorted by `(row, column)` without duplicates.
//!
//! | generator | function | values |
//! |---|---|---|
//! | Graph500 R-MAT graph | [`rmat`] | pattern (1.0) |
//! | Chung–Lu power-law graph (undirected) | [`chung_lu`] | pattern (1.0) |
//! | uniform random | [`uniform`] | real in `(0, 1]` |
//! | banded | [`banded`] | real in `(0, 1]` |
//! | block-sparse | [`block_sparse`] | real in `(0, 1]` |
//! | Longformer attention mask | [`longformer`] | pattern (1.0) |
//! | Pixelfly attention mask | [`pixelfly`] | pattern (1.0) |
//! | random n:m (2:4) mask | [`mask_nm`], [`mask_2_4`] | pattern (1.0) |
//!
//! Every random generator draws from a ChaCha8 stream seeded with the given `u64`, so the same
//! parameters and seed give the same matrix on every platform.

mod block;
mod chung_lu;
mod masks;
mod rmat;
mod uniform;

pub use block::block_sparse;
pub use chung_lu::{chung_lu, chung_lu_weights};
pub use masks::{longformer, mask_2_4, mask_nm, pixelfly};
pub use rmat::{rmat, RmatParams};
pub use uniform::{banded, uniform};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::coo::{Coo, Field};

/// The most entries a generator will produce (larger requests are refused, not attempted).
pub const MAX_ENTRIES: usize = 1 << 31;

/// Why a generator refused its parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenError {
    /// A parameter is outside its domain (`name` is the parameter, as the CLI spells it).
    #[error("invalid `{name}`: {message}")]
    Invalid { name: &'static str, message: String },
    /// The requested matrix would hold more than [`MAX_ENTRIES`] entries or overflow.
    #[error("the requested matrix is too large ({0})")]
    TooLarge(String),
    /// Random sampling could not reach the requested number of distinct entries.
    #[error("could only draw {found} distinct edges of the {wanted} requested after {rounds} rounds (the distribution is too concentrated for this many edges)")]
    Saturated {
        wanted: usize,
        found: usize,
        rounds: usize,
    },
}

pub(crate) fn invalid(name: &'static str, message: impl Into<String>) -> GenError {
    GenError::Invalid {
        name,
        message: message.into(),
    }
}

pub(crate) fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// `rows * cols` as a checked product below [`MAX_ENTRIES`]-independent overflow.
pub(crate) fn area(rows: usize, cols: usize) -> Result<usize, GenError> {
    rows.checked_mul(cols)
        .ok_or_else(|| GenError::TooLarge(format!("{rows} x {cols} overflows")))
}

pub(crate) fn check_count(n: usize) -> Result<(), GenError> {
    if n > MAX_ENTRIES {
        Err(GenError::TooLarge(format!(
            "{n} entries, the limit is {MAX_ENTRIES}"
        )))
    } else {
        Ok(())
    }
}

/// A 2-D COO from `(row, col)` pairs; sorts them (with their values) by position.
/// The pairs must be distinct and in range.
pub(crate) fn coo_from_pairs(
    rows: usize,
    cols: usize,
    mut pairs: Vec<(u32, u32)>,
    values: Option<Vec<f64>>,
) -> Coo {
    let (field, values) = match values {
        Some(mut v) => {
            let mut order: Vec<usize> = (0..pairs.len()).collect();
            order.sort_unstable_by_key(|&k| pairs[k]);
            let sorted_pairs = order.iter().map(|&k| pairs[k]).collect();
            let sorted_values = order.iter().map(|&k| v[k]).collect();
            pairs = sorted_pairs;
            v = sorted_values;
            (Field::Real, v)
        }
        None => {
            pairs.sort_unstable();
            (Field::Pattern, vec![1.0; pairs.len()])
        }
    };
    Coo {
        dims: vec![rows, cols],
        coords: pairs
            .into_iter()
            .map(|(r, c)| vec![r as i64, c as i64])
            .collect(),
        values,
        field,
    }
}

/// One random value in `(0, 1]`.
pub(crate) fn value(rng: &mut ChaCha8Rng) -> f64 {
    use rand::Rng;
    1.0 - rng.random::<f64>()
}

/// Checks a dimension fits the `u32` coordinates the generators use internally.
pub(crate) fn check_dim(name: &'static str, n: usize) -> Result<(), GenError> {
    if n > u32::MAX as usize {
        Err(invalid(name, format!("{n} exceeds {}", u32::MAX)))
    } else {
        Ok(())
    }
}
