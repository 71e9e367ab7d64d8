//! IR passes of sparsetir (SPEC §3): each pass in its own module, all `PrimFunc -> PrimFunc`
//! (plus a module-level wrapper) and a no-op on functions of another stage.
//!
//! - [`lower_sparse_iter`](lower_sparse_iter()): stage I → stage II (sparse iterations to loops and blocks in
//!   position space).
//! - [`lower_sparse_buffer`](lower_sparse_buffer()): stage II → stage III (sparse buffers to flat dense buffers).
//! - [`pipeline`]: [`lower`] runs the passes up to a target stage, verifying between them.
//! - [`specialize`](specialize()): binds scalar parameters to constants (any stage); [`store_as`](store_as()): named
//!   float32 buffers stored as float16/bfloat16, arithmetic kept in float32 (any stage);
//!   [`index_dtype`](index_dtype()): a compressed axis's coordinates in a narrower integer type (stage I);
//!   [`fold_zero_fill`](fold_zero_fill()): an output's constant fill moved into the inits of the
//!   reductions after it, where the caller vouches they write every element once (stage I).
//! - [`decompose_format`](decompose_format()): stage I → stage I, composable formats from [`FormatRewriteRule`]s;
//!   [`preprocess`]: `remove_preprocess` / `extract_preprocess` split off the format conversion.
//! - Post-lowering passes (stage III, SPEC §3.5): [`lower_atomic`](lower_atomic()), [`inject_scope`](inject_scope()),
//!   [`horizontal_fuse`](horizontal_fuse()), [`specialize_buffer`](specialize_buffer()), [`remove_unused_args`](remove_unused_args()); for the C writer,
//!   [`compact_buffer_allocation`](compact_buffer_allocation()) (intermediates used slice by slice move into their block),
//!   [`init_into_cache`](init_into_cache()) (a reduction's hoisted init starts its local cache, not the output);
//!   for the CUDA writer, [`indptr_domains`](indptr_domains()) (what every input `indptr` holds, from stage I).

mod regions;
mod search;
mod simplify;

pub mod decompose_format;
pub mod fold_zero_fill;
pub mod format_rule;
pub mod index_dtype;
pub mod lower_sparse_buffer;
pub mod lower_sparse_iter;
pub mod pipeline;
pub mod preprocess;
pub mod specialize;
pub mod store_as;

pub mod compact_buffer_allocation;
pub mod horizontal_fuse;
pub mod indptr_domains;
pub mod init_into_cache;
pub mod inject_scope;
pub mod lower_atomic;
pub mod remove_unused_args;
pub mod specialize_buffer;

pub use compact_buffer_allocation::{compact_buffer_allocation, compact_buffer_allocation_module};
pub use decompose_format::{decompose_format, decompose_format_func, DecomposeError};
pub use fold_zero_fill::{fold_zero_fill, FoldZeroFillError};
pub use format_rule::{
    bsr_rule, dcsr_rule, ell_csr_rules, ell_rule, hyb_rules, FormatRewriteRule, IndexMap, MapExpr,
    RuleError,
};
pub use index_dtype::{index_dtype, IndexDtypeError};
pub use lower_sparse_buffer::{lower_sparse_buffer, lower_sparse_buffer_module};
pub use lower_sparse_iter::{
    lower_sparse_iter, lower_sparse_iter_module, stage_param, LowerError, LowerOptions, Phase,
};
pub use pipeline::{
    assembles, lower, lower_traced, LowerOutput, PipelineError, PipelineOptions, PASSES,
};
pub use preprocess::{
    extract_preprocess, extract_preprocess_module, remove_preprocess, remove_preprocess_module,
};
pub use specialize::{specialize, SpecializeError};
pub use store_as::{store_as, StoreAsError};

pub use horizontal_fuse::{fuse_form, horizontal_fuse, horizontal_fuse_module, FuseForm};
pub use indptr_domains::indptr_domains;
pub use init_into_cache::init_into_cache;
pub use inject_scope::{inject_scope, inject_scope_module};
pub use lower_atomic::{is_atomic_block, lower_atomic, lower_atomic_module};
pub use remove_unused_args::{remove_unused_args, remove_unused_args_module};
pub use specialize_buffer::{specialize_buffer, specialize_buffer_module};
