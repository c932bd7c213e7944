//! What one update is computed from: a tree of pools and operations with their settings,
//! demands and usage, in absolute resources, plus the integral pools' volumes carried
//! over from the previous update.

use ytsched_common::resources::{Resource, ResourceVector};

/// How a pool divides its share among its children.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// By weight, on top of guarantees.
    FairShare,
    /// In `fifo_rank` order, each child to the end of its path before the next one starts.
    Fifo,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IntegralKind {
    #[default]
    None,
    Burst,
    Relaxed,
}

/// A pool's integral guarantee settings and the state carried between updates.
#[derive(Clone, Debug, PartialEq)]
pub struct IntegralInput {
    pub kind: IntegralKind,
    /// Absolute resources per second.
    pub resource_flow: ResourceVector,
    /// Absolute resources.
    pub burst_guarantee: ResourceVector,
    pub relaxed_share_multiplier_limit: f64,
    /// Accumulated volume (resource × seconds per resource) after the previous update.
    pub volume: ResourceVector,
    /// The integral share ratio given in the previous update: what the volume pays for
    /// over the interval since then.
    pub last_share_ratio: f64,
}

/// Explicit strong guarantee: the components a pool names. The others get implicit ones.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Guarantee {
    pub amounts: [Option<f64>; 4],
}

impl Guarantee {
    pub fn from_vector(v: ResourceVector, specified: [bool; 4]) -> Self {
        let mut amounts = [None; 4];
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            if specified[i] {
                amounts[i] = Some(v.get(r));
            }
        }
        Self { amounts }
    }

    pub fn get(&self, r: Resource) -> Option<f64> {
        self.amounts[index(r)]
    }
}

pub(crate) fn index(r: Resource) -> usize {
    Resource::ALL.iter().position(|&x| x == r).unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq)]
pub enum ElementKind {
    Pool {
        mode: Mode,
        strong_guarantee: Guarantee,
        /// Boxed: few pools have one, and every element of a tree's input (100,000
        /// operations' included) is as large as the largest kind.
        integral: Option<Box<IntegralInput>>,
    },
    Operation {
        demand: ResourceVector,
        usage: ResourceVector,
        /// Position in a FIFO parent's order (smaller first).
        fifo_rank: u64,
        /// A gang operation: all its jobs run together or none (SPEC 5.15).
        is_gang: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ElementInput {
    /// `None` only for the root, which is element 0.
    pub parent: Option<usize>,
    pub weight: f64,
    /// Absolute limits (`INFINITY` where none), already cut to what a scheduling tag
    /// filter's nodes offer.
    pub resource_limits: ResourceVector,
    pub max_share_ratio: f64,
    pub kind: ElementKind,
}

impl ElementInput {
    pub fn root() -> Self {
        Self {
            parent: None,
            weight: 1.0,
            resource_limits: ResourceVector::new(
                f64::INFINITY,
                f64::INFINITY,
                f64::INFINITY,
                f64::INFINITY,
            ),
            max_share_ratio: 1.0,
            kind: ElementKind::Pool {
                mode: Mode::FairShare,
                strong_guarantee: Guarantee::default(),
                integral: None,
            },
        }
    }

    pub fn is_operation(&self) -> bool {
        matches!(self.kind, ElementKind::Operation { .. })
    }
}

/// Tree-wide settings of the integral guarantees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntegralOptions {
    /// Volume lets a pool take at most volume / smooth_period at once.
    pub smooth_period_s: f64,
    /// Capacity = this × flow.
    pub saturation_period_s: f64,
}

impl Default for IntegralOptions {
    fn default() -> Self {
        Self {
            smooth_period_s: 60.0,
            saturation_period_s: 86_400.0,
        }
    }
}

/// One update's whole input.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeInput {
    /// Sum of the tree's nodes' resources: what every share is a fraction of.
    pub total: ResourceVector,
    /// Element 0 is the root; every parent comes before its children.
    pub elements: Vec<ElementInput>,
    pub integral: IntegralOptions,
    /// Seconds since the previous update (`None` for the first): volumes move by it.
    pub since_previous_s: Option<f64>,
    /// The tree's `enable_fair_share_truncation_in_fifo_pool` (`fifo_truncation.rs`).
    pub truncate_gangs_in_fifo_pools: bool,
}
