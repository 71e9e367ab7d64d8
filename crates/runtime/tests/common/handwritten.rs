//! Hand-written CUDA modules for the emulator tests of the tensor copy engine, clusters and
//! mbarriers (`cuda_tma.rs`, `cuda_cluster.rs`, `cuda_mbar_order.rs`): their kernels' arguments
//! and the function parameters they name, and what their copies and rings must give.

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

/// The raw shared tile after copying the box at (c0, c1) of the `cols x rows` matrix `m`
/// (elements past the view zero), element by element in shared-memory order: box element
/// (r, c) at byte `a ^ (((a >> 7) & 7) << 4)`, `a = r * row_bytes + c * elem` (128-byte
/// swizzle, as measured on an H200).
pub fn want_box<T: Copy + Default>(
    m: &[T],
    (cols, rows): (usize, usize),
    [bc, br]: [usize; 2],
    (c0, c1): (usize, usize),
) -> Vec<T> {
    let elem = std::mem::size_of::<T>();
    let mut tile = vec![T::default(); bc * br];
    for r in 0..br {
        for c in 0..bc {
            let (gr, gc) = (c1 + r, c0 + c);
            let v = if gr < rows && gc < cols {
                m[gr * cols + gc]
            } else {
                T::default()
            };
            let a = r * bc * elem + c * elem;
            tile[(a ^ (((a >> 7) & 7) << 4)) / elem] = v;
        }
    }
    tile
}

/// Sums of a ring of stages over clusters of `cx` blocks of `threads` threads (a multiple of
/// 64; `cx` = 1: no cluster): block `b`, thread t, the stage elements k = t (mod 64) of every
/// iteration, each stage `cx` boxes of 32 x 8 of the `cols x rows` matrix `x`.
pub fn want_ring(
    x: &[f32],
    (cols, rows): (usize, usize),
    (cx, threads): (usize, usize),
    iters: usize,
    b: usize,
) -> Vec<f32> {
    let mut want = vec![0.0f32; threads];
    for it in 0..iters {
        let stage: Vec<f32> = (0..cx)
            .flat_map(|r| want_box(x, (cols, rows), [32, 8], (32 * (b / cx), 8 * (it * cx + r))))
            .collect();
        for (k, v) in stage.iter().enumerate() {
            for j in 0..threads / 64 {
                want[k % 64 + 64 * j] += v;
            }
        }
    }
    want
}
