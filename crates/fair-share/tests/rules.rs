//! Each rule of SPEC 5.1 / 5.7 pinned with numbers derived by hand.

mod support;
use support::*;
use ytsched_common::resources::ResourceVector;
use ytsched_fair_share::*;

const GB: f64 = 1e9;

#[test]
fn complementary_operations_share_by_their_dominant_resource() {
    // Cluster {cpu 100, mem 1000, slots 100}. X demands (cpu 1, mem 2, slots 1) as
    // shares, Y (cpu 2, mem 1, slots 1). Equal weights: both offered s, each at dominant
    // share s: X = s/2·(1, 2, 1), Y = s/2·(2, 1, 1). Memory: s + s/2 ≤ 1 → s = 2/3.
    let mut t = Tree::new(rv(100.0, 1000.0, 0.0, 100.0));
    let a = t.pool(0);
    let x = t.op(a, rv(100.0, 2000.0, 0.0, 100.0));
    let y = t.op(a, rv(200.0, 1000.0, 0.0, 100.0));
    let out = t.run();
    near(
        out.elements[x].fair_share.total,
        rv(1.0 / 3.0, 2.0 / 3.0, 0.0, 1.0 / 3.0),
    );
    near(
        out.elements[y].fair_share.total,
        rv(2.0 / 3.0, 1.0 / 3.0, 0.0, 1.0 / 3.0),
    );
    near(
        out.elements[a].fair_share.total,
        rv(1.0, 1.0, 0.0, 2.0 / 3.0),
    );
    near(
        out.elements[0].fair_share.total,
        rv(1.0, 1.0, 0.0, 2.0 / 3.0),
    );
}

#[test]
fn a_small_operation_is_satisfied_and_its_pool_sums_exactly() {
    // Cluster {cpu 100, mem 1000, slots 100}. Pool A: X (cpu 10, mem 200, slots 10) is
    // small; Y (cpu 3000, mem 10000, slots 1000) has direction (3, 1, 1)/100 · 10.
    // Pool B: Z (cpu 2000, mem 100000, slots 2000), direction (1, 5, 1).
    // Memory runs out first. At root level s (A and B offered s): Z's dominant (memory)
    // = s; inside A, X is done at dominant 0.2 (memory) and Y's dominant (cpu) = y.
    // A's pool path is the sum of its children at a common level, so A's memory is
    // 0.2 + y/3 and its cpu 0.1 + y. A's share must be where A's max component
    // reaches s, i.e. cpu: 0.1 + y = s. Memory: 0.2 + y/3 + s = 1 with y = s − 0.1 →
    // 0.2 + (s − 0.1)/3 + s = 1 → 4s/3 = 0.8 + 0.1/3 → s = 0.625. So Z = 0.625 · (1/5,
    // 1, 1/5) = (0.125, 0.625, 0.125), Y = 0.525 · (1, 1/3, 1/3) = (0.525, 0.175, 0.175).
    let mut t = Tree::new(rv(100.0, 1000.0, 0.0, 100.0));
    let a = t.pool(0);
    let b = t.pool(0);
    let x = t.op(a, rv(10.0, 200.0, 0.0, 10.0));
    let y = t.op(a, rv(3000.0, 10000.0, 0.0, 1000.0));
    let z = t.op(b, rv(2000.0, 100000.0, 0.0, 2000.0));
    let out = t.run();
    near(out.elements[x].fair_share.total, rv(0.1, 0.2, 0.0, 0.1));
    near(
        out.elements[y].fair_share.total,
        rv(0.525, 0.175, 0.0, 0.175),
    );
    near(
        out.elements[z].fair_share.total,
        rv(0.125, 0.625, 0.0, 0.125),
    );
    near(
        out.elements[a].fair_share.total,
        rv(0.625, 0.375, 0.0, 0.275),
    );
    near(out.elements[0].fair_share.total, rv(0.75, 1.0, 0.0, 0.4));
}

