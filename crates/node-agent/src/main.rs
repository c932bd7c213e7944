use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use tracing::{info, warn};
use ytsched_common::identity::Role;
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::BusArgs;
use ytsched_common::units::{ByteSize, DurationMs};
use ytsched_common::NodeId;
use ytsched_node::agent::{Agent, AgentConfig};
use ytsched_node::cgroup::CgroupManager;
use ytsched_node::detect::{self, Overrides};
use ytsched_node::device_access::DeviceAccess;
use ytsched_node::guardian::{self, Guardian};
use ytsched_node::sandbox::{Isolation, SandboxConfig};
use ytsched_node::{gpu, tags};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SandboxKind {
    /// Each job in its own cgroup with cpu, memory and pids limits (needs root).
    Cgroup,
    /// Own process group only, no resource enforcement (development without root).
    Process,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum JobNamespaces {
    Auto,
    On,
    Off,
}

/// The ytsched node agent: runs jobs the scheduler assigns, in sandboxes.
#[derive(Parser, Debug)]
#[command(name = "ytsched-node", version)]
struct Args {
    /// NATS server URL(s), comma-separated for a NATS cluster.
    #[arg(long, env = "YTSCHED_NATS", default_value = "nats://127.0.0.1:4222")]
    nats: String,
    #[arg(long, default_value = ytsched_common::subjects::DEFAULT_PREFIX)]
    subject_prefix: String,
    /// Node id (default: the hostname, dots turned into '-').
    #[arg(long)]
    node_id: Option<String>,
    /// Configured tag (repeatable).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Cores offered to jobs (default: detected, honouring the agent's cgroup quota).
    #[arg(long)]
    cpu: Option<f64>,
    /// Memory offered to jobs, e.g. 8G (default: detected minus the reserve).
    #[arg(long)]
    memory: Option<ByteSize>,
    /// GPUs offered to jobs (default: detected).
    #[arg(long)]
    gpu: Option<u32>,
    /// Concurrent jobs (default: 2 × cpu, at least 1).
    #[arg(long)]
    user_slots: Option<u32>,
    /// Memory kept for the system (default: 1 GiB or 10 %, whichever is smaller).
    #[arg(long)]
    memory_reserve: Option<ByteSize>,
    /// Directory for job sandboxes (default: /tmp/ytsched-node/<node-id>).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Cgroup directory (relative to each hierarchy's mount) holding <node-id>/<job-id>;
    /// `@self`: the agent's own cgroup, as a systemd unit with Delegate=yes gets it
    /// (cgroup v2; the agent moves itself into its `agent` leaf).
    #[arg(long, env = "YTSCHED_CGROUP_ROOT", default_value = "ytsched")]
    cgroup_root: String,
    #[arg(long, value_enum, default_value = "cgroup")]
    sandbox: SandboxKind,
    /// Time between SIGTERM and SIGKILL when a job is aborted.
    #[arg(long, default_value = "5s")]
    kill_grace: DurationMs,
    /// Most processes one job may have (default: 10,000, or less so that every slot's
    /// jobs together stay below half the machine's pid_max).
    #[arg(long)]
    job_pids_limit: Option<u64>,
    /// Most processes of all this node's jobs together (default: half the machine's
    /// pid_max), so jobs can never exhaust the host's pids.
    #[arg(long)]
    node_pids_limit: Option<u64>,
    /// Disk a job's sandbox may fill when its task sets no `disk_request.disk_space`;
    /// past it (or 1,000,000 files) the job fails with "disk limit exceeded".
    #[arg(long, default_value = "16G")]
    job_disk_space: ByteSize,
    /// The most the node's cache of job files and unpacked layers may hold (SPEC 5.17);
    /// the least recently used go first.
    #[arg(long, default_value = "10GiB")]
    file_cache_size: ByteSize,
    /// The most one job's layers may unpack to.
    #[arg(long, default_value = "4GiB")]
    layer_size_limit: ByteSize,
    /// Jobs of slot N run as uid and gid BASE + N (YTsaurus slot users). Used when the
    /// agent runs as root; otherwise jobs run as the agent's own user.
    #[arg(long, default_value_t = 20_000)]
    slot_uid_base: u32,
    /// Jobs in their own PID and mount namespaces: auto (when this machine allows it,
    /// with an alert when not), on (refuse to start without), off.
    #[arg(long, value_enum, default_value = "auto")]
    job_namespaces: JobNamespaces,
    /// A path jobs may write to besides their sandbox and private /tmp, /var/tmp,
    /// /dev/shm and /dev; everything else of the host is read-only to them (repeatable).
    #[arg(long = "job-writable-path")]
    job_writable_paths: Vec<PathBuf>,
    /// Where agents on this host claim their slot uid ranges (one file per range, held
    /// locked while the agent runs); an overlapping claim is refused, naming its holder.
    #[arg(long, default_value = "/run/ytsched/slot-uids")]
    slot_lock_dir: PathBuf,
    /// nvidia-smi to ask when NVML is not available (a path or a name on PATH).
    #[arg(long, default_value = "nvidia-smi")]
    nvidia_smi: PathBuf,
    /// Where the GPU device nodes (`nvidiaN`) are; a job may open only its own.
    #[arg(long, default_value = "/dev", hide = true)]
    gpu_device_dir: PathBuf,
    #[command(flatten)]
    bus: BusArgs,
    #[command(flatten)]
    settings: ytsched_common::settings_file::SettingsArgs,
}

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some(guardian::GUARDIAN_FLAG) {
        guardian::run();
    }
    tokio::runtime::Runtime::new()?.block_on(agent_main())
}

