//! The kernel catalog of SPEC §6 as sparsetir scripts (stage I, canonical `T.sp.*` syntax,
//! plus two scripts in the SparseTIR repository's alias spellings).

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

/// Scripts written with alias spellings, each with the canonical kernel it equals.
static ALIASES: &[(&str, &str)] = &[("csrmm_alias", "csrmm"), ("sddmm_alias", "sddmm")];

/// Every kernel of the catalog, canonical ones first, then the alias-spelled ones.
pub fn catalog() -> &'static [Kernel] {
    CATALOG
}

/// The kernel with the given name.
pub fn get(name: &str) -> Option<&'static Kernel> {
    CATALOG.iter().find(|k| k.name == name)
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
