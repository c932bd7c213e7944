//! The one simulated cluster: nodes that behave as agents do, for the core's harness (a
//! test drives each heartbeat), `ytsched simulate` and `simulate --replay` (virtual time
//! drives them). Driven by time, a node heartbeats on its period, as soon as a job of its
//! ends, and shortly after the scheduler nudged it, the way an agent does; so a scenario,
//! a replay and a test see the same nodes.

mod node;

pub use node::{Durations, VirtualJob, VirtualNode};

use crate::SchedulerCore;
use std::collections::{BTreeMap, HashMap};
use ytsched_common::protocol::{HeartbeatReply, UnixMillis};
use ytsched_common::NodeId;

/// How long after a nudge a node heartbeats: an agent answers one within milliseconds.
pub const NUDGE_DELAY_MS: u64 = 5;

pub struct VirtualCluster {
    /// In the order they were added; driven by time they heartbeat in this order.
    nodes: Vec<VirtualNode>,
    place: HashMap<NodeId, usize>,
    /// When each node (by place) heartbeats next out of its period.
    nudged: BTreeMap<usize, UnixMillis>,
}

impl Default for VirtualCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualCluster {
    pub fn new() -> Self {
        VirtualCluster {
            nodes: vec![],
            place: HashMap::new(),
            nudged: BTreeMap::new(),
        }
    }

    /// Adds `node`; one of the same id is replaced.
    pub fn add(&mut self, node: VirtualNode) {
        match self.place.get(&node.id) {
            Some(&i) => self.nodes[i] = node,
            None => {
                self.place.insert(node.id.clone(), self.nodes.len());
                self.nodes.push(node);
            }
        }
    }

    pub fn node(&self, id: &NodeId) -> Option<&VirtualNode> {
        self.place.get(id).map(|&i| &self.nodes[i])
    }

    pub fn node_mut(&mut self, id: &NodeId) -> Option<&mut VirtualNode> {
        self.place.get(id).map(|&i| &mut self.nodes[i])
    }

    pub fn nodes(&self) -> impl Iterator<Item = &VirtualNode> {
        self.nodes.iter()
    }

    /// One heartbeat of node `id` at `now`, whatever is due: a test's own step.
    pub fn heartbeat(
        &mut self,
        core: &mut SchedulerCore,
        id: &NodeId,
        now: UnixMillis,
        durations: Durations,
    ) -> Option<HeartbeatReply> {
        let i = *self.place.get(id)?;
        self.nudged.remove(&i);
        Some(self.nodes[i].heartbeat(core, now, durations))
    }

    /// Everything the nodes do at `t`: jobs due end, the core's clock ticks, then each
    /// online node heartbeats if its period, an ended job or a nudge says so.
    pub fn step(&mut self, core: &mut SchedulerCore, t: UnixMillis, durations: Durations) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if node.joins_at <= t && node.end_due(t) {
                self.nudged.entry(i).or_insert(t);
            }
        }
        core.tick(t);
        let on_period = t.is_multiple_of(core.config().heartbeat_period_ms.max(1));
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let nudge_due = self.nudged.get(&i).is_some_and(|at| *at <= t);
            if node.joins_at <= t && (on_period || nudge_due) {
                self.nudged.remove(&i);
                node.heartbeat(core, t, durations);
            }
        }
    }

    /// The scheduler nudged `nodes` at `t` (an `Effects::nudges`): each heartbeats soon.
    pub fn nudge(&mut self, nodes: &[NodeId], t: UnixMillis) {
        for i in nodes.iter().filter_map(|id| self.place.get(id)) {
            self.nudged.entry(*i).or_insert(t + NUDGE_DELAY_MS);
        }
    }

    /// The next instant after `t` a node does anything by itself: a period's heartbeat,
    /// a nudged one, a node joining or a job ending.
    pub fn next_instant(&self, t: UnixMillis, period: u64) -> UnixMillis {
        let period = period.max(1);
        let on_period = (t / period + 1) * period;
        let nudges = self.nudged.values().copied();
        let joins = self.nodes.iter().map(|n| n.joins_at).filter(|j| *j > t);
        let ends = self.nodes.iter().filter_map(VirtualNode::next_end);
        nudges
            .chain(joins)
            .chain(ends)
            .map(|at| at.max(t + 1))
            .fold(on_period, u64::min)
    }
}
