//! The window of a function-level `shared` buffer that one thread block uses: such a buffer
//! (a `cache_read(..., "shared")` moved under a loop by `compute_at`) is per thread block on the
//! GPU, and each iteration of the loop that holds all its accesses only touches a window of
//! constant size, which is what the kernel declares in shared memory.
//!
//! # Rules
//!
//! - Every load and store of the buffer in the kernel lies under one loop `L` (the deepest loop
//!   holding them all outside the first `threadIdx` loop); the loops between `L` and an access
//!   (thread-bound ones included: the window is the whole block's) are its inner loops.
//! - Along each dimension, every access's index is `base + r` with `base` free of the inner
//!   loops and `r` of constant bounds ([`sparsetir_arith::Analyzer::range_over`], with the
//!   loops' ranges and the function's `T.assume_buffer_domain` facts); all accesses share one
//!   `base` (provably equal), the window's extent is the widest.
//! - `base` uses no `threadIdx` variable: all threads of a block see one window.
//!
//! The access `x[i, j]` is then written `x[(i - base_0) * ext_1 + (j - base_1)]` (rows of 128
//! bytes padded by 16), or, for a window a warpgroup's tensor cores read through a descriptor,
//! in 8 x 8 core matrices (`mma/warpgroup.rs`). The stage-III
//! meaning (one function-level buffer) and the kernel's (one window per block) agree because
//! every block reads only what it wrote in the same iteration of `L` — what `compute_at`
//! guarantees for the cache it moves (the interpreter and the C backend run the function-level
//! buffer as written).

use std::collections::HashMap;

use sparsetir_arith::Analyzer;

use super::*;

/// One access: its indices (block iterators and lets resolved to loop variables) and the loops
/// around it, outermost first.
struct Access {
    indices: Vec<Expr>,
    loops: Vec<VarId>,
}

/// The window of a shared buffer in a kernel.
pub(super) struct Window {
    /// Where it starts, per dimension.
    pub base: Vec<Expr>,
    /// Its extent, per dimension.
    pub ext: Vec<i64>,
    /// The loop holding every access (the window's loop), if any.
    pub lp: Option<VarId>,
}

/// The window of `b` in the kernel `part`, or why not.
pub(super) fn window(func: &PrimFunc, part: &Stmt, b: BufferId) -> Result<Window, String> {
    let mut acc = Vec::new();
    let mut an = Analyzer::new();
    an.assume_no_overflow(true);
    let mut threads = Vec::new();
    collect(
        part,
        b,
        &mut Vec::new(),
        &mut HashMap::new(),
        &mut an,
        &mut threads,
        &mut acc,
    );
    func.body.visit(&mut |s| {
        if let Stmt::AssumeBufferDomain { buffer, lo, hi, .. } = s {
            an.bind_buffer_domain(*buffer, lo, hi);
        }
    });
    let Some(first) = acc.first() else {
        return Err("the kernel does not access it".into());
    };
    // The deepest loop around every access, outside the block's threads (their loops are
    // inner: the window is the whole block's).
    let mut common = first
        .loops
        .iter()
        .position(|v| threads.contains(v))
        .unwrap_or(first.loops.len());
    for a in &acc {
        common = common.min(
            a.loops
                .iter()
                .zip(&first.loops)
                .take_while(|(x, y)| x == y)
                .count(),
        );
    }
    let dims = first.indices.len();
    let mut base: Vec<Option<Expr>> = vec![None; dims];
    let mut ext = vec![0i64; dims];
    for a in &acc {
        let inner = &a.loops[common..];
        for (d, e) in a.indices.iter().enumerate() {
            let Some((lo, n)) = an.range_over(func, e, inner) else {
                return Err(format!(
                    "index `{}` has no constant span over the loops inside the one that holds \
                     every access",
                    sparsetir_ir::printer::print_expr(func, e)
                ));
            };
            match &base[d] {
                None => base[d] = Some(lo),
                Some(old) if an.can_prove_equal(func, old, &lo) => {}
                Some(_) => {
                    return Err(format!(
                        "its accesses start at different places along dimension {d}"
                    ))
                }
            }
            ext[d] = ext[d].max(n);
        }
    }
    let base: Vec<Expr> = base
        .into_iter()
        .map(|e| e.unwrap_or(Expr::int(0)))
        .collect();
    for e in &base {
        let mut per_thread = false;
        e.visit(&mut |x| per_thread |= matches!(x, Expr::Var(v) if threads.contains(v)));
        if per_thread {
            return Err(format!(
                "its window starts at `{}`, which differs between the threads of a block",
                sparsetir_ir::printer::print_expr(func, e)
            ));
        }
    }
    let lp = common.checked_sub(1).map(|k| first.loops[k]);
    Ok(Window { base, ext, lp })
}

