//! The scheduler's own loops: fair-share updates off the core lock, and the clock tick
//! for housekeeping and integral volumes.

use super::*;
use crate::store;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};
use ytsched_common::protocol::unix_now;

/// How often integral volumes go to the store.
const VOLUME_SAVE_PERIOD: Duration = Duration::from_secs(5);

impl Driver {
    /// The file store's sweep: unreferenced files past their TTL, ownerless ones no live
    /// operation names, idle uploads.
    pub(super) async fn sweep_files(self: Arc<Self>) {
        let period = self.files.limits().sweep_period();
        loop {
            tokio::time::sleep(period).await;
            // A store without files needs no scan of the operations under the core lock.
            let in_use = if self.files.file_count() == 0 {
                Default::default()
            } else {
                let core = self.core.lock().expect("core lock");
                core.reads().files_in_use()
            };
            self.files.sweep(&in_use).await;
        }
    }

    /// Fair-share updates, computed on the blocking pool from a snapshot taken under the
    /// core lock and swapped in under it: heartbeats never wait for one (a 10,000
    /// operation tree takes ~25 ms). Due updates are looked for every tick, and at once
    /// when an operation arrives.
    pub(super) async fn update_shares(self: Arc<Self>, period: Duration) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.share_updates.notified() => {}
            }
            let due = self
                .with_core(|core| core.share_updates_due(unix_now()))
                .await;
            for update in due {
                let tree = update.tree().to_string();
                match tokio::task::spawn_blocking(move || update.compute()).await {
                    Ok(computed) => {
                        let superseded = self
                            .with_core(|core| core.apply_share_update(computed))
                            .await;
                        // Freed off the lock (and off the runtime's threads).
                        tokio::task::spawn_blocking(move || drop(superseded));
                    }
                    Err(e) => {
                        error!(tree, error = %e, "fair-share update failed; it is retried");
                        self.with_core(|core| core.abandon_share_update(&tree))
                            .await;
                    }
                }
            }
        }
    }

    pub(super) async fn tick(self: Arc<Self>, period: Duration) {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_volume_save = std::time::Instant::now();
        let mut bus_down = false;
        loop {
            interval.tick().await;
            // While the bus is down nodes cannot heartbeat: their silence must not count.
            if self.client.connection_state() != async_nats::connection::State::Connected {
                if !bus_down {
                    warn!("lost the NATS connection; node timeouts are paused until it is back");
                    bus_down = true;
                }
                continue;
            }
            if std::mem::take(&mut bus_down) {
                info!("NATS connection is back; node timeouts restart now");
                self.with_core(|core| core.bus_restored(unix_now())).await;
            }
            let save = last_volume_save.elapsed() >= VOLUME_SAVE_PERIOD;
            let volumes = self
                .with_core(|core| {
                    core.set_lease_sure(self.lease.holds());
                    core.tick(unix_now());
                    save.then(|| store::volumes_write(&core.integral_volumes()))
                })
                .await;
            match volumes {
                Some(Ok(w)) => {
                    last_volume_save = std::time::Instant::now();
                    // Volumes are an estimate refreshed every few seconds: no one waits.
                    let _ = self.writer.submit(vec![w]);
                }
                Some(Err(e)) => warn!(error = %e, "cannot encode integral volumes"),
                None => {}
            }
        }
    }
}
