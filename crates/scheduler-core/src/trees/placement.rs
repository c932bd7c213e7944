//! Which job runs where (SPEC 5.2): fill a node's free resources one job at a time,
//! each time walking down the node's pool tree to the least satisfied child
//! (usage / fair share) that has a job fitting both the node and every limit on the way.

use crate::jobs::job_index::JobIndex;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::fair_share::{ElementKind, TreeShares};
use crate::trees::live_usage::LiveTree;
use crate::CoreEvent;
use std::collections::{BTreeSet, HashSet};
use ytsched_common::protocol::JobStartSpec;
use ytsched_common::resources::{ResourceVector, EPSILON};
use ytsched_common::states::OperationState;
use ytsched_common::{NodeId, OperationId};

/// `room` narrowed by what element `idx` may still take: its limits share of the tree
/// less its live usage, and for an operation its own absolute limits exactly.
fn element_room(
    operations: &OperationTable,
    shares: &TreeShares,
    usage: &[ResourceVector],
    idx: usize,
    room: ResourceVector,
) -> ResourceVector {
    let e = &shares.elements[idx];
    let mut room = room.map(|r, v| {
        let s = e.limits_share.get(r);
        let limit = if s >= 1.0 - EPSILON {
            f64::INFINITY
        } else {
            s * shares.total.get(r)
        };
        v.min(limit - usage[idx].get(r))
    });
    if let ElementKind::Operation { id } = &e.kind {
        if let Some(op) = operations.get(id) {
            room = room.map(|r, v| v.min(op.room_in(&shares.tree).get(r)));
        }
    }
    room
}

/// The least satisfied operation under `idx` whose `scheduling_tag_filter` admits a
/// node with `tags` and with a job that fits `room` (free resources, narrowed by each
/// element's limits on the way down).
pub(crate) fn pick(
    operations: &OperationTable,
    shares: &TreeShares,
    live: &LiveTree,
    tags: &BTreeSet<String>,
    idx: usize,
    room: ResourceVector,
    exhausted: &mut HashSet<usize>,
) -> Option<(usize, OperationId, usize)> {
    let e = &shares.elements[idx];
    // A pool's `scheduling_tag_filter` keeps its whole subtree off other nodes.
    if e.tag_filter.as_ref().is_some_and(|f| !f.matches(tags)) {
        return None;
    }
    let room = element_room(operations, shares, &live.usage, idx, room);
    if !live.waiting[idx]?.fits_in(&room) {
        return None;
    }
    match &e.kind {
        ElementKind::Operation { id } => {
            let op = operations.get(id)?;
            if op.state != OperationState::Running || !op.tag_filter().matches(tags) {
                return None;
            }
            let task = op.next_fitting_task(&room)?;
            Some((idx, id.clone(), task))
        }
        ElementKind::Pool { .. } => {
            for child in live.lines.line(idx) {
                if exhausted.contains(&child)
                    || !live.waiting[child].is_some_and(|m| m.fits_in(&room))
                {
                    continue;
                }
                let found = pick(operations, shares, live, tags, child, room, exhausted);
                if found.is_some() {
                    return found;
                }
                // The room only shrinks within a heartbeat: it has nothing more here.
                exhausted.insert(child);
            }
            None
        }
    }
}

/// Books a job just started on a node: its owner, the node's job set, the event (the
/// operation itself was marked changed by the edit that started the job).
pub(crate) fn book_start(
    jobs: &mut JobIndex,
    outbox: &mut Outbox,
    node_id: &NodeId,
    op_id: &OperationId,
    spec: &JobStartSpec,
    attempt: Option<crate::AttemptFacts>,
) {
    outbox.event(CoreEvent::JobStarted {
        id: spec.job_id.clone(),
        operation: op_id.clone(),
        node: node_id.clone(),
        attempt,
    });
    jobs.started(&spec.job_id, op_id, node_id);
}

/// What element `idx` may still take given its limits and those of every pool above
/// it: the same narrowing placement applies on its way down.
pub(crate) fn room_along_path(
    operations: &OperationTable,
    shares: &TreeShares,
    usage: &[ResourceVector],
    idx: usize,
) -> ResourceVector {
    let inf = f64::INFINITY;
    let mut room = ResourceVector::new(inf, inf, inf, inf);
    let mut cur = Some(idx);
    while let Some(i) = cur {
        room = element_room(operations, shares, usage, i, room);
        cur = shares.elements[i].parent;
    }
    room
}
