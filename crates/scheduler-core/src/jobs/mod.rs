//! Jobs: one lifecycle (waiting → started → running → finished/aborted → settled), the
//! index of where each runs, and speculative copies of slow ones.

pub(crate) mod adoption;
pub(crate) mod held_indexes;
pub(crate) mod hold;
pub(crate) mod job_index;
pub mod job_info;
pub(crate) mod job_life;
pub(crate) mod job_lifecycle;
pub mod job_output;
pub(crate) mod node_reports;
pub(crate) mod roll_call;
pub(crate) mod speculation;
pub mod start_tokens;
