//! `explain`: why an operation is where it is, read off the core's own state (the
//! pending queue and count limits, tree membership, the last fair-share snapshot,
//! starvation and preemption rules). It only reads, so it may run on any copy of the
//! core.

use crate::queries::reads::CoreReads;
use crate::trees::fair_share::DetailedShare;
use crate::trees::fair_share::TreeShares;
use crate::trees::pool_rules::PoolRules;
use crate::trees::starvation::ElementKey;
use crate::Operation;
use ytsched_common::api::ApiError;
use ytsched_common::explain::{
    first_shortfall, Explanation, PoolExplanation, Reason, ShareParts, TreePlace,
};
use ytsched_common::resources::{ResourceVector, EPSILON};
use ytsched_common::states::OperationState;
use ytsched_common::OperationId;

/// Operations named as preemption victims, at most.
const VICTIMS_NAMED: usize = 5;

/// What stops element `idx`'s fair share from growing, in words: its demand, the
/// `resource_limits` of it or an ancestor, or the weights it shares with.
fn bound_by(shares: &TreeShares, idx: usize) -> String {
    let e = &shares.elements[idx];
    let at = |v: &ResourceVector| v.get(e.dominant_resource);
    if at(&e.fair_share) + EPSILON >= at(&e.demand_share) {
        return "its demand: it is offered all it asks for".to_string();
    }
    let limiting = shares
        .path(idx)
        .into_iter()
        // The root's share is the whole tree: never a limit of its own.
        .filter(|&i| shares.elements[i].parent.is_some())
        .find(|&i| {
            let x = &shares.elements[i];
            at(&x.fair_share) + EPSILON >= at(&x.limits_share)
        });
    if let Some(limiting) = limiting {
        return if limiting == idx {
            "its own resource_limits".to_string()
        } else {
            format!(
                "the resource_limits of pool '{}'",
                shares.elements[limiting].name()
            )
        };
    }
    // The nearest element on the path that shares its parent with others is where the
    // weights decide.
    let shared = shares.path(idx).into_iter().find(|&i| {
        shares.elements[i]
            .parent
            .is_some_and(|p| shares.elements[p].children().len() > 1)
    });
    match shared {
        Some(i) => {
            let x = &shares.elements[i];
            let parent = &shares.elements[x.parent.expect("found with a parent")];
            let who = if i == idx {
                "it".to_string()
            } else {
                format!("its pool '{}'", x.name())
            };
            format!(
                "sharing: {who} has weight {} among {} children of '{}'",
                x.weight,
                parent.children().len(),
                parent.name()
            )
        }
        None => "sharing".to_string(),
    }
}

impl<'a> CoreReads<'a> {
    pub fn explain_operation(&self, id: &OperationId) -> Result<Explanation, ApiError> {
        let op = self
            .operations
            .get(id)
            .ok_or_else(|| ApiError::not_found(format!("no such operation: {id}")))?;
        // A finished operation has no share any more: only why it ended matters.
        if op.state.is_finished() {
            return Ok(Explanation::ended(
                id.clone(),
                op.state,
                op.error.clone(),
                self.latest_now,
            ));
        }
        let mut reasons = Vec::new();
        let mut trees = Vec::new();
        if op.suspended {
            reasons.push(Reason::Suspended {
                since: op
                    .history
                    .iter()
                    .rev()
                    .find(|h| h.event.starts_with("suspended"))
                    .map(|h| h.time),
                waiting_jobs: op.waiting_job_count(),
            });
        }
        if op.state == OperationState::Pending {
            reasons.extend(self.pending_reasons(op));
        }
        reasons.extend(preparing_reason(op, self.latest_now));
        reasons.extend(op.held_reasons());
        let gang_waits = op.gang_waits_whole() && !op.suspended;
        if let Some(s) = op.gang_shortfall.as_ref().filter(|_| gang_waits) {
            reasons.push(Reason::GangDoesNotFit {
                tree: s.tree.clone(),
                why: s.text(),
            });
        }
        for (tree, slot) in &op.trees {
            let shares = self.trees.shares(tree);
            let place = shares.as_deref().and_then(|s| self.tree_place(op, tree, s));
            if op.waiting_job_count() > 0
                && !op.suspended
                && !(gang_waits && op.gang_shortfall.is_some())
            {
                reasons.extend(self.waiting_reasons(op, tree, place.as_ref()));
            }
            trees.push(place.unwrap_or_else(|| TreePlace {
                tree: tree.to_string(),
                pool: slot.pool.to_string(),
                weight: slot.weight,
                dominant_resource: String::new(),
                share: Default::default(),
                usage: 0.0,
                demand: 0.0,
                pool_share: None,
                bound_by: String::new(),
                starvation_status: "non_starving".into(),
                below_fair_share_since: None,
                preemption_allowed: self.cluster.preemption_allowed(tree, &slot.pool, false),
                aggressive_preemption_allowed:
                    self.cluster.preemption_allowed(tree, &slot.pool, true),
                preemptible_operations: vec![],
                not_in_last_update: true,
            }));
        }
        Ok(Explanation {
            as_of: self.latest_now,
            operation_id: id.clone(),
            state: op.state,
            reasons,
            trees,
            parameter_updates: op
                .history
                .iter()
                .filter(|h| h.event.starts_with(crate::operations::control::UPDATED))
                .cloned()
                .collect(),
        })
    }

