//! NonAdminBackupStorageLocation: a namespace user's own object storage, used by their backups once the admin
//! approved it; and NonAdminBackupStorageLocationRequest, the approval request in Velero's namespace.

use crate::velero::{BackupStorageLocationSpec, BackupStorageLocationStatus};
use macro_rules_attribute::apply;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[apply(crate::wire::tenant_kind!)]
#[kube(
    kind = "NonAdminBackupStorageLocation",
    shortname = "nabsl",
    status = "NonAdminBackupStorageLocationStatus"
)]
#[kube(doc = "A namespace user's own backup storage location, used once the cluster admin approved it")]
#[kube(
    printcolumn = r#"{"name":"Request-Approved","type":"string","jsonPath":".status.conditions[?(@.type=='ClusterAdminApproved')].status"}"#
)]
#[kube(printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(
    printcolumn = r#"{"name":"Velero-Phase","type":"string","jsonPath":".status.veleroBackupStorageLocation.status.phase"}"#
)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
#[kube(attr = "cfg_attr(all(), serde(default = \"NonAdminBackupStorageLocation::without_spec\"))")]
pub struct NonAdminBackupStorageLocationSpec {
    /// The Velero BackupStorageLocationSpec; `credential` names a Secret of this namespace.
    pub backup_storage_location_spec: BackupStorageLocationSpec,
    /// True when the object came without a spec (see the [`api`](super) module): never acted on.
    #[serde(skip)]
    #[schemars(skip)]
    pub unset: bool,
}

super::without_spec!(NonAdminBackupStorageLocation, NonAdminBackupStorageLocationSpec);

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminBackupStorageLocationStatus {
    pub velero_backup_storage_location: Option<VeleroBackupStorageLocationRef>,
}

/// The admin's decision on a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    Approve,
    Reject,
    Pending,
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RequestPhase {
    Pending,
    Approved,
    Rejected,
}

impl ApprovalDecision {
    pub fn phase(decision: Option<ApprovalDecision>) -> RequestPhase {
        match decision {
            Some(ApprovalDecision::Approve) => RequestPhase::Approved,
            Some(ApprovalDecision::Reject) => RequestPhase::Rejected,
            Some(ApprovalDecision::Pending) | None => RequestPhase::Pending,
        }
    }
}

#[apply(crate::wire::tenant_kind!)]
#[kube(
    kind = "NonAdminBackupStorageLocationRequest",
    shortname = "nabslrequest",
    status = "NonAdminBackupStorageLocationRequestStatus"
)]
#[kube(
    doc = "The cluster admin's approval of a NonAdminBackupStorageLocation (in Velero's namespace, named by its nacuuid)"
)]
#[kube(printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(
    printcolumn = r#"{"name":"Request-Namespace","type":"string","jsonPath":".status.nonAdminBackupStorageLocation.namespace"}"#
)]
#[kube(
    printcolumn = r#"{"name":"Request-Name","type":"string","jsonPath":".status.nonAdminBackupStorageLocation.name"}"#
)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
// Without a spec: no decision yet (pending).
#[kube(derive = "Default")]
#[kube(attr = "cfg_attr(all(), serde(default))")]
pub struct NonAdminBackupStorageLocationRequestSpec {
    /// `approve`, `reject` or `pending`: set by the cluster admin.
    pub approval_decision: Option<ApprovalDecision>,
}

#[apply(crate::wire::tenant_struct!)]
pub struct NonAdminBackupStorageLocationRequestStatus {
    pub phase: Option<RequestPhase>,
    pub non_admin_backup_storage_location: Option<RequestedLocation>,
}

/// The NonAdminBackupStorageLocation a request is about, and the spec the admin decides on.
#[apply(crate::wire::tenant_struct!)]
pub struct RequestedLocation {
    pub nacuuid: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub requested_spec: BackupStorageLocationSpec,
}

crate::tags_from_meta!(NonAdminBackupStorageLocationRequest);

/// The Velero BackupStorageLocation behind a NonAdminBackupStorageLocation.
pub type VeleroBackupStorageLocationRef = super::VeleroRef<BackupStorageLocationStatus>;
