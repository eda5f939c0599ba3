//! End to end: nac rides out an API server restart. Its watches (NABs, Velero objects, the policy ConfigMap)
//! recover without a restart of nac and without losing what happened meanwhile.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nac::api::{NonAdminBackup, NonAdminPhase};
use nac::velero::Backup;
use serde_json::json;
use std::process::Command;
use std::time::Duration;

fn nab(name: &str, ttl: &str) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": {"ttl": ttl}}
    }))
    .unwrap()
}

#[tokio::test]
async fn watches_recover_after_an_api_server_restart() {
    let env = Env::start("backup:\n  maxTtl: 2160h\n", NacOptions::default()).await;
    let (ns, user) = env.tenant("restart").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    let velero: Api<Backup> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    api.create(&PostParams::default(), &nab("before", "100h"))
        .await
        .unwrap();
    let vb_name = wait_for(&api, "before", Duration::from_secs(20), "first NAB Created", |o| {
        let st = o?.clone().status?;
        (st.phase == Some(NonAdminPhase::Created)).then_some(st.velero_backup?.name?)
    })
    .await;

    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/cluster-up.sh"))
        .arg("--restart-apiserver")
        .env("CLUSTER_DIR", env.cluster.get("CLUSTER_DIR"))
        .env("RESTART_DOWN_SECS", "3")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // What happened to Velero objects is picked up once the watch is back.
    velero
        .patch(
            &vb_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed"}})),
        )
        .await
        .unwrap();
    wait_for(
        &api,
        "before",
        Duration::from_secs(60),
        "Completed mirrored after the restart",
        |o| {
            let vs = o?.clone().status?.velero_backup?.status?;
            (vs.phase.as_deref() == Some("Completed")).then_some(())
        },
    )
    .await;
    // New objects are reconciled.
    api.create(&PostParams::default(), &nab("after", "100h")).await.unwrap();
    wait_for(&api, "after", Duration::from_secs(60), "second NAB Created", |o| {
        (o?.clone().status?.phase == Some(NonAdminPhase::Created)).then_some(())
    })
    .await;
    // And the policy watch is live again.
    set_policy(&env.admin, "backup:\n  maxTtl: 48h\n").await.unwrap();
    eventually(
        Duration::from_secs(30),
        "policy edit applied after the restart",
        || async {
            match api.create(&PostParams::default(), &nab("probe", "100h")).await {
                Err(kube::Error::Api(e)) if e.message.contains("above the maximum 48h0m0s") => Some(()),
                Ok(_) => {
                    let _ = api.delete("probe", &Default::default()).await;
                    None
                }
                Err(_) => None,
            }
        },
    )
    .await;
    assert_eq!(http_get(env.nac.metrics, "/readyz").await.unwrap().0, 200);
}
