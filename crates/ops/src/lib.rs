//! The kernel catalog of SPEC §6 as sparsetir scripts (stage I, canonical `T.sp.*` syntax,
//! plus two scripts in the SparseTIR repository's alias spellings).

pub mod composable;
pub mod data;

use sparsetir_ir::PrimFunc;
use sparsetir_syntax::Diagnostic;

/// One kernel of the catalog: its name and its script text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
}

macro_rules! kernels {
    ($($name:literal),* $(,)?) => {
        &[$(Kernel { name: $name, source: include_str!(concat!("../kernels/", $name, ".sp")) }),*]
    };
}

static CATALOG: &[Kernel] = kernels![
    "csrmm",
    "csrmm_dense_iter",
    "sddmm",
    "fused_sddmm",
    "spmv",
    "bsrmm",
    "ellmm",
    "rgcn_hetero",
    "rgcn_homo",
    "csf_square_sum",
    "segment_sum",
    "segment_max",
    "segment_min",
    "segment_mean",
    "ragged_bmm",
    "sparse_softmax",
    "csr2bsr",
    "hyper_gnn",
    "spmm_24",
    "csrmm_alias",
    "sddmm_alias",
];

/// Kernels beyond SPEC §6 (issue 15): co-iteration (`T.sp.union`, `T.sp.intersect`) and outputs
/// whose structure the kernel assembles. Kept apart from [`catalog`] until every backend (the GPU
/// included) runs them; [`get`] and [`load`] find them.
static SPARSE_OUTPUT: &[Kernel] = kernels!["spadd", "spmul", "spgemm", "masked_spgemm"];

/// SpMM aggregating by max or min instead of sum (a GNN's max/min aggregation, as
/// `sparsetir.ops.spmm(..., reduce=...)` runs it): csrmm with another reduction, under csrmm's
/// schedules; and its backward: the ties of each output (`extreme_count`), the gradient of A's
/// values (`extreme_grad_a`, an SDDMM with a mask) and of B (`extreme_grad_b`, over Aᵀ). Kept apart from [`catalog`] (the GPU would need float atomics for max/min where
/// a schedule splits a row); [`get`] and [`load`] find them.
static AGGREGATIONS: &[Kernel] = kernels![
    "csrmm_max",
    "csrmm_min",
    "extreme_count",
    "extreme_grad_a",
    "extreme_grad_b",
];

/// Scripts written with alias spellings, each with the canonical kernel it equals.
static ALIASES: &[(&str, &str)] = &[("csrmm_alias", "csrmm"), ("sddmm_alias", "sddmm")];

/// Every kernel of the catalog, canonical ones first, then the alias-spelled ones.
pub fn catalog() -> &'static [Kernel] {
    CATALOG
}

/// The co-iteration and sparse-output kernels (issue 15): `spadd`, `spmul`, `spgemm`,
/// `masked_spgemm`.
pub fn sparse_output() -> &'static [Kernel] {
    SPARSE_OUTPUT
}

/// The kernels aggregating by max and min (`csrmm_max`, `csrmm_min`) and their backward
/// (`extreme_count`, `extreme_grad_a`, `extreme_grad_b`).
pub fn aggregations() -> &'static [Kernel] {
    AGGREGATIONS
}

/// The kernel with the given name (the catalog's, the sparse-output and the aggregation ones).
pub fn get(name: &str) -> Option<&'static Kernel> {
    CATALOG
        .iter()
        .chain(SPARSE_OUTPUT)
        .chain(AGGREGATIONS)
        .find(|k| k.name == name)
}

/// For an alias-spelled script, the name of the canonical kernel it is equal to.
pub fn alias_of(name: &str) -> Option<&'static str> {
    ALIASES.iter().find(|(a, _)| *a == name).map(|(_, c)| *c)
}

/// Why [`load`] failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("no kernel named `{0}` in the catalog")]
    Unknown(String),
    #[error("kernel `{name}` does not parse: {}", .diags.first().map(|d| d.message.as_str()).unwrap_or("?"))]
    Parse {
        name: String,
        diags: Vec<Diagnostic>,
    },
    #[error("kernel `{0}` defines no function")]
    Empty(String),
}

/// Parses a catalog kernel and returns its (single) function.
pub fn load(name: &str) -> Result<PrimFunc, LoadError> {
    let kernel = get(name).ok_or_else(|| LoadError::Unknown(name.to_string()))?;
    let module =
        sparsetir_syntax::parse_module(kernel.source).map_err(|diags| LoadError::Parse {
            name: name.to_string(),
            diags,
        })?;
    module
        .funcs
        .into_iter()
        .next()
        .ok_or_else(|| LoadError::Empty(name.to_string()))
}

