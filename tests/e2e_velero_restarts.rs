//! End to end with the real Velero and S3 server, tests that stop or restart Velero: backup sync (a namespace is
//! lost with its NonAdminBackups, Velero brings the backups back from object storage, nac gives them their
//! NonAdminBackups back, the tenant restores) and queue positions (backups queued while Velero is stopped, then
//! worked through). A test binary of its own, its tests one at a time: restarting Velero fails every backup in
//! progress, so no other test may run beside one that does.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::velero::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nac::api::{NonAdminBackup, NonAdminBackupStorageLocation, NonAdminRestore};
use nac::naming::{NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL};
use nac::velero::Backup;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::{Mutex, OnceCell};

static NAC: OnceCell<Env> = OnceCell::const_new();
/// One test at a time: they stop and start the one Velero server.
static SERIAL: Mutex<()> = Mutex::const_new(());

async fn env() -> &'static Env {
    NAC.get_or_init(|| async {
        use_velero(VeleroMode::Real);
        Env::start(POLICY, NacOptions::default()).await
    })
    .await
}

/// A restore of a backup Velero failed validation for backs off at once. Here, one test at a time and followed by
/// a restart of Velero: Velero 1.18.3 can lose count of a backup that fails validation the moment it is dequeued
/// (vmware-tanzu/velero#10519) and then starts no other backup until it restarts.
#[tokio::test]
async fn a_restore_of_a_backup_velero_failed_backs_off_at_once() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let (ns, user, admin) = new_tenant("vel-fail").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    // A spec alone that Velero fails at validation nac refuses at apply time (`velero::validation`); what is left
    // is the administrator's side: here a policy enforcing a resource policy ConfigMap that does not exist.
    let refused = nabs
        .create(
            &PostParams::default(),
            &nab(
                "refused",
                json!({"includedResources": ["configmaps"], "excludedResources": ["configmaps"]}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("Velero fails such a backup at validation"),
        "{refused}"
    );
    let broken = POLICY.replacen(
        "enforceBackupSpec:\n",
        "enforceBackupSpec:\n  resourcePolicy:\n    kind: configmap\n    name: nac-e2e-no-such-policy\n",
        1,
    );
    set_policy_loaded(env, &admin, &broken).await;
    nabs.create(&PostParams::default(), &nab("broken", json!({})))
        .await
        .unwrap();
    velero_phase(&nabs, "broken", &["FailedValidation"]).await;
    set_policy_loaded(env, &admin, POLICY).await;
    velero_up(&env.cluster, &["--restart"]);
    nars.create(&PostParams::default(), &nar("from-broken", "broken"))
        .await
        .unwrap();
    let n = backing_off(&nars, "from-broken").await;
    let (status, reason, message) = nar_condition(&n, "Accepted").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "BackupNotRestorable"));
    assert!(message.contains("its Velero Backup is FailedValidation"), "{message}");
    assert!(accepted_after_creation(&n) < 10.0, "refused at once, not after a wait");
}

