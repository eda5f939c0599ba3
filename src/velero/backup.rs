//! Velero `Backup` (velero.io/v1).

use super::{BackupHooks, TypedLocalObjectReference, UploaderConfigForBackup};
use crate::naming::{CompactTags, Tags};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use macro_rules_attribute::apply;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Velero `Backup`. Written out rather than derived: its spec is shared (`Arc`), so the compact copies in nac's
/// store of the many Backups of one namespace and location hold one spec between them (a BackupSpec is 0.7 KiB
/// of mostly empty fields).
#[derive(Clone, Debug, PartialEq)]
pub struct Backup {
    pub metadata: ObjectMeta,
    pub spec: Arc<BackupSpec>,
    pub status: Option<BackupStatus>,
    /// Set on a compact copy in nac's store: the fingerprint of what it left out. Never serialized, so a
    /// compact copy can never be written as a spec.
    pub compact: Option<u64>,
    /// A compact copy's labels and annotations, moved out of `metadata` (read them through [`Tags`]).
    pub tags: Option<CompactTags>,
}

impl Backup {
    pub fn new(name: &str, spec: BackupSpec) -> Self {
        Backup {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: Arc::new(spec),
            status: None,
            compact: None,
            tags: None,
        }
    }

    /// The spec to change (a copy when it is shared).
    pub fn spec_mut(&mut self) -> &mut BackupSpec {
        Arc::make_mut(&mut self.spec)
    }

    /// Moves the labels and annotations into one compact allocation (a store copy's).
    pub fn compact_tags(&mut self) {
        if self.tags.is_none() {
            self.tags = Some(CompactTags::new(
                self.metadata.labels.as_ref(),
                self.metadata.annotations.as_ref(),
            ));
            self.metadata.labels = None;
            self.metadata.annotations = None;
        }
    }

    /// The metadata with its labels and annotations, wherever they are kept.
    pub fn whole_meta(&self) -> ObjectMeta {
        let mut m = self.metadata.clone();
        if let Some(t) = &self.tags {
            (m.labels, m.annotations) = t.maps();
        }
        m
    }
}

/// A compact copy's tags are in `tags`, which has them all.
impl Tags for Backup {
    fn label(&self, key: &str) -> Option<&str> {
        match &self.tags {
            Some(t) => t.label(key),
            None => self.metadata.label(key),
        }
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        match &self.tags {
            Some(t) => t.annotation(key),
            None => self.metadata.annotation(key),
        }
    }
}

impl Resource for Backup {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Backup".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "velero.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "velero.io/v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "backups".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Backup as the API server sends and takes it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    spec: &'a BackupSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: &'a Option<BackupStatus>,
}

#[derive(Deserialize)]
struct WireIn {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: BackupSpec,
    status: Option<BackupStatus>,
}

impl Serialize for Backup {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireOut {
            api_version: "velero.io/v1",
            kind: "Backup",
            metadata: &self.metadata,
            spec: &self.spec,
            status: &self.status,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Backup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireIn::deserialize(d)?;
        Ok(Backup {
            metadata: w.metadata,
            spec: Arc::new(w.spec),
            status: w.status,
            compact: None,
            tags: None,
        })
    }
}

/// One empty spec for every copy that keeps none of its own (a settled NonAdminBackup's, a Velero Backup's nac
/// only counts in the queue): one allocation for all of them.
pub fn empty_backup_spec() -> Arc<BackupSpec> {
    static EMPTY: std::sync::LazyLock<Arc<BackupSpec>> = std::sync::LazyLock::new(Default::default);
    EMPTY.clone()
}

