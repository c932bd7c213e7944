//! The agent's state and its heartbeat loop: report running and finished jobs, start
//! and abort what the scheduler says, and keep results until they are acknowledged.

use crate::job;
use crate::reply_log::SeenState;
use crate::sandbox::{Isolation, SandboxConfig};
use futures::{FutureExt, StreamExt};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tracing::{info, warn};
use ytsched_common::codec::{decode, encode};
use ytsched_common::protocol::{
    unix_now, AttemptOf, FinishedJob, HeartbeatReply, HeartbeatRequest, JobAbort, JobStartSpec,
    Registration, RunningJob, UnixMillis, PROTOCOL_VERSION,
};
use ytsched_common::resources::ResourceVector;
use ytsched_common::states::{AbortReason, JobState};
use ytsched_common::subjects::Subjects;
use ytsched_common::{IncarnationId, JobId, NodeId};

mod fence;
pub use fence::fence_after;

/// Results larger than this per heartbeat wait for the next one (NATS payload limit).
const FINISHED_BYTES_PER_HEARTBEAT: usize = 512 * 1024;
/// Job ids remembered after acknowledgement, so a re-delivered start never runs twice.
const REMEMBERED_JOB_IDS: usize = 100_000;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Short enough that agents are back within a revived scheduler's revival window.
const MAX_BACKOFF: Duration = Duration::from_millis(ytsched_common::protocol::AGENT_MAX_RETRY_MS);

pub struct AgentConfig {
    pub node_id: NodeId,
    pub hostname: String,
    /// Detected: `host:`, `arch:`, `gpu`, `gpu_model:`.
    pub system_tags: Vec<String>,
    /// From `--tag`.
    pub tags: Vec<String>,
    pub resource_limits: ResourceVector,
    /// Device indices of this node's GPUs, handed to jobs exclusively.
    pub gpu_devices: Vec<u32>,
    pub subjects: Subjects,
    pub sandbox: SandboxConfig,
    /// The node's file cache (SPEC 5.17); None: jobs with files fail, saying so.
    pub files: Option<Arc<crate::files::NodeFiles>>,
}

struct RunningEntry {
    spec: JobStartSpec,
    start_time: UnixMillis,
    abort: Option<oneshot::Sender<JobAbort>>,
    gpus: Vec<u32>,
    slot: Option<u32>,
    /// Set while the job's files are fetched: reported as `preparing`.
    preparing: Arc<std::sync::atomic::AtomicBool>,
}

/// A job a reply started, with what it was given.
struct Starting {
    spec: JobStartSpec,
    gpus: Vec<u32>,
    abort: oneshot::Receiver<JobAbort>,
    want: usize,
    slot: Option<u32>,
    preparing: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Default)]
struct AgentState {
    running: HashMap<JobId, RunningEntry>,
    finished: BTreeMap<JobId, FinishedJob>,
    seen: HashSet<JobId>,
    seen_order: VecDeque<JobId>,
    free_gpus: BTreeSet<u32>,
    /// Slot indices not held by a running job; a job runs as its slot's user.
    free_slots: BTreeSet<u32>,
    shutting_down: bool,
}

pub struct Agent {
    config: AgentConfig,
    /// This run of the agent as the scheduler knows it; a new one when the scheduler
    /// finds its heartbeat numbers out of sequence (`Registration::Stale`).
    incarnation: Mutex<IncarnationId>,
    /// Numbers heartbeats so the scheduler can ignore one delivered late.
    heartbeat_seq: std::sync::atomic::AtomicU64,
    /// The newest heartbeat whose reply was read and applied: the scheduler resends
    /// starts of later replies, which this agent never saw.
    last_reply_seq: std::sync::atomic::AtomicU64,
    state: Mutex<AgentState>,
    /// Heartbeat now: a job finished.
    wake: Notify,
    /// When the last heartbeat the scheduler answered was sent (it cannot have taken it
    /// earlier), and the scheduler's node timeout as it last said it: see
    /// `fence_when_silent`.
    last_answer: Mutex<std::time::Instant>,
    node_timeout_ms: std::sync::atomic::AtomicU64,
    /// Give up the heartbeat that waits and send another: a scheduler answers probes
    /// (`fence.rs`), so that one went to a scheduler that is gone.
    resend: Notify,
}