/// Default CPU schedules (stage-II schedule files, see `sparsetir_runtime::build`), by kernel.
static CPU_SCHEDULES: &[(&str, &str)] = &[
    ("csrmm", include_str!("../schedules/csrmm.sched")),
    ("csrmm_max", include_str!("../schedules/csrmm.sched")),
    ("csrmm_min", include_str!("../schedules/csrmm.sched")),
    ("extreme_count", include_str!("../schedules/csrmm.sched")),
    ("extreme_grad_a", include_str!("../schedules/sddmm.sched")),
    ("extreme_grad_b", include_str!("../schedules/csrmm.sched")),
    (
        "csrmm_dense_iter",
        include_str!("../schedules/csrmm_dense_iter.sched"),
    ),
    ("sddmm", include_str!("../schedules/sddmm.sched")),
    (
        "fused_sddmm",
        include_str!("../schedules/fused_sddmm.sched"),
    ),
    ("spmv", include_str!("../schedules/spmv.sched")),
    ("bsrmm", include_str!("../schedules/bsrmm.sched")),
    ("ellmm", include_str!("../schedules/ellmm.sched")),
    (
        "rgcn_hetero",
        include_str!("../schedules/rgcn_hetero.sched"),
    ),
    ("rgcn_homo", include_str!("../schedules/rgcn_homo.sched")),
    (
        "csf_square_sum",
        include_str!("../schedules/csf_square_sum.sched"),
    ),
    (
        "segment_sum",
        include_str!("../schedules/segment_sum.sched"),
    ),
    (
        "segment_max",
        include_str!("../schedules/segment_max.sched"),
    ),
    (
        "segment_min",
        include_str!("../schedules/segment_min.sched"),
    ),
    (
        "segment_mean",
        include_str!("../schedules/segment_mean.sched"),
    ),
    ("ragged_bmm", include_str!("../schedules/ragged_bmm.sched")),
    (
        "sparse_softmax",
        include_str!("../schedules/sparse_softmax.sched"),
    ),
    ("csr2bsr", include_str!("../schedules/csr2bsr.sched")),
    ("hyper_gnn", include_str!("../schedules/hyper_gnn.sched")),
    ("spmm_24", include_str!("../schedules/spmm_24.sched")),
    ("spadd", include_str!("../schedules/spadd.sched")),
    ("spmul", include_str!("../schedules/spmul.sched")),
    ("spgemm", include_str!("../schedules/spgemm.sched")),
    (
        "masked_spgemm",
        include_str!("../schedules/masked_spgemm.sched"),
    ),
];

/// The default CPU schedule of a catalog kernel (schedule-file text: a trace applied at stage II
/// unless it has `# stage I` / `# stage III` sections), if it has one. Alias-spelled scripts
/// share the schedule of the kernel they equal.
pub fn cpu_schedule(kernel: &str) -> Option<&'static str> {
    let name = alias_of(kernel).unwrap_or(kernel);
    CPU_SCHEDULES
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, s)| *s)
}

