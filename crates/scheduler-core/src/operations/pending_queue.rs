//! Pending operations in submission order, kept as operations change: an operation
//! that finishes looks only at these for one to start in its place, not at every
//! operation in memory (with 100,000 one-job operations, each completion used to scan
//! them all under the core lock). An `OperationIndex`; debug builds check it against a
//! scan.

use crate::operations::operation_index::Aggregate;
use crate::SchedulerCore;
use std::collections::BTreeSet;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

#[derive(Clone, Debug, Default)]
pub(crate) struct PendingQueue(BTreeSet<(u64, OperationId)>);

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

impl SchedulerCore {
    fn pending_part(&self, id: &OperationId) -> Vec<(u64, OperationId)> {
        self.operations
            .get(id)
            .filter(|o| o.state == OperationState::Pending)
            .map(|o| vec![(o.seq, o.id.clone())])
            .unwrap_or_default()
    }

    /// Pending operations, oldest submission first.
    pub(crate) fn pending_operations(&self) -> Vec<OperationId> {
        let mut indexes = self.operations.indexes();
        let pending: Vec<OperationId> = indexes
            .pending
            .refresh(
                || self.operations.keys().cloned().collect(),
                |id| self.pending_part(id),
            )
            .0
            .iter()
            .map(|(_, id)| id.clone())
            .collect();
        drop(indexes);
        #[cfg(debug_assertions)]
        {
            let mut scan: Vec<(u64, OperationId)> = self
                .operations
                .values()
                .filter(|o| o.state == OperationState::Pending)
                .map(|o| (o.seq, o.id.clone()))
                .collect();
            scan.sort();
            let scan: Vec<OperationId> = scan.into_iter().map(|(_, id)| id).collect();
            assert_eq!(pending, scan, "pending queue");
        }
        pending
    }
}
