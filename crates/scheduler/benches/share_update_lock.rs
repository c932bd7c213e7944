//! What a fair-share update costs under the core's lock (issue 26 point 6): preparing
//! its input from the core and taking the computed shares back in. The computation in
//! between runs off the lock and is `fair_share`'s bench. Operations wait, spread over
//! 100 pools; each iteration moves the clock on by the update period (200 ms), replaces
//! 1 % of the operations (aborts the oldest, submits as many: the churn of a burst of
//! small operations), then prepares, computes and applies one update; only the part
//! named is timed.
//!
//! `cargo bench -p ytsched-scheduler --bench share_update_lock`

mod support;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::time::{Duration, Instant};
use support::{add_pools, lift_tree_limits, submit_one_job_operation, submit_one_job_operations};
use ytsched_common::protocol::HeartbeatRequest;
use ytsched_common::resources::ResourceVector;
use ytsched_common::{IncarnationId, NodeId, OperationId};
use ytsched_scheduler::core::{CoreConfig, SchedulerCore};

fn loaded_core(operations: u64) -> SchedulerCore {
    let mut core = SchedulerCore::new(CoreConfig {
        background_share_updates: true,
        ..CoreConfig::default()
    });
    lift_tree_limits(&mut core);
    add_pools(&mut core, 100, operations / 100 + 1);
    for n in 0..100 {
        let req = HeartbeatRequest::new(
            NodeId(format!("n{n}")),
            IncarnationId("i".into()),
            ResourceVector::new(16.0, 64.0 * (1u64 << 30) as f64, 0.0, 16.0),
        );
        let _ = core.run(|c| c.process_heartbeat(req, 1));
    }
    submit_one_job_operations(&mut core, operations, 2);
    core
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("share_update_under_lock");
    group.sample_size(10);
    for operations in [10_000u64, 100_000] {
        let mut core = loaded_core(operations);
        let mut now = 1_000_000;
        let (mut oldest, mut next) = (0u64, operations);
        // Each iteration times one part; the other runs untimed so that the core
        // moves through whole updates.
        for part in ["prepare", "apply"] {
            group.bench_with_input(BenchmarkId::new(part, operations), &operations, |b, _| {
                b.iter_custom(|iterations| {
                    let mut locked = Duration::ZERO;
                    for _ in 0..iterations {
                        now += 200;
                        for _ in 0..operations / 100 {
                            core.abort_operation(
                                &OperationId(format!("{oldest:032x}").into()),
                                now,
                            )
                            .expect("abort");
                            submit_one_job_operation(&mut core, next, now);
                            oldest += 1;
                            next += 1;
                        }
                        let started = Instant::now();
                        let updates = core.share_updates_due(now);
                        if part == "prepare" {
                            locked += started.elapsed();
                        }
                        let computed: Vec<_> = updates.into_iter().map(|u| u.compute()).collect();
                        let started = Instant::now();
                        let superseded: Vec<_> = computed
                            .into_iter()
                            .map(|shares| core.apply_share_update(shares))
                            .collect();
                        if part == "apply" {
                            locked += started.elapsed();
                        }
                        // The service frees these after letting go of the lock.
                        drop(superseded);
                    }
                    locked
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
