//! The smallest job waiting in each tree, per resource, kept as operations change: a
//! node that cannot fit even that is skipped by placement at once, instead of walking
//! every waiting operation on each of its heartbeats (a full node used to cost a walk of
//! the whole tree under the core lock).
//!
//! The per-resource minimum is a lower bound for every waiting job (ignoring tag filters,
//! which only make fewer jobs eligible), so skipping on it never skips a node that could
//! take a job. It is an `OperationIndex`; debug builds check it against a scan.

use crate::operations::operation_index::Aggregate;
use crate::resource_minimum::ResourceMinimum;
use crate::Operation;
use std::collections::HashMap;
use ytsched_common::names::TreeName;
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::OperationState;

/// Per tree: the smallest of its running operations' smallest waiting jobs.
#[derive(Clone, Debug, Default)]
pub(crate) struct SmallestWaiting(HashMap<TreeName, ResourceMinimum>);

impl SmallestWaiting {
    pub(crate) fn smallest(&self, tree: &str) -> Option<ResourceVector> {
        self.0.get(tree)?.smallest()
    }
}

impl Aggregate for SmallestWaiting {
    /// An operation's smallest waiting job in one tree.
    type Part = (TreeName, ResourceVector);

    fn add(&mut self, (tree, v): &Self::Part) {
        self.0.entry(tree.clone()).or_default().add(v);
    }

    fn remove(&mut self, (tree, v): &Self::Part) {
        if let Some(amounts) = self.0.get_mut(tree) {
            amounts.remove(v);
        }
    }
}

/// An operation's smallest waiting job per resource, in each tree it runs in: what it
/// contributes to the index (nothing unless it runs).
pub(crate) fn waiting_of(op: Option<&Operation>) -> Vec<(TreeName, ResourceVector)> {
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
