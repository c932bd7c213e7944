use super::*;
use ytsched_common::event_record::{JobRef, OperationRef};
use ytsched_common::states::AbortReason;
use ytsched_common::JobId;
use ytsched_scheduler_core::SchedulerCore;

/// A log as `ytsched events` prints it, built from records.
pub struct LogText {
    lines: Vec<String>,
}

impl LogText {
    /// Starts with a configuration of pools `a` and `b` in tree `default`.
    pub fn new() -> Self {
        let mut core = SchedulerCore::new(Default::default());
        for pool in ["a", "b"] {
            core.create_pool("default", pool, None, serde_json::Value::Null)
                .unwrap();
        }
        let mut log = LogText { lines: vec![] };
        log.add(
            0,
            Event::Configuration {
                configuration: Box::new(core.cluster_config().clone()),
                heartbeat_period_ms: 1000,
                pool_sample_period_ms: 1000,
                nodes: vec![],
            },
        );
        log
    }

    pub fn add(&mut self, at: UnixMillis, event: Event) -> &mut Self {
        let seq = self.lines.len() as u64 + 1;
        let r = EventRecord {
            version: EVENT_SCHEMA_VERSION,
            epoch: 1,
            seq,
            at,
            event,
        };
        self.lines.push(serde_json::to_string(&r).unwrap());
        self
    }

    pub fn node(&mut self, at: UnixMillis, id: &str, cpu: f64) -> &mut Self {
        self.add(
            at,
            Event::NodeRegistered {
                node: NodeId(id.into()),
                registration: "in pool tree 'default'".into(),
                resources: Some(ResourceVector::new(cpu, 8e9, 0.0, 2.0 * cpu)),
                tags: vec![],
            },
        )
    }

    /// Operation `id` of `user` in `pool`, `jobs` jobs of one cpu.
    pub fn operation(&mut self, at: UnixMillis, id: &str, pool: &str, jobs: u32) -> &mut Self {
        let spec: VanillaSpec = serde_json::from_value(serde_json::json!({
            "pool": pool,
            "tasks": {"t": {"command": "true", "job_count": jobs}}
        }))
        .unwrap();
        self.add(
            at,
            Event::OperationStarted {
                operation: op_ref(id, pool),
                title: None,
                jobs: jobs as u64,
                pending: false,
                spec: Some(Box::new(spec)),
            },
        )
    }

    /// Attempt `attempt` of job `index` of `op`, from `start` to `end` (None: it
    /// still runs), ending as `how`.
    pub fn job(
        &mut self,
        op: &str,
        pool: &str,
        index: u32,
        attempt: u32,
        (start, end): (UnixMillis, Option<UnixMillis>),
        how: Option<AbortReason>,
    ) -> &mut Self {
        let job = JobRef {
            id: JobId(format!("{op}-{index}-{attempt}").into()),
            node: NodeId("n1".into()),
            tree: "default".into(),
            resources: ResourceVector::new(1.0, 512e6, 0.0, 1.0),
            start_time: start,
            task: Some("t".into()),
            job_index: Some(index),
        };
        self.add(
            start,
            Event::JobStarted {
                operation: op_ref(op, pool),
                job: job.clone(),
            },
        );
        let Some(end) = end else { return self };
        let event = match how {
            None => Event::JobFinished {
                operation: op_ref(op, pool),
                job,
                state: JobState::Completed,
                finish_time: end,
                error: None,
                bytes_fetched: None,
            },
            Some(reason) => Event::JobAborted {
                operation: op_ref(op, pool),
                job,
                reason,
                finish_time: end,
                preempted_by: None,
            },
        };
        self.add(end, event)
    }

    pub fn text(&self) -> String {
        self.lines.join("\n") + "\n"
    }
}

fn op_ref(id: &str, pool: &str) -> OperationRef {
    OperationRef {
        id: OperationId(id.into()),
        user: "alice".into(),
        pools: [("default".to_string(), pool.to_string())].into(),
    }
}

fn read_text(text: &str) -> Result<RecordedRun, LogError> {
    read(std::io::Cursor::new(text.as_bytes().to_vec()))
}

