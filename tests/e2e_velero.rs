//! End to end with the real Velero server and a real S3 server (`make cluster-up`, VELERO_MODE=real): namespace
//! users back up, restore and delete through nac's webhooks and reconciler, Velero does the work, and the
//! tests read the result where it lies (the bucket is plain files under `$S3_DATA_DIR`).
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::velero::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use nac::api::{
    NonAdminBackup, NonAdminBackupStorageLocation, NonAdminBackupStorageLocationRequest, NonAdminDownloadRequest,
    NonAdminRestore, NonAdminSchedule,
};
use nac::velero::{Backup, BackupStorageLocation, DeleteBackupRequest};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::OnceCell;

static NAC: OnceCell<Env> = OnceCell::const_new();

async fn env() -> &'static Env {
    NAC.get_or_init(|| async {
        use_velero(VeleroMode::Real);
        Env::start(POLICY, NacOptions::default()).await
    })
    .await
}

async fn tenant(prefix: &str) -> (String, Client, Client) {
    env().await;
    new_tenant(prefix).await
}

#[tokio::test]
async fn backup_completes_and_holds_exactly_the_namespace() {
    let (ns, user, admin) = tenant("vel-full").await;
    let (other_ns, _, _) = tenant("vel-other").await;
    workload(&admin, &ns).await;
    workload(&admin, &other_ns).await;
    // A download request open while the backup runs: a tenant's transient object, left out of the backup.
    // (Velero backs up the kinds it knew when it started: hack/test.sh restarts it after installing nac's CRDs.)
    let early: NonAdminDownloadRequest = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": "early-log"}, "spec": {"target": {"kind": "BackupLog", "name": "full"}}
    }))
    .unwrap();
    Api::<NonAdminDownloadRequest>::namespaced(user.clone(), &ns)
        .create(&PostParams::default(), &early)
        .await
        .unwrap();
    let api: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let created = api
        .create(&PostParams::default(), &nab("full", json!({})))
        .await
        .unwrap();
    let n = completed(&api, "full").await;
    let nadrs: Api<NonAdminDownloadRequest> = Api::namespaced(user.clone(), &ns);
    assert!(
        nadrs.get_opt("early-log").await.unwrap().is_some(),
        "there while the backup ran"
    );
    let st = &n["status"];
    assert_eq!(st["phase"], "Created");
    assert_eq!(st["queueInfo"]["estimatedQueuePosition"], 0);
    let vb_name = st["veleroBackup"]["name"].as_str().unwrap().to_string();
    let vs = &st["veleroBackup"]["status"];
    // Velero's own progress and times, mirrored.
    let (done, total) = (
        vs["progress"]["itemsBackedUp"].as_i64().unwrap(),
        vs["progress"]["totalItems"].as_i64().unwrap(),
    );
    assert!(total > 0 && done == total, "progress {done}/{total}");
    let start = seconds(&vs["startTimestamp"]);
    let end = seconds(&vs["completionTimestamp"]);
    assert!(start <= end);
    let nab_created = created.metadata.creation_timestamp.unwrap().0.as_second();
    let ttl = nac::policy::duration::GoDuration::parse(TTL).unwrap().0 as i64 / 1_000_000_000;
    let expiration = seconds(&vs["expiration"]);
    assert!(
        (expiration - (nab_created + ttl)).abs() <= 60,
        "expiration {} is not creation + {TTL}",
        vs["expiration"]
    );
    assert_eq!(st["veleroBackup"]["spec"]["ttl"], TTL);

    // In the bucket: the tarball and Velero's metadata files.
    let files = bucket_files(&vb_name);
    for f in [format!("{vb_name}.tar.gz"), "velero-backup.json".to_string()] {
        assert!(files.contains(&f), "{f} not in the bucket: {files:?}");
    }

    // The resource list: this namespace's objects and nothing else, no cluster-scoped kind but the namespace.
    let list = resource_list(&vb_name);
    for (kind, items) in &list {
        for item in items {
            if kind == "v1/Namespace" {
                assert_eq!(item, &ns, "another namespace in the backup");
            } else {
                assert!(
                    item.starts_with(&format!("{ns}/")),
                    "{kind} {item} is not of namespace {ns}"
                );
            }
        }
    }
    for cluster_kind in [
        "rbac.authorization.k8s.io/v1/ClusterRole",
        "apiextensions.k8s.io/v1/CustomResourceDefinition",
        "v1/PersistentVolume",
    ] {
        assert!(!list.contains_key(cluster_kind), "{cluster_kind} in the backup");
    }
    for kind in ["NonAdminBackup", "NonAdminDownloadRequest"] {
        assert!(
            listed(&list, &format!("oadp.openshift.io/v1alpha1/{kind}"), &ns).is_empty(),
            "nac's own objects are excluded: {kind} in {list:?}"
        );
    }
    let excluded = st["veleroBackup"]["spec"]["excludedResources"].as_array().unwrap();
    assert!(excluded.contains(&json!("nonadmindownloadrequests")), "{excluded:?}");
    // Exactly the workload's objects of each kind, compared with the live namespace.
    let cms = live_names::<ConfigMap>(&admin, &ns).await;
    assert!(cms.contains("app-config") && cms.contains("app-data"));
    assert_eq!(listed(&list, "v1/ConfigMap", &ns), cms);
    let secrets = live_names::<Secret>(&admin, &ns).await;
    assert_eq!(listed(&list, "v1/Secret", &ns), secrets);
    let deployments = live_names::<Deployment>(&admin, &ns).await;
    assert_eq!(listed(&list, "apps/v1/Deployment", &ns), deployments);
    let services = live_names::<Service>(&admin, &ns).await;
    assert_eq!(listed(&list, "v1/Service", &ns), services);
    assert_eq!(list["v1/Namespace"], vec![ns.clone()]);

    // The backup manifest built from the real tarball holds the same items as the resource list, and links the
    // Deployment to its ReplicaSet by owner UID.
    let tarball = std::fs::File::open(bucket_dir(&vb_name).join(format!("{vb_name}.tar.gz"))).unwrap();
    let manifest = nac::manifest::Manifest::from_tarball(tarball, &Default::default()).unwrap();
    assert_eq!(
        manifest.len(),
        list.values().map(Vec::len).sum::<usize>(),
        "{manifest:?}"
    );
    let web = manifest
        .get("deployments.apps", &ns, "web")
        .expect("the Deployment in the manifest");
    let replicasets = manifest.children(web);
    assert!(
        !replicasets.is_empty() && replicasets.iter().all(|r| r.api_group == "replicasets.apps"),
        "{replicasets:?}"
    );
    assert_eq!(manifest.owners(replicasets[0])[0].name, "web");

    // Its files are on the admin's location, which the policy does not open for downloads: refused with OADP's
    // condition, and nothing is asked of Velero.
    let req: NonAdminDownloadRequest = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": "full-log"}, "spec": {"target": {"kind": "BackupLog", "name": "full"}}
    }))
    .unwrap();
    let uid = nadrs
        .create(&PostParams::default(), &req)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let n = wait_json(&nadrs, "full-log", T, "refused", |n| {
        n["status"]["phase"] == "BackingOff"
    })
    .await;
    assert_eq!(
        condition_of(&n, "NonAdminBackupStorageLocationNotUsed"),
        ("True".into(), "Error".into())
    );
    let drs: Api<nac::velero::DownloadRequest> = Api::namespaced(admin, VELERO_NAMESPACE);
    assert!(drs.get_opt(&format!("nadr-{uid}")).await.unwrap().is_none());
}

