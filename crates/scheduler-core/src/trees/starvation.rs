//! Scheduling and starvation status (SPEC 5.3): after every fair share update, each pool
//! and operation is `below_fair_share` or `normal`, and one that has stayed below for
//! its starvation timeout is `starving` (then `aggressively_starving`, where allowed).
//! Preemption reads these; the orchid shows them.

use crate::trees::fair_share::{Element, ElementKind, TreeShares};
use serde::Serialize;
use std::sync::Arc;
use ytsched_common::names::TreePoolName;
use ytsched_common::pool_config::ROOT_POOL;
use ytsched_common::pool_tree::PoolTree;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::resources::{Resource, EPSILON};
use ytsched_common::OperationId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulingStatus {
    Normal,
    BelowFairShare,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StarvationStatus {
    #[default]
    NonStarving,
    Starving,
    AggressivelyStarving,
}

impl StarvationStatus {
    pub fn name(self) -> &'static str {
        match self {
            Self::NonStarving => "non_starving",
            Self::Starving => "starving",
            Self::AggressivelyStarving => "aggressively_starving",
        }
    }
}

/// The starvation settings in force for one element, after inheritance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StarvationSettings {
    pub timeout_ms: u64,
    pub aggressive_timeout_ms: u64,
    pub tolerance: f64,
    pub aggressive_allowed: bool,
    /// Pools only: `enable_pool_starvation` of the tree.
    pub enabled: bool,
}

/// What is remembered about an element between updates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementStarvation {
    pub scheduling: SchedulingStatus,
    pub starvation: StarvationStatus,
    /// When it went below its fair share (and has stayed there since).
    pub below_since: Option<UnixMillis>,
}

/// Pools by name and operations by id, per tree.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ElementKey {
    Pool(TreePoolName),
    Operation(OperationId),
}

/// Each element's statuses as of one update, by the element's place in that update's
/// snapshot, which it holds: an update makes no key and hashes nothing per element, and
/// an update that took its snapshot over reads each element's previous status at the
/// same place.
#[derive(Clone, Debug, Default)]
pub struct TreeStarvation {
    /// `None` before the tree's first update.
    shares: Option<Arc<TreeShares>>,
    statuses: Vec<Option<ElementStarvation>>,
}

impl TreeStarvation {
    pub fn get(&self, key: &ElementKey) -> Option<&ElementStarvation> {
        let shares = self.shares.as_ref()?;
        let i = match key {
            ElementKey::Pool(name) => shares.pool_index.get(name),
            ElementKey::Operation(id) => shares.operation_index.get(id),
        }?;
        self.at(*i)
    }

    /// The statuses of element `i` of the snapshot they were worked out with.
    fn at(&self, i: usize) -> Option<&ElementStarvation> {
        self.statuses.get(i)?.as_ref()
    }

    /// Element `i` of `shares`: at its place if these statuses are of that snapshot,
    /// else by its pool's name or operation's id.
    fn previous_of(&self, shares: &Arc<TreeShares>, i: usize) -> Option<&ElementStarvation> {
        let mine = self.shares.as_ref()?;
        if Arc::ptr_eq(mine, shares) {
            return self.at(i);
        }
        let j = match &shares.elements[i].kind {
            ElementKind::Pool { name, .. } => mine.pool_index.get(name),
            ElementKind::Operation { id } => mine.operation_index.get(id),
        }?;
        self.at(*j)
    }
}

