//! Administration: paths into the configuration, reading and changing it, node
//! attributes, what-if, delegation's budget, and configuration files.

pub(crate) mod changes;
pub mod config_file;
pub mod delegation_budget;
pub(crate) mod nodes;
pub(crate) mod path;
mod pool_attributes;
pub(crate) mod values;
pub(crate) mod what_if;
