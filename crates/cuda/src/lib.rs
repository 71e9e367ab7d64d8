//! Compiling and running CUDA kernels from sparsetir: NVRTC (the CUDA runtime compiler) and
//! the CUDA driver, both loaded at run time, so that the project builds and tests on machines
//! without CUDA or a GPU.
//!
//! - [`Nvrtc`] compiles CUDA C++ source to PTX or a cubin for an [`Arch`], returning the code,
//!   NVRTC's log and, for cubins, each kernel's registers and spills ([`KernelResources`]). A
//!   source that does not compile gives [`CudaError::Compile`] with the log and the offending
//!   line. Compiling needs no GPU and no driver.
//! - [`Driver`], [`Device`], [`Context`], [`Module`], [`Function`], [`DeviceBuffer`],
//!   [`launch`] and [`Event`] run the compiled code on a GPU through the driver API
//!   (`libcuda.so.1`).
//!
//! Nothing here panics when a library or a GPU is missing: every entry point returns a
//! [`CudaError`] that says what is missing and how to get it.
//!
//! # Where NVRTC is looked for
//!
//! [`Nvrtc::load`] tries, in this order, and takes the first library that loads:
//!
//! 1. `$SPARSETIR_NVRTC`, a path to a `libnvrtc.so*`. When set, it is the only candidate: if it
//!    does not load, the error ([`CudaError::NvrtcLoad`]) names it.
//! 2. `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`, `/usr/local/cuda/lib64`, then
//!    `/usr/local/cuda-*/lib64` (highest version first).
//! 3. The system loader (`LD_LIBRARY_PATH`, `ld.so.cache`) by the names `libnvrtc.so`,
//!    `libnvrtc.so.13`, `libnvrtc.so.12`.
//! 4. Python wheel directories: the sparsetir cache (`$SPARSETIR_CACHE_DIR`, else
//!    `$XDG_CACHE_HOME/sparsetir`, else `~/.cache/sparsetir`) + `nvrtc/nvidia/cuda_nvrtc/lib`,
//!    where `scripts/setup-nvrtc.sh` installs the `nvidia-cuda-nvrtc-cu12` wheel; then
//!    `nvidia/cuda_nvrtc/lib` (CUDA 12 wheels) and `nvidia/cu13/lib` (CUDA 13 wheels) under each
//!    Python package directory found without running Python: `$PYTHONPATH` entries and the
//!    `site-packages`/`dist-packages` of `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`,
//!    `/usr/local` and `/usr`.
//!
//! In each directory the names `libnvrtc.so`, `libnvrtc.so.13` and `libnvrtc.so.12` are tried.
//! A file that exists but fails to load is skipped and reported if nothing else loads
//! ([`CudaError::NvrtcNotFound`]). NVRTC opens its builtins library
//! (`libnvrtc-builtins.so.*`) itself; the wheels' `libnvrtc.so.12` finds it beside itself
//! through its `$ORIGIN` run path, so loading by absolute path is enough.
//! [`search::nvrtc_candidates`] lists the candidates for a given [`SearchEnv`], and
//! [`Nvrtc::load_with`] loads with one, so tests never change the process environment.
//!
//! The driver is `$SPARSETIR_CUDA_DRIVER` if set, else `libcuda.so.1` ([`Driver::load`]).
//!
//! # Why not `cudarc`
//!
//! `cudarc` is a complete binding, but it decides itself where and under which names the
//! libraries are found. We need NVRTC from explicit paths in a fixed order (a wheel installed by
//! our setup script into our cache directory, other Python environments, toolkits), under both
//! the CUDA 12 and CUDA 13 sonames, with an error that lists every place searched. Loading
//! ourselves with `libloading` and binding the ~40 functions we call (in [`nvrtc`] and
//! [`driver`]) keeps that under our control and adds no large dependency.

mod arch;
mod dl;
pub mod driver;
mod error;
pub mod nvrtc;
mod resources;
pub mod search;

pub use arch::Arch;
pub use driver::{
    check_launch_dims, launch, launch_async, launch_on_stream, Context, Device, DeviceBuffer,
    Driver, Event, Function, FunctionAttributes, LaunchArg, Module, TensorMap, TensorMap2d,
    TensorMapElem,
};
pub use error::CudaError;
pub use nvrtc::{Compiled, Emit, Nvrtc};
pub use resources::{parse_ptxas_info, KernelResources};
pub use search::SearchEnv;
