//! One job's life in one place (issue 39, point 1): a job starts, is interrupted or
//! aborted for any reason (preemption, speculation, limits, membership, a lost gang
//! member), returns a result, is lost with its node, or is adopted after a revival,
//! here and nowhere else. `JobLife` works over disjoint borrows of the core's parts (the
//! operation table, the job index, the outbox, and what it reads of nodes and the
//! configuration), so placement, preemption and the heartbeat call it while holding
//! the other parts they move. Where a result ends its operation, the ending is handed
//! back (`ResultTaken::ends`): finishing an operation moves pools, counts and the
//! pending queue, which are the operations' part.

use crate::jobs::adoption::StartHold;
use crate::jobs::job_index::JobIndex;
use crate::jobs::start_tokens::StartKey;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::placement::book_start;
use crate::trees::pool_rules::PoolRules;
use crate::{ClusterConfig, CoreEvent, Node};
use std::collections::BTreeMap;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{AttemptOf, JobAbort, JobStartSpec, UnixMillis};
use ytsched_common::spec::PreemptionMode;
use ytsched_common::states::{AbortReason, JobState};
use ytsched_common::{JobId, NodeId, OperationId};

/// The parts a job's life moves, borrowed from the core for one call.
pub(crate) struct JobLife<'a> {
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) jobs: &'a mut JobIndex,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) start_key: &'a StartKey,
    pub(crate) start_hold: &'a mut Option<StartHold>,
}

/// `JobLife` over a core's parts, each borrowed on its own, so the caller may hold
/// the others.
macro_rules! job_life {
    ($core:expr) => {
        $crate::jobs::job_life::JobLife {
            operations: &mut $core.operations,
            jobs: &mut $core.jobs,
            outbox: &mut $core.outbox,
            nodes: &$core.nodes,
            cluster: &$core.cluster,
            start_key: &$core.start_key,
            start_hold: &mut $core.start_hold,
        }
    };
}
pub(crate) use job_life;