#[tokio::test]
async fn restore_brings_back_deleted_objects() {
    let (ns, user, admin) = tenant("vel-restore").await;
    workload(&admin, &ns).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nabs.create(&PostParams::default(), &nab("before", json!({})))
        .await
        .unwrap();
    completed(&nabs, "before").await;

    // The objects go, the unrelated one stays.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    cms.delete("app-config", &DeleteParams::default()).await.unwrap();
    secrets.delete("app-secret", &DeleteParams::default()).await.unwrap();
    deployments.delete("web", &DeleteParams::background()).await.unwrap();
    eventually(T, "objects deleted", || async {
        (cms.get_opt("app-config").await.ok()?.is_none()
            && secrets.get_opt("app-secret").await.ok()?.is_none()
            && deployments.get_opt("web").await.ok()?.is_none())
        .then_some(())
    })
    .await;

    nars.create(&PostParams::default(), &nar("back", "before"))
        .await
        .unwrap();
    restore_finished(&nars, "back").await;
    let r = serde_json::to_value(nars.get("back").await.unwrap()).unwrap();
    let st = &r["status"];
    let vs = &st["veleroRestore"]["status"];
    assert_eq!(vs["phase"], "Completed", "restore: {st:#}");
    assert_eq!(st["phase"], "Created");
    assert!(vs["errors"].as_i64().unwrap_or(0) == 0, "{vs:#}");
    let (restored, total) = (
        vs["progress"]["itemsRestored"].as_i64().unwrap(),
        vs["progress"]["totalItems"].as_i64().unwrap(),
    );
    assert!(total > 0 && restored == total, "progress {restored}/{total}");
    assert!(seconds(&vs["startTimestamp"]) <= seconds(&vs["completionTimestamp"]));

    // Back with their data, labelled by Velero with the backup and restore they came from.
    let cm = cms.get("app-config").await.unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "hello");
    let secret = secrets.get("app-secret").await.unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, b"s3cr3t");
    let web = deployments.get("web").await.unwrap();
    assert_eq!(
        web.spec.unwrap().template.spec.unwrap().containers[0].image.as_deref(),
        Some("registry.example/shop:1.0")
    );
    let labels = cm.metadata.labels.unwrap();
    assert_eq!(
        labels["velero.io/restore-name"],
        st["veleroRestore"]["name"].as_str().unwrap()
    );
    assert_eq!(labels["app"], "shop");
}

#[tokio::test]
async fn delete_backup_true_removes_the_data_from_the_bucket() {
    let (ns, user, admin) = tenant("vel-dbr").await;
    workload(&admin, &ns).await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("old", json!({})))
        .await
        .unwrap();
    let n = completed(&api, "old").await;
    let vb_name = n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    assert!(bucket_files(&vb_name).contains(&format!("{vb_name}.tar.gz")));

    api.patch(
        "old",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deleteBackup": true}})),
    )
    .await
    .unwrap();
    wait_gone(&api, "old", T, "NAB removed after Velero deleted the backup").await;
    assert!(velero.get_opt(&vb_name).await.unwrap().is_none());
    eventually(T, "backup data gone from the bucket", || async {
        bucket_files(&vb_name).is_empty().then_some(())
    })
    .await;
    // Velero removes the DeleteBackupRequest once done; nac leaves none behind either.
    let dbrs: Api<DeleteBackupRequest> = Api::namespaced(admin, VELERO_NAMESPACE);
    let sel = format!("velero.io/backup-name={vb_name}");
    none_left(
        &dbrs,
        &ListParams::default().labels(&sel),
        "no DeleteBackupRequest left",
    )
    .await;
}

#[tokio::test]
async fn plain_delete_removes_the_object_and_keeps_the_data() {
    let (ns, user, admin) = tenant("vel-del").await;
    workload(&admin, &ns).await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("keep", json!({})))
        .await
        .unwrap();
    let n = completed(&api, "keep").await;
    let vb_name = n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let before = bucket_files(&vb_name);
    let nab_uid = api.get("keep").await.unwrap().metadata.uid;
    let vb_uid = velero.get(&vb_name).await.unwrap().metadata.uid;

    api.delete("keep", &DeleteParams::default()).await.unwrap();
    // Both objects go. Backup sync is on for this location: Velero's next storage sync (once a minute) may bring
    // the Backup back from the bucket and nac its NonAdminBackup, as new objects (new uids), because the data is
    // still there.
    eventually(T, "NAB and Velero Backup removed", || async {
        let nab_gone = api
            .get_opt("keep")
            .await
            .ok()?
            .is_none_or(|n| n.metadata.uid != nab_uid);
        let vb_gone = velero
            .get_opt(&vb_name)
            .await
            .ok()?
            .is_none_or(|b| b.metadata.uid != vb_uid);
        (nab_gone && vb_gone).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bucket_files(&vb_name), before);
    assert_no_delete_requests(&admin, &format!("velero.io/backup-name={vb_name}")).await;
}

