//! The reconcilers that turn NonAdminBackups and NonAdminRestores into Velero objects and keep their status
//! current. They run only on the replica holding the leader Lease (webhooks run everywhere).
//!
//! Layout, following the data flow:
//! - `watches`: watch streams feeding stores (`kube::runtime` reflectors) and the in-memory indexes `queue`
//!   (Velero queue positions) and `counts` (DataUploads / PodVolumeBackups per backup).
//! - `backup`, `restore`: the two `kube::runtime::Controller` reconcilers, thin: they gather observations and
//!   write; the decisions are the pure `status` (status planning, events) and `objects` (Velero objects built from
//!   a NonAdminBackup/NonAdminRestore) modules.
//! - `write`: status writes only when changed, conflict retries, idempotent creates.

pub mod backup;
pub mod conditions;
pub mod context;
pub mod counts;
#[cfg(test)]
mod fixtures;
pub mod objects;
pub mod queue;
pub mod restore;
pub mod status;
pub mod sync;
pub mod watches;
pub mod write;

pub use context::Error;

use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::config::Settings;
use crate::metrics::Metrics;
use crate::naming::{NAB, NAR};
use crate::policy::live::PolicyStore;
use crate::runtime::lease::{run_elected, Elector, LeaseConfig};
use crate::velero::{Backup, DataUpload, DeleteBackupRequest, PodVolumeBackup, Restore};
use context::{key_of, key_of_ref, Ctx, CtxParts, NAB_CONTROLLER, NAR_CONTROLLER};
use futures::StreamExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Api, Client};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

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
    /// How long a reconcile waits for a Velero watch's first list before failing (Velero CRDs missing?).
    pub store_ready_timeout: Duration,
    /// How long in-flight reconciles may take to finish when stopping.
    pub shutdown_grace: Duration,
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
            store_ready_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
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

/// Runs the NonAdminBackup and NonAdminRestore controllers until `shutdown` is cancelled: behind the leader Lease
/// when leader election is enabled, directly otherwise. Returns after the controllers stopped and the Lease was
/// released.
pub async fn run(
    client: Client,
    settings: Settings,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with(client, Options::from_settings(&settings), policy, metrics, shutdown).await
}

/// [`run`] with explicit options (tests shorten the timings).
pub async fn run_with(
    client: Client,
    opts: Options,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    tracing::info!(
        velero_namespace = %opts.velero_namespace,
        leader_election = opts.leader_election,
        identity = %opts.identity,
        "starting controllers"
    );
    if !opts.leader_election {
        metrics.leader.set(1);
        let res = term(client, opts, policy, metrics.clone(), shutdown).await;
        metrics.leader.set(0);
        return res;
    }
    let elector = Elector::new(
        client.clone(),
        LeaseConfig {
            namespace: opts.lease_namespace.clone(),
            name: opts.lease_name.clone(),
            identity: opts.identity.clone(),
            lease_duration: opts.lease_duration,
            renew_interval: opts.renew_interval,
        },
        metrics.clone(),
    );
    let grace = opts.shutdown_grace + Duration::from_secs(1);
    let m = metrics.clone();
    let res = run_elected(elector, shutdown.clone(), grace, metrics, move |stop| {
        term(client.clone(), opts.clone(), policy.clone(), m.clone(), stop)
    })
    .await;
    shutdown.cancelled().await;
    res
}

