//! Why a gang waits whole, as placement last found it: a value the operation keeps and
//! `explain` puts in words.

use serde::Serialize;
use ytsched_common::protocol::UnixMillis;

/// Why a gang waits whole (SPEC 6.2 `unschedulable_reason: gang_does_not_fit`), as
/// the last placement attempt found it: `explain` says it in words.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GangShortfall {
    pub tree: String,
    /// Jobs of the gang, and how many of them found no room.
    pub jobs: usize,
    pub unplaced: usize,
    /// The resource most nodes lack for the first job that found no room, its need,
    /// on how many of how many nodes it is short, and the most any node has free.
    pub resource: String,
    pub need: f64,
    pub nodes_short: usize,
    pub nodes: usize,
    pub most_free: f64,
    /// Its whole demand is over its own or a pool's `resource_limits` (`most_free` is
    /// then the room the limits leave).
    pub over_limit: bool,
    /// Even the sum of what the nodes have free is short (`most_free` is that sum).
    pub in_all: bool,
    /// When this was found: the gang is tried again `GANG_RETRY_MS` later.
    pub at: UnixMillis,
}

impl GangShortfall {
    pub fn text(&self) -> String {
        if self.over_limit {
            return format!(
                "a gang of {} job(s) waits: together they need {} {}, more than the resource_limits on its path in pool tree '{}' leave ({})",
                self.jobs, self.resource, self.need, self.tree, self.most_free
            );
        }
        if self.in_all {
            return format!(
                "a gang of {} job(s) waits to start whole: together they need {} {}, and the {} node(s) of pool tree '{}' it may use have {} free in all",
                self.jobs, self.need, self.resource, self.nodes, self.tree, self.most_free
            );
        }
        if self.nodes == 0 {
            return format!(
                "a gang of {} job(s) waits: pool tree '{}' has no node that may take its jobs",
                self.jobs, self.tree
            );
        }
        format!(
            "a gang of {} job(s) waits to start whole: {} of them find no room on the {} node(s) of pool tree '{}' ({} {} needed; {} of the nodes have less free, the most free is {})",
            self.jobs,
            self.unplaced,
            self.nodes,
            self.tree,
            self.resource,
            self.need,
            self.nodes_short,
            self.most_free
        )
    }
}
