//! One job from start to result: launch the sandbox, wait for the process or an abort,
//! collect statistics, and say why it ended.

use crate::files::{NodeFiles, Prepared};
use crate::sandbox::SandboxConfig;
use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tokio::sync::oneshot;
use ytsched_common::protocol::{unix_now, FinishedJob, JobAbort, JobStartSpec, JobStatistics};
use ytsched_common::states::JobState;

/// What a job's start needs besides its spec: where it runs, and how it gets its files.
pub struct Launch<'a> {
    pub config: &'a SandboxConfig,
    pub extra_env: &'a [(String, String)],
    pub slot: u32,
    pub gpus: &'a [u32],
    pub files: Option<&'a std::sync::Arc<NodeFiles>>,
    /// Set while its files are fetched: its heartbeats then say `preparing`.
    pub preparing: &'a AtomicBool,
}

pub async fn run(
    launch: Launch<'_>,
    spec: &JobStartSpec,
    mut abort: oneshot::Receiver<JobAbort>,
) -> FinishedJob {
    let config = launch.config;
    let mut result = FinishedJob {
        job_id: spec.job_id.clone(),
        operation_id: spec.operation_id.clone(),
        state: JobState::Failed,
        error: None,
        start_time: unix_now(),
        finish_time: unix_now(),
        statistics: JobStatistics::default(),
        stdout_tail: String::new(),
        stderr_tail: String::new(),
        attempt_of: Some(ytsched_common::protocol::AttemptOf::of(spec)),
    };
    let (mut prepared, preparing_ms) = match prepare(&launch, spec, &mut abort).await {
        Ok(p) => p,
        Err((state, error)) => {
            result.state = state;
            result.error = Some(error);
            result.finish_time = unix_now();
            return result;
        }
    };
    let started = Instant::now();
    let sandbox = config.launch(spec, launch.extra_env, launch.slot, launch.gpus, &prepared);
    let mut result = match sandbox {
        Ok(sandbox) => supervise(config, spec, sandbox, abort, result, started).await,
        Err(e) => {
            result.error = Some(format!("cannot start job: {e}"));
            result.finish_time = unix_now();
            result
        }
    };
    if spec.needs_files() {
        result.statistics.bytes_fetched = Some(prepared.bytes_fetched);
        result.statistics.preparing_ms = Some(preparing_ms);
    }
    if let Some(files) = launch.files {
        files.done(&mut prepared);
    }
    result
}

/// Fetches the job's files and layers, unless it has none; an abort meanwhile ends it.
/// Err: how the attempt ended instead, and why.
async fn prepare(
    launch: &Launch<'_>,
    spec: &JobStartSpec,
    abort: &mut oneshot::Receiver<JobAbort>,
) -> Result<(Prepared, u64), (JobState, String)> {
    if !spec.needs_files() {
        return Ok((Prepared::default(), 0));
    }
    let Some(files) = launch.files else {
        return Err((
            JobState::Failed,
            "this node has no file cache for the job's files".into(),
        ));
    };
    let began = Instant::now();
    launch.preparing.store(true, Ordering::Relaxed);
    // In a task of its own: a fetch is never cut off halfway (it holds cache room and
    // pins), so an abort lets it finish and let go of what it holds.
    let mut fetch = tokio::spawn({
        let (files, spec) = (files.clone(), spec.clone());
        async move { files.prepare(&spec).await }
    });
    let prepared = tokio::select! {
        r = &mut fetch => r.unwrap_or_else(|e| Err(format!("preparing the job's files failed: {e}"))),
        Ok(a) = abort => {
            let files = files.clone();
            tokio::spawn(async move {
                if let Ok(Ok(mut p)) = fetch.await {
                    files.done(&mut p);
                }
            });
            return Err((JobState::Aborted, format!("aborted ({}): {}", a.reason, a.message)));
        }
    };
    launch.preparing.store(false, Ordering::Relaxed);
    let ms = began.elapsed().as_millis() as u64;
    tracing::info!(job = %spec.job_id, ms, ok = prepared.is_ok(), "job prepared its files");
    prepared.map(|p| (p, ms)).map_err(|e| (JobState::Failed, e))
}

