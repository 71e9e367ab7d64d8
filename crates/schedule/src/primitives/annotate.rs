//! `annotate` / `unannotate` on blocks (`T.block_attr`), loops (loop annotations) and sparse
//! iterations (`T.sp.iteration_attr`).

use sparsetir_ir::{AttrValue, Attrs};

use crate::error::ErrorKind;
use crate::ir_util;
use crate::state::{AnyRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

impl Schedule {
    /// Finds the attribute dictionary behind `rv` in `f` and applies `op` to it.
    fn with_attrs<R>(
        &mut self,
        primitive: &str,
        rv: AnyRV,
        op: impl FnOnce(&mut Attrs) -> R,
    ) -> Res<R> {
        // Resolve first so a stale or foreign handle is reported as such.
        match rv {
            AnyRV::Block(b) => {
                let name = self.block_name(b)?;
                self.transact(primitive, |f| {
                    let blk = ir_util::find_block_mut(&mut f.body, &name);
                    Ok(blk.map(|b| op(&mut b.annotations)))
                })
            }
            AnyRV::Loop(l) => {
                let v = self.loop_var(l)?;
                self.transact(primitive, |f| {
                    let lp = ir_util::find_loop_mut(&mut f.body, v);
                    Ok(lp.map(|l| op(&mut l.annotations)))
                })
            }
            AnyRV::SpIter(s) => {
                let name = self.sp_iter_name(s)?;
                self.transact(primitive, |f| {
                    let it = ir_util::find_sp_iter_mut(&mut f.body, &name);
                    Ok(it.map(|i| op(&mut i.annotations)))
                })
            }
        }
        .and_then(|r| {
            r.ok_or_else(|| {
                self.error(
                    ErrorKind::StaleHandle,
                    "the annotated statement no longer exists",
                    self.focus_of(rv),
                )
            })
        })
    }

    /// `sch.annotate(rv, "key", value)`: sets an annotation on a block, loop or sparse
    /// iteration (replacing an existing value of the key).
    pub fn annotate(&mut self, rv: impl Into<AnyRV>, key: &str, value: AttrValue) -> Res<()> {
        let rv = rv.into();
        if key.is_empty() {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "annotation keys cannot be empty",
                self.focus_of(rv),
            ));
        }
        let v = value.clone();
        self.with_attrs("annotate", rv, |a| a.set(key, v))?;
        self.record(
            "annotate",
            vec![
                Arg::Var(rv.trace_name()),
                Arg::Str(key.to_string()),
                Arg::from_attr(&value),
            ],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }

    /// `sch.unannotate(rv, "key")`: removes an annotation; a missing key is an error.
    pub fn unannotate(&mut self, rv: impl Into<AnyRV>, key: &str) -> Res<()> {
        let rv = rv.into();
        let removed = self.with_attrs("unannotate", rv, |a| a.remove(key))?;
        if removed.is_none() {
            return Err(self.error(
                ErrorKind::NoSuchAnnotation,
                format!("no annotation `{key}` here"),
                self.focus_of(rv),
            ));
        }
        self.record(
            "unannotate",
            vec![Arg::Var(rv.trace_name()), Arg::Str(key.to_string())],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "annotate" => {
            let rv = call.rv(0, "block_or_loop")?;
            sch.annotate(rv, call.str(1, "ann_key")?, call.attr(2, "ann_val")?)?;
        }
        "unannotate" => {
            let rv = call.rv(0, "block_or_loop")?;
            sch.unannotate(rv, call.str(1, "ann_key")?)?;
        }
        _ => return Ok(None),
    }
    Ok(Some(vec![]))
}