/// A NonAdminBackup that goes without its finalizer running (removed by hand): its completed Velero Backup is not
/// collected (its data is in the bucket), and backup sync gives it its NonAdminBackup back within seconds.
#[tokio::test]
async fn a_completed_backup_whose_nab_went_uncleaned_is_kept_and_synced_back() {
    let (ns, user, admin) = tenant("vel-gc").await;
    workload(&admin, &ns).await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("kept", json!({})))
        .await
        .unwrap();
    let n = completed(&api, "kept").await;
    let vb_name = n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let vb_uid = velero.get(&vb_name).await.unwrap().metadata.uid;
    let nab_uid = n["metadata"]["uid"].clone();

    delete_uncleaned(&Api::<NonAdminBackup>::namespaced(admin.clone(), &ns), "kept").await;
    let back = wait_json(&api, "kept", Duration::from_secs(30), "NAB synced back", |n| {
        n["metadata"]["uid"] != nab_uid && n["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;
    assert_eq!(
        back["metadata"]["labels"][nac::naming::NAB_SYNCED_FROM_NACUUID_LABEL],
        vb_name.as_str()
    );
    // The same Velero Backup object throughout (collected and re-synced by Velero, it would have a new uid), also
    // after the collector's second look (10 s after the delete).
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(velero.get(&vb_name).await.unwrap().metadata.uid, vb_uid);
    assert!(bucket_files(&vb_name).contains(&format!("{vb_name}.tar.gz")));
}

#[tokio::test]
async fn fs_backup_without_node_agents_reports_velero_outcome() {
    let (ns, user, admin) = tenant("vel-fs").await;
    // A pod with a volume that file-system backup would copy; no node agent exists (no nodes at all).
    apply_yaml(
        &admin,
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: db, namespace: {ns}}}
spec:
  containers: [{{name: db, image: registry.example/db:1, volumeMounts: [{{name: data, mountPath: /data}}]}}]
  volumes: [{{name: data, emptyDir: {{}}}}]
"#
        ),
    )
    .await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    api.create(
        &PostParams::default(),
        &nab("fs", json!({"defaultVolumesToFsBackup": true})),
    )
    .await
    .unwrap();
    let n = velero_phase(
        &api,
        "fs",
        &["Completed", "PartiallyFailed", "Failed", "FailedValidation"],
    )
    .await;
    let st = &n["status"];
    // Velero's outcome without node agents: the API objects are backed up, the pod's volume data is not (the pod
    // is not scheduled), and Velero says so with a warning rather than a failure.
    assert_eq!(st["phase"], "Created");
    let vs = &st["veleroBackup"]["status"];
    assert_eq!(vs["phase"], "Completed", "{st:#}");
    assert_eq!(vs["warnings"], 1, "{st:#}");
    // No PodVolumeBackup could be made: every count zero, each left out as OADP writes them; no uploader.
    assert_eq!(st["fileSystemPodVolumeBackups"], json!({}), "{st:#}");
    assert!(st.get("uploaderType").is_none(), "{st:#}");
    let vb_name = st["veleroBackup"]["name"].as_str().unwrap().to_string();
    let results: Value =
        serde_json::from_slice(&gunzip(&bucket_dir(&vb_name).join(format!("{vb_name}-results.gz")))).unwrap();
    let warning = results["warnings"]["namespaces"][&ns][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(warning.contains("pod is not scheduled"), "Velero's warning: {results}");
    // nac makes the warning visible to the user: a Warning event naming the count and where the details are.
    let ev = event_about(&admin, &ns, "fs", "BackupCompletedWithWarnings", T).await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let msg = ev.message.unwrap_or_default();
    assert!(msg.contains("1 warning(s)") && msg.contains(&vb_name), "{msg}");
    // The warning itself, which the user could not read otherwise (Velero's namespace is not theirs): nac reads
    // the backup's results file once and puts what it says for the namespace in a condition, and an Event.
    let cond = eventually(T, "the VeleroResults condition", || async {
        condition(&serde_json::to_value(api.get("fs").await.ok()?).ok()?, "VeleroResults")
    })
    .await;
    assert_eq!(cond["status"], "True", "{cond:#}");
    assert_eq!(cond["reason"], "WarningsReported", "{cond:#}");
    let said = cond["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("0 error(s) and 1 warning(s); Velero's results say: warning: ") && said.contains(&warning),
        "{said}"
    );
    assert!(said.contains("kubectl nac backup logs fs"), "{said}");
    let ev = event_about(&admin, &ns, "fs", "WarningsReported", T).await;
    assert_eq!(ev.message.as_deref(), Some(said));
    // Read once: the DownloadRequest nac asked Velero for is gone, and none is made again (nac would try again
    // every 30 s): after that long the condition is the same and no request of nac's for the backup exists.
    let requests: Api<nac::velero::DownloadRequest> = Api::namespaced(admin, VELERO_NAMESPACE);
    let ours = || async {
        let items = requests.list(&ListParams::default()).await.unwrap().items;
        items.iter().filter(|d| d.spec.target.name == vb_name).count()
    };
    eventually(T, "nac's DownloadRequest deleted", || async {
        (ours().await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(35)).await;
    let later = condition(
        &serde_json::to_value(api.get("fs").await.unwrap()).unwrap(),
        "VeleroResults",
    )
    .unwrap();
    assert_eq!(later, cond, "the condition is written once");
    assert_eq!(ours().await, 0, "no DownloadRequest made again");
}

/// `kubectl apply -f` of `yaml` as the tenant user of `ns` (the editor role, through impersonation).
fn kubectl_apply_as_tenant(ns: &str, yaml: &str) {
    let c = Cluster::load();
    let file = std::env::temp_dir().join(format!("nac-e2e-{ns}-apply.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/bin/kubectl"))
        .args(["--kubeconfig", c.get("KUBECONFIG"), "-n", ns])
        .arg(format!("--as=user-{ns}"))
        .args(["--as-group=system:authenticated", "apply", "-f"])
        .arg(&file)
        .output()
        .expect("running kubectl");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "kubectl apply: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the Velero Restore of a NonAdminRestore finished and returns its phase.
#[tokio::test]
async fn restores_wait_for_a_backup_applied_with_them_or_after_them() {
    let (ns, user, admin) = tenant("vel-wait").await;
    workload(&admin, &ns).await;
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);

    // A restore of a backup that does not exist yet waits for it, and nothing is asked of Velero.
    nars.create(&PostParams::default(), &nar("early", "together"))
        .await
        .unwrap();
    let message = waiting(&nars, "early").await;
    assert!(
        message.contains("waiting for NonAdminBackup together: it does not exist") && message.contains("10m0s"),
        "{message}"
    );
    assert!(nars
        .get("early")
        .await
        .unwrap()
        .status
        .unwrap()
        .velero_restore
        .is_none());

    // A backup and a restore of it in one `kubectl apply -f`: the restore waits for the backup, then runs.
    kubectl_apply_as_tenant(
        &ns,
        "apiVersion: oadp.openshift.io/v1alpha1\nkind: NonAdminBackup\nmetadata: {name: together}\n\
         spec: {backupSpec: {}}\n---\napiVersion: oadp.openshift.io/v1alpha1\nkind: NonAdminRestore\n\
         metadata: {name: with-it}\nspec: {restoreSpec: {backupName: together}}\n",
    );
    let nabs: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    completed(&nabs, "together").await;
    for name in ["early", "with-it"] {
        assert_eq!(restore_finished(&nars, name).await, "Completed", "{name}");
        let n = nars.get(name).await.unwrap();
        let q = nar_condition(&n, "Queued").unwrap();
        assert_eq!((q.0.as_str(), q.1.as_str()), ("True", "RestoreScheduled"), "{name}");
    }
    // Both waits were announced.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin, &ns);
    let waited: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("WaitingForBackup"))
        .filter_map(|e| e.regarding?.name)
        .collect();
    assert!(waited.contains(&"early".to_string()), "{waited:?}");
}

/// Waiting for a backup that never comes ends at the restore's own timeout. (A restore of a failed backup:
/// `tests/e2e_velero_restarts.rs`, which restarts Velero after it.)
#[tokio::test]
async fn a_restore_waiting_for_a_backup_that_never_comes_times_out() {
    let (ns, user, _) = tenant("vel-wait-fail").await;
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nars.create(&PostParams::default(), &waiting_nar("late", "never", "5s"))
        .await
        .unwrap();
    waiting(&nars, "late").await;
    let n = backing_off(&nars, "late").await;
    let (_, reason, message) = nar_condition(&n, "Accepted").unwrap();
    assert_eq!(reason, "BackupWaitTimedOut");
    assert!(message.contains("waited 5s for NonAdminBackup never"), "{message}");
    let after = accepted_after_creation(&n);
    assert!((5.0..20.0).contains(&after), "gave up {after}s after creation");
}

#[tokio::test]
async fn a_tenants_own_storage_location_approved_used_rotated_revoked_and_deleted() {
    let (ns, user, admin) = tenant("vel-bsl").await;
    let (other_ns, other_user, _) = tenant("vel-bsl-other").await;
    workload(&admin, &ns).await;
    let bucket = format!("tenant-{ns}");
    create_bucket(&bucket);
    tenant_secret(&admin, &ns, "s3", None).await;
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    nabsls
        .create(&PostParams::default(), &nabsl("own", &bucket, "nightly", "s3"))
        .await
        .unwrap();

    // Approval required: it waits, and the admin's request names it.
    let n = wait_json(&nabsls, "own", T, "approval pending", |n| {
        condition_of(n, "ClusterAdminApproved").1 == "BslSpecApprovalPending"
    })
    .await;
    assert_eq!(n["status"]["phase"], "New");
    assert_eq!(
        condition_of(&n, "Accepted"),
        ("True".into(), "BslSpecValidation".into())
    );
    let uuid = n["status"]["veleroBackupStorageLocation"]["nacuuid"]
        .as_str()
        .unwrap()
        .to_string();
    let requests: Api<NonAdminBackupStorageLocationRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let req = wait_for(&requests, &uuid, T, "request with its status", |r| {
        let s = r?.status.clone()?;
        s.non_admin_backup_storage_location.is_some().then_some(s)
    })
    .await;
    assert_eq!(req.phase, Some(nac::api::RequestPhase::Pending));
    let asked = req.non_admin_backup_storage_location.unwrap();
    assert_eq!(
        (asked.namespace.as_deref(), asked.name.as_deref()),
        (Some(ns.as_str()), Some("own"))
    );
    assert_eq!(asked.requested_spec.object_storage.bucket, bucket);
    // Nothing exists in Velero's namespace before approval, and the tenant reads nothing there.
    let locations: Api<BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    assert!(locations.get_opt(&uuid).await.unwrap().is_none());
    for denied in [
        Api::<NonAdminBackupStorageLocationRequest>::namespaced(user.clone(), VELERO_NAMESPACE)
            .get(&uuid)
            .await
            .err(),
        Api::<Secret>::namespaced(user.clone(), VELERO_NAMESPACE)
            .get(&uuid)
            .await
            .err(),
    ] {
        assert!(matches!(denied, Some(kube::Error::Api(e)) if e.code == 403));
    }

    // Approved: the Secret copy and the Velero BSL appear, Velero validates it, the status mirrors Available.
    decide(&admin, &uuid, "approve").await;
    let n = wait_json(&nabsls, "own", T, "Created and Available", |n| {
        n["status"]["phase"] == "Created"
            && n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    let types: Vec<&str> = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "Accepted",
            "ClusterAdminApproved",
            "SecretSynced",
            "BackupStorageLocationSynced"
        ]
    );
    let bsl = locations.get(&uuid).await.unwrap();
    assert_eq!(bsl.spec.credential.as_ref().unwrap().name, uuid);
    assert_eq!(
        bsl.spec.object_storage.prefix.as_deref(),
        Some(format!("{ns}/nightly").as_str())
    );
    assert!(!bsl.spec.default);
    let copies: Api<Secret> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    assert!(copies.get_opt(&uuid).await.unwrap().is_some());
    let reqs_phase = requests.get(&uuid).await.unwrap().status.unwrap().phase;
    assert_eq!(reqs_phase, Some(nac::api::RequestPhase::Approved));

    // A backup on it lands in the tenant's bucket under its namespace, not in the admin's.
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    nabs.create(&PostParams::default(), &nab("mine", json!({"storageLocation": "own"})))
        .await
        .unwrap();
    let done = completed(&nabs, "mine").await;
    let vb = done["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    assert_eq!(done["status"]["veleroBackup"]["spec"]["storageLocation"], uuid.as_str());
    let files = files_in(&bucket, &format!("{ns}/nightly"), &vb);
    assert!(files.contains(&format!("{vb}.tar.gz")), "{files:?}");
    assert!(bucket_files(&vb).is_empty(), "the backup is in the admin's bucket too");

    // The tenant reads their backup's files through download requests, from their own location: the log and the
    // resource list name their objects and nothing of another namespace.
    let nadrs: Api<NonAdminDownloadRequest> = Api::namespaced(user.clone(), &ns);
    let log = String::from_utf8(download(&nadrs, "mine-log", "BackupLog", "mine").await).unwrap();
    assert!(log.contains("app-config") && log.contains(&ns), "{log}");
    assert!(!log.contains(&other_ns), "another namespace in the log");
    let list: std::collections::BTreeMap<String, Vec<String>> =
        serde_json::from_slice(&download(&nadrs, "mine-list", "BackupResourceList", "mine").await).unwrap();
    assert!(listed(&list, "v1/ConfigMap", &ns).contains("app-config"), "{list:?}");
    for (kind, items) in &list {
        for item in items {
            assert!(
                item == &ns || item.starts_with(&format!("{ns}/")),
                "{kind} {item} in the resource list"
            );
        }
    }

    // A restore from that backup reads it from the tenant's location.
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .delete("app-config", &DeleteParams::default())
        .await
        .unwrap();
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    nars.create(&PostParams::default(), &nar("back", "mine")).await.unwrap();
    assert_eq!(restore_finished(&nars, "back").await, "Completed");
    let log = String::from_utf8(download(&nadrs, "back-log", "RestoreLog", "back").await).unwrap();
    assert!(log.contains("app-config"), "{log}");
    let results: Value =
        serde_json::from_slice(&download(&nadrs, "back-results", "RestoreResults", "back").await).unwrap();
    assert!(
        results.get("errors").is_some() || results.get("warnings").is_some(),
        "{results}"
    );
    // What the results say for the namespace (objects that exist already, here) is in the restore's status, read
    // by nac from the tenant's own location through the same guard as a backup's contents.
    // Errors first, then warnings; of each, Velero's own, then the namespace's.
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect()
    };
    let mut expected = Vec::new();
    for mark in ["errors", "warnings"] {
        for m in strings(&results[mark]["velero"])
            .into_iter()
            .chain(strings(&results[mark]["namespaces"][&ns]))
        {
            // On one line, as nac shows it.
            let line: String = m.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
            expected.push(format!("{}: {}", mark.trim_end_matches('s'), line.trim()));
        }
    }
    assert!(
        !expected.is_empty(),
        "Velero reported something for the namespace: {results}"
    );
    let said = eventually(T, "the restore's VeleroResults condition", || async {
        condition(
            &serde_json::to_value(nars.get("back").await.ok()?).ok()?,
            "VeleroResults",
        )
    })
    .await;
    let with_errors = !strings(&results["errors"]["velero"]).is_empty()
        || results["errors"]["namespaces"]
            .as_object()
            .is_some_and(|m| !m.is_empty());
    assert_eq!(
        said["reason"],
        if with_errors {
            "ErrorsReported"
        } else {
            "WarningsReported"
        },
        "{said:#} {results}"
    );
    let message = said["message"].as_str().unwrap_or_default();
    let first: String = expected[0].chars().take(200).collect();
    assert!(
        message.contains(&format!("Velero's results say: {first}")),
        "{message} {results}"
    );
    assert!(Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get_opt("app-config")
        .await
        .unwrap()
        .is_some());

    // Only the object deleted (the data stays in the bucket): Velero's sync of the tenant's location brings the
    // Backup back, and backup sync gives the tenant the NonAdminBackup back, on their location.
    nabs.delete("mine", &DeleteParams::default()).await.unwrap();
    wait_gone(&nabs, "mine", T, "NAB deleted").await;
    let back = wait_json(&nabs, "mine", Duration::from_secs(180), "NAB synced back", |n| {
        n["metadata"]["labels"][nac::naming::NAB_SYNCED_FROM_NACUUID_LABEL] == vb.as_str()
            && n["status"]["phase"] == "Created"
    })
    .await;
    assert_eq!(back["spec"]["backupSpec"]["storageLocation"], "own");
    assert_eq!(back["status"]["veleroBackup"]["status"]["phase"], "Completed");

    // A backup planted in the tenant's bucket claiming the other namespace is synced by Velero (it is in a
    // location Velero reads) but never given to that namespace.
    let planted = nac::naming::generate_nacuuid(&other_ns, "planted");
    let mut meta: Value = serde_json::from_slice(
        &std::fs::read(
            std::path::PathBuf::from(Cluster::load().get("S3_DATA_DIR"))
                .join(&bucket)
                .join(format!("{ns}/nightly/backups/{vb}/velero-backup.json")),
        )
        .unwrap(),
    )
    .unwrap();
    meta["metadata"]["name"] = json!(planted);
    meta["metadata"]["labels"][nac::naming::NAB_ORIGIN_NACUUID_LABEL] = json!(planted);
    meta["metadata"]["annotations"][nac::naming::NAB_ORIGIN_NAMESPACE_ANNOTATION] = json!(other_ns);
    meta["metadata"]["annotations"][nac::naming::NAB_ORIGIN_NAME_ANNOTATION] = json!("planted");
    // And one that has not run yet (phase New) for the other namespace: synced as written, Velero would back that
    // namespace up into this tenant's bucket. nac's guard refuses its creation.
    let unrun = nac::naming::generate_nacuuid(&ns, "unrun");
    let mut unrun_meta = meta.clone();
    unrun_meta["metadata"]["name"] = json!(unrun);
    unrun_meta["metadata"]["labels"][nac::naming::NAB_ORIGIN_NACUUID_LABEL] = json!(unrun);
    unrun_meta["spec"]["includedNamespaces"] = json!([other_ns]);
    unrun_meta["status"] = json!({"phase": "New"});
    for (name, body) in [(&unrun, &unrun_meta), (&planted, &meta)] {
        put_object(
            &bucket,
            &format!("{ns}/nightly/backups/{name}/velero-backup.json"),
            &serde_json::to_vec(body).unwrap(),
        );
    }
    let velero_backups: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    wait_for(
        &velero_backups,
        &planted,
        Duration::from_secs(180),
        "Velero synced the planted backup",
        |b| b.map(|_| ()),
    )
    .await;
    // The sync pass that brought it is over once the location's last-synced time moves on.
    let synced_at = |l: Option<&BackupStorageLocation>| {
        l.and_then(|l| l.status.as_ref())
            .and_then(|s| s.last_synced_time.clone())
    };
    let seen = synced_at(locations.get(&uuid).await.ok().as_ref());
    wait_for(&locations, &uuid, Duration::from_secs(180), "sync pass over", |l| {
        let now = synced_at(l)?;
        (Some(&now) != seen.as_ref()).then_some(())
    })
    .await;
    assert!(
        velero_backups.get_opt(&unrun).await.unwrap().is_none(),
        "an unfinished backup planted in a tenant's bucket was created"
    );
    // Refused by the guard at Velero's create (Velero has its own identity), not created and collected later.
    let metrics = env().await.nac.metrics_text().await;
    let refused: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("nac_webhook_requests_total") && l.contains("/validate/velero-backups"))
        .filter(|l| l.to_ascii_lowercase().contains("denied"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // Velero 1.18.3 and later sync finished backups only: it skips the planted one itself, and says so in its
    // log. Earlier releases create it, and then nac's guard refuses it.
    let velero_log = std::fs::read_to_string(Cluster::load().get("VELERO_LOG")).unwrap_or_default();
    let skipped_by_velero = velero_log
        .lines()
        .any(|l| l.contains(&unrun) && l.contains("not a phase that can be synced"));
    assert!(
        refused >= 1.0 || skipped_by_velero,
        "neither did the guard refuse a Velero Backup nor did Velero skip the unfinished one: {metrics}"
    );
    assert!(
        !files_in(&bucket, &format!("{ns}/nightly"), &unrun)
            .iter()
            .any(|f| f.ends_with(".tar.gz")),
        "Velero ran the planted backup"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let victim: Api<NonAdminBackup> = Api::namespaced(admin.clone(), &other_ns);
    assert!(
        victim.get_opt("planted").await.unwrap().is_none(),
        "a planted backup was synced"
    );

    // Another namespace cannot name it.
    let theirs: Api<NonAdminBackup> = Api::namespaced(other_user, &other_ns);
    theirs
        .create(
            &PostParams::default(),
            &nab("borrow", json!({"storageLocation": "own"})),
        )
        .await
        .unwrap();
    let refused = wait_for(&theirs, "borrow", T, "refused", |o| {
        let v = serde_json::to_value(o?).unwrap();
        (v["status"]["phase"] == "BackingOff").then_some(v)
    })
    .await;
    assert!(refused["status"]["conditions"]
        .to_string()
        .contains("NonAdminBackupStorageLocation not found in the namespace"));

    // Credential rotation reaches the copy within seconds: the file nac writes from the keys (here the same keys
    // and a region added).
    let c = Cluster::load();
    let rotated = format!("{}region = {}\n", s3_credentials(None), c.get("S3_REGION"));
    let written = format!(
        "[default]\naws_access_key_id={}\naws_secret_access_key={}\nregion={}\n",
        c.get("S3_ACCESS_KEY"),
        c.get("S3_SECRET_KEY"),
        c.get("S3_REGION")
    );
    Api::<Secret>::namespaced(admin.clone(), &ns)
        .patch(
            "s3",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"cloud": rotated}})),
        )
        .await
        .unwrap();
    wait_for(&copies, &uuid, Duration::from_secs(20), "rotated copy", |s| {
        let d = s?.data.as_ref()?.get("cloud")?;
        (d.0 == written.as_bytes()).then_some(())
    })
    .await;
    wait_json(&nabsls, "own", T, "SecretUpdated", |n| {
        condition_of(n, "SecretSynced").1 == "SecretUpdated"
    })
    .await;

    // Revoked: the Velero BSL and the copy go, the location says why, new backups on it are refused.
    decide(&admin, &uuid, "reject").await;
    wait_gone(&locations, &uuid, T, "Velero BSL removed on reject").await;
    wait_gone(&copies, &uuid, T, "Secret copy removed on reject").await;
    let n = wait_json(&nabsls, "own", T, "rejected", |n| {
        condition_of(n, "ClusterAdminApproved").1 == "BslSpecRejected"
    })
    .await;
    assert_eq!(n["status"]["phase"], "Created", "phases only move forward");
    // The backup made on it says its location is gone (and stays: nac does not delete it).
    let mine = wait_for(&nabs, "mine", T, "location gone reported", |o| {
        let v = serde_json::to_value(o?).unwrap();
        (condition_of(&v, "BackupStorageLocationAvailable").1 == "BackupStorageLocationNotFound").then_some(v)
    })
    .await;
    assert_eq!(mine["status"]["phase"], "Created");
    nabs.create(&PostParams::default(), &nab("late", json!({"storageLocation": "own"})))
        .await
        .unwrap();
    let late = wait_for(&nabs, "late", T, "refused", |o| {
        let v = serde_json::to_value(o?).unwrap();
        (v["status"]["phase"] == "BackingOff").then_some(v)
    })
    .await;
    assert!(late["status"]["conditions"]
        .to_string()
        .contains("not in created state"));

    // Deleted: its request goes too; the backup made on it stays (its data is in the tenant's bucket).
    nabsls.delete("own", &DeleteParams::default()).await.unwrap();
    wait_gone(&nabsls, "own", T, "NABSL deleted").await;
    wait_gone(&requests, &uuid, T, "request removed").await;
    assert!(nabs.get_opt("mine").await.unwrap().is_some());
    assert!(files_in(&bucket, &format!("{ns}/nightly"), &vb).contains(&format!("{vb}.tar.gz")));
}

