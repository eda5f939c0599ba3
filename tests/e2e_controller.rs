//! End to end: the reconciler against the real API server, the test playing Velero by patching Velero objects
//! (Velero's CRDs have no status subresource, so status is patched on the object itself).
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use nac::api::{
    NonAdminBackup, NonAdminBackupStorageLocation, NonAdminBackupStorageLocationRequest, NonAdminDownloadRequest,
    NonAdminPhase, NonAdminRestore,
};
use nac::naming::{NAB_ORIGIN_NACUUID_LABEL, NADR_ORIGIN_NACUUID_LABEL, NAR_ORIGIN_NACUUID_LABEL};
use nac::velero::{Backup, BackupStorageLocation, DeleteBackupRequest, DownloadRequest, Restore};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::OnceCell;

static NAC: OnceCell<Env> = OnceCell::const_new();
const T: Duration = Duration::from_secs(20);

/// Held by the tests that create Velero Backups themselves (not through nac) while they do: the guard's calls that
/// `nac_s_own_backups_skip_the_guard_that_still_refuses_everyone_else` counts are then its own.
static VELERO_CREATES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn env() -> &'static Env {
    // Restores here do not wait for their backup unless they ask to (the annotation): the refusals stay immediate.
    // The played Velero answers no DownloadRequests of its own, so restores are not checked against their
    // requester's rights here (rights.restore: off); the real Velero's suite (e2e_velero) checks them.
    NAC.get_or_init(|| async {
        Env::start(
            "backup:\n  maxTtl: 2160h\nrestore:\n  waitTimeout: 0\nnonAdminBSL:\n  enabled: true\n  requireApproval: false\n\
             downloads:\n  adminLocations: [default]\nrights:\n  restore: off\n",
            NacOptions::default(),
        )
        .await
    })
    .await
}

async fn tenant(prefix: &str) -> (String, Client, Client) {
    env().await;
    new_tenant(prefix).await
}

fn nab(name: &str) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": {"labelSelector": {"matchLabels": {"app": "shop"}}}}
    }))
    .unwrap()
}

fn nar(name: &str, backup: &str) -> NonAdminRestore {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
        "metadata": {"name": name}, "spec": {"restoreSpec": {"backupName": backup}}
    }))
    .unwrap()
}

fn condition<'a>(nab: &'a Value, ty: &str) -> Option<&'a Value> {
    nab["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ty)
}

/// Waits until the NAB is Created and returns it with its Velero Backup.
async fn created(api: &Api<NonAdminBackup>, velero: &Api<Backup>, name: &str) -> (Value, Backup) {
    let nab = wait_for(api, name, T, &format!("NAB {name} Created"), |o| {
        let n = o?.clone();
        (n.status.as_ref()?.phase == Some(NonAdminPhase::Created)).then(|| serde_json::to_value(&n).unwrap())
    })
    .await;
    let vb_name = nab["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let vb = velero.get(&vb_name).await.unwrap();
    (nab, vb)
}

async fn play_velero_backup(velero: &Api<Backup>, name: &str, status: Value) {
    velero
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
}

async fn play_velero_restore(restores: &Api<Restore>, name: &str, phase: &str) {
    restores
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn backup_lifecycle_is_mirrored() {
    let (ns, user, admin) = tenant("ctl-life").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin, VELERO_NAMESPACE);
    let created_nab = api.create(&PostParams::default(), &nab("nightly")).await.unwrap();
    let id = created_nab.metadata.labels.as_ref().unwrap()[NAB_ORIGIN_NACUUID_LABEL].clone();
    let (n, vb) = created(&api, &velero, "nightly").await;

    // Conditions and references per the status design.
    let accepted = condition(&n, "Accepted").unwrap();
    assert_eq!(
        (accepted["status"].as_str(), accepted["reason"].as_str()),
        (Some("True"), Some("BackupAccepted"))
    );
    let queued = condition(&n, "Queued").unwrap();
    assert_eq!(
        (queued["status"].as_str(), queued["reason"].as_str()),
        (Some("True"), Some("BackupScheduled"))
    );
    assert_eq!(n["status"]["veleroBackup"]["nacuuid"], id.as_str());
    assert_eq!(n["status"]["veleroBackup"]["name"], id.as_str());
    assert_eq!(n["status"]["veleroBackup"]["namespace"], VELERO_NAMESPACE);
    // The mutating webhook adds the reconciler's finalizer at create (one write less per NAB).
    assert_eq!(
        created_nab.metadata.finalizers,
        Some(vec![nac::naming::NAB_FINALIZER.to_string()])
    );
    assert!(api
        .get("nightly")
        .await
        .unwrap()
        .metadata
        .finalizers
        .is_some_and(|f| !f.is_empty()));

    // The Velero Backup: named by the nacuuid, labelled and annotated per the design, tenant-scoped spec.
    assert_eq!(vb.metadata.name.as_deref(), Some(id.as_str()));
    let labels = vb.metadata.labels.clone().unwrap();
    assert_eq!(labels[NAB_ORIGIN_NACUUID_LABEL], id);
    assert_eq!(labels["openshift.io/oadp"], "True");
    assert!(labels.contains_key("app.kubernetes.io/managed-by"));
    let ann = vb.metadata.annotations.clone().unwrap();
    assert_eq!(ann["openshift.io/oadp-nab-origin-name"], "nightly");
    assert_eq!(ann["openshift.io/oadp-nab-origin-namespace"], ns);
    assert_eq!(vb.spec.included_namespaces, Some(vec![ns.clone()]));
    let excluded = vb.spec.excluded_resources.clone().unwrap_or_default();
    for kind in [
        "nonadminbackups",
        "nonadminrestores",
        "clusterroles",
        "customresourcedefinitions",
    ] {
        assert!(
            excluded.iter().any(|e| e.starts_with(kind)),
            "{kind} not excluded: {excluded:?}"
        );
    }
    assert_eq!(vb.spec.label_selector, created_nab.spec.backup_spec.label_selector);

    // Velero runs it: InProgress, then Completed, mirrored whole into the NAB.
    play_velero_backup(
        &velero,
        &id,
        json!({"phase": "InProgress", "startTimestamp": "2026-11-23T00:00:00Z"}),
    )
    .await;
    wait_for(&api, "nightly", T, "InProgress mirrored", |o| {
        let n = o?.clone();
        let vs = n.status?.velero_backup?.status?;
        (vs.phase.as_deref() == Some("InProgress")).then_some(())
    })
    .await;
    play_velero_backup(
        &velero,
        &id,
        json!({"phase": "Completed", "completionTimestamp": "2026-11-23T00:01:00Z",
               "progress": {"itemsBackedUp": 56, "totalItems": 56}}),
    )
    .await;
    let done = wait_for(&api, "nightly", T, "Completed mirrored", |o| {
        let n = o?.clone();
        let st = n.status.clone()?;
        (st.velero_backup.as_ref()?.status.as_ref()?.phase.as_deref() == Some("Completed")).then_some(n)
    })
    .await;
    let st = done.status.unwrap();
    assert_eq!(st.phase, Some(NonAdminPhase::Created));
    assert_eq!(st.queue_info.unwrap().estimated_queue_position, 0);
    let vs = serde_json::to_value(st.velero_backup.unwrap().status.unwrap()).unwrap();
    assert_eq!(vs["progress"]["itemsBackedUp"], 56);
    assert_eq!(vs["startTimestamp"], "2026-11-23T00:00:00Z");
}

#[tokio::test]
async fn failed_backup_is_mirrored_and_phase_stays_created() {
    let (ns, user, admin) = tenant("ctl-fail").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin, VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("b")).await.unwrap();
    let (_, vb) = created(&api, &velero, "b").await;
    let name = vb.metadata.name.unwrap();
    play_velero_backup(
        &velero,
        &name,
        json!({"phase": "Failed", "failureReason": "no credentials"}),
    )
    .await;
    let n = wait_for(&api, "b", T, "Failed mirrored", |o| {
        let n = o?.clone();
        let vs = n.status.clone()?.velero_backup?.status?;
        (vs.phase.as_deref() == Some("Failed")).then_some(n)
    })
    .await;
    let st = n.status.unwrap();
    assert_eq!(st.phase, Some(NonAdminPhase::Created));
    assert_eq!(
        st.velero_backup.unwrap().status.unwrap().failure_reason.as_deref(),
        Some("no credentials")
    );
}

