//! Runtime glue between user data and sparsetir functions: binds files and arrays to a
//! function's buffers (packing sparse data into the storage its axes declare and inferring size
//! parameters), and reads results back as dense arrays or COO.

pub mod bind;

pub use bind::{read_output, BindError, Binder, Output};