async fn agent_main() -> anyhow::Result<()> {
    ytsched_common::logging::init("info");
    let parsed = ytsched_common::settings_file::parse_or_exit::<Args>();
    if let Some(settings) = parsed.printed {
        print!("{settings}");
        return Ok(());
    }
    let args = parsed.args;
    let auth = args
        .bus
        .daemon_auth(&args.nats, &[Role::Node], "ytsched-node")?;
    let hostname = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into());
    let node_id = node_identity(&args, &auth, &hostname)?;
    // Its replies come to its own inbox, as they would with credentials.
    let auth = auth.anonymous_as(Role::Node, node_id.as_str());
    if args.bus.insecure {
        warn!("--insecure: the bus is unauthenticated, so anyone who reaches it controls this node's jobs");
    }
    for t in &args.tags {
        tags::validate_tag(t).map_err(anyhow::Error::msg)?;
    }
    if let Some(cpu) = args.cpu {
        if !cpu.is_finite() || cpu <= 0.0 {
            bail!("--cpu must be a positive number, got {cpu}");
        }
    }
    let offer = Offer::detect(&args, &hostname);
    let (sandbox, _slot_claim) = prepare_sandbox(&args, &node_id, &offer.limits)?;
    info!(node = %node_id, resources = %offer.limits, system_tags = ?offer.system_tags, tags = ?offer.configured_tags, gpus = offer.gpu_devices.len(), gpu_detection = offer.how, "node agent starting");
    let client = ytsched_common::transport::connect(
        &args.nats,
        &format!("ytsched-node {node_id}"),
        true,
        &auth,
    )
    .await?;
    let subjects = Subjects::new(&args.subject_prefix);
    let files = ytsched_node::files::NodeFiles::new(
        // Beside the sandboxes, in the work directory.
        sandbox.sandboxes_dir.with_file_name("file-cache"),
        args.file_cache_size.0,
        args.layer_size_limit.0,
        sandbox.sandboxes_dir.clone(),
        client.clone(),
        subjects.files_bucket(),
    )
    .context("cannot make the node's file cache")?;
    let agent = Agent::new(AgentConfig {
        node_id,
        hostname,
        system_tags: offer.system_tags,
        tags: offer.configured_tags,
        resource_limits: offer.limits,
        gpu_devices: offer.gpu_devices,
        subjects,
        sandbox,
        files: Some(std::sync::Arc::new(files)),
    });
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    agent.run(client, shutdown).await?;
    info!("node agent stopped");
    Ok(())
}

