//! Where each job is. A job's state is recorded once, in its operation's `jobs`; this
//! index says which operation owns a job (results arrive by job id) and which jobs the
//! scheduler believes run on each node, with the starts a node has not yet confirmed.
//! Only these methods change it, so the owner, the node's set and the unconfirmed
//! starts cannot drift apart.

use crate::operations::table::OperationTable;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use ytsched_common::resources::ResourceVector;
use ytsched_common::{JobId, NodeId, OperationId};

/// `sent_in` of a start booked outside a heartbeat (a gang's): no reply has carried it,
/// so the node's next heartbeat sends it.
pub(crate) const NEVER_SENT: u64 = u64::MAX;

#[derive(Clone, Debug, Default)]
struct OnNode {
    running: BTreeSet<JobId>,
    /// Jobs of `running` whose start went out in the reply to the node's heartbeat
    /// `seq` and that the node has not reported since: until it says it read that reply,
    /// a job it does not report is resent, not lost.
    unconfirmed: HashMap<JobId, u64>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct JobIndex {
    /// Every job of every operation in memory, running or finished.
    owner: HashMap<JobId, OperationId>,
    /// Ordered, so walks over nodes (revival) are deterministic.
    nodes: BTreeMap<NodeId, OnNode>,
}

impl JobIndex {
    pub fn owner(&self, job: &JobId) -> Option<&OperationId> {
        self.owner.get(job)
    }

    /// A job of `operation` that runs nowhere (restored finished from the store).
    pub fn owned(&mut self, job: &JobId, operation: &OperationId) {
        self.owner.insert(job.clone(), operation.clone());
    }

    /// A job now runs on `node` (placed, or restored from the store).
    pub fn started(&mut self, job: &JobId, operation: &OperationId, node: &NodeId) {
        self.owner.insert(job.clone(), operation.clone());
        self.nodes
            .entry(node.clone())
            .or_default()
            .running
            .insert(job.clone());
    }

    /// The start of `job` went out in the reply to heartbeat `seq`.
    pub fn sent_in(&mut self, node: &NodeId, job: &JobId, seq: u64) {
        if let Some(n) = self.nodes.get_mut(node) {
            if n.running.contains(job) {
                n.unconfirmed.insert(job.clone(), seq);
            }
        }
    }

    /// The job no longer runs on `node` (finished, aborted, lost); its owner is kept
    /// for results that arrive late.
    pub fn ended(&mut self, node: &NodeId, job: &JobId) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.running.remove(job);
            n.unconfirmed.remove(job);
            if n.running.is_empty() {
                self.nodes.remove(node);
            }
        }
    }

    /// The job's operation left memory.
    pub fn forget(&mut self, job: &JobId) {
        self.owner.remove(job);
    }

    /// The jobs the scheduler believes run on `node`.
    pub fn on(&self, node: &NodeId) -> impl Iterator<Item = &JobId> + '_ {
        self.nodes
            .get(node)
            .into_iter()
            .flat_map(|n| n.running.iter())
    }

    pub fn count_on(&self, node: &NodeId) -> usize {
        self.nodes.get(node).map_or(0, |n| n.running.len())
    }

    /// Booked outside a heartbeat and not yet sent in any reply.
    pub fn never_sent(&self, node: &NodeId, job: &JobId) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| n.unconfirmed.get(job) == Some(&NEVER_SENT))
    }

    pub fn is_unconfirmed(&self, node: &NodeId, job: &JobId) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| n.unconfirmed.contains_key(job))
    }

    /// Keeps only the unconfirmed starts that `keep(job, sent_in)` says are still
    /// unconfirmed.
    pub fn confirm(&mut self, node: &NodeId, mut keep: impl FnMut(&JobId, u64) -> bool) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.unconfirmed.retain(|job, seq| keep(job, *seq));
        }
    }

    /// A new run of the node's agent read none of the old run's replies.
    pub fn forget_unconfirmed(&mut self, node: &NodeId) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.unconfirmed.clear();
        }
    }

    /// No job is known at all.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty() && self.nodes.is_empty()
    }

    /// Nodes the index has jobs on.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeId> + '_ {
        self.nodes.keys()
    }

    /// What the jobs the scheduler believes run on a node hold.
    pub(crate) fn running_on(&self, node: &NodeId, operations: &OperationTable) -> ResourceVector {
        self.on(node)
            .filter_map(|j| Some(operations.get(self.owner(j)?)?.jobs.get(j)?.resources))
            .sum()
    }

    /// What the jobs told to exit gracefully on this node hold.
    pub(crate) fn interrupting_on(
        &self,
        node: &NodeId,
        operations: &OperationTable,
    ) -> ResourceVector {
        self.on(node)
            .filter_map(|j| {
                let job = operations.get(self.owner(j)?)?.jobs.get(j)?;
                job.interrupting.map(|_| job.resources)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_ending_leaves_no_trace_on_its_node_but_keeps_its_owner() {
        let (job, op, node) = (
            JobId("j".into()),
            OperationId("o".into()),
            NodeId("n".into()),
        );
        let mut index = JobIndex::default();
        index.started(&job, &op, &node);
        index.sent_in(&node, &job, 7);
        assert!(index.is_unconfirmed(&node, &job));
        assert_eq!(index.count_on(&node), 1);
        index.ended(&node, &job);
        assert_eq!(index.count_on(&node), 0);
        assert!(!index.is_unconfirmed(&node, &job));
        assert_eq!(index.nodes().count(), 0);
        assert_eq!(index.owner(&job), Some(&op));
        index.forget(&job);
        assert_eq!(index.owner(&job), None);
        // A start is never marked unconfirmed for a job not running there.
        index.sent_in(&node, &job, 8);
        assert!(!index.is_unconfirmed(&node, &job));
    }
}