/// Writes the policy and waits until nac has loaded it (its generation metric moves on). `admin`: a client of
/// this test's runtime (the shared `env`'s was made in another's).
async fn set_policy_loaded(env: &Env, admin: &kube::Client, policy: &str) {
    let generation = |m: String| {
        m.lines()
            .find_map(|l| l.strip_prefix("nac_policy_generation ")?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = generation(env.nac.metrics_text().await);
    set_policy(admin, policy).await.unwrap();
    eventually(Duration::from_secs(10), "the policy edit loaded", || async {
        (generation(env.nac.metrics_text().await) > before).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_lost_namespace_comes_back_from_its_synced_backup() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let (ns, user, admin) = new_tenant("vel-dr").await;
    workload(&admin, &ns).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    nabs.create(&PostParams::default(), &nab("nightly", json!({})))
        .await
        .unwrap();
    let n = completed(&nabs, "nightly").await;
    let vb_name = n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    // A second backup on the tenant's own storage location (their bucket).
    let bucket = format!("dr-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    own_location(&admin, &nabsls, &ns, &bucket).await;
    nabs.create(
        &PostParams::default(),
        &nab("offsite", json!({"storageLocation": "own"})),
    )
    .await
    .unwrap();
    let n = completed(&nabs, "offsite").await;
    let offsite = n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();

    // The namespace is deleted with everything in it: the NAB's finalizer removes the Velero Backup object, the
    // data stays in the bucket.
    let uid = velero.get(&vb_name).await.unwrap().metadata.uid;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    wait_gone(&namespaces, &ns, T, "namespace deleted").await;
    // Gone, or already back from the bucket as a new object if Velero's own sync (every minute) ran meanwhile.
    let now = velero.get_opt(&vb_name).await.unwrap();
    assert!(
        now.as_ref().is_none_or(|b| b.metadata.uid != uid),
        "the NAB's finalizer deleted the Velero Backup object"
    );
    assert!(
        bucket_files(&vb_name).contains(&format!("{vb_name}.tar.gz")),
        "the data stays in the bucket"
    );

    wait_gone(&velero, &offsite, T, "the offsite backup's Velero object deleted").await;
    assert!(files_in(&bucket, &format!("{ns}/p"), &offsite).contains(&format!("{offsite}.tar.gz")));

    // The admin re-creates the namespace and the owner's rights; the owner re-creates their location on the same
    // bucket (the admin approves it again); Velero syncs both buckets.
    ensure_namespace(&admin, &ns).await;
    grant_editor(&admin, &ns, &format!("user-{ns}")).await;
    own_location(&admin, &nabsls, &ns, &bucket).await;
    velero_up(&env.cluster, &["--restart"]);
    wait_for(
        &velero,
        &vb_name,
        T,
        "Velero re-created the Backup from the bucket",
        |o| o.cloned().map(|_| ()),
    )
    .await;

    // nac re-creates the NonAdminBackup under its origin name, adopting the synced Velero Backup.
    let back = wait_for(&nabs, "nightly", T, "NAB re-created by backup sync", |o| {
        let n = o.cloned()?;
        let st = n.status.as_ref()?;
        (st.velero_backup.as_ref()?.status.as_ref()?.phase.as_deref() == Some("Completed")).then_some(n)
    })
    .await;
    let labels = back.metadata.labels.clone().unwrap();
    assert_eq!(labels[NAB_SYNCED_FROM_NACUUID_LABEL], vb_name);
    assert_eq!(labels[NAB_ORIGIN_NACUUID_LABEL], vb_name);
    let st = back.status.clone().unwrap();
    assert_eq!(st.phase, Some(nac::api::NonAdminPhase::Created));
    assert_eq!(st.velero_backup.unwrap().name.as_deref(), Some(vb_name.as_str()));
    assert_eq!(st.queue_info.unwrap().estimated_queue_position, 0);
    // Exactly one Velero Backup still: adopted, not made again.
    let sel = format!("{NAB_ORIGIN_NACUUID_LABEL}={vb_name}");
    assert_eq!(
        velero
            .list(&kube::api::ListParams::default().labels(&sel))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    // The sync label is nac's: the tenant can neither remove nor forge it.
    let err = nabs
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAB_SYNCED_FROM_NACUUID_LABEL: null}}})),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains(NAB_SYNCED_FROM_NACUUID_LABEL), "{err}");
    let mut forged = nab("forged", json!({}));
    forged.metadata.labels = Some([(NAB_SYNCED_FROM_NACUUID_LABEL.to_string(), vb_name.clone())].into());
    let err = nabs.create(&PostParams::default(), &forged).await.unwrap_err();
    assert!(err.to_string().contains("set only by nac's backup sync"), "{err}");

    // The backup on the tenant's own location comes back too, into this namespace, naming the location.
    let back = wait_json(&nabs, "offsite", T, "offsite NAB synced back", |n| {
        n["metadata"]["labels"][NAB_SYNCED_FROM_NACUUID_LABEL] == offsite.as_str()
            && n["status"]["veleroBackup"]["status"]["phase"] == "Completed"
    })
    .await;
    assert_eq!(back["spec"]["backupSpec"]["storageLocation"], "own");
    assert_eq!(back["status"]["phase"], "Created");

    // The tenant restores the namespace's objects from it.
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nars.create(&PostParams::default(), &nar("after-disaster", "nightly"))
        .await
        .unwrap();
    wait_for(&nars, "after-disaster", T, "restore Completed", |o| {
        let n = o?.clone();
        let p = n.status?.velero_restore?.status?.phase?;
        assert_ne!(p, "Failed");
        (p == "Completed").then_some(())
    })
    .await;
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get("app-config")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["greeting"], "hello");
    assert!(Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get_opt("web")
        .await
        .unwrap()
        .is_some());

    // And from the offsite one, read from the tenant's bucket.
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    cms.delete("app-config", &DeleteParams::default()).await.unwrap();
    nars.create(&PostParams::default(), &nar("from-offsite", "offsite"))
        .await
        .unwrap();
    wait_for(&nars, "from-offsite", T, "restore Completed", |o| {
        let p = o?.clone().status?.velero_restore?.status?.phase?;
        assert_ne!(p, "Failed");
        (p == "Completed").then_some(())
    })
    .await;
    assert!(cms.get_opt("app-config").await.unwrap().is_some());
}

