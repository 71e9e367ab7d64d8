//! Statements that are intrinsic calls (`T.evaluate(...)`): `T.atomic_add` as an atomic
//! update, `T.sort_range`, and the group writes `T.compress64` / `T.compress_iota64` through the
//! prelude's helpers; any other expression is evaluated for its effects.

use super::*;

impl<'f> Writer<'f> {
    pub(super) fn write_evaluate(&mut self, e: &Expr) -> Res<()> {
        if let Expr::Call {
            op: Intrinsic::AtomicAdd,
            args,
            ..
        } = e
        {
            let [Expr::Load { buffer, indices }, value] = args.as_slice() else {
                return Err(
                    self.invalid("`atomic_add` takes a buffer element `A[idx]` and a value")
                );
            };
            if self.target == Target::Cuda {
                return self.write_cuda_atomic(*buffer, indices, value);
            }
            let bdt = self.buf_dtype(*buffer);
            if bdt.is_bool() {
                return Err(self.unsupported("atomic_add", "the target buffer is boolean"));
            }
            if half::is_half(bdt) {
                return Err(self.unsupported(
                    "atomic_add",
                    format!("the target buffer is {bdt} (accumulate in float32 instead)"),
                ));
            }
            let (v, vdt) = self.expr(value)?;
            let off = self.offset(*buffer, indices)?;
            let name = self.buf_name(*buffer)?.to_string();
            let v = cast(v, vdt, binary_result_dtype(bdt, vdt));
            self.pragma("omp atomic update");
            self.line(&format!("{name}[{off}] += {};", strip_parens(&v)));
            return Ok(());
        }
        if let Expr::Call {
            op: Intrinsic::SortRange,
            args,
            ..
        } = e
        {
            let [Expr::Load { buffer, indices }, count] = args.as_slice() else {
                return Err(
                    self.invalid("`sort_range` takes a buffer element `X[idx]` and a count")
                );
            };
            if self.target == Target::Cuda {
                return Err(self.unsupported("sort_range", "the CUDA target has no sort yet"));
            }
            let suffix = match self.buf_dtype(*buffer) {
                DType::I32 => "i32",
                DType::I64 => "i64",
                d => {
                    return Err(
                        self.unsupported("sort_range", format!("sorting {d} (int32/int64 only)"))
                    )
                }
            };
            let (n, _) = self.expr(count)?;
            let off = self.offset(*buffer, indices)?;
            let name = self.buf_name(*buffer)?.to_string();
            self.line(&format!(
                "sptir_sort_{suffix}({name} + ({}), (int64_t)({}));",
                strip_parens(&off),
                strip_parens(&n)
            ));
            return Ok(());
        }
        if let Expr::Call {
            op: op @ (Intrinsic::Compress64 | Intrinsic::CompressIota64),
            args,
            ..
        } = e
        {
            return self.write_compress64(*op, args);
        }
        if let Expr::Call {
            op: Intrinsic::CopyRange,
            args,
            ..
        } = e
        {
            return self.write_copy_range(args);
        }
        let (s, _) = self.expr(e)?;
        self.line(&format!("(void){s};"));
        Ok(())
    }

    /// `T.compress64(D[i], S[j], mask)` / `T.compress_iota64(D[i], base, mask)`: the prelude's
    /// `sptir_compress64_<bits>` (a masked load, a compress and a masked store per 64 bytes
    /// where the target has AVX-512, a loop over the set bits otherwise) or
    /// `sptir_compress_iota64_<bits>`.
    pub(super) fn write_compress64(&mut self, op: Intrinsic, args: &[Expr]) -> Res<()> {
        let name = op.name();
        let [Expr::Load { buffer, indices }, src, mask] = args else {
            return Err(self.invalid(format!(
                "`{name}` takes a destination element `D[i]`, a {} and a mask",
                if op == Intrinsic::Compress64 {
                    "source element `S[j]`"
                } else {
                    "base"
                }
            )));
        };
        if self.target == Target::Cuda {
            return Err(self.unsupported(name, format!("`{name}` is written for CPUs only")));
        }
        let ddt = self.buf_dtype(*buffer);
        let (m, mdt) = self.expr(mask)?;
        if !mdt.is_integer() {
            return Err(self.invalid(format!("`{name}`: the mask is an integer, not {mdt}")));
        }
        let m = cast(m, mdt, DType::U64);
        let doff = self.offset(*buffer, indices)?;
        let dname = self.buf_name(*buffer)?.to_string();
        let dst = format!("{dname} + ({})", strip_parens(&doff));
        let bits = ddt.bits();
        let line = if op == Intrinsic::Compress64 {
            let Expr::Load {
                buffer: sb,
                indices: si,
            } = src
            else {
                return Err(self.invalid("`compress64`: the source is a buffer element `S[j]`"));
            };
            let sdt = self.buf_dtype(*sb);
            if sdt != ddt || ddt.is_bool() || !matches!(bits, 8 | 16 | 32 | 64) {
                return Err(self.unsupported(
                    name,
                    format!("`compress64` copies 8/16/32/64-bit elements of one dtype, not {sdt} to {ddt}"),
                ));
            }
            let soff = self.offset(*sb, si)?;
            let sname = self.buf_name(*sb)?.to_string();
            format!(
                "sptir_compress64_{bits}({dst}, {sname} + ({}), {});",
                strip_parens(&soff),
                strip_parens(&m)
            )
        } else {
            if !matches!(ddt, DType::I32 | DType::I64) {
                return Err(self.unsupported(
                    name,
                    format!("`compress_iota64` writes int32 or int64, not {ddt}"),
                ));
            }
            let (b, bdt) = self.expr(src)?;
            let wide = if bits == 64 { DType::I64 } else { DType::I32 };
            format!(
                "sptir_compress_iota64_{bits}({dst}, {}, {});",
                strip_parens(&cast(b, bdt, wide)),
                strip_parens(&m)
            )
        };
        self.uses_compress64 = true;
        self.line(&line);
        Ok(())
    }

    /// `T.copy_range(D[i], S[j], n)`: a `memcpy` of `n` elements when `n > 0`.
    pub(super) fn write_copy_range(&mut self, args: &[Expr]) -> Res<()> {
        let [Expr::Load { buffer, indices }, Expr::Load {
            buffer: sb,
            indices: si,
        }, n] = args
        else {
            return Err(self.invalid(
                "`copy_range` takes a destination element `D[i]`, a source element `S[j]` and a \
                 count",
            ));
        };
        if self.target == Target::Cuda {
            return Err(self.unsupported("copy_range", "`copy_range` is written for CPUs only"));
        }
        let (ddt, sdt) = (self.buf_dtype(*buffer), self.buf_dtype(*sb));
        if ddt != sdt {
            return Err(self.unsupported(
                "copy_range",
                format!("`copy_range` copies between buffers of one dtype, not {sdt} to {ddt}"),
            ));
        }
        let ct = self.storage_ctype(ddt, "copy_range")?;
        let (n, ndt) = self.expr(n)?;
        let n = cast(n, ndt, DType::I64);
        let doff = self.offset(*buffer, indices)?;
        let soff = self.offset(*sb, si)?;
        let dname = self.buf_name(*buffer)?.to_string();
        let sname = self.buf_name(*sb)?.to_string();
        self.line(&format!("if ({n} > 0) {{"));
        self.indent += 1;
        self.line(&format!(
            "memcpy({dname} + ({}), {sname} + ({}), (size_t)({n}) * sizeof({ct}));",
            strip_parens(&doff),
            strip_parens(&soff),
        ));
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}
