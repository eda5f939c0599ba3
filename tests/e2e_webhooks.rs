//! End to end: the real API server calls nac's webhooks; namespace users act with only the editor role.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::STRICT_POLICY;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminRestore};
use nac::naming::{is_nacuuid_for, NAB_ORIGIN_NACUUID_LABEL, NAR_ORIGIN_NACUUID_LABEL};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::OnceCell;

static NAC: OnceCell<Env> = OnceCell::const_new();

/// nac with the strict policy and no controllers: these tests are about admission only.
async fn env() -> &'static Env {
    NAC.get_or_init(|| async {
        Env::start(
            STRICT_POLICY,
            NacOptions {
                controllers: false,
                ..NacOptions::default()
            },
        )
        .await
    })
    .await
}

fn nab(name: &str, backup_spec: Value) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1",
        "kind": "NonAdminBackup",
        "metadata": {"name": name},
        "spec": {"backupSpec": backup_spec}
    }))
    .unwrap()
}

fn denial(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        other => panic!("expected an API error, got {other}"),
    }
}

async fn tenant(prefix: &str) -> (String, Client) {
    env().await;
    let (ns, user, _) = new_tenant(prefix).await;
    (ns, user)
}

#[tokio::test]
async fn empty_nab_gets_own_namespace_policy_and_identity_with_warnings() {
    let (ns, user) = tenant("e2e-fill").await;
    let body = json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": "nightly"}, "spec": {"backupSpec": {}}
    });
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups");
    let (status, obj, warnings) = create_raw(&user, &path, &body).await;
    assert_eq!(status, 201, "{obj}");
    let spec = &obj["spec"]["backupSpec"];
    assert_eq!(spec["includedNamespaces"], json!([ns]));
    assert_eq!(spec["ttl"], "720h0m0s");
    assert_eq!(spec["defaultVolumesToFsBackup"], true);
    assert_eq!(spec["snapshotVolumes"], false);
    let id = obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL].as_str().unwrap();
    assert!(is_nacuuid_for(id, &ns, "nightly"), "{id}");
    let all = warnings.join("\n");
    assert!(
        all.contains("spec.backupSpec.ttl set to 720h0m0s by cluster policy"),
        "{all}"
    );
    assert!(
        all.contains("spec.backupSpec.defaultVolumesToFsBackup set to true"),
        "{all}"
    );
}

#[tokio::test]
async fn boundary_violations_are_refused_naming_the_field() {
    let (ns, user) = tenant("e2e-deny").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let cases = [
        (
            "other-ns",
            json!({"includedNamespaces": ["kube-system"]}),
            "spec.backupSpec.includedNamespaces",
        ),
        (
            "cluster",
            json!({"includeClusterResources": true}),
            "spec.backupSpec.includeClusterResources",
        ),
        (
            "scoped",
            json!({"includedClusterScopedResources": ["clusterroles"]}),
            "spec.backupSpec.includedClusterScopedResources",
        ),
        (
            "enforced",
            json!({"snapshotVolumes": true}),
            "spec.backupSpec.snapshotVolumes",
        ),
        ("ttl", json!({"ttl": "24h"}), "spec.backupSpec.ttl"),
        (
            "bsl",
            json!({"storageLocation": "admin-only"}),
            "spec.backupSpec.storageLocation",
        ),
    ];
    for (name, spec, field) in cases {
        let e = api.create(&PostParams::default(), &nab(name, spec)).await.unwrap_err();
        let msg = denial(e);
        assert!(msg.contains(field), "{name}: {msg}");
        assert!(msg.contains("denied the request"), "{name}: {msg}");
    }
    // Nothing was stored.
    assert!(api.list(&Default::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn forged_identity_label_does_not_survive_create() {
    let (ns, user) = tenant("e2e-forge").await;
    let forged = "victim-nightly-0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";
    let body = json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": "nightly", "labels": {NAB_ORIGIN_NACUUID_LABEL: forged}},
        "spec": {"backupSpec": {}}
    });
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups");
    let (status, obj, warnings) = create_raw(&user, &path, &body).await;
    assert_eq!(status, 201);
    let id = obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL].as_str().unwrap();
    assert_ne!(id, forged);
    assert!(is_nacuuid_for(id, &ns, "nightly"));
    assert!(warnings.join(" ").contains(NAB_ORIGIN_NACUUID_LABEL), "{warnings:?}");
}

