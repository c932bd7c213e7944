//! Read-only views: pages of operations and jobs, the orchid, explanations and share
//! history.

pub(crate) mod explain;
pub mod orchid;
mod orchid_entries;
mod orchid_facts;
pub(crate) mod pages;
pub mod reads;
pub(crate) mod share_history;
