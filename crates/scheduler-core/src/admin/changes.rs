//! Admin verbs on YTsaurus paths (SPEC 6.1): get, set, list, remove, exists, and create
//! for pools and pool trees. Changes are validated on a copy and take effect at the next
//! fair share update (which runs before the next placement).

use crate::admin::nodes::NodeSettings;
use crate::admin::pool_attributes::edit_tree_config;
use crate::admin::pool_attributes::PoolAttributes;
use crate::admin::values::*;
use crate::admin::what_if::ShareKey;
use crate::admin::what_if::UNCHANGED;
use crate::nodes::membership::refuse_overlaps;
use crate::queries::reads::CoreReads;
use crate::trees::share_updater::share_updater;
use crate::{AdminPath, ConfigError, SchedulerCore};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use ytsched_common::api::ApiError;
use ytsched_common::api::ShareChange;
use ytsched_common::api::WhatIf;
use ytsched_common::maintenance::MaintenanceFlag;
use ytsched_common::pool_config::{
    canonical_pool_attribute, canonical_tree_attribute, PoolConfig, TreeConfig, ROOT_POOL,
};
use ytsched_common::pool_tree::{parse_tree_name, PoolTree};
use ytsched_common::protocol::UnixMillis;
use ytsched_common::NodeId;

/// The pool hierarchy below `parent` as nested maps of names (Cypress `get` of a pool).
fn pool_map(tree: &PoolTree, parent: &str) -> Value {
    Value::Object(
        tree.children(parent)
            .map(|c| (c.to_string(), pool_map(tree, c)))
            .collect(),
    )
}

impl SchedulerCore {
    #[tracing::instrument(level = "info", skip_all, fields(path = path))]
    pub fn admin_set(&mut self, path: &str, value: Value) -> Result<(), ConfigError> {
        let target = AdminPath::parse(path)?;
        let here = |e: ConfigError| e.at(path);
        match target {
            AdminPath::DefaultTree => {
                let tree = match value {
                    Value::Null => None,
                    Value::String(s) => {
                        Some(self.cluster.tree_name(&s).map_err(here)?.clone())
                    }
                    other => {
                        return Err(here(ConfigError::invalid(format!(
                            "expected a pool tree name, got {other}"
                        ))))
                    }
                };
                self.cluster.default_tree = tree;
            }
            AdminPath::PoolAttribute {
                tree,
                pool_path,
                attribute,
                sub,
            } => {
                let pool = self.cluster.attribute_pool(&tree, &pool_path).map_err(here)?;
                let target = attribute.map(|a| attribute_path(canonical_pool_attribute(&a), sub));
                let mut value = value;
                if target.is_none() {
                    // What `get @` shows but nobody sets: a map from `get @` goes back in.
                    if let Some(m) = value.as_object_mut() {
                        for key in READ_ONLY_POOL_ATTRIBUTES {
                            m.remove(key);
                        }
                    }
                }
                self.cluster.edit_pool(&tree, &pool, AttributeEdit::Set(target, value))
                    .map_err(here)?;
            }
            AdminPath::TreeConfig {
                tree,
                attribute,
                sub,
            } => {
                let target = attribute.map(|a| attribute_path(canonical_tree_attribute(&a), sub));
                edit_tree_config(&mut self.cluster, &self.nodes, &tree, AttributeEdit::Set(target, value))
                    .map_err(here)?;
            }
            AdminPath::Pool { .. } | AdminPath::PoolTrees => {
                return Err(here(ConfigError::invalid(
                    "pools and pool trees are made with `create scheduler_pool` / `create scheduler_pool_tree`; set their attributes with .../@<attr>",
                )))
            }
            AdminPath::Node {
                node,
                attribute: Some(a),
                sub,
            } if a == "user_tags" && sub.is_empty() => {
                self.cluster.set_user_tags(&self.nodes, &node, value).map_err(here)?;
            }
            AdminPath::Node {
                node,
                attribute: Some(a),
                sub,
            } if sub.is_empty() && MaintenanceFlag::parse(&a).is_some() => {
                self.cluster.set_maintenance(&self.nodes, &node, &a, value).map_err(here)?;
            }
            AdminPath::ClusterNodes | AdminPath::Node { .. } => {
                return Err(here(ConfigError::invalid(
                    "of a node's attributes only @user_tags, @banned, @decommissioned and @disable_scheduler_jobs can be set",
                )))
            }
            AdminPath::Orchid(_) => {
                return Err(here(ConfigError::invalid("the orchid is read-only")))
            }
        }
        self.on_config_changed();
        Ok(())
    }

