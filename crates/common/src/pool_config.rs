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

pub use crate::config_attributes::AttributeError;
use crate::config_attributes::{canonical, from_attributes};
/// A tree's own attributes live in `tree_config.rs`; they are named from here too.
pub use crate::tree_config::{
    canonical_tree_attribute, TreeConfig, TreeIntegralGuarantees, MIN_FAIR_SHARE_UPDATE_PERIOD_MS,
    MIN_NODE_HEARTBEAT_TIMEOUT_MS,
};

pub use crate::names::ROOT_POOL;

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

/// The canonical name of a pool attribute (aliases resolved).
pub fn canonical_pool_attribute(name: &str) -> &str {
    canonical(POOL_ALIASES, name)
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
            crate::weight::check(w).map_err(|m| err("weight", m))?;
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