/// One leadership term: fresh watches, stores and indexes; both controllers; until `stop`.
async fn term(
    client: Client,
    opts: Options,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let vns = opts.velero_namespace.clone();
    let (nab_store, nab_writer) = reflector::store::<NonAdminBackup>();
    let (nar_store, nar_writer) = reflector::store::<NonAdminRestore>();
    let (backup_store, backup_writer) = reflector::store::<Backup>();
    let (dbr_store, dbr_writer) = reflector::store::<DeleteBackupRequest>();
    let (restore_store, restore_writer) = reflector::store::<Restore>();
    let backup_queue = Arc::new(Mutex::new(queue::QueueIndex::new()));
    let restore_queue = Arc::new(Mutex::new(queue::QueueIndex::new()));
    let data_uploads = Arc::new(Mutex::new(counts::PhaseCounts::new()));
    let pod_volume_backups = Arc::new(Mutex::new(counts::PhaseCounts::new()));
    let (du_synced, pvb_synced) = (watches::Synced::default(), watches::Synced::default());
    let (backups_synced, restores_synced, dbrs_synced) = (
        watches::Synced::default(),
        watches::Synced::default(),
        watches::Synced::default(),
    );
    let (nab_tx, nab_rx) = futures::channel::mpsc::unbounded::<ObjectRef<NonAdminBackup>>();
    // Velero Backups without a NonAdminBackup, for backup sync.
    let (sync_tx, sync_rx) = futures::channel::mpsc::unbounded::<String>();
    let (nar_tx, nar_rx) = futures::channel::mpsc::unbounded::<ObjectRef<NonAdminRestore>>();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nac".into(),
            instance: Some(opts.identity.clone()),
        },
    );
    let ctx = Arc::new(Ctx::new(CtxParts {
        client: client.clone(),
        opts: opts.clone(),
        policy,
        metrics: metrics.clone(),
        recorder,
        nabs: nab_store.clone(),
        nars: nar_store.clone(),
        backups: backup_store.clone(),
        backups_synced: backups_synced.clone(),
        delete_requests: dbr_store,
        delete_requests_synced: dbrs_synced.clone(),
        restores: restore_store,
        restores_synced: restores_synced.clone(),
        backup_queue: backup_queue.clone(),
        restore_queue: restore_queue.clone(),
        data_uploads: data_uploads.clone(),
        pod_volume_backups: pod_volume_backups.clone(),
        data_uploads_synced: du_synced.clone(),
        pod_volume_backups_synced: pvb_synced.clone(),
        nab_triggers: nab_tx.clone(),
        nar_triggers: nar_tx.clone(),
    }));

    let config = ControllerConfig::default().concurrency(opts.concurrency);

    // NonAdminBackups: their own changes, their Velero Backups and DeleteBackupRequests, queue moves.
    let nab_ctx = ctx.clone();
    let depth = ctx.clone();
    let nabs_for_depth = nab_store.clone();
    let enqueue_nab = move |r: &ObjectRef<NonAdminBackup>| {
        if nabs_for_depth.get(r).is_some() {
            depth.nab_depth.enqueue(key_of_ref(r));
        }
    };
    let (e1, e2, e3, e4) = (
        enqueue_nab.clone(),
        enqueue_nab.clone(),
        enqueue_nab.clone(),
        enqueue_nab,
    );
    let nabs_for_sync = nab_store.clone();
    let nab_controller = Controller::for_stream(
        watches::nab_stream(Api::all(client.clone()), nab_writer).map(move |r| {
            if let Ok(n) = &r {
                e1(&ObjectRef::from_obj(n));
            }
            r
        }),
        nab_store.clone(),
    )
    .with_config(config.clone())
    .watches_stream(
        watches::backup_stream(
            Api::namespaced(client.clone(), &vns),
            backup_writer,
            backup_queue,
            nab_tx.clone(),
            backups_synced,
            metrics.clone(),
        ),
        move |b: Backup| {
            let r = NAB.owner(&b.metadata);
            if let Some(r) = &r {
                if nabs_for_sync.get(r).is_some() {
                    e2(r);
                } else if let Some(name) = &b.metadata.name {
                    // Its NonAdminBackup is gone (or never was here): backup sync decides.
                    let _ = sync_tx.unbounded_send(name.clone());
                }
            }
            r
        },
    )
    .watches_stream(
        watches::delete_request_stream(
            Api::namespaced(client.clone(), &vns),
            dbr_writer,
            dbrs_synced,
            metrics.clone(),
        ),
        move |d: DeleteBackupRequest| {
            let r = NAB.owner(&d.metadata);
            if let Some(r) = &r {
                e3(r);
            }
            r
        },
    )
    .reconcile_on(watches::coalesce(nab_rx, opts.queue_update_interval).map(move |r| {
        e4(&r);
        r
    }))
    .graceful_shutdown_on(stop.clone().cancelled_owned())
    .run(reconcile_nab, error_policy_nab, nab_ctx)
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "NonAdminBackup controller");
        }
    });

    // NonAdminRestores: their own changes, their Velero Restores, queue moves.
    let nar_ctx = ctx.clone();
    let depth = ctx.clone();
    let nars_for_depth = nar_store.clone();
    let enqueue_nar = move |r: &ObjectRef<NonAdminRestore>| {
        if nars_for_depth.get(r).is_some() {
            depth.nar_depth.enqueue(key_of_ref(r));
        }
    };
    let (f1, f2, f3) = (enqueue_nar.clone(), enqueue_nar.clone(), enqueue_nar);
    let nar_controller = Controller::for_stream(
        watches::nar_stream(Api::all(client.clone()), nar_writer).map(move |r| {
            if let Ok(n) = &r {
                f1(&ObjectRef::from_obj(n));
            }
            r
        }),
        nar_store,
    )
    .with_config(config)
    .watches_stream(
        watches::restore_stream(
            Api::namespaced(client.clone(), &vns),
            restore_writer,
            restore_queue,
            nar_tx.clone(),
            restores_synced,
            metrics.clone(),
        ),
        move |r: Restore| {
            let n = NAR.owner(&r.metadata);
            if let Some(n) = &n {
                f2(n);
            }
            n
        },
    )
    .reconcile_on(watches::coalesce(nar_rx, opts.queue_update_interval).map(move |r| {
        f3(&r);
        r
    }))
    .graceful_shutdown_on(stop.clone().cancelled_owned())
    .run(reconcile_nar, error_policy_nar, nar_ctx)
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "NonAdminRestore controller");
        }
    });

    // Per-volume progress of backups, counted for the NonAdminBackup status.
    let du = watches::volume_count_stream(
        Api::<DataUpload>::namespaced(client.clone(), &vns),
        data_uploads,
        du_synced,
        backup_store.clone(),
        nab_tx.clone(),
        |o: &DataUpload| o.status.as_ref().and_then(|s| s.phase.clone()),
        "velero datauploads",
    )
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});
    let pvb = watches::volume_count_stream(
        Api::<PodVolumeBackup>::namespaced(client.clone(), &vns),
        pod_volume_backups,
        pvb_synced,
        backup_store,
        nab_tx,
        |o: &PodVolumeBackup| o.status.as_ref().and_then(|s| s.phase.clone()),
        "velero podvolumebackups",
    )
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});

    let sync_ctx = ctx.clone();
    let backup_sync = async move {
        tokio::select! {
            () = sync::run(sync_ctx, sync_rx) => {}
            () = stop.cancelled() => {}
        }
    };

    tokio::join!(nab_controller, nar_controller, du, pvb, backup_sync);
    drop(nar_tx);
    tracing::info!("controllers stopped");
    Ok(())
}

