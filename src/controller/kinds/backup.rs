//! NonAdminBackup: its own decisions on the tenant skeleton (`tenant.rs`). Admission is the backup policy; the
//! Velero Backup is the admitted spec limited to the own namespace with nac's exclusions; the status mirrors the
//! Velero Backup, its queue position and per-volume progress; two delete paths (`spec.deleteBackup: true` deletes
//! the data through a DeleteBackupRequest, a plain delete only the Velero Backup object); a NonAdminBackup that
//! backup sync re-created adopts its existing Velero Backup.
//!
//! Happy path, two writes and no read: the Velero Backup and one status write straight to `Created` (the webhook
//! adds the finalizer at create; no Event for a routine step), asserted in `fixtures.rs`.

use crate::api::condition::*;
use crate::api::NonAdminBackupStorageLocation;
use crate::api::{
    NonAdminBackup, NonAdminBackupStatus, NonAdminSchedule, VeleroBackupRef, VeleroDeleteBackupRequestRef,
    VolumeDataProgress,
};
use crate::controller::conditions::{is_true, now_seconds, set_condition};
use crate::controller::contents::{self, Results, RESULTS_RETRY};
use crate::controller::context::{key_of, Error, Shared, Watched};
use crate::controller::counts::{data_uploads, pod_volume_backups, PhaseTally, Volumes};
use crate::controller::cx::Cx;
use crate::controller::gc::{self, MadeBy};
use crate::controller::index::snapshots::Snapshots;
use crate::controller::index::velero::StoreCopy;
use crate::controller::jobs::Jobs;
use crate::controller::kind::{self, set_status, Build, Kind};
use crate::controller::queue::reported;
use crate::controller::status::{self, Mirrors, Placed, Words};
use crate::controller::tenant::{self, Admission, Tenant};
use crate::controller::tenant::{KindState, KindWiring};
use crate::controller::view::Registry;
use crate::controller::watches;
use crate::controller::write::{create_or_get, delete_if_present, CACHE_WAIT};
use crate::naming::Tags;
use crate::naming::{
    Origin, NAB, NABSL, NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL, NAS, VELERO_BACKUP_NAME_LABEL,
    VELERO_BACKUP_UID_LABEL,
};
use crate::policy::{evaluate_backup, tenant_location, Policy};
use crate::velero::exclusions::{add_backup_exclusions, to_map};
use crate::velero::snapshot::{self, VolumeSnapshotContent, SNAPSHOTS_ANNOTATION};
use crate::velero::{
    backup_phase_unfinished, Backup, BackupSpec, BackupStatus, BackupStorageLocation, DataUpload, DeleteBackupRequest,
    DeleteBackupRequestSpec, DeleteBackupRequestStatus, PodVolumeBackup, VolumeSnapshotLocation,
};
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub const NAB_CONTROLLER: &str = "nonadminbackup";

/// What the backup controller keeps for a term: the queued tier's state (NonAdminBackups, nac's Velero Backups,
/// their queue), nac's DeleteBackupRequests, and the per-volume progress of backups.
pub struct State {
    pub queued: KindState<NonAdminBackup>,
    pub delete_requests: Watched<DeleteBackupRequest>,
    pub volumes: Volumes,
    /// The snapshots Velero's VolumeSnapshotContents held for a backup, until recorded on it.
    pub snapshots: Arc<Snapshots>,
}

impl Build for State {
    type Wiring = Wiring;

    /// The queued tier's stores; nac's DeleteBackupRequests; what the collector collects of a backup (its Velero
    /// Backup, unless its data is in storage, and its DeleteBackupRequests once Velero processed them); and its
    /// hook on Velero's storage locations (the backups on a location that appears or goes say so).
    fn build(shared: &Shared, reg: &mut Registry) -> (State, Wiring) {
        let (queued, queued_wiring) = KindState::build(shared, reg);
        let (delete_requests, delete_requests_writer) = reg.watched();
        reg.made(MadeBy::<NonAdminBackup, Backup>::with_meta(
            |b, view, ns| {
                let location = b.spec.storage_location.as_deref().unwrap_or("default");
                let gone = view
                    .get::<BackupStorageLocation>()
                    .get(&ObjectRef::new(location).within(ns))
                    .is_none();
                gc::backup_kept(b, gone)
            },
            // Its labels and annotations too, wherever the store's copy keeps them.
            Backup::whole_meta,
        ));
        reg.made(MadeBy::<NonAdminBackup, DeleteBackupRequest>::keep_when(|r, _, _| {
            gc::delete_request_kept(r)
        }));
        // A location appearing or going: the backups on it say so.
        let (velero, trigger) = (queued.velero.clone(), queued.trigger.clone());
        let known = std::sync::Mutex::new(std::collections::HashSet::<String>::new());
        reg.on::<BackupStorageLocation>(move |location, exists| {
            let name = location.name_any();
            let mut known = known.lock().expect("known locations lock");
            let changed = if exists {
                known.insert(name.clone())
            } else {
                known.remove(&name)
            };
            if changed {
                let on_it = velero
                    .state()
                    .iter()
                    .filter(|b: &&Arc<Backup>| b.spec.storage_location.as_deref() == Some(name.as_str()))
                    .map(|b| b.name_any())
                    .collect();
                trigger.send(on_it);
            }
        });
        let state = State {
            queued,
            delete_requests,
            volumes: Volumes::default(),
            snapshots: Arc::default(),
        };
        let wiring = Wiring {
            queued: queued_wiring,
            delete_requests: delete_requests_writer,
        };
        (state, wiring)
    }
}

/// The write ends of a [`State`], for its watches.
pub struct Wiring {
    pub queued: KindWiring<NonAdminBackup>,
    pub delete_requests: Writer<DeleteBackupRequest>,
}

type Ctx = Cx<State>;

crate::has_status!(NonAdminBackup => NonAdminBackupStatus, "NonAdminBackup/status";);

/// A NonAdminBackup's status carries a whole copy of its Velero Backup's spec and status, which the Velero
/// Backup's own store holds too: the store's copy of the NonAdminBackup keeps only their fingerprint.
impl crate::controller::write::CompactStatus for NonAdminBackupStatus {
    fn make_compact(&mut self) {
        if let Some(r) = self.velero_backup.as_mut() {
            r.make_compact();
        }
    }
    fn is_compact(&self) -> bool {
        self.velero_backup.as_ref().is_some_and(|r| r.compact.is_some())
    }
    fn is_settled(&self) -> bool {
        self.is_compact() && self.phase == Some(crate::api::NonAdminPhase::Created)
    }
    fn left_out_as_in(&self, other: &Self) -> bool {
        match (&self.velero_backup, &other.velero_backup) {
            (Some(mine), Some(theirs)) => theirs.compact.is_some() && mine == theirs,
            (None, _) => true,
            (Some(_), None) => false,
        }
    }
    fn identity(&self) -> Option<&str> {
        self.velero_backup
            .as_ref()?
            .nacuuid
            .as_deref()
            .filter(|u| !u.is_empty())
    }
}

/// Deleting message of the `spec.deleteBackup: true` path.
pub const BACKUP_DELETE_REQUESTED_MESSAGE: &str = "backup accepted for deletion";
/// Deleting message of a plain `kubectl delete` of a NonAdminBackup.
pub const BACKUP_DIRECT_DELETE_MESSAGE: &str = "permanent backup deletion requires setting spec.deleteBackup to true";

/// A Velero Backup as the NonAdminBackup status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackupView {
    pub placed: Placed,
    /// The copy of the Velero Backup the status carries (compact, of a compact store copy).
    pub mirrored: VeleroBackupRef,
    pub data_uploads: PhaseTally,
    pub pod_volume_backups: PhaseTally,
    /// The uploader of its PodVolumeBackups (`status.uploaderType`).
    pub uploader_type: Option<String>,
    /// Bytes of volume data copied of the total (`status.volumeDataProgress`).
    pub progress: Option<VolumeDataProgress>,
    /// The backup's storage location when it no longer exists (a tenant deleted theirs, an admin removed one).
    pub location_gone: Option<String>,
    /// What reading Velero's results gave now (the `VeleroResults` condition).
    pub results: Results,
    /// Snapshots of the backup's VolumeSnapshotContents whose record on the Velero Backup failed (retried).
    pub snapshots_unrecorded: bool,
}

impl AsRef<Placed> for BackupView {
    fn as_ref(&self) -> &Placed {
        &self.placed
    }
}

/// A DeleteBackupRequest as the NonAdminBackup status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteRequestView {
    pub nacuuid: String,
    pub name: String,
    pub namespace: String,
    pub status: Option<DeleteBackupRequestStatus>,
}

