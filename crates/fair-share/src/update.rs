//! One fair share update: the steps of the crate documentation, in order, over the flat
//! layout of `layout.rs`.

use crate::input::{ElementKind, Mode, TreeInput};
use crate::input_check::check;
pub use crate::input_check::InputError;
use crate::layout::{Elements, Pool, NONE};
use crate::output::{Alert, DetailedShare, ElementOutput, IntegralOutput, TreeOutput};
use crate::vector;
use ytsched_common::resources::ResourceVector;

/// Computes fair shares update after update, keeping its working buffers and its output
/// between them: a scheduler keeps one per tree, so an update allocates nothing per
/// operation once the tree has reached its size.
#[derive(Clone, Debug, Default)]
pub struct Solver {
    elements: Elements,
    output: TreeOutput,
}

impl Solver {
    /// Every element's fair share for `input`; the answer lives until the next call.
    pub fn compute(&mut self, input: &TreeInput) -> Result<&TreeOutput, InputError> {
        let mut elements = std::mem::take(&mut self.output.elements);
        elements.clear();
        let tree = self.compute_each(input, |_, e| elements.push(e));
        self.output = TreeOutput { elements, ..tree? };
        Ok(&self.output)
    }

    /// Hands each element's result to `each`, in the input's order, and keeps none: for
    /// a caller that makes its own records of them at once, so that they are not all
    /// held twice. Returns the tree-wide results (alerts, overcommit factor), with no
    /// elements.
    pub fn compute_each(
        &mut self,
        input: &TreeInput,
        each: impl FnMut(usize, ElementOutput),
    ) -> Result<TreeOutput, InputError> {
        check(input)?;
        let mut u = Update {
            input,
            el: &mut self.elements,
            pools: Vec::new(),
            alerts: Vec::new(),
            overcommit_factor: 1.0,
            burst_pools: Vec::new(),
            relaxed_pools: Vec::new(),
        };
        u.build_elements();
        u.infer_guarantees();
        u.cumulative_attributes();
        u.refill_volumes();
        u.adjust_guarantees();
        u.burst_integral_shares();
        u.relaxed_integral_shares();
        u.prepare(0);
        u.set_fair_share(0, 1.0);
        u.root_fair_share();
        u.truncate_gangs_in_fifo_pools();
        Ok(u.write_output(each))
    }
}

/// Computes every element's fair share for one tree, with buffers of its own.
pub fn compute(input: &TreeInput) -> Result<TreeOutput, InputError> {
    let mut solver = Solver::default();
    solver.compute(input)?;
    Ok(solver.output)
}

pub(crate) struct Update<'a> {
    pub input: &'a TreeInput,
    pub el: &'a mut Elements,
    /// In element order: a parent's record comes before its children's.
    pub pools: Vec<Pool>,
    pub alerts: Vec<Alert>,
    pub overcommit_factor: f64,
    pub burst_pools: Vec<usize>,
    pub relaxed_pools: Vec<usize>,
}

