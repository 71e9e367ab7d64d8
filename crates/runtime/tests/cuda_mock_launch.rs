//! What the runtime decides before a launch on a GPU, seen without one: the CUDA path runs on
//! the mocked driver of `sparsetir-cuda` (`crates/cuda/tests/mock/libcuda_mock.c`, mode 4:
//! kernels that do nothing; loaded through `SPARSETIR_CUDA_DRIVER`, which this binary alone
//! sets). A persistent 2:4 kernel is launched with the clusters the driver's occupancy query
//! says fit (the mock's: 4 multiprocessors, one block each, clusters of 2 fitting once in a
//! group of 3 and never on the lone one), not with its tiles; without clusters, or where the
//! query fails, with the blocks that fit a multiprocessor at a time, in whole clusters; the
//! kernel of a block a tile gets its tiles. NVRTC compiles the kernels for sm_90a (the mock is
//! a compute capability 9.0 device). A launch on borrowed arguments (`GpuKernel::launch`)
//! hands the driver the caller's device addresses and stream, and a frozen array's device copy,
//! made once. Skipped, with a note, without a C compiler or (outside CI) NVRTC.

use std::path::PathBuf;
use std::sync::OnceLock;

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

/// The mock driver, made the driver of every context of this binary (once, before any test
/// makes a context); `None` without a C compiler or (outside CI) NVRTC.
fn driver() -> Option<&'static PathBuf> {
    static DRIVER: OnceLock<Option<PathBuf>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let driver = mock_driver()?;
            common::nvrtc()?;
            // (Set once, here, before any test of this binary reads it: every test calls
            // `driver()` first, and the others wait for this initialisation.)
            std::env::set_var("SPARSETIR_CUDA_DRIVER", &driver);
            Some(driver)
        })
        .as_ref()
}

