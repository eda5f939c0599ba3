//! The reconcilers that turn tenants' objects (NonAdminBackup, NonAdminRestore, NonAdminBackupStorageLocation,
//! NonAdminDownloadRequest, NonAdminSchedule) into Velero objects and keep their status current. They run only on
//! the replica holding the leader Lease (webhooks run everywhere); the runtime starts one [`term()`] per term.
//!
//! Layout, following the data flow (see `README.md` in this folder), each file importing only those above it:
//! - the shared core: `error` (the reconcile `Error`), `events` (Events and their recorder), `write` (writes only
//!   what changed, retries conflicts, creates idempotently), `context` (`Shared`: client, options, policy,
//!   metrics, event recorder, recent writes, rights), `view` (a term's read-only view of every store, its wakers
//!   and hooks, what the kinds make), `cx` (`Cx<State>`, a kind's context), `jobs` (what the watches send the
//!   background jobs), `conditions` and `contents`.
//! - `index/`, what the watches feed: `synced`, `watches`, `queue` (Velero queue positions), `velero` (what the
//!   stores keep of the queued Velero objects), `counts` (per-volume progress), `interner`.
//! - the skeleton, in two tiers: `kind` is the base every kind runs ([`Kind`](kind::Kind), [`Build`](kind::Build):
//!   reconcile entry, finalizer, stale-cache guard, status write with Events, nacuuid lookup, error policy, and
//!   the wiring helpers), with `stores` for kinds with one Velero object per tenant object; `status` (pure status
//!   planning over [`Mirrors`](status::Mirrors)) and `tenant` are the tier the kinds queued in Velero add on top
//!   ([`Tenant`](tenant::Tenant): admission, create, queue position, status mirror, their watches).
//! - `background/`, the jobs beside the kinds: `sync` (backup sync) and `gc` (garbage collection of Velero
//!   objects whose tenant object is gone).
//! - `kinds/`, one file per kind with its own decisions, its state and its controller (its watches): `backup`,
//!   `restore` (queued), `location`, `download`, `schedule`.
//! - `term`, one leadership term: the list of kinds, the shared watch of Velero's storage locations, the jobs.
//!
//! Each is re-exported here (`controller::backup`, `controller::watches`, ...). Adding a kind: one API file, one
//! kind file, one line in `term::kinds`, plus its `Origin` and (with webhooks) its `ProxyKind` entry.

pub mod background;
pub mod conditions;
pub mod contents;
pub mod context;
pub mod cx;
pub mod error;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod index;
pub mod jobs;
pub mod kind;
pub mod kinds;
pub mod status;
pub mod stores;
pub mod tenant;
pub mod term;
pub mod view;
pub mod write;

pub use background::{gc, sync};
pub use error::Error;
pub use index::{counts, interner, queue, watches};
pub use kinds::{backup, download, location, restore, schedule};
pub use term::term;

use crate::config::Settings;
use std::time::Duration;

/// Everything the controllers need to know, with the timings tests may want to shorten.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where Velero runs and nac creates Velero objects.
    pub velero_namespace: String,
    /// nac's own namespace (the Lease lives there).
    pub lease_namespace: String,
    pub leader_election: bool,
    pub lease_name: String,
    pub lease_duration: Duration,
    pub renew_interval: Duration,
    /// This replica's identity in the Lease and in Events.
    pub identity: String,
    /// Reconciles triggered by queue moves and per-volume progress are collected and released once per this
    /// interval (0: at once), so a burst costs one status write per object, not one per event.
    pub queue_update_interval: Duration,
    /// Reconciles running at once per controller (0: unbounded).
    pub concurrency: u16,
    /// First retry delay after a failed reconcile; doubles per consecutive failure up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Retry interval while no valid policy is loaded.
    pub policy_retry: Duration,
    /// Poll interval while waiting for Velero to delete something (watch events usually come first).
    pub deletion_poll: Duration,
    /// How long Velero's finalizer may hold a Velero Restore before the NonAdminRestore condition reports it.
    pub restore_finalizer_grace: Duration,
    /// How long Velero's backup queue may stand still before nac reports it (zero: never).
    pub queue_stall: Duration,
    /// How long a reconcile waits for a Velero watch's first list before failing (Velero CRDs missing?).
    pub store_ready_timeout: Duration,
    /// How long in-flight reconciles may take to finish when stopping.
    pub shutdown_grace: Duration,
    /// How watches fill their stores (see [`watches::config`]).
    pub initial_lists: crate::config::InitialLists,
    /// Name resolution and the cluster's networks, for tenants' storage endpoints (shared with the webhooks).
    pub endpoints: std::sync::Arc<crate::endpoints::Endpoints>,
}

impl Options {
    /// Options from nac's settings, with default timings.
    pub fn from_settings(settings: &Settings) -> Self {
        let c = &settings.controllers;
        let le = &c.leader_election;
        Options {
            velero_namespace: c.velero_namespace.clone(),
            lease_namespace: settings.policy.namespace.clone(),
            leader_election: le.enabled,
            lease_name: le.lease_name.clone(),
            lease_duration: Duration::from_secs(le.lease_duration_secs.max(1)),
            renew_interval: Duration::from_secs(le.renew_interval_secs.max(1)),
            identity: le.identity.clone().unwrap_or_else(default_identity),
            queue_update_interval: Duration::from_secs(1),
            concurrency: 32,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(300),
            policy_retry: Duration::from_secs(5),
            deletion_poll: Duration::from_secs(10),
            restore_finalizer_grace: Duration::from_secs(120),
            queue_stall: Duration::from_secs(c.queue_stall_secs),
            store_ready_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            initial_lists: c.initial_lists,
            endpoints: std::sync::Arc::new(crate::endpoints::Endpoints::system(
                &settings.endpoints.cluster_networks,
            )),
        }
    }
}

/// The host name plus a random suffix: unique even for two processes on one host.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "nac".to_string());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}_{}", &suffix[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_settings() {
        let mut s = Settings::default();
        s.controllers.velero_namespace = "velero".into();
        s.policy.namespace = "nac-system".into();
        s.controllers.leader_election.identity = Some("pod-a".into());
        let o = Options::from_settings(&s);
        assert_eq!(o.velero_namespace, "velero");
        assert_eq!(o.lease_namespace, "nac-system");
        assert_eq!(o.identity, "pod-a");
        assert_eq!(o.lease_duration, Duration::from_secs(15));
        assert_eq!(o.renew_interval, Duration::from_secs(5));
        assert!(o.leader_election);
    }

    #[test]
    fn default_identities_differ_between_processes_on_one_host() {
        assert_ne!(default_identity(), default_identity());
    }
}
