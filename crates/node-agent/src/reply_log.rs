//! What an agent tells of its scheduler's replies: registration and user tags as they
//! change, one line each, never a line per heartbeat.

use tracing::{info, warn};
use ytsched_common::protocol::{HeartbeatReply, Registration};

/// What the heartbeat loop last logged, so that it logs changes, not heartbeats.
#[derive(Default)]
pub(crate) struct SeenState {
    pub(crate) reachable: Option<bool>,
    pub(crate) registration: Option<Registration>,
    user_tags: Option<Vec<String>>,
}

impl SeenState {
    /// Logs a registration or user tags that changed with this reply.
    pub(crate) fn note(&mut self, reply: &HeartbeatReply) {
        if self.registration.as_ref() != Some(&reply.registration) {
            match &reply.registration {
                Registration::Registered { tree } => info!(tree, "registered"),
                Registration::Idle => info!("registered, but no pool tree matches this node"),
                Registration::Refused { error } => warn!(error, "registration refused"),
                Registration::Rejected { error } => warn!(error, "heartbeat rejected"),
                Registration::Stale { error } => {
                    warn!(
                        error,
                        "heartbeat refused as stale; registering again with a new incarnation"
                    )
                }
            }
            self.registration = Some(reply.registration.clone());
        }
        if self.user_tags.as_ref() != Some(&reply.user_tags) {
            if self.user_tags.is_some() || !reply.user_tags.is_empty() {
                info!(user_tags = ?reply.user_tags, "user tags set by the scheduler");
            }
            self.user_tags = Some(reply.user_tags.clone());
        }
    }
}
