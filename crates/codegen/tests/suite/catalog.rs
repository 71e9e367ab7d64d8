//! C backend tests on the kernel catalog: snapshots of the generated C for the main kernels,
//! every kernel emits, and (when a C compiler is available) every kernel's C compiles.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use sparsetir_codegen::{emit_c, CModule, CParamKind};
use sparsetir_ir::DType;

fn emit(name: &str) -> CModule {
    emit_c(&stage3(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn snapshot_csrmm() {
    insta::assert_snapshot!(emit("csrmm").source);
}

#[test]
fn snapshot_sddmm() {
    insta::assert_snapshot!(emit("sddmm").source);
}

#[test]
fn snapshot_spmv() {
    insta::assert_snapshot!(emit("spmv").source);
}

#[test]
fn snapshot_bsrmm() {
    insta::assert_snapshot!(emit("bsrmm").source);
}

#[test]
fn csrmm_params_follow_the_function() {
    let m = emit("csrmm");
    assert_eq!(m.entry, "sparsetir_csrmm");
    let f = stage3("csrmm");
    assert_eq!(m.params.len(), f.params.len());
    for (p, &v) in m.params.iter().zip(&f.params) {
        let var = &f.vars[v];
        assert_eq!(p.name, var.name);
        match p.kind {
            CParamKind::Scalar(d) => assert_eq!(d, var.dtype),
            CParamKind::Array { elem } => {
                assert_eq!(var.dtype, DType::Handle);
                // The element type is the dtype of the buffer matched to the handle.
                let b = f
                    .buffers
                    .iter()
                    .find(|(_, b)| b.data_param() == Some(v))
                    .map(|(_, b)| b.dtype);
                assert_eq!(Some(elem), b, "{}", p.name);
            }
        }
    }
    // a, b, c are float32 arrays, indptr/indices int32, then four int32 scalars.
    let kinds: Vec<CParamKind> = m.params.iter().map(|p| p.kind).collect();
    let arr = |elem| CParamKind::Array { elem };
    assert_eq!(
        kinds,
        vec![
            arr(DType::F32),
            arr(DType::F32),
            arr(DType::F32),
            arr(DType::I32),
            arr(DType::I32),
            CParamKind::Scalar(DType::I32),
            CParamKind::Scalar(DType::I32),
            CParamKind::Scalar(DType::I32),
            CParamKind::Scalar(DType::I32),
        ]
    );
    // Only C is written: every other array pointer is const.
    assert!(m.source.contains("float* restrict C_data"));
    assert!(m.source.contains("const float* restrict A_data"));
    assert!(m.source.contains("const int32_t* restrict J_indptr_data"));
    assert!(!m.source.contains("const float* restrict C_data"));
}

#[test]
fn every_catalog_kernel_emits_deterministically() {
    for k in sparsetir_ops::catalog() {
        let a = emit(k.name);
        let b = emit(k.name);
        assert_eq!(a, b, "{}: output differs between runs", k.name);
        assert!(a
            .source
            .contains(&format!("int32_t {}(const sparsetir_arg* args", a.entry)));
    }
}

/// Whether `cc` accepts `-fopenmp` (a compiler without libgomp headers may not).
fn supports_openmp(cc: &str, dir: &std::path::Path) -> bool {
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <omp.h>\nint f(void) { return omp_get_max_threads(); }\n",
    )
    .expect("write probe");
    Command::new(cc)
        .args(["-std=c11", "-fopenmp", "-fsyntax-only"])
        .arg(&src)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn compile(cc: &str, flags: &[&str], src: &PathBuf, obj: &PathBuf) -> Result<(), String> {
    let out = Command::new(cc)
        .args([
            "-std=c11",
            "-O1",
            "-Wall",
            "-Werror",
            "-Wno-unknown-pragmas",
            "-c",
        ])
        .args(flags)
        .arg(src)
        .arg("-o")
        .arg(obj)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn every_catalog_kernel_compiles_as_c11() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler (`$CC` or `cc`) runs here; skipping the compile test");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let omp = supports_openmp(&cc, dir.path());
    if !omp {
        eprintln!("note: `{cc}` does not accept -fopenmp; compiling without OpenMP only");
    }
    let mut failures = Vec::new();
    for k in sparsetir_ops::catalog() {
        let m = emit(k.name);
        let src = dir.path().join(format!("{}.c", k.name));
        std::fs::write(&src, &m.source).expect("write source");
        let obj = dir.path().join(format!("{}.o", k.name));
        let mut variants: Vec<&[&str]> = vec![&[]];
        if omp {
            variants.push(&["-fopenmp"]);
        }
        for flags in variants {
            if let Err(e) = compile(&cc, flags, &src, &obj) {
                failures.push(format!("{} {flags:?}:\n{e}\n{}", k.name, m.source));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
