//! Composable formats of SpMM and SDDMM (SPEC §5.3): the format names `sparsetir bench
//! --format` takes (`csr`, `hyb`, `hyb(parts=P,buckets=1,2,4)`, `bsr:B` or `bsr(block=B)`, `ell`
//! or `ell(width=W)`, `coo`, `2:4(...)`, `auto`; parsed in `format.rs`), the stage-III schedules of a hyb-decomposed csrmm (one section per
//! (part, bucket) block, from `schedules/hyb_{init,bucket}.sched`) and of an ELL+CSR-decomposed
//! csrmm (`schedules/ell_csr.sched`), the ELL width chosen from the degree distribution, and the
//! choice of candidates for `auto` from the matrix's degree distribution, block fill and the
//! feature width (SpMM; SDDMM's `auto` measures [`SDDMM_AUTO_CANDIDATES`]); the schedule of
//! SDDMM on COO; SpMV on SELL-C-σ (`sell`, `sell(sigma=S)`: its script, schedule and default
//! sorting window).

use sparsetir_ir::DType;

/// Bucket widths are powers of two up to at most this.
pub const MAX_BUCKET: usize = 4096;

/// The widest default hyb bucket on the GPU: rows past it are cut into pieces added atomically,
/// so every warp walks at most 32 slots (measured on an H100 against buckets up to 128 and up
/// to the longest row: `bench/gpu/results/session6-hyb-buckets`).
pub const GPU_MAX_BUCKET: usize = 32;

mod format;

pub use format::{Format, FormatError, SharedTiles, MAX_ELL_WIDTH};

/// The row degrees of a CSR matrix (`indptr` of length `rows + 1`, non-decreasing).
pub fn degrees(indptr: &[i32]) -> Vec<usize> {
    indptr
        .windows(2)
        .map(|w| (w[1] - w[0]).max(0) as usize)
        .collect()
}

/// The largest number of entries a row has inside one of `parts` column parts (part width
/// `ceil(cols / parts)`, as `builders::hyb`). Out-of-range columns are ignored.
pub fn max_part_degree(indptr: &[i32], indices: &[i32], cols: usize, parts: usize) -> usize {
    let w = cols.div_ceil(parts.max(1)).max(1);
    let mut best = 0;
    let mut count = vec![0usize; parts.max(1)];
    for r in indptr.windows(2) {
        let (lo, hi) = (
            r[0].max(0) as usize,
            (r[1].max(0) as usize).min(indices.len()),
        );
        count.iter_mut().for_each(|c| *c = 0);
        for &c in indices.get(lo..hi).unwrap_or(&[]) {
            if let Some(x) = count.get_mut(c.max(0) as usize / w) {
                *x += 1;
                best = best.max(*x);
            }
        }
    }
    best
}

/// [`default_buckets`] up to [`GPU_MAX_BUCKET`]: the buckets of a hyb on the GPU, where rows
/// past the widest are cut into pieces of it (every warp walks at most that many slots).
pub fn default_gpu_buckets(
    indptr: &[i32],
    indices: &[i32],
    cols: usize,
    parts: usize,
) -> Vec<usize> {
    let mut b = default_buckets(indptr, indices, cols, parts);
    b.retain(|w| *w <= GPU_MAX_BUCKET);
    b
}

/// Bucket widths `1, 2, 4, ..., cap` with `cap` the power of two at least the longest row of a
/// column part ([`max_part_degree`]), at most [`MAX_BUCKET`]: no row is split (split rows need
/// atomic updates, which cost far more on a CPU than the padding of a bucket at most twice as
/// wide as its rows) unless a row is longer than [`MAX_BUCKET`].
pub fn default_buckets(indptr: &[i32], indices: &[i32], cols: usize, parts: usize) -> Vec<usize> {
    let d = max_part_degree(indptr, indices, cols, parts);
    let cap = d.clamp(1, MAX_BUCKET).next_power_of_two().min(MAX_BUCKET);
    let mut out = vec![1];
    while *out.last().unwrap_or(&1) < cap {
        let next = out.last().map_or(1, |x| x * 2);
        out.push(next);
    }
    out
}

/// The default ELL width of a matrix: the longest row when it is at most twice the mean degree
/// (near-uniform rows: plain ELL, no remainder), otherwise the 90th percentile of the row
/// degrees (the longer rows' entries past it go to the CSR remainder); at least 1.
pub fn ell_width(indptr: &[i32]) -> usize {
    let mut d = degrees(indptr);
    let rows = d.len();
    let nnz: usize = d.iter().sum();
    let max = d.iter().copied().max().unwrap_or(0);
    if rows == 0 || max.saturating_mul(rows) <= nnz.saturating_mul(2) {
        return max.max(1);
    }
    d.sort_unstable();
    let k = (rows * 9).div_ceil(10).clamp(1, rows) - 1;
    d[k].max(1)
}

/// Stored blocks of the `b × b` blocking of a CSR matrix with `cols` columns (blocks holding
/// at least one entry; out-of-range columns are ignored).
pub fn bsr_blocks(indptr: &[i32], indices: &[i32], cols: usize, b: usize) -> usize {
    let b = b.max(1);
    let rows = indptr.len().saturating_sub(1);
    let mut mark = vec![usize::MAX; cols.div_ceil(b)];
    let mut blocks = 0;
    for br in 0..rows.div_ceil(b) {
        for i in br * b..((br + 1) * b).min(rows) {
            let (lo, hi) = (
                indptr[i].max(0) as usize,
                (indptr[i + 1].max(0) as usize).min(indices.len()),
            );
            for &c in indices.get(lo..hi).unwrap_or(&[]) {
                if let Some(m) = mark.get_mut(c.max(0) as usize / b) {
                    if *m != br {
                        *m = br;
                        blocks += 1;
                    }
                }
            }
        }
    }
    blocks
}

/// The fraction of the stored `b × b` blocks' slots that hold entries: `nnz / (blocks · b²)`
/// (1 for an empty matrix).
pub fn bsr_fill(indptr: &[i32], indices: &[i32], cols: usize, b: usize) -> f64 {
    let blocks = bsr_blocks(indptr, indices, cols, b);
    if blocks == 0 {
        return 1.0;
    }
    indices.len() as f64 / (blocks * b * b) as f64
}

/// Block sizes `auto` tries for BSR.
pub const AUTO_BSR_BLOCKS: [usize; 3] = [2, 4, 8];

