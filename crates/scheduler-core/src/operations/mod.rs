//! Operations: their records, who may act on them (access), how they are admitted into
//! pools, the indexes kept over them, when they can never run (placeability) and when
//! they leave memory (retention).

pub(crate) mod access;
pub(crate) mod admission;
pub(crate) mod attempt_reservation;
pub(crate) mod by_id;
pub(crate) mod control;
pub(crate) mod core_indexes;
pub mod gang;
pub mod gang_shortfall;
pub(crate) mod index_reads;
pub(crate) mod inline_attempts;
pub mod job;
pub mod job_map;
pub(crate) mod new_pool;
pub(crate) mod operation;
pub(crate) mod operation_counts;
pub(crate) mod operation_index;
pub(crate) mod operation_life;
pub(crate) mod pending_queue;
pub(crate) mod placeability;
pub(crate) mod pool_resolution;
pub(crate) mod record_room;
pub mod retention;
pub(crate) mod retirement;
pub(crate) mod table;
pub(crate) mod time_limits;
pub(crate) mod waiting_jobs;