/// `usage < min(fair_share × tolerance, demand)`, judged at the dominant resource of the
/// fair share (the scalar "fair share ratio" of SPEC 1) if the element still needs it.
/// Component by component would call a cpu-bound pool "below" on memory it cannot use:
/// per-component limits leave a memory share that no cpu is left to go with. An element
/// *operation* whose fair share covers its whole, uncapped demand uses tolerance 1; one
/// held back by limits, and every pool, keeps its configured tolerance.
pub fn scheduling_status(e: &Element, tolerance: f64) -> SchedulingStatus {
    let fs = &e.fair_share;
    let covers_demand = matches!(e.kind, ElementKind::Operation { .. })
        && Resource::ALL
            .iter()
            .all(|&r| fs.get(r) + EPSILON >= e.demand_share.get(r));
    let tolerance = if covers_demand { 1.0 } else { tolerance };
    let (r, share) = fs.dominant();
    let usage = e.usage_share.get(r);
    let demand = e.demand_share.get(r);
    if share > EPSILON
        && demand > usage + EPSILON
        && usage + EPSILON < (share * tolerance).min(demand)
    {
        SchedulingStatus::BelowFairShare
    } else {
        SchedulingStatus::Normal
    }
}

/// Effective settings of every pool: its own, else its parent's, else the tree's.
fn pool_settings(tree: &PoolTree, shares: &TreeShares) -> Vec<Option<StarvationSettings>> {
    let c = &tree.config;
    let root = StarvationSettings {
        timeout_ms: c.fair_share_starvation_timeout.0,
        aggressive_timeout_ms: c.fair_share_aggressive_starvation_timeout.0,
        tolerance: c.fair_share_starvation_tolerance,
        aggressive_allowed: c.enable_aggressive_starvation,
        enabled: c.enable_pool_starvation,
    };
    let mut out: Vec<Option<StarvationSettings>> = vec![None; shares.elements.len()];
    for (i, e) in shares.elements.iter().enumerate() {
        let ElementKind::Pool { name, .. } = &e.kind else {
            continue;
        };
        let inherited = e.parent.and_then(|p| out[p]).unwrap_or(root);
        let own = match tree.pools.get(name) {
            Some(p) if name != ROOT_POOL => &p.config,
            _ => {
                out[i] = Some(inherited);
                continue;
            }
        };
        let timeout_ms = own
            .fair_share_starvation_timeout
            .map_or(inherited.timeout_ms, |d| d.0);
        out[i] = Some(StarvationSettings {
            timeout_ms,
            aggressive_timeout_ms: own
                .fair_share_aggressive_starvation_timeout
                .map_or(inherited.aggressive_timeout_ms, |d| d.0)
                .max(timeout_ms),
            tolerance: own
                .fair_share_starvation_tolerance
                .unwrap_or(inherited.tolerance),
            aggressive_allowed: own
                .enable_aggressive_starvation
                .unwrap_or(inherited.aggressive_allowed),
            enabled: inherited.enabled,
        });
    }
    out
}

fn advance(
    previous: Option<&ElementStarvation>,
    scheduling: SchedulingStatus,
    settings: &StarvationSettings,
    now: UnixMillis,
) -> ElementStarvation {
    let below_since = match scheduling {
        SchedulingStatus::Normal => None,
        SchedulingStatus::BelowFairShare => Some(
            previous
                .and_then(|p| p.below_since)
                .map_or(now, |since| since.min(now)),
        ),
    };
    let below_for = below_since.map(|s| now.saturating_sub(s));
    let starvation = match below_for {
        Some(d) if settings.aggressive_allowed && d >= settings.aggressive_timeout_ms => {
            StarvationStatus::AggressivelyStarving
        }
        Some(d) if d >= settings.timeout_ms => StarvationStatus::Starving,
        _ => StarvationStatus::NonStarving,
    };
    ElementStarvation {
        scheduling,
        starvation,
        below_since,
    }
}

