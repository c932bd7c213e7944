//! Pool tree and pool attributes (SPEC 4.1, 4.2) as admins write them, with defaults,
//! aliases and per-value validation. Structural rules that need the whole tree (guarantee
//! sums, FIFO pools without children, unique names) live with the tree in the scheduler.
//!
//! Pool attributes are `Option`s because "unset" matters: an unset pool limit falls back
//! to the tree's per-pool default, and `get` shows what an admin actually specified.

use crate::resources::ResourceVector;
use crate::spec::ResourceAmounts;
use crate::tag_filter::TagFilter;
use crate::units::DurationMs;
use serde::{Deserialize, Serialize};

pub const MIN_FAIR_SHARE_UPDATE_PERIOD_MS: u64 = 10;
pub const MIN_NODE_HEARTBEAT_TIMEOUT_MS: u64 = 1_000;

/// An attribute value that is wrong on its own (wrong type, out of range, unknown name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{subject}: attribute '{attribute}': {message}")]
pub struct AttributeError {
    /// What carries the attribute, e.g. `pool 'testing'` or `pool tree 'default'`.
    pub subject: String,
    pub attribute: String,
    pub message: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolMode {
    #[default]
    FairShare,
    Fifo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FifoSortParameter {
    /// Heavier operations first.
    Weight,
    /// Earlier operations first.
    StartTime,
    /// Operations with fewer waiting jobs first.
    PendingJobCount,
}

pub const DEFAULT_FIFO_SORT_PARAMETERS: [FifoSortParameter; 2] =
    [FifoSortParameter::Weight, FifoSortParameter::StartTime];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntegralGuaranteeType {
    #[default]
    None,
    Burst,
    Relaxed,
}

/// A pool's integral guarantee (SPEC 5.7). Accepted and validated now; the volume
/// accounting that gives it effect is its own piece of the fair share engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntegralGuarantees {
    #[serde(default)]
    pub guarantee_type: IntegralGuaranteeType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_flow: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_guarantee_resources: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relaxed_share_multiplier_limit: Option<f64>,
}

/// What ephemeral subpools (`<pool>$<user>`) and ephemeral user pools under a
/// `default_parent_pool` are created with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EphemeralSubpoolConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PoolMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running_operation_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_operation_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceAmounts>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    #[serde(
        default,
        alias = "min_share_resources",
        skip_serializing_if = "Option::is_none"
    )]
    pub strong_guarantee_resources: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PoolMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fifo_sort_parameters: Option<Vec<FifoSortParameter>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running_operation_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_operation_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbid_immediate_operations: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_ephemeral_subpools: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_subpool_config: Option<EphemeralSubpoolConfig>,
    #[serde(
        default,
        alias = "allow_normal_preemption",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_regular_preemption: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_aggressive_preemption: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_lightweight_operations: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integral_guarantees: Option<IntegralGuarantees>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Parsed as it is decoded (from a config file, an admin change or the store).
    pub scheduling_tag_filter: Option<TagFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_preemptible_resource_usage_threshold: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_starvation_timeout: Option<DurationMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_aggressive_starvation_timeout: Option<DurationMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_starvation_tolerance: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_aggressive_starvation: Option<bool>,
    /// Who may use and administer the pool (and, by inheritance, its descendants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<Vec<crate::acl::Ace>>,
}

/// Attribute aliases accepted in paths and attribute maps, with their canonical names.
const POOL_ALIASES: &[(&str, &str)] = &[
    ("min_share_resources", "strong_guarantee_resources"),
    ("allow_normal_preemption", "allow_regular_preemption"),
];

const TREE_ALIASES: &[(&str, &str)] = &[
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

fn canonical<'a>(aliases: &[(&'a str, &'a str)], name: &'a str) -> &'a str {
    aliases
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, canonical)| *canonical)
        .unwrap_or(name)
}

/// The canonical name of a pool attribute (aliases resolved).
pub fn canonical_pool_attribute(name: &str) -> &str {
    canonical(POOL_ALIASES, name)
}