#[tokio::test]
async fn queue_positions_across_namespaces() {
    let (ns1, user1, admin) = tenant("ctl-q1").await;
    let (ns2, user2, _) = tenant("ctl-q2").await;
    let velero: Api<Backup> = Api::namespaced(admin, VELERO_NAMESPACE);
    let a1: Api<NonAdminBackup> = Api::namespaced(user1, &ns1);
    let a2: Api<NonAdminBackup> = Api::namespaced(user2, &ns2);
    // Creation timestamps have one-second resolution: space the creates so the order is unambiguous.
    let mut names = Vec::new();
    for (api, n) in [(&a1, "first"), (&a2, "second"), (&a1, "third")] {
        api.create(&PostParams::default(), &nab(n)).await.unwrap();
        let (_, vb) = created(api, &velero, n).await;
        names.push(vb.metadata.name.unwrap());
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let position = |api: Api<NonAdminBackup>, n: &'static str| async move {
        api.get(n)
            .await
            .ok()?
            .status?
            .queue_info
            .map(|q| q.estimated_queue_position)
    };
    // Other tests' unfinished backups may be queued ahead of ours: compare relative positions. Within the exact
    // positions they follow each other; further back (a cluster reused across runs keeps fake Velero's unfinished
    // backups) they are reported on the grid, in order.
    use nac::controller::queue::{reported, EXACT_POSITIONS};
    let p = |a: &Api<NonAdminBackup>, n: &'static str| position(a.clone(), n);
    let exact = |x: i64, z: i64| z <= EXACT_POSITIONS && x >= 1;
    let (first, second, third) = eventually(T, "three positions", || async {
        let (x, y, z) = (p(&a1, "first").await?, p(&a2, "second").await?, p(&a1, "third").await?);
        let ok = if exact(x, z) {
            y == x + 1 && z == y + 1
        } else {
            x >= 1 && x <= y && y <= z && [x, y, z].iter().all(|v| reported(*v) == *v)
        };
        ok.then_some((x, y, z))
    })
    .await;

    // The first finishes: it drops to 0, the others move up (by one, within the exact positions).
    play_velero_backup(&velero, &names[0], json!({"phase": "Completed"})).await;
    eventually(T, "queue advanced", || async {
        let (x, y, z) = (p(&a1, "first").await?, p(&a2, "second").await?, p(&a1, "third").await?);
        let ok = if exact(first, third) {
            y == second - 1 && z == third - 1
        } else {
            y <= second && z <= third && y <= z
        };
        (x == 0 && ok).then_some(())
    })
    .await;
    // Velero 1.18 reports its own queue position for Queued backups: that wins.
    play_velero_backup(&velero, &names[2], json!({"phase": "Queued", "queuePosition": 7})).await;
    eventually(T, "Velero's queuePosition used", || async {
        (p(&a1, "third").await? == 7).then_some(())
    })
    .await;
}

#[tokio::test]
async fn delete_backup_request_path() {
    let (ns, user, admin) = tenant("ctl-dbr").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let dbrs: Api<DeleteBackupRequest> = Api::namespaced(admin, VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("old")).await.unwrap();
    let (_, vb) = created(&api, &velero, "old").await;
    let vb_name = vb.metadata.name.clone().unwrap();
    play_velero_backup(&velero, &vb_name, json!({"phase": "Completed"})).await;

    api.patch(
        "old",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deleteBackup": true}})),
    )
    .await
    .unwrap();
    let n = wait_for(&api, "old", T, "Deleting phase", |o| {
        let n = o?.clone();
        (n.status.as_ref()?.phase == Some(NonAdminPhase::Deleting)).then(|| serde_json::to_value(&n).unwrap())
    })
    .await;
    let c = condition(&n, "Deleting").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("DeletionPending"))
    );
    assert!(c["message"].as_str().unwrap().contains("backup accepted for deletion"));

    let sel = format!("{NAB_ORIGIN_NACUUID_LABEL}={vb_name}");
    let dbr = eventually(T, "DeleteBackupRequest created", || async {
        dbrs.list(&ListParams::default().labels(&sel))
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(dbr.spec.backup_name, vb_name);
    let l = dbr.metadata.labels.clone().unwrap();
    assert_eq!(l["velero.io/backup-name"], vb_name);
    assert_eq!(l["velero.io/backup-uid"], vb.metadata.uid.clone().unwrap());
    // Only one request, however many reconciles happen meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        dbrs.list(&ListParams::default().labels(&sel))
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Velero processes it: the backup goes away, then the request. nac may be first to remove the request once
    // the backup is gone (it leaves nothing of the backup behind).
    velero.delete(&vb_name, &DeleteParams::default()).await.unwrap();
    match dbrs.delete(&dbr.metadata.name.unwrap(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting the DeleteBackupRequest: {e}"),
    }
    wait_gone(&api, "old", T, "NAB removed").await;
}

#[tokio::test]
async fn direct_delete_removes_the_velero_backup() {
    let (ns, user, admin) = tenant("ctl-del").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("gone")).await.unwrap();
    let (_, vb) = created(&api, &velero, "gone").await;
    let vb_name = vb.metadata.name.unwrap();
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    wait_gone(&velero, &vb_name, T, "Velero Backup deleted").await;
    wait_gone(&api, "gone", T, "NAB removed").await;
    assert_no_delete_requests(&admin, &format!("{NAB_ORIGIN_NACUUID_LABEL}={vb_name}")).await;
}

#[tokio::test]
async fn velero_backup_removed_behind_nacs_back_is_reported() {
    let (ns, user, admin) = tenant("ctl-vanish").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin, VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("b")).await.unwrap();
    let (_, vb) = created(&api, &velero, "b").await;
    velero
        .delete(&vb.metadata.name.unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    let n = wait_for(&api, "b", T, "VeleroBackupNotFound", |o| {
        let n = serde_json::to_value(o?.clone()).unwrap();
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["reason"] == "VeleroBackupNotFound")
            .then_some(n)
    })
    .await;
    // Phases only move forward.
    assert_eq!(n["status"]["phase"], "Created");
}

