//! What a core call did besides answering, returned as one value: the driver stores,
//! archives, nudges and logs from it, and nothing leaves the core another way (a caller
//! cannot forget one buffer and let it grow, as the simulator once did with two).

use crate::operations::retention::Archived;
use crate::records::StateChange;
use crate::{CoreEvent, SchedulerCore};
use ytsched_common::protocol::UnixMillis;
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
        let effects = Effects {
            config_changed,
            changes: self.take_changes(),
            retired: self.outbox.take_retired(),
            nudges: self.outbox.take_nudges(),
            events: self.outbox.take_events(),
            reply_after_store: self.outbox.take_reply_after_store(),
        };
        (answer, effects)
    }

    /// Tells the event log of an admin change the driver made on `who`'s behalf.
    pub fn note_admin_change(
        &mut self,
        who: &str,
        path: &str,
        old: Option<serde_json::Value>,
        new: Option<serde_json::Value>,
    ) {
        self.outbox.event(CoreEvent::AdminChanged {
            who: who.to_string(),
            path: path.to_string(),
            old: old.map(|v| v.to_string()),
            new: new.map(|v| v.to_string()),
        });
        let now = self.latest_now.get();
        self.note_configuration(now);
    }

    /// Tells the event log the whole configuration as it is now: at a leader's start,
    /// after each admin change and once an hour, so a replay starts from what was
    /// configured rather than from defaults.
    pub fn note_configuration(&mut self, now: UnixMillis) {
        self.configuration_told_at = Some(now);
        self.outbox.event(CoreEvent::Configuration);
    }
}
