//! Deterministic random inputs for every catalog kernel: from a [`Shape`] (sizes, density and a
//! structural [`Pattern`]) and a seed, [`random_args`] builds the sparse structure (CSR, CSF, BSR,
//! ELL, 2:4, ragged, hyper-graph incidence), random values for every input and the initial
//! contents of every output, keyed by parameter name as the evaluators take them.
//!
//! Values are drawn exactly representable in `float32`, so a dense oracle computed in `f64` sees
//! the very numbers the kernel reads. The same `(kernel, shape, seed)` always gives the same case.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;

/// Upper bound on the number of generated elements (values, indices and pattern draws) of one
/// case, so that a careless shape returns an error instead of exhausting memory.
pub const MAX_ELEMENTS: usize = 1 << 22;

/// The structural edge case a [`Shape`] asks for. Kernels with several sparse levels read
/// "rows" as their first sparse level (see [`random_args`] for each kernel's reading).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    /// Each column (each element of a level) kept with probability `density`; with
    /// `empty_rows`, every third row starting at row 1 stores nothing.
    Random { empty_rows: bool },
    /// As `Random` without empty rows, on a single row (`rows` is ignored).
    SingleRow,
    /// Every row holds every column (every level is full).
    FullRows,
    /// No stored element at all (nnz 0); sizes are kept.
    Empty,
    /// Every level but the last is full and the last one stores nothing (CSF fibers without
    /// elements, relation rows without columns); the same as `Empty` for one-level formats.
    EmptyLeaves,
    /// One row, one column (one of everything), its element stored.
    OneByOne,
}

/// What the arrays behind the kernel's outputs hold before it runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// All zeros.
    Zero,
    /// Every element equal to this value.
    Value(f64),
    /// Random values from the shape's value range.
    Random,
}

/// Sizes and structure of a generated case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// Rows (block rows for BSR/ELL, vertices for hyper-graphs, batches for ragged bmm).
    pub rows: usize,
    /// Columns (block columns for BSR/ELL, hyper-edges, maximum ragged length).
    pub cols: usize,
    /// A third extent: relations (rgcn), the last CSF dimension.
    pub depth: usize,
    /// Feature width of dense operands.
    pub feat: usize,
    /// Block size (bsrmm, ellmm).
    pub block: usize,
    /// Probability that an element is stored, for the random patterns (also the ELL fill:
    /// `round(density * cols)` columns per row).
    pub density: f64,
    /// Half-open range `[lo, hi)` of the random values.
    pub values: (f64, f64),
    /// Initial contents of the outputs.
    pub init: Init,
    pub pattern: Pattern,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            rows: 5,
            cols: 6,
            depth: 3,
            feat: 3,
            block: 2,
            density: 0.5,
            values: (-1.0, 1.0),
            init: Init::Zero,
            pattern: Pattern::Random { empty_rows: true },
        }
    }
}

impl Shape {
    /// A `rows x cols` shape of the given pattern, other fields at their defaults.
    pub fn new(pattern: Pattern, rows: usize, cols: usize) -> Shape {
        Shape {
            rows,
            cols,
            pattern,
            ..Shape::default()
        }
    }
    pub fn with_depth(mut self, depth: usize) -> Shape {
        self.depth = depth;
        self
    }
    pub fn with_feat(mut self, feat: usize) -> Shape {
        self.feat = feat;
        self
    }
    pub fn with_block(mut self, block: usize) -> Shape {
        self.block = block;
        self
    }
    pub fn with_density(mut self, density: f64) -> Shape {
        self.density = density;
        self
    }
    pub fn with_values(mut self, lo: f64, hi: f64) -> Shape {
        self.values = (lo, hi);
        self
    }
    pub fn with_init(mut self, init: Init) -> Shape {
        self.init = init;
        self
    }
}

/// One generated case: the arguments by parameter name, and the names of the handle parameters
/// the kernel writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub args: HashMap<String, ArgValue>,
    pub outputs: Vec<String>,
}

impl Case {
    /// The scalar integer argument `name`.
    pub fn int(&self, name: &str) -> Option<i64> {
        match self.args.get(name) {
            Some(ArgValue::Int(v)) => Some(*v),
            _ => None,
        }
    }
    /// The array argument `name`.
    pub fn array(&self, name: &str) -> Option<&Tensor> {
        match self.args.get(name) {
            Some(ArgValue::Array(t)) => Some(t),
            _ => None,
        }
    }
}

/// Why [`random_args`] failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DataError {
    #[error("no data generator for kernel `{0}`")]
    UnknownKernel(String),
    #[error("invalid shape: {0}")]
    InvalidShape(String),
    #[error("the case would hold more than {MAX_ELEMENTS} elements")]
    TooLarge,
    #[error("cannot build a tensor: {0}")]
    Tensor(String),
}

