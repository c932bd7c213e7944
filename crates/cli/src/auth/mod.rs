//! `ytsched auth`: the identities of one installation (SPEC 5.11), kept in a directory.
//!
//! ```text
//! DIR/identities.json   names, roles and public keys (no secrets); the source of truth
//! DIR/auth.conf         nats-server `authorization` block made from it, to `include`
//! DIR/<name>.creds      one identity's secret seed, mode 0600, read with --creds
//! DIR/nats.pid          nats-server's pid file (-P), if it runs with this directory
//! DIR/http-tokens.json  digests of the web tokens (`auth token`), the scheduler's --http-tokens
//! DIR/tls/              CA and server certificate (`init --tls`)
//! ```
//!
//! Adding or revoking an identity rewrites `auth.conf` and sends nats-server SIGHUP (its
//! config reload): the `users` list reloads without a restart, and a revoked identity's
//! open connection is closed by the server. Nothing here involves the scheduler: it learns
//! who calls from the subject nats-server let through.

use crate::secret_files::{write_atomically, write_secret};
mod web_tokens;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use ytsched_common::http_tokens::{HttpTokens, TokenEntry};
use ytsched_common::identity::{Credentials, Role, UserName};
use ytsched_common::node_approval::{parse_max_resources, NodeApprovals};
use ytsched_common::resources::ResourceVector;
use ytsched_common::subjects::Subjects;
use ytsched_common::NodeId;

/// The node approvals file beside auth.conf (the scheduler's `--node-approvals`).
pub const NODE_APPROVALS_FILE: &str = "node-approvals.json";

/// The scheduler's store identity and its answering (bus) identity: two keys, so that
/// the connection that answers callers holds no permission on the store.
pub const SCHEDULER: &str = "scheduler";
pub const SCHEDULER_BUS: &str = "scheduler-bus";

/// How many identities one directory holds; auth.conf stays a config file, not a database.
/// Room for a 10,000-node cluster (SPEC §8's largest) with as many users again.
const MAX_IDENTITIES: usize = 20_000;

#[derive(Args, Debug)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub command: AuthCommand,
}

