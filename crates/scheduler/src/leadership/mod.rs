//! Hot standby (SPEC 5.10): the leader lease, kept on a thread of its own.

pub mod lease;
pub mod lease_thread;
pub mod lease_validity;