/// The longest row of the ragged kernels (`segment_*`, `ragged_bmm`), fixed by their scripts.
const RAGGED_MAX: usize = 100;

/// Builds random arguments for catalog kernel `kernel` (alias-spelled scripts included).
///
/// How each kernel reads the shape (`m = rows`, `n = cols`, `f = feat`):
/// - CSR kernels (csrmm, sddmm, spmv, rgcn_homo, sparse_softmax, csr2bsr): an `m x n` CSR
///   pattern; rgcn_homo has `max(depth, 1)` relations, `feat_in = f`, `feat_out = f / 2 + 1`;
///   csr2bsr derives the 2x2 BSR pattern holding every stored element;
/// - bsrmm: an `m x n` block pattern of `block x block` blocks;
/// - ellmm: `m` block rows of exactly `round(density * n)` block columns (empty rows are not
///   expressible in ELL and are ignored);
/// - spmm_24: an `m x n` 2:4 matrix (`m * (n / 4)` groups; `Empty` makes `n = 0`, `OneByOne`
///   is `1 x 4`; density and empty rows are ignored);
/// - rgcn_hetero: `depth` relations, each over the rows of an `m x n` graph present with
///   probability `density`, each present row holding random columns;
/// - csf_square_sum: an `m x n x depth` CSF tensor;
/// - segment_*: `m` ragged rows of at most `n` (<= 100) elements;
/// - ragged_bmm: `m` batches of `I x J` by `J x K` products, each extent at most `n` (<= 100);
/// - hyper_gnn: `m` vertices, `n` hyper-edges, random incidence (vertex-major and edge-major);
/// - spadd, spmul: two independent `m x n` CSR patterns `A` and `B`;
/// - spgemm: `A` (`m x depth`) times `B` (`depth x n`), both CSR;
/// - masked_spgemm: the same `A` and `B` and an `m x n` CSR mask, whose pattern `C` takes.
///
/// An assembled output (spadd, spmul, spgemm: `c`, its `c_indptr`/`c_indices` and `nnz_c`) is
/// the kernel's to build: it gets no argument, and `outputs` names its value array `c`.
pub fn random_args(kernel: &str, shape: &Shape, seed: u64) -> Result<Case, DataError> {
    let mut g = Gen::new(shape, seed)?;
    match kernel {
        "csrmm" | "csrmm_alias" | "csrmm_dense_iter" | "csrmm_max" | "csrmm_min" => csrmm(&mut g)?,
        "sddmm" | "sddmm_alias" | "fused_sddmm" => sddmm(&mut g)?,
        "spmv" => spmv(&mut g)?,
        "rgcn_homo" => rgcn_homo(&mut g)?,
        "sparse_softmax" => sparse_softmax(&mut g)?,
        "csr2bsr" => csr2bsr(&mut g)?,
        "bsrmm" => bsrmm(&mut g)?,
        "ellmm" => ellmm(&mut g)?,
        "spmm_24" => spmm_24(&mut g)?,
        "rgcn_hetero" => rgcn_hetero(&mut g)?,
        "csf_square_sum" => csf_square_sum(&mut g)?,
        "segment_sum" | "segment_max" | "segment_min" | "segment_mean" => segment(&mut g)?,
        "ragged_bmm" => ragged_bmm(&mut g)?,
        "hyper_gnn" => hyper_gnn(&mut g)?,
        "spadd" | "spmul" => coiteration(&mut g)?,
        "spgemm" => spgemm(&mut g, false)?,
        "masked_spgemm" => spgemm(&mut g, true)?,
        _ => return Err(DataError::UnknownKernel(kernel.to_string())),
    }
    Ok(Case {
        args: g.args,
        outputs: g.outputs,
    })
}

// ---------------------------------------------------------------------------------------------
// Generation state

/// The pattern resolved into sizes and per-level probabilities.
#[derive(Clone, Copy, Debug)]
struct Geo {
    rows: usize,
    cols: usize,
    depth: usize,
    /// Probability of an element of a non-last level.
    upper: f64,
    /// Probability of an element of the last level.
    leaf: f64,
    empty_rows: bool,
}

