//! Properties of the fair share engine over random trees, configurations and demands.

use proptest::prelude::*;
use serde_json::json;
use ytsched_common::pool_config::{PoolConfig, TreeConfig, ROOT_POOL};
use ytsched_common::resources::{Resource, ResourceVector};
use ytsched_common::OperationId;
use ytsched_scheduler::core::fair_share::{compute, ElementKind, OperationInput, TreeShares};
use ytsched_scheduler::core::PoolTree;

const GIB: f64 = (1u64 << 30) as f64;
const EPS: f64 = 1e-6;

#[derive(Clone, Debug)]
struct PoolGen {
    parent: usize,
    weight: f64,
    /// Fraction of what the parent's guarantee leaves, if this pool has a guarantee.
    guarantee: Option<f64>,
    memory_guarantee: bool,
    cpu_limit: Option<f64>,
    fifo: bool,
}

#[derive(Clone, Debug)]
struct OpGen {
    pool: usize,
    weight: f64,
    jobs: u32,
    cpu: f64,
    memory_gib: f64,
    running: u32,
    cpu_limit: Option<f64>,
}

fn pool_gen(with_limits: bool) -> impl Strategy<Value = PoolGen> {
    (
        any::<prop::sample::Index>(),
        0.5f64..4.0,
        prop::option::of(0.0f64..1.0),
        any::<bool>(),
        prop::option::of(1.0f64..80.0),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            move |(parent, weight, guarantee, memory_guarantee, cpu_limit, fifo)| PoolGen {
                parent: parent.index(usize::MAX),
                weight,
                guarantee,
                memory_guarantee,
                cpu_limit: cpu_limit.filter(|_| with_limits),
                fifo,
            },
        )
}

fn op_gen() -> impl Strategy<Value = OpGen> {
    (
        any::<prop::sample::Index>(),
        0.5f64..5.0,
        1u32..40,
        0.25f64..4.0,
        0.25f64..16.0,
        0u32..40,
        prop::option::of(1.0f64..30.0),
    )
        .prop_map(
            |(pool, weight, jobs, cpu, memory_gib, running, cpu_limit)| OpGen {
                pool: pool.index(usize::MAX),
                weight,
                jobs,
                cpu,
                memory_gib,
                running: running.min(jobs),
                cpu_limit,
            },
        )
}

const TOTAL: ResourceVector = ResourceVector {
    cpu: 100.0,
    memory: 400.0 * GIB,
    gpu: 0.0,
    user_slots: 200.0,
};

