//! float16 and bfloat16 storage on the CUDA path, without a GPU: every catalog kernel with its
//! default GPU schedule, its `float32` buffers retyped to the 16-bit type and its random data
//! rounded to it, runs in the CPU emulation of its CUDA and equals the stage-I reference
//! evaluator (values computed in float and rounded after every operation, as the evaluator
//! does; cross-thread sums may add in another order, hence a tolerance of a few units in the
//! last place); the same sources compile with NVRTC for sm_80 (NVRTC missing skips that with a
//! note, except under `CI=true`). Default schedules that update their output atomically
//! (rgcn_hetero's, spmm_24's) use 16-bit compare-and-swap additions (`atom.cas.b16`; the
//! emulator's own compare-and-swap).

use sparsetir_eval::eval_func;
use sparsetir_ir::DType;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::build::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{assert_outputs_close_16, convert_args, retype_floats};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-half"))
}

/// A kernel's name, its default GPU schedule and the parameters it is specialised with.
type Scheduled = (&'static str, &'static str, Vec<(String, i64)>);

/// The canonical catalog kernels with their default GPU schedule and its specialisation.
fn kernels() -> Vec<Scheduled> {
    let mut out = Vec::new();
    for k in sparsetir_ops::catalog() {
        if sparsetir_ops::alias_of(k.name).is_some() {
            continue;
        }
        let Some(sched) = sparsetir_ops::gpu_schedule(k.name) else {
            continue;
        };
        let f = sparsetir_ops::load(k.name).expect("catalog kernel");
        let spec = if f.param("feat_size").is_some() {
            vec![("feat_size".to_string(), 8)]
        } else {
            Vec::new()
        };
        out.push((k.name, sched, spec));
    }
    out
}

#[test]
fn every_catalog_kernel_in_float16_and_bfloat16_in_the_emulator() {
    every_kernel_in_16_bits(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present.
#[test]
fn every_catalog_kernel_in_float16_and_bfloat16_on_a_real_gpu() {
    if common::have_gpu() {
        every_kernel_in_16_bits(GpuDevice::Cuda);
    }
}

fn every_kernel_in_16_bits(device: GpuDevice) {
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 19, 23)
        .with_density(0.3)
        .with_feat(8)
        .with_block(2)
        .with_depth(3)
        .with_init(Init::Random);
    let mut compared = 0;
    let mut atomics = Vec::new();
    let cases: Vec<_> = kernels()
        .into_iter()
        .flat_map(|(k, s, p)| [DType::F16, DType::BF16].map(|dt| (k, s, p.clone(), dt)))
        .collect();
    let build = |(kernel, sched, spec, dt): &(&str, &str, Vec<(String, i64)>, DType)| {
        let f = sparsetir_ops::load(kernel).expect("catalog kernel");
        let (g, params) = retype_floats(&f, *dt);
        let k = GpuKernel::build(&g, Some(sched), spec, device, &cache());
        (g, params, k)
    };
    common::with_warming(
        &cases,
        |c| drop(build(c)),
        |case| {
            let (kernel, _, spec, dt) = case;
            let (kernel, dt) = (*kernel, *dt);
            let (g, params, k) = build(case);
            let what = format!("{kernel} in {dt} (default GPU schedule, {device:?})");
            let k = k.unwrap_or_else(|e| panic!("{what}: {e}"));
            // Two definitions in the prelude; more occurrences are calls.
            if k.module().source.matches("sptir_atomic_add_").count() > 2 {
                atomics.push(kernel);
            }
            let Ok(case) = random_args(kernel, &shape, 0) else {
                return;
            };
            if spec
                .iter()
                .any(|(p, v)| case.int(p).is_some_and(|c| c != *v))
            {
                return;
            }
            let args = convert_args(case.args, &params, dt);
            let mut want = args.clone();
            if eval_func(&g, &mut want).is_err() {
                return;
            }
            let mut got = args.clone();
            k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_outputs_close_16(&what, &case.outputs, &got, &want, dt, 8.0);
            compared += 1;
        },
    );
    // Schedules that update their output atomically (rows split over threads) use the
    // 16-bit compare-and-swap additions.
    let want = ["rgcn_hetero", "rgcn_hetero", "spmm_24", "spmm_24"];
    assert_eq!(atomics, want, "kernels with 16-bit atomic additions");
    assert!(compared >= 30, "only {compared} cases compared");
}

#[test]
fn sixteen_bit_kernels_compile_with_nvrtc() {
    let Some(nvrtc) = common::nvrtc() else {
        return;
    };
    let arch = sparsetir_cuda::Arch::parse("sm_80").unwrap();
    for (kernel, sched, spec) in kernels() {
        for dt in [DType::F16, DType::BF16] {
            let f = sparsetir_ops::load(kernel).expect("catalog kernel");
            let (g, _) = retype_floats(&f, dt);
            let (_, m) = emit_cuda(&g, Some(sched), &spec)
                .unwrap_or_else(|e| panic!("{kernel} in {dt}: {e}"));
            assert!(m.source.contains("sptir_f2h") || m.source.contains("sptir_f2bf"));
            let (code, _) = sparsetir_runtime::cuda_dev::compile_cached(
                &nvrtc,
                &m,
                &arch,
                sparsetir_cuda::Emit::Cubin,
                &cache(),
            )
            .unwrap_or_else(|e| panic!("{kernel} in {dt}: {e}\n{}", m.source));
            assert!(code.starts_with(b"\x7fELF"), "{kernel}: not a cubin");
        }
    }
}