/// Default GPU schedules (`schedules/gpu/`), by kernel: every catalog kernel has one (nests a
/// schedule leaves off the threads, and scripts outside the catalog, run with the automatic GPU
/// schedule, `sparsetir_schedule::auto_gpu`).
static GPU_SCHEDULES: &[(&str, &str)] = &[
    ("csrmm", include_str!("../schedules/gpu/csrmm.sched")),
    // The aggregations keep csrmm's and sddmm's iteration names: their one-warp-a-row
    // schedules apply (never the row-split ones, whose atomics add).
    ("csrmm_max", include_str!("../schedules/gpu/csrmm.sched")),
    ("csrmm_min", include_str!("../schedules/gpu/csrmm.sched")),
    (
        "extreme_count",
        include_str!("../schedules/gpu/csrmm.sched"),
    ),
    (
        "extreme_grad_a",
        include_str!("../schedules/gpu/sddmm.sched"),
    ),
    (
        "extreme_grad_b",
        include_str!("../schedules/gpu/csrmm.sched"),
    ),
    (
        "csrmm_split",
        include_str!("../schedules/gpu/csrmm_split.sched"),
    ),
    (
        "csrmm_split4",
        include_str!("../schedules/gpu/csrmm_split4.sched"),
    ),
    (
        "csrmm_vec4",
        include_str!("../schedules/gpu/csrmm_vec4.sched"),
    ),
    ("sddmm", include_str!("../schedules/gpu/sddmm.sched")),
    ("spmv", include_str!("../schedules/gpu/spmv.sched")),
    (
        "csrmm_dense_iter",
        include_str!("../schedules/gpu/csrmm_dense_iter.sched"),
    ),
    (
        "fused_sddmm",
        include_str!("../schedules/gpu/fused_sddmm.sched"),
    ),
    ("bsrmm", include_str!("../schedules/gpu/bsrmm.sched")),
    // 16 x 16 blocks, 16-bit operands: tensor cores (`mma.sync` m16n8k16).
    ("bsrmm_tc", include_str!("../schedules/gpu/bsrmm_tc.sched")),
    // The same with two output tiles per warp (feature widths a multiple of 16).
    (
        "bsrmm_tc2",
        include_str!("../schedules/gpu/bsrmm_tc2.sched"),
    ),
    (
        "bsrmm_tc4",
        include_str!("../schedules/gpu/bsrmm_tc4.sched"),
    ),
    // Gather-GEMM-scatter sparse convolution (formats/sparse_conv.sp).
    (
        "sparse_conv",
        include_str!("../schedules/gpu/sparse_conv.sched"),
    ),
    (
        "bsrmm_tc32",
        include_str!("../schedules/gpu/bsrmm_tc32.sched"),
    ),
    // TC-GNN's condensed tiles (formats/condense_spmm.sp), 16 x 16, 16-bit operands.
    (
        "condense_spmm_tc",
        include_str!("../schedules/gpu/condense_spmm_tc.sched"),
    ),
    // Block-sparse attention (formats/bsr_sddmm.sp on tensor cores, formats/bsr_softmax.sp).
    (
        "bsr_sddmm_tc",
        include_str!("../schedules/gpu/bsr_sddmm_tc.sched"),
    ),
    (
        "bsr_sddmm_tc4",
        include_str!("../schedules/gpu/bsr_sddmm_tc4.sched"),
    ),
    (
        "bsr_sddmm",
        include_str!("../schedules/gpu/bsr_sddmm.sched"),
    ),
    (
        "bsr_softmax",
        include_str!("../schedules/gpu/bsr_softmax.sched"),
    ),
    (
        "bsr_softmax_lse",
        include_str!("../schedules/gpu/bsr_softmax_lse.sched"),
    ),
    ("ellmm", include_str!("../schedules/gpu/ellmm.sched")),
    (
        "rgcn_hetero",
        include_str!("../schedules/gpu/rgcn_hetero.sched"),
    ),
    (
        "rgcn_homo",
        include_str!("../schedules/gpu/rgcn_homo.sched"),
    ),
    (
        "csf_square_sum",
        include_str!("../schedules/gpu/csf_square_sum.sched"),
    ),
    (
        "segment_sum",
        include_str!("../schedules/gpu/segment_sum.sched"),
    ),
    (
        "segment_max",
        include_str!("../schedules/gpu/segment_max.sched"),
    ),
    (
        "segment_min",
        include_str!("../schedules/gpu/segment_min.sched"),
    ),
    (
        "segment_mean",
        include_str!("../schedules/gpu/segment_mean.sched"),
    ),
    (
        "ragged_bmm",
        include_str!("../schedules/gpu/ragged_bmm.sched"),
    ),
    (
        "sparse_softmax",
        include_str!("../schedules/gpu/sparse_softmax.sched"),
    ),
    ("csr2bsr", include_str!("../schedules/gpu/csr2bsr.sched")),
    (
        "hyper_gnn",
        include_str!("../schedules/gpu/hyper_gnn.sched"),
    ),
    ("spmm_24", include_str!("../schedules/gpu/spmm_24.sched")),
];

/// The default GPU schedule of a catalog kernel (aliases share the schedule of the kernel they
/// equal), if it has one. `csrmm_split` and `csrmm_split4` name csrmm's schedules for power-law rows (8 and 4 warps
/// per row).
pub fn gpu_schedule(kernel: &str) -> Option<&'static str> {
    let name = alias_of(kernel).unwrap_or(kernel);
    GPU_SCHEDULES
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, s)| *s)
}

/// The GPU schedule of SpMM (`csrmm`) for a matrix whose longest row stores `max_row`
/// elements and whose rows store `mean_row` on average, at feature width `feat`: rows split
/// over warps (8 up to width 128, 4 up to 256: `csrmm_split`, `csrmm_split4`) where some row
/// is much longer than the mean (power-law graphs), one warp a row (`csrmm`) otherwise.
/// Measured on an H100: `bench/gpu/results/session6-variants2` and `-variants3`.
pub fn spmm_gpu_schedule_name(feat: usize, max_row: usize, mean_row: f64) -> &'static str {
    let skewed = max_row as f64 >= 8.0 * mean_row.max(1.0) && max_row >= 64;
    match spmm_gpu_split_schedule(feat) {
        Some(split) if skewed => split,
        _ => "csrmm",
    }
}

/// SpMM's row-split GPU schedule at width `feat` (see [`spmm_gpu_schedule_name`]), if it has
/// one there.
pub fn spmm_gpu_split_schedule(feat: usize) -> Option<&'static str> {
    match feat {
        0..=128 => Some("csrmm_split"),
        129..=256 => Some("csrmm_split4"),
        _ => None,
    }
}
