//! The ytsched scheduler service.
//!
//! `core` is the pure, deterministic heart: it owns nodes, operations and jobs and makes
//! every scheduling decision, with time passed in by the caller. `service` is the thin
//! NATS adapter that feeds it heartbeats, API calls and clock ticks; the folders around
//! it are what it needs: the event log (`events`), the state and archive in JetStream
//! (`store`), the web face (`http`), the leader lease (`leadership`), what stands before
//! the core (`gates`) and the files admins rewrite while it runs (`watched_files`).

/// The pure core, in its own crate so that the compiler keeps it free of I/O and async.
pub use ytsched_scheduler_core as core;
pub mod events;
pub mod files;
pub mod gates;
pub mod http;
pub mod leadership;
pub mod service;
pub mod store;
pub mod watched_files;
