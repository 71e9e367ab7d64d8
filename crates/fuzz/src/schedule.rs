//! Target `schedule`: random schedules on mutated catalog kernels. A kernel of the `diff`
//! target, the indices of its stores mutated too (so that iterations may now touch each
//! other's elements: a dependence that some primitives must refuse to break; a sparse output's
//! stores into the rows it assembles keep their indices but for those into dense buffers,
//! [`Stores::Given`]), gets a random schedule:
//! at stage I `sparse_reorder` and `sparse_fuse` of its iterations, then at stage II or III
//! `split`, `fuse`, `reorder`, `unroll`, `reverse_cache_read` (sometimes widened to float32,
//! its tile sometimes padded by `storage_align`, or in shared memory on a GPU), and either
//! `bind` (a GPU schedule) or `parallel`,
//! `vectorize` and `vectorize_reduction` with the C writer's lane annotations (a CPU one) on
//! random loops (a primitive that refuses is left out; the trace
//! records what was taken). The scheduled
//! function must then:
//! - replay from its trace text (`# stage I` / `# stage II|III` sections, as `build` takes
//!   them) and verify (a saved input that a primitive now refuses is no finding: the check
//!   grew stricter);
//! - on data that a launch accepts (an index array the loops store through apart holding
//!   distinct values where it must, `assume_distinct`; data it refuses is no finding),
//!   give the evaluator's results in the stage III interpreter (`reorder`, `sparse_reorder`,
//!   `split` and `fuse` keep the order of dependent iterations);
//! - give them still with every parallel, vectorized and thread-bound loop run backwards
//!   (iterations that a schedule runs apart may run in any order: a dependence between them
//!   shows as another result), but for a loop that binds a reduction iterator (a reduction
//!   across threads, which the writers combine their own way);
//! - with `schedule-native`, give them on the backend the schedule is for: the CUDA emulator
//!   where it binds threads (its race, bounds and barrier checks apply), else the C backend (a
//!   schedule a writer refuses is no finding).
//!
//! Inputs are saved as the data in [`crate::data::RunInput`]'s text form, a line `schedule`,
//! the schedule, a line `script`, then the mutated script.

use std::collections::HashMap;
use std::path::Path;

use sparsetir_eval::run_func;
use sparsetir_ir::{AttrValue, Expr, ForKind, PrimFunc, Stage, Stmt};
use sparsetir_runtime::build::{schedule_and_lower, BuildError};
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{validate_args, KernelCache};
use sparsetir_schedule::{ir_util, ErrorKind, LoopRV, Schedule, TraceError};

use crate::data::RunInput;
use crate::diff::{compare, judge, prepare, DiffInput, Prepared, Stores};
use crate::mutate::Mutator;

/// One input: a mutated kernel with its data, and the schedule text applied to it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleInput {
    pub diff: DiffInput,
    pub schedule: String,
}

const SCHEDULE_LINE: &str = "schedule\n";
const SCRIPT_LINE: &str = "script\n";

/// The thread tags `bind` draws from.
const TAGS: &[&str] = &["blockIdx.x", "threadIdx.x", "threadIdx.y", "blockIdx.y"];

impl ScheduleInput {
    /// A mutated kernel (its stores too), valid data, and a random schedule recorded on it.
    pub fn generate(m: &mut Mutator) -> Option<ScheduleInput> {
        let diff = DiffInput::generate(m, Stores::Given)?;
        let module = sparsetir_syntax::parse_module(&diff.script).ok()?;
        let f = module.funcs.into_iter().next()?;
        let schedule = random_schedule(m, &f)?;
        Some(ScheduleInput { diff, schedule })
    }

    /// The saved form (see the module documentation).
    pub fn to_text(&self) -> String {
        let mut schedule = self.schedule.clone();
        if !schedule.ends_with('\n') {
            schedule.push('\n');
        }
        format!(
            "{}{SCHEDULE_LINE}{schedule}{SCRIPT_LINE}{}",
            self.diff.data.to_text(),
            self.diff.script
        )
    }

