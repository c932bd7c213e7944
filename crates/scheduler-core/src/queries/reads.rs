//! The core's read model: what queries read (operations, trees, configuration, nodes,
//! jobs, damaged records, share history), borrowed together and only for reading. The
//! API's reads (the orchid, explanations, pages, operation infos) are its methods, so
//! the core's facade routes writes and hands out this view for reads.

use crate::jobs::job_index::JobIndex;
use crate::operations::table::OperationTable;
use crate::queries::share_history::{ShareHistory, ShareSample};
use crate::trees::preemptibility::Victims;
use crate::trees::starvation::{ElementKey, ElementStarvation};
use crate::trees::tree_state::TreeStates;
use crate::{ClusterConfig, Node};
use std::collections::BTreeMap;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::{NodeId, OperationId};

/// A read-only view of the core, for queries.
pub struct CoreReads<'a> {
    pub(crate) operations: &'a OperationTable,
    pub(crate) trees: &'a TreeStates,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) jobs: &'a JobIndex,
    pub(crate) damaged: &'a BTreeMap<OperationId, String>,
    pub(crate) share_history: &'a ShareHistory,
    pub(crate) finished_order: &'a crate::operations::retention::FinishedOrder,
    /// The latest time any call brought (what "now" is for a read).
    pub(crate) latest_now: UnixMillis,
}

impl<'a> CoreReads<'a> {
    /// What choosing victims reads, for the preemptibility the orchid and explain show.
    pub(crate) fn victims(&self) -> Victims<'a> {
        Victims {
            operations: self.operations,
            jobs: self.jobs,
            cluster: self.cluster,
            trees: self.trees,
        }
    }

    /// An operation's recent usage and fair share, oldest first (empty if none kept).
    pub fn share_history(&self, id: &OperationId) -> Vec<ShareSample> {
        self.share_history.of(id)
    }

    /// An element's statuses as of the last update.
    pub fn starvation_of(&self, tree: &str, key: &ElementKey) -> Option<ElementStarvation> {
        self.trees.get(tree)?.starvation.get(key).copied()
    }

    /// A node as the core holds it (for the event log's `node_registered`).
    pub fn node(&self, id: &NodeId) -> Option<&'a crate::Node> {
        let nodes: &'a std::collections::BTreeMap<NodeId, crate::Node> = self.nodes;
        nodes.get(id)
    }

    /// Every stored file a live (unfinished) operation names: the file store keeps these
    /// whatever their age (SPEC 5.17).
    pub fn files_in_use(&self) -> std::collections::HashSet<ytsched_common::files::Sha256Digest> {
        self.operations
            .values()
            .filter(|op| !op.state.is_finished())
            .flat_map(|op| op.spec.tasks.values().flat_map(|t| t.stored_files()))
            .cloned()
            .collect()
    }

    /// How many operations are held in memory, finished or not.
    pub fn operation_count(&self) -> usize {
        self.operations.len()
    }

    /// How many finished operations are still held in memory.
    pub fn retained_finished_count(&self) -> usize {
        self.finished_order
            .values()
            .map(std::collections::BTreeSet::len)
            .sum()
    }
}
