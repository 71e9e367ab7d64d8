//! Sparse formats: host tensors, file IO (.mtx, .tns, .npy) and packing of COO data into the
//! storage that a buffer's sparse axes declare.

pub mod builders;
pub mod containers;
pub mod convert;
pub mod coo;
pub mod gen;
pub mod limits;
pub mod mlir;
pub mod mtx;
pub mod npy;
pub mod pack;
pub mod tensor;
pub mod tns;

pub use containers::{
    Bsr, BsrPadding, Csc, Csf, CsfLevel, Csr, Dcsr, Ell, FormatError, Index, Nm, Ragged, Value,
};
pub use convert::{Duplicates, Triplet};
pub use coo::{Coo, CooError, Field};
pub use mtx::{read_mtx, write_mtx, MtxError};
pub use npy::{read_npy, write_npy, NpyError};
pub use pack::{
    group_layout, pack, unpack, validate_levels, LevelSpec, PackError, Packed, PackedLevel,
};
pub use tensor::{NoHostDType, Tensor, TensorData};
pub use tns::{read_tns, write_tns, TnsError};
