//! What the scheduler knows about each exec node, learned from its heartbeats.

use std::collections::BTreeSet;
use ytsched_common::maintenance::NodeMaintenance;
use ytsched_common::protocol::{Registration, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::{IncarnationId, NodeId};

#[derive(Clone, Debug)]
pub struct Node {
    pub id: NodeId,
    /// The agent run it last heard from; `None` for a node known only from jobs the
    /// store says run there (a revived scheduler has not heard from it yet).
    pub incarnation: Option<IncarnationId>,
    /// The newest heartbeat taken from this incarnation.
    pub last_seq: u64,
    pub hostname: String,
    /// Detected by the agent.
    pub system_tags: Vec<String>,
    /// Configured on the agent (`--tag`).
    pub tags: Vec<String>,
    /// Every tag, admin-set user tags included: what filters are evaluated against.
    pub all_tags: BTreeSet<String>,
    pub resource_limits: ResourceVector,
    /// Usage as the node last reported it (includes jobs being killed).
    pub reported_usage: ResourceVector,
    /// Resources as the node last reported them, before its bound (`nodes/trust.rs`).
    pub reported_limits: ResourceVector,
    pub last_heartbeat: UnixMillis,
    pub online: bool,
    pub registration: Registration,
    /// Its tree changed, or it was banned, since its last heartbeat: that heartbeat looks
    /// for jobs it may no longer run (and no other heartbeat needs to).
    pub evict_pending: bool,
    /// When this node last ran a preemptive stage (for `preemptive_scheduling_backoff`).
    pub last_preemptive_stage: Option<UnixMillis>,
    /// A copy of what the configuration says (`ClusterConfig::node_maintenance`), kept
    /// here so placement reads it without a lookup.
    pub maintenance: NodeMaintenance,
    /// Why its limits are less than it reports: it claims more than it was approved
    /// for (`ytsched auth add-node --max-resources`, or the defaults).
    pub approval_alert: Option<String>,
}

impl Node {
    /// Whether jobs it may no longer run are to be evicted at this heartbeat (its tree
    /// changed or it was banned since the last one); asked once.
    pub fn take_evict_pending(&mut self) -> bool {
        std::mem::take(&mut self.evict_pending)
    }

    /// A node seen for the first time; its first heartbeat fills in the rest.
    pub fn new(id: NodeId, incarnation: Option<IncarnationId>) -> Self {
        Node {
            id,
            incarnation,
            last_seq: 0,
            hostname: String::new(),
            system_tags: vec![],
            tags: vec![],
            all_tags: BTreeSet::new(),
            resource_limits: ResourceVector::ZERO,
            reported_usage: ResourceVector::ZERO,
            reported_limits: ResourceVector::ZERO,
            last_heartbeat: 0,
            online: false,
            registration: Registration::Idle,
            evict_pending: false,
            last_preemptive_stage: None,
            maintenance: NodeMaintenance::default(),
            approval_alert: None,
        }
    }

    /// What `list-nodes` and `//sys/cluster_nodes/<n>/@state` say: `online` (in a tree),
    /// `idle` (no tree matches), `refused` (several match) or `offline`.
    pub fn state_name(&self) -> &'static str {
        match &self.registration {
            _ if !self.online => "offline",
            Registration::Registered { .. } => "online",
            Registration::Idle => "idle",
            Registration::Refused { .. }
            | Registration::Rejected { .. }
            | Registration::Stale { .. } => "refused",
        }
    }

    /// The tree it is registered in (kept while offline, for display).
    pub fn registered_tree(&self) -> Option<&str> {
        match &self.registration {
            Registration::Registered { tree } => Some(tree),
            _ => None,
        }
    }

    /// Why it was refused, if it was.
    pub fn registration_error(&self) -> Option<&str> {
        match &self.registration {
            Registration::Refused { error }
            | Registration::Rejected { error }
            | Registration::Stale { error } => Some(error),
            _ => None,
        }
    }

    /// Online, in a tree and taking new jobs (not banned or decommissioned).
    pub fn is_schedulable(&self) -> bool {
        self.online
            && matches!(self.registration, Registration::Registered { .. })
            && self.maintenance.accepts_new_jobs()
    }
}

/// The nodes online now, by id (each hears a nudge when work for all may be waiting).
pub(crate) fn online_ids(
    nodes: &std::collections::BTreeMap<ytsched_common::NodeId, Node>,
) -> impl Iterator<Item = ytsched_common::NodeId> + '_ {
    nodes.values().filter(|n| n.online).map(|n| n.id.clone())
}
