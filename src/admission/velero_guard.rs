//! The guard on Velero's own objects: a Velero Backup or PodVolumeBackup that has not run yet is refused on a
//! tenant's storage location unless nac made it.
//!
//! A tenant controls the bucket behind their NonAdminBackupStorageLocation. Velero's backup sync turns every
//! `backups/<name>/velero-backup.json` there into a Backup object as written, status included (Backups have no
//! status subresource), and does the same with the pod volume backups stored beside it. A file with phase `New`
//! (or none) and `includedNamespaces: [another namespace]` would make Velero back that namespace up into the
//! tenant's bucket with Velero's rights. Backups nac makes are created by nac itself; Velero's sync brings back
//! only finished ones. So on a tenant location, an unfinished Velero object from anyone but nac is refused, at
//! admission, before Velero's controllers can see it.
//!
//! One exception: the runs of a tenant's schedule, which Velero itself creates from a Velero Schedule nac made.
//! Such a Backup is admitted when it names that Schedule, the Schedule was made for the namespace that owns the
//! location, and its spec is exactly the Schedule's template: then it does what the schedule does anyway (a copy
//! planted in the bucket could do no more).

use super::{deny, AdmissionState};
use crate::naming::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, NABSL, VELERO_BACKUP_NAME_LABEL};
use crate::velero::snapshot::{self, VolumeSnapshotContent, SNAPSHOTS_ANNOTATION};
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::DynamicObject;
use serde_json::Value;

/// The Velero kinds the guard reviews.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardedKind {
    Backup,
    PodVolumeBackup,
}

impl GuardedKind {
    pub fn kind(&self) -> &'static str {
        match self {
            GuardedKind::Backup => "Backup",
            GuardedKind::PodVolumeBackup => "PodVolumeBackup",
        }
    }

    pub fn resource(&self) -> &'static str {
        match self {
            GuardedKind::Backup => "backups",
            GuardedKind::PodVolumeBackup => "podvolumebackups",
        }
    }

    /// Phases after which Velero's controllers no longer read the cluster for this object: what a sync of a real
    /// backup brings back. Anything else is reviewed.
    pub fn finished_phases(&self) -> &'static [&'static str] {
        match self {
            GuardedKind::Backup => &["Completed", "PartiallyFailed", "Failed", "FailedValidation"],
            GuardedKind::PodVolumeBackup => &["Completed", "Failed", "Canceled"],
        }
    }

    fn location_field(&self) -> &'static str {
        match self {
            GuardedKind::Backup => "storageLocation",
            GuardedKind::PodVolumeBackup => "backupStorageLocation",
        }
    }

    /// The CEL condition under which the API server calls the guard at all (the registration's matchConditions):
    /// unfinished objects only, so admins' finished syncs never wait on nac.
    pub fn match_condition(&self) -> String {
        let phases = self
            .finished_phases()
            .iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let unfinished =
            format!("!has(object.status) || !has(object.status.phase) || !(object.status.phase in [{phases}])");
        match self {
            // A Backup carrying nac's snapshot record, whatever its phase (`carries_record`).
            GuardedKind::Backup => format!(
                "{unfinished} || (has(object.metadata.annotations) && '{SNAPSHOTS_ANNOTATION}' in \
                 object.metadata.annotations)"
            ),
            GuardedKind::PodVolumeBackup => unfinished,
        }
    }
}

/// What the webhooks look up in the cluster: a Velero BackupStorageLocation's metadata in Velero's namespace
/// (`None` when it does not exist), and the files and schedules nac reads on admission.
pub trait LocationLookup: Send + Sync {
    fn location<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<ObjectMeta>, String>>;

    /// The Velero Backup whose `velero.io/backup-name` label value is `label` (its name, or Velero's short form
    /// of a longer one), `None` when there is none.
    fn velero_backup<'a>(&'a self, _label: &'a str) -> BoxFuture<'a, Result<Option<crate::velero::Backup>, String>> {
        Box::pin(async { Err("nac runs without a connection to the cluster".to_string()) })
    }