#[test]
fn a_log_reads_back_as_its_nodes_operations_and_each_jobs_own_run_time() {
    let mut log = LogText::new();
    log.node(10, "n1", 2.0)
        .operation(100, "op1", "a", 2)
        .job("op1", "a", 0, 0, (200, Some(3_200)), None)
        // Preempted after 1 s, then run again for 5 s: the job took 5 s.
        .job(
            "op1",
            "a",
            1,
            0,
            (200, Some(1_200)),
            Some(AbortReason::Preempted),
        )
        .job("op1", "a", 1, 1, (1_300, Some(6_300)), None)
        .operation(400, "op2", "b", 1)
        .job("op2", "b", 0, 0, (500, None), None)
        .add(
            7_000,
            Event::OperationFinished {
                operation: op_ref("op2", "b"),
                state: OperationState::Aborted,
                error: None,
            },
        )
        // A job of an operation submitted before the log began.
        .job("old", "a", 0, 0, (800, Some(900)), None);
    let run = read_text(&log.text()).unwrap();
    assert_eq!((run.from, run.to), (0, 7_000));
    assert_eq!(run.nodes.len(), 1);
    assert_eq!(run.nodes[&NodeId("n1".into())].resources.cpu, 2.0);
    assert_eq!(run.operations.len(), 2);
    let op1 = &run.operations[0];
    assert_eq!((op1.id.as_str(), op1.at), ("op1", 100));
    assert_eq!(op1.durations[&("t".to_string(), 0)], 3_000);
    assert_eq!(op1.durations[&("t".to_string(), 1)], 5_000);
    assert!(run.operations[1].durations.is_empty(), "still running");
    assert_eq!(
        run.actions,
        vec![(7_000, RecordedAction::End(OperationId("op2".into())))]
    );
    assert!(
        run.notes[0].contains("1 operations submitted before"),
        "{:?}",
        run.notes
    );
}

#[test]
fn a_log_that_cannot_be_replayed_is_refused_naming_why() {
    let good = LogText::new().node(1, "n1", 2.0).text();
    for (text, says) in [
        (String::new(), "empty".to_string()),
        ("\n\n".into(), "empty".into()),
        (
            format!("{good}{{\"version\":1,"),
            "line 3: not an event record".into(),
        ),
        ("[1,2]\n".into(), "line 1: not an event record".into()),
        (
            good.replacen("\"version\":2", "\"version\":99", 1),
            "line 1: schema version 99".into(),
        ),
        (
            good.lines().nth(1).unwrap().to_string(),
            "no readable `configuration`".into(),
        ),
        (
            good.lines().next().unwrap().to_string(),
            "names no node".into(),
        ),
        (
            format!("{good}{}\n", "x".repeat(MAX_LINE_BYTES + 10)),
            format!("line 3: longer than {MAX_LINE_BYTES} bytes"),
        ),
    ] {
        let e = read_text(&text).err().expect("refused").to_string();
        assert!(e.contains(&says), "{e} (expected: {says})");
    }
    let e = read(std::io::Cursor::new(vec![0xff, 0xfe, b'\n']))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("line 1: not UTF-8"), "{e}");
}

/// A log written before the configuration was typed (schema version 1: its JSON text)
/// reads the same as one written now; text that is not a configuration is refused by
/// its line.
#[test]
fn a_version_one_configuration_reads_as_the_same_configuration() {
    let mut log = LogText::new();
    log.node(10, "n1", 4.0);
    let mut first: serde_json::Value = serde_json::from_str(&log.lines[0]).unwrap();
    let config = first["event"]["configuration"].take();
    first["version"] = 1.into();
    first["event"]["configuration"] = config.to_string().into();
    let mut old = log.lines.clone();
    old[0] = first.to_string();
    let now = read_text(&(log.lines.join("\n") + "\n")).unwrap();
    let then = read_text(&(old.join("\n") + "\n")).unwrap();
    assert_eq!(then.configurations, now.configurations);
    assert!(then.configurations[0].1.trees["default"]
        .pools
        .keys()
        .any(|p| p.as_str() == "b"));
    first["event"]["configuration"] = "{\"trees\": 3}".into();
    old[0] = first.to_string();
    let e = read_text(&(old.join("\n") + "\n"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("line 1") && e.contains("not a pool configuration"),
        "{e}"
    );
}
