//! Driver tests: a missing driver is a clean error on any machine, host-side launch checks, and
//! one end-to-end run of real kernels that happens only where a GPU is present (elsewhere it
//! prints "skipped: no GPU").

use crate::common;

use common::{nvrtc_or_skip, AXPY, SHARED};
use sparsetir_cuda::{
    check_launch_dims, launch, launch_async, Context, CudaError, Device, DeviceBuffer, Driver,
    Emit, LaunchArg, Module, SearchEnv,
};

#[test]
fn missing_driver_is_no_driver() {
    let err = Driver::load_from("/nonexistent/libcuda.so.1").unwrap_err();
    match &err {
        CudaError::NoDriver { reason } => assert!(reason.contains("/nonexistent/libcuda.so.1")),
        other => panic!("expected NoDriver, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.starts_with("no NVIDIA driver (libcuda.so.1)"),
        "{shown}"
    );

    let env = SearchEnv::empty().with("SPARSETIR_CUDA_DRIVER", "/nonexistent/libcuda.so");
    assert!(matches!(
        Driver::load_with(&env),
        Err(CudaError::NoDriver { .. })
    ));
}

#[test]
fn a_library_that_is_not_the_driver_is_no_driver() {
    // libc loads but has none of the driver's functions.
    let err = Driver::load_from("libc.so.6").unwrap_err();
    match err {
        CudaError::NoDriver { reason } => assert!(reason.contains("cuInit"), "{reason}"),
        other => panic!("expected NoDriver, got {other:?}"),
    }
}

#[test]
fn launch_dims_are_checked_on_the_host() {
    assert!(check_launch_dims([4, 1, 1], [256, 1, 1]).is_ok());
    let err = check_launch_dims([4, 1, 1], [2048, 1, 1]).unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("2048 threads per block"), "{shown}");
    assert!(matches!(
        check_launch_dims([1, 70000, 1], [1, 1, 1]),
        Err(CudaError::InvalidLaunch { .. })
    ));
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_from(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The context of the first GPU, or `None` (with "skipped: no GPU" printed).
fn gpu_or_skip() -> Option<Context> {
    let driver = match Driver::load() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: no GPU ({e})");
            return None;
        }
    };
    match Device::count(&driver) {
        Ok(n) if n > 0 => {}
        Ok(_) => {
            eprintln!("skipped: no GPU (the driver sees no device)");
            return None;
        }
        Err(e) => {
            eprintln!("skipped: no GPU ({e})");
            return None;
        }
    }
    let device = Device::get(&driver, 0).expect("device 0");
    Some(Context::new(&device).expect("primary context"))
}

#[test]
fn axpy_runs_on_a_gpu() {
    let Some(ctx) = gpu_or_skip() else { return };
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let arch = ctx.arch().unwrap();
    eprintln!(
        "GPU: {} ({arch}), {} MiB, {} B shared/block, {} threads/block, NVRTC {:?} from {}",
        ctx.name().unwrap(),
        ctx.total_mem().unwrap() >> 20,
        ctx.max_shared_per_block().unwrap(),
        ctx.max_threads_per_block().unwrap(),
        nvrtc.version(),
        nvrtc.path().display(),
    );
    let cubin = nvrtc
        .compile(AXPY, "axpy.cu", &arch, Emit::Cubin, &[])
        .unwrap();
    let ptx = nvrtc
        .compile(AXPY, "axpy.cu", &arch, Emit::Ptx, &[])
        .unwrap();

    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.5).collect();
    for (what, code) in [("cubin", &cubin.code), ("ptx", &ptx.code)] {
        let module = match Module::load(&ctx, code) {
            Ok(m) => m,
            // PTX from an NVRTC newer than the driver cannot be JIT-compiled: not this
            // crate's fault, and the cubin path is the one that matters.
            Err(e) if what == "ptx" => {
                eprintln!("PTX not loadable by this driver: {e}");
                continue;
            }
            Err(e) => panic!("{what}: {e}"),
        };
        let f = module.function("axpy").unwrap();
        let attrs = f.attributes().unwrap();
        assert!(
            attrs.registers > 0 && attrs.max_threads_per_block >= 256,
            "{attrs:?}"
        );
        let dx = DeviceBuffer::from_host(&ctx, &f32_bytes(&x)).unwrap();
        let dy = DeviceBuffer::from_host(&ctx, &f32_bytes(&y)).unwrap();
        let a = 3.0f32;
        let grid = [n.div_ceil(256) as u32, 1, 1];
        launch(
            &f,
            grid,
            [256, 1, 1],
            0,
            &[
                LaunchArg::I32(n as i32),
                LaunchArg::F32(a),
                LaunchArg::Ptr(&dx),
                LaunchArg::Ptr(&dy),
            ],
        )
        .unwrap();
        let got = f32_from(&dy.to_host().unwrap());
        for i in 0..n {
            assert_eq!(got[i], a * x[i] + y[i], "{what}: element {i}");
        }
        // Timing a second launch.
        let ms = ctx
            .time_ms(|| {
                launch_async(
                    &f,
                    grid,
                    [256, 1, 1],
                    0,
                    &[
                        LaunchArg::I32(n as i32),
                        LaunchArg::F32(0.0),
                        LaunchArg::Ptr(&dx),
                        LaunchArg::Ptr(&dy),
                    ],
                )
            })
            .unwrap();
        assert!((0.0..10_000.0).contains(&ms), "{ms}");
        // Wrong host size; a block the device refuses.
        assert!(matches!(
            dy.copy_from_host(&[0u8; 3]),
            Err(CudaError::SizeMismatch {
                host: 3,
                device: 4000
            })
        ));
        assert!(matches!(
            launch(&f, [1, 1, 1], [2048, 1, 1], 0, &[]),
            Err(CudaError::InvalidLaunch { .. })
        ));
    }
}

