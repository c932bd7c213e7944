//! The smallest job waiting in each tree, per resource, kept as operations change: a
//! node that cannot fit even that is skipped by placement at once, instead of walking
//! every waiting operation on each of its heartbeats (a full node used to cost a walk of
//! the whole tree under the core lock).
//!
//! The per-resource minimum is a lower bound for every waiting job (ignoring tag filters,
//! which only make fewer jobs eligible), so skipping on it never skips a node that could
//! take a job. Operations mark themselves through `touch`, like the operation counts;
//! configuration changes and revival rebuild it; debug builds check it against a scan.

use super::SchedulerCore;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// A non-negative amount ordered exactly (the bits of a non-negative f64 sort as it does).
type Key = u64;

fn key(v: f64) -> Key {
    v.max(0.0).to_bits()
}

#[derive(Debug, Default)]
struct TreeWaiting {
    /// Per resource: how many operations' smallest waiting job has each amount.
    amounts: [BTreeMap<Key, u32>; 4],
}

#[derive(Debug, Default)]
pub(super) struct WaitingIndex {
    trees: HashMap<String, TreeWaiting>,
    /// Each operation's smallest waiting job per tree, as counted.
    counted: HashMap<OperationId, Vec<(String, ResourceVector)>>,
    dirty: BTreeSet<OperationId>,
    stale: bool,
}

impl WaitingIndex {
    pub(super) fn new() -> Self {
        Self {
            stale: true,
            ..Default::default()
        }
    }

    pub(super) fn mark(&mut self, id: OperationId) {
        self.dirty.insert(id);
    }

    pub(super) fn invalidate(&mut self) {
        self.stale = true;
    }

    fn apply(&mut self, tree: &str, v: &ResourceVector, add: bool) {
        let t = self.trees.entry(tree.to_string()).or_default();
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let k = key(v.get(r));
            let m = &mut t.amounts[i];
            if add {
                *m.entry(k).or_insert(0) += 1;
            } else if let Some(c) = m.get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    m.remove(&k);
                }
            }
        }
    }

    fn smallest(&self, tree: &str) -> Option<ResourceVector> {
        let t = self.trees.get(tree)?;
        let mut out = ResourceVector::ZERO;
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let (&k, _) = t.amounts[i].first_key_value()?;
            out.set(r, f64::from_bits(k));
        }
        Some(out)
    }
}

impl SchedulerCore {
    /// An operation's smallest waiting job per resource, in each tree it runs in.
    fn waiting_of(&self, id: &OperationId) -> Vec<(String, ResourceVector)> {
        let Some(op) = self.operations.get(id) else {
            return vec![];
        };
        if op.state != OperationState::Running {
            return vec![];
        }
        let mut smallest: Option<ResourceVector> = None;
        for t in op.tasks.iter().filter(|t| !t.waiting.is_empty()) {
            let need = t.spec.job_resources();
            smallest = Some(match smallest {
                None => need,
                Some(s) => s.map(|r, v| v.min(need.get(r))),
            });
        }
        let Some(smallest) = smallest else {
            return vec![];
        };
        op.tree_names().map(|t| (t.to_string(), smallest)).collect()
    }

    /// The per-resource minimum over every job waiting in `tree` (None: none waits).
    pub(super) fn smallest_waiting_job(&self, tree: &str) -> Option<ResourceVector> {
        let mut index = self.waiting_index.borrow_mut();
        let ids: Vec<OperationId> = if index.stale {
            *index = WaitingIndex::default();
            self.operations.keys().cloned().collect()
        } else {
            std::mem::take(&mut index.dirty).into_iter().collect()
        };
        for id in ids {
            if let Some(old) = index.counted.remove(&id) {
                for (t, v) in &old {
                    index.apply(t, v, false);
                }
            }
            let new = self.waiting_of(&id);
            for (t, v) in &new {
                index.apply(t, v, true);
            }
            if !new.is_empty() {
                index.counted.insert(id, new);
            }
        }
        let smallest = index.smallest(tree);
        drop(index);
        debug_assert_eq!(
            smallest,
            self.smallest_waiting_by_scan(tree),
            "smallest waiting job in tree {tree}"
        );
        smallest
    }

    fn smallest_waiting_by_scan(&self, tree: &str) -> Option<ResourceVector> {
        self.operations
            .keys()
            .flat_map(|id| self.waiting_of(id))
            .filter(|(t, _)| t == tree)
            .map(|(_, v)| v)
            .reduce(|a, b| a.map(|r, x| x.min(b.get(r))))
    }
}
