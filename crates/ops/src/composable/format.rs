//! The format names of `sparsetir bench --format` ([`Format`]): their parsing, printing and
//! typed errors, and the shared-memory tiles of the 2:4 tensor-core kernels ([`SharedTiles`]),
//! Hopper's measured default among them.

use std::fmt;

use super::*;

/// A storage format for the sparse operand (SpMM: every format but `coo`; SDDMM: `csr`, `coo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// The catalog's csrmm.
    Csr,
    /// Column parts × degree buckets; `None` fields are chosen from the matrix
    /// ([`default_buckets`], one part).
    Hyb {
        parts: Option<usize>,
        buckets: Option<Vec<usize>>,
    },
    /// Blocked CSR with square `B × B` blocks.
    Bsr(usize),
    /// ELL of width `W` over every row (`None`: [`ell_width`] of the matrix), the entries of
    /// longer rows past the width in CSR ("ELL+CSR").
    Ell(Option<usize>),
    /// Coordinate list: every stored element with its row and column, in CSR's order (SDDMM:
    /// one flat loop over the stored elements).
    Coo,
    /// SELL-C-σ (SpMV): chunks of [`SELL_LANES`] rows side by side, rows sorted by length
    /// inside windows of `sigma` rows (`None`: [`sell_sigma`] of the matrix).
    Sell { sigma: Option<usize> },
    /// TC-GNN's condensed tiling (SpMM): tiles of [`CONDENSE_TILE`] rows, each tile's columns
    /// condensed into dense groups of [`CONDENSE_TILE`] (tensor-core shaped).
    Condense,
    /// 2:4 structured sparsity (SpMM): the catalog's `spmm_24` on the n:m container (every group
    /// of four columns of a row stores two values and their positions); with 16-bit operands on
    /// a GPU, sparse tensor cores (`mma.sp`), each warp computing `tiles` output tiles of 8
    /// columns (`2:4(tiles=U)`, 1 to 8; `None`: chosen by the feature width); `smem`: `R` warps
    /// per block over consecutive row tiles (times `Z` over columns), sharing each 32-row slice
    /// of the dense operand through shared memory (`2:4(smem=R)` or `2:4(smem=RxZ)`, R and Z 1,
    /// 2, 4 or 8, at most 16 warps; `2:4(dbuf=R)` / `2:4(dbuf=RxZ)`: the slices
    /// double-buffered, the next copied with `cp.async` during the current products;
    /// [`spmm_24_tc_smem_gpu_schedule`]).
    TwoFour {
        tiles: Option<usize>,
        smem: Option<SharedTiles>,
    },
    /// Chosen per matrix and feature width.
    Auto,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Csr => f.write_str("csr"),
            Format::Hyb { parts, buckets } => {
                let mut fields = Vec::new();
                if let Some(p) = parts {
                    fields.push(format!("parts={p}"));
                }
                if let Some(b) = buckets {
                    let b: Vec<String> = b.iter().map(|x| x.to_string()).collect();
                    fields.push(format!("buckets={}", b.join(",")));
                }
                if fields.is_empty() {
                    f.write_str("hyb")
                } else {
                    write!(f, "hyb({})", fields.join(","))
                }
            }
            Format::Bsr(b) => write!(f, "bsr:{b}"),
            Format::Ell(None) => f.write_str("ell"),
            Format::Ell(Some(w)) => write!(f, "ell(width={w})"),
            Format::Coo => f.write_str("coo"),
            Format::Sell { sigma: None } => f.write_str("sell"),
            Format::Sell { sigma: Some(s) } => write!(f, "sell(sigma={s})"),
            Format::Condense => f.write_str("condense"),
            Format::TwoFour { smem: Some(t), .. } => {
                let key = t.key();
                let mut ahead = if t.prefetch > 1 {
                    format!(",ahead={}", t.prefetch)
                } else {
                    String::new()
                };
                if t.tma_a {
                    ahead.push_str(",a=tma");
                    if t.packed_positions {
                        ahead.push_str(",meta=packed");
                    }
                    if t.packed_values {
                        ahead.push_str(",vals=packed");
                    }
                    if t.a_from_shared {
                        ahead.push_str(",ss=1");
                    }
                    if t.paired_runs {
                        ahead.push_str(",runs=2");
                    }
                } else if t.stage_a {
                    ahead.push_str(",a=smem");
                }
                if t.in_flight {
                    ahead.push_str(",inflight=1");
                }
                if t.tma {
                    ahead.push_str(",tma=1");
                }
                if t.cluster_y > 1 {
                    ahead.push_str(&format!(",cluster={}x{}", t.cluster, t.cluster_y));
                } else if t.cluster > 1 {
                    ahead.push_str(&format!(",cluster={}", t.cluster));
                }
                if t.producer {
                    ahead.push_str(",producer=1");
                } else if t.release {
                    ahead.push_str(",release=1");
                }
                if t.persistent {
                    ahead.push_str(",persistent=1");
                }
                match (t.cols, t.row_tiles) {
                    (1, 1) => write!(f, "2:4({key}={}{ahead})", t.rows),
                    (z, 1) => write!(f, "2:4({key}={}x{z}{ahead})", t.rows),
                    (z, h) => write!(f, "2:4({key}={}x{z}x{h}{ahead})", t.rows),
                }
            }
            Format::TwoFour { tiles: None, .. } => f.write_str("2:4"),
            Format::TwoFour { tiles: Some(t), .. } => write!(f, "2:4(tiles={t})"),
            Format::Auto => f.write_str("auto"),
        }
    }
}

