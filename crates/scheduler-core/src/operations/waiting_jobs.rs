//! The smallest job waiting in each tree, per resource, kept as operations change: a
//! node that cannot fit even that is skipped by placement at once, instead of walking
//! every waiting operation on each of its heartbeats (a full node used to cost a walk of
//! the whole tree under the core lock).
//!
//! The per-resource minimum is a lower bound for every waiting job (ignoring tag filters,
//! which only make fewer jobs eligible), so skipping on it never skips a node that could
//! take a job. It is an `OperationIndex`; debug builds check it against a scan.

use crate::operations::operation_index::Aggregate;
use crate::{Operation, SchedulerCore};
use std::collections::{BTreeMap, HashMap};
use ytsched_common::names::TreeName;
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::states::OperationState;

/// A non-negative amount ordered exactly (the bits of a non-negative f64 sort as it does).
type Key = u64;

fn key(v: f64) -> Key {
    v.max(0.0).to_bits()
}

/// Per tree and resource: how many operations' smallest waiting job has each amount.
#[derive(Clone, Debug, Default)]
pub(crate) struct SmallestWaiting(HashMap<TreeName, [BTreeMap<Key, u32>; 4]>);

impl SmallestWaiting {
    fn smallest(&self, tree: &str) -> Option<ResourceVector> {
        let amounts = self.0.get(tree)?;
        let mut out = ResourceVector::ZERO;
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let (&k, _) = amounts[i].first_key_value()?;
            out.set(r, f64::from_bits(k));
        }
        Some(out)
    }
}

impl Aggregate for SmallestWaiting {
    /// An operation's smallest waiting job in one tree.
    type Part = (TreeName, ResourceVector);

    fn add(&mut self, (tree, v): &Self::Part) {
        let amounts = self.0.entry(tree.clone()).or_default();
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            *amounts[i].entry(key(v.get(r))).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, (tree, v): &Self::Part) {
        let Some(amounts) = self.0.get_mut(tree) else {
            return;
        };
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let k = key(v.get(r));
            if let Some(c) = amounts[i].get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    amounts[i].remove(&k);
                }
            }
        }
    }
}

/// An operation's smallest waiting job per resource, in each tree it runs in: what it
/// contributes to the index (nothing unless it runs).
fn waiting_of(op: Option<&Operation>) -> Vec<(TreeName, ResourceVector)> {
    let Some(op) = op.filter(|o| o.state == OperationState::Running) else {
        return vec![];
    };
    let Some(smallest) = op.smallest_waiting() else {
        return vec![];
    };
    op.trees
        .iter()
        .map(|(t, _)| (t.clone(), smallest))
        .collect()
}

impl SchedulerCore {
    /// The per-resource minimum over every job waiting in `tree` (None: none waits).
    pub(crate) fn smallest_waiting_job(&self, tree: &str) -> Option<ResourceVector> {
        let mut indexes = self.operations.indexes();
        let smallest = indexes
            .waiting
            .refresh(
                || self.operations.keys().cloned().collect(),
                |id| waiting_of(self.operations.get(id)),
            )
            .smallest(tree);
        drop(indexes);
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
            .flat_map(|id| waiting_of(self.operations.get(id)))
            .filter(|(t, _)| t == tree)
            .map(|(_, v)| v)
            .reduce(|a, b| a.map(|r, x| x.min(b.get(r))))
    }
}
