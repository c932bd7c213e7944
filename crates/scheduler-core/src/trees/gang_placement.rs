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

use crate::operations::gang::GangShortfall;
use crate::trees::fair_share::TreeShares;
use crate::trees::preemption::{Candidate, Preemptibility};
use crate::trees::starvation::StarvationStatus;
use crate::SchedulerCore;
use std::collections::BTreeMap;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::states::OperationState;
use ytsched_common::{NodeId, OperationId};

/// A gang that did not fit is tried again after this long.
pub const GANG_RETRY_MS: u64 = 1_000;

/// One node a gang may use: what it has free now, and what preemption could add.
struct Room {
    node: NodeId,
    free: ResourceVector,
    takeable: ResourceVector,
}

/// Where each job of a gang goes: (task, node), or why it cannot.
type Packing = Result<Vec<(usize, usize)>, GangShortfall>;

/// A gang's waiting jobs (task, resources), the nodes it may use, and where each job
/// goes (task, index into `rooms`).
struct GangPlan {
    jobs: Vec<(usize, ResourceVector)>,
    rooms: Vec<Room>,
    packing: Vec<(usize, usize)>,
}

impl SchedulerCore {
    /// Places every waiting gang that fits whole now (oldest first).
    pub(crate) fn place_gangs(&mut self, now: UnixMillis) {
        if self.gangs.is_empty() || self.store_behind || self.starts_held(now) {
            return;
        }
        let mut due: Vec<(u64, OperationId)> = self
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
        due.sort();
        for (_, id) in due {
            self.try_place_gang(&id, now);
        }
    }

