//! One full fair share update of a tree with 1,000 pools (depth 4) and 1,000 / 10,000 /
//! 100,000 running operations with mixed cpu/memory demands (SPEC §8: ≤ 20 ms on one
//! core for 1,000 × 10,000).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ytsched_common::names::TreePoolName;
use ytsched_common::pool_config::{PoolConfig, TreeConfig, ROOT_POOL};
use ytsched_common::resources::ResourceVector;
use ytsched_common::OperationId;
use ytsched_scheduler::core::fair_share::{compute, OperationInput};
use ytsched_scheduler::core::PoolTree;

const GIB: f64 = (1u64 << 30) as f64;

/// 1,000 pools at depth 4: 10 → 30 → 120 → 840 leaves, the upper two levels with cpu
/// guarantees, weights 1..4, every tenth leaf FIFO.
fn tree() -> (PoolTree, Vec<String>) {
    let mut t = PoolTree::new(TreeConfig::default());
    let mut leaves = vec![];
    let mut n = 0;
    let mut add = |t: &mut PoolTree, parent: &str, attrs: serde_json::Value| -> String {
        n += 1;
        let name = format!("p{n}");
        let c = PoolConfig::from_attributes(&name, attrs).unwrap();
        t.add_pool("bench", &name, parent, c, None).unwrap();
        name
    };
    for a in 0..10u32 {
        let attrs =
            serde_json::json!({"weight": 1 + a % 4, "strong_guarantee_resources": {"cpu": 500}});
        let l1 = add(&mut t, ROOT_POOL, attrs);
        for b in 0..3u32 {
            let attrs = serde_json::json!({"weight": 1 + b % 3, "strong_guarantee_resources": {"cpu": 100}});
            let l2 = add(&mut t, &l1, attrs);
            for c in 0..4u32 {
                let l3 = add(&mut t, &l2, serde_json::json!({"weight": 1 + c % 2}));
                for d in 0..7u32 {
                    let mode = if (leaves.len() % 10) == 0 {
                        "fifo"
                    } else {
                        "fair_share"
                    };
                    let attrs = serde_json::json!({"weight": 1 + d % 4, "mode": mode});
                    leaves.push(add(&mut t, &l3, attrs));
                }
            }
        }
    }
    (t, leaves)
}

fn operations(leaves: &[String], count: usize) -> Vec<OperationInput> {
    (0..count)
        .map(|i| {
            let cpu = 0.5 + (i % 7) as f64 * 0.5;
            let mem = GIB * (1 + i % 13) as f64;
            let jobs = 1.0 + (i % 50) as f64;
            let job = ResourceVector::new(cpu, mem, 0.0, 1.0);
            OperationInput {
                id: OperationId(format!("op{i}").into()),
                pool: TreePoolName::parse(&leaves[(i * 7919) % leaves.len()]).unwrap(),
                weight: 1.0 + (i % 3) as f64,
                demand: job.scale(jobs),
                usage: job.scale((jobs / 2.0).floor()),
                resource_limits: ResourceVector::new(
                    f64::INFINITY,
                    f64::INFINITY,
                    f64::INFINITY,
                    f64::INFINITY,
                ),
                max_share_ratio: 1.0,
                seq: i as u64,
                pending_job_count: jobs as u64 / 2,
                is_gang: false,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let (tree, leaves) = tree();
    assert_eq!(tree.pools.len(), 1000);
    let total = ResourceVector::new(20_000.0, 80_000.0 * GIB, 0.0, 40_000.0);
    let mut group = c.benchmark_group("fair_share_update_1000_pools");
    group.sample_size(20);
    for count in [1_000usize, 10_000, 100_000] {
        let ops = operations(&leaves, count);
        group.bench_with_input(BenchmarkId::from_parameter(count), &ops, |b, ops| {
            b.iter(|| compute(&tree, total, ops))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
