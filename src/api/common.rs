//! Status pieces shared by NonAdminBackup and NonAdminRestore.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use macro_rules_attribute::apply;
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

/// Condition types, reasons and messages, part of the wire contract: NonAdminBackup's and NonAdminRestore's here,
/// the other kinds' in their own modules.
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
    /// nac's own: Accepted=True of a NonAdminRestore marked as a preview, once its table is in
    /// `status.preview` (no Velero Restore is made).
    pub const RESTORE_PREVIEWED: &str = "RestorePreviewed";
    pub const DELETION_PENDING: &str = "DeletionPending";
    pub const VELERO_BACKUP_NOT_FOUND: &str = "VeleroBackupNotFound";
    pub const VELERO_RESTORE_NOT_FOUND: &str = "VeleroRestoreNotFound";
    /// nac's own: False on an object nac took over whose spec the current policy would refuse (its Velero
    /// object is kept); absent otherwise.
    pub const POLICY_COMPLIANT: &str = "PolicyCompliant";
    pub const REFUSED_BY_CURRENT_POLICY: &str = "RefusedByCurrentPolicy";

    /// The reasons and messages of one kind's conditions and events (OADP's strings).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Words {
        /// The Velero kind the tenant kind proxies: "Backup", "Restore".
        pub kind: &'static str,
        pub accepted_reason: &'static str,
        pub accepted_message: &'static str,
        pub invalid_reason: &'static str,
        pub scheduled_reason: &'static str,
        pub scheduled_message: &'static str,
        pub not_found_reason: &'static str,
        /// The end of the "create a new ... to ..." advice when the Velero object vanished.
        pub again: &'static str,
    }

    pub const BACKUP_WORDS: Words = Words {
        kind: "Backup",
        accepted_reason: BACKUP_ACCEPTED,
        accepted_message: "backup accepted",
        invalid_reason: INVALID_BACKUP_SPEC,
        scheduled_reason: BACKUP_SCHEDULED,
        scheduled_message: "Created Velero Backup object",
        not_found_reason: VELERO_BACKUP_NOT_FOUND,
        again: "back up again",
    };

    pub const RESTORE_WORDS: Words = Words {
        kind: "Restore",
        accepted_reason: RESTORE_ACCEPTED,
        accepted_message: "restore accepted",
        invalid_reason: INVALID_RESTORE_SPEC,
        scheduled_reason: RESTORE_SCHEDULED,
        scheduled_message: "Created Velero Restore object",
        not_found_reason: VELERO_RESTORE_NOT_FOUND,
        again: "restore again",
    };

    /// NonAdminDownloadRequest's: OADP's where it has them.
    pub mod download {
        pub const PROCESSED: &str = "Processed";
        pub const SUCCESS: &str = "Success";
        pub const ERROR: &str = "Error";
        pub const BSL_NOT_USED: &str = "NonAdminBackupStorageLocationNotUsed";
        pub const BSL_NOT_USED_MSG: &str =
            "backup does not use nonadminbackupstoragelocation, recreate nadr to process";
        pub const NAB_NOT_AVAILABLE: &str = "NonAdminBackupNotAvailable";
        pub const NAB_NOT_AVAILABLE_MSG: &str = "cannot get nonadminbackup";
        pub const NAR_NOT_AVAILABLE: &str = "NonAdminRestoreNotAvailable";
        pub const NAR_NOT_AVAILABLE_MSG: &str = "cannot get nonadminrestore";
        /// nac's own: the backup or restore exists but is not finished, so its files are not in storage yet.
        pub const NOT_FINISHED: &str = "NotFinished";
        /// nac's own: Velero has not answered the DownloadRequest yet.
        pub const REQUESTED: &str = "Requested";
        /// nac's own condition type for a file that cannot be had (True, reason Error, like OADP's refusals, so
        /// clients that wait for a True/Error condition stop waiting).
        pub const UNAVAILABLE: &str = "DownloadUnavailable";
        /// nac's own condition type: the requester may not read what the file exposes (`crate::rights::download`).
        pub const REQUESTER_RIGHTS_EXCEEDED: &str = "RequesterRightsExceeded";
    }

    /// NonAdminBackupStorageLocation's and its approval requests': OADP's, so its tooling and users' scripts
    /// keep matching them.
    pub mod location {
        pub const ACCEPTED: &str = "Accepted";
        pub const SPEC_VALIDATION: &str = "BslSpecValidation";
        pub const VALIDATION_OK: &str = "NonAdminBackupStorageLocation spec validation successful";
        /// nac's own (not OADP's): the requester may not read the Secret the location names.
        pub const REQUESTER_RIGHTS_EXCEEDED: &str = "RequesterRightsExceeded";
        /// nac's own: an endpoint of the location is not one the policy allows tenants.
        pub const ENDPOINT_NOT_ALLOWED: &str = "EndpointNotAllowed";

        pub const APPROVED: &str = "ClusterAdminApproved";
        pub const SPEC_APPROVED: &str = "BslSpecApproved";
        pub const APPROVED_MSG: &str = "NonAdminBackupStorageLocationRequest approval decision set to Approve";
        pub const APPROVAL_PENDING: &str = "BslSpecApprovalPending";
        pub const PENDING_MSG: &str = "NonAdminBackupStorageLocationRequest approval pending";
        pub const SPEC_REJECTED: &str = "BslSpecRejected";
        pub const REJECTED_MSG: &str = "NonAdminBackupStorageLocationRequest approval decision set to Reject";
        pub const UPDATE_REJECTED: &str = "BslSpecUpdateRejected";
        pub const INVALID_REQUEST_MSG: &str =
            "NonAdminBackupStorageLocationRequest does not contain valid NAC UUID and can not be approved";

        pub const SECRET_SYNCED: &str = "SecretSynced";
        pub const SECRET_CREATED: &str = "SecretCreated";
        pub const SECRET_CREATED_MSG: &str = "Secret successfully created in the OADP namespace";
        pub const SECRET_UPDATED: &str = "SecretUpdated";
        pub const SECRET_UPDATED_MSG: &str = "Secret successfully updated in the OADP namespace";
        pub const SECRET_FAILED: &str = "SecretSyncFailed";
        pub const SECRET_FAILED_MSG: &str = "Failed to sync secret to OADP namespace";

        pub const BSL_SYNCED: &str = "BackupStorageLocationSynced";
        pub const BSL_CREATED: &str = "BackupStorageLocationCreated";
        pub const BSL_CREATED_MSG: &str = "BackupStorageLocation successfully created in the OADP namespace";
        pub const BSL_UPDATED: &str = "BackupStorageLocationUpdated";
        pub const BSL_UPDATED_MSG: &str = "BackupStorageLocation successfully updated in the OADP namespace";
        pub const BSL_FAILED: &str = "BackupStorageLocationSyncError";
        pub const BSL_FAILED_MSG: &str = "BackupStorageLocation failure during sync";

        pub const DELETING: &str = "Deleting";
        pub const DELETION_PENDING: &str = "DeletionPending";
        pub const DELETION_MSG: &str = "backup storage location accepted for deletion";
    }
}

/// Best-effort place of the Velero object in Velero's queue (0 once Velero is done with it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    #[schemars(with = "crate::wire::GoInt")]
    pub estimated_queue_position: i64,
}

/// Conditions as `metav1.Condition`, listed by type.
pub type Conditions = Vec<Condition>;

/// A Velero object nac made for a tenant object, as its status names it: its nacuuid, name and namespace, and a
/// copy of its status (OADP's shape for every kind).
#[apply(crate::wire::tenant_struct!)]
pub struct VeleroRef<S> {
    pub nacuuid: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// A copy of the Velero object's status.
    // Boxed: mostly absent from nac's store copies, where inline it took its whole size.
    pub status: Option<Box<S>>,
}