impl Geo {
    fn of(s: &Shape) -> Geo {
        let base = Geo {
            rows: s.rows,
            cols: s.cols,
            depth: s.depth,
            upper: s.density,
            leaf: s.density,
            empty_rows: false,
        };
        match s.pattern {
            Pattern::Random { empty_rows } => Geo { empty_rows, ..base },
            Pattern::SingleRow => Geo { rows: 1, ..base },
            Pattern::FullRows => Geo {
                upper: 1.0,
                leaf: 1.0,
                ..base
            },
            Pattern::Empty => Geo {
                upper: 0.0,
                leaf: 0.0,
                ..base
            },
            Pattern::EmptyLeaves => Geo {
                upper: 1.0,
                leaf: 0.0,
                ..base
            },
            Pattern::OneByOne => Geo {
                rows: 1,
                cols: 1,
                depth: 1,
                upper: 1.0,
                leaf: 1.0,
                empty_rows: false,
            },
        }
    }
    /// Whether row `i` is one of the forced-empty rows.
    fn skip(&self, i: usize) -> bool {
        self.empty_rows && i % 3 == 1
    }
}

/// A CSR pattern (also one level of a multi-level format).
#[derive(Clone, Debug)]
struct Csr {
    indptr: Vec<i64>,
    indices: Vec<i64>,
}

impl Csr {
    fn from_rows(rows: &[Vec<usize>]) -> Csr {
        let mut indptr = Vec::with_capacity(rows.len() + 1);
        indptr.push(0i64);
        let mut indices = Vec::new();
        for r in rows {
            indices.extend(r.iter().map(|&j| j as i64));
            indptr.push(indices.len() as i64);
        }
        Csr { indptr, indices }
    }
    fn nnz(&self) -> usize {
        self.indices.len()
    }
}

/// Running prefix sums: `[0, l0, l0 + l1, ...]`.
fn prefix(lens: impl Iterator<Item = usize>) -> Vec<i64> {
    let mut v = vec![0i64];
    let mut acc = 0i64;
    for l in lens {
        acc += l as i64;
        v.push(acc);
    }
    v
}

/// Product of sizes, or [`DataError::TooLarge`] past [`MAX_ELEMENTS`].
fn mul(factors: &[usize]) -> Result<usize, DataError> {
    let mut p = 1usize;
    for &f in factors {
        p = p.checked_mul(f).ok_or(DataError::TooLarge)?;
    }
    if p > MAX_ELEMENTS {
        return Err(DataError::TooLarge);
    }
    Ok(p)
}

struct Gen {
    rng: ChaCha8Rng,
    shape: Shape,
    geo: Geo,
    args: HashMap<String, ArgValue>,
    outputs: Vec<String>,
    /// Elements generated so far (bounded by [`MAX_ELEMENTS`]).
    used: usize,
}

impl Gen {
    fn new(shape: &Shape, seed: u64) -> Result<Gen, DataError> {
        if !(0.0..=1.0).contains(&shape.density) {
            return Err(DataError::InvalidShape(format!(
                "density {} is not in [0, 1]",
                shape.density
            )));
        }
        let (lo, hi) = shape.values;
        let f32_ok = |v: f64| v.is_finite() && v.abs() <= f32::MAX as f64;
        if !(f32_ok(lo) && f32_ok(hi) && lo < hi) {
            return Err(DataError::InvalidShape(format!(
                "value range [{lo}, {hi}) is empty or not finite in float32"
            )));
        }
        let dims = [shape.rows, shape.cols, shape.depth, shape.feat, shape.block];
        if dims.iter().any(|&d| d > MAX_ELEMENTS) {
            return Err(DataError::TooLarge);
        }
        if let Init::Value(v) = shape.init {
            if !v.is_finite() {
                return Err(DataError::InvalidShape(format!(
                    "initial value {v} is not finite"
                )));
            }
        }
        Ok(Gen {
            rng: ChaCha8Rng::seed_from_u64(seed),
            shape: *shape,
            geo: Geo::of(shape),
            args: HashMap::new(),
            outputs: Vec::new(),
            used: 0,
        })
    }

    /// Accounts for `n` more generated elements.
    fn spend(&mut self, n: usize) -> Result<(), DataError> {
        self.used = self.used.checked_add(n).ok_or(DataError::TooLarge)?;
        if self.used > MAX_ELEMENTS {
            return Err(DataError::TooLarge);
        }
        Ok(())
    }

    fn int(&mut self, name: &str, v: usize) {
        self.args.insert(name.to_string(), ArgValue::Int(v as i64));
    }

    fn ints(&mut self, name: &str, v: &[i64]) -> Result<(), DataError> {
        let t = Tensor::from_i64(DType::I32, v).map_err(|e| DataError::Tensor(e.to_string()))?;
        self.args.insert(name.to_string(), ArgValue::Array(t));
        Ok(())
    }

    fn floats(&mut self, name: &str, v: &[f64]) -> Result<(), DataError> {
        let t = Tensor::from_f64(DType::F32, v).map_err(|e| DataError::Tensor(e.to_string()))?;
        self.args.insert(name.to_string(), ArgValue::Array(t));
        Ok(())
    }

