//! The cli crate's integration tests in one test binary (one link instead of one per file;
//! their tests share both cores): each file is a module as it was a test crate.
#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod bench_cli;
mod bench_device;
mod bench_formats;
mod c_backend;
mod cuda_emu_backend;
mod formats_cli;
mod lower_cli;
mod malformed;
mod run;
mod run_decompose;
mod sparse_output;
