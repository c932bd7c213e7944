//! A simulated node agent: its own identity, the real wire protocol, jobs "run" for
//! `--job-time`, aborts honoured, nudges answered as `ytsched-node` does.

use super::*;

/// One simulated agent's state.
pub(crate) struct SimNode {
    pub(crate) id: NodeId,
    pub(crate) incarnation: IncarnationId,
    pub(crate) seq: u64,
    /// The newest heartbeat whose reply this node read, as the real agent reports it.
    pub(crate) last_reply_seq: u64,
    pub(crate) limits: ResourceVector,
    /// Each running job and when its simulated run ends.
    pub(crate) running: HashMap<JobId, (RunningJob, Instant)>,
    pub(crate) finished: HashMap<JobId, FinishedJob>,
    pub(crate) seen: HashSet<JobId>,
}

impl SimNode {
    pub(crate) fn request(&mut self) -> HeartbeatRequest {
        self.seq += 1;
        let running_jobs: Vec<RunningJob> = self.running.values().map(|r| r.0.clone()).collect();
        HeartbeatRequest {
            protocol_version: PROTOCOL_VERSION,
            node_id: self.id.clone(),
            incarnation_id: self.incarnation.clone(),
            seq: self.seq,
            hostname: self.id.to_string(),
            system_tags: vec![],
            tags: vec![],
            resource_limits: self.limits,
            resource_usage: running_jobs.iter().map(|r| r.resource_usage).sum(),
            running_jobs,
            finished_jobs: self.finished.values().cloned().collect(),
            timeout_ms: REQUEST_TIMEOUT.as_millis() as u64,
            last_reply_seq: Some(self.last_reply_seq),
            file_cache: None,
        }
    }

    pub(crate) fn apply(&mut self, reply: HeartbeatReply, job_time: Duration, c: &Counters) {
        for id in &reply.acknowledged_jobs {
            self.finished.remove(id);
        }
        for abort in reply.jobs_to_abort {
            if let Some((job, _)) = self.running.remove(&abort.job_id) {
                c.aborts.fetch_add(1, Relaxed);
                self.finished
                    .insert(job.job_id.clone(), finished(&job, JobState::Aborted));
            }
        }
        let now = Instant::now();
        for spec in reply.jobs_to_start {
            if !self.seen.insert(spec.job_id.clone()) {
                continue;
            }
            c.placements.fetch_add(1, Relaxed);
            c.last_placement_ms.fetch_max(unix_now(), Relaxed);
            let job = RunningJob::started(&spec, unix_now());
            self.running.insert(spec.job_id, (job, now + job_time));
        }
    }

    /// Moves jobs whose time is up to the finished list; returns how many.
    pub(crate) fn finish_due(&mut self, c: &Counters) -> usize {
        let now = Instant::now();
        let due: Vec<JobId> = self
            .running
            .iter()
            .filter(|(_, r)| r.1 <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            if let Some((job, _)) = self.running.remove(id) {
                c.completions.fetch_add(1, Relaxed);
                self.finished
                    .insert(id.clone(), finished(&job, JobState::Completed));
            }
        }
        due.len()
    }

    pub(crate) fn next_finish(&self) -> Option<Instant> {
        self.running.values().map(|r| r.1).min()
    }
}

pub(crate) fn finished(job: &RunningJob, state: JobState) -> FinishedJob {
    let now = unix_now();
    FinishedJob {
        job_id: job.job_id.clone(),
        operation_id: job.operation_id.clone(),
        state,
        error: None,
        start_time: job.start_time,
        finish_time: now,
        statistics: JobStatistics {
            wall_time_ms: now.saturating_sub(job.start_time),
            exit_code: Some(0),
            ..Default::default()
        },
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        attempt_of: job.attempt_of.clone(),
    }
}

/// One simulated agent's heartbeat loop, as `ytsched-node`'s: heartbeat, apply the reply,
/// sleep until the period, a job's end or a nudge, drain queued nudges, repeat.
pub(crate) async fn run_node(
    client: async_nats::Client,
    subjects: Subjects,
    mut node: SimNode,
    job_time: Duration,
    counters: Arc<Counters>,
    stop: stop::Stop,
) -> anyhow::Result<()> {
    let mut nudges = client.subscribe(subjects.nudge(&node.id)).await?;
    let subject = subjects.heartbeat(&node.id);
    let mut period = Duration::from_secs(1);
    while !stop.is_set() {
        let bytes = encode(&node.request())?;
        let t0 = Instant::now();
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            client.request(subject.clone(), bytes.into()),
        )
        .await
        {
            Err(_) => {
                counters.timeouts.fetch_add(1, Relaxed);
            }
            Ok(Err(_)) => {
                counters.errors.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Ok(msg)) => match decode::<HeartbeatReply>(&msg.payload) {
                Ok(reply) => {
                    counters.heartbeats.fetch_add(1, Relaxed);
                    counters.record_latency(t0.elapsed().as_micros() as u64);
                    if let Registration::Refused { error }
                    | Registration::Rejected { error }
                    | Registration::Stale { error } = &reply.registration
                    {
                        bail!("node {} was refused: {error}", node.id);
                    }
                    period = Duration::from_millis(reply.heartbeat_period_ms.clamp(10, 60_000));
                    node.apply(reply, job_time, &counters);
                    node.last_reply_seq = node.seq;
                }
                Err(_) => {
                    counters.errors.fetch_add(1, Relaxed);
                }
            },
        }
        if node.finish_due(&counters) == 0 {
            let deadline = match node.next_finish() {
                Some(t) => t.min(Instant::now() + period),
                None => Instant::now() + period,
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {}
                Some(_) = nudges.next() => {}
                _ = stop.wait() => break,
            }
            node.finish_due(&counters);
        }
        // As the real agent: nudges queued meanwhile are answered by the next heartbeat.
        while let Some(Some(_)) = futures::FutureExt::now_or_never(nudges.next()) {}
    }
    Ok(())
}

/// A stop flag many tasks wait on.
pub(crate) mod stop {
    use std::sync::Arc;
    use tokio::sync::watch;

    #[derive(Clone)]
    pub struct Stop(Arc<watch::Sender<bool>>, watch::Receiver<bool>);

    impl Stop {
        pub fn new() -> Self {
            let (tx, rx) = watch::channel(false);
            Stop(Arc::new(tx), rx)
        }
        pub fn set(&self) {
            let _ = self.0.send(true);
        }
        pub fn is_set(&self) -> bool {
            *self.1.borrow()
        }
        pub async fn wait(&self) {
            let mut rx = self.1.clone();
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}