    /// `n` random values of the shape's range, exactly representable in float32.
    fn values(&mut self, n: usize) -> Result<Vec<f64>, DataError> {
        self.spend(n)?;
        let (lo, hi) = self.shape.values;
        Ok((0..n)
            .map(|_| {
                let v = self.rng.random_range(lo..hi) as f32 as f64;
                // Rounding to float32 may reach `hi`; keep the range half-open.
                if v >= hi {
                    lo
                } else {
                    v
                }
            })
            .collect())
    }

    /// A float32 input of `n` random values.
    fn input(&mut self, name: &str, n: usize) -> Result<(), DataError> {
        let v = self.values(n)?;
        self.floats(name, &v)
    }

    /// A float32 output of `n` elements, filled as the shape's `init` says.
    fn output(&mut self, name: &str, n: usize) -> Result<(), DataError> {
        let v = match self.shape.init {
            Init::Zero => {
                self.spend(n)?;
                vec![0.0; n]
            }
            Init::Value(x) => {
                self.spend(n)?;
                vec![x as f32 as f64; n]
            }
            Init::Random => self.values(n)?,
        };
        self.floats(name, &v)?;
        self.outputs.push(name.to_string());
        Ok(())
    }

    /// A random sorted subset of `0..n`, each element kept with probability `p`.
    fn subset(&mut self, n: usize, p: f64) -> Result<Vec<usize>, DataError> {
        self.spend(n)?;
        Ok((0..n).filter(|_| self.rng.random_bool(p)).collect())
    }

    /// Number of kept elements of `0..n`, each kept with probability `p`.
    fn count(&mut self, n: usize, p: f64) -> Result<usize, DataError> {
        Ok(self.subset(n, p)?.len())
    }

