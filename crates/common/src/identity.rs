//! Who is on the bus (SPEC 5.11): the four roles, identity names, and the credentials
//! file every binary reads with `--creds`.
//!
//! nats-server authenticates each connection by its NKey and enforces what the identity
//! may publish and subscribe to; a binary only needs its seed, its name (which appears in
//! the subjects it may use and in its reply inbox) and its role (which subjects to use).
//! The seed never leaves this type except to the NATS client: `Debug` hides it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// Longest identity name; names are NATS subject tokens and pool-ACL subjects.
pub const MAX_NAME_LEN: usize = 64;
/// A credentials file is a few lines; anything bigger is not one.
const MAX_CREDS_FILE_BYTES: u64 = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Scheduler,
    Node,
    User,
    /// A user who may also use the admin paths.
    Admin,
    /// The scheduler's answering connection: it hears heartbeats and API requests and
    /// may publish only to inboxes and nudges, never into JetStream, KV or the lease, so
    /// no reply subject a caller names can make it write the store.
    SchedulerBus,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Scheduler => "scheduler",
            Role::Node => "node",
            Role::User => "user",
            Role::Admin => "admin",
            Role::SchedulerBus => "scheduler_bus",
        }
    }

    pub fn parse(s: &str) -> Result<Self, IdentityError> {
        match s {
            "scheduler" => Ok(Role::Scheduler),
            "node" => Ok(Role::Node),
            "user" => Ok(Role::User),
            "admin" => Ok(Role::Admin),
            "scheduler_bus" => Ok(Role::SchedulerBus),
            other => Err(IdentityError::BadRole(other.to_string())),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("name '{0}' is invalid: use 1 to {MAX_NAME_LEN} letters, digits, '_' and '-' (it is a NATS subject token)")]
    BadName(String),
    #[error("name '{0}' is reserved: it is an ACL group (everyone, admins), not an identity")]
    Reserved(String),
    #[error("role '{0}' is unknown (scheduler, scheduler_bus, node, user, admin)")]
    BadRole(String),
    #[error("credentials file {path}: {message}")]
    BadFile { path: String, message: String },
}

fn check_user_name(s: &str) -> Result<(), IdentityError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(IdentityError::BadName(s.chars().take(80).collect()))
    }
}

validated_string!(
    /// A user or node name: a NATS subject token, so it cannot widen a permission or
    /// name a path outside its directory.
    UserName(String),
    check_user_name,
    IdentityError
);

/// ACL group words: no identity may carry one, so an ACL subject is a group or a user,
/// never both.
pub const RESERVED_NAMES: [&str; 2] = [EVERYONE, ADMINS];

/// ACL subject every caller is a member of.
pub const EVERYONE: &str = "everyone";
/// ACL subject admins are members of.
pub const ADMINS: &str = "admins";

impl UserName {
    /// A name an identity may carry (users, admins, nodes share one name space): any
    /// valid name but the ACL group words.
    pub fn parse_identity(s: &str) -> Result<Self, IdentityError> {
        let name = UserName::parse(s)?;
        if RESERVED_NAMES.contains(&name.as_str()) {
            return Err(IdentityError::Reserved(name.as_str().to_string()));
        }
        Ok(name)
    }
}

/// The reply inbox prefix of an identity: nats-server lets it subscribe only below it,
/// so no one hears another identity's replies.
pub fn inbox_prefix(role: Role, name: &str) -> String {
    match role {
        Role::Scheduler => format!("_INBOX.s.{name}"),
        Role::SchedulerBus => format!("_INBOX.b.{name}"),
        Role::Node => format!("_INBOX.n.{name}"),
        Role::User | Role::Admin => format!("_INBOX.u.{name}"),
    }
}

/// One identity's secret: what `ytsched auth` writes (mode 0600) and `--creds` reads.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub name: UserName,
    pub role: Role,
    /// The NKey seed (`SU…`); the server only ever sees its public key.
    seed: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("seed", &"<secret>")
            .finish()
    }
}

impl Credentials {
    pub fn new(name: UserName, role: Role, seed: String) -> Self {
        Self { name, role, seed }
    }

    pub fn seed(&self) -> &str {
        &self.seed
    }

    pub fn inbox_prefix(&self) -> String {
        inbox_prefix(self.role, self.name.as_str())
    }

    /// The file text: `key = value` lines.
    pub fn to_file_text(&self) -> String {
        format!(
            "# ytsched credentials: secret, keep mode 0600\nname = {}\nrole = {}\nseed = {}\n",
            self.name, self.role, self.seed
        )
    }

