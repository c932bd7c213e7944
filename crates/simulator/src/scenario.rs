//! The `ytsched simulate` input (SPEC 6.3), parsed strictly: unknown keys are errors.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use ytsched_common::spec::{ResourceAmounts, ValidSpec, VanillaSpec};
use ytsched_common::units::DurationMs;
use ytsched_common::ResourceVector;
use ytsched_scheduler_core::config_file::TreeSection;

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario: {0}")]
    Yaml(String),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub id: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub resources: ResourceAmounts,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub node_count: u32,
    pub resources: ResourceAmounts,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationEntry {
    pub id: String,
    #[serde(default)]
    pub at: f64,
    #[serde(default = "root_user")]
    pub user: String,
    /// A vanilla spec whose tasks may carry `duration` (simulated seconds per job).
    pub spec: Value,
}

fn root_user() -> String {
    "root".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetAction {
    pub path: String,
    pub value: Value,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePoolAction {
    pub name: String,
    #[serde(default)]
    pub parent_name: Option<String>,
    pub pool_tree: String,
    #[serde(default)]
    pub attributes: Value,
}

/// An admin action at a point in simulated time; exactly one action per entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventEntry {
    pub at: f64,
    #[serde(default)]
    pub set: Option<SetAction>,
    #[serde(default)]
    pub remove: Option<String>,
    #[serde(default)]
    pub create_scheduler_pool: Option<CreatePoolAction>,
    #[serde(default)]
    pub abort_operation: Option<String>,
    #[serde(default)]
    pub update_operation_parameters: Option<UpdateParametersAction>,
    #[serde(default)]
    pub suspend_operation: Option<SuspendAction>,
    #[serde(default)]
    pub resume_operation: Option<String>,
}

/// `{operation: op2, parameters: {pool: b, weight: 2}}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateParametersAction {
    pub operation: String,
    pub parameters: ytsched_common::spec::OperationParameters,
}

/// `suspend_operation: op2`, or `{operation: op2, abort_running_jobs: true}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum SuspendAction {
    Id(String),
    Full {
        operation: String,
        #[serde(default)]
        abort_running_jobs: bool,
    },
}

impl SuspendAction {
    pub fn operation(&self) -> &str {
        match self {
            SuspendAction::Id(id) | SuspendAction::Full { operation: id, .. } => id,
        }
    }

    pub fn abort_running_jobs(&self) -> bool {
        matches!(
            self,
            SuspendAction::Full {
                abort_running_jobs: true,
                ..
            }
        )
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub nodes: Option<Vec<NodeSpec>>,
    #[serde(default)]
    pub cluster: Option<ClusterSpec>,
    #[serde(default)]
    pub resources: Option<ResourceAmounts>,
    #[serde(default)]
    pub default_tree: Option<String>,
    #[serde(default)]
    pub pool_trees: BTreeMap<String, TreeSection>,
    /// Admin-set node tags, as `//sys/cluster_nodes/<node>/@user_tags` holds them.
    #[serde(default)]
    pub node_user_tags: BTreeMap<ytsched_common::NodeId, Vec<String>>,
    #[serde(default)]
    pub operations: Vec<OperationEntry>,
    #[serde(default)]
    pub events: Vec<EventEntry>,
    #[serde(default = "one_second")]
    pub heartbeat_period: DurationMs,
    #[serde(default)]
    pub snapshots: Option<Vec<f64>>,
    pub until: f64,
}

fn one_second() -> DurationMs {
    DurationMs(1000)
}

/// A simulated node as the run needs it.
#[derive(Clone, Debug)]
pub struct SimNodeSpec {
    pub id: String,
    pub tags: Vec<String>,
    pub resources: ResourceVector,
}

/// A parsed operation: its validated spec and each task's job duration (ms). A spec the
/// service would refuse stays in the run as a rejected submission (SPEC 6.3): its error
/// is reported at its submit time and the run goes on.
#[derive(Clone, Debug)]
pub struct SimOperation {
    pub id: String,
    pub at_ms: u64,
    pub user: String,
    pub spec: Result<ValidSpec, String>,
    pub durations: BTreeMap<String, Option<u64>>,
}

pub fn seconds_to_ms(what: &str, s: f64) -> Result<u64, ScenarioError> {
    if !s.is_finite() || s < 0.0 {
        return Err(ScenarioError::Invalid(format!(
            "{what}: must be a non-negative number of seconds, got {s}"
        )));
    }
    Ok((s * 1000.0).round() as u64)
}

/// Node resources: user_slots default to twice the cpus, as an agent detects them.
fn node_resources(what: &str, r: &ResourceAmounts) -> Result<ResourceVector, ScenarioError> {
    r.check_nonnegative().map_err(|(name, v)| {
        ScenarioError::Invalid(format!(
            "{what}.{name}: must be a non-negative number, got {v}"
        ))
    })?;
    let mut v = r.to_vector(0.0);
    if r.user_slots.is_none() {
        v.user_slots = (2.0 * v.cpu).floor().max(1.0);
    }
    Ok(v)
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        serde_yaml_ng::from_str(text).map_err(|e| ScenarioError::Yaml(e.to_string()))
    }

