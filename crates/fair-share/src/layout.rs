//! Where an update keeps its working state: flat arrays indexed by element, reused from
//! one update to the next, and a small record per pool. Operations are most of a tree's
//! elements and hold no guarantee, children or integral state, so they take no record of
//! their own: only their row of the arrays, and their function's points while their
//! pool's path is made.

use crate::input::{IntegralKind, Mode};
use crate::output::DetailedShare;
use crate::piecewise::Plf;
use ytsched_common::resources::ResourceVector;

/// No index: the root's parent, an operation's pool record.
pub(crate) const NONE: usize = usize::MAX;

/// What only pools have.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    /// In FIFO order for FIFO pools.
    pub children: Vec<usize>,
    /// The children that are pools, in the input's order: what guarantees are summed
    /// and inferred over, without a look at each operation.
    pub child_pools: Vec<usize>,
    pub mode: Mode,
    pub inferred_guarantee: ResourceVector,
    pub strong_guarantee_share: ResourceVector,
    pub proposed_integral_share: ResourceVector,
    pub integral_kind: IntegralKind,
    pub burst_ratio: f64,
    pub specified_burst_ratio: f64,
    pub flow_ratio: f64,
    pub total_burst_ratio: f64,
    pub total_flow_ratio: f64,
    pub volume: ResourceVector,
    pub last_share_ratio: f64,
    pub multiplier: f64,
    pub max_fit_factor: Option<Plf<f64>>,
}

impl Pool {
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            children: Vec::new(),
            child_pools: Vec::new(),
            mode,
            inferred_guarantee: ResourceVector::ZERO,
            strong_guarantee_share: ResourceVector::ZERO,
            proposed_integral_share: ResourceVector::ZERO,
            integral_kind: IntegralKind::None,
            burst_ratio: 0.0,
            specified_burst_ratio: 0.0,
            flow_ratio: 0.0,
            total_burst_ratio: 0.0,
            total_flow_ratio: 0.0,
            volume: ResourceVector::ZERO,
            last_share_ratio: 0.0,
            multiplier: 0.0,
            max_fit_factor: None,
        }
    }

    pub(crate) fn guarantee_share(&self) -> ResourceVector {
        self.strong_guarantee_share + self.proposed_integral_share
    }
}

/// One row per element, in the input's order. The buffers keep their storage between
/// updates, so an update of an unchanged tree allocates nothing per operation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Elements {
    pub parent: Vec<usize>,
    /// The element's pool record, or `NONE` for an operation.
    pub pool: Vec<usize>,
    pub weight: Vec<f64>,
    pub limits_share: Vec<ResourceVector>,
    pub demand_share: Vec<ResourceVector>,
    pub usage_share: Vec<ResourceVector>,
    pub fair_share: Vec<DetailedShare>,
    pub fifo_index: Vec<usize>,
    /// The element's fair share by suggestion: a pool's `points[start..end]`, an
    /// operation's `operation_points[start..end]` while its pool's path is made; empty
    /// otherwise.
    pub function: Vec<(usize, usize)>,
    /// The end of each element's function, kept apart: read per element in the input's
    /// order, which is not the order functions are built in.
    pub limited_demand_share: Vec<ResourceVector>,
    /// Every pool's function's points, one after another.
    pub points: Vec<(f64, ResourceVector)>,
    /// The functions of one pool's operations, while that pool's is made.
    pub operation_points: Vec<(f64, ResourceVector)>,
    /// Storage an operation's function is built in before it joins `operation_points`.
    pub scratch: Vec<(f64, ResourceVector)>,
}

impl Elements {
    /// Sizes every row for `n` elements, keeping their storage. Rows every update
    /// writes whole (parent, weight, shares, fair share: every element is below the
    /// root) are only sized; the others start empty.
    pub(crate) fn reset(&mut self, n: usize) {
        fn fill<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
            v.clear();
            v.resize(n, x);
        }
        fn size<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
            v.truncate(n);
            v.resize(n, x);
        }
        size(&mut self.parent, n, NONE);
        size(&mut self.weight, n, 0.0);
        size(&mut self.limits_share, n, ResourceVector::ZERO);
        size(&mut self.demand_share, n, ResourceVector::ZERO);
        size(&mut self.usage_share, n, ResourceVector::ZERO);
        size(&mut self.fair_share, n, DetailedShare::default());
        size(&mut self.limited_demand_share, n, ResourceVector::ZERO);
        fill(&mut self.pool, n, NONE);
        fill(&mut self.fifo_index, n, NONE);
        fill(&mut self.function, n, (0, 0));
        self.points.clear();
    }
}
