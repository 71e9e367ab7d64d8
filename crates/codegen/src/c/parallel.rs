//! Parallel loops of the C writer: the `omp parallel for` pragma of a loop's `schedule`/`chunk`
//! annotations, and `nnz_balanced` row ranges (one `omp parallel` region, each thread's range
//! of rows cut by binary search in an indptr so that every thread gets the same number of
//! stored elements).

use super::*;

impl<'f> Writer<'f> {
    /// A parallel loop over CSR rows annotated `{"schedule": "nnz_balanced", "indptr": P}`:
    /// one `omp parallel` region in which thread `t` of `T` takes the contiguous rows
    /// `[cut(t), cut(t + 1))`, where `cut(t)` is the first row `r` of the loop's range with
    /// `P[r] >= P[start] + t * nnz / T` (binary search; `nnz = P[end] - P[start]`,
    /// `cut(0) = start`, `cut(T) = end`), so every thread gets about the same number of stored
    /// elements. The indptr buffer must be a 1-D integer buffer whose extent provably covers
    /// `end + 1` entries.
    pub(super) fn write_nnz_balanced(&mut self, f: &For) -> Res<()> {
        const WHAT: &str = "loop annotation `schedule: nnz_balanced`";
        if f.kind != ForKind::Parallel {
            return Err(self.unsupported(
                WHAT,
                format!("the loop is {}, not parallel", f.kind.script_name()),
            ));
        }
        if let Some(c) = f.annotations.get("chunk") {
            return Err(self.unsupported(
                WHAT,
                format!("a `chunk` ({c:?}) has no meaning for nnz-balanced row ranges"),
            ));
        }
        let bname =
            match f.annotations.get(INDPTR_ATTR) {
                Some(AttrValue::Str(s)) => s.clone(),
                None => return Err(self.unsupported(
                    WHAT,
                    "needs the loop annotation `\"indptr\": \"BUFFER\"` naming the rows' indptr",
                )),
                Some(other) => {
                    return Err(self.unsupported(
                        WHAT,
                        format!("`indptr` must name a buffer (a string), got {other:?}"),
                    ))
                }
            };
        let found = self.func.buffers.iter().find_map(|(id, b)| {
            let c = self.buf_names.get(id.index())?;
            (b.name == bname || *c == bname || *c == format!("{bname}_data")).then_some(id)
        });
        let Some(indptr) = found else {
            return Err(self.unsupported(WHAT, format!("no buffer named `{bname}`")));
        };
        let buf = &self.func.buffers[indptr];
        let extent = match &buf.shape {
            BufferShape::Dense(d) if d.len() == 1 => d[0].clone(),
            _ => {
                return Err(self.unsupported(
                    WHAT,
                    format!("indptr buffer `{bname}` is not a one-dimensional dense buffer"),
                ))
            }
        };
        if !buf.dtype.is_integer() {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "indptr buffer `{bname}` holds {} values, not integers",
                    buf.dtype
                ),
            ));
        }
        let Some(min) = const_int(&f.min).filter(|m| *m >= 0) else {
            return Err(self.unsupported(WHAT, "the loop must start at a constant row index >= 0"));
        };
        // extent(indptr) - (min + extent(loop)) - 1 must be a constant >= 0.
        let covered = match (affine(&extent), affine(&f.extent)) {
            (Some(e), Some(l)) => e.sub(&l).is_some_and(|d| {
                d.terms.iter().all(|(_, c)| *c == 0)
                    && d.constant
                        .checked_sub(min.saturating_add(1))
                        .is_some_and(|x| x >= 0)
            }),
            _ => false,
        };
        if !covered {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "cannot show that indptr buffer `{bname}` has an entry for every row of the \
                     loop and the one after (its extent must be the loop's end + 1 or more)"
                ),
            ));
        }
        let (_, ct, vname) = self.loop_var_type(f)?;
        let (ext, edt) = self.expr(&f.extent)?;
        let ext = cast(ext, edt, DType::I64);
        let start = format!("{min}");
        let end_name = self.namer.fresh(&format!("{vname}_end"));
        let nt = self.namer.fresh(&format!("{vname}_nt"));
        let tid = self.namer.fresh(&format!("{vname}_tid"));
        let base = self.namer.fresh(&format!("{vname}_base"));
        let total = self.namer.fresh(&format!("{vname}_total"));
        let cut = self.namer.fresh(&format!("{vname}_cut"));
        let k = self.namer.fresh("k");
        let lo = self.namer.fresh("lo");
        let hi = self.namer.fresh("hi");
        let mid = self.namer.fresh("mid");
        let goal = self.namer.fresh("goal");
        let t = self.namer.fresh("t");
        // Reads of the indptr at a C index, through the buffer's own offset arithmetic.
        let read = |w: &mut Self, at: &str| -> Res<String> {
            w.let_subst.insert(f.var, at.to_string());
            let off = w.offset(indptr, &[Expr::Var(f.var)]);
            w.let_subst.remove(&f.var);
            let bn = w.buf_name(indptr)?.to_string();
            Ok(format!("(int64_t){bn}[{}]", off?))
        };
        let at_start = read(self, &start)?;
        let at_end = read(self, &end_name)?;
        let at_mid = read(self, &mid)?;
        let end_text = if min == 0 {
            strip_parens(&ext).to_string()
        } else {
            format!("{start} + {ext}")
        };
        self.line(&format!("const int64_t {end_name} = {end_text};"));
        self.line(&format!(
            "/* nnz-balanced rows [{start}, {end_name}): thread t takes the rows whose entries \
             start in [t * nnz / T, (t + 1) * nnz / T) of {bname} */"
        ));
        self.line(&format!("if ({end_name} > {start}) {{"));
        self.indent += 1;
        self.pragma("omp parallel");
        self.line("{");
        self.indent += 1;
        let region_ws = std::mem::take(&mut self.region_ws);
        let mark = self.open_workspaces(&region_ws)?;
        self.line(&format!("int64_t {nt} = 1, {tid} = 0;"));
        self.line("#ifdef _OPENMP");
        self.line(&format!("{nt} = (int64_t)omp_get_num_threads();"));
        self.line(&format!("{tid} = (int64_t)omp_get_thread_num();"));
        self.line("#endif");
        self.line(&format!("const int64_t {base} = {at_start};"));
        self.line(&format!("const int64_t {total} = {at_end} - {base};"));
        self.line(&format!("int64_t {cut}[2];"));
        self.line(&format!("for (int {k} = 0; {k} < 2; ++{k}) {{"));
        self.indent += 1;
        self.line(&format!("const int64_t {t} = {tid} + {k};"));
        self.line(&format!("int64_t {lo} = {start}, {hi} = {end_name};"));
        self.line(&format!("if ({t} >= {nt}) {{"));
        self.line(&format!("    {lo} = {end_name};"));
        self.line(&format!("}} else if ({t} > 0 && {total} > 0) {{"));
        self.indent += 1;
        // floor(t * total / T) without overflow: total = q * T + r.
        self.line(&format!(
            "const int64_t {goal} = {base} + ({total} / {nt}) * {t} + ({total} % {nt}) * {t} / {nt};"
        ));
        self.line(&format!("while ({lo} < {hi}) {{"));
        self.line(&format!(
            "    const int64_t {mid} = {lo} + ({hi} - {lo}) / 2;"
        ));
        self.line(&format!(
            "    if ({at_mid} < {goal}) {{ {lo} = {mid} + 1; }} else {{ {hi} = {mid}; }}"
        ));
        self.line("}");
        self.indent -= 1;
        self.line("}");
        self.line(&format!("{cut}[{k}] = {lo};"));
        self.indent -= 1;
        self.line("}");
        let v = self.bind(f.var)?;
        self.line(&format!(
            "for ({ct} {v} = ({ct}){cut}[0]; {v} < ({ct}){cut}[1]; ++{v}) {{"
        ));
        self.indent += 1;
        let hi_text = format!("(({ct}){cut}[1])");
        let r = match f.annotations.get(PREFETCH_ATTR) {
            Some(ann) => self.write_prefetch(f, ann, &v, &hi_text),
            None => Ok(()),
        };
        let r = r.and_then(|()| self.write_stmt(&f.body));
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        self.close_workspaces(mark);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// `omp parallel for` with the schedule of the loop's annotations: `"schedule"` (one of
    /// `static`, `dynamic`, `guided`, `auto`, `runtime`) and `"chunk"` (a positive integer).
    pub(super) fn parallel_pragma(&self, f: &For) -> Res<String> {
        let sched = match f.annotations.get("schedule") {
            None => None,
            Some(AttrValue::Str(s))
                if ["static", "dynamic", "guided", "auto", "runtime"].contains(&s.as_str()) =>
            {
                Some(s.clone())
            }
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `schedule`",
                    format!(
                        "expected one of \"static\", \"dynamic\", \"guided\", \"auto\", \"runtime\", got {other:?}"
                    ),
                ))
            }
        };
        let chunk = match f.annotations.get("chunk") {
            None => None,
            Some(AttrValue::Int(c)) if *c > 0 => Some(*c),
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `chunk`",
                    format!("expected a positive integer, got {other:?}"),
                ))
            }
        };
        let clause = match (sched, chunk) {
            (None, None) => format!("{DEFAULT_SCHEDULE}, {DEFAULT_CHUNK}"),
            (None, Some(c)) => format!("{DEFAULT_SCHEDULE}, {c}"),
            (Some(s), _) if s == "auto" || s == "runtime" => s,
            (Some(s), None) => s,
            (Some(s), Some(c)) => format!("{s}, {c}"),
        };
        Ok(format!("omp parallel for schedule({clause})"))
    }
}
