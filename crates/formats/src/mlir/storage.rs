//! Packing a COO tensor into the level storage an MLIR encoding describes (TACO/MLIR
//! semantics), and printing that storage in the seed's `positions[l] : ...` form.
//!
//! Semantics of [`Encoding::pack`]:
//! - Duplicate COO coordinates are summed first. Each entry's level coordinates come from the
//!   level expressions; the entries are then sorted by level coordinates, except that a
//!   `nonordered` level keeps the first-appearance order of its coordinates inside each parent.
//! - Level sizes follow from the dimension sizes through the expressions (interval arithmetic:
//!   `i floordiv 2` over 4 rows has size 2, `j mod 4` has size 4).
//! - `dense` / `batch`: every coordinate `0..size` under every parent position is stored;
//!   positions are `parent * size + coordinate`.
//! - `compressed`: `positions[l]` (parents + 1 offsets) and `coordinates[l]`. A `nonunique`
//!   level stores one coordinate per distinct tuple of its own and the following singleton
//!   levels' coordinates (the COO scheme).
//! - `loose_compressed`: `positions[l]` holds a `lo, hi` pair per parent position (interleaved:
//!   `lo0 hi0 lo1 hi1 ...`); packing produces no holes.
//! - `singleton`: `coordinates[l]` only, exactly one per parent position.
//! - `structured[n, m]`: the level size must be `m`; each parent position stores `n`
//!   coordinates: those of its entries plus, when it has fewer than `n`, the smallest unused
//!   coordinates (value = the implicit value), ascending. More than `n` entries is an error.
//! - Values: one per position of the last level; positions no entry names (dense padding,
//!   structured padding) hold `implicitVal` (default 0).
//! - Symbols: a level expression that is a product of one symbol, one dimension and optional
//!   constants (the seed's ELL `c * 3 * i`) is a *counting* level: the symbol's value for an
//!   entry is its rank among the entries with the same coordinate in that dimension, and the
//!   level size is the product of the constants (or `symbol_values[s]` when given; else the
//!   largest count). Any other use of a symbol takes its value from `symbol_values`.
//! - Slices describe a view of the stored tensor: the COO is the underlying tensor, and static
//!   slice bounds are checked against its dimensions.
//! - `posWidth` / `crdWidth` (when not 0) bound the stored positions / coordinates.

use std::collections::HashMap;

use super::{AffineExpr, DimSlice, Encoding, EncodingError, LevelFormat};
use crate::coo::Coo;

/// The packed storage of an encoding: per level, optional positions and coordinates, and the
/// values.
#[derive(Clone, Debug, PartialEq)]
pub struct Storage {
    /// Number of coordinates of each level (`m` for `structured[n, m]`).
    pub level_sizes: Vec<usize>,
    /// `compressed`: `parents + 1` offsets; `loose_compressed`: `lo, hi` per parent
    /// (interleaved); `None` for the other formats.
    pub positions: Vec<Option<Vec<i64>>>,
    /// Stored coordinates of `compressed`, `loose_compressed`, `singleton` and `structured`
    /// levels; `None` for `dense` and `batch`.
    pub coordinates: Vec<Option<Vec<i64>>>,
    /// One value per stored position of the last level.
    pub values: Vec<f64>,
}

/// Largest number of positions a level may have (guards against huge dense levels).
const MAX_POSITIONS: usize = 1 << 30;

fn num_text(v: f64) -> String {
    // Rust's shortest round-trip form: integral values print without a fraction ("1", "0").
    format!("{v}")
}

impl Storage {
    /// The seed's form, one line per array, levels in order (positions before coordinates),
    /// values last:
    /// ```text
    /// positions[1] : 0 2 3
    /// coordinates[1] : 0 2 1
    /// values : 1 2 0 3 4 0 0 5 6 7 8 0
    /// ```
    /// Integers print in decimal; values in Rust's shortest round-trip notation (`1`, `0.5`,
    /// `-2`, `1e-7`, `NaN`, `inf`). Every line ends with a newline; an empty array prints as
    /// `values :`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, head: String, items: Vec<String>| {
            out.push_str(&head);
            out.push_str(" :");
            for it in items {
                out.push(' ');
                out.push_str(&it);
            }
            out.push('\n');
        };
        for l in 0..self.level_sizes.len() {
            if let Some(Some(p)) = self.positions.get(l) {
                line(
                    &mut out,
                    format!("positions[{l}]"),
                    p.iter().map(|v| v.to_string()).collect(),
                );
            }
            if let Some(Some(c)) = self.coordinates.get(l) {
                line(
                    &mut out,
                    format!("coordinates[{l}]"),
                    c.iter().map(|v| v.to_string()).collect(),
                );
            }
        }
        line(
            &mut out,
            "values".into(),
            self.values.iter().map(|v| num_text(*v)).collect(),
        );
        out
    }
}