#[allow(clippy::too_many_arguments)]
fn collect(
    s: &Stmt,
    b: BufferId,
    loops: &mut Vec<VarId>,
    map: &mut HashMap<VarId, Expr>,
    an: &mut Analyzer,
    threads: &mut Vec<VarId>,
    out: &mut Vec<Access>,
) {
    let here = |e: &Expr, map: &HashMap<VarId, Expr>, loops: &[VarId], out: &mut Vec<Access>| {
        e.visit(&mut |x| {
            if let Expr::Load { buffer, indices } = x {
                if *buffer == b {
                    out.push(Access {
                        indices: indices.iter().map(|i| subst(i, map)).collect(),
                        loops: loops.to_vec(),
                    });
                }
            }
        })
    };
    match s {
        Stmt::For(f) => {
            an.bind_range(f.var, &f.min, &f.extent);
            if f.kind == ForKind::ThreadBinding
                && f.thread
                    .as_deref()
                    .is_some_and(|t| t.starts_with("threadIdx"))
            {
                threads.push(f.var);
            }
            loops.push(f.var);
            collect(&f.body, b, loops, map, an, threads, out);
            loops.pop();
            return;
        }
        Stmt::Block(blk) => {
            for it in &blk.iters {
                let r = subst(&it.binding, map);
                map.insert(it.var, r);
            }
            if let Some(p) = &blk.predicate {
                here(p, map, loops, out);
            }
        }
        Stmt::Let(l) => {
            here(&l.value, map, loops, out);
            let r = subst(&l.value, map);
            map.insert(l.var, r);
        }
        Stmt::Store(st) => {
            if st.buffer == b {
                out.push(Access {
                    indices: st.indices.iter().map(|i| subst(i, map)).collect(),
                    loops: loops.clone(),
                });
            }
            st.indices.iter().for_each(|e| here(e, map, loops, out));
            here(&st.value, map, loops, out);
        }
        _ => s.for_each_expr(|e| here(e, map, loops, out)),
    }
    s.for_each_child(|c| collect(c, b, loops, map, an, threads, out));
}

