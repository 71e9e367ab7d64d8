//! hyb SpMM on the GPU path, in the emulator: csrmm decomposed into column parts × degree
//! buckets (`composable::hyb_spmm_stage1`), the buckets scheduled for the GPU
//! (`HybGpuSchedule::scalar`: bucket rows over blocks × warps, features over lanes, split rows
//! atomic), equals the stage-I evaluator of the undecomposed csrmm on power-law rows (empty
//! rows, rows longer than the largest bucket, rows storing every column), for feature widths
//! that are and are not multiples of 32; also with the buckets' nests fused into one launch
//! (`fuse_launches`: the init's launch, then one for every bucket), and at widths that are a
//! multiple of 128 with four consecutive features per lane read as one float4
//! (`HybGpuSchedule::vec4`), and so with the 128-feature chunks over `threadIdx.z`
//! (`HybGpuSchedule::wide`). Where the bucket rows hold every row once (`hyb_every_row`, rows no
//! longer than the largest bucket), C is not zeroed first: the buckets store their rows
//! (`hyb_spmm_stage1_rows_once`), one launch in all when fused.

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::builders::hyb::{hyb, hyb_every_row, hyb_with_rest, Hyb};
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ops::composable::HybGpuSchedule;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::composable::{
    atomic_blocks, atomic_blocks_one_launch, hyb_arguments, hyb_rest_arguments,
    hyb_rest_spmm_stage1, hyb_spmm_stage1, hyb_spmm_stage1_rows_once,
};
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// A rows × cols CSR matrix whose row lengths follow a power law (row 0 stores every column).
fn power_law(rows: usize, cols: usize, seed: u64) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let mut r = Lcg(seed);
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for i in 0..rows {
        let len = if i == 0 {
            cols
        } else {
            let u = (r.next() % 1000) as f64 / 1000.0;
            ((1.0 / (1.0 - u * 0.999)).powf(1.3) as usize)
                .saturating_sub(1)
                .min(cols)
        };
        let mut cs: Vec<i32> = Vec::new();
        while cs.len() < len {
            let c = (r.next() % cols as u64) as i32;
            if !cs.contains(&c) {
                cs.push(c);
            }
        }
        cs.sort_unstable();
        for c in cs {
            indices.push(c);
            values.push((r.next() % 200) as f32 / 100.0 - 1.0);
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices, values)
}

fn arr(shape: Vec<usize>, data: TensorData) -> ArgValue {
    ArgValue::Array(Tensor { shape, data })
}

