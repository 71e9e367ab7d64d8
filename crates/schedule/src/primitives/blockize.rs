//! Schedule primitives: blockize (work in progress).

use crate::state::{AnyRV, Schedule};
use crate::trace::{Call, ReplayError};

pub(crate) fn replay(_sch: &mut Schedule, _call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    Ok(None)
}
