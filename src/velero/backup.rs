//! Velero `Backup` (velero.io/v1).

use super::{Extra, OpaqueObject, TypedLocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Velero BackupSpec: what to back up and how.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BackupSpec {
    /// Metadata for the backup (labels applied to the backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BackupMetadata>,
    /// Namespaces to include. nac sets this to the NonAdminBackup's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespaces: Option<Vec<String>>,
    /// Namespaces to exclude (not allowed for non-admin backups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespaces: Option<Vec<String>>,
    /// Resource types to include (`*` for all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_resources: Option<Vec<String>>,
    /// Resource types to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_resources: Option<Vec<String>>,
    /// Cluster-scoped resource types to include (not allowed for non-admin backups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_cluster_scoped_resources: Option<Vec<String>>,
    /// Cluster-scoped resource types to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_cluster_scoped_resources: Option<Vec<String>>,
    /// Namespace-scoped resource types to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespace_scoped_resources: Option<Vec<String>>,
    /// Namespace-scoped resource types to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespace_scoped_resources: Option<Vec<String>>,
    /// Only back up objects matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Back up objects matching any of these selectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Whether to take snapshots of persistent volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_volumes: Option<bool>,
    /// How long the backup is kept (Go duration, e.g. 720h0m0s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// Whether cluster-scoped resources are included (true is not allowed for non-admin backups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_cluster_resources: Option<bool>,
    /// Hooks run during the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<OpaqueObject>,
    /// Where the backup is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_location: Option<String>,
    /// Where volume snapshots are stored (not allowed for non-admin backups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_locations: Option<Vec<String>>,
    /// Backup order of specific resources, by type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_resources: Option<BTreeMap<String, String>>,
    /// Timeout for CSI snapshots to become ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_snapshot_timeout: Option<String>,
    /// Timeout for asynchronous plugin operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_operation_timeout: Option<String>,
    /// Resource policy ConfigMap reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_policy: Option<TypedLocalObjectReference>,
    /// Back up all pod volumes with the file-system backup uploader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_fs_backup: Option<bool>,
    /// Deprecated alias of defaultVolumesToFsBackup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_restic: Option<bool>,
    /// Move CSI snapshot data to the backup storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_move_data: Option<bool>,
    /// Data mover to use (empty for Velero's built-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datamover: Option<String>,
    /// Uploader settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_config: Option<OpaqueObject>,
    /// Label key grouping PVCs into volume group snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_group_snapshot_label_key: Option<String>,
    /// Fields of newer Velero versions, kept as they are.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
    /// Set on a compact copy in nac's store (`Backup::make_compact`): the fingerprint of what it left out.
    /// Never serialized, so a compact copy can never be written as a spec.
    #[serde(skip)]
    #[schemars(skip)]
    pub compact: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackupMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// Velero BackupStatus: the fields nac reads by name, the rest kept whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BackupStatus {
    /// Velero's phase: New, Queued, ReadyToStart, FailedValidation, InProgress, ..., Completed, PartiallyFailed, Failed, Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Position in Velero's own queue (Velero 1.18 and newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<String>>,
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Backup phases after which Velero does no more work on a backup.
pub const BACKUP_FINAL_PHASES: &[&str] = &["Completed", "PartiallyFailed", "Failed", "FailedValidation", "Deleting"];

/// Whether a Velero object in `phase` may be deleted now. Velero 1.18's backup queue counts a `ReadyToStart`
/// backup as running until its backup controller picks it up; deleted in that phase, it is never uncounted and
/// Velero starts no other backup until it restarts (measured: the whole queue stalls). A moment later it is
/// `InProgress`, which Velero finishes (and uncounts) even when the object is gone.
pub fn deletable_now(phase: Option<&str>) -> bool {
    phase != Some("ReadyToStart")
}

/// Whether Velero still has work to do on a backup in `phase` (an empty phase is a backup Velero has not seen yet).
pub fn backup_phase_unfinished(phase: Option<&str>) -> bool {
    !matches!(phase, Some(p) if BACKUP_FINAL_PHASES.contains(&p))
}
