//! Velero `Restore` (velero.io/v1).

use super::{Extra, OpaqueObject, TypedLocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Velero RestoreSpec: what to restore from which backup.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Restore",
    namespaced,
    status = "RestoreStatus"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct RestoreSpec {
    /// For a NonAdminRestore: the name of a NonAdminBackup in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// Restore from the newest backup of this schedule (not allowed for non-admin restores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_name: Option<String>,
    /// Namespaces to include (not allowed for non-admin restores: nac sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespaces: Option<Vec<String>>,
    /// Namespaces to exclude (not allowed for non-admin restores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_resources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_resources: Option<Vec<String>>,
    /// Namespace renames (not allowed for non-admin restores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_mapping: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Whether to restore persistent volumes from snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_p_vs: Option<bool>,
    /// Which resources' status to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_status: Option<OpaqueObject>,
    /// Whether cluster-scoped resources are restored (true is not allowed for non-admin restores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_cluster_resources: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<OpaqueObject>,
    /// What to do with resources that already exist: none or update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_resource_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_operation_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_modifier: Option<TypedLocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_config: Option<OpaqueObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_node_ports: Option<bool>,
    /// Fields of newer Velero versions, kept as they are.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Velero RestoreStatus: the fields nac reads by name, the rest kept whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct RestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<i64>,
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

pub const RESTORE_FINAL_PHASES: &[&str] = &["Completed", "PartiallyFailed", "Failed", "FailedValidation"];

pub fn restore_phase_unfinished(phase: Option<&str>) -> bool {
    !matches!(phase, Some(p) if RESTORE_FINAL_PHASES.contains(&p))
}