/// Smallest block fill ([`bsr_fill`]) for which `auto` tries a BSR block size: below it, most
/// of the block products multiply explicit zeros.
pub const AUTO_BSR_MIN_FILL: f64 = 0.5;

/// The formats `auto` measures for a matrix with `cols` columns at feature width `feat`: CSR,
/// hyb with one part, and — when the dense operand (`cols × feat` floats) is larger than a
/// core's share of cache (1 MiB) — hyb with 2 and 4 column parts (each part reads a slice of
/// the dense operand that is a half or a quarter of it); `bsr:B` for each `B` of
/// [`AUTO_BSR_BLOCKS`] whose block fill is at least [`AUTO_BSR_MIN_FILL`]; and `ell` when the
/// rows are near-uniform (the longest at most twice the mean degree, so [`ell_width`] pads to
/// it with no remainder).
pub fn auto_candidates(indptr: &[i32], indices: &[i32], cols: usize, feat: usize) -> Vec<Format> {
    let mut out = vec![Format::Csr];
    let dense_bytes = cols.saturating_mul(feat).saturating_mul(4);
    let mut parts = vec![1];
    if dense_bytes > 1 << 20 {
        parts.extend([2, 4]);
    }
    for p in parts {
        if p > cols.max(1) {
            continue;
        }
        out.push(Format::Hyb {
            parts: Some(p),
            buckets: Some(default_buckets(indptr, indices, cols, p)),
        });
    }
    let rows = indptr.len().saturating_sub(1);
    let nnz = indices.len();
    if nnz == 0 {
        return out;
    }
    for b in AUTO_BSR_BLOCKS {
        if b <= rows.max(cols) && bsr_fill(indptr, indices, cols, b) >= AUTO_BSR_MIN_FILL {
            out.push(Format::Bsr(b));
        }
    }
    let max = degrees(indptr).into_iter().max().unwrap_or(0);
    if max.saturating_mul(rows) <= nnz.saturating_mul(2) {
        out.push(Format::Ell(None));
    }
    out
}

/// The formats `auto` measures for SDDMM: the CSR rows, and COO's flat loop over the stored
/// elements (faster on low-degree graphs: the elements are balanced across threads exactly).
pub const SDDMM_AUTO_CANDIDATES: [Format; 2] = [Format::Csr, Format::Coo];

/// What SpMV's `auto` measures: CSR under four schedules, the default (`schedules/spmv.sched`:
/// AVX-512 gathers on rows of 32 or more, one scalar chain below), [`SPMV_GATHER_SCHEDULE`]
/// (gathers from 16, then four scalar chains), [`SPMV_MASKED_SCHEDULE`] (every row in gather
/// steps, the last partial one masked) and [`SPMV_SCALAR_SCHEDULE`] (one plain loop per row),
/// as `(name, schedule text)`.
pub const SPMV_AUTO_CANDIDATES: [(&str, &str); 4] = [
    ("csr", include_str!("../schedules/spmv.sched")),
    ("csr+gather", SPMV_GATHER_SCHEDULE),
    ("csr+masked", SPMV_MASKED_SCHEDULE),
    ("csr+scalar", SPMV_SCALAR_SCHEDULE),
];

/// Rows per SELL chunk: one AVX-512 vector of `float`s.
pub const SELL_LANES: usize = 16;

/// The SELL sorting window [`sell_sigma`] starts from: 4096 rows keep the output writes and
/// most of the rows' neighbourhoods local while sorting away most of the padding of meshes and
/// citation graphs.
pub const SELL_WINDOW: usize = 4096;

/// The largest padding (stored slots per entry) [`sell_sigma`] accepts from a window of
/// [`SELL_WINDOW`] rows before it sorts the whole matrix instead.
pub const SELL_MAX_FILL: f64 = 1.25;

/// The default SELL sorting window of a CSR matrix: [`SELL_WINDOW`] rows, unless chunks cut
/// from windows that size would store more than [`SELL_MAX_FILL`] slots per entry (power-law
/// graphs: a window still mixes long and short rows) — then one window over all rows, which
/// pads least.
pub fn sell_sigma(indptr: &[i32]) -> usize {
    let d = degrees(indptr);
    let rows = d.len();
    let nnz: usize = d.iter().sum();
    if rows <= SELL_WINDOW || nnz == 0 {
        return rows.max(1);
    }
    let mut slots = 0usize;
    for window in d.chunks(SELL_WINDOW) {
        let mut w = window.to_vec();
        w.sort_unstable_by(|a, b| b.cmp(a));
        slots += w
            .chunks(SELL_LANES)
            .map(|c| c[0] * SELL_LANES)
            .sum::<usize>();
    }
    if slots as f64 <= SELL_MAX_FILL * nnz as f64 {
        SELL_WINDOW
    } else {
        rows
    }
}

/// Rows per tile and columns per group of the condensed (TC-GNN) format: one m16n8k16
/// tensor-core product per group.
pub const CONDENSE_TILE: usize = 16;

/// SpMM on the condensed tiling (`formats/condense_spmm.sp`).
pub const CONDENSE_SPMM_SCRIPT: &str = include_str!("../formats/condense_spmm.sp");

/// The CPU schedule of [`CONDENSE_SPMM_SCRIPT`] (`schedules/condense_spmm.sched`).
pub const CONDENSE_SPMM_SCHEDULE: &str = include_str!("../schedules/condense_spmm.sched");

/// The stage-I function of [`CONDENSE_SPMM_SCRIPT`].
pub fn condense_spmm() -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    parse_format("condense_spmm", CONDENSE_SPMM_SCRIPT)
}

/// Sparse convolution as gather-GEMM-scatter over a rulebook (`formats/sparse_conv.sp`).
pub const SPARSE_CONV_SCRIPT: &str = include_str!("../formats/sparse_conv.sp");

/// The CPU schedule of [`SPARSE_CONV_SCRIPT`] (`schedules/sparse_conv.sched`; the GPU one is
/// `gpu_schedule("sparse_conv")`).
pub const SPARSE_CONV_SCHEDULE: &str = include_str!("../schedules/sparse_conv.sched");

/// The stage-I function of [`SPARSE_CONV_SCRIPT`].
pub fn sparse_conv() -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    parse_format("sparse_conv", SPARSE_CONV_SCRIPT)
}

