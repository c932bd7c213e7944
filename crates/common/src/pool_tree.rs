//! Pool trees as admins shape them: pools with parents and attributes, plus the rules
//! that need the whole tree (SPEC 4.2): unique names, FIFO pools without child pools,
//! children's guarantees within the parent's, and a `default_parent_pool` that exists.
//!
//! Every change is made on a copy and validated as a whole before it replaces the
//! original, so a rejected change leaves nothing half-applied.

use crate::maintenance::NodeMaintenance;
use crate::names::TreeName;
use crate::names::TreePoolName;
use crate::pool_config::{PoolConfig, PoolMode, TreeConfig, ROOT_POOL};
use crate::resources::{Resource, EPSILON};
use crate::spec::validate_pool_name;
use crate::tag_filter::validate_tag;
use crate::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A configuration change or lookup that cannot be done, with a message naming the pool,
/// attribute or path at fault: the API's one error type (`ApiError`), whose kind says
/// what went wrong the way every answer says it (a missing tree, pool or node is
/// `NotFound`, a bad value or path `InvalidArgument`).
pub type ConfigError = crate::api::ApiError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    /// `<Root>` or the name of another pool of the same tree.
    pub parent: TreePoolName,
    pub config: PoolConfig,
    /// Set for pools the scheduler created for an operation; they vanish with their
    /// last operation. Holds the user they were created for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_user: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolTree {
    pub config: TreeConfig,
    pub pools: BTreeMap<TreePoolName, Pool>,
}

/// Everything an admin configures: the trees and which one is the default. This is
/// what the store interface saves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterConfig {
    pub default_tree: Option<TreeName>,
    pub trees: BTreeMap<TreeName, PoolTree>,
    /// Tags admins set on nodes (`//sys/cluster_nodes/<node>/@user_tags`): configuration,
    /// kept across node restarts and saved with the trees.
    #[serde(default)]
    pub node_user_tags: BTreeMap<NodeId, Vec<String>>,
    /// Nodes an admin banned or decommissioned (SPEC 5.13); nodes in service are absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_maintenance: BTreeMap<NodeId, NodeMaintenance>,
}

pub const DEFAULT_TREE: &str = "default";

/// Pools one tree may hold (ephemeral ones included): the whole configuration is one
/// stored record, and every fair share update walks every pool.
pub const MAX_POOLS_PER_TREE: usize = 5_000;

impl Default for ClusterConfig {
    /// A fresh installation: one tree `default` with an empty filter (SPEC 4.1).
    fn default() -> Self {
        let mut trees = BTreeMap::new();
        let default = TreeName::parse(DEFAULT_TREE).expect("a valid name");
        trees.insert(default.clone(), PoolTree::new(TreeConfig::default()));
        Self {
            default_tree: Some(default),
            trees,
            node_user_tags: BTreeMap::new(),
            node_maintenance: BTreeMap::new(),
        }
    }
}

impl ClusterConfig {
    pub fn user_tags(&self, node: &NodeId) -> &[String] {
        self.node_user_tags.get(node).map_or(&[], Vec::as_slice)
    }

    pub fn maintenance(&self, node: &NodeId) -> NodeMaintenance {
        self.node_maintenance.get(node).copied().unwrap_or_default()
    }

    pub fn tree(&self, name: &str) -> Result<&PoolTree, ConfigError> {
        self.trees
            .get(name)
            .ok_or_else(|| ConfigError::not_found(format!("no such pool tree: '{name}'")))
    }

    /// A configured tree's name as the configuration holds it (already checked).
    pub fn tree_name(&self, name: &str) -> Result<&TreeName, ConfigError> {
        self.trees
            .get_key_value(name)
            .map(|(k, _)| k)
            .ok_or_else(|| ConfigError::not_found(format!("no such pool tree: '{name}'")))
    }

    pub fn tree_mut(&mut self, name: &str) -> Result<&mut PoolTree, ConfigError> {
        self.trees
            .get_mut(name)
            .ok_or_else(|| ConfigError::not_found(format!("no such pool tree: '{name}'")))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(d) = &self.default_tree {
            self.tree(d.as_str()).map_err(|_| {
                ConfigError::invalid(format!("default_tree names no pool tree: '{d}'"))
            })?;
        }
        for (name, tree) in &self.trees {
            tree.validate(name.as_str())?;
        }
        for (node, tags) in &self.node_user_tags {
            for t in tags {
                validate_tag(t)
                    .map_err(|m| ConfigError::invalid(format!("user_tags of node {node}: {m}")))?;
            }
        }
        Ok(())
    }
}

