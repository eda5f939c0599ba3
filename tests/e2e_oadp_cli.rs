//! End to end: OADP's CLI (`kubectl oadp nonadmin ...`, `kubectl oadp nabsl-request ...`, a Go client on OADP's
//! and Velero's types) against nac. Each step sends the API requests that CLI sends, shaped as it shapes them:
//! objects as Go's JSON encoder writes OADP's types (unset value fields at their zero values, see
//! tests/fixtures/go-clients.json), updates as a GET followed by a PUT of the whole object, download requests
//! with a generated name, polled and deleted. The test plays Velero by patching Velero objects. Then the same
//! admin work with `kubectl nac` (bsl-request, get -A) and its refusals.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use nac::velero::{Backup, BackupStorageLocation, DeleteBackupRequest, DownloadRequest, Restore};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;

static NAC: OnceCell<Env> = OnceCell::const_new();

async fn env() -> &'static Env {
    NAC.get_or_init(|| Env::start(POLICY, NacOptions::default())).await
}

const T: Duration = Duration::from_secs(30);
const POLICY: &str = "enforceBackupSpec:\n  ttl: 720h0m0s\nnonAdminBSL:\n  enabled: true\n  requireApproval: true\n\
                      restore:\n  waitTimeout: 0\ndownloads:\n  adminLocations: [default]\nrights:\n  restore: off\n";

fn go_clients(key: &str) -> Value {
    let all: Value = serde_json::from_str(include_str!("fixtures/go-clients.json")).unwrap();
    all[key].clone()
}

/// One API request as a Go client sends it: (HTTP status, body).
async fn send(client: &Client, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default();
    let req = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(bytes))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

/// What a Go client writes back of a NonAdminBackup it read: the unset value fields of the BackupSpec at their
/// zero values again, durations in Go's spelling.
fn go_round_trip_backup(mut nab: Value) -> Value {
    let spec = nab["spec"]["backupSpec"].as_object_mut().unwrap();
    for (k, v) in go_clients("zeroBackupSpec").as_object().unwrap() {
        spec.entry(k.clone()).or_insert_with(|| v.clone());
    }
    nab
}

async fn opaque_secret(admin: &Client, ns: &str, name: &str) {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": name}, "type": "Opaque", "stringData": {"cloud": "[default]\naws_access_key_id = tenant\naws_secret_access_key = tenant-secret\n"}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// `kubectl oadp nabsl-request approve|reject NAME --reason R`: the request looked up by name, else by its
/// location in a list (the CLI compares the location's name only; other runs' namespaces share this cluster),
/// then a PUT of the whole object with the decision and the reason.
async fn decide(admin: &Client, ns: &str, location: &str, decision: &str, reason: &str) {
    let base =
        format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{VELERO_NAMESPACE}/nonadminbackupstoragelocationrequests");
    let (st, _) = send(admin, "GET", &format!("{base}/{location}"), None).await;
    assert_eq!(st, 404, "a location's name is not a request's");
    let request = eventually(T, &format!("the request for {location}"), || async {
        let (_, list) = send(admin, "GET", &base, None).await;
        list["items"]
            .as_array()?
            .iter()
            .find(|r| {
                let l = &r["status"]["nonAdminBackupStorageLocation"];
                l["name"] == location && l["namespace"] == ns
            })
            .cloned()
    })
    .await;
    let name = request["metadata"]["name"].as_str().unwrap().to_string();
    let (_, mut current) = send(admin, "GET", &format!("{base}/{name}"), None).await;
    current["spec"]["approvalDecision"] = json!(decision);
    current["metadata"]["annotations"]["openshift.io/oadp-approval-reason"] = json!(reason);
    let (st, body) = send(admin, "PUT", &format!("{base}/{name}"), Some(&current)).await;
    assert_eq!(st, 200, "{body}");
}

/// A download request as the CLI's `logs` and `describe` make it: created with a generated name, polled until
/// its Processed condition is True with a URL (Velero's answer played here), then deleted.
async fn download(user: &Client, admin: &Client, ns: &str, kind: &str, target: &str) -> String {
    let base = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadmindownloadrequests");
    let mut req = go_clients("oadpCliDownloadRequestCreate");
    req["metadata"]["generateName"] = json!(format!("{target}-{}-", kind.to_lowercase()));
    req["metadata"]["namespace"] = json!(ns);
    req["spec"]["target"] = json!({"kind": kind, "name": target});
    let (st, made) = send(user, "POST", &base, Some(&req)).await;
    assert_eq!(st, 201, "{made}");
    let name = made["metadata"]["name"].as_str().unwrap().to_string();
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    let drs: Api<DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let dr = format!("nadr-{uid}");
    wait_for(&drs, &dr, T, "Velero DownloadRequest", |d| d.map(|_| ())).await;
    let url = format!("https://s3.example/{target}/{kind}?X-Amz-Signature=1");
    drs.patch(
        &dr,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Processed", "downloadURL": url,
                                        "expiration": "2999-01-01T00:00:00Z"}})),
    )
    .await
    .unwrap();
    let got = eventually(T, &format!("{kind} of {target} answered"), || async {
        let (_, n) = send(user, "GET", &format!("{base}/{name}"), None).await;
        let processed = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Processed" && c["status"] == "True");
        let url = n["status"]["velero"]["status"]["downloadURL"].as_str()?.to_string();
        (processed && !url.is_empty()).then_some(url)
    })
    .await;
    let (st, _) = send(user, "DELETE", &format!("{base}/{name}"), None).await;
    assert_eq!(st, 200);
    got
}