    /// The pools whose `max_running_operation_count` keeps a pending operation waiting,
    /// with its place in the queue behind each.
    fn pending_reasons(&self, op: &Operation) -> Vec<Reason> {
        let pending = self.operations.pending_operations();
        let mut out = Vec::new();
        for (tree_name, slot) in op.trees.iter().filter(|(_, s)| !s.lightweight) {
            let Ok(tree) = self.cluster.tree(tree_name) else {
                continue;
            };
            let counts = self.operations.pool_counts(self.cluster, tree_name);
            let chain = tree.lineage(&slot.pool);
            for (depth, &pool) in chain.iter().enumerate() {
                let running = counts.get(pool).map_or(0, |c| c.running);
                let limit = tree.max_running_operation_count(pool);
                if running < limit {
                    continue;
                }
                // Operations pending behind this pool, oldest first.
                let behind: Vec<&OperationId> = pending
                    .iter()
                    .filter(|p| {
                        self.operations
                            .get(p)
                            .and_then(|o| o.slot(tree_name))
                            .is_some_and(|s| {
                                pool.is_root() || tree.ancestry(&s.pool).contains(&pool)
                            })
                    })
                    .collect();
                let position = behind
                    .iter()
                    .position(|p| **p == op.id)
                    .map_or(0, |i| i + 1);
                out.push(Reason::PoolAtRunningLimit {
                    tree: tree_name.to_string(),
                    pool: pool.to_string(),
                    ancestor: depth > 0,
                    running: running as u64,
                    limit,
                    position,
                    queued: behind.len(),
                });
            }
        }
        out
    }

    /// Why jobs of a running operation wait in one tree.
    fn waiting_reasons(
        &self,
        op: &Operation,
        tree: &str,
        place: Option<&TreePlace>,
    ) -> Vec<Reason> {
        let members: Vec<_> = self.trees.members(tree, self.nodes).collect();
        if members.is_empty() {
            return vec![Reason::TreeHasNoNodes { tree: tree.into() }];
        }
        let largest = members
            .iter()
            .filter(|n| n.is_schedulable() && op.tag_filter().matches(&n.all_tags))
            .map(|n| n.resource_limits)
            .fold(ResourceVector::ZERO, |a, b| a.component_max(&b));
        let mut out = Vec::new();
        for (name, spec) in op.waiting_tasks() {
            if let Some((resource, need, has)) = first_shortfall(&spec.job_resources(), &largest) {
                out.push(Reason::NoNodeFits {
                    tree: tree.into(),
                    task: name.clone(),
                    resource,
                    need,
                    largest: has,
                });
            }
        }
        if !out.is_empty() || op.state != OperationState::Running {
            return out;
        }
        match place {
            Some(p) if p.share.fair_share + EPSILON < p.demand => {
                out.push(Reason::FairShareBelowDemand { tree: tree.into() })
            }
            _ => out.push(Reason::WaitingForFreeResources { tree: tree.into() }),
        }
        out
    }

