//! What the core has to say to the world since the driver last asked: nudges, log
//! events, job output tails and retired operations. One part holds them so that nothing
//! leaves the core except through `Effects`, and no call site can forget a buffer or
//! drain one early.

use crate::events::CoreEvent;
use crate::jobs::job_output::JobOutput;
use crate::operations::retention::Archived;
use std::collections::BTreeSet;
use ytsched_common::NodeId;

#[derive(Clone, Debug, Default)]
pub(crate) struct Outbox {
    /// Nodes that should heartbeat now because there is new work or an abort for them.
    nudges: BTreeSet<NodeId>,
    events: Vec<CoreEvent>,
    /// Output tails of job attempts finished since, for the store only.
    outputs: Vec<JobOutput>,
    /// Operations retired from memory, for the driver to archive.
    retired: Vec<Archived>,
    /// The call's answer waits until its changes are stored (see `Effects`).
    reply_after_store: bool,
}

impl Outbox {
    pub(crate) fn nudge(&mut self, node: NodeId) {
        self.nudges.insert(node);
    }

    pub(crate) fn nudge_all(&mut self, nodes: impl IntoIterator<Item = NodeId>) {
        self.nudges.extend(nodes);
    }

    pub(crate) fn event(&mut self, event: CoreEvent) {
        self.events.push(event);
    }

    pub(crate) fn output(&mut self, output: JobOutput) {
        self.outputs.push(output);
    }

    pub(crate) fn retire(&mut self, archived: Archived) {
        self.retired.push(archived);
    }

    pub(crate) fn take_outputs(&mut self) -> Vec<JobOutput> {
        std::mem::take(&mut self.outputs)
    }

    pub(crate) fn take_retired(&mut self) -> Vec<Archived> {
        std::mem::take(&mut self.retired)
    }

    pub(crate) fn take_nudges(&mut self) -> Vec<NodeId> {
        std::mem::take(&mut self.nudges).into_iter().collect()
    }

    pub(crate) fn take_events(&mut self) -> Vec<CoreEvent> {
        std::mem::take(&mut self.events)
    }

    pub(crate) fn reply_after_store(&mut self) {
        self.reply_after_store = true;
    }

    pub(crate) fn take_reply_after_store(&mut self) -> bool {
        std::mem::take(&mut self.reply_after_store)
    }
}
