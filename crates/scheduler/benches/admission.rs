//! Submissions into a core that already holds many operations (issue 16: each
//! submission used to count every operation ever seen). One iteration submits 1,000
//! one-job operations, spread over 100 pools, into a core holding 10,000 more.

mod support;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use support::{add_pools, one_job_spec};
use ytsched_common::OperationId;
use ytsched_scheduler::core::{CoreConfig, SchedulerCore};

fn loaded_core() -> SchedulerCore {
    let mut core = SchedulerCore::new(CoreConfig::default());
    add_pools(&mut core, 100, 1000);
    for i in 0..10_000u64 {
        core.start_operation(
            OperationId(format!("old{i}").into()),
            "u",
            one_job_spec(&format!("p{}", i % 100)),
            i,
        )
        .expect("submit");
    }
    core
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("submissions");
    group.sample_size(10);
    group.bench_function("1000_into_10000", |b| {
        b.iter_batched(
            loaded_core,
            |mut core| {
                for i in 0..1_000u64 {
                    core.start_operation(
                        OperationId(format!("new{i}").into()),
                        "u",
                        one_job_spec(&format!("p{}", i % 100)),
                        20_000 + i,
                    )
                    .expect("submit");
                }
                core
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