#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// Create DIR with keys for the scheduler and a first admin, and auth.conf.
    Init {
        /// Directory to create (it must not hold identities yet).
        dir: PathBuf,
        /// Name of the first admin.
        #[arg(long, default_value = "admin")]
        admin: String,
        /// Also make a CA and server certificates for nats-server and the web face (DIR/tls).
        #[arg(long)]
        tls: bool,
        /// Host names and IPs the server certificate is valid for.
        #[arg(long = "tls-host", default_values = ["localhost", "127.0.0.1"])]
        tls_hosts: Vec<String>,
    },
    /// Add node identities (each may heartbeat only as its NAME); several names are
    /// added together, all or none, with one server reload.
    AddNode {
        /// Node ids, as the agents' --node-id (the hostname by default).
        #[arg(required = true, num_args = 1..)]
        names: Vec<String>,
        /// The most each may offer, e.g. cpu=64,memory=512G,gpu=8,user_slots=64; what is
        /// not named (and every node added without it) gets 1,024 cpu, 64 TiB, 64 gpu,
        /// 1,024 user slots. The scheduler uses the smaller of this and the node's report.
        #[arg(long, value_parser = parse_max_resources)]
        max_resources: Option<ResourceVector>,
        /// The identities directory (`ytsched auth init`).
        #[arg(long, env = "YTSCHED_AUTH_DIR")]
        dir: PathBuf,
    },
    /// Add a user identity (its API calls carry NAME); --admin for the admin paths.
    AddUser {
        /// The user's name: what their operations and ACLs carry.
        name: String,
        /// May also use admin paths (pools, trees, nodes) and see every operation.
        #[arg(long)]
        admin: bool,
        /// The identities directory (`ytsched auth init`).
        #[arg(long, env = "YTSCHED_AUTH_DIR")]
        dir: PathBuf,
    },
    /// Remove an identity: its key stops working at once (its connection is closed).
    Revoke {
        /// The identity to remove.
        name: String,
        /// The identities directory (`ytsched auth init`).
        #[arg(long, env = "YTSCHED_AUTH_DIR")]
        dir: PathBuf,
    },
    /// Make a token for the web UI and JSON API of the scheduler's --http (sent as
    /// `Authorization: Bearer TOKEN`); it acts as the user NAME, with NAME's rights, until
    /// NAME is revoked. It is printed once: only its digest is kept.
    Token {
        /// A user or admin identity.
        name: String,
        /// The identities directory (`ytsched auth init`).
        #[arg(long, env = "YTSCHED_AUTH_DIR")]
        dir: PathBuf,
    },
    /// List identities (names, roles, public keys; never secrets).
    List {
        /// The identities directory (`ytsched auth init`).
        #[arg(long, env = "YTSCHED_AUTH_DIR")]
        dir: PathBuf,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Identity {
    pub name: UserName,
    pub role: Role,
    /// The NKey public key (`U…`); the seed is only in the .creds file.
    pub public_key: String,
    /// A node's approved resources (`add-node --max-resources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resources: Option<ResourceVector>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Registry {
    subject_prefix: String,
    identities: Vec<Identity>,
    /// Web tokens' digests (`auth token`); they go when their identity is revoked.
    #[serde(default)]
    http_tokens: Vec<TokenEntry>,
}

/// An identities directory.
pub struct AuthDir {
    dir: PathBuf,
    registry: Registry,
}

impl AuthDir {
    /// Makes a new directory with the scheduler and a first admin.
    pub fn init(dir: &Path, prefix: &str, admin: &UserName) -> anyhow::Result<AuthDir> {
        if dir.join("identities.json").exists() {
            bail!(
                "{} already holds identities; use add-user/add-node/revoke",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let mut auth = AuthDir {
            dir: dir.to_path_buf(),
            registry: Registry {
                subject_prefix: prefix.to_string(),
                identities: vec![],
                http_tokens: vec![],
            },
        };
        auth.add(UserName::parse(SCHEDULER)?, Role::Scheduler)?;
        auth.add(UserName::parse(SCHEDULER_BUS)?, Role::SchedulerBus)?;
        auth.add(admin.clone(), Role::Admin)?;
        Ok(auth)
    }

    pub fn open(dir: &Path) -> anyhow::Result<AuthDir> {
        let path = dir.join("identities.json");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "{} is not an identities directory (run `ytsched auth init {}`)",
                dir.display(),
                dir.display()
            )
        })?;
        let registry: Registry = serde_json::from_str(&text)
            .with_context(|| format!("{} is damaged", path.display()))?;
        Ok(AuthDir {
            dir: dir.to_path_buf(),
            registry,
        })
    }

    /// The node approvals file the scheduler reads (`--node-approvals`).
    pub fn approvals_path(&self) -> PathBuf {
        self.dir.join(NODE_APPROVALS_FILE)
    }

    pub fn creds_path(&self, name: &UserName) -> PathBuf {
        self.dir.join(format!("{name}.creds"))
    }

    pub fn identities(&self) -> &[Identity] {
        &self.registry.identities
    }

    /// Adds an identity, writes its creds file (0600) and the new auth.conf.
    pub fn add(&mut self, name: UserName, role: Role) -> anyhow::Result<PathBuf> {
        let mut paths = self.add_many(vec![name], role)?;
        Ok(paths.remove(0))
    }

    /// Adds identities of one role together: every name is checked before any key is
    /// made, and auth.conf is written once (a load tool adds thousands of nodes).
    pub fn add_many(&mut self, names: Vec<UserName>, role: Role) -> anyhow::Result<Vec<PathBuf>> {
        let mut fresh = std::collections::BTreeSet::new();
        for name in &names {
            // Users, admins and nodes share one name space, without the ACL group words.
            UserName::parse_identity(name.as_str())?;
            if self.registry.identities.iter().any(|i| &i.name == name) || !fresh.insert(name) {
                bail!("identity '{name}' already exists (revoke it first to replace its key)");
            }
        }
        if self.registry.identities.len() + names.len() > MAX_IDENTITIES {
            bail!(
                "{} more identities would pass {MAX_IDENTITIES}, the most one directory holds",
                names.len()
            );
        }
        let mut paths = Vec::with_capacity(names.len());
        for name in names {
            let key = nkeys::KeyPair::new_user();
            let seed = key
                .seed()
                .map_err(|e| anyhow::anyhow!("cannot make a key: {e}"))?;
            let path = self.creds_path(&name);
            // The bare seed and its role too, for the `nats` CLI (`--nkey`) and the
            // client libraries; `--creds` reads either.
            for p in [
                self.dir.join(format!("{name}.nk")),
                self.dir.join(format!("{name}.role")),
            ] {
                let _ = std::fs::remove_file(p);
            }
            write_secret(&self.dir.join(format!("{name}.nk")), &format!("{seed}\n"))?;
            write_secret(&self.dir.join(format!("{name}.role")), &format!("{role}\n"))?;
            write_secret(
                &path,
                &Credentials::new(name.clone(), role, seed).to_file_text(),
            )?;
            self.registry.identities.push(Identity {
                name,
                role,
                public_key: key.public_key(),
                max_resources: None,
            });
            paths.push(path);
        }
        self.save()?;
        Ok(paths)
    }

    pub fn revoke(&mut self, name: &UserName) -> anyhow::Result<Role> {
        let Some(pos) = self
            .registry
            .identities
            .iter()
            .position(|i| &i.name == name)
        else {
            bail!("no identity named '{name}'");
        };
        let role = self.registry.identities[pos].role;
        if matches!(role, Role::Scheduler | Role::SchedulerBus) {
            bail!("'{name}' is the scheduler's identity; revoking it would stop the cluster");
        }
        self.registry.identities.remove(pos);
        self.registry.http_tokens.retain(|t| &t.user != name);
        self.save()?;
        let _ = std::fs::remove_file(self.creds_path(name));
        let _ = std::fs::remove_file(self.dir.join(format!("{name}.nk")));
        let _ = std::fs::remove_file(self.dir.join(format!("{name}.role")));
        Ok(role)
    }

    /// Approves what the nodes `names` may offer.
    pub fn approve(&mut self, names: &[UserName], max: ResourceVector) -> anyhow::Result<()> {
        for id in self.registry.identities.iter_mut() {
            if names.contains(&id.name) && id.role == Role::Node {
                id.max_resources = Some(max);
            }
        }
        self.save()
    }

    fn save(&self) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(&self.registry)?;
        write_atomically(&self.dir.join("identities.json"), &json, 0o600)?;
        write_atomically(&self.dir.join("auth.conf"), &self.render(), 0o600)?;
        write_atomically(
            &self.dir.join(NODE_APPROVALS_FILE),
            &self.node_approvals()?,
            0o600,
        )?;
        let tokens = HttpTokens {
            tokens: self.registry.http_tokens.clone(),
        };
        write_atomically(
            &self.http_tokens_path(),
            &serde_json::to_string_pretty(&tokens)?,
            0o600,
        )
    }

    /// What the scheduler's `--node-approvals` reads: the approval of every node
    /// identity added with `--max-resources`. The others are trusted on first use by
    /// the scheduler (what they offer at their first registration).
    fn node_approvals(&self) -> anyhow::Result<String> {
        let nodes = self
            .registry
            .identities
            .iter()
            .filter(|i| i.role == Role::Node)
            .filter_map(|i| Some((i, i.max_resources?)))
            .map(|(i, max)| Ok((NodeId::parse(i.name.as_str())?, max)))
            .collect::<anyhow::Result<_>>()?;
        Ok(serde_json::to_string_pretty(&NodeApprovals { nodes })?)
    }

    /// The nats-server `authorization` block: one NKey user per identity with the
    /// permissions its role gets under this installation's subject prefix.
    fn render(&self) -> String {
        let subjects = Subjects::new(&self.registry.subject_prefix);
        let mut out = String::from(
            "# Made by `ytsched auth`; edit with it, not by hand. Included by nats.conf.\nauthorization {\n  users = [\n",
        );
        for id in &self.registry.identities {
            let p = subjects.permissions(id.role, &id.name);
            out.push_str(&format!(
                "    # {} {}\n    {{ nkey: \"{}\", permissions: {{ publish: {{ allow: {} }}, subscribe: {{ allow: {} }} }} }}\n",
                id.role,
                id.name,
                id.public_key,
                quoted_list(&p.publish),
                quoted_list(&p.subscribe)
            ));
        }
        out.push_str("  ]\n}\n");
        out
    }

    /// Tells a nats-server running with this directory to reload its users. Returns
    /// whether one was signalled.
    pub fn reload_server(&self) -> anyhow::Result<bool> {
        let pid_file = self.dir.join("nats.pid");
        let Ok(text) = std::fs::read_to_string(&pid_file) else {
            return Ok(false);
        };
        let pid: i32 = text
            .trim()
            .parse()
            .with_context(|| format!("{} does not hold a pid", pid_file.display()))?;
        // The pid file may be stale, or written in another pid namespace (a container's
        // nats-server, its pid 1 here a different process): only a nats-server is told.
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "nats-server" {
            return Ok(false);
        }
        match nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGHUP,
        ) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ESRCH) => Ok(false),
            Err(e) => bail!("cannot signal nats-server (pid {pid}) to reload: {e}"),
        }
    }
}

