//! Frozen arrays and the validation they save: an immutable array with a process-unique
//! identity ([`FrozenArray`]), and the memo ([`ValidationMemo`]) through which a kernel launched
//! again on the same frozen structure skips reading that structure again.
//!
//! Validating a launch reads the contents of some of its arrays (an axis's `indptr` and
//! `indices`, index-valued buffers, arrays a schedule trusts to be distinct or monotone) and
//! only the dtype and length of the others. What validation concludes is therefore a function
//! of the scalars, of every array's dtype and length, and of the contents of the arrays it
//! read. When every array it read is frozen, that is all in the launch's [`LaunchShape`]
//! (frozen arrays are named by identity), and a later launch with an equal shape would pass
//! validation the same way: the memo lets it through without reading anything. GNN training
//! launches the same kernels on one graph thousands of times; its structure is read once.
//!
//! Architecture invariant: a [`FrozenArray`]'s elements never change after `new`, and no two
//! frozen arrays of one process share an identity (a counter, never reused). Nothing hands out
//! a writable view of one: [`ArrayRef::frozen`] is read-only, and `Kernel::launch` refuses a
//! read-only array for a parameter the kernel writes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sparsetir_cuda::{Context, CudaError, DeviceBuffer};
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc};

use crate::args::{ArrayRef, LaunchArg, LaunchArgs};
use crate::error::RunError;
use crate::validate::validate_reading;

/// Identities handed out so far; 0 is never one.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// An array whose elements never change, with an identity no other frozen array of this
/// process has: lend it to any number of launches ([`LaunchArgs::frozen`]), which validate its
/// contents once per kernel and shape instead of once per launch.
#[derive(Debug)]
pub struct FrozenArray {
    id: u64,
    tensor: Tensor,
    /// Its copy in GPU memory, made by the first GPU launch on it and kept while it lives.
    device: Mutex<Option<Arc<DeviceBuffer>>>,
}

impl FrozenArray {
    /// Freezes `tensor` (moved, not copied).
    pub fn new(tensor: Tensor) -> FrozenArray {
        FrozenArray {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            tensor,
            device: Mutex::new(None),
        }
    }

    /// The copy of the elements (`bytes`) in `ctx`'s GPU memory, made on first use: the
    /// elements never change, so every launch on the array reads the one copy.
    pub(crate) fn device_copy(
        &self,
        ctx: &Context,
        bytes: &[u8],
    ) -> Result<Arc<DeviceBuffer>, CudaError> {
        let mut d = self.device.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = d.as_ref() {
            return Ok(Arc::clone(b));
        }
        let b = Arc::new(DeviceBuffer::from_host(ctx, bytes)?);
        *d = Some(Arc::clone(&b));
        Ok(b)
    }
    /// The elements (read-only, for ever).
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
    /// This array's identity: equal identities mean the same elements.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The tensor back, ending the freeze.
    pub fn into_tensor(self) -> Tensor {
        self.tensor
    }
}

impl From<Tensor> for FrozenArray {
    fn from(t: Tensor) -> FrozenArray {
        FrozenArray::new(t)
    }
}

/// What one argument tells validation without its contents.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ArgShape {
    Int(i64),
    Float,
    Array {
        dtype: DType,
        len: usize,
        frozen: Option<u64>,
    },
}

/// A launch's arguments as validation sees them without reading any array: scalars, dtypes,
/// lengths and frozen identities, by parameter name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchShape(Vec<(String, ArgShape)>);

impl LaunchShape {
    pub fn of(args: &LaunchArgs<'_>) -> LaunchShape {
        let mut v: Vec<(String, ArgShape)> = args
            .iter()
            .map(|(name, a)| {
                let s = match a {
                    LaunchArg::Int(i) => ArgShape::Int(*i),
                    LaunchArg::Float(_) => ArgShape::Float,
                    LaunchArg::Array(t) => ArgShape::Array {
                        dtype: t.dtype(),
                        len: t.len(),
                        frozen: t.frozen_id(),
                    },
                };
                (name.to_string(), s)
            })
            .collect();
        v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        LaunchShape(v)
    }
}