    /// The name of a VolumeSnapshotLocation in Velero's namespace, `None` when there is none.
    fn snapshot_location(&self) -> BoxFuture<'_, Result<Option<String>, String>> {
        Box::pin(async { Err("nac runs without a connection to the cluster".to_string()) })
    }

    /// The Velero Schedule `name` in Velero's namespace, `None` when it does not exist.
    fn velero_schedule<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, Result<Option<crate::velero::Schedule>, String>> {
        Box::pin(async { Err("nac runs without a connection to the cluster".to_string()) })
    }

    /// Secret `name` of `namespace` (a tenant location's credential, judged at apply), `None` when it does not
    /// exist.
    fn secret<'a>(
        &'a self,
        _namespace: &'a str,
        _name: &'a str,
    ) -> BoxFuture<'a, Result<Option<k8s_openapi::api::core::v1::Secret>, String>> {
        Box::pin(async { Err("nac runs without a connection to the cluster".to_string()) })
    }

    /// What the file a download request of `namespace` names exposes (`crate::rights::download::fetch`); `None`
    /// while it is not made yet.
    fn download_file<'a>(
        &'a self,
        _namespace: &'a str,
        _target: &'a crate::api::NonAdminDownloadTarget,
    ) -> BoxFuture<'a, Result<Option<crate::rights::download::Exposure>, String>> {
        Box::pin(async { Err("nac runs without a connection to the cluster".to_string()) })
    }
}

/// The lookup against the API server.
pub struct KubeLocations(pub kube::Api<crate::velero::BackupStorageLocation>);

impl LocationLookup for KubeLocations {
    fn location<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<ObjectMeta>, String>> {
        Box::pin(async move {
            self.0
                .get_metadata_opt(name)
                .await
                .map(|o| o.map(|m| m.metadata))
                .map_err(|e| e.to_string())
        })
    }

    fn velero_backup<'a>(&'a self, label: &'a str) -> BoxFuture<'a, Result<Option<crate::velero::Backup>, String>> {
        Box::pin(async move {
            let api: kube::Api<crate::velero::Backup> = kube::Api::namespaced(
                kube::Client::from(self.0.clone()),
                self.0.namespace().unwrap_or_default(),
            );
            if let Some(b) = api.get_opt(label).await.map_err(|e| e.to_string())? {
                return Ok(Some(b));
            }
            if label.len() < crate::naming::MAX_NAME_LEN {
                return Ok(None);
            }
            // Velero's short form of a longer name (a scheduled run's): looked for among the names, then read.
            let all = api
                .list_metadata(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut named = all
                .items
                .iter()
                .filter_map(|b| b.metadata.name.as_deref())
                .filter(|n| crate::naming::velero_label_value(n) == label);
            let (Some(name), None) = (named.next(), named.next()) else {
                return Ok(None);
            };
            api.get_opt(name).await.map_err(|e| e.to_string())
        })
    }

    fn snapshot_location(&self) -> BoxFuture<'_, Result<Option<String>, String>> {
        Box::pin(async move {
            let api: kube::Api<crate::velero::VolumeSnapshotLocation> = kube::Api::namespaced(
                kube::Client::from(self.0.clone()),
                self.0.namespace().unwrap_or_default(),
            );
            let list = api
                .list_metadata(&kube::api::ListParams::default().limit(1))
                .await
                .map_err(|e| e.to_string())?;
            Ok(list.items.first().and_then(|l| l.metadata.name.clone()))
        })
    }

    fn velero_schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<crate::velero::Schedule>, String>> {
        Box::pin(async move {
            let api: kube::Api<crate::velero::Schedule> = kube::Api::namespaced(
                kube::Client::from(self.0.clone()),
                self.0.namespace().unwrap_or_default(),
            );
            api.get_opt(name).await.map_err(|e| e.to_string())
        })
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<k8s_openapi::api::core::v1::Secret>, String>> {
        Box::pin(async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
                kube::Api::namespaced(kube::Client::from(self.0.clone()), namespace);
            api.get_opt(name).await.map_err(|e| e.to_string())
        })
    }

    fn download_file<'a>(
        &'a self,
        namespace: &'a str,
        target: &'a crate::api::NonAdminDownloadTarget,
    ) -> BoxFuture<'a, Result<Option<crate::rights::download::Exposure>, String>> {
        Box::pin(async move {
            let client = kube::Client::from(self.0.clone());
            let velero = self.0.namespace().unwrap_or_default();
            crate::rights::download::fetch(&client, velero, namespace, target).await
        })
    }
}

