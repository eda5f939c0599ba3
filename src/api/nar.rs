//! NonAdminRestore: a namespace user's request to restore one of their NonAdminBackups into their namespace.

use super::QueueInfo;
use crate::velero::{RestoreSpec, RestoreStatus};
use macro_rules_attribute::apply;

#[apply(crate::wire::tenant_kind!)]
#[kube(kind = "NonAdminRestore", shortname = "nar", status = "NonAdminRestoreStatus")]
#[kube(doc = "A namespace user's request to restore one of their NonAdminBackups")]
#[kube(printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Velero phase","type":"string","jsonPath":".status.veleroRestore.status.phase"}"#)]
#[kube(
    printcolumn = r#"{"name":"Queue position","type":"integer","jsonPath":".status.queueInfo.estimatedQueuePosition"}"#
)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
pub struct NonAdminRestoreSpec {
    /// The Velero RestoreSpec; `backupName` names a NonAdminBackup in this namespace.
    pub restore_spec: RestoreSpec,
}

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminRestoreStatus {
    pub velero_restore: Option<VeleroRestoreRef>,
    pub data_mover_data_downloads: Option<super::DataMoverDataDownloads>,
    pub file_system_pod_volume_restores: Option<super::FileSystemPodVolumeRestores>,
    pub queue_info: Option<QueueInfo>,
}

/// The Velero Restore behind a NonAdminRestore.
pub type VeleroRestoreRef = super::VeleroRef<RestoreStatus>;
