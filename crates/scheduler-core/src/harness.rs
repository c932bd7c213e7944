//! A test harness for the core, after Nomad's scheduler `Harness`: a world of nodes,
//! pools and operations in a few lines, driven by heartbeats from simulated nodes that
//! run what they are told, with every call's `Effects` recorded for assertions. A test
//! reads as a scenario: set up, heartbeat, finish jobs, look at what the core decided.

use crate::virtual_cluster::{VirtualCluster, VirtualNode};
use crate::{CoreConfig, Effects, SchedulerCore};
use std::collections::BTreeMap;
use ytsched_common::identity::Caller;
use ytsched_common::protocol::{
    FinishedJob, HeartbeatReply, HeartbeatRequest, JobStartSpec, JobStatistics, RunningJob,
    UnixMillis,
};
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::{TaskSpec, VanillaSpec};
use ytsched_common::states::JobState;
use ytsched_common::units::ByteSize;
use ytsched_common::{IncarnationId, JobId, NodeId, OperationId};

pub struct Harness {
    pub core: SchedulerCore,
    /// The injected clock, in Unix ms.
    pub now: UnixMillis,
    /// The nodes, each played as an agent would; the test says when each heartbeats.
    nodes: VirtualCluster,
    /// Every call's effects, oldest first.
    pub effects: Vec<Effects>,
    next_op: u32,
    /// What the store holds: the latest record of each key, through the real codec. A
    /// test may put back an older copy: a store whose writes lagged behind.
    pub stored: Stored,
}

/// The records the service would have written, as the store keeps them.
#[derive(Clone, Default)]
pub struct Stored {
    config: Option<Vec<u8>>,
    operations: BTreeMap<OperationId, Vec<u8>>,
    jobs: BTreeMap<JobId, Vec<u8>>,
    trust: BTreeMap<ytsched_common::NodeId, crate::nodes::trust::TrustRecord>,
}

