//! Typed element access to host arrays for the stage II/III interpreter: reads an element as a
//! [`Value`] of the array's dtype and writes a value already converted to that dtype.

use half::{bf16, f16};
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::DType;

use crate::value::Value;

/// Element `i` of `t`, or `None` when `i` is past the end.
pub(crate) fn read(t: &Tensor, i: usize) -> Option<Value> {
    Some(match &t.data {
        TensorData::Bool(v) => Value::Bool(*v.get(i)?),
        TensorData::I8(v) => Value::Int(*v.get(i)? as i128, DType::I8),
        TensorData::I16(v) => Value::Int(*v.get(i)? as i128, DType::I16),
        TensorData::I32(v) => Value::Int(*v.get(i)? as i128, DType::I32),
        TensorData::I64(v) => Value::Int(*v.get(i)? as i128, DType::I64),
        TensorData::U8(v) => Value::Int(*v.get(i)? as i128, DType::U8),
        TensorData::U16(v) => Value::Int(*v.get(i)? as i128, DType::U16),
        TensorData::U32(v) => Value::Int(*v.get(i)? as i128, DType::U32),
        TensorData::U64(v) => Value::Int(*v.get(i)? as i128, DType::U64),
        TensorData::F16(v) => Value::Float(v.get(i)?.to_f64(), DType::F16),
        TensorData::BF16(v) => Value::Float(v.get(i)?.to_f64(), DType::BF16),
        TensorData::F32(v) => Value::Float(*v.get(i)? as f64, DType::F32),
        TensorData::F64(v) => Value::Float(*v.get(i)?, DType::F64),
    })
}

/// Writes `x` (already cast to the array's dtype) to element `i`; `false` when `i` is past the
/// end. Integers are stored modulo the element width, floats rounded to the element precision.
pub(crate) fn write(t: &mut Tensor, i: usize, x: Value) -> bool {
    if i >= t.len() {
        return false;
    }
    let n = x.as_i128();
    let f = x.as_f64();
    match &mut t.data {
        TensorData::Bool(v) => v[i] = x.truthy(),
        TensorData::I8(v) => v[i] = n as i8,
        TensorData::I16(v) => v[i] = n as i16,
        TensorData::I32(v) => v[i] = n as i32,
        TensorData::I64(v) => v[i] = n as i64,
        TensorData::U8(v) => v[i] = n as u8,
        TensorData::U16(v) => v[i] = n as u16,
        TensorData::U32(v) => v[i] = n as u32,
        TensorData::U64(v) => v[i] = n as u64,
        TensorData::F16(v) => v[i] = f16::from_f64(f),
        TensorData::BF16(v) => v[i] = bf16::from_f64(f),
        TensorData::F32(v) => v[i] = f as f32,
        TensorData::F64(v) => v[i] = f,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype() {
        for dt in DType::ALL {
            if dt == DType::Handle {
                continue;
            }
            let mut t = Tensor::zeros(dt, vec![3]).expect("host dtype");
            let x = Value::from_i128(-3, dt);
            assert!(write(&mut t, 1, x));
            assert_eq!(read(&t, 1), Some(x), "{dt}");
            assert_eq!(read(&t, 0), Some(Value::from_i128(0, dt)), "{dt}");
            assert_eq!(read(&t, 3), None);
            assert!(!write(&mut t, 3, x));
        }
        let mut t = Tensor::zeros(DType::U64, vec![1]).expect("host dtype");
        let big = Value::Int(u64::MAX as i128, DType::U64);
        assert!(write(&mut t, 0, big));
        assert_eq!(read(&t, 0), Some(big));
    }
}
