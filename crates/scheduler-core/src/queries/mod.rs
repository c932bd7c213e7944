//! Read-only views: pages of operations and jobs, the orchid, explanations and share
//! history.

pub(crate) mod explain;
pub mod orchid;
pub(crate) mod pages;
pub mod reads;
pub(crate) mod share_history;
