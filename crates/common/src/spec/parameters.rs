//! What `update_operation_parameters` may change in a running or pending operation
//! (SPEC 5.14, YTsaurus `update_op_parameters`): where it runs and how it shares, never
//! what its jobs do. Each field given replaces the spec's; per-tree options are merged
//! field by field into the tree's existing ones.

use super::{ResourceAmounts, SpecError, TreeSchedulingOptions, VanillaSpec};
use crate::names::{PoolName, TreeName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationParameters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_limits: Option<ResourceAmounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduling_options_per_pool_tree: BTreeMap<TreeName, TreeSchedulingOptions>,
}

impl OperationParameters {
    /// The spec with these parameters in it, checked as a submitted spec is (so a bad
    /// weight or limit is refused naming its field, as at submission).
    pub fn apply_to(&self, spec: &VanillaSpec) -> Result<VanillaSpec, SpecError> {
        if self.is_empty() {
            return Err(SpecError::new(
                "parameters",
                "name at least one of pool, weight, resource_limits, owners, scheduling_options_per_pool_tree",
            ));
        }
        let mut new = spec.clone();
        if let Some(p) = &self.pool {
            new.pool = Some(p.clone());
        }
        if let Some(w) = self.weight {
            new.weight = Some(w);
        }
        if let Some(l) = &self.resource_limits {
            new.resource_limits = Some(l.clone());
        }
        if let Some(o) = &self.owners {
            new.owners = o.clone();
        }
        for (tree, given) in &self.scheduling_options_per_pool_tree {
            let options = new
                .scheduling_options_per_pool_tree
                .entry(tree.clone())
                .or_default();
            if let Some(p) = &given.pool {
                options.pool = Some(p.clone());
            }
            if let Some(w) = given.weight {
                options.weight = Some(w);
            }
            if let Some(l) = &given.resource_limits {
                options.resource_limits = Some(l.clone());
            }
        }
        new.validate()?;
        Ok(new)
    }

    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// One line for an operation's history: the fields given, in spec order.
    pub fn summary(&self) -> String {
        let mut parts = vec![];
        if let Some(p) = &self.pool {
            parts.push(format!("pool={p}"));
        }
        if let Some(w) = self.weight {
            parts.push(format!("weight={w}"));
        }
        if let Some(l) = &self.resource_limits {
            parts.push(format!("resource_limits={}", compact(l)));
        }
        if let Some(o) = &self.owners {
            parts.push(format!("owners=[{}]", o.join(",")));
        }
        for (tree, o) in &self.scheduling_options_per_pool_tree {
            parts.push(format!(
                "scheduling_options_per_pool_tree.{tree}={}",
                compact(o)
            ));
        }
        parts.join(" ")
    }
}

fn compact(v: &impl Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> VanillaSpec {
        serde_json::from_value(serde_json::json!({
            "pool": "a",
            "weight": 2.0,
            "scheduling_options_per_pool_tree": {"gpu": {"weight": 3.0}},
            "tasks": {"t": {"command": "true", "job_count": 1}}
        }))
        .unwrap()
    }

    #[test]
    fn given_fields_replace_and_tree_options_merge() {
        let p: OperationParameters = serde_json::from_value(serde_json::json!({
            "pool": "b",
            "resource_limits": {"cpu": 4},
            "scheduling_options_per_pool_tree": {"gpu": {"pool": "g"}}
        }))
        .unwrap();
        let new = p.apply_to(&spec()).unwrap();
        assert_eq!(new.pool.as_ref().unwrap().as_str(), "b");
        assert_eq!(new.weight, Some(2.0), "not given: kept");
        assert_eq!(new.resource_limits.unwrap().cpu, Some(4.0));
        let gpu = &new.scheduling_options_per_pool_tree[&TreeName::parse("gpu").unwrap()];
        assert_eq!(gpu.weight, Some(3.0), "merged, not replaced");
        assert_eq!(gpu.pool.as_ref().unwrap().as_str(), "g");
        assert_eq!(
            p.summary(),
            r#"pool=b resource_limits={"cpu":4.0} scheduling_options_per_pool_tree.gpu={"pool":"g"}"#
        );
    }

    #[test]
    fn bad_parameters_are_refused_naming_the_field() {
        let bad = |v: serde_json::Value| {
            let p: OperationParameters = serde_json::from_value(v).unwrap();
            p.apply_to(&spec()).unwrap_err().to_string()
        };
        assert!(bad(serde_json::json!({"weight": -1})).contains("weight"));
        assert!(bad(serde_json::json!({"weight": 0})).contains("weight"));
        assert!(bad(serde_json::json!({"resource_limits": {"cpu": -2}}))
            .contains("resource_limits.cpu"));
        assert!(bad(serde_json::json!({"owners": ["no spaces allowed"]})).contains("owners"));
        assert!(bad(serde_json::json!({})).contains("at least one"));
        let unknown = serde_json::from_value::<OperationParameters>(
            serde_json::json!({"command": "rm -rf /"}),
        )
        .unwrap_err()
        .to_string();
        assert!(unknown.contains("unknown field `command`"), "{unknown}");
        let bad_pool =
            serde_json::from_value::<OperationParameters>(serde_json::json!({"pool": "a b"}));
        assert!(bad_pool.is_err());
    }
}
