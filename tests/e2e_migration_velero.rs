//! End to end with the real Velero and S3 server: nac started where OADP's non-admin controller ran. The Velero
//! Backups and the Restore are made as that controller makes them and run by Velero for real; the tenant objects
//! are left as it leaves them (`common::oadp`). nac takes them over without backing up anything again; the user
//! restores from a backup OADP made, deletes one with its data (`deleteBackup`), makes a new one, and after the
//! namespace is lost and re-created gets a backup OADP made back from the bucket (Velero's sync, nac's sync).
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::oadp::{self, backup_path, delta, quiet};
use common::velero::{bucket_files, completed, nab, nar, velero_up, workload, workload_data, T};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminRestore};
use nac::naming::NAB_SYNCED_FROM_NACUUID_LABEL;
use nac::velero::{Backup, Restore};
use serde_json::{json, Value};

/// Waits until Velero finished object `name` and returns it as JSON.
async fn finished<K>(api: &Api<K>, name: &str) -> Value
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
{
    let v = wait_json(api, name, T, &format!("Velero finished {name}"), |v| {
        ["Completed", "PartiallyFailed", "Failed", "FailedValidation"]
            .contains(&v["status"]["phase"].as_str().unwrap_or_default())
    })
    .await;
    assert_eq!(v["status"]["phase"], "Completed", "{name}: {:#}", v["status"]);
    v
}

/// A backup OADP's controller made and Velero ran, and its NonAdminBackup as that controller left it.
async fn oadp_backup(admin: &Client, ns: &str, name: &str) -> String {
    let id = oadp::nacuuid(ns, name);
    let spec = json!({});
    oadp::put(
        admin,
        &oadp::velero("Backup"),
        VELERO_NAMESPACE,
        oadp::velero_backup_request(ns, name, &id, &spec),
        false,
    )
    .await;
    let vb = finished(&Api::<Backup>::namespaced(admin.clone(), VELERO_NAMESPACE), &id).await;
    oadp::put(
        admin,
        &oadp::oadp("NonAdminBackup"),
        ns,
        oadp::nab(ns, name, &spec, &vb, false),
        true,
    )
    .await;
    id
}