    pub fn parse(text: &str, path: &str) -> Result<Self, IdentityError> {
        let bad = |message: String| IdentityError::BadFile {
            path: path.to_string(),
            message,
        };
        let (mut name, mut role, mut seed) = (None, None, None);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| bad(format!("line {}: expected 'key = value'", n + 1)))?;
            let value = value.trim();
            match key.trim() {
                "name" => name = Some(UserName::parse(value).map_err(|e| bad(e.to_string()))?),
                "role" => role = Some(Role::parse(value).map_err(|e| bad(e.to_string()))?),
                "seed" => {
                    if !value.starts_with("SU") || value.len() > 128 {
                        return Err(bad("seed is not an NKey user seed (SU…)".into()));
                    }
                    seed = Some(value.to_string())
                }
                other => return Err(bad(format!("line {}: unknown key '{other}'", n + 1))),
            }
        }
        Ok(Credentials {
            name: name.ok_or_else(|| bad("no 'name' line".into()))?,
            role: role.ok_or_else(|| bad("no 'role' line".into()))?,
            seed: seed.ok_or_else(|| bad("no 'seed' line".into()))?,
        })
    }

    /// Reads a credentials file: ours (`name`/`role`/`seed` lines), or a bare NKey seed
    /// file as the `nats` CLI (`--nkey`) and the client libraries take it, whose identity
    /// is its file name (`alice.nk` is `alice`) and whose role is in `alice.role` beside it.
    pub fn read(path: &Path) -> Result<Self, IdentityError> {
        let text = Self::read_bounded(path)?;
        let shown = path.display().to_string();
        let bare = text.trim();
        if bare.starts_with("SU") && !bare.contains(['\n', '=']) {
            let bad = |message: String| IdentityError::BadFile {
                path: shown.clone(),
                message,
            };
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .ok_or_else(|| bad("a bare seed file is named <identity>.nk".into()))?;
            let name = UserName::parse(stem).map_err(|e| bad(e.to_string()))?;
            let role_path = path.with_extension("role");
            let role = Self::read_bounded(&role_path).map_err(|_| {
                bad(format!(
                    "a bare seed file needs its role beside it in {}",
                    role_path.display()
                ))
            })?;
            let role = Role::parse(role.trim()).map_err(|e| bad(e.to_string()))?;
            if bare.len() > 128 {
                return Err(bad("seed is not an NKey user seed (SU…)".into()));
            }
            return Ok(Credentials::new(name, role, bare.to_string()));
        }
        Credentials::parse(&text, &shown)
    }

    fn read_bounded(path: &Path) -> Result<String, IdentityError> {
        let shown = path.display().to_string();
        let bad = |message: String| IdentityError::BadFile {
            path: shown.clone(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        if meta.len() > MAX_CREDS_FILE_BYTES {
            return Err(bad(format!(
                "{} bytes is more than a credentials file's {MAX_CREDS_FILE_BYTES}",
                meta.len()
            )));
        }
        std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))
    }
}

/// Who makes an API call, as the scheduler learns it from the request's subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub user: UserName,
    /// Came on an admin subject, which nats-server lets only admins publish on.
    pub admin: bool,
}

impl Caller {
    pub fn user(name: &str) -> Self {
        Caller {
            user: UserName::parse(name).expect("valid user name"),
            admin: false,
        }
    }

    pub fn admin(name: &str) -> Self {
        Caller {
            user: UserName::parse(name).expect("valid user name"),
            admin: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_subject_tokens() {
        assert!(UserName::parse("alice_1-x").is_ok());
        for bad in ["", "a.b", "a*", "a>", "a b", "../x", &"x".repeat(65)] {
            assert!(UserName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn creds_round_trip_and_hide_the_seed() {
        let c = Credentials::new(UserName::parse("bob").unwrap(), Role::Admin, "SUABC".into());
        let back = Credentials::parse(&c.to_file_text(), "f").unwrap();
        assert_eq!(back, c);
        assert!(!format!("{c:?}").contains("SUABC"));
        assert_eq!(c.inbox_prefix(), "_INBOX.u.bob");
    }

    #[test]
    fn a_bare_seed_file_reads_with_its_role_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("alice.nk");
        std::fs::write(&seed, "SUAXYZ\n").unwrap();
        let e = Credentials::read(&seed).unwrap_err().to_string();
        assert!(e.contains("alice.role"), "{e}");
        std::fs::write(dir.path().join("alice.role"), "user\n").unwrap();
        let c = Credentials::read(&seed).unwrap();
        assert_eq!(
            (c.name.as_str(), c.role, c.seed()),
            ("alice", Role::User, "SUAXYZ")
        );
    }

    #[test]
    fn bad_creds_files_say_what_is_wrong() {
        let e = Credentials::parse("name = a\nrole = root\nseed = SUX", "f").unwrap_err();
        assert!(e.to_string().contains("role 'root'"), "{e}");
        let e = Credentials::parse("name = a\nrole = user", "f").unwrap_err();
        assert!(e.to_string().contains("no 'seed'"), "{e}");
        let e = Credentials::parse("name = a.b\n", "f").unwrap_err();
        assert!(e.to_string().contains("'a.b'"), "{e}");
        let e = Credentials::parse("garbage", "f").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_errs(text in ".{0,300}") {
            let _ = Credentials::parse(&text, "f");
        }
    }
}
