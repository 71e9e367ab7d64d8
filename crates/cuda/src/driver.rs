//! The CUDA driver API loaded at run time: devices, the primary context, modules, device
//! memory, kernel launches and event timing.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Arc;

use crate::dl::fn_table;
use crate::search::SearchEnv;
use crate::{Arch, CudaError};

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;
type CuEvent = *mut c_void;
type CuStream = *mut c_void;
type CuDevicePtr = u64;

fn_table!(DriverApi {
    init: "cuInit" => fn(c_uint) -> CuResult;
    driver_version: "cuDriverGetVersion" => fn(*mut c_int) -> CuResult;
    error_name: "cuGetErrorName" => fn(CuResult, *mut *const c_char) -> CuResult;
    error_string: "cuGetErrorString" => fn(CuResult, *mut *const c_char) -> CuResult;
    device_count: "cuDeviceGetCount" => fn(*mut c_int) -> CuResult;
    device_get: "cuDeviceGet" => fn(*mut CuDevice, c_int) -> CuResult;
    device_name: "cuDeviceGetName" => fn(*mut c_char, c_int, CuDevice) -> CuResult;
    device_attribute: "cuDeviceGetAttribute" => fn(*mut c_int, c_int, CuDevice) -> CuResult;
    device_total_mem: "cuDeviceTotalMem_v2" => fn(*mut usize, CuDevice) -> CuResult;
    primary_ctx_retain: "cuDevicePrimaryCtxRetain" => fn(*mut CuContext, CuDevice) -> CuResult;
    primary_ctx_release: "cuDevicePrimaryCtxRelease_v2" => fn(CuDevice) -> CuResult;
    ctx_set_current: "cuCtxSetCurrent" => fn(CuContext) -> CuResult;
    ctx_synchronize: "cuCtxSynchronize" => fn() -> CuResult;
    mem_get_info: "cuMemGetInfo_v2" => fn(*mut usize, *mut usize) -> CuResult;
    module_load_data_ex: "cuModuleLoadDataEx" => fn(
        *mut CuModule,
        *const c_void,
        c_uint,
        *mut c_int,
        *mut *mut c_void,
    ) -> CuResult;
    module_unload: "cuModuleUnload" => fn(CuModule) -> CuResult;
    module_get_function: "cuModuleGetFunction" => fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
    func_attribute: "cuFuncGetAttribute" => fn(*mut c_int, c_int, CuFunction) -> CuResult;
    func_set_attribute: "cuFuncSetAttribute" => fn(CuFunction, c_int, c_int) -> CuResult;
    mem_alloc: "cuMemAlloc_v2" => fn(*mut CuDevicePtr, usize) -> CuResult;
    mem_free: "cuMemFree_v2" => fn(CuDevicePtr) -> CuResult;
    memcpy_htod: "cuMemcpyHtoD_v2" => fn(CuDevicePtr, *const c_void, usize) -> CuResult;
    memcpy_dtoh: "cuMemcpyDtoH_v2" => fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
    memset_d8: "cuMemsetD8_v2" => fn(CuDevicePtr, u8, usize) -> CuResult;
    launch_kernel: "cuLaunchKernel" => fn(
        CuFunction,
        c_uint, c_uint, c_uint,
        c_uint, c_uint, c_uint,
        c_uint,
        CuStream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult;
    event_create: "cuEventCreate" => fn(*mut CuEvent, c_uint) -> CuResult;
    event_record: "cuEventRecord" => fn(CuEvent, CuStream) -> CuResult;
    event_synchronize: "cuEventSynchronize" => fn(CuEvent) -> CuResult;
    event_elapsed: "cuEventElapsedTime" => fn(*mut f32, CuEvent, CuEvent) -> CuResult;
    event_destroy: "cuEventDestroy_v2" => fn(CuEvent) -> CuResult;
    occupancy_blocks: "cuOccupancyMaxActiveBlocksPerMultiprocessor" => fn(
        *mut c_int, CuFunction, c_int, usize,
    ) -> CuResult;
});

/// `CUlaunchAttribute`: an attribute's id, padding to 8 bytes, and its value (a 64-byte union;
/// for `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION` its first three words are the cluster's x, y, z).
#[repr(C)]
struct LaunchAttribute {
    id: c_uint,
    pad: [u8; 4],
    value: [c_uint; 16],
}

// (The driver's layouts: 72 and 56 bytes on a 64-bit host.)
const _: () = assert!(std::mem::size_of::<LaunchAttribute>() == 72);
const _: () = assert!(std::mem::size_of::<LaunchConfig>() == 56);

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_uint = 4;

/// `CUlaunchConfig`, as `cuOccupancyMaxActiveClusters` reads it: grid, block, dynamic shared
/// bytes, stream, launch attributes.
#[repr(C)]
struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_bytes: c_uint,
    stream: CuStream,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

/// `cuOccupancyMaxActiveClusters` (CUDA 12.0 and later; looked up apart from [`DriverApi`], as
/// `cuTensorMapEncodeTiled` is): the most clusters of a kernel the GPU runs at once.
type OccupancyClusters =
    unsafe extern "C" fn(*mut c_int, CuFunction, *const LaunchConfig) -> CuResult;

/// `cuTensorMapEncodeTiled` (CUDA 12.0 and later; looked up apart from [`DriverApi`] so that an
/// older driver still loads and only a tensor map fails): map, data type, rank, global address,
/// global dims, global strides (rank - 1 of them, in bytes), box dims, element strides,
/// interleave, swizzle, L2 promotion, out-of-bounds fill.
type TensorMapEncodeTiled = unsafe extern "C" fn(
    *mut TensorMap,
    c_int,
    c_uint,
    *mut c_void,
    *const u64,
    *const u64,
    *const c_uint,
    *const c_uint,
    c_int,
    c_int,
    c_int,
    c_int,
) -> CuResult;

const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
const CUDA_ERROR_NO_DEVICE: CuResult = 100;

// cuDeviceGetAttribute attributes.
const ATTR_MAX_THREADS_PER_BLOCK: c_int = 1;
const ATTR_MAX_SHARED_MEMORY_PER_BLOCK: c_int = 8;
const ATTR_MULTIPROCESSOR_COUNT: c_int = 16;
const ATTR_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const ATTR_COMPUTE_CAPABILITY_MINOR: c_int = 76;
const ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;

// cuFuncGetAttribute attributes.
const FUNC_MAX_THREADS_PER_BLOCK: c_int = 0;
const FUNC_SHARED_SIZE_BYTES: c_int = 1;
const FUNC_LOCAL_SIZE_BYTES: c_int = 3;
const FUNC_NUM_REGS: c_int = 4;
// cuFuncSetAttribute attributes.
const FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

// cuModuleLoadDataEx options.
const JIT_ERROR_LOG_BUFFER: c_int = 5;
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

/// The driver library name the system loader resolves.
pub const DRIVER_SONAME: &str = "libcuda.so.1";

struct DriverInner {
    api: DriverApi,
    /// `cuTensorMapEncodeTiled`, or why the driver lacks it (valid while `api` holds the
    /// library).
    encode_tiled: Result<TensorMapEncodeTiled, String>,
    /// `cuOccupancyMaxActiveClusters`, or why the driver lacks it.
    occupancy_clusters: Result<OccupancyClusters, String>,
    path: PathBuf,
    /// `cuInit`'s result: 0, or `CUDA_ERROR_NO_DEVICE` (then there are no devices).
    init: CuResult,
}

/// A loaded CUDA driver (`libcuda.so.1`), initialised. Cloning shares it.
#[derive(Clone)]
pub struct Driver {
    inner: Arc<DriverInner>,
}

// SAFETY: the driver API is thread-safe; the table holds function pointers and the library.
unsafe impl Send for DriverInner {}
unsafe impl Sync for DriverInner {}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Driver {
    /// Loads `$SPARSETIR_CUDA_DRIVER` if set, else `libcuda.so.1` through the system loader,
    /// and initialises it.
    pub fn load() -> Result<Driver, CudaError> {
        Driver::load_with(&SearchEnv::from_process())
    }

    /// [`Driver::load`] with an explicit environment snapshot.
    pub fn load_with(env: &SearchEnv) -> Result<Driver, CudaError> {
        match env.get("SPARSETIR_CUDA_DRIVER") {
            Some(p) => Driver::load_from(PathBuf::from(p)),
            None => Driver::load_from(DRIVER_SONAME),
        }
    }

    /// Loads the driver library from exactly `path` (a bare name goes through the system
    /// loader) and initialises it.
    pub fn load_from(path: impl AsRef<Path>) -> Result<Driver, CudaError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let fail = |reason: String| CudaError::NoDriver {
            // The loader's message usually names the file already.
            reason: if reason.contains(&shown) {
                reason
            } else {
                format!("{shown}: {reason}")
            },
        };
        // SAFETY: loading the driver runs only its initialisers.
        let lib = unsafe { libloading::Library::new(path.as_os_str()) }
            .map_err(|e| fail(e.to_string()))?;
        // SAFETY: the signature is the driver API's (CUDA 12.0 and later); the pointer is used
        // only while the library stays loaded (it moves into `api` below, kept beside it).
        let encode_tiled = unsafe {
            lib.get::<TensorMapEncodeTiled>(b"cuTensorMapEncodeTiled\0")
                .map(|f| *f)
                .map_err(|e| e.to_string())
        };
        // SAFETY: as above (CUDA 12.0 and later).
        let occupancy_clusters = unsafe {
            lib.get::<OccupancyClusters>(b"cuOccupancyMaxActiveClusters\0")
                .map(|f| *f)
                .map_err(|e| e.to_string())
        };
        // SAFETY: the signatures in `DriverApi` are the driver API's (CUDA 11.x and later).
        let api = unsafe { DriverApi::resolve(lib) }.map_err(fail)?;
        // SAFETY: cuInit takes flags 0.
        let init = unsafe { (api.init)(0) };
        let inner = Arc::new(DriverInner {
            api,
            encode_tiled,
            occupancy_clusters,
            path: path.to_path_buf(),
            init,
        });
        if init != 0 && init != CUDA_ERROR_NO_DEVICE {
            return Err(inner.error("cuInit", init));
        }
        Ok(Driver { inner })
    }

    /// The path (or bare name) the driver was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The driver's CUDA version as `(major, minor)`, e.g. `(13, 0)`.
    pub fn version(&self) -> Result<(i32, i32), CudaError> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        self.inner.check("cuDriverGetVersion", unsafe {
            (self.inner.api.driver_version)(&mut v)
        })?;
        Ok((v / 1000, (v % 1000) / 10))
    }
}