#[test]
fn weights_split_what_is_above_guarantees() {
    // SPEC §7.3: 24 cpu, three operations of 12 one-cpu jobs with weights 1, 2, 3 in one
    // pool: level f offers f, 2f, 3f; 6f = 1 → 1/6, 2/6, 3/6.
    let mut t = Tree::new(rv(24.0, 60.0 * GB, 0.0, 100.0));
    let p = t.pool(0);
    let ops: Vec<usize> = (1..=3)
        .map(|w| {
            let o = t.op(p, rv(12.0, 12.0 * GB / 2.0, 0.0, 12.0));
            t.weight(o, w as f64);
            o
        })
        .collect();
    let out = t.run();
    for (k, &o) in ops.iter().enumerate() {
        near_f(out.elements[o].fair_share.total.cpu, (k + 1) as f64 / 6.0);
    }
}

#[test]
fn guaranteed_pools_take_the_cluster_from_pools_without_guarantees() {
    // SPEC §7.6-7: company 24 {development 20 {production 16, testing 4}, analytics 4
    // {chyt 4}}, bi without guarantee. Demands: production 16, chyt 4, testing 8, bi 4.
    // Guarantees (16, 4, 4) use the whole cluster, so nothing is left for weights: bi 0.
    let mut t = Tree::new(rv(24.0, 60.0 * GB, 0.0, 100.0));
    let nan = f64::NAN;
    let company = t.pool(0);
    t.guarantee(company, rv(24.0, nan, nan, nan));
    let dev = t.pool(company);
    t.guarantee(dev, rv(20.0, nan, nan, nan));
    let prod = t.pool(dev);
    t.guarantee(prod, rv(16.0, nan, nan, nan));
    let testing = t.pool(dev);
    t.guarantee(testing, rv(4.0, nan, nan, nan));
    let analytics = t.pool(company);
    t.guarantee(analytics, rv(4.0, nan, nan, nan));
    let chyt = t.pool(analytics);
    t.guarantee(chyt, rv(4.0, nan, nan, nan));
    let bi = t.pool(0);
    let job = |n: f64| rv(n, n * GB, 0.0, n);
    let p1 = t.op(prod, job(4.0));
    let p2 = t.op(prod, job(12.0));
    let c = t.op(chyt, job(4.0));
    let te = t.op(testing, job(8.0));
    let b = t.op(bi, job(4.0));
    let out = t.run();
    near_f(
        out.elements[p1].fair_share.total.cpu + out.elements[p2].fair_share.total.cpu,
        16.0 / 24.0,
    );
    near_f(out.elements[c].fair_share.total.cpu, 4.0 / 24.0);
    near_f(out.elements[te].fair_share.total.cpu, 4.0 / 24.0);
    near_f(out.elements[b].fair_share.total.cpu, 0.0);
    // The guarantee part of production's share is all of it.
    near_f(
        out.elements[prod].fair_share.strong_guarantee.cpu,
        16.0 / 24.0,
    );
    // Implicit memory guarantee: company has cpu 24/24 of the root's cpu → all memory.
    near_f(
        out.elements[company]
            .effective_strong_guarantee_resources
            .memory,
        60.0 * GB,
    );
}

#[test]
fn a_limit_on_one_resource_stops_the_whole_element() {
    // Demand (cpu 0.5, memory 0.5) of the cluster; the operation's cpu limit is 0.25 of
    // it. Its path is along the demand, so it stops at (0.25, 0.25): memory does not
    // grow alone to 0.5. Its limited demand is the same point.
    let mut t = Tree::new(rv(100.0, 100.0, 0.0, 100.0));
    let p = t.pool(0);
    let o = t.op(p, rv(50.0, 50.0, 0.0, 10.0));
    t.limits(o, rv(25.0, NONE, NONE, NONE));
    let out = t.run();
    near(out.elements[o].fair_share.total, rv(0.25, 0.25, 0.0, 0.05));
    near(
        out.elements[o].limited_demand_share,
        rv(0.25, 0.25, 0.0, 0.05),
    );
    near(
        out.elements[p].limited_demand_share,
        rv(0.25, 0.25, 0.0, 0.05),
    );
}

