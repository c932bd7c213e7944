//! `ytsched run-vanilla`: build a spec from flags and/or a file, submit, and (unless
//! `--async`) follow the operation with a live progress line until it ends.

use anyhow::{bail, Context};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;
use ytsched_common::api::{
    GetJobOutput, GetOperation, ListJobs, OperationInfo, OutputStream, StartOperation,
};
use ytsched_common::identity::Caller;
use ytsched_common::names::{PoolName, TreeName};
use ytsched_common::spec::{TaskSpec, ValidSpec, VanillaSpec};
use ytsched_common::states::{JobState, OperationState};
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::{call, TransportError};
use ytsched_common::units::ByteSize;
use ytsched_common::{IdempotencyToken, OperationId};

/// How long `follow` keeps waiting for an unreachable scheduler before giving up.
const SCHEDULER_WAIT: Duration = Duration::from_secs(60);

#[derive(Args, Debug, Clone, Default)]
pub struct RunVanillaArgs {
    /// Shell command each job runs (`sh -c`).
    #[arg(long)]
    pub command: Option<String>,
    /// How many jobs the task runs (default 1).
    #[arg(long)]
    pub job_count: Option<u32>,
    /// Cores each job gets (default 1; fractions allowed).
    #[arg(long)]
    pub cpu_limit: Option<f64>,
    /// e.g. 512M, 1G.
    #[arg(long)]
    pub memory_limit: Option<ByteSize>,
    /// GPUs each job gets (default 0; it sees them as CUDA_VISIBLE_DEVICES).
    #[arg(long)]
    pub gpu_limit: Option<u32>,
    /// Text fed to each job's stdin.
    #[arg(long)]
    pub stdin: Option<String>,
    /// Pool to run in (default: one named after the user).
    #[arg(long)]
    pub pool: Option<PoolName>,
    /// The operation's weight within its pool (default 1).
    #[arg(long)]
    pub weight: Option<f64>,
    /// Comma-separated pool trees.
    #[arg(long, value_delimiter = ',')]
    pub pool_trees: Option<Vec<TreeName>>,
    /// A name for people, shown by list-operations.
    #[arg(long)]
    pub title: Option<String>,
    /// A spec file (YAML or JSON); flags override its single task and top-level fields.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Print the operation id and return at once.
    #[arg(long = "async")]
    pub run_async: bool,
    /// A local file each job gets in its working directory, read-only, as NAME (its
    /// own name by default); uploaded to the file store first unless already there.
    /// Repeatable.
    #[arg(long = "file", value_name = "PATH[:NAME]")]
    pub files: Vec<String>,
    /// Every --file may be run (otherwise those executable here are).
    #[arg(long)]
    pub executable: bool,
    /// A tar archive of a root filesystem the jobs run in (the first given on top).
    /// Repeatable.
    #[arg(long = "layer", value_name = "TAR")]
    pub layers: Vec<PathBuf>,
}

/// What `--file` and `--layer` ship: each local file with what the spec names.
pub enum Shipped {
    File(crate::files::LocalFile, ytsched_common::files::FileRef),
    Layer(crate::files::LocalFile),
}

impl Shipped {
    pub fn local(&self) -> &crate::files::LocalFile {
        match self {
            Shipped::File(l, _) | Shipped::Layer(l) => l,
        }
    }
}

/// The files and layers of `--file` and `--layer`, read and hashed.
pub fn shipped_files(args: &RunVanillaArgs) -> anyhow::Result<Vec<Shipped>> {
    let mut out = Vec::new();
    for f in &args.files {
        let (local, file) = crate::files::file_ref(f, args.executable)?;
        out.push(Shipped::File(local, file));
    }
    for l in &args.layers {
        out.push(Shipped::Layer(crate::files::LocalFile::read(l)?));
    }
    Ok(out)
}

