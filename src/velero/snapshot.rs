//! CSI VolumeSnapshotContents as nac reads them, and nac's record of the snapshots a backup made.
//!
//! Deleting a backup, Velero (v1.18 `internal/delete/actions/csi`) reads the VolumeSnapshotContents in the backup's
//! tarball and, for each labelled with the backup's name, creates a new VolumeSnapshotContent with the item's
//! driver and `status.snapshotHandle` and `deletionPolicy: Delete`, then deletes it: the CSI driver deletes that
//! snapshot. On a tenant's own storage the tarball is the tenant's to write, so it could name any snapshot of the
//! storage system. nac records, while the backup runs, the snapshots Velero's VolumeSnapshotContents for it hold
//! (from the cluster, never from storage), as an annotation on the Velero Backup; the admission guard
//! (`admission::velero_guard`) refuses a VolumeSnapshotContent for a backup on a tenant's location that is not in
//! its record.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The annotation on a Velero Backup of a tenant's location holding the snapshots it made ([`render`]). Only nac
/// writes it: a Backup created with it (by Velero's backup sync, from a file in a tenant's bucket) is refused.
pub const SNAPSHOTS_ANNOTATION: &str = "nac.oadp.openshift.io/snapshot-contents";

/// What nac reads of a VolumeSnapshotContent.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "snapshot.storage.k8s.io",
    version = "v1",
    kind = "VolumeSnapshotContent",
    status = "VolumeSnapshotContentStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentSpec {
    #[serde(default)]
    pub driver: String,
    #[serde(default)]
    pub source: SnapshotSource,
    pub deletion_policy: Option<String>,
    /// The rest (`volumeSnapshotRef`, the class), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "super::Extra::is_empty")]
    #[schemars(skip)]
    pub extra: super::Extra,
}

/// Where a VolumeSnapshotContent's snapshot comes from: an existing snapshot, or a volume to snapshot.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSource {
    pub snapshot_handle: Option<String>,
    pub volume_handle: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotContentStatus {
    pub snapshot_handle: Option<String>,
}

/// The annotations naming the Secret the snapshot controller hands the CSI driver to delete a snapshot.
const DELETION_SECRET_NAME: &str = "snapshot.storage.kubernetes.io/deletion-secret-name";
const DELETION_SECRET_NAMESPACE: &str = "snapshot.storage.kubernetes.io/deletion-secret-namespace";

/// One snapshot of the storage system: the CSI driver, its handle, and the Secret (`namespace/name`) its deletion
/// is done with, when the content names one.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRef {
    pub driver: String,
    pub snapshot_handle: String,
    pub deletion_secret: Option<String>,
}

impl std::fmt::Display for SnapshotRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of driver {}", self.snapshot_handle, self.driver)?;
        match &self.deletion_secret {
            Some(s) => write!(f, " (deletion Secret {s})"),
            None => Ok(()),
        }
    }
}

impl VolumeSnapshotContent {
    /// The snapshot this content holds once the driver made it (`status.snapshotHandle`), or the one it names
    /// (`spec.source.snapshotHandle`, a pre-provisioned content).
    pub fn snapshot(&self) -> Option<SnapshotRef> {
        let made = self.status.as_ref().and_then(|s| s.snapshot_handle.as_deref());
        self.with_handle(made.or(self.spec.source.snapshot_handle.as_deref()))
    }

    /// The snapshot a new content asks the driver to act on: `spec.source.snapshotHandle` alone.
    pub fn requested(&self) -> Option<SnapshotRef> {
        self.with_handle(self.spec.source.snapshot_handle.as_deref())
    }

    /// The namespace of the VolumeSnapshot this content is bound to (`spec.volumeSnapshotRef.namespace`).
    pub fn bound_namespace(&self) -> Option<&str> {
        self.spec.extra.get("volumeSnapshotRef")?.get("namespace")?.as_str()
    }

