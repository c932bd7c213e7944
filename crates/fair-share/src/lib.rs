//! Hierarchical vector fair share, computed the way YTsaurus's `vector_hdrf` does.
//!
//! The input is a tree: pools (weight, mode, strong guarantee, limits, integral
//! settings) and operations (weight, limits, demand, usage, FIFO rank) under a root,
//! and the tree's total resources. The output is every element's fair share, split into
//! strong guarantee, integral guarantee and weight-proportional parts, and the values
//! the orchid shows. Everything is a *share*: a vector with one fraction of the total
//! per resource (cpu, memory, gpu, user_slots). The crate knows nothing of nodes, jobs
//! or the scheduler; it is a pure function, and deterministic.
//!
//! # The model: one path per element
//!
//! Each element has a monotone *fair share by suggestion* function `FS(s)`, `s ∈ [0, 1]`:
//! what it takes when its parent offers it `s`. It is built bottom-up from a *path*, the
//! *fair share by fit factor* `P(f)`, and a *max fit factor* `M(s)`: `FS = P ∘ M`.
//!
//! * **Operation path**, `f ∈ [0, 2]`: on `[0, 1]` every resource rises together,
//!   `P_r(f) = min(usage_r, f · max usage)`; on `[1, 2]` it goes in a straight line from
//!   usage to demand. With no usage this is the demand's direction (DRF).
//! * **`fair_share` pool path**, `f ∈ [0, 1]`: `P(f) = Σ_c FS_c(min(1, f · w_c / w_min))`,
//!   the sum of the children's shares as a common level rises, heavier children
//!   offered proportionally more. A pool never moves along its own summed demand.
//! * **FIFO pool path**, `f ∈ [0, n]`: the children's `FS` one after another in FIFO
//!   order, child `k` on `[k, k + 1]` on top of the ends of those before it: each goes to
//!   the end of its path before the next starts.
//! * **Max fit factor**: offered `s`, the element may have resource `r` up to
//!   `b_r(s) = min(g_r + s, l_r)`, `g` its guarantee share (strong plus integral) and `l`
//!   its limits share (both clamped into the range of `P_r`). `M(s)` is the largest `f`
//!   with `P_r(f) ≤ b_r(s)` on **every** `r`: the first resource to reach its bound stops
//!   the whole element, so limits are never applied per component on their own. Per
//!   resource this is the inverse of `P_r`, narrowed to `[g_r, l_r]` and shifted by
//!   `g_r`; `M` is their pointwise minimum.
//!
//! `limited_resource_demand` is `FS(1)`, the end of the path.
//!
//! Top-down, the root is offered `s = 1`. An element offered `s` takes `FS(s)`; a pool
//! hands its children the suggestions of level `M(s)` (lowered by bisection in the rare
//! case rounding makes their sum exceed `FS(s)`). So a pool's share is the sum of its
//! children's, and the root's the sum of its children's.
//!
//! All functions are piecewise linear ([`piecewise`]), non-decreasing and
//! left-continuous; jumps are kept as vertical pieces. Sums, composition and the
//! inverse are exact operations on breakpoints.
//!
//! # Guarantees
//!
//! Strong guarantees are absolute at first. A pool's explicit components count as
//! given; each component it leaves out (other than cpu, the main resource) gets an
//! implicit one, `cpu_child / cpu_parent × parent_r`. Below the root, implicit ones that
//! do not fit what siblings' explicit ones leave of the parent shrink proportionally; at
//! the root they never shrink. `effective_strong_guarantee_resources` is this vector.
//!
//! As shares: when the root's children's guarantees plus every burst pool's burst ratio
//! exceed 1 on some resource, all of them are scaled by the largest common factor that
//! fits (an alert says so). Then from the root down each element's guarantee is cut to
//! its limits, and children whose guarantees no longer fit their parent's are scaled by
//! one common factor.
//!
//! # Integral guarantees
//!
//! Volumes first move by the time since the previous update: in at the flow ratio, out at
//! the integral share ratio given then; never below 0, never above
//! `saturation × flow`. A volume allows an integral ratio of `min over resources of
//! volume / total / smooth_period`.
//!
//! * **Burst pools**, in tree order: the pool's guarantee is raised by
//!   `min(burst ratio, volume ratio)` (within the room its own and its ancestors' limits
//!   leave above their guarantees), its `FS(0)` taken, and what that exceeds its strong
//!   guarantee by becomes its integral share, added to it and its ancestors.
//! * **Relaxed pools** then share what the root's children's guarantees (as far as their
//!   demand goes) leave: each pool's limits are temporarily cut to strong guarantee +
//!   `min(volume ratio, multiplier × flow ratio)`, and one common level `f` (pool `p`
//!   offered `min(1, f · v_p / v_min)`, `v` the volume ratios) is raised until their
//!   shares above strong guarantees fill what is available.
//!
//! After that an integral share acts as a guarantee in the paths above; weights add the
//! weight-proportional part on top within ordinary limits. A share splits as
//! `strong = min(total, strong guarantee)`, `integral = min(total − strong, integral
//! share)`, the rest weight-proportional; at the root the strong part is the sum of the
//! children's strong parts.
//!
//! # Computing it
//!
//! Two shortcuts give the same functions as the construction above; the construction
//! itself (the operation path, per-resource inverses, pointwise minimum) is kept only in
//! the tests, which compare point for point on random inputs: an operation's `FS` is
//! written in closed form
//! ([`operation_share`](crate) module: the furthest point of its path inside the box
//! `min(s, l)`), and `M` is found in one pass as the inverse of the suggestion each fit
//! factor needs, `need(f) = max_r (P_r(f) − g_r)`, up to the first limit.
//!
//! # Cost
//!
//! An operation's function has at most about a dozen points and costs `O(1)`. A pool's
//! path has as many breakpoints as its children's functions together (collinear ones
//! are dropped), and each step over it (sum, inverse, composition) is one sorted pass, so
//! an update costs `O(B · d · log B)` for `B` breakpoints at the leaves (a few per
//! operation) and depth `d`, plus `O(children)` per pool for the top-down pass. Memory is
//! `O(B · d)` while it runs.
//!
//! The working state is flat (`layout.rs`): a row per element in arrays, a record per
//! pool only, and every pool function's points one after another in one buffer. An
//! operation's function is built only while its pool's path is summed from it, in a
//! buffer of one pool's operations; the top-down pass reads an operation's share in
//! closed form (`operation_share::share_at`, equal to its function's value to within
//! rounding), so 100,000 operations' points are never all held. A [`Solver`] keeps those
//! buffers and its output from one update to the next, so once a tree has reached its
//! size an update allocates nothing per operation.

mod attributes;
mod fifo_truncation;
mod fit_factor;
pub mod input;
mod input_check;
mod integral;
mod layout;
mod operation_share;
pub mod output;
pub mod piecewise;
mod plf_value;
#[cfg(test)]
mod reference;
mod share_functions;
mod sum_scaled;
mod top_down;
mod update;
pub mod vector;

pub use input::{
    ElementInput, ElementKind, Guarantee, IntegralInput, IntegralKind, IntegralOptions, Mode,
    TreeInput,
};
pub use output::{Alert, DetailedShare, ElementOutput, IntegralOutput, TreeOutput};
pub use update::{compute, InputError, Solver};
