//! nac: namespace users back up and restore their own namespace through Velero, under the cluster admin's policy.
//!
//! The folders follow the data flow: `api/` and `velero/` (types) → `policy/` (pure rules; `policy/live/` keeps the
//! current policy) → `admission/` (webhooks) and `controller/` (reconcilers) → `runtime/` (process plumbing: TLS
//! serving, ops endpoints, signals and shutdown, the leader Lease). Development-only code (the development CA,
//! the test HTTPS client, URL-based webhook registrations) lives in `src/devtools/`, outside the library.
#![warn(clippy::too_many_lines)]

pub mod admission;
pub mod api;
pub mod config;
pub mod controller;
pub mod cron;
pub mod download;
pub mod duration;
pub mod endpoints;
pub mod manifest;
pub mod metrics;
pub mod naming;
pub mod plugin;
pub mod policy;
pub mod rights;
pub mod runtime;
pub mod velero;
mod wire;
