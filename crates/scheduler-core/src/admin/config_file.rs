//! Trees and pools written as nested maps, as in `ytsched simulate` scenarios and the
//! scheduler's `--config FILE`:
//!
//! ```yaml
//! default_tree: default
//! pool_trees:
//!   default:
//!     config: {fair_share_starvation_timeout: 30s}
//!     pools:
//!       company:
//!         strong_guarantee_resources: {cpu: 24}
//!         pools:
//!           development: {weight: 2}
//! ```
//! Pools are created parents first through the same validation as `create scheduler_pool`.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use ytsched_common::names::PoolName;
use ytsched_common::pool_config::{PoolConfig, TreeConfig, ROOT_POOL};
use ytsched_common::pool_tree::{parse_tree_name, ClusterConfig, ConfigError, PoolTree};
use ytsched_common::NodeId;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeSection {
    #[serde(default)]
    pub config: Value,
    #[serde(default)]
    pub pools: Value,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub default_tree: Option<String>,
    #[serde(default)]
    pub pool_trees: BTreeMap<String, TreeSection>,
    /// Admin-set tags by node id (`//sys/cluster_nodes/<node>/@user_tags`).
    #[serde(default)]
    pub node_user_tags: BTreeMap<NodeId, Vec<String>>,
}

impl ConfigFile {
    /// The configuration these sections describe. With no trees at all it is a fresh
    /// installation's (`default` with an empty filter).
    pub fn build(&self) -> Result<ClusterConfig, ConfigError> {
        if self.pool_trees.is_empty() {
            let mut c = ClusterConfig::default();
            if let Some(d) = &self.default_tree {
                c.tree(d)?;
                c.default_tree = Some(parse_tree_name(d)?);
            }
            c.node_user_tags = self.node_user_tags.clone();
            c.validate()?;
            return Ok(c);
        }
        let mut trees = BTreeMap::new();
        for (name, section) in &self.pool_trees {
            let tree_name = parse_tree_name(name)?;
            let config = TreeConfig::from_attributes(name, section.config.clone())?;
            // Pools go in with the default parent pool relaxed, as that pool may come later.
            let mut tree = PoolTree::new(TreeConfig {
                default_parent_pool: PoolName::root(),
                ..config.clone()
            });
            add_pools(&mut tree, name, ROOT_POOL, &section.pools)?;
            tree.config = config;
            tree.validate(name)?;
            trees.insert(tree_name, tree);
        }
        let default_tree = match &self.default_tree {
            Some(d) => Some(parse_tree_name(d)?),
            None if trees.contains_key(crate::DEFAULT_TREE) => {
                Some(parse_tree_name(crate::DEFAULT_TREE)?)
            }
            None if trees.len() == 1 => trees.keys().next().cloned(),
            None => None,
        };
        let c = ClusterConfig {
            default_tree,
            trees,
            node_user_tags: self.node_user_tags.clone(),
            node_maintenance: Default::default(),
        };
        c.validate()?;
        Ok(c)
    }
}

fn add_pools(
    tree: &mut PoolTree,
    tree_name: &str,
    parent: &str,
    pools: &Value,
) -> Result<(), ConfigError> {
    let map = match pools {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(ConfigError::invalid(format!(
                "pool tree '{tree_name}': pools under '{parent}' must be a map of pool names, got {other}"
            )))
        }
    };
    for (name, body) in map {
        let mut attrs = match body {
            Value::Null => serde_json::Map::new(),
            Value::Object(m) => m.clone(),
            other => {
                return Err(ConfigError::invalid(format!(
                    "pool '{name}': expected a map of attributes, got {other}"
                )))
            }
        };
        let children = attrs.remove("pools").unwrap_or(Value::Null);
        let config = PoolConfig::from_attributes(name, Value::Object(attrs))?;
        // Parents go in before children, so each child's guarantee is checked against
        // its parent's as it is added.
        tree.add_pool(tree_name, name, parent, config, None)?;
        add_pools(tree, tree_name, name, &children)?;
    }
    Ok(())
}
