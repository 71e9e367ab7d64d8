//! Double-buffered shared-memory copies on the CUDA target: a serial loop annotated
//! `{"double_buffer": 1}` whose body starts with the copy of a function-level shared window
//! (`shared_window.rs`; the copy `compute_at` placed there) keeps two windows, and copies the
//! next iteration's slice while the current one is used.
//!
//! # What is written
//!
//! The window is declared twice its size, iteration `k` using half `(k - min) % 2`. Before the
//! loop, the first iteration's copy; in iteration `k`, first the copy of iteration `k + 1`
//! (where there is one) into the other half, then `cp.async.wait_group 1` (every copy but the
//! newest is complete: iteration `k`'s), a barrier, the rest of the body, and a barrier (the
//! next iteration's copy writes the half this one read). A copy of 16 bytes per thread from a
//! buffer the kernel only reads (`sptir_ld8h` / `sptir_st8h`) becomes one `cp.async` (sm_80+:
//! global to shared without registers, `cp.async.cg...16`), so the loads of iteration `k + 1`
//! are in flight during iteration `k`'s products; other copies are written as plain code.
//!
//! The emulator runs `cp.async` as the copy it stands for, at once, and the wait as nothing:
//! the barriers above order every thread's copy before any read, so a race it reports is one
//! the GPU could have.

use super::*;

/// The loop annotation that asks for a double-buffered copy.
pub const DOUBLE_BUFFER_ATTR: &str = "double_buffer";

impl<'f> Writer<'f> {
    /// Whether a function-level shared buffer whose window's loop is `l` gets two windows.
    pub(super) fn double_buffered(l: &For) -> bool {
        matches!(l.annotations.get(DOUBLE_BUFFER_ATTR), Some(AttrValue::Int(n)) if *n != 0)
    }

    /// For a loop annotated `double_buffer`: its body's items, the first being a copy into a
    /// double-buffered shared window (its only writer) that the others do not write. `None`
    /// for other loops; an annotated loop not of that form is an error.
    pub(super) fn pipeline_items<'s>(&self, f: &'s For) -> Res<Option<Vec<&'s Stmt>>> {
        if !Self::double_buffered(f) {
            return Ok(None);
        }
        let items: Vec<&Stmt> = match &f.body {
            Stmt::Seq(v) => v.iter().collect(),
            other => vec![other],
        };
        let name = self.func.vars[f.var].name.clone();
        let what = format!("loop `{name}` annotated `double_buffer`");
        let Some((copy, rest)) = items.split_first() else {
            return Err(self.unsupported(&what, "its body is empty"));
        };
        let (mut w, mut r) = (HashSet::new(), HashSet::new());
        accesses(copy, &mut w, &mut r);
        let staged: Vec<BufferId> = w
            .iter()
            .copied()
            .filter(|b| self.double_window(*b))
            .collect();
        let [buf] = staged.as_slice() else {
            return Err(self.unsupported(
                &what,
                "its body must start with the copy into one shared buffer's window (a \
                 `cache_read(.., \"shared\")` moved under it by `compute_at`)",
            ));
        };
        for s in rest {
            let (mut w2, mut r2) = (HashSet::new(), HashSet::new());
            accesses(s, &mut w2, &mut r2);
            if w2.contains(buf) {
                return Err(
                    self.unsupported(&what, "only its first statement may write the window")
                );
            }
        }
        Ok(Some(items))
    }

    /// Whether `b` is declared as a double-buffered window (its offset to the current half,
    /// `(L - min) % 2 * size`, in its `BufInfo`).
    fn double_window(&self, b: BufferId) -> bool {
        self.bufs
            .get(b.index())
            .and_then(Option::as_ref)
            .is_some_and(|i| i.stage.is_some())
    }

    /// Before loop `f` (`start`, `end`: its range as C text): the first iteration's copy.
    pub(super) fn write_pipeline_prologue(
        &mut self,
        f: &For,
        copy: &Stmt,
        start: &str,
        end: &str,
    ) -> Res<()> {
        let first = self.expr(&f.min)?.0;
        self.line(&format!("if ({start} < {end}) {{"));
        self.indent += 1;
        self.write_pipelined_copy(f, copy, &first)?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The body of iteration `v` (C text) of loop `f` ending at `end`: the next iteration's
    /// copy into the other half (an empty group in the last), this one's awaited, the rest of
    /// `items` between two barriers.
    pub(super) fn write_pipeline_iteration(
        &mut self,
        f: &For,
        items: &[&Stmt],
        v: &str,
        end: &str,
    ) -> Res<()> {
        self.line(&format!("if ({v} + 1 < {end}) {{"));
        self.indent += 1;
        self.write_pipelined_copy(f, items[0], &format!("{v} + 1"))?;
        self.indent -= 1;
        self.line("} else {");
        self.line("    sptir_cp_async_commit();");
        self.line("}");
        self.line("sptir_cp_async_wait1();");
        self.write_barrier();
        let rest: Vec<Stmt> = items[1..].iter().map(|s| (*s).clone()).collect();
        self.write_stmt(&Stmt::Seq(rest))?;
        self.write_barrier();
        Ok(())
    }

    /// Writes `copy` as iteration `at` (C text) of loop `f` would: the loop's variable stands
    /// for `at`, 16-byte copies into the window as `cp.async`, then the group committed.
    fn write_pipelined_copy(&mut self, f: &For, copy: &Stmt, at: &str) -> Res<()> {
        self.let_subst.insert(f.var, format!("({at})"));
        self.cp_async = true;
        let r = self.write_stmt(copy);
        self.cp_async = false;
        self.let_subst.remove(&f.var);
        r?;
        self.line("sptir_cp_async_commit();");
        Ok(())
    }
}

/// Whether some loop of `func` asks for a double-buffered copy.
pub(super) fn uses_double_buffer(func: &PrimFunc) -> bool {
    let mut found = false;
    func.body.visit(&mut |s| {
        if let Stmt::For(f) = s {
            found |= Writer::double_buffered(f);
        }
    });
    found
}

/// `cp.async` and its groups: PTX on a GPU (sm_80+), the plain copy in the emulator.
pub(crate) const CP_ASYNC_PRELUDE: &str = r#"#ifndef SPTIR_EMU
static __device__ __forceinline__ void sptir_cp_async16(uint16_t* dst, const uint16_t* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void sptir_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
static __device__ __forceinline__ void sptir_cp_async_wait1() {
    asm volatile("cp.async.wait_group 1;" ::: "memory");
}
#else
template <bool W>
static void sptir_cp_async16(const ::sptir_emu::SPtr<uint16_t>& dst, const ::sptir_emu::GPtr<uint16_t, W>& src) {
    sptir_st8h(dst, sptir_ld8h(src));
}
static void sptir_cp_async_commit() {}
static void sptir_cp_async_wait1() {}
#endif
"#;
