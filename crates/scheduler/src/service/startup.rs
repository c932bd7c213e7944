//! Pieces of becoming the leader: the configuration restored from the store (what no
//! longer reads or validates set aside, with an alert), and the HTTP face started
//! beside the bus.

use super::*;
use crate::refusals::Refusals;

/// Sets aside the damaged records `snapshot` found and loads the stored configuration
/// into `core` (or `initial`, `--config`, when none was stored or it no longer
/// validates). Returns whether the store's configuration was taken.
pub(super) async fn restore_configuration(
    core: &mut SchedulerCore,
    state: &async_nats::jetstream::kv::Store,
    snapshot: &mut store::Snapshot,
    initial: Option<crate::core::ClusterConfig>,
) -> anyhow::Result<bool> {
    for d in &snapshot.damaged {
        set_aside(state, d).await?;
        snapshot.revisions.remove(&d.key);
        if let Some(id) = d.key.strip_prefix(store::OPERATION_PREFIX) {
            if let Ok(id) = OperationId::parse(id) {
                core.note_damaged_operation(id, d.error.clone());
            }
        }
    }
    // A stored configuration that no longer validates (limits tightened since it was
    // written) is set aside like an unreadable one: the scheduler starts regardless.
    let mut stored_config = false;
    if let Some(saved) = snapshot.config.take() {
        let raw = store::config_write(&saved)?.value;
        match core.set_cluster_config(saved) {
            Ok(()) => {
                stored_config = true;
                info!("pool tree configuration loaded from the store");
            }
            Err(e) => {
                let damaged = store::Damaged {
                    key: store::CONFIG_KEY.to_string(),
                    value: raw,
                    error: format!("invalid: {e}"),
                };
                set_aside(state, &damaged).await?;
                snapshot.revisions.remove(store::CONFIG_KEY);
            }
        }
    }
    if !stored_config {
        if let Some(initial) = initial {
            core.set_cluster_config(initial)
                .map_err(|e| anyhow::anyhow!("--config: {e}"))?;
            info!("pool tree configuration taken from --config");
        }
    }
    Ok(stored_config)
}

/// Serves the web UI, JSON and metrics beside the bus (`--http`).
pub(super) fn start_http(
    http: HttpConfig,
    driver: &Arc<Driver>,
    refusals: Arc<Refusals>,
) -> anyhow::Result<()> {
    let addr = http.addr;
    let listener = crate::http_listener::listen(addr)
        .with_context(|| format!("--http {addr}: cannot listen"))?;
    let access = crate::http_access::HttpAccess::start(http.access)?;
    let face = crate::http::Face {
        view: crate::web_view::WebView::start(driver.core.clone()),
        state: driver.state.clone(),
        refusals: refusals.clone(),
    };
    let router = crate::http::router(face, access);
    tokio::spawn(async move {
        if let Err(e) = crate::http_listener::serve(listener, router, http.bounds, refusals).await {
            error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(())
}
