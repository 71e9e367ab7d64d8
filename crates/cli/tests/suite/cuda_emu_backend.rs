//! End-to-end tests of `sparsetir run --backend cuda-emu`: every run scenario the C backend is
//! tested on is repeated in the CPU emulation of the generated CUDA (automatic GPU schedule, and
//! the kernel's default GPU schedule where it has one), and the output files must match the
//! evaluator's; bad data is refused before launch with the evaluator's message. Also
//! `build --target cuda` and `run --backend cuda` without a GPU. Skipped, with a note, when no
//! C++ compiler runs.

use crate::backend_tests;
use crate::common;

use common::*;

backend_tests! {
    "cuda-emu", have_cxx();
    emu_csrmm_random_with_empty_and_full_rows => csrmm_random_with_empty_and_full_rows,
    emu_csrmm_one_by_one => csrmm_one_by_one,
    emu_csrmm_empty_matrix => csrmm_empty_matrix,
    emu_csrmm_dense_iteration_reads_absent_as_zero => csrmm_dense_iteration_reads_absent_as_zero,
    emu_spmv => spmv,
    emu_sddmm_sparse_output => sddmm_sparse_output,
    emu_ell => ell,
    emu_ell_rejects_rows_with_wrong_count => ell_rejects_rows_with_wrong_count,
    emu_csf_square_sum => csf_square_sum,
    emu_sparse_softmax => sparse_softmax,
    emu_errors_name_the_buffer => errors_name_the_buffer,
    emu_second_bind_must_share_the_pattern => second_bind_must_share_the_pattern,
    emu_with_raw_csr_arrays => with_raw_csr_arrays,
    emu_rejects_invalid_raw_structure => rejects_invalid_raw_structure,
}

#[test]
fn build_target_cuda_prints_kernels() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let o = run(&["build", &script, "--target", "cuda"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let src = stdout(&o);
    assert!(src.contains("extern \"C\" __global__"), "{src}");
    assert!(
        src.contains("blockIdx.x") && src.contains("threadIdx.x"),
        "{src}"
    );
    // --emit needs an output file and a known kind.
    let o = run(&[
        "build", &script, "--target", "cuda", "--emit", "sass", "-o", "x",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--emit sass"), "{}", stderr(&o));
    let o = run(&["build", &script, "--target", "c", "--emit", "ptx"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--emit applies to --target cuda"));
}

#[test]
fn backend_cuda_without_a_gpu_says_so() {
    // On a machine with a GPU this runs the kernel instead; here (CI) no driver is found.
    if sparsetir_cuda::Context::first_device().is_ok() {
        return;
    }
    let d = Dir::new();
    let script = d.script("spmv");
    let (_, coo) = random_matrix(5, 4, 3);
    let (_, xt) = dense_tensor(&[4], 4);
    sparsetir_formats::write_mtx(d.path("a.mtx"), &coo).unwrap();
    sparsetir_formats::write_npy(d.path("x.npy"), &xt).unwrap();
    let (a, x) = (d.bind("A", "a.mtx"), d.bind("X", "x.npy"));
    let o = run(&[
        "run",
        &script,
        "--backend",
        "cuda",
        "--bind",
        &a,
        "--bind",
        &x,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains("NVIDIA driver") || e.contains("no CUDA device") || e.contains("GPU"),
        "{e}"
    );
}
