//! The tenant kinds the plugin reads and writes, and where their phases are.

use kube::discovery::ApiResource;
use serde_json::Value;

pub struct Kind {
    pub kind: &'static str,
    pub plural: &'static str,
    /// What the user calls it (`backup`, `restore`, `schedule`).
    pub noun: &'static str,
    /// Where the Velero object's status is mirrored in the tenant object's status.
    pub velero: &'static str,
}

impl Kind {
    const fn new(kind: &'static str, plural: &'static str, noun: &'static str, velero: &'static str) -> Self {
        Kind {
            kind,
            plural,
            noun,
            velero,
        }
    }

    pub fn resource(&self) -> ApiResource {
        ApiResource {
            group: "oadp.openshift.io".into(),
            version: "v1alpha1".into(),
            api_version: "oadp.openshift.io/v1alpha1".into(),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }

    /// The Velero phase when Velero has the object, else nac's phase (New, BackingOff, ...).
    pub fn phase<'v>(&self, o: &'v Value) -> &'v str {
        o["status"][self.velero]["status"]["phase"]
            .as_str()
            .or_else(|| o["status"]["phase"].as_str())
            .unwrap_or("New")
    }

    /// Velero's status of the object (Null before Velero has it).
    pub fn velero_status<'v>(&self, o: &'v Value) -> &'v Value {
        &o["status"][self.velero]["status"]
    }
}

pub const BACKUP: Kind = Kind::new("NonAdminBackup", "nonadminbackups", "backup", "veleroBackup");
pub const RESTORE: Kind = Kind::new("NonAdminRestore", "nonadminrestores", "restore", "veleroRestore");
pub const SCHEDULE: Kind = Kind::new("NonAdminSchedule", "nonadminschedules", "schedule", "veleroSchedule");
pub const LOCATION: Kind = Kind::new(
    "NonAdminBackupStorageLocation",
    "nonadminbackupstoragelocations",
    "backup storage location",
    "veleroBackupStorageLocation",
);
pub const DOWNLOAD: Kind = Kind::new(
    "NonAdminDownloadRequest",
    "nonadmindownloadrequests",
    "download request",
    "velero",
);

/// Velero phases after which nothing changes any more.
pub const FINAL: &[&str] = &["Completed", "PartiallyFailed", "Failed", "FailedValidation"];
