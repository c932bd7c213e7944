//! The range of weights an operation or a pool may have. YTsaurus bounds them the same
//! way (`MinSchedulableWeight`, `MaxSchedulableWeight`): the ratio of the largest to the
//! smallest is 1/ε of an f64, so a share computed from two weights in range never loses
//! the smaller one to rounding, and the fair-share solver stays exact.

/// √ε of an f64: the smallest weight anything may have.
pub const MIN_SCHEDULABLE_WEIGHT: f64 = 1.490_116_119_384_765_6e-8;
/// 1/√ε: the largest weight anything may have.
pub const MAX_SCHEDULABLE_WEIGHT: f64 = 1.0 / MIN_SCHEDULABLE_WEIGHT;

/// Whether `w` is a weight in range; the error names the range.
pub fn check(w: f64) -> Result<(), String> {
    if w.is_finite() && (MIN_SCHEDULABLE_WEIGHT..=MAX_SCHEDULABLE_WEIGHT).contains(&w) {
        return Ok(());
    }
    Err(format!(
        "must be between {MIN_SCHEDULABLE_WEIGHT:e} and {MAX_SCHEDULABLE_WEIGHT:e} (YTsaurus's schedulable range), got {w}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_ytsauruss() {
        assert_eq!(MIN_SCHEDULABLE_WEIGHT, f64::EPSILON.sqrt());
        assert!(check(1.0).is_ok());
        assert!(check(MIN_SCHEDULABLE_WEIGHT).is_ok());
        assert!(check(MAX_SCHEDULABLE_WEIGHT).is_ok());
        for bad in [0.0, -1.0, 1e15, 1e-9, f64::NAN, f64::INFINITY] {
            let e = check(bad).unwrap_err();
            assert!(e.contains("6.7108864e7"), "names the bound: {e}");
        }
    }
}