    fn with_handle(&self, handle: Option<&str>) -> Option<SnapshotRef> {
        let handle = handle.filter(|h| !h.is_empty())?;
        let annotation = |k| self.metadata.annotations.as_ref()?.get(k).map(String::as_str);
        let deletion_secret = match (annotation(DELETION_SECRET_NAMESPACE), annotation(DELETION_SECRET_NAME)) {
            (None, None) => None,
            (ns, name) => Some(format!("{}/{}", ns.unwrap_or(""), name.unwrap_or(""))),
        };
        (!self.spec.driver.is_empty()).then(|| SnapshotRef {
            driver: self.spec.driver.clone(),
            snapshot_handle: handle.to_string(),
            deletion_secret,
        })
    }
}

/// Why Velero may not delete backup `backup` of a tenant's location (`location`, as the message names it) while it
/// has VolumeSnapshotLocation `vsl`: the deletion would also delete the native snapshots the backup's files list,
/// which the tenant writes. The same words from nac's reconciler and from its guard on DeleteBackupRequests.
pub fn deletion_refused(backup: &str, location: &str, vsl: &str) -> String {
    format!(
        "backup {backup} is not deleted: it is on storage location {location}, whose files the tenant writes, and \
         Velero deleting it would also delete the native volume snapshots those files list, through the cluster's \
         volume snapshot locations (such as {vsl}) with their credentials. Ask the cluster administrator"
    )
}

/// The record as the annotation holds it: a JSON list, sorted.
pub fn render(snapshots: &BTreeSet<SnapshotRef>) -> String {
    serde_json::to_string(&snapshots.iter().collect::<Vec<_>>()).unwrap_or_else(|_| "[]".into())
}

/// The record an annotation holds; an unreadable one is an error (nac wrote it, so something else did).
pub fn parse(annotation: &str) -> Result<BTreeSet<SnapshotRef>, String> {
    serde_json::from_str::<Vec<SnapshotRef>>(annotation)
        .map(|v| v.into_iter().collect())
        .map_err(|e| format!("annotation {SNAPSHOTS_ANNOTATION} is not nac's record: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vsc(v: serde_json::Value) -> VolumeSnapshotContent {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_snapshot_is_the_status_handle_else_the_source_one_and_needs_a_driver() {
        let made = vsc(
            json!({"metadata": {"name": "a"}, "spec": {"driver": "d", "source": {"volumeHandle": "v"}},
            "status": {"snapshotHandle": "s"}}),
        );
        assert_eq!(made.snapshot().unwrap().to_string(), "s of driver d");
        let named = vsc(json!({"metadata": {"name": "a"}, "spec": {"driver": "d", "source": {"snapshotHandle": "p"}}}));
        assert_eq!(named.snapshot().unwrap().snapshot_handle, "p");
        let pending = vsc(json!({"metadata": {"name": "a"}, "spec": {"driver": "d", "source": {"volumeHandle": "v"}}}));
        assert_eq!(pending.snapshot(), None);
        let driverless = vsc(json!({"metadata": {"name": "a"}, "spec": {"source": {"snapshotHandle": "p"}}}));
        assert_eq!(driverless.snapshot(), None);
        let secret = vsc(json!({"metadata": {"name": "a", "annotations": {
            "snapshot.storage.kubernetes.io/deletion-secret-name": "s",
            "snapshot.storage.kubernetes.io/deletion-secret-namespace": "kube-system"}},
            "spec": {"driver": "d", "source": {"snapshotHandle": "p"}}}));
        assert_eq!(
            secret.snapshot().unwrap().to_string(),
            "p of driver d (deletion Secret kube-system/s)"
        );
    }

    #[test]
    fn the_record_round_trips_and_refuses_what_nac_did_not_write() {
        let set: BTreeSet<_> = [("d", "2"), ("d", "1")]
            .into_iter()
            .map(|(d, h)| SnapshotRef {
                driver: d.into(),
                snapshot_handle: h.into(),
                deletion_secret: None,
            })
            .collect();
        let text = render(&set);
        assert_eq!(
            text,
            r#"[{"driver":"d","snapshotHandle":"1"},{"driver":"d","snapshotHandle":"2"}]"#
        );
        assert_eq!(parse(&text).unwrap(), set);
        assert!(parse("everything").unwrap_err().contains(SNAPSHOTS_ANNOTATION));
        assert!(parse(r#"[{"driver":"d"}]"#).is_err());
    }
}
