//! The jobs beside the kinds, not triggered by a tenant's object: backup sync, garbage collection, and the watch
//! of Velero's backup queue standing still. The kinds' watches hand the first two work through
//! [`Jobs`](super::jobs::Jobs).

pub mod gc;
pub mod objective;
pub mod standstill;
pub mod sync;
