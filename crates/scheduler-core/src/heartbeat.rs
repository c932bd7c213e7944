//! A node heartbeat: register or refresh the node, take in finished jobs, reconcile
//! what the node runs with what the scheduler believes, then fill the node with work.

use crate::jobs::adoption::StartHold;
use crate::jobs::job_life::job_life;
use crate::membership::reassign_node;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::operation_life::operation_life;
use crate::trees::placement::book_start;
use crate::trees::placement::pick;
use crate::trees::preemption::preemptor;
use crate::trees::share_updater::share_updater;
use crate::{CoreEvent, Node, SchedulerCore};
use std::collections::HashSet;
use ytsched_common::protocol::{
    FinishedJob, HeartbeatReply, HeartbeatRequest, JobStartSpec, UnixMillis, PROTOCOL_VERSION,
};
use ytsched_common::resources::ResourceVector;
use ytsched_common::{JobId, NodeId};

/// How far one heartbeat's sequence number may run ahead of the last one taken from the
/// same incarnation (a million periods: days of heartbeats the scheduler never saw).
const MAX_SEQ_JUMP: u64 = 1_000_000;

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
        if let Some(refusal) = self.refusal_of(&mut req) {
            return refusal;
        }
        self.refresh_node(&req, now);
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
        if let Some(tree) = self
            .nodes
            .get(&ctx.node)
            .and_then(|n| self.cluster.tree_of(n))
        {
            // Whether a lowered limit is exceeded is the update's to say: it runs first if due.
            share_updater!(self).update_if_stale(&tree.clone(), now);
        }
        preemptor!(self).enforce_limits(&mut ctx);
        self.schedule_on(&mut ctx);
        self.reply(ctx)
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

    /// Reply stage: starts resent first (the node would have run them had it read the
    /// reply), each start stamped with its token and noted as sent in this reply.
    fn reply(&mut self, ctx: HeartbeatContext) -> HeartbeatReply {
        let HeartbeatContext {
            node: node_id,
            seq,
            last_reply_seq,
            starts,
            aborts,
            acknowledged,
            resent,
            ..
        } = ctx;
        if last_reply_seq.is_some() {
            for start in &starts {
                self.jobs.sent_in(&node_id, &start.job_id, seq);
            }
        }
        let mut jobs_to_start: Vec<JobStartSpec> = if resent.is_empty() {
            starts
        } else {
            resent.into_iter().chain(starts).collect()
        };
        job_life!(self).stamp_starts(&node_id, &mut jobs_to_start);
        let node = &self.nodes[&node_id];
        HeartbeatReply {
            protocol_version: PROTOCOL_VERSION,
            registration: node.registration.clone(),
            jobs_to_start,
            jobs_to_abort: aborts,
            acknowledged_jobs: acknowledged,
            user_tags: self.cluster.user_tags(&node_id).to_vec(),
            heartbeat_period_ms: self.config.heartbeat_period_ms,
            node_heartbeat_timeout_ms: self
                .cluster
                .node_timeout_ms(node, self.config.node_heartbeat_timeout_ms),
        }
    }

    /// Why this heartbeat is not taken (malformed, another protocol, out of bounds, or
    /// stale), as the reply that says so; `None` when it is taken. Finished jobs' texts
    /// are cut to their bounds here.
    fn refusal_of(&self, req: &mut HeartbeatRequest) -> Option<HeartbeatReply> {
        let period = self.config.heartbeat_period_ms;
        // Tags and hostname are checked when they are new to the scheduler, not on every
        // heartbeat that repeats them.
        let seen_before = self.nodes.get(&req.node_id).is_some_and(|n| {
            n.hostname == req.hostname && n.tags == req.tags && n.system_tags == req.system_tags
        });
        if !seen_before {
            if let Err(e) = req.check() {
                return Some(HeartbeatReply::rejected(e, period));
            }
        }
        for f in &mut req.finished_jobs {
            f.bound();
        }
        if req.protocol_version != PROTOCOL_VERSION {
            return Some(HeartbeatReply::rejected(
                format!(
                    "protocol version {} is not supported (scheduler speaks {PROTOCOL_VERSION})",
                    req.protocol_version
                ),
                period,
            ));
        }
        if let Err(e) = NodeId::parse(req.node_id.as_str()) {
            return Some(HeartbeatReply::rejected(e.to_string(), period));
        }
        for (what, v) in [
            ("resource_limits", &req.resource_limits),
            ("resource_usage", &req.resource_usage),
        ] {
            if let Err((r, x)) = v.check_within(&ResourceVector::NODE_MAXIMUM) {
                return Some(HeartbeatReply::rejected(
                    format!(
                        "{what}.{r} = {x} is not a finite number between 0 and {}",
                        ResourceVector::NODE_MAXIMUM.get(r)
                    ),
                    period,
                ));
            }
        }
        if let Some(node) = self.nodes.get(&req.node_id) {
            // A sequence number far ahead of the last one is not a late delivery but a
            // forgery or a bug; taking it would make every real heartbeat look stale.
            if node.online
                && node.incarnation.as_ref() == Some(&req.incarnation_id)
                && req.seq > node.last_seq.saturating_add(MAX_SEQ_JUMP)
            {
                return Some(HeartbeatReply::stale(
                    format!(
                        "heartbeat {} is more than {MAX_SEQ_JUMP} ahead of the last one ({}): ignored",
                        req.seq, node.last_seq
                    ),
                    period,
                ));
            }
            if req.seq != 0
                && node.incarnation.as_ref() == Some(&req.incarnation_id)
                && req.seq <= node.last_seq
            {
                return Some(HeartbeatReply::stale(
                    format!(
                        "stale heartbeat {} (already have {}): ignored",
                        req.seq, node.last_seq
                    ),
                    period,
                ));
            }
        }
        None
    }

    /// Says whether the store is behind (see `store_behind`); returns whether that
    /// changed, for the driver's one log line per change.
    pub fn set_store_behind(&mut self, behind: bool) -> bool {
        std::mem::replace(&mut self.store_behind, behind) != behind
    }

    /// The node's scheduling stages for this heartbeat: fill it, then preempt for a
    /// starving operation, then speculate. A node that takes no new job (in
    /// maintenance, or in no tree) also preempts and speculates nothing for one; nor does
    /// any while a revived scheduler holds starts (`adoption.rs`) or the store is behind.
    fn schedule_on(&mut self, ctx: &mut HeartbeatContext) {
        let node = &self.nodes[&ctx.node];
        let running = self.jobs.running_on(&ctx.node, &self.operations);
        ctx.begin_placement(node.resource_limits, running);
        let schedulable = node.is_schedulable();
        if schedulable
            && !StartHold::holds(&mut self.start_hold, &mut self.outbox, &self.nodes, ctx.now)
            && !self.store_behind
        {
            self.fill_node(ctx);
            preemptor!(self).preemptive_stage(ctx);
            job_life!(self).speculative_stage(ctx);
        }
    }

    /// Records what the node reported; a node seen for the first time, back online, or
    /// with other tags has its tree membership (re)evaluated.
    fn refresh_node(&mut self, req: &HeartbeatRequest, now: UnixMillis) {
        let node = self
            .nodes
            .entry(req.node_id.clone())
            .or_insert_with(|| Node::new(req.node_id.clone(), Some(req.incarnation_id.clone())));
        if node.incarnation.as_ref() != Some(&req.incarnation_id) {
            // A new agent run read none of the old one's replies, and ran none of its jobs.
            self.jobs.forget_unconfirmed(&req.node_id);
            if node.incarnation.is_some() {
                self.outbox.event(CoreEvent::NodeRestarted {
                    id: node.id.clone(),
                });
            }
            node.incarnation = Some(req.incarnation_id.clone());
        }
        node.last_seq = req.seq;
        let returning = !node.online;
        let tags_changed = node.system_tags != req.system_tags || node.tags != req.tags;
        // A node offers no more than it was approved for, whatever it reports.
        let bound = self.trust.bound(&req.node_id, &req.resource_limits);
        let limits = req.resource_limits.component_min(&bound.resources);
        let alert = ytsched_common::node_approval::excess(&req.resource_limits, &bound.resources)
            .map(|(r, reported, allowed)| {
                over_bound_alert(&req.node_id, r, reported, allowed, bound.source)
            });
        if alert != node.approval_alert {
            node.approval_alert = alert.clone();
            self.outbox.event(CoreEvent::NodeOverApproval {
                id: node.id.clone(),
                alert,
            });
        }
        let limits_changed = node.resource_limits != limits;
        node.hostname = req.hostname.clone();
        node.system_tags = req.system_tags.clone();
        node.tags = req.tags.clone();
        node.resource_limits = limits;
        node.reported_limits = req.resource_limits;
        node.reported_usage = req.resource_usage;
        node.last_heartbeat = now;
        // Evaluated while still offline, so that joining is one event, not two.
        if returning || tags_changed {
            reassign_node(
                &mut self.nodes,
                &self.cluster,
                &mut self.outbox,
                &req.node_id,
            );
        }
        let node = self.nodes.get_mut(&req.node_id).expect("inserted above");
        if returning {
            node.online = true;
            self.outbox.event(CoreEvent::NodeRegistered {
                id: node.id.clone(),
                registration: node.registration.clone(),
            });
        }
        if returning || tags_changed || limits_changed {
            self.placeability.stale |= self.trees.account_node(&self.nodes, &req.node_id);
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

    /// Nodes silent for longer than `node_heartbeat_timeout` go offline; their jobs are
    /// lost and become waiting again.
    pub(super) fn expire_silent_nodes(&mut self, now: UnixMillis) {
        let silent: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|n| {
                n.online
                    && now.saturating_sub(n.last_heartbeat)
                        > self
                            .cluster
                            .node_timeout_ms(n, self.config.node_heartbeat_timeout_ms)
            })
            .map(|n| n.id.clone())
            .collect();
        let mut went_offline = false;
        for node_id in silent {
            let jobs: Vec<JobId> = self.jobs.on(&node_id).cloned().collect();
            for job_id in &jobs {
                job_life!(self).lose_job(&node_id, job_id, now);
            }
            if let Some(node) = self.nodes.get_mut(&node_id) {
                node.online = false;
            }
            self.placeability.stale |= self.trees.account_node(&self.nodes, &node_id);
            self.outbox.event(CoreEvent::NodeOffline {
                id: node_id.clone(),
                lost_jobs: jobs.len(),
            });
            went_offline = true;
        }
        // Their jobs wait again: the nodes left may take them (once, however many left).
        if went_offline {
            self.outbox
                .nudge_all(crate::nodes::node::online_ids(&self.nodes));
        }
    }

    /// Fills what the node has free with jobs, starting them in `ctx`.
    pub(crate) fn fill_node(&mut self, ctx: &mut HeartbeatContext) {
        let (node_id, now) = (&ctx.node, ctx.now);
        let mut free = ctx.free();
        let node = &self.nodes[node_id];
        if !node.is_schedulable() {
            return;
        }
        let Some(tree) = self.cluster.tree_of(node).cloned() else {
            return;
        };
        // Every job takes one user slot: without one free the node is full, whatever
        // else it has (a tolerant comparison of a near-zero request would let a full node
        // walk every waiting operation on each heartbeat).
        if free.user_slots < 1.0 - 1e-9 {
            return;
        }
        // Not even the smallest job waiting in the tree fits: nothing to walk for.
        match self.operations.smallest_waiting_job(&tree) {
            Some(smallest) if smallest.fits_in(&free) => {}
            _ => return,
        }
        share_updater!(self).update_if_stale(&tree, now);
        self.trees.refresh_live(&mut self.operations);
        let Some(shares) = self.trees.shares(&tree) else {
            return;
        };
        self.trees.ensure_live(&self.operations, &tree, &shares);
        // Placement touches only these parts: it reads the node's tags and the
        // operations, and moves the tree's live arrays, the operations it starts jobs of,
        // the job index and the outbox.
        let Self {
            nodes,
            trees,
            operations,
            jobs,
            outbox,
            placement_walks,
            ..
        } = self;
        let tags = &nodes[node_id].all_tags;
        let live = &mut trees.get_mut(tree.as_str()).expect("has shares").live;
        let mut starts = Vec::new();
        // Subtrees that placed nothing on this node: the room only shrinks, so they
        // are not walked again in this heartbeat.
        let mut exhausted = HashSet::new();
        // The root's smallest waiting job bounds every other: once it no longer fits (or
        // no slot is left) the node is full, and the walk that would only prove it is
        // not made.
        while free.user_slots >= 1.0 - 1e-9 && live.waiting[0].is_some_and(|m| m.fits_in(&free)) {
            *placement_walks += 1;
            let Some((elem, op_id, task)) =
                pick(operations, &shares, live, tags, 0, free, &mut exhausted)
            else {
                break;
            };
            let (spec, attempt) = {
                let mut op = operations.edit(&op_id).expect("picked from the map");
                let spec = op.start_job(task, node_id, &tree, now);
                let usage = op.slot(&tree).map_or(ResourceVector::ZERO, |s| s.usage);
                live.set_leaf(&shares, elem, usage, op.smallest_waiting());
                let attempt = op
                    .jobs
                    .get(&spec.job_id)
                    .map(|j| crate::AttemptFacts::of(j));
                (spec, attempt)
            };
            free -= spec.resources;
            book_start(jobs, outbox, node_id, &op_id, &spec, attempt);
            starts.push(spec);
        }
        for spec in starts {
            ctx.start(spec);
        }
    }
}

/// The alert of a node that reports more than its bound allows.
fn over_bound_alert(
    node: &ytsched_common::NodeId,
    r: ytsched_common::resources::Resource,
    reported: f64,
    allowed: f64,
    source: crate::nodes::trust::BoundSource,
) -> String {
    use crate::nodes::trust::BoundSource;
    let raise = match source {
        BoundSource::File => format!("raise it with `ytsched auth add-node {node} --max-resources …`"),
        _ => format!("an admin may approve more: `ytsched node approve {node}` (what it reports) or `--max-resources …`"),
    };
    format!(
        "node reports {} = {reported}, more than the {allowed} {}; it is used as {allowed}; {raise}",
        r.name(),
        source.words()
    )
}