/// Waits for a launched job to end (or be aborted, or pass its disk space), and
/// fills in how it ended.
async fn supervise(
    config: &SandboxConfig,
    spec: &JobStartSpec,
    mut sandbox: crate::sandbox::Sandbox,
    mut abort: oneshot::Receiver<JobAbort>,
    mut result: FinishedJob,
    started: Instant,
) -> FinishedJob {
    tracing::info!(job = %spec.job_id, pid = sandbox.pid().unwrap_or(0), "job started");
    let pgid = sandbox.pgid();
    config.guardian.watch(pgid);

    let signal = Signal::try_from(spec.interruption_signal.unwrap_or_default().number())
        .unwrap_or(Signal::SIGTERM);
    let mut aborted: Option<JobAbort> = None;
    let mut over_disk: Option<String> = None;
    let disk_space = spec.disk_space.unwrap_or(config.default_disk_space);
    let disk = crate::disk_quota::watch(config.job_dir(spec.job_id.as_str()), disk_space);
    let status = tokio::select! {
        s = sandbox.wait() => s,
        Ok(a) = &mut abort => match sandbox.exited() {
            // Ended on its own as the word came (both were ready at once): it is
            // reported as it ended, so a job that completed is not run again.
            Some(s) => {
                tracing::info!(job = %spec.job_id, "job had ended before it was told to stop");
                Ok(s)
            }
            None => {
                // Graceful preemption gives the job the scheduler's time to checkpoint;
                // otherwise the agent's short grace.
                let grace = a
                    .graceful_timeout_ms
                    .map_or(config.kill_grace, std::time::Duration::from_millis);
                tracing::info!(job = %spec.job_id, signal = ?signal, grace_ms = grace.as_millis() as u64, "job told to stop");
                aborted = Some(a);
                sandbox.terminate(signal, grace).await;
                sandbox.wait().await
            }
        },
        why = disk => {
            tracing::info!(job = %spec.job_id, reason = %why, "job stopped");
            over_disk = Some(why);
            sandbox.terminate(signal, config.kill_grace).await;
            sandbox.wait().await
        }
    };
    // A job that failed on a full sandbox filesystem (its image: writes past its disk
    // space fail at once) failed for its disk limit.
    let failed = status.as_ref().map_or(true, |s| !s.success());
    if over_disk.is_none() && aborted.is_none() && failed {
        over_disk = disk_full_error(config, spec, disk_space);
    }
    let outcome = sandbox.finish().await;
    config.guardian.forget(pgid);
    result.finish_time = unix_now();
    result.stdout_tail = outcome.stdout_tail;
    result.stderr_tail = outcome.stderr_tail;
    result.statistics = statistics(started, &outcome.stats, &status);
    let (state, error) = why_it_ended(
        aborted.as_ref(),
        over_disk,
        &status,
        outcome.stats.oom_killed,
        result.statistics.signal.as_deref(),
    );
    result.state = state;
    result.error = error;
    tracing::info!(job = %spec.job_id, state = %state, error = result.error.as_deref().unwrap_or(""), "job finished");
    result
}

/// The error of a job that failed on a full sandbox filesystem (its image: writes past
/// its disk space fail at once), if that is why.
fn disk_full_error(config: &SandboxConfig, spec: &JobStartSpec, disk_space: u64) -> Option<String> {
    let dir = config.job_dir(spec.job_id.as_str());
    crate::disk_image::is_full(&dir).then(|| {
        format!(
            "disk limit exceeded: the sandbox's disk space of {disk_space} bytes (disk_request.disk_space) is full; writes past it failed with 'No space left on device'"
        )
    })
}

fn statistics(
    started: Instant,
    stats: &crate::cgroup::CgroupStats,
    status: &std::io::Result<std::process::ExitStatus>,
) -> JobStatistics {
    JobStatistics {
        wall_time_ms: started.elapsed().as_millis() as u64,
        user_cpu_seconds: stats.user_cpu_seconds,
        system_cpu_seconds: stats.system_cpu_seconds,
        peak_memory_bytes: stats.peak_memory_bytes,
        exit_code: status.as_ref().ok().and_then(|s| s.code()),
        signal: status.as_ref().ok().and_then(|s| s.signal()).map(|n| {
            Signal::try_from(n)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| n.to_string())
        }),
        ..Default::default()
    }
}

/// How a job ended and the error that says why, in order of precedence: over its disk
/// space, aborted, not waited for, success, out of memory, its exit code or signal.
fn why_it_ended(
    aborted: Option<&JobAbort>,
    over_disk: Option<String>,
    status: &std::io::Result<std::process::ExitStatus>,
    oom_killed: bool,
    signal: Option<&str>,
) -> (JobState, Option<String>) {
    match (aborted, status) {
        _ if over_disk.is_some() => (JobState::Failed, over_disk),
        (Some(a), _) => (
            JobState::Aborted,
            Some(format!("aborted ({}): {}", a.reason, a.message)),
        ),
        (None, Err(e)) => (
            JobState::Failed,
            Some(format!("cannot wait for the job: {e}")),
        ),
        (None, Ok(s)) if s.success() => (JobState::Completed, None),
        (None, Ok(_)) if oom_killed => {
            (JobState::Failed, Some("memory limit exceeded".to_string()))
        }
        (None, Ok(s)) => match (s.code(), signal) {
            (Some(code), _) => (
                JobState::Failed,
                Some(format!("command exited with code {code}")),
            ),
            (None, Some(sig)) => (JobState::Failed, Some(format!("killed by signal {sig}"))),
            (None, None) => (JobState::Failed, Some("ended abnormally".to_string())),
        },
    }
}
