//! What holds a job index back from waiting, and until when (see `held_indexes.rs` for
//! why an aborted attempt's index is held).

use ytsched_common::names::TreeName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::NodeId;

/// Why an index is held back from waiting.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Hold {
    /// Its job exited with the task's `restart_exit_code`: it waits again at this time.
    Backoff(UnixMillis),
    /// Attempt `seq`, running in `tree` on `node`, was aborted on a node that may still
    /// run it; `since`: the abort, or the node's last report of it running.
    Stopping {
        seq: u64,
        tree: TreeName,
        node: NodeId,
        since: UnixMillis,
    },
}

/// One index of one task, held back from waiting.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HeldIndex {
    pub(crate) task: usize,
    pub(crate) index: u32,
    pub(crate) hold: Hold,
}

impl HeldIndex {
    /// Whether the hold is over by `now`; `node_timeout` gives a tree's
    /// `node_heartbeat_timeout` in ms.
    pub(crate) fn due(&self, now: UnixMillis, node_timeout: &dyn Fn(&TreeName) -> u64) -> bool {
        match &self.hold {
            Hold::Backoff(at) => *at <= now,
            Hold::Stopping { tree, since, .. } => since.saturating_add(node_timeout(tree)) <= now,
        }
    }
}
