//! A pool as admin paths see it: found by its path, its attributes read with their
//! effective defaults, an edit of them applied to the configuration. Kept on the
//! configuration, which owns the pools.

use crate::admin::values::*;
use crate::nodes::membership::refuse_overlaps;
use crate::ConfigError;
use crate::Node;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use ytsched_common::names::TreePoolName;
use ytsched_common::pool_config::TreeConfig;
use ytsched_common::pool_config::{PoolConfig, DEFAULT_FIFO_SORT_PARAMETERS, ROOT_POOL};
use ytsched_common::pool_tree::ClusterConfig;
use ytsched_common::NodeId;

/// Pools found by path and their attributes read and edited, as Cypress paths name them.
pub(crate) trait PoolAttributes {
    fn resolve_pool(&self, tree: &str, pool_path: &[String]) -> Result<TreePoolName, ConfigError>;
    fn attribute_pool(&self, tree: &str, pool_path: &[String])
        -> Result<TreePoolName, ConfigError>;
    fn pool_attributes(&self, tree: &str, pool: &str) -> Result<Map<String, Value>, ConfigError>;
    fn edit_pool(&mut self, tree: &str, pool: &str, edit: AttributeEdit)
        -> Result<(), ConfigError>;
}

impl PoolAttributes for ClusterConfig {
    fn resolve_pool(&self, tree: &str, pool_path: &[String]) -> Result<TreePoolName, ConfigError> {
        let t = self.tree(tree)?;
        let segs: Vec<&str> = pool_path.iter().map(String::as_str).collect();
        t.resolve_path(&segs)
            .map_err(|e| e.at(&format!("pool tree '{tree}'")))
    }

    /// The pool a `.../@attr` path is about; the root has no attributes of its own.
    fn attribute_pool(
        &self,
        tree: &str,
        pool_path: &[String],
    ) -> Result<TreePoolName, ConfigError> {
        let pool = self.resolve_pool(tree, pool_path)?;
        if pool == ROOT_POOL {
            return Err(ConfigError::invalid(
                "the root pool's settings are the tree's @config",
            ));
        }
        Ok(pool)
    }

    /// A pool's attributes: what was specified, plus the effective value of attributes
    /// with a default, so `get @weight` answers 1 rather than "not set".
    fn pool_attributes(&self, tree: &str, pool: &str) -> Result<Map<String, Value>, ConfigError> {
        let t = self.tree(tree)?;
        let p = t.pool(pool)?;
        let mut m = Map::new();
        m.insert("weight".into(), json!(p.config.weight()));
        m.insert("mode".into(), json!(p.config.mode()));
        m.insert("max_share_ratio".into(), json!(p.config.max_share_ratio()));
        m.insert(
            "fifo_sort_parameters".into(),
            json!(p
                .config
                .fifo_sort_parameters
                .clone()
                .unwrap_or(DEFAULT_FIFO_SORT_PARAMETERS.to_vec())),
        );
        m.insert(
            "max_operation_count".into(),
            json!(t.max_operation_count(pool)),
        );
        m.insert(
            "max_running_operation_count".into(),
            json!(t.max_running_operation_count(pool)),
        );
        for flag in [
            "forbid_immediate_operations",
            "create_ephemeral_subpools",
            "enable_lightweight_operations",
        ] {
            m.insert(flag.into(), json!(false));
        }
        for flag in ["allow_regular_preemption", "allow_aggressive_preemption"] {
            m.insert(flag.into(), json!(true));
        }
        m.extend(p.config.to_attributes());
        let [is_ephemeral, parent_name] = READ_ONLY_POOL_ATTRIBUTES;
        m.insert(is_ephemeral.into(), json!(p.ephemeral_user.is_some()));
        m.insert(parent_name.into(), json!(p.parent));
        Ok(m)
    }

    /// Applies an edit to a pool's specified attributes; the result is checked as a
    /// whole tree before it replaces the old one.
    fn edit_pool(
        &mut self,
        tree: &str,
        pool: &str,
        edit: AttributeEdit,
    ) -> Result<(), ConfigError> {
        let t = self.tree_mut(tree)?;
        let attrs = edit.apply(Value::Object(t.pool(pool)?.config.to_attributes()))?;
        let config = PoolConfig::from_attributes(pool, attrs)?;
        t.set_pool_config(tree, pool, config)
    }
}

/// Edits a tree's own attributes (`//sys/pool_trees/<tree>/@...`) on a copy: valid as a
/// whole, and a new `nodes_filter` must not put current nodes in several trees.
pub(crate) fn edit_tree_config(
    cluster: &mut ClusterConfig,
    nodes: &BTreeMap<NodeId, Node>,
    tree: &str,
    edit: AttributeEdit,
) -> Result<(), ConfigError> {
    let t = cluster.tree_mut(tree)?;
    let attrs = edit.apply(Value::Object(t.config.to_attributes()))?;
    let mut next = t.clone();
    next.config = TreeConfig::from_attributes(tree, attrs)?;
    next.validate(tree)?;
    if next.config.nodes_filter != t.config.nodes_filter {
        let name = cluster.tree_name(tree)?.clone();
        refuse_overlaps(nodes, cluster, &name, &next)?;
    }
    *cluster.tree_mut(tree)? = next;
    Ok(())
}
