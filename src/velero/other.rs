//! Smaller Velero kinds nac touches: DeleteBackupRequest, DownloadRequest, DataUpload, PodVolumeBackup,
//! DataDownload, PodVolumeRestore, BackupStorageLocation (tenants' own locations are built from NonAdminBackupStorageLocations; restores read
//! its phase).

use super::Extra;
use kube::CustomResource;
use macro_rules_attribute::apply;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Asks Velero to delete a backup and its data in object storage.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(kind = "DeleteBackupRequest", status = "DeleteBackupRequestStatus")]
#[kube(group = "velero.io")]
#[kube(version = "v1")]
#[kube(namespaced)]
#[serde(rename_all = "camelCase")]
pub struct DeleteBackupRequestSpec {
    pub backup_name: String,
}

#[apply(crate::wire::velero_struct!)]
pub struct DeleteBackupRequestStatus {
    /// New, InProgress or Processed.
    pub phase: Option<String>,
    pub errors: Option<Vec<String>>,
}

/// What nac reads of data-mover and file-system backup/restore objects: the phase (it counts them by phase) and
/// the bytes done of their total (it sums them for the tenant, who cannot read these objects).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeObjectStatus {
    pub phase: Option<String>,
    pub progress: Option<DataMoveProgress>,
}

/// Velero's `DataMoveOperationProgress` (a DataUpload's, a PodVolumeBackup's `status.progress`).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataMoveProgress {
    pub total_bytes: Option<i64>,
    pub bytes_done: Option<i64>,
}

macro_rules! phase_only_kind {
    ($spec:ident, $kind:literal, $version:literal) => {
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[kube(group = "velero.io", version = $version, kind = $kind, namespaced, status = "VolumeObjectStatus")]
        pub struct $spec {
            #[serde(flatten)]
            #[schemars(skip)]
            pub rest: Extra,
        }
    };
}

/// A Velero VolumeSnapshotLocation: nac only asks whether Velero has any (deleting a backup on a tenant's location).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "velero.io", version = "v1", kind = "VolumeSnapshotLocation", namespaced)]
pub struct VolumeSnapshotLocationSpec {
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Extra,
}

phase_only_kind!(DataUploadSpec, "DataUpload", "v2alpha1");
phase_only_kind!(DataDownloadSpec, "DataDownload", "v2alpha1");
phase_only_kind!(PodVolumeBackupSpec, "PodVolumeBackup", "v1");
phase_only_kind!(PodVolumeRestoreSpec, "PodVolumeRestore", "v1");

/// Velero BackupStorageLocationSpec: where backups are stored and with which credential.
#[apply(crate::wire::velero_kind!)]
#[kube(kind = "BackupStorageLocation", status = "BackupStorageLocationStatus")]
pub struct BackupStorageLocationSpec {
    /// The object store plugin, e.g. `aws`.
    pub provider: String,
    pub object_storage: ObjectStorageLocation,
    /// Provider-specific settings (region, s3Url, ...).
    pub config: Option<BTreeMap<String, String>>,
    /// The key of a Secret in Velero's namespace holding the credential.
    pub credential: Option<SecretKeyRef>,
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub default: bool,
    /// ReadWrite or ReadOnly.
    #[schemars(extend("enum" = ["ReadOnly", "ReadWrite"]))]
    pub access_mode: Option<String>,
    pub backup_sync_period: Option<String>,
    pub validation_frequency: Option<String>,
}

#[apply(crate::wire::tenant_struct!)]
pub struct ObjectStorageLocation {
    pub bucket: String,
    pub prefix: Option<String>,
    /// A PEM bundle, base64-encoded.
    #[schemars(extend("format" = "byte"))]
    pub ca_cert: Option<String>,
}

/// `corev1.SecretKeySelector` as a BSL names its credential. Read leniently (a missing name or key reads as
/// empty, which the policy refuses with OADP's message); its schema is Kubernetes' own.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecretKeyRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub key: String,
    pub optional: Option<bool>,
}

impl JsonSchema for SecretKeyRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SecretKeySelector".into()
    }
    fn inline_schema() -> bool {
        true
    }
    /// The key is required, the name defaults to empty, and the selector is replaced as a whole by server-side
    /// apply, as Kubernetes declares.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "A key of a Secret in the object's namespace.",
            "properties": {
                "key": {"type": "string", "description": "The key of the secret to select from."},
                "name": {"type": "string", "default": "", "description": "The name of the Secret."},
                "optional": {"type": "boolean", "description": "Whether the Secret or its key may be missing."}
            },
            "required": ["key"],
            "x-kubernetes-map-type": "atomic"
        })
    }
}

/// Velero BackupStorageLocationStatus.
#[apply(crate::wire::velero_struct!)]
pub struct BackupStorageLocationStatus {
    /// Available or Unavailable.
    pub phase: Option<String>,
    /// ReadWrite or ReadOnly.
    pub access_mode: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub last_synced_time: Option<String>,
    pub last_synced_revision: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub last_validation_time: Option<String>,
    pub message: Option<String>,
}

/// Asks Velero for a signed URL to one file of a backup or restore in object storage (its log, resource list,
/// contents, results, ...). Velero answers in the status and deletes the request once it expired.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(kind = "DownloadRequest", status = "DownloadRequestStatus")]
#[kube(group = "velero.io")]
#[kube(version = "v1")]
#[kube(namespaced)]
#[serde(rename_all = "camelCase")]
pub struct DownloadRequestSpec {
    pub target: DownloadTarget,
}

/// What to download: a kind of file (`BackupLog`, `RestoreResults`, ...) of the Velero Backup or Restore `name`.
/// The kind stays a string here: a newer Velero's kinds must not break nac's watch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DownloadTarget {
    pub kind: String,
    pub name: String,
}

/// Velero DownloadRequestStatus.
#[apply(crate::wire::tenant_struct!)]
pub struct DownloadRequestStatus {
    /// New or Processed.
    pub phase: Option<String>,
    /// The signed URL of the file, once Processed.
    #[serde(rename = "downloadURL")]
    pub download_url: Option<String>,
    /// When the URL stops working and Velero deletes the request (RFC 3339).
    #[schemars(with = "Option<crate::wire::Time>")]
    pub expiration: Option<String>,
}
