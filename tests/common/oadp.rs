//! A tenant namespace as OADP's non-admin controller leaves it, for the tests of the move to nac: the objects of
//! `oadp_objects` put in a cluster (raw, dynamic objects, so nothing passes through nac's types on the way in), and
//! its download request.

use super::e2e::{NacProcess, VELERO_NAMESPACE};
pub use super::oadp_objects::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// nac's policy as `nac policy from-dpa` makes it from the DataProtectionApplication of the tests of the move
/// (`tests/fixtures/dpa/migration.yaml`), as JSON.
pub fn migration_policy() -> Value {
    let dpa = std::fs::read_to_string(format!(
        "{}/tests/fixtures/dpa/migration.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut p = nac::policy::from_dpa(&dpa).unwrap().policy;
    // The local S3 server, on loopback, allowed by name; and OADP's locations carry no record of who made them,
    // so whether their makers may read their Secrets cannot be asked: a move runs with rights.locations off (the
    // admin guide's steps) until they are made again.
    p["nonAdminBSL"]["allowedEndpoints"] = json!({"hosts": ["127.0.0.1"]});
    p["rights"]["locations"] = json!("off");
    p
}

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn oadp(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_lowercase());
    resource("oadp.openshift.io", "v1alpha1", kind, &plural)
}

pub fn velero(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_lowercase());
    resource("velero.io", "v1", kind, &plural)
}

/// Creates `obj` (raw) in `ns` and, for a kind with a status subresource, writes its status as the controller
/// did. Returns the object as stored.
pub async fn put(
    client: &Client,
    ar: &ApiResource,
    ns: &str,
    mut obj: Value,
    status_subresource: bool,
) -> DynamicObject {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    obj["apiVersion"] = json!(ar.api_version);
    obj["kind"] = json!(ar.kind);
    let status = obj.get("status").cloned();
    let made = api
        .create(&PostParams::default(), &serde_json::from_value(obj).unwrap())
        .await
        .unwrap_or_else(|e| panic!("creating {} as OADP left it: {e}", ar.kind));
    match (status, status_subresource) {
        (Some(s), true) => api
            .patch_status(
                &made.metadata.name.clone().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": s})),
            )
            .await
            .unwrap_or_else(|e| panic!("writing the status of {} as OADP left it: {e}", ar.kind)),
        _ => made,
    }
}

/// The tenant's credential Secret.
pub async fn tenant_secret(admin: &Client, ns: &str, name: &str) -> Value {
    let data =
        json!({"cloud": base64_of("[default]\naws_access_key_id=tenant\naws_secret_access_key=tenant-secret\n")});
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": data,
    }))
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
    data
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A NonAdminDownloadRequest answered (condition Processed), its URL expired, and its Velero DownloadRequest
/// `nadr-<uid>`: made after the request exists (its name holds the request's uid).
pub async fn expired_download(admin: &Client, ns: &str, name: &str, nab: &str, velero_backup: &str) -> String {
    let made = put(
        admin,
        &oadp("NonAdminDownloadRequest"),
        ns,
        json!({"metadata": {"name": name}, "spec": {"target": {"kind": "BackupLog", "name": nab}}}),
        true,
    )
    .await;
    let uid = made.metadata.uid.clone().unwrap();
    let answer = json!({"phase": "Processed", "downloadURL": "http://127.0.0.1:9000/tenant-bucket/log?sig=x",
                        "expiration": "2026-11-20T08:10:00Z"});
    let dr = format!("nadr-{uid}");
    put(
        admin,
        &velero("DownloadRequest"),
        VELERO_NAMESPACE,
        json!({
            "metadata": {"name": dr, "labels": labels("nadr", &uid), "annotations": annotations("nadr", ns, name)},
            "spec": {"target": {"kind": "BackupLog", "name": velero_backup}},
            "status": answer,
        }),
        false,
    )
    .await;
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &oadp("NonAdminDownloadRequest"));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Created",
            "conditions": [condition("Processed", "True", "Success", "")],
            "velero": {"status": answer},
        }})),
    )
    .await
    .unwrap();
    dr
}

/// nac's API writes so far, by kind (`nac_api_writes_total`); backup sync's among them also under `sync/KIND`
/// (`nac_backup_sync_writes_total`).
pub async fn writes(nac: &NacProcess) -> BTreeMap<String, u64> {
    let text = nac.metrics_text().await;
    text.lines()
        .filter_map(|l| {
            let (prefix, rest) = if let Some(rest) = l.strip_prefix("nac_api_writes_total{") {
                ("", rest)
            } else {
                ("sync/", l.strip_prefix("nac_backup_sync_writes_total{")?)
            };
            let kind = rest.split("kind=\"").nth(1)?.split('"').next()?;
            let n: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((format!("{prefix}{kind}"), n as u64))
        })
        .collect()
}

/// The writes between two readings, by kind (kinds with none left out, and the leader Lease's renewals, which
/// come with time, not with the objects).
pub fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| *k != "Lease")
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Asserts that two steps made the same writes, and some: two empty counts would compare equal whatever nac did.
pub fn assert_same_writes(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>, what: &str) {
    assert!(
        !a.is_empty() && !b.is_empty(),
        "{what}: no writes counted ({a:?}, {b:?})"
    );
    assert_eq!(a, b, "{what}");
}

/// nac's writes once it has stopped writing (no change for two seconds; failing after 120 s): what an earlier step
/// started (a finalizer's last retry, a late event) is not counted in the next one.
pub async fn quiet(nac: &NacProcess) -> BTreeMap<String, u64> {
    let mut last = writes(nac).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "nac never stopped writing for two seconds within 120 s: {last:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = writes(nac).await;
        if delta(&last, &now).is_empty() {
            return now;
        }
        last = now;
    }
}

/// The writes nac makes to Velero's objects and to tenant objects' metadata on a backup's or restore's path, out
/// of `writes`. Left out: status writes, which with the real Velero follow its progress updates (how many depends
/// on timing; the played Velero's suite compares them exactly), what other suites' storage locations cause
/// whenever Velero validates them, and backup sync's writes: Velero's own sync brings back, at any moment, the
/// backups other suites left in the shared bucket, and nac gives them their NonAdminBackups.
pub fn backup_path(writes: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    const KINDS: &[&str] = &[
        "Backup",
        "Restore",
        "DeleteBackupRequest",
        "DownloadRequest",
        "NonAdminBackup",
        "NonAdminRestore",
    ];
    writes
        .iter()
        .filter(|(k, _)| KINDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v - writes.get(&format!("sync/{k}")).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}
