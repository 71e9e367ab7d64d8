//! The CUDA path on the whole catalog, without a GPU: every catalog kernel's CUDA (automatic
//! GPU schedule, and its default GPU schedule where it has one) compiles with NVRTC for sm_80
//! and sm_90, and the CPU emulation of that exact source equals the stage-I reference evaluator
//! on random data (empty rows, a single row, full rows, nnz 0, 1×1). NVRTC missing skips the
//! compile checks with a note, except under `CI=true` (`scripts/setup-nvrtc.sh` installs it).

use sparsetir_eval::eval_func;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::build::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{nvrtc, Args};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-catalog"))
}

/// Every output of `got` equals `want` within 1e-4 relative (NaN equals NaN).
fn assert_same(what: &str, outputs: &[String], got: &Args, want: &Args) {
    common::assert_outputs_close(what, outputs, got, want, 1e-4);
}

fn shapes(feat: usize) -> Vec<(&'static str, Shape)> {
    let base = |p, rows, cols| {
        Shape::new(p, rows, cols)
            .with_density(0.3)
            .with_feat(feat)
            .with_block(2)
            .with_depth(3)
            .with_init(Init::Random)
    };
    vec![
        (
            "random rows, some empty",
            base(Pattern::Random { empty_rows: true }, 37, 41),
        ),
        ("single row", base(Pattern::SingleRow, 1, 45)),
        ("full rows", base(Pattern::FullRows, 9, 70)),
        ("nnz 0", base(Pattern::Empty, 5, 7)),
        ("1x1", base(Pattern::OneByOne, 1, 1).with_feat(1)),
    ]
}

/// Runs `kernel` (schedule `schedule`, specialization `spec`) in the emulator against the
/// evaluator on every shape; returns the number of cases compared.
fn check(kernel: &str, schedule: Option<&str>, spec: &[(String, i64)], feat: usize) -> usize {
    check_on(GpuDevice::Emulator, kernel, schedule, spec, feat)
}