#[test]
fn a_limit_beats_a_guarantee() {
    // SPEC §7.8: testing guaranteed 4 cpu, limited to 3, demand 8 of 24 → 3/24.
    let mut t = Tree::new(rv(24.0, 60.0 * GB, 0.0, 100.0));
    let nan = f64::NAN;
    let testing = t.pool(0);
    t.guarantee(testing, rv(4.0, nan, nan, nan));
    t.limits(testing, rv(3.0, NONE, NONE, NONE));
    let o = t.op(testing, rv(8.0, 8.0 * GB, 0.0, 8.0));
    let out = t.run();
    near_f(out.elements[o].fair_share.total.cpu, 3.0 / 24.0);
    near_f(out.elements[testing].strong_guarantee_share.cpu, 3.0 / 24.0);
}

#[test]
fn a_parent_limit_scales_its_childrens_guarantees() {
    // Parent guaranteed 12 of 24 cpu but limited to 6: its guarantee share is cut to
    // 0.25, and its children's guarantees 8 and 4 (1/3 and 1/6) scale by one factor to
    // fit: 0.25 / 0.5 = 0.5 → 1/6 and 1/12.
    let mut t = Tree::new(rv(24.0, 24.0, 0.0, 24.0));
    let nan = f64::NAN;
    let parent = t.pool(0);
    t.guarantee(parent, rv(12.0, nan, nan, nan));
    t.limits(parent, rv(6.0, NONE, NONE, NONE));
    let a = t.pool(parent);
    t.guarantee(a, rv(8.0, nan, nan, nan));
    let b = t.pool(parent);
    t.guarantee(b, rv(4.0, nan, nan, nan));
    let out = t.run();
    near_f(out.elements[parent].strong_guarantee_share.cpu, 0.25);
    near_f(out.elements[a].strong_guarantee_share.cpu, 1.0 / 6.0);
    near_f(out.elements[b].strong_guarantee_share.cpu, 1.0 / 12.0);
    // The effective (absolute) guarantee is what was configured.
    near_f(
        out.elements[a].effective_strong_guarantee_resources.cpu,
        8.0,
    );
}

#[test]
fn an_overcommitted_root_scales_every_guarantee_by_one_factor() {
    // Two root children guaranteed 16 cpu each on 24: factor 24/32 = 0.75. Shares 0.5
    // each; effective resources stay 16; the root's strong guarantee share is their sum,
    // 1.0; an alert says so. Implicit memory guarantees (16/24 of all memory each) are
    // not shrunk at the root before the factor: 2/3 · 0.75 = 0.5 each.
    let mut t = Tree::new(rv(24.0, 24.0, 0.0, 24.0));
    let nan = f64::NAN;
    let a = t.pool(0);
    t.guarantee(a, rv(16.0, nan, nan, nan));
    let b = t.pool(0);
    t.guarantee(b, rv(16.0, nan, nan, nan));
    let out = t.run();
    near_f(out.overcommit_factor, 0.75);
    near(
        out.elements[a].strong_guarantee_share,
        rv(0.5, 0.5, 0.0, 0.5),
    );
    near_f(
        out.elements[a].effective_strong_guarantee_resources.cpu,
        16.0,
    );
    near_f(
        out.elements[a].effective_strong_guarantee_resources.memory,
        16.0,
    );
    near(
        out.elements[0].strong_guarantee_share,
        rv(1.0, 1.0, 0.0, 1.0),
    );
    assert!(out
        .alerts
        .iter()
        .any(|a| matches!(a, Alert::BurstOvercommit { .. })));
}

