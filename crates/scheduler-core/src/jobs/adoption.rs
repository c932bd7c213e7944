//! Attempts a node runs that the store never recorded. Starts are not stored (as in
//! YTsaurus, a heartbeat is answered from memory and a restarted scheduler learns running
//! jobs from the nodes), so after a crash a node may run, or have finished, an attempt
//! the revived scheduler has never heard of. Its job id names the operation and the
//! attempt number, and the node says which job it runs (`AttemptOf`): the attempt is
//! adopted when that job still waits, and aborted (its result dropped) otherwise. So
//! no job completes twice, and none is lost.
//!
//! For adoption to win over a fresh start of the same job, a revived scheduler that
//! holds unfinished operations starts nothing for the revival window: every live agent
//! reports within it (an agent retries at least every `AGENT_MAX_RETRY_MS`). Ending it
//! earlier, once no new node had come back for that gap plus a period, was tried: under
//! a loaded machine an agent came back later than that and one job started twice. It
//! ends earlier only once every node the store knows of has reported (`roll_call.rs`).

use crate::outbox::Outbox;
use crate::CoreEvent;
use crate::Node;
use std::collections::BTreeMap;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::NodeId;

/// A revived scheduler's pause of starts while nodes report what they run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StartHold {
    /// The revival window's end.
    pub(crate) deadline: UnixMillis,
    /// Attempts adopted meanwhile, for the log line at its end.
    pub(crate) adopted: usize,
}

impl StartHold {
    /// Whether starts are held at `now`; a hold that is over ends here: its end is told
    /// and every online node nudged, as they may start jobs again.
    pub(crate) fn holds(
        hold: &mut Option<StartHold>,
        outbox: &mut Outbox,
        nodes: &BTreeMap<NodeId, Node>,
        now: UnixMillis,
    ) -> bool {
        let Some(h) = *hold else {
            return false;
        };
        if now < h.deadline {
            return true;
        }
        *hold = None;
        outbox.event(CoreEvent::StartsResumed {
            adopted_jobs: h.adopted,
        });
        outbox.nudge_all(crate::nodes::node::online_ids(nodes));
        false
    }

    pub(crate) fn new(deadline: UnixMillis) -> Self {
        StartHold {
            deadline,
            adopted: 0,
        }
    }

    /// An attempt was adopted while starts are held (counted for the log line).
    pub(crate) fn note_adopted(&mut self) {
        self.adopted += 1;
    }
}
