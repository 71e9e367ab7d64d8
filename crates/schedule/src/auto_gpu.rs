//! The automatic GPU schedule: in a stage III function, the outermost loop above each top-level
//! block that no loop of its nest binds to a GPU thread is split over blocks and threads
//! (`blockIdx.x` × `threadIdx.x`) wherever `bind` accepts it (a spatial loop whose iterations
//! touch elements of their own), a loop of one iteration (COO's unit root) on one block of one
//! thread; the rest of each nest runs serially in its thread, and a nest
//! whose outer loop carries a reduction, or a dependence between iterations, runs as one
//! thread. Every valid script thereby runs on the GPU, correctly if not fast.

use sparsetir_ir::{ForKind, PrimFunc, Stmt};

use crate::state::{Res, Schedule};

/// Threads per block of the automatic schedule.
pub const AUTO_THREADS: i64 = 128;

/// How the trace of [`auto_gpu_schedule`] starts the comment line for a nest it leaves on one
/// thread (then the block's name in quotes and the refusal).
pub const ONE_THREAD: &str = "# one thread for block";

/// Whether any loop of `func` is bound to a GPU thread.
pub fn binds_threads(func: &PrimFunc) -> bool {
    let mut any = false;
    func.body.visit(&mut |s| {
        if let Stmt::For(f) = s {
            any |= f.kind == ForKind::ThreadBinding;
        }
    });
    any
}

/// Applies the automatic GPU schedule to the nests of a stage III function that bind no thread;
/// returns the function and the schedule's trace text, where each nest left on one thread has
/// a comment line ([`ONE_THREAD`]) with the reason `bind` gave.
pub fn auto_gpu_schedule(func: PrimFunc) -> Res<(PrimFunc, String)> {
    let mut func = func;
    let mut trace = String::new();
    let roots = Schedule::new(func.clone())?.root_blocks();
    for name in roots {
        // Each attempt runs on a copy: a nest that cannot be bound keeps its serial form.
        let mut sch = Schedule::new(func.clone())?;
        let attempt = (|| -> Res<()> {
            let b = sch.get_block(&name)?;
            let loops = sch.get_loops(b)?;
            let Some(&outer) = loops.first() else {
                return Ok(());
            };
            // A nest the schedule already put on threads keeps its binding.
            let mut bound = false;
            Stmt::For(Box::new(sch.loop_(outer)?.clone())).visit(&mut |s| {
                if let Stmt::For(f) = s {
                    bound |= f.kind == ForKind::ThreadBinding;
                }
            });
            if bound {
                return Ok(());
            }
            // A loop of one iteration takes one block of one thread (not a block of
            // `AUTO_THREADS` threads all but one idle, whose iterations would have to be proven
            // apart).
            if matches!(sch.loop_(outer)?.extent, sparsetir_ir::Expr::Int(1, _)) {
                return sch.bind(outer, "blockIdx.x");
            }
            let parts = sch.split(outer, &[None, Some(AUTO_THREADS)])?;
            sch.bind(parts[0], "blockIdx.x")?;
            sch.bind(parts[1], "threadIdx.x")?;
            Ok(())
        })();
        match attempt {
            Ok(()) => {
                trace.push_str(&sch.trace().to_text());
                func = sch.into_func();
            }
            // Said in the trace as a comment (a replayed trace skips it): the nest runs on
            // one thread, and why.
            Err(e) => trace.push_str(&format!(
                "{ONE_THREAD} \"{name}\": {:?}: {}\n",
                e.kind,
                e.message.replace('\n', " ")
            )),
        }
    }
    Ok((func, trace))
}

/// Work that every block along a block index would run again, unordered: a statement beside a
/// loop bound to `blockIdx.*` (inside the outermost loop of its nest: a statement of a sequence
/// on the way down, or a block's init there) that writes a global buffer and binds no loop to
/// that index itself (an init nest split over the same blocks is the blocks' own). Blocks of
/// one launch are never ordered, so such a function has no GPU form; `None` when there is none,
/// else what and where.
pub fn unordered_block_work(func: &PrimFunc) -> Option<String> {
    let writes_global = |s: &Stmt| {
        let mut hit = false;
        s.visit(&mut |x| {
            if let Stmt::Store(st) = x {
                hit |= func.buffers[st.buffer].scope == "global";
            }
        });
        hit
    };
    let binds = |s: &Stmt, tag: &str| {
        let mut hit = false;
        s.visit(&mut |x| {
            if let Stmt::For(f) = x {
                hit |= f.kind == ForKind::ThreadBinding && f.thread.as_deref() == Some(tag);
            }
        });
        hit
    };
    let first_block = |s: &Stmt| {
        let mut name = None;
        s.visit(&mut |x| {
            if let Stmt::Block(b) = x {
                name.get_or_insert_with(|| b.name.clone());
            }
        });
        name.map_or_else(|| "a store".to_string(), |n| format!("block `{n}`"))
    };
    let mut found = None;
    func.body.visit(&mut |s| {
        let Stmt::For(lp) = s else { return };
        let Some(tag) = lp.thread.as_deref().filter(|t| t.starts_with("blockIdx")) else {
            return;
        };
        if found.is_some() || lp.kind != ForKind::ThreadBinding {
            return;
        }
        let var = lp.var;
        let Some(path) = crate::ir_util::path_to(&func.body, &|x| crate::ir_util::is_loop(x, var))
        else {
            return;
        };
        let Some(outer) = path.iter().position(|x| matches!(x, Stmt::For(_))) else {
            return;
        };
        for w in path[outer..].windows(2) {
            let beside: Vec<&Stmt> = match w[0] {
                Stmt::Seq(items) => items.iter().filter(|it| !std::ptr::eq(*it, w[1])).collect(),
                Stmt::Block(b) => b.init.iter().collect(),
                _ => Vec::new(),
            };
            if let Some(it) = beside
                .into_iter()
                .find(|it| writes_global(it) && !binds(it, tag))
            {
                found = Some(format!(
                    "{} writes global memory beside loop `{}`, which is bound to `{tag}`: every \
                     block along `{tag}` would write it again, unordered (bind a loop around \
                     all of that work, or split that work over `{tag}` too)",
                    first_block(it),
                    func.vars[var].name
                ));
                return;
            }
        }
    });
    found
}
