//! Jobs die with their agent (SPEC 5.11, issue: an agent killed with `kill -9` left its
//! jobs running unsupervised while the scheduler ran them again elsewhere).
//!
//! At start the agent forks a small guardian: this same binary, run with `--guardian`,
//! reading a pipe whose only writer is the agent. The agent tells it the node's cgroup
//! directories and each job's process group as it starts and ends. However the agent
//! ends (a clean stop, a crash, SIGKILL), the kernel closes the pipe; the guardian reads
//! EOF, kills every process group still listed, removes the node's job cgroups with
//! every process in them (`CgroupManager::remove_stale`, as a restarted agent does), and
//! exits. The guardian ignores the terminal's and the init system's stop
//! signals, so it outlives the agent by design. A restarted agent also cleans up, as
//! before; the guardian closes the window in between.

use crate::cgroup::{CgroupManager, Version};
use nix::sys::signal::{killpg, signal, SigHandler, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// The flag that makes `ytsched-node` a guardian.
pub const GUARDIAN_FLAG: &str = "--guardian";

/// The agent's end of the pipe.
pub struct Guardian {
    pipe: Mutex<Option<ChildStdin>>,
}

impl Guardian {
    /// Starts the guardian for jobs in the cgroups of `cgroups` (none in process mode).
    pub fn spawn(cgroups: Option<&CgroupManager>) -> std::io::Result<Self> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg(GUARDIAN_FLAG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let guardian = Guardian {
            pipe: Mutex::new(child.stdin.take()),
        };
        if let Some(m) = cgroups {
            for dir in m.node_dirs() {
                guardian.send(&format!(
                    "cgroup {} {}",
                    m.version().as_str(),
                    dir.display()
                ));
            }
        }
        // Dropping the handle neither waits for nor kills the guardian: it lives on until
        // the pipe closes, which is the point.
        drop(child);
        Ok(guardian)
    }

    fn send(&self, line: &str) {
        let mut pipe = self.pipe.lock().expect("guardian pipe");
        if let Some(p) = pipe.as_mut() {
            if writeln!(p, "{line}").is_err() {
                tracing::warn!(
                    "the job guardian is gone: jobs would outlive a crash of this agent"
                );
                *pipe = None;
            }
        }
    }

    /// A job's process group to kill should the agent die.
    pub fn watch(&self, pgid: i32) {
        if pgid > 0 {
            self.send(&format!("+{pgid}"));
        }
    }

    pub fn forget(&self, pgid: i32) {
        if pgid > 0 {
            self.send(&format!("-{pgid}"));
        }
    }
}

/// The guardian process: waits for the agent to go, then kills what it left.
pub fn run() -> ! {
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: setting a signal to "ignore" before any other thread exists.
        unsafe {
            let _ = signal(s, SigHandler::SigIgn);
        }
    }
    let mut version = None;
    let mut node_dirs: Vec<PathBuf> = vec![];
    let mut groups: BTreeSet<i32> = BTreeSet::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if let Some((v, dir)) = line.strip_prefix("cgroup ").and_then(|r| r.split_once(' ')) {
            version = Version::parse(v);
            node_dirs.push(PathBuf::from(dir));
        } else if let Some(g) = line.strip_prefix('+').and_then(|g| g.parse().ok()) {
            groups.insert(g);
        } else if let Some(g) = line.strip_prefix('-').and_then(|g| g.parse::<i32>().ok()) {
            groups.remove(&g);
        }
    }
    // EOF: the agent is gone.
    for g in &groups {
        let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
    }
    if let Some(version) = version {
        CgroupManager::adopt(version, node_dirs).remove_stale();
    }
    std::process::exit(0);
}
