//! The tenant kinds, one file each: its own decisions on the skeleton (`impl Kind`, and `impl Tenant` for the kinds
//! queued in Velero), its state and its `controller` function (its watches).

pub mod backup;
pub mod download;
pub mod location;
pub mod restore;
pub mod schedule;
