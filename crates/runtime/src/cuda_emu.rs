//! CPU emulation of generated CUDA: a [`CudaModule`]'s exact source is compiled by the host C++
//! compiler after the emulator's prelude (`cuda_emu/prelude.hpp`, `tma.hpp`, `cluster.hpp`,
//! `launch.hpp`), with one launcher per kernel generated here, and launched over a grid whose
//! blocks run as fibers on a few OS threads (the blocks of one thread-block cluster together).
//!
//! # What a launch checks and measures
//!
//! - Every element access through an `SPTIR_IN`/`SPTIR_OUT` pointer or a shared array is
//!   bounds-checked ([`RunError::EmuOutOfBounds`] names the buffer, index, length, thread and
//!   block).
//! - Two threads of a block touching one shared element, or one element of a writable global
//!   buffer, between two `__syncthreads`, at least one writing, not both through `atomicAdd`, is
//!   a race ([`RunError::EmuRace`]) — for a shared element, unless mbarriers or `__syncwarp`
//!   order the two accesses: an arrival (`arrive`, `arrive.expect_tx`, a remote arrival)
//!   releases what the arriving thread did before it, a wait that sees the phase complete
//!   acquires what the phase's arrivals released, and `__syncwarp` orders the lanes of a warp
//!   (vector clocks over the threads of a block, from the cluster's first `mbarrier.init` or
//!   `__syncwarp` on; see the prelude). Global memory is ordered by barriers only.
//! - Blocks of one launch run in no defined order: an element of a writable global buffer that
//!   one block writes plainly and another reads, writes or updates with `atomicAdd`, or that one
//!   block reads and another updates with `atomicAdd`, is a race between blocks
//!   ([`RunError::EmuBlockRace`], checked as each block finishes).
//! - A barrier or warp collective that can never complete is reported
//!   ([`RunError::EmuDeadlock`]), as is a warp whose lanes wait in different kinds of
//!   collectives. Threads that returned count as arrived at `__syncthreads`; a shuffle reading a
//!   lane that returned gets the caller's own value (CUDA leaves it undefined).
//! - Tensor copies (`TMA_PRELUDE`): an argument with `KernelArg::tensor_map` is an
//!   [`EmuArg::TensorMap`] (or [`EmuArg::TensorMapOf`] the buffer of a pointer argument of the
//!   same launch), its view checked against the buffer ([`RunError::TensorMap`]); the kernel
//!   gets a `TMap<T>` of the checked buffer. mbarriers are block state; a copy's box is read
//!   at issue (counted as traffic: its elements, and the sectors of each box row), its shared
//!   elements in flight until a wait on its barrier lands it (see the prelude).
//! - Thread-block clusters ([`CudaKernel::cluster`]): the grid must be a whole number of
//!   clusters of at most 8 blocks ([`RunError::Cluster`], [`check_cluster`]). A worker runs the
//!   blocks of one cluster together, their threads interleaved; `sptir_cluster_sync` is a
//!   barrier of every thread of the cluster (and each block's `__syncthreads` for the race
//!   check); a remote mbarrier arrival or a copy multicast into another block reaches the same
//!   shared array and offset there, a rank outside the cluster or a barrier not initialized
//!   there is unsupported, as is reaching a block whose threads all returned. A copy
//!   multicast into a block races with that block's accesses since its last barrier that its
//!   threads did not release to the issuer (an arrival on the issuer's barrier, after the
//!   access, whose phase the issuer's wait saw complete before the copy); its global traffic
//!   counts once.
//! - Global traffic ([`EmuStats`]): the accesses of a warp's lanes at one program site with the
//!   same per-lane occurrence count of that site (counted from the last warp collective or
//!   barrier) form one warp-wide access; it requests the sum of the lanes' element sizes and
//!   moves 32 bytes per distinct 32-byte sector. Reads, writes and atomics all count.
//!
//! # Constraints on the source (beyond the contract in `sparsetir_codegen::cuda`)
//!
//! - Values read through a pointer must be stored in typed variables (`float v = A[i];`), never
//!   in `auto` (which would keep the proxy); parameters cannot become raw pointers
//!   (`const float* p = A + k;`, `&A[i]` and `A + i` are checked pointers); shared memory only
//!   through `SPTIR_SHARED` (no `__shared__`; `SPTIR_SHARED_DYN`, a slice of dynamic shared
//!   memory on a GPU, is an array of its own here).
//! - `KernelArg::ctype` is exactly the `T` of the parameter's `SPTIR_IN(T)`/`SPTIR_OUT(T)`, and
//!   `KernelArg::readonly` says which of the two it is: the launcher builds the parameter from
//!   them, so a mismatch fails to compile (`int64_t` and `long long` are different types here).
//! - Warp collectives take the full mask `0xffffffff`; `__syncthreads_count/_and/_or` and
//!   cooperative groups are absent; an access inside a `__device__` helper that is not
//!   `__forceinline__` shares its traffic site across callers.
//! - Each thread has a 256 KiB stack (a deeper one crashes on its guard page).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

