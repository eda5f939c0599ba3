//! The reconcilers (leader only).

pub mod conditions;
pub mod counts;
pub mod objects;
pub mod queue;
pub mod status;
