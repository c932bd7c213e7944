//! A node's life as the scheduler sees it: each heartbeat refreshes what it reports
//! (its incarnation, tags, resources bounded by what it was approved for, its tree), and
//! a node silent past its tree's `node_heartbeat_timeout` goes offline, its jobs lost
//! and run again elsewhere.

use crate::jobs::job_index::JobIndex;
use crate::jobs::job_life::job_life;
use crate::membership::reassign_node;
use crate::nodes::node_trees::NodeTrees;
use crate::nodes::trust::NodeTrust;
use crate::operations::placeability::PlaceabilityWatch;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::tree_state::TreeStates;
use crate::ClusterConfig;
use crate::CoreConfig;
use crate::CoreEvent;
use crate::Node;
use crate::StartHold;
use crate::StartKey;
use std::collections::BTreeMap;
use ytsched_common::protocol::{HeartbeatRequest, UnixMillis};
use ytsched_common::{JobId, NodeId};

/// What a node's life moves and reads, borrowed from the core.
pub(crate) struct NodeLife<'a> {
    pub(crate) config: &'a CoreConfig,
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) nodes: &'a mut BTreeMap<NodeId, Node>,
    pub(crate) jobs: &'a mut JobIndex,
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) trust: &'a mut NodeTrust,
    pub(crate) trees: &'a mut TreeStates,
    pub(crate) placeability: &'a mut PlaceabilityWatch,
    pub(crate) start_key: &'a StartKey,
    pub(crate) start_hold: &'a mut Option<StartHold>,
}

/// `NodeLife` over a core's parts.
macro_rules! node_life {
    ($core:expr) => {
        $crate::nodes::node_life::NodeLife {
            config: &$core.config,
            cluster: &$core.cluster,
            nodes: &mut $core.nodes,
            jobs: &mut $core.jobs,
            operations: &mut $core.operations,
            outbox: &mut $core.outbox,
            trust: &mut $core.trust,
            trees: &mut $core.trees,
            placeability: &mut $core.placeability,
            start_key: &$core.start_key,
            start_hold: &mut $core.start_hold,
        }
    };
}
pub(crate) use node_life;

impl NodeLife<'_> {
    /// Records what the node reported; a node seen for the first time, back online, or
    /// with other tags has its tree membership (re)evaluated.
    pub(crate) fn refresh(&mut self, req: &HeartbeatRequest, now: UnixMillis) {
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
            reassign_node(self.nodes, self.cluster, self.outbox, &req.node_id);
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
            self.placeability.stale |= self.trees.account_node(self.nodes, &req.node_id);
        }
    }

    /// Nodes silent for longer than `node_heartbeat_timeout` go offline; their jobs are
    /// lost and become waiting again.
    pub(crate) fn expire_silent(&mut self, now: UnixMillis) {
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
            job_life!(self).lose_unconfirmed_aborts(&node_id);
            if let Some(node) = self.nodes.get_mut(&node_id) {
                node.online = false;
            }
            self.placeability.stale |= self.trees.account_node(self.nodes, &node_id);
            self.outbox.event(CoreEvent::NodeOffline {
                id: node_id.clone(),
                lost_jobs: jobs.len(),
            });
            went_offline = true;
        }
        // Their jobs wait again: the nodes left may take them (once, however many left).
        if went_offline {
            self.outbox
                .nudge_all(crate::nodes::node::online_ids(self.nodes));
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