#[test]
fn implicit_guarantees_shrink_below_the_root_only() {
    // Parent guaranteed {cpu 12, memory 12} of 24/24. Child A names {cpu 6, memory 10};
    // child B names cpu 6 only: its implicit memory would be 6/12 · 12 = 6, but A's
    // explicit memory leaves 2, so B gets 2.
    let mut t = Tree::new(rv(24.0, 24.0, 0.0, 24.0));
    let nan = f64::NAN;
    let parent = t.pool(0);
    t.guarantee(parent, rv(12.0, 12.0, nan, nan));
    let a = t.pool(parent);
    t.guarantee(a, rv(6.0, 10.0, nan, nan));
    let b = t.pool(parent);
    t.guarantee(b, rv(6.0, nan, nan, nan));
    let out = t.run();
    near_f(
        out.elements[b].effective_strong_guarantee_resources.memory,
        2.0,
    );
    // The root's children keep their full implicit share: the parent's user_slots
    // guarantee is 12/24 of the cluster's 24.
    near_f(
        out.elements[parent]
            .effective_strong_guarantee_resources
            .user_slots,
        12.0,
    );
}

#[test]
fn fifo_children_each_go_to_the_end_of_their_path() {
    // SPEC §7.12: six operations of 5 one-cpu jobs in a FIFO pool on 24 cpu: 5, 5, 5, 5,
    // 4, 0 in order.
    let mut t = Tree::new(rv(24.0, 60.0 * GB, 0.0, 1000.0));
    let p = t.fifo_pool(0);
    let ops: Vec<usize> = (0..6)
        .map(|_| t.op(p, rv(5.0, 5.0 * GB, 0.0, 5.0)))
        .collect();
    let out = t.run();
    let got: Vec<f64> = ops
        .iter()
        .map(|&o| (out.elements[o].fair_share.total.cpu * 24.0 * 1e6).round() / 1e6)
        .collect();
    assert_eq!(got, vec![5.0, 5.0, 5.0, 5.0, 4.0, 0.0]);
    assert_eq!(out.elements[ops[4]].fifo_index, Some(4));
}

#[test]
fn a_gang_short_of_its_whole_demand_in_a_fifo_pool_gets_nothing_when_truncation_is_on() {
    // SPEC 5.15: the FIFO pool gets 0.5 of 24 cpu (12) next to a busy sibling; its first
    // operation takes 8, the gang after it wants 8 and would get 4: with truncation it
    // gets 0, and its 4 are taken off the pool and the root, given to no one.
    let run = |truncate: bool| {
        let mut t = Tree::new(rv(24.0, 60.0 * GB, 0.0, 1000.0));
        t.input.truncate_gangs_in_fifo_pools = truncate;
        let fifo = t.fifo_pool(0);
        let other = t.pool(0);
        let first = t.op(fifo, rv(8.0, 8.0 * GB, 0.0, 8.0));
        let g = t.op(fifo, rv(8.0, 8.0 * GB, 0.0, 8.0));
        t.gang(g);
        t.op(other, rv(24.0, 24.0 * GB, 0.0, 24.0));
        let out = t.run();
        let cpu = |e: usize| (out.elements[e].fair_share.total.cpu * 24.0 * 1e6).round() / 1e6;
        (cpu(first), cpu(g), cpu(fifo), cpu(0))
    };
    assert_eq!(run(false), (8.0, 4.0, 12.0, 24.0));
    assert_eq!(run(true), (8.0, 0.0, 8.0, 20.0));
}

#[test]
fn a_gang_given_its_whole_demand_or_outside_fifo_pools_is_not_truncated() {
    let mut t = Tree::new(rv(24.0, 60.0 * GB, 0.0, 1000.0));
    t.input.truncate_gangs_in_fifo_pools = true;
    let fifo = t.fifo_pool(0);
    let fair = t.pool(0);
    let whole = t.op(fifo, rv(8.0, 8.0 * GB, 0.0, 8.0));
    t.gang(whole);
    let shared = t.op(fair, rv(24.0, 24.0 * GB, 0.0, 24.0));
    t.gang(shared);
    let out = t.run();
    let cpu = |e: usize| (out.elements[e].fair_share.total.cpu * 24.0 * 1e6).round() / 1e6;
    assert_eq!(cpu(whole), 8.0, "its whole demand");
    assert_eq!(
        cpu(shared),
        16.0,
        "fair-share pools share gangs like any other"
    );
}

