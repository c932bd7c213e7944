//! What a heartbeat must be before the core takes it: well formed (checked when its
//! tags or hostname are new), of this protocol, within the bounds a node may report,
//! and not stale. A refusal is the reply that says why.

use crate::Node;
use std::collections::BTreeMap;
use ytsched_common::protocol::{HeartbeatReply, HeartbeatRequest, PROTOCOL_VERSION};
use ytsched_common::resources::ResourceVector;
use ytsched_common::NodeId;

/// How far one heartbeat's sequence number may run ahead of the last one taken from the
/// same incarnation (a million periods: days of heartbeats the scheduler never saw).
const MAX_SEQ_JUMP: u64 = 1_000_000;

/// Why this heartbeat is not taken (malformed, another protocol, out of bounds, or
/// stale), as the reply that says so; `None` when it is taken. Finished jobs' texts
/// are cut to their bounds here.
pub(crate) fn refusal_of(
    nodes: &BTreeMap<NodeId, Node>,
    period: u64,
    req: &mut HeartbeatRequest,
) -> Option<HeartbeatReply> {
    // Tags and hostname are checked when they are new to the scheduler, not on every
    // heartbeat that repeats them.
    let seen_before = nodes.get(&req.node_id).is_some_and(|n| {
        n.hostname == req.hostname && n.tags == req.tags && n.system_tags == req.system_tags
    });
    if !seen_before {
        if let Err(e) = req.check() {
            return Some(HeartbeatReply::rejected(e, period));
        }
    }
    for f in &mut req.finished_jobs {
        f.bound();
    }
    if req.protocol_version != PROTOCOL_VERSION {
        return Some(HeartbeatReply::rejected(
            format!(
                "protocol version {} is not supported (scheduler speaks {PROTOCOL_VERSION})",
                req.protocol_version
            ),
            period,
        ));
    }
    if let Err(e) = NodeId::parse(req.node_id.as_str()) {
        return Some(HeartbeatReply::rejected(e.to_string(), period));
    }
    for (what, v) in [
        ("resource_limits", &req.resource_limits),
        ("resource_usage", &req.resource_usage),
    ] {
        if let Err((r, x)) = v.check_within(&ResourceVector::NODE_MAXIMUM) {
            return Some(HeartbeatReply::rejected(
                format!(
                    "{what}.{r} = {x} is not a finite number between 0 and {}",
                    ResourceVector::NODE_MAXIMUM.get(r)
                ),
                period,
            ));
        }
    }
    if let Some(node) = nodes.get(&req.node_id) {
        // A sequence number far ahead of the last one is not a late delivery but a
        // forgery or a bug; taking it would make every real heartbeat look stale.
        if node.online
            && node.incarnation.as_ref() == Some(&req.incarnation_id)
            && req.seq > node.last_seq.saturating_add(MAX_SEQ_JUMP)
        {
            return Some(HeartbeatReply::stale(
                format!(
                    "heartbeat {} is more than {MAX_SEQ_JUMP} ahead of the last one ({}): ignored",
                    req.seq, node.last_seq
                ),
                period,
            ));
        }
        if req.seq != 0
            && node.incarnation.as_ref() == Some(&req.incarnation_id)
            && req.seq <= node.last_seq
        {
            return Some(HeartbeatReply::stale(
                format!(
                    "stale heartbeat {} (already have {}): ignored",
                    req.seq, node.last_seq
                ),
                period,
            ));
        }
    }
    None
}