#[test]
fn hyb_spmm_in_the_emulator_equals_the_evaluator() {
    hyb_spmm_on(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present.
#[test]
fn hyb_spmm_on_a_real_gpu() {
    if common::have_gpu() {
        hyb_spmm_on(GpuDevice::Cuda);
    }
}

fn hyb_spmm_on(device: GpuDevice) {
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-hyb"));
    let csrmm = sparsetir_ops::load("csrmm").unwrap();
    // (rows, cols, parts, buckets, feat, kind, fused)
    let mut cases = Vec::new();
    for (rows, cols, parts, buckets, feat) in [
        (60usize, 40usize, 1usize, vec![1usize, 2, 4, 8], 32usize),
        (45, 70, 2, vec![1, 2, 4], 40),
        (30, 16, 1, vec![1, 2, 4, 8, 16], 64),
        (50, 90, 2, vec![1, 2, 4, 8], 128),
        (40, 33, 1, vec![1, 4, 32], 256),
        (20, 50, 2, vec![1, 2, 4, 8], 512),
    ] {
        // Four consecutive features per lane (one 16-byte load of B each), and so with the
        // 128-feature chunks over threadIdx.z, at widths that are a multiple of 128.
        let kinds: &[&str] = if feat % 128 == 0 {
            &["scalar", "vec4", "wide"]
        } else {
            &["scalar"]
        };
        for (&kind, fused) in kinds.iter().flat_map(|k| [(k, false), (k, true)]) {
            cases.push((rows, cols, parts, buckets.clone(), feat, kind, fused));
        }
    }
    // The matrix, its hyb form and the kernel of a case.
    let build = |(rows, cols, parts, buckets, feat, kind, fused): &(
        usize,
        usize,
        usize,
        Vec<usize>,
        usize,
        &str,
        bool,
    )| {
        let (rows, cols, parts, feat, kind, fused) = (*rows, *cols, *parts, *feat, *kind, *fused);
        let csr = power_law(rows, cols, rows as u64);
        let h = hyb(rows, cols, &csr.0, &csr.1, &csr.2, parts, buckets).expect("hyb");
        let mut stage1 = hyb_spmm_stage1(&csrmm, parts, buckets).expect("decomposes");
        // Buckets in one launch are atomic where another bucket writes a row of theirs.
        let atomic = if fused {
            atomic_blocks_one_launch(&h)
        } else {
            atomic_blocks(&h, false)
        };
        let plan = HybGpuSchedule {
            parts,
            num_buckets: buckets.len(),
            atomic: &atomic,
            zero_fill: true,
            rest: false,
        };
        let sched = schedule_of(&plan, kind, feat);
        if fused {
            stage1
                .attrs
                .set("fuse_launches", sparsetir_ir::AttrValue::Bool(true));
        }
        let spec = [("feat_size".to_string(), feat as i64)];
        let k = GpuKernel::build(&stage1, Some(&sched), &spec, device, &cache)
            .map_err(|e| format!("{e}\n{sched}"));
        (csr, h, k)
    };
    common::with_warming(
        &cases,
        |c| drop(build(c)),
        |case| {
            let (rows, cols, parts, buckets, feat, kind, fused) = case;
            let (rows, cols, parts, feat, kind, fused) =
                (*rows, *cols, *parts, *feat, *kind, *fused);
            let (csr, h, k) = build(case);
            let k = k.unwrap_or_else(|e| panic!("{e}"));
            let vec4 = kind != "scalar";
            // One launch per bucket (and the init's), or, fused, the init's and one for the buckets.
            let launches = k.module().kernels.len();
            let want_launches = if fused { 2 } else { 1 + parts * buckets.len() };
            assert_eq!(launches, want_launches, "fused {fused}, parts {parts}");
            let mut args = csrmm_args(rows, cols, feat, &csr, 7);
            let mut want = args.clone();
            eval_func(&csrmm, &mut want).expect("reference");
            args.extend(hyb_arguments(&h));
            if vec4 {
                assert!(
                    k.module().source.contains("sptir_ld4(B_data"),
                    "no float4 load of B"
                );
            }
            if fused && kind == "scalar" {
                // The buckets' grid is sized by their rows (read from their `indptr`, whose
                // values the launch checks): ceil(rows / 8) blocks each, at least one.
                let m = k.module();
                let int = |i: usize| match args.get(&m.params[i].name) {
                    Some(ArgValue::Int(v)) => Some(*v),
                    _ => None,
                };
                let grid = m.kernels[1].grid[0].eval(&int).expect("a grid");
                let want_grid: i64 = h
                    .blocks()
                    .map(|b| (b.num_rows().div_ceil(8) as i64).clamp(1, 4096))
                    .sum();
                assert_eq!(grid, want_grid, "parts {parts} buckets {buckets:?}");
            }
            k.run(&mut args).expect("runs in the emulator");
            assert_equal(
                &args,
                &want,
                &format!("fused {fused}, {kind}, parts {parts} buckets {buckets:?} feat {feat}"),
            );
        },
    );
}

fn schedule_of(plan: &HybGpuSchedule<'_>, kind: &str, feat: usize) -> String {
    match kind {
        "vec4" => plan.vec4(),
        "wide" => plan.wide(feat),
        _ => plan.scalar(),
    }
}

/// Rows of 0 to `max` entries (about a fifth empty), distinct sorted columns.
fn short_rows(rows: usize, cols: usize, max: usize, seed: u64) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let mut r = Lcg(seed);
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for _ in 0..rows {
        let len = if r.next().is_multiple_of(5) {
            0
        } else {
            1 + (r.next() as usize) % max.min(cols)
        };
        let mut cs: Vec<i32> = Vec::new();
        while cs.len() < len {
            let c = (r.next() % cols as u64) as i32;
            if !cs.contains(&c) {
                cs.push(c);
            }
        }
        cs.sort_unstable();
        for c in cs {
            indices.push(c);
            values.push((r.next() % 200) as f32 / 100.0 - 1.0);
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices, values)
}

#[test]
fn hyb_rows_once_stores_without_a_zero_fill_in_the_emulator() {
    hyb_rows_once_on(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present.
#[test]
fn hyb_rows_once_on_a_real_gpu() {
    if common::have_gpu() {
        hyb_rows_once_on(GpuDevice::Cuda);
    }
}

fn hyb_rows_once_on(device: GpuDevice) {
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-hyb-once"),
    );
    let csrmm = sparsetir_ops::load("csrmm").unwrap();
    for (rows, cols, buckets, feat) in [
        (70usize, 40usize, vec![1usize, 2, 4, 8], 32usize),
        (33, 20, vec![1, 2, 4, 8, 16], 40),
        (50, 90, vec![1, 2, 4, 8, 16, 32], 128),
    ] {
        let max = *buckets.last().unwrap();
        let csr = short_rows(rows, cols, max, rows as u64 + 1);
        assert!(
            csr.0.windows(2).any(|w| w[0] == w[1]),
            "the case has empty rows"
        );
        let h: Hyb = hyb_every_row(rows, cols, &csr.0, &csr.1, &csr.2, 1, &buckets).unwrap();
        assert!(h.rows_once());
        let atomic = atomic_blocks_one_launch(&h);
        assert!(atomic.iter().all(|a| !a), "no row is shared");
        let stage1 = hyb_spmm_stage1_rows_once(&csrmm, 1, &buckets).expect("folds");
        let plan = HybGpuSchedule {
            parts: 1,
            num_buckets: buckets.len(),
            atomic: &atomic,
            zero_fill: false,
            rest: false,
        };
        let case = Case {
            rows,
            cols,
            feat,
            csr: &csr,
            extra: hyb_arguments(&h),
        };
        // No zero fill: one launch per bucket, or one in all.
        check_stored(&csrmm, &stage1, &plan, &case, buckets.len(), device, &cache);
    }
}

#[test]
fn hyb_with_long_rows_whole_in_the_emulator() {
    hyb_with_rest_on(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present.
#[test]
fn hyb_with_long_rows_whole_on_a_real_gpu() {
    if common::have_gpu() {
        hyb_with_rest_on(GpuDevice::Cuda);
    }
}

/// The long rows kept whole apart (`hyb_with_rest`: a DCSR rest, one thread block per row),
/// the others in buckets storing their rows: no zero fill, no atomics between blocks.
fn hyb_with_rest_on(device: GpuDevice) {
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-hyb-rest"),
    );
    let csrmm = sparsetir_ops::load("csrmm").unwrap();
    for (rows, cols, buckets, feat) in [
        (60usize, 40usize, vec![1usize, 2, 4, 8], 32usize),
        (45, 70, vec![1, 2, 4], 40),
        (50, 90, vec![1, 2, 4, 8], 128),
    ] {
        let csr = power_law(rows, cols, rows as u64);
        let (h, rest) =
            hyb_with_rest(rows, cols, &csr.0, &csr.1, &csr.2, &buckets).expect("builds");
        assert!(
            !rest.rows.is_empty() && rest.rows[0] == 0,
            "row 0 stores every column"
        );
        assert!(!h.needs_atomic);
        let atomic = atomic_blocks_one_launch(&h);
        assert!(atomic.iter().all(|a| !a), "no row is shared");
        let stage1 = hyb_rest_spmm_stage1(&csrmm, &buckets).expect("decomposes");
        let plan = HybGpuSchedule {
            parts: 1,
            num_buckets: buckets.len(),
            atomic: &atomic,
            zero_fill: false,
            rest: true,
        };
        let case = Case {
            rows,
            cols,
            feat,
            csr: &csr,
            extra: hyb_rest_arguments(&h, &rest),
        };
        check_stored(
            &csrmm,
            &stage1,
            &plan,
            &case,
            buckets.len() + 1,
            device,
            &cache,
        );
    }
}

type Csr = (Vec<i32>, Vec<i32>, Vec<f32>);

/// A matrix, a feature width and the format's arguments.
struct Case<'a> {
    rows: usize,
    cols: usize,
    feat: usize,
    csr: &'a Csr,
    extra: std::collections::HashMap<String, ArgValue>,
}

/// Builds `stage1` with `plan` (each kind the width allows, as separate launches — `unfused` of
/// them — and fused into one) and checks that C is only stored and equals the evaluator's csrmm
/// from garbage.
fn check_stored(
    csrmm: &sparsetir_ir::PrimFunc,
    stage1: &sparsetir_ir::PrimFunc,
    plan: &HybGpuSchedule<'_>,
    case: &Case<'_>,
    unfused: usize,
    device: GpuDevice,
    cache: &KernelCache,
) {
    let Case {
        rows, cols, feat, ..
    } = *case;
    let kinds: &[&str] = if feat % 128 == 0 {
        &["scalar", "vec4", "wide"]
    } else {
        &["scalar"]
    };
    let spec = [("feat_size".to_string(), feat as i64)];
    for (&kind, fused) in kinds.iter().flat_map(|k| [(k, false), (k, true)]) {
        let sched = schedule_of(plan, kind, feat);
        let mut stage1 = stage1.clone();
        if fused {
            stage1
                .attrs
                .set("fuse_launches", sparsetir_ir::AttrValue::Bool(true));
        }
        let k = GpuKernel::build(&stage1, Some(&sched), &spec, device, cache)
            .unwrap_or_else(|e| panic!("{e}\n{sched}"));
        let want_launches = if fused { 1 } else { unfused };
        assert_eq!(
            k.module().kernels.len(),
            want_launches,
            "{kind} fused {fused}"
        );
        // The bucket registers start at 0: C is only stored, never read (at every width: past
        // a width that is no multiple of 32 each lane's element is guarded), and the threads
        // never wait for each other outside the long rows' blocks.
        let src = &k.module().source;
        assert!(
            !src.contains("= C_data[") && !src.contains("sptir_ld4(C_data"),
            "{kind}: C read\n{src}"
        );
        let barriers = src.matches("__syncthreads()").count();
        assert_eq!(barriers, usize::from(plan.rest), "{kind}: barriers\n{src}");
        // C starts as garbage: every element must be written.
        let mut args = csrmm_args(rows, cols, feat, case.csr, 11);
        let mut want = args.clone();
        eval_func(csrmm, &mut want).expect("reference");
        args.extend(case.extra.clone());
        k.run(&mut args).expect("runs");
        assert_equal(&args, &want, &format!("{kind} fused {fused}, feat {feat}"));
    }
}

/// csrmm's arguments for the CSR matrix `csr` (`rows` × `cols`), a random `B` of width `feat`
/// (from `seed`) and a `C` of sevens (garbage every kernel must overwrite).
fn csrmm_args(
    rows: usize,
    cols: usize,
    feat: usize,
    csr: &Csr,
    seed: u64,
) -> std::collections::HashMap<String, ArgValue> {
    let (indptr, indices, values) = csr;
    let nnz = indices.len();
    let mut r = Lcg(seed);
    let b: Vec<f32> = (0..cols * feat)
        .map(|_| (r.next() % 100) as f32 / 50.0 - 1.0)
        .collect();
    let mut args = std::collections::HashMap::new();
    args.insert(
        "a".to_string(),
        arr(vec![nnz], TensorData::F32(values.clone())),
    );
    args.insert("b".into(), arr(vec![cols, feat], TensorData::F32(b)));
    args.insert(
        "c".into(),
        arr(vec![rows, feat], TensorData::F32(vec![7.0; rows * feat])),
    );
    args.insert(
        "indptr".into(),
        arr(vec![rows + 1], TensorData::I32(indptr.clone())),
    );
    args.insert(
        "indices".into(),
        arr(vec![nnz], TensorData::I32(indices.clone())),
    );
    args.insert("m".into(), ArgValue::Int(rows as i64));
    args.insert("n".into(), ArgValue::Int(cols as i64));
    args.insert("nnz".into(), ArgValue::Int(nnz as i64));
    args.insert("feat_size".into(), ArgValue::Int(feat as i64));
    args
}

/// Every element of `got`'s `c` equals `want`'s within float32 rounding.
fn assert_equal(
    got: &std::collections::HashMap<String, ArgValue>,
    want: &std::collections::HashMap<String, ArgValue>,
    what: &str,
) {
    let (Some(ArgValue::Array(g)), Some(ArgValue::Array(w))) = (got.get("c"), want.get("c")) else {
        panic!("{what}: no output");
    };
    let feat = g.shape[1];
    assert_eq!(g.shape, w.shape, "{what}");
    for i in 0..g.shape.iter().product::<usize>() {
        let (x, y) = (g.get_f64(i), w.get_f64(i));
        assert!(
            (x - y).abs() <= 1e-4 * y.abs().max(1.0),
            "{what}: C[{}, {}] = {x}, want {y}",
            i / feat,
            i % feat
        );
    }
}

/// Every hyb form `bench` builds (split rows over a zero fill, every row once, the long rows
/// whole; each kind of bucket schedule; fused into one launch) compiles with NVRTC for sm_80
/// and sm_90, with at most a few bytes spilled (none for the one-launch forms on sm_90).
#[test]
fn every_hyb_form_compiles_with_nvrtc() {
    let Some(nvrtc) = common::nvrtc() else { return };
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-hyb-nvrtc"),
    );
    let csrmm = sparsetir_ops::load("csrmm").unwrap();
    let buckets = [1usize, 2, 4, 8, 16, 32];
    let nb = buckets.len();
    let atomic = vec![true; nb];
    let none = vec![false; nb];
    let forms = [
        (
            hyb_spmm_stage1(&csrmm, 1, &buckets).unwrap(),
            &atomic,
            true,
            false,
        ),
        (
            hyb_spmm_stage1_rows_once(&csrmm, 1, &buckets).unwrap(),
            &none,
            false,
            false,
        ),
        (
            hyb_rest_spmm_stage1(&csrmm, &buckets).unwrap(),
            &none,
            false,
            true,
        ),
    ];
    for (stage1, atomic, zero_fill, rest) in &forms {
        let mut stage1 = stage1.clone();
        stage1
            .attrs
            .set("fuse_launches", sparsetir_ir::AttrValue::Bool(true));
        let plan = HybGpuSchedule {
            parts: 1,
            num_buckets: nb,
            atomic,
            zero_fill: *zero_fill,
            rest: *rest,
        };
        for (kind, feat) in [("scalar", 64usize), ("vec4", 128), ("wide", 512)] {
            let sched = schedule_of(&plan, kind, feat);
            let spec = [("feat_size".to_string(), feat as i64)];
            let k = GpuKernel::build(&stage1, Some(&sched), &spec, GpuDevice::Emulator, &cache)
                .unwrap_or_else(|e| panic!("{e}\n{sched}"));
            let m = k.module();
            for arch in ["sm_80", "sm_90"] {
                let arch = sparsetir_cuda::Arch::parse(arch).unwrap();
                let c = nvrtc
                    .compile(&m.source, "k.cu", &arch, sparsetir_cuda::Emit::Cubin, &[])
                    .unwrap_or_else(|e| panic!("{kind} rest {rest} on {arch}: {e}"));
                assert_eq!(c.resources.len(), m.kernels.len(), "{}", c.log);
                for r in &c.resources {
                    // ptxas spills a few bytes of these fused kernels in places (sm_80, and
                    // SparseTIR's split form on sm_90: 4 to 12 bytes, the cause not traced);
                    // never more, and none in the one-launch forms on sm_90.
                    let one_launch_sm90 = !zero_fill && arch.to_string().contains("90");
                    let most = if one_launch_sm90 { 0 } else { 16 };
                    assert!(
                        r.spill_stores <= most && r.spill_loads <= most,
                        "{kind} rest {rest} feat {feat} on {arch}: {r:?}"
                    );
                }
            }
        }
    }
}