/// What the guard needs to look up, or its answer when no lookup is needed.
enum First {
    Done(Box<AdmissionResponse>),
    /// The name of the storage location the object would use.
    Lookup(String),
}

fn first(state: &AdmissionState, kind: GuardedKind, req: &AdmissionRequest<DynamicObject>) -> First {
    let resp = AdmissionResponse::from(req);
    if req.operation != Operation::Create {
        return First::Done(Box::new(resp));
    }
    if req.kind.group != "velero.io" || req.kind.kind != kind.kind() {
        return First::Done(Box::new(deny(
            resp,
            format!(
                "this webhook endpoint handles velero.io {} only, not {}/{}: check the webhook configuration",
                kind.kind(),
                req.kind.group,
                req.kind.kind
            ),
            [],
        )));
    }
    if super::proxy::is_privileged(state, req) {
        return First::Done(Box::new(resp));
    }
    let Some(object) = req.object.as_ref() else {
        return First::Done(Box::new(deny(
            resp,
            format!("{} review has no object", kind.kind()),
            [],
        )));
    };
    let phase = object.data["status"]["phase"].as_str().unwrap_or("");
    if kind.finished_phases().contains(&phase) && !carries_record(kind, req) {
        return First::Done(Box::new(resp));
    }
    match &object.data["spec"][kind.location_field()] {
        // Velero's default location: the admin's.
        Value::Null => First::Done(Box::new(resp)),
        Value::String(s) if s.is_empty() => First::Done(Box::new(resp)),
        Value::String(s) => First::Lookup(s.clone()),
        other => First::Done(Box::new(deny(
            resp,
            format!(
                "Velero {} spec.{} must be a string (got {other})",
                kind.kind(),
                kind.location_field()
            ),
            [],
        ))),
    }
}

/// Whether a Backup carries nac's record of the snapshots it made (`crate::velero::snapshot`). nac writes it on
/// Backups it made, after they ran; a Backup created with it was not made by nac: on a tenant's location it comes
/// from the tenant's bucket and would let Velero delete the snapshots it names.
fn carries_record(kind: GuardedKind, req: &AdmissionRequest<DynamicObject>) -> bool {
    kind == GuardedKind::Backup
        && req
            .object
            .as_ref()
            .and_then(|o| o.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(SNAPSHOTS_ANNOTATION))
}

/// The namespace owning a tenant's location (its NonAdminBackupStorageLocation's), or None for an admin's.
fn tenant_namespace(meta: &ObjectMeta) -> Option<&str> {
    let labels = meta.labels.as_ref()?;
    let tenant = labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.contains_key(NABSL.nacuuid_label);
    if !tenant {
        return None;
    }
    Some(NABSL.origin_of(meta).map(|(ns, _)| ns).unwrap_or(""))
}

/// The Velero Schedule a Backup says it is a run of, when it says so the way Velero marks runs of nac's Schedules.
fn claimed_schedule(kind: GuardedKind, req: &AdmissionRequest<DynamicObject>) -> Option<String> {
    if kind != GuardedKind::Backup {
        return None;
    }
    let meta = &req.object.as_ref()?.metadata;
    let schedule = meta.labels.as_ref()?.get(crate::velero::SCHEDULE_NAME_LABEL)?;
    (crate::naming::NAS.nacuuid(meta) == Some(schedule.as_str())).then(|| schedule.clone())
}

/// Whether a Backup on a location of `owner` (a namespace) is a run of Velero Schedule `schedule`: nac made the
/// Schedule for that namespace, and the Backup's spec is the Schedule's template.
fn is_run_of(req: &AdmissionRequest<DynamicObject>, owner: &str, schedule: Option<&crate::velero::Schedule>) -> bool {
    use crate::naming::NAS;
    let (Some(s), Some(object)) = (schedule, req.object.as_ref()) else {
        return false;
    };
    let made_for_owner = NAS.is_tagged(&s.metadata)
        && s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .map(String::as_str)
            == Some(MANAGED_BY_VALUE)
        && NAS.origin_of(&s.metadata).is_some_and(|(ns, _)| ns == owner)
        && NAS.origin_of(&object.metadata) == NAS.origin_of(&s.metadata);
    let spec: Option<crate::velero::BackupSpec> = serde_json::from_value(object.data["spec"].clone()).ok();
    let same = |a: &crate::velero::BackupSpec| serde_json::to_value(a).ok();
    made_for_owner && spec.is_some_and(|spec| same(&spec) == same(&s.spec.template))
}

