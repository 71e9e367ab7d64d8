//! NVRTC tests that need no GPU: compiling to PTX and cubin, resources, compile errors, and the
//! library search. They skip (with a printed reason) where NVRTC is missing, unless `CI=true`.

use crate::common;

use std::path::PathBuf;

use common::{nvrtc_or_skip, AXPY, SHARED, SPILL};
use sparsetir_cuda::search::{nvrtc_candidates, Candidate};
use sparsetir_cuda::{Arch, CudaError, Emit, Nvrtc, SearchEnv};

fn arch(s: &str) -> Arch {
    Arch::parse(s).unwrap()
}

#[test]
fn axpy_compiles_to_ptx_and_cubin() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let (major, _) = nvrtc.version();
    assert!(major >= 12, "NVRTC {:?}", nvrtc.version());
    for a in ["sm_80", "sm_90"] {
        let ptx = nvrtc
            .compile(AXPY, "axpy.cu", &arch(a), Emit::Ptx, &[])
            .unwrap();
        let text = String::from_utf8(ptx.code).unwrap();
        assert!(text.contains(".entry axpy"), "{text}");
        assert!(
            text.contains(&format!(".target {}", arch(a).sm_name())),
            "{text}"
        );
        assert!(ptx.resources.is_empty());

        let cubin = nvrtc
            .compile(AXPY, "axpy.cu", &arch(a), Emit::Cubin, &[])
            .unwrap();
        assert!(cubin.code.starts_with(b"\x7fELF"), "{a}");
        assert_eq!(cubin.resources.len(), 1, "{}", cubin.log);
        let r = &cubin.resources[0];
        assert_eq!(r.kernel, "axpy");
        assert!(r.registers > 0, "{}", cubin.log);
        assert_eq!((r.spill_stores, r.spill_loads), (0, 0), "{}", cubin.log);
        assert_eq!(r.shared_bytes, 0);
    }
}

#[test]
fn arch_specific_targets_compile() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let c = nvrtc
        .compile(AXPY, "axpy.cu", &arch("sm_90a"), Emit::Cubin, &[])
        .unwrap();
    assert!(c.code.starts_with(b"\x7fELF"));
    let ptx = nvrtc
        .compile(AXPY, "axpy.cu", &arch("compute_90a"), Emit::Ptx, &[])
        .unwrap();
    assert!(String::from_utf8_lossy(&ptx.code).contains(".target sm_90a"));
}

#[test]
fn resources_report_spills_and_shared_memory() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let c = nvrtc
        .compile(
            SPILL,
            "spill.cu",
            &arch("sm_80"),
            Emit::Cubin,
            &["--maxrregcount=24".to_string()],
        )
        .unwrap();
    let r = &c.resources[0];
    assert_eq!(r.kernel, "spill");
    assert!(r.registers <= 24 && r.registers > 0, "{}", c.log);
    assert!(r.spill_stores > 0 && r.spill_loads > 0, "{}", c.log);
    assert!(r.stack_bytes > 0, "{}", c.log);

    let c = nvrtc
        .compile(SHARED, "shared.cu", &arch("sm_90"), Emit::Cubin, &[])
        .unwrap();
    let mut names: Vec<&str> = c.resources.iter().map(|r| r.kernel.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["block_sum", "small"], "{}", c.log);
    let of = |k: &str| c.resources.iter().find(|r| r.kernel == k).unwrap();
    assert_eq!(of("block_sum").shared_bytes, 1024, "{}", c.log);
    assert_eq!(of("small").shared_bytes, 0, "{}", c.log);
}

#[test]
fn compile_errors_name_the_line() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let src = "extern \"C\" __global__ void k(float* y) {\n\
               \x20   int i = threadIdx.x;\n\
               \x20   y[i] = undefined_name * 2.0f;\n\
               }\n";
    let err = nvrtc
        .compile(src, "broken.cu", &arch("sm_80"), Emit::Ptx, &[])
        .unwrap_err();
    let CudaError::Compile { log, first_error } = &err else {
        panic!("expected a compile error, got {err}");
    };
    assert!(log.contains("undefined_name"), "{log}");
    assert_eq!(
        first_error,
        &Some((3, "    y[i] = undefined_name * 2.0f;".to_string()))
    );
    let shown = err.to_string();
    assert!(shown.contains("line 3"), "{shown}");
    assert!(shown.contains("y[i] = undefined_name * 2.0f;"), "{shown}");
    assert!(shown.contains("broken.cu(3): error"), "{shown}");
}

#[test]
fn bad_options_and_inputs_are_errors() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let err = nvrtc
        .compile(
            AXPY,
            "axpy.cu",
            &arch("sm_80"),
            Emit::Ptx,
            &["--no-such-option".into()],
        )
        .unwrap_err();
    assert!(
        matches!(err, CudaError::Nvrtc { .. } | CudaError::Compile { .. }),
        "{err:?}"
    );
    let err = nvrtc
        .compile("a\0b", "x.cu", &arch("sm_80"), Emit::Ptx, &[])
        .unwrap_err();
    assert!(
        matches!(err, CudaError::InvalidInput { what: "source", .. }),
        "{err:?}"
    );
}

