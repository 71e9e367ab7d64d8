//! The codegen crate's integration tests in one test binary (one link instead of one per file;
//! their tests share both cores): each file is a module as it was a test crate.
#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod catalog;
mod constructs;
mod exec;
mod nnz_balanced;
mod overwrite;
mod simd_reduction;
mod vector_loops;
