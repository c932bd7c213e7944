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

use crate::operations::by_id::ById;
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

    pub fn pending_job_count(&self) -> u64 {
        self.pending_job_count
    }

    /// Submission order.
    pub fn seq(&self) -> u64 {
        self.seq
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

/// A tree's inputs as one value: the same version means the same inputs, so an update
/// that finds the version its snapshot was computed from can reuse that snapshot.
pub type InputsVersion = u64;

#[derive(Clone, Debug)]
pub(crate) struct ShareInputs {
    by_tree: BTreeMap<TreeName, TreeInputs>,
    /// Each tree's version: moved on whenever an input of the tree is added, removed or
    /// changed. Operations are marked for any edit, most of which (a job's state, a
    /// history line) change no input: those leave the version as it was.
    versions: BTreeMap<TreeName, InputsVersion>,
    /// The next version given out: versions are never reused, so a tree removed and
    /// added again is not taken for the one it was.
    next_version: InputsVersion,
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
            versions: BTreeMap::new(),
            next_version: 1,
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

    /// A tree's inputs brought up to date with `operations` (the core's table), and
    /// their version.
    pub(crate) fn tree(&mut self, tree: &str, operations: &ById) -> (TreeInputs, InputsVersion) {
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
        (
            self.by_tree.get(tree).cloned().unwrap_or_default(),
            self.versions.get(tree).copied().unwrap_or(0),
        )
    }

    fn refresh(&mut self, operations: &ById) {
        if std::mem::take(&mut self.stale) {
            self.by_tree.clear();
            self.dirty.clear();
            for op in operations.values() {
                for (tree, slot) in Self::slots(op) {
                    let input = Arc::new(ShareInput::of(op, tree, slot));
                    let inputs = self.by_tree.entry(tree.clone()).or_default();
                    inputs.insert(op.id.clone(), input);
                }
            }
            self.reads += operations.len() as u64;
            // Every tree as new: nothing computed before this rebuild is reused.
            let trees: Vec<TreeName> = self.by_tree.keys().cloned().collect();
            self.versions.clear();
            for tree in trees {
                self.bump(tree);
            }
            return;
        }
        for id in std::mem::take(&mut self.dirty) {
            self.reread(&id, operations.get(&id));
            self.reads += 1;
        }
        self.by_tree.retain(|_, inputs| !inputs.is_empty());
    }

    /// Operation `id` read again (`None`: it is gone). Its trees may have changed with
    /// it: it leaves the trees it no longer runs in and comes into those it runs in now;
    /// a tree's version moves only where its input is not what it was.
    fn reread(&mut self, id: &OperationId, op: Option<&Operation>) {
        let mut now: Vec<(TreeName, ShareInput)> = op
            .map(|op| {
                Self::slots(op)
                    .map(|(tree, slot)| (tree.clone(), ShareInput::of(op, tree, slot)))
                    .collect()
            })
            .unwrap_or_default();
        let mut changed = vec![];
        for (tree, inputs) in &mut self.by_tree {
            let fresh = now
                .iter()
                .position(|(t, _)| t == tree)
                .map(|k| now.swap_remove(k).1);
            match (inputs.get(id), fresh) {
                (Some(old), Some(new)) if **old == new => {}
                (None, None) => {}
                (_, Some(new)) => {
                    inputs.insert(id.clone(), Arc::new(new));
                    changed.push(tree.clone());
                }
                (Some(_), None) => {
                    inputs.remove(id);
                    changed.push(tree.clone());
                }
            }
        }
        // Trees it comes into that had no input yet.
        for (tree, new) in now {
            let inputs = self.by_tree.entry(tree.clone()).or_default();
            inputs.insert(id.clone(), Arc::new(new));
            changed.push(tree);
        }
        for tree in changed {
            self.bump(tree);
        }
    }

    fn bump(&mut self, tree: TreeName) {
        self.versions.insert(tree, self.next_version);
        self.next_version += 1;
    }

    /// The trees a running operation takes part in (none for one not running).
    fn slots(op: &Operation) -> impl Iterator<Item = (&TreeName, &TreeSlot)> {
        let running = op.state == OperationState::Running;
        op.trees
            .iter()
            .filter(move |_| running)
            .map(|(tree, slot)| (tree, slot))
    }
}
