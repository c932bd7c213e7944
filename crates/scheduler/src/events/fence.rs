//! One writer of the event log at a time, kept by the stream itself.
//!
//! A leader's epoch step fences its state writes, but its events go to a stream, not
//! the key-value store: a leader paused after its epoch step and woken after its
//! successor had written stored its event after the successor's (issue 42's campaign,
//! seed 14297027077957360959). So each window of messages names the sequence the
//! stream last ended at as this writer knows it (`Nats-Expected-Last-Sequence`), and
//! the stream refuses it when anyone else wrote since. The writer then reads the
//! stream's last message: one of a later epoch means it is deposed and stores no more;
//! one of its own epoch or an earlier one (its own retried message, or a deposed
//! leader's last) is where it goes on from.

use std::sync::{Arc, Mutex};

/// The stream's last sequence as this writer last saw it (None: read it first).
#[derive(Clone, Debug, Default)]
pub struct EventFence {
    last: Arc<Mutex<Option<u64>>>,
}

impl EventFence {
    fn with<T>(&self, f: impl FnOnce(&mut Option<u64>) -> T) -> T {
        f(&mut self.last.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Where the stream ends, if known.
    pub fn known(&self) -> Option<u64> {
        self.with(|l| *l)
    }

    /// The stream ends at `seq` (read from it).
    pub fn ends_at(&self, seq: u64) {
        self.with(|l| *l = Some(seq));
    }

    /// A message of this writer was stored at `seq` (a duplicate's is its first
    /// storing's, which never moves the end back).
    pub fn stored(&self, seq: u64) {
        self.with(|l| *l = Some(l.map_or(seq, |x| x.max(seq))));
    }

    /// The stream refused a window: someone else may have written; read it again.
    pub fn forget(&self) {
        self.with(|l| *l = None);
    }
}

/// The epoch of an event log message, from its id (`<epoch>-<first seq>`).
pub fn epoch_of_message_id(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// Why the stream's end could not be learnt.
#[derive(Debug, thiserror::Error)]
pub enum EndUnknown {
    #[error("the event log holds events of epoch {theirs}, later than this scheduler's {ours}: it is deposed")]
    Deposed { ours: u64, theirs: u64 },
    #[error("cannot read the event log's end: {0}")]
    Unreadable(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_moves_on_with_stored_messages_and_never_back() {
        let f = EventFence::default();
        assert_eq!(f.known(), None);
        f.ends_at(10);
        f.stored(11);
        f.stored(7);
        assert_eq!(
            f.known(),
            Some(11),
            "a duplicate's sequence is an earlier one"
        );
        f.forget();
        assert_eq!(f.known(), None);
    }

    #[test]
    fn a_message_id_names_its_epoch() {
        assert_eq!(epoch_of_message_id("378-1"), Some(378));
        assert_eq!(epoch_of_message_id("x"), None);
        assert_eq!(epoch_of_message_id("a-1"), None);
    }
}
