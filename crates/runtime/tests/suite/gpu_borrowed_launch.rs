//! `GpuKernel::launch` on borrowed arguments, in the emulator (whose device memory is host
//! memory, so `ArrayRef::device` takes host addresses there): SpMM under its default GPU
//! schedules (one warp a row; rows split over warps, with a zero fill and atomics) and the
//! sparse softmax (intermediate buffers) on a frozen structure, dense operands lent "in device
//! memory", equal the stage-I evaluator; the structure is read once for several launches; an
//! `indptr` in device memory, an output lent read-only or write-only, and a wrong dtype are
//! refused with the parameter's name, before anything runs.

use std::collections::HashMap;
use std::mem::MaybeUninit;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{ArrayRef, FrozenArray, LaunchArg, LaunchArgs};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpu-borrowed"))
}

fn frozen_i32(v: &[i32]) -> FrozenArray {
    let v: Vec<i64> = v.iter().map(|&x| x.into()).collect();
    FrozenArray::new(Tensor::from_i64(DType::I32, &v).expect("tensor"))
}

/// A host slice lent, read-only, as the emulator's device memory.
fn on_device<T: sparsetir_runtime::HostElement>(s: &[T]) -> ArrayRef<'_> {
    // SAFETY: the emulator's device memory is host memory; `s` is borrowed for as long as the
    // view, and the kernels do not write it (it is not writable).
    unsafe { ArrayRef::device(T::DTYPE, s.as_ptr() as usize as u64, s.len(), false) }
}

/// A host slice lent, writable, as the emulator's device memory.
fn on_device_mut<T: sparsetir_runtime::HostElement>(s: &mut [T]) -> ArrayRef<'_> {
    // SAFETY: as above; `s` is borrowed exclusively for as long as the view.
    unsafe { ArrayRef::device(T::DTYPE, s.as_mut_ptr() as usize as u64, s.len(), true) }
}

/// A CSR matrix's launch arguments: its sizes (`feat_size` too where given) and its structure,
/// frozen.
fn csr_args<'a>(
    sizes: [usize; 3],
    feat: Option<usize>,
    indptr: &'a FrozenArray,
    indices: &'a FrozenArray,
) -> LaunchArgs<'a> {
    let mut args = LaunchArgs::new();
    for (name, v) in ["m", "n", "nnz"].into_iter().zip(sizes) {
        args.int(name, v as i64);
    }
    if let Some(f) = feat {
        args.int("feat_size", f as i64);
    }
    args.frozen("indptr", indptr).frozen("indices", indices);
    args
}

fn gpu(kernel: &str, schedule: &str, feat: i64) -> GpuKernel {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let sched = sparsetir_ops::gpu_schedule(schedule).expect("a GPU schedule");
    let spec: Vec<(String, i64)> = match f.param("feat_size") {
        Some(_) => vec![("feat_size".into(), feat)],
        None => Vec::new(),
    };
    GpuKernel::build(&f, Some(sched), &spec, GpuDevice::Emulator, &cache()).expect("builds")
}

/// The evaluator's output `out` of `kernel` on the same values.
fn reference(kernel: &str, args: HashMap<String, ArgValue>, out: &str) -> Vec<f64> {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let mut args = args;
    eval_func(&f, &mut args).expect("evaluates");
    match &args[out] {
        ArgValue::Array(t) => (0..t.len()).map(|i| t.get_f64(i)).collect(),
        _ => panic!("no output"),
    }
}

fn close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: [{i}] = {g}, want {w}"
        );
    }
}

