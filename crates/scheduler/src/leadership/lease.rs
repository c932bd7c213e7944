//! Leadership (SPEC 5.10 hot standby): one key in a KV bucket whose entries expire after
//! the lease time. The leader creates the key and renews it with compare-and-set on its
//! revision; a standby keeps trying to create it, which succeeds only once the leader has
//! stopped renewing and the key has expired.

use crate::leadership::lease_validity::LeaseValidity;
use async_nats::jetstream::kv;
use std::time::{Duration, Instant};
use tracing::{info, warn};

const KEY: &str = "leader";

/// Who holds the lease now, if anyone (for log lines).
async fn holder_of(store: &kv::Store) -> Option<String> {
    let value = store.get(KEY).await.ok().flatten()?;
    Some(String::from_utf8_lossy(&value).into_owned())
}

pub struct Lease {
    store: kv::Store,
    holder: String,
    revision: u64,
    ttl: Duration,
    validity: LeaseValidity,
}

impl Lease {
    /// Waits until this scheduler holds the lease.
    pub async fn acquire(
        store: kv::Store,
        holder: String,
        ttl: Duration,
        validity: LeaseValidity,
    ) -> Lease {
        let mut logged_standby = false;
        let mut logged_error = false;
        loop {
            let sent = Instant::now();
            match store.create(KEY, holder.clone().into()).await {
                Ok(revision) => {
                    info!(holder, "leader lease acquired");
                    validity.renewed(sent, ttl);
                    return Lease {
                        store,
                        holder,
                        revision,
                        ttl,
                        validity,
                    };
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                    if !logged_standby {
                        let current = holder_of(&store).await.unwrap_or_default();
                        info!(leader = %current, "standby: another scheduler holds the leader lease; waiting to take over");
                        logged_standby = true;
                    }
                }
                Err(e) => {
                    if !logged_error {
                        warn!(error = %e, "cannot reach the leader lease; retrying");
                        logged_error = true;
                    }
                }
            }
            tokio::time::sleep(ttl / 6).await;
        }
    }

    /// A handle that gives the lease up on a clean stop, so that a successor need not
    /// wait for it to expire.
    pub fn releaser(&self) -> Releaser {
        Releaser {
            store: self.store.clone(),
            holder: self.holder.clone(),
        }
    }

    /// Renews the lease until it is lost to another scheduler; returns why.
    pub async fn hold(mut self) -> anyhow::Error {
        let mut failing = false;
        loop {
            tokio::time::sleep(self.ttl / 3).await;
            let sent = Instant::now();
            match self
                .store
                .update(KEY, self.holder.clone().into(), self.revision)
                .await
            {
                Ok(revision) => {
                    self.revision = revision;
                    self.validity.renewed(sent, self.ttl);
                    if failing {
                        info!("leader lease renewed again");
                        failing = false;
                    }
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    // A renewal whose answer was lost (a timeout while the cluster
                    // re-elected) may have been stored after all: the key still names
                    // this scheduler, at a revision it did not see. Still its own.
                    if let Ok(Some(entry)) = self.store.entry(KEY).await {
                        if entry.operation == kv::Operation::Put
                            && entry.value == self.holder.as_bytes()
                        {
                            self.revision = entry.revision;
                            continue;
                        }
                    }
                    // Expired (e.g. NATS was down longer than the lease): take it back
                    // unless someone else has.
                    match self.store.create(KEY, self.holder.clone().into()).await {
                        Ok(revision) => {
                            warn!("leader lease had expired; re-acquired it");
                            self.revision = revision;
                            self.validity.renewed(sent, self.ttl);
                        }
                        Err(_) => {
                            let other = holder_of(&self.store)
                                .await
                                .unwrap_or_else(|| "another scheduler".into());
                            return anyhow::anyhow!(
                                "lost the leader lease to {other}; stopping so that only one scheduler serves"
                            );
                        }
                    }
                }
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "cannot renew the leader lease; retrying");
                        failing = true;
                    }
                }
            }
        }
    }
}

pub struct Releaser {
    store: kv::Store,
    holder: String,
}

impl Releaser {
    /// Deletes the lease if this scheduler still holds it.
    pub async fn release(self) {
        let ours = self
            .store
            .entry(KEY)
            .await
            .ok()
            .flatten()
            .filter(|e| e.operation == kv::Operation::Put && e.value == self.holder.as_bytes());
        if let Some(entry) = ours {
            if let Err(e) = self
                .store
                .delete_expect_revision(KEY, Some(entry.revision))
                .await
            {
                warn!(error = %e, "cannot release the leader lease; a successor waits for it to expire");
            }
        }
    }
}
