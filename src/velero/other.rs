//! Smaller Velero kinds nac touches: DeleteBackupRequest, DataUpload, PodVolumeBackup, DataDownload, PodVolumeRestore,
//! BackupStorageLocation (only its phase: whether a restore can read from it).

use super::Extra;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Asks Velero to delete a backup and its data in object storage.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "DeleteBackupRequest",
    namespaced,
    status = "DeleteBackupRequestStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct DeleteBackupRequestSpec {
    pub backup_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DeleteBackupRequestStatus {
    /// New, InProgress or Processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Only the phase of data-mover and file-system backup/restore objects matters to nac (it counts them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PhaseOnlyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

macro_rules! phase_only_kind {
    ($spec:ident, $kind:literal, $version:literal) => {
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[kube(group = "velero.io", version = $version, kind = $kind, namespaced, status = "PhaseOnlyStatus")]
        pub struct $spec {
            #[serde(flatten)]
            #[schemars(skip)]
            pub rest: Extra,
        }
    };
}

phase_only_kind!(DataUploadSpec, "DataUpload", "v2alpha1");
phase_only_kind!(DataDownloadSpec, "DataDownload", "v2alpha1");
phase_only_kind!(PodVolumeBackupSpec, "PodVolumeBackup", "v1");
phase_only_kind!(PodVolumeRestoreSpec, "PodVolumeRestore", "v1");
phase_only_kind!(BackupStorageLocationSpec, "BackupStorageLocation", "v1");