#[tokio::test]
async fn wrong_credentials_make_the_location_unavailable_and_backups_on_it_are_refused() {
    let (ns, user, admin) = tenant("vel-bsl-bad").await;
    let bucket = format!("tenant-{ns}");
    create_bucket(&bucket);
    tenant_secret(&admin, &ns, "s3", Some("not-the-secret")).await;
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    nabsls
        .create(&PostParams::default(), &nabsl("bad", &bucket, "", "s3"))
        .await
        .unwrap();
    let n = wait_json(&nabsls, "bad", T, "request made", |n| {
        condition_of(n, "ClusterAdminApproved").1 == "BslSpecApprovalPending"
    })
    .await;
    let uuid = n["status"]["veleroBackupStorageLocation"]["nacuuid"]
        .as_str()
        .unwrap()
        .to_string();
    decide(&admin, &uuid, "approve").await;
    let n = wait_json(&nabsls, "bad", T, "Unavailable mirrored", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Unavailable"
    })
    .await;
    assert_eq!(n["status"]["phase"], "Created");
    let nabs: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    nabs.create(
        &PostParams::default(),
        &nab("on-bad", json!({"storageLocation": "bad"})),
    )
    .await
    .unwrap();
    let refused = wait_for(&nabs, "on-bad", T, "refused", |o| {
        let v = serde_json::to_value(o?).unwrap();
        (v["status"]["phase"] == "BackingOff").then_some(v)
    })
    .await;
    assert!(
        refused["status"]["conditions"].to_string().contains(&format!(
            "VeleroBackupStorageLocation with NACUUID {uuid} is not in available state and can not be used for the NonAdminBackup"
        )),
        "{}",
        refused["status"]
    );
}

