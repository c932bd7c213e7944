//! What an input must be before anything is computed: a root first, parents before
//! children, amounts finite and non-negative, weights positive. Refused inputs name the
//! element and the value.

use crate::input::{ElementKind, TreeInput};
use ytsched_common::resources::{Resource, ResourceVector};

/// Why an input cannot be computed at all.
#[derive(Clone, Debug, PartialEq)]
pub enum InputError {
    NoRoot,
    /// Element `index` names a parent that is not an earlier pool.
    BadParent {
        index: usize,
    },
    /// A number that must be finite and non-negative is not.
    BadNumber {
        index: usize,
        what: &'static str,
    },
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::NoRoot => write!(f, "the tree has no root element"),
            InputError::BadParent { index } => {
                write!(f, "element {index}: its parent must be an earlier pool")
            }
            InputError::BadNumber { index, what } => {
                write!(f, "element {index}: {what} must be finite and not negative")
            }
        }
    }
}

impl std::error::Error for InputError {}

/// Not NaN and not negative (infinity allowed: "no limit").
fn non_negative(x: f64) -> bool {
    x >= 0.0
}

/// Finite and not negative.
fn amount(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn amounts(v: &ResourceVector) -> bool {
    Resource::ALL.iter().all(|&r| amount(v.get(r)))
}

pub(crate) fn check(input: &TreeInput) -> Result<(), InputError> {
    let Some(root) = input.elements.first() else {
        return Err(InputError::NoRoot);
    };
    if root.parent.is_some() || root.is_operation() {
        return Err(InputError::NoRoot);
    }
    if !amounts(&input.total) {
        return Err(InputError::BadNumber {
            index: 0,
            what: "the tree's total resources",
        });
    }
    for (index, e) in input.elements.iter().enumerate().skip(1) {
        match e.parent {
            Some(p) if p < index && !input.elements[p].is_operation() => {}
            _ => return Err(InputError::BadParent { index }),
        }
        let bad = |what| Err(InputError::BadNumber { index, what });
        if !(e.weight.is_finite() && e.weight > 0.0) {
            return bad("weight (positive)");
        }
        if !non_negative(e.max_share_ratio) {
            return bad("max_share_ratio");
        }
        if !Resource::ALL
            .iter()
            .all(|&r| non_negative(e.resource_limits.get(r)))
        {
            return bad("resource_limits");
        }
        match &e.kind {
            ElementKind::Operation { demand, usage, .. } => {
                if !amounts(demand) || !amounts(usage) {
                    return bad("demand and usage");
                }
            }
            ElementKind::Pool {
                strong_guarantee,
                integral,
                ..
            } => {
                if !strong_guarantee
                    .amounts
                    .iter()
                    .flatten()
                    .all(|&v| amount(v))
                {
                    return bad("strong_guarantee_resources");
                }
                if let Some(i) = integral {
                    let ok = amounts(&i.resource_flow)
                        && amounts(&i.burst_guarantee)
                        && amounts(&i.volume)
                        && amount(i.last_share_ratio)
                        && amount(i.relaxed_share_multiplier_limit);
                    if !ok {
                        return bad("integral_guarantees");
                    }
                }
            }
        }
    }
    Ok(())
}
