//! A node heartbeat: register or refresh the node, take in finished jobs, reconcile
//! what the node runs with what the scheduler believes, then fill the node with work.

use crate::jobs::adoption::StartHold;
use crate::jobs::job_life::job_life;
use crate::nodes::heartbeat_checks::refusal_of;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_life::node_life;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::operation_life::operation_life;
use crate::trees::placement::placement_due;
use crate::trees::placement::Placer;
use crate::trees::preemption::preemptor;
use crate::trees::share_updater::share_updater;
use crate::{Node, SchedulerCore};
use ytsched_common::protocol::{FinishedJob, HeartbeatReply, HeartbeatRequest, UnixMillis};
use ytsched_common::resources::ResourceVector;

impl SchedulerCore {
    /// A node's heartbeat, as a pipeline over one context made first: refusal →
    /// refresh → results → reconcile → limits → placement → preemption → speculation →
    /// reply.
    pub fn process_heartbeat(
        &mut self,
        mut req: HeartbeatRequest,
        now: UnixMillis,
    ) -> HeartbeatReply {
        self.latest_now.observe(now);
        if let Some(refusal) = refusal_of(&self.nodes, self.config.heartbeat_period_ms, &mut req) {
            return refusal;
        }
        node_life!(self).refresh(&req, now);
        let mut ctx = HeartbeatContext::new(req.node_id.clone(), now, req.seq, req.last_reply_seq);
        self.take_results(&mut ctx, &req.finished_jobs);
        if self
            .nodes
            .get_mut(&ctx.node)
            .is_some_and(Node::take_evict_pending)
        {
            for tree in job_life!(self).evict_strays(&ctx.node, now) {
                self.trees.mark_stale(&tree);
            }
        }
        job_life!(self).reconcile_running(&mut ctx, &req.running_jobs);
        self.answer_roll_call(&ctx.node, now);
        if let Some(tree) = self
            .nodes
            .get(&ctx.node)
            .and_then(|n| self.cluster.tree_of(n))
        {
            // Whether a lowered limit is exceeded is the update's to say: it runs first if due.
            share_updater!(self).update_if_stale(tree, now);
        }
        // What the node's jobs hold, summed once (a look at each job's operation): again
        // only if limits just took some back.
        let mut running = self.jobs.running_on(&ctx.node, &self.operations);
        if preemptor!(self).enforce_limits(&mut ctx, running) {
            running = self.jobs.running_on(&ctx.node, &self.operations);
        }
        self.schedule_on(&mut ctx, running);
        let (period, timeout) = (
            self.config.heartbeat_period_ms,
            self.config.node_heartbeat_timeout_ms,
        );
        if self.trust.unstored(&ctx.node) {
            // A node first heard now is on a successor's roll call only once its record
            // is stored; it sends its next heartbeat, the first that may bring it work,
            // only after this reply.
            self.outbox.reply_after_store();
        }
        job_life!(self).reply(ctx, period, timeout)
    }

    /// A revived scheduler heard `node` say what it runs; once every node it knows of
    /// has, the revival window ends now (`jobs/roll_call.rs`): starts resume from this
    /// heartbeat on, and no stored running job is left unreported.
    fn answer_roll_call(&mut self, node: &ytsched_common::NodeId, now: UnixMillis) {
        if !self.roll_call.as_mut().is_some_and(|r| r.answered(node)) {
            return;
        }
        self.roll_call = None;
        if let Some(hold) = self.start_hold.as_mut() {
            hold.deadline = hold.deadline.min(now);
        }
        if let Some(deadline) = self.revival_deadline.as_mut() {
            *deadline = (*deadline).min(now);
        }
        job_life!(self).end_revival_if_due(&mut self.revival_deadline, now);
    }