#[tokio::test]
async fn a_backup_holds_only_what_its_requester_may_read() {
    let (ns, _owner, admin) = tenant("vel-rights").await;
    workload(&admin, &ns).await;
    // A user who may create NonAdminBackups and read ConfigMaps, not Secrets.
    let reader = format!("reader-{ns}");
    bind_editor(&admin, &ns, &reader).await;
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "configmap-reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "configmap-reader", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": reader}]
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
    let user = Cluster::load().as_user(&reader).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let created = nabs
        .create(&PostParams::default(), &nab("narrow", json!({})))
        .await
        .unwrap();
    // The record is the mode; the kinds are decided when the Velero Backup is made (checked below).
    assert_eq!(
        created.metadata.annotations.as_ref().unwrap()[nac::rights::BACKUP_RIGHTS_ANNOTATION],
        r#"{"mode":"exclude"}"#
    );

    // The real backup: the ConfigMaps, no Secret.
    let done = completed(&nabs, "narrow").await;
    let vb = done["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let list = resource_list(&vb);
    assert_eq!(
        listed(&list, "v1/ConfigMap", &ns),
        live_names::<ConfigMap>(&admin, &ns).await
    );
    assert!(!live_names::<Secret>(&admin, &ns).await.is_empty());
    assert!(listed(&list, "v1/Secret", &ns).is_empty(), "{list:?}");
    // Velero was told: the Velero Backup's exclusions name what the reader may not list.
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let b = serde_json::to_value(velero.get(&vb).await.unwrap()).unwrap();
    assert!(
        b["spec"]["excludedResources"]
            .as_array()
            .unwrap()
            .contains(&json!("secrets")),
        "{b}"
    );
}

