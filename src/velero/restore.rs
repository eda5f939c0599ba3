//! Velero `Restore` (velero.io/v1).

use super::{RestoreHooks, RestoreStatusSpec, TypedLocalObjectReference, UploaderConfigForRestore};
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
    #[schemars(with = "Option<crate::wire::AtomicLabelSelector>")]
    pub label_selector: Option<LabelSelector>,
    #[schemars(with = "Option<Vec<crate::wire::AtomicLabelSelector>>")]
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Whether to restore persistent volumes from snapshots.
    pub restore_p_vs: Option<bool>,
    /// Which resources' status to restore.
    pub restore_status: Option<RestoreStatusSpec>,
    /// Whether cluster-scoped resources are restored (true is not allowed for non-admin restores).
    pub include_cluster_resources: Option<bool>,
    pub hooks: Option<RestoreHooks>,
    /// What to do with resources that already exist: none or update.
    pub existing_resource_policy: Option<String>,
    pub item_operation_timeout: Option<String>,
    pub resource_modifier: Option<TypedLocalObjectReference>,
    pub uploader_config: Option<UploaderConfigForRestore>,
    pub preserve_node_ports: Option<bool>,
}

/// Velero RestoreStatus, every field of Velero 1.18's typed (a Velero Restore is kept whole in nac's store, so
/// typing costs nothing there); a newer Velero's fields are kept in `extra`.
#[apply(crate::wire::velero_struct!)]
pub struct RestoreStatus {
    /// Velero's phase (not an enum here: a newer Velero's phase must not make nac's status write fail).
    pub phase: Option<String>,
    /// Position in Velero's own queue, when a Velero reports one.
    #[schemars(skip)]
    pub queue_position: Option<i64>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub start_timestamp: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub completion_timestamp: Option<String>,
    pub failure_reason: Option<String>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub errors: Option<i64>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub warnings: Option<i64>,
    pub validation_errors: Option<Vec<String>>,
    /// How many items Velero restores, and has restored so far.
    pub progress: Option<RestoreProgress>,
    pub hook_status: Option<HookStatus>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub restore_item_operations_attempted: Option<i64>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub restore_item_operations_completed: Option<i64>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub restore_item_operations_failed: Option<i64>,
}

/// How many hooks of a restore ran, and how many failed.
#[apply(crate::wire::velero_struct!)]
pub struct HookStatus {
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub hooks_attempted: Option<i64>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub hooks_failed: Option<i64>,
}

/// A restore's progress in items.
#[apply(crate::wire::velero_struct!)]
pub struct RestoreProgress {
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub total_items: Option<i64>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub items_restored: Option<i64>,
}

pub const RESTORE_FINAL_PHASES: &[&str] = &["Completed", "PartiallyFailed", "Failed", "FailedValidation"];

pub fn restore_phase_unfinished(phase: Option<&str>) -> bool {
    !matches!(phase, Some(p) if RESTORE_FINAL_PHASES.contains(&p))
}
