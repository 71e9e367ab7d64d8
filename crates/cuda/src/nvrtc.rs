//! NVRTC, the CUDA runtime compiler, loaded at run time: finding the library, compiling CUDA C++
//! to PTX or cubin, and reading errors and per-kernel resources out of its log.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use crate::dl::fn_table;
use crate::resources::{parse_ptxas_info, KernelResources};
use crate::search::{nvrtc_candidates, Candidate, SearchEnv};
use crate::{Arch, CudaError};

type NvrtcResult = c_int;
type NvrtcProgram = *mut c_void;

fn_table!(NvrtcApi {
    version: "nvrtcVersion" => fn(*mut c_int, *mut c_int) -> NvrtcResult;
    error_string: "nvrtcGetErrorString" => fn(NvrtcResult) -> *const c_char;
    create_program: "nvrtcCreateProgram" => fn(
        *mut NvrtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult;
    destroy_program: "nvrtcDestroyProgram" => fn(*mut NvrtcProgram) -> NvrtcResult;
    compile_program: "nvrtcCompileProgram" => fn(NvrtcProgram, c_int, *const *const c_char) -> NvrtcResult;
    ptx_size: "nvrtcGetPTXSize" => fn(NvrtcProgram, *mut usize) -> NvrtcResult;
    ptx: "nvrtcGetPTX" => fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
    cubin_size: "nvrtcGetCUBINSize" => fn(NvrtcProgram, *mut usize) -> NvrtcResult;
    cubin: "nvrtcGetCUBIN" => fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
    log_size: "nvrtcGetProgramLogSize" => fn(NvrtcProgram, *mut usize) -> NvrtcResult;
    log: "nvrtcGetProgramLog" => fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
});

/// `NVRTC_ERROR_COMPILATION`: the source did not compile (the log says why).
const NVRTC_ERROR_COMPILATION: NvrtcResult = 6;

/// What [`Nvrtc::compile`] produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Emit {
    /// PTX text for `compute_XX` (JIT-compiled by the driver when loaded; runs on that
    /// architecture and newer ones).
    Ptx,
    /// Machine code (an ELF cubin) for exactly `sm_XX`; the log lists each kernel's registers
    /// and spills.
    Cubin,
}

/// The output of a successful compilation.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// PTX text (with its terminating NUL removed) or cubin bytes.
    pub code: Vec<u8>,
    /// NVRTC's log (warnings; with [`Emit::Cubin`], ptxas's per-kernel report).
    pub log: String,
    /// Per-kernel resources parsed from the log (empty for [`Emit::Ptx`]).
    pub resources: Vec<KernelResources>,
}

/// A loaded NVRTC library. Cheap to share by reference; safe to use from several threads.
pub struct Nvrtc {
    api: NvrtcApi,
    path: PathBuf,
    version: (i32, i32),
}

// SAFETY: the table holds function pointers and the library handle; NVRTC's entry points are
// thread-safe for distinct programs, and every program lives inside one `compile` call.
unsafe impl Send for Nvrtc {}
unsafe impl Sync for Nvrtc {}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

impl Nvrtc {
    /// Finds and loads NVRTC in the crate's search order (see the crate docs), reading the
    /// process environment.
    pub fn load() -> Result<Nvrtc, CudaError> {
        Nvrtc::load_with(&SearchEnv::from_process())
    }

    /// [`Nvrtc::load`] with an explicit environment snapshot.
    pub fn load_with(env: &SearchEnv) -> Result<Nvrtc, CudaError> {
        let mut searched = Vec::new();
        let mut rejected = Vec::new();
        for cand in nvrtc_candidates(env) {
            searched.push(cand.display_path());
            match &cand {
                Candidate::Explicit(p) => return Nvrtc::load_from(p),
                Candidate::File(p) => {
                    if !p.exists() {
                        continue;
                    }
                    match Nvrtc::load_from(p) {
                        Ok(n) => return Ok(n),
                        Err(e) => rejected.push((p.clone(), load_reason(e))),
                    }
                }
                Candidate::LoaderName(name) => {
                    // A bare name that the loader does not find is not an error worth
                    // reporting; one it finds but cannot use is.
                    if let Ok(n) = Nvrtc::open(Path::new(name)) {
                        return Ok(n);
                    }
                }
            }
        }
        Err(CudaError::NvrtcNotFound { searched, rejected })
    }

