//! Each tree's live usage and smallest waiting job per element of its last fair-share
//! snapshot, kept between heartbeats instead of recomputed from every operation on each
//! one (a heartbeat that may place would otherwise cost O(operations)).
//!
//! Built with the snapshot at each update; between updates, the operations marked
//! changed (`Indexes::mark`, which every change passes through) are re-read and their
//! difference applied along their paths, so a heartbeat costs O(changes × depth).
//! Placement updates the arrays itself as it starts jobs. Operations newer than the
//! snapshot are not in it until the next update, as for the shares themselves.

use crate::operations::table::OperationTable;
use crate::resource_minimum::ResourceMinimum;
use crate::trees::fair_share::{ElementKind, TreeShares};
use crate::trees::pool_lines::PoolLines;
use std::collections::HashMap;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// Per element of one tree's snapshot (same indices).
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveTree {
    /// Absolute usage of the element's subtree now.
    pub usage: Vec<ResourceVector>,
    /// The component-wise smallest job waiting in the subtree (`None`: none waits): a
    /// subtree whose smallest job does not fit is not walked.
    pub waiting: Vec<Option<ResourceVector>>,
    /// Each pool's children with a job waiting, in the order placement tries them
    /// (`pool_lines.rs`), kept from the two arrays above.
    pub lines: PoolLines,
    /// Per pool, its children's smallest waiting jobs counted by amount per resource:
    /// a pool's own smallest is read off them when one child's changes, instead of
    /// folding over thousands of children each time an operation starts its last job.
    child_waiting: HashMap<usize, ResourceMinimum>,
}

fn min_of(a: Option<ResourceVector>, b: Option<ResourceVector>) -> Option<ResourceVector> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.component_min(&b)),
        (a, b) => a.or(b),
    }
}

impl LiveTree {
    /// Sets one operation's own values and carries the difference up its path.
    pub fn set_leaf(
        &mut self,
        shares: &TreeShares,
        leaf: usize,
        usage: ResourceVector,
        waiting: Option<ResourceVector>,
    ) {
        let delta = usage - self.usage[leaf];
        let moved = delta != ResourceVector::ZERO;
        let waits = self.waiting[leaf] != waiting;
        if !moved && !waits {
            return;
        }
        let path = shares.path(leaf);
        if moved {
            for &i in &path {
                self.usage[i] += delta;
            }
        }
        if waits {
            let (mut child, mut old, mut new) = (leaf, self.waiting[leaf], waiting);
            self.waiting[leaf] = waiting;
            while let Some(p) = shares.elements[child].parent {
                let counts = self.child_waiting.entry(p).or_default();
                if let Some(o) = &old {
                    counts.remove(o);
                }
                if let Some(n) = &new {
                    counts.add(n);
                }
                let smallest = counts.smallest();
                if smallest == self.waiting[p] {
                    break;
                }
                (child, old, new) = (p, self.waiting[p], smallest);
                self.waiting[p] = smallest;
            }
        }
        for i in path {
            self.lines.rekey(shares, &self.usage, &self.waiting, i);
        }
    }
}

/// An operation's own usage in `tree` and its smallest waiting job, as the live arrays
/// hold them.
pub(crate) fn live_leaf(
    operations: &OperationTable,
    id: &OperationId,
    tree: &str,
) -> (ResourceVector, Option<ResourceVector>) {
    match operations.get(id) {
        Some(op) => (
            op.slot(tree).map_or(ResourceVector::ZERO, |s| s.usage),
            (op.state == OperationState::Running)
                .then(|| op.smallest_waiting())
                .flatten(),
        ),
        None => (ResourceVector::ZERO, None),
    }
}

/// The live arrays of a snapshot, computed from every operation in it.
pub(crate) fn compute_live(operations: &OperationTable, shares: &TreeShares) -> LiveTree {
    build_live(shares, |_, id| live_leaf(operations, id, &shares.tree))
}

/// The live arrays of a fresh update: as computed with it from its inputs, with the
/// operations changed since it was prepared read again (`None`: every one).
pub(crate) fn live_after_update(
    operations: &OperationTable,
    shares: &TreeShares,
    computed: LiveTree,
    changed: Option<std::collections::BTreeSet<OperationId>>,
) -> LiveTree {
    let Some(changed) = changed else {
        return compute_live(operations, shares);
    };
    let mut live = computed;
    for id in &changed {
        if let Some(&leaf) = shares.operation_index.get(id) {
            let (usage, waiting) = live_leaf(operations, id, &shares.tree);
            live.set_leaf(shares, leaf, usage, waiting);
        }
    }
    live
}

/// The live arrays of a snapshot, each operation's own values from `leaf`.
pub(crate) fn build_live(
    shares: &TreeShares,
    leaf: impl Fn(usize, &OperationId) -> (ResourceVector, Option<ResourceVector>),
) -> LiveTree {
    let n = shares.elements.len();
    let mut live = LiveTree {
        usage: vec![ResourceVector::ZERO; n],
        waiting: vec![None; n],
        lines: PoolLines::default(),
        child_waiting: HashMap::new(),
    };
    for i in (0..n).rev() {
        let e = &shares.elements[i];
        if let ElementKind::Operation { id } = &e.kind {
            (live.usage[i], live.waiting[i]) = leaf(i, id);
        }
        if let Some(p) = e.parent {
            let u = live.usage[i];
            live.usage[p] += u;
            live.waiting[p] = min_of(live.waiting[p], live.waiting[i]);
            if let Some(w) = &live.waiting[i] {
                live.child_waiting.entry(p).or_default().add(w);
            }
        }
    }
    live.lines = PoolLines::build(shares, &live.usage, &live.waiting);
    live
}
