//! Operation counts per pool, kept as operations change instead of counted on every
//! submission (which scanned every operation ever seen: a few hundred submissions a
//! second at 10,000 operations).
//!
//! Every change to an operation passes through `touch` (it must reach the store anyway),
//! so the index re-counts exactly the operations touched since it last looked. Each
//! operation's contribution is remembered with the pool chain it was counted under; a
//! configuration change (pools created, removed, moved) or a revival rebuilds it all.
//! Debug builds check the index against a full count on every read.

use super::admission::PoolCounts;
use super::SchedulerCore;
use std::collections::{BTreeSet, HashMap};
use ytsched_common::pool_config::ROOT_POOL;
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// How one operation counts in one tree: its pool chain and whether it runs (and how).
#[derive(Clone, Debug, PartialEq)]
struct Contribution {
    tree: String,
    chain: Vec<String>,
    running: bool,
    lightweight: bool,
}

#[derive(Debug, Default)]
pub(super) struct OperationCounts {
    by_tree: HashMap<String, HashMap<String, PoolCounts>>,
    contributions: HashMap<OperationId, Vec<Contribution>>,
    dirty: BTreeSet<OperationId>,
    /// Rebuild everything at the next read.
    stale: bool,
}

impl OperationCounts {
    /// Re-count this operation at the next read.
    pub(super) fn mark(&mut self, id: OperationId) {
        self.dirty.insert(id);
    }

    pub(super) fn new() -> Self {
        Self {
            stale: true,
            ..Default::default()
        }
    }

    fn apply(&mut self, c: &Contribution, sign: i64) {
        let counts = self.by_tree.entry(c.tree.clone()).or_default();
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

impl SchedulerCore {
    /// Records that an operation changed: the store writes it, the counts re-count it.
    pub(super) fn touch(&mut self, id: OperationId) {
        self.counts.get_mut().mark(id.clone());
        self.waiting_index.get_mut().mark(id.clone());
        self.touched.insert(id);
    }

    /// Everything is re-counted at the next read (configuration changed, state revived).
    pub(super) fn recount_operations(&mut self) {
        self.counts.get_mut().stale = true;
        self.waiting_index.get_mut().invalidate();
    }

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
                    chain: tree
                        .ancestry(&slot.pool)
                        .into_iter()
                        .chain([ROOT_POOL])
                        .map(String::from)
                        .collect(),
                    running: op.state == OperationState::Running,
                    lightweight: slot.lightweight,
                })
            })
            .collect()
    }

    /// Counts of unfinished operations per pool of `tree` (each counts in its pool and
    /// every ancestor, `<Root>` included).
    pub(super) fn pool_counts(&self, tree_name: &str) -> HashMap<String, PoolCounts> {
        let mut index = self.counts.borrow_mut();
        if index.stale {
            *index = OperationCounts::default();
            let ids: Vec<OperationId> = self.operations.keys().cloned().collect();
            for id in ids {
                let cs = self.contributions_of(&id);
                for c in &cs {
                    index.apply(c, 1);
                }
                if !cs.is_empty() {
                    index.contributions.insert(id, cs);
                }
            }
        } else {
            for id in std::mem::take(&mut index.dirty) {
                if let Some(old) = index.contributions.remove(&id) {
                    for c in &old {
                        index.apply(c, -1);
                    }
                }
                let cs = self.contributions_of(&id);
                for c in &cs {
                    index.apply(c, 1);
                }
                if !cs.is_empty() {
                    index.contributions.insert(id, cs);
                }
            }
        }
        let mut counts = index.by_tree.get(tree_name).cloned().unwrap_or_default();
        counts.retain(|_, c| *c != PoolCounts::default());
        drop(index);
        debug_assert_eq!(
            counts,
            self.pool_counts_by_scan(tree_name),
            "operation counts of tree {tree_name}"
        );
        counts
    }

    /// The same counts the slow way: what the index must always agree with.
    fn pool_counts_by_scan(&self, tree_name: &str) -> HashMap<String, PoolCounts> {
        let mut counts: HashMap<String, PoolCounts> = HashMap::new();
        let Ok(tree) = self.cluster.tree(tree_name) else {
            return counts;
        };
        for op in self.operations.values().filter(|o| !o.state.is_finished()) {
            let Some(slot) = op.slot(tree_name) else {
                continue;
            };
            for p in tree.ancestry(&slot.pool).into_iter().chain([ROOT_POOL]) {
                let c = counts.entry(p.to_string()).or_default();
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
