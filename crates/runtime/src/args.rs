//! Borrowed launch arguments: a kernel run on arrays the caller owns (`&[T]` it only reads,
//! `&mut [T]` it may write) without copying them into [`Tensor`]s first.
//!
//! [`LaunchArgs`] is what validation ([`crate::validate::validate_launch`]) and marshalling into
//! the C argument array ([`crate::CompiledKernel`]) read; the owned argument map of
//! [`crate::Kernel::run`] is turned into one (a view per array, no copy), so both entry points
//! take the same path. An array's dtype comes from its Rust element type ([`HostElement`]), its
//! length from the slice.
//!
//! Architecture invariant: an [`ArrayRef`] is a slice borrow in disguise. It is built only from
//! a `&'a [T]`, a `&'a mut [T]` or a tensor borrowed for `'a`, is neither `Clone` nor `Copy`,
//! and records whether it may be written; [`crate::Kernel::launch`] refuses a read-only array
//! for a parameter the kernel writes. Validation reads index arrays through shared slices
//! rebuilt from the pointer, before the kernel runs, never while it runs.

use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;

use half::{bf16, f16};
use sparsetir_eval::ArgValue;
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::DType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type that a kernel array of one sparsetir dtype holds.
pub trait HostElement: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The dtype of arrays of this element type.
    const DTYPE: DType;
    /// The element's value as `f64` (as [`Tensor::get_f64`] reads it).
    fn to_f64(self) -> f64;
}

macro_rules! host_elements {
    ($($t:ty => $d:ident, |$x:ident| $f:expr);*) => {$(
        impl sealed::Sealed for $t {}
        impl HostElement for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                let $x = self;
                $f
            }
        }
    )*};
}
host_elements!(bool => Bool, |x| f64::from(u8::from(x)); i8 => I8, |x| f64::from(x);
               i16 => I16, |x| f64::from(x); i32 => I32, |x| f64::from(x);
               i64 => I64, |x| x as f64; u8 => U8, |x| f64::from(x);
               u16 => U16, |x| f64::from(x); u32 => U32, |x| f64::from(x);
               u64 => U64, |x| x as f64; f16 => F16, |x| x.to_f64();
               bf16 => BF16, |x| x.to_f64(); f32 => F32, |x| f64::from(x);
               f64 => F64, |x| x);

/// `$body` with `$T` the element type of the dtype `$dt` (`$none` for dtypes without one).
macro_rules! with_element {
    ($dt:expr, $T:ident => $body:expr, _ => $none:expr) => {
        match $dt {
            DType::Bool => {
                type $T = bool;
                $body
            }
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::I16 => {
                type $T = i16;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::U16 => {
                type $T = u16;
                $body
            }
            DType::U32 => {
                type $T = u32;
                $body
            }
            DType::U64 => {
                type $T = u64;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            _ => $none,
        }
    };
}

/// One array argument, borrowed for `'a`: its element pointer, length and dtype, and whether
/// the kernel may write it.
pub struct ArrayRef<'a> {
    dtype: DType,
    ptr: *mut c_void,
    len: usize,
    writable: bool,
    /// The identity of the [`crate::FrozenArray`] this views, if it is one.
    frozen: Option<u64>,
    /// Elements that may be uninitialized ([`ArrayRef::write_only`]): never read here.
    uninit: bool,
    /// The elements are in GPU memory ([`ArrayRef::device`]): `ptr` is their device address,
    /// never read here.
    on_device: bool,
    /// The frozen array this views, if it is one (its device copy is kept with it).
    frozen_src: Option<&'a crate::FrozenArray>,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: an `ArrayRef` stands for a `&'a [T]` or `&'a mut [T]` of a `HostElement` (all `Send +
// Sync` plain data), both of which may move to and be shared with other threads; nothing in it
// is tied to the thread that built it.
unsafe impl Send for ArrayRef<'_> {}
// SAFETY: as above; through `&ArrayRef` only shared slices are made, and only before a launch.
unsafe impl Sync for ArrayRef<'_> {}

impl std::fmt::Debug for ArrayRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ArrayRef({} x {}, {})",
            self.len,
            self.dtype,
            if self.writable {
                "writable"
            } else {
                "read-only"
            }
        )
    }
}