    #[tracing::instrument(level = "info", skip_all, fields(path = path))]
    pub fn admin_remove(&mut self, path: &str) -> Result<(), ConfigError> {
        let target = AdminPath::parse(path)?;
        let here = |e: ConfigError| e.at(path);
        match target {
            AdminPath::Pool { tree, pool_path } if pool_path.is_empty() => {
                self.cluster.tree(&tree).map_err(here)?;
                if self.cluster.default_tree.as_ref().map(|d| d.as_str()) == Some(tree.as_str()) {
                    return Err(here(ConfigError::invalid(format!(
                        "pool tree '{tree}' is the default tree; set //sys/pool_trees/@default_tree first"
                    ))));
                }
                let busy = self.operations.unfinished_in(&tree, None);
                if busy > 0 {
                    return Err(here(ConfigError::invalid(format!(
                        "pool tree '{tree}' has {busy} unfinished operation(s)"
                    ))));
                }
                self.cluster.trees.remove(tree.as_str());
            }
            AdminPath::Pool { tree, pool_path } => {
                let pool = self.cluster.resolve_pool(&tree, &pool_path).map_err(here)?;
                let busy = self.operations.unfinished_in(&tree, Some(&pool));
                if busy > 0 {
                    return Err(here(ConfigError::invalid(format!(
                        "pool '{pool}' has {busy} unfinished operation(s)"
                    ))));
                }
                self.cluster
                    .tree_mut(&tree)?
                    .remove_pool(&pool)
                    .map_err(here)?;
            }
            AdminPath::PoolAttribute {
                tree,
                pool_path,
                attribute: Some(a),
                sub,
            } => {
                let pool = self.cluster.attribute_pool(&tree, &pool_path).map_err(here)?;
                let edit = AttributeEdit::Remove(attribute_path(canonical_pool_attribute(&a), sub));
                self.cluster.edit_pool(&tree, &pool, edit).map_err(here)?;
            }
            AdminPath::TreeConfig {
                tree,
                attribute: Some(a),
                sub,
            } => {
                let edit = AttributeEdit::Remove(attribute_path(canonical_tree_attribute(&a), sub));
                edit_tree_config(&mut self.cluster, &self.nodes, &tree, edit).map_err(here)?;
            }
            AdminPath::Node {
                node,
                attribute: Some(a),
                sub,
            } if a == "user_tags" && sub.is_empty() => {
                self.cluster.set_user_tags(&self.nodes, &node, Value::Null).map_err(here)?;
            }
            AdminPath::Node {
                node,
                attribute: Some(a),
                sub,
            } if sub.is_empty() && MaintenanceFlag::parse(&a).is_some() => {
                self.cluster.set_maintenance(&self.nodes, &node, &a, Value::Null).map_err(here)?;
            }
            _ => {
                return Err(here(ConfigError::invalid(
                    "only pools, pool trees, their attributes and node @user_tags, @banned, @decommissioned, @disable_scheduler_jobs can be removed",
                )))
            }
        }
        self.on_config_changed();
        Ok(())
    }

    /// `create scheduler_pool`: a pool under `parent` (the root when `None`).
    #[tracing::instrument(level = "info", skip_all, fields(tree = tree, pool = name))]
    pub fn create_pool(
        &mut self,
        tree: &str,
        name: &str,
        parent: Option<&str>,
        attributes: Value,
    ) -> Result<(), ConfigError> {
        let config = PoolConfig::from_attributes(name, attributes)?;
        let t = self.cluster.tree_mut(tree)?;
        t.add_pool(tree, name, parent.unwrap_or(ROOT_POOL), config, None)?;
        self.on_config_changed();
        Ok(())
    }

