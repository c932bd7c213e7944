//! A pool tree's own attributes (SPEC 4.1) with their defaults and per-value checks:
//! what `//sys/pool_trees/<tree>/@config` holds.

use crate::config_attributes::{canonical, from_attributes, AttributeError};
use crate::names::PoolName;
use crate::spec::ResourceAmounts;
use crate::tag_filter::TagFilter;
use crate::units::DurationMs;
use serde::{Deserialize, Serialize};

pub const MIN_FAIR_SHARE_UPDATE_PERIOD_MS: u64 = 10;
pub const MIN_NODE_HEARTBEAT_TIMEOUT_MS: u64 = 1_000;
/// The longest a gracefully preempted job may hold its node after its interruption signal.
pub const MAX_GRACEFUL_INTERRUPT_TIMEOUT_MS: u64 = 3_600_000;

pub(crate) const TREE_ALIASES: &[(&str, &str)] = &[
    (
        "max_ephemeral_pools_per_user",
        "max_ephemeral_pool_per_user",
    ),
    (
        "fair-share_preemption_timeout",
        "fair_share_starvation_timeout",
    ),
    (
        "min_share_preemption_timeout",
        "fair_share_starvation_timeout",
    ),
    (
        "fair-share_starvation_tolerance",
        "fair_share_starvation_tolerance",
    ),
    (
        "max_unpreemptable_running_job_count",
        "max_unpreemptible_running_job_count",
    ),
];

/// The canonical name of a pool tree attribute (aliases resolved).
pub fn canonical_tree_attribute(name: &str) -> &str {
    canonical(TREE_ALIASES, name)
}

/// Integral guarantee settings of a tree (SPEC 4.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TreeIntegralGuarantees {
    pub pool_capacity_saturation_period: DurationMs,
    pub smooth_period: DurationMs,
    pub relaxed_share_multiplier_limit: f64,
}

impl TreeIntegralGuarantees {
    /// k of SPEC 5.7 in seconds: capacity = k × flow ratio.
    pub fn capacity_seconds(&self) -> f64 {
        self.pool_capacity_saturation_period.0 as f64 / 1000.0
    }
}

impl Default for TreeIntegralGuarantees {
    fn default() -> Self {
        Self {
            pool_capacity_saturation_period: DurationMs(86_400_000),
            smooth_period: DurationMs(60_000),
            relaxed_share_multiplier_limit: 3.0,
        }
    }
}

