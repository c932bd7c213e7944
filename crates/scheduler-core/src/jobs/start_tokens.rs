//! Proof that a scheduler started an attempt on a node. Starts are not stored, so a
//! restarted scheduler learns running attempts from the nodes (`adoption.rs`); but a
//! job id follows from the public operation id, and a node key could otherwise claim
//! attempts it never got and report them completed with output of its own. Each start
//! carries a keyed digest of its job id and node (HMAC-SHA256 under a key kept in the
//! store, which survives failover); the node echoes it, and only an attempt whose digest
//! checks out for the node reporting it is adopted. Numbers a revived operation reserved
//! and never gave out have no digest anyone holds.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use ytsched_common::{JobId, NodeId};

/// Bytes of the digest a token carries (hex-encoded: twice as many characters).
const TOKEN_BYTES: usize = 16;

/// The scheduler's key for start tokens, the same for every leader of a cluster.
#[derive(Clone, Default)]
pub struct StartKey([u8; 32]);

impl std::fmt::Debug for StartKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartKey(..)")
    }
}

impl StartKey {
    pub fn new(key: [u8; 32]) -> Self {
        StartKey(key)
    }

    fn mac(&self, node: &NodeId, job: &JobId) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key size");
        mac.update(node.as_str().as_bytes());
        mac.update(&[0]);
        mac.update(job.0.as_bytes());
        mac
    }

    /// The token of attempt `job` started on `node`.
    pub fn token(&self, node: &NodeId, job: &JobId) -> String {
        let digest = self.mac(node, job).finalize().into_bytes();
        digest[..TOKEN_BYTES]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether `token` is the one given to attempt `job` on `node` (compared in
    /// constant time).
    pub fn verifies(&self, node: &NodeId, job: &JobId, token: Option<&str>) -> bool {
        let Some(bytes) = token.and_then(decode_hex) else {
            return false;
        };
        bytes.len() == TOKEN_BYTES && self.mac(node, job).verify_truncated_left(&bytes).is_ok()
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() != TOKEN_BYTES * 2 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_only_for_its_attempt_on_its_node_under_its_key() {
        let key = StartKey::new([7; 32]);
        let (n1, n2) = (NodeId::parse("n1").unwrap(), NodeId::parse("n2").unwrap());
        let (j1, j2) = (JobId("op-1".into()), JobId("op-2".into()));
        let t = key.token(&n1, &j1);
        assert_eq!(t.len(), 32);
        assert!(key.verifies(&n1, &j1, Some(&t)));
        assert!(!key.verifies(&n2, &j1, Some(&t)), "another node");
        assert!(!key.verifies(&n1, &j2, Some(&t)), "another attempt");
        assert!(
            !StartKey::new([8; 32]).verifies(&n1, &j1, Some(&t)),
            "another key"
        );
        assert!(!key.verifies(&n1, &j1, None));
        assert!(!key.verifies(&n1, &j1, Some("zz")));
        assert!(!key.verifies(&n1, &j1, Some(&"0".repeat(32))));
    }
}