/// The message of a NonAdminRestore's ResourcesLeftOut condition.
#[tokio::test]
async fn a_crafted_backup_in_a_tenants_bucket_restores_only_what_the_restoring_user_could_create() {
    let (ns, owner, admin) = tenant("vel-craft").await;
    workload(&admin, &ns).await;
    let bucket = format!("craft-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(owner.clone(), &ns);
    own_location(&admin, &nabsls, &ns, &bucket).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(owner.clone(), &ns);
    nabs.create(&PostParams::default(), &nab("base", json!({"storageLocation": "own"})))
        .await
        .unwrap();
    let base = completed(&nabs, "base").await["status"]["veleroBackup"]["name"]
        .as_str()
        .unwrap()
        .to_string();

    // The tenant controls the bucket: they write a backup of their own namespace that Velero never made, holding
    // a RoleBinding of themselves to cluster-admin, a Pod running as root and a harmless ConfigMap. Its resource list
    // (copied from the real backup) does not mention them.
    let crafted = nac::naming::generate_nacuuid(&ns, "crafted");
    let dir = std::path::PathBuf::from(Cluster::load().get("S3_DATA_DIR"))
        .join(&bucket)
        .join(format!("{ns}/p/backups/{base}"));
    let mut extra = item_entries(
        "rolebindings.rbac.authorization.k8s.io",
        &ns,
        "escalate",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "escalate", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("user-{ns}")}]}),
    );
    extra.extend(item_entries(
        "pods",
        &ns,
        "root",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": ns},
                "spec": {"containers": [{"name": "root", "image": "registry.example/root:1",
                         "securityContext": {"runAsUser": 0}}]}}),
    ));
    extra.extend(item_entries(
        "configmaps",
        &ns,
        "planted",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planted", "namespace": ns},
                "data": {"k": "v"}}),
    ));
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        let body = std::fs::read(dir.join(&file)).unwrap();
        let body = if file == format!("{base}.tar.gz") {
            with_entries(&body, extra.clone())
        } else if file == "velero-backup.json" {
            let mut meta: Value = serde_json::from_slice(&body).unwrap();
            meta["metadata"]["name"] = json!(crafted);
            meta["metadata"]["labels"][nac::naming::NAB_ORIGIN_NACUUID_LABEL] = json!(crafted);
            meta["metadata"]["annotations"][nac::naming::NAB_ORIGIN_NAME_ANNOTATION] = json!("crafted");
            serde_json::to_vec(&meta).unwrap()
        } else {
            body
        };
        let renamed = file.replace(&base, &crafted);
        put_object(&bucket, &format!("{ns}/p/backups/{crafted}/{renamed}"), &body);
    }
    // Velero syncs it from the bucket, nac gives it to the namespace (it is the tenant's own location).
    wait_json(
        &nabs,
        "crafted",
        Duration::from_secs(180),
        "crafted backup synced",
        |n| n["status"]["veleroBackup"]["status"]["phase"] == "Completed",
    )
    .await;

    // The owner (Kubernetes `admin` in the namespace) restores it: they may create Pods and ConfigMaps, but not
    // bind cluster-admin, which they do not hold. The binding stays out, and the restore says so. (Nor may they
    // write Endpoints, which `admin` no longer grants: those stay out too.)
    let nars: Api<NonAdminRestore> = Api::namespaced(owner.clone(), &ns);
    nars.create(&PostParams::default(), &nar("as-owner", "crafted"))
        .await
        .unwrap();
    assert_eq!(restore_finished(&nars, "as-owner").await, "Completed");
    let n = serde_json::to_value(nars.get("as-owner").await.unwrap()).unwrap();
    assert_eq!(
        condition_of(&n, "ResourcesLeftOut"),
        ("True".into(), "RequesterRightsExceeded".into())
    );
    let message = left_out(&n);
    assert!(message.contains("rolebindings.rbac.authorization.k8s.io"), "{message}");
    assert!(
        message.contains("RoleBinding escalate binds ClusterRole cluster-admin"),
        "{message}"
    );
    assert_eq!(message.matches("RoleBinding escalate").count(), 1, "{message}");
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), &ns);
    assert!(
        bindings.get_opt("escalate").await.unwrap().is_none(),
        "the escalating binding was restored"
    );
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    assert!(cms.get_opt("planted").await.unwrap().is_some());
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), &ns);
    assert!(
        pods.get_opt("root").await.unwrap().is_some(),
        "the owner may create Pods"
    );

    // A narrower user of the namespace (nac's editor role, and ConfigMaps) restores it too: only ConfigMaps come back.
    cms.delete("planted", &DeleteParams::default()).await.unwrap();
    pods.delete("root", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_gone(&pods, "root", T, "pod deleted").await;
    let restorer = format!("restorer-{ns}");
    bind_editor(&admin, &ns, &restorer).await;
    apply_yaml(
        &admin,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: configmaps, namespace: {ns}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [create, get, list]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: restorer-configmaps, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmaps}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {restorer}}}]
