//! Loaded native kernels: the uniform C entry point (`int32_t entry(const sparsetir_arg*, int32_t)`)
//! behind `libloading`, and marshalling of launch arguments ([`LaunchArgs`]) into its argument
//! array.

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};

use sparsetir_eval::ArgValue;
use sparsetir_formats::TensorData;
use sparsetir_ir::DType;

use crate::args::{LaunchArg, LaunchArgs};
use crate::error::RunError;

/// One slot of the argument array, as the C side declares it:
/// `typedef union { void* ptr; int64_t i; double f; } sparsetir_arg;`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union SparsetirArg {
    pub ptr: *mut c_void,
    pub i: i64,
    pub f: f64,
}

/// The kernel's entry point.
pub type EntryFn = unsafe extern "C" fn(*const SparsetirArg, i32) -> i32;
/// `void sparsetir_set_num_threads(int32_t n)`.
pub type SetThreadsFn = unsafe extern "C" fn(i32);

/// The name of the thread-count setter every kernel library exports.
pub const SET_THREADS_SYMBOL: &str = "sparsetir_set_num_threads";

/// How a kernel parameter is passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A pointer to an array of `elem`.
    Array { elem: DType },
    /// A scalar (integers travel as `i`, floats as `f`).
    Scalar(DType),
}

/// A kernel parameter, in the entry point's argument order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParam {
    pub name: String,
    pub kind: ParamKind,
}

/// A kernel library loaded in this process.
pub struct CompiledKernel {
    entry: EntryFn,
    set_threads: SetThreadsFn,
    entry_name: String,
    params: Vec<KernelParam>,
    path: PathBuf,
    // Never closed: OpenMP keeps idle worker threads inside the runtime library (libgomp) that
    // a kernel pulls in; unloading it while they exist crashes the process. A loaded kernel
    // therefore stays mapped until the process exits (as with `RTLD_NODELETE`); the function
    // pointers above stay valid for as long as this struct lives, and longer.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("entry", &self.entry_name)
            .field("params", &self.params)
            .field("path", &self.path)
            .finish()
    }
}

impl CompiledKernel {
    /// Loads the shared object at `path` and resolves `entry` and the thread-count setter.
    ///
    /// The library must have been produced from a source following the sparsetir kernel ABI
    /// (which [`crate::cache::KernelCache`] guarantees for the files it writes).
    pub fn load(path: &Path, entry: &str, params: Vec<KernelParam>) -> Result<Self, RunError> {
        let load_err = |message: String| RunError::Load {
            path: path.display().to_string(),
            message,
        };
        // SAFETY: loading runs the library's initializers; the libraries loaded here are kernels
        // this crate compiled from generated C, which has no initializers with side effects.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| load_err(e.to_string()))?;
        // SAFETY: the symbol types follow the kernel ABI the C writer emits.
        let entry_fn: EntryFn = unsafe {
            *lib.get::<EntryFn>(entry.as_bytes())
                .map_err(|e| load_err(format!("no entry point `{entry}`: {e}")))?
        };
        // SAFETY: as above.
        let set_threads: SetThreadsFn = unsafe {
            *lib.get::<SetThreadsFn>(SET_THREADS_SYMBOL.as_bytes())
                .map_err(|e| load_err(format!("no `{SET_THREADS_SYMBOL}`: {e}")))?
        };
        Ok(CompiledKernel {
            entry: entry_fn,
            set_threads,
            entry_name: entry.to_string(),
            params,
            path: path.to_path_buf(),
            _lib: std::mem::ManuallyDrop::new(lib),
        })
    }

    pub fn params(&self) -> &[KernelParam] {
        &self.params
    }
    pub fn entry_name(&self) -> &str {
        &self.entry_name
    }
    /// The shared object this kernel was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the OpenMP thread count of the calling thread's later launches.
    pub fn set_num_threads(&self, n: usize) {
        let n = i32::try_from(n.max(1)).unwrap_or(i32::MAX);
        // SAFETY: the setter takes a plain int and has no preconditions.
        unsafe { (self.set_threads)(n) }
    }

    /// Launches the kernel on `args` (parameter name → value), writing outputs into the arrays in
    /// place. Checks presence, kinds and dtypes of the arguments, **not** their contents: sparse
    /// structure and array lengths must have been validated against the stage-I function first
    /// (see [`crate::validate::validate_args`]; [`crate::Kernel::run`] does both).
    ///
    /// # Safety
    /// The arrays must be long enough for every access the kernel makes and structure arrays
    /// must be well-formed, else the native code reads or writes out of bounds.
    pub unsafe fn call_unvalidated(
        &self,
        args: &mut HashMap<String, ArgValue>,
    ) -> Result<(), RunError> {
        let slots = self.marshal(&LaunchArgs::of_values_mut(args))?;
        // SAFETY: the slots hold pointers into the tensors of `args`, which stay borrowed
        // (mutably, through `args`) for the duration of the call; the caller vouches for lengths.
        unsafe { self.call_marshalled(&slots) }
    }

    /// Calls the entry point with an argument array built by [`CompiledKernel::marshal`];
    /// a nonzero status is an error.
    ///
    /// # Safety
    /// Same as [`CompiledKernel::call_unvalidated`], and the arrays the slots point into must
    /// still be alive and untouched since the slots were built.
    pub(crate) unsafe fn call_marshalled(&self, slots: &[SparsetirArg]) -> Result<(), RunError> {
        let n = i32::try_from(slots.len())
            .map_err(|_| RunError::Stage("too many parameters".into()))?;
        // SAFETY: forwarded to the caller.
        let status = unsafe { (self.entry)(slots.as_ptr(), n) };
        if status != 0 {
            return Err(RunError::Kernel {
                entry: self.entry_name.clone(),
                status,
            });
        }
        Ok(())
    }