#[test]
fn usage_is_reached_before_demand_is_followed() {
    // One operation uses (cpu 0.2, memory 0.1) and demands (0.6, 0.1)... with a cpu limit
    // of 0.4 it ends where cpu reaches 0.4 on the usage → demand line: memory stays 0.1.
    let mut t = Tree::new(rv(10.0, 10.0, 0.0, 100.0));
    let p = t.pool(0);
    let o = t.op_with_usage(p, rv(6.0, 1.0, 0.0, 6.0), rv(2.0, 1.0, 0.0, 2.0));
    t.limits(o, rv(4.0, NONE, NONE, NONE));
    let out = t.run();
    near(out.elements[o].fair_share.total, rv(0.4, 0.1, 0.0, 0.04));
}

fn burst(flow: f64, burst: f64, volume_s: f64, total: ResourceVector) -> IntegralInput {
    IntegralInput {
        kind: IntegralKind::Burst,
        resource_flow: cpu(flow),
        burst_guarantee: cpu(burst),
        relaxed_share_multiplier_limit: 3.0,
        volume: total.scale(volume_s),
        last_share_ratio: 0.0,
    }
}

#[test]
fn a_burst_pool_gets_its_burst_share_on_top_of_its_strong_guarantee() {
    // 100 cpu. Burst pool guaranteed 10 cpu, burst 30 cpu, flow 5; its volume is enough
    // for 0.3 at once (0.3 · 60 s = 18 ratio-seconds). Demand 80 cpu. Strong 0.1, integral
    // 0.3 (burst ratio), and a competing pool without guarantees shares the rest by
    // weight: both at level s above guarantees → burst pool 0.4 + x, other x, total 1
    // with other demand 0.8: x = 0.3 → burst 0.7 (wp 0.3), other 0.3.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let nan = f64::NAN;
    let b = t.pool(0);
    t.guarantee(b, rv(10.0, nan, nan, nan));
    t.integral(b, burst(5.0, 30.0, 0.3 * 60.0, total));
    let other = t.pool(0);
    let ob = t.op(b, rv(80.0, 1.0, 0.0, 80.0));
    let oo = t.op(other, rv(80.0, 1.0, 0.0, 80.0));
    let out = t.run();
    let fs = out.elements[b].fair_share;
    near_f(fs.strong_guarantee.cpu, 0.1);
    near_f(fs.integral_guarantee.cpu, 0.3);
    near_f(fs.total.cpu, 0.7);
    near_f(out.elements[ob].fair_share.total.cpu, 0.7);
    near_f(out.elements[oo].fair_share.total.cpu, 0.3);
    let ig = out.elements[b].integral.as_ref().unwrap();
    near_f(ig.last_share_ratio, 0.3);
    near_f(out.elements[0].total_burst_ratio, 0.3);
    near_f(out.elements[0].total_resource_flow_ratio, 0.05);
    // At the root: strong part 0.1, integral 0.3, the rest weights.
    near_f(out.elements[0].fair_share.integral_guarantee.cpu, 0.3);
    near_f(out.elements[0].fair_share.weight_proportional.cpu, 0.6);
}

#[test]
fn a_burst_share_is_bounded_by_volume() {
    // Same pool, volume only for 0.05 at once (3 ratio-seconds / 60 s): integral 0.05.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let b = t.pool(0);
    t.integral(b, burst(5.0, 30.0, 3.0, total));
    t.op(b, rv(80.0, 1.0, 0.0, 80.0));
    let other = t.pool(0);
    t.op(other, rv(80.0, 1.0, 0.0, 80.0));
    let out = t.run();
    near_f(out.elements[b].fair_share.integral_guarantee.cpu, 0.05);
    // Weights on top: both pools then rise together: 0.05 + x + x = 1 → x = 0.475.
    near_f(out.elements[b].fair_share.total.cpu, 0.525);
}

#[test]
fn a_burst_share_respects_an_ancestors_limits() {
    // The burst pool's parent is limited to 20 cpu: integral at most 0.2 of the burst 0.3.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let parent = t.pool(0);
    t.limits(parent, rv(20.0, NONE, NONE, NONE));
    let b = t.pool(parent);
    t.integral(b, burst(5.0, 30.0, 60.0, total));
    t.op(b, rv(80.0, 1.0, 0.0, 80.0));
    let out = t.run();
    near_f(out.elements[b].fair_share.integral_guarantee.cpu, 0.2);
    near_f(out.elements[b].fair_share.total.cpu, 0.2);
}

