//! `ytsched up`: a local lab of real processes — nats-server with JetStream, the
//! scheduler, and N node agents — stopped cleanly (no stray process, cgroup or
//! sandbox) on Ctrl-C.

use crate::auth::AuthDir;
use anyhow::{bail, Context};
use clap::Args;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ytsched_common::api::ListNodes;
use ytsched_common::identity::{Caller, Role, UserName};
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::{call, connect, ConnectAuth, TlsFiles};

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Number of node agents.
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Per-node settings, in node order, e.g. 'cpu=4,memory=8G,gpu=0,user_slots=10,tags=ssd:fast'.
    #[arg(long = "node")]
    pub node: Vec<String>,
    /// Tag given to every node (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// NATS port (default: a free one).
    #[arg(long)]
    pub nats_port: Option<u16>,
    /// Lab directory for logs, the JetStream store and sandboxes (default: a fresh temporary one, removed on exit).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Kill grace period given to agents.
    #[arg(long, default_value = "5s")]
    pub kill_grace: String,
    /// Run SPEC scenario 1 (`sleep 60; cat`), print its output, and stop the lab.
    #[arg(long)]
    pub demo: bool,
    /// Encrypt the bus: a private CA, a server certificate and mutual TLS for every
    /// component.
    #[arg(long)]
    pub tls: bool,
    /// Run without authentication (anyone who reaches the loopback port controls the
    /// lab); the default generates credentials in the lab directory.
    #[arg(long)]
    pub insecure: bool,
    /// Command the demo runs.
    #[arg(long, default_value = "sleep 60; cat", hide = true)]
    pub demo_command: String,
    /// Port of the web UI on 127.0.0.1 (0: any free port; the URL is printed).
    #[arg(long, default_value_t = 0)]
    pub http_port: u16,
    /// Do not start the web UI.
    #[arg(long)]
    pub no_http: bool,
}

/// Settings of one agent parsed from `--node`: its flags, and its id if given (the id is
/// also its identity's name, so it is kept apart).
fn node_flags(spec: &str) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let mut flags = Vec::new();
    let mut id = None;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .with_context(|| format!("--node '{spec}': '{part}' is not key=value"))?;
        match key {
            "cpu" | "memory" | "gpu" | "user_slots" => {
                flags.push(format!("--{}", key.replace('_', "-")));
                flags.push(value.to_string());
            }
            "tags" => {
                for t in value.split(':').filter(|t| !t.is_empty()) {
                    flags.push("--tag".into());
                    flags.push(t.to_string());
                }
            }
            "id" => id = Some(value.to_string()),
            other => bail!("--node '{spec}': unknown setting '{other}' (cpu, memory, gpu, user_slots, tags, id)"),
        }
    }
    Ok((flags, id))
}

/// Finds nats-server: $YTSCHED_NATS_SERVER, the repository's .tools/bin, then PATH.
pub fn find_nats_server() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("YTSCHED_NATS_SERVER") {
        return Ok(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(4) {
            let candidate = dir.join(".tools/bin/nats-server");
            if candidate.exists() {
                return Ok(candidate);
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("nats-server");
            if candidate.exists() {
                return Ok(candidate);
            }
        }
    }
    bail!("nats-server not found: run scripts/install-deps.sh, or set YTSCHED_NATS_SERVER")
}

fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found next to {}; build the workspace (cargo build --workspace)",
            name,
            exe.display()
        );
    }
    Ok(path)
}

struct Lab {
    dir: PathBuf,
    remove_dir: bool,
    children: Vec<(String, Child)>,
}

