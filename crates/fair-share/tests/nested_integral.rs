//! Integral pools inside integral pools, with a plain pool between them. SPEC 5.7 sums
//! flow and burst ratios over a pool's subtree, so such trees are valid; the update used
//! to keep the middle pool's function, built from the inner pool's temporary one, while
//! forgetting the inner pool's: the inner burst pool got no integral share, and nested
//! relaxed pools made the update panic (the scheduler with it).
mod support;
use support::*;
use ytsched_common::resources::ResourceVector;
use ytsched_fair_share::*;

fn integral(kind: IntegralKind, flow: f64, burst: f64, total: ResourceVector) -> IntegralInput {
    IntegralInput {
        kind,
        resource_flow: cpu(flow),
        burst_guarantee: cpu(burst),
        relaxed_share_multiplier_limit: 3.0,
        // Enough for a ratio of 0.5 at once (0.5 · 60 s).
        volume: total.scale(30.0),
        last_share_ratio: 0.0,
    }
}

#[test]
fn a_burst_pool_inside_a_burst_pool_gets_its_burst_share() {
    // 100 cpu. Outer burst 20 cpu, inner (below a plain pool) burst 10 cpu with demand
    // 50 cpu, and a pool without guarantees that wants everything.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let outer = t.pool(0);
    t.integral(outer, integral(IntegralKind::Burst, 1.0, 20.0, total));
    let middle = t.pool(outer);
    let inner = t.pool(middle);
    t.integral(inner, integral(IntegralKind::Burst, 1.0, 10.0, total));
    t.op(inner, rv(50.0, 1.0, 0.0, 50.0));
    let other = t.pool(0);
    t.op(other, rv(100.0, 1.0, 0.0, 100.0));
    let out = t.run();
    let ig = out.elements[inner].integral.as_ref().unwrap();
    near_f(ig.last_share_ratio, 0.1);
    assert!(
        out.elements[inner].fair_share.integral_guarantee.cpu >= 0.1 - 1e-9,
        "{:?}",
        out.elements[inner].fair_share
    );
}

#[test]
fn relaxed_pools_nested_with_a_pool_between_them_are_computed() {
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let outer = t.pool(0);
    t.integral(outer, integral(IntegralKind::Relaxed, 10.0, 0.0, total));
    let middle = t.pool(outer);
    let inner = t.pool(middle);
    t.integral(inner, integral(IntegralKind::Relaxed, 5.0, 0.0, total));
    let op = t.op(inner, rv(50.0, 1.0, 0.0, 50.0));
    let other = t.pool(0);
    t.op(other, rv(100.0, 1.0, 0.0, 100.0));
    let out = t.run();
    let share = |i: usize| out.elements[i].fair_share;
    assert!(
        share(inner).integral_guarantee.cpu > 0.0,
        "{:?}",
        share(inner)
    );
    near(share(op).total, share(inner).total);
    near_f(share(0).total.cpu, 1.0);
}
