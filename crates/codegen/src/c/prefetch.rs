//! Software prefetch of the C writer: the `prefetch` loop annotation (`"BUF:D"` within the loop,
//! `"BUF:D:flat"` past its end through the following rows, every read on the way clamped into
//! its buffer), and the search for the prefetched load through the loop's blocks and loops.

use super::*;

impl<'f> Writer<'f> {
    /// The prefetches of a loop annotated `{"prefetch": "BUF:D"}` (D a positive distance), at the
    /// top of its body: the element of `BUF` that the first load of `BUF` in the body reads
    /// `D` iterations later (the iteration clamped to the loop's last one, so index arrays are
    /// read in bounds), at every 64-byte line of the row an inner constant loop walks.
    /// The load must sit on a straight path of blocks without predicates and loops of constant
    /// positive extent; others are refused. With `"BUF:D:flat"` the iteration is not clamped:
    /// the position `D` ahead may lie in the rows after this loop's, and every load on the way
    /// to the address (index arrays) is clamped into its buffer instead (the prefetch itself is
    /// skipped when such a buffer is empty), so loops of any extent may be crossed too.
    pub(super) fn write_prefetch(
        &mut self,
        f: &For,
        ann: &AttrValue,
        v: &str,
        end: &str,
    ) -> Res<()> {
        const WHAT: &str = "loop annotation `prefetch`";
        let spec = match ann {
            AttrValue::Str(s) => {
                let parts: Vec<&str> = s.split(':').map(str::trim).collect();
                let (b, d, flat) = match parts.as_slice() {
                    [b, d] => (*b, *d, false),
                    [b, d, "flat"] => (*b, *d, true),
                    _ => ("", "", false),
                };
                d.parse::<i64>()
                    .ok()
                    .filter(|d| *d > 0 && *d <= 4096 && !b.is_empty())
                    .map(|d| (b.to_string(), d, flat))
            }
            _ => None,
        };
        let Some((bname, dist, flat)) = spec else {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "expected \"BUFFER:DISTANCE\" or \"BUFFER:DISTANCE:flat\" with a distance \
                     from 1 to 4096, got {ann:?}"
                ),
            ));
        };
        let found = self.func.buffers.iter().find_map(|(id, b)| {
            let c = self.buf_names.get(id.index())?;
            (b.name == bname || *c == bname || *c == format!("{bname}_data")).then_some(id)
        });
        let Some(buffer) = found else {
            return Err(self.unsupported(WHAT, format!("no buffer named `{bname}`")));
        };
        let mut chain = Vec::new();
        // Flat prefetches clamp every read on the way, so loops of any extent may be crossed
        // (at their first iteration); row-clamped ones only cross loops known to run.
        let Some(indices) = find_prefetch_load(&f.body, buffer, flat, &mut chain) else {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "no load of `{bname}` on a straight path of blocks and constant loops in the body"
                ),
            ));
        };
        let elem = self
            .func
            .buffers
            .get(buffer)
            .map(|b| i64::from(b.dtype.bits().max(8) / 8))
            .unwrap_or(4);
        let mut set = Vec::new();
        let mut guards: Vec<String> = Vec::new();
        // What the look-ahead moves: this loop's variable, the inner loops' (taken at their
        // first value, which a loop of unknown extent may not have) and the block iterators
        // bound through them. Only loads indexed by these can leave their buffers.
        let mut moved = vec![f.var];
        for hop in &chain {
            match hop {
                PrefetchHop::For(l) => moved.push(l.var),
                PrefetchHop::Block(b) => {
                    for it in &b.iters {
                        let mut uses = false;
                        it.binding
                            .visit(&mut |z| uses |= matches!(z, Expr::Var(v) if moved.contains(v)));
                        if uses {
                            moved.push(it.var);
                        }
                    }
                }
            }
        }
        let r = (|| -> Res<Vec<String>> {
            let next = if flat {
                format!("({v} + {dist})")
            } else {
                format!("({v} + {dist} < {end} ? {v} + {dist} : {end} - 1)")
            };
            self.let_subst.insert(f.var, next);
            set.push(f.var);
            // The first inner loop walks the row, line by line.
            let walk = chain.iter().find_map(|h| match h {
                PrefetchHop::For(l) => Some(const_int(&l.extent).unwrap_or(1)),
                PrefetchHop::Block(_) => None,
            });
            let lines = walk
                .filter(|ext| *ext > 0)
                .map(|ext| ((ext * elem + 63) / 64).clamp(1, 16))
                .unwrap_or(1);
            let mut out = Vec::new();
            for t in 0..lines {
                // Bindings on the way may read index arrays too: clamp from here on.
                if flat {
                    self.prefetch_clamp = Some((moved.clone(), Vec::new()));
                }
                let mut first = true;
                for hop in &chain {
                    match hop {
                        PrefetchHop::Block(b) => {
                            for it in &b.iters {
                                let (x, _) = self.expr(&it.binding)?;
                                self.let_subst
                                    .insert(it.var, format!("({})", strip_parens(&x)));
                                set.push(it.var);
                            }
                        }
                        PrefetchHop::For(l) => {
                            let (m, _) = self.expr(&l.min)?;
                            let m = if first && t > 0 {
                                format!("({} + {})", sum_operand(&m), t * (64 / elem).max(1))
                            } else {
                                m
                            };
                            first = false;
                            self.let_subst.insert(l.var, m);
                            set.push(l.var);
                        }
                    }
                }
                let off = self.offset(buffer, &indices);
                let sizes = self
                    .prefetch_clamp
                    .take()
                    .map(|(_, s)| s)
                    .unwrap_or_default();
                let off = off?;
                for size in sizes {
                    if !guards.contains(&size) {
                        guards.push(size);
                    }
                }
                if !out.contains(&off) {
                    out.push(off);
                }
                // Inner substitutions are recomputed for the next line.
                for var in set.drain(1..) {
                    self.let_subst.remove(&var);
                }
            }
            Ok(out)
        })();
        self.prefetch_clamp = None;
        for var in set {
            self.let_subst.remove(&var);
        }
        let offs = r?;
        let name = self.buf_name(buffer)?.to_string();
        // Reads clamped into an empty buffer would still be out of bounds.
        let guard = guards
            .iter()
            .map(|g| format!("{g} > 0"))
            .collect::<Vec<_>>()
            .join(" && ");
        for off in offs {
            let pf = format!("__builtin_prefetch(&{name}[{off}], 0, 3);");
            if guard.is_empty() {
                self.line(&pf);
            } else {
                self.line(&format!("if ({guard}) {pf}"));
            }
        }
        Ok(())
    }
}