#[tokio::test]
async fn restore_of_a_completed_backup() {
    let (ns, user, admin) = tenant("ctl-nar").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let restores: Api<Restore> = Api::namespaced(admin, VELERO_NAMESPACE);
    nabs.create(&PostParams::default(), &nab("src")).await.unwrap();
    let (_, vb) = created(&nabs, &velero, "src").await;
    let vb_name = vb.metadata.name.unwrap();

    // Not completed yet: not restored.
    nars.create(&PostParams::default(), &nar("too-early", "src"))
        .await
        .unwrap();
    play_velero_backup(&velero, &vb_name, json!({"phase": "Completed"})).await;

    let r = nars.create(&PostParams::default(), &nar("r1", "src")).await.unwrap();
    let id = r.metadata.labels.unwrap()[NAR_ORIGIN_NACUUID_LABEL].clone();
    let n = wait_for(&nars, "r1", T, "NAR Created", |o| {
        let n = o?.clone();
        (n.status.as_ref()?.phase == Some(NonAdminPhase::Created)).then_some(n)
    })
    .await;
    let st = n.status.unwrap();
    let vr_name = st.velero_restore.as_ref().unwrap().name.clone().unwrap();
    assert_eq!(vr_name, id);
    let vr = restores.get(&vr_name).await.unwrap();
    assert_eq!(vr.spec.backup_name.as_deref(), Some(vb_name.as_str()));
    assert_eq!(vr.spec.included_namespaces, Some(vec![ns.clone()]));
    assert_eq!(vr.spec.include_cluster_resources, Some(false));
    assert_eq!(vr.metadata.labels.unwrap()[NAR_ORIGIN_NACUUID_LABEL], id);
    assert_eq!(
        vr.metadata.annotations.unwrap()["openshift.io/oadp-nar-origin-namespace"],
        ns
    );

    play_velero_restore(&restores, &vr_name, "Completed").await;
    wait_for(&nars, "r1", T, "restore Completed mirrored", |o| {
        let vs = o?.clone().status?.velero_restore?.status?;
        (vs.phase.as_deref() == Some("Completed")).then_some(())
    })
    .await;

    // Deleting the NAR deletes its Velero Restore.
    nars.delete("r1", &DeleteParams::default()).await.unwrap();
    wait_gone(&restores, &vr_name, T, "Velero Restore deleted").await;
    wait_gone(&nars, "r1", T, "NAR removed").await;
}

#[tokio::test]
async fn restore_naming_another_namespaces_backup_is_refused() {
    let (ns, user, _) = tenant("ctl-nar-x").await;
    let (other, other_user, admin) = tenant("ctl-nar-victim").await;
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let theirs: Api<NonAdminBackup> = Api::namespaced(other_user, &other);
    theirs.create(&PostParams::default(), &nab("secret")).await.unwrap();
    let (_, vb) = created(&theirs, &velero, "secret").await;
    play_velero_backup(&velero, &vb.metadata.name.unwrap(), json!({"phase": "Completed"})).await;

    // The name resolves in the NAR's own namespace only: there is no "secret" NAB there.
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nars.create(&PostParams::default(), &nar("steal", "secret"))
        .await
        .unwrap();
    let n = wait_for(&nars, "steal", T, "NAR BackingOff", |o| {
        let n = o?.clone();
        (n.status.as_ref()?.phase == Some(NonAdminPhase::BackingOff)).then(|| serde_json::to_value(&n).unwrap())
    })
    .await;
    let c = condition(&n, "Accepted").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("InvalidRestoreSpec"))
    );
    let restores: Api<Restore> = Api::namespaced(admin, VELERO_NAMESPACE);
    assert!(velero_restores_of(&restores, &ns).await.is_empty());
}

#[tokio::test]
async fn invalid_spec_that_bypassed_the_webhook_backs_off() {
    let (_, _, admin) = tenant("ctl-bypass").await;
    // The webhooks leave nac's own namespace out, so an object there reaches the reconciler unchecked: exactly
    // the case of a bypassed webhook. The reconciler must still refuse it.
    let api: Api<NonAdminBackup> = Api::namespaced(admin.clone(), NAC_NAMESPACE);
    let bad: NonAdminBackup = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": "escape"},
        "spec": {"backupSpec": {"includedNamespaces": ["kube-system"], "includeClusterResources": true}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &bad).await.unwrap();
    let n = wait_for(&api, "escape", T, "BackingOff", |o| {
        let n = o?.clone();
        (n.status.as_ref()?.phase == Some(NonAdminPhase::BackingOff)).then(|| serde_json::to_value(&n).unwrap())
    })
    .await;
    let c = condition(&n, "Accepted").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("InvalidBackupSpec"))
    );
    assert!(c["message"]
        .as_str()
        .unwrap()
        .contains("spec.backupSpec.includedNamespaces"));
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let ours = velero
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| {
            b.metadata.annotations.as_ref().is_some_and(|a| {
                a.get("openshift.io/oadp-nab-origin-namespace").map(String::as_str) == Some(NAC_NAMESPACE)
            })
        })
        .count();
    assert_eq!(ours, 0);
    api.delete("escape", &DeleteParams::default()).await.unwrap();
}

/// A NonAdminRestore asking to wait up to `wait` for its backup.
fn waiting_nar(name: &str, backup: &str, wait: &str) -> NonAdminRestore {
    let mut r = nar(name, backup);
    r.metadata.annotations = Some([(nac::policy::WAIT_TIMEOUT_ANNOTATION.to_string(), wait.to_string())].into());
    r
}

fn queued(n: &NonAdminRestore) -> Option<(String, String, String)> {
    let c = n.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Queued")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_restore_waits_for_its_backup_and_runs_once_it_completes() {
    let (ns, user, admin) = tenant("ctl-wait").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);

    // The restore comes first: its backup does not exist yet.
    nars.create(&PostParams::default(), &waiting_nar("early", "src", "2m"))
        .await
        .unwrap();
    let message = wait_for(&nars, "early", T, "NAR waiting for a NAB that does not exist", |o| {
        let n = o?;
        let (status, reason, message) = queued(n)?;
        (n.status.as_ref()?.phase == Some(NonAdminPhase::New) && status == "False" && reason == "WaitingForBackup")
            .then_some(message)
    })
    .await;
    assert!(
        message.contains("waiting for NonAdminBackup src: it does not exist") && message.contains("backs off at"),
        "{message}"
    );

    // The backup arrives and runs: the restore keeps waiting, now for the backup to finish.
    nabs.create(&PostParams::default(), &nab("src")).await.unwrap();
    let (_, vb) = created(&nabs, &velero, "src").await;
    let vb_name = vb.metadata.name.unwrap();
    play_velero_backup(&velero, &vb_name, json!({"phase": "InProgress"})).await;
    wait_for(&nars, "early", T, "NAR waiting for the InProgress backup", |o| {
        queued(o?)
            .filter(|q| q.2.contains("its Velero Backup is InProgress"))
            .map(|_| ())
    })
    .await;
    assert!(
        velero_restores_of(&restores, &ns).await.is_empty(),
        "no Velero Restore while waiting"
    );

    // Completed: woken by the change (no poll), the Velero Restore is created.
    play_velero_backup(&velero, &vb_name, json!({"phase": "Completed"})).await;
    let n = wait_for(&nars, "early", T, "NAR Created after the backup completed", |o| {
        let n = o?;
        (n.status.as_ref()?.phase == Some(NonAdminPhase::Created)).then(|| n.clone())
    })
    .await;
    let q = queued(&n).unwrap();
    assert_eq!((q.0.as_str(), q.1.as_str()), ("True", "RestoreScheduled"));
    let vr = n.status.unwrap().velero_restore.unwrap().name.unwrap();
    assert_eq!(
        restores.get(&vr).await.unwrap().spec.backup_name.as_deref(),
        Some(vb_name.as_str())
    );
    // The wait was announced as a Normal event.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin, &ns);
    let seen = eventually(T, "WaitingForBackup event", || async {
        events
            .list(&ListParams::default().fields("regarding.name=early"))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("WaitingForBackup"))
    })
    .await;
    assert_eq!(seen.type_.as_deref(), Some("Normal"));
}