/// Block-sparse attention's scores (`formats/bsr_sddmm.sp`): `C = A Bᵀ` on the stored blocks
/// of a BSR pattern; with `gpu_schedule("bsr_sddmm_tc")` on tensor cores.
pub const BSR_SDDMM_SCRIPT: &str = include_str!("../formats/bsr_sddmm.sp");

/// The CPU schedule of [`BSR_SDDMM_SCRIPT`] (`schedules/bsr_sddmm.sched`).
pub const BSR_SDDMM_SCHEDULE: &str = include_str!("../schedules/bsr_sddmm.sched");

/// The CPU schedule of [`BSR_SDDMM_SCRIPT`] with 16-bit operands
/// (`schedules/bsr_sddmm_half.sched`: Q's and K's blocks widened to float32 once per block).
pub const BSR_SDDMM_HALF_SCHEDULE: &str = include_str!("../schedules/bsr_sddmm_half.sched");

/// The stage-I function of [`BSR_SDDMM_SCRIPT`].
pub fn bsr_sddmm() -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    parse_format("bsr_sddmm", BSR_SDDMM_SCRIPT)
}

/// Block-sparse attention's softmax (`formats/bsr_softmax.sp`): each row of tokens over its
/// stored blocks, scaled; the GPU schedule is `gpu_schedule("bsr_softmax")`.
pub const BSR_SOFTMAX_SCRIPT: &str = include_str!("../formats/bsr_softmax.sp");

/// The CPU schedule of [`BSR_SOFTMAX_SCRIPT`] (`schedules/bsr_softmax.sched`).
pub const BSR_SOFTMAX_SCHEDULE: &str = include_str!("../schedules/bsr_softmax.sched");

/// The stage-I function of [`BSR_SOFTMAX_SCRIPT`].
pub fn bsr_softmax() -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    parse_format("bsr_softmax", BSR_SOFTMAX_SCRIPT)
}

/// Block-sparse attention's softmax statistic (`formats/bsr_softmax_lse.sp`): per row of
/// tokens, `scale max + log(sum of exp(scale (A - max)))` over the stored blocks, for
/// [`bsr_softmax_mm`]; the CPU schedule is [`BSR_SOFTMAX_LSE_SCHEDULE`], the GPU one
/// `gpu_schedule("bsr_softmax_lse")`.
pub const BSR_SOFTMAX_LSE_SCRIPT: &str = include_str!("../formats/bsr_softmax_lse.sp");

/// The CPU schedule of [`BSR_SOFTMAX_LSE_SCRIPT`] (`schedules/bsr_softmax_lse.sched`).
pub const BSR_SOFTMAX_LSE_SCHEDULE: &str = include_str!("../schedules/bsr_softmax_lse.sched");

/// The stage-I function of [`BSR_SOFTMAX_LSE_SCRIPT`].
pub fn bsr_softmax_lse() -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    parse_format("bsr_softmax_lse", BSR_SOFTMAX_LSE_SCRIPT)
}

/// Block-sparse attention's product with the softmax made on the fly
/// (`formats/bsr_softmax_mm.sp`): `O = P V` with `P = exp(scale S - L)` from the scores `S`
/// and [`bsr_softmax_lse`]'s `L`, each probability rounded to `prob` (the 16-bit type of the
/// tensor cores' operands, as a stored probability would be; `F32`: not rounded). Its
/// iteration is bsrmm's, so bsrmm's schedules (CPU, GPU, tensor cores) apply unchanged.
pub fn bsr_softmax_mm(prob: DType) -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    let p = "T.exp(S[i, j, bi, bj] * scale - L[i, bi])";
    let p = match prob {
        DType::F32 => p.to_string(),
        dt => format!("T.float32(T.{dt}({p}))"),
    };
    parse_format(
        "bsr_softmax_mm",
        &include_str!("../formats/bsr_softmax_mm.sp").replace("PROB", &p),
    )
}

/// The function of one of this module's scripts (`name` for its errors).
fn parse_format(name: &str, text: &str) -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    sparsetir_syntax::parse_func(text).map_err(|diags| crate::LoadError::Parse {
        name: name.to_string(),
        diags,
    })
}

/// SpMV on SELL-C-σ (`formats/spmv_sell.sp`): the script, with `lanes` to be specialised to
/// [`SELL_LANES`].
pub const SPMV_SELL_SCRIPT: &str = include_str!("../formats/spmv_sell.sp");

/// The CPU schedule of [`SPMV_SELL_SCRIPT`] (`schedules/spmv_sell.sched`).
pub const SPMV_SELL_SCHEDULE: &str = include_str!("../schedules/spmv_sell.sched");

/// The stage-I function of [`SPMV_SELL_SCRIPT`].
pub fn spmv_sell() -> Result<sparsetir_ir::PrimFunc, crate::LoadError> {
    parse_format("spmv_sell", SPMV_SELL_SCRIPT)
}

/// SpMV's schedule for graphs of short rows (`schedules/spmv_scalar.sched`).
pub const SPMV_SCALAR_SCHEDULE: &str = include_str!("../schedules/spmv_scalar.sched");

/// SpMV's schedule for power-law graphs (`schedules/spmv_masked.sched`).
pub const SPMV_MASKED_SCHEDULE: &str = include_str!("../schedules/spmv_masked.sched");

/// SpMV's schedule for rows of moderate length (`schedules/spmv_gather.sched`).
pub const SPMV_GATHER_SCHEDULE: &str = include_str!("../schedules/spmv_gather.sched");

/// The stage-III schedule of csrmm decomposed into `parts` column parts × `num_buckets`
/// buckets (block names `csrmm_<p>_<k>1`): the init nest in parallel, then every bucket's rows
/// in parallel with its feature loop vectorised.
pub fn hyb_spmm_schedule(parts: usize, num_buckets: usize) -> String {
    hyb_schedule(
        include_str!("../schedules/hyb_init.sched"),
        include_str!("../schedules/hyb_bucket.sched"),
        parts,
        num_buckets,
        &[],
    )
}