fn quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Runs one `ytsched auth` command.
pub fn run(args: AuthArgs, prefix: &str) -> anyhow::Result<()> {
    match args.command {
        AuthCommand::Init {
            dir,
            admin,
            tls,
            tls_hosts,
        } => init(&dir, prefix, &admin, tls.then_some(tls_hosts.as_slice())),
        AuthCommand::AddNode {
            names,
            max_resources,
            dir,
        } => add_nodes(&dir, &names, max_resources),
        AuthCommand::AddUser { name, admin, dir } => {
            add(&dir, &name, if admin { Role::Admin } else { Role::User })
        }
        AuthCommand::Revoke { name, dir } => {
            let mut auth = AuthDir::open(&dir)?;
            let role = auth.revoke(&UserName::parse(&name)?)?;
            let reloaded = auth.reload_server()?;
            println!("revoked {role} '{name}'");
            reload_note(reloaded);
            Ok(())
        }
        AuthCommand::Token { name, dir } => {
            let mut auth = AuthDir::open(&dir)?;
            let token = auth.new_http_token(&UserName::parse(&name)?)?;
            eprintln!(
                "web token for '{name}' (the scheduler reads {} within seconds; send it as `Authorization: Bearer TOKEN`, or open the UI at http://HOST:PORT/#token=TOKEN):",
                auth.http_tokens_path().display()
            );
            println!("{token}");
            Ok(())
        }
        AuthCommand::List { dir } => {
            let auth = AuthDir::open(&dir)?;
            for id in auth.identities() {
                println!("{:<10} {:<24} {}", id.role, id.name, id.public_key);
            }
            Ok(())
        }
    }
}

