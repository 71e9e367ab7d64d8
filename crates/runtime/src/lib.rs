//! Runtime glue between user data and sparsetir functions: binds files and arrays to a
//! function's buffers (packing sparse data into the storage its axes declare and inferring size
//! parameters), reads results back as dense arrays or COO, and runs native kernels: compiling C
//! through a content-hashed cache, loading it, validating every launch's data against the stage-I
//! function, and timing launches.

pub mod alloc;
pub mod args;
pub mod assembly;
pub mod bind;
pub mod build;
pub mod cache;
pub mod compile;
pub mod composable;
pub mod cuda_dev;
pub mod cuda_emu;
pub mod decompose;
pub mod error;
pub mod frozen;
pub mod gpu;
pub mod kernel;
pub mod machine;
pub mod native;
pub mod tensor_map;
pub mod timing;
pub mod validate;

pub use alloc::SimdAlignedAlloc;
pub use args::{ArrayRef, HostElement, LaunchArg, LaunchArgs};
pub use bind::{read_output, BindError, Binder, Output};
pub use build::{build, BuildError};
pub use cache::{CacheOutcome, KernelCache, LoadReport};
pub use compile::{Compiler, DEFAULT_FLAGS};
pub use cuda_emu::{EmuArg, EmuModule, EmuStats};
pub use error::RunError;
pub use frozen::{FrozenArray, LaunchShape, ValidationMemo};
pub use kernel::{CompiledKernel, KernelParam, ParamKind, SparsetirArg};
pub use native::{compile_c, CompileOptions, Kernel};
pub use timing::{Timing, TimingOptions};
pub use validate::{validate_args, validate_launch, validate_reading};
