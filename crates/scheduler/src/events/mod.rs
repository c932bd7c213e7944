//! The event log (SPEC 5.16): the records of what the core reports, their way to the
//! stream, pages of it read back, and the service's own log lines.

pub mod fence;
pub mod log_lines;
pub mod pages;
pub mod sink;
