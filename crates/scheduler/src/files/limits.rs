//! The file store's bounds (SPEC 5.17). Each is a scheduler setting, and a refusal
//! names it and its value, so a user knows what to ask an admin for.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct FileLimits {
    /// The largest file one upload may carry (`--file-size-limit`).
    pub max_file_size: u64,
    /// Bytes of files one user may own (`--file-quota-per-user`).
    pub user_quota: u64,
    /// Files one user may own (`--max-files-per-user`).
    pub max_files_per_user: usize,
    /// How long a file no live operation names stays stored (`--file-ttl`).
    pub ttl: Duration,
    /// The most the store's stream may hold (`--file-store-size`).
    pub store_bytes: u64,
    /// Uploads one user may have open at once.
    pub uploads_per_user: usize,
    /// Uploads open at once across all users.
    pub uploads: usize,
    /// An upload that sends nothing for this long is dropped.
    pub upload_idle: Duration,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self {
            max_file_size: 1 << 30,
            user_quota: 4 << 30,
            max_files_per_user: 1_000,
            ttl: Duration::from_secs(7 * 24 * 3600),
            store_bytes: 8 << 30,
            uploads_per_user: 4,
            uploads: 32,
            upload_idle: Duration::from_secs(60),
        }
    }
}

impl FileLimits {
    /// How often unreferenced files and idle uploads are looked for: often enough that
    /// a file outlives its TTL by at most a quarter of it.
    pub fn sweep_period(&self) -> Duration {
        (self.ttl / 4).clamp(Duration::from_millis(250), Duration::from_secs(30))
    }
}
