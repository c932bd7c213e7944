//! The compose lab a fault campaign runs on (compose.yaml with chaos.yaml over it), and
//! the few Docker verbs the faults are made of. Every command has a time limit: a fault
//! must never hang the driver that is meant to heal it.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The services a campaign acts on.
pub const SCHEDULERS: [&str; 2] = ["scheduler", "scheduler2"];
pub const AGENTS: [&str; 3] = ["node1", "node2", "node3"];

/// One lab, named by its compose project.
pub struct ChaosLab {
    pub project: String,
    repo: PathBuf,
    cli: PathBuf,
    pub nats_port: u16,
    /// The web face's published port (chosen once: compose reads it on every command).
    http_port: u16,
    pub auth_dir: PathBuf,
    pub ledger_dir: PathBuf,
}

/// Runs `cmd`, killed after `limit`; its stdout, or an error naming it with its stderr.
pub fn run_with_limit(cmd: &mut Command, limit: Duration) -> Result<String> {
    let shown = format!("{cmd:?}");
    let mut limited = Command::new("timeout");
    limited
        .arg("-s")
        .arg("KILL")
        .arg(format!("{}", limit.as_secs_f64()))
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .stdin(Stdio::null());
    if let Some(dir) = cmd.get_current_dir() {
        limited.current_dir(dir);
    }
    let out = limited
        .output()
        .with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl ChaosLab {
    /// A lab not started yet; `work` holds its identities and ledger.
    pub fn new(repo: &Path, profile: &str, work: &Path) -> Result<ChaosLab> {
        let project = format!("ytsched-chaos-{}", std::process::id());
        let ledger_dir = work.join("ledger");
        std::fs::create_dir_all(&ledger_dir)?;
        // Jobs run as slot users: the ledger must be theirs to append to.
        let ledger = ledger_dir.join("ledger.log");
        std::fs::write(&ledger, "")?;
        for (path, mode) in [(&ledger_dir, 0o1777), (&ledger, 0o666)] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(ChaosLab {
            project,
            repo: repo.to_path_buf(),
            cli: repo.join("target").join(profile).join("ytsched"),
            nats_port: crate::free_port()?,
            http_port: crate::free_port()?,
            auth_dir: work.join("auth"),
            ledger_dir,
        })
    }

    /// `docker-compose` (or `docker compose`) on this lab's project and files.
    pub fn compose(&self, args: &[&str], limit: Duration) -> Result<String> {
        let mut cmd = if which("docker-compose") {
            Command::new("docker-compose")
        } else {
            let mut c = Command::new("docker");
            c.arg("compose");
            c
        };
        cmd.current_dir(&self.repo)
            .args(["-p", &self.project, "-f", "compose/compose.yaml"])
            .args(["-f", "compose/chaos.yaml"])
            .args(args)
            .env("YTSCHED_LAB_NATS_PORT", self.nats_port.to_string())
            .env("YTSCHED_LAB_HTTP_PORT", self.http_port.to_string())
            .env("YTSCHED_LAB_CGROUP_ROOT", &self.project)
            .env("YTSCHED_LAB_AUTH_DIR", &self.auth_dir)
            .env("YTSCHED_CHAOS_LEDGER", &self.ledger_dir);
        run_with_limit(&mut cmd, limit)
    }

    pub fn docker(&self, args: &[&str]) -> Result<String> {
        run_with_limit(Command::new("docker").args(args), Duration::from_secs(60))
    }

    /// The container of `service`, stopped or not.
    pub fn container(&self, service: &str) -> Result<String> {
        let id = self.compose(&["ps", "-a", "-q", service], Duration::from_secs(60))?;
        match id.split_whitespace().next() {
            Some(id) => Ok(id.to_string()),
            None => bail!("the lab has no container for {service}"),
        }
    }

    /// The network every service of the lab is on.
    pub fn network(&self) -> String {
        format!("{}_default", self.project)
    }

    /// The host pid of a running service's first process (to enter its namespaces).
    pub fn pid(&self, service: &str) -> Result<u32> {
        let id = self.container(service)?;
        let pid = self.docker(&["inspect", "-f", "{{.State.Pid}}", &id])?;
        pid.trim()
            .parse()
            .with_context(|| format!("pid of {service}: {pid:?}"))
    }

    /// The scheduler holding the leader lease now: of the running ones, the one that
    /// acquired it last, by its log.
    pub fn leader(&self) -> Option<&'static str> {
        let mut best: Option<(String, &'static str)> = None;
        for s in SCHEDULERS {
            let Ok(id) = self.container(s) else { continue };
            let running = self.docker(&["inspect", "-f", "{{.State.Running}}", &id]);
            if running.map(|r| r.trim() != "true").unwrap_or(true) {
                continue;
            }
            let Ok(log) = self.logs(&id) else { continue };
            let acquired = log
                .lines()
                .rev()
                .find(|l| l.contains("leader lease acquired") || l.contains("re-acquired it"));
            if let Some(at) = acquired.and_then(|l| l.split_whitespace().next()) {
                if best.as_ref().map(|(t, _)| at > t.as_str()).unwrap_or(true) {
                    best = Some((at.to_string(), s));
                }
            }
        }
        best.map(|(_, s)| s)
    }

    /// Starts again each scheduler that has stopped, as the packaged unit's
    /// `Restart=on-failure` does on a real machine: a leader that lost its lease exits
    /// and comes back as the standby. (Docker's own restart policy stops restarting a
    /// container once it has been `docker kill`ed, whatever the signal.)
    pub fn start_stopped_schedulers(&self) {
        for s in SCHEDULERS {
            let Ok(id) = self.container(s) else { continue };
            let running = self.docker(&["inspect", "-f", "{{.State.Running}}", &id]);
            if running.map(|r| r.trim() == "false").unwrap_or(false) {
                let _ = self.docker(&["start", &id]);
            }
        }
    }

    /// A container's log, stdout and stderr, each line stamped.
    fn logs(&self, id: &str) -> Result<String> {
        let out = Command::new("timeout")
            .args(["30", "docker", "logs", "--timestamps", id])
            .stdin(Stdio::null())
            .output()?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        Ok(lines.join("\n"))
    }

    /// Every service's log into `dir` (`<service>.log`), so that a failing run's
    /// evidence outlives its lab: what the scheduler, the agents and the NATS servers
    /// said is what explains a stall the invariants only time.
    pub fn save_logs(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let nats = ["nats1", "nats2", "nats3"];
        for service in SCHEDULERS.iter().chain(&AGENTS).chain(&nats) {
            let Ok(id) = self.container(service) else {
                continue;
            };
            std::fs::write(dir.join(format!("{service}.log")), self.logs(&id)?)?;
        }
        Ok(())
    }

    /// The `ytsched` CLI as the lab's admin.
    pub fn cli(&self, args: &[&str], limit: Duration) -> Result<String> {
        let nats = format!("nats://127.0.0.1:{}", self.nats_port);
        let creds = self.auth_dir.join("admin.creds");
        let mut cmd = Command::new(&self.cli);
        cmd.args(["--nats", &nats, "--creds"])
            .arg(&creds)
            .args(["--format", "json"])
            .args(args);
        run_with_limit(&mut cmd, limit)
    }

    /// Nodes the scheduler calls online.
    pub fn online_nodes(&self) -> usize {
        let Ok(out) = self.cli(&["list-nodes"], Duration::from_secs(20)) else {
            return 0;
        };
        let nodes: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap_or_default();
        nodes.iter().filter(|n| n["state"] == "online").count()
    }

    /// Everything the ledger's jobs wrote.
    pub fn ledger_text(&self) -> Result<String> {
        Ok(std::fs::read_to_string(self.ledger_dir.join("ledger.log"))?)
    }

    /// Brings the lab up and waits for both schedulers and all agents.
    pub fn up(&self) -> Result<()> {
        self.compose(&["up", "-d"], Duration::from_secs(300))?;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while self.online_nodes() < AGENTS.len() || self.leader().is_none() {
            if std::time::Instant::now() > deadline {
                bail!("the lab did not come up: 3 online nodes and a leader within 120 s");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }

    /// Tears the lab down, with its volumes and the job cgroups its agents made.
    pub fn down(&self) {
        let _ = self.compose(
            &["down", "-v", "--remove-orphans"],
            Duration::from_secs(180),
        );
        for root in [
            "/sys/fs/cgroup",
            "/sys/fs/cgroup/cpu",
            "/sys/fs/cgroup/memory",
        ] {
            let dir = Path::new(root).join(&self.project);
            if dir.is_dir() {
                let _ = Command::new("find")
                    .arg(&dir)
                    .args(["-depth", "-type", "d", "-exec", "rmdir", "{}", "+"])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Whether `program` is on the PATH.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}
