//! The reconcilers that turn NonAdminBackups and NonAdminRestores into Velero objects and keep their status
//! current. They run only on the replica holding the leader Lease (webhooks run everywhere).
//!
//! Layout, following the data flow:
//! - `watches`: watch streams feeding stores (`kube::runtime` reflectors) and the watch-fed indexes, all on one
//!   protocol (`WatchIndex`): `queue` (Velero queue positions) and `counts` (DataUploads / PodVolumeBackups per
//!   backup).
//! - `tenant`: the reconcile skeleton every tenant kind runs (`Tenant` is what a kind brings); `status` plans its
//!   status and events, purely; `write` writes only what changed, retries conflicts, creates idempotently.
//! - `backup`, `restore`: one file per kind with its own decisions (admission, the Velero object it builds, what
//!   its status mirrors, its delete path). A new kind is one such file, a `KindState` in `context`, and a
//!   `tenant_controller` line below.
//! - `location`, `download`: the kinds that are not queued in Velero (tenants' storage locations, download
//!   requests), each a short sequence of its own on the same helpers.
//! - `schedule`: tenants' schedules (one Velero Schedule each; their runs get NonAdminBackups through `sync`).
//! - `sync`: backup sync, a background loop beside the controllers; `gc`: garbage collection of Velero objects
//!   whose tenant object is gone, another.

pub mod backup;
pub mod conditions;
pub mod contents;
pub mod context;
pub mod counts;
pub mod download;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod gc;
pub mod interner;
pub mod kind;
pub mod location;
mod objects;
pub mod queue;
pub mod restore;
pub mod schedule;
pub mod status;
pub mod sync;
pub mod tenant;
pub mod term;
pub mod watches;
pub mod write;

pub use context::Error;
pub use objects::add_backup_exclusions;

use crate::api::{
    NonAdminBackup, NonAdminBackupStorageLocation, NonAdminBackupStorageLocationRequest, NonAdminDownloadRequest,
    NonAdminSchedule,
};
use crate::config::Settings;
use crate::metrics::Metrics;
use crate::naming::{NAB, NABSL, NADR, NAS};
use crate::policy::live::PolicyStore;
use crate::runtime::lease::{run_elected, Elector, LeaseConfig};
use crate::velero::{Backup, DataUpload, DeleteBackupRequest, DownloadRequest, PodVolumeBackup, Schedule};
use context::Shared;
use events::Recorder;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use queue::QueueIndex;
use std::sync::Arc;
use std::time::Duration;
use tenant::Tenant;
use term::Ctx;
use tokio_util::sync::CancellationToken;

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
    /// How watches fill their stores (see [`watches::config`]).
    pub initial_lists: crate::config::InitialLists,
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
            initial_lists: c.initial_lists,
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
/// `access` answers about requesters' rights (shared with the webhooks, so a reconcile right after admission
/// reuses their answers).
pub async fn run(
    client: Client,
    settings: Settings,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    access: Arc<dyn crate::rights::Access>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with(
        client,
        Options::from_settings(&settings),
        policy,
        metrics,
        access,
        shutdown,
    )
    .await
}

/// [`run`] with explicit options (tests shorten the timings).
pub async fn run_with(
    client: Client,
    opts: Options,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    access: Arc<dyn crate::rights::Access>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    tracing::info!(
        velero_namespace = %opts.velero_namespace,
        leader_election = opts.leader_election,
        identity = %opts.identity,
        "starting controllers"
    );
    watches::choose_initial_lists(&client, &opts).await;
    if !opts.leader_election {
        metrics.leader.set(1);
        let res = term(client, opts, policy, metrics.clone(), access, shutdown).await;
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
        term(
            client.clone(),
            opts.clone(),
            policy.clone(),
            m.clone(),
            access.clone(),
            stop,
        )
    })
    .await;
    shutdown.cancelled().await;
    res
}

