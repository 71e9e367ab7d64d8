//! Sparse formats: host tensors, file IO (.mtx, .tns, .npy) and packing of COO data into the
//! storage that a buffer's sparse axes declare.

pub mod tensor;

pub use tensor::{NoHostDType, Tensor, TensorData};