#[test]
fn shared_memory_scalars_and_empty_buffers_on_a_gpu() {
    let Some(ctx) = gpu_or_skip() else { return };
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let arch = ctx.arch().unwrap();
    let c = nvrtc
        .compile(SHARED, "shared.cu", &arch, Emit::Cubin, &[])
        .unwrap();
    let module = Module::load(&ctx, &c.code).unwrap();

    // block_sum over 100000 ints (i64 length).
    let n = 100_000i64;
    let x: Vec<u8> = (0..n as i32).flat_map(|i| (i % 7).to_le_bytes()).collect();
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let out = DeviceBuffer::zeroed(&ctx, 4).unwrap();
    let f = module.function("block_sum").unwrap();
    assert_eq!(f.attributes().unwrap().shared_bytes, 1024);
    let grid = [(n as u32).div_ceil(256), 1, 1];
    launch(
        &f,
        grid,
        [256, 1, 1],
        0,
        &[LaunchArg::Ptr(&dx), LaunchArg::Ptr(&out), LaunchArg::I64(n)],
    )
    .unwrap();
    let want: i32 = (0..n as i32).map(|i| i % 7).sum();
    assert_eq!(
        i32::from_le_bytes(out.to_host().unwrap().try_into().unwrap()),
        want
    );

    // f64 and u32 scalars; the kernel's launch bounds (128) are enforced before launching.
    let small = module.function("small").unwrap();
    assert_eq!(small.attributes().unwrap().max_threads_per_block, 128);
    let d = DeviceBuffer::zeroed(&ctx, 8 * 128).unwrap();
    launch(
        &small,
        [1, 1, 1],
        [128, 1, 1],
        0,
        &[LaunchArg::Ptr(&d), LaunchArg::F64(1.5), LaunchArg::U32(4)],
    )
    .unwrap();
    let got: Vec<f64> = d
        .to_host()
        .unwrap()
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(got.iter().all(|&v| v == 6.0), "{got:?}");
    let err = launch(
        &small,
        [1, 1, 1],
        [256, 1, 1],
        0,
        &[LaunchArg::Ptr(&d), LaunchArg::F64(1.0), LaunchArg::U32(1)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("at most 128"), "{err}");

    // Zero-byte buffers: allocation, copies, memset and passing one to a kernel that does not
    // touch it (n = 0).
    let empty = DeviceBuffer::alloc(&ctx, 0).unwrap();
    assert!(empty.is_empty() && empty.device_ptr() == 0);
    empty.copy_from_host(&[]).unwrap();
    empty.memset_zero().unwrap();
    assert!(empty.to_host().unwrap().is_empty());
    launch(
        &f,
        [1, 1, 1],
        [256, 1, 1],
        0,
        &[
            LaunchArg::Ptr(&empty),
            LaunchArg::Ptr(&out),
            LaunchArg::I64(0),
        ],
    )
    .unwrap();

    // A missing kernel and an invalid image are driver errors, not panics.
    assert!(matches!(
        module.function("nope"),
        Err(CudaError::Driver { .. })
    ));
    assert!(matches!(
        Module::load(&ctx, b"garbage"),
        Err(CudaError::Driver { .. })
    ));
    let (free, total) = ctx.mem_info().unwrap();
    assert!(free <= total && total > 0);
}

/// Dynamic shared memory past the static 48 KiB: refused until the kernel opts in, then the
/// launch's 64 KiB are all usable.
const DYNAMIC: &str = r#"
extern "C" __global__ void reverse(const int* x, int* y, int n) {
    extern __shared__ int s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = s[n - 1 - i];
}
"#;

#[test]
fn dynamic_shared_memory_past_48_kib_on_a_gpu() {
    let Some(ctx) = gpu_or_skip() else { return };
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    if ctx.max_shared_per_block_optin().unwrap() < 65536 {
        eprintln!("note: this GPU allows no 64 KiB of shared memory per block");
        return;
    }
    let arch = ctx.arch().unwrap();
    let c = nvrtc
        .compile(DYNAMIC, "dynamic.cu", &arch, Emit::Cubin, &[])
        .unwrap();
    let module = Module::load(&ctx, &c.code).unwrap();
    let f = module.function("reverse").unwrap();
    let n = 16384i32;
    let x: Vec<u8> = (0..n).flat_map(|i| i.to_le_bytes()).collect();
    let dx = DeviceBuffer::from_host(&ctx, &x).unwrap();
    let dy = DeviceBuffer::zeroed(&ctx, x.len()).unwrap();
    let args = [LaunchArg::Ptr(&dx), LaunchArg::Ptr(&dy), LaunchArg::I32(n)];
    assert!(launch(&f, [1, 1, 1], [256, 1, 1], 65536, &args).is_err());
    f.set_max_dynamic_shared(65536).unwrap();
    launch(&f, [1, 1, 1], [256, 1, 1], 65536, &args).unwrap();
    let y = dy.to_host().unwrap();
    for i in 0..n as usize {
        let v = i32::from_le_bytes(y[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(v, n - 1 - i as i32);
    }
}
