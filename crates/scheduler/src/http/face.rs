//! What every handler of the HTTP face works with.

use crate::gates::refusals::Refusals;
use crate::http::web_view::WebView;
use std::sync::Arc;

/// What the HTTP face reads: the published view of the core, and the state bucket for
/// settled job attempts.
#[derive(Clone)]
pub struct Face {
    pub view: WebView,
    pub state: async_nats::jetstream::kv::Store,
    /// What `list-jobs` pages wait on before they read released attempts.
    pub writer: crate::store::writer::Writer,
    /// Requests turned away on the bus and here, for `/metrics`.
    pub refusals: Arc<Refusals>,
    /// The event log, which the usage page sums.
    pub event_log: async_nats::jetstream::stream::Stream,
    /// Usage reports, one at a time, users in turn (`report_slots`).
    pub usage_reports: crate::http::report_slots::ReportSlots,
    /// The API itself, for the YTsaurus commands (`yt`), as the authenticated user.
    pub api: crate::service::ApiPort,
    /// YTsaurus commands answered, for `/metrics`.
    pub yt_counts: crate::http::yt_counts::YtCounts,
    /// The file store, and what nodes' file caches report, for `/metrics`.
    pub files: crate::files::Files,
    pub file_caches: Arc<crate::files::node_caches::NodeCaches>,
}
