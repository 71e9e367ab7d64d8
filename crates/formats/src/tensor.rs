//! Host tensors: a typed, row-major value array with a shape. The common currency between file
//! readers, packing, the evaluator and the CLI.

use half::{bf16, f16};
use sparsetir_ir::DType;

/// The storage of a [`Tensor`], one variant per scalar dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    Bool(Vec<bool>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

macro_rules! each_variant {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            TensorData::Bool($v) => $body,
            TensorData::I8($v) => $body,
            TensorData::I16($v) => $body,
            TensorData::I32($v) => $body,
            TensorData::I64($v) => $body,
            TensorData::U8($v) => $body,
            TensorData::U16($v) => $body,
            TensorData::U32($v) => $body,
            TensorData::U64($v) => $body,
            TensorData::F16($v) => $body,
            TensorData::BF16($v) => $body,
            TensorData::F32($v) => $body,
            TensorData::F64($v) => $body,
        }
    };
}

/// A dense host array: `shape` is row-major; a sparse buffer's value array is 1-D.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

/// Error for a tensor of a dtype that cannot hold values (`handle`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dtype `{0}` has no host array representation")]
pub struct NoHostDType(pub DType);

impl Tensor {
    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Result<Tensor, NoHostDType> {
        let n: usize = shape.iter().product();
        let data = match dtype {
            DType::Bool => TensorData::Bool(vec![false; n]),
            DType::I8 => TensorData::I8(vec![0; n]),
            DType::I16 => TensorData::I16(vec![0; n]),
            DType::I32 => TensorData::I32(vec![0; n]),
            DType::I64 => TensorData::I64(vec![0; n]),
            DType::U8 => TensorData::U8(vec![0; n]),
            DType::U16 => TensorData::U16(vec![0; n]),
            DType::U32 => TensorData::U32(vec![0; n]),
            DType::U64 => TensorData::U64(vec![0; n]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; n]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; n]),
            DType::F32 => TensorData::F32(vec![0.0; n]),
            DType::F64 => TensorData::F64(vec![0.0; n]),
            DType::Handle => return Err(NoHostDType(dtype)),
        };
        Ok(Tensor { shape, data })
    }

    /// A 1-D tensor with room for `n` elements and none yet, for an output that a kernel writes
    /// whole through the storage's address; [`Tensor::assume_filled`] then makes them the
    /// tensor's. Nothing is cleared: a large output is written once, by the kernel, instead of
    /// twice.
    pub fn unfilled(dtype: DType, n: usize) -> Result<Tensor, NoHostDType> {
        let data = match dtype {
            DType::Bool => TensorData::Bool(Vec::with_capacity(n)),
            DType::I8 => TensorData::I8(Vec::with_capacity(n)),
            DType::I16 => TensorData::I16(Vec::with_capacity(n)),
            DType::I32 => TensorData::I32(Vec::with_capacity(n)),
            DType::I64 => TensorData::I64(Vec::with_capacity(n)),
            DType::U8 => TensorData::U8(Vec::with_capacity(n)),
            DType::U16 => TensorData::U16(Vec::with_capacity(n)),
            DType::U32 => TensorData::U32(Vec::with_capacity(n)),
            DType::U64 => TensorData::U64(Vec::with_capacity(n)),
            DType::F16 => TensorData::F16(Vec::with_capacity(n)),
            DType::BF16 => TensorData::BF16(Vec::with_capacity(n)),
            DType::F32 => TensorData::F32(Vec::with_capacity(n)),
            DType::F64 => TensorData::F64(Vec::with_capacity(n)),
            DType::Handle => return Err(NoHostDType(dtype)),
        };
        Ok(Tensor {
            shape: vec![0],
            data,
        })
    }

    /// Takes the first `n` elements of the storage as the tensor's: a 1-D tensor of `n`.
    ///
    /// # Safety
    /// The storage has room for `n` elements (an [`Tensor::unfilled`] of at least `n`), and each
    /// of the first `n` was written, by a kernel given the storage's address, with a valid value
    /// of the element type (for `bool`, 0 or 1).
    pub unsafe fn assume_filled(&mut self, n: usize) {
        // SAFETY: forwarded to the caller.
        each_variant!(&mut self.data, v => {
            debug_assert!(n <= v.capacity());
            unsafe { v.set_len(n) }
        });
        self.shape = vec![n];
    }

    /// A 1-D tensor from `f64` values, converted to `dtype`.
    pub fn from_f64(dtype: DType, values: &[f64]) -> Result<Tensor, NoHostDType> {
        let mut t = Tensor::zeros(dtype, vec![values.len()])?;
        for (i, v) in values.iter().enumerate() {
            t.set_f64(i, *v);
        }
        Ok(t)
    }

    /// A 1-D tensor from `i64` values, converted to `dtype`.
    pub fn from_i64(dtype: DType, values: &[i64]) -> Result<Tensor, NoHostDType> {
        let mut t = Tensor::zeros(dtype, vec![values.len()])?;
        for (i, v) in values.iter().enumerate() {
            t.set_i64(i, *v);
        }
        Ok(t)
    }

    /// A float16 or bfloat16 tensor from its elements' bit patterns (numpy's `float16` read as
    /// `uint16`, say); `None` for any other dtype.
    pub fn from_bits16(dtype: DType, shape: Vec<usize>, bits: Vec<u16>) -> Option<Tensor> {
        let data = match dtype {
            DType::F16 => TensorData::F16(bits.into_iter().map(f16::from_bits).collect()),
            DType::BF16 => TensorData::BF16(bits.into_iter().map(bf16::from_bits).collect()),
            _ => return None,
        };
        Some(Tensor { shape, data })
    }

    /// The bit patterns of a float16 or bfloat16 tensor's elements (`None` for other dtypes).
    pub fn bits16(&self) -> Option<Vec<u16>> {
        match &self.data {
            TensorData::F16(v) => Some(v.iter().map(|x| x.to_bits()).collect()),
            TensorData::BF16(v) => Some(v.iter().map(|x| x.to_bits()).collect()),
            _ => None,
        }
    }

    pub fn dtype(&self) -> DType {
        match &self.data {
            TensorData::Bool(_) => DType::Bool,
            TensorData::I8(_) => DType::I8,
            TensorData::I16(_) => DType::I16,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::U8(_) => DType::U8,
            TensorData::U16(_) => DType::U16,
            TensorData::U32(_) => DType::U32,
            TensorData::U64(_) => DType::U64,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_variant!(&self.data, v => v.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes this a 1-D tensor of `n` elements on its own storage: the first `min(len, n)`
    /// elements are kept, new ones are zero. Output arrays rewritten by every run reuse one
    /// allocation this way (no fresh pages to fault in, nothing cleared that is overwritten).
    pub fn resize_1d(&mut self, n: usize) {
        fn fit<T: Clone + Default>(v: &mut Vec<T>, n: usize) {
            if v.len() > n {
                v.truncate(n);
            } else {
                v.resize(n, T::default());
            }
        }
        each_variant!(&mut self.data, v => fit(v, n));
        self.shape = vec![n];
    }

    /// Element `i` (flat index) as `f64`. Panics when `i` is out of range, like slice indexing.
    pub fn get_f64(&self, i: usize) -> f64 {
        match &self.data {
            TensorData::Bool(v) => v[i] as u8 as f64,
            TensorData::I8(v) => v[i] as f64,
            TensorData::I16(v) => v[i] as f64,
            TensorData::I32(v) => v[i] as f64,
            TensorData::I64(v) => v[i] as f64,
            TensorData::U8(v) => v[i] as f64,
            TensorData::U16(v) => v[i] as f64,
            TensorData::U32(v) => v[i] as f64,
            TensorData::U64(v) => v[i] as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::BF16(v) => v[i].to_f64(),
            TensorData::F32(v) => v[i] as f64,
            TensorData::F64(v) => v[i],
        }
    }

    /// Element `i` as `i64` (floats truncate toward zero).
    pub fn get_i64(&self, i: usize) -> i64 {
        match &self.data {
            TensorData::Bool(v) => v[i] as i64,
            TensorData::I8(v) => v[i] as i64,
            TensorData::I16(v) => v[i] as i64,
            TensorData::I32(v) => v[i] as i64,
            TensorData::I64(v) => v[i],
            TensorData::U8(v) => v[i] as i64,
            TensorData::U16(v) => v[i] as i64,
            TensorData::U32(v) => v[i] as i64,
            TensorData::U64(v) => v[i] as i64,
            TensorData::F16(v) => v[i].to_f64() as i64,
            TensorData::BF16(v) => v[i].to_f64() as i64,
            TensorData::F32(v) => v[i] as i64,
            TensorData::F64(v) => v[i] as i64,
        }
    }

    /// Sets element `i` from an `f64`, converting (with rounding or truncation) to the dtype.
    pub fn set_f64(&mut self, i: usize, x: f64) {
        match &mut self.data {
            TensorData::Bool(v) => v[i] = x != 0.0,
            TensorData::I8(v) => v[i] = x as i8,
            TensorData::I16(v) => v[i] = x as i16,
            TensorData::I32(v) => v[i] = x as i32,
            TensorData::I64(v) => v[i] = x as i64,
            TensorData::U8(v) => v[i] = x as u8,
            TensorData::U16(v) => v[i] = x as u16,
            TensorData::U32(v) => v[i] = x as u32,
            TensorData::U64(v) => v[i] = x as u64,
            TensorData::F16(v) => v[i] = f16::from_f64(x),
            TensorData::BF16(v) => v[i] = bf16::from_f64(x),
            TensorData::F32(v) => v[i] = x as f32,
            TensorData::F64(v) => v[i] = x,
        }
    }

    /// Sets element `i` from an `i64`, wrapping to the dtype's width.
    pub fn set_i64(&mut self, i: usize, x: i64) {
        match &mut self.data {
            TensorData::Bool(v) => v[i] = x != 0,
            TensorData::I8(v) => v[i] = x as i8,
            TensorData::I16(v) => v[i] = x as i16,
            TensorData::I32(v) => v[i] = x as i32,
            TensorData::I64(v) => v[i] = x,
            TensorData::U8(v) => v[i] = x as u8,
            TensorData::U16(v) => v[i] = x as u16,
            TensorData::U32(v) => v[i] = x as u32,
            TensorData::U64(v) => v[i] = x as u64,
            TensorData::F16(v) => v[i] = f16::from_f64(x as f64),
            TensorData::BF16(v) => v[i] = bf16::from_f64(x as f64),
            TensorData::F32(v) => v[i] = x as f32,
            TensorData::F64(v) => v[i] = x as f64,
        }
    }

    /// All elements as `f64`.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get_f64(i)).collect()
    }
    /// All elements as `i64`.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        (0..self.len()).map(|i| self.get_i64(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfilled_tensor_takes_what_was_written_through_its_address() {
        for dtype in [DType::I32, DType::I64, DType::F32, DType::F64, DType::F16] {
            let mut t = Tensor::unfilled(dtype, 5).expect("a host dtype");
            assert_eq!((t.len(), t.shape.clone(), t.dtype()), (0, vec![0], dtype));
            // What a kernel does: writes every element through the storage's address.
            let (ptr, size) = match &mut t.data {
                TensorData::I32(v) => (v.as_mut_ptr().cast::<u8>(), 4),
                TensorData::I64(v) => (v.as_mut_ptr().cast::<u8>(), 8),
                TensorData::F32(v) => (v.as_mut_ptr().cast::<u8>(), 4),
                TensorData::F64(v) => (v.as_mut_ptr().cast::<u8>(), 8),
                TensorData::F16(v) => (v.as_mut_ptr().cast::<u8>(), 2),
                _ => unreachable!(),
            };
            // SAFETY: the storage has room for 5 elements of `size` bytes; all-zero bytes are
            // 0 in every one of these types.
            unsafe {
                std::ptr::write_bytes(ptr, 0, 5 * size);
                t.assume_filled(5);
            }
            assert_eq!((t.len(), t.shape.clone()), (5, vec![5]));
            assert_eq!(t.to_f64_vec(), vec![0.0; 5]);
            t.set_f64(4, 3.0);
            assert_eq!(t.get_f64(4), 3.0);
        }
        assert_eq!(
            Tensor::unfilled(DType::Handle, 1),
            Err(NoHostDType(DType::Handle))
        );
    }
}
