//! How the YTsaurus commands were answered, for `/metrics`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Commands answered, by command and YTsaurus error code (0: success), for `/metrics`.
/// Bounded: commands come from the fixed table (others count as `unknown`).
#[derive(Clone, Default)]
pub struct YtCounts(Arc<Mutex<BTreeMap<(&'static str, i64), u64>>>);

impl YtCounts {
    pub fn count(&self, command: &'static str, code: i64) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry((command, code)).or_insert(0) += 1;
        }
    }

    /// Every (command, code, count) so far.
    pub fn all(&self) -> Vec<(&'static str, i64, u64)> {
        self.0
            .lock()
            .map(|m| m.iter().map(|((c, k), n)| (*c, *k, *n)).collect())
            .unwrap_or_default()
    }
}
