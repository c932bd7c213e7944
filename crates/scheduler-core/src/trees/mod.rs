//! Pool trees: their configuration, per-tree state and fair-share snapshot, the live
//! usage placement reads, placement and preemption, starvation and pool limits.

pub mod fair_share;
pub(crate) mod gang_placement;
pub(crate) mod limits_enforcement;
pub(crate) mod live_usage;
pub(crate) mod placement;
pub(crate) mod pool_lines;
pub(crate) mod pool_rules;
pub(crate) mod pool_samples;
pub(crate) mod preemptibility;
pub(crate) mod preemption;
pub(crate) mod share_inputs;
pub(crate) mod share_update;
pub(crate) mod share_updater;
pub mod starvation;
pub(crate) mod tree_state;
pub(crate) mod update_key;
pub(crate) mod victims;