/// One leadership term: fresh watches, stores and indexes; every tenant controller and background loop; until
/// `stop`.
async fn term(
    client: Client,
    opts: Options,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    access: Arc<dyn crate::rights::Access>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let vns = opts.velero_namespace.clone();
    let recorder = Arc::new(Recorder::new(client.clone(), "nac", &opts.identity));
    let (ctx, wiring) = Ctx::new(Shared::new(
        client.clone(),
        opts.clone(),
        policy,
        metrics.clone(),
        recorder,
        access,
    ));
    let ctx = Arc::new(ctx);
    // Velero Backups without a NonAdminBackup, for backup sync and garbage collection.
    let (sync_tx, sync_rx) = futures::channel::mpsc::unbounded::<String>();
    let (gc_tx, gc_rx) = futures::channel::mpsc::unbounded::<gc::Trigger>();
    let nabs = ctx.nab.objects.clone();
    let (gc_backups, sync_orphans) = (gc_tx.clone(), sync_tx.clone());
    let orphans = move |b: &Backup, r: &ObjectRef<NonAdminBackup>| {
        if nabs.get(r).is_none() {
            // Its NonAdminBackup is gone (or never was here): backup sync decides, or the collector.
            let _ = sync_orphans.unbounded_send(b.name_any());
            let _ = gc_backups.unbounded_send(gc::Trigger::Object(gc::Candidate {
                made: gc::Made::Backup,
                name: b.name_any(),
            }));
        }
    };
    let nars = ctx.nar.objects.clone();
    let gc_restores = gc_tx.clone();
    let restore_orphans = move |v: &crate::velero::Restore, r: &ObjectRef<crate::api::NonAdminRestore>| {
        if nars.get(r).is_none() {
            let _ = gc_restores.unbounded_send(gc::Trigger::Object(gc::Candidate {
                made: gc::Made::Restore,
                name: v.name_any(),
            }));
        }
    };

    // NonAdminBackups also follow nac's DeleteBackupRequests.
    let dbrs = watches::delete_request_stream(
        Api::namespaced(client.clone(), &vns),
        wiring.delete_requests,
        ctx.delete_requests.synced.clone(),
        metrics.clone(),
    );
    // One whose NonAdminBackup is not in the store goes to the collector (kept until Velero processed it).
    let (nabs, gc_requests) = (ctx.nab.objects.clone(), gc_tx.clone());
    let dbrs = dbrs.inspect(move |r| {
        if let Ok(d) = r {
            if NAB
                .owner(&d.metadata)
                .is_some_and(|o: ObjectRef<NonAdminBackup>| nabs.get(&o).is_none())
            {
                let _ = gc_requests.unbounded_send(gc::Trigger::Object(gc::Candidate {
                    made: gc::Made::DeleteBackupRequest,
                    name: d.name_any(),
                }));
            }
        }
    });
    // A NonAdminBackup that went: the collector looks at its Velero objects, and backup sync at its Velero
    // Backup (one with data in storage, which the collector keeps, gets its NonAdminBackup back where the policy
    // syncs its location, without waiting for the periodic resync).
    let (gc_nab, sync_gone) = (gc_tx.clone(), sync_tx.clone());
    let nab_gone = move |o: &NonAdminBackup| {
        let _ = gc_nab.unbounded_send(gc::gone(NAB, o));
        if let Some(b) = o.status.as_ref().and_then(|s| s.velero_backup.as_ref()?.name.clone()) {
            let _ = sync_gone.unbounded_send(b);
        }
    };
    let gc_nar = gc_tx.clone();
    let nar_gone = move |o: &crate::api::NonAdminRestore| {
        let _ = gc_nar.unbounded_send(gc::gone(crate::naming::NAR, o));
    };
    // The runs of nac's Velero Schedules: their schedule hears of each change (recent backups, last backup), and
    // backup sync of one that has no NonAdminBackup yet.
    let (run_schedules, sync_runs) = (ctx.nas.trigger.clone(), sync_tx.clone());
    let runs = move |b: &Backup| {
        if let Some(r) = NAS.owner::<NonAdminSchedule>(b) {
            let _ = run_schedules.unbounded_send(r);
            if !NAB.is_tagged(b) {
                let _ = sync_runs.unbounded_send(b.name_any());
            }
        }
    };
    let nab_controller = tenant_controller(&ctx, wiring.nab, runs, orphans, nab_gone)
        .watches_stream(dbrs, |d: DeleteBackupRequest| NAB.owner(&d.metadata));
    let nab_controller = drive(nab_controller, &ctx, stop.clone());
    let nar_controller = drive(
        tenant_controller(&ctx, wiring.nar, |_| {}, restore_orphans, nar_gone),
        &ctx,
        stop.clone(),
    );

    // Per-volume progress of backups, counted for the NonAdminBackup status.
    let du = watches::volume_count_stream(
        Api::<DataUpload>::namespaced(client.clone(), &vns),
        ctx.volumes.data_uploads.clone(),
        ctx.volumes.data_uploads_synced.clone(),
        &ctx.nab,
        "velero datauploads",
    )
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});
    let pvb = watches::volume_count_stream(
        Api::<PodVolumeBackup>::namespaced(client.clone(), &vns),
        ctx.volumes.pod_volume_backups.clone(),
        ctx.volumes.pod_volume_backups_synced.clone(),
        &ctx.nab,
        "velero podvolumebackups",
    )
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});

    // Tenants' own storage locations: triggered by their Velero BSLs, approval requests, Secret copies and the
    // tenants' Secrets.
    let (location_tx, location_rx) = futures::channel::mpsc::unbounded::<ObjectRef<NonAdminBackupStorageLocation>>();
    let secret_ctx = ctx.clone();
    let secret_tx = location_tx.clone();
    let tenant_secrets = watches::secret_changes(Api::all(client.clone()), move |ns, name| {
        for r in location::using_secret(&secret_ctx.nabsl.objects, ns, name) {
            let _ = secret_tx.unbounded_send(r);
        }
    })
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});
    let gc_locations = gc_tx.clone();
    let nabsl_objects = watches::origin_stream(
        Api::<NonAdminBackupStorageLocation>::all(client.clone()),
        watches::config(),
        wiring.nabsl.objects,
        ctx.nabsl.objects.synced.clone(),
        "nonadminbackupstoragelocations",
        move |o| {
            let _ = gc_locations.unbounded_send(gc::gone(NABSL, o));
        },
    );
    let requests = watches::store_stream(
        Api::<NonAdminBackupStorageLocationRequest>::namespaced(client.clone(), &vns),
        watches::config(),
        wiring.nabsl.requests,
        ctx.nabsl.requests.synced.clone(),
        "nonadminbackupstoragelocationrequests",
    );
    let copies = watches::store_stream(
        Api::<Secret>::namespaced(client.clone(), &vns),
        watches::config().labels(NABSL.nacuuid_label),
        wiring.nabsl.copies,
        ctx.nabsl.copies.synced.clone(),
        "secret copies",
    );
    let nabsl_controller = Controller::for_stream(nabsl_objects, ctx.nabsl.objects.store.clone())
        .with_config(ControllerConfig::default().concurrency(ctx.opts.concurrency))
        .watches_stream(requests, |r| NABSL.owner(&r.metadata))
        .watches_stream(copies, |s| NABSL.owner(&s.metadata))
        .reconcile_on(location_rx)
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(
            kind::reconcile::<NonAdminBackupStorageLocation>,
            kind::error_policy::<NonAdminBackupStorageLocation>,
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, controller = location::CONTROLLER, "controller");
            }
        });

    // Velero's storage locations: restores wait for theirs to be Available; a tenant's location mirrors its own.
    let wake_ctx = ctx.clone();
    let mut known = std::collections::HashSet::<String>::new();
    let locations = watches::location_stream(
        Api::namespaced(client.clone(), &vns),
        wiring.locations,
        ctx.locations.synced.clone(),
        move |location, exists| {
            let name = &location.name_any();
            wake_ctx.wake(&tenant::dependency(
                "BackupStorageLocation",
                &wake_ctx.opts.velero_namespace,
                name,
            ));
            if let Some(r) = NABSL.owner(&location.metadata) {
                let _ = location_tx.unbounded_send(r);
            }
            // A location appearing or going: the backups on it say so.
            if exists != known.contains(name) {
                if exists {
                    known.insert(name.to_string());
                } else {
                    known.remove(name);
                }
                let on_it: Vec<String> = wake_ctx
                    .nab
                    .velero
                    .state()
                    .iter()
                    .filter(|b| b.spec.storage_location.as_deref() == Some(name))
                    .map(|b| b.name_any())
                    .collect();
                wake_ctx.nab.trigger.send(on_it);
            }
        },
    )
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});

    // Download requests: their own objects, the Velero DownloadRequests made for them, and wake-ups when the
    // backup or restore one waits for changes.
    let gc_downloads = gc_tx.clone();
    let nadr_objects = watches::origin_stream(
        Api::<NonAdminDownloadRequest>::all(client.clone()),
        watches::config(),
        wiring.nadr.objects,
        ctx.nadr.objects.synced.clone(),
        "nonadmindownloadrequests",
        move |o| {
            let _ = gc_downloads.unbounded_send(gc::gone(NADR, o));
        },
    );
    let velero_downloads = watches::store_stream(
        Api::<DownloadRequest>::namespaced(client.clone(), &vns),
        watches::config().labels(NADR.nacuuid_label),
        wiring.nadr.velero,
        ctx.nadr.velero.synced.clone(),
        "velero downloadrequests",
    );
    let (nadrs, gc_orphan_downloads) = (ctx.nadr.objects.store.clone(), gc_tx.clone());
    let nadr_controller = Controller::for_stream(nadr_objects, ctx.nadr.objects.store.clone())
        .with_config(ControllerConfig::default().concurrency(ctx.opts.concurrency))
        .watches_stream(velero_downloads, move |d: DownloadRequest| {
            let r = NADR.owner(&d.metadata)?;
            if nadrs.get(&r).is_none() {
                let _ = gc_orphan_downloads.unbounded_send(gc::Trigger::Object(gc::Candidate {
                    made: gc::Made::DownloadRequest,
                    name: d.name_any(),
                }));
            }
            Some(r)
        })
        .reconcile_on(wiring.nadr.triggers)
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(
            kind::reconcile::<NonAdminDownloadRequest>,
            kind::error_policy::<NonAdminDownloadRequest>,
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, controller = download::CONTROLLER, "controller");
            }
        });

    // Tenants' schedules and the Velero Schedules made for them.
    let gc_schedules = gc_tx.clone();
    let nas_objects = watches::origin_stream(
        Api::<NonAdminSchedule>::all(client.clone()),
        watches::config(),
        wiring.nas.objects,
        ctx.nas.objects.synced.clone(),
        "nonadminschedules",
        move |o| {
            let _ = gc_schedules.unbounded_send(gc::gone(NAS, o));
        },
    );
    let velero_schedules = watches::store_stream(
        Api::<Schedule>::namespaced(client.clone(), &vns),
        watches::config().labels(NAS.nacuuid_label),
        wiring.nas.velero,
        ctx.nas.velero.synced.clone(),
        "velero schedules",
    );
    let (nases, gc_orphan_schedules) = (ctx.nas.objects.store.clone(), gc_tx.clone());
    let nas_controller = Controller::for_stream(nas_objects, ctx.nas.objects.store.clone())
        .with_config(ControllerConfig::default().concurrency(ctx.opts.concurrency))
        .watches_stream(velero_schedules, move |v: Schedule| {
            let r = NAS.owner(&v.metadata)?;
            if nases.get(&r).is_none() {
                let _ = gc_orphan_schedules.unbounded_send(gc::Trigger::Object(gc::Candidate {
                    made: gc::Made::Schedule,
                    name: v.name_any(),
                }));
            }
            Some(r)
        })
        .reconcile_on(watches::coalesce(wiring.nas.triggers, ctx.opts.queue_update_interval))
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(
            kind::reconcile::<NonAdminSchedule>,
            kind::error_policy::<NonAdminSchedule>,
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, controller = schedule::CONTROLLER, "controller");
            }
        });

    let sync_ctx = ctx.clone();
    let sync_stop = stop.clone();
    let backup_sync = async move {
        tokio::select! {
            () = sync::run(sync_ctx, sync_rx) => {}
            () = sync_stop.cancelled() => {}
        }
    };
    drop(gc_tx);
    let gc_ctx = ctx.clone();
    let garbage_collection = async move {
        tokio::select! {
            () = gc::run(gc_ctx, gc_rx) => {}
            () = stop.cancelled() => {}
        }
    };

    tokio::join!(
        nab_controller,
        nar_controller,
        nabsl_controller,
        nadr_controller,
        nas_controller,
        du,
        pvb,
        locations,
        tenant_secrets,
        backup_sync,
        garbage_collection
    );
    tracing::info!("controllers stopped");
    Ok(())
}

