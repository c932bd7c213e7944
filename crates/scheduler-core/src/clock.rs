//! The latest time any call brought. The core has no clock of its own (every call
//! passes `now`); changes that come from calls without one (an admin change promoting
//! pending operations) happen at this time.

use ytsched_common::protocol::UnixMillis;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LatestNow(UnixMillis);

impl LatestNow {
    pub(crate) fn observe(&mut self, now: UnixMillis) {
        self.0 = self.0.max(now);
    }

    pub(crate) fn get(self) -> UnixMillis {
        self.0
    }
}