/// The node's id: its identity's name (nats-server lets a node heartbeat only under
/// it), `--node-id` if it agrees, or the hostname without credentials.
fn node_identity(
    args: &Args,
    auth: &ytsched_common::transport::ConnectAuth,
    hostname: &str,
) -> anyhow::Result<NodeId> {
    let identity = auth.creds.as_ref().map(|c| c.name.as_str().to_string());
    Ok(match (&args.node_id, &identity) {
        (Some(id), Some(name)) if id != name => bail!(
            "--node-id {id} differs from the identity '{name}' in --creds: a node may heartbeat only as its own identity"
        ),
        (Some(id), _) => NodeId::parse(id)?,
        (None, Some(name)) => NodeId::parse(name)?,
        (None, None) => NodeId::from_hostname(hostname),
    })
}

/// What the node offers and how it describes itself.
struct Offer {
    limits: ytsched_common::ResourceVector,
    gpu_devices: Vec<u32>,
    system_tags: Vec<String>,
    configured_tags: Vec<String>,
    /// How the GPUs were found (for the start-up line).
    how: &'static str,
}

impl Offer {
    /// Detected resources with the flags' overrides; system tags (host, arch, GPU
    /// models) and the configured tags, each once.
    fn detect(args: &Args, hostname: &str) -> Self {
        let (gpus, how) = gpu::detect(&args.nvidia_smi);
        let mut gpu_devices: Vec<u32> = gpus.iter().map(|g| g.index).collect();
        if let Some(n) = args.gpu {
            gpu_devices = (0..n)
                .map(|i| gpu_devices.get(i as usize).copied().unwrap_or(i))
                .collect();
        }
        let models: Vec<String> = gpus
            .iter()
            .filter(|g| gpu_devices.contains(&g.index))
            .map(|g| g.name.clone())
            .collect();
        let limits = detect::resource_limits(
            &Overrides {
                cpu: args.cpu,
                memory: args.memory.map(|m| m.0),
                gpu: args.gpu,
                user_slots: args.user_slots,
                memory_reserve: args.memory_reserve.map(|m| m.0),
            },
            gpus.len() as u32,
        );
        let mut system_tags = tags::system_tags(hostname, &models);
        if limits.gpu > 0.0 && !system_tags.iter().any(|t| t == "gpu") {
            system_tags.push("gpu".into());
        }
        let mut configured_tags: Vec<String> = vec![];
        for t in &args.tags {
            if !configured_tags.contains(t) {
                configured_tags.push(t.clone());
            }
        }
        Offer {
            limits,
            gpu_devices,
            system_tags,
            configured_tags,
            how,
        }
    }
}