/// The verdict once the location is known: refused when it belongs to a tenant (unless it is a run of their
/// schedule, `run_ok`).
fn decide(
    kind: GuardedKind,
    req: &AdmissionRequest<DynamicObject>,
    location: &str,
    meta: Option<&ObjectMeta>,
    run_ok: bool,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let Some(meta) = meta else {
        // Velero fails an object whose location does not exist without reading anything.
        return resp;
    };
    let forged = carries_record(kind, req);
    if tenant_namespace(meta).is_none() || (run_ok && !forged) {
        return resp;
    }
    let owner = NABSL
        .origin_of(meta)
        .map(|(ns, name)| format!(" of NonAdminBackupStorageLocation {ns}/{name}"))
        .unwrap_or_default();
    let name = req
        .object
        .as_ref()
        .and_then(|o| o.metadata.name.clone())
        .unwrap_or_else(|| req.name.clone());
    let phase = req
        .object
        .as_ref()
        .and_then(|o| o.data["status"]["phase"].as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("unset");
    let message = if forged {
        format!(
            "Velero Backup {name} is refused on storage location {location}{owner}: it carries annotation \
             {SNAPSHOTS_ANNOTATION}, which only nac writes, on backups it made; created with it, it can only come from \
             the tenant's bucket through backup sync"
        )
    } else {
        format!(
            "Velero {} {name} (phase {phase}) is refused on storage location {location}{owner}: on a tenant's location \
             only nac starts backups; an unfinished one from anyone else can only come from the tenant's bucket \
             through backup sync",
            kind.kind()
        )
    };
    tracing::warn!(kind = kind.kind(), %name, %location, user = req.user_info.username.as_deref().unwrap_or(""), "refused an unfinished Velero object on a tenant location");
    let field = format!("spec.{}", kind.location_field());
    deny(resp, message.clone(), [(field, message)])
}

/// Reviews one request: at most one lookup of the storage location, failing closed when it cannot be made.
pub async fn review(
    state: &AdmissionState,
    kind: GuardedKind,
    req: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let location = match first(state, kind, req) {
        First::Done(resp) => return *resp,
        First::Lookup(l) => l,
    };
    let Some(lookup) = state.locations.as_ref() else {
        return deny(
            AdmissionResponse::from(req),
            format!(
                "Velero {} on storage location {location} cannot be checked: nac runs without a connection to the \
                 cluster",
                kind.kind()
            ),
            [],
        );
    };
    let meta = match lookup.location(&location).await {
        Ok(meta) => meta,
        Err(e) => {
            return deny(
                AdmissionResponse::from(req),
                format!(
                    "Velero {} on storage location {location} cannot be checked now (reading the location failed: \
                     {e}); retry",
                    kind.kind()
                ),
                [],
            )
        }
    };
    // A run of a tenant's schedule: one more lookup, of the Schedule it names.
    let owner = meta.as_ref().and_then(tenant_namespace).map(str::to_string);
    let run_ok = match (owner, claimed_schedule(kind, req)) {
        (Some(owner), Some(schedule)) => match lookup.velero_schedule(&schedule).await {
            Ok(s) => is_run_of(req, &owner, s.as_ref()),
            Err(e) => {
                return deny(
                    AdmissionResponse::from(req),
                    format!("Velero Backup of Schedule {schedule} cannot be checked now (reading the Schedule failed: {e}); retry"),
                    [],
                )
            }
        },
        _ => false,
    };
    decide(kind, req, &location, meta.as_ref(), run_ok)
}

/// Reviews a VolumeSnapshotContent labelled with a backup's name, as Velero creates one to delete a snapshot of the
/// backup (or to restore from one): for a backup on a tenant's location, whose tarball the tenant writes, only a
/// snapshot nac recorded for that backup while it ran (`crate::velero::snapshot`) is admitted, naming no volume
/// and no other deletion Secret. Anything else is refused, so a rewritten tarball deletes no other snapshot.
/// Fails closed when the backup or its location cannot be read.
pub async fn review_snapshot_content(
    state: &AdmissionState,
    req: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    if req.operation != Operation::Create || super::proxy::is_privileged(state, req) {
        return resp;
    }
    if req.kind.group != "snapshot.storage.k8s.io" || req.kind.kind != "VolumeSnapshotContent" {
        let message = format!(
            "this webhook endpoint handles snapshot.storage.k8s.io VolumeSnapshotContent only, not {}/{}: check the \
             webhook configuration",
            req.kind.group, req.kind.kind
        );
        return deny(resp, message, []);
    }
    let content = match req
        .object
        .as_ref()
        .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
    {
        Some(Ok(c)) => c,
        Some(Err(e)) => return deny(resp, format!("VolumeSnapshotContent is not readable: {e}"), []),
        None => return deny(resp, "VolumeSnapshotContent review has no object".to_string(), []),
    };
    let content: VolumeSnapshotContent = content;
    let Some(backup) = content
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(VELERO_BACKUP_NAME_LABEL))
    else {
        return resp;
    };
    let name = content.metadata.name.clone().unwrap_or_else(|| req.name.clone());
    let retry = |what: &str, e: String| {
        deny(
            AdmissionResponse::from(req),
            format!("VolumeSnapshotContent {name} of backup {backup} cannot be checked now (reading {what} failed: {e}); retry"),
            [],
        )
    };
    let Some(lookup) = state.locations.as_ref() else {
        return retry("the backup", "nac runs without a connection to the cluster".into());
    };
    // Fails closed when the backup or its location is gone: both can be made to go while Velero works from a
    // tarball it read (a tenant deletes their location; Velero deletes a backup whose files went).
    let gone = |what: String| {
        let message =
            format!("VolumeSnapshotContent {name} is refused: {what}, so whose snapshot it is cannot be known");
        deny(AdmissionResponse::from(req), message, [])
    };
    match placement(lookup.as_ref(), backup).await {
        Err((what, e)) => retry(what, e),
        Ok(Placement::Admins) => resp,
        Ok(Placement::BackupGone) => gone(format!("backup {backup} does not exist in Velero's namespace")),
        Ok(Placement::LocationGone(location)) => {
            gone(format!("storage location {location} of backup {backup} does not exist"))
        }
        Ok(Placement::Tenants { vb, location, meta }) => {
            let owner = tenant_namespace(&meta).unwrap_or_default();
            decide_snapshot_content(req, &name, &vb, &location, owner, &content)
        }
    }
}

