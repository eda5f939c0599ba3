//! Objects as OADP's non-admin controller writes them, for the tests of the move to nac and of nac's wire format:
//! its NonAdminBackups, NonAdminRestore, storage locations (approved and pending) and their requests, and in Velero's
//! namespace the objects it made for them, each with the names, labels, annotations, finalizers, status shapes and
//! condition reasons that controller writes (`design/oadp-nac-reference.md`, read from its source at 4e22229).
//! Raw JSON, so nothing passes through nac's types on the way in. (`oadp` puts them in a cluster.)
#![allow(dead_code)]

use super::VELERO_NAMESPACE;
use serde_json::{json, Value};

pub const NAB_FINALIZER: &str = "nonadminbackup.oadp.openshift.io/finalizer";
pub const NAR_FINALIZER: &str = "nonadminrestore.oadp.openshift.io/finalizer";
pub const NABSL_FINALIZER: &str = "nonadminbackupstoragelocation.oadp.openshift.io/finalizer";
/// Resources OADP's controller always leaves out of a backup (old-style filter), in its order.
pub const ALWAYS_EXCLUDED: &[&str] = &[
    "nonadminbackups",
    "nonadminrestores",
    "nonadminbackupstoragelocations",
    "securitycontextconstraints",
    "clusterroles",
    "clusterrolebindings",
    "priorityclasses",
    "customresourcedefinitions",
    "virtualmachineclusterinstancetypes",
    "virtualmachineclusterpreferences",
];

/// A NACUUID as that controller generates it (`GenerateNacObjectUUID`).
pub fn nacuuid(ns: &str, name: &str) -> String {
    nac::naming::oadp_nacuuid_with(ns, name, &uuid::Uuid::new_v4().to_string())
}

/// Labels that controller puts on everything it makes in Velero's namespace, plus the kind's nacuuid label.
pub fn labels(kind: &str, id: &str) -> Value {
    json!({
        "openshift.io/oadp": "True",
        "app.kubernetes.io/managed-by": "oadp-nac-controller",
        format!("openshift.io/oadp-{kind}-origin-nacuuid"): id,
    })
}

pub fn annotations(kind: &str, ns: &str, name: &str) -> Value {
    json!({
        format!("openshift.io/oadp-{kind}-origin-name"): name,
        format!("openshift.io/oadp-{kind}-origin-namespace"): ns,
    })
}

pub fn condition(ty: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-11-20T08:00:00Z"})
}

/// The Velero Backup OADP's controller made for NonAdminBackup `ns/name` with the tenant's `spec`, as Velero
/// finished it (storage location, TTL and timeouts filled in, the storage-location label added).
pub fn velero_backup(ns: &str, name: &str, id: &str, spec: &Value, ttl: &str) -> Value {
    let mut s = spec.as_object().cloned().unwrap_or_default();
    s.insert("includedNamespaces".into(), json!([ns]));
    s.insert("excludedResources".into(), json!(ALWAYS_EXCLUDED));
    s.insert("storageLocation".into(), json!("default"));
    s.insert("ttl".into(), json!(ttl));
    s.insert("csiSnapshotTimeout".into(), json!("10m0s"));
    s.insert("itemOperationTimeout".into(), json!("4h0m0s"));
    s.insert("defaultVolumesToFsBackup".into(), json!(false));
    s.insert("hooks".into(), json!({}));
    s.insert("metadata".into(), json!({}));
    let mut l = labels("nab", id);
    l["velero.io/storage-location"] = json!("default");
    json!({
        "metadata": {"name": id, "labels": l, "annotations": annotations("nab", ns, name)},
        "spec": s,
        "status": completed_backup_status(),
    })
}

/// The Velero Backup as OADP's controller creates it for NonAdminBackup `ns/name` (before Velero runs it): the
/// tenant's spec, its namespace, the always-excluded resources, its labels and annotations.
pub fn velero_backup_request(ns: &str, name: &str, id: &str, spec: &Value) -> Value {
    let mut s = spec.as_object().cloned().unwrap_or_default();
    s.insert("includedNamespaces".into(), json!([ns]));
    s.insert("excludedResources".into(), json!(ALWAYS_EXCLUDED));
    json!({
        "metadata": {"name": id, "labels": labels("nab", id), "annotations": annotations("nab", ns, name)},
        "spec": s,
    })
}

