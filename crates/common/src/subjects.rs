//! Every NATS subject ytsched uses, under one configurable prefix so several
//! installations can share a NATS cluster.

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

    pub fn heartbeat_wildcard(&self) -> String {
        format!("{}.heartbeat.*", self.prefix)
    }

    /// Scheduler → node "heartbeat now" hint, so new work starts without waiting a period.
    pub fn nudge(&self, node: &NodeId) -> String {
        format!("{}.nudge.{}", self.prefix, node)
    }

    /// Client → scheduler request for one API method.
    pub fn api(&self, method: &str) -> String {
        format!("{}.api.{}", self.prefix, method)
    }

    pub fn api_wildcard(&self) -> String {
        format!("{}.api.>", self.prefix)
    }

    /// The method token of an API subject, if `subject` is one of ours.
    pub fn api_method<'a>(&self, subject: &'a str) -> Option<&'a str> {
        subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(".api.")
    }
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
        assert_eq!(s.api("start_operation"), "lab1.api.start_operation");
        assert_eq!(s.api_method("lab1.api.list_nodes"), Some("list_nodes"));
        assert_eq!(s.api_method("other.api.list_nodes"), None);
    }
}