/// How 2:4 on sparse tensor cores stages B in shared memory (`2:4(smem=RxZ)`,
/// `2:4(dbuf=RxZ)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedTiles {
    /// Warps per block over row tiles of 16 rows.
    pub rows: usize,
    /// Warps per block over columns.
    pub cols: usize,
    /// Slices copied ahead (`cp.async`) while the current one is used: 0 (one slice), 1
    /// (double buffering: `dbuf`, `wgdbuf`), 2 or 3 (`,ahead=A` after the warps).
    pub prefetch: usize,
    /// Row tiles of 16 rows per warp (1, 2 or 4).
    pub row_tiles: usize,
    /// Each 4 row warps issue their products as one warpgroup instruction (Hopper's
    /// `wgmma.mma_async.sp`, sm_90a; `2:4(wgmma=RxZ)`, `2:4(wgdbuf=RxZ)`; R 4 or 8).
    pub warpgroup: bool,
    /// With `prefetch`: A's values and positions staged in shared memory by the slices' copies
    /// (`,a=smem`), instead of read from global memory (into registers one run ahead, for a
    /// warpgroup).
    pub stage_a: bool,
    /// With `stage_a` and `tma`: A's tiles staged by the tensor copy engine too (`,a=tma`: one
    /// box of values, 32-byte swizzled, and one of positions a slice, on the slice's
    /// mbarrier), instead of by every thread's `cp.async`.
    pub tma_a: bool,
    /// With `tma_a`: A's positions packed for the tensor cores (`,meta=packed`: one `u32` word
    /// of 2-bit positions per row and run, derived from the 8-bit positions by the runtime
    /// before the launches; the CUDA writer's `packed_positions`), so that a stage moves a
    /// quarter of the positions' bytes and a lane reads its metadata with two 4-byte loads.
    pub packed_positions: bool,
    /// With `tma_a`: A's values laid out run by run for the tensor cores (`,vals=packed`: the
    /// values of a run for consecutive rows contiguous, derived by the runtime before the
    /// launches; the CUDA writer's `packed_values`), so that the copy engine fills a stage with
    /// rows of 128 bytes instead of one 32-byte segment a row of `A`.
    pub packed_values: bool,
    /// With `tma_a`: the tensor cores read A from the stage through a descriptor (`,ss=1`:
    /// `wgmma`'s shared-memory form; the CUDA writer's `wgmma_ss`) instead of registers an
    /// `ldmatrix` filled, and a run's products are one group, kept in flight while the next
    /// run's metadata loads. With several row tiles a warp, goes with `vals=packed` (whose
    /// layout then puts a warpgroup's tiles of a row unit side by side).
    pub a_from_shared: bool,
    /// With `a_from_shared` and `producer`: the products of two consecutive runs one group
    /// (`,runs=2`: 64 columns of A a group, as cuSPARSELt's 128 x 256 x 64 tiles; the CUDA
    /// writer's `wgmma_ss_runs`), so that twice the tensor-core work stays in flight while the
    /// warps load the next group's metadata.
    pub paired_runs: bool,
    /// With `warpgroup` and `prefetch`: each product kept in flight until the next one is
    /// issued (`,inflight=1`; `wgmma.wait_group 1`, one more slice of B in shared memory), so
    /// that a run's barrier and shared reads overlap the previous run's product.
    pub in_flight: bool,
    /// With `warpgroup` and `prefetch`: B's slices copied by the tensor copy engine
    /// (`,tma=1`; `cp.async.bulk.tensor` boxes of 64 columns, 128-byte swizzled, completing
    /// on one mbarrier a stage) instead of by every thread's `cp.async`.
    pub tma: bool,
    /// With `tma`: thread blocks per cluster (1, 2 or 4; `,cluster=C`). The `C` blocks of a
    /// cluster (consecutive row blocks, the same columns of B) each copy `1 / C` of a slice's
    /// boxes and multicast them to all `C` (`.multicast::cluster`), so that B is read from L2
    /// once per cluster instead of once per block.
    pub cluster: usize,
    /// With `cluster` and `a=tma`: clusters also of `cluster_y` blocks along the columns
    /// (`,cluster=CxY`, C Y at most 8), those of the same rows sharing A's boxes by multicast.
    pub cluster_y: usize,
    /// With `tma` (and `A` not staged, or staged by the copy engine: `,a=tma`): each warp
    /// releases the slices it used on an mbarrier instead of the block's barrier each run
    /// (`,release=1`), so that warps run apart and a slice is refilled as soon as its last
    /// reader is done.
    pub release: bool,
    /// With `release`: a warp of its own makes every copy (`,producer=1`, which implies
    /// `release`; the CUDA writer's `tma_producer`), so that the warps issuing the products
    /// never wait for a stage to be released; `ahead` may then be up to 8.
    pub producer: bool,
    /// With `producer`: a persistent kernel (`,persistent=1`; the CUDA writer's
    /// `tma_persistent`): as many blocks as the GPU runs at once, each walking tiles in turn,
    /// its producer warp copying the next tile's first slices while the other warps store the
    /// last tile's products.
    pub persistent: bool,
}

