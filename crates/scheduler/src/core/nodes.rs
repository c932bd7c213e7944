//! What the scheduler knows about each exec node, learned from its heartbeats.

use std::collections::BTreeSet;
use ytsched_common::protocol::{Registration, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::{IncarnationId, JobId, NodeId};

#[derive(Clone, Debug)]
pub struct Node {
    pub id: NodeId,
    pub incarnation: IncarnationId,
    pub hostname: String,
    pub tags: Vec<String>,
    pub resource_limits: ResourceVector,
    /// Usage as the node last reported it (includes jobs being killed).
    pub reported_usage: ResourceVector,
    pub last_heartbeat: UnixMillis,
    pub online: bool,
    pub registration: Registration,
    /// Jobs the scheduler considers running here.
    pub jobs: BTreeSet<JobId>,
}

impl Node {
    pub fn is_schedulable(&self) -> bool {
        self.online && matches!(self.registration, Registration::Registered { .. })
    }
}
