//! Types every ytsched binary agrees on: resource vectors, ids, units, the vanilla
//! operation spec, and the NATS wire protocol (subjects + MessagePack messages).
//!
//! Nothing here does I/O; the transport adapters in the binaries own the sockets.

#[macro_use]
mod validated;

pub mod acl;
pub mod api;
pub mod codec;
mod config_attributes;
pub mod event_record;
pub mod explain;
pub mod files;
pub mod http_tokens;
pub mod identity;
pub mod ids;
pub mod logging;
pub mod maintenance;
pub mod names;
pub mod node_approval;
pub mod pool_config;
pub mod pool_tree;
pub mod protocol;
pub mod quote;
pub mod resources;
#[cfg(feature = "transport")]
pub mod settings_file;
pub mod spec;
pub mod states;
pub mod subjects;
pub mod tag_filter;
pub mod time_window;
#[cfg(feature = "transport")]
pub mod transport;
pub mod tree_config;
pub mod units;
pub mod usage;
pub mod weight;
pub mod yson;

pub use ids::{IdempotencyToken, IncarnationId, JobId, NodeId, OperationId};
pub use resources::ResourceVector;
pub use units::{ByteSize, DurationMs};
