//! One fair share update of a tree with 1,000 pools (depth 4: 10 → 30 → 120 → 840 leaves,
//! the upper two levels with cpu guarantees, weights 1..4, every tenth leaf FIFO) and
//! 1,000 / 10,000 / 100,000 operations with mixed cpu/memory demands, half running
//! (SPEC §8: ≤ 20 ms on one core for 1,000 × 10,000). The scheduler's bench of the same
//! tree adds building this input from its pool tree.
//!
//! `reused` is how the scheduler computes: one `Solver` per tree, its buffers kept from
//! one update to the next. `fresh` builds them anew each time (`compute`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ytsched_common::resources::ResourceVector;
use ytsched_fair_share::*;

const GIB: f64 = (1u64 << 30) as f64;
const NONE: f64 = f64::INFINITY;

fn pool(parent: usize, weight: f64, mode: Mode, cpu_guarantee: Option<f64>) -> ElementInput {
    let mut e = ElementInput::root();
    e.parent = Some(parent);
    e.weight = weight;
    e.kind = ElementKind::Pool {
        mode,
        strong_guarantee: Guarantee {
            amounts: [cpu_guarantee, None, None, None],
        },
        integral: None,
    };
    e
}

fn tree(operations: usize) -> TreeInput {
    let mut elements = vec![ElementInput::root()];
    let mut leaves = vec![];
    for a in 0..10u32 {
        elements.push(pool(0, (1 + a % 4) as f64, Mode::FairShare, Some(500.0)));
        let l1 = elements.len() - 1;
        for b in 0..3u32 {
            elements.push(pool(l1, (1 + b % 3) as f64, Mode::FairShare, Some(100.0)));
            let l2 = elements.len() - 1;
            for c in 0..4u32 {
                elements.push(pool(l2, (1 + c % 2) as f64, Mode::FairShare, None));
                let l3 = elements.len() - 1;
                for d in 0..7u32 {
                    let mode = if leaves.len() % 10 == 0 {
                        Mode::Fifo
                    } else {
                        Mode::FairShare
                    };
                    elements.push(pool(l3, (1 + d % 4) as f64, mode, None));
                    leaves.push(elements.len() - 1);
                }
            }
        }
    }
    for i in 0..operations {
        let cpu = 0.5 + (i % 7) as f64 * 0.5;
        let mem = GIB * (1 + i % 13) as f64;
        let jobs = 1.0 + (i % 50) as f64;
        let job = ResourceVector::new(cpu, mem, 0.0, 1.0);
        let mut e = ElementInput::root();
        e.parent = Some(leaves[(i * 7919) % leaves.len()]);
        e.weight = 1.0 + (i % 3) as f64;
        e.resource_limits = ResourceVector::new(NONE, NONE, NONE, NONE);
        e.kind = ElementKind::Operation {
            demand: job.scale(jobs),
            usage: job.scale((jobs / 2.0).floor()),
            fifo_rank: i as u64,
            is_gang: false,
        };
        elements.push(e);
    }
    TreeInput {
        total: ResourceVector::new(20_000.0, 80_000.0 * GIB, 0.0, 40_000.0),
        elements,
        integral: IntegralOptions::default(),
        since_previous_s: Some(0.2),
        truncate_gangs_in_fifo_pools: false,
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("vector_hdrf_1000_pools");
    group.sample_size(20);
    for count in [1_000usize, 10_000, 100_000] {
        let input = tree(count);
        let mut solver = Solver::default();
        group.bench_with_input(BenchmarkId::new("reused", count), &input, |b, input| {
            b.iter(|| solver.compute(input).expect("valid").elements.len())
        });
        group.bench_with_input(BenchmarkId::new("fresh", count), &input, |b, input| {
            b.iter(|| compute(input).expect("valid"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
