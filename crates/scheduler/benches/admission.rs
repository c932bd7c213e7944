//! Submissions into a core that already holds many operations (issue 16: each
//! submission used to count every operation ever seen). One iteration submits 1,000
//! one-job operations, spread over 100 pools, into a core holding 10,000 more.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ytsched_common::names::PoolName;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::OperationId;
use ytsched_scheduler::core::{CoreConfig, SchedulerCore};

fn spec(pool: &str) -> VanillaSpec {
    let mut s: VanillaSpec =
        serde_yaml_ng::from_str("tasks: {t: {command: 'true', job_count: 1}}").expect("spec");
    s.pool = Some(PoolName::parse(pool).expect("pool"));
    s
}

fn loaded_core() -> SchedulerCore {
    let mut core = SchedulerCore::new(CoreConfig::default());
    for p in 0..100 {
        core.create_pool(
            "default",
            &format!("p{p}"),
            None,
            serde_json::json!({"max_operation_count": 1000, "max_running_operation_count": 1000}),
        )
        .expect("pool");
    }
    for i in 0..10_000u64 {
        core.start_operation(
            OperationId(format!("old{i}")),
            "u",
            spec(&format!("p{}", i % 100)),
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
                        OperationId(format!("new{i}")),
                        "u",
                        spec(&format!("p{}", i % 100)),
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
