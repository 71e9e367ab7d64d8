//! The driver errors that need a GPU to happen, provoked through a mocked driver
//! (`tests/mock/libcuda_mock.c`, compiled here with `$CC` into one library per failure and
//! loaded with `Driver::load_from`): a machine whose driver sees no device, an allocation larger
//! than the device's memory, and a kernel that fails while running. Each must be a typed error
//! with a clear message, never a panic. The occupancy queries a persistent kernel's launch
//! takes are read back too (the cluster query's launch configuration checked by the mock as
//! the driver lays it out). Skipped, with a note, when no C compiler runs.

use std::path::PathBuf;

#[path = "../mock/build.rs"]
mod mock_build;

use sparsetir_cuda::{launch, Context, CudaError, Device, DeviceBuffer, Driver, LaunchArg, Module};

/// Builds the mock driver for `mode` (see the C file); `None` without a C compiler.
fn mock(mode: u32) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-mock");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mock/libcuda_mock.c");
    mock_build::mock_driver(&src, mode, &dir)
}

/// A context on the mock driver's device for `mode`; `None` without a C compiler.
fn mock_context(mode: u32) -> Option<Context> {
    let driver = Driver::load_from(mock(mode)?).expect("the driver loads");
    let dev = Device::get(&driver, 0).expect("a device");
    Some(Context::new(&dev).expect("a context"))
}

#[test]
fn a_driver_without_a_device_says_so() {
    let Some(path) = mock(1) else { return };
    let driver = Driver::load_from(&path).expect("the driver loads");
    assert_eq!(Device::count(&driver).expect("counts"), 0);
    let e = Device::get(&driver, 0).expect_err("no device");
    assert!(matches!(e, CudaError::NoDevice { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.to_lowercase().contains("device"), "{msg}");
}

#[test]
fn an_allocation_larger_than_the_device_is_out_of_memory() {
    let Some(ctx) = mock_context(2) else { return };
    let small = DeviceBuffer::from_host(&ctx, &[1, 2, 3, 4]).expect("small buffers fit");
    assert_eq!(small.to_host().expect("copies back"), vec![1, 2, 3, 4]);
    let e = DeviceBuffer::alloc(&ctx, 1 << 30).expect_err("too large");
    assert!(
        matches!(e, CudaError::OutOfMemory { bytes } if bytes == 1 << 30),
        "{e:?}"
    );
    assert!(e.to_string().contains("memory"), "{e}");
}

#[test]
fn a_kernel_failing_while_running_is_a_launch_error() {
    let Some(ctx) = mock_context(3) else { return };
    let module = Module::load(&ctx, b"\x7fELF mock image").expect("loads");
    let f = module.function("k").expect("a function");
    f.set_max_dynamic_shared(65536)
        .expect("cuFuncSetAttribute resolves and succeeds");
    let buf = DeviceBuffer::zeroed(&ctx, 64).expect("allocates");
    let e = launch(
        &f,
        [1, 1, 1],
        [32, 1, 1],
        0,
        &[LaunchArg::Ptr(&buf), LaunchArg::I32(3)],
    )
    .expect_err("the kernel fails");
    assert!(matches!(e, CudaError::Launch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("k") && msg.contains("LAUNCH_FAILED"), "{msg}");
}

/// Blocks a multiprocessor runs at once (threads and dynamic shared memory limit them) and
/// clusters the GPU runs at once: the mock places clusters in a group of 3 multiprocessors and
/// a lone one, so clusters of 2 blocks of a block a multiprocessor fit once, not the 4 / 2
/// the multiprocessors alone would give.
#[test]
fn occupancy_queries_read_the_launch_configuration() {
    let Some(ctx) = mock_context(3) else { return };
    let module = Module::load(&ctx, b"\x7fELF mock image").expect("loads");
    let f = module.function("k").expect("a function");
    // 288 threads and 181 KiB: one block; 128 threads and no shared memory: 16.
    assert_eq!(f.max_active_blocks_per_sm(288, 185_344).ok(), Some(1));
    assert_eq!(f.max_active_blocks_per_sm(128, 0).ok(), Some(16));
    assert_eq!(
        f.max_active_clusters([32, 9, 1], [2, 1, 1], 185_344).ok(),
        Some(1)
    );
    assert_eq!(
        f.max_active_clusters([32, 1, 1], [2, 1, 1], 58_000).ok(),
        Some(8)
    );
    // A cluster's shape along y is refused by the mock: an error, not a panic.
    let e = f
        .max_active_clusters([32, 1, 1], [2, 2, 1], 0)
        .expect_err("the mock's error");
    assert!(
        e.to_string().contains("cuOccupancyMaxActiveClusters"),
        "{e}"
    );
}