"#
        ),
    )
    .await;
    let narrow: Api<NonAdminRestore> = Api::namespaced(Cluster::load().as_user(&restorer).await, &ns);
    narrow
        .create(&PostParams::default(), &nar("as-restorer", "crafted"))
        .await
        .unwrap();
    assert_eq!(restore_finished(&narrow, "as-restorer").await, "Completed");
    let n = serde_json::to_value(narrow.get("as-restorer").await.unwrap()).unwrap();
    let message = left_out(&n);
    let refused = message
        .split(&format!("{restorer} may not create "))
        .nth(1)
        .unwrap_or_else(|| panic!("{message}"));
    assert!(refused.split(", ").any(|k| k == "pods"), "{message}");
    assert!(!refused.split(", ").any(|k| k == "configmaps"), "{message}");
    assert!(
        cms.get_opt("planted").await.unwrap().is_some(),
        "ConfigMaps are the restorer's to create"
    );
    assert!(
        pods.get_opt("root").await.unwrap().is_none(),
        "a Pod the restorer may not create was restored"
    );
    assert!(bindings.get_opt("escalate").await.unwrap().is_none());
}

fn time_of(v: &Value) -> k8s_openapi::jiff::Timestamp {
    v.as_str().unwrap_or_else(|| panic!("not a time: {v}")).parse().unwrap()
}

/// Waits until a NonAdminSchedule's status passes `check`.
async fn nas_status(api: &Api<NonAdminSchedule>, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_json(api, name, T, what, |v| check(&v["status"])).await["status"].clone()
}

/// Waits (bounded) until the schedule's Velero runs, admin's view, number more than `before`.
async fn velero_runs(admin: &Client, schedule: &str) -> Vec<Backup> {
    let all: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let mut runs = all
        .list(&ListParams::default().labels(&format!("velero.io/schedule-name={schedule}")))
        .await
        .unwrap()
        .items;
    runs.sort_by_key(|b| b.metadata.name.clone());
    runs
}