crate::tenant_types! {
    velero: Backup, spec: BackupSpec, velero_status: BackupStatus, kind: "Backup",
    unfinished: backup_phase_unfinished,
    failure: |v: &BackupStatus| v.failure_reason.clone().or_else(|| v.validation_errors.as_ref().map(|e| e.join("; "))),
    status: NonAdminBackupStatus, reference: velero_backup, VeleroBackupRef,
}

/// The store keeps a Velero Backup of nac's without what the reconcilers read only to mirror it into the
/// NonAdminBackup's status: the resource lists (nac's and the requester's exclusions: ~70 kinds for an admin, most of a
/// Backup's memory), selectors, hooks, uploader settings, fields of newer Velero versions and the untyped parts
/// of the status (progress). What stays is what stores are searched and decided by: identity, namespaces,
/// storage location, TTL, phases and times. The fingerprint of the status mirror it left out ([`mirrored`])
/// tells whether a NonAdminBackup's copy is current without a request; a write reads the Backup first.
impl StoreCopy for Backup {
    fn make_compact(&mut self) {
        if self.compact.is_some() {
            return;
        }
        self.compact = Some(VeleroBackupRef::fingerprint_of(
            Some(&self.spec),
            reported_status(self).as_ref(),
        ));
        // Unique right after a watch event: stripped in place, then shared with the equal compact specs.
        let s = self.spec_mut();
        s.included_resources = None;
        s.excluded_resources = None;
        s.included_cluster_scoped_resources = None;
        s.excluded_cluster_scoped_resources = None;
        s.included_namespace_scoped_resources = None;
        s.excluded_namespace_scoped_resources = None;
        s.label_selector = None;
        s.or_label_selectors = None;
        s.hooks = None;
        s.ordered_resources = None;
        s.resource_policy = None;
        s.uploader_config = None;
        s.metadata = None;
        s.extra = Default::default();
        self.spec = COMPACT_SPECS.share(std::mem::take(&mut self.spec));
        self.compact_tags();
        if let Some(st) = self.status.as_mut() {
            st.extra = Default::default();
        }
    }

    fn is_compact(&self) -> bool {
        self.compact.is_some()
    }
}

/// The compact specs of the Velero Backups in the store: those of one namespace and location are alike.
static COMPACT_SPECS: std::sync::LazyLock<crate::controller::interner::Interner<BackupSpec>> =
    std::sync::LazyLock::new(Default::default);

/// The copy of a Velero Backup a NonAdminBackup's status carries (`status.veleroBackup`): its spec and status,
/// Velero's own queue position reported as nac reports positions. Of a compact store copy, a compact reference
/// holding the whole copy's fingerprint.
pub fn mirrored(vb: &Backup, nacuuid: Option<&str>) -> VeleroBackupRef {
    VeleroBackupRef {
        nacuuid: nacuuid.map(str::to_string),
        name: vb.metadata.name.clone(),
        namespace: vb.metadata.namespace.clone(),
        spec: vb.compact.is_none().then(|| Box::new((*vb.spec).clone())),
        status: reported_status(vb).map(Box::new),
        compact: vb.compact,
    }
}

/// Velero's own queuePosition changes for every queued backup at each advance: mirrored as nac reports positions.
fn reported_status(vb: &Backup) -> Option<BackupStatus> {
    vb.status.clone().map(|mut s| {
        s.queue_position = s.queue_position.map(reported);
        s
    })
}

impl Mirrors for NonAdminBackup {
    const WORDS: Words = crate::api::condition::BACKUP_WORDS;
    type View = BackupView;

    /// A results read that got no answer is tried again (`results_condition` gives up in time).
    fn retry_after(v: &BackupView) -> Option<std::time::Duration> {
        (matches!(v.results, Results::Pending) || v.snapshots_unrecorded).then_some(RESULTS_RETRY)
    }

    fn mirror(s: &mut NonAdminBackupStatus, vb: &BackupView) {
        let p = &vb.placed;
        let copy = VeleroBackupRef {
            nacuuid: Some(p.nacuuid.clone()),
            name: Some(p.name.clone()),
            namespace: Some(p.namespace.clone()),
            ..vb.mirrored.clone()
        };
        // A current copy stays as it is: a whole one is not replaced by the compact copy of the same (a queue move
        // then writes the status without reading the Velero Backup).
        if s.velero_backup.as_ref() != Some(&copy) {
            s.velero_backup = Some(copy);
        }
        s.data_mover_data_uploads = Some(data_uploads(&vb.data_uploads));
        s.file_system_pod_volume_backups = Some(pod_volume_backups(&vb.pod_volume_backups));
        if vb.uploader_type.is_some() {
            // Kept once known: the PodVolumeBackups may go before the backup does.
            s.uploader_type = vb.uploader_type.clone();
        }
        if vb.progress.is_some() {
            // Kept once known, as the uploader.
            s.volume_data_progress = vb.progress.clone();
        }
        // Only while the location is gone: a backup on an existing location carries no extra condition.
        match &vb.location_gone {
            Some(l) => {
                set_condition(
                    &mut s.conditions,
                    LOCATION_AVAILABLE,
                    false,
                    LOCATION_NOT_FOUND,
                    &format!(
                        "the backup storage location {l} of this backup no longer exists: the backup's data stays in \
                         object storage, but it cannot be restored, or deleted with its data, until the location is back"
                    ),
                    now_seconds(),
                );
            }
            None => s.conditions.retain(|c| c.type_ != LOCATION_AVAILABLE),
        }
        vb.results.mirror(&mut s.conditions);
    }
}

impl Tenant for NonAdminBackup {
    const COUNTED: crate::policy::Counted = crate::policy::Counted::Backup;
    type Velero = Backup;

    fn state(ctx: &Ctx) -> &KindState<Self> {
        &ctx.own.queued
    }

    /// nac's Backups, and the runs of the Velero Schedules nac made (backup sync gives each its NonAdminBackup).
    fn keeps<T: crate::naming::Tags + ?Sized>(meta: &T) -> bool {
        NAB.is_tagged(meta) || crate::naming::NAS.is_tagged(meta)
    }

    fn leave_out_spec(&mut self) {
        self.spec.leave_out_spec();
    }

    /// A backup sync made is a copy of what Velero ran, not a request: not judged.
    fn refused_now(nab: &Self, policy: &Policy) -> Option<String> {
        if nab.labels().contains_key(NAB_SYNCED_FROM_NACUUID_LABEL) {
            return None;
        }
        let ns = nab.namespace().unwrap_or_default();
        let outcome = evaluate_backup(&to_map(&nab.spec.backup_spec), policy, &ns);
        (!outcome.allowed()).then(|| refused_now_message(&outcome.message()))
    }

    fn spec_left_out(&self) -> bool {
        self.spec.spec_left_out()
    }

    fn spec_unset(&self) -> Option<String> {
        self.spec
            .unset
            .then(|| format!("{} spec.backupSpec is not set", NAB.kind))
    }

    async fn early(api: &Api<Self>, nab: &Self, ctx: &Ctx) -> Result<Option<Action>, Error> {
        if nab.spec.delete_backup {
            return request_deletion(api, nab, ctx).await.map(Some);
        }
        expired_run(api, nab, ctx).await
    }

    async fn adopt(api: &Api<Self>, nab: &Self, ctx: &Ctx) -> Result<Option<Action>, Error> {
        if nab.labels().contains_key(NAB_SYNCED_FROM_NACUUID_LABEL) {
            return adopt_synced(api, nab, ctx).await.map(Some);
        }
        Ok(None)
    }

    async fn admit(nab: &Self, policy: &Policy, ctx: &Ctx) -> Result<Admission<BackupSpec>, Error> {
        let mut spec = match velero_backup_spec(nab, policy) {
            Ok(s) => s,
            Err(e) => return Ok(Admission::from_spec::<Self>(Err(e))),
        };
        if let Err(message) = recheck_rights(&nab.metadata, NAB.kind, "spec.backupSpec", &mut spec, policy, ctx).await?
        {
            return Ok(Admission::from_spec::<Self>(Err(message)));
        }
        if let Some(name) = tenant_location(spec.storage_location.as_deref(), policy) {
            let locations = ctx.view.get::<NonAdminBackupStorageLocation>();
            ctx.ready(&locations.synced, "NonAdminBackupStorageLocations").await?;
            match resolve_location(ctx, &nab.namespace().unwrap_or_default(), name) {
                Ok(velero_location) => spec.storage_location = Some(velero_location),
                Err(message) => return Ok(Admission::from_spec::<Self>(Err(message))),
            }
        }
        Ok(Admission::Admit(spec))
    }

