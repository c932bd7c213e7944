//! What a tree's fair-share update depends on, as one value that can be compared: an
//! update whose key is its snapshot's takes the snapshot's shares over.

use crate::trees::share_inputs::InputsVersion;
use crate::PoolTree;
use std::collections::HashMap;
use ytsched_common::names::TreePoolName;
use ytsched_common::resources::ResourceVector;

/// What a tree's fair share is a function of when nothing in it moves with time (no
/// pool accrues integral volume): an update whose key is its snapshot's would give the
/// same shares, number for number, so it takes them over rather than computing them
/// again. A cluster at rest (jobs running, nothing submitted or finishing) then costs
/// its heartbeats' work, not a full update of every operation each period. Starvation
/// still moves on with the clock: it is worked out every update.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct UpdateKey {
    pub(crate) inputs: InputsVersion,
    pub(crate) config_revision: u64,
    pub(crate) total: ResourceVector,
    pub(crate) filter_resources: HashMap<TreePoolName, ResourceVector>,
}

/// Whether some pool of `tree` has an integral guarantee: its volume, and so the
/// tree's shares, move with time.
pub(crate) fn moves_with_time(tree: &PoolTree) -> bool {
    tree.pools.values().any(|p| {
        p.config.integral_guarantees.as_ref().is_some_and(|ig| {
            ig.guarantee_type != ytsched_common::pool_config::IntegralGuaranteeType::None
        })
    })
}