impl SharedTiles {
    /// B staged in shared memory by `rows x cols` warps of `row_tiles` row tiles each, `prefetch`
    /// slices copied ahead by every thread's `cp.async`, every other option off: the per-warp
    /// `mma.sp` form `2:4(smem=RxZxH)` (`dbuf` with a slice ahead), on which the others build.
    pub fn staged(rows: usize, cols: usize, row_tiles: usize, prefetch: usize) -> SharedTiles {
        SharedTiles {
            rows,
            cols,
            prefetch,
            row_tiles,
            warpgroup: false,
            stage_a: false,
            tma_a: false,
            packed_positions: false,
            packed_values: false,
            a_from_shared: false,
            paired_runs: false,
            in_flight: false,
            tma: false,
            cluster: 1,
            cluster_y: 1,
            release: false,
            producer: false,
            persistent: false,
        }
    }

    /// The form plain `2:4` takes on a GPU of compute capability 9.0 with 16-bit values, for a
    /// matrix of `cols` columns: the fastest measured on an H200 at 4096 x 4096 x 4096
    /// (`bench/gpu/RESULTS.md`, session 45), blocks of 256 x 128 outputs whose warps each issue
    /// two warpgroup products a run, positions packed for the tensor cores, a producer warp six
    /// slices ahead: `2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,
    /// persistent=1)` (0.204 ms, against 0.233 ms for session 23's default and 3.54 ms for the
    /// portable per-warp `mma.sp` kernel). A persistent kernel's runs of 32 columns must fill
    /// its 8 stages evenly; for other widths of `A`, the same blocks launched one a tile
    /// (0.209 ms at 4096³).
    pub fn hopper_default(cols: usize) -> SharedTiles {
        let tiles = SharedTiles {
            warpgroup: true,
            stage_a: true,
            tma_a: true,
            packed_positions: true,
            in_flight: true,
            tma: true,
            release: true,
            producer: true,
            ..SharedTiles::staged(8, 1, 2, 6)
        };
        let persistent = cols.div_ceil(32).is_multiple_of(tiles.stages());
        SharedTiles {
            persistent,
            ..tiles
        }
    }

    /// The slices of B in shared memory at once: the one in use, those copied ahead, and with
    /// `in_flight` the one the product in flight still reads (`ahead=6,inflight=1`: 8).
    pub fn stages(&self) -> usize {
        self.prefetch + 1 + usize::from(self.in_flight)
    }