/// Builds a valid tree: pool i's parent is the root or an earlier non-FIFO pool, and
/// guarantees are carved out of the parent's so that they always fit.
fn build(pools: &[PoolGen], ops: &[OpGen]) -> (PoolTree, Vec<OperationInput>) {
    let mut tree = PoolTree::new(TreeConfig::default());
    let mut names: Vec<String> = vec![];
    // Guarantee budget left per pool (cpu, memory), root first.
    let mut left: Vec<(f64, f64)> = vec![];
    let mut has_children = vec![false; pools.len()];
    let mut fifo = vec![false; pools.len()];
    for (i, p) in pools.iter().enumerate() {
        // Candidates for parent: root (None) or earlier pools that are not FIFO.
        let candidates: Vec<Option<usize>> = std::iter::once(None)
            .chain((0..i).filter(|&j| !fifo[j]).map(Some))
            .collect();
        let parent = candidates[p.parent % candidates.len()];
        let (parent_name, budget) = match parent {
            None => (ROOT_POOL.to_string(), None),
            Some(j) => (names[j].clone(), Some(left[j])),
        };
        let mut attrs = serde_json::Map::new();
        attrs.insert("weight".into(), json!(p.weight));
        let mut own = (0.0, 0.0);
        if let Some(frac) = p.guarantee {
            let (cpu_left, mem_left) =
                budget.unwrap_or((TOTAL.cpu - root_used(&tree, &names, pools), f64::INFINITY));
            let root_level = budget.is_none();
            let parent_has = root_level || budget.is_some_and(|b| b.0 > 0.0);
            if parent_has {
                let cpu = (cpu_left * frac).floor();
                let mut g = json!({"cpu": cpu});
                own.0 = cpu;
                if p.memory_guarantee && (root_level || mem_left.is_finite()) {
                    let mem = if root_level {
                        (TOTAL.memory * frac * 0.25 / GIB).floor()
                    } else {
                        (mem_left * frac / GIB).floor()
                    };
                    g["memory"] = json!(format!("{}G", mem as u64));
                    own.1 = mem * GIB;
                }
                attrs.insert("strong_guarantee_resources".into(), g);
                if let Some(j) = parent {
                    left[j].0 -= own.0;
                    if own.1 > 0.0 {
                        left[j].1 -= own.1;
                    }
                }
            }
        }
        if let Some(l) = p.cpu_limit {
            attrs.insert("resource_limits".into(), json!({"cpu": l}));
        }
        let name = format!("p{i}");
        let is_fifo = p.fifo && !has_children.get(i).copied().unwrap_or(false);
        let config = PoolConfig::from_attributes(&name, serde_json::Value::Object(attrs)).unwrap();
        tree.add_pool("t", &name, &parent_name, config.clone(), None)
            .unwrap_or_else(|e| panic!("generated an invalid tree: {e}"));
        if let Some(j) = parent {
            has_children[j] = true;
        }
        names.push(name);
        left.push((own.0, if own.1 > 0.0 { own.1 } else { f64::INFINITY }));
        // A pool becomes FIFO only if nothing is below it yet; later pools skip it.
        if is_fifo {
            let mut c = config;
            c.mode = Some(ytsched_common::pool_config::PoolMode::Fifo);
            if tree.set_pool_config("t", &names[i], c).is_ok() {
                fifo[i] = true;
            }
        }
    }
    let inputs = ops
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let job = ResourceVector::new(o.cpu, o.memory_gib * GIB, 0.0, 1.0);
            let pool = if names.is_empty() {
                ROOT_POOL.to_string()
            } else {
                names[o.pool % names.len()].clone()
            };
            let mut limits =
                ResourceVector::new(f64::INFINITY, f64::INFINITY, f64::INFINITY, f64::INFINITY);
            if let Some(l) = o.cpu_limit {
                limits.cpu = l;
            }
            OperationInput {
                id: OperationId(format!("op{k}").into()),
                pool: ytsched_common::names::TreePoolName::parse(&pool)
                    .expect("a pool the tree holds"),
                weight: o.weight,
                demand: job.scale(o.jobs as f64),
                usage: job.scale(o.running as f64),
                resource_limits: limits,
                max_share_ratio: 1.0,
                seq: k as u64,
                pending_job_count: (o.jobs - o.running) as u64,
                is_gang: false,
            }
        })
        .collect();
    (tree, inputs)
}

fn root_used(tree: &PoolTree, names: &[String], _pools: &[PoolGen]) -> f64 {
    names
        .iter()
        .filter(|n| tree.pools[n.as_str()].parent == ROOT_POOL)
        .filter_map(|n| {
            tree.pools[n.as_str()]
                .config
                .strong_guarantee_resources
                .as_ref()
        })
        .filter_map(|g| g.cpu)
        .sum()
}

