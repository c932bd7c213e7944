//! Attempt numbers reserved in the store ahead of use. Starts are not stored (see
//! `jobs/adoption.rs`), yet a revived scheduler must never give a new attempt a number a
//! previous one already gave out unrecorded: two processes under one job id would share
//! a sandbox, an output key and an agent's "already seen" memory. So an operation's
//! record carries how many attempt numbers its scheduler may use without asking the
//! store, and a revived scheduler numbers on from there. A start past the reservation
//! reserves a further block, and the reply that carries it waits until that is stored:
//! rare, as the first block covers every job once and then some.

use crate::operations::operation::Operation;

/// Reserved beyond the jobs' own count at submission: room for retries before the
/// reply of a heartbeat has to wait for the store.
const FIRST_SPARE: u64 = 1;
/// The least a further block reserves.
const MIN_BLOCK: u64 = 2;

fn block(total_jobs: u64) -> u64 {
    (total_jobs / 8).max(MIN_BLOCK)
}

impl Operation {
    /// The reservation a new operation of `total_jobs` jobs starts with.
    pub(crate) fn first_reservation(total_jobs: u64) -> u64 {
        total_jobs + FIRST_SPARE
    }

    /// Makes sure attempt number `seq` is reserved, reserving a further block if not;
    /// the record then changes, and the store must have it before the attempt is
    /// announced.
    pub(crate) fn reserve_through(&mut self, seq: u64) {
        if seq < self.reserved_attempts {
            return;
        }
        self.reserved_attempts = seq + 1 + block(self.total_job_count());
        self.reservation_grew = true;
        self.mark_header_changed();
    }

    /// A revived operation numbers on past everything its earlier schedulers may have
    /// used, and reserves a fresh block (its record is stored before any start).
    pub(crate) fn renew_reservation_at_revival(&mut self) {
        self.next_job_seq = self.next_job_seq.max(self.reserved_attempts);
        self.reserved_attempts = self.next_job_seq + block(self.total_job_count());
        self.mark_header_changed();
    }

    /// Whether a reservation grew since the last call.
    pub(crate) fn take_reservation_grew(&mut self) -> bool {
        std::mem::take(&mut self.reservation_grew)
    }
}