    /// Results stage: each result taken into its job's life; an operation it ends
    /// finishes.
    fn take_results(&mut self, ctx: &mut HeartbeatContext, results: &[FinishedJob]) {
        for result in results {
            let taken = job_life!(self).apply_result(&ctx.node, result, ctx.now);
            if taken.acknowledge {
                ctx.acknowledged.push(result.job_id.clone());
            }
            if let Some((op_id, state, error)) = taken.ends {
                operation_life!(self).finish(&op_id, state, error, ctx.now);
            }
        }
    }

    /// Says whether the store is behind (see `store_behind`); returns whether that
    /// changed, for the driver's one log line per change.
    pub fn set_store_behind(&mut self, behind: bool) -> bool {
        std::mem::replace(&mut self.store_behind, behind) != behind
    }

    /// Says whether the leader lease is surely still this scheduler's (see
    /// `lease_unsure`); while it is not, no job starts.
    pub fn set_lease_sure(&mut self, sure: bool) {
        self.lease_unsure = !sure;
    }

    /// The node's scheduling stages for this heartbeat: fill it, then preempt for a
    /// starving operation, then speculate. A node that takes no new job (in
    /// maintenance, or in no tree) also preempts and speculates nothing for one; nor does
    /// any while a revived scheduler holds starts (`adoption.rs`), the store is behind, or
    /// the leader lease is not surely held.
    fn schedule_on(&mut self, ctx: &mut HeartbeatContext, running: ResourceVector) {
        let node = &self.nodes[&ctx.node];
        ctx.begin_placement(node.resource_limits, running);
        let schedulable = node.is_schedulable();
        if schedulable
            && !StartHold::holds(&mut self.start_hold, &mut self.outbox, &self.nodes, ctx.now)
            && !self.store_behind
            && !self.lease_unsure
        {
            if let Some(tree) = placement_due(&self.nodes, &self.cluster, &self.operations, ctx) {
                share_updater!(self).update_if_stale(&tree, ctx.now);
                Placer {
                    nodes: &self.nodes,
                    trees: &mut self.trees,
                    operations: &mut self.operations,
                    jobs: &mut self.jobs,
                    outbox: &mut self.outbox,
                    placement_walks: &mut self.placement_walks,
                }
                .fill(ctx, &tree);
            }
            preemptor!(self).preemptive_stage(ctx);
            job_life!(self).speculative_stage(ctx);
        }
    }

    /// The revived scheduler answers its first heartbeat now: the revival window (the
    /// pause of starts while nodes say what they run, then the loss of what they did
    /// not) counts from here, not from the revival. A revival whose writes took long (a
    /// slow store: 47 s once in issue 42's campaign) otherwise left nodes no time to
    /// report, and a job that had finished meanwhile on a node not yet heard from ran
    /// again.
    pub fn begin_serving(&mut self, now: UnixMillis, window_ms: u64) {
        self.latest_now.observe(now);
        let until = now.saturating_add(window_ms);
        if let Some(deadline) = self.revival_deadline.as_mut() {
            *deadline = (*deadline).max(until);
        }
        if let Some(hold) = self.start_hold.as_mut() {
            hold.deadline = hold.deadline.max(until);
        }
        if self.revival_deadline.is_some() && !self.config.nodes_declared {
            let stored_running = self.nodes.keys();
            let known = self.trust.known_nodes().chain(stored_running).cloned();
            self.roll_call = crate::jobs::roll_call::RollCall::new(known);
        }
    }

    /// The scheduler itself was cut off from the bus (a NATS outage): nodes could not
    /// reach it either, so their silence so far is not theirs. Their timeouts restart now.
    pub fn bus_restored(&mut self, now: UnixMillis) {
        self.latest_now.observe(now);
        for node in self.nodes.values_mut().filter(|n| n.online) {
            node.last_heartbeat = node.last_heartbeat.max(now);
        }
        if let Some(deadline) = self.revival_deadline.as_mut() {
            *deadline = (*deadline).max(now + self.config.heartbeat_period_ms * 5);
        }
    }
}
