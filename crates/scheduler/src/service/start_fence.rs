//! A heartbeat reply that starts a job goes out only once every reservation of attempt
//! numbers queued so far is stored.
//!
//! The core numbers attempts within a reservation kept in the operation's record
//! (`attempt_reservation.rs`), and a call that grows one has its reply wait for the
//! store. But the grown reservation covers later calls' starts at once, in memory: a
//! start within it (or a start sent again in a later reply) went out while the record
//! was still unstored. Seed 2335860922930601270: the store was cut off, a leader gave
//! out attempts 10 and 11 that way, was deposed before the record landed, and its
//! successor gave the same numbers to other jobs (two processes under one job id). So a
//! reply with starts waits until the store is through the last call that grew a
//! reservation; with the store keeping up that costs nothing.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(super) struct StartFence {
    /// The writer's position after the last call whose writes grew a reservation.
    reserved_at: AtomicU64,
}

impl StartFence {
    /// Notes a call whose writes grow a reservation, queued through `position` (call it
    /// under the core lock, so that every later call sees it).
    pub(super) fn reserved(&self, position: u64) {
        self.reserved_at.fetch_max(position, Ordering::SeqCst);
    }

    /// The position a reply that starts jobs must wait for, if the store (through
    /// `stored_through`) is not there yet.
    pub(super) fn wait_for(&self, stored_through: u64) -> Option<u64> {
        let at = self.reserved_at.load(Ordering::SeqCst);
        (stored_through < at).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_wait_until_the_last_reservation_is_stored() {
        let fence = StartFence::default();
        assert_eq!(fence.wait_for(0), None, "no reservation grown: no wait");
        fence.reserved(7);
        assert_eq!(fence.wait_for(6), Some(7));
        assert_eq!(fence.wait_for(7), None);
        // An earlier position noted late never lowers the fence.
        fence.reserved(12);
        fence.reserved(9);
        assert_eq!(fence.wait_for(11), Some(12));
        assert_eq!(fence.wait_for(40), None);
    }
}
