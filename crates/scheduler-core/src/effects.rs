//! What a core call did besides answering, returned as one value: the driver stores,
//! archives, nudges and logs from it, and nothing leaves the core another way (a caller
//! cannot forget one buffer and let it grow, as the simulator once did with two).

use crate::operations::retention::Archived;
use crate::records::StateChange;
use crate::CoreEvent;
use ytsched_common::NodeId;

/// Everything one call (or a run of calls) changed outside the core's own memory.
#[must_use = "a core call's effects are what the store, the nodes and the log must see"]
#[derive(Debug, Default)]
pub struct Effects {
    /// The pool trees' configuration changed: the driver stores it (before `changes`).
    pub config_changed: bool,
    /// Operation and job records to store, operations before their jobs, in the order
    /// the changes were made.
    pub changes: Vec<StateChange>,
    /// Operations that left memory: the archive takes them over once `changes` are
    /// stored.
    pub retired: Vec<Archived>,
    /// Nodes to tell to heartbeat now (new work or an abort for them).
    pub nudges: Vec<NodeId>,
    /// State changes to log, one line each.
    pub events: Vec<CoreEvent>,
    /// The answer must not go out before `changes` are stored. Heartbeat replies
    /// otherwise go at once (starts are not stored; results are acknowledged once
    /// stored, by the driver); one that announces an attempt number beyond the stored
    /// reservation waits (`attempt_reservation.rs`).
    pub reply_after_store: bool,
}

impl Effects {
    pub fn is_empty(&self) -> bool {
        !self.config_changed
            && self.changes.is_empty()
            && self.retired.is_empty()
            && self.nudges.is_empty()
            && self.events.is_empty()
    }
}
