//! The CUDA C++ writer for stage III: one `extern "C" __global__` function per kernel, and the
//! description of each launch ([`CudaModule`]) that the runtime (NVRTC + driver) and the CPU
//! emulator both use.
//!
//! # The source contract
//!
//! The generated source is self-contained CUDA C++ (no `#include`), compiled as is by NVRTC for
//! a GPU and, with `SPTIR_EMU` defined and the emulator's prelude included first, by the host C++
//! compiler. Everything that the emulator must observe goes through a few names that the source
//! defines itself under `#ifndef SPTIR_EMU` (so NVRTC sees plain CUDA):
//!
//! | in the source | on the GPU | in the emulator |
//! | --- | --- | --- |
//! | `SPTIR_IN(T) name` (a kernel parameter never stored to) | `const T* __restrict__` | a checked pointer whose reads are counted |
//! | `SPTIR_OUT(T) name` (a kernel parameter stored to) | `T* __restrict__` | a checked pointer whose reads and writes are counted |
//! | `SPTIR_SHARED(T, name, N);` (a statement) | `__shared__ T name[N];` | a per-block array whose accesses are checked for races |
//! | `SPTIR_SHARED_DYN(T, name, N, OFFSET);` | `T* name`, `OFFSET` bytes into the dynamic shared memory | as `SPTIR_SHARED` |
//!
//! Besides these the source uses only: `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (`.x/.y/.z`),
//! `__syncthreads()`, `__syncwarp()`, `__shfl_down_sync`/`__shfl_xor_sync`/`__shfl_sync`
//! (mask `0xffffffffu`, `float`/`double`/`int`), `atomicAdd(P + i, v)` (float, double, int; `P` a
//! global pointer parameter or a shared array), `__ldg(P + i)` (reads of `SPTIR_IN` pointers),
//! `min`/`max` on integers, `fminf`/`fmaxf`/`expf`/`sqrtf`/... math functions, local arrays
//! (`float acc[4];`), `int`/`long long`/`float`/`double`/`unsigned` scalars, and fixed-width
//! integer types `int32_t`/`int64_t` (defined by the source as `int`/`long long` under
//! `#ifndef SPTIR_EMU`). Kernels are declared
//! `extern "C" __global__ void __launch_bounds__(N) name(params...)`.
//!
//! Every kernel takes the parameters listed in [`CudaKernel::args`], in that order: buffers as
//! pointers to their first element, scalars by value. Its launch configuration is
//! [`CudaKernel::grid`] × [`CudaKernel::block`], expressions of the function's scalar parameters
//! ([`LaunchExpr`]). A kernel whose shared arrays exceed the 48 KiB a block may declare
//! statically declares them as `SPTIR_SHARED_DYN(T, name, N, OFFSET);` instead: slices of the
//! launch's dynamic shared memory ([`CudaKernel::dynamic_shared_bytes`], which the runtime opts
//! the kernel in to and passes at each launch; the emulator gives each its own array).
//! Kernels run in the order of [`CudaModule::kernels`], each after the previous one completed.

use sparsetir_ir::{DType, PrimFunc};

use crate::c::{Target, Writer};
pub use crate::c::{CP_ASYNC_PRELUDE, TMA_PRELUDE};
use crate::{CParam, CodegenError};

/// Emits the CUDA module of a stage III function (see the module docs).
pub fn emit_cuda(func: &PrimFunc) -> Result<CudaModule, CodegenError> {
    crate::c::require_stage_iii(func)?;
    Writer::for_target(func, Target::Cuda).write_cuda_module()
}

/// The CUDA source of one stage III function and the launches that run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaModule {
    /// The complete CUDA C++ source (see the module docs for the contract).
    pub source: String,
    /// The function's name.
    pub func: String,
    /// The function's parameters, in order (the same list as the C target's).
    pub params: Vec<CParam>,
    /// The function's intermediate buffers, in device memory the runtime allocates (zeroed)
    /// for the launches: kernel argument `params.len() + t` is `temps[t]`.
    pub temps: Vec<TempBuffer>,
    /// The kernels, in launch order.
    pub kernels: Vec<CudaKernel>,
    /// Whether the source uses instructions of an architecture-specific target (`wgmma`:
    /// `sm_90a`): it compiles only for such a target, and runs only on its GPUs.
    pub arch_specific: bool,
}