/// A pool tree's configuration with every default filled in: what `@config` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TreeConfig {
    pub nodes_filter: TagFilter,
    pub max_operation_count: u32,
    pub max_operation_count_per_pool: u32,
    pub max_running_operation_count: u32,
    pub max_running_operation_count_per_pool: u32,
    pub default_parent_pool: PoolName,
    pub forbid_immediate_operations_in_root: bool,
    #[serde(alias = "max_ephemeral_pools_per_user")]
    pub max_ephemeral_pool_per_user: u32,
    pub enable_pool_starvation: bool,
    pub fair_share_starvation_timeout: DurationMs,
    pub fair_share_aggressive_starvation_timeout: DurationMs,
    pub enable_aggressive_starvation: bool,
    pub fair_share_starvation_tolerance: f64,
    pub preemption_satisfaction_threshold: f64,
    pub aggressive_preemption_satisfaction_threshold: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unpreemptible_running_job_count: Option<u32>,
    pub preemptive_scheduling_backoff: DurationMs,
    /// How long a job of a `preemption_mode: graceful` operation has, after its
    /// interruption signal, to exit (checkpoint) before it is killed (SPEC 5.3).
    pub job_graceful_interrupt_timeout: DurationMs,
    /// In a FIFO pool, a gang operation not given its whole demand gets fair share 0
    /// (SPEC 5.15, YTsaurus's step function for gangs).
    pub enable_fair_share_truncation_in_fifo_pool: bool,
    pub integral_guarantees: TreeIntegralGuarantees,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_preemptible_resource_usage_threshold: Option<ResourceAmounts>,
    pub fair_share_update_period: DurationMs,
    pub node_heartbeat_timeout: DurationMs,
    /// Finished operations of this tree (by the first tree of their spec) leave the
    /// scheduler's memory for the archive, as YTsaurus's operations cleaner moves them:
    /// past `soft_retained_operation_count` those finished longer than `clean_delay` ago,
    /// past `hard_retained_operation_count` the oldest at once, and any older than
    /// `max_operation_age`. Archived operations still answer `get-operation`, `list-jobs`
    /// and job output.
    pub clean_delay: DurationMs,
    pub soft_retained_operation_count: u32,
    pub hard_retained_operation_count: u32,
    pub max_operation_age: DurationMs,
    /// The ACL of the tree's `<Root>`, which every pool inherits. Unset: `use` for
    /// everyone, `administer` for admins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acl: Option<Vec<crate::acl::Ace>>,
}

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            nodes_filter: TagFilter::default(),
            max_operation_count: 50_000,
            max_operation_count_per_pool: 50,
            max_running_operation_count: 2_000,
            max_running_operation_count_per_pool: 8,
            default_parent_pool: PoolName::root(),
            forbid_immediate_operations_in_root: true,
            max_ephemeral_pool_per_user: 1,
            enable_pool_starvation: true,
            fair_share_starvation_timeout: DurationMs(30_000),
            fair_share_aggressive_starvation_timeout: DurationMs(120_000),
            enable_aggressive_starvation: false,
            fair_share_starvation_tolerance: 0.8,
            preemption_satisfaction_threshold: 1.0,
            aggressive_preemption_satisfaction_threshold: 0.2,
            max_unpreemptible_running_job_count: None,
            preemptive_scheduling_backoff: DurationMs(5_000),
            job_graceful_interrupt_timeout: DurationMs(60_000),
            enable_fair_share_truncation_in_fifo_pool: false,
            integral_guarantees: TreeIntegralGuarantees::default(),
            non_preemptible_resource_usage_threshold: None,
            fair_share_update_period: DurationMs(200),
            node_heartbeat_timeout: DurationMs(30_000),
            clean_delay: DurationMs(60_000),
            soft_retained_operation_count: 200,
            hard_retained_operation_count: 4_000,
            max_operation_age: DurationMs(6 * 3600 * 1000),
            acl: None,
        }
    }
}

impl TreeConfig {
    pub fn from_attributes(tree: &str, value: serde_json::Value) -> Result<Self, AttributeError> {
        let subject = format!("pool tree '{tree}'");
        let config: TreeConfig = from_attributes(&subject, TREE_ALIASES, value)?;
        config.validate(tree)?;
        Ok(config)
    }

