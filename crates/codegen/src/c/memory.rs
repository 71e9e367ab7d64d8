//! The C writer's buffers: their sizes and strides, allocation (stack or heap, guarded) and
//! release, and element offsets from indices — shared by the C and CUDA targets.

use super::*;

impl<'f> Writer<'f> {
    /// Runs `inner` inside `if (every heap pointer is non-null) { ... } else { status = -2 }`
    /// followed by the `free` calls (no guard when `heap` is empty).
    pub(super) fn write_guarded(
        &mut self,
        heap: &[String],
        inner: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        self.write_guarded_reusing(heap, &[], inner)
    }

    /// [`Writer::write_guarded`], also checking the heap pointers `reused` (allocated further
    /// out, not freed here).
    pub(super) fn write_guarded_reusing(
        &mut self,
        heap: &[String],
        reused: &[String],
        inner: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        if heap.is_empty() && reused.is_empty() {
            return inner(self);
        }
        let cond = heap
            .iter()
            .chain(reused)
            .map(|p| format!("{p} != NULL"))
            .collect::<Vec<_>>()
            .join(" && ");
        self.line(&format!("if ({cond}) {{"));
        self.indent += 1;
        inner(self)?;
        self.indent -= 1;
        self.line("} else {");
        self.line("    #pragma omp atomic write");
        self.line("    sptir_status = -2;");
        self.line("}");
        for p in heap.iter().rev() {
            self.line(&format!("free({p});"));
        }
        Ok(())
    }

    // ------------------------------------------------------------------ buffers

