//! Velero `Restore` (velero.io/v1).

use super::{Extra, OpaqueObject, TypedLocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use macro_rules_attribute::apply;
use std::collections::BTreeMap;

/// Velero RestoreSpec: what to restore from which backup.
#[apply(crate::wire::velero_kind!)]
#[kube(kind = "Restore", status = "RestoreStatus")]
pub struct RestoreSpec {
    /// For a NonAdminRestore: the name of a NonAdminBackup in the same namespace.
    pub backup_name: Option<String>,
    /// Restore from the newest backup of this schedule (not allowed for non-admin restores).
    pub schedule_name: Option<String>,
    /// Namespaces to include (not allowed for non-admin restores: nac sets it).
    pub included_namespaces: Option<Vec<String>>,
    /// Namespaces to exclude (not allowed for non-admin restores).
    pub excluded_namespaces: Option<Vec<String>>,
    pub included_resources: Option<Vec<String>>,
    pub excluded_resources: Option<Vec<String>>,
    /// Namespace renames (not allowed for non-admin restores).
    pub namespace_mapping: Option<BTreeMap<String, String>>,
    pub label_selector: Option<LabelSelector>,
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Whether to restore persistent volumes from snapshots.
    pub restore_p_vs: Option<bool>,
    /// Which resources' status to restore.
    pub restore_status: Option<OpaqueObject>,
    /// Whether cluster-scoped resources are restored (true is not allowed for non-admin restores).
    pub include_cluster_resources: Option<bool>,
    pub hooks: Option<OpaqueObject>,
    /// What to do with resources that already exist: none or update.
    pub existing_resource_policy: Option<String>,
    pub item_operation_timeout: Option<String>,
    pub resource_modifier: Option<TypedLocalObjectReference>,
    pub uploader_config: Option<OpaqueObject>,
    pub preserve_node_ports: Option<bool>,
    /// Fields of newer Velero versions, kept as they are.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Velero RestoreStatus: the fields nac reads by name, the rest kept whole.
#[apply(crate::wire::velero_struct!)]
pub struct RestoreStatus {
    pub phase: Option<String>,
    pub queue_position: Option<i64>,
    pub start_timestamp: Option<String>,
    pub completion_timestamp: Option<String>,
    pub failure_reason: Option<String>,
    pub errors: Option<i64>,
    pub warnings: Option<i64>,
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

pub const RESTORE_FINAL_PHASES: &[&str] = &["Completed", "PartiallyFailed", "Failed", "FailedValidation"];

pub fn restore_phase_unfinished(phase: Option<&str>) -> bool {
    !matches!(phase, Some(p) if RESTORE_FINAL_PHASES.contains(&p))
}