/// The Velero Restore as OADP's controller creates it for NonAdminRestore `ns/name` of Velero Backup `backup`.
pub fn velero_restore_request(ns: &str, name: &str, id: &str, backup: &str) -> Value {
    json!({
        "metadata": {"name": id, "labels": labels("nar", id), "annotations": annotations("nar", ns, name)},
        "spec": {"backupName": backup, "includedNamespaces": [ns], "excludedResources": ["volumesnapshotclasses"]},
    })
}

pub fn completed_backup_status() -> Value {
    json!({
        "version": 1, "formatVersion": "1.1.0", "phase": "Completed",
        "startTimestamp": "2026-11-20T08:00:01Z", "completionTimestamp": "2026-11-20T08:00:09Z",
        "expiration": "2026-12-20T08:00:01Z",
        "progress": {"totalItems": 9, "itemsBackedUp": 9}, "hookStatus": {},
    })
}

/// A NonAdminBackup whose backup completed, as that controller left it: its finalizer, no label of nac's,
/// phase Created, Accepted and Queued, the Velero Backup's spec and status copied, queue position 0, empty
/// per-volume counts. `synced`: made by its backup sync (the sync label, only the Queued condition).
pub fn nab(ns: &str, name: &str, spec: &Value, vb: &Value, synced: bool) -> Value {
    let id = vb["metadata"]["name"].as_str().unwrap();
    let mut conditions = vec![];
    if !synced {
        conditions.push(condition("Accepted", "True", "BackupAccepted", "backup accepted"));
    }
    conditions.push(condition(
        "Queued",
        "True",
        "BackupScheduled",
        "Created Velero Backup object",
    ));
    let mut meta = json!({"name": name, "namespace": ns, "finalizers": [NAB_FINALIZER]});
    if synced {
        meta["labels"] = json!({"openshift.io/oadp-nab-synced-from-nacuuid": id});
    }
    json!({
        "metadata": meta,
        "spec": {"backupSpec": spec},
        "status": {
            "phase": "Created",
            "conditions": conditions,
            "veleroBackup": {"nacuuid": id, "name": id, "namespace": VELERO_NAMESPACE,
                             "spec": vb["spec"], "status": vb["status"]},
            "queueInfo": {"estimatedQueuePosition": 0},
            "fileSystemPodVolumeBackups": {},
            "dataMoverDataUploads": {},
        },
    })
}

/// The Velero Restore of NonAdminRestore `ns/name` from Velero Backup `backup`, finished.
pub fn velero_restore(ns: &str, name: &str, id: &str, backup: &str) -> Value {
    json!({
        "metadata": {"name": id, "labels": labels("nar", id), "annotations": annotations("nar", ns, name)},
        "spec": {"backupName": backup, "includedNamespaces": [ns], "excludedResources": ["volumesnapshotclasses"],
                 "itemOperationTimeout": "4h0m0s", "hooks": {}},
        "status": {"phase": "Completed", "startTimestamp": "2026-11-20T09:00:00Z",
                   "completionTimestamp": "2026-11-20T09:00:05Z",
                   "progress": {"totalItems": 9, "itemsRestored": 9}},
    })
}

/// A NonAdminRestore that ran.
pub fn nar(ns: &str, name: &str, backup: &str, vr: &Value) -> Value {
    let id = vr["metadata"]["name"].as_str().unwrap();
    json!({
        "metadata": {"name": name, "namespace": ns, "finalizers": [NAR_FINALIZER]},
        "spec": {"restoreSpec": {"backupName": backup}},
        "status": {
            "phase": "Created",
            "conditions": [
                condition("Accepted", "True", "RestoreAccepted", "restore accepted"),
                condition("Queued", "True", "RestoreScheduled", "Created Velero Restore object"),
            ],
            "veleroRestore": {"nacuuid": id, "name": id, "namespace": VELERO_NAMESPACE, "status": vr["status"]},
            "queueInfo": {"estimatedQueuePosition": 0},
            "fileSystemPodVolumeRestores": {},
            "dataMoverDataDownloads": {},
        },
    })
}

