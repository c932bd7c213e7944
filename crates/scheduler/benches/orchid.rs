//! What the orchid costs (issue 43 point 4): its facts taken from the core (under the
//! service's lock, a part at a time) and its JSON made from them (off the lock). 10,000
//! one-job operations over 100 pools on 100 nodes of 16 cpu: 1,600 of them run, the
//! rest wait, all of them in the tree's snapshot.
//!
//! `cargo bench -p ytsched-scheduler --bench orchid`

mod support;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use support::{add_pools, lift_tree_limits, submit_one_job_operations};
use ytsched_common::protocol::HeartbeatRequest;
use ytsched_common::resources::ResourceVector;
use ytsched_common::{IncarnationId, NodeId};
use ytsched_scheduler::core::orchid::{orchid_of, TreeFacts};
use ytsched_scheduler::core::{CoreConfig, SchedulerCore};

fn heartbeat(n: usize) -> HeartbeatRequest {
    HeartbeatRequest::new(
        NodeId(format!("n{n}")),
        IncarnationId("i".into()),
        ResourceVector::new(16.0, 64.0 * (1u64 << 30) as f64, 0.0, 16.0),
    )
}

fn loaded_core(operations: u64) -> SchedulerCore {
    let mut core = SchedulerCore::new(CoreConfig::default());
    lift_tree_limits(&mut core);
    add_pools(&mut core, 100, operations / 100 + 1);
    for n in 0..100 {
        let _ = core.run(|c| c.process_heartbeat(heartbeat(n), 1));
    }
    submit_one_job_operations(&mut core, operations, 2);
    core.update_all_shares(3);
    for n in 0..100 {
        let _ = core.run(|c| c.process_heartbeat(heartbeat(n), 4));
    }
    core.update_all_shares(5);
    core
}

/// The orchid's text from its facts, as the service makes it.
fn json(facts: Vec<TreeFacts>) -> Vec<u8> {
    serde_json::to_vec(&orchid_of(&facts)).expect("orchid")
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("orchid");
    group.sample_size(10);
    let operations = 10_000u64;
    let core = loaded_core(operations);
    let bytes = json(core.reads().orchid_facts()).len();
    eprintln!("orchid of {operations} operations: {bytes} bytes");
    group.bench_with_input(BenchmarkId::new("facts", operations), &core, |b, core| {
        b.iter(|| core.reads().orchid_facts())
    });
    group.bench_with_input(BenchmarkId::new("json", operations), &core, |b, core| {
        b.iter_batched(|| core.reads().orchid_facts(), json, BatchSize::LargeInput)
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
