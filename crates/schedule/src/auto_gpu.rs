//! The automatic GPU schedule: in a stage III function, the outermost loop above each top-level
//! block that no loop of its nest binds to a GPU thread is split over blocks and threads
//! (`blockIdx.x` × `threadIdx.x`) wherever `bind` accepts it (a spatial loop whose iterations
//! touch elements of their own); the rest of each nest runs serially in its thread, and a nest
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