#[test]
fn spmm_and_softmax_on_frozen_structure_and_device_operands_equal_the_evaluator() {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let (m, n, feat) = (45usize, 38usize, 64usize);
    let (indptr, indices) = crate::common::csr_pattern(&mut rng, m, n);
    let nnz = indices.len();
    let (fp, fi) = (frozen_i32(&indptr), frozen_i32(&indices));
    let a: Vec<f32> = (0..nnz).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..n * feat).map(|_| rng.random_range(-1.0..1.0)).collect();
    let owned = |extra: Vec<(&str, ArgValue)>| -> HashMap<String, ArgValue> {
        let mut h: HashMap<String, ArgValue> = HashMap::new();
        h.insert("indptr".into(), ArgValue::Array(fp.tensor().clone()));
        h.insert("indices".into(), ArgValue::Array(fi.tensor().clone()));
        for (k, v) in [("m", m), ("n", n), ("nnz", nnz)] {
            h.insert(k.into(), ArgValue::Int(v as i64));
        }
        for (k, v) in extra {
            h.insert(k.into(), v);
        }
        h
    };
    let f32s = |v: &[f32]| {
        let v: Vec<f64> = v.iter().map(|&x| x.into()).collect();
        ArgValue::Array(Tensor::from_f64(DType::F32, &v).expect("tensor"))
    };
    let want = reference(
        "csrmm",
        owned(vec![
            ("a", f32s(&a)),
            ("b", f32s(&b)),
            ("c", f32s(&vec![7.0; m * feat])),
            ("feat_size", ArgValue::Int(feat as i64)),
        ]),
        "c",
    );
    for schedule in ["csrmm", "csrmm_split"] {
        let k = gpu("csrmm", schedule, feat as i64);
        for round in 0..3 {
            // (Outputs start as garbage: the kernels store or zero them first.)
            let mut c = vec![7.0f32 + round as f32; m * feat];
            let mut args = csr_args([m, n, nnz], Some(feat), &fp, &fi);
            args.set("a", LaunchArg::Array(on_device(&a)));
            args.set("b", LaunchArg::Array(on_device(&b)));
            args.set("c", LaunchArg::Array(on_device_mut(&mut c)));
            // SAFETY: the emulator, the null stream.
            unsafe { k.launch(&args, 0) }.unwrap_or_else(|e| panic!("{schedule}: {e}"));
            drop(args);
            close(&format!("csrmm ({schedule}) round {round}"), &c, &want);
            c.fill(0.0);
        }
        // The structure was read by the first launch only.
        assert_eq!(k.validation_memo().full_validations(), 1, "{schedule}");
    }
    // The sparse softmax: its row maxima and sums are intermediate buffers of the module.
    let k = gpu("sparse_softmax", "sparse_softmax", 0);
    let want = reference(
        "sparse_softmax",
        owned(vec![("a", f32s(&a)), ("b", f32s(&vec![0.0; nnz]))]),
        "b",
    );
    let mut out = vec![0.0f32; nnz];
    let mut args = csr_args([m, n, nnz], None, &fp, &fi);
    args.read("a", &a);
    args.write("b", &mut out);
    // SAFETY: the emulator, the null stream.
    unsafe { k.launch(&args, 0) }.expect("softmax");
    drop(args);
    close("sparse_softmax", &out, &want);
}

#[test]
fn refused_launches_name_the_parameter_and_write_nothing() {
    let (indptr, indices) = ([0i32, 2, 3], [0i32, 2, 1]);
    let (fp, fi) = (frozen_i32(&indptr), frozen_i32(&indices));
    let plain_indptr = [0i32, 2, 3];
    let (a, b) = ([1.0f32, 2.0, 3.0], [1.0f32; 3 * 32]);
    let k = gpu("csrmm", "csrmm", 32);
    // Every argument of a valid launch but `c`, which each case sets; a case replaces one.
    fn valid<'a>(
        fp: &'a FrozenArray,
        fi: &'a FrozenArray,
        a: &'a [f32],
        b: &'a [f32],
    ) -> LaunchArgs<'a> {
        let mut args = csr_args([2, 3, 3], Some(32), fp, fi);
        args.read("a", a).read("b", b);
        args
    }
    let mut c = vec![5.0f32; 64];
    let refused = |args: &LaunchArgs<'_>, name: &str, what: &str| {
        // SAFETY: the emulator, the null stream.
        let e = unsafe { k.launch(args, 0) }.expect_err(what).to_string();
        assert!(e.contains(&format!("`{name}`")), "{what}: {e}");
    };
    // The structure in device memory: validation would have to read it.
    let mut args = valid(&fp, &fi, &a, &b);
    args.set("indptr", LaunchArg::Array(on_device(&plain_indptr)));
    args.set("c", LaunchArg::Array(on_device_mut(&mut c)));
    refused(&args, "indptr", "an indptr in device memory");
    // The output lent read-only.
    let mut args = valid(&fp, &fi, &a, &b);
    args.read("c", &c);
    refused(&args, "c", "a read-only output");
    // Write-only: a GPU launch copies host arrays in.
    let mut w = [MaybeUninit::<f32>::uninit(); 64];
    let mut args = valid(&fp, &fi, &a, &b);
    args.set("c", LaunchArg::Array(ArrayRef::write_only(&mut w)));
    refused(&args, "c", "a write-only output");
    // float64 values for a float32 kernel.
    let a64 = [1.0f64, 2.0, 3.0];
    let mut args = valid(&fp, &fi, &a, &b);
    args.read("a", &a64).write("c", &mut c);
    refused(&args, "a", "float64 values");
    drop(args);
    assert!(
        c.iter().all(|&x| x == 5.0),
        "a refused launch wrote its output"
    );
}

