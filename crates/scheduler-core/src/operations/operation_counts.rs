//! Operation counts per pool, kept as operations change (an `OperationIndex`) instead of
//! counted on every submission, which scanned every operation ever seen: a few hundred
//! submissions a second at 10,000 operations. Each operation's contribution is
//! remembered with the pool chain it was counted under, so taking it back never depends
//! on how the pools look now.

use crate::operations::operation_index::Aggregate;
use crate::SchedulerCore;
use std::collections::HashMap;
use ytsched_common::names::TreeName;
use ytsched_common::names::TreePoolName;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// Operations counted in a pool and all its descendants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Running and pending.
    pub total: u32,
    /// Running, lightweight ones excluded.
    pub running: u32,
    pub lightweight_running: u32,
}

/// How one operation counts in one tree: its pool chain and whether it runs (and how).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Contribution {
    tree: TreeName,
    chain: Vec<TreePoolName>,
    running: bool,
    lightweight: bool,
}

/// Unfinished operations per pool, per tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct PoolCountsByTree(HashMap<TreeName, PoolCountMap>);

/// Unfinished operations per pool of one tree, `<Root>` included.
pub(crate) type PoolCountMap = HashMap<TreePoolName, PoolCounts>;

impl PoolCountsByTree {
    fn apply(&mut self, c: &Contribution, sign: i64) {
        let counts = self.0.entry(c.tree.clone()).or_default();
        for p in &c.chain {
            let e = counts.entry(p.clone()).or_default();
            let add = |v: &mut u32| *v = (*v as i64 + sign).max(0) as u32;
            add(&mut e.total);
            if c.running {
                if c.lightweight {
                    add(&mut e.lightweight_running);
                } else {
                    add(&mut e.running);
                }
            }
        }
    }
}

impl Aggregate for PoolCountsByTree {
    type Part = Contribution;
    fn add(&mut self, part: &Contribution) {
        self.apply(part, 1);
    }
    fn remove(&mut self, part: &Contribution) {
        self.apply(part, -1);
    }
}

impl SchedulerCore {
    fn contributions_of(&self, id: &OperationId) -> Vec<Contribution> {
        let Some(op) = self.operations.get(id) else {
            return vec![];
        };
        if op.state.is_finished() {
            return vec![];
        }
        op.trees
            .iter()
            .filter_map(|(tree_name, slot)| {
                let tree = self.cluster.tree(tree_name).ok()?;
                Some(Contribution {
                    tree: tree_name.clone(),
                    chain: tree.lineage(&slot.pool).into_iter().cloned().collect(),
                    running: op.state == OperationState::Running,
                    lightweight: slot.lightweight,
                })
            })
            .collect()
    }

    /// Counts of unfinished operations per pool of `tree` (each counts in its pool and
    /// every ancestor, `<Root>` included).
    pub(crate) fn pool_counts(&self, tree_name: &str) -> PoolCountMap {
        let mut counts = self.read_counts(tree_name, |c| c.cloned().unwrap_or_default());
        counts.retain(|_, c| *c != PoolCounts::default());
        debug_assert_eq!(
            counts,
            self.pool_counts_by_scan(tree_name),
            "operation counts of tree {tree_name}"
        );
        counts
    }

    /// Counts of one pool of `tree` (its subtree's unfinished operations), without
    /// copying the tree's map.
    pub(crate) fn pool_count(&self, tree_name: &str, pool: &TreePoolName) -> PoolCounts {
        let counts = self.read_counts(tree_name, |c| {
            c.and_then(|c| c.get(pool)).copied().unwrap_or_default()
        });
        debug_assert_eq!(
            Some(&counts).filter(|c| **c != PoolCounts::default()),
            self.pool_counts_by_scan(tree_name).get(pool),
            "operation counts of pool {pool} of tree {tree_name}"
        );
        counts
    }

    /// Reads a tree's counts from the index, brought up to date first.
    fn read_counts<R>(&self, tree_name: &str, read: impl FnOnce(Option<&PoolCountMap>) -> R) -> R {
        let mut indexes = self.operations.indexes();
        let by_tree = indexes.counts.refresh(
            || self.operations.keys().cloned().collect(),
            |id| self.contributions_of(id),
        );
        read(by_tree.0.get(tree_name))
    }

    /// The same counts the slow way: what the index must always agree with.
    fn pool_counts_by_scan(&self, tree_name: &str) -> PoolCountMap {
        let mut counts = PoolCountMap::new();
        let Ok(tree) = self.cluster.tree(tree_name) else {
            return counts;
        };
        for op in self.operations.values().filter(|o| !o.state.is_finished()) {
            let Some(slot) = op.slot(tree_name) else {
                continue;
            };
            for p in tree.lineage(&slot.pool) {
                let c = counts.entry(p.clone()).or_default();
                c.total += 1;
                if op.state == OperationState::Running {
                    if slot.lightweight {
                        c.lightweight_running += 1;
                    } else {
                        c.running += 1;
                    }
                }
            }
        }
        counts
    }
}