/// A step on the path from a `prefetch` loop's body to the load it prefetches.
pub(super) enum PrefetchHop<'a> {
    For(&'a For),
    Block(&'a Block),
}

/// The indices of the first load of `buffer` reached through sequences, blocks without
/// predicates and loops of constant positive extent (recorded in `chain`), in the stored
/// values and indices; `None` when there is none on such a path.
pub(super) fn find_prefetch_load<'a>(
    s: &'a Stmt,
    buffer: BufferId,
    any_extent: bool,
    chain: &mut Vec<PrefetchHop<'a>>,
) -> Option<Vec<Expr>> {
    match s {
        Stmt::Seq(v) => v
            .iter()
            .find_map(|x| find_prefetch_load(x, buffer, any_extent, chain)),
        Stmt::Block(b) if b.predicate.is_none() => {
            chain.push(PrefetchHop::Block(b));
            let r = find_prefetch_load(&b.body, buffer, any_extent, chain);
            if r.is_none() {
                chain.pop();
            }
            r
        }
        Stmt::For(l) if any_extent || const_int(&l.extent).is_some_and(|n| n > 0) => {
            chain.push(PrefetchHop::For(l));
            let r = find_prefetch_load(&l.body, buffer, any_extent, chain);
            if r.is_none() {
                chain.pop();
            }
            r
        }
        Stmt::Store(st) => {
            let mut found = None;
            let mut look = |e: &Expr| {
                e.visit(&mut |z| {
                    if let Expr::Load { buffer: b, indices } = z {
                        if *b == buffer && found.is_none() {
                            found = Some(indices.clone());
                        }
                    }
                })
            };
            look(&st.value);
            st.indices.iter().for_each(&mut look);
            found
        }
        _ => None,
    }
}