#[tokio::test]
async fn after_create_spec_and_identity_are_frozen_but_delete_backup_is_allowed() {
    let (ns, user) = tenant("e2e-upd").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let created = api.create(&PostParams::default(), &nab("b1", json!({}))).await.unwrap();
    let id = created.metadata.labels.as_ref().unwrap()[NAB_ORIGIN_NACUUID_LABEL].clone();

    let e = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"backupSpec": {"includedResources": ["secrets"]}}})),
        )
        .await
        .unwrap_err();
    let msg = denial(e);
    assert!(
        msg.contains("spec.backupSpec.includedResources") && msg.contains("cannot be changed"),
        "{msg}"
    );

    let e = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAB_ORIGIN_NACUUID_LABEL: "x"}}})),
        )
        .await
        .unwrap_err();
    assert!(denial(e).contains(NAB_ORIGIN_NACUUID_LABEL));

    // Removing the label: the mutating webhook puts it back (so `kubectl replace` of the original works).
    let patched = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAB_ORIGIN_NACUUID_LABEL: null}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.as_ref().unwrap()[NAB_ORIGIN_NACUUID_LABEL], id);

    // Replace with the user's original manifest plus deleteBackup: allowed, nothing else changes.
    let mut original = nab("b1", json!({}));
    original.metadata.resource_version = patched.metadata.resource_version.clone();
    original.spec.delete_backup = true;
    let replaced = api.replace("b1", &PostParams::default(), &original).await.unwrap();
    assert!(replaced.spec.delete_backup);
    assert_eq!(replaced.spec.backup_spec, created.spec.backup_spec);
    assert_eq!(replaced.metadata.labels.as_ref().unwrap()[NAB_ORIGIN_NACUUID_LABEL], id);

    let e = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deleteBackup": false}})),
        )
        .await
        .unwrap_err();
    assert!(denial(e).contains("spec.deleteBackup"));
}

#[tokio::test]
async fn nar_rules_end_to_end() {
    let (ns, user) = tenant("e2e-nar").await;
    let api: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    let nar = |name: &str, spec: Value| -> NonAdminRestore {
        serde_json::from_value(json!({
            "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
            "metadata": {"name": name}, "spec": {"restoreSpec": spec}
        }))
        .unwrap()
    };
    let ok = api
        .create(&PostParams::default(), &nar("r1", json!({"backupName": "nightly"})))
        .await
        .unwrap();
    assert_eq!(ok.spec.restore_spec.restore_p_vs, Some(true));
    let id = &ok.metadata.labels.as_ref().unwrap()[NAR_ORIGIN_NACUUID_LABEL];
    assert!(is_nacuuid_for(id, &ns, "r1"));
    for (name, spec, field) in [
        (
            "map",
            json!({"backupName": "b", "namespaceMapping": {"a": "b"}}),
            "spec.restoreSpec.namespaceMapping",
        ),
        (
            "inc",
            json!({"backupName": "b", "includedNamespaces": ["other"]}),
            "spec.restoreSpec.includedNamespaces",
        ),
        (
            "sched",
            json!({"backupName": "b", "scheduleName": "s"}),
            "spec.restoreSpec.scheduleName",
        ),
        (
            "cluster",
            json!({"backupName": "b", "includeClusterResources": true}),
            "spec.restoreSpec.includeClusterResources",
        ),
        ("nobackup", json!({}), "spec.restoreSpec.backupName"),
        (
            "pvs",
            json!({"backupName": "b", "restorePVs": false}),
            "spec.restoreSpec.restorePVs",
        ),
    ] {
        let msg = denial(api.create(&PostParams::default(), &nar(name, spec)).await.unwrap_err());
        assert!(msg.contains(field), "{name}: {msg}");
    }
    let e = api
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restoreSpec": {"backupName": "other"}}})),
        )
        .await
        .unwrap_err();
    assert!(denial(e).contains("spec.restoreSpec.backupName"));
}

#[tokio::test]
async fn users_reach_nothing_outside_their_namespace() {
    let (ns, user) = tenant("e2e-rbac").await;
    let (other, _) = tenant("e2e-rbac-other").await;
    // RBAC: no access to another tenant's namespace, nor to Velero objects.
    let theirs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &other);
    let e = theirs
        .create(&PostParams::default(), &nab("x", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 403), "{e}");
    let gvk = GroupVersionKind::gvk("velero.io", "v1", "Backup");
    let velero: Api<DynamicObject> = Api::namespaced_with(user.clone(), VELERO_NAMESPACE, &ApiResource::from_gvk(&gvk));
    assert!(velero.list(&Default::default()).await.is_err());
    let _ = ns;
}

/// Creates a NonAdminBackup with `spec` as `client` would through kubectl, and returns the warnings the API server
/// passed on (kube's typed calls drop them).
async fn create_warned(client: &Client, ns: &str, name: &str, spec: Value) -> Vec<String> {
    let body = serde_json::to_vec(&json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": spec}
    }))
    .unwrap();
    let req = axum::http::Request::post(format!(
        "/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups"
    ))
    .header("content-type", "application/json")
    .body(kube::client::Body::from(body))
    .unwrap();
    let resp = client.send(req).await.unwrap();
    assert!(resp.status().is_success(), "create {name}: {}", resp.status());
    resp.headers()
        .get_all("warning")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