/// Interval `[lo, hi]` of an expression over dims in `[0, size - 1]` (`None`: overflow or a
/// symbol without a value).
fn bounds(e: &AffineExpr, dims: &[(i64, i64)], syms: &[Option<i64>]) -> Option<(i64, i64)> {
    Some(match e {
        AffineExpr::Var(v) => *dims.get(*v)?,
        AffineExpr::Sym(s) => {
            let v = (*syms.get(*s)?)?;
            (v, v)
        }
        AffineExpr::Const(c) => (*c, *c),
        AffineExpr::Add(a, b) => {
            let (a0, a1) = bounds(a, dims, syms)?;
            let (b0, b1) = bounds(b, dims, syms)?;
            (a0.checked_add(b0)?, a1.checked_add(b1)?)
        }
        AffineExpr::Sub(a, b) => {
            let (a0, a1) = bounds(a, dims, syms)?;
            let (b0, b1) = bounds(b, dims, syms)?;
            (a0.checked_sub(b1)?, a1.checked_sub(b0)?)
        }
        AffineExpr::Mul(a, b) => {
            let (a0, a1) = bounds(a, dims, syms)?;
            let (b0, b1) = bounds(b, dims, syms)?;
            let c = [
                a0.checked_mul(b0)?,
                a0.checked_mul(b1)?,
                a1.checked_mul(b0)?,
                a1.checked_mul(b1)?,
            ];
            (*c.iter().min()?, *c.iter().max()?)
        }
        AffineExpr::FloorDiv(a, k) => {
            let (a0, a1) = bounds(a, dims, syms)?;
            (a0.div_euclid(*k), a1.div_euclid(*k))
        }
        AffineExpr::Mod(a, k) => {
            let (a0, a1) = bounds(a, dims, syms)?;
            if a0.div_euclid(*k) == a1.div_euclid(*k) {
                (a0.rem_euclid(*k), a1.rem_euclid(*k))
            } else {
                (0, k - 1)
            }
        }
    })
}

/// The counting form `s * K * d` (any order and grouping of one symbol, one dimension and
/// constants): `(symbol, dim, product of constants)`.
pub(super) fn counting_form(e: &AffineExpr) -> Option<(usize, usize, Option<i64>)> {
    fn factors(e: &AffineExpr, out: &mut Vec<AffineExpr>) -> bool {
        match e {
            AffineExpr::Mul(a, b) => factors(a, out) && factors(b, out),
            AffineExpr::Var(_) | AffineExpr::Sym(_) | AffineExpr::Const(_) => {
                out.push(e.clone());
                true
            }
            _ => false,
        }
    }
    let mut fs = Vec::new();
    if !factors(e, &mut fs) {
        return None;
    }
    let mut sym = None;
    let mut dim = None;
    let mut k: Option<i64> = None;
    for f in fs {
        match f {
            AffineExpr::Sym(s) if sym.is_none() => sym = Some(s),
            AffineExpr::Var(d) if dim.is_none() => dim = Some(d),
            AffineExpr::Const(c) => k = Some(k.unwrap_or(1).checked_mul(c)?),
            _ => return None,
        }
    }
    Some((sym?, dim?, k))
}

/// Fits `v` into an unsigned `width`-bit integer (0 = native 64-bit signed).
fn fits(v: i64, width: u8) -> bool {
    match width {
        0 | 64 => true,
        w => v >= 0 && (v as u64) < (1u64 << w),
    }
}