    /// Parses [`ScheduleInput::to_text`]'s form.
    pub fn from_text(text: &str) -> Result<ScheduleInput, String> {
        let at = text
            .find(&format!("\n{SCHEDULE_LINE}"))
            .ok_or("missing `schedule` line")?;
        let rest = &text[at + 1 + SCHEDULE_LINE.len()..];
        let (schedule, script) = if let Some(s) = rest.strip_prefix(SCRIPT_LINE) {
            ("", s)
        } else {
            let end = rest
                .find(&format!("\n{SCRIPT_LINE}"))
                .ok_or("missing `script` line")?;
            (&rest[..end + 1], &rest[end + 1 + SCRIPT_LINE.len()..])
        };
        Ok(ScheduleInput {
            diff: DiffInput {
                data: RunInput::from_text(&text[..at + 1])?,
                script: script.to_string(),
            },
            schedule: schedule.to_string(),
        })
    }
}

/// Every loop above every block, in the order of the blocks.
fn all_loops(sch: &mut Schedule) -> Vec<LoopRV> {
    let mut out = Vec::new();
    for n in ir_util::block_names(&sch.func().body) {
        if let Ok(b) = sch.get_block(&n) {
            out.extend(sch.get_loops(b).unwrap_or_default());
        }
    }
    out
}

/// A random schedule of `f` (stage I) as `build` takes it: a stage-I section, then a stage-II
/// or stage-III one recorded on the function that lowering gives. `None` where `f` does not
/// lower.
fn random_schedule(m: &mut Mutator, f: &PrimFunc) -> Option<String> {
    let mut sch = Schedule::new(f.clone()).ok()?;
    for name in ir_util::sp_iter_names(&f.body) {
        if !m.chance(0.5) {
            continue;
        }
        let Ok(sp) = sch.get_sparse_iteration(&name) else {
            continue;
        };
        let Ok(entries) = sch.get_sp_iters(sp) else {
            continue;
        };
        let names: Vec<String> = entries
            .iter()
            .flat_map(|e| e.axes())
            .map(|a| sch.func().axes[a].name.clone())
            .collect();
        if names.len() < 2 {
            continue;
        }
        if m.chance(0.75) {
            let mut order = names.clone();
            m.shuffle(&mut order);
            let _ = sch.sparse_reorder(sp, &order);
        } else {
            let k = m.below(names.len() - 1);
            let _ = sch.sparse_fuse(sp, &names[k..k + 2]);
        }
    }
    let mut text = format!("# stage I\n{}", sch.trace().to_text());
    let stage = if m.chance(0.25) {
        Stage::II
    } else {
        Stage::III
    };
    let lowered = schedule_and_lower(f, Some(&text), &[]).ok()?;
    let g = match stage {
        Stage::II => lowered.stage2,
        _ => lowered.stage3,
    };
    let mut sch = Schedule::new(g).ok()?;
    // One device's primitives: the threads of a GPU, or a CPU's parallel and vector loops
    // (so that the native variant has a backend to run the schedule on).
    let gpu = m.chance(0.5);
    for _ in 0..1 + m.below(7) {
        let loops = all_loops(&mut sch);
        if loops.is_empty() {
            break;
        }
        let l = *m.pick(&loops);
        let l2 = *m.pick(&loops);
        let _ = match m.below(12) {
            0 | 1 => {
                let k = 1 + m.below(8) as i64;
                let factors = if m.chance(0.5) {
                    [None, Some(k)]
                } else {
                    [Some(k), None]
                };
                sch.split(l, &factors).map(|_| ())
            }
            2 => sch.fuse(&[l, l2]).map(|_| ()),
            3 | 4 => sch.reorder(&[l2, l]),
            5 => {
                // Up to three loops of one block, shuffled.
                let l3 = *m.pick(&loops);
                let mut order = vec![l, l2, l3];
                order.dedup();
                m.shuffle(&mut order);
                sch.reorder(&order)
            }
            9 => sch.unroll(l),
            // A block's read cached as a tile of its own iterators, sometimes its rows padded
            // (`storage_align`) or, on a GPU, kept in shared memory.
            6 => {
                let blocks = ir_util::block_names(&sch.func().body);
                if blocks.is_empty() {
                    continue;
                }
                let name = m.pick(&blocks).clone();
                let read = m.below(3);
                let factor = 1 + m.below(8) as i64;
                let offset = m.below(factor as usize) as i64;
                let (align, shared) = (m.chance(0.7), gpu && m.chance(0.5));
                let pick = m.below(1 << 16) as u64;
                // Sometimes the cache holds the values widened to float32 (exact for 16-bit
                // and float32 buffers, refused for others).
                let widen = m.chance(0.3);
                sch.get_block(&name)
                    .and_then(|b| {
                        if widen {
                            sch.reverse_cache_read_as(b, read, "local", sparsetir_ir::DType::F32)
                        } else {
                            sch.reverse_cache_read(b, read, "local")
                        }
                    })
                    .and_then(|c| {
                        if align {
                            // Any axis of the tile the copy block writes.
                            let ndim = sch
                                .block_name(c)
                                .ok()
                                .and_then(|n| ir_util::find_block(&sch.func().body, &n).cloned())
                                .and_then(|b| b.writes.first().map(|w| w.ranges.len()))
                                .unwrap_or(1)
                                .max(1);
                            let axis = (pick % ndim as u64) as usize;
                            sch.storage_align(c, 0, axis, factor, offset)?;
                        }
                        if shared {
                            sch.set_scope(c, 0, "shared")?;
                        }
                        Ok(())
                    })
            }
            // A CPU reduction in SIMD lanes (`+`, `max`, `min`; reassociated, so results
            // agree up to rounding), sometimes with the C writer's lane annotations.
            10 | 11 if !gpu => sch.vectorize_reduction(l).and_then(|()| {
                if m.chance(0.3) {
                    let lanes = 1i64 << m.below(7);
                    sch.annotate(l, "lanes", AttrValue::Int(lanes))?;
                }
                if m.chance(0.4) {
                    sch.annotate(l, "simd_min_trip", AttrValue::Int(1 + m.below(32) as i64))?;
                    if m.chance(0.5) {
                        sch.annotate(l, "simd_masked_tail", AttrValue::Int(1))?;
                    }
                }
                Ok(())
            }),
            _ if gpu => {
                let tag = *m.pick(TAGS);
                sch.bind(l, tag)
            }
            8 => sch.vectorize(l),
            _ => sch.parallel(l),
        };
    }
    let header = match stage {
        Stage::II => "# stage II",
        _ => "# stage III",
    };
    text.push_str(&format!("{header}\n{}", sch.trace().to_text()));
    Some(text)
}

