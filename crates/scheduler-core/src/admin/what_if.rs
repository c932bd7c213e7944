//! What-if for admin changes: the change is made on a copy of the whole core, and
//! both copies recompute every tree's fair shares at the same instant, so the answer
//! is what the real scheduler would compute, not an estimate. The live core is not
//! touched.

/// Below this, a fair share ratio did not move (update arithmetic noise).
pub(crate) const UNCHANGED: f64 = 1e-9;

pub(crate) type ShareKey = (String, &'static str, String);