    /// `create scheduler_pool_tree`: attributes are the tree's config, either directly
    /// or under a `config` key as YTsaurus writes them.
    #[tracing::instrument(level = "info", skip_all, fields(tree = name))]
    pub fn create_pool_tree(&mut self, name: &str, attributes: Value) -> Result<(), ConfigError> {
        let tree_name = parse_tree_name(name)?;
        if self.cluster.trees.contains_key(name) {
            return Err(ConfigError::invalid(format!(
                "pool tree '{name}' already exists"
            )));
        }
        let config_value = match attributes {
            Value::Object(mut m) if m.contains_key("config") => {
                let c = m.remove("config").unwrap_or(Value::Null);
                if let Some(k) = m.keys().next() {
                    return Err(ConfigError::invalid(format!(
                        "pool tree '{name}': unknown attribute '{k}' next to 'config'"
                    )));
                }
                c
            }
            other => other,
        };
        let config = TreeConfig::from_attributes(name, config_value)?;
        let tree = PoolTree::new(config);
        tree.validate(name)?;
        refuse_overlaps(&self.nodes, &self.cluster, &tree_name, &tree)?;
        self.cluster.trees.insert(tree_name.clone(), tree);
        if self.cluster.default_tree.is_none() {
            self.cluster.default_tree = Some(tree_name);
        }
        self.on_config_changed();
        Ok(())
    }

    /// `ytsched node approve` (admins): routed to what owns the nodes' bounds
    /// (`nodes/trust.rs`), with what the node reported last.
    pub fn approve_node(
        &mut self,
        node: &NodeId,
        max: Option<ytsched_common::ResourceVector>,
    ) -> Result<ytsched_common::ResourceVector, ytsched_common::api::ApiError> {
        let reported = self.nodes.get(node).map(|n| n.reported_limits);
        self.trust.approve(node, reported, max)
    }

    /// Every fair share `change` would move, as of `now`.
    pub fn what_if(
        &self,
        now: UnixMillis,
        change: impl FnOnce(&mut SchedulerCore) -> Result<(), ApiError>,
    ) -> Result<WhatIf, ApiError> {
        let mut after = self.clone();
        change(&mut after)?;
        let mut before = self.clone();
        let before = before.fair_share_ratios(now);
        let after = after.fair_share_ratios(now);
        let mut keys: Vec<&ShareKey> = before.keys().chain(after.keys()).collect();
        keys.sort();
        keys.dedup();
        let changes = keys
            .into_iter()
            .filter_map(|key| {
                let (b, a) = (before.get(key).copied(), after.get(key).copied());
                let moved = match (b, a) {
                    (Some(b), Some(a)) => (a - b).abs() > UNCHANGED,
                    _ => true,
                };
                moved.then(|| ShareChange {
                    tree: key.0.clone(),
                    kind: key.1.to_string(),
                    name: key.2.clone(),
                    before: b,
                    after: a,
                })
            })
            .collect();
        Ok(WhatIf { changes })
    }

    /// Recomputes every tree now and reads the `fair_share_ratio` of each pool and
    /// operation as the orchid shows it (the numbers an admin compares with).
    pub fn fair_share_ratios(&mut self, now: UnixMillis) -> BTreeMap<ShareKey, f64> {
        self.latest_now.observe(now);
        for tree in self.trees.names() {
            share_updater!(self).update_tree(tree.as_str(), now);
        }
        let mut out = BTreeMap::new();
        for tree in self.trees.names() {
            let Some(facts) = self.reads().tree_facts(tree.as_str()) else {
                continue;
            };
            for (kind, name, ratio) in facts.fair_share_ratios() {
                out.insert((tree.to_string(), kind, name), ratio);
            }
        }
        out
    }
}

