//! End to end, Velero played by the test: nac started on a cluster where OADP's non-admin controller ran. A
//! tenant namespace as that controller left it (`common::oadp`: its names, labels, annotations, finalizers and
//! status shapes) is taken over without anything re-done, and the user's usual actions on what it left cost the
//! same writes as on nac's own objects. One test (one nac process), so nac's write counters are its alone.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::oadp::{self, assert_same_writes, delta, quiet, writes};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminBackupStorageLocation, NonAdminRestore};
use nac::naming::{NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL, NAR_ORIGIN_NACUUID_LABEL};
use nac::velero::{Backup, BackupStorageLocation, DeleteBackupRequest, Restore};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// nac's policy as `nac policy from-dpa` makes it from the DataProtectionApplication the cluster ran, with a
/// maximum TTL added (nac's own rule, which one of the backups OADP made breaks) and restores not checked against
/// the requester's rights (the played Velero answers no download requests; e2e_velero checks rights).
fn policy() -> String {
    let mut p = oadp::migration_policy();
    p["backup"] = json!({"maxTtl": "2160h"});
    p["rights"]["restore"] = json!("off");
    p["restore"] = json!({"waitTimeout": "0s"});
    serde_yaml::to_string(&p).unwrap()
}

/// uid and resourceVersion of every object of a kind in Velero's namespace made for tenant namespace `ns` (named
/// by a nacuuid of it; other runs' objects stay out of the comparison).
async fn versions<K>(admin: &Client, ns: &str) -> BTreeMap<String, (String, String)>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| nac::naming::is_nacuuid_in(o.meta().name.as_deref().unwrap_or_default(), ns))
        .map(|o| {
            let m = o.meta();
            (
                m.name.clone().unwrap(),
                (m.uid.clone().unwrap(), m.resource_version.clone().unwrap()),
            )
        })
        .collect()
}

/// resourceVersion of each tenant object of an OADP kind in `ns`.
async fn tenant_versions(admin: &Client, ns: &str, kind: &str) -> BTreeMap<String, String> {
    Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &oadp::oadp(kind))
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| (o.metadata.name.unwrap(), o.metadata.resource_version.unwrap()))
        .collect()
}

/// Waits (watch-driven) for a condition of a NonAdminBackup, as JSON.
async fn nab_where(api: &Api<NonAdminBackup>, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_json(api, name, T, what, check).await
}

fn has_condition(v: &Value, ty: &str, status: &str, reason: &str) -> bool {
    condition_of(v, ty) == (status.to_string(), reason.to_string())
}

/// Plays Velero finishing a Backup (it names the default location in a backup that names none, and labels it).
async fn velero_completes(velero: &Api<Backup>, name: &str) {
    velero
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"velero.io/storage-location": "default"}},
                "spec": {"storageLocation": "default"},
                "status": oadp::completed_backup_status(),
            })),
        )
        .await
        .unwrap();
}

/// The user's restore from NonAdminBackup `backup`, played to completion; returns nac's writes for it.
async fn restore(
    nac: &NacProcess,
    user: &Client,
    admin: &Client,
    ns: &str,
    name: &str,
    backup: &str,
) -> BTreeMap<String, u64> {
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), ns);
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let before = quiet(nac).await;
    let nar: NonAdminRestore = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
        "metadata": {"name": name}, "spec": {"restoreSpec": {"backupName": backup}}
    }))
    .unwrap();
    nars.create(&PostParams::default(), &nar).await.unwrap();
    let v = wait_json(&nars, name, T, "restore Created", |v| v["status"]["phase"] == "Created").await;
    let id = v["status"]["veleroRestore"]["name"].as_str().unwrap().to_string();
    // Velero finishes it once nac is done making it (the two would otherwise share writes by chance).
    quiet(nac).await;
    restores
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed", "completionTimestamp": "2026-11-27T01:00:00Z"}})),
        )
        .await
        .unwrap();
    wait_json(&nars, name, T, "restore mirrored Completed", |v| {
        v["status"]["veleroRestore"]["status"]["phase"] == "Completed"
    })
    .await;
    settle().await;
    delta(&before, &writes(nac).await)
}

