//! The fault campaign's witnesses and judge (issue 42): the ledger its jobs keep, and the
//! invariants the whole history must satisfy. The driver that injects faults into the
//! compose lab reads both; they are here, apart from it, so each check is tested on
//! histories made by hand.

pub mod invariants;
pub mod ledger;
