//! The fault campaign of issue 42 (docs/reliability.md): faults of every kind struck into
//! the compose lab while a workload runs, then the whole history judged. The witnesses
//! and the judge (the ledger the jobs keep, the invariants) are apart from the driver,
//! so each check is tested on histories made by hand.

pub mod campaign;
pub mod faults;
pub mod invariants;
pub mod lab;
pub mod ledger;
pub mod report;
pub mod schedule;
pub mod workload;
