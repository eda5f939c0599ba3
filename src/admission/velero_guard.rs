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

use super::{deny, AdmissionState};
use crate::naming::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, NABSL};
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
        format!("!has(object.status) || !has(object.status.phase) || !(object.status.phase in [{phases}])")
    }
}

/// Reads a Velero BackupStorageLocation's metadata in Velero's namespace: `None` when it does not exist.
pub trait LocationLookup: Send + Sync {
    fn location<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<ObjectMeta>, String>>;
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
    if kind.finished_phases().contains(&phase) {
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

/// The verdict once the location is known: refused when it belongs to a tenant.
fn decide(
    kind: GuardedKind,
    req: &AdmissionRequest<DynamicObject>,
    location: &str,
    meta: Option<&ObjectMeta>,
) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    let Some(meta) = meta else {
        // Velero fails an object whose location does not exist without reading anything.
        return resp;
    };
    let labels = meta.labels.as_ref();
    let tenant = labels.is_some_and(|l| {
        l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE) && l.contains_key(NABSL.nacuuid_label)
    });
    if !tenant {
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
    let message = format!(
        "Velero {} {name} (phase {phase}) is refused on storage location {location}{owner}: on a tenant's location only \
         nac starts backups; an unfinished one from anyone else can only come from the tenant's bucket through backup \
         sync",
        kind.kind()
    );
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
    match lookup.location(&location).await {
        Ok(meta) => decide(kind, req, &location, meta.as_ref()),
        Err(e) => deny(
            AdmissionResponse::from(req),
            format!(
                "Velero {} on storage location {location} cannot be checked now (reading the location failed: {e}); \
                 retry",
                kind.kind()
            ),
            [],
        ),
    }
}