    fn build(nab: &Self, nacuuid: &str, velero_namespace: &str, spec: BackupSpec) -> Backup {
        velero_backup(nab, nacuuid, velero_namespace, spec)
    }

    async fn view(ctx: &Ctx, nab: &Self, vb: &Backup, nacuuid: &str) -> BackupView {
        ctx.own.volumes.ready(ctx.opts.store_ready_timeout).await;
        // Whether the backup's location still exists is only known once the locations are listed.
        let locations = ctx.view.get::<BackupStorageLocation>();
        let _ = ctx.ready(&locations.synced, "Velero BackupStorageLocations").await;
        let name = vb.name_any();
        let (data_uploads, pod_volume_backups) = ctx.own.volumes.tallies(&name);
        let uploader_type = ctx.own.volumes.uploader(&name);
        let progress = ctx.own.volumes.progress(&name);
        let results = results_of(ctx, nab, vb).await;
        let snapshots_unrecorded = !record_snapshots(ctx, vb).await;
        BackupView {
            results,
            snapshots_unrecorded,
            placed: ctx.own.queued.placed(&ctx.opts.velero_namespace, vb, nacuuid),
            mirrored: mirrored(vb, Some(nacuuid)),
            data_uploads,
            pod_volume_backups,
            uploader_type,
            progress,
            location_gone: vb
                .spec
                .storage_location
                .clone()
                .filter(|l| locations.synced.is_synced() && locations.get(&ctx.velero_ref(l)).is_none()),
        }
    }
}

/// Records on a finished Velero Backup of a tenant's location the snapshots its VolumeSnapshotContents held
/// (`crate::velero::snapshot`: what Velero may delete for it, whatever the tarball in the tenant's bucket says):
/// those bound to VolumeSnapshots of the location's own namespace, none other. One write per such backup, made
/// against the version read (a concurrent change is read again), none for other backups. False when the write
/// failed (the reconcile tries again).
async fn record_snapshots(ctx: &Ctx, vb: &Backup) -> bool {
    let name = vb.name_any();
    let label = crate::naming::velero_label_value(&name).into_owned();
    if !ctx.own.snapshots.pending(&label)
        || backup_phase_unfinished(vb.status.as_ref().and_then(|s| s.phase.as_deref()))
    {
        return true;
    }
    let location = vb.spec.storage_location.as_deref().unwrap_or_default();
    let Some((namespace, _)) =
        crate::controller::sync::tenant_location_of(&ctx.view, &ctx.opts.velero_namespace, location)
    else {
        // On an admin's location the tarball is the admin's: nothing to record.
        ctx.own.snapshots.forget(&label);
        return true;
    };
    let (seen, others) = ctx.own.snapshots.of(&label, &namespace);
    if !others.is_empty() {
        tracing::warn!(backup = %name, %namespace, ?others, "contents labelled with the backup but bound outside its namespace: not recorded");
    }
    let mut record = vb
        .annotation(SNAPSHOTS_ANNOTATION)
        .and_then(|a| snapshot::parse(a).ok())
        .unwrap_or_default();
    if seen.is_subset(&record) {
        ctx.own.snapshots.forget(&label);
        return true;
    }
    record.extend(seen.iter().cloned());
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": vb.metadata.resource_version,
        "annotations": {SNAPSHOTS_ANNOTATION: snapshot::render(&record)},
    }});
    ctx.metrics.write("Backup");
    match ctx
        .velero_api::<Backup>()
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            ctx.own.snapshots.recorded(&label, &seen);
            if others.is_empty() {
                ctx.own.snapshots.forget(&label);
            }
            tracing::info!(backup = %name, snapshots = record.len(), "snapshots of the backup recorded");
            true
        }
        Err(e) => {
            tracing::warn!(backup = %name, error = %e, "recording the backup's snapshots failed; retrying");
            false
        }
    }
}

/// Velero's VolumeSnapshotContents labelled with a backup's name: their snapshots go into the kind's
/// [`Snapshots`], and the backup's NonAdminBackup is woken to record them. Where the cluster serves no snapshot
/// API the watch keeps retrying, quietly.
fn snapshot_stream(ctx: &Ctx) -> impl futures::Stream<Item = ()> + Send {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let api: Api<VolumeSnapshotContent> = Api::all(ctx.client.clone());
    let (snapshots, trigger) = (ctx.own.snapshots.clone(), ctx.own.queued.trigger.clone());
    let (velero, namespace) = (ctx.own.queued.velero.clone(), ctx.opts.velero_namespace.clone());
    // A content of a backup nac did not make (an admin's, a synced one) is not kept.
    let ours = move |label: &String| {
        velero.get(&ObjectRef::new(label).within(&namespace)).is_some()
            || (label.len() == crate::naming::MAX_NAME_LEN
                && velero
                    .find(|b| crate::naming::velero_label_value(&b.name_any()) == label.as_str())
                    .is_some())
    };
    kube::runtime::watcher(api, watches::config().labels(VELERO_BACKUP_NAME_LABEL))
        .default_backoff()
        .filter_map(move |r| {
            match r {
                Ok(ev) => {
                    let (ours, theirs): (Vec<String>, Vec<String>) = snapshots.apply(&ev).into_iter().partition(&ours);
                    theirs.iter().for_each(|b| snapshots.forget(b));
                    trigger.send(ours)
                }
                Err(kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                    tracing::debug!("no VolumeSnapshotContents served; nothing to record")
                }
                Err(e) => {
                    tracing::warn!(error = %e, watch = "VolumeSnapshotContents", "watch error; retrying with backoff")
                }
            }
            std::future::ready(None::<()>)
        })
}

/// Velero's first messages of a backup it finished with errors or warnings, read once.
async fn results_of(ctx: &Ctx, nab: &NonAdminBackup, vb: &Backup) -> Results {
    let Some(s) = nab.status.as_ref() else {
        return Results::Nothing;
    };
    let run = s.velero_backup.as_ref().and_then(|v| v.status.as_deref());
    contents::results_of(ctx, &ctx.view, nab, (&s.conditions, run), &vb.name_any(), Some(vb)).await
}

impl Kind for NonAdminBackup {
    const ORIGIN: Origin = NAB;
    const CONTROLLER: &'static str = NAB_CONTROLLER;
    type State = State;
    crate::queued_kind!();

    /// The backup controller for a term: NonAdminBackups, nac's Velero Backups (queue moves, per-volume progress) and
    /// DeleteBackupRequests, and the runs of nac's Velero Schedules. A Velero Backup or DeleteBackupRequest whose
    /// NonAdminBackup is not in the store goes to the collector (and a Backup to backup sync, which may give it its
    /// NonAdminBackup back).
    async fn controller(ctx: Arc<Ctx>, wiring: Wiring, jobs: &Jobs, stop: CancellationToken) {
        let (nabs, j) = (ctx.own.queued.objects.clone(), jobs.clone());
        let orphans = move |b: &Backup, r: &ObjectRef<NonAdminBackup>| {
            if nabs.get(r).is_none() {
                j.sync(b.name_any());
                j.orphan::<Backup>(b.name_any());
            }
        };
        // A NonAdminBackup that went: the collector looks at its Velero objects, and backup sync at its Velero Backup
        // (one with data in storage, which the collector keeps, gets its NonAdminBackup back where the policy syncs
        // its location, without waiting for the periodic resync).
        let j = jobs.clone();
        let gone = move |o: &NonAdminBackup| {
            j.gone(NonAdminBackup::ORIGIN, o);
            if let Some(b) = o.status.as_ref().and_then(|s| s.velero_backup.as_ref()?.name.clone()) {
                j.sync(b);
            }
        };
        // Every Velero Backup's change goes to the hooks (a schedule hears of its runs); a run of nac's Velero
        // Schedules that has no NonAdminBackup yet goes to backup sync.
        let (view, j) = (ctx.view.clone(), jobs.clone());
        let runs = move |b: &Backup| {
            view.notify(b, true);
            if NAS.owner::<NonAdminSchedule>(b).is_some() && !NAB.is_tagged(b) {
                j.sync(b.name_any());
            }
        };
        // A DeleteBackupRequest is kept by the collector until Velero processed it.
        let dbrs = watches::delete_request_stream(
            ctx.velero_api(),
            wiring.delete_requests,
            ctx.own.delete_requests.synced.clone(),
            ctx.metrics.clone(),
        );
        let dbr_owner = kind::owner_or_orphan::<_, DeleteBackupRequest>(ctx.own.queued.objects.clone(), jobs);
        let controller = tenant::controller(&ctx, wiring.queued, runs, orphans, gone).watches_stream(dbrs, dbr_owner);
        // Per-volume progress of backups, counted for the NonAdminBackup status.
        tokio::join!(
            tenant::run_counting::<_, DataUpload, PodVolumeBackup>(controller, &ctx, &ctx.own.volumes, stop.clone()),
            crate::controller::background::standstill::watch(&ctx.shared, &ctx.own.queued, stop.clone()),
            crate::controller::background::objective::watch(&ctx.shared, stop.clone()),
            futures::StreamExt::for_each(
                futures::StreamExt::take_until(snapshot_stream(&ctx), stop.cancelled_owned()),
                |_| async {}
            ),
        );
    }

