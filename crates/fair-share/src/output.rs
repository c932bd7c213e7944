//! What one update yields for every element: the values the orchid shows.

use crate::vector;
use ytsched_common::resources::{Resource, ResourceVector};

/// A fair share split into where it comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DetailedShare {
    pub total: ResourceVector,
    pub strong_guarantee: ResourceVector,
    pub integral_guarantee: ResourceVector,
    pub weight_proportional: ResourceVector,
}

impl DetailedShare {
    /// An operation's share split into parts: it holds no guarantee, so its share is
    /// all weight-proportional. The update splits every operation's share so (a
    /// property test says so), which lets a caller keep an operation's total alone.
    pub fn unguaranteed(total: ResourceVector) -> Self {
        detailed(total, ResourceVector::ZERO, ResourceVector::ZERO)
    }
}

/// Splits a share into its strong part, then its integral part, then the rest.
pub(crate) fn detailed(
    total: ResourceVector,
    strong_guarantee: ResourceVector,
    integral_share: ResourceVector,
) -> DetailedShare {
    let strong = vector::min(&total, &strong_guarantee);
    let integral = vector::min(&vector::non_negative(&(total - strong)), &integral_share);
    DetailedShare {
        total,
        strong_guarantee: strong,
        integral_guarantee: integral,
        weight_proportional: vector::non_negative(&(total - strong - integral)),
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntegralOutput {
    pub specified_burst_ratio: f64,
    pub specified_resource_flow_ratio: f64,
    /// After refill and spending, before this update's share is paid for.
    pub volume: ResourceVector,
    /// The integral share ratio given now; the next update spends volume at it.
    pub last_share_ratio: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ElementOutput {
    pub fair_share: DetailedShare,
    pub demand_share: ResourceVector,
    pub usage_share: ResourceVector,
    pub limits_share: ResourceVector,
    /// The end of the element's path: what it would get offered the whole cluster.
    pub limited_demand_share: ResourceVector,
    /// After the overcommit factor and limits.
    pub strong_guarantee_share: ResourceVector,
    /// Explicit plus implicit, absolute, before any scaling.
    pub effective_strong_guarantee_resources: ResourceVector,
    pub total_burst_ratio: f64,
    pub total_resource_flow_ratio: f64,
    /// Pools with integral settings only.
    pub integral: Option<IntegralOutput>,
    /// Children of FIFO pools only.
    pub fifo_index: Option<usize>,
    pub dominant_resource: Resource,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Alert {
    /// Strong guarantees and resource flows exceed the cluster.
    FlowsOvercommit {
        strong: ResourceVector,
        flows: ResourceVector,
    },
    /// Strong and burst guarantees exceed the cluster; all were scaled by `factor`.
    BurstOvercommit {
        strong: ResourceVector,
        burst: ResourceVector,
        factor: f64,
    },
}

impl std::fmt::Display for Alert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Alert::FlowsOvercommit { strong, flows } => write!(
                f,
                "strong guarantees ({strong}) and resource flows ({flows}) exceed the cluster"
            ),
            Alert::BurstOvercommit {
                strong,
                burst,
                factor,
            } => {
                if burst.dominant().1 > 0.0 {
                    write!(f, "strong guarantees ({strong}) and burst guarantees ({burst}) exceed the cluster")?;
                } else {
                    write!(f, "strong guarantees ({strong}) exceed the cluster")?;
                }
                write!(f, "; guarantee shares are scaled by {factor:.4}")
            }
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TreeOutput {
    /// In the input's order; element 0 is the root.
    pub elements: Vec<ElementOutput>,
    pub alerts: Vec<Alert>,
    /// Common factor strong and burst guarantees were scaled by to fit (1 = none).
    pub overcommit_factor: f64,
}
