//! Vector loads on the CUDA target: a `vectorize`d loop of 2, 4 (float32) or 8 (16-bit floats)
//! iterations whose reads of a buffer the kernel only reads are consecutive and aligned reads
//! each as one vector load (`sptir_ld2`/`sptir_ld4`/`sptir_ld8h`); a copy of such a run into a
//! shared window as one 16-byte store (`sptir_st8h`) or, double-buffered, one `cp.async`.

use super::*;

impl Writer<'_> {
    /// A vectorized loop of 2 or 4 iterations (8 over a 16-bit float buffer) over one block
    /// (whose predicate, if any, the loop does not move: it then guards the whole) whose reads
    /// of a float buffer the kernel never writes are consecutive in the loop and aligned to the
    /// width: those reads become one vector load each (`sptir_ld4`/`sptir_ld2`/`sptir_ld8h`, 16
    /// or 8 bytes per thread) before the iterations, which are written out one by one reading
    /// the vector's components. Returns false (nothing written) when the loop is not of that
    /// form.
    pub(super) fn write_vector_loads(&mut self, f: &For) -> Res<bool> {
        let Some(width) = const_int(&f.extent).filter(|n| [2, 4, 8].contains(n)) else {
            return Ok(false);
        };
        if const_int(&f.min) != Some(0) {
            return Ok(false);
        }
        let Stmt::Block(b) = f.body.single() else {
            return Ok(false);
        };
        if b.init.is_some() || !b.alloc_buffers.is_empty() {
            return Ok(false);
        }
        let map = bindings(b);
        // A predicate the vector loop does not move (a row guard): the vector loads and the
        // iterations run under it.
        let guard = match &b.predicate {
            Some(p) => {
                let p = subst(p, &map);
                if mentions(&p, &[f.var]) {
                    return Ok(false);
                }
                Some(p)
            }
            None => None,
        };
        let mut loads = Vec::new();
        b.body.for_each_expr(|e| {
            e.visit(&mut |x| {
                if matches!(x, Expr::Load { .. }) && !loads.contains(x) {
                    loads.push(x.clone());
                }
            })
        });
        let mut vecs: Vec<(Expr, Vec<Expr>)> = Vec::new();
        for l in loads {
            let Expr::Load { buffer, indices } = &l else {
                continue;
            };
            let dt = self.buf_dtype(*buffer);
            let ok_type = match width {
                8 => dt.bytes() == 2 && dt.is_float(),
                4 => dt == DType::F32,
                _ => dt == DType::F32 || dt == DType::F64,
            };
            let readonly = self
                .kernel
                .as_ref()
                .is_some_and(|k| k.readonly.contains(buffer));
            if !ok_type || !readonly || self.is_shared(*buffer) || indices.is_empty() {
                continue;
            }
            let Some(info) = self.bufs.get(buffer.index()).cloned().flatten() else {
                continue;
            };
            let n = indices.len();
            let outer: Vec<Expr> = indices.iter().map(|i| subst(i, &map)).collect();
            // Consecutive: only the last index moves, by exactly the loop variable.
            if outer[..n - 1].iter().any(|i| mentions(i, &[f.var])) {
                continue;
            }
            let Some(last) = affine(&outer[n - 1]) else {
                continue;
            };
            let step: i64 = last
                .terms
                .iter()
                .filter(|(t, _)| *t == Expr::Var(f.var))
                .map(|(_, c)| *c)
                .sum();
            let moves_otherwise = last
                .terms
                .iter()
                .any(|(t, _)| *t != Expr::Var(f.var) && mentions(t, &[f.var]));
            if step != 1 || moves_otherwise {
                continue;
            }
            // Aligned: the offset at the first iteration is a multiple of the width.
            let aligned_last = last.constant % width == 0
                && last
                    .terms
                    .iter()
                    .all(|(t, c)| *t == Expr::Var(f.var) || c % width == 0);
            let aligned_strides = info.strides.iter().enumerate().all(|(d, s)| match s {
                Stride::Const(c) if d + 1 == n => *c == 1,
                Stride::Const(c) => c % width == 0,
                Stride::Local(_) => false,
            });
            if !aligned_last || !aligned_strides {
                continue;
            }
            let at_first: Vec<Expr> = outer
                .iter()
                .map(|i| subst(i, &HashMap::from([(f.var, Expr::int(0))])))
                .collect();
            vecs.push((l.clone(), at_first));
        }
        if vecs.is_empty() {
            return Ok(false);
        }
        let div = match &guard {
            Some(p) => {
                let (t, _) = self.expr(p)?;
                self.line(&format!("if ({}) {{", strip_parens(&t)));
                self.indent += 1;
                Some(self.enter_divergence(p))
            }
            None => None,
        };
        // A copy of the loaded run into a run of a shared window (the body one store of the
        // load, same 16-bit type): one 16-byte load and store — or, copying into a
        // double-buffered window, one `cp.async`, global to shared directly.
        if let Some(dst) = self.window_copy(f, b, &map, &vecs, width)? {
            let [(Expr::Load { buffer: src, .. }, src_first)] = vecs.as_slice() else {
                unreachable!("`window_copy` takes one load")
            };
            let soff = self.offset(*src, src_first)?;
            let sname = self.buf_name(*src)?.to_string();
            if self.cp_async {
                self.line(&format!("sptir_cp_async16({dst}, {sname} + {soff});"));
            } else {
                let name = self.namer.fresh(&format!("{sname}_v"));
                self.line(&format!(
                    "const sptir_h8 {name} = sptir_ld8h({sname} + {soff});"
                ));
                self.line(&format!("sptir_st8h({dst}, {name});"));
            }
            if let Some(d) = div {
                self.leave_divergence(d);
                self.indent -= 1;
                self.line("}");
            }
            return Ok(true);
        }
        let mut subs = Vec::new();
        for (load, at_first) in &vecs {
            let Expr::Load { buffer, .. } = load else {
                continue;
            };
            let dt = self.buf_dtype(*buffer);
            let (ty, func) = match (dt, width) {
                (DType::F64, _) => ("double2", "sptir_ld2"),
                (_, 8) => ("sptir_h8", "sptir_ld8h"),
                (_, 4) => ("float4", "sptir_ld4"),
                _ => ("float2", "sptir_ld2"),
            };
            let off = self.offset(*buffer, at_first)?;
            let bname = self.buf_name(*buffer)?.to_string();
            let name = self.namer.fresh(&format!("{bname}_v"));
            self.line(&format!("const {ty} {name} = {func}({bname} + {off});"));
            subs.push((load.clone(), name));
        }
        let (vdt, ct, _) = self.loop_var_type(f)?;
        for u in 0..width {
            self.line("{");
            self.indent += 1;
            let v = self.bind(f.var)?;
            self.line(&format!("const {ct} {v} = {};", int_literal(u, vdt)));
            self.vec_sub = Some((subs.clone(), u as usize));
            let r = self.write_stmt(&f.body);
            self.vec_sub = None;
            self.unbind(f.var);
            r?;
            self.indent -= 1;
            self.line("}");
        }
        if let Some(d) = div {
            self.leave_divergence(d);
            self.indent -= 1;
            self.line("}");
        }
        Ok(true)
    }

    /// Where a vectorized loop `f` of 8 over block `b` (iterators `map`) copies its one
    /// vector-loaded run (`vecs`): the address (C text) of the run of a shared window that its
    /// body's only statement stores that load into, same 16-bit type, consecutive and aligned;
    /// `None` for any other loop.
    fn window_copy(
        &mut self,
        f: &For,
        b: &Block,
        map: &HashMap<VarId, Expr>,
        vecs: &[(Expr, Vec<Expr>)],
        width: i64,
    ) -> Res<Option<String>> {
        let ([(load, _)], Stmt::Store(st)) = (vecs, b.body.single()) else {
            return Ok(None);
        };
        let at: Vec<Expr> = st.indices.iter().map(|i| subst(i, map)).collect();
        let same = matches!(load, Expr::Load { buffer, .. }
            if self.buf_dtype(*buffer) == self.buf_dtype(st.buffer));
        if width != 8 || !same || st.value != *load || !self.shared_run(st.buffer, &at, f.var, 8) {
            return Ok(None);
        }
        let first: Vec<Expr> = at
            .iter()
            .map(|i| subst(i, &HashMap::from([(f.var, Expr::int(0))])))
            .collect();
        let off = self.offset(st.buffer, &first)?;
        Ok(Some(format!("{} + {off}", self.buf_name(st.buffer)?)))
    }
}