impl Update<'_> {
    pub(crate) fn share(&self, abs: &ResourceVector) -> ResourceVector {
        vector::share(abs, &self.input.total)
    }

    pub(crate) fn parent(&self, i: usize) -> Option<usize> {
        let p = self.el.parent[i];
        (p != NONE).then_some(p)
    }

    pub(crate) fn is_operation(&self, i: usize) -> bool {
        self.el.pool[i] == NONE
    }

    /// Element `i`'s pool record, if it is a pool.
    pub(crate) fn pool(&self, i: usize) -> Option<&Pool> {
        self.pools.get(self.el.pool[i])
    }

    /// Element `i`'s pool record; `i` must be a pool.
    pub(crate) fn pool_mut(&mut self, i: usize) -> &mut Pool {
        let p = self.el.pool[i];
        &mut self.pools[p]
    }

    pub(crate) fn children(&self, i: usize) -> &[usize] {
        self.pool(i).map_or(&[], |p| &p.children)
    }

    pub(crate) fn mode(&self, i: usize) -> Option<Mode> {
        self.pool(i).map(|p| p.mode)
    }

    /// An operation's is zero: operations never hold a guarantee.
    pub(crate) fn strong_guarantee_share(&self, i: usize) -> ResourceVector {
        self.pool(i)
            .map_or(ResourceVector::ZERO, |p| p.strong_guarantee_share)
    }

    pub(crate) fn guarantee_share(&self, i: usize) -> ResourceVector {
        self.pool(i)
            .map_or(ResourceVector::ZERO, Pool::guarantee_share)
    }

    /// How far above its guarantees an element may go before it or an ancestor hits
    /// its limits.
    pub(crate) fn available_limits_share(&self, i: usize) -> ResourceVector {
        let mut out = vector::splat(1.0);
        let mut cur = i;
        while let Some(p) = self.parent(cur) {
            let room = self.el.limits_share[cur] - self.guarantee_share(cur);
            out = vector::min(&out, &room);
            cur = p;
        }
        vector::non_negative(&out)
    }

    /// Adds an integral share to a pool and its ancestors, never past a non-root
    /// pool's limits.
    pub(crate) fn increase_integral_share(&mut self, i: usize, delta: ResourceVector) {
        let mut cur = Some(i);
        while let Some(k) = cur {
            let parent = self.parent(k);
            let limits = self.el.limits_share[k];
            let n = self.pool_mut(k);
            let mut proposed = n.proposed_integral_share + delta;
            if parent.is_some() {
                proposed = fit_integral(&limits, &n.strong_guarantee_share, proposed);
            }
            n.proposed_integral_share = proposed;
            cur = parent;
        }
    }

    /// The root's share is its children's sum; its strong part is what they use of
    /// their strong guarantees.
    pub(crate) fn root_fair_share(&mut self) {
        let (mut strong, mut total) = (ResourceVector::ZERO, ResourceVector::ZERO);
        for &c in self.children(0) {
            strong += self.el.fair_share[c].strong_guarantee;
            total += self.el.fair_share[c].total;
        }
        let strong_part = vector::min(&total, &strong);
        let integral = vector::min(
            &vector::non_negative(&(total - strong_part)),
            &self.pools[0].proposed_integral_share,
        );
        self.el.fair_share[0] = DetailedShare {
            total,
            strong_guarantee: strong_part,
            integral_guarantee: integral,
            weight_proportional: vector::non_negative(&(total - strong_part - integral)),
        };
    }

    fn write_output(self, mut each: impl FnMut(usize, ElementOutput)) -> TreeOutput {
        let total = self.input.total;
        // Shares are already fractions; this only marks which resources the tree has.
        let present = total.map(|_, v| if v > 0.0 { 1.0 } else { 0.0 });
        for (i, e) in self.input.elements.iter().enumerate() {
            let (usage, demand) = (self.el.usage_share[i], self.el.demand_share[i]);
            // By usage once there is some, else by demand (YTsaurus's rule).
            let dominant = if vector::max_component(&usage) > 0.0 {
                vector::dominant_resource(&usage, &present)
            } else {
                vector::dominant_resource(&demand, &present)
            };
            let pool = self.pool(i);
            let integral = match (&e.kind, pool) {
                (
                    ElementKind::Pool {
                        integral: Some(_), ..
                    },
                    Some(p),
                ) => Some(IntegralOutput {
                    specified_burst_ratio: p.specified_burst_ratio,
                    specified_resource_flow_ratio: p.flow_ratio,
                    volume: p.volume,
                    last_share_ratio: p.last_share_ratio,
                }),
                _ => None,
            };
            let fifo_index = self.el.fifo_index[i];
            each(
                i,
                ElementOutput {
                    fair_share: self.el.fair_share[i],
                    demand_share: demand,
                    usage_share: usage,
                    limits_share: self.el.limits_share[i],
                    limited_demand_share: self.el.limited_demand_share[i],
                    strong_guarantee_share: self.strong_guarantee_share(i),
                    effective_strong_guarantee_resources: pool
                        .map_or(ResourceVector::ZERO, |p| p.inferred_guarantee),
                    total_burst_ratio: pool.map_or(0.0, |p| p.total_burst_ratio),
                    total_resource_flow_ratio: pool.map_or(0.0, |p| p.total_flow_ratio),
                    integral,
                    fifo_index: (fifo_index != NONE).then_some(fifo_index),
                    dominant_resource: dominant,
                },
            );
        }
        TreeOutput {
            elements: Vec::new(),
            alerts: self.alerts,
            overcommit_factor: self.overcommit_factor,
        }
    }
}

/// Cuts an integral share so that strong plus integral stays within limits.
pub(crate) fn fit_integral(
    limits: &ResourceVector,
    strong: &ResourceVector,
    proposed: ResourceVector,
) -> ResourceVector {
    proposed.map(|r, v| {
        let room = (limits.get(r) - strong.get(r)).max(0.0);
        v.min(room).max(0.0)
    })
}
