//! The indexes the core keeps over its operations (`operation_index` sums); changes
//! reach them through `OperationTable` (`table.rs`).

use crate::operations::operation_counts::PoolCountsByTree;
use crate::operations::operation_index::OperationIndex;
use crate::operations::pending_queue::PendingQueue;
use crate::operations::waiting_jobs::SmallestWaiting;
use crate::trees::share_inputs::ShareInputs;
use std::collections::BTreeSet;
use ytsched_common::OperationId;

/// The indexes the core keeps over its operations.
#[derive(Clone, Debug, Default)]
pub(crate) struct Indexes {
    pub(crate) counts: OperationIndex<PoolCountsByTree>,
    pub(crate) waiting: OperationIndex<SmallestWaiting>,
    pub(crate) pending: OperationIndex<PendingQueue>,
    /// Each tree's fair-share input (`share_inputs.rs`).
    pub(crate) share_inputs: ShareInputs,
    /// Operations changed since the live arrays (`live_usage.rs`) last looked.
    live_changed: BTreeSet<OperationId>,
    /// The live arrays are rebuilt at their next read.
    live_stale: bool,
    /// Per tree with an update being computed: the operations changed since it was
    /// prepared (`None`: everything must be re-read), so that its live arrays, computed
    /// with it, need only those read again when it is applied.
    since_prepare: std::collections::BTreeMap<String, Option<BTreeSet<OperationId>>>,
}

impl Indexes {
    /// Re-count this operation at the next read.
    pub(crate) fn mark(&mut self, id: &OperationId) {
        self.counts.dirty.insert(id.clone());
        self.waiting.dirty.insert(id.clone());
        self.pending.dirty.insert(id.clone());
        self.share_inputs.mark(id);
        self.live_changed.insert(id.clone());
        for changed in self.since_prepare.values_mut().flatten() {
            changed.insert(id.clone());
        }
    }

    pub(crate) fn invalidate(&mut self) {
        self.counts.stale = true;
        self.waiting.stale = true;
        self.pending.stale = true;
        self.share_inputs.invalidate();
        self.live_stale = true;
        for changed in self.since_prepare.values_mut() {
            *changed = None;
        }
    }

    /// An update of `tree` was prepared: changes are collected for it from now.
    pub(crate) fn track_since_prepare(&mut self, tree: &str) {
        self.since_prepare
            .insert(tree.to_string(), Some(BTreeSet::new()));
    }

    /// The operations changed since `tree`'s update was prepared (`None`: everything
    /// must be re-read, or it was not tracked); tracking stops.
    pub(crate) fn take_since_prepare(&mut self, tree: &str) -> Option<BTreeSet<OperationId>> {
        self.since_prepare.remove(tree).flatten()
    }

    /// The operations changed since the last call, or `None` when everything must be
    /// re-read.
    pub(crate) fn take_live_changes(&mut self) -> Option<BTreeSet<OperationId>> {
        let changed = std::mem::take(&mut self.live_changed);
        (!std::mem::take(&mut self.live_stale)).then_some(changed)
    }
}