async fn reconcile_nab(nab: Arc<NonAdminBackup>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = key_of(&*nab);
    let span = tracing::info_span!("reconcile", controller = NAB_CONTROLLER, object = %key);
    ctx.nab_depth.start(&key);
    let start = Instant::now();
    let res = async {
        tracing::debug!("reconcile started");
        let res = backup::reconcile(nab, &ctx).await;
        tracing::debug!(ok = res.is_ok(), "reconcile finished");
        res
    }
    .instrument(span)
    .await;
    ctx.nab_depth.finish();
    ctx.record(NAB_CONTROLLER, &key, &res, start.elapsed());
    res
}

async fn reconcile_nar(nar: Arc<NonAdminRestore>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = key_of(&*nar);
    let span = tracing::info_span!("reconcile", controller = NAR_CONTROLLER, object = %key);
    ctx.nar_depth.start(&key);
    let start = Instant::now();
    let res = async {
        tracing::debug!("reconcile started");
        let res = restore::reconcile(nar, &ctx).await;
        tracing::debug!(ok = res.is_ok(), "reconcile finished");
        res
    }
    .instrument(span)
    .await;
    ctx.nar_depth.finish();
    ctx.record(NAR_CONTROLLER, &key, &res, start.elapsed());
    res
}

fn error_policy(controller: &str, key: &str, err: &Error, ctx: &Ctx) -> Action {
    if err.is_waiting() {
        tracing::debug!(controller, object = key, reason = %err, "waiting");
        return Action::requeue(ctx.opts.deletion_poll);
    }
    let delay = ctx.next_backoff(controller, key);
    tracing::warn!(controller, object = key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

fn error_policy_nab(nab: Arc<NonAdminBackup>, err: &Error, ctx: Arc<Ctx>) -> Action {
    error_policy(NAB_CONTROLLER, &key_of(&*nab), err, &ctx)
}

fn error_policy_nar(nar: Arc<NonAdminRestore>, err: &Error, ctx: Arc<Ctx>) -> Action {
    error_policy(NAR_CONTROLLER, &key_of(&*nar), err, &ctx)
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
