//! cgroup v1: one mount per controller (or a few joined), limits in
//! `cpu.cfs_quota_us`, `memory.limit_in_bytes`, `pids.max`.

use super::mountinfo::CgroupMount;
use super::{io_err, CgroupError, CgroupStats, JobLimits};
use std::fs;
use std::path::PathBuf;

const WANTED: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];
const CFS_PERIOD_US: u64 = 100_000;

/// Distinct mounts carrying the controllers jobs need.
pub fn controller_mounts(mounts: &[CgroupMount]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in mounts.iter().filter(|m| !m.v2) {
        if m.controllers.iter().any(|c| WANTED.contains(&c.as_str())) && !out.contains(&m.path) {
            out.push(m.path.clone());
        }
    }
    // Without a memory controller there is no memory enforcement: not usable.
    let has_memory = mounts
        .iter()
        .any(|m| !m.v2 && m.controllers.iter().any(|c| c == "memory"));
    if has_memory {
        out
    } else {
        vec![]
    }
}

/// cpuset cgroups start empty in v1; our directories are not in cpuset mounts, but
/// `memory.use_hierarchy` must be on so job limits count against the node's directory.
pub fn prepare_node_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        let f = d.join("memory.use_hierarchy");
        if f.exists() {
            let _ = fs::write(f, "1");
        }
    }
}

fn write_if_present(dirs: &[PathBuf], file: &str, value: &str) -> Result<(), CgroupError> {
    for d in dirs {
        let f = d.join(file);
        if f.exists() {
            fs::write(&f, value).map_err(io_err(&f))?;
        }
    }
    Ok(())
}

pub fn apply_limits(dirs: &[PathBuf], l: &JobLimits) -> Result<(), CgroupError> {
    if l.cpu > 0.0 {
        let quota = ((l.cpu * CFS_PERIOD_US as f64).round() as u64).max(1000);
        write_if_present(dirs, "cpu.cfs_period_us", &CFS_PERIOD_US.to_string())?;
        write_if_present(dirs, "cpu.cfs_quota_us", &quota.to_string())?;
    }
    write_if_present(dirs, "memory.limit_in_bytes", &l.memory_bytes.to_string())?;
    // Without swap limits a job could page out instead of hitting its limit.
    let _ = write_if_present(
        dirs,
        "memory.memsw.limit_in_bytes",
        &l.memory_bytes.to_string(),
    );
    write_if_present(dirs, "memory.swappiness", "0").ok();
    write_if_present(dirs, "pids.max", &l.pids.to_string())?;
    Ok(())
}

fn read(dirs: &[PathBuf], file: &str) -> Option<String> {
    dirs.iter()
        .map(|d| d.join(file))
        .find(|p| p.exists())
        .and_then(|p| fs::read_to_string(p).ok())
}

fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

pub fn stats(dirs: &[PathBuf]) -> CgroupStats {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let cpu = read(dirs, "cpuacct.stat");
    let oom_control = read(dirs, "memory.oom_control").unwrap_or_default();
    let oom_kills = field(&oom_control, "oom_kill");
    let failcnt = read(dirs, "memory.failcnt").and_then(|t| t.trim().parse::<u64>().ok());
    CgroupStats {
        user_cpu_seconds: cpu
            .as_deref()
            .and_then(|t| field(t, "user"))
            .map(|v| v as f64 / ticks),
        system_cpu_seconds: cpu
            .as_deref()
            .and_then(|t| field(t, "system"))
            .map(|v| v as f64 / ticks),
        peak_memory_bytes: read(dirs, "memory.max_usage_in_bytes")
            .and_then(|t| t.trim().parse().ok()),
        // Old kernels lack the oom_kill counter; a hit limit (failcnt) stands in for it.
        oom_killed: match oom_kills {
            Some(n) => n > 0,
            None => failcnt.unwrap_or(0) > 0,
        },
    }
}