/// Statuses after an update at `now`, continuing the clocks in `previous`.
pub fn update(
    tree: &PoolTree,
    shares: &Arc<TreeShares>,
    operation_overrides: impl Fn(usize, &OperationId) -> (Option<u64>, Option<f64>),
    previous: &TreeStarvation,
    now: UnixMillis,
) -> TreeStarvation {
    let settings = pool_settings(tree, shares);
    let mut statuses = Vec::with_capacity(shares.elements.len());
    for (i, e) in shares.elements.iter().enumerate() {
        let s = match &e.kind {
            ElementKind::Pool { name, .. } if name == ROOT_POOL => None,
            ElementKind::Pool { .. } => settings[i],
            ElementKind::Operation { id } => e.parent.and_then(|p| settings[p]).map(|parent| {
                // An operation may only be more conservative than its pool.
                let (timeout, tolerance) = operation_overrides(i, id);
                let timeout_ms = timeout.map_or(parent.timeout_ms, |t| t.max(parent.timeout_ms));
                StarvationSettings {
                    timeout_ms,
                    aggressive_timeout_ms: parent.aggressive_timeout_ms.max(timeout_ms),
                    tolerance: tolerance.map_or(parent.tolerance, |t| t.min(parent.tolerance)),
                    enabled: true,
                    ..parent
                }
            }),
        };
        statuses.push(s.map(|s| {
            let scheduling = scheduling_status(e, s.tolerance);
            let mut state = advance(previous.previous_of(shares, i), scheduling, &s, now);
            if !s.enabled {
                state.starvation = StarvationStatus::NonStarving;
            }
            state
        }));
    }
    TreeStarvation {
        shares: Some(shares.clone()),
        statuses,
    }
}

/// Starving operations with waiting jobs, aggressively starving first, then the least
/// satisfied (by the usage they had when the update was prepared): worked out once per
/// update, away from the core, and read by every preemptive stage.
pub fn starving_order(
    statuses: &TreeStarvation,
    shares: &TreeShares,
    operations: &crate::trees::share_inputs::TreeInputs,
) -> Vec<(OperationId, StarvationStatus)> {
    // From the statuses, most of which say "not starving": no id is looked up for
    // those. (Submission order breaks ties.)
    let mut out: Vec<(StarvationStatus, f64, u64, OperationId)> = statuses
        .statuses
        .iter()
        .zip(&shares.elements)
        .filter_map(|(s, e)| {
            let s = s.as_ref()?;
            let ElementKind::Operation { id } = &e.kind else {
                return None;
            };
            if s.starvation == StarvationStatus::NonStarving {
                return None;
            }
            let o = operations.get(id).filter(|o| o.pending_job_count() > 0)?;
            let sat = crate::trees::pool_lines::satisfaction(
                &o.usage.share_of(&shares.total),
                &e.fair_share,
                &e.demand_share,
            );
            Some((s.starvation, sat, o.seq(), id.clone()))
        })
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    out.into_iter().map(|(s, _, _, id)| (id, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trees::fair_share::element;

    fn op() -> ElementKind {
        ElementKind::Operation {
            id: OperationId("o".into()),
        }
    }

    fn pool() -> ElementKind {
        ElementKind::Pool {
            name: TreePoolName::parse("p").unwrap(),
            mode: ytsched_common::pool_config::PoolMode::FairShare,
        }
    }

    #[test]
    fn tolerance_one_only_for_operations_whose_whole_demand_is_covered() {
        // Usage 0.45 of a fair share 0.5 that covers the demand 0.5: 0.45 ≥ 0.5 × 0.8,
        // but an operation whose demand is covered uses tolerance 1: below.
        assert_eq!(
            scheduling_status(&element(op(), 0.45, 0.5, 0.5), 0.8),
            SchedulingStatus::BelowFairShare
        );
        // A pool in the same position keeps its configured tolerance: normal.
        assert_eq!(
            scheduling_status(&element(pool(), 0.45, 0.5, 0.5), 0.8),
            SchedulingStatus::Normal
        );
        // An operation held back (fair share 0.5 of demand 0.9) keeps it too.
        assert_eq!(
            scheduling_status(&element(op(), 0.45, 0.5, 0.9), 0.8),
            SchedulingStatus::Normal
        );
        assert_eq!(
            scheduling_status(&element(op(), 0.35, 0.5, 0.9), 0.8),
            SchedulingStatus::BelowFairShare
        );
    }
}
