//! Coordinate-list (COO) sparse tensors: the common in-memory form of every file reader and the
//! input of packing.

use std::collections::BTreeMap;

/// What kind of values a COO carries (the Matrix Market "field").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// Arbitrary real values.
    Real,
    /// Integer values (stored as `f64`).
    Integer,
    /// Structure only: every value is `1.0`.
    Pattern,
}

/// A sparse tensor as a list of entries. Coordinates are 0-based. Duplicate coordinates are
/// allowed; packing sums them (see [`Coo::summed`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Coo {
    /// Extent of each dimension.
    pub dims: Vec<usize>,
    /// One coordinate tuple per entry, each of length `dims.len()`.
    pub coords: Vec<Vec<i64>>,
    /// One value per entry.
    pub values: Vec<f64>,
    pub field: Field,
}

/// An inconsistent [`Coo`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CooError {
    #[error("COO has {coords} coordinate tuples but {values} values")]
    LengthMismatch { coords: usize, values: usize },
    #[error("COO entry {entry} has {found} coordinates, expected rank {rank}")]
    RankMismatch {
        entry: usize,
        found: usize,
        rank: usize,
    },
    #[error("COO entry {entry}: coordinate {coord} of dimension {dim} is outside 0..{extent}")]
    OutOfRange {
        entry: usize,
        dim: usize,
        coord: i64,
        extent: usize,
    },
}

impl Coo {
    /// A validated COO.
    pub fn new(
        dims: Vec<usize>,
        coords: Vec<Vec<i64>>,
        values: Vec<f64>,
        field: Field,
    ) -> Result<Coo, CooError> {
        let coo = Coo {
            dims,
            coords,
            values,
            field,
        };
        coo.validate()?;
        Ok(coo)
    }

    /// An empty real COO of the given dimensions.
    pub fn empty(dims: Vec<usize>) -> Coo {
        Coo {
            dims,
            coords: Vec::new(),
            values: Vec::new(),
            field: Field::Real,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of entries (duplicates counted).
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// Checks lengths, ranks and coordinate ranges.
    pub fn validate(&self) -> Result<(), CooError> {
        if self.coords.len() != self.values.len() {
            return Err(CooError::LengthMismatch {
                coords: self.coords.len(),
                values: self.values.len(),
            });
        }
        let rank = self.rank();
        for (entry, c) in self.coords.iter().enumerate() {
            if c.len() != rank {
                return Err(CooError::RankMismatch {
                    entry,
                    found: c.len(),
                    rank,
                });
            }
            for (dim, (&coord, &extent)) in c.iter().zip(&self.dims).enumerate() {
                if coord < 0 || coord as u64 >= extent as u64 {
                    return Err(CooError::OutOfRange {
                        entry,
                        dim,
                        coord,
                        extent,
                    });
                }
            }
        }
        Ok(())
    }

    /// The entries sorted lexicographically by coordinates, with duplicates summed.
    pub fn summed(&self) -> Coo {
        let mut map: BTreeMap<&[i64], f64> = BTreeMap::new();
        for (c, v) in self.coords.iter().zip(&self.values) {
            *map.entry(c.as_slice()).or_insert(0.0) += *v;
        }
        let mut coords = Vec::with_capacity(map.len());
        let mut values = Vec::with_capacity(map.len());
        for (c, v) in map {
            coords.push(c.to_vec());
            values.push(v);
        }
        Coo {
            dims: self.dims.clone(),
            coords,
            values,
            field: self.field,
        }
    }

    /// Sorts the entries lexicographically by coordinates (stable: duplicates keep their order).
    pub fn sort(&mut self) {
        let mut order: Vec<usize> = (0..self.values.len()).collect();
        order.sort_by(|&a, &b| self.coords[a].cmp(&self.coords[b]));
        let coords = order
            .iter()
            .map(|&i| std::mem::take(&mut self.coords[i]))
            .collect();
        let values = order.iter().map(|&i| self.values[i]).collect();
        self.coords = coords;
        self.values = values;
    }

    /// The dense row-major array of this COO (duplicates summed), or `None` when the element
    /// count overflows or the COO is invalid.
    pub fn to_dense(&self) -> Option<Vec<f64>> {
        self.validate().ok()?;
        let n = self
            .dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))?;
        let mut out = Vec::new();
        out.try_reserve_exact(n).ok()?;
        out.resize(n, 0.0);
        for (c, v) in self.coords.iter().zip(&self.values) {
            let mut off = 0usize;
            for (&x, &d) in c.iter().zip(&self.dims) {
                off = off * d + x as usize;
            }
            out[off] += *v;
        }
        Some(out)
    }
}
