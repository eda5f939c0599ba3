//! NonAdminBackupStorageLocation: a namespace user's own object storage, used by their backups once the admin
//! approved it; and NonAdminBackupStorageLocationRequest, the approval request in Velero's namespace.

use super::{Conditions, NonAdminPhase};
use crate::velero::{BackupStorageLocationSpec, BackupStorageLocationStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "oadp.openshift.io",
    version = "v1alpha1",
    kind = "NonAdminBackupStorageLocation",
    doc = "A namespace user's own backup storage location, used once the cluster admin approved it",
    plural = "nonadminbackupstoragelocations",
    shortname = "nabsl",
    namespaced,
    status = "NonAdminBackupStorageLocationStatus",
    printcolumn = r#"{"name":"Request-Approved","type":"string","jsonPath":".status.conditions[?(@.type=='ClusterAdminApproved')].status"}"#,
    printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Velero-Phase","type":"string","jsonPath":".status.veleroBackupStorageLocation.status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminBackupStorageLocationSpec {
    /// The Velero BackupStorageLocationSpec; `credential` names a Secret of this namespace.
    pub backup_storage_location_spec: BackupStorageLocationSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminBackupStorageLocationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NonAdminPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Conditions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "oadp.openshift.io",
    version = "v1alpha1",
    kind = "NonAdminBackupStorageLocationRequest",
    doc = "The cluster admin's approval of a NonAdminBackupStorageLocation (in Velero's namespace, named by its nacuuid)",
    plural = "nonadminbackupstoragelocationrequests",
    shortname = "nabslrequest",
    namespaced,
    status = "NonAdminBackupStorageLocationRequestStatus",
    printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Request-Namespace","type":"string","jsonPath":".status.nonAdminBackupStorageLocation.namespace"}"#,
    printcolumn = r#"{"name":"Request-Name","type":"string","jsonPath":".status.nonAdminBackupStorageLocation.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminBackupStorageLocationRequestSpec {
    /// `approve`, `reject` or `pending`: set by the cluster admin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_decision: Option<ApprovalDecision>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NonAdminBackupStorageLocationRequestStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RequestPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_admin_backup_storage_location: Option<RequestedLocation>,
}

/// The NonAdminBackupStorageLocation a request is about, and the spec the admin decides on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestedLocation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacuuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub requested_spec: BackupStorageLocationSpec,
}

crate::tags_from_meta!(NonAdminBackupStorageLocationRequest);

/// The Velero BackupStorageLocation behind a NonAdminBackupStorageLocation.
pub type VeleroBackupStorageLocationRef = super::VeleroRef<BackupStorageLocationStatus>;
