//! `ytsched explain OP`: why an operation is where it is, as the scheduler's core sees
//! it. One typed answer that the CLI prints in words (or JSON) and the web page shows,
//! so the wording lives in one place.

use crate::resources::ResourceVector;
use crate::states::OperationState;
use crate::OperationId;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// The scheduler's time of the state explained (Unix ms).
    #[serde(default)]
    pub as_of: u64,
    pub operation_id: OperationId,
    pub state: OperationState,
    /// Why it is not (fully) running, most important first; empty when nothing holds
    /// it back.
    pub reasons: Vec<Reason>,
    /// Its place in each of its pool trees.
    pub trees: Vec<TreePlace>,
    /// Its runtime parameter changes (`update_operation_parameters`), oldest first:
    /// why its pool, weight or limits are not what it was submitted with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameter_updates: Vec<crate::api::HistoryEntry>,
}

/// One thing holding an operation back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// It ended; `error` says why if it did not complete.
    Finished { error: Option<String> },
    /// Pending: `pool` (its own, or an ancestor) runs as many operations as its
    /// `max_running_operation_count` allows.
    PoolAtRunningLimit {
        tree: String,
        pool: String,
        /// The pool is an ancestor of the operation's pool.
        ancestor: bool,
        running: u64,
        limit: u32,
        /// 1-based place among the operations pending behind this pool.
        position: usize,
        queued: usize,
    },
    /// No node is in the tree (none matches its `nodes_filter`, or all are offline or
    /// banned).
    TreeHasNoNodes { tree: String },
    /// Jobs wait, and no node of the tree taking new jobs (online, not decommissioned)
    /// could hold one even empty.
    NoNodeFits {
        tree: String,
        task: String,
        resource: String,
        need: f64,
        largest: f64,
    },
    /// Suspended (`suspend_operation`): given no new jobs until resumed; its demand
    /// is only what it uses.
    Suspended {
        /// When (Unix ms), if its history says.
        since: Option<u64>,
        waiting_jobs: u64,
    },
    /// A gang operation waits to start whole (SPEC 5.15): `why` says what it lacks, as
    /// its last placement attempt found.
    GangDoesNotFit { tree: String, why: String },
    /// Jobs wait because its fair share is below its demand: the tree is shared.
    FairShareBelowDemand { tree: String },
    /// Jobs wait although its share would allow more: nodes have no room free yet
    /// (starving operations get it by preemption where allowed).
    WaitingForFreeResources { tree: String },
    /// Started jobs whose nodes still fetch their files or unpack their layers (SPEC
    /// 5.17): they hold their resources and run once that is done.
    PreparingFiles { jobs: u64, longest_ms: u64 },
    /// Jobs whose attempts the scheduler aborted (preempted, a gang's break, a ban)
    /// wait for `nodes` to say those attempts stopped, or for the node timeout, so that
    /// no job runs twice at once.
    AbortedAttemptsStopping { jobs: u64, nodes: Vec<String> },
    /// Jobs that asked to run again (`restart_exit_code`) wait out their back-off,
    /// the first until `until` (Unix ms).
    RestartBackoff { jobs: u64, until: u64 },
}

/// An operation's fair share in one tree and how it was made (SPEC 5.1–5.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreePlace {
    pub tree: String,
    pub pool: String,
    pub weight: f64,
    /// At the dominant resource of its demand, as fractions of the tree.
    pub dominant_resource: String,
    pub share: ShareParts,
    pub usage: f64,
    pub demand: f64,
    /// Its pool's share, made the same way: guarantees are pools', so this is where a
    /// strong or integral guarantee shows.
    pub pool_share: Option<ShareParts>,
    /// What stops its fair share from growing: its demand, a limit (naming whose), or
    /// its siblings' weights.
    pub bound_by: String,
    pub starvation_status: String,
    /// Below its fair share since (Unix ms).
    pub below_fair_share_since: Option<u64>,
    pub preemption_allowed: bool,
    pub aggressive_preemption_allowed: bool,
    /// Operations of the tree with jobs it may preempt (at most a few named).
    pub preemptible_operations: Vec<OperationId>,
    /// No fair-share update has included it yet (pending, or just submitted).
    pub not_in_last_update: bool,
}

