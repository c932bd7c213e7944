//! Pending operations in submission order, kept as operations change: an operation
//! that finishes looks only at these for one to start in its place, not at every
//! operation in memory (with 100,000 one-job operations, each completion used to scan
//! them all under the core lock). An `OperationIndex`; debug builds check it against a
//! scan.

use crate::operations::operation_index::Aggregate;
use std::collections::BTreeSet;
use ytsched_common::OperationId;

#[derive(Clone, Debug, Default)]
pub(crate) struct PendingQueue(pub(crate) BTreeSet<(u64, OperationId)>);

impl Aggregate for PendingQueue {
    /// A pending operation's submission number and id.
    type Part = (u64, OperationId);

    fn add(&mut self, part: &Self::Part) {
        self.0.insert(part.clone());
    }

    fn remove(&mut self, part: &Self::Part) {
        self.0.remove(part);
    }
}