/// `s` with every parallel, vectorized and thread-bound loop run backwards, as a serial loop:
/// its variable `v` over `[min, min + extent)` reads `2 min + extent - 1 - v` in the body.
fn backwards(s: &mut Stmt, f: &PrimFunc) -> bool {
    let mut changed = false;
    if let Stmt::For(lp) = s {
        // A loop that binds a reduction iterator (bound to `threadIdx.x`: a reduction across
        // threads) runs its init where that iterator is at its minimum: backwards, that is no
        // longer first. The writers combine such a reduction their own way.
        let mut reduces = false;
        lp.body.visit(&mut |x| {
            if let Stmt::Block(b) = x {
                reduces |= b.iters.iter().any(|it| {
                    it.kind == sparsetir_ir::IterKind::Reduce
                        && ir_util::uses_var(&it.binding, lp.var)
                });
            }
        });
        if !reduces
            && matches!(
                lp.kind,
                ForKind::Parallel | ForKind::Vectorized | ForKind::ThreadBinding
            )
        {
            let dt = f.vars[lp.var].dtype;
            let cast = |e: &Expr| {
                if e.dtype(f) == dt {
                    e.clone()
                } else {
                    Expr::Cast(dt, Box::new(e.clone()))
                }
            };
            let last = Expr::sub(Expr::add(cast(&lp.min), cast(&lp.extent)), Expr::Int(1, dt));
            let mirrored = Expr::sub(Expr::add(last, cast(&lp.min)), Expr::Var(lp.var));
            let map: HashMap<_, _> = [(lp.var, mirrored)].into_iter().collect();
            ir_util::subst_stmt(&mut lp.body, &map);
            lp.kind = ForKind::Serial;
            lp.thread = None;
            changed = true;
        }
    }
    for c in ir_util::children_mut(s) {
        changed |= backwards(c, f);
    }
    changed
}

