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
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The flag that makes `ytsched-node` a guardian.
pub const GUARDIAN_FLAG: &str = "--guardian";

/// The agent's end of the pipe, and what it told the guardian: should the guardian die
/// (killed by someone, or by the OOM killer), a new one is started at once and told it
/// all again, so the agent is never left without one.
pub struct Guardian {
    inner: Mutex<Inner>,
}

struct Inner {
    child: Child,
    pipe: Option<ChildStdin>,
    /// `cgroup <version> <dir>` lines, sent first to every guardian.
    cgroup_lines: Vec<String>,
    /// Process groups of running jobs.
    groups: BTreeSet<i32>,
}

fn start_child() -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .arg(GUARDIAN_FLAG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
}

impl Inner {
    /// Writes `line`; a guardian that is gone is replaced (and told everything) first.
    fn send(&mut self, line: &str) {
        if self.alive() {
            if let Some(p) = self.pipe.as_mut() {
                if writeln!(p, "{line}").is_ok() {
                    return;
                }
            }
        }
        self.restart();
    }

    fn alive(&mut self) -> bool {
        self.pipe.is_some() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Starts a new guardian and tells it the cgroups and every running job's group.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        match start_child() {
            Ok(mut child) => {
                self.pipe = child.stdin.take();
                self.child = child;
                let lines: Vec<String> = self
                    .cgroup_lines
                    .iter()
                    .cloned()
                    .chain(self.groups.iter().map(|g| format!("+{g}")))
                    .collect();
                let told = self
                    .pipe
                    .as_mut()
                    .is_some_and(|p| lines.iter().all(|l| writeln!(p, "{l}").is_ok()));
                if told {
                    tracing::warn!(
                        jobs = self.groups.len(),
                        "the job guardian was gone; a new one watches this agent's jobs"
                    );
                } else {
                    self.pipe = None;
                }
            }
            Err(e) => {
                self.pipe = None;
                tracing::error!(error = %e, "cannot restart the job guardian: jobs would outlive a crash of this agent; retrying");
            }
        }
    }
}

impl Guardian {
    /// Starts the guardian for jobs in the cgroups of `cgroups` (none in process mode).
    pub fn spawn(cgroups: Option<&CgroupManager>) -> std::io::Result<Self> {
        let mut child = start_child()?;
        let cgroup_lines = cgroups
            .map(|m| {
                m.node_dirs()
                    .iter()
                    .map(|dir| format!("cgroup {} {}", m.version().as_str(), dir.display()))
                    .collect()
            })
            .unwrap_or_default();
        let mut inner = Inner {
            pipe: child.stdin.take(),
            child,
            cgroup_lines,
            groups: BTreeSet::new(),
        };
        for line in inner.cgroup_lines.clone() {
            inner.send(&line);
        }
        Ok(Guardian {
            inner: Mutex::new(inner),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces a guardian that died; the agent calls it every few hundred ms. Returns
    /// whether one was replaced.
    pub fn check(&self) -> bool {
        let mut inner = self.lock();
        if inner.alive() {
            return false;
        }
        inner.restart();
        true
    }

    /// A job's process group to kill should the agent die.
    pub fn watch(&self, pgid: i32) {
        if pgid > 0 {
            let mut inner = self.lock();
            inner.groups.insert(pgid);
            inner.send(&format!("+{pgid}"));
        }
    }

    /// The agent heard the scheduler recently enough for its jobs to run another
    /// `remaining`: past that without a word from the agent (stopped, hung, starved of
    /// CPU), the guardian stops the jobs itself, as the agent's own fencing would.
    pub fn alive_for(&self, remaining: std::time::Duration) {
        let mut inner = self.lock();
        inner.send(&format!("alive {}", remaining.as_millis()));
    }

    pub fn forget(&self, pgid: i32) {
        if pgid > 0 {
            let mut inner = self.lock();
            inner.groups.remove(&pgid);
            inner.send(&format!("-{pgid}"));
        }
    }
}

/// The guardian process: waits for the agent to go, then kills what it left; and kills
/// the jobs meanwhile when the agent stops saying it is alive (`alive_for`) before its
/// last word runs out, whether it is dead, cut off or stopped (`kill -STOP`).
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
    let lines = read_lines();
    let mut deadline: Option<Instant> = None;
    loop {
        let line = match deadline {
            Some(d) => lines.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => lines.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let line = match line {
            Ok(line) => line,
            // EOF: the agent is gone.
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                deadline = None;
                if !groups.is_empty() {
                    eprintln!(
                        "ytsched-node guardian: the agent has said nothing past its fence deadline (stopped or hung): stopping its {} job(s), as its own fencing would",
                        groups.len()
                    );
                }
                kill_groups(&groups);
                continue;
            }
        };
        if let Some((v, dir)) = line.strip_prefix("cgroup ").and_then(|r| r.split_once(' ')) {
            version = Version::parse(v);
            node_dirs.push(PathBuf::from(dir));
        } else if let Some(ms) = line.strip_prefix("alive ").and_then(|m| m.parse().ok()) {
            deadline = Some(Instant::now() + Duration::from_millis(ms));
        } else if let Some(g) = line.strip_prefix('+').and_then(|g| g.parse().ok()) {
            groups.insert(g);
        } else if let Some(g) = line.strip_prefix('-').and_then(|g| g.parse::<i32>().ok()) {
            groups.remove(&g);
        }
    }
    kill_groups(&groups);
    if let Some(version) = version {
        CgroupManager::adopt(version, node_dirs).remove_stale();
    }
    std::process::exit(0);
}

fn kill_groups(groups: &BTreeSet<i32>) {
    for g in groups {
        let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
    }
}

/// The agent's lines, read on a thread of their own so that silence can be timed; the
/// channel disconnects at EOF.
fn read_lines() -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
