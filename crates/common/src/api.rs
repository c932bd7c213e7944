//! Client ↔ scheduler API over NATS request-reply, one subject per method
//! (`<prefix>.api.<method>`). Each request type names its method and response type, so
//! the client and the server cannot disagree on what a subject carries.

use crate::ids::{IdempotencyToken, JobId, NodeId, OperationId};
use crate::names::{PoolName, TreeName};
use crate::protocol::UnixMillis;
use crate::resources::ResourceVector;
use crate::spec::ValidSpec;
use crate::states::{JobState, OperationState};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

mod error;
pub mod files;
mod operation_info;
pub use error::{ApiError, ErrorKind, MAX_ERROR_CHARS};
pub use operation_info::{HistoryEntry, JobCounts, JobInfo, OperationInfo, REDACTED};

/// A typed API call: request body → response body.
pub trait ApiMethod: Serialize + DeserializeOwned {
    const METHOD: &'static str;
    type Response: Serialize + DeserializeOwned;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApiRequest<T> {
    pub protocol_version: u32,
    /// The caller is not here: it is the request's subject, which nats-server vouches for.
    pub body: T,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApiResponse<T> {
    pub protocol_version: u32,
    pub result: Result<T, ApiError>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StartOperation {
    /// Checked as it is decoded: a request with an invalid spec is refused there, naming
    /// the field, and admission takes it as valid.
    pub spec: ValidSpec,
    /// Made by the client, so that a submission retried after a lost reply is answered
    /// with the operation it started, never a second one. The scheduler remembers it per
    /// user while the operation is held (running, or finished within its retention).
    /// The operation's id is always the scheduler's own.
    #[serde(default)]
    pub idempotency_token: Option<IdempotencyToken>,
}
impl ApiMethod for StartOperation {
    const METHOD: &'static str = "start_operation";
    type Response = OperationId;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GetOperation {
    pub operation_id: OperationId,
}
impl ApiMethod for GetOperation {
    const METHOD: &'static str = "get_operation";
    type Response = OperationInfo;
}

/// Why an operation is where it is (`ytsched explain`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExplainOperation {
    pub operation_id: OperationId,
}
impl ApiMethod for ExplainOperation {
    const METHOD: &'static str = "explain_operation";
    type Response = crate::explain::Explanation;
}

/// A pool's place in its tree (`ytsched explain --pool`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExplainPool {
    pub pool: PoolName,
    /// The default tree when absent.
    #[serde(default)]
    pub pool_tree: Option<TreeName>,
}
impl ApiMethod for ExplainPool {
    const METHOD: &'static str = "explain_pool";
    type Response = crate::explain::PoolExplanation;
}

/// `ytsched node approve` (admins only): what a node may offer from now on; None: what it
/// reports now. Answers what it was approved for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApproveNode {
    pub node_id: crate::NodeId,
    #[serde(default)]
    pub max_resources: Option<ResourceVector>,
}
impl ApiMethod for ApproveNode {
    const METHOD: &'static str = "approve_node";
    type Response = ResourceVector;
}

/// One page of operations, newest first, as YTsaurus's `list_operations` pages: no answer
/// grows with the number of operations stored.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListOperations {
    /// At most this many (default `DEFAULT_PAGE`, at most `MAX_PAGE`).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Continue after the page that returned this `next_cursor`.
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub filter: OperationFilter,
}
impl ApiMethod for ListOperations {
    const METHOD: &'static str = "list_operations";
    type Response = OperationPage;
}

impl ListOperations {
    pub const DEFAULT_PAGE: u32 = 100;
    pub const MAX_PAGE: u32 = 1000;
    /// A page's entries come to at most about this many bytes, however many were asked.
    pub const MAX_PAGE_BYTES: usize = 512 * 1024;
}

/// A page of the scheduler's event log (SPEC 5.16), oldest first. Everyone may read it:
/// events carry operation metadata only (SPEC 5.11).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListEvents {
    /// At most this many (default `DEFAULT_PAGE`, at most `MAX_PAGE`).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Continue from the `cursor` a page returned (absent: from the start of `since`).
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub filter: crate::event_record::EventFilter,
}
impl ApiMethod for ListEvents {
    const METHOD: &'static str = "list_events";
    type Response = EventPage;
}