/// A tensor-core GPU schedule (`gpu/bsrmm_tc.sched`, `bsrmm_tc32.sched`,
/// `condense_spmm_tc.sched`: a warp of 8 feature columns each; `bsrmm_tc2.sched`: 16) for
/// `feat` columns: as written up to 256 columns (32 or 16 warps); wider, the columns also
/// spread over `blockIdx.y`, 256 columns per thread block.
pub fn tensor_core_gpu_schedule(sched: &str, feat: usize) -> String {
    if feat <= 256 {
        return sched.to_string();
    }
    sched
        .replace(
            "zfo, zfi = sch.split(zf, [None, 8])",
            "zfy, zfo, zfi = sch.split(zf, [None, 32, 8])\nsch.bind(zfy, \"blockIdx.y\")",
        )
        .replace("sch.reorder(zfo, ", "sch.reorder(zfy, zfo, ")
        .replace(
            "fo, fi = sch.split(f, [None, 8])",
            "fy, fo, fi = sch.split(f, [None, 32, 8])\nsch.bind(fy, \"blockIdx.y\")",
        )
        // Two tiles per warp (`bsrmm_tc2.sched`): 16 warps of 16 columns per thread block.
        .replace(
            "zfo, zfu, zfi = sch.split(zf, [None, 2, 8])",
            "zfy, zfo, zfu, zfi = sch.split(zf, [None, 16, 2, 8])\nsch.bind(zfy, \"blockIdx.y\")",
        )
        .replace(
            "fo, fu, fi = sch.split(f, [None, 2, 8])",
            "fy, fo, fu, fi = sch.split(f, [None, 16, 2, 8])\nsch.bind(fy, \"blockIdx.y\")",
        )
        .replace("sch.reorder(fo, ", "sch.reorder(fy, fo, ")
}

/// The sparse tensor-core GPU schedule of spmm_24 (`schedules/gpu/spmm_24_tc.sched`) for an
/// `m x n` 2:4 matrix (`m` a multiple of 16, `n` of 32) and a feature width that is a multiple
/// of `8 * warps * units`, with `m`, `n` and `feat_size` specialised: one `mma.sp` m16n8k32 per
/// run of 8 groups of a 16-row tile and 8 feature columns, `warps` warps per thread block, each
/// with `units` (1 to 8) tiles of 8 columns side by side — their accumulators in registers,
/// the run's `A` fragment and metadata read once for all of them.
pub fn spmm_24_tc_gpu_schedule(n: usize, warps: usize, units: usize) -> String {
    include_str!("../schedules/gpu/spmm_24_tc.sched")
        .replace("GROUPS", &(n / 4).to_string())
        .replace("WARPS", &warps.max(1).to_string())
        .replace("UNITS", &units.max(1).to_string())
}

/// The CPU schedule of spmm_24 (`schedules/spmm_24_rows.sched`) for an `m x n` 2:4 matrix with
/// `n` and `feat_size` specialised: rows in parallel, each walking its `n / 4` groups, the
/// feature loop vectorised (the catalog's default walks every group once per feature).
pub fn spmm_24_cpu_schedule(n: usize) -> String {
    include_str!("../schedules/spmm_24_rows.sched").replace("GROUPS", &(n / 4).max(1).to_string())
}

/// The sparse tensor-core GPU schedule of spmm_24 with the dense operand staged in shared memory
/// (`schedules/gpu/spmm_24_tc_smem.sched`) for an `m x n` 2:4 matrix (`m` a multiple of `16 *
/// rows * row_tiles`, `n` of 32) and a feature width that is a multiple of `8 * units * cols`
/// (`tiles`: [`SharedTiles`]): a block of `rows x cols` warps covers `rows * row_tiles`
/// consecutive 16-row tiles and `8 * units * cols` feature columns; for every run of 8 groups
/// (32 columns of `A`) its threads copy that slice of `B` (32 rows) into shared memory together
/// (`cache_read`, `compute_at`), and each warp multiplies its `row_tiles` tiles' `A` fragments
/// by its `units` tiles of the slice (`mma.sp`; each `B` fragment read once for all its row
/// tiles), accumulators in registers. `B` then comes from global memory once per block instead
/// of once per row tile.
///
/// With `prefetch` A > 0, the run loop keeps A + 1 slices (`{"double_buffer": A}`): the slice
/// of the run A ahead is copied with `cp.async` while the current one is multiplied. With
/// `warpgroup`
/// (`schedules/gpu/spmm_24_tc_wgmma.sched`), each 4 row warps issue their products of a run as
/// one `wgmma.mma_async.sp` (sm_90a) reading the slice through a descriptor.
pub fn spmm_24_tc_smem_gpu_schedule(n: usize, tiles: SharedTiles, units: usize) -> String {
    let (rows, cols, units) = (tiles.rows.max(1), tiles.cols.max(1), units.max(1));
    let double = if tiles.prefetch > 0 {
        format!("sch.annotate(gko, \"double_buffer\", {})", tiles.prefetch)
    } else {
        String::new()
    };
    let text = if tiles.warpgroup {
        include_str!("../schedules/gpu/spmm_24_tc_wgmma.sched")
    } else {
        include_str!("../schedules/gpu/spmm_24_tc_smem.sched")
    };
    let mut text = text
        .replace("GROUPS", &(n / 4).to_string())
        .replace("ROWW", &rows.to_string())
        .replace("ROWU", &tiles.row_tiles.max(1).to_string())
        .replace("COLW", &cols.to_string())
        .replace("UNITS", &units.to_string())
        .replace("COPYW", &rows.min(units).to_string())
        .replace("DOUBLE", &double);
    // A's values and positions staged in shared memory with the slices (the CUDA writer's
    // `stage_a`).
    if tiles.stage_a && tiles.tma_a {
        // (By the tensor copy engine with B's slices.)
        text.push_str("sch.annotate(gko, \"stage_a\", \"tma\")\n");
        // (Its positions packed for the tensor cores: the CUDA writer's `packed_positions`.)
        if tiles.packed_positions {
            text.push_str("sch.annotate(gko, \"packed_positions\", 1)\n");
        }
        // (Its values laid out run by run: the CUDA writer's `packed_values`.)
        if tiles.packed_values {
            text.push_str("sch.annotate(gko, \"packed_values\", 1)\n");
        }
        // (The tensor cores reading it from the stage: the CUDA writer's `wgmma_ss`.)
        if tiles.a_from_shared {
            text.push_str("sch.annotate(gko, \"wgmma_ss\", 1)\n");
        }
        // (Two runs' products a group: the CUDA writer's `wgmma_ss_runs`.)
        if tiles.paired_runs {
            text.push_str("sch.annotate(gko, \"wgmma_ss_runs\", 2)\n");
        }
    } else if tiles.stage_a {
        text.push_str("sch.annotate(gko, \"stage_a\", 1)\n");
    }
    // Each warpgroup product kept in flight over the next run (`wgmma.wait_group 1`).
    if tiles.in_flight {
        text.push_str("sch.annotate(gko, \"wgmma_in_flight\", 1)\n");
    }
    // B's slices by the tensor copy engine (the CUDA writer's `tma`).
    if tiles.tma {
        text.push_str("sch.annotate(gko, \"tma\", 1)\n");
    }
    // Each box multicast to the blocks of a cluster (the CUDA writer's `tma_cluster`).
    // Each warp releasing the slices it used (the CUDA writer's `tma_release`).
    if tiles.tma && tiles.release {
        text.push_str("sch.annotate(gko, \"tma_release\", 1)\n");
    }
    // A warp of its own making every copy (the CUDA writer's `tma_producer`).
    if tiles.tma && tiles.release && tiles.producer {
        text.push_str("sch.annotate(gko, \"tma_producer\", 1)\n");
    }
    // Blocks walking tiles in turn (the CUDA writer's `tma_persistent`).
    if tiles.tma && tiles.producer && tiles.persistent {
        text.push_str("sch.annotate(gko, \"tma_persistent\", 1)\n");
    }
    if tiles.tma && tiles.cluster_y > 1 {
        text.push_str(&format!(
            "sch.annotate(gko, \"tma_cluster_y\", {})\n",
            tiles.cluster_y
        ));
    }
    if tiles.tma && tiles.cluster > 1 {
        text.push_str(&format!(
            "sch.annotate(gko, \"tma_cluster\", {})\n",
            tiles.cluster
        ));
    }
    text
}