/// The controller of one tenant kind: its own objects, its Velero objects (mapped back through the origin
/// annotations; `seen` hears of every one, `orphan` of those whose tenant object is not in the store, `deleted` of its own objects'
/// delete events), and the coalesced triggers of queue moves and per-volume progress. Every trigger counts in the kind's queue-depth gauge.
fn tenant_controller<K: Tenant>(
    ctx: &Arc<Ctx>,
    wiring: tenant::KindWiring<K>,
    seen: impl Fn(&K::Velero) + Send + Sync + 'static,
    orphan: impl Fn(&K::Velero, &ObjectRef<K>) + Send + Sync + 'static,
    deleted: impl Fn(&K) + Send + Sync + 'static,
) -> Controller<K>
where
    QueueIndex: watches::WatchIndex<K::Velero>,
{
    let client = ctx.client.clone();
    let config = ControllerConfig::default().concurrency(ctx.opts.concurrency);
    let (c1, c2, c3, c4) = (ctx.clone(), ctx.clone(), ctx.clone(), ctx.clone());
    let objects = watches::tenant_stream(
        Api::<K>::all(client.clone()),
        wiring.objects,
        K::state(ctx).objects_synced.clone(),
        move |o: &K| {
            K::state(&c4).depth.gone(&context::key_of(o));
            deleted(o)
        },
    )
    .map(move |r| {
        if let Ok(o) = &r {
            let me = ObjectRef::from_obj(o);
            K::state(&c1).enqueued(&me);
            // Whatever waits for this object hears of its change.
            c1.wake(&tenant::dependency(
                K::ORIGIN.kind,
                me.namespace.as_deref().unwrap_or_default(),
                &me.name,
            ));
        }
        r
    });
    let velero = watches::velero_stream(
        Api::namespaced(client, &ctx.opts.velero_namespace),
        K::state(ctx),
        wiring.velero,
        ctx.metrics.clone(),
    );
    Controller::for_stream(objects, K::state(ctx).objects.clone())
        .with_config(config)
        .watches_stream(velero, move |v: K::Velero| {
            seen(&v);
            let r = K::ORIGIN.owner::<K>(&v)?;
            orphan(&v, &r);
            K::state(&c2).enqueued(&r);
            // A Velero object's progress is its tenant object's: waiters hear of it without waiting for the mirror.
            c2.wake(&tenant::dependency(
                K::ORIGIN.kind,
                r.namespace.as_deref().unwrap_or_default(),
                &r.name,
            ));
            Some(r)
        })
        .reconcile_on(
            watches::coalesce(wiring.triggers, ctx.opts.queue_update_interval).map(move |r| {
                K::state(&c3).enqueued(&r);
                r
            }),
        )
}

/// Runs a tenant controller until `stop`, with the shared reconcile skeleton.
async fn drive<K: Tenant>(controller: Controller<K>, ctx: &Arc<Ctx>, stop: CancellationToken) {
    controller
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(kind::reconcile::<K>, kind::error_policy::<K>, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, controller = K::CONTROLLER, "controller");
            }
        })
        .await
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
