//! Schedule primitives, grouped by family; each family module adds methods to
//! [`Schedule`] and a `replay` function that re-runs its instructions from a
//! parsed trace. `replay` tries every family in turn.
//!
//! To add a family: write `primitives/<family>.rs` with
//! `pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError>`
//! (returning `Ok(None)` for instruction names it does not own), declare it below and add it to
//! the list in `replay`.

use crate::state::{AnyRV, Schedule};
use crate::trace::{Call, ReplayError};

pub mod annotate;
pub mod blockize;
pub mod cache;
pub mod compute;
pub mod lookup;
pub mod loops;
pub mod reduction;
pub mod scope;
pub mod simd_reduction;
pub mod sparse;
pub mod tensorize;

/// Replays one instruction; `Ok(None)` when no family knows its name.
pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    type Family = fn(&mut Schedule, &Call) -> Result<Option<Vec<AnyRV>>, ReplayError>;
    let families: &[Family] = &[
        lookup::replay,
        loops::replay,
        annotate::replay,
        sparse::replay,
        scope::replay,
        cache::replay,
        compute::replay,
        reduction::replay,
        blockize::replay,
        simd_reduction::replay,
        tensorize::replay,
    ];
    for f in families {
        if let Some(out) = f(sch, call)? {
            return Ok(Some(out));
        }
    }
    Ok(None)
}