/// A one-task spec: `jobs` jobs of `cpu` cores and 1 GiB each.
pub fn spec(jobs: u32, cpu: f64) -> VanillaSpec {
    VanillaSpec::single_task(TaskSpec::new("true", jobs, cpu, ByteSize(1 << 30)))
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Self {
        Harness::starting_at(1_000)
    }

    /// A harness whose clock starts at `now`.
    pub fn starting_at(now: UnixMillis) -> Self {
        Harness {
            core: SchedulerCore::new(CoreConfig::default()),
            now,
            nodes: VirtualCluster::new(),
            effects: vec![],
            next_op: 0,
            stored: Stored::default(),
        }
    }

    /// Runs `call` on the core and records its effects; what they change is stored.
    pub fn run<R>(&mut self, call: impl FnOnce(&mut SchedulerCore) -> R) -> R {
        let (answer, effects) = self.core.run(call);
        self.record(effects);
        answer
    }

    /// Keeps a call's effects, storing what they change.
    fn record(&mut self, effects: Effects) {
        self.store(&effects);
        self.effects.push(effects);
    }

    fn store(&mut self, effects: &Effects) {
        use crate::records::StateChange;
        use ytsched_common::codec::encode;
        if effects.config_changed {
            self.stored.config = Some(encode(self.core.cluster_config()).expect("encodes"));
        }
        for change in &effects.changes {
            match change {
                StateChange::Operation(o) => {
                    self.stored
                        .operations
                        .insert(o.id.clone(), encode(o.as_ref()).expect("encodes"));
                }
                StateChange::Job(j) => {
                    self.stored
                        .jobs
                        .insert(j.job.id.clone(), encode(j.as_ref()).expect("encodes"));
                }
                // Revival never reads outputs back.
                StateChange::Output(_) => {}
                StateChange::NodeTrust(node, record) => {
                    self.stored.trust.insert(node.clone(), *record);
                }
            }
        }
    }

    /// The scheduler restarts: a new core revives from what was stored (the nodes keep
    /// running what they ran), with `window_ms` for nodes to report their jobs.
    pub fn restart_scheduler(&mut self, window_ms: u64) -> &mut Self {
        use crate::records::{JobRecord, OperationRecord};
        use ytsched_common::codec::decode;
        let mut core = SchedulerCore::new(CoreConfig::default());
        if let Some(config) = &self.stored.config {
            core.set_cluster_config(decode(config).expect("decodes"))
                .expect("a stored configuration is valid");
        }
        fn decode_all<K, T: serde::de::DeserializeOwned>(stored: &BTreeMap<K, Vec<u8>>) -> Vec<T> {
            stored
                .values()
                .map(|b| decode(b).expect("decodes"))
                .collect()
        }
        let operations: Vec<OperationRecord> = decode_all(&self.stored.operations);
        let jobs: Vec<JobRecord> = decode_all(&self.stored.jobs);
        core.restore_node_trust(self.stored.trust.clone());
        self.core = core;
        let now = self.now;
        self.run(|c| c.restore(operations, jobs, now, window_ms));
        self
    }

    /// Adds a node of `cpu` cores (64 GiB, 100 slots) with `tags`, registered by its
    /// first heartbeat.
    pub fn node(&mut self, name: &str, cpu: f64, tags: &[&str]) -> &mut Self {
        self.add_node(name, cpu, tags);
        self.heartbeat(name);
        self
    }

    /// Adds a node that has not heartbeated yet: the core learns of it at its first.
    pub fn add_node(&mut self, name: &str, cpu: f64, tags: &[&str]) -> &mut Self {
        let id = NodeId::parse(name).expect("a valid node name");
        let tags = tags.iter().map(|t| t.to_string()).collect();
        self.nodes.add(VirtualNode::new(id, limits(cpu), tags));
        self
    }

    fn node_mut(&mut self, name: &str) -> &mut VirtualNode {
        let id = NodeId::parse(name).expect("a valid node name");
        self.nodes.node_mut(&id).expect("a node of this harness")
    }

    /// Whether the node is slow to kill: while it is, aborts leave its jobs running.
    pub fn slow_to_kill(&mut self, name: &str, slow: bool) {
        self.node_mut(name).slow_to_kill = slow;
    }

    /// The node now offers `cpu` cores (from its next heartbeat).
    pub fn set_cpu(&mut self, name: &str, cpu: f64) {
        let node = self.node_mut(name);
        let r = node.resources;
        node.resources = ResourceVector::new(cpu, r.memory, r.gpu, r.user_slots);
    }

    /// Creates pool `name` (under `parent`, else the root) of the default tree with
    /// `attributes` (JSON), as an admin.
    pub fn pool(
        &mut self,
        name: &str,
        parent: Option<&str>,
        attributes: serde_json::Value,
    ) -> &mut Self {
        self.run(|c| c.create_pool("default", name, parent, attributes))
            .unwrap_or_else(|e| panic!("pool {name}: {e}"));
        self
    }

    /// Submits `spec` as `user`; returns the operation's id.
    pub fn submit(&mut self, user: &str, spec: VanillaSpec) -> OperationId {
        self.next_op += 1;
        let id = OperationId::parse(&format!("op{}", self.next_op)).expect("a valid id");
        let now = self.now;
        self.run(|c| c.start_operation_as(id.clone(), &Caller::user(user), spec, None, now))
            .unwrap_or_else(|e| panic!("submit as {user}: {e}"))
    }

    /// Moves the clock on.
    pub fn advance(&mut self, ms: u64) -> &mut Self {
        self.now += ms;
        self
    }

    /// Moves the clock to `now` (never back).
    pub fn at(&mut self, now: UnixMillis) -> &mut Self {
        assert!(
            now >= self.now,
            "the clock moves forward: {} → {now}",
            self.now
        );
        self.now = now;
        self
    }

    /// One heartbeat of `name`: it reports what it runs and every result not yet
    /// acknowledged, then starts and aborts what the reply says. A graceful abort leaves
    /// the job running until the test ends it, as a job checkpointing after its
    /// interruption signal does.
    pub fn heartbeat(&mut self, name: &str) -> HeartbeatReply {
        let id = NodeId::parse(name).expect("a valid node name");
        let now = self.now;
        let (reply, effects) = self
            .core
            .run(|c| self.nodes.heartbeat(c, &id, now, &|_| None));
        self.record(effects);
        reply.expect("a node of this harness")
    }

    /// A heartbeat from every node, in name order.
    pub fn heartbeat_all(&mut self) {
        let mut names: Vec<String> = self.nodes.nodes().map(|n| n.id.to_string()).collect();
        names.sort();
        for n in names {
            self.heartbeat(&n);
        }
    }

    /// Ends every job `name` runs with `state`; the next heartbeat reports them.
    pub fn finish_all(&mut self, name: &str, state: JobState) {
        let now = self.now;
        self.node_mut(name).end_all(state, now);
    }

    /// Job `job` on `name` ends with `state`; the next heartbeat reports it.
    pub fn finish_job(&mut self, name: &str, job: &JobId, state: JobState) {
        let now = self.now;
        self.node_mut(name)
            .end_job(job, state, now)
            .expect("a job the node runs");
    }

    /// Job `job` on `name` exits with `code` (a failure unless 0).
    pub fn exit_job(&mut self, name: &str, job: &JobId, code: i32) {
        let now = self.now;
        let state = if code == 0 {
            JobState::Completed
        } else {
            JobState::Failed
        };
        let result = self.node_mut(name).end_job(job, state, now);
        result.expect("a job the node runs").statistics.exit_code = Some(code);
    }

    /// Every job `name` runs completes; its heartbeat at `now` reports them.
    pub fn finish_at(&mut self, name: &str, now: UnixMillis) -> HeartbeatReply {
        self.finish_all(name, JobState::Completed);
        self.at(now).heartbeat(name)
    }

    /// The operations of the jobs `name` runs, one entry per job.
    pub fn ops_on(&self, name: &str) -> Vec<String> {
        self.running_on(name)
            .iter()
            .map(|s| s.operation_id.to_string())
            .collect()
    }

    /// Jobs `name` runs now.
    pub fn running_on(&self, name: &str) -> Vec<&JobStartSpec> {
        let id = NodeId::parse(name).expect("a valid node name");
        let node = self.nodes.node(&id).expect("a node of this harness");
        node.running().map(|j| &j.spec).collect()
    }

    /// Running jobs of `op` across the nodes.
    pub fn running_of(&self, op: &OperationId) -> usize {
        self.nodes
            .nodes()
            .flat_map(VirtualNode::running)
            .filter(|j| &j.spec.operation_id == op)
            .count()
    }

    /// The effects of the last call.
    pub fn last_effects(&self) -> &Effects {
        self.effects.last().expect("a call was made")
    }
}