#[tokio::test]
async fn a_wait_that_times_out_backs_off_with_the_reason() {
    let (ns, user, _) = tenant("ctl-wait-out").await;
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nars.create(&PostParams::default(), &waiting_nar("late", "never", "4s"))
        .await
        .unwrap();
    let n = wait_for(&nars, "late", T, "NAR BackingOff after its wait", |o| {
        let n = o?;
        (n.status.as_ref()?.phase == Some(NonAdminPhase::BackingOff)).then(|| n.clone())
    })
    .await;
    let st = n.status.unwrap();
    let a = st.conditions.iter().find(|c| c.type_ == "Accepted").unwrap();
    assert_eq!((a.status.as_str(), a.reason.as_str()), ("False", "BackupWaitTimedOut"));
    assert!(
        a.message.contains("waited 4s for NonAdminBackup never"),
        "{}",
        a.message
    );
    assert!(st.conditions.iter().all(|c| c.type_ != "Queued"), "the wait is over");
    // The clock runs from creation: it gave up about 4 s after it was created.
    let created = n.metadata.creation_timestamp.unwrap().0;
    let waited = a.last_transition_time.0.duration_since(created).as_secs_f64();
    assert!((3.0..15.0).contains(&waited), "gave up {waited}s after creation");
}

/// An Opaque Secret `name` in `ns` with a (dummy) credential under key `cloud`, as a tenant's location names it.
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

fn location(name: &str, secret: &str) -> NonAdminBackupStorageLocation {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackupStorageLocation",
        "metadata": {"name": name},
        "spec": {"backupStorageLocationSpec": {
            "provider": "aws", "objectStorage": {"bucket": "tenants", "prefix": "p"},
            "credential": {"name": secret, "key": "cloud"}
        }}
    }))
    .unwrap()
}

#[tokio::test]
async fn storage_locations_heal_when_their_secret_appears_and_the_admins_decision_stands() {
    let (ns, user, admin) = tenant("bsl").await;
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    nabsls
        .create(&PostParams::default(), &location("own", "s3"))
        .await
        .unwrap();
    // Approved on creation (the policy asks for no approval), but its Secret does not exist yet.
    let n = wait_json(&nabsls, "own", T, "secret missing", |n| {
        condition_of(n, "SecretSynced").1 == "SecretSyncFailed"
    })
    .await;
    assert_eq!(
        condition_of(&n, "ClusterAdminApproved"),
        ("True".into(), "BslSpecApproved".into())
    );
    assert_eq!(n["status"]["phase"], "New");
    let uuid = n["status"]["veleroBackupStorageLocation"]["nacuuid"]
        .as_str()
        .unwrap()
        .to_string();
    let requests: Api<NonAdminBackupStorageLocationRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let r = requests.get(&uuid).await.unwrap();
    assert_eq!(r.spec.approval_decision, Some(nac::api::ApprovalDecision::Approve));

    // The Secret appears: the watch on Secrets brings the location to Created within seconds.
    opaque_secret(&admin, &ns, "s3").await;
    let n = wait_json(&nabsls, "own", T, "Created", |n| n["status"]["phase"] == "Created").await;
    assert_eq!(
        condition_of(&n, "SecretSynced"),
        ("True".into(), "SecretCreated".into())
    );
    assert_eq!(
        condition_of(&n, "BackupStorageLocationSynced"),
        ("True".into(), "BackupStorageLocationCreated".into())
    );
    let locations: Api<BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let bsl = locations.get(&uuid).await.unwrap();
    assert_eq!(
        bsl.spec.object_storage.prefix.as_deref(),
        Some(format!("{ns}/p").as_str())
    );

    // A request whose status lost what is requested (as after a crash between its create and its status write)
    // is finished again.
    requests
        .patch_status(
            &uuid,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nonAdminBackupStorageLocation": null}})),
        )
        .await
        .unwrap();
    wait_for(&requests, &uuid, T, "request status written again", |r| {
        let l = r?.status.as_ref()?.non_admin_backup_storage_location.clone()?;
        (l.name.as_deref() == Some("own")).then_some(())
    })
    .await;

    // An edit of the Velero BSL outside nac is put back to the approved spec.
    locations
        .patch(
            &uuid,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"objectStorage": {"prefix": "elsewhere"}}})),
        )
        .await
        .unwrap();
    wait_for(&locations, &uuid, T, "BSL put back", |b| {
        (b?.spec.object_storage.prefix.as_deref() == Some(format!("{ns}/p").as_str())).then_some(())
    })
    .await;

    // The admin rejects it although approval is not required: the decision stands (OADP flips it back).
    requests
        .patch(
            &uuid,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"approvalDecision": "reject"}})),
        )
        .await
        .unwrap();
    wait_gone(&locations, &uuid, T, "BSL removed on reject").await;
    let n = wait_json(&nabsls, "own", T, "rejected", |n| {
        condition_of(n, "ClusterAdminApproved").1 == "BslSpecRejected"
    })
    .await;
    assert!(condition(&n, "BackupStorageLocationSynced").is_none());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = requests.get(&uuid).await.unwrap();
    assert_eq!(r.spec.approval_decision, Some(nac::api::ApprovalDecision::Reject));
    assert_eq!(r.status.unwrap().phase, Some(nac::api::RequestPhase::Rejected));
    assert!(locations.get_opt(&uuid).await.unwrap().is_none());

    // Approved again: back.
    requests
        .patch(
            &uuid,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"approvalDecision": "approve"}})),
        )
        .await
        .unwrap();
    wait_json(&nabsls, "own", T, "approved again", |n| {
        condition_of(n, "ClusterAdminApproved").0 == "True"
    })
    .await;
    wait_for(&locations, &uuid, T, "BSL back", |b| b.map(|_| ())).await;

    // Only an Opaque Secret is copied: a typed one (here a registry credential) is refused with the reason.
    let typed: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "registry"}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{}}",
                       "cloud": "[default]\naws_access_key_id = A\naws_secret_access_key = B\n"}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &typed)
        .await
        .unwrap();
    nabsls
        .create(&PostParams::default(), &location("typed", "registry"))
        .await
        .unwrap();
    let n = wait_json(&nabsls, "typed", T, "typed Secret refused", |n| {
        condition_of(n, "SecretSynced").1 == "SecretSyncFailed"
    })
    .await;
    let msg = condition(&n, "SecretSynced").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("must be an Opaque Secret"), "{msg}");
    nabsls.delete("typed", &DeleteParams::default()).await.unwrap();

    // Deleted: everything nac made for it goes.
    nabsls.delete("own", &DeleteParams::default()).await.unwrap();
    wait_gone(&nabsls, "own", T, "NABSL deleted").await;
    wait_gone(&locations, &uuid, T, "BSL deleted").await;
    wait_gone(&requests, &uuid, T, "request deleted").await;
    let copies: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(admin, VELERO_NAMESPACE);
    wait_gone(&copies, &uuid, T, "Secret copy deleted").await;
}