/// A fresh namespace owned by its user (nac's editor role and Kubernetes' `admin`): (admin, namespace, user, the
/// user's client).
async fn namespace_owner(prefix: &str) -> (Client, String, String, Client) {
    env().await;
    let c = Cluster::load();
    let admin = c.admin().await;
    let ns = unique_ns(prefix);
    ensure_namespace(&admin, &ns).await;
    let user = format!("user-{ns}");
    grant_editor(&admin, &ns, &user).await;
    let client = c.as_user(&user).await;
    (admin, ns, user, client)
}

/// Takes Kubernetes' `admin` role in `ns` from `user` (nac's editor role stays).
async fn revoke_ownership(admin: &Client, ns: &str, user: &str) {
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), ns)
        .delete(&format!("{user}-admin"), &Default::default())
        .await
        .unwrap();
}

/// nac runs here with `rights.authorizers: rbac` (the harness): an answer lasts until an RBAC change, seen through
/// nac's watches, could reach it. A revoked right is then applied within `rbac::SETTLE` of the change, well before
/// `CACHE_TTL` would have let the first answers expire.
#[tokio::test]
async fn a_revoked_right_is_applied_as_soon_as_nac_sees_the_rbac_change() {
    let (admin, ns, user, client) = namespace_owner("rbac-watch").await;
    // Kubernetes' `view` too, which stays: the backup keeps kinds its requester may read (one of nothing but kinds
    // they may not read is refused, Velero would fail it: `a_revoked_right_is_applied_to_backups_within_...`).
    bind(&admin, &ns, &user, "view").await;
    // The namespace holds a Secret: the warning names the Secrets first (nac may list them, as the chart installs
    // it and as an admin).
    create_app_secret(&admin, &ns).await;
    let spec = json!({ "includedResources": ["secrets", "deployments.apps"] });
    let first = create_warned(&client, &ns, "first", spec.clone()).await;
    assert!(!first.iter().any(|w| w.contains("left out")), "{first:?}");
    let answered = std::time::Instant::now();
    revoke_ownership(&admin, &ns, &user).await;
    let bound = nac::rights::rbac::SETTLE + Duration::from_secs(2);
    assert!(
        bound < nac::rights::CACHE_TTL,
        "the bound must tell the watch from the lifetime"
    );
    let warning = 'seen: {
        for i in 0.. {
            let warnings = create_warned(&client, &ns, &format!("next-{i}"), spec.clone()).await;
            if let Some(w) = warnings.iter().find(|w| w.contains("left out of the backup")) {
                break 'seen w.clone();
            }
            assert!(
                answered.elapsed() < bound,
                "the revoked right still applies {:?} after the first answers: {warnings:?}",
                answered.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        unreachable!()
    };
    assert!(
        warning.contains("spec.backupSpec: secrets left out of the backup (1 holds objects there"),
        "{warning}"
    );
}

#[tokio::test]
async fn a_revoked_right_is_applied_to_backups_within_the_cache_lifetime() {
    let (admin, ns, user, client) = namespace_owner("rights").await;
    // Kubernetes' `view` too, which stays: it reads ConfigMaps and Deployments, not Secrets.
    bind(&admin, &ns, &user, "view").await;
    let kinds = ["secrets", "configmaps", "deployments.apps"];
    let spec = json!({ "includedResources": kinds });
    // A namespace owner may list all three: nothing of theirs is left out.
    let first = create_warned(&client, &ns, "first", spec.clone()).await;
    assert!(!first.iter().any(|w| w.contains("left out")), "{first:?}");
    // Ownership revoked: the backup role and `view` remain.
    revoke_ownership(&admin, &ns, &user).await;
    tokio::time::sleep(nac::rights::CACHE_TTL + Duration::from_secs(1)).await;
    let second = create_warned(&client, &ns, "second", spec).await;
    let left_out = second.iter().find(|w| w.contains("left out of the backup")).cloned();
    let left_out = left_out.unwrap_or_else(|| panic!("no left-out warning: {second:?}"));
    assert!(left_out.contains("secrets left out of the backup"), "{left_out}");
    assert!(
        !left_out.contains("configmaps") && !left_out.contains("deployments"),
        "{left_out}"
    );
    // A backup of nothing but what they may no longer read would hold nothing, and Velero would fail it at
    // validation (its queue can then stall for every tenant): refused, naming the kind.
    let e = Api::<NonAdminBackup>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &nab("secrets-only", json!({"includedResources": ["secrets"]})),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("may not list in namespace") && e.to_string().contains("(secrets)"),
        "{e}"
    );
    // Both record who asked and the mode; the kinds are decided again when each Velero Backup is made.
    let nabs: Api<NonAdminBackup> = Api::namespaced(client, &ns);
    for name in ["first", "second"] {
        let n = nabs.get(name).await.unwrap();
        let annotations = n.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations[nac::rights::BACKUP_RIGHTS_ANNOTATION],
            r#"{"mode":"exclude"}"#
        );
        assert!(annotations[nac::rights::REQUESTER_ANNOTATION].contains(&user));
    }
}