/// How many shapes a memo keeps (the oldest is forgotten first): a kernel is launched on a
/// few structures at a time (a graph, its transpose, a batch's subgraphs).
pub const MEMO_CAPACITY: usize = 16;

/// The launch shapes a kernel's validation has passed with every array it read frozen.
#[derive(Debug, Default)]
pub struct ValidationMemo {
    passed: Mutex<VecDeque<LaunchShape>>,
    /// Validations that read the arrays (the others passed on a remembered shape).
    reads: AtomicU64,
}

impl ValidationMemo {
    pub fn new() -> ValidationMemo {
        ValidationMemo::default()
    }

    /// Validates `args` against `func` (the function this memo belongs to, always the same
    /// one): at once when a launch of the same shape passed before, else by reading the
    /// arrays, remembering the shape when every array read is frozen.
    pub fn validate(&self, func: &PrimFunc, args: &LaunchArgs<'_>) -> Result<(), RunError> {
        // Without a frozen array nothing could be remembered: no shape is built.
        let shape = args
            .iter()
            .any(|(_, a)| frozen(a))
            .then(|| LaunchShape::of(args));
        if shape.as_ref().is_some_and(|s| self.lock().contains(s)) {
            return Ok(());
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let read = validate_reading(func, args)?;
        if let Some(shape) = shape.filter(|_| read.iter().all(|p| args.get(p).is_some_and(frozen)))
        {
            let mut passed = self.lock();
            if !passed.contains(&shape) {
                if passed.len() == MEMO_CAPACITY {
                    passed.pop_front();
                }
                passed.push_back(shape);
            }
        }
        Ok(())
    }

    /// How many validations read the launch's arrays (the rest passed on a remembered shape).
    pub fn full_validations(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many shapes are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<LaunchShape>> {
        // A panic while holding the lock leaves a list of shapes that each passed: still true.
        self.passed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn frozen(a: &LaunchArg<'_>) -> bool {
    matches!(a, LaunchArg::Array(t) if t.frozen_id().is_some())
}

impl<'a> ArrayRef<'a> {
    /// A frozen array's elements, read-only, carrying its identity.
    pub fn frozen(f: &'a FrozenArray) -> ArrayRef<'a> {
        ArrayRef::of_tensor(&f.tensor)
            .with_frozen_id(f.id)
            .with_frozen_array(f)
    }
}

impl<'a> LaunchArgs<'a> {
    /// A frozen array the kernel only reads; launches of the same kernel on it validate its
    /// contents once.
    pub fn frozen(&mut self, name: &'a str, f: &'a FrozenArray) -> &mut Self {
        self.set(name, LaunchArg::Array(ArrayRef::frozen(f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// csrmm's arguments: A = [[1, 0, 2], [0, 0, 3]] (structure frozen or not), B = 3 x 2.
    struct Csrmm {
        indptr: FrozenArray,
        indices: FrozenArray,
        plain_indices: Vec<i32>,
        a: Vec<f32>,
        b: Vec<f32>,
        c: Vec<f32>,
    }

    fn csrmm() -> Csrmm {
        let i32s = |v: &[i64]| Tensor::from_i64(DType::I32, v).expect("tensor");
        Csrmm {
            indptr: FrozenArray::new(i32s(&[0, 2, 3])),
            indices: FrozenArray::new(i32s(&[0, 2, 2])),
            plain_indices: vec![0, 2, 2],
            a: vec![1.0, 2.0, 3.0],
            b: vec![1.0; 6],
            c: vec![0.0; 4],
        }
    }

    fn args<'a>(x: &'a mut Csrmm, nnz: i64, frozen_indices: bool) -> LaunchArgs<'a> {
        let mut args = LaunchArgs::new();
        args.int("m", 2)
            .int("n", 3)
            .int("nnz", nnz)
            .int("feat_size", 2);
        args.frozen("indptr", &x.indptr);
        if frozen_indices {
            args.frozen("indices", &x.indices);
        } else {
            args.read("indices", &x.plain_indices);
        }
        args.read("a", &x.a).read("b", &x.b).write("c", &mut x.c);
        args
    }

    #[test]
    fn frozen_identities_are_unique_and_views_carry_them() {
        let t = Tensor::from_i64(DType::I32, &[1, 2]).expect("tensor");
        let (f, g) = (FrozenArray::new(t.clone()), FrozenArray::from(t));
        assert_ne!(f.id(), g.id());
        assert_ne!(f.id(), 0);
        let v = ArrayRef::frozen(&f);
        assert_eq!((v.frozen_id(), v.is_writable()), (Some(f.id()), false));
        assert_eq!(v.as_slice::<i32>(), Some(&[1, 2][..]));
        assert_eq!(ArrayRef::read(&[1i32]).frozen_id(), None);
    }

    #[test]
    fn frozen_structure_is_read_once_per_shape() {
        let f = sparsetir_ops::load("csrmm").expect("csrmm");
        let memo = ValidationMemo::new();
        let mut x = csrmm();
        for _ in 0..3 {
            memo.validate(&f, &args(&mut x, 3, true)).expect("valid");
        }
        assert_eq!((memo.full_validations(), memo.len()), (1, 1));
        // Float operands are lent, not frozen: validation reads only their lengths, so new
        // values keep the shape; a short one is another shape, and refused.
        x.b = vec![5.0; 6];
        memo.validate(&f, &args(&mut x, 3, true)).expect("valid");
        assert_eq!(memo.full_validations(), 1);
        x.a.pop();
        let err = memo
            .validate(&f, &args(&mut x, 3, true))
            .expect_err("short a");
        assert!(matches!(err, RunError::ArrayTooShort { .. }), "{err}");
        x.a.push(3.0);
        // Another scalar is another shape, validated (and refused: indptr ends at 3).
        let err = memo
            .validate(&f, &args(&mut x, 2, true))
            .expect_err("nnz 2");
        assert!(matches!(err, RunError::Indptr { .. }), "{err}");
        assert_eq!((memo.full_validations(), memo.len()), (3, 1));
    }

    #[test]
    fn structure_read_but_not_frozen_is_read_every_time() {
        let f = sparsetir_ops::load("csrmm").expect("csrmm");
        let memo = ValidationMemo::new();
        let mut x = csrmm();
        memo.validate(&f, &args(&mut x, 3, false)).expect("valid");
        assert_eq!(memo.len(), 0, "indices were read and are not frozen");
        x.plain_indices[2] = 3;
        let err = memo
            .validate(&f, &args(&mut x, 3, false))
            .expect_err("column 3");
        assert!(matches!(err, RunError::Indices { .. }), "{err}");
        assert_eq!(memo.full_validations(), 2);
    }

    #[test]
    fn invalid_frozen_structure_is_refused_every_time() {
        let f = sparsetir_ops::load("csrmm").expect("csrmm");
        let memo = ValidationMemo::new();
        let mut x = csrmm();
        x.indices = FrozenArray::new(Tensor::from_i64(DType::I32, &[2, 0, 2]).expect("t"));
        for _ in 0..2 {
            let err = memo
                .validate(&f, &args(&mut x, 3, true))
                .expect_err("unsorted");
            assert!(err.to_string().contains("strictly increasing"), "{err}");
        }
        assert_eq!((memo.full_validations(), memo.len()), (2, 0));
    }

    #[test]
    fn the_memo_forgets_the_oldest_shape() {
        let f = sparsetir_ops::load("csrmm").expect("csrmm");
        let memo = ValidationMemo::new();
        let mut xs: Vec<Csrmm> = (0..=MEMO_CAPACITY).map(|_| csrmm()).collect();
        for x in &mut xs {
            memo.validate(&f, &args(x, 3, true)).expect("valid");
        }
        assert_eq!(memo.len(), MEMO_CAPACITY);
        let last = xs.len() - 1;
        memo.validate(&f, &args(&mut xs[last], 3, true))
            .expect("valid");
        assert_eq!(memo.full_validations(), MEMO_CAPACITY as u64 + 1);
        memo.validate(&f, &args(&mut xs[0], 3, true))
            .expect("valid");
        assert_eq!(
            memo.full_validations(),
            MEMO_CAPACITY as u64 + 2,
            "forgotten"
        );
    }
}
