//! The Velero objects nac creates for NonAdminBackups and NonAdminRestores, and the way back from a Velero object
//! to the NonAdminBackup/NonAdminRestore it belongs to. Pure: the reconcilers and end-to-end tests build the very
//! same objects.

use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::naming::{
    is_nacuuid_for, NAB, NAB_ORIGIN_NACUUID_LABEL, NAR, NAR_ORIGIN_NACUUID_LABEL, VELERO_BACKUP_NAME_LABEL,
    VELERO_BACKUP_UID_LABEL,
};
use crate::policy::{evaluate_backup, evaluate_restore, Policy};
use crate::velero::{Backup, BackupSpec, DeleteBackupRequest, DeleteBackupRequestSpec, Restore, RestoreSpec};
use kube::ResourceExt;
use serde_json::{Map, Value};

/// Namespaced kinds never included in a tenant's backup or restore: nac's own objects.
pub const EXCLUDED_NAMESPACED_RESOURCES: &[&str] =
    &["nonadminbackups", "nonadminrestores", "nonadminbackupstoragelocations"];
/// Cluster-scoped kinds never included in a tenant's backup or restore: cluster security objects.
pub const EXCLUDED_CLUSTER_RESOURCES: &[&str] = &[
    "securitycontextconstraints",
    "clusterroles",
    "clusterrolebindings",
    "priorityclasses",
    "customresourcedefinitions",
];

/// Velero's new-style resource filters; Velero refuses a spec mixing them with `excludedResources`.
const NEW_STYLE_FILTERS: &[&str] = &[
    "includedClusterScopedResources",
    "excludedClusterScopedResources",
    "includedNamespaceScopedResources",
    "excludedNamespaceScopedResources",
];

fn append_unique(spec: &mut Map<String, Value>, field: &str, items: &[&str]) {
    let list = spec
        .entry(field.to_string())
        .and_modify(|v| {
            if !v.is_array() {
                *v = Value::Array(Vec::new());
            }
        })
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(list) = list else {
        unreachable!("made an array above")
    };
    for item in items {
        if !list.iter().any(|v| v.as_str() == Some(item)) {
            list.push(Value::String((*item).to_string()));
        }
    }
}

/// Adds the kinds no tenant backup may carry: into the new-style `excluded*ScopedResources` when the spec uses
/// new-style filters, otherwise into `excludedResources`.
pub fn add_backup_exclusions(spec: &mut Map<String, Value>) {
    let new_style = NEW_STYLE_FILTERS
        .iter()
        .any(|f| spec.get(*f).and_then(Value::as_array).is_some_and(|a| !a.is_empty()));
    if new_style {
        append_unique(spec, "excludedNamespaceScopedResources", EXCLUDED_NAMESPACED_RESOURCES);
        append_unique(spec, "excludedClusterScopedResources", EXCLUDED_CLUSTER_RESOURCES);
    } else {
        append_unique(spec, "excludedResources", EXCLUDED_NAMESPACED_RESOURCES);
        append_unique(spec, "excludedResources", EXCLUDED_CLUSTER_RESOURCES);
    }
}

/// Adds the same kinds to a restore (restores only have `excludedResources`).
pub fn add_restore_exclusions(spec: &mut Map<String, Value>) {
    append_unique(spec, "excludedResources", EXCLUDED_NAMESPACED_RESOURCES);
    append_unique(spec, "excludedResources", EXCLUDED_CLUSTER_RESOURCES);
}

