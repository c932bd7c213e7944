//! A connection can sit on a NATS server that is up but not joined to the rest of the
//! cluster: one just back from a partition whose routes are not whole again. It answers
//! the connection's pings, so the client stays, and it hears nothing the nodes publish on
//! the other servers. Issue 42's campaign saw a revived leader whose new bus connection
//! landed on such a server hear no heartbeat for 58 s (open finding 1).
//!
//! The store connection does reach the cluster: its writes are acknowledged by a
//! JetStream quorum, and `stuck_server.rs` moves it when they fail. So a probe published
//! there and heard on a bus connection shows that connection joined. Each bus
//! connection hears its probes first before it serves (moving until it does, a few
//! times), then every `PROBE_EVERY`; one that misses them for `MOVE_AFTER` moves.

use crate::store::stuck_server::StuckServer;
use futures::StreamExt;
use std::time::Duration;
use tracing::warn;

/// How often the bus connections are probed, and how long a probe may take.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long a moved connection is given to connect again before its next probe.
const AFTER_MOVE: Duration = Duration::from_millis(500);
/// How many times a connection that does not hear its first probe is moved before it
/// serves anyway (its identity may lack the probe subject: an older auth config).
const FIRST_PROBE_TRIES: usize = 3;

/// One bus connection and its probe subscription.
pub(super) struct Listener {
    stuck: StuckServer,
    probes: async_nats::Subscriber,
    role: &'static str,
}

impl Listener {
    pub(super) async fn new(
        client: &async_nats::Client,
        subject: &str,
        role: &'static str,
    ) -> anyhow::Result<Listener> {
        Ok(Listener {
            stuck: StuckServer::new(client.clone(), role),
            probes: client.subscribe(subject.to_string()).await?,
            role,
        })
    }

    /// Waits for probe `n`, dropping older ones; whether it came in time.
    async fn heard(&mut self, n: u64) -> bool {
        let want = n.to_string();
        tokio::time::timeout(PROBE_EVERY, async {
            while let Some(m) = self.probes.next().await {
                if m.payload.as_ref() == want.as_bytes() {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    }
}

/// The store connection's side: publishes numbered probes on `subject`.
pub(super) struct BusWatch {
    store: async_nats::Client,
    subject: String,
    sent: u64,
}

impl BusWatch {
    pub(super) fn new(store: async_nats::Client, subject: String) -> Self {
        BusWatch {
            store,
            subject,
            sent: 0,
        }
    }

    /// Whether `listener` heard a probe; `None` when it could not be sent (the store
    /// connection's trouble, not the listener's).
    async fn probe(&mut self, listener: &mut Listener) -> Option<bool> {
        self.sent += 1;
        let n = self.sent;
        let published = self
            .store
            .publish(self.subject.clone(), n.to_string().into())
            .await
            .is_ok();
        let flushed = tokio::time::timeout(PROBE_EVERY, self.store.flush()).await;
        if !published || !matches!(flushed, Ok(Ok(()))) {
            return None;
        }
        Some(listener.heard(n).await)
    }

    /// Before serving: each listener hears a probe, moved to another server up to
    /// `FIRST_PROBE_TRIES` times until it does. Returns those that did: only they are
    /// watched after (one that never hears may lack the subject's permission).
    pub(super) async fn first_probes(&mut self, listeners: Vec<Listener>) -> Vec<Listener> {
        let mut heard = Vec::with_capacity(listeners.len());
        for mut l in listeners {
            let mut ok = false;
            for _ in 0..FIRST_PROBE_TRIES {
                match self.probe(&mut l).await {
                    Some(true) => {
                        ok = true;
                        break;
                    }
                    Some(false) => l.stuck.move_now(PROBE_EVERY).await,
                    None => {}
                }
                tokio::time::sleep(AFTER_MOVE).await;
            }
            if ok {
                heard.push(l);
            } else {
                warn!(role = l.role, subject = %self.subject, "ALERT: this connection was not shown to hear the scheduler's bus probe; it is not watched (may the store identity publish, and the bus identity subscribe to, the probe subject? `ytsched auth` writes both permissions)");
            }
        }
        heard
    }

    /// Probes each listener every `PROBE_EVERY` for good, moving one that keeps
    /// missing them.
    pub(super) async fn watch(mut self, mut listeners: Vec<Listener>) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            for l in &mut listeners {
                match self.probe(l).await {
                    Some(true) => l.stuck.succeeded(),
                    Some(false) => l.stuck.failed().await,
                    None => {}
                }
            }
        }
    }
}