/// `ytsched auth init`: the identities directory (and TLS files for `tls_hosts`), and
/// how each party uses them.
fn init(dir: &Path, prefix: &str, admin: &str, tls_hosts: Option<&[String]>) -> anyhow::Result<()> {
    let admin = UserName::parse_identity(admin)?;
    let auth = AuthDir::init(dir, prefix, &admin)?;
    if let Some(hosts) = tls_hosts {
        crate::tls::make_ca_and_server_cert(&dir.join("tls"), hosts)?;
    }
    println!("identities in {}", dir.display());
    println!(
        "scheduler: --creds {} --bus-creds {}",
        auth.creds_path(&UserName::parse(SCHEDULER)?).display(),
        auth.creds_path(&UserName::parse(SCHEDULER_BUS)?).display()
    );
    println!("YTSCHED_CREDS={}", auth.creds_path(&admin).display());
    println!(
        "nats-server: add `include \"{}\"` to its config and start it with -P {}",
        dir.join("auth.conf").display(),
        dir.join("nats.pid").display()
    );
    if tls_hosts.is_some() {
        let (server_cert, _) = crate::tls::server_files(&dir.join("tls"));
        let client = crate::tls::client_files(&dir.join("tls"));
        println!(
            "TLS: server cert {}, clients pass --tls-ca {}",
            server_cert.display(),
            client.ca.unwrap_or_default().display()
        );
        let tls = dir.join("tls");
        println!(
            "HTTPS: scheduler --http-tls-cert {} --http-tls-key {}",
            tls.join("http.pem").display(),
            tls.join("http-key.pem").display()
        );
    }
    Ok(())
}

/// `ytsched auth add-node`: node identities, approved for at most `max_resources`.
fn add_nodes(
    dir: &Path,
    names: &[String],
    max_resources: Option<ResourceVector>,
) -> anyhow::Result<()> {
    let mut auth = AuthDir::open(dir)?;
    let parsed = names
        .iter()
        .map(|n| UserName::parse_identity(n))
        .collect::<Result<Vec<_>, _>>()?;
    let paths = auth.add_many(parsed.clone(), Role::Node)?;
    if let Some(max) = max_resources {
        auth.approve(&parsed, max)?;
    }
    let reloaded = auth.reload_server()?;
    for (name, path) in names.iter().zip(&paths) {
        println!("added node '{name}': --creds {}", path.display());
    }
    // Which bound the scheduler holds these nodes to.
    match max_resources {
        Some(max) => println!("approved for at most {max} (the scheduler's --node-approvals file)"),
        None => println!(
            "trusted on first use: each is used for at most what it offers when it first registers; `ytsched node approve NODE [--max-resources …]` allows more"
        ),
    }
    reload_note(reloaded);
    Ok(())
}

