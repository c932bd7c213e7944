//! Bytes the core holds per waiting operation and per finished job attempt (SPEC §8's
//! memory rows, measured inside the core rather than as process RSS, which also counts
//! the allocator's free lists, the runtime and NATS buffers). A counting global
//! allocator gives live heap bytes; prints one JSON line.
//!
//! `cargo bench -p ytsched-scheduler --bench memory`

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use support::{add_pools, lift_tree_limits};
use ytsched_common::names::PoolName;
use ytsched_common::protocol::*;
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::JobState;
use ytsched_common::{IncarnationId, NodeId, OperationId};
use ytsched_scheduler::core::{CoreConfig, SchedulerCore};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Relaxed);
        LIVE.fetch_sub(layout.size(), Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const OPERATIONS: u64 = 10_000;
const NODES: usize = 1_000;
const POOLS: usize = 100;

fn spec(pool: &str, jobs: u32) -> VanillaSpec {
    let mut s: VanillaSpec = serde_yaml_ng::from_str(&format!(
        "tasks: {{t: {{command: 'sleep 60; cat', job_count: {jobs}, cpu_limit: 1}}}}"
    ))
    .expect("spec");
    s.pool = Some(PoolName::parse(pool).expect("pool"));
    s
}

fn heartbeat(
    node: usize,
    running: &[JobStartSpec],
    finished: Vec<FinishedJob>,
) -> HeartbeatRequest {
    HeartbeatRequest {
        running_jobs: running.iter().map(|s| RunningJob::started(s, 0)).collect(),
        finished_jobs: finished,
        ..HeartbeatRequest::new(
            NodeId(format!("n{node}")),
            IncarnationId("i".into()),
            ResourceVector::new(16.0, 64.0 * (1u64 << 30) as f64, 0.0, 16.0),
        )
    }
}

fn main() {
    let base = LIVE.load(Relaxed);
    let mut core = SchedulerCore::new(CoreConfig::default());
    // Every operation runs (none held pending by the default counts of running
    // operations), as in a burst of small operations.
    lift_tree_limits(&mut core);
    add_pools(&mut core, POOLS, 1000);
    // Nodes that fit the jobs (a node with no room would make every operation fail as
    // unplaceable) and register before any operation exists: with no later heartbeat,
    // nothing starts and the operations stay waiting.
    for n in 0..NODES {
        let _ = core.run(|c| c.process_heartbeat(heartbeat(n, &[], vec![]), 1));
    }
    let with_nodes = LIVE.load(Relaxed);
    for i in 0..OPERATIONS {
        // Ids in no particular order, as the scheduler's random ones arrive.
        let id = OperationId(format!("{:032x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into());
        let (r, _) = core
            .run(|c| c.start_operation(id, "u", spec(&format!("p{}", i as usize % POOLS), 1), 2));
        r.expect("submit");
    }
    // Before the first fair-share update: the operations and their indexes, not yet
    // the update's snapshot.
    let unshared = LIVE.load(Relaxed);
    let _ = core.run(|c| c.update_all_shares(3));
    let waiting = LIVE.load(Relaxed);
    let still_waiting = core
        .reads()
        .list_operations_page(&Default::default())
        .expect("list")
        .operations
        .iter()
        .all(|o| o.state == ytsched_common::states::OperationState::Running);
    assert!(
        still_waiting,
        "the operations measured must be waiting to run"
    );
    let per_op = (waiting - with_nodes) as f64 / OPERATIONS as f64;

    // The same operations once each one's job runs (a burst of small operations
    // placed): what a running attempt adds to its operation.
    let mut running: Vec<Vec<JobStartSpec>> = vec![vec![]; NODES];
    let mut started = 0;
    for round in 0..10u64 {
        for (n, run) in running.iter_mut().enumerate() {
            let (reply, _) =
                core.run(|c| c.process_heartbeat(heartbeat(n, run, vec![]), 4 + round));
            started += reply.jobs_to_start.len();
            run.extend(reply.jobs_to_start);
        }
    }
    let _ = core.run(|c| c.update_all_shares(20));
    assert_eq!(
        started as u64, OPERATIONS,
        "every operation's job must be running"
    );
    let per_running_op = (LIVE.load(Relaxed) - with_nodes) as f64 / OPERATIONS as f64;

    drop(core);

    // A second core: one operation whose 20,000 jobs run and finish on 100 nodes.
    let mut core2 = SchedulerCore::new(CoreConfig::default());
    let before_jobs = LIVE.load(Relaxed);
    let jobs = 20_000u32;
    let (r, _) =
        core2.run(|c| c.start_operation(OperationId("big".into()), "u", spec("p0", jobs), 1));
    r.expect("submit");
    let mut done = 0u32;
    let mut now = 2;
    let mut running: Vec<Vec<JobStartSpec>> = vec![vec![]; 100];
    while done < jobs {
        for (n, run) in running.iter_mut().enumerate() {
            let finished = run
                .drain(..)
                .map(|s| FinishedJob {
                    job_id: s.job_id,
                    operation_id: s.operation_id,
                    state: JobState::Completed,
                    error: None,
                    start_time: now - 1,
                    finish_time: now,
                    statistics: Default::default(),
                    stdout_tail: String::new(),
                    stderr_tail: String::new(),
                    attempt_of: None,
                })
                .collect::<Vec<_>>();
            done += finished.len() as u32;
            let (reply, _) = core2.run(|c| c.process_heartbeat(heartbeat(n, &[], finished), now));
            *run = reply.jobs_to_start;
            now += 1;
        }
        if done >= jobs {
            break;
        }
    }
    let after_jobs = LIVE.load(Relaxed);
    let per_job = (after_jobs - before_jobs) as f64 / jobs as f64;
    println!(
        "{}",
        serde_json::json!({
            "core_bytes_empty": with_nodes - base,
            "nodes": NODES,
            "waiting_operations": OPERATIONS,
            "bytes_per_waiting_operation": per_op.round(),
            "of_which_fair_share_snapshot": ((waiting as f64 - unshared as f64) / OPERATIONS as f64).round(),
            "bytes_per_running_operation": per_running_op.round(),
            "finished_job_attempts": jobs,
            "bytes_per_finished_job_attempt": per_job.round(),
        })
    );
    drop(core2);
}