/// Pool tree names follow pool names' alphabet.
/// A tree name from outside (a config file, an admin call), parsed.
pub fn parse_tree_name(name: &str) -> Result<TreeName, ConfigError> {
    TreeName::parse(name).map_err(ConfigError::invalid)
}

impl PoolTree {
    pub fn new(config: TreeConfig) -> Self {
        Self {
            config,
            pools: BTreeMap::new(),
        }
    }

    pub fn pool(&self, name: &str) -> Result<&Pool, ConfigError> {
        self.pools
            .get(name)
            .ok_or_else(|| ConfigError::not_found(format!("no such pool: '{name}'")))
    }

    pub fn contains(&self, name: &str) -> bool {
        name == ROOT_POOL || self.pools.contains_key(name)
    }

    /// Child pools of `parent` in name order.
    pub fn children<'a>(&'a self, parent: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pools
            .iter()
            .filter(move |(_, p)| p.parent == parent)
            .map(|(n, _)| n.as_str())
    }

    /// `pool` and its ancestors up to (not including) the root, nearest first.
    pub fn ancestry<'a>(&'a self, pool: &'a TreePoolName) -> Vec<&'a TreePoolName> {
        let mut out = Vec::new();
        let mut cur = pool;
        while *cur != ROOT_POOL {
            out.push(cur);
            match self.pools.get(cur) {
                Some(p) => cur = &p.parent,
                None => break,
            }
            if out.len() > self.pools.len() {
                break;
            }
        }
        out
    }

    /// `pool`, its ancestors and the root, nearest first: every pool whose counts and
    /// limits an operation in `pool` is held to.
    pub fn lineage<'a>(&'a self, pool: &'a TreePoolName) -> Vec<&'a TreePoolName> {
        let mut out = self.ancestry(pool);
        out.push(TreePoolName::root_ref());
        out
    }

    /// The pool a path names: `["company", "development"]` must be company's child
    /// development. An empty path is the root.
    pub fn resolve_path(&self, segments: &[&str]) -> Result<TreePoolName, ConfigError> {
        let mut parent = TreePoolName::root();
        for seg in segments {
            let found = self
                .pools
                .get_key_value(*seg)
                .filter(|(_, p)| p.parent == parent);
            let Some((name, _)) = found else {
                let seg = crate::quote::quote(seg, crate::quote::QUOTE_CHARS);
                return Err(ConfigError::not_found(format!(
                    "no pool '{seg}' under '{parent}'"
                )));
            };
            parent = name.clone();
        }
        Ok(parent)
    }

    /// Path segments from the root to `pool`.
    pub fn path_of(&self, pool: &TreePoolName) -> Vec<String> {
        let mut v: Vec<String> = self
            .ancestry(pool)
            .into_iter()
            .map(|p| p.to_string())
            .collect();
        v.reverse();
        v
    }

    /// (max_operation_count, max_running_operation_count) of a pool with `config`: its
    /// own settings, else the tree's per-pool defaults.
    pub fn count_limits_of(&self, config: &PoolConfig) -> (u32, u32) {
        (
            config
                .max_operation_count
                .unwrap_or(self.config.max_operation_count_per_pool),
            config
                .max_running_operation_count
                .unwrap_or(self.config.max_running_operation_count_per_pool),
        )
    }

    /// Count limits of a pool of this tree; `<Root>` has the tree's own.
    pub fn count_limits(&self, pool: &str) -> (u32, u32) {
        if pool == ROOT_POOL {
            return (
                self.config.max_operation_count,
                self.config.max_running_operation_count,
            );
        }
        match self.pools.get(pool) {
            Some(p) => self.count_limits_of(&p.config),
            None => self.count_limits_of(&PoolConfig::default()),
        }
    }

    pub fn max_operation_count(&self, pool: &str) -> u32 {
        self.count_limits(pool).0
    }

    pub fn max_running_operation_count(&self, pool: &str) -> u32 {
        self.count_limits(pool).1
    }

    pub fn ephemeral_pools_of(&self, user: &str) -> usize {
        self.pools
            .values()
            .filter(|p| p.ephemeral_user.as_deref() == Some(user))
            .count()
    }

    /// Adds a pool after checking that the result is a valid tree.
    pub fn add_pool(
        &mut self,
        tree_name: &str,
        name: &str,
        parent: &str,
        config: PoolConfig,
        ephemeral_user: Option<String>,
    ) -> Result<(), ConfigError> {
        if name != ROOT_POOL && name.contains('$') && ephemeral_user.is_some() {
            // Ephemeral subpools are `<pool>$<user>`; both halves follow the alphabet.
            for part in name.split('$') {
                validate_pool_name(part).map_err(ConfigError::invalid)?;
            }
        } else {
            validate_pool_name(name).map_err(ConfigError::invalid)?;
        }
        if self.pools.contains_key(name) {
            return Err(ConfigError::invalid(format!(
                "pool '{name}' already exists in pool tree '{tree_name}'"
            )));
        }
        if self.pools.len() >= MAX_POOLS_PER_TREE {
            return Err(ConfigError::invalid(format!(
                "pool tree '{tree_name}' already has {} pools, the limit is {MAX_POOLS_PER_TREE}",
                self.pools.len()
            )));
        }
        if !self.contains(parent) {
            return Err(ConfigError::not_found(format!(
                "parent pool '{parent}' does not exist in pool tree '{tree_name}'"
            )));
        }
        config.validate(name)?;
        let mut next = self.clone();
        // Both names were checked above (the parent exists in the tree).
        let (name, parent) = (
            TreePoolName::parse(name).map_err(ConfigError::invalid)?,
            TreePoolName::parse(parent).map_err(ConfigError::invalid)?,
        );
        next.pools.insert(
            name,
            Pool {
                parent,
                config,
                ephemeral_user,
            },
        );
        next.validate(tree_name)?;
        *self = next;
        Ok(())
    }

    /// Replaces a pool's attributes after checking the whole tree.
    pub fn set_pool_config(
        &mut self,
        tree_name: &str,
        name: &str,
        config: PoolConfig,
    ) -> Result<(), ConfigError> {
        self.pool(name)?;
        config.validate(name)?;
        let mut next = self.clone();
        next.pools.get_mut(name).expect("checked").config = config;
        next.validate(tree_name)?;
        *self = next;
        Ok(())
    }

    pub fn remove_pool(&mut self, name: &str) -> Result<Pool, ConfigError> {
        self.pool(name)?;
        if let Some(child) = self.children(name).next() {
            return Err(ConfigError::invalid(format!(
                "pool '{name}' has child pool '{child}'; remove the children first"
            )));
        }
        Ok(self.pools.remove(name).expect("checked"))
    }

    /// Whole-tree rules; `tree_name` only feeds messages.
    pub fn validate(&self, tree_name: &str) -> Result<(), ConfigError> {
        self.config.validate(tree_name)?;
        let d = &self.config.default_parent_pool;
        if !self.contains(d.as_str()) {
            return Err(ConfigError::invalid(format!(
                "pool tree '{tree_name}': attribute 'default_parent_pool': pool '{d}' does not exist"
            )));
        }
        if let Some(p) = self.pools.get(d.as_str()) {
            if p.config.mode() == PoolMode::Fifo {
                return Err(ConfigError::invalid(format!(
                    "pool tree '{tree_name}': attribute 'default_parent_pool': pool '{d}' is a FIFO pool and cannot hold ephemeral pools"
                )));
            }
        }
        for (name, pool) in &self.pools {
            if !self.contains(&pool.parent) {
                return Err(ConfigError::invalid(format!(
                    "pool '{name}': parent '{}' does not exist",
                    pool.parent
                )));
            }
            if self.ancestry(name).len() > self.pools.len() {
                return Err(ConfigError::invalid(format!(
                    "pool '{name}' is its own ancestor"
                )));
            }
            let (total, running) = self.count_limits_of(&pool.config);
            if total < running {
                return Err(ConfigError::invalid(format!(
                    "pool '{name}': attribute 'max_operation_count': {total} is less than max_running_operation_count = {running}"
                )));
            }
            if pool.config.mode() == PoolMode::Fifo {
                if let Some(child) = self.children(name).next() {
                    return Err(ConfigError::invalid(format!(
                        "pool '{name}': a FIFO pool cannot have child pools (it has '{child}')"
                    )));
                }
                if pool.config.create_ephemeral_subpools == Some(true) {
                    return Err(ConfigError::invalid(format!(
                        "pool '{name}': a FIFO pool cannot create ephemeral subpools"
                    )));
                }
            }
        }
        self.check_guarantee_sums()
    }

    /// Below the root, children's explicit guarantees may not exceed the parent's on any
    /// resource the parent specifies. (Children of the root are checked against nothing:
    /// nodes come and go, so an overcommit there is scaled and reported as an alert.)
    fn check_guarantee_sums(&self) -> Result<(), ConfigError> {
        for (parent, pool) in &self.pools {
            let Some(limit) = &pool.config.strong_guarantee_resources else {
                // A parent without guarantees: children may not have any either.
                if let Some(child) = self
                    .children(parent)
                    .find(|c| has_guarantee(&self.pools[*c].config))
                {
                    return Err(ConfigError::invalid(format!(
                        "pool '{child}': attribute 'strong_guarantee_resources': its parent '{parent}' has no strong guarantee to share"
                    )));
                }
                continue;
            };
            let specified = limit.specified();
            let limit_v = limit.to_vector(0.0);
            for (i, r) in Resource::ALL.into_iter().enumerate() {
                if !specified[i] {
                    continue;
                }
                let sum: f64 = self
                    .children(parent)
                    .filter_map(|c| self.pools[c].config.strong_guarantee_resources.as_ref())
                    .map(|g| g.to_vector(0.0).get(r))
                    .sum();
                if sum > limit_v.get(r) + EPSILON * limit_v.get(r).max(1.0) {
                    return Err(ConfigError::invalid(format!(
                        "pool '{parent}': children's strong_guarantee_resources sum to {r} = {} which exceeds the pool's own {r} = {}",
                        fmt_amount(r, sum),
                        fmt_amount(r, limit_v.get(r))
                    )));
                }
            }
        }
        Ok(())
    }
}