    fn tree_place(&self, op: &Operation, tree: &str, shares: &TreeShares) -> Option<TreePlace> {
        let slot = op.slot(tree)?;
        let &idx = shares.operation_index.get(&op.id)?;
        let e = &shares.elements[idx];
        // The resource the operation needs most of, relative to the tree.
        let d = e.dominant_resource;
        let at = |v: &ResourceVector| v.get(d);
        let parts = |s: &DetailedShare| ShareParts {
            fair_share: at(&s.total),
            strong_guarantee: at(&s.strong_guarantee),
            integral_guarantee: at(&s.integral_guarantee),
            weight_proportional: at(&s.weight_proportional),
        };
        let bound_by = bound_by(shares, idx);
        let starvation = self.starvation_of(tree, &ElementKey::Operation(op.id.clone()));
        let mut victims = Vec::new();
        for (other, _) in shares.operation_index.iter() {
            if victims.len() == VICTIMS_NAMED {
                break;
            }
            if *other != op.id && self.victims().preemptible_counts(other, tree).0 > 0 {
                victims.push(other.clone());
            }
        }
        victims.sort();
        Some(TreePlace {
            tree: tree.into(),
            pool: slot.pool.to_string(),
            weight: slot.weight,
            dominant_resource: d.name().into(),
            share: parts(&e.detailed_fair_share()),
            usage: at(&e.usage_share),
            demand: at(&e.demand_share),
            pool_share: shares
                .pool_index
                .get(slot.pool.as_str())
                .map(|&p| parts(&shares.elements[p].detailed_fair_share())),
            bound_by,
            starvation_status: starvation
                .map_or("non_starving", |s| s.starvation.name())
                .into(),
            below_fair_share_since: starvation.and_then(|s| s.below_since),
            preemption_allowed: self.cluster.preemption_allowed(tree, &slot.pool, false),
            aggressive_preemption_allowed: self.cluster.preemption_allowed(tree, &slot.pool, true),
            preemptible_operations: victims,
            not_in_last_update: false,
        })
    }

    pub fn explain_pool(
        &self,
        tree: Option<&str>,
        pool: &str,
    ) -> Result<PoolExplanation, ApiError> {
        let tree_name = match tree {
            Some(t) => t.to_string(),
            None => self
                .cluster
                .default_tree
                .as_ref()
                .map(|d| d.to_string())
                .ok_or_else(|| {
                    ApiError::new("no default pool tree is set; name one with --pool-tree")
                })?,
        };
        let tree = self
            .cluster
            .tree(&tree_name)
            .map_err(|e| ApiError::not_found(e.message))?;
        let (pool_name, config) = tree.pools.get_key_value(pool).ok_or_else(|| {
            ApiError::not_found(format!("no pool '{pool}' in tree '{tree_name}'"))
        })?;
        let counts = self
            .operations
            .pool_counts(self.cluster, &tree_name)
            .get(pool)
            .copied()
            .unwrap_or_default();
        let shares = self.trees.shares(&tree_name);
        let element = shares
            .as_deref()
            .and_then(|s| Some((s, *s.pool_index.get(pool)?)));
        let mut out = PoolExplanation {
            tree: tree_name.clone(),
            pool: pool.to_string(),
            parent: Some(config.parent.to_string()),
            weight: config.config.weight.unwrap_or(1.0),
            dominant_resource: String::new(),
            share: ShareParts::default(),
            usage: 0.0,
            demand: 0.0,
            bound_by: String::new(),
            starvation_status: "non_starving".into(),
            running_operations: counts.running as u64,
            max_running_operations: tree.max_running_operation_count(pool),
            operations: counts.total as u64,
            max_operations: tree.max_operation_count(pool),
            preemption_allowed: self
                .cluster
                .preemption_allowed(&tree_name, pool_name, false),
            aggressive_preemption_allowed: self
                .cluster
                .preemption_allowed(&tree_name, pool_name, true),
            not_in_last_update: element.is_none(),
        };
        if let Some((shares, idx)) = element {
            let e = &shares.elements[idx];
            let detailed = e.detailed_fair_share();
            let at = |v: &ResourceVector| v.get(e.dominant_resource);
            out.dominant_resource = e.dominant_resource.name().into();
            out.share = ShareParts {
                fair_share: at(&e.fair_share),
                strong_guarantee: at(&detailed.strong_guarantee),
                integral_guarantee: at(&detailed.integral_guarantee),
                weight_proportional: at(&detailed.weight_proportional),
            };
            out.usage = at(&e.usage_share);
            out.demand = at(&e.demand_share);
            out.bound_by = bound_by(shares, idx);
            if let Some(s) = self.starvation_of(&tree_name, &ElementKey::Pool(pool_name.clone())) {
                out.starvation_status = s.starvation.name().into();
            }
        }
        Ok(out)
    }
}

/// Its started jobs whose nodes still fetch their files, if any (SPEC 5.17).
fn preparing_reason(
    op: &crate::Operation,
    now: ytsched_common::protocol::UnixMillis,
) -> Option<Reason> {
    let started = op
        .jobs
        .values()
        .filter(|j| j.preparing)
        .map(|j| j.start_time);
    let (jobs, first) = started.fold((0, u64::MAX), |(n, first), t| (n + 1, first.min(t)));
    (jobs > 0).then(|| Reason::PreparingFiles {
        jobs,
        longest_ms: now.saturating_sub(first),
    })
}