/// `deleteBackup: true` on NonAdminBackup `name`, Velero played processing the DeleteBackupRequest; returns nac's
/// writes for it.
async fn delete_backup(nac: &NacProcess, user: &Client, admin: &Client, ns: &str, name: &str) -> BTreeMap<String, u64> {
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let dbrs: Api<DeleteBackupRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let id = velero_backup_of(&nabs, name).await;
    let before = quiet(nac).await;
    nabs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deleteBackup": true}})),
    )
    .await
    .unwrap();
    let sel = format!("{NAB_ORIGIN_NACUUID_LABEL}={id}");
    let dbr = eventually(T, "DeleteBackupRequest made", || async {
        dbrs.list(&ListParams::default().labels(&sel))
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(dbr.spec.backup_name, id);
    quiet(nac).await;
    // Velero deletes the backup, then (played after the NonAdminBackup is released, so the two events do not
    // race one release against another) the request, when nac has not removed it already.
    velero.delete(&id, &DeleteParams::default()).await.unwrap();
    wait_gone(&nabs, name, T, "NonAdminBackup removed after deleteBackup").await;
    settle().await;
    match dbrs.delete(&dbr.metadata.name.unwrap(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting the DeleteBackupRequest: {e}"),
    }
    settle().await;
    delta(&before, &writes(nac).await)
}

/// Namespace `ns` is deleted with its NonAdminBackup `name` (nac removes the Velero Backup object, the data
/// stays in the bucket) and re-created; Velero's sync brings the Backup object back as it was (played), and nac
/// gives it its NonAdminBackup back. Returns nac's writes from the Backup's return to the NonAdminBackup Created.
async fn lose_and_regain(
    nac: &NacProcess,
    cluster: &Cluster,
    admin: &Client,
    ns: &str,
    name: &str,
) -> BTreeMap<String, u64> {
    let user_name = format!("user-{ns}");
    let nabs: Api<NonAdminBackup> = Api::namespaced(cluster.as_user(&user_name).await, ns);
    let id = velero_backup_of(&nabs, name).await;
    let backups: Api<DynamicObject> = Api::namespaced_with(admin.clone(), VELERO_NAMESPACE, &oadp::velero("Backup"));
    let mut kept = serde_json::to_value(backups.get(&id).await.unwrap()).unwrap();
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        kept["metadata"].as_object_mut().unwrap().remove(field);
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    namespaces.delete(ns, &DeleteParams::default()).await.unwrap();
    wait_gone(&namespaces, ns, Duration::from_secs(90), "the tenant namespace deleted").await;
    wait_gone(
        &backups,
        &id,
        T,
        "the Velero Backup object removed with its NonAdminBackup",
    )
    .await;
    let back = oadp::put(admin, &oadp::velero("Backup"), VELERO_NAMESPACE, kept, false).await;
    let before = quiet(nac).await;
    ensure_namespace(admin, ns).await;
    grant_editor(admin, ns, &user_name).await;
    let v = nab_where(&nabs, name, "the backup synced back and adopted", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    assert_eq!(v["metadata"]["labels"][NAB_SYNCED_FROM_NACUUID_LABEL], id.as_str());
    assert_eq!(v["status"]["veleroBackup"]["name"], id.as_str());
    settle().await;
    let sync = delta(&before, &writes(nac).await);
    assert_eq!(
        backups.get(&id).await.unwrap().metadata.uid,
        back.metadata.uid,
        "adopted, not made again"
    );
    assert_eq!(sync.get("Backup"), None, "no Velero Backup written by sync: {sync:?}");
    sync
}

/// The name of NonAdminBackup `name`'s Velero Backup, as its status records it.
async fn velero_backup_of(nabs: &Api<NonAdminBackup>, name: &str) -> String {
    let status = nabs.get(name).await.unwrap().status.unwrap();
    status.velero_backup.unwrap().name.unwrap()
}

/// Lets nac finish what an event started (its writes follow watch events within milliseconds here).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn nac_takes_over_what_oadps_controller_left_and_redoes_nothing() {
    let cluster = Cluster::load();
    let admin = cluster.admin().await;
    // Nothing of an earlier run's nac may answer for the objects OADP's controller left.
    delete_webhooks(&admin).await;
    let ns = unique_ns("oadp-left");
    ensure_namespace(&admin, &ns).await;

    // What OADP's controller left: three backups (one over nac's maxTtl, one its backup sync made), a restore,
    // an approved and a pending storage location, an answered download request whose URL expired.
    let dyn_nab = oadp::oadp("NonAdminBackup");
    let mut ids = BTreeMap::new();
    for (name, ttl, synced) in [
        ("kept", "720h0m0s", false),
        ("long", "4000h0m0s", false),
        ("synced", "720h0m0s", true),
    ] {
        let id = oadp::nacuuid(&ns, name);
        let spec = json!({"ttl": ttl, "labelSelector": {"matchLabels": {"app": "shop"}}});
        let vb = oadp::velero_backup(&ns, name, &id, &spec, ttl);
        oadp::put(&admin, &oadp::velero("Backup"), VELERO_NAMESPACE, vb.clone(), false).await;
        oadp::put(&admin, &dyn_nab, &ns, oadp::nab(&ns, name, &spec, &vb, synced), true).await;
        ids.insert(name, id);
    }
    let undo = oadp::nacuuid(&ns, "undo");
    let vr = oadp::velero_restore(&ns, "undo", &undo, &ids["kept"]);
    oadp::put(&admin, &oadp::velero("Restore"), VELERO_NAMESPACE, vr.clone(), false).await;
    oadp::put(
        &admin,
        &oadp::oadp("NonAdminRestore"),
        &ns,
        oadp::nar(&ns, "undo", "kept", &vr),
        true,
    )
    .await;
    let data = oadp::tenant_secret(&admin, &ns, "creds").await;
    let spec = oadp::location_spec("creds");
    let own = oadp::nacuuid(&ns, "own");
    let made = oadp::approved_location(&ns, "own", &own, &spec, &data);
    let secrets = oadp::resource("", "v1", "Secret", "secrets");
    oadp::put(&admin, &secrets, VELERO_NAMESPACE, made.secret, false).await;
    oadp::put(
        &admin,
        &oadp::velero("BackupStorageLocation"),
        VELERO_NAMESPACE,
        made.bsl,
        false,
    )
    .await;
    let requests = oadp::oadp("NonAdminBackupStorageLocationRequest");
    oadp::put(&admin, &requests, VELERO_NAMESPACE, made.request, true).await;
    let nabsls = oadp::oadp("NonAdminBackupStorageLocation");
    oadp::put(&admin, &nabsls, &ns, oadp::nabsl(&ns, "own", &own, &spec, true), true).await;
    let asked = oadp::nacuuid(&ns, "asked");
    let pending = oadp::request(&ns, "asked", &asked, &spec, "pending", "Pending");
    oadp::put(&admin, &requests, VELERO_NAMESPACE, pending, true).await;
    oadp::put(
        &admin,
        &nabsls,
        &ns,
        oadp::nabsl(&ns, "asked", &asked, &spec, false),
        true,
    )
    .await;
    let dr = oadp::expired_download(&admin, &ns, "log", "kept", &ids["kept"]).await;

    let backups_before = versions::<Backup>(&admin, &ns).await;
    let restores_before = versions::<Restore>(&admin, &ns).await;
    let locations_before = versions::<BackupStorageLocation>(&admin, &ns).await;
    let copies_before = versions::<k8s_openapi::api::core::v1::Secret>(&admin, &ns).await;
    let nab_versions = tenant_versions(&admin, &ns, "NonAdminBackup").await;
    let nar_versions = tenant_versions(&admin, &ns, "NonAdminRestore").await;

    // The admin switches: OADP's controller is gone, nac starts with the translated policy.
    let env = Env::start(&policy(), NacOptions::default()).await;
    let user_name = format!("user-{ns}");
    grant_editor(&admin, &ns, &user_name).await;
    let user = cluster.as_user(&user_name).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);

    // Taken over: the backup the policy would refuse now says so; the expired download request goes.
    let long = nab_where(&nabs, "long", "PolicyCompliant=False on the backup over maxTtl", |v| {
        has_condition(v, "PolicyCompliant", "False", "RefusedByCurrentPolicy")
    })
    .await;
    let message = long["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PolicyCompliant")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("4000h0m0s is above the maximum 2160h0m0s"),
        "{message}"
    );
    let nadrs: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &oadp::oadp("NonAdminDownloadRequest"));
    wait_gone(&nadrs, "log", T, "the expired download request deleted").await;
    let drs: Api<nac::velero::DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    wait_gone(&drs, &dr, T, "its Velero DownloadRequest deleted").await;
    settle().await;
    let adoption = writes(&env.nac).await;

    // Nothing re-done: no Velero Backup or Restore made or deleted, the approved location's Velero BSL and Secret
    // copy not rewritten. The copy OADP's controller made holds the tenant's bytes, here byte for byte the file nac
    // writes from the static keys it accepts (`key=value`); a copy holding anything else is rewritten once.
    assert_eq!(versions::<Backup>(&admin, &ns).await, backups_before, "Velero Backups");
    assert_eq!(
        versions::<Restore>(&admin, &ns).await,
        restores_before,
        "Velero Restores"
    );
    assert_eq!(
        versions::<BackupStorageLocation>(&admin, &ns).await,
        locations_before,
        "Velero BSLs"
    );
    let copies_after = versions::<k8s_openapi::api::core::v1::Secret>(&admin, &ns).await;
    assert_eq!(copies_after, copies_before, "the Secret copy");
    let copy = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .get(&own)
        .await
        .unwrap();
    assert_eq!(
        copy.data.unwrap()["cloud"].0,
        b"[default]\naws_access_key_id=tenant\naws_secret_access_key=tenant-secret\n".to_vec()
    );
    // Statuses rewritten only where nac's view differs: the backup over maxTtl (the refusal), the one OADP's sync
    // made (nac's Accepted condition); the rest, and the restore that ran, not written at all.
    let nab_now = tenant_versions(&admin, &ns, "NonAdminBackup").await;
    assert_eq!(
        nab_now["kept"], nab_versions["kept"],
        "the backup nac has nothing to add to"
    );
    assert_ne!(nab_now["long"], nab_versions["long"]);
    assert_eq!(
        tenant_versions(&admin, &ns, "NonAdminRestore").await,
        nar_versions,
        "the restore that ran"
    );
    // Statuses tell the truth: every backup Created with its own Velero Backup, Completed.
    for (name, id) in &ids {
        let v = serde_json::to_value(nabs.get(name).await.unwrap()).unwrap();
        assert_eq!(v["status"]["phase"], "Created", "{name}: {v}");
        assert_eq!(v["status"]["veleroBackup"]["name"], id.as_str(), "{name}");
        assert_eq!(v["status"]["veleroBackup"]["status"]["phase"], "Completed", "{name}");
        assert!(has_condition(&v, "Queued", "True", "BackupScheduled"), "{name}: {v}");
        // OADP's finalizer is nac's; no label of nac's was added (OADP's controller reads none of them).
        assert_eq!(v["metadata"]["finalizers"], json!([oadp::NAB_FINALIZER]), "{name}");
        assert!(
            v["metadata"]["labels"].get(NAB_ORIGIN_NACUUID_LABEL).is_none(),
            "{name}"
        );
        if *name != "long" {
            assert_eq!(condition_of(&v, "PolicyCompliant"), Default::default(), "{name}");
        }
    }
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    let v = serde_json::to_value(nars.get("undo").await.unwrap()).unwrap();
    assert_eq!(v["status"]["phase"], "Created");
    assert_eq!(v["status"]["veleroRestore"]["name"], undo.as_str());
    let locations: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    let v = serde_json::to_value(locations.get("own").await.unwrap()).unwrap();
    assert_eq!(v["status"]["phase"], "Created", "{v}");
    assert!(
        has_condition(&v, "ClusterAdminApproved", "True", "BslSpecApproved"),
        "{v}"
    );
    let v = serde_json::to_value(locations.get("asked").await.unwrap()).unwrap();
    assert_eq!(v["status"]["phase"], "New", "{v}");
    assert!(
        has_condition(&v, "ClusterAdminApproved", "False", "BslSpecApprovalPending"),
        "{v}"
    );
    println!("writes while taking over: {adoption:?}");

    // The pending location is in nac's approval flow: approved, it gets its Velero BSL.
    let reqs: Api<DynamicObject> = Api::namespaced_with(admin.clone(), VELERO_NAMESPACE, &requests);
    reqs.patch(
        &asked,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"approvalDecision": "approve"}})),
    )
    .await
    .unwrap();
    wait_json(
        &locations,
        "asked",
        T,
        "the pending location approved and Created",
        |v| v["status"]["phase"] == "Created",
    )
    .await;
    let bsls: Api<BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    assert!(bsls.get_opt(&asked).await.unwrap().is_some());

    // A new backup in the namespace OADP left: nac's own.
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let fresh: NonAdminBackup = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": "fresh"}, "spec": {"backupSpec": {"labelSelector": {"matchLabels": {"app": "shop"}}}}
    }))
    .unwrap();
    nabs.create(&PostParams::default(), &fresh).await.unwrap();
    let v = nab_where(&nabs, "fresh", "the new backup Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    let fresh_id = v["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    assert_eq!(versions::<Backup>(&admin, &ns).await.len(), backups_before.len() + 1);
    velero_completes(&velero, &fresh_id).await;
    nab_where(&nabs, "fresh", "the new backup mirrored Completed", |v| {
        v["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;
    settle().await;

    // Restores from a backup OADP made and from nac's own: the same writes.
    let from_adopted = restore(&env.nac, &user, &admin, &ns, "from-kept", "kept").await;
    let from_own = restore(&env.nac, &user, &admin, &ns, "from-fresh", "fresh").await;
    assert_same_writes(
        &from_adopted,
        &from_own,
        "a restore's writes, from OADP's backup and from nac's",
    );
    let vr = Api::<Restore>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .list(&ListParams::default().labels(NAR_ORIGIN_NACUUID_LABEL))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|r| {
            r.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("openshift.io/oadp-nar-origin-name"))
                == Some(&"from-kept".to_string())
        })
        .unwrap();
    assert_eq!(
        vr.spec.backup_name.as_deref(),
        Some(ids["kept"].as_str()),
        "restored from OADP's Velero Backup"
    );

    // deleteBackup on a backup OADP made and on nac's own: the same writes.
    let del_adopted = delete_backup(&env.nac, &user, &admin, &ns, "kept").await;
    let del_own = delete_backup(&env.nac, &user, &admin, &ns, "fresh").await;
    assert_same_writes(
        &del_adopted,
        &del_own,
        "deleteBackup's writes, on OADP's backup and on nac's",
    );

    // The namespace is lost and re-created: Velero's own sync brings the backup objects back from the bucket
    // (played: as they were), and nac gives the one OADP made its NonAdminBackup back, adopting it; the same
    // writes as for a backup of nac's own in another namespace.
    let sync = lose_and_regain(&env.nac, &cluster, &admin, &ns, "long").await;
    let (mine_ns, mine_user, _) = new_tenant("nac-own").await;
    let mine: Api<NonAdminBackup> = Api::namespaced(mine_user, &mine_ns);
    let nab_mine: NonAdminBackup = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": "long"},
        "spec": {"backupSpec": {"ttl": "720h0m0s", "labelSelector": {"matchLabels": {"app": "shop"}}}}
    }))
    .unwrap();
    mine.create(&PostParams::default(), &nab_mine).await.unwrap();
    let v = nab_where(&mine, "long", "nac's own backup Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    velero_completes(&velero, v["status"]["veleroBackup"]["name"].as_str().unwrap()).await;
    nab_where(&mine, "long", "nac's own backup Completed", |v| {
        v["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;
    let sync_own = lose_and_regain(&env.nac, &cluster, &admin, &mine_ns, "long").await;
    assert_same_writes(
        &sync,
        &sync_own,
        "backup sync's writes, for OADP's backup and for nac's",
    );
    println!(
        "writes: restore {from_adopted:?} (nac's own {from_own:?}); deleteBackup {del_adopted:?} (nac's own \
         {del_own:?}); sync {sync:?} (nac's own {sync_own:?})"
    );
}
