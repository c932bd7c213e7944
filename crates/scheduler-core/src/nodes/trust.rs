//! What a node may offer when no approval file names it (issue 38 point 7): trust on
//! first use. A node key is a claim to capacity, and the generous defaults of
//! `node_approval` let a rogue key claim 1,024 cpu and take most of a cluster's next
//! jobs. So a node is used for at most what it reported when it first registered; a
//! later claim above that is used as that, and alerted, until an admin approves more
//! (`ytsched node approve NODE [--max-resources …]`). An approvals file entry
//! (`auth add-node --max-resources`) still decides where it exists. What each node was
//! trusted with is stored (`trust.<node>`), so a restarted scheduler holds the same.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use ytsched_common::api::ApiError;
use ytsched_common::node_approval::{NodeApprovals, DEFAULT_APPROVAL};
use ytsched_common::resources::ResourceVector;
use ytsched_common::NodeId;

/// A node's trusted offer, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrustRecord {
    pub resources: ResourceVector,
    /// Set by an admin (`node approve`), not taken from the first registration.
    #[serde(default)]
    pub approved: bool,
}

/// What bounds a node's offer, and who said so (for its alert).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    pub resources: ResourceVector,
    pub source: BoundSource,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundSource {
    /// The approvals file (`auth add-node --max-resources`).
    File,
    /// What it offered at its first registration.
    FirstOffer,
    /// An admin's `node approve`.
    Approved,
    /// Its driver declared it (a simulated node): what it reports is what it has.
    Declared,
}

impl BoundSource {
    /// How an alert says where the bound comes from.
    pub fn words(self) -> &'static str {
        match self {
            BoundSource::File => "it is approved for",
            BoundSource::FirstOffer => "it offered at its first registration (trust on first use)",
            BoundSource::Approved => "an admin approved",
            BoundSource::Declared => "its simulation declared",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct NodeTrust {
    /// Nodes are declared by their driver, not claimed by a key (the simulator's, from
    /// a scenario or an event log): no bound applies but the protocol's own.
    declared: bool,
    /// What the approvals file (`--node-approvals`) grants: where it names a node, it
    /// decides.
    approvals: NodeApprovals,
    offers: BTreeMap<NodeId, TrustRecord>,
    /// Records changed since the driver last took them, for the store.
    changed: Vec<(NodeId, TrustRecord)>,
}

impl NodeTrust {
    /// Trust for nodes the driver declares itself (`CoreConfig::nodes_declared`).
    pub fn declared() -> Self {
        Self {
            declared: true,
            ..Self::default()
        }
    }

    /// The bound of `node`, which reports `reported`: its approval file entry, else its
    /// trusted offer, else (its first registration) what it reports now, within the
    /// defaults, which is then remembered.
    pub fn bound(&mut self, node: &NodeId, reported: &ResourceVector) -> Bound {
        if self.declared {
            return Bound {
                resources: *reported,
                source: BoundSource::Declared,
            };
        }
        if let Some(resources) = self.approvals.explicit(node) {
            return Bound {
                resources,
                source: BoundSource::File,
            };
        }
        let record = match self.offers.get(node) {
            Some(r) => *r,
            None => {
                let first = TrustRecord {
                    resources: reported.component_min(&DEFAULT_APPROVAL),
                    approved: false,
                };
                self.set(node, first);
                first
            }
        };
        Bound {
            resources: record.resources,
            source: if record.approved {
                BoundSource::Approved
            } else {
                BoundSource::FirstOffer
            },
        }
    }

    /// `ytsched node approve NODE [--max-resources …]`: `node` may offer `max`, or (none
    /// given) what it `reported` last. Refused for a node the approvals file names (that
    /// file decides), and, without `max`, for a node never heard from.
    pub fn approve(
        &mut self,
        node: &NodeId,
        reported: Option<ResourceVector>,
        max: Option<ResourceVector>,
    ) -> Result<ResourceVector, ApiError> {
        if let Some(file) = self.approvals.explicit(node) {
            return Err(ApiError::conflict(format!(
                "node '{node}' is approved for {file} in the approvals file; change it there with `ytsched auth add-node {node} --max-resources …`"
            )));
        }
        let resources = max
            .or(reported.filter(|r| *r != ResourceVector::ZERO))
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "node '{node}' has not registered: name what it may offer with --max-resources"
                ))
            })?;
        resources
            .check_within(&ResourceVector::NODE_MAXIMUM)
            .map_err(|(r, x)| ApiError::new(format!("{} = {x} is out of range", r.name())))?;
        let record = TrustRecord {
            resources,
            approved: true,
        };
        self.set(node, record);
        tracing::info!(node = %node, resources = %resources, "node approved");
        Ok(resources)
    }

    /// Replaces the approvals file's grants (read at start and whenever it changes).
    pub fn set_approvals(&mut self, approvals: NodeApprovals) {
        self.approvals = approvals;
    }

    fn set(&mut self, node: &NodeId, record: TrustRecord) {
        self.offers.insert(node.clone(), record);
        self.changed.push((node.clone(), record));
    }

    /// What changed since the last call, for the store.
    pub fn take_changes(&mut self) -> Vec<(NodeId, TrustRecord)> {
        std::mem::take(&mut self.changed)
    }

    /// Every node a scheduler could have given work to: each one with a record, or named
    /// in the approvals file (a revival's roll call, `jobs/roll_call.rs`).
    pub fn known_nodes(&self) -> impl Iterator<Item = &NodeId> {
        self.offers.keys().chain(self.approvals.nodes.keys())
    }

    /// Whether `node`'s record was made by the call now running, so is not stored yet.
    pub fn unstored(&self, node: &NodeId) -> bool {
        self.changed.iter().any(|(n, _)| n == node)
    }

    /// The stored records, at revival.
    pub fn restore(&mut self, records: impl IntoIterator<Item = (NodeId, TrustRecord)>) {
        self.offers.extend(records);
    }
}
