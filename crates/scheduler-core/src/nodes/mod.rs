//! Nodes: what each one offers and runs, which trees it belongs to (membership), which
//! should heartbeat now (nudges), and what one heartbeat gathers (`HeartbeatContext`).

pub(crate) mod heartbeat_checks;
pub(crate) mod heartbeat_context;
pub mod membership;
pub(crate) mod node;
pub(crate) mod node_life;
pub(crate) mod node_trees;
pub(crate) mod nudges;
pub mod trust;