/// Where a Velero Backup (by its `velero.io/backup-name` label value) is stored, as the guards judge it.
enum Placement {
    BackupGone,
    LocationGone(String),
    /// On an admin's location (Velero's default one included).
    Admins,
    /// On a tenant's location: the Backup, its location's name and metadata.
    Tenants {
        vb: Box<crate::velero::Backup>,
        location: String,
        meta: Box<ObjectMeta>,
    },
}

/// The placement of backup `label`; `Err`: what could not be read, and why.
async fn placement(lookup: &dyn LocationLookup, label: &str) -> Result<Placement, (&'static str, String)> {
    let vb = match lookup.velero_backup(label).await {
        Ok(None) => return Ok(Placement::BackupGone),
        Ok(Some(vb)) => vb,
        Err(e) => return Err(("the Velero Backup", e)),
    };
    let location = vb.spec.storage_location.clone().unwrap_or_default();
    if location.is_empty() {
        return Ok(Placement::Admins);
    }
    match lookup.location(&location).await {
        Ok(None) => Ok(Placement::LocationGone(location)),
        Ok(Some(meta)) if tenant_namespace(&meta).is_some() => Ok(Placement::Tenants {
            vb: Box::new(vb),
            location,
            meta: Box::new(meta),
        }),
        Ok(Some(_)) => Ok(Placement::Admins),
        Err(e) => Err(("its storage location", e)),
    }
}

