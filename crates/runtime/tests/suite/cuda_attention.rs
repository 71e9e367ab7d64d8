//! Block-sparse attention's kernels without a GPU: the scores (`formats/bsr_sddmm.sp`, on tensor
//! cores with `gpu/bsr_sddmm_tc.sched`: Q's 16-row tiles times K's 8-row tiles transposed, one
//! `mma.sync` m16n8k16 per 16 features), the row softmax over the stored blocks
//! (`formats/bsr_softmax.sp`, `gpu/bsr_softmax.sched`) and the product with V (the catalog's
//! bsrmm on tensor cores), float16 and bfloat16 operands, run in the CPU emulation of their CUDA
//! and equal to the stage-I evaluator on random block patterns (an empty block row, a single
//! block); the three chained equal masked attention computed densely in f64 here; the C backend
//! runs the two new kernels with their CPU schedules; the PTX holds the `mma`.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc};
use sparsetir_ops::composable;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{assert_outputs_close, assert_outputs_close_16, Args};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-attn"))
}

fn arr(dt: DType, v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"))
}

fn structure(args: &mut Args, (indptr, indices): &(Vec<i64>, Vec<i64>), nb: usize, mb: usize) {
    let int = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"));
    args.insert("indptr".into(), int(indptr));
    args.insert("indices".into(), int(indices));
    args.insert("nb".into(), ArgValue::Int(nb as i64));
    args.insert("mb".into(), ArgValue::Int(mb as i64));
    args.insert("nnzb".into(), ArgValue::Int(indices.len() as i64));
    args.insert("blk".into(), ArgValue::Int(16));
}

/// The scores' arguments: Q (`q`) and K (`k`) stored as `dt`, the output filled with 7.
fn scores_args(
    pat: &(Vec<i64>, Vec<i64>),
    nb: usize,
    mb: usize,
    feat: usize,
    dt: DType,
    q: &[f64],
    k: &[f64],
) -> Args {
    let mut a = HashMap::new();
    structure(&mut a, pat, nb, mb);
    a.insert("feat_size".into(), ArgValue::Int(feat as i64));
    a.insert("a".into(), arr(dt, q));
    a.insert("b".into(), arr(dt, k));
    a.insert("c".into(), arr(DType::F32, &vec![7.0; pat.1.len() * 256]));
    a
}

fn spec(feat: usize) -> Vec<(String, i64)> {
    vec![("blk".into(), 16), ("feat_size".into(), feat as i64)]
}

fn sddmm(dt: DType) -> PrimFunc {
    let f = composable::bsr_sddmm().expect("bsr_sddmm");
    sparsetir_transform::store_as(&f, &["A", "B"], dt).expect("store_as")
}

fn softmax(dt: DType) -> PrimFunc {
    let f = composable::bsr_softmax().expect("bsr_softmax");
    sparsetir_transform::store_as(&f, &["B"], dt).expect("store_as")
}

fn spmm(dt: DType) -> PrimFunc {
    let f = sparsetir_ops::load("bsrmm").expect("bsrmm");
    sparsetir_transform::store_as(&f, &["A", "B"], dt).expect("store_as")
}

/// `blk` and, where the kernel has it, `feat_size` specialised.
fn spec_of(f: &PrimFunc, feat: usize) -> Vec<(String, i64)> {
    let mut s = spec(feat);
    s.retain(|(p, _)| f.param(p).is_some());
    s
}

