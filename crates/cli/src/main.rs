//! `ytsched`: the command line for users (run and inspect operations), admins (nodes),
//! and labs (`up`).

mod admin;
mod auth;
mod completion;
mod drain;
mod events;
mod files;
mod lab;
mod list_operations;
mod node;
mod operation_commands;
mod output;
mod replay;
mod run_vanilla;
mod secret_files;
mod tls;
mod usage;

use clap::{Parser, Subcommand};
use output::Format;
use ytsched_common::api::{
    AbortOperation, AdminChange, AdminRemove, AdminSet, ExplainOperation, ExplainPool,
    GetJobOutput, GetOperation, ListJobs, ListNodes, ListOperations, OutputStream, ResumeOperation,
    SuspendOperation, UpdateOperationParameters,
};
use ytsched_common::identity::{Caller, Role, UserName};
use ytsched_common::names::{PoolName, TreeName};
use ytsched_common::subjects::Subjects;
use ytsched_common::transport::{call, connect, ConnectAuth, TlsFiles};
use ytsched_common::{JobId, OperationId};

#[derive(Parser, Debug)]
#[command(
    name = "ytsched",
    version,
    about = "ytsched: a YTsaurus-style cluster scheduler"
)]
struct Cli {
    /// NATS server URL(s), comma-separated.
    #[arg(
        long,
        global = true,
        env = "YTSCHED_NATS",
        default_value = "nats://127.0.0.1:4222"
    )]
    nats: String,
    /// First token of every NATS subject: installations sharing a bus differ here.
    #[arg(long, global = true, default_value = ytsched_common::subjects::DEFAULT_PREFIX)]
    subject_prefix: String,
    /// Credentials file (`ytsched auth`); the user is the one named in it.
    #[arg(long, global = true, env = "YTSCHED_CREDS")]
    creds: Option<std::path::PathBuf>,
    #[command(flatten)]
    tls: TlsFiles,
    /// User to act as on an unauthenticated (--insecure) bus; with --creds the user is
    /// the credentials' identity and this is ignored.
    #[arg(long, global = true, env = "USER", default_value = "root")]
    user: String,
    /// How answers are printed.
    #[arg(long, global = true, value_enum, default_value = "table")]
    format: Format,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a local lab: nats-server, the scheduler and N node agents.
    Up(lab::UpArgs),
    /// Manage identities: keys, nats-server permissions, TLS certificates.
    Auth(auth::AuthArgs),
    /// Run a vanilla operation (follows it to the end unless --async).
    RunVanilla(run_vanilla::RunVanillaArgs),
    /// Operations, newest first (filters: --state, --filter-user, --pool, --pool-tree, time).
    ListOperations(list_operations::ListOperationsArgs),
    /// The event log, oldest first, as JSON lines (filters: --since, --until,
    /// --operation, --pool, --filter-user; --follow keeps printing new events).
    Events(events::EventsArgs),
    /// Who used how much over a window (--by pool|user|tree|operation, --since, --until):
    /// cpu, memory and gpu hours, jobs by outcome, hours lost to preemption, waits.
    Usage(usage::UsageArgs),
    /// The file store: files and layers jobs get with their operation (upload, list,
    /// remove; share: admins).
    #[command(subcommand)]
    File(files::FileCommand),
    /// An operation's state, spec, job counts, fair share and usage.
    GetOperation {
        /// Operation id (as run-vanilla printed it).
        operation: OperationId,
    },
    /// Why an operation is where it is: pending limits, nodes, its fair share and how
    /// it was made, starvation and preemption.
    Explain {
        /// Operation id.
        #[arg(required_unless_present = "pool", conflicts_with = "pool")]
        operation: Option<OperationId>,
        /// Explain a pool instead: its share, what bounds it, its operation counts.
        #[arg(long)]
        pool: Option<PoolName>,
        /// With --pool: its tree (default: the default tree).
        #[arg(long, requires = "pool")]
        pool_tree: Option<TreeName>,
    },
    /// Abort an operation: its running jobs are killed.
    AbortOperation {
        /// Operation id.
        operation: OperationId,
    },
    /// Change a pending or running operation's pool, weight, resource_limits, owners or
    /// scheduling_options_per_pool_tree; running jobs keep running.
    #[command(name = "update-op-parameters")]
    UpdateOpParameters {
        /// Operation id.
        operation: OperationId,
        /// JSON or YSON map, e.g. '{pool=research; weight=2}' or '{"resource_limits": {"cpu": 8}}'.
        #[arg(value_parser = parse_parameters)]
        parameters: ytsched_common::spec::OperationParameters,
    },
    /// Give an operation no new jobs until it is resumed; it keeps its running ones
    /// unless --abort-running-jobs.
    SuspendOperation {
        /// Operation id.
        operation: OperationId,
        /// Abort its running jobs too (as `suspended`); they run again once resumed.
        #[arg(long)]
        abort_running_jobs: bool,
    },
    /// Give a suspended operation jobs again.
    ResumeOperation {
        /// Operation id.
        operation: OperationId,
    },
    /// An operation's job attempts, oldest first (--state to filter, --limit to cut).
    ListJobs {
        /// Operation id.
        operation: OperationId,
        /// Print at most this many attempts.
        #[arg(long)]
        limit: Option<u32>,
        /// Only attempts in this state: waiting, running, completed, failed, aborted.
        #[arg(long, value_parser = parse_job_state)]
        state: Option<ytsched_common::states::JobState>,
    },
    /// The tail of a job's stdout.
    GetJobStdout {
        /// Operation id.
        operation: OperationId,
        /// Job id (list-jobs shows them).
        job: JobId,
    },
    /// The tail of a job's stderr.
    GetJobStderr {
        /// Operation id.
        operation: OperationId,
        /// Job id (list-jobs shows them).
        job: JobId,
    },
    /// Nodes with their state, tree, resources, running jobs, tags and maintenance.
    ListNodes,
    /// Decommission a node (no new jobs; running ones finish); --wait until it is empty.
    Drain(drain::DrainArgs),
    /// Nodes: `approve NODE [--max-resources …]` lets a node offer more than at its
    /// first registration (admins).
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Create a pool (`scheduler_pool`) or a pool tree (`scheduler_pool_tree`).
    Create(admin::CreateArgs),
    /// Print the value at a path (//sys/pool_trees/..., //sys/scheduler/orchid/...).
    Get {
        /// e.g. //sys/pool_trees/default/research/@weight
        path: String,
    },
    /// Set the value at a path; VALUE is JSON or YSON text, e.g. '{cpu=4;memory=4G}'.
    Set {
        /// e.g. //sys/pool_trees/default/research/@weight
        path: String,
        /// The new value, JSON or YSON.
        value: String,
        /// Print every fair share the change would move (before → after); change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the names under a path.
    List {
        /// e.g. //sys/pool_trees
        path: String,
    },
    /// Remove a pool, a pool tree or an attribute.
    Remove {
        /// A pool, a pool tree or an attribute path.
        path: String,
        /// Print every fair share the removal would move; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print true or false: does the path exist?
    Exists {
        /// Any admin path.
        path: String,
    },
    /// Run a scenario against the real scheduler core in virtual time (prints JSON), or
    /// replay an event log (`--replay`) with admin changes (`--set`).
    Simulate {
        /// Scenario file (YAML): nodes, pools, operations, events in virtual time.
        #[arg(required_unless_present = "replay", conflicts_with = "replay")]
        scenario: Option<std::path::PathBuf>,
        /// An event log as `ytsched events` prints it (JSON lines): its nodes and
        /// operations run again; per pool wait and attainment, replayed and observed.
        #[arg(long, value_name = "EVENTS")]
        replay: Option<std::path::PathBuf>,
        /// An admin change for the replay, e.g.
        /// `//sys/pool_trees/default/research/@weight=2` (JSON or YSON value).
        #[arg(long = "set", value_name = "PATH=VALUE", requires = "replay")]
        set: Vec<ytsched_simulator::ReplayChange>,
    },
    /// Print a shell completion script, e.g. `source <(ytsched completion bash)`.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[tokio::main]
async fn main() {
    // `ytsched get … | head`: a closed pipe ends the program quietly, as for any CLI.
    // SAFETY: restoring the default disposition of a signal before any thread uses it.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        );
    }
    ytsched_common::logging::init("warn");
    let cli = Cli::parse();
    if let Err(e) = run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(exit_code(&e));
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let subjects = Subjects::new(&cli.subject_prefix);
    if let Command::Completion { shell } = cli.command {
        completion::print::<Cli>(shell, &mut std::io::stdout());
        return Ok(());
    }
    if let Command::Auth(args) = cli.command {
        return auth::run(args, subjects.prefix());
    }
    let tls = cli.tls.clone();
    if let Command::Up(args) = cli.command {
        return lab::up(args, &subjects, tls).await;
    }
    let (caller, auth) = caller_of(&cli, tls)?;
    let user = &caller;
    if let Command::Simulate {
        scenario,
        replay,
        set,
    } = &cli.command
    {
        match (scenario, replay) {
            (_, Some(log)) => replay::run(log, set, cli.format),
            (Some(scenario), None) => admin::simulate(scenario),
            (None, None) => {
                eprintln!("error: give a scenario file or --replay EVENTS");
                std::process::exit(2);
            }
        }
    }
    // Values are parsed before connecting: a typo is the user's to fix (exit 2).
    let set_value = match &cli.command {
        Command::Set { value, .. } => Some(admin::parse_value_or_exit(value)),
        _ => None,
    };
    if let Command::RunVanilla(args) = &cli.command {
        return run_vanilla_command(args, &cli.nats, &auth, &subjects, user).await;
    }
    let client = connect(&cli.nats, "ytsched", false, &auth).await?;
    let admin = admin::Session {
        client: &client,
        subjects: &subjects,
        user,
    };
    let format = cli.format;
    match cli.command {
        Command::Drain(args) => admin.drain(args).await,
        Command::Node(command) => admin.node(command).await,
        Command::Create(args) => admin.create(args, format).await,
        Command::Get { path } => admin.get(path, format).await,
        Command::Set {
            path,
            dry_run: true,
            ..
        } => {
            let value = set_value.expect("parsed above").to_string();
            admin
                .what_if(AdminChange::Set(AdminSet { path, value }), format)
                .await
        }
        Command::Set { path, .. } => admin.set(path, set_value.expect("parsed above")).await,
        Command::List { path } => admin.list(path, format).await,
        Command::Remove {
            path,
            dry_run: true,
        } => {
            admin
                .what_if(AdminChange::Remove(AdminRemove { path }), format)
                .await
        }
        Command::Remove { path, .. } => admin.remove(path).await,
        Command::Exists { path } => admin.exists(path).await,
        Command::File(command) => files::run(&client, &subjects, user, command, format).await,
        command => operation_commands::run(&client, &subjects, user, command, format).await,
    }
}

/// Who the CLI acts as: its credentials' identity, or `--user` on an open bus (which
/// vouches for no one: whoever connects can do anything anyway).
fn caller_of(cli: &Cli, tls: TlsFiles) -> anyhow::Result<(Caller, ConnectAuth)> {
    let auth = ConnectAuth::from_flags(cli.creds.as_deref(), tls)?;
    auth.expect_role(&[Role::User, Role::Admin], "the ytsched CLI")?;
    let caller = match &auth.creds {
        Some(c) => Caller {
            user: c.name.clone(),
            admin: c.role != Role::User,
        },
        None => Caller {
            user: UserName::parse(&cli.user).map_err(|e| anyhow::anyhow!("--user: {e}"))?,
            admin: true,
        },
    };
    let auth = auth.anonymous_as(Role::User, caller.user.as_str());
    Ok((caller, auth))
}

/// `run-vanilla`: the spec is checked before touching the network (a bad one is the
/// user's to fix: exit 2), then submitted and, unless `--async`, followed to its end.
async fn run_vanilla_command(
    args: &run_vanilla::RunVanillaArgs,
    nats: &str,
    auth: &ConnectAuth,
    subjects: &Subjects,
    user: &Caller,
) -> anyhow::Result<()> {
    let built = run_vanilla::shipped_files(args).and_then(|shipped| {
        run_vanilla::build_spec_with(args, &shipped).map(|spec| (spec, shipped))
    });
    let (spec, shipped) = match built {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    };
    let client = connect(nats, "ytsched", false, auth).await?;
    for shipped in &shipped {
        let local = shipped.local();
        if let Some(entry) = files::upload(&client, subjects, user, local).await? {
            eprintln!("uploaded {} ({})", local.path.display(), entry.digest);
        }
    }
    let id = run_vanilla::submit(&client, subjects, user, spec).await?;
    if args.run_async {
        println!("{id}");
        return Ok(());
    }
    eprintln!("started operation {id}");
    let info = run_vanilla::follow(&client, subjects, user, &id).await?;
    run_vanilla::show_failed_stderr(&client, subjects, user, &info).await;
    run_vanilla::check(&info)
}

fn parse_job_state(s: &str) -> Result<ytsched_common::states::JobState, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        format!("'{s}' is not a job state (waiting, running, completed, failed, aborted)")
    })
}

/// `update-op-parameters`'s VALUE: JSON or YSON, with only the fields that may change.
fn parse_parameters(s: &str) -> Result<ytsched_common::spec::OperationParameters, String> {
    let value = ytsched_common::yson::parse_value(s).map_err(|e| e.to_string())?;
    let parameters: ytsched_common::spec::OperationParameters =
        serde_json::from_value(value).map_err(|e| e.to_string())?;
    if parameters.is_empty() {
        return Err("name at least one of pool, weight, resource_limits, owners, scheduling_options_per_pool_tree".into());
    }
    Ok(parameters)
}

/// The scheduler's error kind decides the exit status (see `ErrorKind::exit_code`), so
/// scripts can tell "no such operation" from "not allowed"; anything else is 1.
fn exit_code(e: &anyhow::Error) -> i32 {
    e.chain()
        .find_map(|cause| {
            if let Some(ytsched_common::transport::TransportError::Api(api)) =
                cause.downcast_ref::<ytsched_common::transport::TransportError>()
            {
                return Some(api.kind.exit_code());
            }
            cause
                .downcast_ref::<ytsched_common::api::ApiError>()
                .map(|api| api.kind.exit_code())
        })
        .unwrap_or(1)
}
