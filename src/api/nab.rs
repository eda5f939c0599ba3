//! NonAdminBackup: a namespace user's request for a Velero Backup of their own namespace.

use super::QueueInfo;
use crate::velero::{BackupSpec, BackupStatus, DeleteBackupRequestStatus};
use macro_rules_attribute::apply;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[apply(crate::wire::tenant_kind!)]
#[kube(kind = "NonAdminBackup", shortname = "nab", status = "NonAdminBackupStatus")]
#[kube(doc = "A namespace user's request for a Velero backup of their own namespace")]
#[kube(printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Velero-Phase","type":"string","jsonPath":".status.veleroBackup.status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
// nac's own column, shown by `kubectl get -o wide` only: the columns above are OADP's, in OADP's order.
#[kube(
    printcolumn = r#"{"name":"Queue-Position","type":"integer","jsonPath":".status.queueInfo.estimatedQueuePosition","priority":1}"#
)]
#[kube(attr = "cfg_attr(all(), serde(default = \"NonAdminBackup::without_spec\"))")]
pub struct NonAdminBackupSpec {
    /// The Velero BackupSpec; the admin policy decides what may be set.
    // Shared: a BackupSpec is 0.7 KiB of mostly empty fields, and the store's copy of a settled NonAdminBackup
    // (read only to admit it) points at one empty spec for all (`leave_out_spec`).
    pub backup_spec: Arc<BackupSpec>,
    /// Set to true to delete the Velero backup and its data in object storage, then this object.
    #[serde(default, skip_serializing_if = "crate::velero::is_false")]
    pub delete_backup: bool,
    /// True when the object came without a spec (see the [`api`](super) module): never acted on.
    #[serde(skip)]
    #[schemars(skip)]
    pub unset: bool,
}

super::without_spec!(NonAdminBackup, NonAdminBackupSpec);

impl NonAdminBackupSpec {
    /// The store's copy of a settled NonAdminBackup keeps no spec of its own (see `Tenant::leave_out_spec`).
    pub fn leave_out_spec(&mut self) {
        self.backup_spec = crate::velero::empty_backup_spec();
    }

    /// Whether the spec was left out: never to be read as the user's.
    pub fn spec_left_out(&self) -> bool {
        Arc::ptr_eq(&self.backup_spec, &crate::velero::empty_backup_spec())
    }
}

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminBackupStatus {
    pub velero_backup: Option<VeleroBackupRef>,
    pub velero_delete_backup_request: Option<VeleroDeleteBackupRequestRef>,
    pub data_mover_data_uploads: Option<DataMoverDataUploads>,
    pub file_system_pod_volume_backups: Option<FileSystemPodVolumeBackups>,
    pub queue_info: Option<QueueInfo>,
    /// The uploader of the backup's file-system volume backups (`kopia` or `restic`, Velero's name), for OADP's
    /// `describe`; absent when it made none.
    pub uploader_type: Option<String>,
    /// nac's own: the bytes of volume data copied of the total, summed over the backup's DataUploads and
    /// PodVolumeBackups as Velero reports them (tenants cannot read those objects); absent until one reports a
    /// total.
    pub volume_data_progress: Option<VolumeDataProgress>,
}

/// Bytes of a backup's volume data copied so far of the total (Velero's per-volume progress, summed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeDataProgress {
    pub bytes_done: i64,
    pub total_bytes: i64,
}

/// The Velero Backup behind a NonAdminBackup.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VeleroBackupRef {
    pub nacuuid: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// The spec the Velero Backup was created with.
    // Boxed, as the NonAdminBackup's own spec.
    pub spec: Option<Box<BackupSpec>>,
    /// A copy of the Velero Backup's status.
    // Boxed: a compact copy leaves it out, and inline it took 216 of a settled NonAdminBackup's bytes in nac's
    // store (BENCHMARKS.md §6).
    pub status: Option<Box<BackupStatus>>,
    /// Set on a compact copy (nac's in-memory store): the fingerprint of the spec and status it left out.
    #[serde(skip)]
    #[schemars(skip)]
    pub compact: Option<u64>,
}

impl VeleroBackupRef {
    /// A fingerprint of the spec and status copies (stable within one process).
    pub fn fingerprint(&self) -> u64 {
        self.compact
            .unwrap_or_else(|| Self::fingerprint_of(self.spec.as_deref(), self.status.as_deref()))
    }

