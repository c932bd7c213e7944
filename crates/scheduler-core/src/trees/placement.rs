//! Which job runs where (SPEC 5.2): fill a node's free resources one job at a time,
//! each time walking down the node's pool tree to the least satisfied child
//! (usage / fair share) that has a job fitting both the node and every limit on the way.

use crate::jobs::job_index::JobIndex;
use crate::nodes::heartbeat_context::HeartbeatContext;
use crate::nodes::node_trees::NodeTrees;
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::trees::fair_share::{ElementKind, TreeShares};
use crate::trees::live_usage::LiveTree;
use crate::trees::tree_state::TreeStates;
use crate::ClusterConfig;
use crate::CoreEvent;
use crate::Node;
use std::collections::BTreeMap;
use std::collections::{BTreeSet, HashSet};
use ytsched_common::names::TreeName;
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
    if e.tag_filter().is_some_and(|f| !f.matches(tags)) {
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

/// The tree whose jobs this heartbeat may place on its node: `None` when the node takes
/// none, is in no tree, has no user slot free, or not even the smallest job waiting in
/// its tree fits what it has free (then nothing is walked for).
pub(crate) fn placement_due(
    nodes: &BTreeMap<NodeId, Node>,
    cluster: &ClusterConfig,
    operations: &OperationTable,
    ctx: &HeartbeatContext,
) -> Option<TreeName> {
    let free = ctx.free();
    let node = &nodes[&ctx.node];
    if !node.is_schedulable() {
        return None;
    }
    let tree = cluster.tree_of(node)?.clone();
    // Every job takes one user slot: without one free the node is full, whatever
    // else it has (a tolerant comparison of a near-zero request would let a full node
    // walk every waiting operation on each heartbeat).
    if free.user_slots < 1.0 - 1e-9 {
        return None;
    }
    match operations.smallest_waiting_job(&tree) {
        Some(smallest) if smallest.fits_in(&free) => Some(tree),
        _ => None,
    }
}

/// What filling a node moves and reads, borrowed from the core: it reads the node's
/// tags and the operations, and moves the tree's live arrays, the operations it starts
/// jobs of, the job index and the outbox.
pub(crate) struct Placer<'a> {
    pub(crate) nodes: &'a BTreeMap<NodeId, Node>,
    pub(crate) trees: &'a mut TreeStates,
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) jobs: &'a mut JobIndex,
    pub(crate) outbox: &'a mut Outbox,
    /// Walks of a tree looking for a job to place, counted so tests can see them.
    pub(crate) placement_walks: &'a mut u64,
}

impl Placer<'_> {
    /// Fills what the node has free with jobs of `tree` (whose update the caller
    /// brought up to date), starting them in `ctx`.
    pub(crate) fn fill(&mut self, ctx: &mut HeartbeatContext, tree: &TreeName) {
        let (node_id, now) = (&ctx.node, ctx.now);
        let mut free = ctx.free();
        self.trees.refresh_live(self.operations);
        let Some(shares) = self.trees.shares(tree) else {
            return;
        };
        self.trees.ensure_live(self.operations, tree, &shares);
        let Self {
            nodes,
            trees,
            operations,
            jobs,
            outbox,
            placement_walks,
        } = self;
        let tags = &nodes[node_id].all_tags;
        let live = &mut trees.get_mut(tree.as_str()).expect("has shares").live;
        let mut starts = Vec::new();
        // Subtrees that placed nothing on this node: the room only shrinks, so they
        // are not walked again in this heartbeat.
        let mut exhausted = HashSet::new();
        // The root's smallest waiting job bounds every other: once it no longer fits (or
        // no slot is left) the node is full, and the walk that would only prove it is
        // not made.
        while free.user_slots >= 1.0 - 1e-9 && live.waiting[0].is_some_and(|m| m.fits_in(&free)) {
            **placement_walks += 1;
            let Some((elem, op_id, task)) =
                pick(operations, &shares, live, tags, 0, free, &mut exhausted)
            else {
                break;
            };
            let (spec, attempt) = {
                let mut op = operations.edit(&op_id).expect("picked from the map");
                let spec = op.start_job(task, node_id, tree, now);
                let usage = op.slot(tree).map_or(ResourceVector::ZERO, |s| s.usage);
                live.set_leaf(&shares, elem, usage, op.smallest_waiting());
                let attempt = op.jobs.get(&spec.job_id).map(crate::AttemptFacts::of);
                (spec, attempt)
            };
            free -= spec.resources;
            book_start(jobs, outbox, node_id, &op_id, &spec, attempt);
            starts.push(spec);
        }
        for spec in starts {
            ctx.start(spec);
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