/// The tenant's storage location spec (S3 on the test's server; Velero never reaches it in the fake mode).
pub fn location_spec(secret: &str) -> Value {
    json!({
        "provider": "aws",
        "objectStorage": {"bucket": "tenant-bucket", "prefix": "team"},
        "config": {"region": "minio", "s3ForcePathStyle": "true", "s3Url": "http://127.0.0.1:9000"},
        "credential": {"name": secret, "key": "cloud"},
    })
}

/// What that controller made in Velero's namespace for an approved location: the Secret copy, the Velero BSL
/// (credential forced to the copy, prefix under the namespace, `checksumAlgorithm: ""` and the registry label
/// oadp-operator's helper adds for aws), and the approval request.
pub struct Approved {
    pub secret: Value,
    pub bsl: Value,
    pub request: Value,
}

pub fn approved_location(ns: &str, name: &str, id: &str, spec: &Value, data: &Value) -> Approved {
    let mut bsl_spec = spec.clone();
    bsl_spec["credential"] = json!({"name": id, "key": spec["credential"]["key"]});
    bsl_spec["objectStorage"]["prefix"] = json!(format!("{ns}/{}", spec["objectStorage"]["prefix"].as_str().unwrap()));
    bsl_spec["config"]["checksumAlgorithm"] = json!("");
    let mut bsl_labels = labels("nabsl", id);
    bsl_labels["openshift.io/oadp-registry"] = json!("True");
    Approved {
        secret: json!({
            "metadata": {"name": id, "labels": labels("nabsl", id), "annotations": annotations("nabsl", ns, name)},
            "type": "Opaque", "data": data,
        }),
        bsl: json!({
            "metadata": {"name": id, "labels": bsl_labels, "annotations": annotations("nabsl", ns, name)},
            "spec": bsl_spec,
            "status": {"phase": "Available", "lastValidationTime": "2026-11-20T08:00:00Z"},
        }),
        request: request(ns, name, id, spec, "approve", "Approved"),
    }
}

pub fn request(ns: &str, name: &str, id: &str, spec: &Value, decision: &str, phase: &str) -> Value {
    json!({
        "metadata": {"name": id, "labels": labels("nabsl", id), "annotations": annotations("nabsl", ns, name)},
        "spec": {"approvalDecision": decision},
        "status": {"phase": phase, "nonAdminBackupStorageLocation": {
            "nacuuid": id, "name": name, "namespace": ns, "requestedSpec": spec}},
    })
}

/// A NonAdminBackupStorageLocation, approved (Created, the four conditions) or pending (New, approval pending).
pub fn nabsl(ns: &str, name: &str, id: &str, spec: &Value, approved: bool) -> Value {
    let accepted = condition(
        "Accepted",
        "True",
        "BslSpecValidation",
        "NonAdminBackupStorageLocation spec validation successful",
    );
    let (phase, conditions, velero_status) = if approved {
        (
            "Created",
            vec![
                accepted,
                condition(
                    "ClusterAdminApproved",
                    "True",
                    "BslSpecApproved",
                    "NonAdminBackupStorageLocationRequest approval decision set to Approve",
                ),
                condition(
                    "SecretSynced",
                    "True",
                    "SecretCreated",
                    "Secret successfully created in the OADP namespace",
                ),
                condition(
                    "BackupStorageLocationSynced",
                    "True",
                    "BackupStorageLocationCreated",
                    "BackupStorageLocation successfully created in the OADP namespace",
                ),
            ],
            Some(json!({"phase": "Available", "lastValidationTime": "2026-11-20T08:00:00Z"})),
        )
    } else {
        (
            "New",
            vec![
                accepted,
                condition(
                    "ClusterAdminApproved",
                    "False",
                    "BslSpecApprovalPending",
                    "NonAdminBackupStorageLocationRequest approval pending",
                ),
            ],
            None,
        )
    };
    let mut r = json!({"nacuuid": id, "name": id, "namespace": VELERO_NAMESPACE});
    if let Some(s) = velero_status {
        r["status"] = s;
    }
    json!({
        "metadata": {"name": name, "namespace": ns, "finalizers": [NABSL_FINALIZER]},
        "spec": {"backupStorageLocationSpec": spec},
        "status": {"phase": phase, "conditions": conditions, "veleroBackupStorageLocation": r},
    })
}
