//! Job cgroups over cgroupfs, on v1 and v2, chosen at run time.
//!
//! Layout: `<mount>/<cgroup_root>/<node_id>/<job_id>` in every hierarchy the agent uses
//! (v1: one per controller mount among cpu, cpuacct, memory, pids; v2: the unified one).
//! The version-specific file names and formats live in `v1` and `v2`; everything else
//! (creating, joining, killing, removing) is shared here.

pub mod delegated;
mod mountinfo;
mod v1;
mod v2;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no usable cgroup hierarchy found (neither cgroup v2 with controllers nor v1 memory/cpu/pids mounts)")]
    NotFound,
    #[error("cgroup path {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// `cgroup_root = "@self"` cannot be honoured here.
    #[error("cgroup_root = \"@self\": {0}")]
    Delegation(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "v1" => Some(Version::V1),
            "v2" => Some(Version::V2),
            _ => None,
        }
    }
}

/// Limits applied to one job's cgroup.
#[derive(Clone, Copy, Debug)]
pub struct JobLimits {
    /// Cores; 0 means no quota.
    pub cpu: f64,
    pub memory_bytes: u64,
    pub pids: u64,
}

/// Usage figures read from a job cgroup before it is removed.
#[derive(Clone, Copy, Debug, Default)]
pub struct CgroupStats {
    pub user_cpu_seconds: Option<f64>,
    pub system_cpu_seconds: Option<f64>,
    pub peak_memory_bytes: Option<u64>,
    pub oom_killed: bool,
}

/// The hierarchies this agent puts job cgroups in.
#[derive(Clone, Debug)]
pub struct CgroupManager {
    version: Version,
    /// The node's directory in each hierarchy: `<mount>/<root>/<node_id>`.
    node_dirs: Vec<PathBuf>,
}