impl Encoding {
    /// Packs `coo` (whose dimensions are the encoding's dimensions) into this encoding's level
    /// storage. `symbol_values[s]` gives symbol `s` a value (see the module documentation of
    /// the counting form); it may be shorter than the symbol list.
    pub fn pack(&self, coo: &Coo, symbol_values: &[i64]) -> Result<Storage, EncodingError> {
        let rank = self.dims.len();
        if coo.dims.len() != rank {
            return Err(EncodingError::plain(format!(
                "the tensor has {} dimensions but the encoding maps {rank}",
                coo.dims.len()
            )));
        }
        if coo.coords.len() != coo.values.len() {
            return Err(EncodingError::plain(format!(
                "the tensor has {} coordinate tuples but {} values",
                coo.coords.len(),
                coo.values.len()
            )));
        }
        let dim_sizes: Vec<i64> = coo
            .dims
            .iter()
            .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
            .collect();
        for (d, spec) in self.dims.iter().enumerate() {
            if let Some(DimSlice {
                offset: Some(o),
                size: Some(sz),
                stride: Some(st),
            }) = spec.slice
            {
                let last = (sz - 1).checked_mul(st).and_then(|x| x.checked_add(o));
                if last.is_none() || last >= Some(dim_sizes[d]) {
                    return Err(EncodingError::plain(format!(
                        "the slice of dimension `{}` reaches past its size {}",
                        spec.name, dim_sizes[d]
                    )));
                }
            }
        }
        // 1. Sum duplicates, keeping first-appearance order.
        let mut index: HashMap<&[i64], usize> = HashMap::new();
        let mut coords: Vec<&[i64]> = Vec::new();
        let mut vals: Vec<f64> = Vec::new();
        for (e, (c, v)) in coo.coords.iter().zip(&coo.values).enumerate() {
            if c.len() != rank {
                return Err(EncodingError::plain(format!(
                    "entry {e} has {} coordinates, expected {rank}",
                    c.len()
                )));
            }
            for (d, (&x, &size)) in c.iter().zip(&dim_sizes).enumerate() {
                if x < 0 || x >= size {
                    return Err(EncodingError::plain(format!(
                        "entry {e}: coordinate {x} of dimension `{}` is outside 0..{size}",
                        self.dims[d].name
                    )));
                }
            }
            if let Some(ev) = self.explicit_val {
                if *v != ev {
                    return Err(EncodingError::plain(format!(
                        "entry {e} has value {v} but the encoding's explicitVal is {ev}"
                    )));
                }
            }
            match index.get(c.as_slice()) {
                Some(&i) => vals[i] += *v,
                None => {
                    index.insert(c.as_slice(), coords.len());
                    coords.push(c.as_slice());
                    vals.push(*v);
                }
            }
        }
        let n = coords.len();
        let nl = self.levels.len();
        let fill = self.implicit_val.unwrap_or(0.0);

        // 2. Symbols: counting levels and parameter values.
        let mut sym_param: Vec<Option<i64>> = (0..self.symbols.len())
            .map(|s| symbol_values.get(s).copied())
            .collect();
        let mut counting: Vec<Option<(usize, usize, Option<i64>)>> = vec![None; nl];
        for (l, lvl) in self.levels.iter().enumerate() {
            if lvl.expr.has_sym() {
                counting[l] = counting_form(&lvl.expr);
            }
        }
        let mut ranks: HashMap<usize, Vec<i64>> = HashMap::new(); // symbol -> per-entry rank
        let mut sizes_from_count: Vec<Option<i64>> = vec![None; nl];
        for (l, c) in counting.iter().enumerate() {
            let Some((s, d, k)) = *c else { continue };
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| coords[a].cmp(coords[b]));
            let mut r = vec![0i64; n];
            let mut max = 0;
            let mut last: Option<(i64, i64)> = None;
            for &e in &order {
                let key = coords[e][d];
                let next = match last {
                    Some((k0, cnt)) if k0 == key => cnt + 1,
                    _ => 0,
                };
                r[e] = next;
                max = max.max(next + 1);
                last = Some((key, next));
            }
            let size = symbol_values.get(s).copied().or(k).unwrap_or(max);
            if max > size {
                return Err(EncodingError::plain(format!(
                    "counting symbol `{}` of level {l}: some `{}` has {max} entries but the \
                     level has {size} slots",
                    self.symbols[s], self.dims[d].name
                )));
            }
            sizes_from_count[l] = Some(size);
            ranks.insert(s, r);
            sym_param[s] = None;
        }