#[test]
fn a_persistent_launch_takes_the_clusters_the_driver_says_fit() {
    if driver().is_none() {
        return;
    }
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

/// What the mock recorded of the last launch.
struct Recorded {
    lib: libloading::Library,
}

impl Recorded {
    fn new(driver: &PathBuf) -> Recorded {
        // SAFETY: the mock driver this binary's contexts already loaded (same path, same
        // handle); its exported functions take and return plain integers.
        let lib = unsafe { libloading::Library::new(driver) }.expect("the mock driver");
        Recorded { lib }
    }
    fn record_params(&self, n: i32) {
        // SAFETY: `void mock_record_params(int)` in libcuda_mock.c.
        unsafe {
            let f: libloading::Symbol<'_, unsafe extern "C" fn(i32)> =
                self.lib.get(b"mock_record_params").expect("symbol");
            f(n)
        }
    }
    fn param(&self, i: usize) -> u64 {
        // SAFETY: `uint64_t mock_last_param(int)` in libcuda_mock.c.
        unsafe {
            let f: libloading::Symbol<'_, unsafe extern "C" fn(i32) -> u64> =
                self.lib.get(b"mock_last_param").expect("symbol");
            f(i as i32)
        }
    }
    fn stream(&self) -> u64 {
        // SAFETY: `uint64_t mock_last_stream(void)` in libcuda_mock.c.
        unsafe {
            let f: libloading::Symbol<'_, unsafe extern "C" fn() -> u64> =
                self.lib.get(b"mock_last_stream").expect("symbol");
            f()
        }
    }
    /// `mock_htod_count` or `mock_sync_count`.
    fn count(&self, name: &[u8]) -> i32 {
        // SAFETY: `int name(void)` in libcuda_mock.c.
        unsafe {
            let f: libloading::Symbol<'_, unsafe extern "C" fn() -> i32> =
                self.lib.get(name).expect("symbol");
            f()
        }
    }
}

#[test]
fn a_borrowed_launch_passes_device_addresses_and_the_callers_stream() {
    use sparsetir_formats::Tensor;
    use sparsetir_runtime::{ArrayRef, FrozenArray, LaunchArg, LaunchArgs};

    let Some(driver) = driver() else { return };
    let rec = Recorded::new(driver);
    let cache =
        KernelCache::new(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-mock-borrowed"));
    let f = sparsetir_ops::load("csrmm").expect("csrmm");
    let sched = sparsetir_ops::gpu_schedule("csrmm").expect("a GPU schedule");
    let spec = [("feat_size".to_string(), 32)];
    let k = GpuKernel::build(&f, Some(sched), &spec, GpuDevice::Cuda, &cache).expect("builds");
    let m = k.module();
    assert_eq!(m.kernels.len(), 1);
    let kernel = &m.kernels[0];
    rec.record_params(kernel.args.len() as i32);
    let i32s = |v: &[i64]| FrozenArray::new(Tensor::from_i64(DType::I32, v).expect("tensor"));
    let (indptr, indices) = (i32s(&[0, 2, 3]), i32s(&[0, 2, 1]));
    let a = [1.0f32, 2.0, 3.0];
    let b = vec![1.0f32; 3 * 32];
    let mut c = vec![0.0f32; 2 * 32];
    let addr = |p: *const f32| p as usize as u64;
    let (a_at, b_at, c_at) = (addr(a.as_ptr()), addr(b.as_ptr()), addr(c.as_mut_ptr()));
    // The launch's arguments: the structure frozen, `a`, `b` and `c` in "device" memory (the
    // mock driver's is host memory; the arrays outlive every launch, and its kernels touch
    // nothing).
    let device_args = || {
        let mut args = LaunchArgs::new();
        args.int("m", 2)
            .int("n", 3)
            .int("nnz", 3)
            .int("feat_size", 32);
        args.frozen("indptr", &indptr).frozen("indices", &indices);
        for (name, at, len, writable) in [
            ("a", a_at, 3, false),
            ("b", b_at, 96, false),
            ("c", c_at, 64, true),
        ] {
            // SAFETY: as said above.
            let dev = unsafe { ArrayRef::device(DType::F32, at, len, writable) };
            args.set(name, LaunchArg::Array(dev));
        }
        args
    };
    let mut copies = Vec::new();
    let mut structure_at = Vec::new();
    for round in 0..2 {
        let before = rec.count(b"mock_htod_count");
        let args = device_args();
        // SAFETY: the mock driver; a stream of its own.
        unsafe { k.launch(&args, 0x5150 + round) }.expect("launches");
        copies.push(rec.count(b"mock_htod_count") - before);
        assert_eq!(rec.stream(), 0x5150 + round);
        let mut at = Vec::new();
        for (i, arg) in kernel.args.iter().enumerate() {
            let value = rec.param(i);
            match m.params[arg.param].name.as_str() {
                "a" => assert_eq!(value, a_at),
                "b" => assert_eq!(value, b_at),
                "c" => assert_eq!(value, c_at),
                "m" => assert_eq!(value & 0xffff_ffff, 2),
                "feat_size" => assert_eq!(value & 0xffff_ffff, 32),
                name @ ("indptr" | "indices") => {
                    // The frozen array's device copy (the mock's memory is the host's).
                    let want: Vec<i32> = if name == "indptr" {
                        vec![0, 2, 3]
                    } else {
                        vec![0, 2, 1]
                    };
                    // SAFETY: the copy the frozen array keeps, 3 int32s of mock memory.
                    let got =
                        unsafe { std::slice::from_raw_parts(value as usize as *const i32, 3) };
                    assert_eq!(got, want.as_slice(), "{name}");
                    at.push(value);
                }
                _ => {}
            }
        }
        structure_at.push(at);
    }
    // The structure is copied by the first launch only, and the second passes the same copies.
    assert_eq!(copies, [2, 0]);
    assert_eq!(structure_at[0], structure_at[1]);
    assert_eq!(structure_at[0].len(), 2);
    // `launch` waits for its kernel (a synchronisation); `launch_queued`, where every array
    // is the caller's device memory or frozen, returns once it is queued; with a host array
    // it waits too.
    let syncs = || rec.count(b"mock_sync_count");
    let mut host_b = b.clone();
    for (queued, host, want) in [(false, false, 1), (true, false, 0), (true, true, 1)] {
        let mut args = device_args();
        if host {
            args.write("b", &mut host_b);
        }
        let before = syncs();
        // SAFETY: the mock driver; a stream of its own.
        unsafe {
            if queued {
                k.launch_queued(&args, 7).expect("queued");
            } else {
                k.launch(&args, 7).expect("launches");
            }
        }
        assert_eq!(syncs() - before, want, "queued {queued}, host array {host}");
    }
}
