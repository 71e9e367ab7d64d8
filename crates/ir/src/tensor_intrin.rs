//! Tensor intrinsics: the tensor-core instructions a loop nest can be replaced by, and the shape
//! of nest each one replaces. `sch.tensorize` / `sch.sparse_tensorize` check a nest against
//! [`TensorIntrin::nest`] and mark its outer loop with [`TENSORIZE_ATTR`]; the CUDA writer reads
//! the mark, checks the same nest (and the operands it can only judge with the buffers' layouts)
//! and writes the instruction.

use crate::{AttrValue, DType, Expr, PrimFunc};
use crate::{Block, For, ForKind, Stmt, VarId};

/// The loop annotation naming a loop nest's tensor intrinsic.
pub const TENSORIZE_ATTR: &str = "tensorize";

/// A tensor-core instruction a loop nest can become.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorIntrin {
    /// `mma.sync` m16n8k16: `C[16 x 8] += A[16 x 16] · B[16 x 8]`, A and B float16 or
    /// bfloat16, C float32.
    MmaM16n8k16,
    /// `mma.sp` m16n8k32: the same with A 2:4 structured sparse (16 rows of 8 groups of 2
    /// stored values) and B 32 x 8.
    MmaSpM16n8k32,
    /// The 16 x 8 float32 accumulator tile set to one value.
    MmaFillM16n8,
}

impl TensorIntrin {
    pub const ALL: [TensorIntrin; 3] = [
        TensorIntrin::MmaM16n8k16,
        TensorIntrin::MmaSpM16n8k32,
        TensorIntrin::MmaFillM16n8,
    ];

    /// The name schedules use.
    pub fn name(self) -> &'static str {
        match self {
            TensorIntrin::MmaM16n8k16 => "mma_m16n8k16",
            TensorIntrin::MmaSpM16n8k32 => "mma_sp_m16n8k32",
            TensorIntrin::MmaFillM16n8 => "mma_fill_m16n8",
        }
    }

    pub fn from_name(name: &str) -> Option<TensorIntrin> {
        TensorIntrin::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The intrinsic a loop is marked with, if any.
    pub fn of(f: &For) -> Option<TensorIntrin> {
        match f.annotations.get(TENSORIZE_ATTR) {
            Some(AttrValue::Str(s)) => TensorIntrin::from_name(s),
            _ => None,
        }
    }

    /// The extents of the nest's loops, outermost first (rows, columns, then the reduction).
    pub fn extents(self) -> &'static [i64] {
        match self {
            TensorIntrin::MmaM16n8k16 => &[16, 8, 16],
            TensorIntrin::MmaSpM16n8k32 => &[16, 8, 8, 2],
            TensorIntrin::MmaFillM16n8 => &[16, 8],
        }
    }

    /// Whether the block's store accumulates a product (`C = C + A * B`), not a fill.
    pub fn is_product(self) -> bool {
        self != TensorIntrin::MmaFillM16n8
    }

    /// The nest under `f` that this intrinsic replaces: its loop variables (outermost first,
    /// one per extent) and the block at the bottom; or why `f` does not hold one. Every loop
    /// runs from 0 over its extent, is not bound to threads and holds exactly the next one; the
    /// innermost holds exactly one block, with no init and no allocation.
    pub fn nest(self, f: &For) -> Result<(Vec<VarId>, &Block), String> {
        let extents = self.extents();
        let mut vars = Vec::with_capacity(extents.len());
        let mut cur = f;
        for (d, &ext) in extents.iter().enumerate() {
            if cur.min.as_int() != Some(0) || cur.extent.as_int() != Some(ext) {
                return Err(format!(
                    "loop {} of the nest must run 0..{ext} (the tile is {})",
                    d + 1,
                    extents
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(" x ")
                ));
            }
            if cur.kind == ForKind::ThreadBinding {
                return Err("a loop of the tile is bound to threads".into());
            }
            vars.push(cur.var);
            if d + 1 < extents.len() {
                match cur.body.single() {
                    Stmt::For(next) => cur = next,
                    _ => return Err(format!("loop {} must hold exactly one loop", d + 1)),
                }
            }
        }
        let Stmt::Block(b) = cur.body.single() else {
            return Err("the innermost loop must hold exactly one block".into());
        };
        if b.init.is_some() {
            return Err(format!(
                "block `{}` has an init (split it off first: `decompose_reduction`)",
                b.name
            ));
        }
        if !b.alloc_buffers.is_empty() {
            return Err(format!("block `{}` allocates buffers", b.name));
        }
        Ok((vars, b))
    }

    /// What can be checked of the block's store without the buffers' layouts: a product form
    /// stores `C[..] = C[..] + x * y` into a float32 `C`, with `x` and `y` (casts to float32
    /// aside) loads of, or values rounded to, the same 16-bit float type; a fill stores into
    /// a float32 buffer.
    pub fn check_store(self, func: &PrimFunc, b: &Block) -> Result<(), String> {
        let Stmt::Store(st) = b.body.single() else {
            return Err(format!("block `{}` must hold exactly one store", b.name));
        };
        let c = &func.buffers[st.buffer];
        if c.dtype != DType::F32 {
            return Err(format!(
                "the tile is stored into `{}` of {}, but the accumulator is float32",
                c.name, c.dtype
            ));
        }
        if !self.is_product() {
            return Ok(());
        }
        let form = "the block must store `C[..] = C[..] + A[..] * B[..]`";
        let Expr::Binary(crate::BinOp::Add, acc, prod) = &st.value else {
            return Err(form.into());
        };
        let is_c = matches!(&**acc, Expr::Load { buffer, indices }
            if *buffer == st.buffer && *indices == st.indices);
        let Expr::Binary(crate::BinOp::Mul, x, y) = &**prod else {
            return Err(form.into());
        };
        if !is_c {
            return Err(format!("{form} (it does not add to the element it stores)"));
        }
        let sixteen = |e: &Expr| -> Option<DType> {
            let e = match e {
                Expr::Cast(DType::F32, inner) => &**inner,
                other => other,
            };
            let dt = match e {
                Expr::Load { buffer, .. } => func.buffers[*buffer].dtype,
                Expr::Cast(dt, _) => *dt,
                _ => return None,
            };
            matches!(dt, DType::F16 | DType::BF16).then_some(dt)
        };
        match (sixteen(x), sixteen(y)) {
            (Some(a), Some(b)) if a == b => Ok(()),
            (a, b) => Err(format!(
                "the factors must both be float16 or both bfloat16 (loads, or values rounded to \
                 the type), got {} and {}",
                a.map_or("another type".to_string(), |d| d.to_string()),
                b.map_or("another type".to_string(), |d| d.to_string())
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in TensorIntrin::ALL {
            assert_eq!(TensorIntrin::from_name(t.name()), Some(t));
        }
        assert_eq!(TensorIntrin::from_name("wmma"), None);
    }
}
