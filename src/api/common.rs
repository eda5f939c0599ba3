//! Status pieces shared by NonAdminBackup and NonAdminRestore.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// High-level lifecycle summary; only ever moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum NonAdminPhase {
    /// Seen by the controller, not yet validated.
    New,
    /// Invalid spec; not reconciled further until the user changes it.
    BackingOff,
    /// Validated, and the Velero object was created.
    Created,
    /// Marked for deletion; the Velero object is being removed.
    Deleting,
}

impl NonAdminPhase {
    pub fn as_str(&self) -> &'static str {
        match self {
            NonAdminPhase::New => "New",
            NonAdminPhase::BackingOff => "BackingOff",
            NonAdminPhase::Created => "Created",
            NonAdminPhase::Deleting => "Deleting",
        }
    }

    /// Whether a move from `self` to `next` keeps the phase moving forward (or staying put).
    pub fn may_become(self, next: NonAdminPhase) -> bool {
        use NonAdminPhase::*;
        match (self, next) {
            (a, b) if a == b => true,
            // Fixing an invalid spec is the one way out of BackingOff.
            (New, _) | (BackingOff, Created) | (_, Deleting) => true,
            _ => false,
        }
    }
}

/// Condition types used on NonAdminBackup and NonAdminRestore.
pub mod condition {
    pub const ACCEPTED: &str = "Accepted";
    pub const QUEUED: &str = "Queued";
    pub const DELETING: &str = "Deleting";

    pub const INVALID_BACKUP_SPEC: &str = "InvalidBackupSpec";
    pub const BACKUP_ACCEPTED: &str = "BackupAccepted";
    pub const BACKUP_SCHEDULED: &str = "BackupScheduled";
    pub const INVALID_RESTORE_SPEC: &str = "InvalidRestoreSpec";
    pub const RESTORE_ACCEPTED: &str = "RestoreAccepted";
    pub const RESTORE_SCHEDULED: &str = "RestoreScheduled";
    pub const DELETION_PENDING: &str = "DeletionPending";
    pub const VELERO_BACKUP_NOT_FOUND: &str = "VeleroBackupNotFound";
    pub const VELERO_RESTORE_NOT_FOUND: &str = "VeleroRestoreNotFound";
    /// nac's own: False on an object nac took over whose spec the current policy would refuse (its Velero
    /// object is kept); absent otherwise.
    pub const POLICY_COMPLIANT: &str = "PolicyCompliant";
    pub const REFUSED_BY_CURRENT_POLICY: &str = "RefusedByCurrentPolicy";
}

/// Best-effort place of the Velero object in Velero's queue (0 once Velero is done with it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    pub estimated_queue_position: i64,
}

/// Conditions as `metav1.Condition`, listed by type.
pub type Conditions = Vec<Condition>;

/// A Velero object nac made for a tenant object, as its status names it: its nacuuid, name and namespace, and a
/// copy of its status (OADP's shape for every kind).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VeleroRef<S> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacuuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A copy of the Velero object's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<S>,
}