impl Writer<'_> {
    /// Declares the window of the function-level `shared` buffer `b` that the kernel `parts`
    /// uses (see `shared_window`): one kernel only, its accesses offset by the window's start.
    pub(super) fn declare_shared_window(&mut self, b: BufferId, parts: &[&Stmt]) -> Res<()> {
        let buf = &self.func.buffers[b];
        let what = format!("shared buffer `{}`", buf.name);
        self.span = buf.span;
        if !self.shared_users.insert(b) {
            return Err(self.unsupported(
                &what,
                "a function-level shared buffer is per thread block: one kernel may use it",
            ));
        }
        let [part] = parts else {
            return Err(self.unsupported(&what, "a launch of fused parts cannot use it"));
        };
        let Window { base, ext, lp: l } =
            window(self.func, part, b).map_err(|why| self.unsupported(&what, why))?;
        let double = l
            .and_then(|v| find_loop(part, v))
            .filter(|lp| Self::double_buffered(lp));
        if ext.iter().any(|e| *e <= 0) {
            return Err(self.unsupported(&what, "its window has no size"));
        }
        // Read by a warpgroup's tensor cores through a descriptor: 8 x 8 core matrices.
        let core = super::mma::read_by_warpgroup(part, b);
        if core {
            let [rows, cols] = ext.as_slice() else {
                return Err(self.unsupported(
                    &what,
                    "a window a warpgroup's tensor cores read must have two dimensions",
                ));
            };
            if rows % 8 != 0 || cols % 8 != 0 || buf.dtype.bytes() != 2 {
                return Err(self.unsupported(
                    &what,
                    format!(
                        "a window a warpgroup's tensor cores read holds 16-bit values in whole \
                         8 x 8 core matrices; this one is {rows} x {cols} of {}",
                        buf.dtype
                    ),
                ));
            }
        }
        // Rows a multiple of 128 bytes apart would put a column of the window in one bank:
        // each row is padded by 16 bytes, so that the 8 rows one `ldmatrix` phase reads (or a
        // column of threads) fall in distinct banks; rows stay 16-byte aligned.
        let elem = buf.dtype.bytes() as i64;
        let rows: i64 = ext[..ext.len().saturating_sub(1)].iter().product();
        let mut strides = vec![Stride::Const(1); ext.len()];
        let mut size = 1i64;
        for d in (0..ext.len()).rev() {
            strides[d] = Stride::Const(size);
            let mut span = ext[d];
            if !core && d + 1 == ext.len() && rows > 1 && (span * elem) % 128 == 0 {
                span += (16 / elem).max(1);
            }
            size = match size.checked_mul(span) {
                Some(n) if n <= i64::from(i32::MAX) => n,
                _ => return Err(self.unsupported(&what, "its window is too large")),
            };
        }
        // Multi-buffered: `d + 1` windows (the copy `d` iterations ahead; one more with a
        // product in flight), the loop's iteration picking one.
        let windows = match double {
            Some(lp) if Self::prefetch_distance(lp) > Self::max_prefetch(lp) => {
                return Err(self.unsupported(
                    &what,
                    format!(
                        "its loop's `double_buffer` is {}: copies run at most {} iterations \
                         ahead",
                        Self::prefetch_distance(lp),
                        Self::max_prefetch(lp)
                    ),
                ))
            }
            Some(lp) => Self::pipeline_stages(lp),
            None => 1,
        };
        let stage = double.map(|lp| {
            let dt = self.func.vars[lp.var].dtype;
            let k = Expr::sub(Expr::Var(lp.var), lp.min.clone());
            Expr::mul(
                Expr::binary(sparsetir_ir::BinOp::FloorMod, k, Expr::Int(windows, dt)),
                Expr::Int(size, dt),
            )
        });
        size = match size.checked_mul(windows) {
            Some(n) if n <= i64::from(i32::MAX) => n,
            _ => return Err(self.unsupported(&what, "its window is too large")),
        };
        let ct = c_type(buf.dtype).unwrap_or("float");
        let name = self.buf_name(b)?.to_string();
        self.declare_shared(&what, buf.dtype, ct, &name, size)?;
        if let (true, Some(k)) = (core, self.kernel.as_mut()) {
            k.async_shared = true;
        }
        // Filled by the tensor copy engine (`tma.rs`): its boxes' layout, and the stages'
        // barriers.
        let tma = self
            .kernel
            .as_ref()
            .and_then(|k| k.tma.iter().find(|t| t.shared == b).cloned());
        if let Some(t) = &tma {
            let bars = Self::tma_barriers(t);
            self.declare_shared(&what, DType::U64, "uint64_t", &t.bars, bars)?;
        }
        self.bufs[b.index()] = Some(BufInfo {
            strides,
            window: base,
            stage,
            core: core.then(|| ext[0]),
            swizzled: tma.is_some(),
        });
        Ok(())
    }

    /// `SPTIR_SHARED(ct, name, size)`, counted against the most shared memory a block may
    /// have (past 48 KiB the kernel's arrays become dynamic: `Writer::dynamic_shared`).
    pub(super) fn declare_shared(
        &mut self,
        what: &str,
        dtype: DType,
        ct: &str,
        name: &str,
        size: i64,
    ) -> Res<()> {
        let bytes = size as u64 * dtype.bytes() as u64;
        let total = match self.kernel.as_mut() {
            Some(k) => {
                k.shared_bytes += bytes;
                k.shared_decls
                    .push((ct.to_string(), name.to_string(), size, bytes));
                k.shared_bytes
            }
            None => bytes,
        };
        if total > MAX_SHARED_BYTES {
            return Err(self.unsupported(
                what,
                format!(
                    "the kernel declares {total} bytes of shared memory; a block may use at \
                     most {MAX_SHARED_BYTES} (an H100's or H200's 227 KiB, opted in to)"
                ),
            ));
        }
        self.line(&format!("SPTIR_SHARED({ct}, {name}, {size});"));
        Ok(())
    }
}