/// The canonical name of a pool tree attribute (aliases resolved).
pub fn canonical_tree_attribute(name: &str) -> &str {
    canonical(TREE_ALIASES, name)
}

/// Parses an attribute map, naming the attribute whose value is wrong.
fn from_attributes<T: serde::de::DeserializeOwned>(
    subject: &str,
    aliases: &[(&str, &str)],
    value: serde_json::Value,
) -> Result<T, AttributeError> {
    let value = match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .map(|(k, v)| (canonical(aliases, &k).to_string(), v))
                .collect(),
        ),
        serde_json::Value::Null => serde_json::Value::Object(Default::default()),
        other => {
            return Err(AttributeError {
                subject: subject.to_string(),
                attribute: "@".into(),
                message: format!("attributes must be a map, got {other}"),
            })
        }
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde names an unknown field in its message; the path is then the parent.
        let attribute = match inner.strip_prefix("unknown field `") {
            Some(rest) => rest.split('`').next().unwrap_or("?").to_string(),
            None if path == "." => "@".into(),
            None => path,
        };
        AttributeError {
            subject: subject.to_string(),
            attribute,
            message: inner,
        }
    })
}

impl PoolConfig {
    /// Parses a pool's attribute map (aliases accepted) and checks each value.
    pub fn from_attributes(pool: &str, value: serde_json::Value) -> Result<Self, AttributeError> {
        let subject = format!("pool '{pool}'");
        let config: PoolConfig = from_attributes(&subject, POOL_ALIASES, value)?;
        config.validate(pool)?;
        Ok(config)
    }

    pub fn to_attributes(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => Default::default(),
        }
    }

    pub fn weight(&self) -> f64 {
        self.weight.unwrap_or(1.0)
    }

    pub fn mode(&self) -> PoolMode {
        self.mode.unwrap_or_default()
    }

    pub fn fifo_sort_parameters(&self) -> &[FifoSortParameter] {
        self.fifo_sort_parameters
            .as_deref()
            .unwrap_or(&DEFAULT_FIFO_SORT_PARAMETERS)
    }

    pub fn max_share_ratio(&self) -> f64 {
        self.max_share_ratio.unwrap_or(1.0)
    }

    /// The pool's own `scheduling_tag_filter` (None: none, or an empty one).
    pub fn tag_filter(&self) -> Option<&TagFilter> {
        self.scheduling_tag_filter
            .as_ref()
            .filter(|f| !f.is_empty())
    }

    /// Guarantees, limits and the non-preemptible threshold: non-negative amounts.
    fn validate_amounts(
        &self,
        err: &dyn Fn(&str, String) -> AttributeError,
    ) -> Result<(), AttributeError> {
        for (name, amounts) in [
            (
                "strong_guarantee_resources",
                &self.strong_guarantee_resources,
            ),
            ("resource_limits", &self.resource_limits),
            (
                "non_preemptible_resource_usage_threshold",
                &self.non_preemptible_resource_usage_threshold,
            ),
        ] {
            if let Some(a) = amounts {
                a.check_nonnegative().map_err(|(r, v)| {
                    err(name, format!("{r} must be a non-negative number, got {v}"))
                })?;
            }
        }
        Ok(())
    }

    /// Checks each value on its own; the tree checks how pools fit together.
    pub fn validate(&self, pool: &str) -> Result<(), AttributeError> {
        let err = |attribute: &str, message: String| AttributeError {
            subject: format!("pool '{pool}'"),
            attribute: attribute.to_string(),
            message,
        };
        if let Some(w) = self.weight {
            if !w.is_finite() || w <= 0.0 {
                return Err(err("weight", format!("must be a positive number, got {w}")));
            }
        }
        if let Some(acl) = &self.acl {
            crate::acl::validate(acl).map_err(|m| err("acl", m))?;
        }
        if let Some(r) = self.max_share_ratio {
            if !r.is_finite() || !(0.0..=1.0).contains(&r) {
                return Err(err(
                    "max_share_ratio",
                    format!("must be between 0 and 1, got {r}"),
                ));
            }
        }
        if let Some(t) = self.fair_share_starvation_tolerance {
            if !t.is_finite() || !(0.0..=1.0).contains(&t) {
                return Err(err(
                    "fair_share_starvation_tolerance",
                    format!("must be between 0 and 1, got {t}"),
                ));
            }
        }
        self.validate_amounts(&err)?;
        if let (Some(total), Some(running)) =
            (self.max_operation_count, self.max_running_operation_count)
        {
            if total < running {
                return Err(err(
                    "max_operation_count",
                    format!("{total} is less than max_running_operation_count = {running}"),
                ));
            }
        }
        if let Some(p) = &self.fifo_sort_parameters {
            if p.is_empty() {
                return Err(err("fifo_sort_parameters", "must not be empty".into()));
            }
        }
        if let (Some(a), Some(t)) = (
            self.fair_share_starvation_timeout,
            self.fair_share_aggressive_starvation_timeout,
        ) {
            if t < a {
                return Err(err(
                    "fair_share_aggressive_starvation_timeout",
                    format!("{t} is shorter than fair_share_starvation_timeout = {a}"),
                ));
            }
        }
        if let Some(ig) = &self.integral_guarantees {
            validate_integral(ig, &err)?;
        }
        if let Some(c) = &self.ephemeral_subpool_config {
            validate_ephemeral(c, &err)?;
        }
        Ok(())
    }
}