/// The GPU schedules of hyb SpMM: `schedules/gpu/hyb_init.sched` for the zero fill of C (when
/// there is one), then a bucket schedule for every (part, bucket) block, part-major, each
/// marked atomic where [`atomic`](Self::atomic) says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybGpuSchedule<'a> {
    /// Column parts.
    pub parts: usize,
    /// Buckets per part.
    pub num_buckets: usize,
    /// The atomic flag of every (part, bucket) block, part-major (it holds rows another
    /// bucket row writes too).
    pub atomic: &'a [bool],
    /// Whether the function zeroes C first (block `csrmm_init0`); not where
    /// `fold_zero_fill` moved the fill into the buckets' inits (every row in one bucket row).
    pub zero_fill: bool,
    /// Whether the function has the DCSR rest of the long rows kept whole
    /// (`hyb_rest_spmm_stage1`), scheduled by `schedules/gpu/hyb_rest.sched` (with
    /// [`vec4`](Self::vec4) and [`wide`](Self::wide): `hyb_rest_vec4.sched`, float4 loads of
    /// B): one row per thread block, its elements over 8 warps.
    pub rest: bool,
}

impl HybGpuSchedule<'_> {
    /// `schedules/gpu/hyb_bucket.sched`: eight bucket rows per block, the features over the
    /// lanes, each thread's `feat / 32` features in registers.
    pub fn scalar(&self) -> String {
        self.with_buckets(
            include_str!("../schedules/gpu/hyb_bucket.sched"),
            include_str!("../schedules/gpu/hyb_rest.sched"),
        )
    }

    /// With 16-byte loads of B (`schedules/gpu/hyb_bucket_vec4.sched`: four consecutive
    /// features per lane), for feature widths that are a multiple of 128.
    pub fn vec4(&self) -> String {
        self.with_buckets(
            include_str!("../schedules/gpu/hyb_bucket_vec4.sched"),
            include_str!("../schedules/gpu/hyb_rest_vec4.sched"),
        )
    }

    /// [`vec4`](Self::vec4) with the features in chunks of 128 over `threadIdx.z`
    /// (`schedules/gpu/hyb_bucket_wide.sched`): each warp one bucket row and one chunk, so that
    /// a row's slots are walked by `feat / 128` warps at once; `2048 / feat` bucket rows per
    /// block (at least one), 512 threads in all up to width 2048. For widths that are a
    /// multiple of 128.
    pub fn wide(&self, feat: usize) -> String {
        let rows = (2048 / feat.max(1)).max(1);
        self.with_buckets(
            &include_str!("../schedules/gpu/hyb_bucket_wide.sched")
                .replace("ROWS", &rows.to_string()),
            include_str!("../schedules/gpu/hyb_rest_vec4.sched"),
        )
    }

    /// The schedule with `bucket` for every bucket and `rest` for the long rows (if any).
    fn with_buckets(&self, bucket: &str, rest: &str) -> String {
        let init = if self.zero_fill {
            include_str!("../schedules/gpu/hyb_init.sched")
        } else {
            "# stage III\n"
        };
        let mut out = hyb_schedule(init, bucket, self.parts, self.num_buckets, self.atomic);
        if self.rest {
            out.push_str(rest);
        }
        out
    }
}

/// `init`, then `bucket` instantiated for every (part, bucket) block (`{block}`: its name,
/// `{tag}`: `<p>_<k>`), each marked atomic where `atomic` says so.
fn hyb_schedule(
    init: &str,
    bucket: &str,
    parts: usize,
    num_buckets: usize,
    atomic: &[bool],
) -> String {
    let mut out = String::from(init);
    for p in 0..parts {
        for k in 0..num_buckets {
            let tag = format!("{p}_{k}");
            out.push_str(
                &bucket
                    .replace("{block}", &format!("csrmm_{tag}1"))
                    .replace("{tag}", &tag),
            );
            if atomic.get(p * num_buckets + k).copied().unwrap_or(false) {
                out.push_str(&format!("sch.annotate(b_{tag}, \"atomic\", True)\n"));
            }
        }
    }
    out
}

/// The schedule of bsrmm for BSR SpMM (`schedules/bsr_spmm.sched`): the blocks of a block row
/// outermost (stage I), block rows in parallel, a local accumulator per block row and the
/// feature loop vectorised. Unlike the catalog's default schedule it does not zero an empty
/// block row's output (see the file).
pub const BSR_SPMM_SCHEDULE: &str = include_str!("../schedules/bsr_spmm.sched");

