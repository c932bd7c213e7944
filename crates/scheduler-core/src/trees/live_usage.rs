//! Each tree's live usage and smallest waiting job per element of its last fair-share
//! snapshot, kept between heartbeats instead of recomputed from every operation on each
//! one (a heartbeat that may place would otherwise cost O(operations)).
//!
//! Built with the snapshot at each update; between updates, the operations marked
//! changed (`Indexes::mark`, which every change passes through) are re-read and their
//! difference applied along their paths, so a heartbeat costs O(changes × depth).
//! Placement updates the arrays itself as it starts jobs. Operations newer than the
//! snapshot are not in it until the next update, as for the shares themselves.

use crate::resource_minimum::ResourceMinimum;
use crate::trees::fair_share::{ElementKind, TreeShares};
use crate::trees::pool_lines::PoolLines;
use crate::SchedulerCore;
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

impl SchedulerCore {
    /// An operation's own usage in `tree` and its smallest waiting job, as the live
    /// arrays hold them.
    fn live_leaf(&self, id: &OperationId, tree: &str) -> (ResourceVector, Option<ResourceVector>) {
        match self.operations.get(id) {
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
    pub(crate) fn compute_live(&self, shares: &TreeShares) -> LiveTree {
        build_live(shares, |id| self.live_leaf(id, &shares.tree))
    }

    /// The live arrays of a fresh update: as computed with it from its inputs, with
    /// the operations changed since it was prepared read again (`None`: every one).
    pub(crate) fn live_after_update(
        &self,
        shares: &TreeShares,
        computed: LiveTree,
        changed: Option<std::collections::BTreeSet<OperationId>>,
    ) -> LiveTree {
        let Some(changed) = changed else {
            return self.compute_live(shares);
        };
        let mut live = computed;
        for id in &changed {
            if let Some(&leaf) = shares.operation_index.get(id) {
                let (usage, waiting) = self.live_leaf(id, &shares.tree);
                live.set_leaf(shares, leaf, usage, waiting);
            }
        }
        live
    }

    /// Brings every tree's live arrays up to date with the operations changed since.
    pub(crate) fn refresh_live(&mut self) {
        let changed = self.operations.take_live_changes();
        for tree in self.trees.names() {
            let Some(shares) = self.trees.shares(tree.as_str()) else {
                continue;
            };
            let Some(state) = self.trees.get_mut(tree.as_str()) else {
                continue;
            };
            let mut live = std::mem::take(&mut state.live);
            match &changed {
                None => live = self.compute_live(&shares),
                Some(ids) => {
                    for id in ids {
                        if let Some(&leaf) = shares.operation_index.get(id) {
                            let (usage, waiting) = self.live_leaf(id, tree.as_str());
                            live.set_leaf(&shares, leaf, usage, waiting);
                        }
                    }
                }
            }
            if let Some(state) = self.trees.get_mut(tree.as_str()) {
                state.live = live;
            }
        }
        #[cfg(debug_assertions)]
        for (tree, state) in self.trees.iter() {
            if let Some(shares) = state.shares() {
                let live = &state.live;
                let scan = self.compute_live(shares);
                assert_eq!(live.waiting, scan.waiting, "live waiting of tree {tree}");
                assert!(
                    live.lines.agrees_with(shares, &live.usage, &live.waiting),
                    "pool lines of tree {tree} differ from the live arrays"
                );
                for (a, b) in live.usage.iter().zip(&scan.usage) {
                    assert!(
                        a.fits_in(b) && b.fits_in(a),
                        "live usage of tree {tree}: {a:?} != {b:?}"
                    );
                }
            }
        }
    }

    /// The live usage per element of `tree`'s snapshot `shares` (call `refresh_live`
    /// first): the kept arrays, or computed from every operation if none are kept.
    pub(crate) fn live_usage(
        &self,
        tree: &str,
        shares: &TreeShares,
    ) -> std::borrow::Cow<'_, [ResourceVector]> {
        match self.trees.get(tree).map(|t| &t.live) {
            Some(live) if live.usage.len() == shares.elements.len() => {
                std::borrow::Cow::Borrowed(&live.usage)
            }
            _ => std::borrow::Cow::Owned(self.compute_live(shares).usage),
        }
    }

    /// Makes the tree's live arrays fit its snapshot (rebuilt when the snapshot changed
    /// shape since they were kept).
    pub(crate) fn ensure_live(&mut self, tree: &str, shares: &TreeShares) {
        let fits = self
            .trees
            .get(tree)
            .is_some_and(|t| t.live.usage.len() == shares.elements.len());
        if !fits {
            let live = self.compute_live(shares);
            if let Some(t) = self.trees.get_mut(tree) {
                t.live = live;
            }
        }
    }
}

/// The live arrays of a snapshot, each operation's own values from `leaf`.
pub(crate) fn build_live(
    shares: &TreeShares,
    leaf: impl Fn(&OperationId) -> (ResourceVector, Option<ResourceVector>),
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
            (live.usage[i], live.waiting[i]) = leaf(id);
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