impl CgroupManager {
    /// Detects v1 vs v2 and creates the node's directories with controllers enabled.
    pub fn open(cgroup_root: &str, node_id: &str) -> Result<Self, CgroupError> {
        let mounts =
            mountinfo::cgroup_mounts().map_err(io_err(Path::new("/proc/self/mountinfo")))?;
        let unified = v2::usable_mount(&mounts);
        let root = match (cgroup_root, &unified) {
            (delegated::SELF_ROOT, Some(mount)) => delegated::claim(mount)?,
            (delegated::SELF_ROOT, None) => {
                return Err(CgroupError::Delegation(
                    "needs cgroup v2 (systemd's delegation); on cgroup v1 give a directory, e.g. ytsched".into(),
                ))
            }
            (dir, _) => PathBuf::from(dir.trim_matches('/')),
        };
        let relative = root.join(node_id);
        let manager = if let Some(unified) = unified {
            v2::enable_controllers(&unified, &relative)?;
            CgroupManager {
                version: Version::V2,
                node_dirs: vec![unified.join(&relative)],
            }
        } else {
            let dirs = v1::controller_mounts(&mounts);
            if dirs.is_empty() {
                return Err(CgroupError::NotFound);
            }
            CgroupManager {
                version: Version::V1,
                node_dirs: dirs.into_iter().map(|m| m.join(&relative)).collect(),
            }
        };
        for dir in &manager.node_dirs {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        if manager.version == Version::V1 {
            v1::prepare_node_dirs(&manager.node_dirs);
        }
        Ok(manager)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The node's directory in each hierarchy (job cgroups are its children).
    pub fn node_dirs(&self) -> &[PathBuf] {
        &self.node_dirs
    }

    /// The manager of directories another process opened (the agent's job guardian),
    /// without creating or changing anything.
    pub fn adopt(version: Version, node_dirs: Vec<PathBuf>) -> Self {
        CgroupManager { version, node_dirs }
    }

    /// Kills whatever a previous incarnation left and removes its job cgroups.
    /// Returns how many stale cgroups were removed.
    pub fn remove_stale(&self) -> usize {
        let mut names = std::collections::BTreeSet::new();
        for dir in &self.node_dirs {
            if let Ok(entries) = fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.path().is_dir() {
                        names.insert(e.file_name());
                    }
                }
            }
        }
        let mut removed = 0;
        for name in names {
            let job = JobCgroup {
                version: self.version,
                dirs: self
                    .node_dirs
                    .iter()
                    .map(|d| d.join(&name))
                    .filter(|d| d.exists())
                    .collect(),
            };
            job.kill_all();
            if job.remove().is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Caps the processes of all this node's jobs together (`pids.max` of the node's
    /// directory): however many slots and agents a host runs, jobs cannot take the
    /// host's last pids. Returns whether a pids controller took it.
    pub fn limit_node_pids(&self, max: u64) -> Result<bool, CgroupError> {
        let mut set = false;
        for dir in &self.node_dirs {
            let file = dir.join("pids.max");
            if file.exists() {
                fs::write(&file, max.to_string()).map_err(io_err(&file))?;
                set = true;
            }
        }
        Ok(set)
    }

    /// Caps the processes of every agent's jobs on this host together: `pids.max` of the
    /// directory the nodes' directories share (`--cgroup-root`), the kernel's own count
    /// over all of them, so two agents on one host cannot each take half of the pids. A
    /// lower cap already there (another agent's, an admin's) stays. Returns whether one
    /// is in force.
    pub fn limit_host_pids(&self, max: u64) -> Result<bool, CgroupError> {
        let mut set = false;
        for dir in &self.node_dirs {
            let Some(file) = dir.parent().map(|p| p.join("pids.max")) else {
                continue;
            };
            let Ok(current) = fs::read_to_string(&file) else {
                continue;
            };
            let lower = current.trim().parse::<u64>().is_ok_and(|c| c <= max);
            if !lower {
                fs::write(&file, max.to_string()).map_err(io_err(&file))?;
            }
            set = true;
        }
        Ok(set)
    }

    /// Removes the node's own directories (on clean shutdown, after every job is gone).
    pub fn remove_node_dirs(&self) {
        for dir in &self.node_dirs {
            let _ = fs::remove_dir(dir);
            // The shared root too, when this was the last node using it.
            if let Some(parent) = dir.parent() {
                let _ = fs::remove_dir(parent);
            }
        }
    }

    pub fn create_job(&self, job_id: &str, limits: &JobLimits) -> Result<JobCgroup, CgroupError> {
        let job = JobCgroup {
            version: self.version,
            dirs: self.node_dirs.iter().map(|d| d.join(job_id)).collect(),
        };
        for dir in &job.dirs {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let applied = match self.version {
            Version::V1 => v1::apply_limits(&job.dirs, limits),
            Version::V2 => v2::apply_limits(&job.dirs[0], limits),
        };
        if let Err(e) = applied {
            let _ = job.remove();
            return Err(e);
        }
        Ok(job)
    }
}

/// One job's cgroup (one directory per hierarchy).
#[derive(Clone, Debug)]
pub struct JobCgroup {
    version: Version,
    dirs: Vec<PathBuf>,
}

impl JobCgroup {
    /// `cgroup.procs` of every hierarchy: the child writes its pid to each before exec.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for f in self.procs_files() {
            if let Ok(text) = fs::read_to_string(&f) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    pub fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    pub fn signal_all(&self, signal: Signal) {
        for pid in self.pids() {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// SIGKILLs every process until none is left (a forking job can race one pass).
    pub fn kill_all(&self) {
        if self.version == Version::V2 {
            let _ = fs::write(self.dirs[0].join("cgroup.kill"), "1");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.is_empty() && Instant::now() < deadline {
            self.signal_all(Signal::SIGKILL);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn stats(&self) -> CgroupStats {
        match self.version {
            Version::V1 => v1::stats(&self.dirs),
            Version::V2 => v2::stats(&self.dirs[0]),
        }
    }

    /// Removes the directories; retried briefly because the kernel releases a cgroup
    /// a moment after its last process is reaped.
    pub fn remove(&self) -> Result<(), CgroupError> {
        for dir in &self.dirs {
            let mut attempt = 0;
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if attempt >= 100 => return Err(io_err(dir)(e)),
                    Err(_) => {
                        attempt += 1;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        Ok(())
    }
}