        // 3. Level sizes.
        let dim_bounds: Vec<(i64, i64)> = dim_sizes.iter().map(|&s| (0, s - 1)).collect();
        let mut level_sizes = Vec::with_capacity(nl);
        for (l, lvl) in self.levels.iter().enumerate() {
            let size = if let Some(s) = sizes_from_count[l] {
                s
            } else if dim_sizes.contains(&0) {
                0
            } else {
                let (lo, hi) = bounds(&lvl.expr, &dim_bounds, &sym_param).ok_or_else(|| {
                    EncodingError::plain(format!(
                        "level {l}: cannot bound its expression (a symbol without a value in \
                         symbol_values, or an overflow)"
                    ))
                })?;
                if lo < 0 {
                    return Err(EncodingError::plain(format!(
                        "level {l}: its expression reaches the negative coordinate {lo}"
                    )));
                }
                hi.checked_add(1)
                    .ok_or_else(|| EncodingError::plain(format!("level {l}: size overflows")))?
            };
            level_sizes.push(usize::try_from(size).unwrap_or(usize::MAX));
        }

        // 4. Level coordinates of every entry.
        let mut lc: Vec<Vec<i64>> = Vec::with_capacity(n);
        for (e, c) in coords.iter().enumerate() {
            let mut row = Vec::with_capacity(nl);
            for (l, lvl) in self.levels.iter().enumerate() {
                let v = if let Some((s, _, _)) = counting[l] {
                    ranks.get(&s).map(|r| r[e]).unwrap_or(0)
                } else {
                    lvl.expr
                        .eval(c, &self.sym_values(&sym_param))
                        .ok_or_else(|| {
                            EncodingError::plain(format!(
                                "level {l}: cannot evaluate its expression for entry {e}"
                            ))
                        })?
                };
                if v < 0 || v as u64 >= level_sizes[l] as u64 {
                    return Err(EncodingError::plain(format!(
                        "entry {e} maps to coordinate {v} of level {l}, outside 0..{}",
                        level_sizes[l]
                    )));
                }
                row.push(v);
            }
            if let Some(inv) = &self.dim_exprs {
                for (d, ie) in inv.iter().enumerate() {
                    if ie.eval(&row, &self.sym_values(&sym_param)) != Some(c[d]) {
                        return Err(EncodingError::plain(format!(
                            "the explicit inverse map of dimension `{}` disagrees with the \
                             level map at coordinates {:?}",
                            self.dims[d].name, c
                        )));
                    }
                }
            }
            lc.push(row);
        }

