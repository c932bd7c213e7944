//! The node approvals file (`--node-approvals`, written by `ytsched auth`): read at
//! start, and again whenever it changes, so an approval made with `ytsched auth
//! add-node --max-resources` holds from the node's next heartbeat. A file that does not
//! parse is refused at start and, later, leaves the approvals in force as they were.

use std::path::{Path, PathBuf};
use std::time::SystemTime;
use ytsched_common::node_approval::{NodeApprovals, MAX_APPROVALS_FILE_BYTES};

/// Reads and checks the file; the error names it and what is wrong.
pub fn read(path: &Path) -> anyhow::Result<(NodeApprovals, Option<SystemTime>)> {
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| anyhow::anyhow!("--node-approvals {shown}: {e}"))?;
    if meta.len() > MAX_APPROVALS_FILE_BYTES {
        anyhow::bail!(
            "--node-approvals {shown}: {} bytes is more than the limit of {MAX_APPROVALS_FILE_BYTES}",
            meta.len()
        );
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--node-approvals {shown}: {e}"))?;
    let approvals = NodeApprovals::parse(&text)
        .map_err(|e| anyhow::anyhow!("--node-approvals {shown}: {e}"))?;
    Ok((approvals, meta.modified().ok()))
}

/// Calls `apply` with the file's approvals each time it changes after `seen`.
pub async fn follow(path: PathBuf, seen: Option<SystemTime>, apply: impl Fn(NodeApprovals)) {
    crate::watched_files::followed_file::follow(
        path,
        seen,
        read,
        "node approvals",
        move |a: NodeApprovals| {
            tracing::info!(nodes = a.nodes.len(), "node approvals reloaded");
            apply(a)
        },
    )
    .await
}
