//! What the runtime decides before a launch on a GPU, seen without one: the CUDA path runs on
//! the mocked driver of `sparsetir-cuda` (`crates/cuda/tests/mock/libcuda_mock.c`, mode 4:
//! kernels that do nothing; loaded through `SPARSETIR_CUDA_DRIVER`, which this binary alone
//! sets). A persistent 2:4 kernel is launched with the clusters the driver's occupancy query
//! says fit (the mock's: 4 multiprocessors, one block each, clusters of 2 fitting once in a
//! group of 3 and never on the lone one), not with its tiles; without clusters, or where the
//! query fails, with the blocks that fit a multiprocessor at a time, in whole clusters; the
//! kernel of a block a tile gets its tiles. NVRTC compiles the kernels for sm_90a (the mock is
//! a compute capability 9.0 device). Skipped, with a note, without a C compiler or (outside
//! CI) NVRTC.

use std::path::PathBuf;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sparsetir_ir::DType;
use sparsetir_ops::composable::spmm_24_tc_smem_gpu_schedule;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

mod common;
#[path = "../../cuda/tests/mock/build.rs"]
mod mock_build;
use common::warpgroup::{hopper, kernel, spec};
use common::{positions_i8, spmm_24_args};

/// The mock driver built for mode 4; `None` without a C compiler.
fn mock_driver() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-mock-launch");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cuda/tests/mock/libcuda_mock.c");
    mock_build::mock_driver(&src, 4, &dir)
}

#[test]
fn a_persistent_launch_takes_the_clusters_the_driver_says_fit() {
    let Some(driver) = mock_driver() else { return };
    if common::nvrtc().is_none() {
        return;
    }
    // (This binary's only test: the variable is read by every context it makes.)
    std::env::set_var("SPARSETIR_CUDA_DRIVER", &driver);
    let cache =
        KernelCache::new(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-mock-launch"));
    let (m, n, feat) = (512, 256, 512);
    let args = positions_i8(spmm_24_args(
        &mut ChaCha8Rng::seed_from_u64(140),
        m,
        n,
        feat,
        DType::F16,
    ));
    // (cluster, persistent, the grid launched): 4 x 2 tiles of 128 x 256. The mock's cluster
    // query refuses clusters along y: the runtime then counts whole clusters of the blocks
    // that fit (4 multiprocessors of one block: one cluster of 2 x 2).
    for (cluster, persistent, grid) in [
        ((2, 1), true, [2, 1, 1]),
        ((1, 1), true, [4, 1, 1]),
        ((2, 1), false, [4, 2, 1]),
        ((2, 2), true, [2, 2, 1]),
    ] {
        let what = format!("cluster {cluster:?}, persistent: {persistent}");
        let t = hopper(8, 1, 6, (true, true, cluster, persistent));
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, 32);
        let k = GpuKernel::build(
            &kernel(DType::F16),
            Some(&sched),
            &spec(m, n, feat),
            GpuDevice::Cuda,
            &cache,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut got = args.clone();
        let stats = k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(stats.grids, vec![grid], "{what}");
    }
}