        // 5. Sort keys (first-appearance ranks for nonordered levels), then sort.
        let mut keys: Vec<Vec<i64>> = lc.clone();
        for (l, lvl) in self.levels.iter().enumerate() {
            if !lvl.props.nonordered {
                continue;
            }
            let mut first: HashMap<(Vec<i64>, i64), i64> = HashMap::new();
            for e in 0..n {
                let k = (keys[e][..l].to_vec(), lc[e][l]);
                let next = first.len() as i64;
                keys[e][l] = *first.entry(k).or_insert(next);
            }
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        for w in order.windows(2) {
            if lc[w[0]] == lc[w[1]] {
                return Err(EncodingError::plain(format!(
                    "the map sends coordinates {:?} and {:?} to the same level coordinates {:?}",
                    coords[w[0]], coords[w[1]], lc[w[0]]
                )));
            }
        }
        let lc: Vec<&Vec<i64>> = order.iter().map(|&e| &lc[e]).collect();
        let vals: Vec<f64> = order.iter().map(|&e| vals[e]).collect();

        // 6. Build the levels.
        let mut parents: Vec<(usize, usize)> = vec![(0, n)];
        let mut positions = vec![None; nl];
        let mut coordinates = vec![None; nl];
        for (l, lvl) in self.levels.iter().enumerate() {
            let size = level_sizes[l];
            // Entries in [a, b) with equal coordinates at levels l..=last form one run.
            let last = if lvl.props.nonunique {
                let mut k = l;
                while k + 1 < nl && self.levels[k + 1].format == LevelFormat::Singleton {
                    k += 1;
                }
                k
            } else {
                l
            };
            let runs = |a: usize, b: usize| -> Vec<(usize, usize)> {
                let mut out = Vec::new();
                let mut s = a;
                while s < b {
                    let mut t = s + 1;
                    while t < b && lc[t][l..=last] == lc[s][l..=last] {
                        t += 1;
                    }
                    out.push((s, t));
                    s = t;
                }
                out
            };
            let mut next: Vec<(usize, usize)> = Vec::new();
            match lvl.format {
                LevelFormat::Dense | LevelFormat::Batch => {
                    let total = parents
                        .len()
                        .checked_mul(size)
                        .filter(|&t| t <= MAX_POSITIONS);
                    let Some(total) = total else {
                        return Err(EncodingError::plain(format!(
                            "dense level {l} would hold more than {MAX_POSITIONS} positions"
                        )));
                    };
                    next.reserve(total);
                    for &(a, b) in &parents {
                        let base = next.len();
                        next.resize(base + size, (a, a));
                        for (s, t) in runs(a, b) {
                            next[base + lc[s][l] as usize] = (s, t);
                        }
                    }
                }
                LevelFormat::Compressed | LevelFormat::LooseCompressed => {
                    let loose = lvl.format == LevelFormat::LooseCompressed;
                    let mut pos = if loose { Vec::new() } else { vec![0i64] };
                    let mut crd = Vec::new();
                    for &(a, b) in &parents {
                        let lo = crd.len() as i64;
                        for (s, t) in runs(a, b) {
                            crd.push(lc[s][l]);
                            next.push((s, t));
                        }
                        if loose {
                            pos.push(lo);
                        }
                        pos.push(crd.len() as i64);
                    }
                    positions[l] = Some(pos);
                    coordinates[l] = Some(crd);
                }
                LevelFormat::Singleton => {
                    let mut crd = Vec::with_capacity(parents.len());
                    for (q, &(a, b)) in parents.iter().enumerate() {
                        let r = runs(a, b);
                        if r.len() != 1 {
                            return Err(EncodingError::plain(format!(
                                "singleton level {l}: parent position {q} has {} distinct \
                                 coordinates, a singleton level stores exactly one",
                                r.len()
                            )));
                        }
                        crd.push(lc[a][l]);
                        next.push((a, b));
                    }
                    coordinates[l] = Some(crd);
                }
                LevelFormat::Structured { n: keep, m } => {
                    if size != m as usize {
                        return Err(EncodingError::plain(format!(
                            "structured[{keep}, {m}] level {l} needs size {m}, its expression \
                             gives {size}"
                        )));
                    }
                    let mut crd = Vec::with_capacity(parents.len() * keep as usize);
                    for (q, &(a, b)) in parents.iter().enumerate() {
                        let r = runs(a, b);
                        if r.len() > keep as usize {
                            return Err(EncodingError::plain(format!(
                                "structured[{keep}, {m}] level {l}: group {q} has {} nonzeros, \
                                 more than {keep}",
                                r.len()
                            )));
                        }
                        let mut group: Vec<(i64, (usize, usize))> =
                            r.iter().map(|&(s, t)| (lc[s][l], (s, t))).collect();
                        let mut c = 0i64;
                        while group.len() < keep as usize {
                            if !group.iter().any(|g| g.0 == c) {
                                group.push((c, (a, a)));
                            }
                            c += 1;
                        }
                        group.sort_by_key(|g| g.0);
                        for (c, range) in group {
                            crd.push(c);
                            next.push(range);
                        }
                    }
                    coordinates[l] = Some(crd);
                }
            }
            parents = next;
        }
        let values: Vec<f64> = parents
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    fill
                } else {
                    vals[a..b].iter().sum()
                }
            })
            .collect();

        // 7. Bit widths.
        for l in 0..nl {
            if let Some(p) = &positions[l] {
                if let Some(v) = p.iter().find(|&&v| !fits(v, self.pos_width)) {
                    return Err(EncodingError::plain(format!(
                        "positions[{l}] holds {v}, which does not fit posWidth = {}",
                        self.pos_width
                    )));
                }
            }
            if let Some(c) = &coordinates[l] {
                if let Some(v) = c.iter().find(|&&v| !fits(v, self.crd_width)) {
                    return Err(EncodingError::plain(format!(
                        "coordinates[{l}] holds {v}, which does not fit crdWidth = {}",
                        self.crd_width
                    )));
                }
            }
        }
        Ok(Storage {
            level_sizes,
            positions,
            coordinates,
            values,
        })
    }

    fn sym_values(&self, params: &[Option<i64>]) -> Vec<i64> {
        params.iter().map(|v| v.unwrap_or(0)).collect()
    }
}