/// An intermediate buffer of the function (`T.alloc_buffer` at function level), or one the
/// writer derives from an input for the kernels' own use ([`TempFill`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TempBuffer {
    pub name: String,
    pub dtype: DType,
    /// Number of elements.
    pub elems: LaunchExpr,
    /// What the runtime writes into it before the launches: zeros where `None`.
    pub fill: Option<TempFill>,
}

/// The contents of a derived device buffer, computed by the runtime from an input before the
/// launches (the way it encodes tensor maps), so that a kernel reads its operand in the layout
/// the hardware wants without the function's meaning changing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TempFill {
    /// The 2:4 positions of parameter `from` (8-bit, `rows` rows of `row_slots` each) packed
    /// for sparse tensor cores by `sparsetir_formats::containers::nm::tensor_core_metadata_2of4`
    /// (`u32` words, `rows * row_slots / 16` of them).
    TensorCoreMetadata {
        from: usize,
        rows: i64,
        row_slots: i64,
    },
    /// The 2:4 values of parameter `from` (16-bit, `rows` rows of `row_slots` each) laid out
    /// run by run for sparse tensor cores by
    /// `sparsetir_formats::containers::nm::tensor_core_values_2of4_by_unit` (as many elements,
    /// of the same type), the tiles of each block of `16 warps units` rows unit-major (1 and
    /// 1: in row order).
    TensorCoreValues {
        from: usize,
        rows: i64,
        row_slots: i64,
        warps: i64,
        units: i64,
    },
}

/// One `extern "C" __global__` function and how to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    /// The symbol (an identifier).
    pub name: String,
    /// The kernel's parameters, in order.
    pub args: Vec<KernelArg>,
    /// `gridDim.x/y/z`.
    pub grid: [LaunchExpr; 3],
    /// `blockDim.x/y/z`.
    pub block: [LaunchExpr; 3],
    /// Bytes of shared memory the kernel declares (static and dynamic).
    pub shared_bytes: u64,
    /// Of those, the bytes of dynamic shared memory each launch must pass (0: all static).
    pub dynamic_shared_bytes: u64,
    /// Blocks per thread-block cluster along x, y, z (`[1, 1, 1]`: no clusters). The source
    /// declares the same (`SPTIR_CLUSTER_DIMS`, `__cluster_dims__` on a GPU); each grid
    /// dimension must be a multiple of it, which the runtime checks before a launch.
    pub cluster: [u32; 3],
    /// A persistent kernel: `grid` is its tiles, which the launched blocks walk in turn (see
    /// [`CudaKernel::launch_grid`]).
    pub persistent: bool,
}

impl CudaKernel {
    /// The blocks a launch of this kernel runs, given its [`CudaKernel::grid`] evaluated and
    /// the most clusters (blocks, without clusters) the device runs at once: the grid itself,
    /// or for a persistent kernel as many clusters as there are groups of a cluster's tiles,
    /// at most that many (at least one): `cx n` blocks along x and `cy` along y for clusters of
    /// `cx × cy` blocks. A persistent kernel's tiles must be whole clusters along x and y (the
    /// blocks of a cluster take a group of tiles), else the error says why.
    pub fn launch_grid(&self, grid: [u32; 3], resident_clusters: u32) -> Result<[u32; 3], String> {
        if !self.persistent || grid.contains(&0) {
            return Ok(grid);
        }
        let [cx, cy, cz] = self.cluster.map(|c| c.max(1));
        if !grid[0].is_multiple_of(cx) || !grid[1].is_multiple_of(cy) || cz > 1 || grid[2] > 1 {
            return Err(format!(
                "a persistent kernel's {} x {} x {} tiles cannot be taken by clusters of {:?} \
                 blocks (whole clusters along x and y)",
                grid[0], grid[1], grid[2], self.cluster
            ));
        }
        let groups = u64::from(grid[0] / cx) * u64::from(grid[1] / cy);
        let n = groups.min(u64::from(resident_clusters.max(1)));
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        Ok([n.saturating_mul(cx), cy, 1])
    }
}

