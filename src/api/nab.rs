//! NonAdminBackup: a namespace user's request for a Velero Backup of their own namespace.

use super::{Conditions, NonAdminPhase, QueueInfo};
use crate::velero::{BackupSpec, BackupStatus, DeleteBackupRequestStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "oadp.openshift.io",
    version = "v1alpha1",
    kind = "NonAdminBackup",
    doc = "A namespace user's request for a Velero backup of their own namespace",
    plural = "nonadminbackups",
    shortname = "nab",
    namespaced,
    status = "NonAdminBackupStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Velero phase","type":"string","jsonPath":".status.veleroBackup.status.phase"}"#,
    printcolumn = r#"{"name":"Queue position","type":"integer","jsonPath":".status.queueInfo.estimatedQueuePosition"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminBackupSpec {
    /// The Velero BackupSpec; the admin policy decides what may be set.
    pub backup_spec: BackupSpec,
    /// Set to true to delete the Velero backup and its data in object storage, then this object.
    #[serde(default, skip_serializing_if = "crate::velero::is_false")]
    pub delete_backup: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminBackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NonAdminPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velero_backup: Option<VeleroBackupRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velero_delete_backup_request: Option<VeleroDeleteBackupRequestRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_mover_data_uploads: Option<DataMoverDataUploads>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_system_pod_volume_backups: Option<FileSystemPodVolumeBackups>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_info: Option<QueueInfo>,
}

/// The Velero Backup behind a NonAdminBackup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VeleroBackupRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacuuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The spec the Velero Backup was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<BackupSpec>,
    /// A copy of the Velero Backup's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BackupStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VeleroDeleteBackupRequestRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacuuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeleteBackupRequestStatus>,
}

/// Counts of the backup's DataUploads by phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataMoverDataUploads {
    #[serde(default)]
    pub total: i64,
    #[serde(default)]
    pub new: i64,
    #[serde(default)]
    pub accepted: i64,
    #[serde(default)]
    pub prepared: i64,
    #[serde(default)]
    pub in_progress: i64,
    #[serde(default)]
    pub canceling: i64,
    #[serde(default)]
    pub canceled: i64,
    #[serde(default)]
    pub failed: i64,
    #[serde(default)]
    pub completed: i64,
}

/// Counts of the backup's PodVolumeBackups by phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSystemPodVolumeBackups {
    #[serde(default)]
    pub total: i64,
    #[serde(default)]
    pub new: i64,
    #[serde(default)]
    pub in_progress: i64,
    #[serde(default)]
    pub failed: i64,
    #[serde(default)]
    pub completed: i64,
}
