//! What the watches feed: stores (`kube::runtime` reflectors) and the incremental indexes read by the kinds without
//! listing anything.

pub mod after_init;
pub mod counts;
pub mod interner;
pub mod queue;
pub mod snapshots;
pub mod synced;
pub mod velero;
pub mod watches;