/// Everything jobs run in: the work directory, cgroups (or process groups), slot
/// users and their claim on this host (held for the agent's life), GPU device
/// isolation, the guardian and namespaces; stale sandboxes of a previous run removed.
fn prepare_sandbox(
    args: &Args,
    node_id: &NodeId,
    limits: &ytsched_common::ResourceVector,
) -> anyhow::Result<(
    SandboxConfig,
    Option<ytsched_node::slot_range::SlotRangeClaim>,
)> {
    let work_dir = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("ytsched-node")
            .join(node_id.as_str())
    });
    let sandboxes_dir = work_dir.join("sandboxes");
    std::fs::create_dir_all(&sandboxes_dir)
        .with_context(|| format!("cannot create work directory {}", sandboxes_dir.display()))?;
    let is_root = nix::unistd::geteuid().is_root();
    if is_root {
        // Jobs run as slot users: they must reach their own directory below these, and
        // see nothing else in them.
        for d in [&work_dir, &sandboxes_dir] {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o711))
                .with_context(|| format!("cannot set the mode of {}", d.display()))?;
        }
        check_searchable_by_jobs(&sandboxes_dir)?;
    }
    let isolation = open_isolation(args, node_id)?;
    let (slot_uid_base, slot_claim) = claim_slot_users(args, is_root, limits, node_id)?;
    let devices = DeviceAccess::discover(&args.gpu_device_dir, &work_dir)
        .context("cannot prepare GPU device isolation")?;
    if devices.device_count() > 0 {
        info!(
            devices = devices.device_count(),
            "jobs may open only the GPU device nodes they were given"
        );
    }
    let cgroups = match &isolation {
        Isolation::Cgroup(m) => Some(m),
        Isolation::Process => None,
    };
    let guardian = Guardian::spawn(cgroups).context("cannot start the job guardian")?;
    let namespaces = job_namespaces(slot_uid_base, args.job_namespaces)?;
    let disk_images = slot_uid_base.is_some() && disk_images(&sandboxes_dir);
    let sandbox = SandboxConfig {
        guardian,
        isolation,
        sandboxes_dir,
        kill_grace: args.kill_grace.as_std(),
        pids_limit: args
            .job_pids_limit
            .unwrap_or_else(|| default_pids_limit(limits.user_slots)),
        slot_uid_base,
        devices,
        namespaces,
        disk_images,
        read_only_host: namespaces && read_only_host(),
        job_writable_paths: args.job_writable_paths.clone(),
        default_disk_space: args
            .job_disk_space
            .0
            .max(ytsched_common::spec::MIN_DISK_SPACE),
    };
    let stale_dirs = sandbox.remove_stale_dirs();
    if stale_dirs > 0 {
        info!(
            count = stale_dirs,
            "removed stale sandboxes of a previous run"
        );
    }
    Ok((sandbox, slot_claim))
}

/// Job cgroups under `--cgroup-root` with a node-wide pids limit (stale ones of a
/// previous run removed), or process groups only with `--sandbox=process`.
fn open_isolation(args: &Args, node_id: &NodeId) -> anyhow::Result<Isolation> {
    Ok(match args.sandbox {
        SandboxKind::Cgroup => {
            let manager = CgroupManager::open(&args.cgroup_root, node_id.as_str()).with_context(|| {
                "cannot set up job cgroups (run as root, or pass --sandbox=process to run jobs without resource enforcement)"
            })?;
            let node_pids = args.node_pids_limit.unwrap_or_else(|| pid_max() / 2);
            if manager.limit_node_pids(node_pids)? {
                info!(max = node_pids, "node-wide pids limit set");
            } else {
                warn!("no pids controller on the node's cgroup: no node-wide pids limit");
            }
            // Every agent under this root on the host shares one budget (not with
            // `@self`: that root is the unit's own, whose TasksMax is systemd's).
            if args.cgroup_root != "@self" && manager.limit_host_pids(node_pids)? {
                info!(max = node_pids, root = %args.cgroup_root, "host-wide pids limit set for every agent under this cgroup root");
            }
            let stale = manager.remove_stale();
            if stale > 0 {
                info!(count = stale, "removed stale job cgroups of a previous run");
            }
            info!(version = ?manager.version(), "job cgroups ready");
            Isolation::Cgroup(manager)
        }
        SandboxKind::Process => {
            warn!("--sandbox=process: jobs run in their own process group with NO resource limits");
            Isolation::Process
        }
    })
}

