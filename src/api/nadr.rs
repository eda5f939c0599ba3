//! NonAdminDownloadRequest: a namespace user's way to a file of their own backup or restore in object storage
//! (its log, resource list, contents, results, ...), through a Velero DownloadRequest nac makes for it.

use crate::velero::DownloadRequestStatus;
use kube::CustomResource;
use macro_rules_attribute::apply;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    kind = "NonAdminDownloadRequest",
    shortname = "nadr",
    status = "NonAdminDownloadRequestStatus"
)]
#[kube(group = "oadp.openshift.io")]
#[kube(version = "v1alpha1")]
#[kube(doc = "A namespace user's request for a signed URL to a file of one of their backups or restores")]
#[kube(namespaced)]
#[kube(printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
#[kube(attr = "cfg_attr(all(), serde(default = \"NonAdminDownloadRequest::without_spec\"))")]
#[serde(rename_all = "camelCase")]
// A request is answered once: a different file is a new request.
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable: create a new NonAdminDownloadRequest"}]))]
pub struct NonAdminDownloadRequestSpec {
    pub target: NonAdminDownloadTarget,
    /// True when the object came without a spec (see the [`api`](super) module): never acted on.
    #[serde(skip)]
    #[schemars(skip)]
    pub unset: bool,
}

super::without_spec!(NonAdminDownloadRequest, NonAdminDownloadRequestSpec);

/// The file: its kind, and the NonAdminBackup (backup kinds) or NonAdminRestore (restore kinds) of this namespace
/// it belongs to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NonAdminDownloadTarget {
    pub kind: DownloadTargetKind,
    pub name: String,
}

/// Velero's DownloadTargetKinds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DownloadTargetKind {
    #[default]
    BackupLog,
    BackupContents,
    BackupVolumeSnapshots,
    BackupItemOperations,
    BackupResourceList,
    BackupResults,
    RestoreLog,
    RestoreResults,
    RestoreResourceList,
    RestoreItemOperations,
    CSIBackupVolumeSnapshots,
    CSIBackupVolumeSnapshotContents,
    BackupVolumeInfos,
    RestoreVolumeInfo,
}

impl DownloadTargetKind {
    /// Velero's name of the kind.
    pub fn as_str(self) -> &'static str {
        use DownloadTargetKind::*;
        match self {
            BackupLog => "BackupLog",
            BackupContents => "BackupContents",
            BackupVolumeSnapshots => "BackupVolumeSnapshots",
            BackupItemOperations => "BackupItemOperations",
            BackupResourceList => "BackupResourceList",
            BackupResults => "BackupResults",
            RestoreLog => "RestoreLog",
            RestoreResults => "RestoreResults",
            RestoreResourceList => "RestoreResourceList",
            RestoreItemOperations => "RestoreItemOperations",
            CSIBackupVolumeSnapshots => "CSIBackupVolumeSnapshots",
            CSIBackupVolumeSnapshotContents => "CSIBackupVolumeSnapshotContents",
            BackupVolumeInfos => "BackupVolumeInfos",
            RestoreVolumeInfo => "RestoreVolumeInfo",
        }
    }

    /// Whether the file belongs to a restore (`name` is a NonAdminRestore), not a backup.
    pub fn is_restore(self) -> bool {
        use DownloadTargetKind::*;
        matches!(
            self,
            RestoreLog | RestoreResults | RestoreResourceList | RestoreItemOperations | RestoreVolumeInfo
        )
    }
}

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminDownloadRequestStatus {
    /// Velero's answer: a copy of the Velero DownloadRequest's status (`downloadURL`, `expiration`).
    pub velero: Option<VeleroDownloadRequest>,
}

/// Velero's answer, as the Velero DownloadRequest's status holds it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VeleroDownloadRequest {
    pub status: Option<DownloadRequestStatus>,
}
