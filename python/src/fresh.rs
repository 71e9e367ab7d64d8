//! The output arrays `Kernel.launch` creates: zeroed, or, for the float parameters the kernel's
//! code stores whole without reading (`Kernel::overwritten_params`), left uninitialized for the
//! kernel to fill (a fresh 5 MB output zeroed costs a fifth of an SpMM call on pubmed).

use std::mem::{ManuallyDrop, MaybeUninit};

use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::DType;
use sparsetir_runtime::ArrayRef;

/// One output array before the launch.
pub enum Fresh {
    Zeroed(Tensor),
    F32(Vec<MaybeUninit<f32>>, Vec<usize>),
    F64(Vec<MaybeUninit<f64>>, Vec<usize>),
}

impl Fresh {
    /// An output of `dtype` and `shape`, write-only when `overwritten` (float32 and float64;
    /// other types are zeroed).
    pub fn new(dtype: DType, shape: Vec<usize>, overwritten: bool) -> Result<Fresh, String> {
        let n = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("the shape {shape:?} has more elements than memory holds"))?;
        Ok(match dtype {
            DType::F32 if overwritten => Fresh::F32(uninit(n), shape),
            DType::F64 if overwritten => Fresh::F64(uninit(n), shape),
            _ => Fresh::Zeroed(Tensor::zeros(dtype, shape).map_err(|e| e.to_string())?),
        })
    }

    /// The array as the launch takes it.
    pub fn arg(&mut self) -> ArrayRef<'_> {
        match self {
            Fresh::Zeroed(t) => ArrayRef::of_tensor_mut(t),
            Fresh::F32(v, _) => ArrayRef::write_only(v),
            Fresh::F64(v, _) => ArrayRef::write_only(v),
        }
    }

    /// The output as a tensor.
    ///
    /// # Safety
    ///
    /// An uninitialized (write-only) output may be taken only after a launch that returned
    /// `Ok`: every element was stored then (that is what the kernel's `overwritten_params`
    /// promise, and the runtime refuses a write-only array for any other parameter). A zeroed
    /// output may be taken at any time.
    pub unsafe fn into_tensor(self) -> Tensor {
        match self {
            Fresh::Zeroed(t) => t,
            // SAFETY: the caller vouches that a launch initialized every element.
            Fresh::F32(v, shape) => Tensor {
                shape,
                data: TensorData::F32(unsafe { assume_init(v) }),
            },
            // SAFETY: as above.
            Fresh::F64(v, shape) => Tensor {
                shape,
                data: TensorData::F64(unsafe { assume_init(v) }),
            },
        }
    }
}

fn uninit<T>(n: usize) -> Vec<MaybeUninit<T>> {
    let mut v = Vec::with_capacity(n);
    v.resize_with(n, MaybeUninit::uninit);
    v
}

/// `v`'s elements as initialized values, its storage kept.
///
/// # Safety
///
/// Every element of `v` must have been initialized.
unsafe fn assume_init<T>(v: Vec<MaybeUninit<T>>) -> Vec<T> {
    let mut v = ManuallyDrop::new(v);
    // SAFETY: `MaybeUninit<T>` has `T`'s size and alignment, the pointer, length and capacity
    // come from that vector (never dropped: `ManuallyDrop`), and the caller vouches that its
    // elements are initialized.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), v.len(), v.capacity()) }
}
