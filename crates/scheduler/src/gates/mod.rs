//! What stands between callers and the core: request rates, cost budgets, the fair
//! gate API calls take turns through, and the count of what was turned away.

pub mod cost_budgets;
pub mod fair_gate;
pub mod rate_limits;
pub mod refusals;