    pub fn to_attributes(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => Default::default(),
        }
    }

    /// `max_unpreemptible_running_job_count: N` is shorthand for a user_slots threshold.
    pub fn effective_non_preemptible_threshold(&self) -> Option<ResourceAmounts> {
        match self.max_unpreemptible_running_job_count {
            Some(n) => Some(ResourceAmounts {
                user_slots: Some(n as f64),
                ..Default::default()
            }),
            None => self.non_preemptible_resource_usage_threshold.clone(),
        }
    }

    pub fn validate(&self, tree: &str) -> Result<(), AttributeError> {
        let err = |attribute: &str, message: String| AttributeError {
            subject: format!("pool tree '{tree}'"),
            attribute: attribute.to_string(),
            message,
        };
        for (name, v) in [
            (
                "fair_share_starvation_tolerance",
                self.fair_share_starvation_tolerance,
            ),
            (
                "aggressive_preemption_satisfaction_threshold",
                self.aggressive_preemption_satisfaction_threshold,
            ),
        ] {
            if !v.is_finite() || !(0.0..=1.0).contains(&v) {
                return Err(err(name, format!("must be between 0 and 1, got {v}")));
            }
        }
        let p = self.preemption_satisfaction_threshold;
        if !p.is_finite() || p < self.aggressive_preemption_satisfaction_threshold {
            return Err(err(
                "preemption_satisfaction_threshold",
                format!(
                    "must be a number not below aggressive_preemption_satisfaction_threshold = {}, got {p}",
                    self.aggressive_preemption_satisfaction_threshold
                ),
            ));
        }
        if self.fair_share_aggressive_starvation_timeout < self.fair_share_starvation_timeout {
            return Err(err(
                "fair_share_aggressive_starvation_timeout",
                format!(
                    "{} is shorter than fair_share_starvation_timeout = {}",
                    self.fair_share_aggressive_starvation_timeout,
                    self.fair_share_starvation_timeout
                ),
            ));
        }
        self.validate_counts(&err)?;
        if let Some(acl) = &self.acl {
            crate::acl::validate(acl).map_err(|m| err("acl", m))?;
        }
        self.validate_periods(&err)?;
        if let Some(t) = &self.non_preemptible_resource_usage_threshold {
            t.check_nonnegative().map_err(|(r, v)| {
                err(
                    "non_preemptible_resource_usage_threshold",
                    format!("{r} must be a non-negative number, got {v}"),
                )
            })?;
        }
        Ok(())
    }

    /// Counts that bound others: each at least the one it bounds.
    fn validate_counts(
        &self,
        err: &dyn Fn(&str, String) -> AttributeError,
    ) -> Result<(), AttributeError> {
        // (attribute, value, the attribute it must reach, its value)
        for (name, v, bound, b) in [
            (
                "max_operation_count",
                self.max_operation_count,
                "max_running_operation_count",
                self.max_running_operation_count,
            ),
            (
                "max_operation_count_per_pool",
                self.max_operation_count_per_pool,
                "max_running_operation_count_per_pool",
                self.max_running_operation_count_per_pool,
            ),
            (
                "hard_retained_operation_count",
                self.hard_retained_operation_count,
                "soft_retained_operation_count",
                self.soft_retained_operation_count,
            ),
        ] {
            if v < b {
                return Err(err(name, format!("{v} is less than {bound} = {b}")));
            }
        }
        Ok(())
    }

    /// Periods and timeouts above their minimums (a typo must not make the scheduler
    /// spin or drop every node), and the tree's integral guarantee settings.
    fn validate_periods(
        &self,
        err: &dyn Fn(&str, String) -> AttributeError,
    ) -> Result<(), AttributeError> {
        if self.fair_share_update_period.0 < MIN_FAIR_SHARE_UPDATE_PERIOD_MS {
            return Err(err(
                "fair_share_update_period",
                format!(
                    "{} is shorter than the minimum of {MIN_FAIR_SHARE_UPDATE_PERIOD_MS} ms",
                    self.fair_share_update_period
                ),
            ));
        }
        if self.node_heartbeat_timeout.0 < MIN_NODE_HEARTBEAT_TIMEOUT_MS {
            return Err(err(
                "node_heartbeat_timeout",
                format!(
                    "{} is shorter than the minimum of {MIN_NODE_HEARTBEAT_TIMEOUT_MS} ms",
                    self.node_heartbeat_timeout
                ),
            ));
        }
        if self.job_graceful_interrupt_timeout.0 > MAX_GRACEFUL_INTERRUPT_TIMEOUT_MS {
            return Err(err(
                "job_graceful_interrupt_timeout",
                format!(
                    "{} is longer than the maximum of {MAX_GRACEFUL_INTERRUPT_TIMEOUT_MS} ms: a preempted job would hold its node's resources that long",
                    self.job_graceful_interrupt_timeout
                ),
            ));
        }
        let ig = &self.integral_guarantees;
        if ig.pool_capacity_saturation_period.0 == 0 || ig.smooth_period.0 == 0 {
            return Err(err(
                "integral_guarantees",
                "pool_capacity_saturation_period and smooth_period must be positive".into(),
            ));
        }
        if !ig.relaxed_share_multiplier_limit.is_finite() || ig.relaxed_share_multiplier_limit < 1.0
        {
            return Err(err(
                "integral_guarantees",
                format!(
                    "relaxed_share_multiplier_limit must be at least 1, got {}",
                    ig.relaxed_share_multiplier_limit
                ),
            ));
        }
        Ok(())
    }
}