/// Velero BackupSpec: what to back up and how.
#[apply(crate::wire::velero_spec!)]
pub struct BackupSpec {
    /// Metadata for the backup (labels applied to the backup).
    pub metadata: Option<BackupMetadata>,
    /// Namespaces to include. nac sets this to the NonAdminBackup's own namespace.
    pub included_namespaces: Option<Vec<String>>,
    /// Namespaces to exclude (not allowed for non-admin backups).
    pub excluded_namespaces: Option<Vec<String>>,
    /// Resource types to include (`*` for all).
    pub included_resources: Option<Vec<String>>,
    /// Resource types to exclude.
    pub excluded_resources: Option<Vec<String>>,
    /// Cluster-scoped resource types to include (not allowed for non-admin backups).
    pub included_cluster_scoped_resources: Option<Vec<String>>,
    /// Cluster-scoped resource types to exclude.
    pub excluded_cluster_scoped_resources: Option<Vec<String>>,
    /// Namespace-scoped resource types to include.
    pub included_namespace_scoped_resources: Option<Vec<String>>,
    /// Namespace-scoped resource types to exclude.
    pub excluded_namespace_scoped_resources: Option<Vec<String>>,
    /// Only back up objects matching this selector.
    #[schemars(with = "Option<crate::wire::AtomicLabelSelector>")]
    pub label_selector: Option<LabelSelector>,
    /// Back up objects matching any of these selectors.
    #[schemars(with = "Option<Vec<crate::wire::AtomicLabelSelector>>")]
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Whether to take snapshots of persistent volumes.
    pub snapshot_volumes: Option<bool>,
    /// How long the backup is kept (Go duration, e.g. 720h0m0s).
    pub ttl: Option<String>,
    /// Whether cluster-scoped resources are included (true is not allowed for non-admin backups).
    pub include_cluster_resources: Option<bool>,
    /// Hooks run during the backup.
    pub hooks: Option<BackupHooks>,
    /// Where the backup is stored.
    pub storage_location: Option<String>,
    /// Where volume snapshots are stored (not allowed for non-admin backups).
    pub volume_snapshot_locations: Option<Vec<String>>,
    /// Backup order of specific resources, by type.
    pub ordered_resources: Option<BTreeMap<String, String>>,
    /// Timeout for CSI snapshots to become ready.
    pub csi_snapshot_timeout: Option<String>,
    /// Timeout for asynchronous plugin operations.
    pub item_operation_timeout: Option<String>,
    /// Resource policy ConfigMap reference.
    pub resource_policy: Option<TypedLocalObjectReference>,
    /// Back up all pod volumes with the file-system backup uploader.
    pub default_volumes_to_fs_backup: Option<bool>,
    /// Deprecated alias of defaultVolumesToFsBackup.
    pub default_volumes_to_restic: Option<bool>,
    /// Move CSI snapshot data to the backup storage.
    pub snapshot_move_data: Option<bool>,
    /// Data mover to use (empty for Velero's built-in).
    pub datamover: Option<String>,
    /// Uploader settings.
    pub uploader_config: Option<UploaderConfigForBackup>,
    /// Label key grouping PVCs into volume group snapshots.
    pub volume_group_snapshot_label_key: Option<String>,
    /// Full or Incremental: how the data movers back up volume data (Velero 1.19; an older Velero ignores it).
    #[schemars(extend("enum" = ["Full", "Incremental"]))]
    pub backup_type: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackupMetadata {
    pub labels: Option<BTreeMap<String, String>>,
}

/// Velero BackupStatus: the fields nac reads by name, the rest kept whole in `extra` (a compact store copy leaves
/// them out: nac's reconcilers never read them, and 10,000 backups' progress figures are memory). The schema
/// declares every field of Velero 1.18's status all the same (`kubectl explain` shows them in a NonAdminBackup's
/// status copy, as OADP's CRD does).
#[apply(crate::wire::velero_struct!)]
#[schemars(transform = declare_backup_status)]
pub struct BackupStatus {
    /// Velero's phase: New, Queued, ReadyToStart, FailedValidation, InProgress, ..., Completed, PartiallyFailed,
    /// Failed, Deleting. (Not an enum here: a newer Velero's phase must not make nac's status write fail.)
    pub phase: Option<String>,
    /// Position in Velero's own queue (Velero 1.18 and newer).
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub queue_position: Option<i64>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub start_timestamp: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub completion_timestamp: Option<String>,
    /// When Velero deletes the backup (its TTL after the start).
    #[schemars(with = "Option<crate::wire::Time>")]
    pub expiration: Option<String>,
    pub failure_reason: Option<String>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub errors: Option<i64>,
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub warnings: Option<i64>,
    pub validation_errors: Option<Vec<String>>,
}

/// The fields of Velero 1.18's BackupStatus that nac keeps in `extra`, declared in the schema.
fn declare_backup_status(schema: &mut schemars::Schema) {
    let int = || serde_json::json!({"type": "integer"});
    let counts = |names: &[&str]| {
        serde_json::json!({
            "type": "object",
            "properties": names.iter().map(|n| (n.to_string(), int())).collect::<serde_json::Map<_, _>>(),
            "x-kubernetes-preserve-unknown-fields": true,
        })
    };
    let mut more = serde_json::Map::new();
    more.insert("version".into(), int());
    more.insert("formatVersion".into(), serde_json::json!({"type": "string"}));
    more.insert("progress".into(), counts(&["totalItems", "itemsBackedUp"]));
    more.insert("hookStatus".into(), counts(&["hooksAttempted", "hooksFailed"]));
    for n in [
        "volumeSnapshotsAttempted",
        "volumeSnapshotsCompleted",
        "csiVolumeSnapshotsAttempted",
        "csiVolumeSnapshotsCompleted",
        "backupItemOperationsAttempted",
        "backupItemOperationsCompleted",
        "backupItemOperationsFailed",
    ] {
        more.insert(n.into(), int());
    }
    if let Some(props) = schema.get_mut("properties").and_then(serde_json::Value::as_object_mut) {
        props.extend(more);
    }
}

/// Backup phases after which Velero does no more work on a backup.
pub const BACKUP_FINAL_PHASES: &[&str] = &["Completed", "PartiallyFailed", "Failed", "FailedValidation", "Deleting"];

/// Whether a Velero object in `phase` may be deleted now. Velero 1.18's backup queue counts a `ReadyToStart`
/// backup as running until its backup controller picks it up; deleted in that phase, it is never uncounted and
/// Velero starts no other backup until it restarts. Deleted while `InProgress`, a backup or restore is finished
/// by Velero, whose last status write then retries on "not found" for its resource timeout (10 minutes by
/// default) with the object still counted: no other tenant's backup starts meanwhile (both measured on the node:
/// the whole queue stalls). So these wait for Velero's next phase.
pub fn deletable_now(phase: Option<&str>) -> bool {
    !matches!(phase, Some("ReadyToStart" | "InProgress"))
}

/// Whether Velero still has work to do on a backup in `phase` (an empty phase is a backup Velero has not seen yet).
pub fn backup_phase_unfinished(phase: Option<&str>) -> bool {
    !matches!(phase, Some(p) if BACKUP_FINAL_PHASES.contains(&p))
}