    /// Loads NVRTC from exactly `path` (a bare file name goes through the system loader).
    pub fn load_from(path: impl AsRef<Path>) -> Result<Nvrtc, CudaError> {
        Nvrtc::open(path.as_ref())
    }

    fn open(path: &Path) -> Result<Nvrtc, CudaError> {
        let fail = |reason: String| CudaError::NvrtcLoad {
            path: path.to_path_buf(),
            reason,
        };
        // SAFETY: loading NVRTC runs only its (side-effect free) initialisers.
        let lib = unsafe { libloading::Library::new(path.as_os_str()) }
            .map_err(|e| fail(e.to_string()))?;
        // SAFETY: the signatures in `NvrtcApi` are NVRTC's (stable since CUDA 11.1).
        let api = unsafe { NvrtcApi::resolve(lib) }.map_err(fail)?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let r = unsafe { (api.version)(&mut major, &mut minor) };
        if r != 0 {
            return Err(fail(format!("nvrtcVersion returned {r}")));
        }
        Ok(Nvrtc {
            api,
            path: path.to_path_buf(),
            version: (major, minor),
        })
    }

    /// NVRTC's version, e.g. `(12, 9)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The path (or bare library name) it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options [`Nvrtc::compile`] passes before `extra_options`.
    pub fn base_options(arch: &Arch, emit: Emit) -> Vec<String> {
        let mut opts = vec![match emit {
            Emit::Ptx => format!("--gpu-architecture={}", arch.compute_name()),
            Emit::Cubin => format!("--gpu-architecture={}", arch.sm_name()),
        }];
        opts.push("--std=c++17".to_string());
        if emit == Emit::Cubin {
            opts.push("--ptxas-options=-v".to_string());
        }
        opts
    }

    /// Compiles `source` (self-contained CUDA C++; `program_name` is the file name its
    /// diagnostics use) for `arch`. A rejected source gives [`CudaError::Compile`] with the log
    /// and the first error's line.
    pub fn compile(
        &self,
        source: &str,
        program_name: &str,
        arch: &Arch,
        emit: Emit,
        extra_options: &[String],
    ) -> Result<Compiled, CudaError> {
        let c_src = c_string("source", source)?;
        let c_name = c_string("program name", program_name)?;
        let options: Vec<CString> = Nvrtc::base_options(arch, emit)
            .iter()
            .chain(extra_options)
            .map(|o| c_string("compile option", o))
            .collect::<Result<_, _>>()?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

        let mut prog: NvrtcProgram = ptr::null_mut();
        // SAFETY: valid NUL-terminated strings; no headers.
        let r = unsafe {
            (self.api.create_program)(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                0,
                ptr::null(),
                ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", r)?;
        let prog = Program {
            api: &self.api,
            raw: prog,
        };

        // SAFETY: `prog` is live; the option pointers outlive the call.
        let r = unsafe {
            (self.api.compile_program)(prog.raw, option_ptrs.len() as c_int, option_ptrs.as_ptr())
        };
        let log = self.log(&prog)?;
        if r == NVRTC_ERROR_COMPILATION {
            let first_error = first_error(&log, program_name, source);
            return Err(CudaError::Compile { log, first_error });
        }
        self.check("nvrtcCompileProgram", r)?;

        let code = match emit {
            Emit::Ptx => {
                let mut ptx = self.read(&prog, "nvrtcGetPTX", self.api.ptx_size, self.api.ptx)?;
                while ptx.last() == Some(&0) {
                    ptx.pop();
                }
                ptx
            }
            Emit::Cubin => {
                self.read(&prog, "nvrtcGetCUBIN", self.api.cubin_size, self.api.cubin)?
            }
        };
        let resources = match emit {
            Emit::Ptx => Vec::new(),
            Emit::Cubin => parse_ptxas_info(&log),
        };
        Ok(Compiled {
            code,
            log,
            resources,
        })
    }

    fn log(&self, prog: &Program<'_>) -> Result<String, CudaError> {
        let bytes = self.read(prog, "nvrtcGetProgramLog", self.api.log_size, self.api.log)?;
        let text = CStr::from_bytes_until_nul(&bytes)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        Ok(text)
    }

    /// Reads one of the program's outputs through its size and copy functions.
    fn read(
        &self,
        prog: &Program<'_>,
        call: &'static str,
        size_fn: unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult,
        get_fn: unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult,
    ) -> Result<Vec<u8>, CudaError> {
        let mut size = 0usize;
        // SAFETY: `prog` is live; `size` is a valid out-pointer.
        self.check(call, unsafe { size_fn(prog.raw, &mut size) })?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: `buf` holds at least `size` bytes, as NVRTC requires.
        self.check(call, unsafe { get_fn(prog.raw, buf.as_mut_ptr().cast()) })?;
        buf.truncate(size);
        Ok(buf)
    }

    fn check(&self, call: &'static str, r: NvrtcResult) -> Result<(), CudaError> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString returns a static string for any value.
        let msg = unsafe { (self.api.error_string)(r) };
        let message = if msg.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: a non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(msg) }
                .to_string_lossy()
                .into_owned()
        };
        Err(CudaError::Nvrtc {
            call,
            code: r,
            message,
        })
    }
}

