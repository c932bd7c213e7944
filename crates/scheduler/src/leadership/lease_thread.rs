//! The leader lease on a thread of its own, with its own runtime and NATS connection.
//! A connection of its own was not enough: under load the service's runtime workers
//! can all be busy (heartbeats, a request flood, the core's lock held by a long call),
//! and a renewal that cannot run for a lease time loses a healthy leader its lease.
//! Here nothing else runs on the thread that renews it.

use crate::leadership::lease::Lease;
use crate::leadership::lease_validity::LeaseValidity;
use async_nats::jetstream::kv;
use std::future::Future;
use std::time::Duration;
use tokio::sync::oneshot;

/// A lease held on its own thread: resolves `lost` when another scheduler took it, and
/// gives it up on `release`.
pub struct LeaseThread {
    /// Until when the lease surely holds, moved on by each renewal.
    pub validity: LeaseValidity,
    lost: oneshot::Receiver<anyhow::Error>,
    release: oneshot::Sender<oneshot::Sender<()>>,
}

impl LeaseThread {
    /// Starts the thread: `open` connects and opens the lease bucket there (the
    /// connection's tasks then live on that thread's runtime), then the lease is
    /// acquired (a standby waits here) and held.
    pub async fn acquire<F, Fut>(open: F, holder: String, ttl: Duration) -> anyhow::Result<Self>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<kv::Store>>,
    {
        let (acquired_tx, acquired) = oneshot::channel::<anyhow::Result<()>>();
        let (lost_tx, lost) = oneshot::channel();
        let (release, release_rx) = oneshot::channel::<oneshot::Sender<()>>();
        let validity = LeaseValidity::default();
        let renewed = validity.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("leader-lease".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let store = match open().await {
                        Ok(store) => store,
                        Err(e) => {
                            let _ = acquired_tx.send(Err(e));
                            return;
                        }
                    };
                    let lease = Lease::acquire(store, holder, ttl, renewed).await;
                    let releaser = lease.releaser();
                    if acquired_tx.send(Ok(())).is_err() {
                        // The service stopped while this one waited as a standby.
                        releaser.release().await;
                        return;
                    }
                    tokio::select! {
                        e = lease.hold() => {
                            let _ = lost_tx.send(e);
                        }
                        done = release_rx => {
                            releaser.release().await;
                            if let Ok(done) = done {
                                let _ = done.send(());
                            }
                        }
                    }
                })
            })?;
        acquired
            .await
            .map_err(|_| anyhow::anyhow!("the leader lease thread stopped"))??;
        Ok(LeaseThread {
            validity,
            lost,
            release,
        })
    }

    /// Splits into what the service waits on and what it releases with.
    pub fn split(self) -> (LeaseLost, LeaseReleaser) {
        (LeaseLost(self.lost), LeaseReleaser(self.release))
    }
}

pub struct LeaseLost(oneshot::Receiver<anyhow::Error>);

impl LeaseLost {
    /// Resolves, with why, once the lease is lost.
    pub async fn wait(self) -> anyhow::Error {
        self.0
            .await
            .unwrap_or_else(|_| anyhow::anyhow!("the leader lease thread stopped"))
    }
}

pub struct LeaseReleaser(oneshot::Sender<oneshot::Sender<()>>);

impl LeaseReleaser {
    /// Gives the lease up (if still held) and returns once it is done.
    pub async fn release(self) {
        let (done, wait) = oneshot::channel();
        if self.0.send(done).is_ok() {
            let _ = wait.await;
        }
    }
}