    /// The format's key: `smem`, `dbuf`, `wgmma` or `wgdbuf`.
    pub fn key(&self) -> &'static str {
        match (self.warpgroup, self.prefetch > 0) {
            (false, false) => "smem",
            (false, true) => "dbuf",
            (true, false) => "wgmma",
            (true, true) => "wgdbuf",
        }
    }
}

/// Why a format name was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad format `{text}`: {reason} (expected csr, hyb, hyb(parts=P,buckets=1,2,4,...), bsr:B, ell, ell(width=W), coo, sell, sell(sigma=S), condense, 2:4, 2:4(tiles=U), 2:4(smem=RxZ), 2:4(dbuf=RxZ[,ahead=A][,a=smem]), 2:4(wgmma=RxZ), 2:4(wgdbuf=RxZ[,ahead=A][,a=smem|tma[,meta=packed][,vals=packed][,ss=1[,runs=2]]][,inflight=1][,tma=1[,cluster=C|CxY][,release=1|producer=1[,persistent=1]]]) or auto)")]
pub struct FormatError {
    pub text: String,
    pub reason: String,
}

/// The options a staged 2:4 format takes after its warps (`2:4(wgdbuf=8,...)`).
const OPTIONS_24: &str = "expected `ahead=A`, `a=smem`, `a=tma`, `meta=packed`, `vals=packed`, \
                          `ss=1`, `runs=2`, `inflight=1`, \
                          `tma=1`, `cluster=C`, `release=1`, `producer=1` or `persistent=1` \
                          after the warps";

fn positive(text: &str, what: &str, v: &str) -> Result<usize, FormatError> {
    match v.trim().parse::<usize>() {
        Ok(x) if x >= 1 => Ok(x),
        _ => Err(FormatError {
            text: text.to_string(),
            reason: format!("{what} must be a positive integer, got `{}`", v.trim()),
        }),
    }
}

/// The value of `name(field=VALUE)` (spaces allowed around the parts).
fn field_call<'a>(t: &'a str, name: &str, field: &str) -> Option<&'a str> {
    let inner = t.strip_prefix(name)?.trim_start().strip_prefix('(')?;
    let inner = inner.strip_suffix(')')?;
    let (k, v) = inner.split_once('=')?;
    (k.trim() == field).then_some(v)
}

/// ELL widths are at most this (a wider row goes to the CSR remainder).
pub const MAX_ELL_WIDTH: usize = 65536;

