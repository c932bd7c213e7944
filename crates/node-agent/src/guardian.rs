//! Jobs die with their agent (SPEC 5.11, issue: an agent killed with `kill -9` left its
//! jobs running unsupervised while the scheduler ran them again elsewhere).
//!
//! At start the agent forks a small guardian: this same binary, run with `--guardian`,
//! reading a pipe whose only writer is the agent. The agent tells it the node's cgroup
//! directories and each job's process group as it starts and ends. However the agent
//! ends (a clean stop, a crash, SIGKILL), the kernel closes the pipe; the guardian reads
//! EOF, kills every process in the node's job cgroups and every process group still
//! listed, and exits. The guardian ignores the terminal's and the init system's stop
//! signals, so it outlives the agent by design. A restarted agent also cleans up, as
//! before; the guardian closes the window in between.

use nix::sys::signal::{kill, killpg, signal, SigHandler, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The flag that makes `ytsched-node` a guardian.
pub const GUARDIAN_FLAG: &str = "--guardian";

/// The agent's end of the pipe.
pub struct Guardian {
    pipe: Mutex<Option<ChildStdin>>,
}

impl Guardian {
    /// No guardian (unit tests that run jobs without an agent binary).
    pub fn none() -> Self {
        Guardian {
            pipe: Mutex::new(None),
        }
    }

    /// Starts the guardian for jobs in `cgroup_dirs` (the node's directories).
    pub fn spawn(cgroup_dirs: &[PathBuf]) -> std::io::Result<Self> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg(GUARDIAN_FLAG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let guardian = Guardian {
            pipe: Mutex::new(child.stdin.take()),
        };
        for dir in cgroup_dirs {
            guardian.send(&format!("cgroup {}", dir.display()));
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
    let mut cgroups: Vec<PathBuf> = vec![];
    let mut groups: BTreeSet<i32> = BTreeSet::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if let Some(dir) = line.strip_prefix("cgroup ") {
            cgroups.push(PathBuf::from(dir));
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
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: usize = cgroups.iter().map(|d| kill_job_cgroups(d)).sum();
        if left == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::process::exit(0);
}

/// SIGKILLs every process in the job cgroups under `node_dir`; returns how many it found.
fn kill_job_cgroups(node_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(node_dir) else {
        return 0;
    };
    let mut found = 0;
    for job in entries.flatten().filter(|e| e.path().is_dir()) {
        let _ = std::fs::write(job.path().join("cgroup.kill"), "1");
        if let Ok(procs) = std::fs::read_to_string(job.path().join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                found += 1;
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
    found
}
