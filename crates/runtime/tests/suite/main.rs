//! The runtime's integration tests that need no process of their own, in one test binary: one
//! link instead of one per file, and the files' tests share both cores (`cargo test` runs test
//! binaries one after another). Each file is a module as it was a test crate; `common` is the
//! helpers every binary shares. Files that re-run their own binary as a child (`compile_c`,
//! `native`, `cuda_emu`), set environment variables (`cuda_mock_launch`) or are copied to a
//! GPU machine by name (`bench/gpu/prepare.sh`: `cuda_warpgroup`, `cuda_cluster`, `cuda_tma`,
//! `cuda_mbar_order`, `cuda_persistent`) stay binaries of their own.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod aggregation;
mod bit_ops;
mod borrowed_launch;
mod c_differential;
mod c_half;
mod c_schedule_prop;
mod carried_dependence;
mod composable;
mod composable_c;
mod compress_ops;
mod cuda_attention;
mod cuda_catalog;
mod cuda_fill_start;
mod cuda_half;
mod cuda_handwritten;
mod cuda_hyb;
mod cuda_schedule_prop;
mod cuda_tensor_core;
mod decomposed_data;
mod disjoint_parallel;
mod distinct;
mod empty_fibers;
mod gpu_borrowed_launch;
mod integer_division;
mod launch_edges;
mod missed_lookups;
mod out_of_axis;
mod sddmm_coo_c;
mod sparse_conv;
mod sparse_output;
mod spmm_formats_c;
mod spmv_sell;
mod storage_align;
mod validate;
mod write_only;