use sparsetir_codegen::cuda::{CudaKernel, CudaModule, KernelArg};
use sparsetir_ir::DType;

use crate::cache::{KernelCache, LoadReport};
use crate::compile::Compiler;
use crate::error::{number_lines, RunError};

mod prelude_cache;

use prelude_cache::SharedPrelude;

/// The emulator's C++ prelude (part of every cache key, as the text of the compiled source): the
/// core (fibers, traffic, collectives, shared arrays, asynchronous copies and products,
/// proxies), mbarriers and the tensor copy engine, thread-block clusters, then atomics, grids
/// and the CUDA surface.
pub const PRELUDE: &str = concat!(
    include_str!("cuda_emu/prelude.hpp"),
    include_str!("cuda_emu/tma.hpp"),
    include_str!("cuda_emu/cluster.hpp"),
    include_str!("cuda_emu/launch.hpp")
);

/// The flags every emulated module is compiled with (`-O1`: on the 2:4 warpgroup tests, about
/// 10% less compile time than `-O2` — up to 40% on the largest modules — for the same
/// emulation speed).
pub const EMU_FLAGS: [&str; 7] = [
    "-x",
    "c++",
    "-std=c++17",
    "-O1",
    "-fPIC",
    "-shared",
    "-pthread",
];

/// OS threads a launch spreads its blocks over unless `SPARSETIR_EMU_THREADS` says otherwise.
pub const DEFAULT_EMU_THREADS: usize = 2;

/// The prelude's ABI version (`sptir_emu_abi_version`).
const ABI_VERSION: i32 = 3;

/// The most blocks of a thread-block cluster a launch may ask for (the portable limit of
/// `__cluster_dims__`; Hopper takes 16 only with a launch attribute this runtime does not set).
pub const MAX_CLUSTER_BLOCKS: u32 = 8;

/// The file names the compiler's diagnostics use for the module and the launchers (`#line`).
const LAUNCHERS_FILE: &str = "sptir_emu_launchers.cpp";

// Error kinds of `ErrorOut::kind` (the prelude's `ERR_*`).
const ERR_NONE: i32 = 0;
const ERR_OOB: i32 = 1;
const ERR_RACE: i32 = 2;
const ERR_DEADLOCK: i32 = 3;
const ERR_UNSUPPORTED: i32 = 4;
const ERR_BLOCK_RACE: i32 = 6;
const ERR_DIV_BY_ZERO: i32 = 7;

/// `sptir_emu::LaunchArg`.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawArg {
    ptr: *mut c_void,
    len: i64,
    i: i64,
    f: f64,
    /// A tensor map's view: `[columns, rows]`.
    d: [i64; 2],
}

/// `sptir_emu::ErrorOut`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ErrorOut {
    kind: i32,
    reserved: i32,
    index: i64,
    length: i64,
    block: [u32; 3],
    thread_a: [u32; 3],
    thread_b: [u32; 3],
    reserved2: u32,
    buffer: [u8; 128],
    message: [u8; 512],
}

/// `sptir_emu::LaunchDesc`.
#[repr(C)]
struct LaunchDesc {
    grid: [u32; 3],
    block: [u32; 3],
    /// Blocks per thread-block cluster along x, y, z.
    cluster: [u32; 3],
    os_threads: u32,
    args: *const RawArg,
    requested_bytes: u64,
    sector_bytes: u64,
    err: ErrorOut,
}

type LaunchFn = unsafe extern "C" fn(*mut LaunchDesc) -> i32;
type AbiFn = unsafe extern "C" fn() -> i32;
type DescSizeFn = unsafe extern "C" fn() -> u64;

/// Global-memory traffic of one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// Bytes the lanes asked for (sum of element sizes of every access).
    pub requested_bytes: u64,
    /// Bytes moved: 32 per distinct 32-byte sector of every warp-wide access.
    pub sector_bytes: u64,
}

impl EmuStats {
    /// `requested_bytes / sector_bytes` (1.0 for perfectly coalesced accesses; 1.0 when nothing
    /// was accessed).
    pub fn efficiency(&self) -> f64 {
        if self.sector_bytes == 0 {
            1.0
        } else {
            self.requested_bytes as f64 / self.sector_bytes as f64
        }
    }
}

