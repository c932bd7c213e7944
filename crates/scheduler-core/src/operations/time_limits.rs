//! `time_limit` (SPEC 5.14): an operation still going its `time_limit` after it was
//! submitted fails with "operation time limit exceeded", its jobs aborted.
//!
//! Deadlines are kept in order as operations enter the table (submitted or revived: the
//! limit counts from the stored start, so a restarted scheduler keeps it), so that a tick
//! looks only at those due instead of walking every operation.

use crate::operations::operation::Operation;
use std::collections::BTreeSet;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::OperationId;

/// Operations with a time limit, by the moment it runs out.
#[derive(Clone, Debug, Default)]
pub(crate) struct Deadlines(BTreeSet<(UnixMillis, OperationId)>);

impl Deadlines {
    fn deadline(op: &Operation) -> Option<UnixMillis> {
        let limit = op.spec.time_limit?;
        Some(op.start_time.saturating_add(limit.0))
    }

    pub(crate) fn add(&mut self, op: &Operation) {
        if op.state.is_finished() {
            return;
        }
        if let Some(at) = Self::deadline(op) {
            self.0.insert((at, op.id.clone()));
        }
    }

    pub(crate) fn remove(&mut self, op: &Operation) {
        if let Some(at) = Self::deadline(op) {
            self.0.remove(&(at, op.id.clone()));
        }
    }

    /// Takes the operations whose limit has run out by `now`.
    pub(crate) fn take_due(&mut self, now: UnixMillis) -> Vec<OperationId> {
        let mut due = vec![];
        while let Some(first) = self.0.first() {
            if first.0 > now {
                break;
            }
            let (_, id) = self.0.pop_first().expect("just seen");
            due.push(id);
        }
        due
    }
}
