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

super::without_spec!(NonAdminRestore, NonAdminRestoreSpec);

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminRestoreStatus {
    pub velero_restore: Option<VeleroRestoreRef>,
    pub data_mover_data_downloads: Option<super::DataMoverDataDownloads>,
    pub file_system_pod_volume_restores: Option<super::FileSystemPodVolumeRestores>,
    pub queue_info: Option<QueueInfo>,
    /// nac's own, on a NonAdminRestore marked as a preview (`nac.oadp.openshift.io/preview`) only: what the
    /// restore would do. An additional field: OADP's clients ignore it.
    pub preview: Option<RestorePreview>,
}

/// What a restore would do, judged as the restore itself would be (policy, the requester's rights, the backup's
/// contents, what the namespace holds now), without doing it.
#[apply(crate::wire::tenant_struct!)]
pub struct RestorePreview {
    /// The NonAdminRestore's generation this preview judged.
    pub observed_generation: Option<i64>,
    /// The namespace the restore would write into.
    pub namespace: String,
    /// What Velero would do with an object that exists already: `none` (skip it) or `update`.
    pub existing_resource_policy: String,
    /// Empty when the restore would be made; otherwise why it would be refused (the table says what it holds).
    pub refused: Option<String>,
    /// One row per kind the backup holds in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<PreviewKind>,
    /// What the counts do not account for (e.g. a label selector, which needs the items' bodies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One kind of a [`RestorePreview`]: its items by what the restore would do with them.
#[apply(crate::wire::tenant_struct!)]
pub struct PreviewKind {
    /// The kind as Velero's filters name it (`deployments.apps`, `configmaps`).
    pub kind: String,
    /// Not in the namespace now: would be created.
    pub create: Option<PreviewItems>,
    /// In the namespace now: skipped (`existingResourcePolicy` none).
    pub skip: Option<PreviewItems>,
    /// In the namespace now: updated (`existingResourcePolicy: update`).
    pub update: Option<PreviewItems>,
    /// Left out of the restore, for `reason`.
    pub left_out: Option<PreviewItems>,
    /// Why the kind is left out: the rule of the policy or spec, or the right the requester lacks.
    pub reason: Option<String>,
}

/// How many items, and the first few names.
#[apply(crate::wire::tenant_struct!)]
pub struct PreviewItems {
    pub count: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// The Velero Restore behind a NonAdminRestore.
pub type VeleroRestoreRef = super::VeleroRef<RestoreStatus>;