/// [`check`] on `device` (the emulator, or a real GPU).
fn check_on(
    device: GpuDevice,
    kernel: &str,
    schedule: Option<&str>,
    spec: &[(String, i64)],
    feat: usize,
) -> usize {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let what = format!(
        "{kernel} (schedule: {})",
        schedule.map_or("auto", |_| "default GPU")
    );
    let what = format!("{what} on {}", device.name());
    let k = GpuKernel::build(&f, schedule, spec, device, &cache())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut compared = 0;
    for (shape_name, shape) in shapes(feat) {
        for seed in 0..2 {
            let Ok(case) = random_args(kernel, &shape, seed) else {
                continue;
            };
            if spec
                .iter()
                .any(|(p, v)| case.int(p).is_some_and(|c| c != *v))
            {
                continue;
            }
            let mut want = case.args.clone();
            if eval_func(&f, &mut want).is_err() {
                continue;
            }
            let mut got = case.args.clone();
            k.run(&mut got)
                .unwrap_or_else(|e| panic!("{what} {shape_name} seed {seed}: {e}"));
            assert_same(
                &format!("{what} {shape_name} seed {seed}"),
                &case.outputs,
                &got,
                &want,
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn every_catalog_kernel_in_the_emulator_with_the_automatic_schedule() {
    let names: Vec<&str> = sparsetir_ops::catalog().iter().map(|k| k.name).collect();
    common::with_warming(
        &names,
        |name| drop(warm(name, None, &[])),
        |name| {
            let n = check(name, None, &[], 5);
            assert!(n > 0, "{name}: no case compared");
        },
    );
}

/// Builds `kernel`'s emulated module into the cache (for [`common::with_warming`]).
fn warm(kernel: &str, schedule: Option<&str>, spec: &[(String, i64)]) -> Option<GpuKernel> {
    let f = sparsetir_ops::load(kernel).ok()?;
    GpuKernel::build(&f, schedule, spec, GpuDevice::Emulator, &cache()).ok()
}

/// (kernel, GPU schedule, feature width or 0) checked with the default GPU schedules: widths
/// that are and are not multiples of the 32 lanes.
const GPU_SCHEDULED: &[(&str, &str, usize)] = &[
    ("csrmm", "csrmm", 32),
    ("csrmm", "csrmm", 40),
    ("csrmm", "csrmm", 96),
    ("csrmm", "csrmm_split", 32),
    ("csrmm", "csrmm_split", 40),
    ("csrmm", "csrmm_split4", 64),
    ("csrmm", "csrmm_vec4", 128),
    ("csrmm", "csrmm_vec4", 256),
    ("sddmm", "sddmm", 64),
    ("sddmm", "sddmm", 24),
    ("spmv", "spmv", 0),
    ("csrmm_dense_iter", "csrmm_dense_iter", 32),
    ("csrmm_dense_iter", "csrmm_dense_iter", 40),
    ("fused_sddmm", "fused_sddmm", 64),
    ("fused_sddmm", "fused_sddmm", 24),
    ("bsrmm", "bsrmm", 64),
    ("bsrmm", "bsrmm", 20),
    ("ellmm", "ellmm", 32),
    ("ellmm", "ellmm", 40),
    ("rgcn_hetero", "rgcn_hetero", 64),
    ("rgcn_hetero", "rgcn_hetero", 7),
    ("rgcn_homo", "rgcn_homo", 64),
    ("rgcn_homo", "rgcn_homo", 40),
    ("csf_square_sum", "csf_square_sum", 0),
    ("segment_sum", "segment_sum", 0),
    ("segment_max", "segment_max", 0),
    ("segment_min", "segment_min", 0),
    ("segment_mean", "segment_mean", 0),
    ("ragged_bmm", "ragged_bmm", 0),
    ("sparse_softmax", "sparse_softmax", 0),
    ("csr2bsr", "csr2bsr", 0),
    ("hyper_gnn", "hyper_gnn", 32),
    ("hyper_gnn", "hyper_gnn", 40),
    ("spmm_24", "spmm_24", 64),
    ("spmm_24", "spmm_24", 40),
];

/// The specialization the GPU schedules are checked with: `feat_size` (when the kernel has it)
/// set to the feature width. Kernels with other widths (the rgcn kernels' `feat_in` and
/// `feat_out`) keep them as run time values; the width still sizes the random data.
fn gpu_spec(kernel: &str, feat: usize) -> Vec<(String, i64)> {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    if feat > 0 && f.param("feat_size").is_some() {
        vec![("feat_size".to_string(), feat as i64)]
    } else {
        Vec::new()
    }
}

#[test]
fn every_catalog_kernel_has_a_default_gpu_schedule_checked_here() {
    for k in sparsetir_ops::catalog() {
        let canonical = sparsetir_ops::alias_of(k.name).unwrap_or(k.name);
        let sched = sparsetir_ops::gpu_schedule(k.name)
            .unwrap_or_else(|| panic!("{}: no default GPU schedule", k.name));
        assert!(
            sched.lines().next().is_some_and(|l| l.starts_with('#')),
            "{}: the schedule does not start with a comment",
            k.name
        );
        assert!(
            GPU_SCHEDULED
                .iter()
                .any(|(kernel, s, _)| *kernel == canonical && *s == canonical),
            "{}: its default GPU schedule is not in GPU_SCHEDULED",
            k.name
        );
    }
}

#[test]
fn default_gpu_schedules_in_the_emulator() {
    common::with_warming(
        GPU_SCHEDULED,
        |(kernel, sched, feat)| {
            let sched = sparsetir_ops::gpu_schedule(sched);
            drop(warm(kernel, sched, &gpu_spec(kernel, *feat)));
        },
        |(kernel, sched, feat)| {
            let sched = sparsetir_ops::gpu_schedule(sched).expect("a GPU schedule");
            let spec = gpu_spec(kernel, *feat);
            let n = check(kernel, Some(sched), &spec, (*feat).max(1));
            assert!(n > 0, "{kernel}: no case compared");
        },
    );
}

#[test]
fn every_catalog_kernel_compiles_with_nvrtc_for_sm80_and_sm90() {
    let Some(nvrtc) = nvrtc() else { return };
    let archs = [
        sparsetir_cuda::Arch::parse("sm_80").unwrap(),
        sparsetir_cuda::Arch::parse("sm_90").unwrap(),
    ];
    let mut builds = Vec::new();
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).unwrap();
        builds.push((k.name.to_string(), f.clone(), None));
        if let Some(s) = sparsetir_ops::gpu_schedule(k.name) {
            builds.push((k.name.to_string(), f, Some(s)));
        }
    }
    for (name, f, sched) in builds {
        let spec: Vec<(String, i64)> = if sched.is_some() && f.param("feat_size").is_some() {
            vec![("feat_size".into(), 128)]
        } else {
            Vec::new()
        };
        let (_, m) = emit_cuda(&f, sched, &spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        for arch in &archs {
            let (code, _) = sparsetir_runtime::cuda_dev::compile_cached(
                &nvrtc,
                &m,
                arch,
                sparsetir_cuda::Emit::Cubin,
                &cache(),
            )
            .unwrap_or_else(|e| panic!("{name} for {arch}: {e}\n{}", m.source));
            assert!(code.starts_with(b"\x7fELF"), "{name}: not a cubin");
        }
    }
}

#[test]
fn every_catalog_kernel_on_a_real_gpu() {
    if !common::have_gpu() {
        return;
    }
    for k in sparsetir_ops::catalog() {
        assert!(
            check_on(GpuDevice::Cuda, k.name, None, &[], 5) > 0,
            "{}: no case compared",
            k.name
        );
    }
    for (kernel, sched, feat) in GPU_SCHEDULED {
        let sched = sparsetir_ops::gpu_schedule(sched).expect("a GPU schedule");
        let spec = gpu_spec(kernel, *feat);
        assert!(
            check_on(GpuDevice::Cuda, kernel, Some(sched), &spec, (*feat).max(1)) > 0,
            "{kernel}"
        );
    }
}

#[test]
fn default_gpu_schedules_of_spmm_sddmm_and_spmv_do_not_spill() {
    let Some(nvrtc) = nvrtc() else { return };
    for (kernel, sched, feats) in [
        ("csrmm", "csrmm", &[32i64, 128, 512][..]),
        ("csrmm", "csrmm_split", &[32, 128]),
        ("csrmm", "csrmm_split4", &[256]),
        ("sddmm", "sddmm", &[32, 128, 512]),
        ("spmv", "spmv", &[0]),
    ] {
        let f = sparsetir_ops::load(kernel).unwrap();
        for &feat in feats {
            let spec: Vec<(String, i64)> = if feat > 0 {
                vec![("feat_size".into(), feat)]
            } else {
                Vec::new()
            };
            let (_, m) = emit_cuda(&f, sparsetir_ops::gpu_schedule(sched), &spec).unwrap();
            for arch in ["sm_80", "sm_90"] {
                let arch = sparsetir_cuda::Arch::parse(arch).unwrap();
                let c = nvrtc
                    .compile(&m.source, "k.cu", &arch, sparsetir_cuda::Emit::Cubin, &[])
                    .unwrap_or_else(|e| panic!("{sched} feat {feat}: {e}"));
                assert_eq!(c.resources.len(), m.kernels.len(), "{sched}: {}", c.log);
                for r in &c.resources {
                    assert!(r.registers > 0, "{sched}: {r:?}");
                    assert_eq!(
                        (r.spill_stores, r.spill_loads),
                        (0, 0),
                        "{sched} feat {feat} on {arch}: {r:?}"
                    );
                }
            }
        }
    }
}