impl JobLife<'_> {
    #[tracing::instrument(level = "debug", skip_all, fields(job = %job_id, node = %node_id))]
    pub(crate) fn lose_job(&mut self, node_id: &NodeId, job_id: &JobId, now: UnixMillis) {
        self.jobs.ended(node_id, job_id);
        let Some(op_id) = self.jobs.owner(job_id).cloned() else {
            return;
        };
        let aborted = self
            .operations
            .edit(&op_id)
            .is_some_and(|mut op| op.abort_job(job_id, AbortReason::NodeLost, now).is_some());
        if aborted {
            let attempt = self.operations.attempt_facts(&op_id, job_id);
            self.outbox.event(CoreEvent::JobAborted {
                id: job_id.clone(),
                operation: op_id.clone(),
                node: node_id.clone(),
                reason: AbortReason::NodeLost,
                preempted_by: None,
                attempt,
            });
            self.settle_gang_lost(&op_id);
        }
    }

    /// Node `node_id` is lost: the attempts aborted on it that it never confirmed are
    /// recorded `node_lost` (how they ended is unknown) and told so; their indexes wait.
    pub(crate) fn lose_unconfirmed_aborts(&mut self, node_id: &NodeId) {
        for (op_id, job_id) in self.operations.lose_holds_on(node_id) {
            let attempt = self.operations.attempt_facts(&op_id, &job_id);
            self.outbox.event(CoreEvent::JobAborted {
                id: job_id,
                operation: op_id,
                node: node_id.clone(),
                reason: AbortReason::NodeLost,
                preempted_by: None,
                attempt,
            });
        }
    }

    /// Stamps each start going to `node` with its token.
    pub(crate) fn stamp_starts(&self, node: &NodeId, starts: &mut [JobStartSpec]) {
        for s in starts {
            s.start_token = Some(self.start_key.token(node, &s.job_id));
        }
    }

    /// Whether the node a claimed attempt comes from is one its operation may run on:
    /// in one of its trees, and admitted by its and its pools' tag filters there.
    pub(crate) fn may_run_on(
        &self,
        node_id: &NodeId,
        op_id: &OperationId,
        tree: &TreeName,
    ) -> bool {
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
        if !op.adopt_as_attempt(seq, of, node_id, &tree, start_time) {
            return false;
        }
        drop(op);
        self.jobs.started(job_id, op_id, node_id);
        if let Some(hold) = self.start_hold.as_mut() {
            hold.note_adopted();
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

    /// Tells the job index and the log about the members `break_gang` aborted in
    /// operation `op_id`; their nodes hear at their next heartbeat (nudged to make it
    /// soon), which aborts what they still run. Returns them.
    pub(crate) fn settle_gang_lost(
        &mut self,
        op_id: &ytsched_common::OperationId,
    ) -> Vec<(JobId, NodeId)> {
        let lost = match self.operations.edit(op_id) {
            Some(mut op) if !op.gang_lost.is_empty() => op.take_gang_lost(),
            _ => return vec![],
        };
        for (job, node) in &lost {
            self.jobs.ended(node, job);
            let attempt = self.operations.attempt_facts(op_id, job);
            // `node_lost` for a member on the node another member was lost with (`break_gang`).
            let reason = self
                .operations
                .get(op_id)
                .and_then(|o| o.jobs.get(job))
                .and_then(|j| j.abort_reason)
                .unwrap_or(AbortReason::GangMemberLost);
            self.outbox.event(crate::CoreEvent::JobAborted {
                id: job.clone(),
                operation: op_id.clone(),
                node: node.clone(),
                reason,
                preempted_by: None,
                attempt,
            });
            if self.nodes.contains_key(node) {
                self.outbox.nudge(node.clone());
            }
        }
        lost
    }

    /// Takes a running job away: it goes back to waiting (never a failure), the node
    /// is told on this heartbeat, and the event says why. Returns the other members of
    /// its gang this aborted, with their nodes.
    #[tracing::instrument(level = "debug", skip_all, fields(job = %job_id, operation = %op_id, reason = %reason))]
    pub(crate) fn abort_running_job(
        &mut self,
        node_id: &NodeId,
        op_id: &OperationId,
        job_id: &JobId,
        reason: AbortReason,
        message: &str,
        now: UnixMillis,
    ) -> Vec<(JobId, NodeId)> {
        self.abort_running_job_for(node_id, op_id, job_id, reason, message, now, None)
    }

    /// `abort_running_job` for a preemption: the event names the starving operation
    /// `preempted_by` it made room for.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn abort_running_job_for(
        &mut self,
        node_id: &NodeId,
        op_id: &OperationId,
        job_id: &JobId,
        reason: AbortReason,
        message: &str,
        now: UnixMillis,
        preempted_by: Option<&OperationId>,
    ) -> Vec<(JobId, NodeId)> {
        let Some(mut op) = self.operations.edit(op_id) else {
            return vec![];
        };
        if op.abort_job(job_id, reason, now).is_none() {
            return vec![];
        }
        if let Some(j) = op.jobs.get_mut(job_id) {
            j.error = Some(message.to_string());
        }
        let attempt = op.jobs.get(job_id).map(crate::AttemptFacts::of);
        drop(op);
        self.jobs.ended(node_id, job_id);
        self.outbox.event(CoreEvent::JobAborted {
            id: job_id.clone(),
            operation: op_id.clone(),
            node: node_id.clone(),
            reason,
            preempted_by: preempted_by.cloned(),
            attempt,
        });
        self.settle_gang_lost(op_id)
    }

    /// Books a job just started on a node (see `book_start`).
    pub(crate) fn record_start(
        &mut self,
        node_id: &NodeId,
        op_id: &OperationId,
        spec: &JobStartSpec,
    ) {
        let attempt = self.operations.attempt_facts(op_id, &spec.job_id);
        book_start(self.jobs, self.outbox, node_id, op_id, spec, attempt);
    }

    /// Preempts `victims` on the node: at once, or gracefully where their operation
    /// asks for it. A gang victim takes its whole gang with it: its members on this node
    /// are aborted here too. Returns whether any victim is graceful, and the aborts.
    pub(crate) fn take_victims(
        &mut self,
        node_id: &NodeId,
        victims: Vec<(JobId, OperationId)>,
        preemptor: &OperationId,
        message: &str,
        now: UnixMillis,
    ) -> (bool, Vec<JobAbort>) {
        let mut graceful = false;
        let mut aborts = vec![];
        for (job, owner) in victims {
            if self.operations[&owner].spec.preemption_mode == Some(PreemptionMode::Graceful) {
                graceful = true;
                // A gang victim was chosen for all its jobs here: each is told.
                let mut jobs = vec![job];
                if self.operations[&owner].is_gang() {
                    jobs = self
                        .jobs
                        .on(node_id)
                        .filter(|j| self.jobs.owner(j) == Some(&owner))
                        .filter(|j| {
                            self.operations[&owner].jobs.get(j).is_some_and(|x| {
                                x.state == JobState::Running && x.interrupting.is_none()
                            })
                        })
                        .cloned()
                        .collect();
                }
                for j in jobs {
                    aborts.push(self.interrupt_job(node_id, &owner, &j, preemptor, message, now));
                }
                continue;
            }
            let members = self.abort_running_job_for(
                node_id,
                &owner,
                &job,
                AbortReason::Preempted,
                message,
                now,
                Some(preemptor),
            );
            aborts.push(JobAbort {
                job_id: job,
                reason: AbortReason::Preempted,
                message: message.to_string(),
                graceful_timeout_ms: None,
            });
            for (member, on) in members {
                if &on == node_id {
                    aborts.push(JobAbort {
                        job_id: member,
                        reason: AbortReason::GangMemberLost,
                        message: format!("another job of its gang was {message}"),
                        graceful_timeout_ms: None,
                    });
                }
            }
        }
        (graceful, aborts)
    }

    /// Graceful preemption (SPEC 5.3): the job is told to stop with its interruption
    /// signal and the tree's `job_graceful_interrupt_timeout`; it stays running, and
    /// counted on its node, until its node reports it gone.
    pub(crate) fn interrupt_job(
        &mut self,
        node_id: &NodeId,
        op_id: &OperationId,
        job_id: &JobId,
        preemptor: &OperationId,
        message: &str,
        now: UnixMillis,
    ) -> JobAbort {
        if let Some(mut op) = self.operations.edit(op_id) {
            if let Some(j) = op.jobs.get_mut(job_id) {
                j.interrupting = Some(now);
                j.error = Some(format!("{message} (gracefully)"));
            }
            op.changed_jobs.push(job_id.clone());
        }
        let attempt = self.operations.attempt_facts(op_id, job_id);
        self.outbox.event(CoreEvent::JobInterrupted {
            id: job_id.clone(),
            operation: op_id.clone(),
            node: node_id.clone(),
            preempted_by: Some(preemptor.clone()),
            attempt,
        });
        let job = &self.operations[op_id].jobs[job_id];
        crate::trees::victims::graceful_abort(self.cluster, job, now)
    }

    /// After `winner` completed: its other attempt, if still running, loses. Its node is
    /// told on its next heartbeat (nudged to come soon).
    pub(crate) fn abort_losing_copy(
        &mut self,
        op_id: &OperationId,
        winner: &JobId,
        now: UnixMillis,
    ) {
        let Some(op) = self.operations.get(op_id) else {
            return;
        };
        let Some(loser) = op.running_copy(winner) else {
            return;
        };
        let (loser_id, loser_node) = (loser.id.clone(), loser.node.clone());
        let message = format!("job {winner} (the other attempt of this job) finished first");
        self.abort_running_job(
            &loser_node,
            op_id,
            &loser_id,
            AbortReason::SpeculativeLost,
            &message,
            now,
        );
        self.outbox.nudge(loser_node);
    }
}