fn relaxed(flow: f64, volume_ratio_s: f64, total: ResourceVector) -> IntegralInput {
    IntegralInput {
        kind: IntegralKind::Relaxed,
        resource_flow: cpu(flow),
        burst_guarantee: ResourceVector::ZERO,
        relaxed_share_multiplier_limit: 3.0,
        volume: total.scale(volume_ratio_s),
        last_share_ratio: 0.0,
    }
}

#[test]
fn relaxed_pools_share_what_guarantees_leave_by_volume() {
    // 100 cpu. A strong pool guaranteed 60 cpu with demand 60 takes 0.6. Two relaxed
    // pools, flows 20 and 10 (caps 3 × flow = 0.6 and 0.3), volumes for 0.4 and 0.2 at
    // once (24 and 12 ratio-seconds over 60 s): each may take min(volume ratio, cap) =
    // 0.4 and 0.2, but only 0.4 is left: one level weighted by volume 2:1 →
    // 0.2667 and 0.1333.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let nan = f64::NAN;
    let strong = t.pool(0);
    t.guarantee(strong, rv(60.0, nan, nan, nan));
    t.op(strong, rv(60.0, 1.0, 0.0, 60.0));
    let r1 = t.pool(0);
    t.integral(r1, relaxed(20.0, 0.4 * 60.0, total));
    t.op(r1, rv(100.0, 1.0, 0.0, 100.0));
    let r2 = t.pool(0);
    t.integral(r2, relaxed(10.0, 0.2 * 60.0, total));
    t.op(r2, rv(100.0, 1.0, 0.0, 100.0));
    let out = t.run();
    near_f(
        out.elements[r1].fair_share.integral_guarantee.cpu,
        0.4 * 2.0 / 3.0,
    );
    near_f(
        out.elements[r2].fair_share.integral_guarantee.cpu,
        0.4 / 3.0,
    );
    near_f(out.elements[strong].fair_share.total.cpu, 0.6);
}

#[test]
fn a_relaxed_share_is_capped_by_multiplier_times_flow() {
    // Flow 5 cpu (0.05), multiplier 3: at most 0.15 however large the volume.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let r = t.pool(0);
    t.integral(r, relaxed(5.0, 1000.0, total));
    t.op(r, rv(100.0, 1.0, 0.0, 100.0));
    let other = t.pool(0);
    t.op(other, rv(100.0, 1.0, 0.0, 100.0));
    let out = t.run();
    near_f(out.elements[r].fair_share.integral_guarantee.cpu, 0.15);
    // The rest by weights: 0.15 + x + x = 1.
    near_f(out.elements[r].fair_share.total.cpu, 0.15 + 0.425);
}

#[test]
fn volumes_fill_at_the_flow_and_pay_for_the_share_given() {
    // Flow 1 of 24 cpu for 10 s with nothing given before: volume grows by 24 · 10/24
    // = 10 cpu·s; the ratio volume by 10/24.
    let total = rv(24.0, 24.0, 0.0, 24.0);
    let mut t = Tree::new(total);
    let r = t.pool(0);
    t.integral(r, relaxed(1.0, 0.0, total));
    t.input.since_previous_s = Some(10.0);
    let out = t.run();
    let ig = out.elements[r].integral.clone().unwrap();
    near_f(ig.volume.cpu, 10.0);
    // Given 0.5 of the cluster last time for 10 s at flow 1/24: the volume would go
    // negative, and stops at zero.
    t.integral(
        r,
        IntegralInput {
            last_share_ratio: 0.5,
            volume: ig.volume,
            ..relaxed(1.0, 0.0, total)
        },
    );
    let out = t.run();
    near_f(out.elements[r].integral.as_ref().unwrap().volume.cpu, 0.0);
}