impl ListEvents {
    pub const DEFAULT_PAGE: u32 = 500;
    pub const MAX_PAGE: u32 = 5000;
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<crate::event_record::EventRecord>,
    /// Where the next page starts: given on every page, so that a follower can ask
    /// again from there once more events are written.
    pub cursor: String,
    /// The log holds more past this page now (false: caught up).
    pub more: bool,
}

/// Which operations to list; every condition given must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationFilter {
    #[serde(default)]
    pub state: Option<OperationState>,
    #[serde(default)]
    pub user: Option<String>,
    /// The operation's pool in any of its trees.
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub pool_tree: Option<String>,
    /// Submitted at or after (unix ms).
    #[serde(default)]
    pub from_time: Option<UnixMillis>,
    /// Submitted before (unix ms).
    #[serde(default)]
    pub to_time: Option<UnixMillis>,
}

impl OperationFilter {
    /// The one rule for live and archived operations alike. `pools` are the operation's
    /// (tree, pool) pairs.
    pub fn admits<'a>(
        &self,
        user: &str,
        state: OperationState,
        start_time: UnixMillis,
        mut pools: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    ) -> bool {
        self.state.is_none_or(|s| s == state)
            && self.user.as_deref().is_none_or(|u| u == user)
            && self
                .pool_tree
                .as_deref()
                .is_none_or(|t| pools.clone().any(|(tree, _)| tree == t))
            && self
                .pool
                .as_deref()
                .is_none_or(|p| pools.any(|(_, pool)| pool == p))
            && self.from_time.is_none_or(|t| start_time >= t)
            && self.to_time.is_none_or(|t| start_time < t)
    }

    pub fn admits_info(&self, info: &OperationInfo) -> bool {
        self.admits(
            &info.user,
            info.state,
            info.start_time,
            info.pool_trees
                .iter()
                .map(|(t, p)| (t.as_str(), p.as_str())),
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OperationPage {
    pub operations: Vec<OperationInfo>,
    /// Where the next page starts; absent on the last page.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AbortOperation {
    pub operation_id: OperationId,
}
impl ApiMethod for AbortOperation {
    const METHOD: &'static str = "abort_operation";
    type Response = ();
}

/// Ends an unfinished operation as completed now (YTsaurus's `complete_operation`):
/// running jobs are aborted, waiting ones dropped.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CompleteOperation {
    pub operation_id: OperationId,
}
impl ApiMethod for CompleteOperation {
    const METHOD: &'static str = "complete_operation";
    type Response = ();
}

/// Aborts one running job (`user_request`); it runs again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AbortJob {
    pub operation_id: OperationId,
    pub job_id: JobId,
}
impl ApiMethod for AbortJob {
    const METHOD: &'static str = "abort_job";
    type Response = ();
}

/// Changes a pending or running operation's pool, weight, limits or owners (SPEC 5.14).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UpdateOperationParameters {
    pub operation_id: OperationId,
    pub parameters: crate::spec::OperationParameters,
}
impl ApiMethod for UpdateOperationParameters {
    const METHOD: &'static str = "update_operation_parameters";
    type Response = ();
}

