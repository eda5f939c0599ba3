//! End to end: leader election and crash safety. Two controller replicas, one reconciling at a time; the leader
//! killed in the middle of a burst of creates; exactly one Velero Backup per NonAdminBackup in the end.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, PostParams};
use nac::api::{NonAdminBackup, NonAdminPhase};
use nac::velero::Backup;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

fn controller(cluster: &Cluster, identity: &str) -> NacProcess {
    NacProcess::spawn(
        cluster,
        NacOptions {
            controllers: true,
            identity: identity.to_string(),
            extra_env: vec![
                (
                    "NAC_CONTROLLERS__LEADER_ELECTION__LEASE_DURATION_SECS".into(),
                    "4".into(),
                ),
                (
                    "NAC_CONTROLLERS__LEADER_ELECTION__RENEW_INTERVAL_SECS".into(),
                    "1".into(),
                ),
            ],
        },
    )
}

async fn is_leader(nac: &NacProcess) -> bool {
    nac.metrics_text().await.lines().any(|l| l == "nac_leader 1")
}

async fn holder(admin: &kube::Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(admin.clone(), NAC_NAMESPACE)
        .get_opt("nac-leader")
        .await
        .ok()??;
    lease.spec?.holder_identity
}

#[tokio::test]
async fn one_leader_and_no_duplicates_across_a_crash() {
    // The webhook replica reconciles nothing; two controller replicas compete for the Lease.
    let env = Env::start(
        "{}",
        NacOptions {
            controllers: false,
            ..NacOptions::default()
        },
    )
    .await;
    let mut a = controller(&env.cluster, "replica-a");
    let mut b = controller(&env.cluster, "replica-b");
    a.wait_ready().await;
    b.wait_ready().await;
    let first = eventually(Duration::from_secs(20), "a leader", || async {
        let h = holder(&env.admin).await?;
        (h == "replica-a" || h == "replica-b").then_some(h)
    })
    .await;
    // Exactly one replica says it leads.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (la, lb) = (is_leader(&a).await, is_leader(&b).await);
    assert!(la ^ lb, "leader flags: a={la} b={lb}");
    assert_eq!(la, first == "replica-a");

    let (ns, user) = env.tenant("ha-burst").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    let mk = |i: usize| -> NonAdminBackup {
        serde_json::from_value(json!({
            "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
            "metadata": {"name": format!("b{i}")}, "spec": {"backupSpec": {}}
        }))
        .unwrap()
    };
    const N: usize = 40;
    for i in 0..N / 2 {
        api.create(&PostParams::default(), &mk(i)).await.unwrap();
    }
    // Kill the leader (SIGTERM: it releases the Lease) and keep creating; then restart it.
    let (leader, follower) = if la { (&mut a, &b) } else { (&mut b, &a) };
    leader.stop();
    for i in N / 2..N {
        api.create(&PostParams::default(), &mk(i)).await.unwrap();
    }
    eventually(Duration::from_secs(20), "the other replica to take over", || async {
        is_leader(follower).await.then_some(())
    })
    .await;
    let restarted = controller(&env.cluster, if la { "replica-a" } else { "replica-b" });
    restarted.wait_ready().await;

    eventually(Duration::from_secs(60), "all NABs Created", || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        (list.items.len() == N
            && list
                .items
                .iter()
                .all(|n| n.status.as_ref().and_then(|s| s.phase) == Some(NonAdminPhase::Created)))
        .then_some(())
    })
    .await;
    // Exactly one Velero Backup per NAB, each pointing back at it.
    let velero: Api<Backup> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let mut per_nab: HashMap<String, usize> = HashMap::new();
    for b in velero.list(&ListParams::default()).await.unwrap().items {
        let ann = b.metadata.annotations.unwrap_or_default();
        if ann.get("openshift.io/oadp-nab-origin-namespace") == Some(&ns) {
            *per_nab
                .entry(ann["openshift.io/oadp-nab-origin-name"].clone())
                .or_default() += 1;
        }
    }
    assert_eq!(per_nab.len(), N, "{per_nab:?}");
    assert!(per_nab.values().all(|&c| c == 1), "{per_nab:?}");
    // And still one leader.
    let (la, lb) = (is_leader(&restarted).await, is_leader(follower).await);
    assert!(la ^ lb);
}