impl DriverInner {
    fn check(&self, call: &'static str, r: CuResult) -> Result<(), CudaError> {
        if r == 0 {
            Ok(())
        } else {
            Err(self.error(call, r))
        }
    }

    fn error(&self, call: &'static str, code: CuResult) -> CudaError {
        let (name, message) = self.describe(code);
        CudaError::Driver {
            call,
            code,
            name,
            message,
        }
    }

    /// `cuGetErrorName` and `cuGetErrorString` of a result.
    fn describe(&self, code: CuResult) -> (String, String) {
        let read = |f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult| {
            let mut s: *const c_char = ptr::null();
            // SAFETY: valid out-pointer; the driver returns a static string or an error.
            let r = unsafe { f(code, &mut s) };
            if r != 0 || s.is_null() {
                None
            } else {
                // SAFETY: non-null static NUL-terminated string.
                Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
            }
        };
        (
            read(self.api.error_name).unwrap_or_else(|| format!("CUresult {code}")),
            read(self.api.error_string).unwrap_or_else(|| "unknown error".to_string()),
        )
    }
}

/// One CUDA device (by ordinal).
#[derive(Clone, Debug)]
pub struct Device {
    driver: Driver,
    ordinal: usize,
    raw: CuDevice,
}

impl Device {
    /// How many devices the driver sees (0 when `cuInit` found none).
    pub fn count(driver: &Driver) -> Result<usize, CudaError> {
        if driver.inner.init == CUDA_ERROR_NO_DEVICE {
            return Ok(0);
        }
        let mut n = 0;
        // SAFETY: valid out-pointer.
        let r = unsafe { (driver.inner.api.device_count)(&mut n) };
        if r == CUDA_ERROR_NO_DEVICE {
            return Ok(0);
        }
        driver.inner.check("cuDeviceGetCount", r)?;
        Ok(n.max(0) as usize)
    }