#[test]
fn hyb_from_the_structure_alone_with_values_gathered_at_launch() {
    use sparsetir_runtime::composable::hyb_gpu_spmm;

    let mut rng = ChaCha8Rng::seed_from_u64(44);
    // Power-law rows: a few of 70 entries (cut into pieces of 32 added atomically), the
    // others short, some empty.
    let (m, n, feat) = (90usize, 80usize, 32usize);
    let (mut indptr, mut indices) = (vec![0i32], Vec::new());
    for i in 0..m {
        let deg = if i % 23 == 0 {
            70
        } else {
            rng.random_range(0..4)
        };
        let mut cols: Vec<i32> = (0..n as i32).collect();
        for k in 0..deg {
            let j = rng.random_range(k..n);
            cols.swap(k, j);
        }
        let mut row = cols[..deg].to_vec();
        row.sort_unstable();
        indices.extend(row);
        indptr.push(indices.len() as i32);
    }
    let nnz = indices.len();
    let values: Vec<f32> = (0..nnz).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..n * feat).map(|_| rng.random_range(-1.0..1.0)).collect();
    let plan = hyb_gpu_spmm(m, n, &indptr, &indices).expect("hyb");
    let spec = [("feat_size".to_string(), feat as i64)];
    let k = GpuKernel::build(
        &plan.stage1,
        Some(&plan.schedule),
        &spec,
        GpuDevice::Emulator,
        &cache(),
    )
    .expect("builds");
    // The format's arrays, frozen; its values gathered from the CSR values.
    let frozen: Vec<(String, FrozenArray)> = plan
        .args
        .iter()
        .filter_map(|(name, v)| match v {
            ArgValue::Array(t) => Some((name.clone(), FrozenArray::new(t.clone()))),
            _ => None,
        })
        .collect();
    let gathered: Vec<(String, Vec<f32>)> = plan
        .sources
        .iter()
        .map(|(name, src)| {
            let v = src
                .iter()
                .map(|&s| usize::try_from(s).map_or(0.0, |s| values[s]))
                .collect();
            (name.clone(), v)
        })
        .collect();
    let (fp, fi) = (frozen_i32(&indptr), frozen_i32(&indices));
    let mut c = vec![9.0f32; m * feat];
    let mut args = csr_args([m, n, nnz], Some(feat), &fp, &fi);
    for (name, v) in &plan.args {
        if let ArgValue::Int(i) = v {
            args.int(name, *i);
        }
    }
    for (name, f) in &frozen {
        args.frozen(name, f);
    }
    for (name, v) in &gathered {
        args.read(name, v);
    }
    args.read("a", &values).read("b", &b);
    args.write("c", &mut c);
    // SAFETY: the emulator, the null stream.
    unsafe { k.launch(&args, 0) }.expect("hyb launch");
    drop(args);
    let mut want = vec![0f64; m * feat];
    for i in 0..m {
        for p in indptr[i] as usize..indptr[i + 1] as usize {
            let j = indices[p] as usize;
            for f in 0..feat {
                want[i * feat + f] += f64::from(values[p]) * f64::from(b[j * feat + f]);
            }
        }
    }
    close("hyb csrmm", &c, &want);
}
