//! Hand-written CUDA modules for the emulator tests of the tensor copy engine, clusters and
//! mbarriers (`cuda_tma.rs`, `cuda_cluster.rs`, `cuda_mbar_order.rs`): their kernels' arguments
//! and the function parameters they name.

use std::collections::HashMap;

use sparsetir_codegen::cuda::{KernelArg, LaunchExpr, TensorMapArg};
use sparsetir_codegen::{CParam, CParamKind};
use sparsetir_ir::DType;

/// One kernel argument: name, dtype, C type, and what it is.
#[derive(Clone, Copy)]
pub enum Kind {
    In,
    Out,
    Scalar,
    /// A tensor map: box `[columns, rows]` and swizzle.
    Map([u32; 2], u32),
}

pub type ArgSpec<'a> = (&'a str, DType, &'a str, Kind);

pub fn params_and_args(
    params: &mut Vec<CParam>,
    index: &mut HashMap<String, usize>,
    spec: &[ArgSpec<'_>],
) -> Vec<KernelArg> {
    spec.iter()
        .map(|&(name, dtype, ctype, kind)| {
            // A map's buffer is the parameter of its name less the `_map` suffix.
            let buffer = name.strip_suffix("_map").unwrap_or(name);
            let param = *index.entry(buffer.to_string()).or_insert_with(|| {
                params.push(CParam {
                    name: buffer.to_string(),
                    kind: if matches!(kind, Kind::Scalar) {
                        CParamKind::Scalar(dtype)
                    } else {
                        CParamKind::Array { elem: dtype }
                    },
                });
                params.len() - 1
            });
            KernelArg {
                param,
                name: name.to_string(),
                dtype,
                ctype: ctype.to_string(),
                pointer: !matches!(kind, Kind::Scalar),
                readonly: !matches!(kind, Kind::Out),
                tensor_map: match kind {
                    Kind::Map(box_dims, swizzle) => Some(TensorMapArg {
                        // (The launches below pass the view themselves.)
                        dims: [LaunchExpr::Const(0), LaunchExpr::Const(0)],
                        box_dims,
                        swizzle,
                    }),
                    _ => None,
                },
            }
        })
        .collect()
}