#[tokio::test]
async fn a_schedule_runs_real_backups_that_appear_as_nonadminbackups() {
    let (ns, user, admin) = tenant("vel-sched").await;
    workload(&admin, &ns).await;
    let nases: Api<NonAdminSchedule> = Api::namespaced(user.clone(), &ns);
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let schedules: Api<nac::velero::Schedule> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);

    // Refused at apply time, with the field named: another namespace in the template, a bad expression, labels
    // for the runs.
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminschedules");
    let body = |name: &str, schedule: &str, template: Value| {
        json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule",
               "metadata": {"name": name},
               "spec": {"schedule": schedule, "skipImmediately": true, "template": {"backupSpec": template}}})
    };
    for (schedule, template, field) in [
        (
            "@every 1m",
            json!({"includedNamespaces": ["kube-system"]}),
            "spec.template.backupSpec.includedNamespaces",
        ),
        ("61 * * * *", json!({}), "spec.schedule"),
        (
            "@every 1m",
            json!({"metadata": {"labels": {"openshift.io/oadp-nab-origin-nacuuid": "x"}}}),
            "spec.template.backupSpec.metadata",
        ),
    ] {
        let (code, resp, _) = create_raw(&user, &path, &body("bad", schedule, template)).await;
        assert_eq!(code, 403, "{resp}");
        let causes = resp["details"]["causes"].as_array().cloned().unwrap_or_default();
        assert!(causes.iter().any(|c| c["field"] == field), "{field} not named: {resp}");
    }

    // Created with skipImmediately: the policy's enforced fields filled with warnings, one Velero Schedule made.
    let (code, created, warnings) = create_raw(&user, &path, &body("nightly", "@every 1m", json!({}))).await;
    assert_eq!(code, 201, "{created}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("spec.template.backupSpec.ttl set to 72h0m0s")),
        "{warnings:?}"
    );
    nas_status(&nases, "nightly", "schedule accepted, its skip consumed", |s| {
        s["phase"] == "Created" && s["lastSkipped"].is_string()
    })
    .await;
    let nas_now = nases.get("nightly").await.unwrap();
    assert_eq!(nas_now.spec.skip_immediately, None, "skipImmediately is consumed once");
    let st = serde_json::to_value(nas_now.status.as_ref().unwrap()).unwrap();
    assert_eq!(
        condition_of(&json!({"status": st}), "Accepted"),
        ("True".into(), "ScheduleAccepted".into())
    );
    let vname = st["veleroSchedule"]["name"].as_str().unwrap().to_string();
    let vs = schedules.get(&vname).await.unwrap();
    assert_eq!(vs.spec.template.included_namespaces, Some(vec![ns.clone()]));
    assert!(vs.spec.template.metadata.is_none());
    let excluded = vs.spec.template.excluded_resources.clone().unwrap_or_default();
    assert!(excluded.iter().any(|r| r == "nonadminbackups"), "{excluded:?}");
    assert_eq!(vs.spec.skip_immediately, Some(false), "Velero consumed the skip");
    assert_eq!(nac::naming::NAS.origin_of(&vs.metadata), Some((ns.as_str(), "nightly")));

    // The first run: a real backup, a NonAdminBackup in the namespace, listed in the schedule's status.
    let first = eventually(Duration::from_secs(200), "the schedule's first run", || async {
        runs_of(&nabs, "nightly").await.into_iter().next()
    })
    .await
    .metadata
    .name
    .unwrap();
    let done = completed(&nabs, &first).await;
    assert_eq!(
        done["status"]["veleroBackup"]["spec"]["includedNamespaces"],
        json!([ns])
    );
    let run_backup = done["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    assert!(run_backup.starts_with(&vname), "{run_backup}");
    assert_eq!(
        first, run_backup,
        "a run's NonAdminBackup is named as its Velero Backup (OADP's naming)"
    );
    assert!(bucket_files(&run_backup).contains(&format!("{run_backup}.tar.gz")));
    let s = nas_status(&nases, "nightly", "the run listed as Completed", |s| {
        s["recentBackups"][0]["name"] == first.as_str() && s["recentBackups"][0]["phase"] == "Completed"
    })
    .await;
    // OADP's status: the newest run as `lastBackup`; the next run a minute after Velero's last.
    assert_eq!(s["lastBackup"], s["recentBackups"][0]);
    assert_eq!(s["lastBackup"]["veleroBackupName"], json!(run_backup));
    let last = time_of(&s["veleroSchedule"]["status"]["lastBackup"]);
    assert_eq!(
        time_of(&s["nextRun"]),
        last + k8s_openapi::jiff::SignedDuration::from_secs(60)
    );

    // It restores like any other backup of the namespace.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    cms.delete("app-config", &DeleteParams::default()).await.unwrap();
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    nars.create(&PostParams::default(), &nar("from-schedule", &first))
        .await
        .unwrap();
    wait_json(&nars, "from-schedule", T, "restore of a scheduled backup", |v| {
        v["status"]["veleroRestore"]["status"]["phase"] == "Completed"
    })
    .await;
    cms.get("app-config").await.unwrap();

    // Paused: no runs; once overdue, unpaused with skipImmediately: no run now, the next one a minute after the skip.
    let pause = |paused: bool, skip: Option<bool>| {
        let mut spec = json!({"paused": paused});
        if let Some(s) = skip {
            spec["skipImmediately"] = json!(s);
        }
        Patch::Merge(json!({"spec": spec}))
    };
    nases
        .patch("nightly", &PatchParams::default(), &pause(true, None))
        .await
        .unwrap();
    wait_json(&schedules, &vname, T, "Velero Schedule paused", |v| {
        v["spec"]["paused"] == true
    })
    .await;
    // Paused, the next run is still reported (as OADP's controller reports it): the run due once unpaused.
    nas_status(&nases, "nightly", "the next run while paused", |s| {
        s["nextRun"].is_string()
    })
    .await;
    let overdue = |admin: Client, vname: String| async move {
        // Until the schedule's next time has passed (it would run at once when unpaused).
        loop {
            let v = velero_runs(&admin, &vname).await;
            let newest = v
                .last()
                .and_then(|b| b.metadata.creation_timestamp.clone())
                .map(|t| t.0);
            if newest.is_some_and(|t| {
                k8s_openapi::jiff::Timestamp::now() > t + k8s_openapi::jiff::SignedDuration::from_secs(65)
            }) {
                return v.len();
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    };
    let before = overdue(admin.clone(), vname.clone()).await;
    let unpaused = k8s_openapi::jiff::Timestamp::now();
    nases
        .patch("nightly", &PatchParams::default(), &pause(false, Some(true)))
        .await
        .unwrap();
    let s = nas_status(&nases, "nightly", "skip recorded at the unpause", |s| {
        s["lastSkipped"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_some_and(|t| {
                t >= unpaused.round(k8s_openapi::jiff::Unit::Second).unwrap()
                    - k8s_openapi::jiff::SignedDuration::from_secs(1)
            })
    })
    .await;
    let skipped = time_of(&s["lastSkipped"]);
    assert_eq!(
        time_of(&s["nextRun"]),
        skipped + k8s_openapi::jiff::SignedDuration::from_secs(60)
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        velero_runs(&admin, &vname).await.len(),
        before,
        "a run due at the unpause was not skipped"
    );

    // Paused again until overdue, unpaused without skip: it runs at once.
    nases
        .patch("nightly", &PatchParams::default(), &pause(true, None))
        .await
        .unwrap();
    wait_json(&schedules, &vname, T, "Velero Schedule paused again", |v| {
        v["spec"]["paused"] == true
    })
    .await;
    // The skip counts as a run for the next time: overdue once a minute has passed since it too.
    while k8s_openapi::jiff::Timestamp::now() < skipped + k8s_openapi::jiff::SignedDuration::from_secs(65) {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let before = overdue(admin.clone(), vname.clone()).await;
    let unpaused = k8s_openapi::jiff::Timestamp::now();
    nases
        .patch("nightly", &PatchParams::default(), &pause(false, None))
        .await
        .unwrap();
    let runs = eventually(
        Duration::from_secs(30),
        "a run at once after an unpause without skip",
        || {
            let (admin, vname) = (admin.clone(), vname.clone());
            async move { Some(velero_runs(&admin, &vname).await).filter(|r| r.len() > before) }
        },
    )
    .await;
    let at = runs.last().unwrap().metadata.creation_timestamp.clone().unwrap().0;
    assert!(
        at.duration_since(unpaused) < k8s_openapi::jiff::SignedDuration::from_secs(20),
        "ran {at}, unpaused {unpaused}"
    );
    nases
        .patch("nightly", &PatchParams::default(), &pause(true, None))
        .await
        .unwrap();

    // An edited template is checked again and carried to the Velero Schedule.
    let edit = |template: Value| Patch::Merge(json!({"spec": {"template": {"backupSpec": template}}}));
    let err = nases
        .patch(
            "nightly",
            &PatchParams::default(),
            &edit(json!({"includedNamespaces": ["kube-system"]})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("spec.template.backupSpec.includedNamespaces"),
        "{err}"
    );
    nases
        .patch(
            "nightly",
            &PatchParams::default(),
            &edit(json!({"excludedResources": ["secrets"]})),
        )
        .await
        .unwrap();
    wait_json(&schedules, &vname, T, "edited template in the Velero Schedule", |v| {
        v["spec"]["template"]["excludedResources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == "secrets") && r.iter().any(|x| x == "nonadminbackups"))
    })
    .await;

    // Deleted: the Velero Schedule goes, the backups stay.
    let left = runs_of(&nabs, "nightly").await.len();
    nases.delete("nightly", &DeleteParams::default()).await.unwrap();
    wait_gone(&nases, "nightly", T, "schedule deleted").await;
    wait_gone(&schedules, &vname, T, "Velero Schedule deleted").await;
    assert!(left >= 2, "{left} runs");
    assert_eq!(
        runs_of(&nabs, "nightly").await.len(),
        left,
        "the schedule's backups stay"
    );

    // The runs outlive their schedule: one deleted with its data, one Velero expires (its expiration moved to the
    // past: Velero's own garbage collection deletes it, and its NonAdminBackup goes with it).
    let all = runs_of(&nabs, "nightly").await;
    assert!(all.len() >= 2, "{} runs", all.len());
    let (gone, expiring) = (
        all[0].metadata.name.clone().unwrap(),
        all[1].metadata.name.clone().unwrap(),
    );
    completed(&nabs, &expiring).await;
    nabs.patch(
        &gone,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deleteBackup": true}})),
    )
    .await
    .unwrap();
    wait_gone(&nabs, &gone, T, "a run deleted with deleteBackup").await;
    let expiring_backup = nabs
        .get(&expiring)
        .await
        .unwrap()
        .status
        .unwrap()
        .velero_backup
        .unwrap()
        .name
        .unwrap();
    let backups: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    backups
        .patch(
            &expiring_backup,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"expiration": "2026-01-01T00:00:00Z"}})),
        )
        .await
        .unwrap();
    wait_gone(&backups, &expiring_backup, T, "Velero expiring the run").await;
    wait_gone(&nabs, &expiring, T, "the expired run's NonAdminBackup").await;
}