fn add(dir: &Path, name: &str, role: Role) -> anyhow::Result<()> {
    let mut auth = AuthDir::open(dir)?;
    let path = auth.add(UserName::parse_identity(name)?, role)?;
    let reloaded = auth.reload_server()?;
    println!("added {role} '{name}': --creds {}", path.display());
    reload_note(reloaded);
    Ok(())
}

fn reload_note(reloaded: bool) {
    if reloaded {
        eprintln!("nats-server reloaded its users");
    } else {
        eprintln!("no running nats-server found by nats.pid: reload it yourself (nats-server --signal reload)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_add_revoke_keep_secrets_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("auth");
        let mut auth = AuthDir::init(&dir, "lab", &UserName::parse("root").unwrap()).unwrap();
        let alice = UserName::parse("alice").unwrap();
        let path = auth.add(alice.clone(), Role::User).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let conf = std::fs::read_to_string(dir.join("auth.conf")).unwrap();
        assert!(conf.contains("\"lab.api.alice.*\""), "{conf}");
        assert!(conf.contains("\"lab.admin.root.*\""), "{conf}");
        let creds = Credentials::read(&path).unwrap();
        assert!(!conf.contains(creds.seed()), "auth.conf must hold no seed");
        assert!(auth.add(alice.clone(), Role::Admin).is_err());
        auth.revoke(&alice).unwrap();
        let conf = std::fs::read_to_string(dir.join("auth.conf")).unwrap();
        assert!(!conf.contains("alice"));
        assert!(!path.exists());
        assert!(auth.revoke(&UserName::parse("scheduler").unwrap()).is_err());
        assert!(AuthDir::init(&dir, "lab", &alice).is_err(), "init twice");
    }

    #[test]
    fn a_directory_refuses_identities_past_its_cap_and_adds_none() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("auth");
        let mut auth = AuthDir::init(&dir, "lab", &UserName::parse("root").unwrap()).unwrap();
        let held = auth.identities().len();
        let too_many: Vec<UserName> = (0..=MAX_IDENTITIES - held)
            .map(|i| UserName::parse(&format!("node-{i}")).unwrap())
            .collect();
        let err = auth.add_many(too_many, Role::Node).unwrap_err();
        assert!(
            err.to_string()
                .contains("would pass 20000, the most one directory holds"),
            "{err}"
        );
        assert_eq!(AuthDir::open(&dir).unwrap().identities().len(), held);
        assert!(!auth
            .creds_path(&UserName::parse("node-0").unwrap())
            .exists());
    }

    #[test]
    fn several_nodes_are_added_all_or_none() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("auth");
        let mut auth = AuthDir::init(&dir, "lab", &UserName::parse("root").unwrap()).unwrap();
        let names = |ns: &[&str]| ns.iter().map(|n| UserName::parse(n).unwrap()).collect();
        let paths = auth
            .add_many(names(&["n1", "n2", "n3"]), Role::Node)
            .unwrap();
        assert_eq!(paths.len(), 3);
        let conf = std::fs::read_to_string(dir.join("auth.conf")).unwrap();
        for n in ["n1", "n2", "n3"] {
            assert!(conf.contains(&format!("\"lab.heartbeat.{n}\"")), "{conf}");
        }
        // A duplicate in the batch, or a name already there, adds nothing at all.
        let err = auth.add_many(names(&["n4", "n4"]), Role::Node).unwrap_err();
        assert!(err.to_string().contains("'n4' already exists"), "{err}");
        assert!(auth.add_many(names(&["n5", "n1"]), Role::Node).is_err());
        let reread = AuthDir::open(&dir).unwrap();
        assert_eq!(
            reread.identities().len(),
            6,
            "scheduler, scheduler-bus, root, n1..n3"
        );
        assert!(!auth.creds_path(&UserName::parse("n5").unwrap()).exists());
    }
}
