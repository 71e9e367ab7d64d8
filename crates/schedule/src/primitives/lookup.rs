//! Replay of the lookup primitives (`get_block`, `get_loops`, `get_child_blocks`,
//! `get_sparse_iteration`), whose methods live in [`crate::state`].

use crate::state::{AnyRV, Schedule};
use crate::trace::{Call, ReplayError};

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    let out: Vec<AnyRV> = match call.name() {
        "get_block" => vec![sch.get_block(call.str(0, "name")?)?.into()],
        "get_loops" => sch
            .get_loops(call.block(0, "block")?)?
            .into_iter()
            .map(Into::into)
            .collect(),
        "get_child_blocks" => {
            let blocks = match call.rv(0, "block_or_loop")? {
                AnyRV::Block(b) => sch.get_child_blocks(b)?,
                AnyRV::Loop(l) => sch.get_child_blocks_of_loop(l)?,
                AnyRV::SpIter(_) => {
                    return Err(ReplayError::Args(
                        "`get_child_blocks` takes a block or a loop".into(),
                    ))
                }
            };
            blocks.into_iter().map(Into::into).collect()
        }
        "get_sparse_iteration" => vec![sch.get_sparse_iteration(call.str(0, "name")?)?.into()],
        _ => return Ok(None),
    };
    Ok(Some(out))
}
