//! The ytsched node agent: detects this machine's resources, heartbeats to the
//! scheduler, and runs each job as real processes in its own sandbox (cgroup,
//! directory, captured output), killing the whole job when told to.

pub mod agent;
pub mod cgroup;
pub mod detect;
pub mod device_access;
pub mod disk_image;
pub mod disk_quota;
pub mod files;
pub mod gpu;
pub mod guardian;
pub mod job;
pub mod job_namespaces;
pub mod layer_root;
pub mod read_only_host;
mod reply_log;
pub mod sandbox;
pub mod slot_range;
pub mod tags;