impl Agent {
    pub fn new(config: AgentConfig) -> Arc<Self> {
        let state = AgentState {
            free_gpus: config.gpu_devices.iter().copied().collect(),
            free_slots: (0..config.resource_limits.user_slots.max(1.0) as u32).collect(),
            ..Default::default()
        };
        Arc::new(Agent {
            config,
            incarnation: Mutex::new(IncarnationId::random()),
            heartbeat_seq: std::sync::atomic::AtomicU64::new(0),
            last_reply_seq: std::sync::atomic::AtomicU64::new(0),
            state: Mutex::new(state),
            wake: Notify::new(),
            last_answer: Mutex::new(std::time::Instant::now()),
            node_timeout_ms: std::sync::atomic::AtomicU64::new(0),
            resend: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AgentState> {
        self.state.lock().expect("agent state lock")
    }

    pub fn running_job_count(&self) -> usize {
        self.lock().running.len()
    }

    /// Heartbeats until `shutdown` resolves, then kills every job and cleans up.
    pub async fn run(
        self: Arc<Self>,
        client: async_nats::Client,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let mut nudges = client
            .subscribe(self.config.subjects.nudge(&self.config.node_id))
            .await?;
        let subject = self.config.subjects.heartbeat(&self.config.node_id);
        let mut backoff = Duration::from_millis(100);
        let mut seen = SeenState::default();
        let fence = tokio::spawn(
            self.clone()
                .fence_when_silent(client.clone(), subject.clone()),
        );
        let guard = tokio::spawn(self.clone().keep_a_guardian());
        tokio::pin!(shutdown);
        loop {
            let request = self.build_request();
            let sent = std::time::Instant::now();
            let wait = match self.send_heartbeat(&client, &subject, &request).await {
                Ok(reply) => {
                    if seen.reachable != Some(true) {
                        info!(subject = %subject, "scheduler reachable");
                        seen.reachable = Some(true);
                    }
                    backoff = Duration::from_millis(100);
                    self.take_reply(reply, request.seq, sent, &mut seen)
                }
                Err(error) => {
                    if seen.reachable != Some(false) {
                        warn!(
                            error,
                            "scheduler unreachable; jobs keep running until shortly before its node timeout, retrying with backoff"
                        );
                        seen.reachable = Some(false);
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    backoff
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
                Some(_) = nudges.next() => {}
                _ = &mut shutdown => break,
            }
            // Nudges that queued up meanwhile are all answered by the heartbeat about to
            // go: one heartbeat per wake-up, never one per nudge.
            while let Some(Some(_)) = nudges.next().now_or_never() {}
        }
        fence.abort();
        guard.abort();
        self.shut_down().await;
        Ok(())
    }

    /// One heartbeat and its reply, or why there is none.
    async fn send_heartbeat(
        &self,
        client: &async_nats::Client,
        subject: &str,
        request: &HeartbeatRequest,
    ) -> Result<HeartbeatReply, String> {
        let bytes = encode(request).map_err(|e| e.to_string())?;
        let answer = tokio::time::timeout(
            REQUEST_TIMEOUT,
            client.request(subject.to_string(), bytes.into()),
        );
        let reply = tokio::select! {
            answer = answer => answer,
            _ = self.resend.notified() => {
                return Err("given up: the scheduler it went to is gone".to_string());
            }
        }
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| {
            if e.kind() == async_nats::RequestErrorKind::NoResponders {
                // The bus carried the request and no scheduler listens: no scheduler
                // counts this node's silence either (a restarted one waits its revival
                // window for the jobs), so it is not silence that calls for stopping jobs.
                *self.last_answer.lock().expect("answer lock") = std::time::Instant::now();
            }
            e.to_string()
        })?;
        decode::<HeartbeatReply>(&reply.payload).map_err(|e| e.to_string())
    }

    /// Acts on a reply (registration, timeout, user tags, starts and aborts, or a new
    /// incarnation when refused as stale); how long until the next heartbeat.
    fn take_reply(
        self: &Arc<Self>,
        mut reply: HeartbeatReply,
        seq: u64,
        sent: std::time::Instant,
        seen: &mut SeenState,
    ) -> Duration {
        if !matches!(
            reply.registration,
            Registration::Rejected { .. } | Registration::Stale { .. }
        ) {
            // The scheduler took this heartbeat: its clock for this node's silence
            // restarted no earlier than the heartbeat was sent. Not when its answer came:
            // an answer may come seconds late (one that waited on a slow store), and
            // counting from then let this node run jobs past the moment the scheduler
            // declared it lost and ran them elsewhere (issue 42's campaign).
            {
                let mut last = self.last_answer.lock().expect("answer lock");
                *last = (*last).max(sent);
            }
            if reply.node_heartbeat_timeout_ms > 0 {
                self.node_timeout_ms.store(
                    reply.node_heartbeat_timeout_ms,
                    std::sync::atomic::Ordering::Relaxed,
                );
                // The guardian knows its deadline before any job of this reply starts,
                // counted from the sending too.
                let timeout = Duration::from_millis(reply.node_heartbeat_timeout_ms);
                let fence_at = fence_after(timeout, self.config.sandbox.kill_grace);
                self.config
                    .sandbox
                    .guardian
                    .alive_for(fence_at.saturating_sub(sent.elapsed()));
            }
        }
        let period = Duration::from_millis(reply.heartbeat_period_ms.clamp(10, 60_000));
        seen.note(&reply);
        if matches!(reply.registration, Registration::Stale { .. }) {
            // Retrying the same numbers would be refused forever: a new incarnation
            // starts its numbers afresh, and reports the jobs this process runs, so none
            // is lost.
            self.reincarnate();
            seen.registration = None;
            Duration::from_millis(100)
        } else if self.too_late_to_start(sent) {
            // The scheduler may have given this node up before this answer came: its
            // starts do not run. Its seq is not noted as read, so a scheduler that still
            // counts them this node's sends them again.
            warn!(
                late_ms = sent.elapsed().as_millis() as u64,
                jobs = reply.jobs_to_start.len(),
                "heartbeat answered too late to start its jobs"
            );
            reply.jobs_to_start.clear();
            self.apply_reply(reply);
            period
        } else {
            self.apply_reply(reply);
            self.last_reply_seq
                .store(seq, std::sync::atomic::Ordering::Relaxed);
            period
        }
    }

    /// Replaces a job guardian that died, at once: without one a crash of this agent
    /// would leave its jobs running unsupervised.
    async fn keep_a_guardian(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.config.sandbox.guardian.check();
        }
    }

    fn reincarnate(&self) {
        let fresh = IncarnationId::random();
        info!(incarnation = %fresh, "new incarnation");
        *self.incarnation.lock().expect("incarnation lock") = fresh;
        self.heartbeat_seq
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.last_reply_seq
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }

    fn build_request(&self) -> HeartbeatRequest {
        let st = self.lock();
        let running_jobs: Vec<RunningJob> = st
            .running
            .values()
            .map(|r| {
                let mut job = RunningJob::started(&r.spec, r.start_time);
                if r.preparing.load(std::sync::atomic::Ordering::Relaxed) {
                    job.state = JobState::Preparing;
                }
                job
            })
            .collect();
        let mut budget = FINISHED_BYTES_PER_HEARTBEAT;
        let mut finished_jobs = Vec::new();
        for f in st.finished.values() {
            let size = f.stdout_tail.len() + f.stderr_tail.len() + 512;
            if !finished_jobs.is_empty() && size > budget {
                break;
            }
            budget = budget.saturating_sub(size);
            finished_jobs.push(f.clone());
        }
        HeartbeatRequest {
            protocol_version: PROTOCOL_VERSION,
            node_id: self.config.node_id.clone(),
            incarnation_id: self.incarnation.lock().expect("incarnation lock").clone(),
            seq: self
                .heartbeat_seq
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1,
            hostname: self.config.hostname.clone(),
            system_tags: self.config.system_tags.clone(),
            tags: self.config.tags.clone(),
            resource_limits: self.config.resource_limits,
            resource_usage: running_jobs.iter().map(|r| r.resource_usage).sum(),
            running_jobs,
            finished_jobs,
            timeout_ms: REQUEST_TIMEOUT.as_millis() as u64,
            last_reply_seq: Some(
                self.last_reply_seq
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            file_cache: self.config.files.as_ref().map(|f| f.counters()),
        }
    }

    fn apply_reply(self: &Arc<Self>, reply: HeartbeatReply) {
        let mut removable = Vec::new();
        let mut to_start = Vec::new();
        {
            let mut st = self.lock();
            for id in &reply.acknowledged_jobs {
                if st.finished.remove(id).is_some() {
                    removable.push(self.config.sandbox.job_dir(id.as_str()));
                }
            }
            for abort in reply.jobs_to_abort {
                if let Some(entry) = st.running.get_mut(&abort.job_id) {
                    if let Some(tx) = entry.abort.take() {
                        info!(job = %abort.job_id, reason = %abort.reason, "aborting job");
                        let _ = tx.send(abort);
                    }
                }
            }
            if st.shutting_down {
                return;
            }
            for spec in reply.jobs_to_start {
                if !st.seen.insert(spec.job_id.clone()) {
                    continue; // delivered twice: it already runs or ran here
                }
                st.seen_order.push_back(spec.job_id.clone());
                if st.seen_order.len() > REMEMBERED_JOB_IDS {
                    if let Some(old) = st.seen_order.pop_front() {
                        st.seen.remove(&old);
                    }
                }
                let want = spec.resources.gpu.max(0.0) as usize;
                let gpus: Vec<u32> = st.free_gpus.iter().take(want).copied().collect();
                for g in &gpus {
                    st.free_gpus.remove(g);
                }
                let slot = st.free_slots.pop_first();
                let (tx, rx) = oneshot::channel();
                // Preparing from the start: the next heartbeat says so (sent at once, below).
                let preparing = Arc::new(std::sync::atomic::AtomicBool::new(spec.needs_files()));
                st.running.insert(
                    spec.job_id.clone(),
                    RunningEntry {
                        spec: spec.clone(),
                        start_time: unix_now(),
                        abort: Some(tx),
                        gpus: gpus.clone(),
                        slot,
                        preparing: preparing.clone(),
                    },
                );
                to_start.push(Starting {
                    spec,
                    gpus,
                    abort: rx,
                    want,
                    slot,
                    preparing,
                });
            }
        }
        self.start_jobs(to_start);
        if !removable.is_empty() {
            tokio::task::spawn_blocking(move || {
                for dir in removable {
                    crate::disk_image::release(&dir);
                    let _ = std::fs::remove_dir_all(dir);
                }
            });
        }
    }

    /// Runs each job a reply started, in a task of its own; one short of a GPU or a slot
    /// fails at once, saying so.
    fn start_jobs(self: &Arc<Self>, to_start: Vec<Starting>) {
        if to_start.iter().any(|s| s.spec.needs_files()) {
            self.wake.notify_one();
        }
        for s in to_start {
            let agent = self.clone();
            tokio::spawn(async move {
                let Starting {
                    spec,
                    gpus,
                    abort,
                    want,
                    slot,
                    preparing,
                } = s;
                let result = match slot {
                    _ if gpus.len() < want => shortage(
                        &spec,
                        format!("node has {} free GPU(s), job needs {want}", gpus.len()),
                    ),
                    None => shortage(&spec, "node has no free job slot".into()),
                    Some(slot) => {
                        let env = gpu_env(&gpus);
                        let launch = job::Launch {
                            config: &agent.config.sandbox,
                            extra_env: &env,
                            slot,
                            gpus: &gpus,
                            files: agent.config.files.as_ref(),
                            preparing: &preparing,
                        };
                        job::run(launch, &spec, abort).await
                    }
                };
                agent.job_done(result);
            });
        }
    }

    fn job_done(&self, result: FinishedJob) {
        let mut st = self.lock();
        if let Some(entry) = st.running.remove(&result.job_id) {
            st.free_gpus.extend(entry.gpus);
            st.free_slots.extend(entry.slot);
        }
        if !st.shutting_down {
            st.finished.insert(result.job_id.clone(), result);
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Kills every job (SIGTERM, then SIGKILL after the grace), removes sandboxes and
    /// the node's cgroup directories.
    async fn shut_down(&self) {
        let count = {
            let mut st = self.lock();
            st.shutting_down = true;
            for entry in st.running.values_mut() {
                if let Some(tx) = entry.abort.take() {
                    let _ = tx.send(JobAbort {
                        job_id: entry.spec.job_id.clone(),
                        reason: AbortReason::NodeLost,
                        message: "node agent is shutting down".into(),
                        graceful_timeout_ms: None,
                    });
                }
            }
            st.running.len()
        };
        info!(jobs = count, "shutting down: stopping jobs");
        let deadline =
            tokio::time::Instant::now() + self.config.sandbox.kill_grace + Duration::from_secs(10);
        while self.running_job_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.config.sandbox.remove_stale_dirs();
        if let Isolation::Cgroup(manager) = &self.config.sandbox.isolation {
            manager.remove_node_dirs();
        }
    }
}

fn gpu_env(gpus: &[u32]) -> Vec<(String, String)> {
    if gpus.is_empty() {
        return vec![];
    }
    let list = gpus
        .iter()
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(",");
    vec![
        ("CUDA_VISIBLE_DEVICES".to_string(), list.clone()),
        ("NVIDIA_VISIBLE_DEVICES".to_string(), list),
    ]
}

/// A job the node could not start for want of something it should have had.
fn shortage(spec: &JobStartSpec, error: String) -> FinishedJob {
    let now = unix_now();
    FinishedJob {
        job_id: spec.job_id.clone(),
        operation_id: spec.operation_id.clone(),
        state: JobState::Aborted,
        error: Some(error),
        start_time: now,
        finish_time: now,
        statistics: Default::default(),
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        attempt_of: Some(AttemptOf::of(spec)),
    }
}
