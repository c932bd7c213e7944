//! The orchid's entries as types, serialised straight to text: an orchid of 10,000
//! operations is not first built as a tree of `serde_json` maps. Fields keep YTsaurus's
//! names; optional ones are left out when unset, as YTsaurus's orchid leaves them out.

use crate::trees::fair_share::{DetailedShare, Element, IntegralView};
use crate::trees::pool_lines::satisfaction;
use crate::trees::starvation::{ElementStarvation, SchedulingStatus, StarvationStatus};
use serde::Serialize;
use ytsched_common::pool_config::IntegralGuaranteeType;
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::ResourceAmounts;

/// A share vector: fractions of the tree's resources.
#[derive(Serialize)]
pub(crate) struct Shares {
    cpu: f64,
    memory: f64,
    gpu: f64,
    user_slots: f64,
}

impl From<&ResourceVector> for Shares {
    fn from(v: &ResourceVector) -> Self {
        Self {
            cpu: v.cpu,
            memory: v.memory,
            gpu: v.gpu,
            user_slots: v.user_slots,
        }
    }
}

/// Absolute resources, memory in whole bytes.
#[derive(Serialize)]
pub(crate) struct Amounts {
    cpu: f64,
    memory: f64,
    gpu: f64,
    user_slots: f64,
}

impl From<&ResourceVector> for Amounts {
    fn from(v: &ResourceVector) -> Self {
        Self {
            cpu: v.cpu,
            memory: v.memory.round(),
            gpu: v.gpu,
            user_slots: v.user_slots,
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Detailed {
    total: Shares,
    strong_guarantee: Shares,
    integral_guarantee: Shares,
    weight_proportional: Shares,
}

impl From<&DetailedShare> for Detailed {
    fn from(d: &DetailedShare) -> Self {
        Self {
            total: (&d.total).into(),
            strong_guarantee: (&d.strong_guarantee).into(),
            integral_guarantee: (&d.integral_guarantee).into(),
            weight_proportional: (&d.weight_proportional).into(),
        }
    }
}

/// Satisfaction as the orchid shows it: finite (a large number stands for "none yet").
pub(crate) fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        1e9
    }
}

pub(crate) fn element_satisfaction(e: &Element) -> f64 {
    satisfaction(&e.usage_share, &e.fair_share, &e.demand_share)
}

/// The shares every pool and running operation shows.
#[derive(Serialize)]
pub(crate) struct ShareFields {
    fair_share_ratio: f64,
    usage_ratio: f64,
    demand_ratio: f64,
    dominant_resource: &'static str,
    weight: f64,
    detailed_fair_share: Detailed,
    usage_share: Shares,
    demand_share: Shares,
    limits_share: Shares,
    resource_usage: Amounts,
    resource_demand: Amounts,
    limited_resource_demand: Amounts,
}

impl ShareFields {
    /// An element's shares, and the absolute resources they are of `total`.
    pub(crate) fn of(e: &Element, total: &ResourceVector) -> Self {
        let abs = |s: &ResourceVector| Amounts::from(&s.map(|r, v| v * total.get(r)));
        Self {
            fair_share_ratio: e.fair_share.max_component(),
            usage_ratio: e.usage_share.max_component(),
            demand_ratio: e.demand_share.max_component(),
            dominant_resource: e.dominant_resource.name(),
            weight: e.weight,
            detailed_fair_share: (&e.detailed_fair_share()).into(),
            usage_share: (&e.usage_share).into(),
            demand_share: (&e.demand_share).into(),
            limits_share: (&e.limits_share).into(),
            resource_usage: abs(&e.usage_share),
            resource_demand: abs(&e.demand_share),
            limited_resource_demand: abs(&e.limited_demand_share),
        }
    }
}

/// An element's statuses as of the last update; none before its first.
#[derive(Serialize)]
pub(crate) struct Statuses {
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduling_status: Option<SchedulingStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    starvation_status: Option<StarvationStatus>,
}

impl From<Option<&ElementStarvation>> for Statuses {
    fn from(s: Option<&ElementStarvation>) -> Self {
        Self {
            scheduling_status: s.map(|s| s.scheduling),
            starvation_status: s.map(|s| s.starvation),
        }
    }
}

/// A pool's entry.
#[derive(Serialize)]
pub(crate) struct PoolEntry<'a> {
    #[serde(flatten)]
    pub shares: ShareFields,
    pub satisfaction_ratio: f64,
    #[serde(flatten)]
    pub statuses: Statuses,
    pub mode: &'static str,
    pub parent: Option<&'a str>,
    pub is_ephemeral: bool,
    pub operation_count: u32,
    pub running_operation_count: u32,
    pub lightweight_running_operation_count: u32,
    pub max_operation_count: u32,
    pub max_running_operation_count: u32,
    #[serde(flatten)]
    pub guarantees: Option<PoolGuarantees>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<&'a ResourceAmounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strong_guarantee_resources: Option<&'a ResourceAmounts>,
}

