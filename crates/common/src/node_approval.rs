//! What each node identity was approved to offer (SPEC 5.11): a node key is a claim to
//! capacity, and a fake or misconfigured node claiming 100,000 cpu would absorb the next
//! operation's jobs (and their environments). `ytsched auth add-node --max-resources`
//! records an approval; without one, generous defaults still bound a machine. The
//! scheduler uses the smaller of what a node reports and what it was approved for, and
//! alerts when a report exceeds it.

use crate::ids::NodeId;
use crate::resources::{Resource, ResourceVector};
use crate::units::ByteSize;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A node without an approval of its own: 1,024 cpu, 64 TiB, 64 gpu, 1,024 user slots.
pub const DEFAULT_APPROVAL: ResourceVector = ResourceVector {
    cpu: 1024.0,
    memory: (64u64 << 40) as f64,
    gpu: 64.0,
    user_slots: 1024.0,
};

/// Approvals one file may hold (as many as identities one directory holds).
pub const MAX_APPROVALS: usize = 10_000;
/// The most an approvals file may take.
pub const MAX_APPROVALS_FILE_BYTES: u64 = 4 << 20;

/// `cpu=64,memory=512G,gpu=8,user_slots=64`; what is not named keeps its default.
pub fn parse_max_resources(text: &str) -> Result<ResourceVector, String> {
    let mut v = DEFAULT_APPROVAL;
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("'{part}': expected resource=amount"))?;
        let (r, amount) = match key.trim() {
            "cpu" => (
                Resource::Cpu,
                value.trim().parse::<f64>().map_err(|e| e.to_string()),
            ),
            "memory" => (
                Resource::Memory,
                value
                    .trim()
                    .parse::<ByteSize>()
                    .map(|b| b.0 as f64)
                    .map_err(|e| e.to_string()),
            ),
            "gpu" => (
                Resource::Gpu,
                value.trim().parse::<f64>().map_err(|e| e.to_string()),
            ),
            "user_slots" => (
                Resource::UserSlots,
                value.trim().parse::<f64>().map_err(|e| e.to_string()),
            ),
            other => {
                return Err(format!(
                    "'{other}' is not a resource (cpu, memory, gpu, user_slots)"
                ))
            }
        };
        let amount = amount.map_err(|e| format!("{key}: {e}"))?;
        v.set(r, amount);
    }
    v.check_within(&ResourceVector::NODE_MAXIMUM)
        .map_err(|(r, x)| {
            format!(
                "{} = {x} is not between 0 and {}",
                r.name(),
                ResourceVector::NODE_MAXIMUM.get(r)
            )
        })?;
    Ok(v)
}

/// The approvals file `ytsched auth` writes beside `auth.conf` and the scheduler reads
/// (`--node-approvals`): no secrets, one entry per node identity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeApprovals {
    pub nodes: BTreeMap<NodeId, ResourceVector>,
}

impl NodeApprovals {
    pub fn parse(text: &str) -> Result<Self, String> {
        let a: NodeApprovals = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if a.nodes.len() > MAX_APPROVALS {
            return Err(format!(
                "{} approvals is more than the {MAX_APPROVALS} a file may hold",
                a.nodes.len()
            ));
        }
        for (node, v) in &a.nodes {
            v.check_within(&ResourceVector::NODE_MAXIMUM)
                .map_err(|(r, x)| format!("node '{node}': {} = {x} is out of range", r.name()))?;
        }
        Ok(a)
    }

    /// What `node` may offer.
    pub fn of(&self, node: &NodeId) -> ResourceVector {
        self.nodes.get(node).copied().unwrap_or(DEFAULT_APPROVAL)
    }

    /// What an approval of `node` names, if one does.
    pub fn explicit(&self, node: &NodeId) -> Option<ResourceVector> {
        self.nodes.get(node).copied()
    }
}

/// The first resource `reported` claims beyond `approved`, with both amounts.
pub fn excess(
    reported: &ResourceVector,
    approved: &ResourceVector,
) -> Option<(Resource, f64, f64)> {
    Resource::ALL.iter().find_map(|&r| {
        let (x, a) = (reported.get(r), approved.get(r));
        (x > a + crate::resources::EPSILON).then_some((r, x, a))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_resources_parse_with_defaults_and_bounds() {
        let v = parse_max_resources("cpu=64,memory=512G,gpu=8").unwrap();
        assert_eq!((v.cpu, v.gpu, v.user_slots), (64.0, 8.0, 1024.0));
        assert_eq!(v.memory, (512u64 << 30) as f64);
        assert!(parse_max_resources("cpu=1e9").unwrap_err().contains("cpu"));
        assert!(parse_max_resources("disk=1")
            .unwrap_err()
            .contains("'disk'"));
        assert!(parse_max_resources("cpu").is_err());
        assert_eq!(parse_max_resources("").unwrap(), DEFAULT_APPROVAL);
    }

    #[test]
    fn excess_names_the_first_resource_over() {
        let a = parse_max_resources("cpu=4").unwrap();
        let mut r = a;
        assert_eq!(excess(&r, &a), None);
        r.cpu = 100.0;
        assert_eq!(excess(&r, &a), Some((Resource::Cpu, 100.0, 4.0)));
    }
}