fn has_guarantee(c: &PoolConfig) -> bool {
    c.strong_guarantee_resources
        .as_ref()
        .is_some_and(|g| g.specified().iter().any(|s| *s) && g.to_vector(0.0) != Default::default())
}

fn fmt_amount(r: Resource, v: f64) -> String {
    match r {
        Resource::Memory => crate::ByteSize(v.round() as u64).to_string(),
        _ => format!("{v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: serde_json::Value) -> PoolConfig {
        PoolConfig::from_attributes("x", v).unwrap()
    }

    #[test]
    fn structural_rules() {
        let mut t = PoolTree::new(TreeConfig::default());
        t.add_pool(
            "default",
            "company",
            ROOT_POOL,
            cfg(json!({"strong_guarantee_resources": {"cpu": 24}})),
            None,
        )
        .unwrap();
        t.add_pool(
            "default",
            "dev",
            "company",
            cfg(json!({"strong_guarantee_resources": {"cpu": 20}})),
            None,
        )
        .unwrap();
        let before = t.clone();
        let e = t
            .add_pool(
                "default",
                "ana",
                "company",
                cfg(json!({"strong_guarantee_resources": {"cpu": 5}})),
                None,
            )
            .unwrap_err();
        assert!(
            e.message.contains("company") && e.message.contains("cpu = 25"),
            "{e}"
        );
        assert_eq!(t, before, "nothing half-applied");
        let e = t
            .add_pool("default", "dev", ROOT_POOL, PoolConfig::default(), None)
            .unwrap_err();
        assert!(e.message.contains("already exists"), "{e}");
        t.add_pool(
            "default",
            "q",
            ROOT_POOL,
            cfg(json!({"mode": "fifo"})),
            None,
        )
        .unwrap();
        let e = t
            .add_pool("default", "sub", "q", PoolConfig::default(), None)
            .unwrap_err();
        assert!(e.message.contains("FIFO"), "{e}");
        let e = t
            .add_pool(
                "default",
                "n",
                ROOT_POOL,
                cfg(json!({"max_running_operation_count": 60})),
                None,
            )
            .unwrap_err();
        assert!(e.message.contains("max_operation_count"), "{e}");
        assert_eq!(t.resolve_path(&["company", "dev"]).unwrap(), "dev");
        assert!(t.resolve_path(&["dev"]).is_err());
        assert_eq!(
            t.path_of(&TreePoolName::parse("dev").unwrap()),
            vec!["company", "dev"]
        );
        assert!(t.remove_pool("company").is_err());
        let e = t
            .add_pool(
                "default",
                "g",
                "q",
                cfg(json!({"strong_guarantee_resources": {"cpu": 1}})),
                None,
            )
            .unwrap_err();
        assert!(
            e.message.contains("FIFO pool cannot have child pools"),
            "{e}"
        );
    }
}
