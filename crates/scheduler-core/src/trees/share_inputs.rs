//! Each tree's fair-share input, kept as operations change (issue 26 point 6). An
//! update used to build its input by walking every operation under the core lock
//! (≈ 50 ms at 100,000 operations, every update). Kept here in a persistent map, only
//! the operations changed since the last update are read again, and the computation
//! gets the map by a clone that shares its nodes with this one (O(1) under the lock);
//! changes made while it computes copy only the paths they touch.
//!
//! Like the other operation indexes (`operation_index.rs`), it learns of every change
//! through `OperationTable`'s marks, is rebuilt after a configuration change or a
//! revival, and checks itself against a scan in debug builds.

use crate::operations::operation::{Operation, TreeSlot};
use crate::trees::fair_share::OperationInput;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ytsched_common::names::{TreeName, TreePoolName};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// One running operation's part of a tree's fair-share update. Held for every running
/// operation, so kept lean: its id is the map's key, and the rare starvation settings
/// of its own are boxed.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareInput {
    pool: TreePoolName,
    weight: f64,
    demand: ResourceVector,
    pub usage: ResourceVector,
    resource_limits: ResourceVector,
    max_share_ratio: f64,
    seq: u64,
    pending_job_count: u64,
    is_gang: bool,
    /// Its smallest waiting job, for the live arrays computed with the update.
    pub smallest_waiting: Option<ResourceVector>,
    /// Its own starvation timeout (ms) and tolerance, where its spec sets either.
    starvation: Option<Box<(Option<u64>, Option<f64>)>>,
}

impl ShareInput {
    fn of(op: &Operation, tree: &str, slot: &TreeSlot) -> ShareInput {
        let starvation = (
            op.spec.fair_share_starvation_timeout.map(|d| d.0),
            op.spec.fair_share_starvation_tolerance,
        );
        ShareInput {
            pool: slot.pool.clone(),
            weight: slot.weight,
            demand: op.demand_in(tree),
            usage: slot.usage,
            resource_limits: slot.resource_limits,
            max_share_ratio: op.max_share_ratio,
            seq: op.seq,
            pending_job_count: op.waiting_job_count(),
            is_gang: op.is_gang(),
            smallest_waiting: op.smallest_waiting(),
            starvation: (starvation != (None, None)).then(|| Box::new(starvation)),
        }
    }

    /// What the fair-share computation takes for the operation `id`.
    pub fn input(&self, id: &OperationId) -> OperationInput {
        OperationInput {
            id: id.clone(),
            pool: self.pool.clone(),
            weight: self.weight,
            demand: self.demand,
            usage: self.usage,
            resource_limits: self.resource_limits,
            max_share_ratio: self.max_share_ratio,
            seq: self.seq,
            pending_job_count: self.pending_job_count,
            is_gang: self.is_gang,
        }
    }

    /// Its own starvation timeout (ms) and tolerance.
    pub fn starvation(&self) -> (Option<u64>, Option<f64>) {
        self.starvation.as_deref().copied().unwrap_or((None, None))
    }
}

/// A tree's running operations' inputs, in operation id order (the order the core's
/// table walks them in, so updates see them as they always did). Each behind an `Arc`:
/// a node of the map holds dozens of entries and is copied whole when the computation
/// still shares it, and entries held inline would also leave the nodes' unused room
/// each the size of an entry.
pub type TreeInputs = imbl::OrdMap<OperationId, Arc<ShareInput>>;

#[derive(Clone, Debug)]
pub(crate) struct ShareInputs {
    by_tree: BTreeMap<TreeName, TreeInputs>,
    /// Changed since the last refresh.
    dirty: BTreeSet<OperationId>,
    /// Rebuild everything at the next refresh.
    stale: bool,
    /// Operations read so far: what refreshing cost, counted so tests can see it.
    reads: u64,
}

impl Default for ShareInputs {
    fn default() -> Self {
        Self {
            by_tree: BTreeMap::new(),
            dirty: BTreeSet::new(),
            stale: true,
            reads: 0,
        }
    }
}

impl ShareInputs {
    pub(crate) fn mark(&mut self, id: &OperationId) {
        if !self.stale {
            self.dirty.insert(id.clone());
        }
    }

    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        self.reads
    }

    pub(crate) fn invalidate(&mut self) {
        self.stale = true;
        self.dirty.clear();
    }

    /// A tree's inputs brought up to date with `operations` (the core's table).
    pub(crate) fn tree(
        &mut self,
        tree: &str,
        operations: &BTreeMap<OperationId, Box<Operation>>,
    ) -> TreeInputs {
        self.refresh(operations);
        #[cfg(debug_assertions)]
        {
            let mut scanned = ShareInputs::default();
            // (The scan's own reads are not this index's.)
            scanned.refresh(operations);
            debug_assert_eq!(
                self.by_tree, scanned.by_tree,
                "fair-share inputs kept as operations change differ from a scan"
            );
        }
        self.by_tree.get(tree).cloned().unwrap_or_default()
    }

    fn refresh(&mut self, operations: &BTreeMap<OperationId, Box<Operation>>) {
        if std::mem::take(&mut self.stale) {
            self.by_tree.clear();
            self.dirty.clear();
            for op in operations.values() {
                self.insert(op);
            }
            self.reads += operations.len() as u64;
            return;
        }
        for id in std::mem::take(&mut self.dirty) {
            // Its trees may have changed with it: it leaves every tree, and comes back
            // into those it runs in now.
            for inputs in self.by_tree.values_mut() {
                inputs.remove(&id);
            }
            if let Some(op) = operations.get(&id) {
                self.insert(op);
            }
            self.reads += 1;
        }
        self.by_tree.retain(|_, inputs| !inputs.is_empty());
    }

    fn insert(&mut self, op: &Operation) {
        if op.state != OperationState::Running {
            return;
        }
        for (tree, slot) in &op.trees {
            self.by_tree
                .entry(tree.clone())
                .or_default()
                .insert(op.id.clone(), Arc::new(ShareInput::of(op, tree, slot)));
        }
    }
}
