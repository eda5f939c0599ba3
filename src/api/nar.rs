//! NonAdminRestore: a namespace user's request to restore one of their NonAdminBackups into their namespace.

use super::{Conditions, NonAdminPhase, QueueInfo};
use crate::velero::{RestoreSpec, RestoreStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "oadp.openshift.io",
    version = "v1alpha1",
    kind = "NonAdminRestore",
    doc = "A namespace user's request to restore one of their NonAdminBackups",
    plural = "nonadminrestores",
    shortname = "nar",
    namespaced,
    status = "NonAdminRestoreStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Velero phase","type":"string","jsonPath":".status.veleroRestore.status.phase"}"#,
    printcolumn = r#"{"name":"Queue position","type":"integer","jsonPath":".status.queueInfo.estimatedQueuePosition"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminRestoreSpec {
    /// The Velero RestoreSpec; `backupName` names a NonAdminBackup in this namespace.
    pub restore_spec: RestoreSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminRestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NonAdminPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub velero_restore: Option<VeleroRestoreRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_mover_data_downloads: Option<super::DataMoverDataDownloads>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_system_pod_volume_restores: Option<super::FileSystemPodVolumeRestores>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_info: Option<QueueInfo>,
}

/// The Velero Restore behind a NonAdminRestore.
pub type VeleroRestoreRef = super::VeleroRef<RestoreStatus>;