    /// The extents of a dense buffer (error for sparse buffers).
    pub(super) fn dense_extents(&self, b: BufferId) -> Res<&'f [Expr]> {
        let buf = &self.func.buffers[b];
        match &buf.shape {
            BufferShape::Dense(d) => Ok(d),
            BufferShape::Sparse(_) => Err(self.unsupported(
                &format!("sparse buffer `{}`", buf.name),
                "sparse buffers must be lowered to dense arrays first (stage III)",
            )),
        }
    }

    /// An extent or stride as `int64_t` C text, or its constant value.
    pub(super) fn size_expr(&mut self, e: &Expr, what: &str) -> Res<Result<i64, String>> {
        if let Some(c) = const_int(e) {
            return Ok(Ok(c));
        }
        let (s, dt) = self.expr(e)?;
        if !(dt.is_integer() || dt.is_bool()) {
            return Err(self.invalid(format!("{what} must be an integer, got {dt}")));
        }
        Ok(Err(format!("(int64_t){s}")))
    }

    /// Computes the strides of dense buffer `b` (hoisting non-constant ones into `const int64_t`
    /// locals) and marks the buffer in scope. Strides follow the interpreter: explicit strides
    /// give the innermost dimensions, the outer ones are compact over them.
    pub(super) fn declare_strides(&mut self, b: BufferId) -> Res<()> {
        let extents = self.dense_extents(b)?;
        let buf = &self.func.buffers[b];
        let n = extents.len();
        let given = &buf.strides;
        if given.len() > n {
            return Err(self.invalid(format!(
                "buffer `{}`: {} strides for {n} dimension(s)",
                buf.name,
                given.len()
            )));
        }
        let mut out: Vec<Option<Result<i64, String>>> = vec![None; n];
        let k = given.len();
        for (d, s) in given.iter().enumerate() {
            out[n - k + d] = Some(self.size_expr(s, "a stride")?);
        }
        if n > 0 && k == 0 {
            out[n - 1] = Some(Ok(1));
        }
        let first_given = if k == 0 { n.saturating_sub(1) } else { n - k };
        for d in (0..first_given).rev() {
            let inner = out[d + 1].clone().unwrap_or(Ok(1));
            let ext = self.size_expr(&extents[d + 1], "an extent")?;
            out[d] = Some(match (inner, ext) {
                (Ok(a), Ok(b)) => match a.checked_mul(b) {
                    Some(v) => Ok(v),
                    None => {
                        return Err(self.invalid(format!("buffer `{}`: stride overflow", buf.name)))
                    }
                },
                (Ok(1), Err(e)) | (Err(e), Ok(1)) => Err(e),
                (Ok(a), Err(e)) | (Err(e), Ok(a)) => Err(format!("{e} * {a}")),
                (Err(a), Err(e)) => Err(format!("{a} * {e}")),
            });
        }
        let bname = self.buf_name(b)?.to_string();
        let mut strides = Vec::with_capacity(n);
        for (d, s) in out.into_iter().enumerate() {
            strides.push(match s.unwrap_or(Ok(1)) {
                Ok(c) => Stride::Const(c),
                Err(text) => {
                    let local = self.namer.fresh(&format!("{bname}_stride{d}"));
                    self.line(&format!("const int64_t {local} = {text};"));
                    Stride::Local(local)
                }
            });
        }
        self.bufs[b.index()] = Some(BufInfo {
            strides,
            window: Vec::new(),
            stage: None,
            core: None,
            swizzled: false,
        });
        Ok(())
    }

    /// The number of elements an allocation of `b` needs (values + extra storage).
    pub(super) fn alloc_size(&mut self, b: BufferId) -> Res<Result<i64, String>> {
        let extents = self.dense_extents(b)?;
        let buf = &self.func.buffers[b];
        let mut exts = Vec::with_capacity(extents.len());
        for e in extents {
            exts.push(self.size_expr(e, "an extent")?);
        }
        let extra = match &buf.extra_storage {
            Some(e) => Some(self.size_expr(e, "extra_storage")?),
            None => None,
        };
        let strides = self.bufs[b.index()]
            .as_ref()
            .map(|i| i.strides.clone())
            .unwrap_or_default();
        let compact = buf.strides.is_empty();
        let all_const = exts.iter().all(|e| e.is_ok())
            && strides.iter().all(|s| matches!(s, Stride::Const(_)))
            && !matches!(extra, Some(Err(_)));
        if all_const {
            let mut size: i64 = if exts.iter().any(|e| matches!(e, Ok(0))) {
                0
            } else {
                1
            };
            if size == 1 {
                for (e, s) in exts.iter().zip(&strides) {
                    let (Ok(e), Stride::Const(s)) = (e, s) else {
                        continue;
                    };
                    size = (e - 1)
                        .checked_mul(*s)
                        .and_then(|x| x.checked_add(size))
                        .ok_or_else(|| {
                            self.invalid(format!("buffer `{}` is too large", buf.name))
                        })?;
                }
            }
            if let Some(Ok(x)) = extra {
                size = size
                    .checked_add(x)
                    .ok_or_else(|| self.invalid("allocation too large"))?;
            }
            return Ok(Ok(size));
        }
        let text = |e: &Result<i64, String>| match e {
            Ok(c) => format!("INT64_C({c})"),
            Err(s) => s.clone(),
        };
        let mut size = if compact {
            exts.iter().map(text).collect::<Vec<_>>().join(" * ")
        } else {
            let mut terms = vec!["1".to_string()];
            let mut nonzero = Vec::new();
            for (e, s) in exts.iter().zip(&strides) {
                let st = match s {
                    Stride::Const(c) => format!("INT64_C({c})"),
                    Stride::Local(l) => l.clone(),
                };
                terms.push(format!("({} - 1) * {st}", text(e)));
                nonzero.push(format!("{} > 0", text(e)));
            }
            format!("({} ? {} : 0)", nonzero.join(" && "), terms.join(" + "))
        };
        if size.is_empty() {
            size = "1".to_string();
        }
        if let Some(e) = extra {
            size = format!("{size} + {}", text(&e));
        }
        Ok(Err(size))
    }

    /// Declares the storage of allocated buffers at the current point; returns the names of the
    /// heap pointers (to guard and free). `scope`: the statements the buffers are live in, in
    /// order; a stack array they fill whole before reading it is left uninitialized
    /// (`first_write`), any other is zeroed.
    pub(super) fn write_allocs(&mut self, bufs: &[BufferId], scope: &[&Stmt]) -> Res<Vec<String>> {
        let mut heap = Vec::new();
        for &b in bufs {
            let buf = &self.func.buffers[b];
            let saved = self.span;
            if !buf.span.is_unknown() {
                self.span = buf.span;
            }
            let ct = self.storage_ctype(buf.dtype, &format!("buffer `{}`", buf.name))?;
            self.declare_strides(b)?;
            let kind = match self.alloc_size(b)? {
                Ok(n) if n <= STACK_LIMIT => AllocKind::Stack(n.max(1)),
                Ok(n) => AllocKind::Heap(format!("INT64_C({n})")),
                Err(s) => AllocKind::Heap(s),
            };
            let name = self.buf_name(b)?.to_string();
            if self.target == Target::Cuda {
                self.write_cuda_alloc(b, ct, &name)?;
                self.span = saved;
                continue;
            }
            match kind {
                AllocKind::Stack(n) if self.filled_first(b, scope, n) => {
                    self.line(&format!("{ct} {name}[{n}]; /* filled before read */"))
                }
                AllocKind::Stack(n) => self.line(&format!("{ct} {name}[{n}] = {{0}};")),
                AllocKind::Heap(size) => {
                    let size_name = self.namer.fresh(&format!("{name}_size"));
                    self.line(&format!("const int64_t {size_name} = {size};"));
                    self.line(&format!(
                        "{ct}* {name} = ({ct}*)calloc({size_name} > 0 ? (size_t){size_name} : 1, sizeof({ct}));"
                    ));
                    heap.push(name);
                }
            }
            self.span = saved;
        }
        Ok(heap)
    }

    /// Whether `scope` writes all `n` elements of the stack array `b` before reading any.
    fn filled_first(&self, b: BufferId, scope: &[&Stmt], n: i64) -> bool {
        let Some(info) = self.bufs[b.index()].as_ref() else {
            return false;
        };
        let mut strides = Vec::with_capacity(info.strides.len());
        for s in &info.strides {
            match s {
                Stride::Const(c) => strides.push(*c),
                Stride::Local(_) => return false,
            }
        }
        super::first_write::filled_before_read(scope, b, &strides, n)
    }

    pub(super) fn end_scope(&mut self, bufs: &[BufferId]) {
        for b in bufs {
            if !self.hoisted.iter().any(|h| h.buffer == *b) {
                self.bufs[b.index()] = None;
            }
        }
    }

    /// The flat element offset of `b[indices]`: a plain index for compact 1-D buffers, otherwise
    /// a sum of `int64_t` products with the strides.
    /// The number of elements of dense buffer `b`, as a C `int64_t` expression.
    pub(super) fn flat_size(&mut self, b: BufferId) -> Res<String> {
        let name = self.buf_name(b)?.to_string();
        let shape = match self.func.buffers.get(b).map(|x| &x.shape) {
            Some(BufferShape::Dense(dims)) => dims.clone(),
            _ => {
                return Err(self.invalid(format!(
                    "buffer `{name}` has no dense shape to bound a read with"
                )))
            }
        };
        let mut terms = Vec::new();
        for d in &shape {
            let (t, _) = self.expr(d)?;
            terms.push(format!("(int64_t){t}"));
        }
        if terms.is_empty() {
            return Ok("(int64_t)1".to_string());
        }
        Ok(format!("({})", terms.join(" * ")))
    }

    pub(super) fn offset(&mut self, b: BufferId, indices: &[Expr]) -> Res<String> {
        let off = self.element_offset(b, indices)?;
        // CUDA `warp` buffers: each warp has its slice of one shared array.
        if let Some(slice) = self.warp_slice(b) {
            return Ok(format!("{slice} + {off}"));
        }
        Ok(off)
    }

    pub(super) fn element_offset(&mut self, b: BufferId, indices: &[Expr]) -> Res<String> {
        let name = self.buf_name(b)?.to_string();
        let Some(info) = self.bufs.get(b.index()).cloned().flatten() else {
            return Err(self.invalid(format!("buffer `{name}` is used outside its scope")));
        };
        if indices.len() != info.strides.len() {
            return Err(self.invalid(format!(
                "buffer `{name}` takes {} indices, got {}",
                info.strides.len(),
                indices.len()
            )));
        }
        let mut idx = Vec::with_capacity(indices.len());
        let mut shifted: Vec<Expr> = indices
            .iter()
            .enumerate()
            .map(|(d, e)| match info.window.get(d) {
                Some(base) => Expr::sub(e.clone(), base.clone()),
                None => e.clone(),
            })
            .collect();
        let mut strides: Vec<Stride> = info.strides.clone();
        if let (Some(rows), true, [k, n]) = (info.core, info.swizzled, shifted.as_slice()) {
            // A window of swizzled boxes (`gpu/tma.rs`): (k, n) as (n / 64, k, (n % 64) ^
            // (8 (k % 8))) over strides (64 R, 64, 1).
            let (k, n) = (self.expr(k)?.0, self.expr(n)?.0);
            idx = vec![
                format!("(({n}) / 64)"),
                format!("({k})"),
                format!("((({n}) % 64) ^ ((({k}) % 8) << 3))"),
            ];
            strides = vec![
                Stride::Const(64 * rows),
                Stride::Const(64),
                Stride::Const(1),
            ];
        } else {
            // A core-matrix window: (k, n) as (n / 8, k, n % 8) over strides (8 R, 8, 1).
            if let (Some(rows), [k, n]) = (info.core, shifted.as_slice()) {
                let (hi, lo) = self.core_split(n);
                shifted = vec![hi, k.clone(), lo];
                strides = vec![Stride::Const(8 * rows), Stride::Const(8), Stride::Const(1)];
            }
            for e in &shifted {
                let (s, dt) = self.expr(e)?;
                if !(dt.is_integer() || dt.is_bool()) {
                    return Err(self.invalid(format!("an index of `{name}` has type {dt}")));
                }
                idx.push(s);
            }
        }
        // A double-buffered window: the current half.
        if let Some(st) = &info.stage {
            let (t, _) = self.expr(st)?;
            idx.push(t);
        }
        let strides: Vec<Stride> = strides
            .into_iter()
            .chain(info.stage.as_ref().map(|_| Stride::Const(1)))
            .collect();
        if idx.len() == 1 && matches!(strides[0], Stride::Const(1)) {
            // Spliced into `X + off` as well as `X[off]`: parenthesized where `+` needs it.
            return Ok(sum_operand(&idx[0]).into_owned());
        }
        let mut terms = Vec::new();
        for (i, s) in idx.iter().zip(&strides) {
            match s {
                Stride::Const(0) => {}
                Stride::Const(1) => terms.push(format!("(int64_t){i}")),
                Stride::Const(c) => terms.push(format!("(int64_t){i} * {c}")),
                Stride::Local(l) => terms.push(format!("(int64_t){i} * {l}")),
            }
        }
        if terms.is_empty() {
            return Ok("0".to_string());
        }
        Ok(terms.join(" + "))
    }
}