    async fn cleanup(api: &Api<Self>, nab: Arc<Self>, ctx: &Ctx) -> Result<Action, Error> {
        ctx.ready(&ctx.own.queued.synced, "Velero Backups").await?;
        ctx.ready(&ctx.own.delete_requests.synced, "Velero DeleteBackupRequests")
            .await?;
        if nab.spec.delete_backup {
            delete_backup_data(api, &nab, ctx).await
        } else {
            delete_backup_object(api, &nab, ctx).await
        }
    }
}

/// Condition on a NonAdminBackup whose storage location is gone (nac's own; OADP deletes such backups instead).
pub const LOCATION_AVAILABLE: &str = "BackupStorageLocationAvailable";
pub const LOCATION_NOT_FOUND: &str = "BackupStorageLocationNotFound";

/// The Velero BSL behind the NonAdminBackupStorageLocation `name` of `namespace`, if a backup may use it now:
/// created, approved, and Available in Velero. `Err` is OADP's message for why not.
pub fn resolve_location<S>(ctx: &Cx<S>, namespace: &str, name: &str) -> Result<String, String> {
    use crate::controller::location::words::{APPROVED, BSL_SYNCED};
    let Some(nabsl) = ctx
        .view
        .get::<NonAdminBackupStorageLocation>()
        .get(&ObjectRef::new(name).within(namespace))
    else {
        return Err(format!(
            "NonAdminBackupStorageLocation not found in the namespace: nonadminbackupstoragelocations.oadp.openshift.io {name:?} not found"
        ));
    };
    let status = nabsl.status.clone().unwrap_or_default();
    let usable = status.phase == Some(crate::api::NonAdminPhase::Created)
        && is_true(&status.conditions, APPROVED)
        && is_true(&status.conditions, BSL_SYNCED)
        && nabsl.meta().deletion_timestamp.is_none();
    if !usable {
        return Err(
            "NonAdminBackupStorageLocation is not in created state and can not be used for the NonAdminBackup".into(),
        );
    }
    let Some(nacuuid) = status
        .velero_backup_storage_location
        .and_then(|r| r.nacuuid)
        .filter(|u| !u.is_empty())
    else {
        return Err("unable to get VeleroBackupStorageLocation UUID from NonAdminBackupStorageLocation Status".into());
    };
    let bsl = ctx
        .view
        .get::<BackupStorageLocation>()
        .get(&ctx.velero_ref(&nacuuid))
        .filter(|b| NABSL.owns(&b.metadata, namespace, name));
    let Some(bsl) = bsl else {
        return Err(format!(
            "VeleroBackupStorageLocation with NACUUID {nacuuid} not found in the OADP namespace"
        ));
    };
    if bsl.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Available") {
        return Err(format!(
            "VeleroBackupStorageLocation with NACUUID {nacuuid} is not in available state and can not be used for the NonAdminBackup"
        ));
    }
    Ok(nacuuid)
}

/// The webhook checked what the requester could read at creation and recorded who they are and the mode; nac asks
/// again before the Velero Backup is made (answers are shared with the webhook's cache, so right after admission
/// this costs no request) and leaves out the kinds the requester may not list now (or refuses the backup), under
/// the stricter of the recorded and the current mode. A record written by hand, with nac's mutating webhook
/// bypassed, cannot widen a backup.
pub async fn recheck_rights(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
    path: &str,
    spec: &mut BackupSpec,
    policy: &Policy,
    ctx: &Shared,
) -> Result<Result<(), String>, Error> {
    use crate::rights::{backup_kinds, unreadable, BackupRights, Requester, RightsMode};
    let record = BackupRights::of(meta.annotations.as_ref()).ok().flatten();
    // Records written before the kinds were decided here listed them: finding more is then worth a warning.
    let listed = record.as_ref().is_some_and(|r| !r.excluded.is_empty());
    let recorded = record.map(|r| r.mode);
    let strictness = |m: RightsMode| match m {
        RightsMode::Off => 0,
        RightsMode::Exclude => 1,
        RightsMode::Deny => 2,
    };
    let mode = recorded
        .into_iter()
        .chain([policy.rights.backup])
        .max_by_key(|m| strictness(*m))
        .unwrap_or_default();
    if mode == RightsMode::Off {
        return Ok(Ok(()));
    }
    let who: Option<Requester> = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::rights::REQUESTER_ANNOTATION))
        .and_then(|v| serde_json::from_str(v).ok());
    let key = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    let Some(who) = who else {
        return Ok(Err(crate::rights::no_requester(kind, "what it may read", None)));
    };
    let ns = meta.namespace.clone().unwrap_or_default();
    let mut map = to_map(spec);
    let kinds = ctx.access.kinds().await.map_err(Error::NotReady)?;
    let included = backup_kinds(&map, &kinds);
    let more = unreadable(ctx.access.as_ref(), &who, &ns, &included)
        .await
        .map_err(Error::NotReady)?;
    // What Velero would do beyond reading (hooks, volume data), asked of the kinds that are left.
    let readable: Vec<_> = included
        .iter()
        .copied()
        .filter(|k| !more.contains(&k.filter_name()))
        .collect();
    let lacks = crate::rights::features::backup_lacks(ctx.access.as_ref(), &who, &ns, &map, &readable)
        .await
        .map_err(Error::NotReady)?;
    if more.is_empty() && lacks.is_empty() {
        return Ok(Ok(()));
    }
    if listed && !more.is_empty() {
        tracing::warn!(object = %key, kinds = ?more, "the requester may not list kinds the backup's record did not leave out");
    } else {
        tracing::debug!(object = %key, kinds = more.len(), features = lacks.len(), "what the requester may not do left out");
    }
    if mode == RightsMode::Deny {
        let mut why: Vec<String> = Vec::new();
        if !more.is_empty() {
            why.push(format!(
                "{} may not list {} in namespace {ns}",
                who.username,
                more.join(", ")
            ));
        }
        why.extend(
            lacks
                .iter()
                .map(|l| format!("{path}.{} asks for {}", l.field, l.reason(&who.username, &ns))),
        );
        return Ok(Err(format!(
            "{kind} refused: {} (policy rights.backup: deny)",
            why.join("; ")
        )));
    }
    crate::rights::features::apply_to_backup(&mut map, &lacks);
    if let Err(e) = crate::rights::exclude_checked(&mut map, &more, (kind, path), &who.username, &ns) {
        return Ok(Err(e));
    }
    *spec = serde_json::from_value(Value::Object(map))
        .map_err(|e| Error::Inconsistent(format!("Velero BackupSpec after exclusions: {e}")))?;
    Ok(Ok(()))
}

/// The PolicyCompliant=False message of a NonAdminBackup whose spec the current policy refuses.
pub fn refused_now_message(refusal: &str) -> String {
    format!(
        "the current policy would refuse this NonAdminBackup if it were created now: {refusal}. Its Velero Backup \
         is kept and stays restorable"
    )
}

/// The Velero BackupSpec for a NonAdminBackup: the policy and tenant rules applied, then the exclusions. `Err`
/// carries the message for an invalid spec.
pub fn velero_backup_spec(nab: &NonAdminBackup, policy: &Policy) -> Result<BackupSpec, String> {
    let ns = nab.namespace().unwrap_or_default();
    let outcome = evaluate_backup(&to_map(&nab.spec.backup_spec), policy, &ns);
    if !outcome.allowed() {
        return Err(outcome.message());
    }
    recorded_spec(outcome.spec, &nab.metadata, NAB.kind, "spec.backupSpec", policy)
}