/// The CPU schedule of BSR SpMM with 16-bit operands (`schedules/bsr_spmm_half.sched`: each
/// block's rows of B widened to float32 once per block).
pub const BSR_SPMM_HALF_SCHEDULE: &str = include_str!("../schedules/bsr_spmm_half.sched");

/// The most elements a widened tile of the `_half` CPU schedules may have: the C writer's
/// limit for arrays on the stack (`sparsetir_codegen::c::STACK_LIMIT`, which a runtime test
/// checks this equals). A larger tile would be allocated on the heap for every block, which
/// costs more than the conversions it saves (`bench spmm --format bsr:16 --dtype float16` at
/// width 512: 8.6 ms with the conversions, 12.5 ms with a heap tile per block).
pub const WIDENED_TILE_MAX: usize = 4096;

/// The CPU schedule of the BSR products with `blk x blk` blocks and `feat` features: with
/// 16-bit operands and a `blk x feat` tile that fits [`WIDENED_TILE_MAX`], `half` (the
/// operand tiles widened to float32 once per block), else `plain`.
pub fn widening_schedule<'a>(
    plain: &'a str,
    half: &'a str,
    sixteen_bit: bool,
    blk: usize,
    feat: usize,
) -> &'a str {
    if sixteen_bit && blk.saturating_mul(feat) <= WIDENED_TILE_MAX {
        half
    } else {
        plain
    }
}

/// The schedule of SDDMM on COO (`schedules/sddmm_coo.sched`, for
/// `sparsetir_runtime::composable::coo::coo_sddmm_stage1`): the element loop (the fused `O`,
/// `I`, `J` loops) in parallel with static chunks, four consecutive elements jammed into one
/// lane loop (across row boundaries), the feature reduction in SIMD lanes, the gathered `B`
/// rows prefetched.
pub const SDDMM_COO_SCHEDULE: &str = include_str!("../schedules/sddmm_coo.sched");