impl Format {
    /// Parses a format name (see the module documentation).
    pub fn parse(text: &str) -> Result<Format, FormatError> {
        let t = text.trim();
        let err = |reason: &str| FormatError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        match t {
            "csr" => return Ok(Format::Csr),
            "hyb" => {
                return Ok(Format::Hyb {
                    parts: None,
                    buckets: None,
                })
            }
            "ell" => return Ok(Format::Ell(None)),
            "coo" => return Ok(Format::Coo),
            "sell" => return Ok(Format::Sell { sigma: None }),
            "condense" => return Ok(Format::Condense),
            "2:4" => {
                return Ok(Format::TwoFour {
                    tiles: None,
                    smem: None,
                })
            }
            "auto" => return Ok(Format::Auto),
            _ => {}
        }
        let bsr = t
            .strip_prefix("bsr:")
            .or_else(|| field_call(t, "bsr", "block"));
        if let Some(b) = bsr {
            let b = positive(text, "the block size", b)?;
            if b > 64 {
                return Err(err("the block size must be at most 64"));
            }
            return Ok(Format::Bsr(b));
        }
        if let Some(u) = field_call(t, "2:4", "tiles") {
            let tiles = positive(text, "the tiles per warp", u)?;
            if tiles > 8 {
                return Err(err("the tiles per warp must be at most 8"));
            }
            return Ok(Format::TwoFour {
                tiles: Some(tiles),
                smem: None,
            });
        }
        let staged = [
            ("smem", false, false),
            ("dbuf", true, false),
            ("wgmma", false, true),
            ("wgdbuf", true, true),
        ]
        .into_iter()
        .find_map(|(key, d, w)| field_call(t, "2:4", key).map(|v| (v, d, w)));
        if let Some((v, double_buffer, warpgroup)) = staged {
            // After the warps: `ahead=A` (the slices copied ahead: 2 or 3; 1 is `dbuf` itself)
            // and `a=smem` (A staged in shared memory with the slices, `wgdbuf` only).
            let mut options = v.split(',');
            let v = options.next().unwrap_or("");
            let (mut prefetch, mut stage_a, mut tma_a, mut in_flight, mut tma, mut cluster) =
                (usize::from(double_buffer), false, false, false, false, 1);
            let (mut release, mut producer, mut packed_positions) = (false, false, false);
            let (mut packed_values, mut a_from_shared, mut paired_runs) = (false, false, false);
            let mut persistent = false;
            let mut cluster_y = 1;
            for o in options {
                let (key, value) = o
                    .split_once('=')
                    .map(|(k, x)| (k.trim(), x.trim()))
                    .ok_or_else(|| err(OPTIONS_24))?;
                match key {
                    "ahead" => {
                        let a = positive(text, "the slices copied ahead", value)?;
                        if !double_buffer || !(1..=8).contains(&a) {
                            return Err(err(
                                "`ahead=A` (1 to 3 slices copied ahead, up to 8 with \
                                 `producer=1`) goes with dbuf or wgdbuf",
                            ));
                        }
                        prefetch = a;
                    }
                    "a" if value == "smem" || value == "tma" => {
                        if !double_buffer {
                            return Err(err(
                                "`a=smem` (A staged in shared memory) goes with dbuf or wgdbuf",
                            ));
                        }
                        stage_a = true;
                        tma_a = value == "tma";
                    }
                    "inflight" if value == "1" => {
                        if !(double_buffer && warpgroup) {
                            return Err(err(
                                "`inflight=1` (a warpgroup product kept in flight) goes with \
                                 wgdbuf",
                            ));
                        }
                        in_flight = true;
                    }
                    "tma" if value == "1" => {
                        if !(double_buffer && warpgroup) {
                            return Err(err(
                                "`tma=1` (B's slices by the tensor copy engine) goes with wgdbuf",
                            ));
                        }
                        tma = true;
                    }
                    "meta" if value == "packed" => packed_positions = true,
                    "vals" if value == "packed" => packed_values = true,
                    "ss" if value == "1" => a_from_shared = true,
                    "runs" if value == "2" => paired_runs = true,
                    "release" if value == "1" => release = true,
                    "producer" if value == "1" => (release, producer) = (true, true),
                    "persistent" if value == "1" => persistent = true,
                    "cluster" => {
                        let (c, y) = value.split_once('x').unwrap_or((value, "1"));
                        let c = positive(text, "the blocks per cluster", c)?;
                        let y = positive(text, "the blocks per cluster along y", y)?;
                        if ![1, 2, 4].contains(&c) || ![1, 2, 4].contains(&y) || c * y > 8 {
                            return Err(err(
                                "the blocks per cluster (cluster=C or CxY) must be 1, 2 or 4 \
                                 each way, at most 8",
                            ));
                        }
                        (cluster, cluster_y) = (c, y);
                    }
                    _ => return Err(err(OPTIONS_24)),
                }
            }
            if packed_positions && !tma_a {
                return Err(err(
                    "`meta=packed` (positions packed for the tensor cores) goes with `a=tma`",
                ));
            }
            if packed_values && !tma_a {
                return Err(err(
                    "`vals=packed` (values laid out run by run for the tensor cores) goes with \
                     `a=tma`",
                ));
            }
            if paired_runs && !(a_from_shared && producer) {
                return Err(err(
                    "`runs=2` (two runs' products a group) goes with `ss=1` and `producer=1`",
                ));
            }
            if a_from_shared && !(tma_a && warpgroup) {
                return Err(err(
                    "`ss=1` (the tensor cores read A from shared memory) goes with wgdbuf and \
                     `a=tma`",
                ));
            }
            if tma_a && !tma {
                return Err(err(
                    "`a=tma` (A's tiles by the tensor copy engine) goes with `tma=1`",
                ));
            }
            if release && !(tma && (tma_a || !stage_a)) {
                return Err(err(
                    "`release=1` (warps release the slices on mbarriers) goes with `tma=1`, A \
                     not staged or staged by the copy engine (`a=tma`)",
                ));
            }
            if prefetch > 3 && !producer {
                return Err(err(
                    "`ahead=A` past 3 (more slices in flight) goes with a producer warp \
                     (`producer=1`)",
                ));
            }
            if persistent && !producer {
                return Err(err(
                    "`persistent=1` (blocks walking tiles in turn) goes with a producer warp \
                     (`producer=1`)",
                ));
            }
            if cluster_y > 1 && !tma_a {
                return Err(err(
                    "`cluster=CxY` with Y > 1 (blocks along the columns sharing A's boxes) goes \
                     with `a=tma`",
                ));
            }
            if (cluster > 1 || cluster_y > 1) && !tma {
                return Err(err(
                    "`cluster=C` (B's boxes multicast to a cluster of blocks) goes with `tma=1`",
                ));
            }
            let mut parts = v.split('x');
            let r = parts.next().unwrap_or("");
            let z = parts.next().unwrap_or("1");
            let h = parts.next().unwrap_or("1");
            if parts.next().is_some() {
                return Err(err("expected R, RxZ or RxZxH warps and row tiles"));
            }
            let rows = positive(text, "the row-tile warps per block", r)?;
            let cols = positive(text, "the column warps per block", z)?;
            let row_tiles = positive(text, "the row tiles per warp", h)?;
            if ![1, 2, 4].contains(&row_tiles) {
                return Err(err("the row tiles per warp (RxZxH) must be 1, 2 or 4"));
            }
            if a_from_shared && (cols > 1 || (row_tiles > 1 && !packed_values)) {
                return Err(err(
                    "`ss=1` takes row warps only (RxZ with Z = 1), and with several row tiles a \
                     warp `vals=packed` (whose layout puts a warpgroup's tiles side by side)",
                ));
            }
            if ![1, 2, 4, 8].contains(&rows) || ![1, 2, 4, 8].contains(&cols) || rows * cols > 16 {
                return Err(err(
                    "the warps per block (smem=R or RxZ) must be 1, 2, 4 or 8 each, at most 16",
                ));
            }
            if warpgroup && rows % 4 != 0 {
                return Err(err(
                    "a warpgroup is 4 row warps: the row warps (wgmma=R) must be 4 or 8",
                ));
            }
            return Ok(Format::TwoFour {
                tiles: None,
                smem: Some(SharedTiles {
                    rows,
                    cols,
                    prefetch,
                    row_tiles,
                    warpgroup,
                    stage_a,
                    tma_a,
                    packed_positions,
                    packed_values,
                    a_from_shared,
                    paired_runs,
                    in_flight,
                    tma,
                    cluster,
                    cluster_y,
                    release,
                    producer,
                    persistent,
                }),
            });
        }
        if let Some(sg) = field_call(t, "sell", "sigma") {
            let sigma = positive(text, "the sorting window", sg)?;
            return Ok(Format::Sell { sigma: Some(sigma) });
        }
        let ell = t.strip_suffix("+csr").map_or(t, str::trim);
        if ell == "ell" {
            return Ok(Format::Ell(None));
        }
        if let Some(w) = field_call(ell, "ell", "width") {
            let w = positive(text, "the ELL width", w)?;
            if w > MAX_ELL_WIDTH {
                return Err(err("the ELL width must be at most 65536"));
            }
            return Ok(Format::Ell(Some(w)));
        }
        let Some(inner) = t.strip_prefix("hyb(").and_then(|r| r.strip_suffix(')')) else {
            return Err(err("unknown format"));
        };
        let (mut parts, mut buckets) = (None, None);
        // `parts=2,buckets=1,2,4`: a field starts at `name=`; later bare numbers extend it.
        let mut field: Option<&str> = None;
        for item in inner.split(',').map(str::trim) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v),
                None => match field {
                    Some(n) => (n, item),
                    None => return Err(err("expected `name=value`")),
                },
            };
            field = Some(name);
            match name {
                "parts" => {
                    if parts.is_some() {
                        return Err(err("`parts` given twice"));
                    }
                    parts = Some(positive(text, "parts", value)?);
                }
                "buckets" => {
                    let w = positive(text, "a bucket width", value)?;
                    let list: &mut Vec<usize> = buckets.get_or_insert_with(Vec::new);
                    if list.last().is_some_and(|&l| l >= w) {
                        return Err(err("bucket widths must increase"));
                    }
                    if w > MAX_BUCKET {
                        return Err(err("bucket widths must be at most 4096"));
                    }
                    list.push(w);
                }
                other => return Err(err(&format!("unknown field `{other}`"))),
            }
        }
        Ok(Format::Hyb { parts, buckets })
    }
}