#[test]
fn explicit_path_that_does_not_load_is_an_error() {
    let env = SearchEnv::empty().with("SPARSETIR_NVRTC", "/nonexistent/libnvrtc.so.12");
    let err = Nvrtc::load_with(&env).unwrap_err();
    match &err {
        CudaError::NvrtcLoad { path, .. } => {
            assert_eq!(path, &PathBuf::from("/nonexistent/libnvrtc.so.12"))
        }
        other => panic!("expected NvrtcLoad, got {other:?}"),
    }
    assert!(
        err.to_string().contains("/nonexistent/libnvrtc.so.12"),
        "{err}"
    );
    let err = Nvrtc::load_from("/nonexistent/libnvrtc.so").unwrap_err();
    assert!(matches!(err, CudaError::NvrtcLoad { .. }), "{err:?}");
}

#[test]
fn explicit_path_loads_the_wheel() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    if nvrtc.path().is_relative() {
        return; // found by the system loader: there is no path to pass
    }
    let env = SearchEnv::empty().with("SPARSETIR_NVRTC", nvrtc.path());
    let again = Nvrtc::load_with(&env).unwrap();
    assert_eq!(again.path(), nvrtc.path());
    assert_eq!(again.version(), nvrtc.version());
}

#[test]
fn search_order() {
    let env = SearchEnv::empty()
        .with("SPARSETIR_NVRTC", "/explicit/libnvrtc.so")
        .with("CUDA_HOME", "/ch")
        .with("CUDA_PATH", "/cp")
        .with("SPARSETIR_CACHE_DIR", "/cache")
        .with("HOME", "/nonexistent-home")
        .with("PYTHONPATH", "/p1:/p2");
    let list = nvrtc_candidates(&env);
    let pos = |c: Candidate| {
        list.iter()
            .position(|x| *x == c)
            .unwrap_or_else(|| panic!("{c:?} missing from {list:?}"))
    };
    let file = |p: &str| Candidate::File(PathBuf::from(p));
    assert_eq!(pos(Candidate::Explicit("/explicit/libnvrtc.so".into())), 0);
    let order = [
        pos(file("/ch/lib64/libnvrtc.so")),
        pos(file("/ch/lib64/libnvrtc.so.13")),
        pos(file("/ch/lib64/libnvrtc.so.12")),
        pos(file("/cp/lib64/libnvrtc.so")),
        pos(file("/usr/local/cuda/lib64/libnvrtc.so")),
        pos(Candidate::LoaderName("libnvrtc.so")),
        pos(Candidate::LoaderName("libnvrtc.so.13")),
        pos(Candidate::LoaderName("libnvrtc.so.12")),
        pos(file("/cache/nvrtc/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")),
        pos(file("/p1/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")),
        pos(file("/p1/nvidia/cu13/lib/libnvrtc.so.13")),
        pos(file("/p2/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")),
    ];
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "{order:?} in {list:?}"
    );
    // The default cache directory hangs off $HOME.
    let env = SearchEnv::empty().with("HOME", "/h");
    assert!(nvrtc_candidates(&env).contains(&file(
        "/h/.cache/sparsetir/nvrtc/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
    )));
}

#[test]
fn unloadable_files_are_skipped_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let lib64 = dir.path().join("lib64");
    std::fs::create_dir_all(&lib64).unwrap();
    let fake = lib64.join("libnvrtc.so");
    std::fs::write(&fake, b"not a shared library").unwrap();
    let env = SearchEnv::empty()
        .with("CUDA_HOME", dir.path())
        .with("SPARSETIR_CACHE_DIR", dir.path().join("empty-cache"));
    match Nvrtc::load_with(&env) {
        // Found elsewhere (a toolkit or the system loader): the fake was passed over.
        Ok(n) => assert_ne!(n.path(), fake),
        Err(CudaError::NvrtcNotFound { searched, rejected }) => {
            assert_eq!(searched.first(), Some(&fake));
            assert_eq!(rejected.len(), 1, "{rejected:?}");
            assert_eq!(rejected[0].0, fake);
            let shown = CudaError::NvrtcNotFound { searched, rejected }.to_string();
            assert!(
                // The loader's reason, in its words (glibc says "file too short" for this
                // one where no toolkit is installed).
                ["not a shared library", "ELF", "too short"]
                    .iter()
                    .any(|w| shown.contains(w)),
                "{shown}"
            );
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn not_found_says_how_to_get_nvrtc() {
    let err = CudaError::NvrtcNotFound {
        searched: vec![
            PathBuf::from("/a/libnvrtc.so"),
            PathBuf::from("libnvrtc.so.12"),
        ],
        rejected: vec![],
    };
    let s = err.to_string();
    for needle in [
        "scripts/setup-nvrtc.sh",
        "pip install nvidia-cuda-nvrtc-cu12",
        "SPARSETIR_NVRTC",
        "/a/libnvrtc.so",
        "libnvrtc.so.12",
    ] {
        assert!(s.contains(needle), "{needle} missing from {s}");
    }
}
