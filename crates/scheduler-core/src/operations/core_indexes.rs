//! The indexes the core keeps over its operations (`operation_index` sums); changes
//! reach them through `OperationTable` (`table.rs`).

use crate::operations::operation_counts::PoolCountsByTree;
use crate::operations::operation_index::OperationIndex;
use crate::operations::pending_queue::PendingQueue;
use crate::operations::waiting_jobs::SmallestWaiting;
use std::collections::BTreeSet;
use ytsched_common::OperationId;

/// The indexes the core keeps over its operations.
#[derive(Clone, Debug, Default)]
pub(crate) struct Indexes {
    pub(crate) counts: OperationIndex<PoolCountsByTree>,
    pub(crate) waiting: OperationIndex<SmallestWaiting>,
    pub(crate) pending: OperationIndex<PendingQueue>,
    /// Operations changed since the live arrays (`live_usage.rs`) last looked.
    live_changed: BTreeSet<OperationId>,
    /// The live arrays are rebuilt at their next read.
    live_stale: bool,
}

impl Indexes {
    /// Re-count this operation at the next read.
    pub(crate) fn mark(&mut self, id: &OperationId) {
        self.counts.dirty.insert(id.clone());
        self.waiting.dirty.insert(id.clone());
        self.pending.dirty.insert(id.clone());
        self.live_changed.insert(id.clone());
    }

    pub(crate) fn invalidate(&mut self) {
        self.counts.stale = true;
        self.waiting.stale = true;
        self.pending.stale = true;
        self.live_stale = true;
    }

    /// The operations changed since the last call, or `None` when everything must be
    /// re-read.
    pub(crate) fn take_live_changes(&mut self) -> Option<BTreeSet<OperationId>> {
        let changed = std::mem::take(&mut self.live_changed);
        (!std::mem::take(&mut self.live_stale)).then_some(changed)
    }
}