/// An NVRTC program, destroyed on drop.
struct Program<'a> {
    api: &'a NvrtcApi,
    raw: NvrtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from nvrtcCreateProgram and is destroyed once.
        unsafe {
            (self.api.destroy_program)(&mut self.raw);
        }
    }
}

fn c_string(what: &'static str, s: &str) -> Result<CString, CudaError> {
    CString::new(s).map_err(|e| CudaError::InvalidInput {
        what,
        reason: format!("contains a NUL byte at offset {}", e.nul_position()),
    })
}

fn load_reason(e: CudaError) -> String {
    match e {
        CudaError::NvrtcLoad { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// The first error of an NVRTC log, as `(line, that source line)`. NVRTC writes
/// `NAME(LINE): error: ...` (or `catastrophic error`); lines naming `program_name` are preferred
/// over others (an error inside an included header names the header).
pub fn first_error(log: &str, program_name: &str, source: &str) -> Option<(usize, String)> {
    let mut fallback = None;
    for line in log.lines() {
        let Some((file, line_no)) = error_location(line) else {
            continue;
        };
        if file == program_name {
            return Some((line_no, source_line(source, line_no)));
        }
        if fallback.is_none() {
            fallback = Some(line_no);
        }
    }
    fallback.map(|n| (n, source_line(source, n)))
}

/// `("NAME", LINE)` when `line` is `NAME(LINE): error...` or `NAME(LINE): catastrophic error...`.
fn error_location(line: &str) -> Option<(&str, usize)> {
    let close = line.find("): ")?;
    let rest = line[close + 3..].trim_start();
    if !(rest.starts_with("error") || rest.starts_with("catastrophic error")) {
        return None;
    }
    let open = line[..close].rfind('(')?;
    let digits = &line[open + 1..close];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((&line[..open], digits.parse().ok()?))
}

fn source_line(source: &str, line_no: usize) -> String {
    line_no
        .checked_sub(1)
        .and_then(|i| source.lines().nth(i))
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_are_found() {
        let src = "a\nb\nc\n";
        let log = "k.cu(2): warning #1: x\nk.cu(3): error: identifier \"q\" is undefined\n\
                   k.cu(1): error: later\n";
        assert_eq!(first_error(log, "k.cu", src), Some((3, "c".into())));
        let log = "hdr.h(7): catastrophic error: cannot open\n";
        assert_eq!(first_error(log, "k.cu", src), Some((7, String::new())));
        assert_eq!(first_error("1 error detected\n", "k.cu", src), None);
        assert_eq!(first_error("k.cu(x): error: y", "k.cu", src), None);
    }

    #[test]
    fn options_follow_the_target() {
        let a = Arch::parse("sm_90a").unwrap();
        assert_eq!(
            Nvrtc::base_options(&a, Emit::Cubin),
            [
                "--gpu-architecture=sm_90a",
                "--std=c++17",
                "--ptxas-options=-v"
            ]
        );
        assert_eq!(
            Nvrtc::base_options(&a, Emit::Ptx),
            ["--gpu-architecture=compute_90a", "--std=c++17"]
        );
    }
}
