//! End to end with the real Velero and S3 server: backup sync. A namespace is lost with its NonAdminBackups, Velero
//! brings the backups back from object storage, nac gives them their NonAdminBackups back, and the tenant restores.
//! Its own test binary: restarting Velero (its way to sync at once instead of on its one-minute tick) fails every
//! backup in progress, so no other test may run beside it.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::velero::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nac::api::{NonAdminBackup, NonAdminRestore};
use nac::naming::{NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL};
use nac::velero::Backup;
use serde_json::json;
use std::process::Command;

/// Stops the Velero server and starts it again; it syncs backups from the bucket at start.
fn restart_velero(cluster: &Cluster) {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/velero-up.sh"))
        .arg("--restart")
        .env("CLUSTER_DIR", cluster.get("CLUSTER_DIR"))
        .output()
        .expect("running hack/velero-up.sh --restart");
    assert!(
        out.status.success(),
        "velero-up.sh --restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_lost_namespace_comes_back_from_its_synced_backup() {
    use_velero(VeleroMode::Real);
    let env = Env::start(POLICY, NacOptions::default()).await;
    let (ns, user, admin) = new_tenant("vel-dr").await;
    workload(&admin, &ns).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    nabs.create(&PostParams::default(), &nab("nightly", json!({})))
        .await
        .unwrap();
    let n = completed(&nabs, "nightly").await;
    let vb_name = n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let velero: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);

    // The namespace is deleted with everything in it: the NAB's finalizer removes the Velero Backup object, the
    // data stays in the bucket.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.delete(&ns, &DeleteParams::default()).await.unwrap();
    eventually(T, "namespace deleted", || async {
        namespaces.get_opt(&ns).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(velero.get_opt(&vb_name).await.unwrap().is_none());
    assert!(
        bucket_files(&vb_name).contains(&format!("{vb_name}.tar.gz")),
        "the data stays in the bucket"
    );

    // The admin re-creates the namespace and the owner's rights; Velero syncs the bucket.
    ensure_namespace(&admin, &ns).await;
    grant_editor(&admin, &ns, &format!("user-{ns}")).await;
    restart_velero(&env.cluster);
    eventually(T, "Velero re-created the Backup from the bucket", || async {
        velero.get_opt(&vb_name).await.ok()?.map(|_| ())
    })
    .await;

    // nac re-creates the NonAdminBackup under its origin name, adopting the synced Velero Backup.
    let back = eventually(T, "NAB re-created by backup sync", || async {
        let n = nabs.get_opt("nightly").await.ok()??;
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

    // The tenant restores the namespace's objects from it.
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nars.create(&PostParams::default(), &nar("after-disaster", "nightly"))
        .await
        .unwrap();
    eventually(T, "restore Completed", || async {
        let n = nars.get("after-disaster").await.ok()?;
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
    assert!(Api::<Deployment>::namespaced(admin, &ns)
        .get_opt("web")
        .await
        .unwrap()
        .is_some());
}
