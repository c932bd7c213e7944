//! A lab of real processes for end-to-end tests and load tools: nats-server with
//! JetStream on a free loopback port, the scheduler, node agents, and the `ytsched` CLI.
//! Every process is started in its own process group and killed by PID on drop.

pub mod chaos;
pub mod idle_http;
mod uid_block;

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static LAB_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Where job cgroups can be, on v2 and on the usual v1 layouts.
const CGROUP_MOUNTS: [&str; 6] = [
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/memory",
    "/sys/fs/cgroup/cpu",
    "/sys/fs/cgroup/pids",
    "/sys/fs/cgroup/cpuacct",
    "/sys/fs/cgroup/cpu,cpuacct",
];

/// `target/<profile>`, where cargo put the workspace binaries.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    if dir.ends_with("deps") {
        dir.parent().expect("profile dir").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

pub fn binary(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

pub fn nats_server() -> PathBuf {
    if let Ok(p) = std::env::var("YTSCHED_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/bin/nats-server");
    if repo.exists() {
        return repo;
    }
    PathBuf::from("nats-server")
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// One agent's flags beyond the lab's own.
#[derive(Clone, Debug, Default)]
pub struct NodeOpts {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl NodeOpts {
    pub fn args(args: &[&str]) -> Self {
        Self {
            args: args.iter().map(|s| s.to_string()).collect(),
            env: vec![],
        }
    }

    /// A 2-cpu, 4 GiB agent that sees no GPU whatever the machine has.
    pub fn two_cpus() -> Self {
        Self::args(&[
            "--cpu",
            "2",
            "--memory",
            "4G",
            "--nvidia-smi",
            "/nonexistent",
        ])
    }
}

pub struct Lab {
    pub dir: tempfile::TempDir,
    pub nats_url: String,
    pub prefix: String,
    /// First slot uid of this lab's agents (256 each).
    pub slot_uid_base: u32,
    /// Where `job_dir`s go: outside `/tmp`, which jobs see as their own.
    shared: tempfile::TempDir,
    pub cgroup_root: String,
    nats: Option<Child>,
    /// The NATS port, kept so that a restarted server comes back where clients look.
    nats_port: u16,
    /// The servers of a NATS cluster (`start_cluster`), instead of `nats`.
    cluster: Vec<ClusterServer>,
    /// Schedulers in start order; more than one is a leader and its standbys.
    schedulers: Vec<Option<Child>>,
    nodes: Vec<Option<Child>>,
    node_opts: Vec<NodeOpts>,
    scheduler_args: Vec<String>,
    /// Held until the lab's agents are gone (fields drop after `Drop::drop`).
    _uid_block: uid_block::UidBlock,
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Ok(cmd
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .process_group(0)
        .spawn()?)
}

/// nats-server with JetStream, its store in `dir/js`, on `port` (`-1`: any free port,
/// written to `dir/ports`), with the identities of `dir/auth` (reloaded by
/// `ytsched auth` through `dir/auth/nats.pid`).
fn spawn_nats(dir: &Path, port: &str) -> anyhow::Result<Child> {
    spawn_logged(
        Command::new(nats_server())
            .arg("-c")
            .arg(dir.join("nats.conf"))
            .args(["-a", "127.0.0.1", "-p", port, "-js", "-sd"])
            .arg(dir.join("js"))
            .arg("--ports_file_dir")
            .arg(dir.join("ports"))
            .arg("-P")
            .arg(dir.join("auth/nats.pid")),
        &dir.join("nats.log"),
    )
    .context("cannot start nats-server (run scripts/install-deps.sh)")
}

/// Makes `dir/auth` (scheduler and admin identities for subjects under `prefix`) and a
/// `dir/nats.conf` that includes its permissions.
fn init_auth(dir: &Path, prefix: &str) -> anyhow::Result<()> {
    let auth_dir = dir.join("auth");
    run_auth(&[
        "--subject-prefix",
        prefix,
        "auth",
        "init",
        path_str(&auth_dir)?,
    ])?;
    std::fs::write(dir.join("nats.conf"), "include \"auth/auth.conf\"\n")?;
    // The admin's web token, made before the scheduler starts so that it knows it at once.
    let token = run_auth(&["auth", "token", "admin", "--dir", path_str(&auth_dir)?])?;
    std::fs::write(auth_dir.join(ADMIN_WEB_TOKEN), token.trim())?;
    Ok(())
}

/// Where a lab keeps its admin's web token (a test's file, not one `ytsched` makes).
const ADMIN_WEB_TOKEN: &str = "admin.web-token";

/// Runs `ytsched ARGS` (an `auth` command), failing with its stderr; its stdout.
fn run_auth(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(binary("ytsched")).args(args).output()?;
    if !out.status.success() {
        bail!("ytsched {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

fn stop_child(child: &mut Child, signal: nix::sys::signal::Signal, wait: Duration) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal);
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One server of a lab's NATS cluster: how to start it again, and its ports.
struct ClusterServer {
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
    port: u16,
    monitor_port: u16,
}

impl ClusterServer {
    /// Starts (or starts again) the server with its store.
    fn spawn(&mut self) -> anyhow::Result<()> {
        self.child = Some(spawn_logged(
            Command::new(nats_server()).args(&self.args),
            &self.log,
        )?);
        Ok(())
    }

    /// `Some` when its monitoring port says JetStream is healthy (a meta leader elected,
    /// its streams current).
    fn jetstream_healthy(&self) -> Option<()> {
        let health = http_get(self.monitor_port, "/healthz").ok()?;
        let health: serde_json::Value = serde_json::from_str(&health).ok()?;
        (health["status"] == "ok").then_some(())
    }

    /// `Some` when it has routes to both other servers (routes are pooled, several per
    /// peer: the peers are counted).
    fn routed_to_both(&self) -> Option<()> {
        let routes = http_get(self.monitor_port, "/routez").ok()?;
        let v: serde_json::Value = serde_json::from_str(&routes).ok()?;
        let peers: std::collections::BTreeSet<&str> = v["routes"]
            .as_array()?
            .iter()
            .filter_map(|r| r["remote_id"].as_str())
            .collect();
        (peers.len() == 2).then_some(())
    }
}

/// A free loopback port (bound once to learn it, then released for a server to take).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// An HTTP/1.0 GET to `addr` (`host:port`) with a web token if given: (status, body).
/// HTTP/1.0, so that no server answers in chunks and the connection closes after.
pub fn http_request(addr: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    let (status, _, body) = http_call(addr, "GET", path, &headers, b"")?;
    Ok((status, body))
}

/// The flags every headless Chromium of the web UI tests runs with.
pub const HEADLESS_CHROMIUM: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
];

/// The browser of the web UI tests: `$YTSCHED_CHROMIUM`, else Debian's `chromium`
/// (scripts/install-deps.sh installs it); `None` where there is none.
pub fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("YTSCHED_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// An HTTP/1.0 request with any method, headers and body: (status, the answer's header
/// lines, body).
pub fn http_call(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> anyhow::Result<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes())?;
    s.write_all(body)?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP answer: {raw:?}"))?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    Ok((status, head.to_string(), body.to_string()))
}

/// The body of an HTTP GET to a loopback port (nats-server's monitoring endpoints).
pub fn http_get(port: u16, path: &str) -> anyhow::Result<String> {
    Ok(http_request(&format!("127.0.0.1:{port}"), path, None)?.1)
}

impl Lab {
    /// A 3-server NATS cluster (routes, JetStream with KV at 3 replicas), the scheduler
    /// and one agent per entry of `nodes`; every process is given all three URLs.
    /// Identities are made before the servers start (a reload reaches only one server).
    pub fn start_cluster(scheduler_args: &[&str], nodes: Vec<NodeOpts>) -> anyhow::Result<Lab> {
        let mut lab = Lab::prepare(scheduler_args)?;
        let dir = &lab.dir;
        let node_names: Vec<String> = (0..nodes.len()).map(|i| lab.node_id(i)).collect();
        if !node_names.is_empty() {
            let auth_dir = dir.path().join("auth");
            let mut args = vec!["auth", "add-node", "--dir", path_str(&auth_dir)?];
            args.extend(node_names.iter().map(String::as_str));
            run_auth(&args)?;
        }
        let ports: Vec<(u16, u16, u16)> = (0..3)
            .map(|_| Ok((free_port()?, free_port()?, free_port()?)))
            .collect::<anyhow::Result<_>>()?;
        let mut cluster = vec![];
        for (i, &(port, cluster_port, monitor_port)) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, p)| format!("nats://127.0.0.1:{}", p.1))
                .collect();
            let args: Vec<String> = [
                "-c",
                path_str(&dir.path().join("nats.conf"))?,
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-m",
                &monitor_port.to_string(),
                "-js",
                "-sd",
                path_str(&dir.path().join(format!("js{i}")))?,
                "-n",
                &format!("s{i}"),
                "--cluster_name",
                "ytsched",
                "--cluster",
                &format!("nats://127.0.0.1:{cluster_port}"),
                "--routes",
                &routes.join(","),
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            let mut server = ClusterServer {
                child: None,
                args,
                log: dir.path().join(format!("nats{i}.log")),
                port,
                monitor_port,
            };
            server.spawn()?;
            cluster.push(server);
        }
        lab.nats_url = ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{}", p.0))
            .collect::<Vec<_>>()
            .join(",");
        lab.cluster = cluster;
        // JetStream serves once the cluster has a meta leader.
        for i in 0..3 {
            lab.wait_nats_server_ready(i)?;
        }
        lab.start_members(nodes)?;
        Ok(lab)
    }

    /// A lab directory with its identities (scheduler, admin) for a fresh subject
    /// prefix; no process runs yet.
    fn prepare(scheduler_args: &[&str]) -> anyhow::Result<Lab> {
        let dir = tempfile::Builder::new().prefix("ytsched-e2e-").tempdir()?;
        // Jobs run as slot users: they must pass through (not list) the lab directory to
        // reach their sandboxes. Secrets stay in auth/, which is 0700.
        set_mode(dir.path(), 0o711)?;
        let seq = LAB_SEQ.fetch_add(1, Ordering::SeqCst);
        // Agents of concurrent labs must not share slot uids (they refuse to).
        let uid_block = uid_block::UidBlock::reserve(seq)?;
        let prefix = format!("e2e{}x{}", std::process::id(), seq);
        init_auth(dir.path(), &prefix)?;
        Ok(Lab {
            nats_url: String::new(),
            prefix,
            // Named for the uid block, which no other lab on this host holds now: a name
            // from the pid could be another pid namespace's, whose jobs' cgroups an
            // agent starting here would remove as stale.
            cgroup_root: format!("ytsched-e2e-{}", uid_block.first()),
            shared: job_writable_dir(),
            slot_uid_base: uid_block.first(),
            _uid_block: uid_block,
            dir,
            nats: None,
            nats_port: 0,
            cluster: vec![],
            schedulers: vec![],
            nodes: vec![],
            node_opts: vec![],
            scheduler_args: scheduler_args.iter().map(|s| s.to_string()).collect(),
        })
    }

    /// With NATS up: the scheduler, then one agent per entry of `nodes`, registered.
    fn start_members(&mut self, nodes: Vec<NodeOpts>) -> anyhow::Result<()> {
        self.start_scheduler()?;
        for opts in nodes {
            self.add_node(opts)?;
        }
        self.wait_for_nodes(self.nodes.len()).map_err(|e| {
            let logs: String = (0..self.nodes.len())
                .map(|i| format!("--- node{i}:\n{}\n", self.node_log(i)))
                .collect();
            e.context(format!("{logs}--- scheduler:\n{}", self.scheduler_log()))
        })
    }

    /// Waits until cluster server `i` has routes to both others and reports JetStream
    /// healthy (a minute: on two cores, beside the other labs' clusters, 30 s was once
    /// not enough).
    fn wait_nats_server_ready(&self, i: usize) -> anyhow::Result<()> {
        let server = &self.cluster[i];
        wait_until(Duration::from_secs(60), || {
            server.routed_to_both()?;
            server.jetstream_healthy()
        })
        .with_context(|| format!("NATS cluster server {i} did not become ready"))
    }

    /// Waits until cluster server `i` reports JetStream healthy (a meta leader elected,
    /// its streams current), whatever its routes.
    pub fn wait_jetstream_healthy(&self, i: usize) -> anyhow::Result<()> {
        let server = &self.cluster[i];
        wait_until(Duration::from_secs(60), || server.jetstream_healthy())
            .with_context(|| format!("NATS cluster server {i} did not become healthy"))
    }

    /// Kills NATS cluster server `i` (SIGKILL: a machine lost), keeping its store.
    pub fn kill_nats_server(&mut self, i: usize) {
        if let Some(mut c) = self.cluster[i].child.take() {
            stop_child(
                &mut c,
                nix::sys::signal::Signal::SIGKILL,
                Duration::from_secs(5),
            );
        }
    }

    /// Starts NATS cluster server `i` again with its store, and waits until it has
    /// rejoined the cluster (both routes up, JetStream healthy).
    pub fn restart_nats_server(&mut self, i: usize) -> anyhow::Result<()> {
        self.cluster[i].spawn()?;
        self.wait_nats_server_ready(i)
    }

    /// Restarts several cluster servers at once (one alone could not route to a peer
    /// that is still down), then waits until each is ready.
    pub fn restart_nats_servers(&mut self, servers: &[usize]) -> anyhow::Result<()> {
        for &i in servers {
            self.cluster[i].spawn()?;
        }
        servers
            .iter()
            .try_for_each(|&i| self.wait_nats_server_ready(i))
    }

    /// Sends `signal` to NATS cluster server `i` (SIGSTOP: a server gone silent with its
    /// connections open, as when cut off; SIGCONT ends it).
    pub fn signal_nats_server(&self, i: usize, signal: nix::sys::signal::Signal) {
        if let Some(c) = &self.cluster[i].child {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal);
        }
    }

    /// The names of the clients connected to NATS cluster server `i` now.
    pub fn nats_server_clients(&self, i: usize) -> Vec<String> {
        let connz = http_get(self.cluster[i].monitor_port, "/connz").unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&connz).unwrap_or_default();
        v["connections"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The client port of NATS cluster server `i`.
    pub fn nats_server_port(&self, i: usize) -> u16 {
        self.cluster[i].port
    }

    /// nats-server and the scheduler, then one agent per entry of `nodes`.
    pub fn start(nodes: Vec<NodeOpts>) -> anyhow::Result<Lab> {
        Self::start_with(&[], nodes)
    }

    /// As `start`, with extra scheduler flags.
    pub fn start_with(scheduler_args: &[&str], nodes: Vec<NodeOpts>) -> anyhow::Result<Lab> {
        let mut lab = Lab::prepare(scheduler_args)?;
        let ports = lab.dir.path().join("ports");
        std::fs::create_dir_all(&ports)?;
        lab.nats = Some(spawn_nats(lab.dir.path(), "-1")?);
        lab.nats_url = wait_for_ports_file(&ports)?;
        lab.nats_port = lab
            .nats_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("nats URL without a port")?;
        lab.start_members(nodes)?;
        Ok(lab)
    }

    /// Starts one more scheduler (the first leads, later ones stand by); returns its index.
    pub fn start_scheduler(&mut self) -> anyhow::Result<usize> {
        let index = self.schedulers.len();
        self.schedulers.push(None);
        self.restart_scheduler(index)?;
        Ok(index)
    }

    /// (Re)starts scheduler `index`; its log goes on in `scheduler{index}.log`. One still
    /// running is killed first (SIGKILL, a crash): a restart never leaves the old one
    /// leading beside the new one, nor running after the lab.
    pub fn restart_scheduler(&mut self, index: usize) -> anyhow::Result<()> {
        if let Some(mut old) = self.schedulers[index].take() {
            stop_child(
                &mut old,
                nix::sys::signal::Signal::SIGKILL,
                Duration::from_secs(5),
            );
        }
        let child = spawn_logged(
            Command::new(binary("ytsched-scheduler"))
                .args(["--nats", &self.nats_url, "--subject-prefix", &self.prefix])
                .arg("--creds")
                .arg(self.creds("scheduler"))
                .arg("--node-approvals")
                .arg(self.dir.path().join("auth/node-approvals.json"))
                .args(
                    (!self
                        .scheduler_args
                        .iter()
                        .any(|a| a == "--node-heartbeat-timeout"))
                    .then_some(["--node-heartbeat-timeout", "5s"])
                    .into_iter()
                    .flatten(),
                )
                .args(&self.scheduler_args)
                .env(
                    "RUST_LOG",
                    std::env::var("YTSCHED_LAB_SCHEDULER_LOG").unwrap_or_else(|_| "info".into()),
                ),
            &self.scheduler_log_path(index),
        )?;
        self.schedulers[index] = Some(child);
        Ok(())
    }

    fn scheduler_log_path(&self, index: usize) -> PathBuf {
        match index {
            0 => self.dir.path().join("scheduler.log"),
            i => self.dir.path().join(format!("scheduler{i}.log")),
        }
    }

    /// Waits until scheduler `index` says it waits as a standby.
    pub fn wait_standby(&self, index: usize) -> anyhow::Result<()> {
        wait_until(Duration::from_secs(10), || {
            self.scheduler_log_of(index)
                .contains("standby")
                .then_some(())
        })
        .context("the scheduler waits as a standby")
    }

    pub fn scheduler_pid(&self, index: usize) -> Option<u32> {
        self.schedulers[index].as_ref().map(|c| c.id())
    }

    /// Stops scheduler `index` with `signal` (SIGKILL: a crash) and waits for it to go.
    pub fn kill_scheduler(&mut self, index: usize, signal: nix::sys::signal::Signal) {
        if let Some(mut c) = self.schedulers[index].take() {
            stop_child(&mut c, signal, Duration::from_secs(15));
        }
    }

    /// Whether scheduler `index` still runs (a leader that lost its lease exits).
    pub fn scheduler_running(&mut self, index: usize) -> bool {
        self.schedulers[index]
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops nats-server (SIGTERM, as an admin would) and keeps its store directory.
    pub fn stop_nats(&mut self) {
        if let Some(mut c) = self.nats.take() {
            stop_child(
                &mut c,
                nix::sys::signal::Signal::SIGTERM,
                Duration::from_secs(15),
            );
        }
    }

    /// Starts nats-server again on the same port with the same store directory.
    pub fn start_nats(&mut self) -> anyhow::Result<()> {
        let port = self.nats_port.to_string();
        self.nats = Some(spawn_nats(self.dir.path(), &port)?);
        wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", self.nats_port))
                .ok()
                .map(|_| ())
        })
        .context("nats-server did not come back")
    }

    pub fn node_id(&self, index: usize) -> String {
        format!("node{index}")
    }

    pub fn node_work_dir(&self, index: usize) -> PathBuf {
        self.dir.path().join(format!("node{index}"))
    }

    pub fn add_node(&mut self, opts: NodeOpts) -> anyhow::Result<usize> {
        let index = self.nodes.len();
        if !self.creds(&self.node_id(index)).exists() {
            self.auth(&["add-node", &self.node_id(index)])?;
        }
        self.node_opts.push(opts);
        self.nodes.push(None);
        self.restart_node(index)?;
        Ok(index)
    }

    /// Restarts agent `index` with other options (a machine upgraded, or lying).
    pub fn restart_node_with(&mut self, index: usize, opts: NodeOpts) -> anyhow::Result<()> {
        self.kill_node(index, nix::sys::signal::Signal::SIGTERM);
        self.node_opts[index] = opts;
        self.restart_node(index)
    }

    /// (Re)starts agent `index` with the options it was added with.
    pub fn restart_node(&mut self, index: usize) -> anyhow::Result<()> {
        let opts = self.node_opts[index].clone();
        let mut cmd = Command::new(binary("ytsched-node"));
        cmd.args(["--nats", &self.nats_url, "--subject-prefix", &self.prefix])
            .args(["--node-id", &self.node_id(index)])
            .arg("--creds")
            .arg(self.creds(&self.node_id(index)))
            .arg("--work-dir")
            .arg(self.node_work_dir(index))
            .args(["--cgroup-root", &self.cgroup_root])
            .args(["--kill-grace", "1s"])
            // The host is read-only to jobs but for this; tests' jobs leave what they
            // are checked by there (`job_writable_dir`).
            .args(["--job-writable-path", JOB_WRITABLE_ROOT])
            .args([
                "--slot-uid-base",
                &(self.slot_uid_base + index as u32 * 256).to_string(),
            ])
            .env("RUST_LOG", "info");
        if !is_root() {
            cmd.arg("--sandbox=process");
        }
        cmd.args(&opts.args);
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let child = spawn_logged(&mut cmd, &self.dir.path().join(format!("node{index}.log")))?;
        self.nodes[index] = Some(child);
        Ok(())
    }

    pub fn node_pid(&self, index: usize) -> Option<u32> {
        self.nodes[index].as_ref().map(|c| c.id())
    }

    pub fn kill_node(&mut self, index: usize, signal: nix::sys::signal::Signal) {
        if let Some(mut c) = self.nodes[index].take() {
            stop_child(&mut c, signal, Duration::from_secs(15));
        }
    }

    pub fn wait_for_nodes(&self, count: usize) -> anyhow::Result<()> {
        wait_until(Duration::from_secs(20), || {
            let nodes: Vec<serde_json::Value> = self.json(&["list-nodes"]).ok()?;
            (nodes.iter().filter(|n| n["state"] == "online").count() >= count).then_some(())
        })
        .with_context(|| {
            format!(
                "{count} nodes did not come online; logs in {}",
                self.dir.path().display()
            )
        })
    }

    /// A directory of the lab's that jobs (running as slot users, with private `/tmp`)
    /// may write into.
    pub fn job_dir(&self, name: &str) -> PathBuf {
        let dir = self.shared.path().join(name);
        std::fs::create_dir_all(&dir).expect("create job directory");
        set_mode(&dir, 0o1777).expect("chmod job directory");
        dir
    }

    /// The credentials file of identity `name` (`scheduler`, `admin`, nodes, users).
    pub fn creds(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("auth/{name}.creds"))
    }

    /// Runs `ytsched auth ARGS --dir <lab auth dir>` (nats-server reloads what changed).
    pub fn auth(&self, args: &[&str]) -> anyhow::Result<()> {
        let dir = self.dir.path().join("auth");
        let mut all = vec!["auth"];
        all.extend_from_slice(args);
        all.extend(["--dir", path_str(&dir)?]);
        run_auth(&all).map(|_| ())
    }

    /// Adds a user identity (an admin with `admin`) and returns its credentials file.
    pub fn add_user(&self, name: &str, admin: bool) -> anyhow::Result<PathBuf> {
        let mut args = vec!["add-user", name];
        if admin {
            args.push("--admin");
        }
        self.auth(&args)?;
        Ok(self.creds(name))
    }

    /// Runs the CLI against this lab as its first admin.
    pub fn ytsched(&self, args: &[&str]) -> Output {
        self.ytsched_as("admin", args)
    }

    /// Runs the CLI against this lab as identity `name`.
    pub fn ytsched_as(&self, name: &str, args: &[&str]) -> Output {
        Command::new(binary("ytsched"))
            .args(["--nats", &self.nats_url, "--subject-prefix", &self.prefix])
            .arg("--creds")
            .arg(self.creds(name))
            .args(args)
            .output()
            .expect("run ytsched")
    }

    /// A NATS client authenticated as identity `name`, for tests and load tools that
    /// speak the wire protocol themselves.
    pub async fn client_as(&self, name: &str) -> anyhow::Result<async_nats::Client> {
        let auth = ytsched_common::transport::ConnectAuth::from_flags(
            Some(&self.creds(name)),
            Default::default(),
        )?;
        Ok(ytsched_common::transport::connect(&self.nats_url, name, false, &auth).await?)
    }

    /// Runs the CLI and fails the test, with its stderr, if the command fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.ytsched(args);
        assert!(
            out.status.success(),
            "ytsched {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates pool `name` under the root of `tree`, as the admin, with no attributes.
    pub fn create_pool(&self, tree: &str, name: &str) {
        self.ok(&[
            "create",
            "scheduler_pool",
            "--name",
            name,
            "--pool-tree",
            tree,
        ]);
    }

    /// Runs the CLI with `--format json` and parses what it prints.
    pub fn json<T: DeserializeOwned>(&self, args: &[&str]) -> anyhow::Result<T> {
        let mut all = vec!["--format", "json"];
        all.extend_from_slice(args);
        let out = self.ytsched(&all);
        if !out.status.success() {
            bail!(
                "ytsched {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// Submits a spec file's text with `run-vanilla --async` and returns the id.
    pub fn submit_spec(&self, yaml: &str) -> anyhow::Result<String> {
        self.submit_spec_as("admin", yaml)
    }

    /// Submits a spec file's text as identity `who` and returns the id.
    pub fn submit_spec_as(&self, who: &str, yaml: &str) -> anyhow::Result<String> {
        let path = self.dir.path().join(format!(
            "spec-{}.yaml",
            LAB_SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&path, yaml)?;
        let out = self.ytsched_as(
            who,
            &["run-vanilla", "--async", "--spec", path.to_str().unwrap()],
        );
        if !out.status.success() {
            bail!("submit failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }

    pub fn operation(&self, id: &str) -> anyhow::Result<serde_json::Value> {
        self.json(&["get-operation", id])
    }

    pub fn jobs(&self, id: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        self.json(&["list-jobs", id])
    }

    /// Waits for the operation to reach a final state and returns it.
    pub fn wait_finished(&self, id: &str, timeout: Duration) -> anyhow::Result<serde_json::Value> {
        wait_until(timeout, || {
            let op = self.operation(id).ok()?;
            matches!(
                op["state"].as_str(),
                Some("completed" | "failed" | "aborted")
            )
            .then_some(op)
        })
        .with_context(|| {
            format!(
                "operation {id} did not finish; logs in {}",
                self.dir.path().display()
            )
        })
    }

    /// The first scheduler's log.
    pub fn scheduler_log(&self) -> String {
        self.scheduler_log_of(0)
    }

    pub fn scheduler_log_of(&self, index: usize) -> String {
        std::fs::read_to_string(self.scheduler_log_path(index)).unwrap_or_default()
    }

    pub fn node_log(&self, index: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node{index}.log")))
            .unwrap_or_default()
    }

    /// The admin's web token (`ytsched auth token admin`), made with the lab.
    pub fn web_token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("auth").join(ADMIN_WEB_TOKEN))
            .unwrap_or_default()
    }

    /// A new web token for identity `name` (`ytsched auth token`); the scheduler learns
    /// it within a few seconds.
    pub fn new_web_token(&self, name: &str) -> anyhow::Result<String> {
        let dir = self.dir.path().join("auth");
        Ok(
            run_auth(&["auth", "token", name, "--dir", path_str(&dir)?])?
                .trim()
                .to_string(),
        )
    }

    /// An HTTP GET of the scheduler's `path` as the lab's admin: (status, body).
    pub fn http_admin_get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        http_request(&self.http_addr()?, path, Some(&self.web_token()))
    }

    /// The `host:port` the scheduler (started with `--http 127.0.0.1:0`) serves HTTP
    /// on, from its log.
    pub fn http_addr(&self) -> anyhow::Result<String> {
        wait_until(Duration::from_secs(10), || {
            let log = self.scheduler_log();
            let line = log.lines().find(|l| l.contains("HTTP listening"))?;
            let addr = line.split("addr=").nth(1)?.split_whitespace().next()?;
            Some(addr.to_string())
        })
    }

    pub fn node_info(&self, index: usize) -> Option<serde_json::Value> {
        let nodes: Vec<serde_json::Value> = self.json(&["list-nodes"]).ok()?;
        let id = self.node_id(index);
        nodes.into_iter().find(|n| n["id"] == id.as_str())
    }

    /// Job cgroup directories of this lab in every mounted hierarchy.
    pub fn cgroup_dirs_of(&self, job_id: &str) -> Vec<PathBuf> {
        let mut out = vec![];
        for base in CGROUP_MOUNTS {
            let root = Path::new(base).join(&self.cgroup_root);
            if let Ok(nodes) = std::fs::read_dir(&root) {
                for n in nodes.flatten() {
                    let d = n.path().join(job_id);
                    if d.exists() {
                        out.push(d);
                    }
                }
            }
        }
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in self.nodes.iter_mut() {
            if let Some(c) = n.as_mut() {
                stop_child(
                    c,
                    nix::sys::signal::Signal::SIGTERM,
                    Duration::from_secs(15),
                );
            }
        }
        for c in self.schedulers.iter_mut().flatten() {
            stop_child(c, nix::sys::signal::Signal::SIGKILL, Duration::from_secs(5));
        }
        if let Some(c) = self.nats.as_mut() {
            stop_child(c, nix::sys::signal::Signal::SIGKILL, Duration::from_secs(5));
        }
        for c in self.cluster.iter_mut().filter_map(|s| s.child.as_mut()) {
            stop_child(c, nix::sys::signal::Signal::SIGKILL, Duration::from_secs(5));
        }
        // Whatever a killed agent left is removed by PID here, then the directories.
        for base in CGROUP_MOUNTS {
            remove_cgroup_tree(&Path::new(base).join(&self.cgroup_root));
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    for _ in 0..50 {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if std::fs::remove_dir(dir).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Where `job_writable_dir` makes its directories; the lab's agents leave it writable.
pub const JOB_WRITABLE_ROOT: &str = "/run/ytsched-tests";

/// A temporary directory jobs may write into (they run as slot users, not as the test).
/// Jobs have private `/tmp` and `/var/tmp` (their own mount namespace), so as root it
/// lies under `/run`, which they share with the host.
pub fn job_writable_dir() -> tempfile::TempDir {
    let shared = Path::new(JOB_WRITABLE_ROOT);
    let dir = if is_root() && std::fs::create_dir_all(shared).is_ok() {
        tempfile::tempdir_in(shared).expect("temporary directory")
    } else {
        tempfile::tempdir().expect("temporary directory")
    };
    set_mode(dir.path(), 0o1777).expect("chmod");
    dir
}

pub fn wait_for_ports_file(dir: &Path) -> anyhow::Result<String> {
    wait_until(Duration::from_secs(10), || {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let text = std::fs::read_to_string(e.path()).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            if let Some(url) = v["nats"][0].as_str() {
                return Some(url.to_string());
            }
        }
        None
    })
    .context("nats-server did not write its ports file")
}

pub fn wait_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// PIDs of processes whose `/proc/<pid>/<file>` (NULs read as spaces) contains `needle`.
fn pids_where(file: &str, needle: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
            let text = std::fs::read(e.path().join(file)).ok()?;
            String::from_utf8_lossy(&text)
                .replace('\0', " ")
                .contains(needle)
                .then_some(pid)
        })
        .collect()
}

/// PIDs of live processes whose cgroup path mentions `needle` (e.g. a job id).
pub fn pids_in_cgroup_matching(needle: &str) -> Vec<i32> {
    pids_where("cgroup", needle)
}

/// Waits until no process of job `job_id` is left (found by its cgroup: a job's own `$$`
/// is its PID namespace's, not the host's).
pub fn wait_job_processes_gone(job_id: &str, timeout: Duration) -> anyhow::Result<()> {
    wait_until(timeout, || {
        pids_in_cgroup_matching(job_id).is_empty().then_some(())
    })
    .with_context(|| format!("a process of job {job_id} is still alive"))
}

/// PIDs whose command line contains `needle`.
pub fn pids_with_cmdline(needle: &str) -> Vec<i32> {
    pids_where("cmdline", needle)
}

/// True if `pid` exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Writes an executable fake `nvidia-smi` into `dir` that prints one CSV line per GPU,
/// as the agent's fallback detection asks for (`index, uuid, name, memory.total`).
pub fn fake_nvidia_smi(dir: &Path, gpus: &[&str]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let smi = dir.join("nvidia-smi");
    let mut script = String::from("#!/bin/sh\n");
    for line in gpus {
        script.push_str(&format!("echo '{line}'\n"));
    }
    std::fs::write(&smi, script).expect("write fake nvidia-smi");
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755))
        .expect("make fake nvidia-smi executable");
    smi
}