fn nadr(name: &str, kind: &str, target: &str) -> NonAdminDownloadRequest {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": name}, "spec": {"target": {"kind": kind, "name": target}}
    }))
    .unwrap()
}

fn rfc3339_in(d: Duration) -> String {
    let t = std::time::SystemTime::now() + d;
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    k8s_openapi::jiff::Timestamp::from_second(secs as i64)
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn download_requests_are_answered_and_expire_on_time() {
    let (ns, user, admin) = tenant("ctl-nadr").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    let nadrs: Api<NonAdminDownloadRequest> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let drs: Api<DownloadRequest> = Api::namespaced(admin, VELERO_NAMESPACE);
    nabs.create(&PostParams::default(), &nab("b")).await.unwrap();
    let (_, vb) = created(&nabs, &velero, "b").await;
    let vb_name = vb.metadata.name.unwrap();

    // Asked for before the backup finished: it waits, and nothing is asked of Velero yet.
    let early = nadrs
        .create(&PostParams::default(), &nadr("log", "BackupLog", "b"))
        .await
        .unwrap();
    let uid = early.metadata.uid.unwrap();
    let n = wait_json(&nadrs, "log", T, "waiting for the backup", |n| {
        condition_of(n, "Processed").1 == "NotFinished"
    })
    .await;
    assert_eq!(n["status"]["phase"], "New");
    assert!(drs.get_opt(&format!("nadr-{uid}")).await.unwrap().is_none());
    // The request is answered once: its spec does not change.
    let edit = nadrs
        .patch(
            "log",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"target": {"name": "other"}}})),
        )
        .await
        .unwrap_err();
    assert!(edit.to_string().contains("spec is immutable"), "{edit}");

    // The backup completes: one Velero DownloadRequest for its Velero Backup, labelled as the request's.
    play_velero_backup(
        &velero,
        &vb_name,
        json!({"phase": "Completed", "completionTimestamp": rfc3339_in(Duration::ZERO)}),
    )
    .await;
    let dr = wait_for(&drs, &format!("nadr-{uid}"), T, "Velero DownloadRequest", |d| {
        d.cloned()
    })
    .await;
    assert_eq!(
        (dr.spec.target.kind.as_str(), dr.spec.target.name.as_str()),
        ("BackupLog", vb_name.as_str())
    );
    assert_eq!(dr.metadata.labels.unwrap()[NADR_ORIGIN_NACUUID_LABEL], uid);

    // Velero answers (played): the answer is mirrored, with OADP's condition.
    let expiration = rfc3339_in(Duration::from_secs(6));
    let url = "https://s3.example/bucket/backups/b/b-logs.gz?X-Amz-Signature=1";
    drs.patch(
        &format!("nadr-{uid}"),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Processed", "downloadURL": url, "expiration": expiration}})),
    )
    .await
    .unwrap();
    let n = wait_json(&nadrs, "log", T, "answered", |n| n["status"]["phase"] == "Created").await;
    assert_eq!(condition_of(&n, "Processed"), ("True".into(), "Success".into()));
    assert_eq!(n["status"]["velero"]["status"]["downloadURL"], url);
    assert_eq!(n["status"]["velero"]["status"]["expiration"], expiration.as_str());

    // At the expiration the request and its Velero DownloadRequest go: not before, and soon after.
    let expires: k8s_openapi::jiff::Timestamp = expiration.parse().unwrap();
    wait_gone(&nadrs, "log", T, "expired request deleted").await;
    let late = k8s_openapi::jiff::Timestamp::now()
        .duration_since(expires)
        .as_secs_f64();
    assert!((-1.0..5.0).contains(&late), "deleted {late}s after the expiration");
    wait_gone(&drs, &format!("nadr-{uid}"), T, "Velero DownloadRequest deleted").await;

    // A restore's log: the request names the NonAdminRestore; Velero is asked for its Velero Restore's.
    let r = nars.create(&PostParams::default(), &nar("r", "b")).await.unwrap();
    let vr_name = r.metadata.labels.unwrap()[NAR_ORIGIN_NACUUID_LABEL].clone();
    wait_for(&restores, &vr_name, T, "Velero Restore", |r| r.map(|_| ())).await;
    play_velero_restore(&restores, &vr_name, "Completed").await;
    let req = nadrs
        .create(&PostParams::default(), &nadr("rlog", "RestoreLog", "r"))
        .await
        .unwrap();
    let uid = req.metadata.uid.unwrap();
    let dr = wait_for(&drs, &format!("nadr-{uid}"), T, "restore DownloadRequest", |d| {
        d.cloned()
    })
    .await;
    assert_eq!(
        (dr.spec.target.kind.as_str(), dr.spec.target.name.as_str()),
        ("RestoreLog", vr_name.as_str())
    );
    // The request is deleted by its user before Velero answers: the Velero DownloadRequest is collected.
    nadrs.delete("rlog", &DeleteParams::default()).await.unwrap();
    wait_gone(&drs, &format!("nadr-{uid}"), T, "orphaned DownloadRequest collected").await;
}