/// An admitted BackupSpec with the rights record applied (the kinds listed in records written before 2026-11-26;
/// [`recheck_rights`] decides the rest) and nac's exclusions. None recorded means the object did not pass nac's
/// webhook, and then only a policy that does not check rights lets it through.
pub fn recorded_spec(
    mut spec: serde_json::Map<String, Value>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
    path: &str,
    policy: &Policy,
) -> Result<BackupSpec, String> {
    match crate::rights::BackupRights::of(meta.annotations.as_ref())? {
        Some(r) => crate::rights::exclude(&mut spec, &r.excluded),
        None if policy.rights.backup != crate::rights::RightsMode::Off => {
            return Err(format!(
                "{kind} has no record of what its requester may read (annotation {}): it was not created \
                 through nac's admission webhook; create it again",
                crate::rights::BACKUP_RIGHTS_ANNOTATION
            ))
        }
        None => {}
    }
    add_backup_exclusions(&mut spec);
    // A webhook bypassed, or an object admitted before nac checked this: Velero must never get a spec it fails
    // at validation (its queue can stall for every tenant, see `velero::validation`).
    crate::velero::validation::check(kind, path, &spec)?;
    serde_json::from_value(Value::Object(spec))
        .map_err(|e| format!("{kind} {path} is not a valid Velero BackupSpec: {e}"))
}

/// The Velero Backup nac creates for a NonAdminBackup, named by its nacuuid.
pub fn velero_backup(nab: &NonAdminBackup, nacuuid: &str, velero_namespace: &str, spec: BackupSpec) -> Backup {
    kind::made_for(nab, nacuuid, velero_namespace, Backup::new(nacuuid, spec))
}

/// Validates a NonAdminBackup against the policy and builds its Velero Backup in one go.
pub fn velero_backup_for(
    nab: &NonAdminBackup,
    nacuuid: &str,
    velero_namespace: &str,
    policy: &Policy,
) -> Result<Backup, String> {
    velero_backup_spec(nab, policy).map(|spec| velero_backup(nab, nacuuid, velero_namespace, spec))
}

/// The DeleteBackupRequest asking Velero to delete `backup` and its data, named by the nacuuid so it is created
/// once.
pub fn delete_backup_request(nab: &NonAdminBackup, nacuuid: &str, backup: &Backup) -> DeleteBackupRequest {
    let backup_name = backup.name_any();
    let uid = backup.uid().unwrap_or_default();
    let mut r = DeleteBackupRequest::new(
        nacuuid,
        DeleteBackupRequestSpec {
            backup_name: backup_name.clone(),
        },
    );
    r.metadata = NAB.stamp(
        nacuuid,
        &backup.namespace().unwrap_or_default(),
        nacuuid,
        &nab.namespace().unwrap_or_default(),
        &nab.name_any(),
        &[
            // A scheduled run's name is longer than a label value: Velero's short form.
            (
                VELERO_BACKUP_NAME_LABEL,
                &crate::naming::velero_label_value(&backup_name),
            ),
            (VELERO_BACKUP_UID_LABEL, &uid),
        ],
    );
    r
}

/// Being deleted (either path); mirrors the DeleteBackupRequest when there is one.
pub fn deleting(
    old: Option<&NonAdminBackupStatus>,
    message: &str,
    request: Option<&DeleteRequestView>,
    now: k8s_openapi::jiff::Timestamp,
) -> NonAdminBackupStatus {
    let mut s = status::deleting(old, message, now);
    if let Some(r) = request {
        s.velero_delete_backup_request = Some(VeleroDeleteBackupRequestRef {
            nacuuid: Some(r.nacuuid.clone()),
            name: Some(r.name.clone()),
            namespace: Some(r.namespace.clone()),
            status: r.status.clone().map(Box::new),
        });
    }
    s
}

/// The Deleting message for the `deleteBackup` path, with Velero's errors once it reports some.
pub fn delete_request_message(request: Option<&DeleteRequestView>) -> String {
    let errors = request
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.errors.as_ref())
        .filter(|e| !e.is_empty());
    match errors {
        Some(e) => format!(
            "{BACKUP_DELETE_REQUESTED_MESSAGE}; Velero reported errors deleting it: {}",
            e.join("; ")
        ),
        None => BACKUP_DELETE_REQUESTED_MESSAGE.to_string(),
    }
}

/// A NonAdminBackup that backup sync re-created for a backup found in object storage: its Velero Backup exists
/// already and is adopted as it is (the policy governs new backups; nothing is created). Only a Velero Backup
/// whose nacuuid is the one the label names and whose origin is this very object is adopted: a sync label that
/// got past the webhook adopts nothing of anyone else's and creates nothing.
async fn adopt_synced(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let synced = nab
        .labels()
        .get(NAB_SYNCED_FROM_NACUUID_LABEL)
        .cloned()
        .unwrap_or_default();
    let u = kind::nacuuid(nab).filter(|u| *u == synced);
    // Named by the nacuuid, or (a scheduled run, which Velero names) carrying it: either way made for this object.
    let vb = u.as_ref().and_then(|u| {
        ctx.own
            .queued
            .velero
            .get(&ctx.velero_ref(&tenant::velero_name(nab, u)))
            .filter(|vb| tenant::check_owner(&**vb, nab).is_ok())
            .or_else(|| {
                ctx.own.queued.velero.find(|b| {
                    let ns = nab.namespace().unwrap_or_default();
                    // A run of this NonAdminBackup's schedule, and not on another tenant's location: a copy
                    // planted in some bucket with this identity is not adopted.
                    NAB.nacuuid(b) == Some(u.as_str())
                        && tenant::check_owner(b, nab).is_ok()
                        && crate::controller::sync::run_of(b)
                            .is_some_and(|r| r.namespace == ns && r.name == nab.name_any())
                        && b.spec
                            .storage_location
                            .as_deref()
                            .and_then(|l| {
                                crate::controller::sync::tenant_location_of(&ctx.view, &ctx.opts.velero_namespace, l)
                            })
                            .is_none_or(|(owner, _)| owner == ns)
                })
            })
    });
    let young = nab
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|t| now_seconds().duration_since(t.0) < k8s_openapi::jiff::SignedDuration::from_secs(30));
    if vb.is_none() && young && u.is_some() {
        // Backup sync stamps a run's identity just before it creates the NonAdminBackup: the store may not show it
        // yet (its watch event wakes this object too).
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    let Some(vb) = vb else {
        let message = format!(
            "NonAdminBackup is labelled {NAB_SYNCED_FROM_NACUUID_LABEL}={synced}, but no Velero Backup of that \
             nacuuid made for {} exists; backup sync re-creates NonAdminBackups only for backups it found",
            key_of(nab)
        );
        return tenant::reject(api, nab, ctx, INVALID_BACKUP_SPEC, &message).await;
    };
    tracing::info!(nab = %key_of(nab), backup = %vb.name_any(), "adopting the synced Velero Backup");
    ctx.own.queued.note(&vb);
    tenant::mirror(api, nab, &vb, &synced, ctx).await
}