    /// Calls the entry point with a raw argument array (for tests of the ABI itself).
    ///
    /// # Safety
    /// Same as [`CompiledKernel::call_unvalidated`], and the slots must match the parameters.
    pub unsafe fn call_raw(&self, slots: &[SparsetirArg]) -> i32 {
        let n = i32::try_from(slots.len()).unwrap_or(i32::MAX);
        // SAFETY: forwarded to the caller.
        unsafe { (self.entry)(slots.as_ptr(), n) }
    }

    /// Builds the argument array in parameter order from `args`.
    pub(crate) fn marshal(&self, args: &LaunchArgs<'_>) -> Result<Vec<SparsetirArg>, RunError> {
        let mut pointers: HashMap<&str, (*mut c_void, DType)> = HashMap::new();
        let mut scalars: HashMap<&str, &LaunchArg<'_>> = HashMap::new();
        for (name, value) in args.iter() {
            match value {
                LaunchArg::Array(t) => {
                    pointers.insert(name, (t.ptr(), t.dtype()));
                }
                other => {
                    scalars.insert(name, other);
                }
            }
        }
        let mut slots = Vec::with_capacity(self.params.len());
        for p in &self.params {
            let name = p.name.as_str();
            let slot = match &p.kind {
                ParamKind::Array { elem } => match pointers.get(name) {
                    Some(&(ptr, dt)) => {
                        // `handle` elements: a parameter no buffer matches, never read.
                        if dt != *elem && *elem != DType::Handle {
                            return Err(RunError::DTypeMismatch {
                                name: p.name.clone(),
                                expected: *elem,
                                found: dt,
                            });
                        }
                        SparsetirArg { ptr }
                    }
                    None if scalars.contains_key(name) => {
                        return Err(RunError::ArgKind {
                            name: p.name.clone(),
                            expected: format!("an array of {elem}"),
                            found: "a scalar".into(),
                        })
                    }
                    None => {
                        return Err(RunError::MissingArg {
                            name: p.name.clone(),
                        })
                    }
                },
                ParamKind::Scalar(dt) => match scalars.get(name) {
                    Some(v) => scalar_slot(&p.name, *dt, v)?,
                    None if pointers.contains_key(name) => {
                        return Err(RunError::ArgKind {
                            name: p.name.clone(),
                            expected: format!("a scalar of type {dt}"),
                            found: "an array".into(),
                        })
                    }
                    None => {
                        return Err(RunError::MissingArg {
                            name: p.name.clone(),
                        })
                    }
                },
            };
            slots.push(slot);
        }
        Ok(slots)
    }
}

/// The slot of a scalar parameter of type `dt`.
fn scalar_slot(name: &str, dt: DType, v: &LaunchArg<'_>) -> Result<SparsetirArg, RunError> {
    match v {
        LaunchArg::Int(i) if dt.is_float() => Ok(SparsetirArg { f: *i as f64 }),
        LaunchArg::Int(i) => {
            if !int_fits(*i, dt) {
                return Err(RunError::Scalar {
                    name: name.to_string(),
                    message: format!("{i} does not fit in its type {dt}"),
                });
            }
            Ok(SparsetirArg { i: *i })
        }
        LaunchArg::Float(x) if dt.is_float() => Ok(SparsetirArg { f: *x }),
        LaunchArg::Float(x) => Err(RunError::Scalar {
            name: name.to_string(),
            message: format!("has type {dt}, but a float ({x}) was given"),
        }),
        LaunchArg::Array(_) => Err(RunError::ArgKind {
            name: name.to_string(),
            expected: format!("a scalar of type {dt}"),
            found: "an array".into(),
        }),
    }
}

/// Whether `v` is representable in the integer (or bool) type `dt`.
pub(crate) fn int_fits(v: i64, dt: DType) -> bool {
    match dt {
        DType::Bool => v == 0 || v == 1,
        DType::I8 => i8::try_from(v).is_ok(),
        DType::I16 => i16::try_from(v).is_ok(),
        DType::I32 => i32::try_from(v).is_ok(),
        DType::U8 => u8::try_from(v).is_ok(),
        DType::U16 => u16::try_from(v).is_ok(),
        DType::U32 => u32::try_from(v).is_ok(),
        DType::U64 => v >= 0,
        _ => true,
    }
}

/// A mutable pointer to the first element of a tensor's storage.
pub(crate) fn data_ptr(data: &mut TensorData) -> *mut c_void {
    match data {
        TensorData::Bool(v) => v.as_mut_ptr().cast(),
        TensorData::I8(v) => v.as_mut_ptr().cast(),
        TensorData::I16(v) => v.as_mut_ptr().cast(),
        TensorData::I32(v) => v.as_mut_ptr().cast(),
        TensorData::I64(v) => v.as_mut_ptr().cast(),
        TensorData::U8(v) => v.as_mut_ptr().cast(),
        TensorData::U16(v) => v.as_mut_ptr().cast(),
        TensorData::U32(v) => v.as_mut_ptr().cast(),
        TensorData::U64(v) => v.as_mut_ptr().cast(),
        TensorData::F16(v) => v.as_mut_ptr().cast(),
        TensorData::BF16(v) => v.as_mut_ptr().cast(),
        TensorData::F32(v) => v.as_mut_ptr().cast(),
        TensorData::F64(v) => v.as_mut_ptr().cast(),
    }
}