/// The verdict on a VolumeSnapshotContent for Velero Backup `vb` on `location`, a tenant's (of namespace `owner`).
fn decide_snapshot_content(
    req: &AdmissionRequest<DynamicObject>,
    name: &str,
    vb: &crate::velero::Backup,
    location: &str,
    owner: &str,
    content: &VolumeSnapshotContent,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let backup = vb.metadata.name.as_deref().unwrap_or_default();
    let annotation = vb
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SNAPSHOTS_ANNOTATION));
    let record = match annotation.map(|a| snapshot::parse(a)).transpose() {
        Ok(r) => r.unwrap_or_default(),
        Err(e) => return deny(resp, format!("Velero Backup {backup}: {e}"), []),
    };
    let refused = |why: String| {
        let message = format!(
            "VolumeSnapshotContent {name} is refused: Velero Backup {backup} is on storage location {location} of \
             namespace {owner}, whose files the tenant writes, and {why}"
        );
        tracing::warn!(%name, %backup, %location, user = req.user_info.username.as_deref().unwrap_or(""), "refused a VolumeSnapshotContent of a backup on a tenant location");
        deny(
            AdmissionResponse::from(req),
            message.clone(),
            [("spec.source".to_string(), message)],
        )
    };
    if content.spec.source.volume_handle.is_some() {
        return refused("it would take a new snapshot of a volume".into());
    }
    // What the driver acts on: the handle the new content names (a create carries no status).
    let Some(wanted) = content.requested() else {
        return refused("it names no snapshot handle and driver".into());
    };
    if record.contains(&wanted) {
        return resp;
    }
    refused(format!(
        "snapshot {wanted} is not among the {} nac recorded from the cluster while the backup ran",
        record.len()
    ))
}

/// Reviews a Velero DeleteBackupRequest, whoever makes it (nac, Velero's garbage collection of expired backups,
/// `velero backup delete`): a backup on a tenant's location is not deleted through Velero while Velero has a
/// VolumeSnapshotLocation, since the deletion would delete the native snapshots the backup's files list, which the
/// tenant writes (`crate::velero::snapshot::deletion_refused`). Fails closed when the lookups fail.
pub async fn review_delete_request(state: &AdmissionState, req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    if req.operation != Operation::Create {
        return resp;
    }
    if req.kind.group != "velero.io" || req.kind.kind != "DeleteBackupRequest" {
        let message = format!(
            "this webhook endpoint handles velero.io DeleteBackupRequest only, not {}/{}: check the webhook \
             configuration",
            req.kind.group, req.kind.kind
        );
        return deny(resp, message, []);
    }
    let Some(backup) = req.object.as_ref().and_then(|o| o.data["spec"]["backupName"].as_str()) else {
        // Velero refuses a request without a backup name itself, touching nothing.
        return resp;
    };
    let retry = |what: &str, e: String| {
        deny(
            AdmissionResponse::from(req),
            format!(
                "DeleteBackupRequest for backup {backup} cannot be checked now (reading {what} failed: {e}); retry"
            ),
            [],
        )
    };
    let Some(lookup) = state.locations.as_ref() else {
        return retry("the backup", "nac runs without a connection to the cluster".into());
    };
    let (location, meta) = match placement(lookup.as_ref(), backup).await {
        Err((what, e)) => return retry(what, e),
        Ok(Placement::Tenants { location, meta, .. }) => (location, meta),
        // Velero finds no backup, or no location, and deletes nothing; an admin's is the admin's.
        Ok(_) => return resp,
    };
    let owner = tenant_namespace(&meta).unwrap_or_default();
    let vsl = match lookup.snapshot_location().await {
        Ok(None) => return resp,
        Ok(Some(vsl)) => vsl,
        Err(e) => return retry("Velero's volume snapshot locations", e),
    };
    let nabsl = NABSL.origin_of(&*meta).map(|(_, n)| n).unwrap_or_default();
    let message = snapshot::deletion_refused(backup, &format!("{location} ({nabsl} of namespace {owner})"), &vsl);
    tracing::warn!(%backup, %location, user = req.user_info.username.as_deref().unwrap_or(""), "refused a DeleteBackupRequest of a backup on a tenant location");
    deny(resp, message.clone(), [("spec.backupName".to_string(), message)])
}