impl Lab {
    fn spawn(&mut self, name: &str, cmd: &mut Command) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        self.children.push((name.to_string(), child));
        Ok(())
    }

    /// Agents first (they kill and clean up their jobs), then the scheduler, then NATS.
    fn stop(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read_ports_file(dir: &Path, timeout: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                        if let Some(url) = v["nats"][0].as_str() {
                            return Ok(url.to_string());
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("nats-server did not report its port within {timeout:?} (see nats.log)")
}

/// Where the lab's identities and TLS files are, and how each component connects.
struct LabSecurity {
    auth: Option<AuthDir>,
    tls_dir: Option<PathBuf>,
}

impl LabSecurity {
    fn creds(&self, name: &str) -> Option<PathBuf> {
        let auth = self.auth.as_ref()?;
        Some(auth.creds_path(&UserName::parse(name).expect("lab names are valid")))
    }

    fn tls(&self) -> TlsFiles {
        self.tls_dir
            .as_deref()
            .map(crate::tls::client_files)
            .unwrap_or_default()
    }

    /// Flags for a component connecting as `name` (`--insecure` on an insecure lab).
    fn flags(&self, name: &str) -> Vec<std::ffi::OsString> {
        let mut out: Vec<std::ffi::OsString> = match self.creds(name) {
            Some(path) => vec!["--creds".into(), path.into()],
            None => vec!["--insecure".into()],
        };
        out.extend(self.tls().to_flags());
        out
    }

    fn connect_auth(&self, name: &str) -> anyhow::Result<ConnectAuth> {
        Ok(
            ConnectAuth::from_flags(self.creds(name).as_deref(), self.tls())?
                .anonymous_as(ytsched_common::identity::Role::User, name),
        )
    }

    /// nats.conf: the identities' permissions and, with TLS, mutual TLS.
    fn nats_conf(&self) -> String {
        let mut conf = String::new();
        if self.auth.is_some() {
            conf.push_str("include \"auth/auth.conf\"\n");
        }
        if let Some(dir) = &self.tls_dir {
            conf.push_str(&crate::tls::server_conf(dir));
        }
        conf
    }
}

/// Slot uids of lab agent `i`: 256 per agent, 4,096 per lab, labs apart by process.
fn lab_slot_uid_base(i: usize) -> u32 {
    100_000 + (std::process::id() % 16_384) * 4_096 + (i as u32 % 16) * 256
}

/// The name of lab agent `i` (0-based) when `--node` gives none: its node id and its
/// identity.
fn lab_node_name(i: usize) -> String {
    format!("lab-node-{}", i + 1)
}

pub async fn up(args: UpArgs, subjects: &Subjects, tls: TlsFiles) -> anyhow::Result<()> {
    if tls.ca.is_some() {
        bail!("ytsched up makes its own TLS files with --tls; --tls-ca is for connecting to a running lab");
    }
    let agents = lab_agents(&args)?;
    let (dir, remove_dir) = match &args.work_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("ytsched-lab-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(dir.join("ports"))?;
    let mut lab = Lab {
        dir: dir.clone(),
        remove_dir,
        children: vec![],
    };
    let admin = UserName::parse("admin")?;
    let (security, web_token) = lab_security(&args, &dir, subjects, &admin, &agents)?;
    let url = start_nats(&mut lab, args.nats_port)?;
    let prefix = subjects.prefix().to_string();
    let http = if args.no_http {
        None
    } else {
        // A free port now; the scheduler binds it a moment later.
        let listener = std::net::TcpListener::bind(("127.0.0.1", args.http_port))
            .with_context(|| format!("web UI port {}", args.http_port))?;
        Some(listener.local_addr()?)
    };
    let mut scheduler = Command::new(sibling_binary("ytsched-scheduler")?);
    scheduler
        .args(["--nats", &url, "--subject-prefix", &prefix])
        .args(security.flags("scheduler"));
    if let Some(auth) = &security.auth {
        scheduler.arg("--node-approvals").arg(auth.approvals_path());
    }
    if let Some(addr) = http {
        scheduler.args(["--http", &addr.to_string()]);
    }
    lab.spawn("scheduler", &mut scheduler)?;
    start_agents(&mut lab, &args, &url, &prefix, &security, &agents)?;

    let client = connect(&url, "ytsched up", false, &security.connect_auth("admin")?).await?;
    // On an insecure lab the bus vouches for no one: the lab acts as its admin anyway.
    let caller = Caller {
        user: admin.clone(),
        admin: true,
    };
    wait_until_online(&client, subjects, &caller, args.nodes, &dir).await?;
    print_connection(&url, &security, &admin, http, web_token.as_deref());
    eprintln!(
        "lab ready: {} node(s), logs in {}; Ctrl-C stops it",
        args.nodes,
        dir.display()
    );

    if args.demo {
        let result = demo(&client, subjects, &caller, &args.demo_command).await;
        lab.stop();
        return result;
    }
    wait_for_stop_signal().await;
    eprintln!("stopping the lab");
    lab.stop();
    Ok(())
}

/// Each agent's name and extra flags (from `--node`), checked before anything starts.
fn lab_agents(args: &UpArgs) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    if args.node.len() > args.nodes {
        bail!(
            "{} --node settings given for --nodes {}",
            args.node.len(),
            args.nodes
        );
    }
    let mut agents = Vec::with_capacity(args.nodes);
    for i in 0..args.nodes {
        let (flags, id) = match args.node.get(i) {
            Some(spec) => node_flags(spec)?,
            None => (vec![], None),
        };
        let name = id.unwrap_or_else(|| lab_node_name(i));
        UserName::parse(&name).map_err(|e| anyhow::anyhow!("--node id: {e}"))?;
        agents.push((name, flags));
    }
    Ok(agents)
}

/// The lab's identities (the admin's web token among them) unless `--insecure`, its
/// TLS files with `--tls`, and the nats-server configuration that follows from them.
fn lab_security(
    args: &UpArgs,
    dir: &Path,
    subjects: &Subjects,
    admin: &UserName,
    agents: &[(String, Vec<String>)],
) -> anyhow::Result<(LabSecurity, Option<String>)> {
    let (auth, web_token) = if args.insecure {
        eprintln!("warning: --insecure: the lab's bus is unauthenticated; anyone who can reach 127.0.0.1 controls it");
        (None, None)
    } else {
        let mut auth = AuthDir::init(&dir.join("auth"), subjects.prefix(), admin)?;
        for (name, _) in agents {
            auth.add(UserName::parse(name)?, Role::Node)?;
        }
        // The admin's web token, in the URL printed at the end: opening it signs the
        // browser in.
        let token = auth.new_http_token(admin)?;
        (Some(auth), Some(token))
    };
    let tls_dir = args.tls.then(|| dir.join("tls"));
    if let Some(tls_dir) = &tls_dir {
        crate::tls::make_ca_and_server_cert(
            tls_dir,
            &["localhost".to_string(), "127.0.0.1".to_string()],
        )?;
    }
    let security = LabSecurity { auth, tls_dir };
    std::fs::create_dir_all(dir.join("auth"))?;
    std::fs::write(dir.join("nats.conf"), security.nats_conf())?;
    Ok((security, web_token))
}

/// Starts nats-server with JetStream on `port` (any free one by default); its URL.
fn start_nats(lab: &mut Lab, port: Option<u16>) -> anyhow::Result<String> {
    let dir = lab.dir.clone();
    let nats_server = find_nats_server()?;
    let port = port.map(|p| p.to_string()).unwrap_or_else(|| "-1".into());
    lab.spawn(
        "nats",
        Command::new(&nats_server)
            .arg("-c")
            .arg(dir.join("nats.conf"))
            .args(["-a", "127.0.0.1", "-p", &port, "-js", "-sd"])
            .arg(dir.join("jetstream"))
            .arg("--ports_file_dir")
            .arg(dir.join("ports"))
            .arg("-P")
            .arg(dir.join("auth/nats.pid")),
    )?;
    // The ports file says nats:// even with TLS on; clients require TLS by their flags.
    read_ports_file(&dir.join("ports"), Duration::from_secs(10))
}

/// One agent per entry of `agents`, each with a work directory, job cgroups and slot
/// uids of its own.
fn start_agents(
    lab: &mut Lab,
    args: &UpArgs,
    url: &str,
    prefix: &str,
    security: &LabSecurity,
    agents: &[(String, Vec<String>)],
) -> anyhow::Result<()> {
    let is_root = nix::unistd::geteuid().is_root();
    if !is_root {
        eprintln!("warning: not root, so agents run jobs with --sandbox=process (no resource enforcement)");
    }
    let node_bin = sibling_binary("ytsched-node")?;
    for (i, (node_name, flags)) in agents.iter().enumerate() {
        let name = format!("node-{}", i + 1);
        let mut cmd = Command::new(&node_bin);
        cmd.args([
            "--nats",
            url,
            "--subject-prefix",
            prefix,
            "--node-id",
            node_name,
        ])
        .args(security.flags(node_name))
        .arg("--work-dir")
        .arg(lab.dir.join(&name))
        .args([
            "--cgroup-root",
            &format!("ytsched-lab-{}", std::process::id()),
        ])
        .args(["--kill-grace", &args.kill_grace]);
        // Each agent of a lab runs jobs as uids of its own (the agents refuse to share),
        // and labs of different runs apart too.
        if !flags.iter().any(|f| f == "--slot-uid-base") {
            cmd.args(["--slot-uid-base", &lab_slot_uid_base(i).to_string()]);
        }
        if !is_root {
            cmd.arg("--sandbox=process");
        }
        for t in &args.tags {
            cmd.args(["--tag", t]);
        }
        cmd.args(flags);
        lab.spawn(&name, &mut cmd)?;
    }
    Ok(())
}

/// Waits up to 30 s for `nodes` agents to be online.
async fn wait_until_online(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    nodes: usize,
    dir: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let online = call(client, subjects, user, ListNodes {})
            .await
            .map(|n| n.iter().filter(|n| n.state == "online").count())
            .unwrap_or(0);
        if online >= nodes {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {online} of {nodes} nodes came online within 30 s; logs are in {}",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The KEY=value lines a shell or script takes to reach the lab.
fn print_connection(
    url: &str,
    security: &LabSecurity,
    admin: &UserName,
    http: Option<std::net::SocketAddr>,
    web_token: Option<&str>,
) {
    println!("YTSCHED_NATS={url}");
    if let Some(auth) = &security.auth {
        println!("YTSCHED_CREDS={}", auth.creds_path(admin).display());
    }
    if security.tls_dir.is_some() {
        let tls = security.tls();
        for (var, path) in [
            ("YTSCHED_TLS_CA", tls.ca),
            ("YTSCHED_TLS_CERT", tls.cert),
            ("YTSCHED_TLS_KEY", tls.key),
        ] {
            println!("{var}={}", path.unwrap_or_default().display());
        }
    }
    if let Some(addr) = http {
        // Last of the KEY=value lines, so scripts reading the others are not disturbed.
        // The token rides in the fragment, which browsers never send; the page keeps it
        // and takes it out of the address bar.
        match web_token {
            Some(t) => println!("YTSCHED_WEB_UI=http://{addr}/#token={t}"),
            None => println!("YTSCHED_WEB_UI=http://{addr}/"),
        }
    }
}

async fn demo(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    command: &str,
) -> anyhow::Result<()> {
    use crate::run_vanilla::{build_spec, check, follow, submit, RunVanillaArgs};
    let args = RunVanillaArgs {
        command: Some(command.to_string()),
        job_count: Some(1),
        stdin: Some(
            "hello from a ytsched job
"
            .into(),
        ),
        title: Some("demo: scenario 1".into()),
        ..Default::default()
    };
    eprintln!("demo: run-vanilla --command '{command}' (stdin: 'hello from a ytsched job')");
    let id = submit(client, subjects, user, build_spec(&args)?).await?;
    let info = follow(client, subjects, user, &id).await?;
    check(&info)?;
    let jobs = call(
        client,
        subjects,
        user,
        ytsched_common::api::ListJobs {
            operation_id: id.clone(),
            limit: None,
            cursor: None,
            state: None,
        },
    )
    .await?;
    // The demo's few jobs fit the first page.
    for j in jobs.jobs {
        let out = call(
            client,
            subjects,
            user,
            ytsched_common::api::GetJobOutput {
                operation_id: id.clone(),
                job_id: j.id.clone(),
                stream: ytsched_common::api::OutputStream::Stdout,
            },
        )
        .await?;
        println!("job {} ({}) stdout:\n{out}", j.id, j.state);
    }
    Ok(())
}

async fn wait_for_stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_settings_become_agent_flags() {
        let (f, id) = node_flags("cpu=4,memory=8G,tags=ssd:fast,id=gpu1").unwrap();
        assert_eq!(
            f,
            vec!["--cpu", "4", "--memory", "8G", "--tag", "ssd", "--tag", "fast"]
        );
        assert_eq!(id.as_deref(), Some("gpu1"));
        assert!(node_flags("disk=1")
            .unwrap_err()
            .to_string()
            .contains("disk"));
        assert!(node_flags("cpu").is_err());
    }
}
