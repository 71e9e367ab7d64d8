//! Schedules (SPEC §4): a [`Schedule`] wraps a function of any stage, addresses its blocks, loops
//! and sparse iterations by typed handles, applies primitives that check their preconditions
//! (failing with a [`ScheduleError`] that shows the IR around the offending statement), and
//! records every successful primitive in a [`Trace`] that prints as Python-like text and replays
//! to the same IR. That text is also the schedule-file format ([`apply_schedule_text`]).
//!
//! - [`state`]: the schedule, handles and the lookup primitives;
//! - [`trace`]: instructions, text form, parser and replay;
//! - [`error`]: error kinds and the IR rendering of errors;
//! - [`primitives`]: the primitives by family.

pub mod auto_gpu;
mod disjoint;
pub mod error;
pub mod ir_util;
pub mod primitives;
pub mod state;
pub mod trace;

pub use disjoint::{data_requirements, DataRequirements};
pub use error::{ErrorKind, Focus, ScheduleError};
pub use state::{AnyRV, BlockRV, LoopRV, Res, Schedule, SpIterRV};
pub use trace::{apply_schedule_text, Arg, Call, Instruction, ReplayError, Trace, TraceError};
