//! Typed identifiers. Every id that arrives from outside (wire, store, CLI) is checked
//! as it is decoded: ids are NATS subject tokens and directory names (a job's sandbox),
//! so one holding '.', '/', a wildcard or nothing at all cannot exist past the boundary.

/// Longest id on the wire.
pub const MAX_ID_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} '{shown}' is invalid: use 1 to {MAX_ID_LEN} letters, digits, '_' and '-'{extra}")]
pub struct BadId {
    kind: &'static str,
    shown: String,
    extra: &'static str,
}

fn check_id(kind: &'static str, s: &str, colon: bool) -> Result<(), BadId> {
    let ok = !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-') || (colon && c == ':'));
    if ok {
        Ok(())
    } else {
        Err(BadId {
            kind,
            shown: s.chars().take(80).collect(),
            extra: if colon { " and ':'" } else { "" },
        })
    }
}

fn check_operation_id(s: &str) -> Result<(), BadId> {
    check_id("operation id", s, false)
}
fn check_job_id(s: &str) -> Result<(), BadId> {
    check_id("job id", s, false)
}
fn check_node_id(s: &str) -> Result<(), BadId> {
    check_id("node id", s, true)
}
fn check_idempotency_token(s: &str) -> Result<(), BadId> {
    check_id("idempotency token", s, false)
}
fn check_incarnation_id(s: &str) -> Result<(), BadId> {
    check_id("incarnation id", s, false)
}

// The inner field stays public for ids the scheduler makes itself (`<op>-<seq>`);
// everything from outside goes through the check.
validated_string!(
    /// A client's name for one submission, so that a retry after a lost reply finds the
    /// operation it started. Scoped to the submitting user; never an operation id, so no
    /// request can name an existing, archived or damaged record.
    IdempotencyToken(pub String),
    check_idempotency_token,
    BadId
);
validated_string!(
    /// An operation, e.g. `7f2c1a9e-…`; always made by the scheduler at submission.
    OperationId(pub Arc<str>),
    check_operation_id,
    BadId
);
validated_string!(
    /// One run of one job of a task; a retried job gets a new id.
    JobId(pub Arc<str>),
    check_job_id,
    BadId
);
validated_string!(
    /// An exec node; also the last token of its heartbeat subject.
    NodeId(pub String),
    check_node_id,
    BadId
);
validated_string!(
    /// One start of a node agent, so the scheduler can tell a restart from a lost reply.
    IncarnationId(pub String),
    check_incarnation_id,
    BadId
);

impl IdempotencyToken {
    pub fn random() -> Self {
        IdempotencyToken(uuid::Uuid::new_v4().to_string())
    }
}

impl OperationId {
    pub fn random() -> Self {
        OperationId(uuid::Uuid::new_v4().to_string().into())
    }
}

impl JobId {
    /// Attempt `seq` of operation `op`: job ids are `<op>-<seq>`, so an attempt's id,
    /// its sequence number and its store keys derive from each other.
    pub fn attempt(op: &OperationId, seq: u64) -> Self {
        JobId(format!("{op}-{seq}").into())
    }

    /// The sequence number of this id as an attempt of `op` (`None`: not one of its ids).
    pub fn attempt_seq(&self, op: &OperationId) -> Option<u64> {
        self.0
            .strip_prefix(op.as_str())?
            .strip_prefix('-')?
            .parse()
            .ok()
    }
}

impl IncarnationId {
    pub fn random() -> Self {
        IncarnationId(uuid::Uuid::new_v4().simple().to_string())
    }
}

impl NodeId {
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
    fn attempt_ids_and_sequence_numbers_derive_from_each_other() {
        let op = OperationId("op-1".into());
        let job = JobId::attempt(&op, 42);
        assert_eq!(job.as_str(), "op-1-42");
        assert_eq!(job.attempt_seq(&op), Some(42));
        assert_eq!(job.attempt_seq(&OperationId("op".into())), None);
        assert_eq!(JobId("op-1-x".into()).attempt_seq(&op), None);
    }

    #[test]
    fn node_ids_are_subject_tokens() {
        assert!(NodeId::parse("node-1").is_ok());
        assert!(NodeId::parse("a.b").is_err());
        assert!(NodeId::parse("a*").is_err());
        assert!(NodeId::parse("").is_err());
        assert_eq!(NodeId::from_hostname("h.example.com").0, "h-example-com");
    }

    #[test]
    fn ids_from_the_wire_are_checked_as_they_are_decoded() {
        let bad: Result<JobId, _> = serde_json::from_str("\"../../x\"");
        assert!(bad.unwrap_err().to_string().contains("job id '../../x'"));
        let ok: JobId = serde_json::from_str("\"abc-1\"").unwrap();
        assert_eq!(ok.as_str(), "abc-1");
        assert!(OperationId::parse("a/b").is_err());
        assert!(OperationId::parse(&"x".repeat(129)).is_err());
    }

    #[test]
    fn shared_ids_are_written_as_the_text_they_hold_and_checked_as_they_are_read() {
        let op = OperationId::parse("op-7").unwrap();
        let copy = op.clone();
        assert!(
            std::sync::Arc::ptr_eq(&op.0, &copy.0),
            "a copy shares the text"
        );
        assert_eq!(
            rmp_serde::to_vec(&op).unwrap(),
            rmp_serde::to_vec("op-7").unwrap()
        );
        assert_eq!(serde_json::to_string(&copy).unwrap(), "\"op-7\"");
        let back: OperationId = rmp_serde::from_slice(&rmp_serde::to_vec("op-7").unwrap()).unwrap();
        assert_eq!(back, op);
        let bad = rmp_serde::from_slice::<OperationId>(&rmp_serde::to_vec("a.b").unwrap());
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("operation id 'a.b' is invalid"));
    }
}
