//! The transform crate's integration tests in one test binary (one link instead of one per
//! file; their tests share both cores): each file is a module as it was a test crate.

mod coiter_snapshots;
mod compact_buffer_allocation;
mod decompose_format;
mod decompose_format_numerics;
mod differential_prop;
mod horizontal_fuse;
mod index_dtype;
mod init_into_cache;
mod inject_scope;
mod lower_atomic;
mod lower_sparse_buffer;
mod lower_sparse_buffer_differential;
mod lower_sparse_buffer_snapshots;
mod lower_sparse_iter;
mod lower_sparse_iter_differential;
mod lower_sparse_iter_lifted;
mod lower_sparse_iter_snapshots;
mod pipeline;
mod remove_unused_args;
mod specialize;
mod specialize_buffer;
mod store_as;
