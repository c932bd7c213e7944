//! The flat layout computes the numbers the per-element layout did (to 1e-12: an
//! operation's share is read in closed form, not from its function's plot), on random
//! trees with every feature the update has (FIFO and fair-share pools, partial
//! guarantees, limits, weights over many orders of magnitude, burst and relaxed
//! integral pools with volumes, gangs and their truncation), a reused solver answers
//! as a fresh one does, and an operation's share is split as `DetailedShare::unguaranteed`
//! splits it.

use crate::input::*;
use crate::output::DetailedShare;
use crate::update::{compute, Solver};
use proptest::prelude::*;
use ytsched_common::resources::ResourceVector;

/// Two outputs' texts are the same but for their numbers, and each number is within
/// 1e-12 (relative to its size, at least 1) of the other's.
fn same_to_rounding(a: &str, b: &str) -> Result<(), String> {
    let split = |s: &str| {
        let (mut words, mut numbers, mut current) = (String::new(), Vec::new(), String::new());
        for ch in s.chars() {
            let numeric = ch.is_ascii_digit() || ".-+e".contains(ch) && !current.is_empty();
            if numeric || (ch == '-' && current.is_empty()) {
                current.push(ch);
            } else {
                if let Ok(x) = current.parse::<f64>() {
                    numbers.push(x);
                    words.push('#');
                } else {
                    words.push_str(&current);
                }
                current.clear();
                words.push(ch);
            }
        }
        (words, numbers)
    };
    let ((wa, na), (wb, nb)) = (split(a), split(b));
    if wa != wb {
        return Err("the outputs differ in more than their numbers".into());
    }
    for (x, y) in na.iter().zip(&nb) {
        if (x - y).abs() > 1e-12 * x.abs().max(1.0) {
            return Err(format!("{x} against {y}"));
        }
    }
    Ok(())
}

/// One element of a random tree: its parent is picked among the pools before it.
#[derive(Clone, Debug)]
enum Draw {
    Pool {
        parent: usize,
        fifo: bool,
        guarantee: [Option<u8>; 4],
        integral: Option<(bool, u8, u8, u8)>,
    },
    Op {
        parent: usize,
        demand: [u8; 4],
        used: [u8; 4],
        gang: bool,
        rank: u8,
    },
}

fn amount(x: u8, unit: f64) -> f64 {
    x as f64 * unit
}

fn vector(x: [u8; 4], unit: f64) -> ResourceVector {
    ResourceVector::new(
        amount(x[0], unit),
        amount(x[1], unit),
        amount(x[2], unit),
        amount(x[3], unit),
    )
}

fn draw() -> impl Strategy<Value = (Draw, u8, Option<[u8; 4]>, u8)> {
    let pool = (
        any::<usize>(),
        any::<bool>(),
        prop::array::uniform4(prop::option::of(0u8..40)),
        prop::option::of((any::<bool>(), 0u8..20, 0u8..20, 0u8..50)),
    )
        .prop_map(|(parent, fifo, guarantee, integral)| Draw::Pool {
            parent,
            fifo,
            guarantee,
            integral,
        });
    let op = (
        any::<usize>(),
        prop::array::uniform4(0u8..30),
        prop::array::uniform4(0u8..=10),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(parent, demand, used, gang, rank)| Draw::Op {
            parent,
            demand,
            used,
            gang,
            rank,
        });
    (
        prop_oneof![1 => pool, 3 => op],
        0u8..12,
        prop::option::of(prop::array::uniform4(0u8..60)),
        0u8..=10,
    )
}