impl std::ops::AddAssign for EmuStats {
    fn add_assign(&mut self, o: EmuStats) {
        self.requested_bytes += o.requested_bytes;
        self.sector_bytes += o.sector_bytes;
    }
}

/// Element types of typed buffer arguments.
pub trait EmuElem: Copy + private::Sealed {
    const DTYPE: DType;
}

mod private {
    pub trait Sealed {}
}

macro_rules! emu_elem {
    ($($t:ty => $d:ident),*) => {$(
        impl private::Sealed for $t {}
        impl EmuElem for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}
emu_elem!(f32 => F32, f64 => F64, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8,
    u16 => U16, u32 => U32, u64 => U64);

/// One kernel argument, in the kernel's parameter order.
#[derive(Debug)]
pub enum EmuArg<'a> {
    /// A buffer the kernel only reads (`SPTIR_IN`); `dtype`, when known, is checked.
    In {
        bytes: &'a [u8],
        dtype: Option<DType>,
    },
    /// A buffer the kernel may write (`SPTIR_OUT`, or `SPTIR_IN`).
    Out {
        bytes: &'a mut [u8],
        dtype: Option<DType>,
    },
    /// A tensor map (`SPTIR_TMAP(T)`) of a buffer only read through it: the view's
    /// `[columns, rows]` (checked against the buffer and the map's box at launch).
    TensorMap {
        bytes: &'a [u8],
        dtype: Option<DType>,
        dims: [i64; 2],
    },
    /// A tensor map of the buffer that argument `arg` (a pointer argument of the same launch)
    /// passes: the same buffer as a pointer and as a map in one kernel.
    TensorMapOf {
        arg: usize,
        dims: [i64; 2],
    },
    I32(i32),
    I64(i64),
    U32(u32),
    F32(f32),
    F64(f64),
}

impl<'a> EmuArg<'a> {
    /// A tensor map of a typed buffer, viewed as `rows` rows of `columns` elements.
    pub fn tensor_map<T: EmuElem>(values: &'a [T], columns: i64, rows: i64) -> EmuArg<'a> {
        match EmuArg::input(values) {
            EmuArg::In { bytes, dtype } => EmuArg::TensorMap {
                bytes,
                dtype,
                dims: [columns, rows],
            },
            other => other,
        }
    }

    /// A read-only typed buffer.
    pub fn input<T: EmuElem>(values: &'a [T]) -> EmuArg<'a> {
        // SAFETY: `T` is a plain numeric type (sealed): every byte of it is initialized, and
        // the byte view covers exactly the slice's memory for the same lifetime.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        EmuArg::In {
            bytes,
            dtype: Some(T::DTYPE),
        }
    }

    /// A writable typed buffer.
    pub fn output<T: EmuElem>(values: &'a mut [T]) -> EmuArg<'a> {
        let len = std::mem::size_of_val(values);
        // SAFETY: as in `input`; besides, every bit pattern is a valid `T`, so writes through
        // the byte view cannot create invalid values, and the borrow is exclusive.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) };
        EmuArg::Out {
            bytes,
            dtype: Some(T::DTYPE),
        }
    }

    fn describe(&self) -> String {
        match self {
            EmuArg::In { .. } => "a read-only buffer".into(),
            EmuArg::Out { .. } => "a writable buffer".into(),
            EmuArg::TensorMap { .. } | EmuArg::TensorMapOf { .. } => "a tensor map".into(),
            EmuArg::I32(v) => format!("the int32 {v}"),
            EmuArg::I64(v) => format!("the int64 {v}"),
            EmuArg::U32(v) => format!("the uint32 {v}"),
            EmuArg::F32(v) => format!("the float32 {v}"),
            EmuArg::F64(v) => format!("the float64 {v}"),
        }
    }
}

/// A loaded emulation library: one launcher per kernel of the module.
pub struct EmuModule {
    func: String,
    kernels: Vec<CudaKernel>,
    launchers: Vec<LaunchFn>,
    path: PathBuf,
    threads: usize,
    // Never unloaded: the library has thread-local state (as `CompiledKernel`'s, it stays
    // mapped until the process exits); the launchers stay valid as long as this struct lives.
    _lib: ManuallyDrop<libloading::Library>,
}

impl std::fmt::Debug for EmuModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuModule")
            .field("func", &self.func)
            .field(
                "kernels",
                &self.kernels.iter().map(|k| &k.name).collect::<Vec<_>>(),
            )
            .field("path", &self.path)
            .field("threads", &self.threads)
            .finish()
    }
}

/// The C++ compiler of the emulator: `$CXX` (with any leading words, e.g. `ccache g++`), else
/// `c++`, with [`EMU_FLAGS`].
pub fn emu_compiler(cxx: Option<&str>) -> Compiler {
    let command = match cxx {
        Some(c) if !c.trim().is_empty() => c.to_string(),
        _ => match std::env::var("CXX") {
            Ok(c) if !c.trim().is_empty() => c,
            _ => "c++".to_string(),
        },
    };
    let mut words = command.split_whitespace().map(str::to_string);
    let program = words.next().unwrap_or_else(|| "c++".to_string());
    Compiler {
        program,
        prefix_args: words.collect(),
        flags: EMU_FLAGS.iter().map(|s| s.to_string()).collect(),
    }
}

/// `SPARSETIR_EMU_THREADS` when it is a positive integer, else [`DEFAULT_EMU_THREADS`].
pub fn threads_from_env() -> usize {
    std::env::var("SPARSETIR_EMU_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_EMU_THREADS)
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A C type name as the contract spells them (`float`, `int32_t`, `unsigned int`, ...).
fn is_ctype(s: &str) -> bool {
    !s.trim().is_empty() && s.split_whitespace().all(is_ident)
}

/// `s` as the contents of a C string literal.
fn c_string(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out
}

/// The launchers of every kernel: `sptir_emu_launch_<k>` casts the argument array to the
/// kernel's typed parameters and runs the grid.
pub fn launchers(module: &CudaModule) -> Result<String, RunError> {
    let mut s = String::new();
    for (k, kernel) in module.kernels.iter().enumerate() {
        let bad = |message: String| RunError::EmuInvalidLaunch {
            kernel: kernel.name.clone(),
            message,
        };
        if !is_ident(&kernel.name) {
            return Err(bad("the kernel's name is not an identifier".into()));
        }
        let mut params = Vec::new();
        for (j, a) in kernel.args.iter().enumerate() {
            if !is_ctype(&a.ctype) {
                return Err(bad(format!(
                    "argument `{}` has the C type `{}`, which is not a type name",
                    a.name, a.ctype
                )));
            }
            params.push(if let Some(tm) = &a.tensor_map {
                format!(
                    "::sptir_emu::TMap<{}>::make(a[{j}].ptr, a[{j}].len, \"{}\", a[{j}].d[0], \
                     a[{j}].d[1], {}u, {}u, {}u, a[{j}].i != 0)",
                    a.ctype,
                    c_string(&a.name),
                    tm.box_dims[0],
                    tm.box_dims[1],
                    tm.swizzle
                )
            } else if a.pointer {
                format!(
                    "::sptir_emu::GPtr<{}, {}>::make(a[{j}].ptr, a[{j}].len, \"{}\")",
                    a.ctype,
                    !a.readonly,
                    c_string(&a.name)
                )
            } else if a.dtype.is_float() {
                format!("({})a[{j}].f", a.ctype)
            } else {
                format!("({})a[{j}].i", a.ctype)
            });
        }
        s.push_str(&format!(
            "static void sptir_emu_body_{k}(const ::sptir_emu::LaunchArg* a) {{\n  (void)a;\n  {}({});\n}}\n\
             extern \"C\" int sptir_emu_launch_{k}(::sptir_emu::LaunchDesc* d) {{\n  \
             return ::sptir_emu::run_grid(d, &sptir_emu_body_{k});\n}}\n",
            kernel.name,
            params.join(",\n    ")
        ));
    }
    Ok(s)
}

/// The file name the module's source has in diagnostics.
fn module_file(module: &CudaModule) -> String {
    let stem: String = module
        .func
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{stem}.cu")
}

/// The complete C++ text compiled for `module` when it embeds the whole prelude (runtime
/// included): prelude, `SPTIR_EMU`, the module source, the launchers (each part with a `#line`
/// so diagnostics name the part and its own line).
pub fn emu_source(module: &CudaModule) -> Result<String, RunError> {
    let launch = launchers(module)?;
    Ok(source_after(&embedded_prelude(), module, &launch))
}

/// The prelude's text under a `#line` naming it: the module-side view (the header of
/// `cuda_emu/prelude_cache.rs`) unless `SPTIR_EMU_RUNTIME` is defined before it.
fn prelude_text() -> String {
    format!("#line 1 \"sptir_emu_prelude.hpp\"\n{PRELUDE}\n")
}

/// The whole prelude, runtime included: the runtime library's source, or what a module embeds
/// where the cache holds no shared prelude.
fn embedded_prelude() -> String {
    format!("#define SPTIR_EMU_RUNTIME 1\n{}", prelude_text())
}

/// The compiled text: `prelude` (the prelude's text, or the `#include` of its header), then the
/// module's source and the launchers `launch`, each under a `#line` naming it.
fn source_after(prelude: &str, module: &CudaModule, launch: &str) -> String {
    format!(
        "{prelude}#define SPTIR_EMU 1\n#line 1 \"{}\"\n{}\n#line 1 \"{LAUNCHERS_FILE}\"\n{launch}",
        module_file(module),
        module.source
    )
}

/// The lines of `source` that diagnostics in `stderr` point at (`file:LINE:`), numbered.
fn offending_lines(stderr: &str, file: &str, source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut seen = Vec::new();
    let pat = format!("{file}:");
    for (pos, _) in stderr.match_indices(&pat) {
        let rest = &stderr[pos + pat.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<usize>() {
            if n >= 1 && n <= lines.len() && !seen.contains(&n) {
                seen.push(n);
            }
        }
    }
    seen.iter()
        .map(|n| format!("{file}:{n}: {}\n", lines[n - 1]))
        .collect()
}

/// The compiler's failure, reported against the module source and the launchers instead of the
/// whole compiled text.
fn compile_error(e: RunError, module: &CudaModule, launch: &str) -> RunError {
    match e {
        RunError::Compile {
            command, stderr, ..
        } => {
            let file = module_file(module);
            let mut offending = offending_lines(&stderr, &file, &module.source);
            offending.push_str(&offending_lines(&stderr, LAUNCHERS_FILE, launch));
            let stderr = if offending.is_empty() {
                stderr
            } else {
                format!("{stderr}\n--- offending lines ---\n{offending}")
            };
            RunError::Compile {
                command,
                stderr,
                numbered_source: format!(
                    "{}--- {LAUNCHERS_FILE} ---\n{}",
                    number_lines(&module.source),
                    number_lines(launch)
                ),
            }
        }
        other => other,
    }
}

impl EmuModule {
    /// Compiles (or finds in `cache`) and loads the emulation library of `module`, with the C++
    /// compiler of [`emu_compiler`]`(None)`.
    pub fn load(
        module: &CudaModule,
        cache: &KernelCache,
    ) -> Result<(EmuModule, LoadReport), RunError> {
        EmuModule::load_with(module, cache, &emu_compiler(None))
    }

    /// [`EmuModule::load`] with an explicit compiler.
    pub fn load_with(
        module: &CudaModule,
        cache: &KernelCache,
        compiler: &Compiler,
    ) -> Result<(EmuModule, LoadReport), RunError> {
        let launch = launchers(module)?;
        // The prelude by an `#include` of its shared header, the runtime by its shared library,
        // where the cache can hold them.
        let shared = SharedPrelude::of(cache, compiler);
        let (source, module_compiler) = match &shared {
            Some(p) => (
                source_after(&p.include_line(), module, &launch),
                p.module_compiler(compiler),
            ),
            None => (emu_source(module)?, compiler.clone()),
        };
        let load = || {
            cache.load_prepared(
                &source,
                &module_compiler,
                || {
                    shared
                        .as_ref()
                        .map_or(Ok(()), |p| p.ensure(cache, compiler))
                },
                |path| EmuModule::open(path, module),
            )
        };
        match load() {
            // A damaged precompiled header fails every compile (GCC cannot read it): without
            // it the compiler reads the header's text. (Other compile errors keep it.)
            Err(RunError::Compile { stderr, .. })
                if prelude_cache::names_pch(&stderr)
                    && shared.as_ref().is_some_and(SharedPrelude::discard_gch) =>
            {
                load()
            }
            r => r,
        }
        .map_err(|e| compile_error(e, module, &launch))
    }

    fn open(path: &Path, module: &CudaModule) -> Result<EmuModule, RunError> {
        let load_err = |message: String| RunError::Load {
            path: path.display().to_string(),
            message,
        };
        // SAFETY: the library was compiled by this crate from the prelude, whose only
        // initializers are those of the C++ standard library.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| load_err(e.to_string()))?;
        // SAFETY: the prelude defines these symbols with these signatures.
        let (abi, desc_size) = unsafe {
            let abi = *lib
                .get::<AbiFn>(b"sptir_emu_abi_version")
                .map_err(|e| load_err(e.to_string()))?;
            let size = *lib
                .get::<DescSizeFn>(b"sptir_emu_desc_size")
                .map_err(|e| load_err(e.to_string()))?;
            (abi(), size())
        };
        if abi != ABI_VERSION || desc_size != std::mem::size_of::<LaunchDesc>() as u64 {
            return Err(load_err(format!(
                "emulator ABI {abi} with a {desc_size}-byte launch descriptor; expected ABI \
                 {ABI_VERSION} and {} bytes",
                std::mem::size_of::<LaunchDesc>()
            )));
        }
        let mut launchers = Vec::new();
        for k in 0..module.kernels.len() {
            let sym = format!("sptir_emu_launch_{k}");
            // SAFETY: the launchers generated by `launchers` have this signature.
            let f = unsafe {
                *lib.get::<LaunchFn>(sym.as_bytes())
                    .map_err(|e| load_err(format!("no `{sym}`: {e}")))?
            };
            launchers.push(f);
        }
        Ok(EmuModule {
            func: module.func.clone(),
            kernels: module.kernels.clone(),
            launchers,
            path: path.to_path_buf(),
            threads: threads_from_env(),
            _lib: ManuallyDrop::new(lib),
        })
    }

    pub fn kernels(&self) -> &[CudaKernel] {
        &self.kernels
    }
    pub fn func(&self) -> &str {
        &self.func
    }
    /// The shared object this module was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// OS threads a launch uses (at least 1).
    pub fn threads(&self) -> usize {
        self.threads
    }
    pub fn set_threads(&mut self, n: usize) {
        self.threads = n.max(1);
    }

    /// The grid and block of kernel `k`, given the function's integer scalar parameters by
    /// index ([`CudaModule::params`]).
    pub fn dims(
        &self,
        k: usize,
        params: &dyn Fn(usize) -> Option<i64>,
    ) -> Result<([u32; 3], [u32; 3]), RunError> {
        let kernel = self.kernel(k)?;
        let eval = |e: &sparsetir_codegen::cuda::LaunchExpr, what: &str| {
            e.eval(params)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| RunError::EmuInvalidLaunch {
                    kernel: kernel.name.clone(),
                    message: format!("{what} `{e}` has no value in 0..2^32"),
                })
        };
        let mut grid = [0; 3];
        let mut block = [0; 3];
        for d in 0..3 {
            grid[d] = eval(&kernel.grid[d], "grid dimension")?;
            block[d] = eval(&kernel.block[d], "block dimension")?;
        }
        Ok((grid, block))
    }

    fn kernel(&self, k: usize) -> Result<&CudaKernel, RunError> {
        self.kernels
            .get(k)
            .ok_or_else(|| RunError::EmuInvalidLaunch {
                kernel: format!("#{k}"),
                message: format!(
                    "module `{}` has {} kernel(s)",
                    self.func,
                    self.kernels.len()
                ),
            })
    }

    /// Runs kernel `k` once over `grid` × `block` with `args` in the kernel's parameter order;
    /// returns its global traffic, or the first error any thread met.
    pub fn launch(
        &self,
        k: usize,
        grid: [u32; 3],
        block: [u32; 3],
        args: &mut [EmuArg<'_>],
    ) -> Result<EmuStats, RunError> {
        let kernel = self.kernel(k)?;
        let invalid = |message: String| RunError::EmuInvalidLaunch {
            kernel: kernel.name.clone(),
            message,
        };
        check_dims(grid, block).map_err(invalid)?;
        check_cluster(&kernel.name, grid, kernel.cluster)?;
        if args.len() != kernel.args.len() {
            return Err(invalid(format!(
                "{} argument(s) given, the kernel takes {}",
                args.len(),
                kernel.args.len()
            )));
        }
        let mut raw = args
            .iter_mut()
            .zip(&kernel.args)
            .map(|(a, p)| marshal(&kernel.name, a, p))
            .collect::<Result<Vec<_>, _>>()?;
        // Tensor maps of another argument's buffer: its pointer, race-checked when the kernel
        // writes that buffer.
        for (j, a) in args.iter().enumerate() {
            let EmuArg::TensorMapOf { arg, dims } = *a else {
                continue;
            };
            let p = &kernel.args[j];
            let target = match kernel.args.get(arg) {
                Some(t) if arg != j && t.pointer && t.tensor_map.is_none() => t,
                _ => {
                    return Err(invalid(format!(
                        "tensor map `{}` refers to argument {arg}, which is not a buffer \
                         pointer of this kernel",
                        p.name
                    )))
                }
            };
            if target.dtype != p.dtype {
                return Err(RunError::DTypeMismatch {
                    name: p.name.clone(),
                    expected: p.dtype,
                    found: target.dtype,
                });
            }
            let (ptr, len) = (raw[arg].ptr, raw[arg].len);
            let bytes = usize::try_from(len).unwrap_or(0) * elem_size(p.dtype);
            crate::tensor_map::check_view(&kernel.name, p, dims, bytes, None)?;
            raw[j].ptr = ptr;
            raw[j].len = len;
            raw[j].d = dims;
            raw[j].i = i64::from(!target.readonly);
        }
        // SAFETY: `ErrorOut` and `LaunchDesc` are plain C structs, valid when zeroed.
        let mut desc: LaunchDesc = unsafe { std::mem::zeroed() };
        desc.grid = grid;
        desc.block = block;
        desc.cluster = kernel.cluster;
        desc.os_threads = u32::try_from(self.threads).unwrap_or(u32::MAX).max(1);
        desc.args = raw.as_ptr();
        // SAFETY: the launcher reads `raw` (alive here), whose buffers are borrowed for this
        // call (writable ones exclusively, with lengths in elements checked against their byte
        // sizes and alignment by `marshal`); every access the kernel makes is bounds-checked
        // by the prelude, and the launcher returns only after all its threads finished.
        let status = unsafe { (self.launchers[k])(&mut desc) };
        let stats = EmuStats {
            requested_bytes: desc.requested_bytes,
            sector_bytes: desc.sector_bytes,
        };
        if status == ERR_NONE {
            return Ok(stats);
        }
        Err(launch_error(&kernel.name, &desc.err))
    }
}

fn check_dims(grid: [u32; 3], block: [u32; 3]) -> Result<(), String> {
    if grid.contains(&0) || block.contains(&0) {
        return Err(format!(
            "grid {grid:?} and block {block:?} must have no zero dimension"
        ));
    }
    if grid[1] > 65535 || grid[2] > 65535 || grid[0] > i32::MAX as u32 {
        return Err(format!(
            "grid {grid:?} exceeds CUDA's limits (2^31-1, 65535, 65535)"
        ));
    }
    if block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
        return Err(format!(
            "block {block:?} exceeds CUDA's limits (1024, 1024, 64)"
        ));
    }
    let threads = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    if threads > 1024 {
        return Err(format!(
            "block {block:?} has {threads} threads; at most 1024"
        ));
    }
    Ok(())
}

/// Refuses a launch of kernel `kernel` over `grid` in clusters of `cluster` blocks (x, y, z)
/// that a GPU would not run: a cluster dimension of 0, more than [`MAX_CLUSTER_BLOCKS`] blocks
/// in a cluster, a grid dimension that is not a multiple of the cluster's. `[1, 1, 1]` (no
/// clusters) takes every grid.
pub fn check_cluster(kernel: &str, grid: [u32; 3], cluster: [u32; 3]) -> Result<(), RunError> {
    let bad = |message: String| RunError::Cluster {
        kernel: kernel.to_string(),
        grid,
        cluster,
        message,
    };
    if cluster.contains(&0) {
        return Err(bad("a cluster dimension is 0".into()));
    }
    let blocks = cluster.iter().map(|&c| u64::from(c)).product::<u64>();
    if blocks > u64::from(MAX_CLUSTER_BLOCKS) {
        return Err(bad(format!(
            "{blocks} blocks in a cluster; at most {MAX_CLUSTER_BLOCKS}"
        )));
    }
    for (d, axis) in ["x", "y", "z"].iter().enumerate() {
        if !grid[d].is_multiple_of(cluster[d]) {
            return Err(bad(format!(
                "grid.{axis} = {} is not a multiple of the cluster's {}",
                grid[d], cluster[d]
            )));
        }
    }
    Ok(())
}

/// Bytes of one element of `dtype` in a buffer.
fn elem_size(dtype: DType) -> usize {
    (dtype.bits() as usize / 8).max(1)
}

fn marshal(kernel: &str, a: &mut EmuArg<'_>, p: &KernelArg) -> Result<RawArg, RunError> {
    let mut raw = RawArg {
        ptr: std::ptr::null_mut(),
        len: 0,
        i: 0,
        f: 0.0,
        d: [0; 2],
    };
    let found = a.describe();
    let kind = |expected: &str| RunError::ArgKind {
        name: p.name.clone(),
        expected: expected.into(),
        found: found.clone(),
    };
    if p.tensor_map.is_some() {
        let (bytes, dtype, dims) = match a {
            EmuArg::TensorMap { bytes, dtype, dims } => (&**bytes, *dtype, *dims),
            // Resolved once every argument is marshalled.
            EmuArg::TensorMapOf { .. } => return Ok(raw),
            _ => return Err(kind(&format!("a tensor map of a buffer of {}", p.dtype))),
        };
        if let Some(d) = dtype {
            if d != p.dtype {
                return Err(RunError::DTypeMismatch {
                    name: p.name.clone(),
                    expected: p.dtype,
                    found: d,
                });
            }
        }
        let size = elem_size(p.dtype);
        let ptr = bytes.as_ptr();
        if !bytes.len().is_multiple_of(size) || !(ptr as usize).is_multiple_of(size) {
            return Err(RunError::Scalar {
                name: p.name.clone(),
                message: format!(
                    "a buffer of {} needs a length and an address that are multiples of {size} \
                     bytes ({} bytes at {ptr:p})",
                    p.dtype,
                    bytes.len()
                ),
            });
        }
        crate::tensor_map::check_view(kernel, p, dims, bytes.len(), None)?;
        raw.ptr = ptr as *mut c_void;
        raw.len = i64::try_from(bytes.len() / size).unwrap_or(i64::MAX);
        raw.d = dims;
        return Ok(raw);
    }
    if p.pointer {
        let (ptr, len, dtype) = match a {
            EmuArg::In { bytes, dtype } if p.readonly => {
                (bytes.as_ptr() as *mut c_void, bytes.len(), *dtype)
            }
            EmuArg::Out { bytes, dtype } => {
                (bytes.as_mut_ptr().cast::<c_void>(), bytes.len(), *dtype)
            }
            EmuArg::In { .. } => {
                return Err(kind(&format!(
                    "a writable buffer of {} (the kernel stores to it)",
                    p.dtype
                )))
            }
            _ => return Err(kind(&format!("a buffer of {}", p.dtype))),
        };
        if let Some(d) = dtype {
            if d != p.dtype {
                return Err(RunError::DTypeMismatch {
                    name: p.name.clone(),
                    expected: p.dtype,
                    found: d,
                });
            }
        }
        let size = elem_size(p.dtype);
        if !len.is_multiple_of(size) || !(ptr as usize).is_multiple_of(size) {
            return Err(RunError::Scalar {
                name: p.name.clone(),
                message: format!(
                    "a buffer of {} needs a length and an address that are multiples of {size} \
                     bytes ({len} bytes at {ptr:p})",
                    p.dtype
                ),
            });
        }
        raw.ptr = ptr;
        raw.len = i64::try_from(len / size).unwrap_or(i64::MAX);
        return Ok(raw);
    }
    let scalar_err = |message: String| RunError::Scalar {
        name: p.name.clone(),
        message,
    };
    if p.dtype.is_float() {
        raw.f = match a {
            EmuArg::F32(v) => f64::from(*v),
            EmuArg::F64(v) => *v,
            _ => return Err(kind(&format!("a {} scalar", p.dtype))),
        };
        return Ok(raw);
    }
    let v: i64 = match a {
        EmuArg::I32(v) => i64::from(*v),
        EmuArg::I64(v) => *v,
        EmuArg::U32(v) => i64::from(*v),
        _ => return Err(kind(&format!("a {} scalar", p.dtype))),
    };
    let fits = crate::kernel::int_fits(v, p.dtype);
    if !fits {
        return Err(scalar_err(format!("{v} does not fit {}", p.dtype)));
    }
    raw.i = v;
    Ok(raw)
}

fn c_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn launch_error(kernel: &str, e: &ErrorOut) -> RunError {
    let kernel = kernel.to_string();
    let message = c_text(&e.message);
    match e.kind {
        ERR_OOB => RunError::EmuOutOfBounds {
            kernel,
            buffer: c_text(&e.buffer),
            index: e.index,
            length: e.length,
            block: e.block,
            thread: e.thread_a,
        },
        ERR_RACE => RunError::EmuRace {
            kernel,
            buffer: c_text(&e.buffer),
            index: e.index,
            block: e.block,
            first: e.thread_a,
            second: e.thread_b,
            what: message,
        },
        // (`block`: the block that finished second; `thread_a`: the other block.)
        ERR_BLOCK_RACE => RunError::EmuBlockRace {
            kernel,
            buffer: c_text(&e.buffer),
            index: e.index,
            first: e.thread_a,
            second: e.block,
            what: message,
        },
        ERR_DEADLOCK => RunError::EmuDeadlock {
            kernel,
            block: e.block,
            message,
        },
        ERR_DIV_BY_ZERO => RunError::EmuDivisionByZero {
            kernel,
            block: e.block,
            thread: e.thread_a,
        },
        ERR_UNSUPPORTED => RunError::EmuUnsupported {
            kernel,
            block: e.block,
            thread: e.thread_a,
            message,
        },
        _ => RunError::EmuInternal { kernel, message },
    }
}
