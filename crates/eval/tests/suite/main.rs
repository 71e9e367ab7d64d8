//! The eval crate's integration tests in one test binary (one link instead of one per file;
//! their tests share both cores): each file is a module as it was a test crate.
#[macro_use]
#[path = "../common/mod.rs"]
mod common;
#[macro_use]
#[path = "../tir_common/mod.rs"]
mod tir_common;

mod coiter;
mod errors;
mod kernels;
mod scripts;
mod tir_bsr;
mod tir_errors;
mod tir_kernels;
mod tir_semantics;
