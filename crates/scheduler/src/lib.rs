//! The ytsched scheduler.
//!
//! `core` is the pure, deterministic heart: it owns nodes, operations and jobs and makes
//! every scheduling decision, with time passed in by the caller. `service` is the thin
//! NATS adapter that feeds it heartbeats, API calls and clock ticks.

pub mod ack_ledger;
pub mod admin_changes;
pub mod approvals_file;
pub mod archive;
pub mod cost_budgets;
/// The pure core, in its own crate so that the compiler keeps it free of I/O and async.
pub use ytsched_scheduler_core as core;
pub mod event_log;
pub mod event_pages;
pub mod event_records;
pub mod event_sink;
pub mod fair_gate;
pub mod followed_file;
pub mod http;
pub mod http_access;
pub mod http_listener;
pub mod http_tls;
pub mod job_pages;
pub mod lease;
pub mod lease_thread;
pub mod rate_limits;
pub mod refusals;
pub mod report_slots;
pub mod service;
pub mod simulate;
pub mod store;
pub mod usage_report;
pub mod web_view;
pub mod write_queue;
pub mod writer;