#[tokio::test]
async fn queue_positions_follow_the_real_queue() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let (ns1, user1, admin) = new_tenant("vel-q1").await;
    let (ns2, user2, _) = new_tenant("vel-q2").await;
    workload(&admin, &ns1).await;
    workload(&admin, &ns2).await;
    let a1: Api<NonAdminBackup> = Api::namespaced(user1, &ns1);
    let a2: Api<NonAdminBackup> = Api::namespaced(user2, &ns2);

    // Velero is stopped: six backups, created one after the other across two namespaces, all wait in the queue.
    // Nothing else may be in it (an earlier test's backup Velero had not finished would be ahead of them).
    common::faults::velero_idle(&admin).await;
    velero_up(&env.cluster, &["--stop-velero"]);
    let all: Vec<(&Api<NonAdminBackup>, String)> = (0..3)
        .flat_map(|i| [(&a1, format!("q{i}")), (&a2, format!("q{i}"))])
        .collect();
    for (api, name) in &all {
        api.create(&PostParams::default(), &nab(name, json!({}))).await.unwrap();
    }
    let positions = || async {
        let mut out = BTreeMap::new();
        for (api, name) in &all {
            let n = api.get(name).await.unwrap();
            let st = n.status.unwrap_or_default();
            out.insert(
                format!("{}/{name}", n.metadata.namespace.unwrap()),
                (
                    st.queue_info.map(|q| q.estimated_queue_position),
                    st.velero_backup.and_then(|v| v.status).and_then(|s| s.phase),
                ),
            );
        }
        out
    };
    // Consecutive positions 1..6 once nac has seen all six (same-second creations are ordered by name).
    let deadline = std::time::Instant::now() + T;
    let queued = loop {
        let p = positions().await;
        let mut got: Vec<i64> = p.values().filter_map(|(pos, _)| *pos).collect();
        got.sort();
        if got == (1..=6).collect::<Vec<_>>() {
            break p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "positions 1..6 for the six queued backups not reached within {T:?}: {p:?}\n{}",
            velero_queue_report(&env.cluster, &admin).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (key, (_, phase)) in &queued {
        assert!(
            phase.as_deref().unwrap_or("New") == "New",
            "{key} ran while Velero was stopped: {phase:?}"
        );
    }

    // Velero starts and works through them: every backup completes and reports position 0.
    velero_up(&env.cluster, &["--restart"]);
    eventually(Duration::from_secs(300), "all six Completed at position 0", || async {
        positions()
            .await
            .values()
            .all(|(pos, phase)| *pos == Some(0) && phase.as_deref() == Some("Completed"))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restart_of_nac_does_not_restart_a_restores_wait() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let (ns, user, _) = new_tenant("vel-wait-restart").await;
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    nars.create(&PostParams::default(), &waiting_nar("patient", "later", "40s"))
        .await
        .unwrap();
    waiting(&nars, "patient").await;

    // nac restarts in the middle of the wait: the clock counts from the restore's creation, not from nac's start.
    tokio::time::sleep(Duration::from_secs(10)).await;
    env.nac.restart().await;
    let n = backing_off(&nars, "patient").await;
    let (_, reason, _) = nar_condition(&n, "Accepted").unwrap();
    assert_eq!(reason, "BackupWaitTimedOut");
    let after = accepted_after_creation(&n);
    assert!(
        (40.0..55.0).contains(&after),
        "gave up {after}s after creation (40s wait)"
    );

    // And a backup that does come within the wait ends it: after the restart too.
    nars.create(&PostParams::default(), &waiting_nar("in-time", "arrives", "5m"))
        .await
        .unwrap();
    waiting(&nars, "in-time").await;
    env.nac.restart().await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    nabs.create(&PostParams::default(), &nab("arrives", json!({})))
        .await
        .unwrap();
    completed(&nabs, "arrives").await;
    wait_for(
        &nars,
        "in-time",
        Duration::from_secs(300),
        "NAR Created after its backup",
        |o| (o?.status.as_ref()?.phase == Some(nac::api::NonAdminPhase::Created)).then_some(()),
    )
    .await;
}
