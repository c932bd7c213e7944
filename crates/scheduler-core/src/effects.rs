//! What a core call did besides answering, returned as one value: the driver stores,
//! archives, nudges and logs from it, and nothing leaves the core another way (a caller
//! cannot forget one buffer and let it grow, as the simulator once did with two).

use crate::operations::retention::Archived;
use crate::records::StateChange;
use crate::{CoreEvent, SchedulerCore};
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

impl SchedulerCore {
    /// Runs one call and returns its answer with its effects: how the service, the
    /// simulator and tests that watch effects drive the core.
    pub fn run<R>(&mut self, call: impl FnOnce(&mut Self) -> R) -> (R, Effects) {
        let revision = self.config_revision;
        let answer = call(self);
        let config_changed = self.config_revision != revision;
        let mut effects = self.take_effects();
        effects.config_changed = config_changed;
        (answer, effects)
    }

    /// Everything pending since the last take (configuration changes are known only to
    /// `run`, which compares revisions around its call).
    pub(super) fn take_effects(&mut self) -> Effects {
        Effects {
            config_changed: false,
            changes: self.take_changes(),
            retired: self.outbox.take_retired(),
            nudges: self.outbox.take_nudges(),
            events: self.outbox.take_events(),
            reply_after_store: self.outbox.take_reply_after_store(),
        }
    }
}