fn gpu(f: &PrimFunc, sched: &str, feat: usize, device: GpuDevice, what: &str) -> GpuKernel {
    let s = sparsetir_ops::gpu_schedule(sched).expect("schedule");
    GpuKernel::build(f, Some(s), &spec_of(f, feat), device, &cache())
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn output(args: &Args, name: &str) -> ArgValue {
    args.get(name).cloned().expect("output")
}

const SHAPES: [(usize, usize, usize); 4] = [(1, 1, 16), (3, 4, 16), (4, 3, 32), (2, 5, 64)];

#[test]
fn attention_kernels_equal_the_evaluator_in_the_emulator() {
    attention_kernels(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present.
#[test]
fn attention_kernels_on_a_real_gpu() {
    if common::have_gpu() {
        attention_kernels(GpuDevice::Cuda);
    }
}

fn attention_kernels(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(64);
    for dt in [DType::F16, DType::BF16] {
        let (s_f, p_f, o_f) = (sddmm(dt), softmax(dt), spmm(dt));
        for (nb, mb, feat) in SHAPES {
            let what = format!("attention {dt}, {nb}x{mb} blocks of 16, feat {feat}");
            let s_k = gpu(&s_f, "bsr_sddmm_tc", feat, device, &what);
            assert!(
                s_k.module().source.contains("sptir_mma_m16n8k16_"),
                "{what}: the scores are not on tensor cores"
            );
            // Four blocks at a time (the bench's scores): the same scores.
            let s4_k = gpu(&s_f, "bsr_sddmm_tc4", feat, device, &what);
            let p_k = gpu(&p_f, "bsr_softmax", feat, device, &what);
            let o_k = gpu(&o_f, "bsrmm_tc", feat, device, &what);
            let pat = common::bsr_pattern(&mut rng, nb, mb);
            let nnzb = pat.1.len();
            let mut random =
                |k: usize| -> Vec<f64> { (0..k).map(|_| rng.random_range(-1.0..1.0)).collect() };
            let (q, k, v) = (
                random(nb * 16 * feat),
                random(mb * 16 * feat),
                random(mb * 16 * feat),
            );
            // Scores.
            let mut a1 = scores_args(&pat, nb, mb, feat, dt, &q, &k);
            let mut want = a1.clone();
            eval_func(&s_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            let mut a4 = a1.clone();
            s_k.run(&mut a1).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_outputs_close_16(&what, &["c".into()], &a1, &want, dt, 0.05);
            s4_k.run(&mut a4)
                .unwrap_or_else(|e| panic!("{what}: four blocks: {e}"));
            assert_outputs_close_16(&what, &["c".into()], &a4, &want, dt, 0.05);
            // Softmax (scale 1/sqrt(feat)), the probabilities stored in 16 bits.
            let mut a2 = HashMap::new();
            structure(&mut a2, &pat, nb, mb);
            a2.insert("scale".into(), ArgValue::Float(1.0 / (feat as f64).sqrt()));
            a2.insert("a".into(), output(&a1, "c"));
            a2.insert("b".into(), arr(dt, &vec![7.0; nnzb * 256]));
            let mut want = a2.clone();
            eval_func(&p_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            p_k.run(&mut a2).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_outputs_close_16(&what, &["b".into()], &a2, &want, dt, 1.0);
            // Output = P V.
            let mut a3 = HashMap::new();
            structure(&mut a3, &pat, nb, mb);
            a3.insert("feat_size".into(), ArgValue::Int(feat as i64));
            a3.insert("a".into(), output(&a2, "b"));
            a3.insert("b".into(), arr(dt, &v));
            a3.insert("c".into(), arr(DType::F32, &vec![0.0; nb * 16 * feat]));
            let mut want = a3.clone();
            eval_func(&o_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            o_k.run(&mut a3).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_outputs_close_16(&what, &["c".into()], &a3, &want, dt, 0.05);
            // The chain against masked attention computed densely from the rounded operands.
            let dense = dense_attention(&pat, nb, feat, dt, &q, &k, &v);
            assert_close_to_dense(&what, dt, &output(&a3, "c"), &dense);
        }
    }
}

/// [`reference`] of Q, K and V as rounded to `dt` (what the kernels read).
fn dense_attention(
    pat: &(Vec<i64>, Vec<i64>),
    nb: usize,
    feat: usize,
    dt: DType,
    q: &[f64],
    k: &[f64],
    v: &[f64],
) -> Vec<f64> {
    let round = |x: &[f64]| -> Vec<f64> {
        let ArgValue::Array(t) = arr(dt, x) else {
            unreachable!()
        };
        t.to_f64_vec()
    };
    reference(pat, nb, feat, &round(q), &round(k), &round(v))
}

/// The attention output `got` within `dt`'s rounding of the f64 `dense` one.
fn assert_close_to_dense(what: &str, dt: DType, got: &ArgValue, dense: &[f64]) {
    let ArgValue::Array(got) = got else {
        panic!("{what}: the output is not an array")
    };
    let tol = if dt == DType::F16 { 4e-3 } else { 3e-2 };
    for (i, (x, y)) in got.to_f64_vec().iter().zip(dense).enumerate() {
        assert!((x - y).abs() <= tol, "{what}: output {i}: {x} vs f64 {y}");
    }
}

/// f64 masked attention: row `r` of block row `r / 16` attends to the tokens of its stored
/// blocks; a row that stores nothing gives 0.
fn reference(
    (indptr, indices): &(Vec<i64>, Vec<i64>),
    nb: usize,
    d: usize,
    q: &[f64],
    k: &[f64],
    v: &[f64],
) -> Vec<f64> {
    let mut out = vec![0.0; nb * 16 * d];
    let scale = 1.0 / (d as f64).sqrt();
    for r in 0..nb * 16 {
        let blocks = &indices[indptr[r / 16] as usize..indptr[r / 16 + 1] as usize];
        let cols: Vec<usize> = blocks
            .iter()
            .flat_map(|&j| (0..16).map(move |c| j as usize * 16 + c))
            .collect();
        if cols.is_empty() {
            continue;
        }
        let s: Vec<f64> = cols
            .iter()
            .map(|&c| (0..d).map(|t| q[r * d + t] * k[c * d + t]).sum::<f64>() * scale)
            .collect();
        let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (&c, w) in cols.iter().zip(&e) {
            for t in 0..d {
                out[r * d + t] += w / sum * v[c * d + t];
            }
        }
    }
    out
}

/// The C backend runs the scores and the softmax with their CPU schedules (float32 and 16-bit
/// storage) and equals the evaluator.
#[test]
fn attention_kernels_on_the_c_backend_equal_the_evaluator() {
    if !common::have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(65);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let (s_f, p_f) = if dt == DType::F32 {
            (
                composable::bsr_sddmm().expect("bsr_sddmm"),
                composable::bsr_softmax().expect("bsr_softmax"),
            )
        } else {
            (sddmm(dt), softmax(dt))
        };
        let (nb, mb, feat) = (3, 4, 24);
        let what = format!("attention kernels {dt} on the C backend");
        let opts = common::opts("attn-c");
        // 16-bit operands: their default schedule widens Q's and K's blocks into float32
        // tiles first (`reverse_cache_read(..., dtype="float32")`); float32's runs on them too.
        let scheds: &[&str] = if dt == DType::F32 {
            &[composable::BSR_SDDMM_SCHEDULE]
        } else {
            &[
                composable::BSR_SDDMM_HALF_SCHEDULE,
                composable::BSR_SDDMM_SCHEDULE,
            ]
        };
        let s_ks: Vec<_> = scheds
            .iter()
            .map(|sched| {
                sparsetir_runtime::build(&s_f, Some(sched), &spec(feat), &opts)
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
            })
            .collect();
        if dt != DType::F32 {
            let src = s_ks[0].source();
            assert!(
                src.contains("float B_data_local[") && src.contains("float A_data_local["),
                "{what}: float tiles\n{src}"
            );
        }
        let p_k = sparsetir_runtime::build(
            &p_f,
            Some(composable::BSR_SOFTMAX_SCHEDULE),
            &spec_of(&p_f, feat),
            &opts,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let pat = common::bsr_pattern(&mut rng, nb, mb);
        let nnzb = pat.1.len();
        let mut random =
            |k: usize| -> Vec<f64> { (0..k).map(|_| rng.random_range(-1.0..1.0)).collect() };
        let (q, k) = (random(nb * 16 * feat), random(mb * 16 * feat));
        let mut a1 = scores_args(&pat, nb, mb, feat, dt, &q, &k);
        let mut want = a1.clone();
        eval_func(&s_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
        for s_k in s_ks.iter().rev() {
            a1 = scores_args(&pat, nb, mb, feat, dt, &q, &k);
            s_k.run(&mut a1).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_outputs_close(&what, &["c".into()], &a1, &want, 1e-5);
        }
        let mut a2 = HashMap::new();
        structure(&mut a2, &pat, nb, mb);
        a2.insert("scale".into(), ArgValue::Float(0.25));
        a2.insert("a".into(), output(&a1, "c"));
        a2.insert("b".into(), arr(dt, &vec![7.0; nnzb * 256]));
        let mut want = a2.clone();
        eval_func(&p_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
        p_k.run(&mut a2).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_outputs_close(&what, &["b".into()], &a2, &want, 1e-5);
    }
}

/// NVRTC compiles the tensor-core scores and both products of the fused softmax (one and two
/// tiles per warp, float16 and bfloat16) for sm_80 and sm_90, and their PTX holds the `mma`;
/// the row statistic compiles too.
#[test]
fn the_scores_ptx_holds_the_mma_instruction() {
    let Some(nvrtc) = common::nvrtc() else {
        return;
    };
    let mut builds = vec![
        (sddmm(DType::F16), "bsr_sddmm_tc", true),
        (sddmm(DType::BF16), "bsr_sddmm_tc4", true),
    ];
    for dt in [DType::F16, DType::BF16] {
        builds.push((softmax_mm(dt), "bsrmm_tc", true));
        builds.push((softmax_mm(dt), "bsrmm_tc2", true));
        builds.push((softmax_mm(dt), "bsrmm_tc4", true));
    }
    builds.push((softmax_lse(), "bsr_softmax_lse", false));
    for (f, sched, mma) in builds {
        let s = sparsetir_ops::gpu_schedule(sched).expect("schedule");
        let (_, m) =
            sparsetir_runtime::build::emit_cuda(&f, Some(s), &spec_of(&f, 64)).expect("cuda");
        for arch in ["sm_80", "sm_90"] {
            let arch = sparsetir_cuda::Arch::parse(arch).unwrap();
            let (ptx, _) = sparsetir_runtime::cuda_dev::compile_cached(
                &nvrtc,
                &m,
                &arch,
                sparsetir_cuda::Emit::Ptx,
                &cache(),
            )
            .unwrap_or_else(|e| panic!("{} {sched} {arch}: {e}\n{}", f.name, m.source));
            let ptx = String::from_utf8_lossy(&ptx);
            assert_eq!(
                ptx.contains("mma.sync.aligned.m16n8k16"),
                mma,
                "{} {sched} {arch}: mma in the PTX",
                f.name
            );
        }
    }
}

/// The CUDA of the scores, the softmax and the fused product (kernels only). The scores: the tile's fill absorbed
/// into its register accumulator (no zero stores and reloads), A's and B's fragment pairs read
/// as 32-bit loads (B, K's rows, is stored transposed), no barrier between blocks (each tile a
/// slice of its own). The softmax: 16 lanes per row of tokens, barriers between the passes.
#[test]
fn snapshot_attention_kernels() {
    let kernels =
        |source: &str| source[source.find("extern \"C\"").expect("a kernel")..].to_string();
    let f = sddmm(DType::F16);
    let s = sparsetir_ops::gpu_schedule("bsr_sddmm_tc").expect("schedule");
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, Some(s), &spec(64)).expect("cuda");
    // The fill absorbed: the accumulator starts at 0, never loaded from C.
    assert!(m.source.contains("const bool sptir_acc_live = true;"));
    assert!(!m.source.contains("sptir_acc[0] = C_data"));
    assert_eq!(m.source.matches("sptir_ld_pair(B_data").count(), 2);
    assert!(!m.source.contains("__syncthreads"));
    insta::assert_snapshot!("bsr_sddmm_tc_f16", kernels(&m.source));
    // Four blocks at a time: four register accumulators started at 0 (the fill absorbed unit by
    // unit), Q's fragment read once per feature step for the four, each tile stored under its
    // own guard.
    let s = sparsetir_ops::gpu_schedule("bsr_sddmm_tc4").expect("schedule");
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, Some(s), &spec(64)).expect("cuda");
    assert!(m
        .source
        .contains("float sptir_acc[4][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, "));
    assert!(
        !m.source.contains("= C_data["),
        "no accumulator loaded from C"
    );
    assert_eq!(
        m.source
            .matches("uint32_t sptir_a[4] = {0u, 0u, 0u, 0u};")
            .count(),
        1
    );
    assert_eq!(m.source.matches("sptir_ld_pair(A_data").count(), 4);
    assert!(!m.source.contains("__syncthreads"));
    insta::assert_snapshot!("bsr_sddmm_tc4_f16", kernels(&m.source));
    let f = softmax(DType::F16);
    let s = sparsetir_ops::gpu_schedule("bsr_softmax").expect("schedule");
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, Some(s), &spec_of(&f, 64)).expect("cuda");
    insta::assert_snapshot!("bsr_softmax_f16", kernels(&m.source));
    // The product making the probabilities, two tiles per warp: the A fragment — each pair of
    // scores one 8-byte load, its probabilities computed and rounded in registers — written
    // once before the loop over the two tiles, which both read it.
    let f = softmax_mm(DType::F16);
    let s = sparsetir_ops::gpu_schedule("bsrmm_tc2").expect("schedule");
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, Some(s), &spec(64)).expect("cuda");
    assert_eq!(m.source.matches("= sptir_ld2(S_data").count(), 4);
    assert_eq!(m.source.matches("uint32_t sptir_a[4];").count(), 1);
    assert!(m.source.contains("sptir_f2h(expf("));
    insta::assert_snapshot!("bsr_softmax_mm_tc2_f16", kernels(&m.source));
}

/// A thread-bound reduction the writer does not combine across threads (here: an annotation
/// the cross-thread form does not take on the loop inside it) would make every lane update the
/// row's maximum in place — which the emulator, running the lanes one after another, would even
/// compute right. The writer refuses it with a typed error instead (the emulator's own check of
/// such races is `tests/cuda_emu.rs`'s planted one).
#[test]
fn lanes_updating_one_element_are_refused() {
    let f = softmax(DType::F16);
    let s = sparsetir_ops::gpu_schedule("bsr_softmax")
        .expect("schedule")
        .replace(
            "sch.annotate(mj, \"unroll_factor\", 4)",
            "sch.annotate(mj, \"unroll_factor\", 4)\nsch.annotate(mj, \"note\", 1)",
        );
    let e = GpuKernel::build(
        &f,
        Some(&s),
        &spec_of(&f, 64),
        GpuDevice::Emulator,
        &cache(),
    )
    .err()
    .expect("refused");
    let text = e.to_string();
    assert!(
        text.contains("row_max0") && text.contains("every thread would update"),
        "{text}"
    );
}

/// The scores with a row's blocks dealt to four pairs of warps (`threadIdx.z`): the split leaves
/// the last pairs of a row without a block, a guard on the tile that every lane of a warp takes
/// as one; it also covers the register accumulator's store. Emulator = evaluator (rows of 0 to
/// 5 blocks).
#[test]
fn scores_with_guarded_tiles_equal_the_evaluator() {
    let sched = sparsetir_ops::gpu_schedule("bsr_sddmm_tc")
        .expect("schedule")
        .replace(
            "j, bi, bj, k = sch.get_loops(b1)\n",
            "j, bi, bj, k = sch.get_loops(b1)\njo, jz = sch.split(j, [None, 4])\n",
        )
        .replace(
            "sch.reorder(bjo, j, ko, bi, bji, ki)",
            "sch.reorder(jz, bjo, jo, ko, bi, bji, ki)\nsch.bind(jz, \"threadIdx.z\")",
        )
        .replace("sch.annotate(j, ", "sch.annotate(jo, ")
        .replace(
            "zbjo, zj, zbi, zbj = sch.get_loops(bz)",
            "zz, zbjo, zj, zbi, zbj = sch.get_loops(bz)",
        );
    let f = sddmm(DType::F16);
    let k = GpuKernel::build(&f, Some(&sched), &spec(32), GpuDevice::Emulator, &cache())
        .unwrap_or_else(|e| panic!("{e}\n{sched}"));
    let src = &k.module().source;
    assert!(
        src.contains("const bool sptir_acc_live = ((j_0 * 4) + j_1_1) <"),
        "{src}"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(67);
    let (nb, mb) = (4, 5);
    let pat = common::bsr_pattern(&mut rng, nb, mb);
    let nnzb = pat.1.len();
    let mut args = HashMap::new();
    structure(&mut args, &pat, nb, mb);
    args.insert("feat_size".into(), ArgValue::Int(32));
    let q: Vec<f64> = (0..nb * 16 * 32)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let kk: Vec<f64> = (0..mb * 16 * 32)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    args.insert("a".into(), arr(DType::F16, &q));
    args.insert("b".into(), arr(DType::F16, &kk));
    args.insert("c".into(), arr(DType::F32, &vec![7.0; nnzb * 256]));
    let mut want = args.clone();
    eval_func(&f, &mut want).expect("evaluator");
    k.run(&mut args).expect("emulator");
    assert_outputs_close_16(
        "guarded scores",
        &["c".into()],
        &args,
        &want,
        DType::F16,
        0.05,
    );
}

fn softmax_lse() -> PrimFunc {
    composable::bsr_softmax_lse().expect("bsr_softmax_lse")
}

fn softmax_mm(dt: DType) -> PrimFunc {
    let f = composable::bsr_softmax_mm(dt).expect("bsr_softmax_mm");
    if dt == DType::F32 {
        return f;
    }
    sparsetir_transform::store_as(&f, &["V"], dt).expect("store_as")
}

#[test]
fn fused_softmax_kernels_equal_the_evaluator_in_the_emulator() {
    fused_softmax_kernels(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present.
#[test]
fn fused_softmax_kernels_on_a_real_gpu() {
    if common::have_gpu() {
        fused_softmax_kernels(GpuDevice::Cuda);
    }
}

/// Attention with the softmax made inside the product: the scores, then each row's statistic
/// `L = scale max + log(sum)` (`formats/bsr_softmax_lse.sp`, `gpu/bsr_softmax_lse.sched`), then
/// `O = exp(scale S - L) V` on tensor cores (`formats/bsr_softmax_mm.sp` under bsrmm's
/// tensor-core schedules, one, two and four output tiles per warp: the probabilities computed in
/// the `A` fragment's registers and rounded to the 16-bit type). Each kernel equals the
/// evaluator, the chain equals masked attention computed densely in f64.
fn fused_softmax_kernels(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(68);
    let lse_f = softmax_lse();
    for dt in [DType::F16, DType::BF16] {
        let (s_f, o_f) = (sddmm(dt), softmax_mm(dt));
        for (nb, mb, feat) in SHAPES {
            let what = format!("fused softmax {dt}, {nb}x{mb} blocks of 16, feat {feat}");
            let s_k = gpu(&s_f, "bsr_sddmm_tc4", feat, device, &what);
            let l_k = gpu(&lse_f, "bsr_softmax_lse", feat, device, &what);
            let mut products = vec![gpu(&o_f, "bsrmm_tc", feat, device, &what)];
            if feat % 16 == 0 {
                products.push(gpu(&o_f, "bsrmm_tc2", feat, device, &what));
            }
            if feat % 32 == 0 {
                products.push(gpu(&o_f, "bsrmm_tc4", feat, device, &what));
            }
            for o_k in &products {
                let src = &o_k.module().source;
                assert!(
                    src.contains("sptir_mma_m16n8k16_") && src.contains("exp"),
                    "{what}: the product does not make the probabilities on tensor cores"
                );
            }
            let pat = common::bsr_pattern(&mut rng, nb, mb);
            let mut random =
                |k: usize| -> Vec<f64> { (0..k).map(|_| rng.random_range(-1.0..1.0)).collect() };
            let (q, k, v) = (
                random(nb * 16 * feat),
                random(mb * 16 * feat),
                random(mb * 16 * feat),
            );
            let scale = ArgValue::Float(1.0 / (feat as f64).sqrt());
            let dense = dense_attention(&pat, nb, feat, dt, &q, &k, &v);
            let mut a1 = scores_args(&pat, nb, mb, feat, dt, &q, &k);
            s_k.run(&mut a1).unwrap_or_else(|e| panic!("{what}: {e}"));
            // The row statistic.
            let mut a2 = HashMap::new();
            structure(&mut a2, &pat, nb, mb);
            a2.insert("scale".into(), scale.clone());
            a2.insert("a".into(), output(&a1, "c"));
            a2.insert("l".into(), arr(DType::F32, &vec![7.0; nb * 16]));
            let mut want = a2.clone();
            eval_func(&lse_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            l_k.run(&mut a2).unwrap_or_else(|e| panic!("{what}: {e}"));
            // Rows that store nothing hold -inf in both.
            assert_outputs_close(&what, &["l".into()], &a2, &want, 1e-5);
            for o_k in &products {
                let mut a3 = HashMap::new();
                structure(&mut a3, &pat, nb, mb);
                a3.insert("feat_size".into(), ArgValue::Int(feat as i64));
                a3.insert("scale".into(), scale.clone());
                a3.insert("s".into(), output(&a1, "c"));
                a3.insert("l".into(), output(&a2, "l"));
                a3.insert("v".into(), arr(dt, &v));
                a3.insert("o".into(), arr(DType::F32, &vec![0.0; nb * 16 * feat]));
                let mut want = a3.clone();
                eval_func(&o_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
                o_k.run(&mut a3).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_outputs_close_16(&what, &["o".into()], &a3, &want, dt, 0.05);
                assert_close_to_dense(&what, dt, &output(&a3, "o"), &dense);
            }
        }
    }
}

/// The C backend runs the row statistic and the product that makes the probabilities with
/// their CPU schedules (bsr_softmax's and BSR SpMM's; float32, float16 and bfloat16 `V`) and
/// equals the evaluator.
#[test]
fn fused_softmax_kernels_on_the_c_backend_equal_the_evaluator() {
    if !common::have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(69);
    let lse_f = softmax_lse();
    let opts = common::opts("attn-fused-c");
    let (nb, mb, feat) = (3, 4, 24);
    let l_k = sparsetir_runtime::build(
        &lse_f,
        Some(composable::BSR_SOFTMAX_LSE_SCHEDULE),
        &spec_of(&lse_f, feat),
        &opts,
    )
    .expect("bsr_softmax_lse on the C backend");
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let what = format!("fused softmax {dt} on the C backend");
        let o_f = softmax_mm(dt);
        let o_k = sparsetir_runtime::build(
            &o_f,
            Some(composable::BSR_SPMM_SCHEDULE),
            &spec(feat),
            &opts,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let pat = common::bsr_pattern(&mut rng, nb, mb);
        let nnzb = pat.1.len();
        let mut random =
            |k: usize| -> Vec<f64> { (0..k).map(|_| rng.random_range(-2.0..2.0)).collect() };
        let (s, v) = (random(nnzb * 256), random(mb * 16 * feat));
        let mut a2 = HashMap::new();
        structure(&mut a2, &pat, nb, mb);
        a2.insert("scale".into(), ArgValue::Float(0.25));
        a2.insert("a".into(), arr(DType::F32, &s));
        a2.insert("l".into(), arr(DType::F32, &vec![7.0; nb * 16]));
        let mut want = a2.clone();
        eval_func(&lse_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
        l_k.run(&mut a2).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_outputs_close(&what, &["l".into()], &a2, &want, 1e-5);
        let mut a3 = HashMap::new();
        structure(&mut a3, &pat, nb, mb);
        a3.insert("feat_size".into(), ArgValue::Int(feat as i64));
        a3.insert("scale".into(), ArgValue::Float(0.25));
        a3.insert("s".into(), arr(DType::F32, &s));
        a3.insert("l".into(), output(&a2, "l"));
        a3.insert("v".into(), arr(dt, &v));
        a3.insert("o".into(), arr(DType::F32, &vec![7.0; nb * 16 * feat]));
        let mut want = a3.clone();
        eval_func(&o_f, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
        o_k.run(&mut a3).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_outputs_close(&what, &["o".into()], &a3, &want, 1e-5);
    }
}