#[test]
fn bad_input_is_refused_with_the_element_named() {
    let mut t = Tree::new(rv(1.0, 1.0, 0.0, 1.0));
    let p = t.pool(0);
    t.op(p, rv(f64::NAN, 1.0, 0.0, 1.0));
    assert_eq!(
        compute(&t.input),
        Err(InputError::BadNumber {
            index: 2,
            what: "demand and usage"
        })
    );
    t.input.elements[2].parent = Some(5);
    assert_eq!(compute(&t.input), Err(InputError::BadParent { index: 2 }));
    t.input.elements.clear();
    assert_eq!(compute(&t.input), Err(InputError::NoRoot));
}

#[test]
fn a_relaxed_pool_without_volume_gets_no_integral_share() {
    // Volume 0: the ratio it allows is 0, so the pool only has its weight: 1/2 each.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let mut t = Tree::new(total);
    let r = t.pool(0);
    t.integral(r, relaxed(20.0, 0.0, total));
    t.op(r, rv(100.0, 1.0, 0.0, 100.0));
    let other = t.pool(0);
    t.op(other, rv(100.0, 1.0, 0.0, 100.0));
    let out = t.run();
    near_f(out.elements[r].fair_share.integral_guarantee.cpu, 0.0);
    near_f(out.elements[r].fair_share.total.cpu, 0.5);
    near_f(
        out.elements[r].integral.as_ref().unwrap().last_share_ratio,
        0.0,
    );
}

#[test]
fn an_ancestor_whose_limits_equal_its_guarantee_leaves_no_integral_room() {
    // The parent is guaranteed 30 cpu and limited to 30: no room above its guarantee,
    // so the burst child's integral share is 0 whatever its volume; its strong
    // guarantee (20 of the parent's 30) and the parent's weight still apply.
    let total = rv(100.0, 100.0, 0.0, 1000.0);
    let nan = f64::NAN;
    let mut t = Tree::new(total);
    let parent = t.pool(0);
    t.guarantee(parent, rv(30.0, nan, nan, nan));
    t.limits(parent, rv(30.0, NONE, NONE, NONE));
    let b = t.pool(parent);
    t.guarantee(b, rv(20.0, nan, nan, nan));
    t.integral(b, burst(5.0, 40.0, 1000.0, total));
    t.op(b, rv(80.0, 1.0, 0.0, 80.0));
    let out = t.run();
    near_f(out.elements[b].fair_share.integral_guarantee.cpu, 0.0);
    near_f(out.elements[b].fair_share.strong_guarantee.cpu, 0.2);
    // The child goes on by weight within its parent's limit: all of the parent's 0.3.
    near_f(out.elements[b].fair_share.total.cpu, 0.3);
    near_f(out.elements[parent].fair_share.total.cpu, 0.3);
}

fn flow_pool(kind: IntegralKind, flow: f64, burst: f64) -> IntegralInput {
    IntegralInput {
        kind,
        resource_flow: cpu(flow),
        burst_guarantee: cpu(burst),
        relaxed_share_multiplier_limit: 3.0,
        volume: ResourceVector::ZERO,
        last_share_ratio: 0.0,
    }
}

/// 100 cpu; every operation wants the whole cluster; the previous update was a minute
/// ago, so an empty volume has filled for 60 s at its flow (smooth period 60 s: a flow
/// ratio of x allows an integral ratio of x).
fn a_minute_later() -> Tree {
    let mut t = Tree::new(rv(100.0, 100.0, 0.0, 100.0));
    t.input.since_previous_s = Some(60.0);
    t
}