#[tokio::test]
async fn download_requests_reach_only_own_finished_backups_on_open_locations() {
    let (ns, user, admin) = tenant("ctl-nadr-no").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nadrs: Api<NonAdminDownloadRequest> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let drs: Api<DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);

    // A backup of another namespace is not found by name from this one.
    let (other, other_user, _) = tenant("ctl-nadr-victim").await;
    let theirs: Api<NonAdminBackup> = Api::namespaced(other_user, &other);
    theirs.create(&PostParams::default(), &nab("payroll")).await.unwrap();
    let (_, vb) = created(&theirs, &velero, "payroll").await;
    play_velero_backup(&velero, &vb.metadata.name.unwrap(), json!({"phase": "Completed"})).await;

    // Stored on an admin location the policy does not open for downloads (played: Velero records the location).
    nabs.create(&PostParams::default(), &nab("elsewhere")).await.unwrap();
    let (_, vb) = created(&nabs, &velero, "elsewhere").await;
    velero
        .patch(
            &vb.metadata.name.unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"storageLocation": "archive"}, "status": {"phase": "Completed"}})),
        )
        .await
        .unwrap();

    let mut uids = Vec::new();
    for (name, kind, target) in [
        ("steal", "BackupContents", "payroll"),
        ("none", "BackupLog", "missing"),
        ("norestore", "RestoreLog", "missing"),
        ("closed", "BackupResourceList", "elsewhere"),
    ] {
        let r = nadrs
            .create(&PostParams::default(), &nadr(name, kind, target))
            .await
            .unwrap();
        uids.push(r.metadata.uid.unwrap());
    }
    for (name, reason, message) in [
        ("steal", "NonAdminBackupNotAvailable", "cannot get nonadminbackup"),
        ("none", "NonAdminBackupNotAvailable", "cannot get nonadminbackup"),
        ("norestore", "NonAdminRestoreNotAvailable", "cannot get nonadminrestore"),
        (
            "closed",
            "NonAdminBackupStorageLocationNotUsed",
            "backup does not use nonadminbackupstoragelocation, recreate nadr to process",
        ),
    ] {
        let n = wait_json(&nadrs, name, T, reason, |n| n["status"]["phase"] == "BackingOff").await;
        let c = condition(&n, reason).unwrap_or_else(|| panic!("{name}: no {reason} in {n}"));
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str(), c["message"].as_str()),
            (Some("True"), Some("Error"), Some(message)),
            "{name}"
        );
        assert_eq!(n["status"]["conditions"].as_array().unwrap().len(), 1, "{name}: {n}");
    }
    let made = drs
        .list(&ListParams::default().labels(NADR_ORIGIN_NACUUID_LABEL))
        .await
        .unwrap();
    for dr in made.items {
        let id = &dr.metadata.labels.as_ref().unwrap()[NADR_ORIGIN_NACUUID_LABEL];
        assert!(
            !uids.contains(id),
            "a Velero DownloadRequest was made for a refused request"
        );
    }
}

/// A Velero object nac may have made, as nac labels and annotates it, for `origin` `ns/name` that does not exist.
fn orphan_meta(prefix: &str, kind: &str, ns: &str, name: &str, managed: bool) -> Value {
    let mut labels = json!({
        format!("openshift.io/oadp-{prefix}-origin-nacuuid"): format!("{ns}-{name}-{kind}").to_lowercase(),
        "openshift.io/oadp": "True",
    });
    if managed {
        labels["app.kubernetes.io/managed-by"] = json!("oadp-nac-controller");
    }
    json!({
        "name": format!("{ns}-{name}-{kind}").to_lowercase(),
        "namespace": VELERO_NAMESPACE,
        "labels": labels,
        "annotations": {
            format!("openshift.io/oadp-{prefix}-origin-name"): name,
            format!("openshift.io/oadp-{prefix}-origin-namespace"): ns,
        }
    })
}

