//! IR passes of sparsetir (SPEC §3): each pass in its own module, all `PrimFunc -> PrimFunc`
//! (plus a module-level wrapper) and a no-op on functions of another stage.
//!
//! - [`lower_sparse_iter`]: stage I → stage II (sparse iterations to loops and blocks in
//!   position space).
//! - [`lower_sparse_buffer`]: stage II → stage III (sparse buffers to flat dense buffers).
//! - [`pipeline`]: [`lower`] runs the passes up to a target stage, verifying between them.
//! - [`specialize`]: binds scalar parameters to constants (any stage).

mod regions;
mod search;
mod simplify;

pub mod lower_sparse_buffer;
pub mod lower_sparse_iter;
pub mod pipeline;
pub mod specialize;

pub use lower_sparse_buffer::{lower_sparse_buffer, lower_sparse_buffer_module};
pub use lower_sparse_iter::{
    lower_sparse_iter, lower_sparse_iter_module, LowerError, LowerOptions,
};
pub use pipeline::{lower, lower_traced, LowerOutput, PipelineError, PipelineOptions, PASSES};
pub use specialize::{specialize, SpecializeError};
