//! One attempt of one job of an operation: where it runs, how it ended, and what its
//! node reported. The store keeps it as it is here.

use serde::{Deserialize, Serialize};
use ytsched_common::names::TreeName;
use ytsched_common::protocol::{JobStatistics, UnixMillis};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{AbortReason, JobState};
use ytsched_common::{JobId, NodeId};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub task: usize,
    pub index: u32,
    pub state: JobState,
    pub node: NodeId,
    /// The pool tree of the node it was started on: whose usage it counts in.
    pub tree: TreeName,
    pub resources: ResourceVector,
    pub start_time: UnixMillis,
    /// Start order within the operation: tells apart jobs started in the same instant.
    pub seq: u64,
    pub finish_time: Option<UnixMillis>,
    pub error: Option<String>,
    pub abort_reason: Option<AbortReason>,
    pub statistics: Option<JobStatistics>,
    /// The other attempt of the same job index running alongside (SPEC 5.8): set on
    /// both the original and its speculative copy.
    pub copy: Option<JobId>,
    /// This attempt is the speculative copy.
    pub speculative: bool,
    /// Gracefully preempted (SPEC 5.3) at this time: still running and counted on its
    /// node until it exits, when it goes back to waiting as `preempted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupting: Option<UnixMillis>,
    /// Its node still fetches its files or unpacks its layers (SPEC 5.17): running as
    /// the scheduler counts, `preparing` as it is shown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preparing: bool,
}

impl Job {
    /// Finished, recorded as such, and nothing more to come from its node: the store
    /// holds all there is of it.
    pub fn settled(&self) -> bool {
        self.state.is_finished()
            && (self.statistics.is_some() || self.abort_reason == Some(AbortReason::NodeLost))
    }
}
