//! The one error type of the crate: every failure to find, load or use NVRTC and the CUDA driver.

use std::fmt::Write as _;
use std::path::PathBuf;

use thiserror::Error;

/// Everything that can go wrong in this crate. No function of the crate panics on a missing
/// library, a bad input or a failing CUDA call; it returns one of these.
#[derive(Debug, Error)]
pub enum CudaError {
    /// No NVRTC library was found anywhere in the search order (see the crate docs).
    #[error("{}", not_found_message(searched, rejected))]
    NvrtcNotFound {
        /// Every path (or bare library name, for the system loader) tried, in order.
        searched: Vec<PathBuf>,
        /// Files that exist but could not be loaded, with the loader's reason.
        rejected: Vec<(PathBuf, String)>,
    },
    /// A specific NVRTC library (an explicit path, `$SPARSETIR_NVRTC` or `load_from`) could not
    /// be loaded or lacks a function this crate needs.
    #[error("cannot load NVRTC from {}: {reason}", path.display())]
    NvrtcLoad { path: PathBuf, reason: String },
    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC {call} failed: {message} (nvrtcResult {code})")]
    Nvrtc {
        call: &'static str,
        code: i32,
        message: String,
    },
    /// The CUDA driver library could not be loaded (no NVIDIA driver on this machine).
    #[error("no NVIDIA driver (libcuda.so.1) could be loaded: {reason}")]
    NoDriver { reason: String },
    /// The driver is there but reports no CUDA device (or not the one asked for).
    #[error("no CUDA device{}", match ordinal { Some(o) => format!(" with ordinal {o}"), None => String::new() })]
    NoDevice { ordinal: Option<usize> },
    /// NVRTC rejected the source.
    #[error("{}", compile_message(log, first_error))]
    Compile {
        /// NVRTC's whole log.
        log: String,
        /// The first `name(LINE): error` in the log: the 1-based line and that line of source.
        first_error: Option<(usize, String)>,
    },
    /// A kernel launch failed, or the kernel failed while running.
    #[error("launch of kernel `{kernel}` failed: {name}: {message} (CUresult {code})")]
    Launch {
        kernel: String,
        code: i32,
        name: String,
        message: String,
    },
    /// The device has too little free memory for an allocation.
    #[error("out of GPU memory allocating {bytes} bytes")]
    OutOfMemory { bytes: usize },
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {name}: {message} (CUresult {code})")]
    Driver {
        call: &'static str,
        code: i32,
        name: String,
        message: String,
    },
    /// An architecture name or compute capability that cannot be compiled for.
    #[error("invalid GPU architecture `{input}`: {reason}")]
    InvalidArch { input: String, reason: String },
    /// A launch configuration rejected before reaching the driver.
    #[error("invalid launch configuration grid {grid:?} block {block:?}: {reason}")]
    InvalidLaunch {
        grid: [u32; 3],
        block: [u32; 3],
        reason: String,
    },
    /// A host slice whose length differs from the device buffer's.
    #[error("host buffer of {host} bytes does not match the device buffer of {device} bytes")]
    SizeMismatch { host: usize, device: usize },
    /// The loaded driver lacks a feature (a function of a newer CUDA version).
    #[error("the CUDA driver does not support {what}: {reason}")]
    Unsupported { what: &'static str, reason: String },
    /// An input that cannot be passed to C (a string holding a NUL byte).
    #[error("invalid {what}: {reason}")]
    InvalidInput { what: &'static str, reason: String },
}

fn not_found_message(searched: &[PathBuf], rejected: &[(PathBuf, String)]) -> String {
    let mut s = String::from(
        "NVRTC (libnvrtc.so) was not found. Install it with `bash scripts/setup-nvrtc.sh` \
         (no GPU or CUDA toolkit needed) or `pip install nvidia-cuda-nvrtc-cu12`, or set \
         SPARSETIR_NVRTC to the path of a libnvrtc.so.",
    );
    if !rejected.is_empty() {
        s.push_str("\nfound but not loadable:");
        for (path, reason) in rejected {
            let _ = write!(s, "\n  {}: {reason}", path.display());
        }
    }
    s.push_str("\nsearched:");
    for path in searched {
        let _ = write!(s, "\n  {}", path.display());
    }
    s
}

fn compile_message(log: &str, first_error: &Option<(usize, String)>) -> String {
    let mut s = String::from("NVRTC compilation failed");
    if let Some((line, text)) = first_error {
        let _ = write!(s, " at line {line}: {}", text.trim());
    }
    s.push('\n');
    s.push_str(log.trim_end());
    s
}