/// Runs one input (see the module documentation); `Err` is a finding. `native` (the kernel
/// cache's directory) adds the backend the schedule is for: the CUDA emulator (whose race,
/// bounds and barrier checks apply) where it binds threads, else the C backend.
pub fn execute(input: &ScheduleInput, native: Option<&Path>) -> Result<(), String> {
    let Some(Prepared {
        f,
        args,
        reference,
        assembled,
    }) = prepare(&input.diff)
    else {
        return Ok(());
    };
    if assembled {
        return Ok(());
    }
    let lowered = match schedule_and_lower(&f, Some(&input.schedule), &[]) {
        Ok(l) => l,
        // A primitive that refuses where it took the input when it was saved: a check grew
        // stricter (the regression corpus replays such inputs), no finding. (The trace of a
        // fresh input replays in the process that recorded it.)
        Err(BuildError::Schedule {
            error: TraceError::Schedule { error, .. },
            ..
        }) if error.kind != ErrorKind::Internal => return Ok(()),
        Err(e @ (BuildError::Schedule { .. } | BuildError::Verify { .. })) => {
            return Err(format!("the schedule recorded on this function: {e}"))
        }
        // A construct lowering does not support: no result to compare.
        Err(_) => return Ok(()),
    };
    // Data a launch refuses because an index array the scheduled loops store through apart
    // repeats a value where it must be distinct (`assume_distinct`), or one whose values bound
    // ranges of positions decreases (`assume_monotone`): the interpreter checks nothing and
    // would run those iterations in either order. No finding.
    let mut unchecked = lowered.stage1.clone();
    unchecked.attrs.remove(sparsetir_ir::DISTINCT_ATTR);
    unchecked.attrs.remove(sparsetir_ir::MONOTONE_ATTR);
    if validate_args(&lowered.stage1, &args).is_err() && validate_args(&unchecked, &args).is_ok() {
        return Ok(());
    }
    let run = |g: &PrimFunc, what: &str| -> Result<(), String> {
        let mut got = args.clone();
        match run_func(g, &mut got) {
            Ok(()) => compare(&reference, &got).map_err(|e| format!("{what}: {e}")),
            Err(e) if e.message.contains("by zero") => Ok(()),
            Err(e) => Err(format!("{what} refuses what the evaluator runs: {e}")),
        }
    };
    run(&lowered.stage3, "scheduled, stage III interpreter")?;
    let mut g = lowered.stage3.clone();
    let mut body = std::mem::replace(&mut g.body, Stmt::empty());
    if backwards(&mut body, &g) {
        g.body = body;
        run(
            &g,
            "scheduled, stage III interpreter, parallel and bound loops backwards",
        )?;
    }
    let Some(dir) = native else {
        return Ok(());
    };
    let text = Some(input.schedule.as_str());
    let (what, built) = if input.schedule.contains("sch.bind(") {
        let cache = KernelCache::new(dir.join("cuda-emu"));
        let k = GpuKernel::build(&f, text, &[], GpuDevice::Emulator, &cache);
        let run = k.ok().map(|k| {
            let mut got = args.clone();
            k.run(&mut got).map(|_| got)
        });
        ("scheduled, cuda-emu", run)
    } else {
        let opts = crate::data::c_options(&dir.join("c"), false);
        let k = sparsetir_runtime::build(&f, text, &[], &opts);
        let run = k.ok().map(|k| {
            let mut got = args.clone();
            k.run(&mut got).map(|_| got)
        });
        ("scheduled, C backend", run)
    };
    judge(what, &reference, built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_schedules_cache_a_read_and_pad_it() {
        // The generator reaches `reverse_cache_read`, and `storage_align` on its tile, often
        // enough for a fuzzing run to test them; every trace it records replays.
        let mut m = Mutator::new(40);
        let (mut cached, mut padded) = (0, 0);
        for _ in 0..400 {
            let Some(input) = ScheduleInput::generate(&mut m) else {
                continue;
            };
            cached += usize::from(input.schedule.contains("sch.reverse_cache_read("));
            padded += usize::from(input.schedule.contains("sch.storage_align("));
        }
        assert!(
            cached >= 5 && padded >= 2,
            "cached {cached}, padded {padded}"
        );
    }
}
