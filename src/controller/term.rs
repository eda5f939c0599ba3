//! One leadership term: the [`Shared`] core, the list of kinds (each builds its own context and wires its own
//! watches), the watch of Velero's storage locations that several kinds read, and the background jobs.

use super::context::Shared;
use super::cx::Cx;
use super::jobs::Jobs;
use super::kind::{Build, Kind};
use super::view::{Registry, View};
use super::watches;
use super::{gc, sync, Options};
use crate::api::{
    NonAdminBackup, NonAdminBackupStorageLocation, NonAdminDownloadRequest, NonAdminRestore, NonAdminSchedule,
};
use crate::metrics::Metrics;
use crate::policy::live::PolicyStore;
use crate::velero::BackupStorageLocation;
use futures::future::BoxFuture;
use futures::StreamExt;
use kube::{Client, ResourceExt};

use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A kind built for a term, waiting for the term's view to run its controller.
pub type Start = Box<dyn FnOnce(Arc<View>, Jobs, CancellationToken) -> BoxFuture<'static, ()> + Send>;

/// Kind `K`'s own state for a term and its write ends, with what it registers in `reg`.
pub fn build<K: Kind>(shared: &Shared, reg: &mut Registry) -> (K::State, <K::State as Build>::Wiring) {
    let (own, wiring) = K::State::build(shared, reg);
    K::wire(&own, reg);
    (own, wiring)
}

/// Builds kind `K`'s own state (registering in `reg` what others read of it) and hands back how to run it.
pub fn kind<K: Kind>(shared: &Arc<Shared>, reg: &mut Registry) -> Start {
    let (own, wiring) = build::<K>(shared, reg);
    let shared = shared.clone();
    Box::new(move |view, jobs, stop| {
        let ctx = Arc::new(Cx { shared, view, own });
        Box::pin(async move { K::controller(ctx, wiring, &jobs, stop).await })
    })
}

/// The tenant kinds, in the order their controllers start. Adding a kind adds one line here.
fn kinds(shared: &Arc<Shared>, reg: &mut Registry) -> Vec<Start> {
    vec![
        kind::<NonAdminBackup>(shared, reg),
        kind::<NonAdminRestore>(shared, reg),
        kind::<NonAdminBackupStorageLocation>(shared, reg),
        kind::<NonAdminDownloadRequest>(shared, reg),
        kind::<NonAdminSchedule>(shared, reg),
    ]
}

/// One leadership term: fresh watches, stores and indexes; the kinds' controllers, the Velero storage locations
/// they share, and the background jobs; until `stop`. The runtime runs one per term of leadership.
pub async fn term(
    client: Client,
    opts: Options,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    access: Arc<dyn crate::rights::Access>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let recorder = Arc::new(super::events::Recorder::new(client.clone(), "nac", &opts.identity));
    let shared = Arc::new(Shared::new(client, opts, policy, metrics, recorder, access));
    let mut reg = Registry::default();
    let (locations, locations_writer) = reg.watched::<BackupStorageLocation>();
    let kinds = kinds(&shared, &mut reg);
    let view = Arc::new(reg.into_view());
    let (jobs, gc_triggers, sync_triggers) = Jobs::new();
    let running = futures::future::join_all(
        kinds
            .into_iter()
            .map(|start| start(view.clone(), jobs.clone(), stop.clone())),
    );
    let background = Cx::new(&shared, &view, ());
    // Velero's storage locations, read by several kinds: a change wakes what waits for it, and the kinds' hooks
    // hear of it (a tenant's location mirrors its own, the backups on a location that appears or goes say so).
    let velero_namespace = shared.opts.velero_namespace.clone();
    let locations = watches::location_stream(
        shared.velero_api(),
        locations_writer,
        locations.synced.clone(),
        move |location, exists| {
            view.wake(&super::tenant::dependency(
                "BackupStorageLocation",
                &velero_namespace,
                &location.name_any(),
            ));
            view.notify(location, exists);
        },
    )
    .take_until(stop.clone().cancelled_owned())
    .for_each(|_| async {});
    let (sync_ctx, gc_ctx) = (background.clone(), background);
    let jobs_done = async {
        tokio::join!(
            async {
                tokio::select! {
                    () = sync::run(sync_ctx, sync_triggers) => {}
                    () = stop.cancelled() => {}
                }
            },
            async {
                tokio::select! {
                    () = gc::run(gc_ctx, gc_triggers) => {}
                    () = stop.cancelled() => {}
                }
            },
        )
    };
    tokio::join!(running, locations, jobs_done);
    tracing::info!("controllers stopped");
    Ok(())
}