/// As root, jobs run as slot users from `--slot-uid-base`, claimed on this host so that
/// no other agent runs jobs as the same uids; otherwise as the agent's own user.
fn claim_slot_users(
    args: &Args,
    is_root: bool,
    limits: &ytsched_common::ResourceVector,
    node_id: &NodeId,
) -> anyhow::Result<(
    Option<u32>,
    Option<ytsched_node::slot_range::SlotRangeClaim>,
)> {
    if !is_root {
        warn!("not root: jobs run as this agent's own user, not as slot users");
        return Ok((None, None));
    }
    let base = args.slot_uid_base;
    let last = base as u64 + limits.user_slots as u64;
    if base == 0 || last >= i32::MAX as u64 {
        bail!(
            "--slot-uid-base {base}: slot users would run from uid {base} to {last}; use a base above 0 with room for {} slots",
            limits.user_slots
        );
    }
    let claim = ytsched_node::slot_range::claim(
        &args.slot_lock_dir,
        base,
        limits.user_slots.max(1.0) as u32,
        &format!("node {node_id}, pid {}", std::process::id()),
    )?;
    info!(first = base, slots = limits.user_slots, claim = %claim.path().display(), "slot uids claimed");
    Ok((Some(base), Some(claim)))
}

/// Whether jobs get their own PID and mount namespaces: only with slot users, and as
/// `--job-namespaces` says when this machine refuses them.
fn job_namespaces(slot_uid_base: Option<u32>, mode: JobNamespaces) -> anyhow::Result<bool> {
    Ok(match (slot_uid_base, mode) {
        (None, _) | (_, JobNamespaces::Off) => false,
        (Some(_), mode) => match ytsched_node::job_namespaces::probe() {
            Ok(()) => {
                info!("jobs run in their own PID and mount namespaces (private /proc, /tmp, /var/tmp, /dev/shm)");
                true
            }
            Err(e) if mode == JobNamespaces::On => {
                bail!("--job-namespaces on: {e}")
            }
            Err(e) => {
                warn!(error = %e, "ALERT: jobs cannot have their own namespaces here: they see the host's processes and share /tmp (use --job-namespaces on to refuse to start instead)");
                false
            }
        },
    })
}

/// Whether sandboxes get filesystem images of their disk space (said once at start).
fn disk_images(sandboxes_dir: &std::path::Path) -> bool {
    let _ = std::fs::create_dir_all(sandboxes_dir);
    match ytsched_node::disk_image::probe(sandboxes_dir) {
        Ok(()) => {
            info!("each job's sandbox is a filesystem of its disk space (a loop-mounted image): writes past it fail at once");
            true
        }
        Err(e) => {
            warn!(error = %e, "ALERT: no loop-mounted filesystem images here: a sandbox's disk space is only measured, about once a second");
            false
        }
    }
}

/// Whether jobs see the host read-only (`read_only_host`): said once at start.
fn read_only_host() -> bool {
    let supported = ytsched_node::read_only_host::supported();
    if supported {
        info!("jobs see the host's filesystem read-only but their sandbox, private directories, /dev and --job-writable-path");
    } else {
        warn!("ALERT: this kernel has no mount_setattr (Linux 5.12): jobs can write wherever the host's permissions let their slot user");
    }
    supported
}

/// 10,000 processes per job, lowered so that a full node's jobs together stay below half
/// of the kernel's pid_max (the rest is for the system and the agent).
fn default_pids_limit(user_slots: f64) -> u64 {
    (pid_max() / 2 / (user_slots.max(1.0) as u64)).clamp(16, 10_000)
}

/// The kernel's pid_max (32,768 when it cannot be read).
fn pid_max() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32_768)
}

/// Jobs run as slot users: every directory above their sandboxes must let others pass
/// (the execute bit), or no job could even start. Said once at start, not per job.
fn check_searchable_by_jobs(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::fs::canonicalize(dir)?;
    for d in dir.ancestors() {
        let mode = std::fs::metadata(d)?.permissions().mode();
        if mode & 0o001 == 0 {
            bail!(
                "{} (mode {:o}) does not let other users pass, so jobs (run as slot users) could not reach their sandboxes in {}: chmod o+x it, or choose another --work-dir",
                d.display(),
                mode & 0o7777,
                dir.display()
            );
        }
    }
    Ok(())
}