fn to_map<T: serde::Serialize>(value: &T) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The nacuuid of a NonAdminBackup: the one recorded in its status, else the label the webhook stamped (trusted
/// only when it has the shape nac gives this object's nacuuid).
pub fn nab_nacuuid(nab: &NonAdminBackup) -> Option<String> {
    let from_status = nab
        .status
        .as_ref()
        .and_then(|s| s.velero_backup.as_ref())
        .and_then(|v| v.nacuuid.clone())
        .filter(|u| !u.is_empty());
    from_status.or_else(|| trusted_label(nab.labels().get(NAB_ORIGIN_NACUUID_LABEL), nab))
}

/// The nacuuid of a NonAdminRestore, as [`nab_nacuuid`].
pub fn nar_nacuuid(nar: &NonAdminRestore) -> Option<String> {
    let from_status = nar
        .status
        .as_ref()
        .and_then(|s| s.velero_restore.as_ref())
        .and_then(|v| v.nacuuid.clone())
        .filter(|u| !u.is_empty());
    from_status.or_else(|| trusted_label(nar.labels().get(NAR_ORIGIN_NACUUID_LABEL), nar))
}

fn trusted_label<K: ResourceExt>(value: Option<&String>, obj: &K) -> Option<String> {
    let v = value?;
    let ns = obj.namespace().unwrap_or_default();
    if is_nacuuid_for(v, &ns, &obj.name_any()) {
        Some(v.clone())
    } else {
        tracing::warn!(object = %obj.name_any(), namespace = %ns, value = %v, "ignoring a nacuuid label nac did not generate for this object");
        None
    }
}

/// Name of the Velero Backup of a NonAdminBackup with this nacuuid (as recorded in status, else the nacuuid).
pub fn nab_velero_backup_name(nab: &NonAdminBackup, nacuuid: &str) -> String {
    nab.status
        .as_ref()
        .and_then(|s| s.velero_backup.as_ref())
        .and_then(|v| v.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| nacuuid.to_string())
}

/// Name of the Velero Restore of a NonAdminRestore with this nacuuid.
pub fn nar_velero_restore_name(nar: &NonAdminRestore, nacuuid: &str) -> String {
    nar.status
        .as_ref()
        .and_then(|s| s.velero_restore.as_ref())
        .and_then(|v| v.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| nacuuid.to_string())
}

/// The Velero BackupSpec for a NonAdminBackup: the policy and tenant rules applied, then the exclusions. `Err`
/// carries the message for an invalid spec.
pub fn velero_backup_spec(nab: &NonAdminBackup, policy: &Policy) -> Result<BackupSpec, String> {
    let ns = nab.namespace().unwrap_or_default();
    let outcome = evaluate_backup(&to_map(&nab.spec.backup_spec), policy, &ns);
    if !outcome.allowed() {
        return Err(outcome.message());
    }
    let mut spec = outcome.spec;
    add_backup_exclusions(&mut spec);
    serde_json::from_value(Value::Object(spec))
        .map_err(|e| format!("NonAdminBackup spec.backupSpec is not a valid Velero BackupSpec: {e}"))
}

/// The Velero Backup nac creates for a NonAdminBackup, named by its nacuuid.
pub fn velero_backup(nab: &NonAdminBackup, nacuuid: &str, velero_namespace: &str, spec: BackupSpec) -> Backup {
    let mut b = Backup::new(nacuuid, spec);
    b.metadata = NAB.stamp(
        nacuuid,
        velero_namespace,
        nacuuid,
        &nab.namespace().unwrap_or_default(),
        &nab.name_any(),
        &[],
    );
    b
}

/// Validates a NonAdminBackup against the policy and builds its Velero Backup in one go.
pub fn velero_backup_for(
    nab: &NonAdminBackup,
    nacuuid: &str,
    velero_namespace: &str,
    policy: &Policy,
) -> Result<Backup, String> {
    Ok(velero_backup(
        nab,
        nacuuid,
        velero_namespace,
        velero_backup_spec(nab, policy)?,
    ))
}

/// The DeleteBackupRequest asking Velero to delete `backup` and its data, named by the nacuuid so it is created
/// once.
pub fn delete_backup_request(nab: &NonAdminBackup, nacuuid: &str, backup: &Backup) -> DeleteBackupRequest {
    let backup_name = backup.name_any();
    let uid = backup.uid().unwrap_or_default();
    let mut r = DeleteBackupRequest::new(
        nacuuid,
        DeleteBackupRequestSpec {
            backup_name: backup_name.clone(),
        },
    );
    r.metadata = NAB.stamp(
        nacuuid,
        &backup.namespace().unwrap_or_default(),
        nacuuid,
        &nab.namespace().unwrap_or_default(),
        &nab.name_any(),
        &[
            (VELERO_BACKUP_NAME_LABEL, &backup_name),
            (VELERO_BACKUP_UID_LABEL, &uid),
        ],
    );
    r
}

/// The Velero RestoreSpec for a NonAdminRestore restoring Velero backup `velero_backup_name`: policy applied, own
/// namespace only, no cluster resources, the exclusions. `Err` carries the message for an invalid spec.
pub fn velero_restore_spec(
    nar: &NonAdminRestore,
    velero_backup_name: &str,
    policy: &Policy,
) -> Result<RestoreSpec, String> {
    let ns = nar.namespace().unwrap_or_default();
    let outcome = evaluate_restore(&to_map(&nar.spec.restore_spec), policy);
    if !outcome.allowed() {
        return Err(outcome.message());
    }
    let mut spec = outcome.spec;
    spec.insert("backupName".into(), Value::String(velero_backup_name.to_string()));
    spec.insert("includedNamespaces".into(), Value::Array(vec![Value::String(ns)]));
    spec.insert("includeClusterResources".into(), Value::Bool(false));
    add_restore_exclusions(&mut spec);
    serde_json::from_value(Value::Object(spec))
        .map_err(|e| format!("NonAdminRestore spec.restoreSpec is not a valid Velero RestoreSpec: {e}"))
}

/// The Velero Restore nac creates for a NonAdminRestore, named by its nacuuid.
pub fn velero_restore(nar: &NonAdminRestore, nacuuid: &str, velero_namespace: &str, spec: RestoreSpec) -> Restore {
    let mut r = Restore::new(nacuuid, spec);
    r.metadata = NAR.stamp(
        nacuuid,
        velero_namespace,
        nacuuid,
        &nar.namespace().unwrap_or_default(),
        &nar.name_any(),
        &[],
    );
    r
}

/// Validates a NonAdminRestore against the policy and builds its Velero Restore in one go.
pub fn velero_restore_for(
    nar: &NonAdminRestore,
    nacuuid: &str,
    velero_namespace: &str,
    velero_backup_name: &str,
    policy: &Policy,
) -> Result<Restore, String> {
    Ok(velero_restore(
        nar,
        nacuuid,
        velero_namespace,
        velero_restore_spec(nar, velero_backup_name, policy)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NonAdminBackupSpec, NonAdminRestoreSpec};
    use crate::naming::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::reflector::ObjectRef;
    use serde_json::json;

    const U: &str = "0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";

    fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn nab(spec: Value) -> NonAdminBackup {
        let mut n = NonAdminBackup::new(
            "nightly",
            NonAdminBackupSpec {
                backup_spec: serde_json::from_value(spec).unwrap(),
                delete_backup: false,
            },
        );
        n.metadata.namespace = Some("team-a".into());
        n
    }

    fn nar(spec: Value) -> NonAdminRestore {
        let mut n = NonAdminRestore::new(
            "undo",
            NonAdminRestoreSpec {
                restore_spec: serde_json::from_value(spec).unwrap(),
            },
        );
        n.metadata.namespace = Some("team-a".into());
        n
    }

    fn policy(yaml: &str) -> Policy {
        Policy::parse(yaml).unwrap()
    }

    #[test]
    fn velero_backup_carries_the_design_labels_and_annotations() {
        let id = nacuuid_with("team-a", "nightly", U);
        let b = velero_backup_for(&nab(json!({})), &id, "openshift-adp", &Policy::default()).unwrap();
        assert_eq!(b.name_any(), id);
        assert_eq!(b.namespace().as_deref(), Some("openshift-adp"));
        let l = b.labels();
        assert_eq!(l[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        assert_eq!(l[OADP_LABEL], "True");
        assert_eq!(l[NAB_ORIGIN_NACUUID_LABEL], id);
        let a = b.annotations();
        assert_eq!(a[NAB_ORIGIN_NAME_ANNOTATION], "nightly");
        assert_eq!(a[NAB_ORIGIN_NAMESPACE_ANNOTATION], "team-a");
        assert_eq!(
            NAB.owner(&b.metadata),
            Some(ObjectRef::<NonAdminBackup>::new("nightly").within("team-a"))
        );
    }

    #[test]
    fn velero_backup_is_limited_to_the_own_namespace_with_the_policy_applied() {
        let b = velero_backup_for(
            &nab(json!({"includedResources": ["configmaps"]})),
            "x",
            "velero",
            &policy("enforceBackupSpec: {snapshotMoveData: true}"),
        )
        .unwrap();
        assert_eq!(b.spec.included_namespaces, Some(vec!["team-a".to_string()]));
        assert_eq!(b.spec.snapshot_move_data, Some(true));
        assert_eq!(b.spec.included_resources, Some(vec!["configmaps".to_string()]));
    }

    #[test]
    fn old_style_specs_get_the_exclusions_in_excluded_resources() {
        let b = velero_backup_for(
            &nab(json!({"excludedResources": ["secrets"]})),
            "x",
            "velero",
            &Policy::default(),
        )
        .unwrap();
        let ex = b.spec.excluded_resources.unwrap();
        assert_eq!(ex[0], "secrets");
        for k in EXCLUDED_NAMESPACED_RESOURCES.iter().chain(EXCLUDED_CLUSTER_RESOURCES) {
            assert!(ex.iter().any(|e| e == k), "{k} missing from {ex:?}");
        }
        assert!(b.spec.excluded_namespace_scoped_resources.is_none());
        assert!(b.spec.excluded_cluster_scoped_resources.is_none());
    }

    #[test]
    fn new_style_specs_get_the_exclusions_in_the_scoped_fields() {
        let b = velero_backup_for(
            &nab(json!({"includedNamespaceScopedResources": ["deployments"]})),
            "x",
            "velero",
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(
            b.spec.excluded_namespace_scoped_resources.unwrap(),
            EXCLUDED_NAMESPACED_RESOURCES
        );
        assert_eq!(
            b.spec.excluded_cluster_scoped_resources.unwrap(),
            EXCLUDED_CLUSTER_RESOURCES
        );
        assert!(
            b.spec.excluded_resources.is_none(),
            "Velero refuses mixed old and new filters"
        );
    }

    #[test]
    fn exclusions_are_not_duplicated() {
        let mut spec = Map::new();
        add_backup_exclusions(&mut spec);
        add_backup_exclusions(&mut spec);
        let n = spec["excludedResources"].as_array().unwrap().len();
        assert_eq!(
            n,
            EXCLUDED_NAMESPACED_RESOURCES.len() + EXCLUDED_CLUSTER_RESOURCES.len()
        );
    }

    #[test]
    fn an_invalid_spec_is_refused_with_the_policy_message() {
        let e = velero_backup_for(
            &nab(json!({"includedNamespaces": ["team-b"]})),
            "x",
            "velero",
            &Policy::default(),
        )
        .unwrap_err();
        assert!(e.contains("includedNamespaces"), "{e}");
        assert!(e.contains("team-a"), "{e}");
    }

    #[test]
    fn unknown_fields_survive_into_the_velero_spec() {
        let b = velero_backup_for(
            &nab(json!({"futureField": {"a": 1}})),
            "x",
            "velero",
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(b.spec.extra["futureField"], json!({"a": 1}));
    }

    #[test]
    fn delete_backup_request_names_the_backup_by_name_and_uid() {
        let mut b = velero_backup_for(&nab(json!({})), "id", "velero", &Policy::default()).unwrap();
        b.metadata.uid = Some("uid-1".into());
        let r = delete_backup_request(&nab(json!({})), "id", &b);
        assert_eq!(r.name_any(), "id");
        assert_eq!(r.namespace().as_deref(), Some("velero"));
        assert_eq!(r.spec.backup_name, "id");
        let l = r.labels();
        assert_eq!(l[VELERO_BACKUP_NAME_LABEL], "id");
        assert_eq!(l[VELERO_BACKUP_UID_LABEL], "uid-1");
        assert_eq!(l[NAB_ORIGIN_NACUUID_LABEL], "id");
        assert_eq!(l[OADP_LABEL], "True");
        assert_eq!(
            NAB.owner(&r.metadata),
            Some(ObjectRef::<NonAdminBackup>::new("nightly").within("team-a"))
        );
    }

    #[test]
    fn velero_restore_restores_into_the_own_namespace_only() {
        let r = velero_restore_for(
            &nar(json!({"backupName": "nightly", "excludedResources": ["secrets"]})),
            "rid",
            "velero",
            "team-a-nightly-uuid",
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(r.name_any(), "rid");
        assert_eq!(r.spec.backup_name.as_deref(), Some("team-a-nightly-uuid"));
        assert_eq!(r.spec.included_namespaces, Some(vec!["team-a".to_string()]));
        assert_eq!(r.spec.include_cluster_resources, Some(false));
        let ex = r.spec.excluded_resources.clone().unwrap();
        assert_eq!(ex[0], "secrets");
        assert!(ex.iter().any(|e| e == "clusterroles"));
        assert!(ex.iter().any(|e| e == "nonadminbackups"));
        assert_eq!(r.labels()[NAR_ORIGIN_NACUUID_LABEL], "rid");
        assert_eq!(
            NAR.owner(&r.metadata),
            Some(ObjectRef::<NonAdminRestore>::new("undo").within("team-a"))
        );
    }

    #[test]
    fn velero_restore_refuses_namespace_changes() {
        let e = velero_restore_for(
            &nar(json!({"backupName": "nightly", "namespaceMapping": {"team-a": "team-b"}})),
            "rid",
            "velero",
            "b",
            &Policy::default(),
        )
        .unwrap_err();
        assert!(e.contains("namespaceMapping"), "{e}");
    }

    #[test]
    fn the_status_nacuuid_wins_over_the_label() {
        let mut n = nab(json!({}));
        let label = nacuuid_with("team-a", "nightly", U);
        n.metadata.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, &label)]));
        assert_eq!(nab_nacuuid(&n).as_deref(), Some(label.as_str()));
        n.status = Some(crate::api::NonAdminBackupStatus {
            velero_backup: Some(crate::api::VeleroBackupRef {
                nacuuid: Some("from-status".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(nab_nacuuid(&n).as_deref(), Some("from-status"));
        assert_eq!(nab_velero_backup_name(&n, "from-status"), "from-status");
    }

    #[test]
    fn a_label_nac_would_not_have_generated_is_ignored() {
        let mut n = nab(json!({}));
        n.metadata.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, &nacuuid_with("team-b", "x", U))]));
        assert_eq!(nab_nacuuid(&n), None);
    }

    #[test]
    fn objects_without_nac_metadata_map_to_nothing() {
        assert_eq!(NAB.owner::<NonAdminBackup>(&ObjectMeta::default()), None);
        let mut m = ObjectMeta {
            annotations: Some(labels(&[
                (NAB_ORIGIN_NAME_ANNOTATION, "n"),
                (NAB_ORIGIN_NAMESPACE_ANNOTATION, "ns"),
            ])),
            ..Default::default()
        };
        assert_eq!(
            NAB.owner::<NonAdminBackup>(&m),
            None,
            "the identity label is required too"
        );
        m.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, "x")]));
        assert!(NAB.owner::<NonAdminBackup>(&m).is_some());
        assert!(NAB.owns(&m, "ns", "n"));
        assert!(!NAB.owns(&m, "other", "n"));
        assert!(!NAR.owns(&m, "ns", "n"));
    }
}