/// `build_spec`, with what `--file` and `--layer` ship added to its one task.
pub fn build_spec_with(args: &RunVanillaArgs, shipped: &[Shipped]) -> anyhow::Result<ValidSpec> {
    let spec = build_spec(args)?;
    if shipped.is_empty() {
        return Ok(spec);
    }
    let mut spec = spec.into_inner();
    let task = only_task(&mut spec, "--file and --layer")?;
    for s in shipped {
        match s {
            Shipped::File(_, f) => task.file_paths.push(f.clone()),
            Shipped::Layer(l) => task.layer_paths.push(l.digest.clone()),
        }
    }
    ValidSpec::try_from(spec).map_err(|e| anyhow::anyhow!("invalid spec: {e}"))
}

/// The spec's one task, which `flags` change; a spec of several tasks is refused.
fn only_task<'a>(spec: &'a mut VanillaSpec, flags: &str) -> anyhow::Result<&'a mut TaskSpec> {
    if spec.tasks.len() != 1 {
        bail!("{flags} need a spec with exactly one task");
    }
    Ok(spec
        .tasks
        .iter_mut()
        .map(|(_, t)| t)
        .next()
        .expect("one task"))
}

/// Builds and validates the spec; errors name the offending field.
pub fn build_spec(args: &RunVanillaArgs) -> anyhow::Result<ValidSpec> {
    let mut spec = match &args.spec {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read spec file {}", path.display()))?;
            // The path names the field even where the value's own type refused it (a
            // tag filter that does not parse, a pool name out of its alphabet).
            serde_path_to_error::deserialize::<_, VanillaSpec>(
                serde_yaml_ng::Deserializer::from_str(&text),
            )
            .map_err(|e| anyhow::anyhow!("spec {}: {e}", path.display()))?
        }
        None => {
            let Some(command) = &args.command else {
                bail!("either --command or --spec is required");
            };
            VanillaSpec::single_task(TaskSpec::new(
                command.clone(),
                1,
                ytsched_common::spec::DEFAULT_CPU_LIMIT,
                ByteSize(ytsched_common::spec::DEFAULT_MEMORY_LIMIT),
            ))
        }
    };
    let task_flags = args.command.is_some()
        || args.job_count.is_some()
        || args.cpu_limit.is_some()
        || args.memory_limit.is_some()
        || args.gpu_limit.is_some()
        || args.stdin.is_some();
    if task_flags {
        let task = only_task(&mut spec, "task flags (--command, --job-count, ...)")?;
        if let Some(c) = &args.command {
            task.command = c.clone();
        }
        if let Some(n) = args.job_count {
            task.job_count = n;
        }
        if let Some(c) = args.cpu_limit {
            task.cpu_limit = c;
        }
        if let Some(m) = args.memory_limit {
            task.memory_limit = m;
        }
        if let Some(g) = args.gpu_limit {
            task.gpu_limit = g;
        }
        if let Some(s) = &args.stdin {
            task.stdin = Some(s.clone());
        }
    }
    if let Some(p) = &args.pool {
        spec.pool = Some(p.clone());
    }
    if let Some(w) = args.weight {
        spec.weight = Some(w);
    }
    if let Some(t) = &args.pool_trees {
        spec.pool_trees = Some(t.clone());
    }
    if let Some(t) = &args.title {
        spec.title = Some(t.clone());
    }
    ValidSpec::try_from(spec).map_err(|e| anyhow::anyhow!("invalid spec: {e}"))
}