/// One parameter of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelArg {
    /// Index into [`CudaModule::params`], or `params.len() + t` for [`CudaModule::temps`]`[t]`.
    pub param: usize,
    /// The parameter's name in the source.
    pub name: String,
    /// Element type (for a pointer) or value type (for a scalar).
    pub dtype: DType,
    /// The C type name of `dtype` as the source spells it (`float`, `int32_t`, ...).
    pub ctype: String,
    /// `SPTIR_IN(T)`/`SPTIR_OUT(T)` pointer (true) or a scalar by value (false).
    pub pointer: bool,
    /// For a pointer: `SPTIR_IN` (never stored to by this kernel).
    pub readonly: bool,
    /// A tensor map of the buffer `param` (declared `SPTIR_TMAP(T) name`, `pointer` and
    /// `readonly` true) instead of a pointer to it: see [`TMA_PRELUDE`].
    pub tensor_map: Option<TensorMapArg>,
}

/// The tensor map (`CUtensorMap`) a kernel argument passes: a 2-D row-major view of a buffer
/// and the box one copy of the tensor copy engine moves (see [`TMA_PRELUDE`]). The runtime
/// checks the view against the buffer (its elements, a row stride of a multiple of 16 bytes)
/// and the box against the hardware's limits before it encodes the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapArg {
    /// `[columns, rows]` of the view: the innermost (contiguous) extent first; consecutive rows
    /// are `columns` elements apart.
    pub dims: [LaunchExpr; 2],
    /// `[columns, rows]` of the box (1 to 256 each; `columns * elem` at most the swizzle span
    /// when swizzled, a multiple of 16 bytes).
    pub box_dims: [u32; 2],
    /// The swizzle of a box in shared memory, in bytes: 0 (none), 32, 64 or 128.
    pub swizzle: u32,
}

/// A launch dimension as an expression of the function's integer scalar parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchExpr {
    Const(i64),
    /// The value of [`CudaModule::params`]`[k]`.
    Param(usize),
    Add(Box<LaunchExpr>, Box<LaunchExpr>),
    Sub(Box<LaunchExpr>, Box<LaunchExpr>),
    Mul(Box<LaunchExpr>, Box<LaunchExpr>),
    /// Floor division (`None` when dividing by 0).
    FloorDiv(Box<LaunchExpr>, Box<LaunchExpr>),
    Min(Box<LaunchExpr>, Box<LaunchExpr>),
    Max(Box<LaunchExpr>, Box<LaunchExpr>),
}

impl LaunchExpr {
    /// The value, given every integer scalar parameter's value by index (`None` where a
    /// parameter is missing, on overflow or division by zero).
    pub fn eval(&self, params: &dyn Fn(usize) -> Option<i64>) -> Option<i64> {
        use LaunchExpr::*;
        Some(match self {
            Const(c) => *c,
            Param(k) => params(*k)?,
            Add(a, b) => a.eval(params)?.checked_add(b.eval(params)?)?,
            Sub(a, b) => a.eval(params)?.checked_sub(b.eval(params)?)?,
            Mul(a, b) => a.eval(params)?.checked_mul(b.eval(params)?)?,
            FloorDiv(a, b) => {
                let (a, b) = (a.eval(params)?, b.eval(params)?);
                if b == 0 {
                    return None;
                }
                let q = a.checked_div(b)?;
                if a % b != 0 && ((a < 0) != (b < 0)) {
                    q - 1
                } else {
                    q
                }
            }
            Min(a, b) => a.eval(params)?.min(b.eval(params)?),
            Max(a, b) => a.eval(params)?.max(b.eval(params)?),
        })
    }

    /// `ceil(a / b)` for a positive constant `b`.
    pub fn ceil_div(a: LaunchExpr, b: i64) -> LaunchExpr {
        LaunchExpr::FloorDiv(
            Box::new(LaunchExpr::Add(
                Box::new(a),
                Box::new(LaunchExpr::Const(b - 1)),
            )),
            Box::new(LaunchExpr::Const(b)),
        )
    }
}

impl std::fmt::Display for LaunchExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use LaunchExpr::*;
        match self {
            Const(c) => write!(f, "{c}"),
            Param(k) => write!(f, "${k}"),
            Add(a, b) => write!(f, "({a} + {b})"),
            Sub(a, b) => write!(f, "({a} - {b})"),
            Mul(a, b) => write!(f, "({a} * {b})"),
            FloorDiv(a, b) => write!(f, "({a} // {b})"),
            Min(a, b) => write!(f, "min({a}, {b})"),
            Max(a, b) => write!(f, "max({a}, {b})"),
        }
    }
}
