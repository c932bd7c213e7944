//! Integral guarantees (SPEC 5.7): burst and relaxed pools spend an accumulated volume
//! (share × seconds) that fills at `resource_flow`.
//!
//! In an update, after strong guarantees: burst pools get up to their burst share while
//! volume lasts, then relaxed pools up to `relaxed_share_multiplier_limit` × flow from
//! what strong and burst guarantees leave of the tree. The volume only pays for the part
//! beyond a pool's strong guarantee, and lets a pool take at most volume /
//! `smooth_period` at once. The integral share then counts like a guarantee in the
//! split (it is added to the pool and its ancestors), and the core debits the volume by
//! it, whether or not the pool used it.

use super::fair_share::TreeShares;
use super::pool_tree::PoolTree;
use std::collections::HashMap;
use ytsched_common::pool_config::IntegralGuaranteeType;
use ytsched_common::resources::{Resource, ResourceVector, EPSILON};

/// One pool's integral settings as shares of the tree.
#[derive(Clone, Debug, PartialEq)]
pub struct IntegralPool {
    pub kind: IntegralGuaranteeType,
    pub flow_share: ResourceVector,
    pub burst_share: ResourceVector,
    /// Dominant components: the scalar ratios the orchid shows.
    pub flow_ratio: f64,
    pub burst_ratio: f64,
    pub multiplier: f64,
}

fn dominant(v: &ResourceVector) -> f64 {
    v.dominant().1
}

/// The integral settings of every pool that has any, as shares of `total`.
pub fn integral_pools(tree: &PoolTree, total: &ResourceVector) -> HashMap<String, IntegralPool> {
    let share = |a: &Option<ytsched_common::spec::ResourceAmounts>| {
        a.as_ref()
            .map(|a| a.to_vector(0.0).share_of(total))
            .unwrap_or_default()
    };
    tree.pools
        .iter()
        .filter_map(|(name, p)| {
            let ig = p.config.integral_guarantees.as_ref()?;
            let flow_share = share(&ig.resource_flow);
            let burst_share = share(&ig.burst_guarantee_resources);
            Some((
                name.clone(),
                IntegralPool {
                    kind: ig.guarantee_type,
                    flow_ratio: dominant(&flow_share),
                    burst_ratio: dominant(&burst_share),
                    flow_share,
                    burst_share,
                    multiplier: ig.relaxed_share_multiplier_limit.unwrap_or(
                        tree.config
                            .integral_guarantees
                            .relaxed_share_multiplier_limit,
                    ),
                },
            ))
        })
        .collect()
}

impl IntegralPool {
    /// The most an integral pool may hold at once: its burst share, or the multiplier
    /// times its flow (on the resources the flow names).
    pub fn share_cap(&self) -> Option<ResourceVector> {
        let (base, k) = match self.kind {
            IntegralGuaranteeType::Burst => (self.burst_share, 1.0),
            IntegralGuaranteeType::Relaxed => (self.flow_share, self.multiplier),
            IntegralGuaranteeType::None => return None,
        };
        Some(base.map(|_, v| if v > EPSILON { v * k } else { f64::INFINITY }))
    }
}

/// Sets each integral pool's `integral_share` (and adds it to its ancestors'), given the
/// volumes accumulated so far (ratio × seconds) and the smoothing period in seconds.
pub fn assign(
    tree: &PoolTree,
    pools: &HashMap<String, IntegralPool>,
    volumes: &HashMap<String, f64>,
    out: &mut TreeShares,
) {
    if pools.is_empty() || out.elements.is_empty() {
        return;
    }
    let smooth_s = (tree.config.integral_guarantees.smooth_period.0 as f64 / 1000.0).max(1e-3);
    let root = &out.elements[0];
    let strong_at_root: ResourceVector = root
        .children
        .iter()
        .map(|&c| out.elements[c].strong_guarantee_share)
        .sum();
    let mut available = (root.limits_share - strong_at_root).map(|_, v| v.max(0.0));
    // Flows beyond what strong guarantees leave cannot all be honoured: say so.
    let flows: ResourceVector = pools
        .values()
        .filter(|p| accrues(p))
        .map(|p| p.flow_share)
        .sum();
    if Resource::ALL
        .iter()
        .any(|&r| flows.get(r) > available.get(r) + 1e-9 && flows.get(r) > EPSILON)
    {
        out.alerts
            .push("integral resource flows and strong guarantees together exceed the tree".into());
    }
    for kind in [IntegralGuaranteeType::Burst, IntegralGuaranteeType::Relaxed] {
        let mut wants: Vec<(usize, ResourceVector)> = vec![];
        for (name, p) in pools.iter().filter(|(_, p)| p.kind == kind) {
            let Some(&i) = out.pool_index.get(name) else {
                continue;
            };
            let e = &out.elements[i];
            let target_ratio = match kind {
                IntegralGuaranteeType::Burst => p.burst_ratio * out.burst_factor,
                _ => p.multiplier * p.flow_ratio,
            };
            let dom = e.demand_share.dominant().1;
            if dom <= EPSILON || target_ratio <= EPSILON {
                continue;
            }
            // Along the demand, up to the target, beyond the strong part, within demand.
            let target = e
                .demand_share
                .scale(target_ratio / dom)
                .map(|r, v| v.min(e.limited_demand_share.get(r)));
            let mut want = (target - e.strong_guarantee_share).map(|_, v| v.max(0.0));
            let afford = volumes.get(name).copied().unwrap_or(0.0).max(0.0) / smooth_s;
            let w = dominant(&want);
            if w > afford {
                want = if w > EPSILON {
                    want.scale(afford / w)
                } else {
                    ResourceVector::ZERO
                };
            }
            if dominant(&want) > EPSILON {
                wants.push((i, want));
            }
        }
        wants.sort_by_key(|w| w.0);
        let sum: ResourceVector = wants.iter().map(|w| w.1).sum();
        let factor = Resource::ALL
            .iter()
            .filter(|&&r| sum.get(r) > available.get(r) + 1e-12)
            .map(|&r| available.get(r) / sum.get(r))
            .fold(1.0f64, f64::min);
        for (i, want) in wants {
            let given = want.scale(factor);
            available = (available - given).map(|_, v| v.max(0.0));
            let mut idx = Some(i);
            while let Some(k) = idx {
                if k == 0 {
                    break;
                }
                out.elements[k].integral_share += given;
                idx = out.elements[k].parent;
            }
        }
    }
}

/// The integral ratio a pool was given in an update: what its volume pays for.
pub fn given_ratio(shares: &TreeShares, pool: &str) -> f64 {
    shares
        .pool_index
        .get(pool)
        .map(|&i| dominant(&shares.elements[i].fair_share.integral_guarantee))
        .unwrap_or(0.0)
}

/// Sum of the flow and burst ratios of a pool and its descendants.
pub fn subtree_totals(
    tree: &PoolTree,
    pools: &HashMap<String, IntegralPool>,
    pool: &str,
) -> (f64, f64) {
    pools
        .iter()
        .filter(|(name, _)| name.as_str() == pool || tree.ancestry(name).contains(&pool))
        .fold((0.0, 0.0), |(f, b), (_, p)| {
            (f + p.flow_ratio, b + p.burst_ratio)
        })
}

/// True for pools whose volume accrues (burst and relaxed ones).
pub fn accrues(p: &IntegralPool) -> bool {
    p.kind != IntegralGuaranteeType::None && p.flow_ratio > EPSILON
}
