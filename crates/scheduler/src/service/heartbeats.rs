//! The heartbeat path: each node's heartbeat in its own task, checked before the core
//! and answered on the node's own inbox.

use super::*;
use crate::gates::refusals::Refusal;
use futures::StreamExt;
use std::sync::Arc;
use tracing::{debug, info, warn};
use ytsched_common::codec::{decode, encode};
use ytsched_common::identity::Role;
use ytsched_common::protocol::{unix_now, HeartbeatReply, HeartbeatRequest};
use ytsched_common::subjects::Subjects;

impl Driver {
    /// Each heartbeat is handled in its own task: the core serialises them, and a
    /// heartbeat waiting for its writes does not hold up the next one.
    ///
    /// Heartbeats are subscribed to only now, once the scheduler serves. Until then a
    /// node is answered "no responders", which its agent takes for a scheduler
    /// restarting (its silence does not count). A subscription made before the revival's
    /// writes and the bus probes had its heartbeats wait unanswered, and an agent whose
    /// requests timed out counted silence and fenced its jobs during a plain restart
    /// (`durability_lab`, a loaded machine).
    pub(super) async fn serve_heartbeats(self: Arc<Self>) -> anyhow::Result<()> {
        let mut sub = self
            .client
            .subscribe(self.subjects.heartbeat_wildcard())
            .await?;
        self.client.flush().await?;
        info!("heartbeats are answered");
        while let Some(msg) = sub.next().await {
            let driver = self.clone();
            let received = std::time::Instant::now();
            // Every line logged while handling it (jobs started, finished, aborted) names
            // the node, as nats-server vouches for it in the subject.
            let node = msg.subject.rsplit('.').next().unwrap_or_default();
            let span = tracing::info_span!("heartbeat", node = %node);
            tokio::spawn(tracing::Instrument::instrument(
                async move { driver.heartbeat(msg, received).await },
                span,
            ));
        }
        Ok(())
    }

    async fn heartbeat(self: Arc<Self>, msg: async_nats::Message, received: std::time::Instant) {
        let Some(reply_to) = msg.reply.clone() else {
            self.refusals.count(Refusal::NoReply, || {
                format!("heartbeat on {} without a reply subject", msg.subject)
            });
            return;
        };
        // nats-server let only this node publish here; its answer goes to its inbox only.
        let node = msg.subject.rsplit('.').next().unwrap_or_default();
        if !Subjects::reply_allowed(Role::Node, node, &reply_to) {
            self.refusals.count(Refusal::ForeignReply, || {
                format!(
                    "heartbeat of node '{node}' asks for its reply on '{}', not its own inbox",
                    ytsched_common::quote::quote(&reply_to, ytsched_common::quote::QUOTE_CHARS)
                )
            });
            return;
        }
        if msg.payload.is_empty() {
            // A probe (the agent's `fence.rs`): answered at once and by nothing else, so
            // that an agent whose heartbeat waits can tell a scheduler that listens from
            // none, which the bus answers "no responders".
            self.reply(reply_to, Vec::new(), "probe").await;
            return;
        }
        let period = self.heartbeat_period_ms;
        let reply = match decode::<HeartbeatRequest>(&msg.payload) {
            Ok(req) if req.node_id.as_str() != node => {
                warn!(subject = %msg.subject, node = %req.node_id, "heartbeat node id does not match its subject");
                HeartbeatReply::rejected(
                    format!(
                        "node id '{}' does not match subject '{}'",
                        req.node_id, msg.subject
                    ),
                    period,
                )
            }
            Ok(req) => match self.clone().answer(req, received).await {
                Some(reply) => reply,
                None => {
                    debug!(subject = %msg.subject, "heartbeat dropped: its agent stopped waiting for the reply");
                    return;
                }
            },
            Err(e) => {
                warn!(subject = %msg.subject, error = %e, "malformed heartbeat");
                HeartbeatReply::rejected(format!("malformed heartbeat: {e}"), period)
            }
        };
        match encode(&reply) {
            Ok(bytes) => self.reply(reply_to, bytes, "heartbeat").await,
            Err(e) => warn!(error = %e, "cannot encode heartbeat reply"),
        }
    }

    /// The core's answer to one heartbeat (None: its agent gave up waiting). It goes
    /// out without waiting for the store: YTsaurus answers heartbeats from memory, and
    /// nothing in it needs the store first (starts are not stored, see the core's
    /// `adoption.rs`), except a start past its operation's stored reservation of attempt
    /// numbers, whose reply waits. The results it took are acknowledged once stored, in
    /// this reply if they already are, else in a later one (`AckLedger`).
    async fn answer(
        self: Arc<Self>,
        req: HeartbeatRequest,
        received: std::time::Instant,
    ) -> Option<HeartbeatReply> {
        let patience = req.timeout_ms;
        let node = req.node_id.clone();
        if let Some(counters) = req.file_cache {
            self.file_caches.note(&node, counters);
        }
        // Every start brings a result to store: while the store is twice as far behind as
        // submissions are refused at, none is made, so what waits for it stays bounded
        // whatever the load (submissions are turned away first).
        let backlog = self.writer.backlog();
        let limit = self.max_write_backlog.saturating_mul(2);
        let behind = backlog > limit;
        let Queued {
            result,
            effects,
            stored,
            position,
        } = self.queue_core(|core| {
            if core.set_store_behind(behind) {
                if behind {
                    warn!(
                        backlog,
                        limit, "the store is behind: no job starts until it catches up"
                    );
                } else {
                    info!(backlog, "the store caught up: jobs start again");
                }
            }
            core.set_lease_sure(self.lease.holds());
            // Checked under the lock: the wait for it is where time goes.
            (!given_up(received, patience)).then(|| core.process_heartbeat(req, unix_now()))
        });
        let mut reply = result?;
        let taken = std::mem::take(&mut reply.acknowledged_jobs);
        if effects.reply_after_store {
            self.carry_out(effects, stored).await;
        } else {
            if !effects.is_empty() {
                let driver = self.clone();
                tokio::spawn(async move { driver.carry_out(effects, stored).await });
            }
            // Its starts may lie within a reservation another call grew (`start_fence`).
            let fence = self.start_fence.wait_for(self.writer.stored_through());
            if let Some(at) = fence.filter(|_| !reply.jobs_to_start.is_empty()) {
                self.writer.stored_at(at).wait().await;
            }
        }
        reply.acknowledged_jobs =
            self.acks
                .settle(&node, taken, position, self.writer.stored_through());
        Some(reply)
    }
}
