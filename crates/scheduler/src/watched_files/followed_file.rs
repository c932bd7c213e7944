//! A file an admin's tool rewrites while the scheduler runs (node approvals, web
//! tokens): polled for a new modification time, re-read and applied whole. A version
//! that does not read leaves the last good one in force, with an ALERT, so a half-made
//! edit never opens or closes the door by accident.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How soon a change is noticed: `ytsched auth` tells its user "within seconds".
const POLL: Duration = Duration::from_secs(2);

/// Calls `apply` with what `read` makes of the file each time it changes after `seen`.
pub async fn follow<T>(
    path: PathBuf,
    mut seen: Option<SystemTime>,
    read: impl Fn(&Path) -> anyhow::Result<(T, Option<SystemTime>)>,
    what: &'static str,
    apply: impl Fn(T),
) {
    loop {
        tokio::time::sleep(POLL).await;
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if modified == seen {
            continue;
        }
        seen = modified;
        match read(&path) {
            Ok((value, _)) => apply(value),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "ALERT: {what} not reloaded; the previous ones stay in force")
            }
        }
    }
}