fn tree(draws: &[(Draw, u8, Option<[u8; 4]>, u8)], since: Option<u8>, truncate: bool) -> TreeInput {
    let total = ResourceVector::new(100.0, 400.0, 8.0, 200.0);
    let mut elements = vec![ElementInput::root()];
    let mut pools = vec![0usize];
    for (d, weight, limits, share_ratio) in draws {
        let mut e = ElementInput::root();
        // Weights from 1e-3 to 1e8: past the ratio the solver tells apart.
        e.weight = 10f64.powi(*weight as i32 - 3);
        if let Some(l) = limits {
            e.resource_limits = vector(*l, 2.0);
        }
        e.max_share_ratio = if *share_ratio == 0 {
            1.0
        } else {
            *share_ratio as f64 / 10.0
        };
        match d {
            Draw::Pool {
                parent,
                fifo,
                guarantee,
                integral,
            } => {
                e.parent = Some(pools[parent % pools.len()]);
                let mode = if *fifo { Mode::Fifo } else { Mode::FairShare };
                let g = guarantee.map(|x| x.map(|v| v as f64 * 2.0));
                let integral = integral.map(|(burst, flow, guarantee, volume)| {
                    Box::new(IntegralInput {
                        kind: if burst {
                            IntegralKind::Burst
                        } else {
                            IntegralKind::Relaxed
                        },
                        resource_flow: ResourceVector::new(
                            flow as f64,
                            flow as f64 * 4.0,
                            0.0,
                            0.0,
                        ),
                        burst_guarantee: ResourceVector::new(guarantee as f64 * 2.0, 0.0, 0.0, 0.0),
                        relaxed_share_multiplier_limit: 3.0,
                        volume: total.scale(volume as f64),
                        last_share_ratio: volume as f64 / 100.0,
                    })
                });
                e.kind = ElementKind::Pool {
                    mode,
                    strong_guarantee: Guarantee { amounts: g },
                    integral,
                };
                pools.push(elements.len());
            }
            Draw::Op {
                parent,
                demand,
                used,
                gang,
                rank,
            } => {
                e.parent = Some(pools[parent % pools.len()]);
                let demand = vector(*demand, 1.0);
                let usage = demand.map(|r, v| {
                    let i = ytsched_common::resources::Resource::ALL
                        .iter()
                        .position(|&x| x == r)
                        .unwrap_or(0);
                    (v * used[i] as f64 / 10.0).round()
                });
                e.kind = ElementKind::Operation {
                    demand,
                    usage,
                    fifo_rank: *rank as u64,
                    is_gang: *gang,
                };
            }
        }
        elements.push(e);
    }
    TreeInput {
        total,
        elements,
        integral: IntegralOptions::default(),
        since_previous_s: since.map(|s| s as f64),
        truncate_gangs_in_fifo_pools: truncate,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_flat_layout_computes_what_the_node_layout_did(
        draws in prop::collection::vec(draw(), 0..40),
        since in prop::option::of(0u8..100),
        truncate in any::<bool>(),
    ) {
        let input = tree(&draws, since, truncate);
        let old = super::compute(&input).expect("valid");
        let new = compute(&input).expect("valid");
        if let Err(e) = same_to_rounding(&format!("{new:?}"), &format!("{old:?}")) {
            prop_assert!(false, "{e}\nnew: {new:?}\nold: {old:?}");
        }
    }

    #[test]
    fn a_reused_solver_answers_as_a_fresh_one(
        first in prop::collection::vec(draw(), 0..40),
        second in prop::collection::vec(draw(), 0..40),
        since in prop::option::of(0u8..100),
    ) {
        let mut solver = Solver::default();
        solver.compute(&tree(&first, since, true)).expect("valid");
        let input = tree(&second, since, true);
        let reused = solver.compute(&input).expect("valid").clone();
        prop_assert_eq!(reused, compute(&input).expect("valid"));
    }

    #[test]
    fn an_operation_share_is_all_weight_proportional(
        draws in prop::collection::vec(draw(), 0..40),
        since in prop::option::of(0u8..100),
        truncate in any::<bool>(),
    ) {
        let input = tree(&draws, since, truncate);
        let out = compute(&input).expect("valid");
        for (e, o) in input.elements.iter().zip(&out.elements) {
            if matches!(e.kind, ElementKind::Operation { .. }) {
                prop_assert_eq!(DetailedShare::unguaranteed(o.fair_share.total), o.fair_share);
            }
        }
    }
}
