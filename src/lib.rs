//! nac: namespace users back up and restore their own namespace through Velero, under the cluster admin's policy.

pub mod admission;
pub mod api;
pub mod config;
pub mod controller;
pub mod metrics;
pub mod naming;
pub mod policy;
pub mod policy_source;
pub mod policy_store;
pub mod server;
pub mod testing;
pub mod tls;
pub mod velero;
pub mod webhook_config;