/// A fair share (fraction of the tree at one resource) and the parts it is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareParts {
    pub fair_share: f64,
    pub strong_guarantee: f64,
    pub integral_guarantee: f64,
    pub weight_proportional: f64,
}

impl ShareParts {
    fn text(&self) -> String {
        format!(
            "{} (strong guarantee {} + integral {} + weight-proportional {})",
            pct(self.fair_share),
            pct(self.strong_guarantee),
            pct(self.integral_guarantee),
            pct(self.weight_proportional)
        )
    }
}

/// Whether its pools let an operation (or a pool's operations) preempt, in words.
fn preemption_words(regular: bool, aggressive: bool) -> &'static str {
    match (regular, aggressive) {
        (true, true) => "regular and aggressive preemption allowed",
        (true, false) => "regular preemption allowed, aggressive not",
        (false, true) => "aggressive preemption allowed, regular not",
        (false, false) => "its pools allow no preemption",
    }
}

fn share_line(share: &ShareParts, resource: &str, usage: f64, demand: f64) -> String {
    format!(
        "fair share {} of the tree's {resource}; usage {}, demand {}",
        share.text(),
        pct(usage),
        pct(demand)
    )
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

impl Explanation {
    /// Of an operation that ended: why is all there is to say (no share, no tree).
    pub fn ended(
        operation_id: OperationId,
        state: OperationState,
        error: Option<String>,
        as_of: u64,
    ) -> Self {
        Explanation {
            as_of,
            operation_id,
            state,
            reasons: vec![Reason::Finished { error }],
            trees: vec![],
            parameter_updates: vec![],
        }
    }

    /// In words, for people.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "operation {} is {}", self.operation_id, self.state);
        if self.reasons.is_empty() && !self.state.is_finished() {
            let _ = writeln!(
                s,
                "- nothing holds it back: every job it has runs or has run"
            );
        }
        for r in &self.reasons {
            let _ = writeln!(s, "- {}", r.text());
        }
        for t in &self.trees {
            let _ = writeln!(
                s,
                "in pool tree '{}', pool '{}' (weight {}):",
                t.tree, t.pool, t.weight
            );
            if t.not_in_last_update {
                let _ = writeln!(s, "  no fair share yet: no update has included it");
                continue;
            }
            let _ = writeln!(
                s,
                "  {}",
                share_line(&t.share, &t.dominant_resource, t.usage, t.demand)
            );
            if let Some(p) = &t.pool_share {
                let _ = writeln!(s, "  its pool '{}': fair share {}", t.pool, p.text());
            }
            let _ = writeln!(s, "  bound by {}", t.bound_by);
            let since = t
                .below_fair_share_since
                .map(|ms| {
                    format!(
                        " (below its fair share for {:.1} s)",
                        self.as_of.saturating_sub(ms) as f64 / 1000.0
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(s, "  {}{since}", t.starvation_status);
            let preempt = preemption_words(t.preemption_allowed, t.aggressive_preemption_allowed);
            let victims = if t.preemptible_operations.is_empty() {
                "no job in the tree is preemptible now".to_string()
            } else {
                format!(
                    "preemptible jobs now in {}",
                    t.preemptible_operations
                        .iter()
                        .map(|o| o.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let _ = writeln!(s, "  {preempt}; {victims}");
        }
        for u in &self.parameter_updates {
            let ago = self.as_of.saturating_sub(u.time) as f64 / 1000.0;
            let _ = writeln!(s, "{} ({ago:.1} s ago)", u.event);
        }
        s
    }
}

impl Reason {
    pub fn text(&self) -> String {
        match self {
            Reason::Finished { error: Some(e) } => format!("it ended: {e}"),
            Reason::Finished { error: None } => "it ended".into(),
            Reason::PoolAtRunningLimit {
                tree,
                pool,
                ancestor,
                running,
                limit,
                position,
                queued,
            } => format!(
                "pending: {}pool '{pool}' of tree '{tree}' runs {running} operation(s), its max_running_operation_count is {limit}; it is {position} of {queued} waiting there",
                if *ancestor { "ancestor " } else { "" }
            ),
            Reason::TreeHasNoNodes { tree } => format!(
                "pool tree '{tree}' has no nodes (none matches its nodes_filter, or they are offline or banned)"
            ),
            Reason::NoNodeFits {
                tree,
                task,
                resource,
                need,
                largest,
            } => format!(
                "no node of tree '{tree}' taking jobs can fit a job of task '{task}': it needs {resource} {need}, the largest node has {largest}"
            ),
            Reason::Suspended { waiting_jobs, .. } => format!(
                "suspended: it is given no new jobs until resume-operation ({waiting_jobs} job(s) wait); it keeps its running jobs and its demand is only what they use"
            ),
            Reason::GangDoesNotFit { why, .. } => why.clone(),
            Reason::FairShareBelowDemand { tree } => format!(
                "jobs wait: its fair share in '{tree}' is below its demand (the tree is shared)"
            ),
            Reason::WaitingForFreeResources { tree } => format!(
                "jobs wait for room on the nodes of '{tree}' (its share allows more)"
            ),
            Reason::PreparingFiles { jobs, longest_ms } => format!(
                "{jobs} started job(s) are preparing: their nodes fetch their files and layers (the longest for {:.1} s)",
                *longest_ms as f64 / 1000.0
            ),
            Reason::AbortedAttemptsStopping { jobs, nodes } => format!(
                "{jobs} job(s) wait for node(s) {} to say their aborted attempts stopped (or for the node timeout): a job never runs twice at once",
                nodes.join(", ")
            ),
            Reason::RestartBackoff { jobs, until } => format!(
                "{jobs} job(s) that asked to run again (restart_exit_code) wait out their back-off, the first until {until} (Unix ms)"
            ),
        }
    }
}

/// The resource a job needs more of than `largest` offers, with both amounts.
pub fn first_shortfall(
    need: &ResourceVector,
    largest: &ResourceVector,
) -> Option<(String, f64, f64)> {
    crate::resources::Resource::ALL.into_iter().find_map(|r| {
        (need.get(r) > largest.get(r) + crate::resources::EPSILON)
            .then(|| (r.name().to_string(), need.get(r), largest.get(r)))
    })
}

/// `ytsched explain --pool POOL`: a pool's place in its tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolExplanation {
    pub tree: String,
    pub pool: String,
    /// `None` for the root.
    pub parent: Option<String>,
    pub weight: f64,
    pub dominant_resource: String,
    pub share: ShareParts,
    pub usage: f64,
    pub demand: f64,
    pub bound_by: String,
    pub starvation_status: String,
    /// Running, against `max_running_operation_count`; all (running and pending)
    /// against `max_operation_count`.
    pub running_operations: u64,
    pub max_running_operations: u32,
    pub operations: u64,
    pub max_operations: u32,
    pub preemption_allowed: bool,
    pub aggressive_preemption_allowed: bool,
    /// No fair-share update has included it yet.
    pub not_in_last_update: bool,
}

impl PoolExplanation {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let parent = self
            .parent
            .as_deref()
            .map(|p| format!(", child of '{p}'"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "pool '{}' of tree '{}'{parent} (weight {})",
            self.pool, self.tree, self.weight
        );
        let _ = writeln!(
            s,
            "- operations: {} running of max_running_operation_count {}; {} in all of max_operation_count {}",
            self.running_operations, self.max_running_operations, self.operations, self.max_operations
        );
        if self.not_in_last_update {
            let _ = writeln!(s, "- no fair share yet: no update has included it");
            return s;
        }
        let _ = writeln!(
            s,
            "- {}",
            share_line(
                &self.share,
                &self.dominant_resource,
                self.usage,
                self.demand
            )
        );
        let _ = writeln!(s, "- bound by {}", self.bound_by);
        let preempt = preemption_words(self.preemption_allowed, self.aggressive_preemption_allowed);
        let _ = writeln!(s, "- {}; {preempt}", self.starvation_status);
        s
    }
}
