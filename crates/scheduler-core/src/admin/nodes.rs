//! Admin changes to nodes (`//sys/cluster_nodes/<node>/@…`): user tags and the
//! maintenance flags (banned, decommissioned, disable_scheduler_jobs).

use crate::{ClusterConfig, ConfigError, Node};
use serde_json::Value;
use std::collections::BTreeMap;
use ytsched_common::maintenance::MaintenanceFlag;
use ytsched_common::tag_filter::validate_tag;
use ytsched_common::NodeId;

/// The nodes the core holds.
type Nodes = BTreeMap<NodeId, Node>;

/// Admin edits of the nodes' attributes the configuration keeps.
pub(crate) trait NodeSettings {
    fn set_user_tags(&mut self, nodes: &Nodes, node: &str, value: Value)
        -> Result<(), ConfigError>;
    fn set_maintenance(
        &mut self,
        nodes: &Nodes,
        node: &str,
        attribute: &str,
        value: Value,
    ) -> Result<(), ConfigError>;
    fn node_attributes(&self, nodes: &Nodes, node: &str) -> Result<Value, ConfigError>;
}

impl NodeSettings for ClusterConfig {
    /// `set //sys/cluster_nodes/<node>/@user_tags`: a list of tags, or null to clear.
    fn set_user_tags(
        &mut self,
        nodes: &Nodes,
        node: &str,
        value: Value,
    ) -> Result<(), ConfigError> {
        let id = known_node(nodes, node)?;
        let tags: Vec<String> = match value {
            Value::Null => vec![],
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => validate_tag(&s).map(|_| s).map_err(ConfigError::invalid),
                    other => Err(ConfigError::invalid(format!(
                        "user_tags: expected tag strings, got {other}"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(ConfigError::invalid(format!(
                    "user_tags: expected a list of tags, e.g. [\"custom_tag\"], got {other}"
                )))
            }
        };
        let mut unique = Vec::with_capacity(tags.len());
        for t in tags {
            if !unique.contains(&t) {
                unique.push(t);
            }
        }
        if unique.is_empty() {
            self.node_user_tags.remove(&id);
        } else {
            self.node_user_tags.insert(id, unique);
        }
        Ok(())
    }

    /// `set //sys/cluster_nodes/<node>/@banned` and its kin (true or false; null, as
    /// `remove` gives, is false): kept in the configuration, so they outlive node and
    /// scheduler restarts.
    fn set_maintenance(
        &mut self,
        nodes: &Nodes,
        node: &str,
        attribute: &str,
        value: Value,
    ) -> Result<(), ConfigError> {
        let flag = MaintenanceFlag::parse(attribute).ok_or_else(|| {
            ConfigError::invalid(format!("'{attribute}' is not a maintenance attribute"))
        })?;
        let on = match value {
            Value::Bool(b) => b,
            Value::Null => false,
            other => {
                return Err(ConfigError::invalid(format!(
                    "{}: expected true or false, got {other}",
                    flag.name()
                )))
            }
        };
        let id = known_node(nodes, node)?;
        let mut m = self.maintenance(&id);
        m.set(flag, on);
        if m.is_in_service() {
            self.node_maintenance.remove(&id);
        } else {
            self.node_maintenance.insert(id, m);
        }
        Ok(())
    }

    /// A node's attributes as `//sys/cluster_nodes/NODE/@` shows them.
    fn node_attributes(&self, nodes: &Nodes, node: &str) -> Result<Value, ConfigError> {
        let n = nodes
            .values()
            .find(|n| n.id.as_str() == node)
            .ok_or_else(|| ConfigError::not_found(format!("no such node: '{node}'")))?;
        Ok(serde_json::json!({
            "tags": n.all_tags,
            "system_tags": n.system_tags,
            "configured_tags": n.tags,
            "user_tags": self.user_tags(&n.id),
            "resource_limits": n.resource_limits,
            "resource_usage": n.reported_usage,
            "state": n.state_name(),
            "pool_tree": n.registered_tree(),
            "registration_error": n.registration_error(),
            "banned": n.maintenance.banned,
            "decommissioned": n.maintenance.decommissioned,
            "disable_scheduler_jobs": n.maintenance.disable_scheduler_jobs,
        }))
    }
}

/// A node the scheduler has heard from, by name.
fn known_node(nodes: &Nodes, node: &str) -> Result<NodeId, ConfigError> {
    let id = NodeId(node.to_string());
    if nodes.contains_key(&id) {
        Ok(id)
    } else {
        Err(ConfigError::not_found(format!("no such node: '{node}'")))
    }
}
