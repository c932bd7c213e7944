//! cgroup v2: one unified hierarchy; controllers must be enabled in every ancestor's
//! `cgroup.subtree_control`, and a cgroup with processes cannot delegate them
//! ("no internal processes"), so a container's root processes are moved to a leaf.

use super::mountinfo::CgroupMount;
use super::{io_err, CgroupError, CgroupStats, JobLimits};
use std::fs;
use std::path::{Path, PathBuf};

const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];
const CPU_PERIOD_US: u64 = 100_000;

/// The unified mount, if it is the primary hierarchy and offers the memory controller.
/// (Hybrid hosts have a cgroup2 mount with no controllers; that one is not usable.)
pub fn usable_mount(mounts: &[CgroupMount]) -> Option<PathBuf> {
    mounts.iter().filter(|m| m.v2).find_map(|m| {
        let controllers = fs::read_to_string(m.path.join("cgroup.controllers")).ok()?;
        controllers
            .split_whitespace()
            .any(|c| c == "memory")
            .then(|| m.path.clone())
    })
}

pub fn enable_controllers(mount: &Path, relative: &Path) -> Result<(), CgroupError> {
    let mut dir = mount.to_path_buf();
    let mut parts: Vec<&std::ffi::OsStr> = relative.iter().collect();
    // Controllers are needed in the subtree below the node's directory too.
    parts.push(std::ffi::OsStr::new(""));
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        }
        enable_in(&dir, i == 0)?;
        if part.is_empty() {
            break;
        }
        dir = dir.join(part);
    }
    Ok(())
}

fn enable_in(dir: &Path, is_mount_root: bool) -> Result<(), CgroupError> {
    let control = dir.join("cgroup.subtree_control");
    let wanted: String = CONTROLLERS.iter().map(|c| format!("+{c} ")).collect();
    match fs::write(&control, wanted.trim()) {
        Ok(()) => Ok(()),
        // EBUSY: processes live here (a container's root). Move them to a leaf, retry.
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) && is_mount_root => {
            let leaf = dir.join("ytsched-init");
            fs::create_dir_all(&leaf).map_err(io_err(&leaf))?;
            let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = fs::write(leaf.join("cgroup.procs"), pid);
            }
            fs::write(&control, wanted.trim()).map_err(io_err(&control))
        }
        Err(e) => Err(io_err(&control)(e)),
    }
}

pub fn apply_limits(dir: &Path, l: &JobLimits) -> Result<(), CgroupError> {
    let write = |file: &str, value: String| {
        let f = dir.join(file);
        fs::write(&f, value).map_err(io_err(&f))
    };
    if l.cpu > 0.0 {
        let quota = ((l.cpu * CPU_PERIOD_US as f64).round() as u64).max(1000);
        write("cpu.max", format!("{quota} {CPU_PERIOD_US}"))?;
    }
    write("memory.max", l.memory_bytes.to_string())?;
    if dir.join("memory.swap.max").exists() {
        write("memory.swap.max", "0".into())?;
    }
    write("pids.max", l.pids.to_string())?;
    Ok(())
}

fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

pub fn stats(dir: &Path) -> CgroupStats {
    let cpu = fs::read_to_string(dir.join("cpu.stat")).unwrap_or_default();
    let events = fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
    CgroupStats {
        user_cpu_seconds: field(&cpu, "user_usec").map(|v| v as f64 / 1e6),
        system_cpu_seconds: field(&cpu, "system_usec").map(|v| v as f64 / 1e6),
        peak_memory_bytes: fs::read_to_string(dir.join("memory.peak"))
            .ok()
            .and_then(|t| t.trim().parse().ok()),
        oom_killed: field(&events, "oom_kill").unwrap_or(0) > 0,
    }
}
