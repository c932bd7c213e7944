//! `cgroup_root = "@self"`: job cgroups inside the agent's own cgroup, the subtree
//! systemd hands a unit with `Delegate=yes` (cgroup v2). systemd then leaves the jobs'
//! cgroups alone, counts them in the unit, and stops them with it, as it expects of a
//! delegated unit; a root-level `ytsched` directory would sit outside every unit.
//!
//! On v2 a cgroup with processes cannot pass controllers to children, so the agent first
//! moves itself into a leaf, `agent`, beside where the node's job cgroups go.

use super::{io_err, CgroupError};
use std::fs;
use std::path::{Path, PathBuf};

/// The `--cgroup-root` value that asks for the agent's own cgroup.
pub const SELF_ROOT: &str = "@self";

/// The leaf the agent moves itself into.
const AGENT_LEAF: &str = "agent";

/// The agent's own cgroup on v2 (from `/proc/self/cgroup`'s `0::` line), relative to
/// the unified mount; if the agent already sits in its `agent` leaf (started again in
/// the same cgroup), its parent.
pub fn own_path(proc_self_cgroup: &str) -> Option<PathBuf> {
    let own = proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim()
        .trim_start_matches('/');
    let own = Path::new(own);
    let own = match own.file_name() {
        Some(leaf) if leaf == AGENT_LEAF => own.parent().unwrap_or(own),
        _ => own,
    };
    Some(own.to_path_buf())
}

/// Moves the agent into `<own>/agent` under the unified `mount` and returns `<own>`
/// (relative), where the node's job cgroups go.
pub fn claim(mount: &Path) -> Result<PathBuf, CgroupError> {
    let proc = Path::new("/proc/self/cgroup");
    let text = fs::read_to_string(proc).map_err(io_err(proc))?;
    let own = own_path(&text).ok_or_else(|| {
        CgroupError::Delegation("no cgroup v2 line (0::) in /proc/self/cgroup".into())
    })?;
    if own.as_os_str().is_empty() {
        return Err(CgroupError::Delegation(
            "the agent runs in the root cgroup, which is no unit's: run it as a systemd unit with Delegate=yes (packaging/systemd/ytsched-node.service), or give cgroup_root a directory".into(),
        ));
    }
    let leaf = mount.join(&own).join(AGENT_LEAF);
    fs::create_dir_all(&leaf).map_err(io_err(&leaf))?;
    let procs = leaf.join("cgroup.procs");
    fs::write(&procs, std::process::id().to_string()).map_err(io_err(&procs))?;
    Ok(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_cgroup_is_read_from_the_unified_line() {
        let systemd = "0::/system.slice/ytsched-node.service\n";
        assert_eq!(
            own_path(systemd),
            Some(PathBuf::from("system.slice/ytsched-node.service"))
        );
        // Started again inside its leaf: the unit's cgroup still.
        let again = "0::/system.slice/ytsched-node.service/agent\n";
        assert_eq!(own_path(again), own_path(systemd));
        assert_eq!(own_path("0::/\n"), Some(PathBuf::new()));
        // Hybrid hosts list v1 hierarchies too; only the unified line counts.
        let hybrid = "12:pids:/system.slice/x.service\n1:name=systemd:/system.slice/x.service\n0::/system.slice/x.service\n";
        assert_eq!(
            own_path(hybrid),
            Some(PathBuf::from("system.slice/x.service"))
        );
        assert_eq!(own_path("12:pids:/a\n"), None);
    }
}