/// What a pool's element has of guarantees (every pool's element has them).
#[derive(Serialize)]
pub(crate) struct PoolGuarantees {
    pub strong_guarantee_share: Shares,
    pub effective_strong_guarantee_resources: Amounts,
    pub total_burst_ratio: f64,
    pub total_resource_flow_ratio: f64,
    #[serde(flatten)]
    pub integral: Option<IntegralFields>,
}

/// SPEC 5.7 fields of a pool with `integral_guarantees`.
#[derive(Serialize)]
pub(crate) struct IntegralFields {
    integral_guarantee_type: IntegralGuaranteeType,
    specified_resource_flow_ratio: f64,
    specified_burst_ratio: f64,
    accumulated_resource_ratio_volume: f64,
    accumulated_resource_volume: Amounts,
    integral_pool_capacity: Amounts,
    /// Burst pools only: how long the volume lasts at the burst share, with the flow
    /// still coming in.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_burst_usage_duration_seconds: Option<f64>,
}

impl IntegralFields {
    /// `capacity_seconds`: the tree's integral pool capacity in seconds of flow.
    pub(crate) fn of(ig: &IntegralView, total: &ResourceVector, capacity_seconds: f64) -> Self {
        let volume = ig.volume_ratio;
        let duration = (ig.kind == IntegralGuaranteeType::Burst).then(|| {
            let drain = ig.specified_burst_ratio - ig.specified_resource_flow_ratio;
            finite(if drain > 1e-12 {
                volume / drain
            } else {
                f64::MAX
            })
        });
        Self {
            integral_guarantee_type: ig.kind,
            specified_resource_flow_ratio: ig.specified_resource_flow_ratio,
            specified_burst_ratio: ig.specified_burst_ratio,
            accumulated_resource_ratio_volume: volume,
            accumulated_resource_volume: (&total.scale(volume)).into(),
            integral_pool_capacity: (&total
                .scale(capacity_seconds * ig.specified_resource_flow_ratio))
                .into(),
            estimated_burst_usage_duration_seconds: duration,
        }
    }
}

/// An operation with a place in the tree's snapshot.
#[derive(Serialize)]
pub(crate) struct RunningEntry<'a> {
    #[serde(flatten)]
    pub shares: ShareFields,
    pub satisfaction_ratio: f64,
    #[serde(flatten)]
    pub statuses: Statuses,
    pub state: &'static str,
    pub pool: Option<&'a str>,
    pub user: &'a str,
    pub lightweight: bool,
    pub running_job_count: usize,
    pub pending_job_count: u64,
    pub preemptible_job_count: usize,
    pub aggressively_preemptible_job_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<&'a ResourceAmounts>,
    pub suspended: bool,
    pub is_gang: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unschedulable_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fifo_index: Option<usize>,
}

/// A pending operation (SPEC 5.4, 6.2): its pool and demand; no share and no usage yet.
#[derive(Serialize)]
pub(crate) struct PendingEntry<'a> {
    pub state: &'static str,
    pub pool: &'a str,
    pub user: &'a str,
    pub weight: f64,
    pub lightweight: bool,
    pub fair_share_ratio: f64,
    pub usage_ratio: f64,
    pub demand_ratio: f64,
    pub dominant_resource: &'static str,
    pub detailed_fair_share: Detailed,
    pub usage_share: Shares,
    pub demand_share: Shares,
    pub resource_usage: Amounts,
    pub resource_demand: Amounts,
    pub running_job_count: u32,
    pub pending_job_count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<&'a ResourceAmounts>,
    pub suspended: bool,
    pub is_gang: bool,
    pub unschedulable_reason: Option<&'static str>,
}