/// A scheduled run's NonAdminBackup goes with its backup when Velero expires it (TTL): its Velero Backup is gone
/// and the expiration recorded in its status has passed. Other NonAdminBackups stay and say their backup vanished.
async fn expired_run(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Option<Action>, Error> {
    let ns = nab.namespace().unwrap_or_default();
    let recorded = nab.status.as_ref().and_then(|s| s.velero_backup.as_ref());
    let Some(u) = recorded
        .and_then(|r| r.name.clone())
        .filter(|n| crate::naming::is_run_backup_of(n, &ns, &nab.name_any()))
    else {
        return Ok(None);
    };
    let expiration = recorded
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.expiration.as_deref())
        .and_then(|e| e.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let Some(expiration) = expiration.filter(|e| *e <= now_seconds()) else {
        return Ok(None);
    };
    if nab.metadata.deletion_timestamp.is_some() || ctx.get_velero(&ctx.own.queued.velero, &u).await?.is_some() {
        return Ok(None);
    }
    ctx.publish(
        nab,
        vec![crate::controller::events::Note {
            warning: false,
            reason: "BackupExpired".into(),
            message: format!(
                "Velero expired the scheduled backup {u} at {expiration}; this NonAdminBackup goes with it"
            ),
        }],
    );
    delete_if_present(api, &nab.name_any(), &ctx.metrics, "NonAdminBackup").await?;
    tracing::info!(nab = %key_of(nab), backup = %u, "scheduled backup expired; NonAdminBackup deleted");
    Ok(Some(Action::await_change()))
}

/// `spec.deleteBackup: true` on a live object: phase Deleting, then delete the object; the finalizer cleanup does
/// the rest (DeleteBackupRequest, wait for Velero).
async fn request_deletion(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let now = now_seconds();
    set_status(api, nab, ctx, |s| {
        deleting(s, BACKUP_DELETE_REQUESTED_MESSAGE, None, now)
    })
    .await?;
    if nab.metadata.deletion_timestamp.is_none() {
        ctx.metrics.write("NonAdminBackup");
        match api
            .delete(&nab.name_any(), &kube::api::DeleteParams::background())
            .await
        {
            // The object as deleted is nac's last write: a reconcile queued meanwhile reads it again (and sees the
            // deletion) instead of deleting it a second time from a cache behind it.
            Ok(deleted) => {
                if let Some(o) = deleted.left() {
                    ctx.recent.record(&o);
                }
            }
            Err(e) if crate::controller::write::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(nab = %key_of(nab), "deleteBackup requested; NonAdminBackup marked for deletion");
    }
    Ok(Action::await_change())
}

/// The DeleteBackupRequests nac made for this nacuuid (named by it; any other carrying its label too).
fn delete_requests_for(ctx: &Ctx, nacuuid: &str) -> Vec<Arc<DeleteBackupRequest>> {
    let mut found: Vec<Arc<DeleteBackupRequest>> = ctx
        .own
        .delete_requests
        .get(&ctx.velero_ref(nacuuid))
        .into_iter()
        .collect();
    if found.is_empty() {
        found = ctx
            .own
            .delete_requests
            .state_filter(|r| r.labels().get(NAB_ORIGIN_NACUUID_LABEL).map(String::as_str) == Some(nacuuid));
    }
    found
}

/// Deletes nac's DeleteBackupRequests for this nacuuid.
async fn delete_requests(ctx: &Ctx, nacuuid: &str) -> Result<(), Error> {
    let api = ctx.velero_api::<DeleteBackupRequest>();
    for r in delete_requests_for(ctx, nacuuid) {
        if r.metadata.deletion_timestamp.is_none() && !ctx.recent.was_deleted(r.metadata.uid.as_deref()) {
            delete_if_present(&api, &r.name_any(), &ctx.metrics, "DeleteBackupRequest").await?;
            ctx.recent.deleted(r.metadata.uid.as_deref());
        }
    }
    Ok(())
}

/// `deleteBackup: true` path: ask Velero (DeleteBackupRequest, once) to delete the backup and its data, mirror the
/// request, and let the finalizer go once the Velero Backup is gone.
async fn delete_backup_data(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let Some(target) = tenant::target(nab, ctx).await? else {
        return Ok(Action::await_change());
    };
    let (nacuuid, name) = (target.nacuuid, target.name);
    let Some(vb) = target.object else {
        // Velero keeps processed requests for a while; nac leaves nothing of the backup behind.
        delete_requests(ctx, &nacuuid).await?;
        tracing::info!(nab = %key_of(nab), backup = %name, "Velero Backup gone; releasing the NonAdminBackup");
        return Ok(Action::await_change());
    };
    let request = match delete_requests_for(ctx, &nacuuid).into_iter().next() {
        Some(r) => (*r).clone(),
        None => {
            // Created a moment ago and the watch has not shown it yet: its event (or Velero's status on it)
            // wakes this reconcile; creating again would only be answered AlreadyExists.
            let since = ctx
                .recent
                .made_since::<DeleteBackupRequest>(&ctx.opts.velero_namespace, &nacuuid);
            if let Some(left) = since.and_then(|s| CACHE_WAIT.checked_sub(s)) {
                return Ok(Action::requeue(left));
            }
            if let Some(refusal) = deletion_refusal(ctx, &vb).await? {
                let now = now_seconds();
                set_status(api, nab, ctx, |s| deleting(s, &refusal, None, now)).await?;
                tracing::warn!(nab = %key_of(nab), backup = %name, %refusal, "deleting the backup's data refused");
                // Looked at again with the error backoff: only an admin's change (the locations, the files) helps.
                return Err(Error::NotReady(refusal));
            }
            let wanted = delete_backup_request(nab, &nacuuid, &vb);
            let r = create_or_get(
                &ctx.velero_api::<DeleteBackupRequest>(),
                &wanted,
                &ctx.metrics,
                "DeleteBackupRequest",
            )
            .await?;
            tracing::info!(nab = %key_of(nab), backup = %name, "DeleteBackupRequest created");
            ctx.recent.made(&r);
            r
        }
    };
    let view = DeleteRequestView {
        nacuuid: nacuuid.clone(),
        name: request.name_any(),
        namespace: ctx.opts.velero_namespace.clone(),
        status: request.status.clone(),
    };
    let message = delete_request_message(Some(&view));
    let now = now_seconds();
    set_status(api, nab, ctx, |s| deleting(s, &message, Some(&view), now)).await?;
    Err(Error::Waiting(format!(
        "waiting for Velero to delete Backup {}/{name} (DeleteBackupRequest {})",
        ctx.opts.velero_namespace, view.name
    )))
}

/// Why Velero may not delete backup `vb` with its data now, if it may not.
///
/// On a tenant's location Velero also deletes the native volume snapshots the backup's files list
/// (`volumesnapshots.json.gz`), through whichever of the admin's VolumeSnapshotLocations the list names, with
/// their credentials. Native snapshots leave nothing in the cluster to record, and the list can change in the
/// tenant's bucket up to the moment Velero reads it: where Velero has any VolumeSnapshotLocation, a backup on a
/// tenant's location is not deleted through Velero at all (the guard on DeleteBackupRequests refuses everyone's,
/// `admission::velero_guard::review_delete_request`; nac says so first). And the snapshots nac saw the backup make
/// are recorded before its deletion starts, so Velero may delete them.
async fn deletion_refusal(ctx: &Ctx, vb: &Backup) -> Result<Option<String>, Error> {
    let name = vb.name_any();
    if ctx.own.snapshots.pending(&crate::naming::velero_label_value(&name)) {
        return Err(Error::NotReady(format!(
            "the snapshots of Velero Backup {name} are not recorded yet; deleting it once they are"
        )));
    }
    let location = vb.spec.storage_location.as_deref().unwrap_or_default();
    let Some((ns, nabsl)) =
        crate::controller::sync::tenant_location_of(&ctx.view, &ctx.opts.velero_namespace, location)
    else {
        return Ok(None);
    };
    let vsls = ctx
        .velero_api::<VolumeSnapshotLocation>()
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await?;
    let Some(vsl) = vsls.items.first() else {
        return Ok(None);
    };
    Ok(Some(snapshot::deletion_refused(
        &name,
        &format!("{nabsl} of namespace {ns}"),
        &vsl.name_any(),
    )))
}

/// Plain `kubectl delete`: remove the Velero Backup object (not its data) and nac's DeleteBackupRequests, and let
/// the finalizer go once the Velero Backup is gone.
async fn delete_backup_object(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let now = now_seconds();
    set_status(api, nab, ctx, |s| deleting(s, BACKUP_DIRECT_DELETE_MESSAGE, None, now)).await?;
    let Some(target) = tenant::target(nab, ctx).await? else {
        return Ok(Action::await_change());
    };
    let gone = match &target.object {
        Some(vb) => tenant::delete_velero::<NonAdminBackup>(ctx, &target.name, vb).await?,
        None => true,
    };
    delete_requests(ctx, &target.nacuuid).await?;
    if gone {
        tracing::info!(nab = %key_of(nab), backup = %target.name, "Velero Backup object deleted; releasing the NonAdminBackup");
        Ok(Action::await_change())
    } else {
        Err(Error::Waiting(format!(
            "waiting for Velero Backup {}/{} to be deleted",
            ctx.opts.velero_namespace, target.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NonAdminBackupSpec;
    use crate::naming::*;
    use crate::velero::exclusions::{EXCLUDED_CLUSTER_RESOURCES, EXCLUDED_NAMESPACED_RESOURCES};
    use kube::runtime::reflector::ObjectRef;
    use serde_json::json;
    use std::collections::BTreeMap;

    const U: &str = "0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";

    #[test]
    fn a_settled_backup_is_stored_without_its_spec_and_a_pending_one_with_it() {
        use crate::api::{NonAdminPhase, VeleroBackupRef};
        use crate::controller::tenant::tenant_store_copy;
        let id = nacuuid_with("team-a", "nightly", U);
        let stored_as = |phase: NonAdminPhase, labelled: bool| {
            let mut n = NonAdminBackup::new(
                "nightly",
                NonAdminBackupSpec {
                    backup_spec: serde_json::from_value(json!({"includedNamespaces": ["team-a"], "ttl": "1h0m0s"}))
                        .unwrap(),
                    delete_backup: false,
                    unset: false,
                },
            );
            n.metadata.namespace = Some("team-a".into());
            if labelled {
                // nac's webhook stamped it.
                n.metadata.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, &id)]));
            }
            n.status = Some(NonAdminBackupStatus {
                phase: Some(phase),
                velero_backup: Some(VeleroBackupRef {
                    nacuuid: Some(id.clone()),
                    name: Some(id.clone()),
                    status: Some(Box::new(BackupStatus {
                        phase: Some("Completed".into()),
                        ..Default::default()
                    })),
                    ..Default::default()
                }),
                ..Default::default()
            });
            tenant_store_copy::<NonAdminBackup>(&mut n);
            n
        };
        let stored = |phase: NonAdminPhase| stored_as(phase, true);
        let settled = stored(NonAdminPhase::Created);
        assert!(settled.spec_left_out());
        assert_eq!(settled.spec.backup_spec.included_namespaces, None);
        // Two settled copies share one spec.
        assert!(std::sync::Arc::ptr_eq(
            &settled.spec.backup_spec,
            &stored(NonAdminPhase::Created).spec.backup_spec
        ));
        // What decides anything later is kept: the identity, the deletion flag, the status.
        assert_eq!(kind::nacuuid(&settled).as_deref(), Some(id.as_str()));
        assert!(!settled.spec.delete_backup);
        // Not settled: admitted from its spec, so it keeps it.
        for phase in [NonAdminPhase::New, NonAdminPhase::BackingOff] {
            let pending = stored(phase);
            assert!(!pending.spec_left_out());
            assert_eq!(pending.spec.backup_spec.ttl.as_deref(), Some("1h0m0s"));
        }
        // Made by OADP's controller (no identity label): its spec is judged against the current policy, so kept.
        let adopted = stored_as(NonAdminPhase::Created, false);
        assert!(!adopted.spec_left_out());
        assert_eq!(adopted.spec.backup_spec.ttl.as_deref(), Some("1h0m0s"));
    }

    #[test]
    fn what_the_current_policy_would_refuse_is_told_and_a_synced_copy_is_not_judged() {
        let strict = policy("backup: {maxTtl: 2160h}");
        let mut n = nab(json!({"ttl": "4000h0m0s"}));
        let refused = NonAdminBackup::refused_now(&n, &strict).expect("a TTL above maxTtl is refused now");
        assert!(
            refused.starts_with("the current policy would refuse this NonAdminBackup if it were created now: ")
                && refused.contains("4000h0m0s is above the maximum 2160h0m0s")
                && refused.ends_with("Its Velero Backup is kept and stays restorable"),
            "{refused}"
        );
        assert_eq!(
            NonAdminBackup::refused_now(&nab(json!({"ttl": "72h0m0s"})), &strict),
            None
        );
        n.metadata.labels = Some(labels(&[(NAB_SYNCED_FROM_NACUUID_LABEL, "x")]));
        assert_eq!(NonAdminBackup::refused_now(&n, &strict), None);
        // The condition: set while refused, gone when not.
        let mut s = NonAdminBackupStatus::default();
        status::refused_now(&mut s, Some(&refused), now_seconds());
        let c = crate::controller::conditions::find(&s.conditions, POLICY_COMPLIANT).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REFUSED_BY_CURRENT_POLICY)
        );
        status::refused_now(&mut s, None, now_seconds());
        assert!(s.conditions.is_empty());
    }

    fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn nab(spec: Value) -> NonAdminBackup {
        let mut n = NonAdminBackup::new(
            "nightly",
            NonAdminBackupSpec {
                backup_spec: serde_json::from_value(spec).unwrap(),
                delete_backup: false,
                unset: false,
            },
        );
        n.metadata.namespace = Some("team-a".into());
        n.metadata.annotations = Some(BTreeMap::from([(
            crate::rights::BACKUP_RIGHTS_ANNOTATION.to_string(),
            r#"{"mode":"exclude","excluded":[]}"#.to_string(),
        )]));
        n
    }

    /// The Velero Backup nac builds for a NonAdminBackup of `spec` (named "x", in "velero") under the default policy.
    fn backup_for(spec: Value) -> Result<Backup, String> {
        velero_backup_for(&nab(spec), "x", "velero", &Policy::default())
    }

    #[test]
    fn exclusions_never_make_a_spec_velero_fails_at_validation() {
        // nac's own kinds named among others: left out of the include list, which stays what it was otherwise.
        let b = backup_for(json!({"includedResources": ["pods", "nonadminbackups"]})).unwrap();
        let spec = serde_json::to_value(&b.spec).unwrap();
        assert_eq!(spec["includedResources"], json!(["pods"]));
        assert!(crate::velero::validation::backup_spec_problems(spec.as_object().unwrap()).is_empty());
        // An exclude-everything list gains nothing beside its "*".
        let b = backup_for(json!({"excludedNamespaceScopedResources": ["*"]})).unwrap();
        assert_eq!(
            serde_json::to_value(&b.spec).unwrap()["excludedNamespaceScopedResources"],
            json!(["*"])
        );
        // A kind the requester may not list, named alone: the backup would hold nothing, and Velero would fail
        // it; refused before any Velero Backup exists (the webhook bypassed, or the record written by hand).
        let mut n = nab(json!({"includedResources": ["secrets"]}));
        n.metadata.annotations.as_mut().unwrap().insert(
            crate::rights::BACKUP_RIGHTS_ANNOTATION.into(),
            r#"{"mode":"exclude","excluded":["secrets"]}"#.into(),
        );
        let e = velero_backup_spec(&n, &Policy::default()).unwrap_err();
        assert!(e.contains("excludedResources cannot hold \"secrets\""), "{e}");
        // What the webhook refuses, the reconciler refuses too.
        let e = backup_for(json!({"includedResources": ["cm"], "excludedResources": ["cm"]})).unwrap_err();
        assert!(e.contains("Velero fails such a backup at validation"), "{e}");
    }

    #[test]
    fn the_rights_record_is_applied_and_required() {
        let mut n = nab(json!({}));
        n.metadata.annotations.as_mut().unwrap().insert(
            crate::rights::BACKUP_RIGHTS_ANNOTATION.into(),
            r#"{"mode":"exclude","excluded":["secrets","roles.rbac.authorization.k8s.io"]}"#.into(),
        );
        // Applied even when the policy no longer checks rights: the decision was made at creation.
        for p in ["{}", "rights: {backup: off}"] {
            let spec = serde_json::to_value(velero_backup_spec(&n, &policy(p)).unwrap()).unwrap();
            let excluded = spec["excludedResources"].as_array().unwrap();
            assert!(excluded.contains(&json!("secrets")), "{p}: {spec}");
            assert!(
                excluded.contains(&json!("roles.rbac.authorization.k8s.io")),
                "{p}: {spec}"
            );
        }
        n.metadata.annotations = None;
        let e = velero_backup_spec(&n, &policy("{}")).unwrap_err();
        assert!(e.contains("not created through nac's admission webhook"), "{e}");
        assert!(velero_backup_spec(&n, &policy("rights: {backup: off}")).is_ok());
        n.metadata.annotations = Some(BTreeMap::from([(
            crate::rights::BACKUP_RIGHTS_ANNOTATION.to_string(),
            "garbage".to_string(),
        )]));
        assert!(velero_backup_spec(&n, &policy("{}")).is_err());
    }

    fn policy(yaml: &str) -> Policy {
        Policy::parse(yaml).unwrap()
    }

    /// What the API server hands back of a value nac wrote (JSON through and through).
    fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) -> T {
        serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap()
    }

    #[test]
    fn a_compact_store_copy_tells_a_current_mirror_from_a_stale_one_and_is_never_written() {
        let id = nacuuid_with("team-a", "nightly", U);
        let mut vb = velero_backup_for(
            &nab(json!({"labelSelector": {"matchLabels": {"app": "db"}}})),
            &id,
            "velero",
            &Policy::default(),
        )
        .unwrap();
        vb.status = Some(
            serde_json::from_value(json!({"phase": "Queued", "queuePosition": 40, "version": 1,
                                          "progress": {"totalItems": 9, "itemsBackedUp": 2}}))
            .unwrap(),
        );
        let whole = vb.clone();
        // What the NonAdminBackup's status holds once written from the whole object, and its store's copy of it.
        let written = round_trip(&mirrored(&whole, Some(&id)));
        let mut stored = written.clone();
        stored.make_compact();

        let mut compact = vb.clone();
        compact.make_compact();
        assert!(compact.is_compact());
        assert!(compact.spec.excluded_resources.is_none() && compact.spec.label_selector.is_none());
        assert!(compact.status.as_ref().unwrap().extra.is_empty());
        // Kept: what stores are searched and decided by.
        assert_eq!(compact.spec.included_namespaces, whole.spec.included_namespaces);
        assert_eq!(compact.whole_meta(), whole.metadata);
        // Its labels and annotations in one allocation, read through `Tags` as before.
        assert!(compact.metadata.labels.is_none() && compact.metadata.annotations.is_none());
        assert_eq!(NAB.nacuuid(&compact), Some(id.as_str()));
        assert_eq!(NAB.origin_of(&compact), NAB.origin_of(&whole.metadata));
        assert!(NAB.owns(&compact, "team-a", "nightly") && !NAB.owns(&compact, "team-b", "nightly"));
        assert_eq!(compact.status.as_ref().unwrap().phase.as_deref(), Some("Queued"));
        // Current: equal to the written copy and to its compact store copy, without the left-out parts.
        let from_compact = mirrored(&compact, Some(&id));
        assert_eq!(from_compact, written);
        assert_eq!(from_compact, stored);
        // A mirror of a compact copy cannot be written as a whole one: no spec, marked compact, and a status
        // holding it is compact (update_status reads the object before any write from such a status).
        assert!(from_compact.spec.is_none() && from_compact.compact.is_some());
        let mut status = NonAdminBackupStatus {
            velero_backup: Some(from_compact),
            ..Default::default()
        };
        assert!(crate::controller::write::CompactStatus::is_compact(&status));
        status.velero_backup = Some(mirrored(&whole, Some(&id)));
        assert!(!crate::controller::write::CompactStatus::is_compact(&status));
        // Compacting twice keeps the first fingerprint.
        let mut again = compact.clone();
        again.make_compact();
        assert_eq!(again.compact, compact.compact);
        // Another Backup of the namespace, alike but for its name and progress: one compact spec for both.
        let mut sibling = whole.clone();
        sibling.metadata.name = Some("sibling".into());
        sibling.status.as_mut().unwrap().extra.clear();
        sibling.make_compact();
        assert!(std::sync::Arc::ptr_eq(&sibling.spec, &compact.spec));
        assert_ne!(sibling.compact, compact.compact);
        // The whole object never shares: a spec to change is its own.
        assert!(!std::sync::Arc::ptr_eq(&whole.spec, &compact.spec));

        // Velero's progress moves: stale, though the compact copies look alike.
        let mut moved = whole.clone();
        moved
            .status
            .as_mut()
            .unwrap()
            .extra
            .insert("progress".into(), json!({"totalItems": 9, "itemsBackedUp": 3}));
        moved.make_compact();
        assert_eq!(moved.status, compact.status);
        assert_ne!(mirrored(&moved, Some(&id)), stored);
        // Velero's own queue position moves within one reported step: nothing to write.
        let p = (12..200).find(|p| reported(*p) == reported(p + 1)).unwrap();
        let at = |q: i64| {
            let mut b = whole.clone();
            b.status.as_mut().unwrap().queue_position = Some(q);
            b
        };
        let written_at_p = round_trip(&mirrored(&at(p), Some(&id)));
        let mut next = at(p + 1);
        next.make_compact();
        assert_eq!(mirrored(&next, Some(&id)), written_at_p);
        // Any change of the spec (an edit by hand of the Velero Backup) is stale too.
        let mut edited = whole.clone();
        edited.spec_mut().excluded_resources.as_mut().unwrap().pop();
        edited.make_compact();
        assert_ne!(mirrored(&edited, Some(&id)), stored);
    }

    /// A Velero object nac made for NonAdminBackup team-a/nightly: named `id` in `namespace`, with its identity.
    fn assert_made_for_nightly(
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        id: &str,
        namespace: &str,
    ) {
        assert_eq!(meta.name.as_deref(), Some(id));
        assert_eq!(meta.namespace.as_deref(), Some(namespace));
        let l = meta.labels.as_ref().unwrap();
        assert_eq!(l[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        assert_eq!(l[OADP_LABEL], "True");
        assert_eq!(l[NAB_ORIGIN_NACUUID_LABEL], id);
        assert_eq!(
            NAB.owner(meta),
            Some(ObjectRef::<NonAdminBackup>::new("nightly").within("team-a"))
        );
    }

    #[test]
    fn velero_backup_carries_the_design_labels_and_annotations() {
        let id = nacuuid_with("team-a", "nightly", U);
        let b = velero_backup_for(&nab(json!({})), &id, "openshift-adp", &Policy::default()).unwrap();
        assert_made_for_nightly(&b.metadata, &id, "openshift-adp");
        let a = b.annotations();
        assert_eq!(a[NAB_ORIGIN_NAME_ANNOTATION], "nightly");
        assert_eq!(a[NAB_ORIGIN_NAMESPACE_ANNOTATION], "team-a");
    }

    #[test]
    fn velero_backup_is_limited_to_the_own_namespace_with_the_policy_applied() {
        let b = velero_backup_for(
            &nab(json!({"includedResources": ["configmaps"]})),
            "x",
            "velero",
            &policy("enforceBackupSpec: {snapshotMoveData: true}"),
        )
        .unwrap();
        assert_eq!(b.spec.included_namespaces, Some(vec!["team-a".to_string()]));
        assert_eq!(b.spec.snapshot_move_data, Some(true));
        assert_eq!(b.spec.included_resources, Some(vec!["configmaps".to_string()]));
    }

    #[test]
    fn old_style_specs_get_the_exclusions_in_excluded_resources() {
        let b = backup_for(json!({"excludedResources": ["secrets"]})).unwrap();
        let ex = b.spec.excluded_resources.clone().unwrap();
        assert_eq!(ex[0], "secrets");
        for k in EXCLUDED_NAMESPACED_RESOURCES.iter().chain(EXCLUDED_CLUSTER_RESOURCES) {
            assert!(ex.iter().any(|e| e == k), "{k} missing from {ex:?}");
        }
        assert!(b.spec.excluded_namespace_scoped_resources.is_none());
        assert!(b.spec.excluded_cluster_scoped_resources.is_none());
    }

    #[test]
    fn new_style_specs_get_the_exclusions_in_the_scoped_fields() {
        let b = backup_for(json!({"includedNamespaceScopedResources": ["deployments"]})).unwrap();
        assert_eq!(
            b.spec.excluded_namespace_scoped_resources.clone().unwrap(),
            EXCLUDED_NAMESPACED_RESOURCES
        );
        assert_eq!(
            b.spec.excluded_cluster_scoped_resources.clone().unwrap(),
            EXCLUDED_CLUSTER_RESOURCES
        );
        assert!(
            b.spec.excluded_resources.is_none(),
            "Velero refuses mixed old and new filters"
        );
    }

    #[test]
    fn an_invalid_spec_is_refused_with_the_policy_message() {
        let e = backup_for(json!({"includedNamespaces": ["team-b"]})).unwrap_err();
        assert!(e.contains("includedNamespaces"), "{e}");
        assert!(e.contains("team-a"), "{e}");
    }

    #[test]
    fn unknown_fields_survive_into_the_velero_spec() {
        let b = backup_for(json!({"futureField": {"a": 1}})).unwrap();
        assert_eq!(b.spec.extra["futureField"], json!({"a": 1}));
    }

    #[test]
    fn delete_backup_request_names_the_backup_by_name_and_uid() {
        let mut b = velero_backup_for(&nab(json!({})), "id", "velero", &Policy::default()).unwrap();
        b.metadata.uid = Some("uid-1".into());
        let r = delete_backup_request(&nab(json!({})), "id", &b);
        assert_made_for_nightly(&r.metadata, "id", "velero");
        assert_eq!(r.spec.backup_name, "id");
        let l = r.labels();
        assert_eq!(l[VELERO_BACKUP_NAME_LABEL], "id");
        assert_eq!(l[VELERO_BACKUP_UID_LABEL], "uid-1");
    }

    #[test]
    fn the_status_nacuuid_wins_over_the_label() {
        let mut n = nab(json!({}));
        let label = nacuuid_with("team-a", "nightly", U);
        n.metadata.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, &label)]));
        assert_eq!(kind::nacuuid(&n).as_deref(), Some(label.as_str()));
        n.status = Some(crate::api::NonAdminBackupStatus {
            velero_backup: Some(crate::api::VeleroBackupRef {
                nacuuid: Some("from-status".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(kind::nacuuid(&n).as_deref(), Some("from-status"));
        assert_eq!(tenant::velero_name(&n, "from-status"), "from-status");
    }

    #[test]
    fn a_label_nac_would_not_have_generated_is_ignored() {
        let mut n = nab(json!({}));
        n.metadata.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, &nacuuid_with("team-b", "x", U))]));
        assert_eq!(kind::nacuuid(&n), None);
    }
}