async fn play_backup_completed(admin: &Client, user: &Client, ns: &str, name: &str) -> String {
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups/{name}");
    let vb = eventually(T, &format!("the Velero Backup of {name}"), || async {
        let (_, n) = send(user, "GET", &path, None).await;
        n["status"]["veleroBackup"]["name"].as_str().map(str::to_string)
    })
    .await;
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    wait_for(&velero, &vb, T, "Velero Backup", |b| b.map(|_| ())).await;
    velero
        .patch(
            &vb,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed", "completionTimestamp": "2026-11-26T00:00:00Z"}})),
        )
        .await
        .unwrap();
    eventually(T, &format!("{name} Completed"), || async {
        let (_, n) = send(user, "GET", &path, None).await;
        (n["status"]["veleroBackup"]["status"]["phase"] == "Completed").then_some(())
    })
    .await;
    vb
}

#[tokio::test]
async fn oadp_cli_requests_work_against_nac() {
    env().await;
    let (ns, user, admin) = new_tenant("oadp-cli").await;
    let api = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}");

    // `kubectl oadp nonadmin bsl create mine --provider aws --bucket tenants --prefix p --credential creds=cloud`,
    // and one more the admin rejects.
    opaque_secret(&admin, &ns, "creds").await;
    for name in ["mine", "theirs"] {
        let mut nabsl = go_clients("oadpCliBslCreate");
        nabsl["metadata"]["name"] = json!(name);
        nabsl["metadata"]["namespace"] = json!(ns);
        nabsl["spec"]["backupStorageLocationSpec"]["objectStorage"]["prefix"] = json!(name);
        let (st, body) = send(
            &user,
            "POST",
            &format!("{api}/nonadminbackupstoragelocations"),
            Some(&nabsl),
        )
        .await;
        assert_eq!(st, 201, "{body}");
    }
    // The admin's `nabsl-request approve mine --reason ...` and `nabsl-request reject theirs --reason ...`.
    decide(&admin, &ns, "mine", "approve", "bucket checked").await;
    decide(&admin, &ns, "theirs", "reject", "not our bucket").await;
    let location = |name: &'static str| {
        let (user, path) = (user.clone(), format!("{api}/nonadminbackupstoragelocations/{name}"));
        async move {
            let (_, n) = send(&user, "GET", &path, None).await;
            n
        }
    };
    let approved = |n: &Value| {
        n["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "ClusterAdminApproved"))
            .map(|c| c["status"].as_str().unwrap_or("").to_string())
    };
    eventually(T, "mine Created and approved", || async {
        let n = location("mine").await;
        (n["status"]["phase"] == "Created" && approved(&n).as_deref() == Some("True")).then_some(())
    })
    .await;
    // Velero finds the bucket (played).
    let uuid = location("mine").await["status"]["veleroBackupStorageLocation"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    Api::<BackupStorageLocation>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .patch(
            &uuid,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Available"}})),
        )
        .await
        .unwrap();
    eventually(T, "mine Available", || async {
        let n = location("mine").await;
        (n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available").then_some(())
    })
    .await;
    eventually(T, "theirs rejected", || async {
        (approved(&location("theirs").await).as_deref() == Some("False")).then_some(())
    })
    .await;

    // `kubectl oadp nonadmin backup create plain --force`: ttl, csiSnapshotTimeout and itemOperationTimeout
    // at "0s". Admitted with the enforced TTL, as OADP's controller does.
    let mut plain = go_clients("oadpCliBackupCreate");
    plain["metadata"] = json!({"name": "plain", "namespace": ns, "creationTimestamp": null});
    plain["spec"]["backupSpec"]["includedNamespaces"] = json!([ns]);
    let (st, made) = send(&user, "POST", &format!("{api}/nonadminbackups"), Some(&plain)).await;
    assert_eq!(st, 201, "{made}");
    assert_eq!(made["spec"]["backupSpec"]["ttl"], "720h0m0s", "{made}");
    // `... backup create flags --storage-location mine --include-resources configmaps --snapshot-volumes=false`.
    let mut flags = plain.clone();
    flags["metadata"]["name"] = json!("flags");
    let spec = &mut flags["spec"]["backupSpec"];
    spec["storageLocation"] = json!("mine");
    spec["includedResources"] = json!(["configmaps"]);
    spec["snapshotVolumes"] = json!(false);
    let (st, made) = send(&user, "POST", &format!("{api}/nonadminbackups"), Some(&flags)).await;
    assert_eq!(st, 201, "{made}");
    // A location the admin rejected cannot be used; the refusal names it.
    let mut rejected = flags.clone();
    rejected["metadata"]["name"] = json!("rejected");
    rejected["spec"]["backupSpec"]["storageLocation"] = json!("theirs");
    let (st, refused) = send(&user, "POST", &format!("{api}/nonadminbackups"), Some(&rejected)).await;

    let vb_plain = play_backup_completed(&admin, &user, &ns, "plain").await;
    let vb_flags = play_backup_completed(&admin, &user, &ns, "flags").await;
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let b = velero.get(&vb_flags).await.unwrap();
    assert_eq!(b.spec.snapshot_volumes, Some(false));
    assert_ne!(
        b.spec.storage_location.as_deref(),
        Some("mine"),
        "the Velero BSL nac made for it"
    );
    let b = velero.get(&vb_plain).await.unwrap();
    assert_eq!(b.spec.ttl.as_deref(), Some("720h0m0s"));
    assert!(b.spec.csi_snapshot_timeout.is_none() && b.spec.item_operation_timeout.is_none());
    if st == 201 {
        eventually(T, "the backup on the rejected location backs off", || async {
            let (_, n) = send(&user, "GET", &format!("{api}/nonadminbackups/rejected"), None).await;
            (n["status"]["phase"] == "BackingOff").then_some(())
        })
        .await;
    } else {
        assert!(refused.to_string().contains("theirs"), "{refused}");
    }

    // `backup get`: a list of the namespace's NonAdminBackups.
    let (st, list) = send(&user, "GET", &format!("{api}/nonadminbackups"), None).await;
    assert_eq!(st, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"plain") && names.contains(&"flags"), "{names:?}");

    // `backup describe flags`: the list, then download requests for the backup's files; `backup logs flags`.
    for kind in ["BackupResourceList", "BackupResults", "BackupLog"] {
        let url = download(&user, &admin, &ns, kind, "flags").await;
        assert!(url.starts_with("https://s3.example/"), "{url}");
    }
    let (_, events) = send(&user, "GET", &format!("/api/v1/namespaces/{ns}/events"), None).await;
    assert!(events["items"].is_array());

    // `restore create r --from-backup plain`, `restore logs r`, `restore delete r`.
    let mut nar = go_clients("oadpCliRestoreCreate");
    nar["metadata"] = json!({"name": "r", "namespace": ns, "creationTimestamp": null});
    nar["spec"]["restoreSpec"]["backupName"] = json!("plain");
    let (st, made) = send(&user, "POST", &format!("{api}/nonadminrestores"), Some(&nar)).await;
    assert_eq!(st, 201, "{made}");
    let vr = eventually(T, "the Velero Restore", || async {
        let (_, n) = send(&user, "GET", &format!("{api}/nonadminrestores/r"), None).await;
        n["status"]["veleroRestore"]["name"].as_str().map(str::to_string)
    })
    .await;
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let velero_restore = restores.get(&vr).await.unwrap();
    assert_eq!(velero_restore.spec.backup_name.as_deref(), Some(vb_plain.as_str()));
    restores
        .patch(
            &vr,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed", "completionTimestamp": "2026-11-26T00:00:00Z"}})),
        )
        .await
        .unwrap();
    download(&user, &admin, &ns, "RestoreLog", "r").await;
    let (st, _) = send(&user, "DELETE", &format!("{api}/nonadminrestores/r"), None).await;
    assert_eq!(st, 200);
    eventually(T, "restore r gone", || async {
        let (st, _) = send(&user, "GET", &format!("{api}/nonadminrestores/r"), None).await;
        (st == 404).then_some(())
    })
    .await;

    // `backup delete plain --confirm`: a GET, then a PUT of the whole object as Go writes it back, with
    // deleteBackup set. Accepted; Velero is asked to delete the backup and its data.
    let path = format!("{api}/nonadminbackups/plain");
    let (_, current) = send(&user, "GET", &path, None).await;
    let mut update = go_round_trip_backup(current);
    update["spec"]["deleteBackup"] = json!(true);
    let (st, body) = send(&user, "PUT", &path, Some(&update)).await;
    assert_eq!(st, 200, "{body}");
    let dbrs: Api<DeleteBackupRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    eventually(T, "a DeleteBackupRequest for plain", || async {
        let list = dbrs.list(&Default::default()).await.ok()?;
        list.items.iter().any(|d| d.spec.backup_name == vb_plain).then_some(())
    })
    .await;
}

/// A kubeconfig acting as `user` in `ns` (the admin's, impersonating), or the admin's own when `user` is None.
fn kubeconfig(dir: &Path, user: Option<&str>, ns: &str) -> PathBuf {
    let c = Cluster::load();
    let mut kc = kube::config::Kubeconfig::read_from(c.get("KUBECONFIG")).unwrap();
    for a in &mut kc.auth_infos {
        if let (Some(info), Some(user)) = (a.auth_info.as_mut(), user) {
            info.impersonate = Some(user.to_string());
            info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        }
    }
    for ctx in &mut kc.contexts {
        if let Some(c) = ctx.context.as_mut() {
            c.namespace = Some(ns.to_string());
        }
    }
    let path = dir.join(format!("{}.kubeconfig", user.unwrap_or("admin")));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
}

/// `kubectl-nac ARGS`: (exit code, stdout, stderr).
async fn plugin(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let (kc, args): (PathBuf, Vec<String>) = (kubeconfig.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-nac"))
            .env("KUBECONFIG", &kc)
            .args(&args)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn admins_decide_storage_locations_and_see_every_namespace_with_the_plugin() {
    env().await;
    let (ns, user, admin) = new_tenant("nac-admin").await;
    let api = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}");
    let dir = tempfile::tempdir().unwrap();
    let as_admin = kubeconfig(dir.path(), None, "default");
    let as_user = kubeconfig(dir.path(), Some(&format!("user-{ns}")), &ns);
    opaque_secret(&admin, &ns, "creds").await;
    let nabsl = json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackupStorageLocation",
        "metadata": {"name": "own"}, "spec": {"backupStorageLocationSpec": {"provider": "aws",
            "objectStorage": {"bucket": "tenants", "prefix": "p"}, "config": {"region": "eu-1"},
            "credential": {"name": "creds", "key": "cloud"}}}});
    let (st, body) = send(
        &user,
        "POST",
        &format!("{api}/nonadminbackupstoragelocations"),
        Some(&nabsl),
    )
    .await;
    assert_eq!(st, 201, "{body}");
    let location = format!("{ns}/own");

    // Pending requests across namespaces, one of them this tenant's, with what it asks for (nac writes that in the
    // request's status, just after making it).
    let out = eventually(T, "the pending request listed", || async {
        let (code, out, _) = plugin(&as_admin, &["bsl-request", "get", "--pending"]).await;
        (code == 0
            && out
                .lines()
                .any(|l| l.contains(&ns) && l.contains("Pending") && l.contains("tenants/p")))
        .then_some(out)
    })
    .await;
    assert!(out.starts_with("NAME"), "{out}");
    let (code, out, err) = plugin(&as_admin, &["bsl-request", "describe", &location]).await;
    assert_eq!(code, 0, "{err}");
    for want in [
        format!("For location: {location}"),
        "Provider:        aws".into(),
        "Bucket/prefix:   tenants/p".into(),
        "Config:          region=eu-1".into(),
        format!("Credential:      secret creds key cloud (in {ns})"),
    ] {
        assert!(out.contains(&want), "{want}\n{out}");
    }
    let (code, out, err) = plugin(
        &as_admin,
        &["bsl-request", "approve", &location, "--reason", "bucket checked"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("approved"), "{out}");
    eventually(T, "the location approved", || async {
        let (_, n) = send(&user, "GET", &format!("{api}/nonadminbackupstoragelocations/own"), None).await;
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "ClusterAdminApproved" && c["status"] == "True")
            .then_some(())
    })
    .await;
    let (_, out, _) = plugin(&as_admin, &["bsl-request", "describe", &location, "-o", "json"]).await;
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["spec"]["approvalDecision"], "approve");
    assert_eq!(
        r["metadata"]["annotations"]["openshift.io/oadp-approval-reason"],
        "bucket checked"
    );
    let (code, _, err) = plugin(&as_admin, &["bsl-request", "reject", &location, "--reason", "moved"]).await;
    assert_eq!(code, 0, "{err}");
    eventually(T, "the location rejected", || async {
        let (_, n) = send(&user, "GET", &format!("{api}/nonadminbackupstoragelocations/own"), None).await;
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "ClusterAdminApproved" && c["status"] == "False")
            .then_some(())
    })
    .await;

    // Every namespace's backups, with their namespaces; filtered by phase.
    let (code, _, err) = plugin(
        &as_user,
        &["backup", "create", "b1", "--include-resources", "configmaps"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = plugin(&as_admin, &["backup", "get", "-A"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("NAMESPACE"), "{out}");
    assert!(out.lines().any(|l| l.starts_with(&ns) && l.contains("b1")), "{out}");
    let (_, out, _) = plugin(&as_admin, &["backup", "get", "-A", "--phase", "Failed"]).await;
    assert!(!out.contains(&ns), "{out}");
    let (code, _, err) = plugin(&as_admin, &["restore", "get", "-A"]).await;
    assert_eq!(code, 0, "{err}");

    // A namespace user has none of these rights: exit 1, the right named.
    for args in [&["bsl-request", "get"][..], &["backup", "get", "-A"][..]] {
        let (code, _, err) = plugin(&as_user, args).await;
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("you lack the right") && err.contains("cannot list"),
            "{args:?}: {err}"
        );
    }

    // Velero's create flags: what nac forbids is refused with nac's message, what it allows is used.
    let (code, _, err) = plugin(&as_user, &["backup", "create", "b2", "--include-cluster-resources"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("spec.backupSpec.includeClusterResources is restricted"),
        "{err}"
    );
    let (code, _, err) = plugin(&as_user, &["restore", "create", "--from-schedule", "s"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("spec.restoreSpec.scheduleName"), "{err}");
    let (code, _, err) = plugin(
        &as_user,
        &[
            "schedule",
            "create",
            "s",
            "--schedule",
            "@daily",
            "--paused",
            "--or-selector",
            "app=a or app=b",
            "--item-operation-timeout",
            "2h",
            "--labels",
            "team=shop",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = plugin(&as_user, &["backup", "create", "--from-schedule", "s", "--ttl", "1h"]).await;
    assert_eq!(code, 1, "no spec flags with --from-schedule: {err}");
    let (code, out, err) = plugin(
        &as_user,
        &["backup", "create", "from-s", "--from-schedule", "s", "-o", "json"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let b: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        b["spec"]["backupSpec"]["orLabelSelectors"],
        json!([{"matchLabels": {"app": "a"}}, {"matchLabels": {"app": "b"}}])
    );
    assert_eq!(b["spec"]["backupSpec"]["itemOperationTimeout"], "2h");
}

/// `kubectl ARGS` with `kubeconfig` (the control plane's own kubectl, built with it): (exit code, stdout, stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let (kc, args): (PathBuf, Vec<String>) = (kubeconfig.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let o = std::process::Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("bin/kubectl"))
            .env("KUBECONFIG", &kc)
            .args(&args)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// The header of `kubectl get` output, its words.
fn header(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Scripts that read `kubectl get` by header or position see OADP's columns, in OADP's order (nac's own only with
/// `-o wide`). Each kind's object here came without a spec, which OADP's API admits and its controller reports
/// BackingOff: so does nac, with OADP's reason and a message naming what is missing.
#[tokio::test]
async fn kubectl_get_shows_oadp_s_columns_and_an_object_without_spec_backs_off() {
    env().await;
    let (ns, user, admin) = new_tenant("oadp-get").await;
    let api = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}");
    let kinds = [
        (
            "NonAdminBackup",
            "nonadminbackups",
            "nab",
            "InvalidBackupSpec",
            "spec.backupSpec is not set",
        ),
        (
            "NonAdminRestore",
            "nonadminrestores",
            "nar",
            "InvalidRestoreSpec",
            "spec.restoreSpec is not set",
        ),
        (
            "NonAdminBackupStorageLocation",
            "nonadminbackupstoragelocations",
            "nabsl",
            "BslSpecValidation",
            "spec.backupStorageLocationSpec is not set",
        ),
        (
            "NonAdminDownloadRequest",
            "nonadmindownloadrequests",
            "nadr",
            "Error",
            "spec.target is not set",
        ),
        (
            "NonAdminSchedule",
            "nonadminschedules",
            "nas",
            "InvalidScheduleSpec",
            "spec.template.backupSpec is not set",
        ),
    ];
    for (kind, plural, _, reason, message) in kinds {
        let bare = json!({"kind": kind, "apiVersion": "oadp.openshift.io/v1alpha1",
                          "metadata": {"name": "bare", "namespace": ns, "creationTimestamp": null}});
        let (st, body) = send(&user, "POST", &format!("{api}/{plural}"), Some(&bare)).await;
        assert_eq!(st, 201, "{kind}: {body}");
        let path = format!("{api}/{plural}/bare");
        let backed_off = eventually(T, &format!("{kind} without spec reported BackingOff"), || {
            let (user, path) = (user.clone(), path.clone());
            async move {
                let (_, o) = send(&user, "GET", &path, None).await;
                (o["status"]["phase"] == "BackingOff").then_some(o)
            }
        })
        .await;
        let conditions = backed_off["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c["status"] == "True" || c["status"] == "False")
                && conditions
                    .iter()
                    .any(|c| c["reason"] == reason && c["message"].as_str().is_some_and(|m| m.contains(message))),
            "{kind}: {backed_off}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::load();
    let as_user = {
        let mut kc = kube::config::Kubeconfig::read_from(c.get("KUBECONFIG")).unwrap();
        for a in &mut kc.auth_infos {
            if let Some(info) = a.auth_info.as_mut() {
                info.impersonate = Some(format!("user-{ns}"));
                info.impersonate_groups = Some(vec!["system:authenticated".into()]);
            }
        }
        let path = dir.path().join("user.kubeconfig");
        std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
        path
    };
    let oadp_columns = |short: &str| -> Vec<&str> {
        match short {
            "nab" | "nar" => vec!["NAME", "REQUEST-PHASE", "VELERO-PHASE", "AGE"],
            "nabsl" => vec!["NAME", "REQUEST-APPROVED", "REQUEST-PHASE", "VELERO-PHASE", "AGE"],
            "nadr" => vec!["NAME", "REQUEST-PHASE", "AGE"],
            "nas" => vec!["NAME", "REQUEST-PHASE", "VELERO-PHASE", "NEXT-RUN", "PAUSED", "AGE"],
            _ => unreachable!(),
        }
    };
    for (kind, _, short, _, _) in kinds {
        let (code, out, err) = kubectl(&as_user, &["-n", &ns, "get", short]).await;
        assert_eq!(code, 0, "{kind}: {err}");
        assert_eq!(header(&out), oadp_columns(short), "kubectl get {short}:\n{out}");
        assert!(out.lines().nth(1).unwrap().contains("BackingOff"), "{out}");
        let (_, wide, _) = kubectl(&as_user, &["-n", &ns, "get", short, "-o", "wide"]).await;
        let extra: Vec<&str> = match short {
            "nab" | "nar" => vec!["QUEUE-POSITION"],
            "nas" => vec!["SCHEDULE", "LAST-BACKUP"],
            _ => vec![],
        };
        let mut want = oadp_columns(short);
        want.extend(extra);
        assert_eq!(header(&wide), want, "kubectl get {short} -o wide:\n{wide}");
    }
    // The admin's view of the approval requests.
    let requests =
        format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{VELERO_NAMESPACE}/nonadminbackupstoragelocationrequests");
    let name = format!("{ns}-get");
    let req = json!({"kind": "NonAdminBackupStorageLocationRequest", "apiVersion": "oadp.openshift.io/v1alpha1",
                     "metadata": {"name": name}, "spec": {"approvalDecision": "pending"}});
    let (st, body) = send(&admin, "POST", &requests, Some(&req)).await;
    assert_eq!(st, 201, "{body}");
    let as_admin = dir.path().join("admin.kubeconfig");
    std::fs::copy(c.get("KUBECONFIG"), &as_admin).unwrap();
    let (code, out, err) = kubectl(&as_admin, &["-n", VELERO_NAMESPACE, "get", "nabslrequest", &name]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        header(&out),
        ["NAME", "REQUEST-PHASE", "REQUEST-NAMESPACE", "REQUEST-NAME", "AGE"],
        "{out}"
    );
    let (st, _) = send(&admin, "DELETE", &format!("{requests}/{name}"), None).await;
    assert_eq!(st, 200);
}