impl<'a> CoreReads<'a> {
    pub fn admin_get(&self, path: &str) -> Result<Value, ConfigError> {
        let target = AdminPath::parse(path)?;
        let here = |e: ConfigError| e.at(path);
        match target {
            AdminPath::PoolTrees => Ok(Value::Object(
                self.cluster
                    .trees
                    .iter()
                    .map(|(n, t)| (n.to_string(), pool_map(t, ROOT_POOL)))
                    .collect(),
            )),
            AdminPath::DefaultTree => Ok(json!(self.cluster.default_tree)),
            AdminPath::Pool { tree, pool_path } => {
                let pool = self.cluster.resolve_pool(&tree, &pool_path).map_err(here)?;
                Ok(pool_map(self.cluster.tree(&tree)?, &pool))
            }
            AdminPath::PoolAttribute {
                tree,
                pool_path,
                attribute,
                sub,
            } => {
                let pool = self
                    .cluster
                    .attribute_pool(&tree, &pool_path)
                    .map_err(here)?;
                let attrs = Value::Object(self.cluster.pool_attributes(&tree, &pool)?);
                let attribute = attribute.map(|a| canonical_pool_attribute(&a).to_string());
                select(attrs, attribute, &sub, &format!("pool '{pool}'"), path)
            }
            AdminPath::TreeConfig {
                tree,
                attribute,
                sub,
            } => {
                let t = self.cluster.tree(&tree).map_err(here)?;
                let config = Value::Object(t.config.to_attributes());
                let attribute = attribute.map(|a| canonical_tree_attribute(&a).to_string());
                select(
                    config,
                    attribute,
                    &sub,
                    &format!("pool tree '{tree}'"),
                    path,
                )
            }
            AdminPath::ClusterNodes => Ok(Value::Object(
                self.nodes
                    .keys()
                    .map(|n| (n.to_string(), json!({})))
                    .collect(),
            )),
            AdminPath::Node {
                node,
                attribute,
                sub,
            } => {
                let attrs = self
                    .cluster
                    .node_attributes(self.nodes, &node)
                    .map_err(here)?;
                match attribute {
                    None if sub.is_empty() => Ok(json!({})),
                    None => Err(here(ConfigError::invalid("nothing may follow '@'"))),
                    a => select(attrs, a, &sub, &format!("node '{node}'"), path),
                }
            }
            AdminPath::Orchid(sub) => self.orchid_get(&sub, path),
        }
    }

    /// Builds only the part of the orchid a path reaches into: one tree for a tree's
    /// or an operation's fields, everything only for the orchid's top.
    fn orchid_get(&self, sub: &[String], path: &str) -> Result<Value, ConfigError> {
        let missing = || ConfigError::not_found(format!("{path}: no such orchid node"));
        let parts: Vec<&str> = sub.iter().map(String::as_str).collect();
        match parts.as_slice() {
            ["scheduler", "pool_trees", tree, ..] => {
                let orchid = self.tree_orchid(tree).ok_or_else(missing)?;
                navigate(&orchid, &sub[3..], path).cloned()
            }
            ["scheduler", "operations", op, ..] => {
                let id = ytsched_common::OperationId((*op).into());
                let tree = self
                    .operations
                    .get(&id)
                    .map(|o| o.main_tree().to_string())
                    .ok_or_else(missing)?;
                let operation = self.operation_orchid(&tree, &id).ok_or_else(missing)?;
                navigate(&operation, &sub[3..], path).cloned()
            }
            _ => navigate(&self.orchid(), sub, path).cloned(),
        }
    }

    pub fn admin_list(&self, path: &str) -> Result<Vec<String>, ConfigError> {
        match self.admin_get(path)? {
            Value::Object(m) => Ok(m.keys().cloned().collect()),
            other => Err(ConfigError::invalid(format!(
                "{path}: cannot list a {} value",
                match other {
                    Value::Array(_) => "list",
                    Value::String(_) => "string",
                    Value::Number(_) => "number",
                    Value::Bool(_) => "boolean",
                    _ => "null",
                }
            ))),
        }
    }

    /// True if the path names something; a malformed path is an error, not `false`.
    pub fn admin_exists(&self, path: &str) -> Result<bool, ConfigError> {
        AdminPath::parse(path)?;
        Ok(self.admin_get(path).is_ok())
    }
}