    pub fn node_specs(&self) -> Result<Vec<SimNodeSpec>, ScenarioError> {
        let given = [
            self.nodes.is_some(),
            self.cluster.is_some(),
            self.resources.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if given != 1 {
            return Err(ScenarioError::Invalid(
                "give exactly one of `nodes`, `cluster` or `resources`".into(),
            ));
        }
        if let Some(nodes) = &self.nodes {
            let mut seen = std::collections::BTreeSet::new();
            return nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    ytsched_common::NodeId::parse(&n.id)
                        .map_err(|e| ScenarioError::Invalid(format!("nodes[{i}].id: {e}")))?;
                    if !seen.insert(n.id.clone()) {
                        return Err(ScenarioError::Invalid(format!(
                            "nodes[{i}].id: duplicate node id '{}'",
                            n.id
                        )));
                    }
                    Ok(SimNodeSpec {
                        id: n.id.clone(),
                        tags: n.tags.clone(),
                        resources: node_resources(&format!("nodes[{i}].resources"), &n.resources)?,
                    })
                })
                .collect();
        }
        if let Some(c) = &self.cluster {
            let r = node_resources("cluster.resources", &c.resources)?;
            return Ok((1..=c.node_count)
                .map(|i| SimNodeSpec {
                    id: format!("node{i}"),
                    tags: vec![],
                    resources: r,
                })
                .collect());
        }
        let r = node_resources("resources", self.resources.as_ref().expect("checked"))?;
        Ok(vec![SimNodeSpec {
            id: "node1".into(),
            tags: vec![],
            resources: r,
        }])
    }

    pub fn sim_operations(&self) -> Result<Vec<SimOperation>, ScenarioError> {
        let mut seen = std::collections::BTreeSet::new();
        self.operations
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let what = format!("operations[{i}] ({})", entry.id);
                let at_ms = seconds_to_ms(&format!("{what}.at"), entry.at)?;
                let mut durations = BTreeMap::new();
                let spec = Self::submission(entry, &what, &mut seen, &mut durations);
                Ok(SimOperation {
                    id: entry.id.clone(),
                    at_ms,
                    user: entry.user.clone(),
                    spec,
                    durations,
                })
            })
            .collect()
    }

    /// What the service would make of one submission: its spec, or why it is refused.
    fn submission(
        entry: &OperationEntry,
        what: &str,
        seen: &mut std::collections::BTreeSet<String>,
        durations: &mut BTreeMap<String, Option<u64>>,
    ) -> Result<ValidSpec, String> {
        if entry.id.is_empty()
            || !entry
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!("{what}.id: use letters, digits, '-' and '_'"));
        }
        if !seen.insert(entry.id.clone()) {
            return Err(format!("{what}.id: duplicate operation id"));
        }
        let mut spec = entry.spec.clone();
        if let Some(tasks) = spec.get_mut("tasks").and_then(|t| t.as_object_mut()) {
            for (name, task) in tasks.iter_mut() {
                let Some(t) = task.as_object_mut() else {
                    continue;
                };
                let d = match t.remove("duration") {
                    None | Some(Value::Null) => None,
                    Some(Value::Number(n)) => Some(
                        seconds_to_ms(
                            &format!("{what}.spec.tasks.{name}.duration"),
                            n.as_f64().unwrap_or(f64::NAN),
                        )
                        .map_err(|e| e.to_string())?,
                    ),
                    Some(other) => {
                        return Err(format!(
                            "{what}.spec.tasks.{name}.duration: expected seconds, got {other}"
                        ))
                    }
                };
                durations.insert(name.clone(), d);
                // The command never runs in simulation.
                t.entry("command")
                    .or_insert(Value::String("simulated".into()));
            }
        }
        let spec: VanillaSpec =
            serde_json::from_value(spec).map_err(|e| format!("{what}.spec: {e}"))?;
        ValidSpec::try_from(spec).map_err(|e| format!("{what}.spec.{e}"))
    }
}
