//! Assembled outputs in the stage-I interpreter: which axes and buffers the run assembles
//! (checked from the IR before any argument is read), and their structure and values written
//! back to the output parameters after the run.

use super::*;

impl<'f> Machine<'f> {
    /// The assembled axis whose nnz is the scalar parameter `v`, if any.
    pub(super) fn assembled_nnz_of(&self, v: VarId) -> Option<&AssembledAxis> {
        self.assembled_axes.iter().find(|x| x.nnz == v)
    }

    /// Finds the assembled axes and the buffers over them, and checks the supported form
    /// (from the IR alone, before any argument is read): a `compressed_varied` axis whose parent
    /// is a `dense_fixed` root, whose nnz is a scalar parameter, that no iteration walks and no
    /// axis has as parent; at most one buffer over it, `(parent, axis)` exactly; and parameters
    /// the run writes (its `indptr`, `indices`, nnz, the buffer's data) that play no other role.
    pub(super) fn plan_assembled(&mut self) -> Res<()> {
        let func = self.func;
        let axis_name = |a: AxisId| func.axes.get(a).map(|x| x.name.as_str()).unwrap_or("?");
        for (h, ax) in func.axes.iter() {
            self.span = ax.span;
            let name = &ax.name;
            if let Some(p) = ax
                .parent
                .filter(|p| func.axes.get(*p).is_some_and(|x| x.assembled))
            {
                return Err(self.err(format!(
                    "axis `{name}`: its parent `{}` is assembled; the evaluator assembles only the \
                     last level of an output",
                    axis_name(p)
                )));
            }
            if !ax.assembled {
                continue;
            }
            if ax.kind != AxisKind::CompressedVaried {
                return Err(self.err(format!(
                    "{} axis `{name}` cannot be assembled (only compressed_varied)",
                    ax.kind.canonical_name()
                )));
            }
            let root = ax
                .parent
                .and_then(|p| func.axes.get(p))
                .is_some_and(|p| p.kind == AxisKind::DenseFixed);
            if !root {
                return Err(self.err(format!(
                    "assembled axis `{name}`: its parent must be a dense_fixed root (the \
                     evaluator assembles the rows of a matrix only)"
                )));
            }
            let (Some(indptr), Some(indices)) = (ax.indptr, ax.indices) else {
                return Err(self.err(format!(
                    "assembled axis `{name}` needs indptr and indices parameters"
                )));
            };
            let nnz = match &ax.nnz {
                Some(Expr::Var(v))
                    if func.params.contains(v)
                        && func.vars.get(*v).is_some_and(|x| x.dtype.is_integer()) =>
                {
                    *v
                }
                _ => {
                    return Err(self.err(format!(
                        "assembled axis `{name}`: its nnz must be a plain integer scalar \
                         parameter, which the run sets to the number of stored elements"
                    )))
                }
            };
            self.assembled_axes.push(AssembledAxis {
                axis: h,
                indptr,
                indices,
                nnz,
                buffer: None,
            });
        }
        // The buffers over assembled axes.
        for &b in &func.buffer_decls {
            let Some(buf) = func.buffers.get(b) else {
                continue;
            };
            let BufferShape::Sparse(axes) = &buf.shape else {
                continue;
            };
            self.span = buf.span;
            for (k, a) in axes.iter().enumerate() {
                let Some(ai) = self.assembled_axes.iter().position(|x| x.axis == *a) else {
                    continue;
                };
                let parent = func.axes.get(*a).and_then(|x| x.parent);
                if axes.len() != 2 || k != 1 || Some(axes[0]) != parent {
                    let pn = parent.map(axis_name).unwrap_or("?");
                    return Err(self.err(format!(
                        "buffer `{}`: assembled axis `{}` must be the buffer's last axis, right \
                         after its parent (`({pn}, {})`)",
                        buf.name,
                        axis_name(*a),
                        axis_name(*a)
                    )));
                }
                if let Some((other, _)) = self.assembled_axes[ai].buffer {
                    return Err(self.err(format!(
                        "assembled axis `{}` is the axis of two buffers, `{}` and `{}`; the \
                         evaluator assembles one buffer per axis",
                        axis_name(*a),
                        func.buffers
                            .get(other)
                            .map(|x| x.name.as_str())
                            .unwrap_or("?"),
                        buf.name
                    )));
                }
                if buf.extra_storage.is_some() {
                    return Err(self.err(format!(
                        "buffer `{}` over assembled axis `{}` cannot have extra_storage",
                        buf.name,
                        axis_name(*a)
                    )));
                }
                self.assembled_axes[ai].buffer = Some((b, usize::MAX));
            }
        }
        // Parameters written by the run play no other role.
        self.span = func.span;
        let mut outputs: HashMap<VarId, String> = HashMap::new();
        for x in &self.assembled_axes {
            let an = axis_name(x.axis);
            let mut roles = vec![
                (x.indptr, format!("the indptr of assembled axis `{an}`")),
                (x.indices, format!("the indices of assembled axis `{an}`")),
                (x.nnz, format!("the nnz of assembled axis `{an}`")),
            ];
            if let Some((b, _)) = x.buffer {
                if let Some(BufferDecl::Match { data }) = func.buffers.get(b).map(|x| &x.decl) {
                    roles.push((*data, format!("the values of assembled axis `{an}`")));
                }
            }
            for (v, role) in roles {
                if let Some(prev) = outputs.insert(v, role.clone()) {
                    return Err(self.err(format!(
                        "parameter `{}` is both {prev} and {role}",
                        self.var_name(v)
                    )));
                }
            }
        }
        for (_, ax) in func.axes.iter().filter(|(_, x)| !x.assembled) {
            for v in [ax.indptr, ax.indices].into_iter().flatten() {
                if let Some(role) = outputs.get(&v) {
                    return Err(self.err(format!(
                        "parameter `{}` is {role}, written by the run, and cannot also hold the \
                         structure of axis `{}`",
                        self.var_name(v),
                        ax.name
                    )));
                }
            }
        }
        for &b in &func.buffer_decls {
            let Some(buf) = func.buffers.get(b) else {
                continue;
            };
            let over_assembled = self
                .assembled_axes
                .iter()
                .any(|x| x.buffer.map(|y| y.0) == Some(b));
            if let (BufferDecl::Match { data }, false) = (&buf.decl, over_assembled) {
                if let Some(role) = outputs.get(data) {
                    return Err(self.err(format!(
                        "parameter `{}` is {role}, written by the run, and cannot also hold the \
                         values of buffer `{}`",
                        self.var_name(*data),
                        buf.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// After the run: the structure and values of every assembled axis as arguments, by
    /// parameter name (`indptr`, `indices`, the buffer's values, nnz).
    pub(super) fn assembled_outputs(&self) -> Res<Vec<(String, ArgValue)>> {
        let func = self.func;
        let mut out = Vec::new();
        for x in &self.assembled_axes {
            let ax = &func.axes[x.axis];
            let err = |message: String| EvalError {
                span: ax.span,
                message,
            };
            let values = x.buffer.map(|(b, i)| (b, &self.assembled[i]));
            let (indptr, indices) = match values {
                Some((_, v)) => v.structure(),
                None => (
                    vec![0; self.axes[x.axis.index()].parent_count as usize + 1],
                    vec![],
                ),
            };
            let nnz = indices.len() as i64;
            let nnz_dtype = func.vars.get(x.nnz).map(|v| v.dtype).unwrap_or(DType::I32);
            for dt in [ax.idtype, nnz_dtype] {
                if Value::from_i128(nnz as i128, dt).as_i128() != nnz as i128 {
                    return Err(err(format!(
                        "assembled axis `{}`: output has {nnz} stored elements, more than {dt} \
                         offsets can hold",
                        ax.name
                    )));
                }
            }
            let index_tensor = |v: &[i64]| {
                Tensor::from_i64(ax.idtype, v).map_err(|e| err(format!("axis `{}`: {e}", ax.name)))
            };
            out.push((
                self.var_name(x.indptr).to_string(),
                ArgValue::Array(index_tensor(&indptr)?),
            ));
            out.push((
                self.var_name(x.indices).to_string(),
                ArgValue::Array(index_tensor(&indices)?),
            ));
            out.push((self.var_name(x.nnz).to_string(), ArgValue::Int(nnz)));
            if let Some((b, v)) = values {
                let buf = &func.buffers[b];
                if let BufferDecl::Match { data } = &buf.decl {
                    let vals = v.values();
                    let mut t = Tensor::zeros(buf.dtype, vec![vals.len()])
                        .map_err(|e| err(format!("buffer `{}`: {e}", buf.name)))?;
                    for (i, v) in vals.into_iter().enumerate() {
                        store(&mut t, i, v);
                    }
                    out.push((self.var_name(*data).to_string(), ArgValue::Array(t)));
                }
            }
        }
        Ok(out)
    }
}