#[test]
fn every_kind_of_pool_shares_the_weight_proportional_part() {
    // strong: guaranteed 10 (0.1), weight 1; burst: flow 10 = burst 10, weight 1;
    // relaxed: flow 10, weight 2; plain: weight 3. Guarantees first: 0.1 strong, 0.1
    // burst, 0.1 relaxed (its volume allows 0.1; 0.8 is available). Then one level f on
    // top: 0.1 + f, 0.1 + f, 0.1 + 2f, 3f; 0.3 + 7f = 1 → f = 0.1.
    let mut t = a_minute_later();
    let nan = f64::NAN;
    let all = rv(100.0, 100.0, 0.0, 100.0);
    let strong = t.pool(0);
    t.guarantee(strong, rv(10.0, nan, nan, nan));
    let burst = t.pool(0);
    t.integral(burst, flow_pool(IntegralKind::Burst, 10.0, 10.0));
    let relaxed = t.pool(0);
    t.integral(relaxed, flow_pool(IntegralKind::Relaxed, 10.0, 0.0));
    t.weight(relaxed, 2.0);
    let plain = t.pool(0);
    t.weight(plain, 3.0);
    for p in [strong, burst, relaxed, plain] {
        t.op(p, all);
    }
    let out = t.run();
    let parts = |i: usize| {
        let f = out.elements[i].fair_share;
        (
            f.strong_guarantee.cpu,
            f.integral_guarantee.cpu,
            f.weight_proportional.cpu,
        )
    };
    let close = |a: (f64, f64, f64), b: (f64, f64, f64)| {
        assert!(
            (a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6 && (a.2 - b.2).abs() < 1e-6,
            "{a:?} vs {b:?}"
        );
    };
    close(parts(strong), (0.1, 0.0, 0.1));
    close(parts(burst), (0.0, 0.1, 0.1));
    close(parts(relaxed), (0.0, 0.1, 0.2));
    close(parts(plain), (0.0, 0.0, 0.3));
    close(parts(0), (0.1, 0.2, 0.7));
    // The volumes moved by a minute of flow: 0.1 × 60 ratio-seconds each.
    near_f(
        out.elements[relaxed].integral.as_ref().unwrap().volume.cpu,
        600.0,
    );
    near_f(
        out.elements[relaxed]
            .integral
            .as_ref()
            .unwrap()
            .last_share_ratio,
        0.1,
    );
}

#[test]
fn a_burst_pool_with_the_whole_cluster_leaves_nothing_to_relax() {
    // Burst flow = burst = 100 (ratio 1): after a minute its volume allows 1.0, it takes
    // the cluster as integral share; the relaxed pool finds nothing available.
    let mut t = a_minute_later();
    let all = rv(100.0, 100.0, 0.0, 100.0);
    let burst = t.pool(0);
    t.integral(burst, flow_pool(IntegralKind::Burst, 100.0, 100.0));
    let relaxed = t.pool(0);
    t.integral(relaxed, flow_pool(IntegralKind::Relaxed, 100.0, 0.0));
    t.op(burst, all);
    t.op(relaxed, all);
    let out = t.run();
    near_f(out.elements[burst].fair_share.integral_guarantee.cpu, 1.0);
    near_f(out.elements[relaxed].fair_share.total.cpu, 0.0);
    near_f(out.elements[0].fair_share.integral_guarantee.cpu, 1.0);
}

#[test]
fn relaxed_pools_within_what_is_available_get_their_whole_volume_ratio() {
    // Volumes worth 0.1 and 0.3 (for a minute): both fit in the free cluster, so they get
    // exactly that; equal weights then add f each: 0.4 + 2f = 1 → f = 0.3.
    let mut t = Tree::new(rv(100.0, 100.0, 0.0, 100.0));
    let all = rv(100.0, 100.0, 0.0, 100.0);
    let a = t.pool(0);
    t.integral(a, relaxed(100.0, 0.1 * 60.0, all));
    let b = t.pool(0);
    t.integral(b, relaxed(100.0, 0.3 * 60.0, all));
    t.op(a, all);
    t.op(b, all);
    let out = t.run();
    near_f(out.elements[a].fair_share.integral_guarantee.cpu, 0.1);
    near_f(out.elements[a].fair_share.weight_proportional.cpu, 0.3);
    near_f(out.elements[b].fair_share.integral_guarantee.cpu, 0.3);
    near_f(out.elements[b].fair_share.weight_proportional.cpu, 0.3);
    near_f(out.elements[0].fair_share.weight_proportional.cpu, 0.6);
}