/// Gives an operation no new jobs until it is resumed; with `abort_running_jobs` its
/// running jobs are aborted as `suspended` and wait again.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SuspendOperation {
    pub operation_id: OperationId,
    #[serde(default)]
    pub abort_running_jobs: bool,
}
impl ApiMethod for SuspendOperation {
    const METHOD: &'static str = "suspend_operation";
    type Response = ();
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResumeOperation {
    pub operation_id: OperationId,
}
impl ApiMethod for ResumeOperation {
    const METHOD: &'static str = "resume_operation";
    type Response = ();
}

/// One page of an operation's job attempts, oldest start first.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ListJobs {
    pub operation_id: OperationId,
    /// At most this many (default `ListOperations::DEFAULT_PAGE`, at most
    /// `ListOperations::MAX_PAGE`).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Continue after the page that returned this `next_cursor`.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Only attempts in this state.
    #[serde(default)]
    pub state: Option<JobState>,
}
impl ApiMethod for ListJobs {
    const METHOD: &'static str = "list_jobs";
    type Response = JobPage;
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; absent on the last page.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GetJobOutput {
    pub operation_id: OperationId,
    pub job_id: JobId,
    pub stream: OutputStream,
}
impl ApiMethod for GetJobOutput {
    const METHOD: &'static str = "get_job_output";
    type Response = String;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ListNodes {}
impl ApiMethod for ListNodes {
    const METHOD: &'static str = "list_nodes";
    type Response = Vec<NodeInfo>;
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    pub hostname: String,
    /// `online` (in `tree`), `idle` (online, no tree's filter matches), `refused`
    /// (online, `error` says why) or `offline`.
    pub state: String,
    pub tree: Option<String>,
    pub error: Option<String>,
    /// It reports more than it was approved for (its limits are the approval).
    #[serde(default)]
    pub alert: Option<String>,
    pub system_tags: Vec<String>,
    /// Configured on the agent (`--tag`).
    pub tags: Vec<String>,
    /// Set by an admin (`//sys/cluster_nodes/<node>/@user_tags`).
    pub user_tags: Vec<String>,
    pub resource_limits: ResourceVector,
    pub resource_usage: ResourceVector,
    pub running_job_count: u64,
    pub last_heartbeat: UnixMillis,
    /// `banned`, `decommissioned`, `disable_scheduler_jobs` (SPEC 5.13).
    #[serde(default)]
    pub maintenance: crate::maintenance::NodeMaintenance,
}

// Admin verbs on YTsaurus paths (SPEC 6.1). Values travel as JSON text so that any
// shape (maps, lists, scalars, null) survives MessagePack unchanged.

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminGet {
    pub path: String,
}
impl ApiMethod for AdminGet {
    const METHOD: &'static str = "get";
    /// The value as JSON text.
    type Response = String;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminSet {
    pub path: String,
    /// JSON text.
    pub value: String,
}
impl ApiMethod for AdminSet {
    const METHOD: &'static str = "set";
    type Response = ();
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminList {
    pub path: String,
}
impl ApiMethod for AdminList {
    const METHOD: &'static str = "list";
    type Response = Vec<String>;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminRemove {
    pub path: String,
}
impl ApiMethod for AdminRemove {
    const METHOD: &'static str = "remove";
    type Response = ();
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminExists {
    pub path: String,
}
impl ApiMethod for AdminExists {
    const METHOD: &'static str = "exists";
    type Response = bool;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectType {
    SchedulerPool,
    SchedulerPoolTree,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminCreate {
    pub object_type: ObjectType,
    pub name: String,
    /// Pools only: the parent (the root when absent) and the tree.
    pub parent_name: Option<PoolName>,
    pub pool_tree: Option<TreeName>,
    /// JSON text of the attribute map, if any.
    pub attributes: Option<String>,
}
impl ApiMethod for AdminCreate {
    const METHOD: &'static str = "create";
    type Response = ();
}

/// A change an admin can make: what `--dry-run` evaluates without making it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case")]
pub enum AdminChange {
    Set(AdminSet),
    Remove(AdminRemove),
    Create(AdminCreate),
}

/// `set|create|remove --dry-run`: every fair share the change would move, computed by
/// the scheduler's core on a copy of the live state. Nothing changes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdminWhatIf {
    pub change: AdminChange,
}
impl ApiMethod for AdminWhatIf {
    const METHOD: &'static str = "what_if";
    type Response = WhatIf;
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// Pools and operations whose fair share the change moves (or that it adds or
    /// removes), by tree, then kind, then name.
    pub changes: Vec<ShareChange>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareChange {
    pub tree: String,
    /// `pool` or `operation`.
    pub kind: String,
    pub name: String,
    /// `fair_share_ratio` as the orchid shows it; `None`: not there.
    pub before: Option<f64>,
    pub after: Option<f64>,
}
