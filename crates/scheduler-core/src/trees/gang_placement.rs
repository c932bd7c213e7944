//! Placing a gang operation (SPEC 5.15): every job of it in one decision across the
//! nodes of its tree, or none. Run from `tick`, not from one node's heartbeat, since a
//! gang spans nodes: the jobs are booked on their nodes here and each node is sent its
//! starts at its next heartbeat (nudged to make it soon), as an unread start is.
//! Nothing is held for a gang that does not fit whole; one that does not is tried again
//! after `GANG_RETRY_MS` (a full packing costs O(jobs × nodes)), and `explain` says
//! what it lacks.
//!
//! A starving gang may preempt, but only when what is free plus what it may take lets
//! the whole gang be placed; then it takes the fewest jobs per node (latest started
//! first) and starts at once, or, with graceful victims among them, once they exit.

use crate::jobs::job_life::job_life;
use crate::operations::gang_shortfall::GangShortfall;
use crate::trees::fair_share::TreeShares;
use crate::trees::preemptibility::JobClasses;
use crate::trees::preemption::Preemptor;
use crate::trees::starvation::StarvationStatus;
use std::collections::BTreeMap;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::states::OperationState;
use ytsched_common::{NodeId, OperationId};

/// What a tick's rooms read of the core.
struct Reads<'r> {
    trees: &'r crate::trees::tree_state::TreeStates,
    operations: &'r crate::operations::table::OperationTable,
    nodes: &'r BTreeMap<ytsched_common::NodeId, crate::Node>,
    jobs: &'r crate::jobs::job_index::JobIndex,
}

macro_rules! rooms_reads {
    ($core:expr) => {
        Reads {
            trees: &$core.trees,
            operations: &$core.operations,
            nodes: &$core.nodes,
            jobs: &$core.jobs,
        }
    };
}

/// A gang that did not fit is tried again after this long.
pub const GANG_RETRY_MS: u64 = 1_000;

/// One node a gang may use: its tags, what it has free now, and what preemption could
/// add.
struct Room {
    node: NodeId,
    tags: std::collections::BTreeSet<String>,
    free: ResourceVector,
    takeable: ResourceVector,
}

/// Where each job of a gang goes: (task, index into the rooms), or why it cannot.
type Packing = Result<Vec<(usize, usize)>, GangShortfall>;

/// A gang's waiting jobs (task, resources) and where each goes.
struct GangPlan {
    jobs: Vec<(usize, ResourceVector)>,
    packing: Vec<(usize, usize)>,
}

/// One tree's nodes as this tick's gang placement sees them: what each has free,
/// updated as gangs are booked, and their sum, which turns away at once a gang that
/// could not fit even if all the free room were one node (the usual case: a full
/// cluster). Made once per tree per tick, whatever the number of gangs.
struct TreeRooms {
    shares: std::sync::Arc<TreeShares>,
    usage: Vec<ResourceVector>,
    rooms: Vec<Room>,
    total_free: ResourceVector,
    /// A starving gang tried preemption in this tree this tick: at most one does, as
    /// it reads every node's candidates.
    preempted: bool,
}

