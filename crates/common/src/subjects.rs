//! Every NATS subject ytsched uses, under one configurable prefix so several
//! installations can share a NATS cluster.

use crate::identity::{inbox_prefix, Caller, Role, UserName};
use crate::ids::NodeId;

pub const DEFAULT_PREFIX: &str = "ytsched";

#[derive(Clone, Debug)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('.').to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Node → scheduler heartbeat requests; the node id is the last token.
    pub fn heartbeat(&self, node: &NodeId) -> String {
        format!("{}.heartbeat.{}", self.prefix, node)
    }

    /// The scheduler's probe of its own bus connections (`bus_watch.rs`): its store
    /// identity publishes, its bus identity hears; no other identity may do either.
    pub fn bus_probe(&self) -> String {
        format!("{}.bus_probe", self.prefix)
    }

    pub fn heartbeat_wildcard(&self) -> String {
        format!("{}.heartbeat.*", self.prefix)
    }

    /// Scheduler → node "heartbeat now" hint, so new work starts without waiting a period.
    /// The event log stream's subject (`<prefix>_events`, SPEC 5.16): only the
    /// scheduler's store identity publishes there; everyone reads through the API.
    pub fn events(&self) -> String {
        format!("{}.events", self.prefix)
    }

    pub fn nudge(&self, node: &NodeId) -> String {
        format!("{}.nudge.{}", self.prefix, node)
    }

    /// Client → scheduler request for one API method. The user is a subject token so
    /// that nats-server, which lets each user publish only below its own name, vouches
    /// for it; the scheduler never takes the user from the message body.
    pub fn api(&self, user: &UserName, method: &str) -> String {
        format!("{}.api.{}.{}", self.prefix, user, method)
    }

    /// As `api`, on the subjects only admins may publish on.
    pub fn admin_api(&self, user: &UserName, method: &str) -> String {
        format!("{}.admin.{}.{}", self.prefix, user, method)
    }

    /// The subject a caller sends `method` on.
    pub fn call(&self, caller: &Caller, method: &str) -> String {
        if caller.admin {
            self.admin_api(&caller.user, method)
        } else {
            self.api(&caller.user, method)
        }
    }

    /// What the scheduler subscribes to: user and admin API subjects.
    pub fn api_wildcards(&self) -> [String; 2] {
        [
            format!("{}.api.*.*", self.prefix),
            format!("{}.admin.*.*", self.prefix),
        ]
    }

    /// The caller and method of an API subject, if `subject` is a well-formed one of ours.
    pub fn parse_api<'a>(&self, subject: &'a str) -> Option<(Caller, &'a str)> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('.')?;
        let (kind, rest) = rest.split_once('.')?;
        let admin = match kind {
            "api" => false,
            "admin" => true,
            _ => return None,
        };
        let (user, method) = rest.split_once('.')?;
        let user = UserName::parse_identity(user).ok()?;
        Some((Caller { user, admin }, method))
    }

    /// The permissions of an identity of `role` named `name` under this prefix (SPEC 5.11).
    /// The scheduler's duties are split: its store identity touches JetStream, KV and
    /// the lease and nothing else; its bus identity hears requests and may publish only
    /// to inboxes and nudges. Neither can be made to publish elsewhere by a reply subject.
    pub fn permissions(&self, role: Role, name: &UserName) -> Permissions {
        let p = &self.prefix;
        let inbox = format!("{}.>", inbox_prefix(role, name.as_str()));
        match role {
            Role::Scheduler => Permissions {
                publish: vec![
                    "$JS.API.>".into(),
                    "$JS.ACK.>".into(),
                    "$JS.FC.>".into(),
                    format!("$KV.{}.>", self.bucket("state")),
                    format!("$KV.{}.>", self.bucket("leader")),
                    format!("$KV.{}.>", self.bucket("archive")),
                    format!("$KV.{}.>", self.bucket("file_records")),
                    format!("$O.{}.>", self.files_bucket()),
                    self.events(),
                    self.bus_probe(),
                ],
                subscribe: vec![inbox],
            },
            Role::SchedulerBus => Permissions {
                publish: vec![
                    // Users' and nodes' inboxes (inbox_prefix): which one a request may
                    // be answered on is the scheduler's check (`reply_allowed`).
                    "_INBOX.u.*.>".into(),
                    "_INBOX.n.*.>".into(),
                    format!("{p}.nudge.*"),
                ],
                subscribe: vec![
                    self.heartbeat_wildcard(),
                    format!("{p}.api.*.*"),
                    format!("{p}.admin.*.*"),
                    self.bus_probe(),
                ],
            },
            Role::Node => Permissions {
                publish: [vec![format!("{p}.heartbeat.{name}")], self.file_reads()].concat(),
                subscribe: vec![format!("{p}.nudge.{name}"), inbox],
            },
            Role::User => Permissions {
                publish: vec![format!("{p}.api.{name}.*")],
                subscribe: vec![inbox],
            },
            Role::Admin => Permissions {
                publish: vec![format!("{p}.api.{name}.*"), format!("{p}.admin.{name}.*")],
                subscribe: vec![inbox],
            },
        }
    }

    /// The reply subject a request from `role` `name` must carry: below its own inbox.
    /// Anything else would make the scheduler publish where the caller chose.
    pub fn reply_allowed(role: Role, name: &str, reply: &str) -> bool {
        reply
            .strip_prefix(inbox_prefix(role, name).as_str())
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1)
    }

    /// The Object Store bucket of job files and layers (SPEC 5.17).
    pub fn files_bucket(&self) -> String {
        self.bucket("files")
    }

    /// What a node publishes to read the file store and nothing more: the bucket's stream
    /// info, an object's last meta message, an ordered consumer of its chunks delivered to
    /// its own inbox, and that consumer's flow control. No subject here stores or
    /// deletes a message; the stream bounds how many consumers there may be.
    fn file_reads(&self) -> Vec<String> {
        let stream = format!("OBJ_{}", self.files_bucket());
        vec![
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}.>"),
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
            format!("$JS.FC.{stream}.>"),
        ]
    }

    /// A KV bucket (or stream) name of this installation: the prefix made safe for
    /// bucket names, then what it holds.
    pub fn bucket(&self, what: &str) -> String {
        let safe: String = self
            .prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{safe}_{what}")
    }
}

/// What one identity may publish and subscribe to; nats-server enforces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
}

impl Default for Subjects {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_carry_prefix_and_node() {
        let s = Subjects::new("lab1");
        assert_eq!(s.heartbeat(&NodeId("n1".into())), "lab1.heartbeat.n1");
        let alice = Caller::user("alice");
        assert_eq!(
            s.call(&alice, "start_operation"),
            "lab1.api.alice.start_operation"
        );
        assert_eq!(s.call(&Caller::admin("root"), "set"), "lab1.admin.root.set");
        assert_eq!(
            s.parse_api("lab1.api.alice.list_nodes"),
            Some((alice, "list_nodes"))
        );
        assert_eq!(
            s.parse_api("lab1.admin.bob.set"),
            Some((Caller::admin("bob"), "set"))
        );
        assert_eq!(s.parse_api("other.api.alice.list_nodes"), None);
        assert_eq!(s.parse_api("lab1.api.list_nodes"), None);
        assert_eq!(s.parse_api("lab1x.api.a.b"), None);
    }
}