    /// An `rows x cols` pattern: row `i` holds each column with the last level's probability,
    /// forced-empty rows hold nothing.
    fn csr(&mut self, rows: usize, cols: usize) -> Result<Csr, DataError> {
        mul(&[rows, cols])?;
        let leaf = self.geo.leaf;
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            out.push(if self.geo.skip(i) {
                Vec::new()
            } else {
                self.subset(cols, leaf)?
            });
        }
        Ok(Csr::from_rows(&out))
    }

    /// Binds `indptr`/`indices` and `m`, `n`, `nnz` of a CSR kernel, returning the pattern.
    fn csr_args(&mut self) -> Result<(Csr, usize, usize), DataError> {
        let (m, n) = (self.geo.rows, self.geo.cols);
        let c = self.csr(m, n)?;
        self.ints("indptr", &c.indptr)?;
        self.ints("indices", &c.indices)?;
        self.int("m", m);
        self.int("n", n);
        self.int("nnz", c.nnz());
        Ok((c, m, n))
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels

fn csrmm(g: &mut Gen) -> Result<(), DataError> {
    let (c, m, n) = g.csr_args()?;
    let feat = g.shape.feat;
    g.int("feat_size", feat);
    g.input("a", c.nnz())?;
    g.input("b", mul(&[n, feat])?)?;
    g.output("c", mul(&[m, feat])?)
}

fn sddmm(g: &mut Gen) -> Result<(), DataError> {
    let (c, m, n) = g.csr_args()?;
    let feat = g.shape.feat;
    g.int("feat_size", feat);
    g.input("a", mul(&[m, feat])?)?;
    g.input("b", mul(&[n, feat])?)?;
    g.input("x", c.nnz())?;
    g.output("y", c.nnz())
}

fn spmv(g: &mut Gen) -> Result<(), DataError> {
    let (c, m, n) = g.csr_args()?;
    g.input("a", c.nnz())?;
    g.input("x", n)?;
    g.output("y", m)
}

/// Feature widths of the rgcn kernels: `(feat_in, feat_out)`.
fn rgcn_feats(g: &mut Gen) -> (usize, usize) {
    let (fi, fo) = (g.shape.feat, g.shape.feat / 2 + 1);
    g.int("feat_in", fi);
    g.int("feat_out", fo);
    (fi, fo)
}

fn rgcn_homo(g: &mut Gen) -> Result<(), DataError> {
    let (c, m, n) = g.csr_args()?;
    let rels = g.geo.depth.max(1);
    g.int("num_rels", rels);
    let (fi, fo) = rgcn_feats(g);
    g.spend(c.nnz())?;
    let etype: Vec<i64> = (0..c.nnz())
        .map(|_| g.rng.random_range(0..rels as i64))
        .collect();
    g.ints("etype", &etype)?;
    g.input("w", mul(&[rels, fo, fi])?)?;
    g.input("x", mul(&[n, fi])?)?;
    g.output("y", mul(&[m, fo])?)
}

fn sparse_softmax(g: &mut Gen) -> Result<(), DataError> {
    let (c, _, _) = g.csr_args()?;
    g.input("a", c.nnz())?;
    g.output("b", c.nnz())
}

fn csr2bsr(g: &mut Gen) -> Result<(), DataError> {
    const B: usize = 2;
    let (c, m, n) = g.csr_args()?;
    let (mb, nb) = (m.div_ceil(B), n.div_ceil(B));
    // The BSR pattern: every block holding at least one stored element.
    let mut blocks = vec![vec![false; nb]; mb];
    for i in 0..m {
        for p in c.indptr[i] as usize..c.indptr[i + 1] as usize {
            blocks[i / B][c.indices[p] as usize / B] = true;
        }
    }
    let rows: Vec<Vec<usize>> = blocks
        .iter()
        .map(|row| (0..nb).filter(|&jo| row[jo]).collect())
        .collect();
    let bsr = Csr::from_rows(&rows);
    g.ints("indptr_bsr", &bsr.indptr)?;
    g.ints("indices_bsr", &bsr.indices)?;
    g.int("mb", mb);
    g.int("nb", nb);
    g.int("nnzb", bsr.nnz());
    g.input("a", c.nnz())?;
    g.output("bsr", mul(&[bsr.nnz(), B, B])?)
}

fn bsrmm(g: &mut Gen) -> Result<(), DataError> {
    let (rows, cols) = (g.geo.rows, g.geo.cols);
    let (blk, feat) = (g.shape.block, g.shape.feat);
    let pat = g.csr(rows, cols)?;
    g.ints("indptr", &pat.indptr)?;
    g.ints("indices", &pat.indices)?;
    g.int("nb", rows);
    g.int("mb", cols);
    g.int("nnzb", pat.nnz());
    g.int("blk", blk);
    g.int("feat_size", feat);
    g.input("a", mul(&[pat.nnz(), blk, blk])?)?;
    g.input("b", mul(&[cols, blk, feat])?)?;
    g.output("c", mul(&[rows, blk, feat])?)
}

fn ellmm(g: &mut Gen) -> Result<(), DataError> {
    let (rows, cols) = (g.geo.rows, g.geo.cols);
    let (blk, feat) = (g.shape.block, g.shape.feat);
    let c = ((g.geo.leaf * cols as f64).round() as usize).min(cols);
    mul(&[rows, cols])?;
    g.spend(rows * cols)?;
    let mut indices = Vec::with_capacity(rows * c);
    for _ in 0..rows {
        // Partial Fisher-Yates: the first c entries are a random c-subset.
        let mut all: Vec<usize> = (0..cols).collect();
        for t in 0..c {
            let s = g.rng.random_range(t..cols);
            all.swap(t, s);
        }
        let mut pick = all[..c].to_vec();
        pick.sort_unstable();
        indices.extend(pick.into_iter().map(|j| j as i64));
    }
    g.ints("indices", &indices)?;
    g.int("nb", rows);
    g.int("mb", cols);
    g.int("nnz_cols", c);
    g.int("blk", blk);
    g.int("feat_size", feat);
    g.input("a", mul(&[rows, c, blk, blk])?)?;
    g.input("b", mul(&[cols, blk, feat])?)?;
    g.output("c", mul(&[rows, blk, feat])?)
}

fn spmm_24(g: &mut Gen) -> Result<(), DataError> {
    let (m, n) = match g.shape.pattern {
        Pattern::Empty | Pattern::EmptyLeaves => (g.geo.rows, 0),
        Pattern::OneByOne => (1, 4),
        _ => (g.geo.rows, g.geo.cols),
    };
    let feat = g.shape.feat;
    let groups = mul(&[m, n / 4])?;
    g.spend(groups * 2)?;
    let mut indices = Vec::with_capacity(groups * 2);
    for _ in 0..groups {
        let first = g.rng.random_range(0..3i64);
        let second = g.rng.random_range(first + 1..4);
        indices.extend([first, second]);
    }
    g.ints("indices", &indices)?;
    g.int("m", m);
    g.int("n", n);
    g.int("feat_size", feat);
    g.input("a", groups * 2)?;
    g.input("b", mul(&[n, feat])?)?;
    g.output("c", mul(&[m, feat])?)
}

fn rgcn_hetero(g: &mut Gen) -> Result<(), DataError> {
    let Geo {
        rows: m,
        cols: n,
        depth: rels,
        upper,
        leaf,
        ..
    } = g.geo;
    mul(&[rels, m, n])?;
    // Per relation: the rows present, then per present row its columns.
    let mut indptr_i = vec![0i64];
    let mut indices_i = Vec::new();
    let mut row_cols: Vec<Vec<usize>> = Vec::new();
    for _ in 0..rels {
        for i in g.subset(m, upper)? {
            indices_i.push(i as i64);
            let cols = if g.geo.skip(row_cols.len()) {
                Vec::new()
            } else {
                g.subset(n, leaf)?
            };
            row_cols.push(cols);
        }
        indptr_i.push(indices_i.len() as i64);
    }
    let level_j = Csr::from_rows(&row_cols);
    g.ints("indptr_i", &indptr_i)?;
    g.ints("indices_i", &indices_i)?;
    g.ints("indptr_j", &level_j.indptr)?;
    g.ints("indices_j", &level_j.indices)?;
    g.int("m", m);
    g.int("n", n);
    g.int("num_rels", rels);
    g.int("nnz_i", indices_i.len());
    g.int("nnz_j", level_j.nnz());
    let (fi, fo) = rgcn_feats(g);
    g.input("a", level_j.nnz())?;
    g.input("w", mul(&[rels, fo, fi])?)?;
    g.input("x", mul(&[n, fi])?)?;
    g.output("y", mul(&[m, fo])?)
}

fn csf_square_sum(g: &mut Gen) -> Result<(), DataError> {
    let Geo {
        rows: m,
        cols: n,
        depth: p,
        upper,
        leaf,
        ..
    } = g.geo;
    mul(&[m, n, p])?;
    let mut rows = Vec::with_capacity(m);
    for i in 0..m {
        rows.push(if g.geo.skip(i) {
            Vec::new()
        } else {
            g.subset(n, upper)?
        });
    }
    let level_j = Csr::from_rows(&rows);
    let mut fibers = Vec::with_capacity(level_j.nnz());
    for _ in 0..level_j.nnz() {
        fibers.push(g.subset(p, leaf)?);
    }
    let level_k = Csr::from_rows(&fibers);
    g.ints("indptr_j", &level_j.indptr)?;
    g.ints("indices_j", &level_j.indices)?;
    g.ints("indptr_k", &level_k.indptr)?;
    g.ints("indices_k", &level_k.indices)?;
    g.int("m", m);
    g.int("n", n);
    g.int("p", p);
    g.int("nnz_j", level_j.nnz());
    g.int("nnz_k", level_k.nnz());
    g.input("a", level_k.nnz())?;
    g.output("b", m)
}

fn ragged_cols(g: &Gen) -> Result<usize, DataError> {
    let n = g.geo.cols;
    if n > RAGGED_MAX {
        return Err(DataError::InvalidShape(format!(
            "ragged rows are at most {RAGGED_MAX} long, got cols = {n}"
        )));
    }
    Ok(n)
}

fn segment(g: &mut Gen) -> Result<(), DataError> {
    let n = ragged_cols(g)?;
    let m = g.geo.rows;
    mul(&[m, n])?;
    let mut lens = Vec::with_capacity(m);
    for i in 0..m {
        lens.push(if g.geo.skip(i) {
            0
        } else {
            g.count(n, g.geo.leaf)?
        });
    }
    let indptr = prefix(lens.into_iter());
    let nnz = indptr.last().copied().unwrap_or(0) as usize;
    g.ints("indptr", &indptr)?;
    g.int("m", m);
    g.int("nnz", nnz);
    g.input("a", nnz)?;
    g.output("b", m)
}

fn ragged_bmm(g: &mut Gen) -> Result<(), DataError> {
    let n = ragged_cols(g)?;
    let batch = g.geo.rows;
    mul(&[batch, n, n])?;
    let mut dims = Vec::with_capacity(batch);
    for b in 0..batch {
        let di = if g.geo.skip(b) {
            0
        } else {
            g.count(n, g.geo.leaf)?
        };
        let dj = g.count(n, g.geo.leaf)?;
        let dk = g.count(n, g.geo.leaf)?;
        dims.push([di, dj, dk]);
    }
    // indptr over the batch for I, J, K; over I's / J's elements for the row lengths of
    // X (J_b), Y (K_b) and Z (K_b).
    let indptr_i = prefix(dims.iter().map(|d| d[0]));
    let indptr_j = prefix(dims.iter().map(|d| d[1]));
    let indptr_k = prefix(dims.iter().map(|d| d[2]));
    let indptr_ij = prefix(dims.iter().flat_map(|d| (0..d[0]).map(|_| d[1])));
    let indptr_jk = prefix(dims.iter().flat_map(|d| (0..d[1]).map(|_| d[2])));
    let indptr_ik = prefix(dims.iter().flat_map(|d| (0..d[0]).map(|_| d[2])));
    let last = |v: &[i64]| v.last().copied().unwrap_or(0) as usize;
    for (name, v) in [
        ("indptr_i", &indptr_i),
        ("indptr_j", &indptr_j),
        ("indptr_k", &indptr_k),
        ("indptr_ij", &indptr_ij),
        ("indptr_jk", &indptr_jk),
        ("indptr_ik", &indptr_ik),
    ] {
        g.ints(name, v)?;
        g.int(&format!("nnz{}", &name["indptr".len()..]), last(v));
    }
    g.int("batch_size", batch);
    g.int("max_len", RAGGED_MAX);
    g.input("x", last(&indptr_ij))?;
    g.input("y", last(&indptr_jk))?;
    g.output("z", last(&indptr_ik))
}

fn hyper_gnn(g: &mut Gen) -> Result<(), DataError> {
    let (nv, ne) = (g.geo.rows, g.geo.cols);
    let feat = g.shape.feat;
    mul(&[nv, ne])?;
    let mut h_rows = Vec::with_capacity(nv);
    for v in 0..nv {
        h_rows.push(if g.geo.skip(v) {
            Vec::new()
        } else {
            g.subset(ne, g.geo.leaf)?
        });
    }
    // The edge-major pattern of the same incidence.
    let mut ht_rows = vec![Vec::new(); ne];
    for (v, edges) in h_rows.iter().enumerate() {
        for &e in edges {
            ht_rows[e].push(v);
        }
    }
    let h = Csr::from_rows(&h_rows);
    let ht = Csr::from_rows(&ht_rows);
    g.ints("indptr", &h.indptr)?;
    g.ints("indices", &h.indices)?;
    g.ints("indptr_t", &ht.indptr)?;
    g.ints("indices_t", &ht.indices)?;
    g.int("n_vertices", nv);
    g.int("n_edges", ne);
    g.int("nnz", h.nnz());
    g.int("feat_size", feat);
    g.input("h", h.nnz())?;
    g.input("ht", ht.nnz())?;
    g.input("x", mul(&[nv, feat])?)?;
    g.output("y", mul(&[nv, feat])?)
}

/// Binds an `rows x cols` CSR operand under `name` (values), `name_indptr`, `name_indices`
/// and `nnz_name`.
fn csr_operand(g: &mut Gen, name: &str, rows: usize, cols: usize) -> Result<(), DataError> {
    let c = g.csr(rows, cols)?;
    let (indptr, indices) = if name == "mask" {
        ("m_indptr".to_string(), "m_indices".to_string())
    } else {
        (format!("{name}_indptr"), format!("{name}_indices"))
    };
    g.ints(&indptr, &c.indptr)?;
    g.ints(&indices, &c.indices)?;
    let nnz = if name == "mask" {
        "nnz_m".to_string()
    } else {
        format!("nnz_{name}")
    };
    g.int(&nnz, c.nnz());
    g.input(name, c.nnz())
}

fn coiteration(g: &mut Gen) -> Result<(), DataError> {
    let (m, n) = (g.geo.rows, g.geo.cols);
    g.int("m", m);
    g.int("n", n);
    csr_operand(g, "a", m, n)?;
    csr_operand(g, "b", m, n)?;
    g.outputs.push("c".into());
    Ok(())
}

fn spgemm(g: &mut Gen, masked: bool) -> Result<(), DataError> {
    let (m, n, k) = (g.geo.rows, g.geo.cols, g.geo.depth);
    g.int("m", m);
    g.int("n", n);
    g.int("k", k);
    csr_operand(g, "a", m, k)?;
    csr_operand(g, "b", k, n)?;
    if masked {
        csr_operand(g, "mask", m, n)?;
        let nnz = match g.args.get("nnz_m") {
            Some(ArgValue::Int(v)) => *v as usize,
            _ => 0,
        };
        g.output("c", nnz)
    } else {
        g.outputs.push("c".into());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes() -> Vec<Shape> {
        vec![
            Shape::default(),
            Shape::new(Pattern::SingleRow, 4, 5),
            Shape::new(Pattern::FullRows, 3, 4),
            Shape::new(Pattern::Empty, 3, 4),
            Shape::new(Pattern::EmptyLeaves, 3, 4),
            Shape::new(Pattern::OneByOne, 7, 7),
            Shape::new(Pattern::Empty, 0, 0).with_depth(0),
        ]
    }

    /// Every catalog kernel gets exactly its parameters: integers for scalars, arrays for
    /// handles, and outputs among the handles.
    #[test]
    fn every_kernel_gets_its_parameters() {
        for k in crate::catalog() {
            let f = crate::load(k.name).expect("kernel loads");
            for shape in shapes() {
                let case = random_args(k.name, &shape, 3).expect("generates");
                assert_eq!(case.args.len(), f.params.len(), "{}: {shape:?}", k.name);
                for &p in &f.params {
                    let var = &f.vars[p];
                    let arg = case.args.get(&var.name);
                    let ok = match arg {
                        Some(ArgValue::Array(_)) => var.dtype == DType::Handle,
                        Some(ArgValue::Int(v)) => var.dtype != DType::Handle && *v >= 0,
                        _ => false,
                    };
                    assert!(ok, "{}: parameter {} got {arg:?}", k.name, var.name);
                }
                assert!(!case.outputs.is_empty(), "{}", k.name);
                for o in &case.outputs {
                    assert!(case.array(o).is_some(), "{}: output {o}", k.name);
                }
            }
        }
    }

    /// The co-iteration and sparse-output kernels get every parameter but their assembled
    /// output's, and the evaluator runs every case.
    #[test]
    fn sparse_output_kernels_get_their_inputs() {
        let assembled = ["c", "c_indptr", "c_indices", "nnz_c"];
        for k in crate::sparse_output() {
            let f = crate::load(k.name).expect("kernel loads");
            for shape in shapes() {
                let case = random_args(k.name, &shape, 5).expect("generates");
                for &p in &f.params {
                    let name = &f.vars[p].name;
                    let given = case.args.contains_key(name);
                    let is_assembled =
                        assembled.contains(&name.as_str()) && k.name != "masked_spgemm";
                    assert_eq!(given, !is_assembled, "{}: {name} ({shape:?})", k.name);
                }
                assert_eq!(case.outputs, vec!["c".to_string()], "{}", k.name);
                let mut args = case.args.clone();
                sparsetir_eval::eval_func(&f, &mut args)
                    .unwrap_or_else(|e| panic!("{}: {shape:?}: {e}", k.name));
                assert!(args.contains_key("c"), "{}", k.name);
            }
        }
    }

    #[test]
    fn deterministic_per_seed() {
        let shape = Shape::default();
        let a = random_args("csrmm", &shape, 9).expect("generates");
        let b = random_args("csrmm", &shape, 9).expect("generates");
        let c = random_args("csrmm", &shape, 10).expect("generates");
        assert_eq!(a, b);
        assert_ne!(a.array("a"), c.array("a"));
    }

    #[test]
    fn values_in_range_and_f32_exact() {
        let shape = Shape::new(Pattern::FullRows, 4, 4).with_values(2.0, 3.0);
        let case = random_args("spmv", &shape, 1).expect("generates");
        let a = case.array("a").expect("a").to_f64_vec();
        assert_eq!(a.len(), 16);
        assert!(a
            .iter()
            .all(|&v| (2.0..3.0).contains(&v) && v as f32 as f64 == v));
        let init = Shape::default().with_init(Init::Value(5.0));
        let case = random_args("spmv", &init, 1).expect("generates");
        let y = case.array("y").expect("y").to_f64_vec();
        assert!(y.len() == 5 && y.iter().all(|&v| v == 5.0));
    }

    #[test]
    fn bad_shapes_are_errors() {
        let s = Shape::default();
        assert_eq!(
            random_args("nope", &s, 0),
            Err(DataError::UnknownKernel("nope".into()))
        );
        for bad in [
            s.with_density(1.5),
            s.with_density(f64::NAN),
            s.with_values(1.0, 1.0),
            s.with_values(0.0, f64::INFINITY),
            s.with_init(Init::Value(f64::NAN)),
        ] {
            assert!(matches!(
                random_args("csrmm", &bad, 0),
                Err(DataError::InvalidShape(_))
            ));
        }
        let long = Shape::new(Pattern::FullRows, 2, 101);
        assert!(matches!(
            random_args("segment_sum", &long, 0),
            Err(DataError::InvalidShape(_))
        ));
        let huge = Shape::new(Pattern::Empty, usize::MAX / 2, 3);
        for k in crate::catalog() {
            assert_eq!(
                random_args(k.name, &huge, 0),
                Err(DataError::TooLarge),
                "{}",
                k.name
            );
        }
        let wide = Shape::new(Pattern::FullRows, 1, 3).with_feat(usize::MAX);
        assert_eq!(random_args("csrmm", &wide, 0), Err(DataError::TooLarge));
        let tall = Shape::new(Pattern::FullRows, MAX_ELEMENTS, 2).with_feat(1000);
        assert_eq!(random_args("csrmm", &tall, 0), Err(DataError::TooLarge));
    }
}