    /// Tries each of the gang's trees in turn; the first that takes it whole wins.
    fn try_place_gang(&mut self, id: &OperationId, now: UnixMillis) {
        let trees: Vec<TreeName> = self.operations[id]
            .trees
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        let mut shortfall = None;
        for tree in trees {
            match self.place_gang_in(id, &tree, now) {
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
            op.gang_shortfall = shortfall.map(|mut s: GangShortfall| {
                s.at = now;
                s
            });
        }
    }

    /// Places the gang in `tree`, preempting for it if it starves and that lets it fit.
    /// `Err(None)`: not yet in the tree's fair-share snapshot.
    fn place_gang_in(
        &mut self,
        id: &OperationId,
        tree: &TreeName,
        now: UnixMillis,
    ) -> Result<(), Option<GangShortfall>> {
        let Some(shares) = self.trees.shares(tree) else {
            return Err(None);
        };
        let Some(&idx) = shares.operation_index.get(id) else {
            return Err(None);
        };
        self.refresh_live();
        let jobs = self.gang_jobs(id);
        let demand: ResourceVector = jobs.iter().map(|(_, r)| *r).sum();
        let usage = self.live_usage(tree, &shares).into_owned();
        let room = self.room_along_path(&shares, &usage, idx);
        if !demand.fits_in(&room) {
            return Err(Some(limit_shortfall(tree, jobs.len(), &demand, &room)));
        }
        let status = self.starvation_status_of(tree, id);
        let rooms = self.gang_rooms(id, tree, &shares, idx, status);
        let free_only = pack(&jobs, &rooms, |r| r.free, tree, &shares.total);
        let packing = match free_only {
            Ok(p) => p,
            Err(shortfall) => {
                if status == StarvationStatus::NonStarving {
                    return Err(Some(shortfall));
                }
                // Starving: preempt only if that lets the whole gang in.
                let with_victims =
                    pack(&jobs, &rooms, |r| r.free + r.takeable, tree, &shares.total);
                let Ok(packing) = with_victims else {
                    return Err(Some(shortfall));
                };
                let plan = GangPlan {
                    jobs,
                    rooms,
                    packing,
                };
                let aggressive = status == StarvationStatus::AggressivelyStarving;
                if !self.preempt_for_gang(id, tree, &plan, aggressive, now) {
                    // Graceful victims hold their room until they exit: start then.
                    return Err(Some(shortfall));
                }
                self.start_gang(id, tree, &plan, now);
                return Ok(());
            }
        };
        let plan = GangPlan {
            jobs,
            rooms,
            packing,
        };
        self.start_gang(id, tree, &plan, now);
        Ok(())
    }

    /// Every waiting job of the gang: (task, resources), largest first.
    fn gang_jobs(&self, id: &OperationId) -> Vec<(usize, ResourceVector)> {
        let op = &self.operations[id];
        let mut jobs: Vec<(usize, ResourceVector)> = op
            .tasks
            .iter()
            .enumerate()
            .flat_map(|(i, t)| std::iter::repeat_n((i, t.spec.job_resources()), t.waiting.len()))
            .collect();
        jobs.sort_by(|a, b| {
            let key = |r: &ResourceVector| (r.cpu, r.memory, r.gpu);
            key(&b.1)
                .partial_cmp(&key(&a.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        jobs
    }

    fn starvation_status_of(&self, tree: &str, id: &OperationId) -> StarvationStatus {
        self.trees
            .get(tree)
            .and_then(|t| t.snapshot.as_ref())
            .and_then(|s| s.starving_order.iter().find(|(o, _)| o == id))
            .map_or(StarvationStatus::NonStarving, |(_, s)| *s)
    }

    /// The nodes of `tree` the gang may run on, with what each has free (what its jobs
    /// hold, or what it last reported, whichever is more) and, for a starving gang,
    /// what preemption could take there.
    fn gang_rooms(
        &self,
        id: &OperationId,
        tree: &str,
        shares: &TreeShares,
        idx: usize,
        status: StarvationStatus,
    ) -> Vec<Room> {
        let op = &self.operations[id];
        let aggressive = status == StarvationStatus::AggressivelyStarving;
        self.tree_members(tree)
            .filter(|n| {
                n.is_schedulable()
                    && op.tag_filter().matches(&n.all_tags)
                    && shares.admits(idx, &n.all_tags)
            })
            .map(|n| {
                let held = self.node_running(&n.id).component_max(&n.reported_usage);
                let free = (n.resource_limits - held).map(|_, v| v.max(0.0));
                let takeable = if status == StarvationStatus::NonStarving {
                    ResourceVector::ZERO
                } else {
                    self.preemption_candidates(&n.id, tree)
                        .iter()
                        .filter(|(c, class)| {
                            &c.operation != id && self.may_take(tree, c, *class, aggressive)
                        })
                        .map(|(c, _)| c.resources)
                        .sum::<ResourceVector>()
                        + self.interrupting_on(&n.id)
                };
                Room {
                    node: n.id.clone(),
                    free,
                    takeable,
                }
            })
            .collect()
    }

    /// Preempts, on each node the packing uses, the fewest jobs that make room for the
    /// gang's jobs there. Returns whether the room is free now (no victim is graceful).
    fn preempt_for_gang(
        &mut self,
        id: &OperationId,
        tree: &TreeName,
        plan: &GangPlan,
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
        for (node_idx, need) in need {
            let room = &plan.rooms[node_idx];
            if need.fits_in(&room.free) {
                continue;
            }
            let coming = self.interrupting_on(&room.node);
            if need.fits_in(&(room.free + coming)) {
                at_once = false;
                continue;
            }
            let candidates = self.preemption_candidates(&room.node, tree);
            let Some(victims) =
                self.choose_victims(tree, id, aggressive, need, room.free + coming, &candidates)
            else {
                at_once = false;
                continue;
            };
            at_once &= coming == ResourceVector::ZERO;
            let node = room.node.clone();
            let (graceful, _) = self.take_victims(&node, victims, &message, now);
            at_once &= !graceful;
        }
        at_once
    }

    /// Books every job of the packing on its node; each node gets its starts at its
    /// next heartbeat.
    fn start_gang(&mut self, id: &OperationId, tree: &TreeName, plan: &GangPlan, now: UnixMillis) {
        let mut placed: Vec<(NodeId, ytsched_common::protocol::JobStartSpec)> = vec![];
        if let Some(mut op) = self.operations.edit(id) {
            for (j, &(task, node)) in plan.packing.iter().enumerate() {
                debug_assert_eq!(plan.jobs[j].0, task);
                let node_id = plan.rooms[node].node.clone();
                let spec = op.start_job(task, &node_id, tree, now);
                placed.push((node_id, spec));
            }
            op.record(
                now,
                format!(
                    "gang of {} job(s) started whole on {} node(s)",
                    placed.len(),
                    {
                        let mut nodes: Vec<&NodeId> = placed.iter().map(|(n, _)| n).collect();
                        nodes.sort();
                        nodes.dedup();
                        nodes.len()
                    }
                ),
            );
        }
        for (node, spec) in &placed {
            self.record_start(node, id, spec);
            self.jobs
                .sent_in(node, &spec.job_id, crate::jobs::job_index::NEVER_SENT);
            self.outbox.nudge(node.clone());
        }
        self.trees.mark_stale(tree);
        tracing::info!(operation = %id, jobs = placed.len(), "gang started whole");
    }

    /// Whether `c` may be taken by a starving operation (as `choose_victims` decides).
    fn may_take(&self, tree: &str, c: &Candidate, class: Preemptibility, aggressive: bool) -> bool {
        let Some(pool) = self.operations.get(&c.operation).and_then(|o| o.slot(tree)) else {
            return false;
        };
        match class {
            Preemptibility::Preemptible => {
                self.cluster.preemption_allowed(tree, &pool.pool, false)
                    || (aggressive && self.cluster.preemption_allowed(tree, &pool.pool, true))
            }
            Preemptibility::AggressivelyPreemptible => {
                aggressive && self.cluster.preemption_allowed(tree, &pool.pool, true)
            }
            Preemptibility::NonPreemptible => false,
        }
    }
}

/// Best fit, largest job first: each job goes to the node it leaves least room on. On
/// failure, what the first job that found no room lacks.
fn pack(
    jobs: &[(usize, ResourceVector)],
    rooms: &[Room],
    offer: impl Fn(&Room) -> ResourceVector,
    tree: &str,
    total: &ResourceVector,
) -> Packing {
    let mut left: Vec<ResourceVector> = rooms.iter().map(&offer).collect();
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
                out.push((*task, i));
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
        at: 0,
    }
}

/// A gang whose whole demand is over a limit of its own or of a pool above it.
fn limit_shortfall(
    tree: &str,
    jobs: usize,
    demand: &ResourceVector,
    room: &ResourceVector,
) -> GangShortfall {
    let resource = Resource::ALL
        .into_iter()
        .find(|&r| demand.get(r) > room.get(r) + ytsched_common::resources::EPSILON)
        .unwrap_or(Resource::Cpu);
    GangShortfall {
        tree: tree.to_string(),
        jobs,
        unplaced: jobs,
        resource: resource.name().to_string(),
        need: demand.get(resource),
        nodes_short: 0,
        nodes: 0,
        most_free: room.get(resource),
        over_limit: true,
        at: 0,
    }
}
