//! NonAdminRestore: a namespace user's request to restore one of their NonAdminBackups into their namespace.

use super::QueueInfo;
use crate::velero::{RestoreSpec, RestoreStatus};
use macro_rules_attribute::apply;

#[apply(crate::wire::tenant_kind!)]
#[kube(kind = "NonAdminRestore", shortname = "nar", status = "NonAdminRestoreStatus")]
#[kube(doc = "A namespace user's request to restore one of their NonAdminBackups")]
#[kube(printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Velero-Phase","type":"string","jsonPath":".status.veleroRestore.status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
// nac's own column, shown by `kubectl get -o wide` only: the columns above are OADP's, in OADP's order.
#[kube(
    printcolumn = r#"{"name":"Queue-Position","type":"integer","jsonPath":".status.queueInfo.estimatedQueuePosition","priority":1}"#
)]
#[kube(attr = "cfg_attr(all(), serde(default = \"NonAdminRestore::without_spec\"))")]
pub struct NonAdminRestoreSpec {
    /// The Velero RestoreSpec; `backupName` names a NonAdminBackup in this namespace.
    pub restore_spec: RestoreSpec,
    /// True when the object came without a spec (see the [`api`](super) module): never acted on.
    #[serde(skip)]
    #[schemars(skip)]
    pub unset: bool,
}

impl NonAdminRestore {
    /// What an object without `spec` decodes to (see the [`api`](super) module).
    fn without_spec() -> Self {
        let mut o = NonAdminRestore::new(
            "",
            NonAdminRestoreSpec {
                unset: true,
                ..Default::default()
            },
        );
        o.metadata = Default::default();
        o
    }
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