fn check_invariants(s: &TreeShares) -> Result<(), TestCaseError> {
    for (i, e) in s.elements.iter().enumerate() {
        let fs = e.fair_share;
        let children: ResourceVector = e.children().iter().map(|&c| s.elements[c].fair_share).sum();
        for r in Resource::ALL {
            prop_assert!(
                children.get(r) <= fs.get(r) + EPS,
                "element {i} ({}): children's {r} {} exceed its {}",
                e.name(),
                children.get(r),
                fs.get(r)
            );
            prop_assert!(
                fs.get(r) <= e.demand_share.get(r) + EPS,
                "{}: {r} above demand",
                e.name()
            );
            prop_assert!(
                fs.get(r) <= e.limits_share.get(r) + EPS,
                "{}: {r} above limits",
                e.name()
            );
            prop_assert!(fs.get(r) >= -EPS && fs.get(r).is_finite());
        }
    }
    for r in Resource::ALL {
        prop_assert!(s.elements[0].fair_share.get(r) <= 1.0 + EPS);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn shares_respect_parents_demand_and_limits(
        pools in prop::collection::vec(pool_gen(true), 0..12),
        ops in prop::collection::vec(op_gen(), 0..24),
    ) {
        let (tree, inputs) = build(&pools, &ops);
        let s = compute(&tree, TOTAL, &inputs);
        check_invariants(&s)?;
    }

    #[test]
    fn guarantees_hold_when_they_fit(
        pools in prop::collection::vec(pool_gen(false), 1..12),
        ops in prop::collection::vec(op_gen().prop_map(|mut o| { o.cpu_limit = None; o }), 1..24),
    ) {
        let (tree, inputs) = build(&pools, &ops);
        let s = compute(&tree, TOTAL, &inputs);
        prop_assume!(s.alerts.is_empty());
        for e in &s.elements {
            let ElementKind::Pool { name, .. } = &e.kind else { continue };
            let Some(pool) = tree.pools.get(name) else { continue };
            // The promise as configured, not as the engine derived it.
            let Some(g) = &pool.config.strong_guarantee_resources else { continue };
            if g.to_vector(0.0).share_of(&TOTAL).dominant().1 <= EPS {
                continue;
            }
            // Explicit and implicit components (SPEC 5.1), as the update settled them.
            let configured = e.pool.as_ref().expect("a pool").strong_guarantee_share;
            // A pool moves along its path until the first resource reaches its bound
            // (SPEC 5.1), so a guarantee is a promise about the path: when the whole
            // path (its limited demand) fits inside the guarantee, all of it is given.
            let fs = &e.fair_share;
            let ld = &e.limited_demand_share;
            if Resource::ALL.iter().all(|&r| ld.get(r) <= configured.get(r) + EPS) {
                prop_assert!(
                    Resource::ALL.iter().all(|&r| fs.get(r) >= ld.get(r) - EPS),
                    "{}: fair share {fs:?} below its limited demand {ld:?}, within guarantee {configured:?}",
                    e.name()
                );
            }
        }
    }

    #[test]
    fn raising_a_weight_never_lowers_the_share(
        pools in prop::collection::vec(pool_gen(true), 0..8),
        ops in prop::collection::vec(op_gen(), 1..16),
        which in any::<prop::sample::Index>(),
        factor in 1.0f64..5.0,
    ) {
        let (tree, inputs) = build(&pools, &ops);
        let k = which.index(inputs.len());
        let before = compute(&tree, TOTAL, &inputs);
        let mut heavier = inputs.clone();
        heavier[k].weight *= factor;
        let after = compute(&tree, TOTAL, &heavier);
        let id = &inputs[k].id;
        let share = |s: &TreeShares| s.operation_index.get(id).map(|&i| s.elements[i].fair_share.dominant().1);
        if let (Some(b), Some(a)) = (share(&before), share(&after)) {
            prop_assert!(a >= b - EPS, "weight ×{factor}: share fell from {b} to {a}");
        }
    }

    #[test]
    fn same_input_same_output(
        pools in prop::collection::vec(pool_gen(true), 0..10),
        ops in prop::collection::vec(op_gen(), 0..20),
    ) {
        let (tree, inputs) = build(&pools, &ops);
        let a = compute(&tree, TOTAL, &inputs);
        let b = compute(&tree, TOTAL, &inputs);
        prop_assert_eq!(format!("{:?}", a.elements), format!("{:?}", b.elements));
    }
}
