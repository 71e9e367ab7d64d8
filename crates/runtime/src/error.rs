//! Errors of compiling, caching, loading, validating and launching native kernels (and of
//! emulating CUDA kernels on the CPU).

use sparsetir_ir::DType;

/// Why compiling, loading or launching a kernel failed. Every variant names what it concerns
/// (the compiler, file, parameter, buffer, axis or entry) so the message stands on its own.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The GPU path: NVRTC, the CUDA driver or a device (no GPU, compile error, launch failure,
    /// out of device memory, ...).
    #[error("{0}")]
    Cuda(String),
    /// A launch of the GPU path whose configuration cannot be computed from the arguments.
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
    /// The C compiler could not be started (not installed, not executable).
    #[error("cannot run the C compiler `{cc}`: {message}")]
    NoCompiler { cc: String, message: String },
    /// The C compiler rejected the source: its diagnostics and the numbered source.
    #[error(
        "the C compiler failed: {command}\n{stderr}\n--- generated source ---\n{numbered_source}"
    )]
    Compile {
        command: String,
        stderr: String,
        /// The source with 1-based line numbers, so diagnostics can be matched to it.
        numbered_source: String,
    },
    /// Reading or writing the kernel cache failed.
    #[error("kernel cache `{path}`: {message}")]
    Cache { path: String, message: String },
    /// The shared object could not be loaded, or lacks a symbol.
    #[error("cannot load kernel library `{path}`: {message}")]
    Load { path: String, message: String },
    /// Lowering the stage-I function failed.
    #[error("lowering failed: {0}")]
    Lower(String),
    /// The C writer refused the function.
    #[error("C code generation failed: {0}")]
    Codegen(String),
    /// The function is not at the stage this operation needs.
    #[error("{0}")]
    Stage(String),
    /// A parameter has no argument.
    #[error("missing argument for parameter `{name}`")]
    MissingArg { name: String },
    /// A scalar was given where an array is expected, or the other way round.
    #[error("parameter `{name}` expects {expected}, but {found} was given")]
    ArgKind {
        name: String,
        expected: String,
        found: String,
    },
    /// An array's element type differs from the parameter's.
    #[error("parameter `{name}` expects an array of {expected}, but the array holds {found}")]
    DTypeMismatch {
        name: String,
        expected: DType,
        found: DType,
    },
    /// A scalar argument does not fit its parameter's type, or is not a valid size.
    #[error("parameter `{name}`: {message}")]
    Scalar { name: String, message: String },
    /// An axis's `indptr` array is malformed.
    #[error("axis `{axis}`: indptr `{param}`: {message}")]
    Indptr {
        axis: String,
        param: String,
        message: String,
    },
    /// An axis's `indices` array is malformed.
    #[error("axis `{axis}`: indices `{param}`: {message}")]
    Indices {
        axis: String,
        param: String,
        message: String,
    },
    /// An array is shorter than its layout needs.
    #[error(
        "buffer `{buffer}`: argument `{param}` holds {found} values, but its layout needs {needed}"
    )]
    ArrayTooShort {
        buffer: String,
        param: String,
        needed: i64,
        found: i64,
    },
    /// A size (axis length, nnz, extent) is invalid or inconsistent with the data.
    #[error("{subject}: {message}")]
    Size { subject: String, message: String },
    /// Buffer values used as coordinates (or declared with `T.assume_buffer_domain`) are out of
    /// their range.
    #[error("buffer `{buffer}`: {message}")]
    Domain { buffer: String, message: String },
    /// The kernel returned a non-zero status.
    #[error("kernel `{entry}` failed with status {status} ({})", status_meaning(*.status))]
    Kernel { entry: String, status: i32 },
    /// CUDA emulation: a global or shared element outside its buffer was accessed.
    #[error(
        "kernel `{kernel}`: out-of-bounds access to `{buffer}`[{index}] (length {length}) by \
         thread {} of block {}",
        dim3(.thread),
        dim3(.block)
    )]
    EmuOutOfBounds {
        kernel: String,
        buffer: String,
        index: i64,
        length: i64,
        block: [u32; 3],
        thread: [u32; 3],
    },
    /// CUDA emulation: two threads of a block accessed one element of a shared array or of a
    /// writable global buffer between two barriers, at least one writing (not both through
    /// `atomicAdd`).
    #[error(
        "kernel `{kernel}`: race on `{buffer}`[{index}] in block {}: {what} (threads {} \
         and {}, no __syncthreads between them)",
        dim3(.block),
        dim3(.first),
        dim3(.second)
    )]
    EmuRace {
        kernel: String,
        buffer: String,
        index: i64,
        block: [u32; 3],
        /// The thread whose access came first.
        first: [u32; 3],
        /// The thread whose access completed the race.
        second: [u32; 3],
        what: String,
    },
    /// CUDA emulation: two blocks of one launch touched one element of a writable global
    /// buffer, one writing it plainly (or one reading it and the other updating it with
    /// `atomicAdd`): blocks of a launch run in no defined order.
    #[error(
        "kernel `{kernel}`: race on `{buffer}`[{index}] between blocks {} and {}: {what} \
         (blocks of one launch are not ordered)",
        dim3(.first),
        dim3(.second)
    )]
    EmuBlockRace {
        kernel: String,
        buffer: String,
        index: i64,
        /// A block that finished first.
        first: [u32; 3],
        /// The block whose access completed the race.
        second: [u32; 3],
        what: String,
    },
    /// CUDA emulation: a barrier or warp collective that can never complete.
    #[error(
        "kernel `{kernel}`: deadlock/divergent barrier in block {}: {message}",
        dim3(.block)
    )]
    EmuDeadlock {
        kernel: String,
        block: [u32; 3],
        message: String,
    },
    /// CUDA emulation: an integer division or modulo by zero (a GPU gives 0 there).
    #[error(
        "kernel `{kernel}`: integer division or modulo by zero (thread {} of block {}); the \
         `eval` backend locates it",
        dim3(.thread),
        dim3(.block)
    )]
    EmuDivisionByZero {
        kernel: String,
        block: [u32; 3],
        thread: [u32; 3],
    },
    /// CUDA emulation: the kernel used something the emulator does not support.
    #[error(
        "kernel `{kernel}`: not supported by the CUDA emulator: {message} (thread {} of block {})",
        dim3(.thread),
        dim3(.block)
    )]
    EmuUnsupported {
        kernel: String,
        block: [u32; 3],
        thread: [u32; 3],
        message: String,
    },
    /// A tensor-map argument (`KernelArg::tensor_map`) whose view or box the tensor copy engine
    /// cannot take (larger than its buffer, a row stride that is not a multiple of 16 bytes, a
    /// box past the limits), on the GPU path and in the emulator alike.
    #[error("kernel `{kernel}`: tensor map `{arg}`: {message}")]
    TensorMap {
        kernel: String,
        arg: String,
        message: String,
    },
    /// A launch of a kernel declared in thread-block clusters (`CudaKernel::cluster`) whose grid
    /// is not a whole number of clusters, or whose clusters a GPU cannot run (a dimension of 0,
    /// more than 8 blocks): refused before launching, on the GPU path and in the emulator alike.
    #[error(
        "kernel `{kernel}`: grid {} cannot run in clusters of {} blocks: {message}",
        dim3(.grid),
        dim3(.cluster)
    )]
    Cluster {
        kernel: String,
        grid: [u32; 3],
        cluster: [u32; 3],
        message: String,
    },
    /// CUDA emulation: the launch itself is invalid (kernel index, dimensions, arguments).
    #[error("kernel `{kernel}`: invalid launch: {message}")]
    EmuInvalidLaunch { kernel: String, message: String },
    /// CUDA emulation: the emulator itself failed (memory for the fibers' stacks).
    #[error("kernel `{kernel}`: the CUDA emulator failed: {message}")]
    EmuInternal { kernel: String, message: String },
}

/// `(x, y, z)`.
fn dim3(d: &[u32; 3]) -> String {
    format!("({}, {}, {})", d[0], d[1], d[2])
}

fn status_meaning(status: i32) -> &'static str {
    match status {
        -1 => "wrong number of arguments",
        -2 => "allocation failure",
        -3 => "integer division or modulo by zero; the `eval` backend locates it",
        _ => "unknown status",
    }
}

/// The source with right-aligned 1-based line numbers (`  12 | code`).
pub fn number_lines(source: &str) -> String {
    let count = source.lines().count().max(1);
    let width = count.to_string().len();
    let mut out = String::with_capacity(source.len() + count * (width + 4));
    for (i, line) in source.lines().enumerate() {
        out.push_str(&format!("{:>width$} | {line}\n", i + 1));
    }
    out
}

impl From<sparsetir_cuda::CudaError> for RunError {
    fn from(e: sparsetir_cuda::CudaError) -> RunError {
        RunError::Cuda(e.to_string())
    }
}
