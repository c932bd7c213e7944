//! A node heartbeat: register or refresh the node, take in finished jobs, reconcile
//! what the node runs with what the scheduler believes, then fill the node with work.

use crate::jobs::adoption::StartHold;
use crate::jobs::job_life::job_life;
use crate::membership::reassign_node;
use crate::nodes::heartbeat_checks::refusal_of;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::operation_life::operation_life;
use crate::trees::placement::placement_due;
use crate::trees::placement::Placer;
use crate::trees::preemption::preemptor;
use crate::trees::share_updater::share_updater;
use crate::{CoreEvent, Node, SchedulerCore};
use ytsched_common::protocol::{FinishedJob, HeartbeatReply, HeartbeatRequest, UnixMillis};
use ytsched_common::{JobId, NodeId};

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
        let (period, timeout) = (
            self.config.heartbeat_period_ms,
            self.config.node_heartbeat_timeout_ms,
        );
        job_life!(self).reply(ctx, period, timeout)
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
