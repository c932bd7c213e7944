//! Attempts a node runs that the store never recorded. Starts are not stored (as in
//! YTsaurus, a heartbeat is answered from memory and a restarted scheduler learns running
//! jobs from the nodes), so after a crash a node may run, or have finished, an attempt
//! the revived scheduler has never heard of. Its job id names the operation and the
//! attempt number, and the node says which job it runs (`AttemptOf`): the attempt is
//! adopted when that job still waits, and aborted (its result dropped) otherwise. So
//! no job completes twice, and none is lost.
//!
//! For adoption to win over a fresh start of the same job, a revived scheduler that
//! holds unfinished operations starts nothing for the revival window: every live agent
//! reports within it (an agent retries at least every `AGENT_MAX_RETRY_MS`). Ending it
//! earlier, once no new node had come back for that gap plus a period, was tried: under
//! a loaded machine an agent came back later than that and one job started twice.

use crate::{CoreEvent, SchedulerCore};
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{AttemptOf, JobStartSpec, UnixMillis};
use ytsched_common::{JobId, NodeId, OperationId};

/// A revived scheduler's pause of starts while nodes report what they run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StartHold {
    /// The revival window's end.
    deadline: UnixMillis,
    /// Attempts adopted meanwhile, for the log line at its end.
    adopted: usize,
}

impl StartHold {
    pub(crate) fn new(deadline: UnixMillis) -> Self {
        StartHold {
            deadline,
            adopted: 0,
        }
    }
}

impl SchedulerCore {
    /// The key start tokens are made and checked with: the same for every leader of a
    /// cluster (the service keeps it in the store).
    pub fn set_start_key(&mut self, key: crate::StartKey) {
        self.start_key = key;
    }

    /// Stamps each start going to `node` with its token.
    pub(crate) fn stamp_starts(&self, node: &NodeId, starts: &mut [JobStartSpec]) {
        for s in starts {
            s.start_token = Some(self.start_key.token(node, &s.job_id));
        }
    }

    /// Whether the node a claimed attempt comes from is one its operation may run on:
    /// in one of its trees, and admitted by its and its pools' tag filters there.
    fn may_run_on(&self, node_id: &NodeId, op_id: &OperationId, tree: &TreeName) -> bool {
        let (Some(node), Some(op)) = (self.nodes.get(node_id), self.operations.get(op_id)) else {
            return false;
        };
        let tags = &node.all_tags;
        let Some(slot) = op.slot(tree.as_str()) else {
            return false;
        };
        op.tag_filter().matches(tags)
            && self
                .cluster
                .pool_filters(tree.as_str(), &slot.pool)
                .iter()
                .all(|f| f.matches(tags))
    }

    /// Whether starts are held now; ends the hold when it is over.
    pub(crate) fn starts_held(&mut self, now: UnixMillis) -> bool {
        let Some(hold) = self.start_hold else {
            return false;
        };
        if now < hold.deadline {
            return true;
        }
        self.start_hold = None;
        self.outbox.event(CoreEvent::StartsResumed {
            adopted_jobs: hold.adopted,
        });
        self.nudge_all_online();
        false
    }

    /// Takes in attempt `job_id` of operation `op_id` that `node_id` reports and nothing
    /// recorded; returns whether it now runs there as that job's attempt.
    pub(crate) fn adopt_attempt(
        &mut self,
        node_id: &NodeId,
        job_id: &JobId,
        op_id: &OperationId,
        of: Option<&AttemptOf>,
        start_time: UnixMillis,
    ) -> bool {
        let Some(of) = of else {
            return false;
        };
        // Only what a scheduler started on this very node, for a node the operation
        // may run on; anything else it claims is aborted there, the operation untouched.
        if !self
            .start_key
            .verifies(node_id, job_id, of.start_token.as_deref())
        {
            return false;
        }
        let Some(seq) = job_id.attempt_seq(op_id) else {
            return false;
        };
        let Some(tree) = self
            .nodes
            .get(node_id)
            .and_then(|n| self.cluster.tree_of(n))
            .cloned()
        else {
            return false;
        };
        if !self.may_run_on(node_id, op_id, &tree) {
            return false;
        }
        // Checked before the edit: an edit marks the operation changed, and results of
        // settled attempts (sent again until acknowledged) come this way every time.
        let may = self
            .operations
            .get(op_id)
            .is_some_and(|o| o.adoptable(seq, of, &tree).is_some());
        if !may {
            return false;
        }
        let Some(mut op) = self.operations.edit(op_id) else {
            return false;
        };
        if !op.adopt_attempt(seq, of, node_id, &tree, start_time) {
            return false;
        }
        drop(op);
        self.jobs.started(job_id, op_id, node_id);
        if let Some(hold) = self.start_hold.as_mut() {
            hold.adopted += 1;
        }
        let attempt = self.operations.attempt_facts(op_id, job_id);
        self.outbox.event(CoreEvent::JobAdopted {
            id: job_id.clone(),
            operation: op_id.clone(),
            node: node_id.clone(),
            attempt,
        });
        true
    }
}