/// A pool's `integral_guarantees`: amounts non-negative, no burst for a relaxed pool,
/// a multiplier limit of at least 1.
fn validate_integral(
    ig: &IntegralGuarantees,
    err: &dyn Fn(&str, String) -> AttributeError,
) -> Result<(), AttributeError> {
    for (name, amounts) in [
        ("resource_flow", &ig.resource_flow),
        ("burst_guarantee_resources", &ig.burst_guarantee_resources),
    ] {
        if let Some(a) = amounts {
            a.check_nonnegative().map_err(|(r, v)| {
                err(
                    "integral_guarantees",
                    format!("{name}.{r} must be a non-negative number, got {v}"),
                )
            })?;
        }
    }
    if ig.guarantee_type == IntegralGuaranteeType::Relaxed && ig.burst_guarantee_resources.is_some()
    {
        return Err(err(
            "integral_guarantees",
            "a relaxed pool has no burst_guarantee_resources".into(),
        ));
    }
    if let Some(m) = ig.relaxed_share_multiplier_limit {
        if !m.is_finite() || m < 1.0 {
            return Err(err(
                "integral_guarantees",
                format!("relaxed_share_multiplier_limit must be at least 1, got {m}"),
            ));
        }
    }
    Ok(())
}

/// A pool's `ephemeral_subpool_config`: counts in order, limits non-negative.
fn validate_ephemeral(
    c: &EphemeralSubpoolConfig,
    err: &dyn Fn(&str, String) -> AttributeError,
) -> Result<(), AttributeError> {
    if let (Some(total), Some(running)) = (c.max_operation_count, c.max_running_operation_count) {
        if total < running {
            return Err(err(
                    "ephemeral_subpool_config",
                    format!("max_operation_count {total} is less than max_running_operation_count {running}"),
                ));
        }
    }
    if let Some(l) = &c.resource_limits {
        l.check_nonnegative().map_err(|(r, v)| {
            err(
                "ephemeral_subpool_config",
                format!("resource_limits.{r} must be a non-negative number, got {v}"),
            )
        })?;
    }
    Ok(())
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

pub use crate::names::ROOT_POOL;

/// A pool tree's configuration with every default filled in: what `@config` shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TreeConfig {
    pub nodes_filter: TagFilter,
    pub max_operation_count: u32,
    pub max_operation_count_per_pool: u32,
    pub max_running_operation_count: u32,
    pub max_running_operation_count_per_pool: u32,
    pub default_parent_pool: String,
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
            default_parent_pool: ROOT_POOL.to_string(),
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
        if self.default_parent_pool != ROOT_POOL {
            crate::spec::validate_pool_name(&self.default_parent_pool)
                .map_err(|m| err("default_parent_pool", m))?;
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

/// Resource amounts as a vector with `f64::INFINITY` for unset components: a limit.
pub fn limits_vector(amounts: Option<&ResourceAmounts>) -> ResourceVector {
    amounts
        .map(|a| a.to_vector(f64::INFINITY))
        .unwrap_or(ResourceVector::new(
            f64::INFINITY,
            f64::INFINITY,
            f64::INFINITY,
            f64::INFINITY,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pool_aliases_and_defaults() {
        let c = PoolConfig::from_attributes(
            "p",
            json!({"min_share_resources": {"cpu": 4}, "allow_normal_preemption": false}),
        )
        .unwrap();
        assert_eq!(
            c.strong_guarantee_resources.as_ref().unwrap().cpu,
            Some(4.0)
        );
        assert_eq!(c.allow_regular_preemption, Some(false));
        assert_eq!(c.weight(), 1.0);
        assert_eq!(c.mode(), PoolMode::FairShare);
        assert_eq!(c.fifo_sort_parameters(), &DEFAULT_FIFO_SORT_PARAMETERS);
    }

    #[test]
    fn pool_errors_name_the_attribute_and_pool() {
        let e = PoolConfig::from_attributes("p", json!({"weight": "heavy"})).unwrap_err();
        assert_eq!(e.attribute, "weight");
        assert!(e.to_string().contains("pool 'p'"), "{e}");
        let e = PoolConfig::from_attributes("p", json!({"wieght": 2})).unwrap_err();
        assert_eq!(e.attribute, "wieght");
        let e = PoolConfig::from_attributes("p", json!({"weight": -1})).unwrap_err();
        assert_eq!(e.attribute, "weight");
        let e = PoolConfig::from_attributes(
            "p",
            json!({"max_operation_count": 3, "max_running_operation_count": 5}),
        )
        .unwrap_err();
        assert_eq!(e.attribute, "max_operation_count");
        let e = PoolConfig::from_attributes("p", json!({"mode": "lifo"})).unwrap_err();
        assert_eq!(e.attribute, "mode");
        let e =
            PoolConfig::from_attributes("p", json!({"resource_limits": {"cpu": -2}})).unwrap_err();
        assert_eq!(e.attribute, "resource_limits");
    }

    #[test]
    fn tree_timeouts_have_sane_minimums() {
        for (attr, value) in [
            ("fair_share_update_period", 1),
            ("node_heartbeat_timeout", 10),
        ] {
            let e = TreeConfig::from_attributes("t", serde_json::json!({ attr: value }))
                .and_then(|c| c.validate("t").map(|_| c))
                .unwrap_err();
            assert_eq!(e.attribute, attr);
            assert!(e.message.contains("minimum"), "{e}");
        }
    }

    #[test]
    fn tree_defaults_aliases_and_durations() {
        let c = TreeConfig::from_attributes(
            "t",
            json!({"fair-share_preemption_timeout": "10s", "max_ephemeral_pools_per_user": 3,
                   "max_unpreemptable_running_job_count": 2}),
        )
        .unwrap();
        assert_eq!(c.fair_share_starvation_timeout, DurationMs(10_000));
        assert_eq!(c.max_ephemeral_pool_per_user, 3);
        assert_eq!(
            c.effective_non_preemptible_threshold().unwrap().user_slots,
            Some(2.0)
        );
        assert_eq!(c.max_running_operation_count_per_pool, 8);
        assert_eq!(c.fair_share_update_period, DurationMs(200));
        let e = TreeConfig::from_attributes("t", json!({"fair_share_starvation_tolerance": 2}))
            .unwrap_err();
        assert_eq!(e.attribute, "fair_share_starvation_tolerance");
        let e = TreeConfig::from_attributes(
            "t",
            json!({"fair_share_aggressive_starvation_timeout": "1s"}),
        )
        .unwrap_err();
        assert_eq!(e.attribute, "fair_share_aggressive_starvation_timeout");
    }
}
