//! The schedule crate's integration tests in one test binary (one link instead of one per file;
//! their tests share both cores): each file is a module as it was a test crate.
#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod blockize;
mod cache;
mod compute;
mod core;
mod dependence_enumerated;
mod loops;
mod random_sequences;
mod reduction;
mod simd_reduction;
mod sparse;
mod tensorize;
