//! Sparse convolution as gather-GEMM-scatter (`crates/ops/formats/sparse_conv.sp`): a
//! submanifold 3 × 3 convolution over the occupied cells of random 2-D grids (a rulebook of
//! (input, output) pairs per kernel offset, offsets with no pair included), in the stage-I
//! evaluator, in C with its CPU schedule and in the CPU emulation of its CUDA with its default
//! GPU schedule (channels over the threads), equals a dense f64 computation written here from the grid.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_ops::composable::{sparse_conv, SPARSE_CONV_SCHEDULE};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{have_cc, opts, Args};

/// splitmix64 in [0, 1).
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Case {
    args: Args,
    want: Vec<f64>,
}

/// A `side × side` grid with a `density` of occupied cells, `cin` / `cout` channels.
fn case(seed: u64, side: usize, density: f64, cin: usize, cout: usize) -> Case {
    let mut rng = Rng(seed);
    let mut id = vec![None; side * side];
    let mut points = Vec::new();
    for (c, slot) in id.iter_mut().enumerate() {
        if rng.unit() < density {
            *slot = Some(points.len());
            points.push(c);
        }
    }
    let n = points.len();
    let offsets: Vec<(i64, i64)> = (-1..=1)
        .flat_map(|dy| (-1..=1).map(move |dx| (dy, dx)))
        .collect();
    let (mut pair_ptr, mut inp, mut out) = (vec![0i64], Vec::new(), Vec::new());
    for &(dy, dx) in &offsets {
        for (o, &c) in points.iter().enumerate() {
            let (y, x) = ((c / side) as i64 + dy, (c % side) as i64 + dx);
            if (0..side as i64).contains(&y) && (0..side as i64).contains(&x) {
                if let Some(i) = id[y as usize * side + x as usize] {
                    inp.push(i as i64);
                    out.push(o as i64);
                }
            }
        }
        pair_ptr.push(inp.len() as i64);
    }
    let k = offsets.len();
    let xs: Vec<f64> = (0..n * cin).map(|_| rng.unit() - 0.5).collect();
    let ws: Vec<f64> = (0..k * cin * cout).map(|_| rng.unit() - 0.5).collect();
    let mut want = vec![0.0f64; n * cout];
    for o in 0..k {
        for p in pair_ptr[o] as usize..pair_ptr[o + 1] as usize {
            let (i, j) = (inp[p] as usize, out[p] as usize);
            for co in 0..cout {
                for ci in 0..cin {
                    want[j * cout + co] += xs[i * cin + ci] * ws[(o * cin + ci) * cout + co];
                }
            }
        }
    }
    let max_pairs = pair_ptr.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let f = |v: &[f64]| ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("tensor"));
    let i = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"));
    let mut args = HashMap::new();
    args.insert("x".into(), f(&xs));
    args.insert("w".into(), f(&ws));
    args.insert("y".into(), f(&vec![3.0; n * cout]));
    args.insert("in_idx".into(), i(&inp));
    args.insert("out_idx".into(), i(&out));
    args.insert("pair_ptr".into(), i(&pair_ptr));
    args.insert("num_offsets".into(), ArgValue::Int(k as i64));
    args.insert("max_pairs".into(), ArgValue::Int(max_pairs));
    args.insert("num_pairs".into(), ArgValue::Int(inp.len() as i64));
    args.insert("n_in".into(), ArgValue::Int(n as i64));
    args.insert("n_out".into(), ArgValue::Int(n as i64));
    args.insert("cin".into(), ArgValue::Int(cin as i64));
    args.insert("cout".into(), ArgValue::Int(cout as i64));
    Case { args, want }
}

fn check(what: &str, args: &Args, want: &[f64]) {
    let Some(ArgValue::Array(y)) = args.get("y") else {
        panic!("{what}: no output");
    };
    assert_eq!(y.len(), want.len(), "{what}");
    for (k, w) in want.iter().enumerate() {
        let g = y.get_f64(k);
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "{what}: y[{k}] = {g}, want {w}"
        );
    }
}

#[test]
fn gather_gemm_scatter_equals_the_dense_convolution() {
    let f = sparse_conv().expect("sparse_conv parses");
    let gpu_sched = sparsetir_ops::gpu_schedule("sparse_conv").expect("GPU schedule");
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sparse-conv"));
    for (seed, side, density, cin, cout) in
        [(1, 6, 0.5, 3, 4), (2, 12, 0.3, 8, 40), (3, 3, 0.2, 2, 2)]
    {
        let c = case(seed, side, density, cin, cout);
        let what = format!("{side}x{side} grid, {cin} -> {cout} channels");
        let mut got = c.args.clone();
        eval_func(&f, &mut got).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
        check(&format!("{what} (evaluator)"), &got, &c.want);
        if have_cc() {
            let k =
                sparsetir_runtime::build(&f, Some(SPARSE_CONV_SCHEDULE), &[], &opts("sparse-conv"))
                    .unwrap_or_else(|e| panic!("{what}: C: {e}"));
            let mut got = c.args.clone();
            k.run(&mut got).unwrap_or_else(|e| panic!("{what}: C: {e}"));
            check(&format!("{what} (C)"), &got, &c.want);
        }
        let spec = [("cout".to_string(), cout as i64)];
        let k = GpuKernel::build(&f, Some(gpu_sched), &spec, GpuDevice::Emulator, &cache)
            .unwrap_or_else(|e| panic!("{what}: CUDA: {e}"));
        let mut got = c.args.clone();
        k.run(&mut got)
            .unwrap_or_else(|e| panic!("{what}: emulator: {e}"));
        check(&format!("{what} (emulator)"), &got, &c.want);
    }
}