#[tokio::test]
async fn nac_takes_over_oadps_real_backups_and_the_user_goes_on() {
    use_velero(VeleroMode::Real);
    let cluster = Cluster::load();
    let admin = cluster.admin().await;
    delete_webhooks(&admin).await;
    let ns = unique_ns("oadp-real");
    ensure_namespace(&admin, &ns).await;
    workload(&admin, &ns).await;
    let data = workload_data(&admin, &ns).await;
    assert!(data.values().all(|v| !v.is_null()), "the workload: {data:?}");

    // What OADP's controller left: two backups Velero ran, a restore from one of them.
    let kept = oadp_backup(&admin, &ns, "kept").await;
    let old = oadp_backup(&admin, &ns, "old").await;
    let undo = oadp::nacuuid(&ns, "undo");
    oadp::put(
        &admin,
        &oadp::velero("Restore"),
        VELERO_NAMESPACE,
        oadp::velero_restore_request(&ns, "undo", &undo, &kept),
        false,
    )
    .await;
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let vr = finished(&restores, &undo).await;
    oadp::put(
        &admin,
        &oadp::oadp("NonAdminRestore"),
        &ns,
        oadp::nar(&ns, "undo", "kept", &vr),
        true,
    )
    .await;
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let uid = |b: Backup| b.metadata.uid.unwrap();
    let (kept_uid, old_uid) = (
        uid(velero.get(&kept).await.unwrap()),
        uid(velero.get(&old).await.unwrap()),
    );
    let undo_uid = restores.get(&undo).await.unwrap().metadata.uid;

    // nac starts with the translated policy.
    let env = Env::start(
        &serde_yaml::to_string(&oadp::migration_policy()).unwrap(),
        NacOptions::default(),
    )
    .await;
    let user_name = format!("user-{ns}");
    grant_editor(&admin, &ns, &user_name).await;
    let user = cluster.as_user(&user_name).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    for (name, id) in [("kept", &kept), ("old", &old)] {
        let n = completed(&nabs, name).await;
        assert_eq!(n["status"]["phase"], "Created");
        assert_eq!(n["status"]["veleroBackup"]["name"], id.as_str());
    }
    assert_eq!(
        nars.get("undo").await.unwrap().status.unwrap().phase,
        Some(nac::api::NonAdminPhase::Created)
    );
    // Nothing re-done: the same Velero objects, and no other made for this namespace.
    assert_eq!(uid(velero.get(&kept).await.unwrap()), kept_uid);
    assert_eq!(uid(velero.get(&old).await.unwrap()), old_uid);
    assert_eq!(restores.get(&undo).await.unwrap().metadata.uid, undo_uid);
    let ours = |names: Vec<String>| names.into_iter().filter(|n| nac::naming::is_nacuuid_in(n, &ns)).count();
    let names = |l: Vec<Backup>| l.into_iter().map(|b| b.metadata.name.unwrap()).collect::<Vec<_>>();
    assert_eq!(ours(names(velero.list(&ListParams::default()).await.unwrap().items)), 2);

    // A new backup.
    nabs.create(&PostParams::default(), &nab("fresh", json!({})))
        .await
        .unwrap();
    completed(&nabs, "fresh").await;

    // A restore from a backup OADP made brings back what was deleted, with its data, labelled by the Velero
    // Restore that made it again; with the writes of one from nac's own.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let mut restore_writes = vec![];
    for (name, backup) in [("back", "kept"), ("back-own", "fresh")] {
        cms.delete("app-config", &DeleteParams::default()).await.unwrap();
        wait_gone(&cms, "app-config", T, "app-config deleted").await;
        let before = quiet(&env.nac).await;
        nars.create(&PostParams::default(), &nar(name, backup)).await.unwrap();
        restored(&nars, &cms, name, backup).await;
        assert_eq!(workload_data(&admin, &ns).await, data, "restored from {backup}");
        restore_writes.push(backup_path(&delta(&before, &quiet(&env.nac).await)));
    }
    oadp::assert_same_writes(
        &restore_writes[0],
        &restore_writes[1],
        "a restore's writes, from OADP's backup and nac's",
    );

    // deleteBackup on a backup OADP made: Velero deletes its data from the bucket; the writes of nac's own.
    let mut delete_writes = vec![];
    for (name, id) in [
        ("kept", kept.clone()),
        ("fresh", velero_backup_of(&nabs, "fresh").await),
    ] {
        assert!(bucket_files(&id).contains(&format!("{id}.tar.gz")));
        let before = quiet(&env.nac).await;
        nabs.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deleteBackup": true}})),
        )
        .await
        .unwrap();
        wait_gone(&nabs, name, T, "NonAdminBackup removed after deleteBackup").await;
        wait_gone(&velero, &id, T, "Velero Backup deleted").await;
        eventually(T, "the backup's data deleted from the bucket", || async {
            (!bucket_dir_has(&id)).then_some(())
        })
        .await;
        let mut w = backup_path(&delta(&before, &quiet(&env.nac).await));
        // The request, and its delete when nac releases the backup before Velero removes the processed request.
        let requests = w.remove("DeleteBackupRequest");
        assert!(
            matches!(requests, Some(1 | 2)),
            "{name}: DeleteBackupRequest writes {requests:?}"
        );
        delete_writes.push(w);
    }
    oadp::assert_same_writes(
        &delete_writes[0],
        &delete_writes[1],
        "deleteBackup's writes, on OADP's backup and nac's",
    );
    println!("writes: restore {restore_writes:?}; deleteBackup {delete_writes:?}");

    // The namespace is lost (its NonAdminBackups take their Velero Backup objects with them, the data stays) and
    // re-created; Velero syncs the bucket (at its start), and nac gives the backup OADP made its NonAdminBackup
    // back, adopting the synced Velero Backup.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    wait_gone(&namespaces, &ns, T, "namespace deleted").await;
    assert!(
        bucket_files(&old).contains(&format!("{old}.tar.gz")),
        "the data stays in the bucket"
    );
    ensure_namespace(&admin, &ns).await;
    grant_editor(&admin, &ns, &user_name).await;
    velero_up(&env.cluster, &["--restart"]);
    let back = wait_json(&nabs, "old", T, "the backup OADP made synced back", |n| {
        n["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;
    assert_eq!(back["metadata"]["labels"][NAB_SYNCED_FROM_NACUUID_LABEL], old.as_str());
    assert_eq!(back["status"]["phase"], "Created");
    assert_eq!(back["status"]["veleroBackup"]["name"], old.as_str());
    // Restorable: the re-created namespace is empty, and the restore brings the whole workload back as it was.
    assert!(
        workload_data(&admin, &ns).await.values().all(Value::is_null),
        "the re-created namespace holds the workload before the restore"
    );
    nars.create(&PostParams::default(), &nar("after", "old")).await.unwrap();
    restored(&nars, &cms, "after", "old").await;
    assert_eq!(
        workload_data(&admin, &ns).await,
        data,
        "restored from the synced backup"
    );
}

/// Waits until NonAdminRestore `name` (from `backup`) completed, and checks that app-config is back, labelled by
/// that restore's Velero Restore.
async fn restored(nars: &Api<NonAdminRestore>, cms: &Api<ConfigMap>, name: &str, backup: &str) {
    wait_for(nars, name, T, "restore Completed", |o| {
        let p = o?.clone().status?.velero_restore?.status?.phase?;
        assert_ne!(p, "Failed");
        (p == "Completed").then_some(())
    })
    .await;
    let velero_restore = nars
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .velero_restore
        .unwrap()
        .name
        .unwrap();
    let cm = cms
        .get_opt("app-config")
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("app-config not restored from {backup}"));
    assert_eq!(
        cm.metadata.labels.unwrap_or_default().get("velero.io/restore-name"),
        Some(&velero_restore),
        "app-config restored by {name}'s Velero Restore"
    );
}

async fn velero_backup_of(nabs: &Api<NonAdminBackup>, name: &str) -> String {
    let status = nabs.get(name).await.unwrap().status.unwrap();
    status.velero_backup.unwrap().name.unwrap()
}

/// Whether the bucket still holds the backup's directory with files in it.
fn bucket_dir_has(backup: &str) -> bool {
    std::fs::read_dir(common::velero::bucket_dir(backup)).is_ok_and(|mut d| d.next().is_some())
}
