//! nac: namespace users back up and restore their own namespace through Velero, under the cluster admin's policy.

pub mod api;
pub mod naming;
pub mod policy;
pub mod velero;
