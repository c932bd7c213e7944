//! Properties every update must have, over random trees.

mod support;
use proptest::prelude::*;
use support::*;
use ytsched_common::resources::{Resource, ResourceVector};

const TOL: f64 = 1e-6;

#[derive(Clone, Debug)]
struct Spec {
    parent: usize,
    is_op: bool,
    weight: u8,
    demand: (u8, u8, u8),
    usage_pct: u8,
    guarantee: Option<u8>,
    limit: Option<u8>,
    fifo: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<usize>(),
        prop::bool::weighted(0.6),
        1u8..5,
        (0u8..30, 0u8..30, 0u8..10),
        0u8..=100,
        prop::option::weighted(0.3, 0u8..30),
        prop::option::weighted(0.2, 1u8..60),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(parent, is_op, weight, demand, usage_pct, guarantee, limit, fifo)| Spec {
                parent,
                is_op,
                weight,
                demand,
                usage_pct,
                guarantee,
                limit,
                fifo,
            },
        )
}

fn build(specs: &[Spec], scale: f64) -> Tree {
    let total = rv(40.0, 80.0, 4.0, 30.0).scale(scale);
    let mut t = Tree::new(total);
    // (index, accepts pools)
    let mut pools: Vec<(usize, bool)> = vec![(0, true)];
    let nan = f64::NAN;
    for s in specs {
        if s.is_op {
            let parent = pools[s.parent % pools.len()].0;
            let d = rv(
                s.demand.0 as f64,
                s.demand.1 as f64 * 2.0,
                (s.demand.2 % 3) as f64,
                s.demand.2 as f64,
            )
            .scale(scale);
            let u = d
                .scale(s.usage_pct as f64 / 100.0)
                .map(|_, v| (v / scale).floor() * scale);
            let o = t.op_with_usage(parent, d, u);
            t.weight(o, s.weight as f64);
            if let Some(l) = s.limit {
                t.limits(o, rv(l as f64, NONE, NONE, NONE).scale(scale));
            }
        } else {
            let candidates: Vec<usize> = pools.iter().filter(|p| p.1).map(|p| p.0).collect();
            let parent = candidates[s.parent % candidates.len()];
            let p = if s.fifo {
                t.fifo_pool(parent)
            } else {
                t.pool(parent)
            };
            t.weight(p, s.weight as f64);
            if let Some(g) = s.guarantee {
                t.guarantee(p, rv(g as f64 * scale, nan, nan, nan));
            }
            if let Some(l) = s.limit {
                t.limits(p, rv(NONE, l as f64 * scale, NONE, NONE));
            }
            pools.push((p, !s.fifo));
        }
    }
    t
}

fn children(t: &Tree, p: usize) -> Vec<usize> {
    (0..t.input.elements.len())
        .filter(|&c| t.input.elements[c].parent == Some(p))
        .collect()
}

fn le(a: &ResourceVector, b: &ResourceVector) -> bool {
    Resource::ALL.iter().all(|&r| a.get(r) <= b.get(r) + TOL)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn shares_add_up_and_stay_within_bounds(specs in prop::collection::vec(spec(), 1..14)) {
        let t = build(&specs, 1.0);
        let out = t.run();
        for (i, e) in out.elements.iter().enumerate() {
            let fs = e.fair_share.total;
            // No share exceeds the element's limited demand or its limits.
            prop_assert!(le(&fs, &e.limited_demand_share), "{i}: {fs:?} > limited demand {:?}", e.limited_demand_share);
            prop_assert!(le(&fs, &e.limits_share) || i == 0, "{i}: {fs:?} > limits {:?}", e.limits_share);
            prop_assert!(le(&e.limited_demand_share, &e.demand_share), "{i}: limited demand above demand");
            // The parts add up to the total.
            let d = e.fair_share;
            let parts = d.strong_guarantee + d.integral_guarantee + d.weight_proportional;
            prop_assert!(le(&parts, &fs) && le(&fs, &parts));
            if !t.input.elements[i].is_operation() {
                let kids = children(&t, i);
                let sum: ResourceVector = kids.iter().map(|&c| out.elements[c].fair_share.total).sum();
                // A pool's share is its children's sum.
                prop_assert!(le(&sum, &fs) && le(&fs, &sum), "{i}: {fs:?} vs children {sum:?}");
            }
        }
        // The root never exceeds the cluster.
        prop_assert!(le(&out.elements[0].fair_share.total, &rv(1.0, 1.0, 1.0, 1.0)));
        prop_assert!(le(&out.elements[0].strong_guarantee_share, &rv(1.0, 1.0, 1.0, 1.0)));
    }

    #[test]
    fn a_guarantee_is_met_when_demand_asks_for_it(specs in prop::collection::vec(spec(), 1..14)) {
        let t = build(&specs, 1.0);
        let out = t.run();
        for c in children(&t, 0) {
            let e = &out.elements[c];
            let g = e.strong_guarantee_share;
            if t.input.elements[c].is_operation() || g.cpu <= TOL {
                continue;
            }
            // The element goes along its path at least until its guarantee binds on some
            // resource or its path ends.
            let ld = e.limited_demand_share;
            let reached = Resource::ALL.iter().any(|&r| g.get(r) > TOL && e.fair_share.total.get(r) >= g.get(r) - TOL);
            let ended = le(&ld, &e.fair_share.total);
            prop_assert!(reached || ended, "{c}: share {:?} below guarantee {g:?} (limited demand {ld:?})", e.fair_share.total);
        }
    }

    #[test]
    fn raising_a_weight_never_lowers_that_operations_share(
        specs in prop::collection::vec(spec(), 1..12),
        pick in any::<usize>(),
    ) {
        let t = build(&specs, 1.0);
        let ops: Vec<usize> = (0..t.input.elements.len()).filter(|&i| t.input.elements[i].is_operation()).collect();
        prop_assume!(!ops.is_empty());
        let o = ops[pick % ops.len()];
        let before = t.run().elements[o].fair_share.total;
        let mut heavier = build(&specs, 1.0);
        heavier.weight(o, heavier.input.elements[o].weight * 3.0);
        let after = heavier.run().elements[o].fair_share.total;
        prop_assert!(le(&before, &after), "{before:?} → {after:?}");
    }

    #[test]
    fn scaling_everything_leaves_shares_unchanged(
        specs in prop::collection::vec(spec(), 1..12),
        k in prop::sample::select(vec![0.5, 2.0, 8.0]),
    ) {
        let a = build(&specs, 1.0).run();
        let b = build(&specs, k).run();
        for (x, y) in a.elements.iter().zip(&b.elements) {
            let (p, q) = (x.fair_share.total, y.fair_share.total);
            prop_assert!(le(&p, &q) && le(&q, &p), "{p:?} vs {q:?}");
        }
    }
}

#[test]
fn an_update_is_deterministic() {
    let specs: Vec<Spec> = (0..20)
        .map(|i| Spec {
            parent: i * 7,
            is_op: i % 3 != 0,
            weight: 1 + (i % 4) as u8,
            demand: ((i * 3 % 30) as u8, (i * 5 % 30) as u8, (i % 10) as u8),
            usage_pct: (i * 13 % 100) as u8,
            guarantee: (i % 5 == 0).then_some(5),
            limit: (i % 7 == 0).then_some(20),
            fifo: i % 6 == 0,
        })
        .collect();
    assert_eq!(build(&specs, 1.0).run(), build(&specs, 1.0).run());
}