    /// The fingerprint of a copy holding `spec` and `status`, computed without making the copy.
    pub fn fingerprint_of(spec: Option<&BackupSpec>, status: Option<&BackupStatus>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        serde_json::to_vec(&(spec, status)).unwrap_or_default().hash(&mut h);
        h.finish()
    }

    /// Leaves out what the reconcilers never read from their store (the spec copy, the untyped parts of the
    /// status copy), keeping their fingerprint: a NonAdminBackup in memory is then about half its size.
    pub fn make_compact(&mut self) {
        if self.compact.is_some() {
            return;
        }
        self.compact = Some(self.fingerprint());
        self.spec = None;
        if let Some(s) = self.status.as_mut() {
            s.extra = Default::default();
        }
    }
}

/// Equal when they name the same Velero Backup with the same copies; a compact copy compares by fingerprint.
impl PartialEq for VeleroBackupRef {
    fn eq(&self, o: &Self) -> bool {
        self.nacuuid == o.nacuuid
            && self.name == o.name
            && self.namespace == o.namespace
            && match (self.compact, o.compact) {
                (None, None) => self.spec == o.spec && self.status == o.status,
                _ => self.fingerprint() == o.fingerprint(),
            }
    }
}

/// A struct of counts by phase, as OADP writes them: Go `int`s, a zero count left out.
macro_rules! phase_counts {
    ($(#[$meta:meta])* $name:ident { $($phase:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $(
                #[serde(default, skip_serializing_if = "is_zero")]
                #[schemars(with = "crate::wire::GoInt")]
                pub $phase: i64,
            )*
        }
    };
}

phase_counts!(
    /// Counts of a backup's DataUploads (a restore's DataDownloads) by phase; a zero count is left out, as OADP writes
    /// them.
    DataMoverDataUploads { total, new, accepted, prepared, in_progress, canceling, canceled, failed, completed }
);

phase_counts!(
    /// Counts of a backup's PodVolumeBackups (a restore's PodVolumeRestores) by phase; a zero count is left out.
    FileSystemPodVolumeBackups { total, new, in_progress, failed, completed }
);

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Counts of a restore's DataDownloads by phase (OADP's field, the same shape as a backup's DataUploads).
pub type DataMoverDataDownloads = DataMoverDataUploads;
/// Counts of a restore's PodVolumeRestores by phase (OADP's field, the same shape as a backup's).
pub type FileSystemPodVolumeRestores = FileSystemPodVolumeBackups;

/// The DeleteBackupRequest nac made for a NonAdminBackup with `deleteBackup: true`.
pub type VeleroDeleteBackupRequestRef = super::VeleroRef<DeleteBackupRequestStatus>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_compact_copy_compares_by_fingerprint() {
        let full: VeleroBackupRef = serde_json::from_value(json!({
            "nacuuid": "u", "name": "u", "namespace": "velero",
            "spec": {"includedNamespaces": ["team-a"], "excludedResources": ["secrets", "nonadminbackups"]},
            "status": {"phase": "Completed", "expiration": "2026-12-25T00:00:00Z",
                       "progress": {"totalItems": 9, "itemsBackedUp": 9}}
        }))
        .unwrap();
        let mut compact = full.clone();
        compact.make_compact();
        assert!(compact.spec.is_none());
        let st = compact.status.as_ref().unwrap();
        assert!(st.extra.is_empty(), "{st:?}");
        // What the reconcilers read of a stored copy stays.
        assert_eq!(st.phase.as_deref(), Some("Completed"));
        assert_eq!(st.expiration.as_deref(), Some("2026-12-25T00:00:00Z"));
        assert_eq!(compact, full);
        assert_eq!(full, compact);
        // A second compaction keeps the first fingerprint; any change of the copies is seen.
        let mut again = compact.clone();
        again.make_compact();
        assert_eq!(again.compact, compact.compact);
        let mut progressed = full.clone();
        progressed
            .status
            .as_mut()
            .unwrap()
            .extra
            .insert("progress".into(), json!({"totalItems": 10}));
        assert_ne!(compact, progressed);
        let mut other = full.clone();
        other.name = Some("v".into());
        assert_ne!(compact, other);
        // Serialised (a status write), a compact copy never claims to be whole: nothing of it is written.
        assert!(!serde_json::to_string(&compact).unwrap().contains("compact"));
    }
}