#[tokio::test]
async fn orphans_are_collected_and_nothing_else() {
    let (ns, user, admin) = tenant("ctl-gc").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nabs_admin: Api<NonAdminBackup> = Api::namespaced(admin.clone(), &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let drs: Api<DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let locations: Api<BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let requests: Api<NonAdminBackupStorageLocationRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let copies: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let before = collected_total().await;

    // Tenant objects that go without their finalizer (removed by hand): a running backup's Velero Backup is
    // collected; a completed one's data is in storage and stays (Velero's TTL expires it); a live one stays.
    for n in ["running", "done", "live"] {
        nabs.create(&PostParams::default(), &nab(n)).await.unwrap();
    }
    let name_of = |b: Backup| b.metadata.name.unwrap();
    let running = name_of(created(&nabs, &velero, "running").await.1);
    let done = name_of(created(&nabs, &velero, "done").await.1);
    let live = name_of(created(&nabs, &velero, "live").await.1);
    play_velero_backup(
        &velero,
        &done,
        json!({"phase": "Completed", "completionTimestamp": rfc3339_in(Duration::ZERO)}),
    )
    .await;
    wait_json(&nabs, "done", T, "Completed mirrored", |n| {
        n["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;

    // A storage location whose NonAdminBackupStorageLocation goes the same way: its BSL, Secret copy and request.
    opaque_secret(&admin, &ns, "s3").await;
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user, &ns);
    nabsls
        .create(&PostParams::default(), &location("own", "s3"))
        .await
        .unwrap();
    let n = wait_json(&nabsls, "own", T, "location Created", |n| {
        n["status"]["phase"] == "Created"
    })
    .await;
    let bsl = n["status"]["veleroBackupStorageLocation"]["nacuuid"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(&copies, &bsl, T, "Secret copy", |s| s.map(|_| ())).await;

    // Objects labelled by nac for origins that never existed (a crash, a restore of the Velero namespace), and
    // one that looks the same but is not nac's (no managed-by label).
    let planted: Backup =
        serde_json::from_value(json!({"metadata": orphan_meta("nab", "backup", &ns, "never", true), "spec": {}}))
            .unwrap();
    let foreign: Backup =
        serde_json::from_value(json!({"metadata": orphan_meta("nab", "foreign", &ns, "never", false), "spec": {}}))
            .unwrap();
    let restore: Restore = serde_json::from_value(json!({
        "metadata": orphan_meta("nar", "restore", &ns, "never", true), "spec": {"backupName": live}
    }))
    .unwrap();
    let download: DownloadRequest = serde_json::from_value(json!({
        "metadata": orphan_meta("nadr", "dr", &ns, "never", true),
        "spec": {"target": {"kind": "BackupLog", "name": live}}
    }))
    .unwrap();
    // Delete requests of a NonAdminBackup that is gone: one Velero processed goes, one it has not stays.
    let dbrs: Api<DeleteBackupRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let processed: DeleteBackupRequest = serde_json::from_value(json!({
        "metadata": orphan_meta("nab", "processed", &ns, "never", true),
        "spec": {"backupName": "gone"}, "status": {"phase": "Processed"}
    }))
    .unwrap();
    let pending: DeleteBackupRequest = serde_json::from_value(json!({
        "metadata": orphan_meta("nab", "pending", &ns, "never", true), "spec": {"backupName": "gone"}
    }))
    .unwrap();
    let pp = PostParams::default();
    let processed = dbrs.create(&pp, &processed).await.unwrap().metadata.name.unwrap();
    let pending = dbrs.create(&pp, &pending).await.unwrap().metadata.name.unwrap();
    let creating = VELERO_CREATES.lock().await;
    let planted = name_of(velero.create(&pp, &planted).await.unwrap());
    let foreign = name_of(velero.create(&pp, &foreign).await.unwrap());
    drop(creating);
    let restore = restores.create(&pp, &restore).await.unwrap().metadata.name.unwrap();
    let download = drs.create(&pp, &download).await.unwrap().metadata.name.unwrap();

    for n in ["running", "done"] {
        delete_uncleaned(&nabs_admin, n).await;
    }
    let nabsls_admin: Api<NonAdminBackupStorageLocation> = Api::namespaced(admin.clone(), &ns);
    delete_uncleaned(&nabsls_admin, "own").await;

    wait_gone(&velero, &running, T, "running backup's orphan collected").await;
    wait_gone(&velero, &planted, T, "planted backup collected").await;
    wait_gone(&restores, &restore, T, "orphan restore collected").await;
    wait_gone(&drs, &download, T, "orphan DownloadRequest collected").await;
    wait_gone(&locations, &bsl, T, "orphan BSL collected").await;
    wait_gone(&copies, &bsl, T, "orphan Secret copy collected").await;
    wait_gone(&requests, &bsl, T, "orphan location request collected").await;
    wait_gone(&dbrs, &processed, T, "processed orphan DeleteBackupRequest collected").await;

    // After the collector's second look at the deleted objects (10 s), what must stay is still there.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for (name, why) in [
        (&done, "a completed backup"),
        (&live, "a backup whose NonAdminBackup exists"),
        (&foreign, "a backup nac did not make"),
    ] {
        assert!(velero.get_opt(name).await.unwrap().is_some(), "{why} was collected");
    }
    assert!(nabs.get_opt("live").await.unwrap().is_some());
    let kept = dbrs.get_opt(&pending).await.unwrap();
    assert!(
        kept.is_some(),
        "a delete request Velero has not processed was collected"
    );
    // Counted: the eight deletions above (other tests of this binary may add their own).
    let after = collected_total().await;
    assert!(
        after >= before + 8.0,
        "nac_orphans_collected went from {before} to {after}"
    );
    velero.delete(&foreign, &DeleteParams::default()).await.unwrap();
    dbrs.delete(&pending, &DeleteParams::default()).await.unwrap();
}

/// The sum of nac's `nac_orphans_collected` counters.
async fn collected_total() -> f64 {
    env()
        .await
        .nac
        .metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("nac_orphans_collected"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The guard's calls so far (`nac_webhook_requests_total` of `/validate/velero-backups`): allowed, denied.
fn guard_calls(metrics: &str) -> (f64, f64) {
    let mut calls = (0.0, 0.0);
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("nac_webhook_requests_total") && l.contains("/validate/velero-backups"))
    {
        let n: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        if l.to_ascii_lowercase().contains("denied") {
            calls.1 += n;
        } else {
            calls.0 += n;
        }
    }
    calls
}

/// nac's own Velero Backup is not sent through nac's guard (the webhook's match condition on nac's user, in the
/// API server): it costs no admission round trip. Anyone else's unfinished Backup on a tenant's storage location
/// still goes through the guard, which refuses it.
#[tokio::test]
async fn nac_s_own_backups_skip_the_guard_that_still_refuses_everyone_else() {
    let (ns, user, admin) = tenant("ctl-guard").await;
    let e = env().await;
    // A tenant's storage location, as nac makes it for their NonAdminBackupStorageLocation.
    opaque_secret(&admin, &ns, "s3").await;
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    nabsls
        .create(&PostParams::default(), &location("own", "s3"))
        .await
        .unwrap();
    let n = wait_json(&nabsls, "own", T, "location Created", |n| {
        n["status"]["phase"] == "Created"
    })
    .await;
    let bsl = n["status"]["veleroBackupStorageLocation"]["nacuuid"]
        .as_str()
        .unwrap()
        .to_string();
    // Another identity that may create Velero Backups: a ServiceAccount of Velero's namespace.
    let planter = format!("planter-{ns}");
    apply_yaml(
        &admin,
        &format!(
            r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {planter}, namespace: {VELERO_NAMESPACE}}}
rules:
- apiGroups: ["velero.io"]
  resources: ["backups"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {planter}, namespace: {VELERO_NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {planter}}}
subjects: [{{kind: ServiceAccount, name: {planter}, namespace: {VELERO_NAMESPACE}}}]
"#
        ),
    )
    .await;
    let as_planter = e
        .cluster
        .as_user(&format!("system:serviceaccount:{VELERO_NAMESPACE}:{planter}"))
        .await;

    let _only_this_test_creates = VELERO_CREATES.lock().await;
    let before = guard_calls(&e.nac.metrics_text().await);
    // nac's own: the Velero Backup of a NonAdminBackup, unfinished (the guard's rule and condition match it).
    let nabs: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    nabs.create(&PostParams::default(), &nab("own-write")).await.unwrap();
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let (_, vb) = created(&nabs, &velero, "own-write").await;
    assert!(
        vb.status.as_ref().and_then(|s| s.phase.as_deref()).is_none(),
        "unfinished"
    );
    let after_nac = guard_calls(&e.nac.metrics_text().await);
    assert_eq!(after_nac, before, "nac's own Velero Backup called the guard");

    // Anyone else's, on the tenant's location: the guard is called, and refuses it.
    let planted: Backup = serde_json::from_value(json!({
        "metadata": {"name": format!("{planter}-backup")},
        "spec": {"storageLocation": bsl, "includedNamespaces": ["kube-system"]}
    }))
    .unwrap();
    let err = Api::<Backup>::namespaced(as_planter, VELERO_NAMESPACE)
        .create(&PostParams::default(), &planted)
        .await
        .expect_err("the guard refuses an unfinished Backup on a tenant's location");
    let message = match err {
        kube::Error::Api(s) => s.message,
        other => panic!("expected an API error, got {other}"),
    };
    assert!(message.contains("only nac starts backups"), "{message}");
    let after = guard_calls(&e.nac.metrics_text().await);
    assert_eq!(
        after,
        (after_nac.0, after_nac.1 + 1.0),
        "one call to the guard, refused"
    );
}

/// A schedule as OADP's NonAdminSchedule reports it: each run's NonAdminBackup named as its Velero Backup and
/// labelled with the schedule's nacuuid, `status.lastBackup` the newest run (an object), `status.nextRun` also
/// while paused. Velero's schedule controller is played: the run made from the Velero Schedule as Velero makes
/// it (its name, labels, annotations and template).
#[tokio::test]
async fn schedule_runs_are_named_as_their_velero_backups_and_the_status_is_oadp_s() {
    use nac::api::NonAdminSchedule;
    use nac::naming::NAS_ORIGIN_NACUUID_LABEL;
    use nac::velero::{Schedule, SCHEDULE_NAME_LABEL};
    let (ns, user, admin) = tenant("ctl-sched").await;
    let nases: Api<NonAdminSchedule> = Api::namespaced(user.clone(), &ns);
    let nas: NonAdminSchedule = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule", "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 2 * * *", "template": {"backupSpec": {"includedResources": ["configmaps"]}}}
    }))
    .unwrap();
    nases.create(&PostParams::default(), &nas).await.unwrap();
    let s = wait_json(&nases, "nightly", T, "schedule Created", |v| {
        v["status"]["phase"] == "Created" && v["status"]["nextRun"].is_string()
    })
    .await;
    let st = &s["status"];
    let vname = st["veleroSchedule"]["name"].as_str().unwrap().to_string();
    assert_eq!(st["veleroSchedule"]["nacuuid"], json!(vname));
    assert!(st.get("lastBackup").is_none(), "no run yet: {st}");
    let next_run = st["nextRun"].clone();
    let schedules: Api<Schedule> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let vs = schedules.get(&vname).await.unwrap();

    // Velero's run: `<schedule>-<timestamp>`, the Schedule's labels and annotations, its template.
    let run = format!("{vname}-20261128020000");
    let mut labels = vs.metadata.labels.clone().unwrap_or_default();
    labels.insert(SCHEDULE_NAME_LABEL.into(), vname.clone());
    let mut b = Backup::new(&run, vs.spec.template.clone());
    b.metadata.labels = Some(labels);
    b.metadata.annotations = vs.metadata.annotations.clone();
    let backups: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    backups.create(&PostParams::default(), &b).await.unwrap();
    play_velero_backup(
        &backups,
        &run,
        json!({"phase": "InProgress", "startTimestamp": "2026-11-28T02:00:01Z"}),
    )
    .await;

    // Its NonAdminBackup in the namespace: the Velero Backup's name, the schedule's nacuuid as a label.
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nab = wait_for(&nabs, &run, T, "the run's NonAdminBackup", |o| o.cloned()).await;
    assert_eq!(
        nab.metadata.labels.as_ref().unwrap().get(NAS_ORIGIN_NACUUID_LABEL),
        Some(&vname)
    );
    let listed = nabs
        .list(&ListParams::default().labels(&format!("{NAS_ORIGIN_NACUUID_LABEL}={vname}")))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    play_velero_backup(
        &backups,
        &run,
        json!({"phase": "Completed", "completionTimestamp": "2026-11-28T02:00:09Z",
               "expiration": "2026-12-28T02:00:01Z"}),
    )
    .await;
    let s = wait_json(&nases, "nightly", T, "the run as the schedule's last backup", |v| {
        v["status"]["lastBackup"]["phase"] == "Completed"
    })
    .await;
    let st = &s["status"];
    assert_eq!(
        st["lastBackup"],
        json!({"name": run, "veleroBackupName": run, "phase": "Completed",
               "startTimestamp": "2026-11-28T02:00:01Z", "completionTimestamp": "2026-11-28T02:00:09Z",
               "expiration": "2026-12-28T02:00:01Z"})
    );
    assert_eq!(st["recentBackups"], json!([st["lastBackup"]]));
    wait_json(&nabs, &run, T, "the run's NonAdminBackup mirrors it", |v| {
        v["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;

    // Paused: the next run is still reported (the one due once unpaused), as OADP's controller reports it.
    nases
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    wait_json(&schedules, &vname, T, "Velero Schedule paused", |v| {
        v["spec"]["paused"] == true
    })
    .await;
    // The status write follows the Velero Schedule's patch in the same reconcile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = nases.get("nightly").await.unwrap();
    assert_eq!(
        serde_json::to_value(s.status.as_ref().unwrap()).unwrap()["nextRun"],
        next_run,
        "paused"
    );

    // Deleted: its Velero Schedule goes, the run stays.
    nases.delete("nightly", &DeleteParams::default()).await.unwrap();
    wait_gone(&schedules, &vname, T, "the Velero Schedule").await;
    assert!(nabs.get_opt(&run).await.unwrap().is_some());
}

/// Serves `body` to every GET on a port of its own, as a storage endpoint answers a signed URL; its URL.
async fn serve_file(body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    format!("http://{addr}/backups/b/b-results.gz?X-Amz-Signature=1")
}

/// A backup Velero finished with errors: nac asks Velero for its results file once the final phase is in the
/// status. Velero not answering within nac's wait, nac asks again later (not only on the object's next change);
/// answered, the first messages for the namespace (errors first) are in the `VeleroResults` condition and an
/// Event, the other namespaces' never, and the DownloadRequest is gone.
#[tokio::test]
async fn a_backup_s_errors_are_read_from_velero_s_results_also_when_velero_answers_only_the_second_time() {
    let (ns, user, admin) = tenant("ctl-results").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let drs: Api<DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("with-errors")).await.unwrap();
    let (n, vb) = created(&api, &velero, "with-errors").await;
    let uid = n["metadata"]["uid"].as_str().unwrap().to_string();
    let vb_name = vb.metadata.name.clone().unwrap();
    play_velero_backup(
        &velero,
        &vb_name,
        json!({"phase": "PartiallyFailed", "errors": 2, "warnings": 1,
               "completionTimestamp": rfc3339_in(Duration::ZERO)}),
    )
    .await;
    let name = format!("results-{uid}");
    let first = wait_for(&drs, &name, T, "nac's DownloadRequest for the results", |d| d.cloned()).await;
    assert_eq!(
        (first.spec.target.kind.as_str(), first.spec.target.name.as_str()),
        ("BackupResults", vb_name.as_str())
    );
    // Not answered: nac gives up this try after its minute and deletes the request.
    wait_gone(
        &drs,
        &name,
        Duration::from_secs(90),
        "the unanswered DownloadRequest deleted",
    )
    .await;
    let n = serde_json::to_value(api.get("with-errors").await.unwrap()).unwrap();
    assert!(condition(&n, "VeleroResults").is_none(), "{:#}", n["status"]);
    assert_eq!(n["status"]["veleroBackup"]["status"]["phase"], "PartiallyFailed");

    // Asked again, and answered.
    let second = wait_for(
        &drs,
        &name,
        Duration::from_secs(60),
        "nac's second DownloadRequest",
        |d| d.cloned(),
    )
    .await;
    assert_ne!(second.metadata.uid, first.metadata.uid);
    let results = json!({
        "errors": {
            "velero": ["timed out waiting for the snapshot of data"],
            "namespaces": {ns.clone(): ["error backing up item persistentvolumeclaims/data"], "someone-else": ["theirs"]}
        },
        "warnings": {"namespaces": {ns.clone(): ["pod is not scheduled"]}}
    });
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, results.to_string().as_bytes()).unwrap();
    let url = serve_file(gz.finish().unwrap()).await;
    drs.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Processed", "downloadURL": url}})),
    )
    .await
    .unwrap();
    let n = wait_json(&api, "with-errors", T, "the VeleroResults condition", |n| {
        condition(n, "VeleroResults").is_some()
    })
    .await;
    let c = condition(&n, "VeleroResults").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("ErrorsReported"))
    );
    let message = c["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Velero Backup finished with 2 error(s) and 1 warning(s); Velero's results say: error: timed out \
             waiting for the snapshot of data | error: error backing up item persistentvolumeclaims/data | \
             warning: pod is not scheduled; `kubectl nac backup logs with-errors`"
        ),
        "{message}"
    );
    assert!(!message.contains("theirs"), "{message}");
    wait_gone(&drs, &name, T, "the answered DownloadRequest deleted").await;
    // Read: not asked again (a try would come within 30 s).
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(
        drs.get_opt(&name).await.unwrap().is_none(),
        "asked again after the answer"
    );
    let later = serde_json::to_value(api.get("with-errors").await.unwrap()).unwrap();
    assert_eq!(condition(&later, "VeleroResults"), Some(c), "written once");
    let ev = event_about(&admin, &ns, "with-errors", "ErrorsReported", T).await;
    assert_eq!(ev.message.as_deref(), Some(message));
}