/// A heartbeat of node `name` offering `limits`, running `running` (as started) and
/// reporting `finished`: unnumbered (seq 0), first incarnation, no tags. The one
/// builder of requests for the core's tests; the harness's nodes fill in the rest.
pub fn request(
    name: &str,
    limits: ResourceVector,
    running: &[JobStartSpec],
    finished: Vec<FinishedJob>,
) -> HeartbeatRequest {
    HeartbeatRequest {
        resource_usage: running.iter().map(|s| s.resources).sum(),
        running_jobs: running.iter().map(|s| RunningJob::started(s, 0)).collect(),
        finished_jobs: finished,
        ..HeartbeatRequest::new(NodeId(name.into()), IncarnationId("i1".into()), limits)
    }
}

/// `cpu` cores, 64 GiB, no GPU, 100 user slots.
pub fn limits(cpu: f64) -> ResourceVector {
    ResourceVector::new(cpu, 64.0 * (1u64 << 30) as f64, 0.0, 100.0)
}

/// The result of a job the node ran, ending in `state`; it printed `out <index>`.
pub fn finished(s: &JobStartSpec, state: JobState) -> FinishedJob {
    FinishedJob {
        job_id: s.job_id.clone(),
        operation_id: s.operation_id.clone(),
        state,
        error: (state == JobState::Failed).then(|| "command exited with code 1".into()),
        start_time: 1,
        finish_time: 2,
        statistics: JobStatistics::default(),
        stdout_tail: format!("out {}", s.job_index),
        stderr_tail: String::new(),
        attempt_of: Some(ytsched_common::protocol::AttemptOf::of(s)),
    }
}