impl<'a> ArrayRef<'a> {
    /// `len` elements of `dtype` at `ptr`, borrowed for `'a` by the public constructors.
    fn new(dtype: DType, ptr: *mut c_void, len: usize, writable: bool, uninit: bool) -> Self {
        ArrayRef {
            dtype,
            ptr,
            len,
            writable,
            frozen: None,
            uninit,
            on_device: false,
            frozen_src: None,
            _borrow: PhantomData,
        }
    }

    /// `len` elements of `dtype` in GPU memory at device address `addr` (another library's
    /// tensor: PyTorch's `data_ptr()`), for launches on a GPU
    /// ([`crate::gpu::GpuKernel::launch`]); nothing here reads them, and a launch whose
    /// validation would need their values (an axis's `indptr` or `indices`) is refused. The
    /// emulator takes host memory as its device memory: for it, `addr` is a host address.
    ///
    /// # Safety
    ///
    /// For `'a`, `addr` must point at `len` elements of `dtype` in the memory of the device the
    /// kernel runs on (host memory for the emulator), which nothing else writes, nor reads if
    /// `writable`, while a launch runs.
    pub unsafe fn device(dtype: DType, addr: u64, len: usize, writable: bool) -> ArrayRef<'a> {
        let mut a = ArrayRef::new(dtype, addr as usize as *mut c_void, len, writable, false);
        a.on_device = true;
        a
    }

    /// An array the kernel reads only.
    pub fn read<T: HostElement>(s: &'a [T]) -> ArrayRef<'a> {
        // Never written through: `writable` is false, and `Kernel::launch` refuses a read-only
        // array for a parameter the kernel writes.
        ArrayRef::new(
            T::DTYPE,
            s.as_ptr().cast_mut().cast(),
            s.len(),
            false,
            false,
        )
    }

    /// An array the kernel may write (an output, or one updated in place).
    pub fn write<T: HostElement>(s: &'a mut [T]) -> ArrayRef<'a> {
        ArrayRef::new(T::DTYPE, s.as_mut_ptr().cast(), s.len(), true, false)
    }

    /// An output whose elements need not be initialized: the kernel stores every one of them
    /// and reads none (a parameter in [`crate::Kernel::overwritten_params`]; a launch refuses it
    /// for any other). Once a launch returned `Ok`, every element is initialized; after an
    /// error, none may be assumed to be. Validation never reads such an array.
    ///
    /// ```
    /// use std::mem::MaybeUninit;
    /// use sparsetir_runtime::build::build;
    /// use sparsetir_runtime::{ArrayRef, CompileOptions, LaunchArg, LaunchArgs};
    /// // SpMM under its default schedule stores every element of `c` once, from a local row.
    /// let csrmm = sparsetir_ops::load("csrmm")?;
    /// let schedule = sparsetir_ops::cpu_schedule("csrmm");
    /// let kernel = build(&csrmm, schedule, &[], &CompileOptions::default())?;
    /// assert_eq!(kernel.overwritten_params(), ["c"]);
    /// let (indptr, indices, a, b) = ([0i32, 2, 2], [0i32, 2], [1.0f32, 2.0], [1.0f32; 6]);
    /// let mut c = [MaybeUninit::<f32>::uninit(); 4];
    /// let mut args = LaunchArgs::new();
    /// args.int("m", 2).int("n", 3).int("nnz", 2).int("feat_size", 2);
    /// args.read("indptr", &indptr).read("indices", &indices).read("a", &a).read("b", &b);
    /// args.set("c", LaunchArg::Array(ArrayRef::write_only(&mut c)));
    /// kernel.launch(&args)?;
    /// drop(args);
    /// // SAFETY: the launch succeeded, and it stores every element of `c`.
    /// let c = c.map(|x| unsafe { x.assume_init() });
    /// assert_eq!(c, [3.0, 3.0, 0.0, 0.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_only<T: HostElement>(s: &'a mut [std::mem::MaybeUninit<T>]) -> ArrayRef<'a> {
        ArrayRef::new(T::DTYPE, s.as_mut_ptr().cast(), s.len(), true, true)
    }

    /// A tensor's elements, read-only.
    pub fn of_tensor(t: &'a Tensor) -> ArrayRef<'a> {
        macro_rules! each {
            ($($v:ident),*) => {
                match &t.data { $(TensorData::$v(v) => ArrayRef::read(v.as_slice()),)* }
            };
        }
        each!(Bool, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64)
    }

    /// A tensor's elements, writable.
    /// A vector's elements, writable. The address comes from `as_mut_ptr`, which covers the
    /// whole allocation: the elements of an `unfilled` tensor, which the kernel writes, lie
    /// past its length.
    fn of_vec_mut<T: HostElement>(v: &'a mut Vec<T>) -> ArrayRef<'a> {
        ArrayRef::new(T::DTYPE, v.as_mut_ptr().cast(), v.len(), true, false)
    }

    pub fn of_tensor_mut(t: &'a mut Tensor) -> ArrayRef<'a> {
        macro_rules! each {
            ($($v:ident),*) => {
                match &mut t.data {
                    $(TensorData::$v(v) => ArrayRef::of_vec_mut(v),)*
                }
            };
        }
        each!(Bool, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether the kernel may write this array.
    pub fn is_writable(&self) -> bool {
        self.writable
    }
    /// Whether the elements may be uninitialized ([`ArrayRef::write_only`]).
    pub fn is_write_only(&self) -> bool {
        self.uninit
    }
    /// Whether the elements are in GPU memory ([`ArrayRef::device`]).
    pub fn is_on_device(&self) -> bool {
        self.on_device
    }
    /// The frozen array this views ([`ArrayRef::frozen`]), if it is one.
    pub(crate) fn frozen_array(&self) -> Option<&'a crate::FrozenArray> {
        self.frozen_src
    }
    pub(crate) fn with_frozen_array(mut self, f: &'a crate::FrozenArray) -> ArrayRef<'a> {
        self.frozen_src = Some(f);
        self
    }
    /// The identity of the frozen array this views ([`ArrayRef::frozen`]), if it is one.
    pub fn frozen_id(&self) -> Option<u64> {
        self.frozen
    }
    /// Marks a read-only view of a frozen array's elements with its identity (only
    /// `ArrayRef::frozen` does: an identity promises the elements never change).
    pub(crate) fn with_frozen_id(mut self, id: u64) -> ArrayRef<'a> {
        debug_assert!(!self.writable, "a frozen array is never lent writable");
        self.frozen = Some(id);
        self
    }

    /// The elements as a shared slice of `T`, when `T` is this array's element type (never for
    /// a [`ArrayRef::write_only`] array, whose elements may be uninitialized, nor for one in
    /// GPU memory).
    pub fn as_slice<T: HostElement>(&self) -> Option<&[T]> {
        if T::DTYPE != self.dtype || self.uninit || self.on_device {
            return None;
        }
        // SAFETY: `ptr` and `len` come from a `&'a [T]` or `&'a mut [T]` of exactly this
        // element type (the dtype tells which), borrowed for `'a`, which outlives `&self`; the
        // returned slice borrows `self`, and the only writes through `ptr` are a kernel's,
        // which runs after validation has dropped every such slice (`Kernel::launch`).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.cast::<T>().cast_const(), self.len) })
    }

    /// Element `i` (which must be below [`ArrayRef::len`]) as `f64`.
    pub fn get_f64(&self, i: usize) -> f64 {
        with_element!(self.dtype, T => self.as_slice::<T>().map_or(f64::NAN, |s| s[i].to_f64()),
                      _ => f64::NAN)
    }

    /// The element pointer handed to the kernel.
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

/// One launch argument: a scalar or a borrowed array.
#[derive(Debug)]
pub enum LaunchArg<'a> {
    Int(i64),
    Float(f64),
    Array(ArrayRef<'a>),
}

/// A launch's arguments by parameter name, borrowed for `'a` (an example:
/// [`crate::Kernel::launch`]).
#[derive(Debug, Default)]
pub struct LaunchArgs<'a> {
    map: HashMap<&'a str, LaunchArg<'a>>,
}

impl<'a> LaunchArgs<'a> {
    pub fn new() -> LaunchArgs<'a> {
        LaunchArgs::default()
    }

    /// Sets parameter `name` (replacing what it was set to).
    pub fn set(&mut self, name: &'a str, value: LaunchArg<'a>) -> &mut Self {
        self.map.insert(name, value);
        self
    }
    pub fn int(&mut self, name: &'a str, v: i64) -> &mut Self {
        self.set(name, LaunchArg::Int(v))
    }
    pub fn float(&mut self, name: &'a str, v: f64) -> &mut Self {
        self.set(name, LaunchArg::Float(v))
    }
    /// An array the kernel only reads.
    pub fn read<T: HostElement>(&mut self, name: &'a str, s: &'a [T]) -> &mut Self {
        self.set(name, LaunchArg::Array(ArrayRef::read(s)))
    }
    /// An array the kernel may write.
    pub fn write<T: HostElement>(&mut self, name: &'a str, s: &'a mut [T]) -> &mut Self {
        self.set(name, LaunchArg::Array(ArrayRef::write(s)))
    }

    pub fn get(&self, name: &str) -> Option<&LaunchArg<'a>> {
        self.map.get(name)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &LaunchArg<'a>)> + '_ {
        self.map.iter().map(|(k, v)| (*k, v))
    }

    /// Read-only views of an owned argument map (validation's input).
    pub fn of_values(values: &'a HashMap<String, ArgValue>) -> LaunchArgs<'a> {
        let map = values
            .iter()
            .map(|(k, v)| {
                let arg = match v {
                    ArgValue::Int(i) => LaunchArg::Int(*i),
                    ArgValue::Float(x) => LaunchArg::Float(*x),
                    ArgValue::Array(t) => LaunchArg::Array(ArrayRef::of_tensor(t)),
                };
                (k.as_str(), arg)
            })
            .collect();
        LaunchArgs { map }
    }

    /// Writable views of an owned argument map (a launch writes its outputs in place).
    pub fn of_values_mut(values: &'a mut HashMap<String, ArgValue>) -> LaunchArgs<'a> {
        let map = values
            .iter_mut()
            .map(|(k, v)| {
                let arg = match v {
                    ArgValue::Int(i) => LaunchArg::Int(*i),
                    ArgValue::Float(x) => LaunchArg::Float(*x),
                    ArgValue::Array(t) => LaunchArg::Array(ArrayRef::of_tensor_mut(t)),
                };
                (k.as_str(), arg)
            })
            .collect();
        LaunchArgs { map }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_keep_dtype_length_and_access() {
        let ints = [3i32, 1, 4];
        let mut out = vec![0.0f32; 2];
        let t = Tensor::from_i64(DType::U16, &[7, 8]).expect("tensor");
        let mut args = LaunchArgs::new();
        args.read("a", &ints)
            .write("b", &mut out)
            .int("n", 3)
            .set("c", LaunchArg::Array(ArrayRef::of_tensor(&t)));
        let Some(LaunchArg::Array(a)) = args.get("a") else {
            panic!("a is an array")
        };
        assert_eq!(
            (a.dtype(), a.len(), a.is_writable()),
            (DType::I32, 3, false)
        );
        assert_eq!(a.as_slice::<i32>(), Some(&ints[..]));
        assert_eq!(a.as_slice::<u32>(), None, "another element type is refused");
        let Some(LaunchArg::Array(b)) = args.get("b") else {
            panic!("b is an array")
        };
        assert_eq!((b.dtype(), b.len(), b.is_writable()), (DType::F32, 2, true));
        let Some(LaunchArg::Array(c)) = args.get("c") else {
            panic!("c is an array")
        };
        assert_eq!(c.as_slice::<u16>(), Some(&[7u16, 8][..]));
        assert!(matches!(args.get("n"), Some(LaunchArg::Int(3))));
        assert_eq!(args.len(), 4);
    }
}