pub async fn submit(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    spec: ValidSpec,
) -> anyhow::Result<OperationId> {
    // The token is ours: a retry after a lost reply carries it again, and the scheduler
    // answers with the operation it already started (the id is always the scheduler's).
    let token = IdempotencyToken::random();
    let mut last = None;
    for attempt in 0..SUBMIT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let request = StartOperation {
            spec: spec.clone(),
            idempotency_token: Some(token.clone()),
        };
        match call(client, subjects, user, request).await {
            Ok(id) => return Ok(id),
            Err(e @ TransportError::NoScheduler { .. }) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    bail!(
        "timed out, state unknown: the operation may or may not have started ({}); `ytsched list-operations --filter-user {}` tells",
        last.map(|e| e.to_string()).unwrap_or_default(),
        user.user
    )
}

/// Tries of one submission before the CLI gives up with "state unknown".
const SUBMIT_ATTEMPTS: u32 = 3;

/// Polls the operation until it ends, drawing a progress line on a terminal.
pub async fn follow(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    id: &OperationId,
) -> anyhow::Result<OperationInfo> {
    let tty = std::io::stderr().is_terminal();
    // On a terminal: a bar of completed jobs with counts and elapsed time; elsewhere
    // (logs, CI) one plain line per change.
    let bar = tty.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} completed · {msg}",
            )
            .expect("a valid template"),
        );
        bar.set_prefix(id.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let mut last = String::new();
    let mut unreachable_since: Option<std::time::Instant> = None;
    loop {
        let asked = call(
            client,
            subjects,
            user,
            GetOperation {
                operation_id: id.clone(),
            },
        )
        .await;
        // A scheduler restarting or failing over to its standby is a pause, not the end:
        // the operation lives in the store.
        let info = match asked {
            Ok(info) => {
                unreachable_since = None;
                info
            }
            Err(e @ TransportError::NoScheduler { .. }) => {
                let since = *unreachable_since.get_or_insert_with(|| {
                    eprintln!("{id}: scheduler unreachable ({e}); still following");
                    std::time::Instant::now()
                });
                if since.elapsed() > SCHEDULER_WAIT {
                    return Err(e.into());
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let j = &info.jobs;
        if let Some(bar) = &bar {
            bar.set_length(j.total);
            bar.set_position(j.completed);
            bar.set_message(format!(
                "{} · waiting {} · running {} · failed {}",
                info.state, j.waiting, j.running, j.failed
            ));
        } else {
            let line = format!(
                "{id}: {} · waiting {} · running {} · completed {}/{} · failed {}",
                info.state, j.waiting, j.running, j.completed, j.total, j.failed
            );
            if line != last {
                eprintln!("{line}");
                last = line;
            }
        }
        if info.state.is_finished() {
            if let Some(bar) = &bar {
                bar.finish();
            }
            return Ok(info);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Failed jobs shown when an operation fails, and lines of stderr shown of each.
const FAILED_JOBS_SHOWN: u32 = 3;
const STDERR_LINES_SHOWN: usize = 20;

/// After a failure, the end of the stderr of its first failed jobs: usually the reason,
/// without a second command. Best effort: what cannot be read is said, not fatal.
pub async fn show_failed_stderr(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    info: &OperationInfo,
) {
    if info.state != OperationState::Failed || info.jobs.failed == 0 {
        return;
    }
    let request = ListJobs {
        operation_id: info.id.clone(),
        limit: Some(FAILED_JOBS_SHOWN),
        cursor: None,
        state: Some(JobState::Failed),
    };
    let page = match call(client, subjects, user, request).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("(could not list the failed jobs: {e})");
            return;
        }
    };
    for job in page.jobs.iter().take(FAILED_JOBS_SHOWN as usize) {
        let asked = GetJobOutput {
            operation_id: info.id.clone(),
            job_id: job.id.clone(),
            stream: OutputStream::Stderr,
        };
        let reason = job.error.as_deref().unwrap_or("failed");
        match call(client, subjects, user, asked).await {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(STDERR_LINES_SHOWN)..];
                eprintln!(
                    "--- job {} ({}#{}): {reason}; stderr, last {} line(s):",
                    job.id,
                    job.task_name,
                    job.job_index,
                    tail.len()
                );
                for l in tail {
                    eprintln!("{l}");
                }
            }
            Err(e) => eprintln!("--- job {}: {reason}; stderr unavailable: {e}", job.id),
        }
    }
}

/// Exit status for a finished operation: failure is an error for scripts.
pub fn check(info: &OperationInfo) -> anyhow::Result<()> {
    match info.state {
        OperationState::Completed => Ok(()),
        s => bail!(
            "operation {} {s}: {}",
            info.id,
            info.error.as_deref().unwrap_or("no error recorded")
        ),
    }
}