#[cfg(test)]
mod scenarios {
    use super::*;
    use ytsched_common::states::OperationState;

    /// Two users' operations in two pools of equal weight on one 8-core node: each gets
    /// half; when one finishes, the other takes the node; every start was a nudge or an
    /// answer, and the finished operation's record went to the store.
    #[test]
    fn equal_pools_share_a_node_and_the_survivor_takes_it_all() {
        let mut h = Harness::new();
        h.node("n1", 8.0, &[])
            .pool("a", None, serde_json::json!({}))
            .pool("b", None, serde_json::json!({}));
        let mut sa = spec(8, 1.0);
        sa.pool = Some("a".parse().unwrap());
        let mut sb = spec(8, 1.0);
        sb.pool = Some("b".parse().unwrap());
        let a = h.submit("alice", sa);
        assert!(
            !h.last_effects().changes.is_empty(),
            "a submission is stored before it is answered"
        );
        let b = h.submit("bob", sb);
        // The first update puts both in the tree; jobs follow on the next heartbeats.
        for _ in 0..4 {
            h.advance(500).heartbeat_all();
        }
        assert_eq!(h.running_of(&a) + h.running_of(&b), 8, "the node is full");
        assert_eq!(h.running_of(&a), 4, "half each");
        assert!(
            h.effects.iter().any(|e| !e.changes.is_empty()),
            "starts are stored"
        );
        // bob's jobs all complete; alice's fill the node as bob's eight jobs end.
        for _ in 0..6 {
            let bob_jobs: Vec<JobId> = h
                .running_on("n1")
                .iter()
                .filter(|s| s.operation_id == b)
                .map(|s| s.job_id.clone())
                .collect();
            if bob_jobs.is_empty() {
                break;
            }
            for j in bob_jobs {
                h.finish_job("n1", &j, JobState::Completed);
            }
            h.advance(500).heartbeat_all();
        }
        for _ in 0..3 {
            h.advance(500).heartbeat_all();
        }
        let info = h.core.reads().operation_info(&b).unwrap();
        assert_eq!(info.state, OperationState::Completed, "{info:?}");
        assert_eq!(h.running_of(&a), 8, "alice's operation takes the node");
    }

    /// A failing job's attempt is retried; one failure more than `max_failed_job_count`
    /// fails the operation (SPEC: "more failed jobs → operation failed"), which says why.
    #[test]
    fn failed_jobs_fail_the_operation_past_its_limit() {
        let mut h = Harness::new();
        h.node("n1", 4.0, &[]);
        let mut s = spec(1, 1.0);
        s.max_failed_job_count = 2;
        let op = h.submit("alice", s);
        for _ in 0..10 {
            h.advance(500).heartbeat_all();
            h.finish_all("n1", JobState::Failed);
        }
        let info = h.core.reads().operation_info(&op).unwrap();
        assert_eq!(info.state, OperationState::Failed, "{info:?}");
        assert_eq!(info.jobs.failed, 3, "two retried, the third fails it");
        let why = info.error.unwrap_or_default();
        assert!(why.contains("more than max_failed_job_count = 2"), "{why}");
    }
}