impl Preemptor<'_> {
    /// Places every waiting gang that fits whole now (oldest first). The caller holds it
    /// back while starts are held or the store is behind.
    pub(crate) fn place_gangs(&mut self, now: UnixMillis) {
        let mut due: Vec<(u64, OperationId)> = self
            .operations
            .gangs
            .iter()
            .filter_map(|id| {
                let op = self.operations.get(id)?;
                let ready = op.state == OperationState::Running
                    && !op.suspended
                    && op.gang_waits_whole()
                    && op
                        .gang_shortfall
                        .as_ref()
                        .is_none_or(|s| now.saturating_sub(s.at) >= GANG_RETRY_MS);
                ready.then(|| (op.seq, id.clone()))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort();
        self.trees.refresh_live(self.operations);
        let mut trees: BTreeMap<TreeName, Option<TreeRooms>> = BTreeMap::new();
        for (_, id) in due {
            self.try_place_gang(&id, &mut trees, now);
        }
    }

    /// Tries each of the gang's trees in turn; the first that takes it whole wins.
    fn try_place_gang(
        &mut self,
        id: &OperationId,
        trees: &mut BTreeMap<TreeName, Option<TreeRooms>>,
        now: UnixMillis,
    ) {
        let names: Vec<TreeName> = self.operations[id]
            .trees
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        let mut shortfall = None;
        for tree in names {
            match self.place_gang_in(id, &tree, trees, now) {
                Ok(()) => {
                    if let Some(mut op) = self.operations.edit(id) {
                        op.gang_shortfall = None;
                    }
                    return;
                }
                Err(s) => shortfall = shortfall.or(s),
            }
        }
        if let Some(mut op) = self.operations.edit(id) {
            // Boxed: only a gang that waits whole has one, and every operation holds room
            // for it.
            op.gang_shortfall = shortfall.map(|mut s: GangShortfall| {
                s.at = now;
                Box::new(s)
            });
        }
    }

    /// Places the gang in `tree`, preempting for it if it starves and that lets it fit.
    /// `Err(None)`: the tree has no snapshot holding it yet.
    fn place_gang_in(
        &mut self,
        id: &OperationId,
        tree: &TreeName,
        trees: &mut BTreeMap<TreeName, Option<TreeRooms>>,
        now: UnixMillis,
    ) -> Result<(), Option<GangShortfall>> {
        let jobs = self.operations[id].gang_jobs();
        let demand: ResourceVector = jobs.iter().map(|(_, r)| *r).sum();
        let status = self.trees.starvation_status(tree, id);
        let aggressive = status == StarvationStatus::AggressivelyStarving;
        let Some(t) = tree_rooms(&rooms_reads!(self), tree, trees) else {
            return Err(None);
        };
        let Some(&idx) = t.shares.operation_index.get(id) else {
            return Err(None);
        };
        let room =
            crate::trees::placement::room_along_path(self.operations, &t.shares, &t.usage, idx);
        if !demand.fits_in(&room) {
            return Err(Some(whole_shortfall(
                tree,
                jobs.len(),
                &demand,
                &room,
                0,
                true,
            )));
        }
        let filter = self.operations[id].tag_filter();
        let usable: Vec<usize> = (0..t.rooms.len())
            .filter(|&i| filter.matches(&t.rooms[i].tags) && t.shares.admits(idx, &t.rooms[i].tags))
            .collect();
        let shortfall = if demand.fits_in(&t.total_free) {
            match pack(&jobs, &t.rooms, &usable, |r| r.free, tree, &t.shares.total) {
                Ok(packing) => {
                    self.start_gang(id, tree, &GangPlan { jobs, packing }, t, now);
                    return Ok(());
                }
                Err(s) => s,
            }
        } else {
            whole_shortfall(
                tree,
                jobs.len(),
                &demand,
                &t.total_free,
                usable.len(),
                false,
            )
        };
        if status == StarvationStatus::NonStarving || t.preempted {
            return Err(Some(shortfall));
        }
        // Starving: preempt only if that lets the whole gang in.
        t.preempted = true;
        let mut classes = JobClasses::new();
        for &i in &usable {
            let node = t.rooms[i].node.clone();
            t.rooms[i].takeable = crate::trees::preemptibility::victims!(self)
                .preemption_candidates_with(&node, tree, &mut classes)
                .iter()
                .filter(|(c, class)| {
                    &c.operation != id
                        && crate::trees::preemptibility::victims!(self)
                            .may_take(tree, c, *class, aggressive)
                })
                .map(|(c, _)| c.resources)
                .sum::<ResourceVector>()
                + self.jobs.interrupting_on(&node, self.operations);
        }
        let offer = |r: &Room| r.free + r.takeable;
        let Ok(packing) = pack(&jobs, &t.rooms, &usable, offer, tree, &t.shares.total) else {
            return Err(Some(shortfall));
        };
        let plan = GangPlan { jobs, packing };
        let free: Vec<(NodeId, ResourceVector)> =
            t.rooms.iter().map(|r| (r.node.clone(), r.free)).collect();
        if !self.preempt_for_gang(id, tree, &plan, &free, aggressive, now) {
            // Graceful victims hold their room until they exit: start then.
            return Err(Some(shortfall));
        }
        let t = tree_rooms(&rooms_reads!(self), tree, trees).expect("made above");
        self.start_gang(id, tree, &plan, t, now);
        Ok(())
    }

    /// Preempts, on each node the packing uses, the fewest jobs that make room for the
    /// gang's jobs there (`free`: each room's node and what it has free). Returns
    /// whether the room is free now (no victim is graceful).
    fn preempt_for_gang(
        &mut self,
        id: &OperationId,
        tree: &TreeName,
        plan: &GangPlan,
        free: &[(NodeId, ResourceVector)],
        aggressive: bool,
        now: UnixMillis,
    ) -> bool {
        let mut need: BTreeMap<usize, ResourceVector> = BTreeMap::new();
        for (j, &(_, node)) in plan.packing.iter().enumerate() {
            *need.entry(node).or_default() += plan.jobs[j].1;
        }
        let pool = self.operations[id]
            .slot(tree)
            .map_or(String::new(), |s| s.pool.to_string());
        let message =
            format!("preempted to make room for starving gang operation {id} in pool {pool}");
        let mut at_once = true;
        for (room, need) in need {
            let (node, free) = &free[room];
            if need.fits_in(free) {
                continue;
            }
            let coming = self.jobs.interrupting_on(node, self.operations);
            if need.fits_in(&(*free + coming)) {
                at_once = false;
                continue;
            }
            let candidates =
                crate::trees::preemptibility::victims!(self).preemption_candidates(node, tree);
            let Some(victims) = crate::trees::preemptibility::victims!(self).choose_victims(
                tree,
                id,
                aggressive,
                need,
                *free + coming,
                &candidates,
            ) else {
                at_once = false;
                continue;
            };
            at_once &= coming == ResourceVector::ZERO;
            let (graceful, _) = job_life!(self).take_victims(node, victims, id, &message, now);
            at_once &= !graceful;
        }
        at_once
    }

    /// Books every job of the packing on its node (and takes it off this tick's
    /// rooms); each node gets its starts at its next heartbeat.
    fn start_gang(
        &mut self,
        id: &OperationId,
        tree: &TreeName,
        plan: &GangPlan,
        t: &mut TreeRooms,
        now: UnixMillis,
    ) {
        let mut placed: Vec<(NodeId, ytsched_common::protocol::JobStartSpec)> = vec![];
        if let Some(mut op) = self.operations.edit(id) {
            for (j, &(task, node)) in plan.packing.iter().enumerate() {
                debug_assert_eq!(plan.jobs[j].0, task);
                let room = &mut t.rooms[node];
                room.free = (room.free - plan.jobs[j].1).map(|_, v| v.max(0.0));
                let spec = op.start_job(task, &room.node, tree, now);
                placed.push((room.node.clone(), spec));
            }
            let mut nodes: Vec<&NodeId> = placed.iter().map(|(n, _)| n).collect();
            nodes.sort();
            nodes.dedup();
            let event = format!(
                "gang of {} job(s) started whole on {} node(s)",
                placed.len(),
                nodes.len()
            );
            op.record(now, event);
        }
        t.total_free = t.rooms.iter().map(|r| r.free).sum();
        for (node, spec) in &placed {
            job_life!(self).record_start(node, id, spec);
            self.jobs
                .sent_in(node, &spec.job_id, crate::jobs::job_index::NEVER_SENT);
            self.outbox.nudge(node.clone());
        }
        self.trees.mark_stale(tree);
        tracing::info!(operation = %id, jobs = placed.len(), "gang started whole");
    }
}

/// Best fit, largest job first: each job goes to the node it leaves least room on. On
/// failure, what the first job that found no room lacks.
fn pack(
    jobs: &[(usize, ResourceVector)],
    rooms: &[Room],
    usable: &[usize],
    offer: impl Fn(&Room) -> ResourceVector,
    tree: &str,
    total: &ResourceVector,
) -> Packing {
    let mut left: Vec<ResourceVector> = usable.iter().map(|&i| offer(&rooms[i])).collect();
    let mut out = Vec::with_capacity(jobs.len());
    let weight = |v: &ResourceVector| {
        Resource::ALL
            .into_iter()
            .map(|r| {
                let t = total.get(r);
                if t > 0.0 {
                    v.get(r) / t
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    };
    for (j, (task, need)) in jobs.iter().enumerate() {
        let best = left
            .iter()
            .enumerate()
            .filter(|(_, l)| need.fits_in(l))
            .min_by(|a, b| {
                weight(&(*a.1 - *need))
                    .partial_cmp(&weight(&(*b.1 - *need)))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                left[i] -= *need;
                out.push((*task, usable[i]));
            }
            None => return Err(shortfall(tree, jobs.len(), jobs.len() - j, need, &left)),
        }
    }
    Ok(out)
}

/// What the first job that found no room lacks: the resource most nodes have too
/// little of for it.
fn shortfall(
    tree: &str,
    jobs: usize,
    unplaced: usize,
    need: &ResourceVector,
    left: &[ResourceVector],
) -> GangShortfall {
    let (resource, nodes_short) = Resource::ALL
        .into_iter()
        .map(|r| {
            let short = left
                .iter()
                .filter(|l| l.get(r) + ytsched_common::resources::EPSILON < need.get(r))
                .count();
            (r, short)
        })
        .max_by_key(|(_, n)| *n)
        .unwrap_or((Resource::Cpu, 0));
    GangShortfall {
        tree: tree.to_string(),
        jobs,
        unplaced,
        resource: resource.name().to_string(),
        need: need.get(resource),
        nodes_short,
        nodes: left.len(),
        most_free: left.iter().map(|l| l.get(resource)).fold(0.0, f64::max),
        over_limit: false,
        in_all: false,
        at: 0,
    }
}

/// A gang whose whole demand is more than `available`: what all the `nodes` it may use
/// have free together, or (`over_limit`) the room the resource_limits on its path leave.
fn whole_shortfall(
    tree: &str,
    jobs: usize,
    demand: &ResourceVector,
    available: &ResourceVector,
    nodes: usize,
    over_limit: bool,
) -> GangShortfall {
    let resource = Resource::ALL
        .into_iter()
        .find(|&r| demand.get(r) > available.get(r) + ytsched_common::resources::EPSILON)
        .unwrap_or(Resource::Cpu);
    GangShortfall {
        tree: tree.to_string(),
        jobs,
        unplaced: jobs,
        resource: resource.name().to_string(),
        need: demand.get(resource),
        nodes_short: nodes,
        nodes,
        most_free: available.get(resource),
        over_limit,
        in_all: !over_limit,
        at: 0,
    }
}

/// This tick's rooms of `tree`, made at first use (`None`: no snapshot yet).
fn tree_rooms<'a>(
    parts: &Reads<'_>,
    tree: &TreeName,
    trees: &'a mut BTreeMap<TreeName, Option<TreeRooms>>,
) -> Option<&'a mut TreeRooms> {
    trees
        .entry(tree.clone())
        .or_insert_with(|| {
            let shares = parts.trees.shares(tree)?;
            let usage = parts
                .trees
                .live_usage(parts.operations, tree, &shares)
                .into_owned();
            let rooms: Vec<Room> = parts
                .trees
                .members(tree, parts.nodes)
                .filter(|n| n.is_schedulable())
                .map(|n| {
                    // What its jobs hold, or what it last reported (jobs aborted and
                    // not yet gone), whichever is more.
                    let held = parts
                        .jobs
                        .running_on(&n.id, parts.operations)
                        .component_max(&n.reported_usage);
                    Room {
                        node: n.id.clone(),
                        tags: n.all_tags.clone(),
                        free: (n.resource_limits - held).map(|_, v| v.max(0.0)),
                        takeable: ResourceVector::ZERO,
                    }
                })
                .collect();
            let total_free = rooms.iter().map(|r| r.free).sum();
            Some(TreeRooms {
                shares,
                usage,
                rooms,
                total_free,
                preempted: false,
            })
        })
        .as_mut()
}
