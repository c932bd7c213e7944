//! Typed identifiers. Node ids appear as a NATS subject token, so they are validated
//! to contain no subject separators or wildcards.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }
    };
}

string_id!(
    /// An operation, e.g. `7f2c1a9e-…`; chosen by the scheduler at submission.
    OperationId
);
string_id!(
    /// One run of one job of a task; a retried job gets a new id.
    JobId
);
string_id!(
    /// An exec node; also the last token of its heartbeat subject.
    NodeId
);
string_id!(
    /// One start of a node agent, so the scheduler can tell a restart from a lost reply.
    IncarnationId
);

impl OperationId {
    pub fn random() -> Self {
        OperationId(uuid::Uuid::new_v4().to_string())
    }
}

impl IncarnationId {
    pub fn random() -> Self {
        IncarnationId(uuid::Uuid::new_v4().simple().to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node id '{0}' is invalid: use letters, digits, '_', '-' and ':' only (it is a NATS subject token)")]
pub struct BadNodeId(pub String);

impl NodeId {
    /// Validates a node id given by a person or a wire message.
    pub fn parse(s: &str) -> Result<Self, BadNodeId> {
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':'));
        if ok {
            Ok(NodeId(s.to_string()))
        } else {
            Err(BadNodeId(s.to_string()))
        }
    }

    /// Makes a valid node id from a hostname (dots become '-').
    pub fn from_hostname(host: &str) -> Self {
        let cleaned: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if cleaned.is_empty() {
            NodeId("node".into())
        } else {
            NodeId(cleaned)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_subject_tokens() {
        assert!(NodeId::parse("node-1").is_ok());
        assert!(NodeId::parse("a.b").is_err());
        assert!(NodeId::parse("a*").is_err());
        assert!(NodeId::parse("").is_err());
        assert_eq!(NodeId::from_hostname("h.example.com").0, "h-example-com");
    }
}
