//! Files an admin's tools rewrite while the scheduler runs, followed and applied.

pub mod approvals_file;
pub mod followed_file;