/// The cost model for gather prefetching (SDDMM's `"prefetch"` loop annotations): a software
/// prefetch of the gathered dense rows pays off only when those rows come from beyond the L2
/// cache. When the gathered operand (`gathered_bytes`: rows × feature width × element size)
/// fits in `l2_bytes`, the schedule is returned without its `prefetch` annotations
/// (measured: SDDMM width 32 on bcsstk13, whose operand is 256 KB, 1.3× faster without; on
/// R-MAT 100k, 12.8 MB, 5–10% slower without). Every other line is kept as written.
pub fn gather_prefetch(schedule: &str, gathered_bytes: usize, l2_bytes: usize) -> String {
    if gathered_bytes > l2_bytes {
        return schedule.to_string();
    }
    schedule
        .lines()
        .filter(|l| !(l.trim_start().starts_with("sch.annotate(") && l.contains("\"prefetch\"")))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The stage-III schedule of csrmm decomposed into ELL of width `width` plus, when `rest`, a
/// DCSR remainder (`sparsetir_runtime::composable::ell_csr_spmm_stage1`): the init nest and the
/// ELL rows in parallel (static), the remainder rows in parallel (guided) with a local
/// accumulator; every feature loop vectorised.
pub fn ell_csr_spmm_schedule(width: usize, rest: bool) -> String {
    let mut out = String::from(include_str!("../schedules/hyb_init.sched"));
    out.push_str(
        &include_str!("../schedules/ell_part.sched")
            .replace("{block}", &format!("csrmm_ell{width}0")),
    );
    if rest {
        out.push_str(include_str!("../schedules/dcsr_part.sched"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_prefetch_drops_prefetches_only_for_operands_in_l2() {
        let base = crate::cpu_schedule("sddmm").unwrap();
        assert!(base.contains("\"prefetch\""));
        let big = gather_prefetch(base, 4 << 20, 2 << 20);
        assert_eq!(big, base);
        let small = gather_prefetch(base, 1 << 20, 2 << 20);
        assert!(!small.contains("\"prefetch\""), "{small}");
        assert!(small.contains("\"jam\"") && small.contains("vectorize_reduction"));
        assert_eq!(
            small.lines().count() + 1,
            base.lines().count(),
            "exactly one line dropped"
        );
        let coo = gather_prefetch(SDDMM_COO_SCHEDULE, 0, 1);
        assert!(
            !coo.contains("\"prefetch\"") && coo.contains("\"jam\""),
            "{coo}"
        );
    }

    #[test]
    fn the_hopper_default_is_the_measured_form() {
        let named = |cols| {
            Format::TwoFour {
                tiles: None,
                smem: Some(SharedTiles::hopper_default(cols)),
            }
            .to_string()
        };
        let persistent =
            "2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1)";
        let one_a_tile = "2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1)";
        // Columns padded to runs of 32 that fill the 8 stages (the slice in use, six ahead, the
        // one the product in flight reads) evenly: persistent; any other width: a block a tile.
        for (cols, want) in [
            (4096, persistent),
            (256, persistent),
            (252, persistent),
            (4000, one_a_tile),
            (32, one_a_tile),
            (288, one_a_tile),
        ] {
            assert_eq!(named(cols), want, "{cols} columns");
            assert_eq!(
                Format::parse(want).unwrap(),
                Format::TwoFour {
                    tiles: None,
                    smem: Some(SharedTiles::hopper_default(cols))
                }
            );
        }
        assert_eq!(SharedTiles::hopper_default(4096).stages(), 8);
    }

    #[test]
    fn names_parse_and_print_back() {
        for text in [
            "csr",
            "hyb",
            "ell",
            "auto",
            "bsr:4",
            "hyb(parts=2,buckets=1,2,4,8,16,32)",
            "hyb(parts=3)",
            "hyb(buckets=2,8)",
            "ell(width=16)",
            "coo",
            "2:4",
            "2:4(tiles=4)",
            "2:4(smem=4)",
            "2:4(smem=8x2)",
            "2:4(dbuf=2)",
            "2:4(dbuf=4x4)",
            "2:4(dbuf=4x2x2)",
            "2:4(smem=2x1x4)",
            "2:4(dbuf=4x2x2,ahead=2)",
            "2:4(wgdbuf=8,ahead=3)",
            "2:4(wgdbuf=8x1x2,ahead=2)",
            "2:4(wgdbuf=8,a=smem)",
            "2:4(wgdbuf=8x2x2,ahead=3,a=smem)",
            "2:4(dbuf=4x2x2,ahead=2,a=smem)",
            "2:4(wgdbuf=8,ahead=3,a=smem,inflight=1)",
            "2:4(wgdbuf=8x1x2,ahead=2,inflight=1)",
            "2:4(wgdbuf=8,ahead=3,a=smem,inflight=1,tma=1)",
            "2:4(wgdbuf=8x1x2,ahead=2,tma=1)",
            "2:4(wgdbuf=8,ahead=3,a=smem,inflight=1,tma=1,cluster=2)",
            "2:4(wgdbuf=8x1x2,ahead=2,tma=1,cluster=4)",
            "2:4(wgdbuf=8,ahead=3,a=tma,inflight=1,tma=1,cluster=2)",
            "2:4(wgdbuf=8,a=tma,tma=1)",
            "2:4(wgdbuf=8,ahead=3,a=tma,inflight=1,tma=1,cluster=2,release=1)",
            "2:4(wgdbuf=8,tma=1,release=1)",
            "2:4(wgdbuf=8,ahead=3,a=tma,inflight=1,tma=1,cluster=4x2)",
            "2:4(wgdbuf=8,a=tma,tma=1,cluster=1x2,release=1)",
            "2:4(wgdbuf=8,ahead=6,a=tma,inflight=1,tma=1,producer=1)",
            "2:4(wgdbuf=8,ahead=4,a=tma,inflight=1,tma=1,cluster=2x2,producer=1)",
            "2:4(wgdbuf=8,tma=1,producer=1)",
            "2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1)",
            "2:4(wgdbuf=8,a=tma,meta=packed,tma=1,cluster=2x2)",
            "2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1)",
            "2:4(wgdbuf=8,ahead=6,a=tma,inflight=1,tma=1,cluster=2,producer=1,persistent=1)",
            "2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,cluster=4x2,producer=1,persistent=1)",
            "2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,producer=1,persistent=1)",
            "2:4(wgdbuf=8,a=tma,vals=packed,tma=1,cluster=2x2)",
            "2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,ss=1,inflight=1,tma=1,producer=1)",
            "2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1,persistent=1)",
            "2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1,persistent=1)",
        ] {
            let f = Format::parse(text).unwrap();
            assert_eq!(f.to_string(), text);
        }
        assert_eq!(
            Format::parse("hyb(parts=2, buckets=1, 4)").unwrap(),
            Format::Hyb {
                parts: Some(2),
                buckets: Some(vec![1, 4])
            }
        );
        // `ahead=1` is `dbuf` itself.
        assert_eq!(
            Format::parse("2:4(dbuf=4, ahead = 1)").unwrap().to_string(),
            "2:4(dbuf=4)"
        );
        assert_eq!(Format::parse("bsr(block=4)").unwrap(), Format::Bsr(4));
        assert_eq!(Format::parse("bsr( block = 8 )").unwrap(), Format::Bsr(8));
        assert_eq!(
            Format::parse("ell(width=16)+csr").unwrap(),
            Format::Ell(Some(16))
        );
        assert_eq!(Format::parse("ell+csr").unwrap(), Format::Ell(None));
        assert_eq!(Format::parse(" coo ").unwrap(), Format::Coo);
        for bad in [
            "coo(width=2)",
            "coo:2",
            "bsr:0",
            "bsr(block=0)",
            "bsr(width=4)",
            "ell(width=0)",
            "ell(width=x)",
            "ell(block=2)",
            "ell(width=70000)",
            "ell(width=4)+coo",
            "bsr:x",
            "hyb(parts=0)",
            "hyb(buckets=4,2)",
            "hyb(parts=1,parts=2)",
            "hyb(width=3)",
            "hyb(3)",
            "hyb(parts=2",
            "hyb(buckets=8192)",
            "2:4(tiles=0)",
            "2:4(tiles=9)",
            "2:4(warps=2)",
            "2:4(smem=3)",
            "2:4(smem=8x4)",
            "2:4(dbuf=0)",
            "2:4(dbuf=4x)",
            "2:4(dbuf=4x2x3)",
            "2:4(dbuf=4x2x2x1)",
            "2:4(smem=4,ahead=2)",
            "2:4(wgmma=8,ahead=2)",
            "2:4(smem=4,a=smem)",
            "2:4(wgmma=8,a=smem)",
            "2:4(wgdbuf=8,a=global)",
            "2:4(wgdbuf=8,smem)",
            "2:4(dbuf=4,ahead=4)",
            "2:4(dbuf=4,ahead=0)",
            "2:4(dbuf=4,inflight=1)",
            "2:4(wgmma=8,inflight=1)",
            "2:4(wgdbuf=8,inflight=2)",
            "2:4(dbuf=4,tma=1)",
            "2:4(wgmma=8,tma=1)",
            "2:4(wgdbuf=8,tma=2)",
            "2:4(wgdbuf=8,cluster=2)",
            "2:4(wgdbuf=8,a=tma)",
            "2:4(dbuf=4,a=tma)",
            "2:4(wgdbuf=8,release=1)",
            "2:4(wgdbuf=8,a=smem,tma=1,release=1)",
            "2:4(wgdbuf=8,tma=1,release=2)",
            "2:4(wgdbuf=8,tma=1,cluster=2x2)",
            "2:4(wgdbuf=8,a=tma,tma=1,cluster=4x4)",
            "2:4(wgdbuf=8,a=tma,tma=1,cluster=2x3)",
            "2:4(wgdbuf=8,tma=1,cluster=3)",
            "2:4(wgdbuf=8,tma=1,cluster=8)",
            "2:4(wgdbuf=8,tma=1,cluster=0)",
            "2:4(dbuf=4,behind=2)",
            "2:4(wgdbuf=8,a=tma,tma=1,ahead=4)",
            "2:4(wgdbuf=8,a=smem,meta=packed,tma=1)",
            "2:4(wgdbuf=8,meta=packed,tma=1)",
            "2:4(wgdbuf=8,a=tma,meta=2bit,tma=1)",
            "2:4(wgdbuf=8,a=smem,vals=packed,tma=1)",
            "2:4(wgdbuf=8,vals=packed,tma=1)",
            "2:4(wgdbuf=8,a=tma,vals=tiled,tma=1)",
            "2:4(wgdbuf=8,a=smem,ss=1,tma=1)",
            "2:4(wgmma=8,ss=1)",
            "2:4(wgdbuf=8x1x2,a=tma,ss=1,tma=1)",
            "2:4(wgdbuf=4x2,a=tma,vals=packed,ss=1,tma=1)",
            "2:4(wgdbuf=8,a=tma,ss=2,tma=1)",
            "2:4(wgdbuf=8,a=tma,ss=1,runs=2,tma=1)",
            "2:4(wgdbuf=8,a=tma,runs=2,tma=1,producer=1)",
            "2:4(wgdbuf=8,a=tma,ss=1,runs=3,tma=1,producer=1)",
            "2:4(wgdbuf=8,a=tma,tma=1,release=1,ahead=5)",
            "2:4(wgdbuf=8,a=tma,tma=1,producer=1,ahead=9)",
            "2:4(wgdbuf=8,producer=1)",
            "2:4(wgdbuf=8,a=smem,tma=1,producer=1)",
            "2:4(wgdbuf=8,tma=1,producer=2)",
            "2:4(wgdbuf=8,a=tma,tma=1,persistent=1)",
            "2:4(wgdbuf=8,a=tma,tma=1,release=1,persistent=1)",
            "2:4(wgdbuf=8,a=tma,tma=1,producer=1,persistent=2)",
        ] {
            assert!(Format::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn default_buckets_cover_the_longest_part_row() {
        // Row 0: columns 0..5 (5 entries, all in part 0 of 2 when cols = 10); row 1: 0, 9.
        let indptr = [0, 5, 7];
        let indices = [0, 1, 2, 3, 4, 0, 9];
        assert_eq!(max_part_degree(&indptr, &indices, 10, 1), 5);
        assert_eq!(max_part_degree(&indptr, &indices, 10, 2), 5);
        assert_eq!(max_part_degree(&indptr, &indices, 10, 5), 2);
        assert_eq!(default_buckets(&indptr, &indices, 10, 1), vec![1, 2, 4, 8]);
        assert_eq!(default_buckets(&indptr, &indices, 10, 5), vec![1, 2]);
        assert_eq!(default_buckets(&[0, 0, 0], &[], 3, 1), vec![1]);
    }

    #[test]
    fn candidates_add_parts_for_large_dense_operands() {
        // Two rows with one entry each in columns 0, 1 (one 2 × 2 block, half full).
        let (indptr, indices) = ([0, 1, 2], [0, 1]);
        let hyb = |c: &[Format]| c.iter().filter(|f| matches!(f, Format::Hyb { .. })).count();
        assert_eq!(hyb(&auto_candidates(&indptr, &indices, 100, 32)), 1);
        assert_eq!(hyb(&auto_candidates(&indptr, &indices, 100_000, 32)), 3);
    }

    #[test]
    fn candidates_add_full_blocks_and_uniform_rows() {
        // A 4 × 4 matrix of two full 2 × 2 diagonal blocks: fill 1 for B = 2, 8 / 16 for B = 4,
        // 8 / 64 for B = 8; every row has 2 entries (uniform: ell).
        let indptr = [0, 2, 4, 6, 8];
        let indices = [0, 1, 0, 1, 2, 3, 2, 3];
        assert_eq!(bsr_blocks(&indptr, &indices, 4, 2), 2);
        assert_eq!(bsr_blocks(&indptr, &indices, 4, 4), 1);
        assert_eq!(bsr_fill(&indptr, &indices, 4, 2), 1.0);
        assert_eq!(bsr_fill(&indptr, &indices, 4, 4), 0.5);
        assert_eq!(bsr_fill(&indptr, &indices, 4, 8), 0.125);
        let c = auto_candidates(&indptr, &indices, 4, 8);
        assert_eq!(
            c,
            vec![
                Format::Csr,
                Format::Hyb {
                    parts: Some(1),
                    buckets: Some(vec![1, 2])
                },
                Format::Bsr(2),
                Format::Bsr(4),
                Format::Ell(None),
            ]
        );
        // A power-law-like matrix (one row of 8, seven of 1; scattered blocks): neither.
        let indptr = [0, 8, 9, 10, 11, 12, 13, 14, 15];
        let indices = [0, 1, 2, 3, 4, 5, 6, 7, 7, 0, 6, 1, 5, 2, 4];
        let c = auto_candidates(&indptr, &indices, 8, 8);
        assert!(
            !c.iter()
                .any(|f| matches!(f, Format::Bsr(_) | Format::Ell(_))),
            "{c:?}"
        );
    }

    #[test]
    fn ell_width_pads_uniform_rows_and_cuts_long_tails() {
        // Degrees 2, 3, 3, 4: max 4 ≤ 2 × mean 3: the longest row.
        assert_eq!(ell_width(&[0, 2, 5, 8, 12]), 4);
        // Nine rows of 1 and one of 50: the 90th percentile (1).
        let mut indptr = vec![0];
        for d in [1, 1, 1, 1, 1, 1, 1, 1, 1, 50] {
            indptr.push(indptr.last().unwrap() + d);
        }
        assert_eq!(ell_width(&indptr), 1);
        // Twenty rows: 17 of degree 2, 3 of degree 40: the 18th smallest (40) is p90.
        let mut indptr = vec![0];
        for k in 0..20 {
            indptr.push(indptr.last().unwrap() + if k < 17 { 2 } else { 40 });
        }
        assert_eq!(ell_width(&indptr), 40);
        // Empty rows, no rows: at least 1.
        assert_eq!(ell_width(&[0, 0, 0]), 1);
        assert_eq!(ell_width(&[0]), 1);
    }

    #[test]
    fn ell_csr_schedule_names_its_blocks() {
        let s = ell_csr_spmm_schedule(16, true);
        for b in ["csrmm_init0", "csrmm_ell160", "csrmm_dcsr1", "csrmm_dcsr2"] {
            assert!(s.contains(&format!("sch.get_block(\"{b}\")")), "{b}");
        }
        assert!(!ell_csr_spmm_schedule(16, false).contains("dcsr"));
        assert!(!s.contains('{'));
    }

    #[test]
    fn schedule_names_every_bucket() {
        let s = hyb_spmm_schedule(2, 3);
        for p in 0..2 {
            for k in 0..3 {
                assert!(s.contains(&format!("sch.get_block(\"csrmm_{p}_{k}1\")")));
            }
        }
        assert!(!s.contains('{'));
    }
}