    /// The device with this ordinal ([`CudaError::NoDevice`] if there is none).
    pub fn get(driver: &Driver, ordinal: usize) -> Result<Device, CudaError> {
        if ordinal >= Device::count(driver)? {
            return Err(CudaError::NoDevice {
                ordinal: Some(ordinal),
            });
        }
        let mut raw = 0;
        // SAFETY: valid out-pointer; the ordinal is in range.
        driver.inner.check("cuDeviceGet", unsafe {
            (driver.inner.api.device_get)(&mut raw, ordinal as c_int)
        })?;
        Ok(Device {
            driver: driver.clone(),
            ordinal,
            raw,
        })
    }

    /// The ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, e.g. `NVIDIA H100 80GB HBM3`.
    pub fn name(&self) -> Result<String, CudaError> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes.
        self.driver.inner.check("cuDeviceGetName", unsafe {
            (self.driver.inner.api.device_name)(buf.as_mut_ptr(), buf.len() as c_int, self.raw)
        })?;
        // SAFETY: the driver NUL-terminates within the buffer; the last byte is still 0.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    fn attribute(&self, attr: c_int) -> Result<i32, CudaError> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        self.driver.inner.check("cuDeviceGetAttribute", unsafe {
            (self.driver.inner.api.device_attribute)(&mut v, attr, self.raw)
        })?;
        Ok(v)
    }

    /// `(major, minor)`, e.g. `(9, 0)`.
    pub fn compute_capability(&self) -> Result<(i32, i32), CudaError> {
        Ok((
            self.attribute(ATTR_COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(ATTR_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// The architecture to compile for (`sm_90` for compute capability 9.0; no `a` suffix).
    pub fn arch(&self) -> Result<Arch, CudaError> {
        let (major, minor) = self.compute_capability()?;
        Arch::from_compute_capability(major, minor)
    }

    /// Total device memory in bytes.
    pub fn total_mem(&self) -> Result<usize, CudaError> {
        let mut v = 0usize;
        // SAFETY: valid out-pointer.
        self.driver.inner.check("cuDeviceTotalMem_v2", unsafe {
            (self.driver.inner.api.device_total_mem)(&mut v, self.raw)
        })?;
        Ok(v)
    }

    /// Shared memory a block may use without opting in (48 KiB on current GPUs).
    pub fn max_shared_per_block(&self) -> Result<usize, CudaError> {
        Ok(self.attribute(ATTR_MAX_SHARED_MEMORY_PER_BLOCK)?.max(0) as usize)
    }

    /// Shared memory a block may use after opting in (227 KiB on an H100).
    pub fn max_shared_per_block_optin(&self) -> Result<usize, CudaError> {
        Ok(self
            .attribute(ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            .max(0) as usize)
    }

    /// The most threads a block may have (1024 on current GPUs).
    pub fn max_threads_per_block(&self) -> Result<u32, CudaError> {
        Ok(self.attribute(ATTR_MAX_THREADS_PER_BLOCK)?.max(0) as u32)
    }

    /// The number of streaming multiprocessors.
    pub fn multiprocessor_count(&self) -> Result<u32, CudaError> {
        Ok(self.attribute(ATTR_MULTIPROCESSOR_COUNT)?.max(0) as u32)
    }
}

struct ContextInner {
    device: Device,
    raw: CuContext,
}

// SAFETY: a CUDA context may be used from any thread once made current there, which every
// operation of this crate does first.
unsafe impl Send for ContextInner {}
unsafe impl Sync for ContextInner {}

impl ContextInner {
    fn api(&self) -> &DriverApi {
        &self.device.driver.inner.api
    }

    fn check(&self, call: &'static str, r: CuResult) -> Result<(), CudaError> {
        self.device.driver.inner.check(call, r)
    }

    /// Makes the context current on the calling thread.
    fn bind(&self) -> Result<(), CudaError> {
        // SAFETY: `raw` is a retained primary context.
        self.check("cuCtxSetCurrent", unsafe {
            (self.api().ctx_set_current)(self.raw)
        })
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: releases the retain made in `Context::new`; nothing else uses `raw` now
        // (buffers, modules and events hold this struct alive).
        unsafe {
            (self.api().primary_ctx_release)(self.device.raw);
        }
    }
}

/// A device's primary context, retained while this value (or anything made from it) lives.
/// Every operation makes it current on the calling thread first.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.device.ordinal)
            .finish()
    }
}

impl Context {
    /// Retains `device`'s primary context and makes it current.
    pub fn new(device: &Device) -> Result<Context, CudaError> {
        let api = &device.driver.inner.api;
        let mut raw: CuContext = ptr::null_mut();
        // SAFETY: valid out-pointer and device.
        device
            .driver
            .inner
            .check("cuDevicePrimaryCtxRetain", unsafe {
                (api.primary_ctx_retain)(&mut raw, device.raw)
            })?;
        let inner = Arc::new(ContextInner {
            device: device.clone(),
            raw,
        });
        inner.bind()?;
        Ok(Context { inner })
    }

    /// The first device's context: [`Driver::load`], [`Device::get`]`(0)`, [`Context::new`].
    pub fn first_device() -> Result<Context, CudaError> {
        let driver = Driver::load()?;
        Context::new(&Device::get(&driver, 0)?)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// See [`Device::name`].
    pub fn name(&self) -> Result<String, CudaError> {
        self.inner.device.name()
    }

    /// See [`Device::compute_capability`].
    pub fn compute_capability(&self) -> Result<(i32, i32), CudaError> {
        self.inner.device.compute_capability()
    }

    /// See [`Device::arch`].
    pub fn arch(&self) -> Result<Arch, CudaError> {
        self.inner.device.arch()
    }

    /// See [`Device::total_mem`].
    pub fn total_mem(&self) -> Result<usize, CudaError> {
        self.inner.device.total_mem()
    }

    /// See [`Device::max_shared_per_block`].
    pub fn max_shared_per_block(&self) -> Result<usize, CudaError> {
        self.inner.device.max_shared_per_block()
    }

    /// See [`Device::max_shared_per_block_optin`].
    pub fn max_shared_per_block_optin(&self) -> Result<usize, CudaError> {
        self.inner.device.max_shared_per_block_optin()
    }

    /// See [`Device::max_threads_per_block`].
    pub fn max_threads_per_block(&self) -> Result<u32, CudaError> {
        self.inner.device.max_threads_per_block()
    }

    /// `(free, total)` device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize), CudaError> {
        self.inner.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the context is current.
        self.inner.check("cuMemGetInfo_v2", unsafe {
            (self.inner.api().mem_get_info)(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    /// Waits for all work on the context to finish.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.inner.bind()?;
        // SAFETY: the context is current.
        self.inner.check("cuCtxSynchronize", unsafe {
            (self.inner.api().ctx_synchronize)()
        })
    }

    /// Runs `work` between two events on the default stream and returns the GPU time between
    /// them in milliseconds. Use [`launch_async`] inside for kernel time alone ([`launch`]
    /// waits on the host, which adds that wait's latency).
    pub fn time_ms<F>(&self, work: F) -> Result<f32, CudaError>
    where
        F: FnOnce() -> Result<(), CudaError>,
    {
        let start = Event::new(self)?;
        let stop = Event::new(self)?;
        start.record()?;
        work()?;
        stop.record()?;
        stop.synchronize()?;
        Event::elapsed_ms(&start, &stop)
    }
}

struct ModuleInner {
    ctx: Arc<ContextInner>,
    raw: CuModule,
}

// SAFETY: modules are context-wide driver objects, usable from any thread.
unsafe impl Send for ModuleInner {}
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: `raw` came from cuModuleLoadDataEx and is unloaded once; functions taken
            // from it hold this struct alive.
            unsafe {
                (self.ctx.api().module_unload)(self.raw);
            }
        }
    }
}

/// A loaded module (a cubin, or PTX that the driver compiles for the device).
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

impl Module {
    /// Loads a cubin (ELF) or PTX text. PTX need not end in a NUL byte. A PTX that the driver
    /// cannot compile gives [`CudaError::Driver`] whose message includes the JIT log.
    pub fn load(ctx: &Context, image: &[u8]) -> Result<Module, CudaError> {
        let is_elf = image.starts_with(b"\x7fELF");
        let owned;
        let data: &[u8] = if is_elf || image.last() == Some(&0) {
            image
        } else {
            owned = [image, b"\0"].concat();
            &owned
        };
        ctx.inner.bind()?;
        let mut log = vec![0u8; 16 * 1024];
        let mut options = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let mut raw: CuModule = ptr::null_mut();
        // SAFETY: `data` is a complete image (NUL-terminated when text); the log buffer and its
        // size are passed as the driver documents (the size as a pointer-sized integer).
        let r = unsafe {
            (ctx.inner.api().module_load_data_ex)(
                &mut raw,
                data.as_ptr().cast(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if r != 0 {
            let jit_log = CStr::from_bytes_until_nul(&log)
                .map(|c| c.to_string_lossy().trim().to_string())
                .unwrap_or_default();
            let mut err = ctx.inner.device.driver.inner.error("cuModuleLoadDataEx", r);
            if let CudaError::Driver { message, .. } = &mut err {
                if !jit_log.is_empty() {
                    message.push_str("\nJIT log:\n");
                    message.push_str(&jit_log);
                }
            }
            return Err(err);
        }
        Ok(Module {
            inner: Arc::new(ModuleInner {
                ctx: ctx.inner.clone(),
                raw,
            }),
        })
    }

    /// The `extern "C"` kernel named `name`.
    pub fn function(&self, name: &str) -> Result<Function, CudaError> {
        let c_name = CString::new(name).map_err(|_| CudaError::InvalidInput {
            what: "kernel name",
            reason: "contains a NUL byte".to_string(),
        })?;
        self.inner.ctx.bind()?;
        let mut raw: CuFunction = ptr::null_mut();
        // SAFETY: live module, valid out-pointer and NUL-terminated name.
        self.inner.ctx.check("cuModuleGetFunction", unsafe {
            (self.inner.ctx.api().module_get_function)(&mut raw, self.inner.raw, c_name.as_ptr())
        })?;
        Ok(Function {
            module: self.inner.clone(),
            raw,
            name: name.to_string(),
        })
    }
}

/// A kernel of a loaded module (keeps the module loaded).
#[derive(Clone)]
pub struct Function {
    module: Arc<ModuleInner>,
    raw: CuFunction,
    name: String,
}

// SAFETY: function handles are immutable driver objects, usable from any thread.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .finish()
    }
}

/// What the driver reports about a loaded kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionAttributes {
    /// The most threads per block this kernel can be launched with (its `__launch_bounds__`
    /// and register use limit it below the device's maximum).
    pub max_threads_per_block: u32,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory in bytes.
    pub shared_bytes: u32,
    /// Local memory per thread in bytes (stack and spills).
    pub local_bytes: u32,
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn attribute(&self, attr: c_int) -> Result<u32, CudaError> {
        let mut v = 0;
        // SAFETY: valid out-pointer and function.
        self.module.ctx.check("cuFuncGetAttribute", unsafe {
            (self.module.ctx.api().func_attribute)(&mut v, attr, self.raw)
        })?;
        Ok(v.max(0) as u32)
    }

    /// Lets launches of this kernel pass up to `bytes` of dynamic shared memory (past the 48
    /// KiB every kernel may use, up to the device's opt-in limit,
    /// [`Context::max_shared_per_block_optin`]).
    pub fn set_max_dynamic_shared(&self, bytes: u32) -> Result<(), CudaError> {
        self.module.ctx.bind()?;
        let v = c_int::try_from(bytes).unwrap_or(c_int::MAX);
        // SAFETY: a live function and a documented attribute.
        self.module.ctx.check("cuFuncSetAttribute", unsafe {
            (self.module.ctx.api().func_set_attribute)(
                self.raw,
                FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                v,
            )
        })
    }

    /// Registers, shared and local memory, and the launchable block size.
    pub fn attributes(&self) -> Result<FunctionAttributes, CudaError> {
        self.module.ctx.bind()?;
        Ok(FunctionAttributes {
            max_threads_per_block: self.attribute(FUNC_MAX_THREADS_PER_BLOCK)?,
            registers: self.attribute(FUNC_NUM_REGS)?,
            shared_bytes: self.attribute(FUNC_SHARED_SIZE_BYTES)?,
            local_bytes: self.attribute(FUNC_LOCAL_SIZE_BYTES)?,
        })
    }

    /// The most blocks of this kernel one multiprocessor runs at once, launched with `threads`
    /// threads a block and `dynamic_shared` bytes of dynamic shared memory
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessor`).
    pub fn max_active_blocks_per_sm(
        &self,
        threads: u32,
        dynamic_shared: usize,
    ) -> Result<u32, CudaError> {
        self.module.ctx.bind()?;
        let mut n: c_int = 0;
        let t = c_int::try_from(threads).unwrap_or(c_int::MAX);
        // SAFETY: a valid out-pointer and a live function.
        self.module
            .ctx
            .check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
                (self.module.ctx.api().occupancy_blocks)(&mut n, self.raw, t, dynamic_shared)
            })?;
        Ok(n.max(0) as u32)
    }

    /// The most clusters of this kernel (declared in clusters of `cluster` blocks by its
    /// `__cluster_dims__`) the GPU runs at once, launched with blocks of `block` threads and
    /// `dynamic_shared` bytes of dynamic shared memory (`cuOccupancyMaxActiveClusters`: it
    /// counts what fits in each GPU processing cluster, which a number of multiprocessors
    /// divided by the cluster's blocks overestimates). A driver without the function gives
    /// [`CudaError::Unsupported`].
    pub fn max_active_clusters(
        &self,
        block: [u32; 3],
        cluster: [u32; 3],
        dynamic_shared: u32,
    ) -> Result<u32, CudaError> {
        let query = match &self.module.ctx.device.driver.inner.occupancy_clusters {
            Ok(f) => *f,
            Err(reason) => {
                return Err(CudaError::Unsupported {
                    what: "cluster occupancy (cuOccupancyMaxActiveClusters, CUDA 12.0)",
                    reason: reason.clone(),
                })
            }
        };
        self.module.ctx.bind()?;
        // The cluster's shape as a launch attribute too (the kernel's `__cluster_dims__`, which
        // it must match), as launches with clusters pass it.
        let mut value = [0; 16];
        value[..3].copy_from_slice(&cluster);
        let mut attr = LaunchAttribute {
            id: LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            pad: [0; 4],
            value,
        };
        let config = LaunchConfig {
            grid: cluster,
            block,
            shared_bytes: dynamic_shared,
            stream: ptr::null_mut(),
            attrs: (&raw mut attr).cast(),
            num_attrs: 1,
        };
        let mut n: c_int = 0;
        // SAFETY: a valid out-pointer, a live function and a configuration whose attribute
        // lives across the call.
        self.module
            .ctx
            .check("cuOccupancyMaxActiveClusters", unsafe {
                query(&mut n, self.raw, &config)
            })?;
        Ok(n.max(0) as u32)
    }
}

/// Device memory, freed on drop. A zero-byte buffer holds no allocation (its pointer is null)
/// and every operation on it does nothing.
pub struct DeviceBuffer {
    ctx: Arc<ContextInner>,
    ptr: CuDevicePtr,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceBuffer {
    /// Allocates `bytes` bytes (uninitialised).
    pub fn alloc(ctx: &Context, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        let mut ptr: CuDevicePtr = 0;
        if bytes > 0 {
            ctx.inner.bind()?;
            // SAFETY: valid out-pointer; the context is current.
            let r = unsafe { (ctx.inner.api().mem_alloc)(&mut ptr, bytes) };
            if r == CUDA_ERROR_OUT_OF_MEMORY {
                return Err(CudaError::OutOfMemory { bytes });
            }
            ctx.inner.check("cuMemAlloc_v2", r)?;
        }
        Ok(DeviceBuffer {
            ctx: ctx.inner.clone(),
            ptr,
            len: bytes,
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_host(ctx: &Context, data: &[u8]) -> Result<DeviceBuffer, CudaError> {
        let b = DeviceBuffer::alloc(ctx, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Allocates `bytes` zeroed bytes.
    pub fn zeroed(ctx: &Context, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        let b = DeviceBuffer::alloc(ctx, bytes)?;
        b.memset_zero()?;
        Ok(b)
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    fn same_len(&self, host: usize) -> Result<(), CudaError> {
        if host == self.len {
            Ok(())
        } else {
            Err(CudaError::SizeMismatch {
                host,
                device: self.len,
            })
        }
    }

    /// Copies `src` (exactly [`DeviceBuffer::len`] bytes) to the device; waits for it.
    pub fn copy_from_host(&self, src: &[u8]) -> Result<(), CudaError> {
        self.same_len(src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: both sides hold `len` bytes.
        self.ctx.check("cuMemcpyHtoD_v2", unsafe {
            (self.ctx.api().memcpy_htod)(self.ptr, src.as_ptr().cast(), self.len)
        })
    }

    /// Copies the device bytes into `dst` (exactly [`DeviceBuffer::len`] bytes); waits for
    /// all earlier work on the context first.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), CudaError> {
        self.same_len(dst.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: both sides hold `len` bytes.
        self.ctx.check("cuMemcpyDtoH_v2", unsafe {
            (self.ctx.api().memcpy_dtoh)(dst.as_mut_ptr().cast(), self.ptr, self.len)
        })
    }

    /// The device bytes as a new vector.
    pub fn to_host(&self) -> Result<Vec<u8>, CudaError> {
        let mut v = vec![0u8; self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Sets every byte to 0.
    pub fn memset_zero(&self) -> Result<(), CudaError> {
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: the allocation holds `len` bytes.
        self.ctx.check("cuMemsetD8_v2", unsafe {
            (self.ctx.api().memset_d8)(self.ptr, 0, self.len)
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 && self.ctx.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc_v2 and is freed once.
            unsafe {
                (self.ctx.api().mem_free)(self.ptr);
            }
        }
    }
}

/// A `CUtensorMap`: the opaque 128 bytes `cuTensorMapEncodeTiled` writes, which a kernel takes
/// by value (`const __grid_constant__ CUtensorMap`). Aligned as the driver requires.
#[repr(C, align(128))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TensorMap(pub [u64; 16]);

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorMap({:x?})", &self.0[..4])
    }
}

/// The element types a tensor map is encoded for here (`CUtensorMapDataType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorMapElem {
    /// Bytes (8-bit integers of either sign: the copy engine moves them as they are).
    U8,
    U16,
    F16,
    BF16,
    U32,
    I32,
    F32,
}

impl TensorMapElem {
    /// The `CU_TENSOR_MAP_DATA_TYPE_*` value (cuda.h).
    fn code(self) -> c_int {
        match self {
            TensorMapElem::U8 => 0,
            TensorMapElem::U16 => 1,
            TensorMapElem::U32 => 2,
            TensorMapElem::I32 => 3,
            TensorMapElem::F16 => 6,
            TensorMapElem::F32 => 7,
            TensorMapElem::BF16 => 9,
        }
    }

    /// Bytes of one element.
    pub fn bytes(self) -> u64 {
        match self {
            TensorMapElem::U8 => 1,
            TensorMapElem::U16 | TensorMapElem::F16 | TensorMapElem::BF16 => 2,
            TensorMapElem::U32 | TensorMapElem::I32 | TensorMapElem::F32 => 4,
        }
    }
}

/// A 2-D tiled tensor map to encode: a row-major view of `rows` rows of `columns` elements,
/// consecutive rows `row_stride_bytes` apart, from the start of a device buffer, and the box
/// one copy moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap2d {
    pub elem: TensorMapElem,
    /// `[columns, rows]`.
    pub dims: [u64; 2],
    pub row_stride_bytes: u64,
    /// `[columns, rows]` of the box, 1 to 256 each.
    pub box_dims: [u32; 2],
    /// The box's swizzle in shared memory in bytes: 0 (none), 32, 64 or 128.
    pub swizzle: u32,
}

impl TensorMap2d {
    /// The driver's documented limits, checked before the call so that a bad view is a clear
    /// [`CudaError::InvalidInput`] rather than `CUDA_ERROR_INVALID_VALUE`.
    pub fn check(&self, buffer_bytes: u64, address: u64) -> Result<(), CudaError> {
        let bad = |reason: String| CudaError::InvalidInput {
            what: "tensor map",
            reason,
        };
        let e = self.elem.bytes();
        let [cols, rows] = self.dims;
        let [bc, br] = self.box_dims;
        if cols == 0 || rows == 0 || cols > 1 << 32 || rows > 1 << 32 {
            return Err(bad(format!(
                "the view's dimensions {cols} x {rows} must be 1 to 2^32 each"
            )));
        }
        if !address.is_multiple_of(16) {
            return Err(bad(format!(
                "the buffer's address {address:#x} is not 16-byte aligned"
            )));
        }
        if !self.row_stride_bytes.is_multiple_of(16) {
            return Err(bad(format!(
                "a row stride of {} bytes is not a multiple of 16 (the copy engine's)",
                self.row_stride_bytes
            )));
        }
        if self.row_stride_bytes >= 1 << 40 {
            return Err(bad(format!(
                "the row stride of {} bytes must be below 2^40",
                self.row_stride_bytes
            )));
        }
        if self.row_stride_bytes < cols * e {
            return Err(bad(format!(
                "the row stride of {} bytes is shorter than a row of {cols} elements",
                self.row_stride_bytes
            )));
        }
        let need = (rows - 1)
            .checked_mul(self.row_stride_bytes)
            .and_then(|v| v.checked_add(cols * e));
        if need.is_none_or(|n| n > buffer_bytes) {
            return Err(bad(format!(
                "the view of {rows} rows of {cols} elements is larger than the buffer (it \
                 does not fit its {buffer_bytes} bytes)"
            )));
        }
        if !(1..=256).contains(&bc) || !(1..=256).contains(&br) {
            return Err(bad(format!(
                "the box {bc} x {br} must be 1 to 256 each way"
            )));
        }
        let row = u64::from(bc) * e;
        if !row.is_multiple_of(16) {
            return Err(bad(format!(
                "a box row of {bc} elements is {row} bytes, not a multiple of 16"
            )));
        }
        match self.swizzle {
            0 => {}
            32 | 64 | 128 if row <= u64::from(self.swizzle) => {}
            32 | 64 | 128 => {
                return Err(bad(format!(
                    "a box row of {row} bytes exceeds the {}-byte swizzle span",
                    self.swizzle
                )))
            }
            s => return Err(bad(format!("swizzle {s} (0, 32, 64 or 128 bytes)"))),
        }
        Ok(())
    }
}

impl Context {
    /// Encodes the tiled tensor map `map` of the device buffer `buf` (`cuTensorMapEncodeTiled`:
    /// no interleave, element strides 1, L2 promotion of 128 bytes, elements past the view read
    /// as zero). A driver without the function gives [`CudaError::Unsupported`].
    pub fn encode_tensor_map_2d(
        &self,
        buf: &DeviceBuffer,
        map: &TensorMap2d,
    ) -> Result<TensorMap, CudaError> {
        let encode = match &self.inner.device.driver.inner.encode_tiled {
            Ok(f) => *f,
            Err(reason) => {
                return Err(CudaError::Unsupported {
                    what: "tensor maps (cuTensorMapEncodeTiled, CUDA 12.0)",
                    reason: reason.clone(),
                })
            }
        };
        map.check(buf.len as u64, buf.ptr)?;
        let swizzle: c_int = match map.swizzle {
            32 => 1,
            64 => 2,
            128 => 3,
            _ => 0,
        };
        let dims = map.dims;
        let strides = [map.row_stride_bytes];
        let boxes = map.box_dims;
        let element_strides = [1u32; 2];
        let mut out = TensorMap([0; 16]);
        self.inner.bind()?;
        // SAFETY: `out` is 128 bytes aligned to 128; the arrays hold `rank` (strides: rank - 1)
        // entries and live across the call; the address and sizes were checked against the
        // buffer and the documented limits; the driver only records the address.
        let r = unsafe {
            encode(
                &mut out,
                map.elem.code(),
                2,
                buf.ptr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                0,
                swizzle,
                2,
                0,
            )
        };
        self.inner.check("cuTensorMapEncodeTiled", r)?;
        Ok(out)
    }
}

/// One kernel argument, in the kernel's parameter order.
#[derive(Clone, Copy, Debug)]
pub enum LaunchArg<'a> {
    /// A pointer parameter: the buffer's device address.
    Ptr(&'a DeviceBuffer),
    /// A pointer parameter given as a device address of memory this crate did not allocate
    /// (another library's tensor); the launch's caller vouches for it (see
    /// [`launch_on_stream`]).
    Addr(u64),
    /// A `CUtensorMap` parameter, passed by value (the driver copies its 128 bytes).
    TensorMap(&'a TensorMap),
    I32(i32),
    I64(i64),
    U32(u32),
    F32(f32),
    F64(f64),
}

/// Rejects launch shapes every current GPU refuses: a zero dimension, more than 1024 threads
/// per block, `block.z > 64`, `grid.x > 2^31 - 1` or `grid.y`/`grid.z > 65535`.
pub fn check_launch_dims(grid: [u32; 3], block: [u32; 3]) -> Result<(), CudaError> {
    let bad = |reason: String| CudaError::InvalidLaunch {
        grid,
        block,
        reason,
    };
    if grid.contains(&0) || block.contains(&0) {
        return Err(bad(
            "every grid and block dimension must be at least 1".into()
        ));
    }
    let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
    if threads > 1024 {
        return Err(bad(format!("{threads} threads per block (at most 1024)")));
    }
    if block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
        return Err(bad(
            "block.x and block.y must be at most 1024, block.z at most 64".into(),
        ));
    }
    if grid[0] > i32::MAX as u32 {
        return Err(bad("grid.x must be at most 2^31 - 1".into()));
    }
    if grid[1] > 65535 || grid[2] > 65535 {
        return Err(bad("grid.y and grid.z must be at most 65535".into()));
    }
    Ok(())
}

/// Launches `func` on the default stream and waits for it; a launch refused by the driver or a
/// kernel that fails while running gives [`CudaError::Launch`]. `shared_bytes` is dynamic shared
/// memory (0 for the generated kernels, which use static shared memory only).
pub fn launch(
    func: &Function,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    args: &[LaunchArg<'_>],
) -> Result<(), CudaError> {
    launch_async(func, grid, block, shared_bytes, args)?;
    let ctx = &func.module.ctx;
    // SAFETY: the context is current (launch_async bound it).
    let r = unsafe { (ctx.api().ctx_synchronize)() };
    if r != 0 {
        return Err(launch_error(func, r));
    }
    Ok(())
}

/// [`launch`] without waiting for the kernel to finish (errors it hits while running show up
/// at the next synchronising call).
pub fn launch_async(
    func: &Function,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    args: &[LaunchArg<'_>],
) -> Result<(), CudaError> {
    // SAFETY: the null stream; every pointer argument is a `DeviceBuffer` of this crate or an
    // address whose validity `LaunchArg::Addr`'s maker vouched for.
    unsafe { launch_on_stream(func, grid, block, shared_bytes, args, 0) }
}

/// [`launch_async`] on stream `stream` (a `CUstream` handle, as another library, PyTorch's
/// `torch.cuda.current_stream().cuda_stream`, gives it; 0: the null stream), so that the
/// kernel runs after the work queued there before it.
///
/// # Safety
///
/// `stream` must be 0 or a live stream of `func`'s context, and every [`LaunchArg::Addr`]
/// the device address of memory of that context holding what the kernel's parameter reads or
/// writes, for as long as the kernel runs.
pub unsafe fn launch_on_stream(
    func: &Function,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    args: &[LaunchArg<'_>],
    stream: u64,
) -> Result<(), CudaError> {
    check_launch_dims(grid, block)?;
    let ctx = &func.module.ctx;
    ctx.bind()?;
    let limit = func.attribute(FUNC_MAX_THREADS_PER_BLOCK)?;
    let threads = block[0] * block[1] * block[2];
    if threads > limit {
        return Err(CudaError::InvalidLaunch {
            grid,
            block,
            reason: format!(
                "{threads} threads per block, but kernel `{}` allows at most {limit} \
                 (its __launch_bounds__ or register use)",
                func.name
            ),
        });
    }
    // Each argument's value in an 8-byte slot; kernelParams points at the slots (a tensor
    // map's: at the map itself, borrowed for the call).
    let mut slots: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            LaunchArg::Ptr(b) => b.ptr,
            LaunchArg::Addr(a) => a,
            LaunchArg::TensorMap(_) => 0,
            LaunchArg::I32(v) => u64::from(v as u32),
            LaunchArg::I64(v) => v as u64,
            LaunchArg::U32(v) => u64::from(v),
            LaunchArg::F32(v) => u64::from(v.to_bits()),
            LaunchArg::F64(v) => v.to_bits(),
        })
        .collect();
    // Little-endian: a 4-byte value sits in the first 4 bytes of its slot, where the driver
    // reads it.
    let mut params: Vec<*mut c_void> = slots
        .iter_mut()
        .zip(args)
        .map(|(s, a)| match *a {
            LaunchArg::TensorMap(m) => (m as *const TensorMap).cast_mut().cast::<c_void>(),
            _ => (s as *mut u64).cast::<c_void>(),
        })
        .collect();
    let params_ptr = if params.is_empty() {
        ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    // SAFETY: the function is live, the dimensions were checked, and `params` holds one
    // pointer per kernel parameter to a slot or a borrowed tensor map that outlives the call
    // (the driver copies the values before returning; it never writes through them).
    let r = unsafe {
        (ctx.api().launch_kernel)(
            func.raw,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_bytes,
            stream as usize as CuStream,
            params_ptr,
            ptr::null_mut(),
        )
    };
    if r != 0 {
        return Err(launch_error(func, r));
    }
    Ok(())
}

fn launch_error(func: &Function, code: CuResult) -> CudaError {
    let (name, message) = func.module.ctx.device.driver.inner.describe(code);
    CudaError::Launch {
        kernel: func.name.clone(),
        code,
        name,
        message,
    }
}

/// A CUDA event on the default stream, for timing.
pub struct Event {
    ctx: Arc<ContextInner>,
    raw: CuEvent,
}

impl Event {
    /// A new event (with timing enabled).
    pub fn new(ctx: &Context) -> Result<Event, CudaError> {
        ctx.inner.bind()?;
        let mut raw: CuEvent = ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 = CU_EVENT_DEFAULT (timing enabled).
        ctx.inner.check("cuEventCreate", unsafe {
            (ctx.inner.api().event_create)(&mut raw, 0)
        })?;
        Ok(Event {
            ctx: ctx.inner.clone(),
            raw,
        })
    }

    /// Records the event on the default stream.
    pub fn record(&self) -> Result<(), CudaError> {
        self.ctx.bind()?;
        // SAFETY: live event; the null stream is the default stream.
        self.ctx.check("cuEventRecord", unsafe {
            (self.ctx.api().event_record)(self.raw, ptr::null_mut())
        })
    }

    /// Waits until the work recorded before the event has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: live event.
        self.ctx.check("cuEventSynchronize", unsafe {
            (self.ctx.api().event_synchronize)(self.raw)
        })
    }

    /// Milliseconds between two recorded, completed events.
    pub fn elapsed_ms(start: &Event, stop: &Event) -> Result<f32, CudaError> {
        let mut ms = 0f32;
        // SAFETY: live events; valid out-pointer.
        start.ctx.check("cuEventElapsedTime", unsafe {
            (start.ctx.api().event_elapsed)(&mut ms, start.raw, stop.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: `raw` came from cuEventCreate and is destroyed once.
        unsafe {
            (self.ctx.api().event_destroy)(self.raw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_map_views_are_checked_before_the_driver() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>() % 64, 0);
        let ok = TensorMap2d {
            elem: TensorMapElem::F16,
            dims: [64, 32],
            row_stride_bytes: 128,
            box_dims: [64, 32],
            swizzle: 128,
        };
        assert!(ok.check(64 * 32 * 2, 0x1000).is_ok());
        let cases = [
            (
                TensorMap2d { ..ok },
                64 * 32 * 2 - 2,
                0x1000,
                "does not fit",
            ),
            (TensorMap2d { ..ok }, 1 << 20, 0x1008, "16-byte aligned"),
            (
                TensorMap2d {
                    row_stride_bytes: 136,
                    ..ok
                },
                1 << 20,
                0x1000,
                "multiple of 16",
            ),
            (
                TensorMap2d {
                    box_dims: [64, 257],
                    ..ok
                },
                1 << 20,
                0x1000,
                "1 to 256",
            ),
            (
                TensorMap2d {
                    box_dims: [4, 8],
                    ..ok
                },
                1 << 20,
                0x1000,
                "not a multiple of 16",
            ),
            (
                TensorMap2d { swizzle: 64, ..ok },
                1 << 20,
                0x1000,
                "exceeds the 64-byte swizzle",
            ),
            (
                TensorMap2d { swizzle: 16, ..ok },
                1 << 20,
                0x1000,
                "swizzle 16",
            ),
        ];
        for (m, bytes, addr, msg) in cases {
            let e = m.check(bytes, addr).unwrap_err();
            assert!(e.to_string().contains(msg), "{m:?}: {e}");
        }
    }

    #[test]
    fn launch_dims() {
        assert!(check_launch_dims([1, 1, 1], [1, 1, 1]).is_ok());
        assert!(check_launch_dims([i32::MAX as u32, 65535, 65535], [1024, 1, 1]).is_ok());
        assert!(check_launch_dims([1, 1, 1], [16, 1, 64]).is_ok());
        for (g, b) in [
            ([0, 1, 1], [1, 1, 1]),
            ([1, 1, 1], [1, 0, 1]),
            ([1, 1, 1], [1025, 1, 1]),
            ([1, 1, 1], [32, 32, 2]),
            ([1, 1, 1], [1, 1, 65]),
            ([1u32 << 31, 1, 1], [1, 1, 1]),
            ([1, 65536, 1], [1, 1, 1]),
            ([1, 1, 65536], [1, 1, 1]),
        ] {
            let e = check_launch_dims(g, b).unwrap_err();
            assert!(
                matches!(e, CudaError::InvalidLaunch { .. }),
                "{g:?} {b:?}: {e}"
            );
        }
    }
}
