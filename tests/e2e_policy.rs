//! End to end: the policy ConfigMap is guarded at apply time and its edits apply live.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use nac::api::NonAdminBackup;
use nac::naming::NAB_ORIGIN_NACUUID_LABEL;
use serde_json::json;
use std::time::{Duration, Instant};

fn nab(name: &str) -> NonAdminBackup {
    nab_ttl(name, "100h")
}

fn nab_ttl(name: &str, ttl: &str) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": {"ttl": ttl}}
    }))
    .unwrap()
}

/// One test, so that policy edits cannot race with other tests in this binary.
#[tokio::test]
async fn policy_edits_are_checked_at_apply_and_applied_live() {
    let env = Env::start(
        "backup:\n  maxTtl: 2160h\n",
        NacOptions {
            controllers: false,
            ..NacOptions::default()
        },
    )
    .await;
    let (ns, user) = env.tenant("e2e-policy").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    api.create(&PostParams::default(), &nab("before")).await.unwrap();

    // A broken edit is refused at apply, naming the field; the policy in force does not change.
    let err = set_policy(&env.admin, "enforceBackupSpec:\n  ttl: 720h\n  snapshotVolume: false\n")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("enforceBackupSpec.snapshotVolume") && msg.contains("unknown field"),
        "{msg}"
    );
    let err = set_policy(&env.admin, "backup:\n  maxTtl: soon\n").await.unwrap_err();
    assert!(err.to_string().contains("backup.maxTtl"), "{err}");
    api.create(&PostParams::default(), &nab("still-allowed")).await.unwrap();

    // A valid edit changes the verdict of the next create within 2 seconds.
    set_policy(&env.admin, "backup:\n  maxTtl: 48h\n").await.unwrap();
    let edited = Instant::now();
    let mut n = 0;
    let took = loop {
        n += 1;
        match api.create(&PostParams::default(), &nab(&format!("after-{n}"))).await {
            Err(kube::Error::Api(e)) if e.message.contains("above the maximum 48h0m0s") => break edited.elapsed(),
            Err(e) => panic!("unexpected error: {e}"),
            Ok(_) => {}
        }
        assert!(
            edited.elapsed() < Duration::from_secs(2),
            "policy edit not applied within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("policy edit applied after {took:?}");
    let metrics = env.nac.metrics_text().await;
    assert!(metrics.contains("nac_policy_generation 2"), "{metrics}");

    // Tenants' own storage locations follow the live policy too: refused while not enabled, then held to the
    // admin's enforced fields (with a warning naming what was filled in).
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackupstoragelocations");
    let location = |name: &str, provider: Option<&str>| {
        let mut spec = json!({"objectStorage": {"bucket": "b"}, "credential": {"name": "s3", "key": "cloud"}});
        if let Some(p) = provider {
            spec["provider"] = json!(p);
        }
        json!({
            "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackupStorageLocation",
            "metadata": {"name": name}, "spec": {"backupStorageLocationSpec": spec}
        })
    };
    let (code, body, _) = create_raw(&user, &path, &location("off", Some("aws"))).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("nonAdminBSL.enabled is false"),
        "{body}"
    );
    set_policy(
        &env.admin,
        "backup:\n  maxTtl: 48h\nnonAdminBSL:\n  enabled: true\n  enforceBSLSpec: {provider: aws}\n",
    )
    .await
    .unwrap();
    let (on, warnings) = eventually(Duration::from_secs(2), "nonAdminBSL enabled", || async {
        let (code, body, warnings) = create_raw(&user, &path, &location("on", None)).await;
        (code == 201).then_some((body, warnings))
    })
    .await;
    // The enforced provider was filled in (the CRD requires it: the mutating webhook runs first).
    assert_eq!(on["spec"]["backupStorageLocationSpec"]["provider"], "aws");
    assert!(
        warnings.iter().any(|w| w.contains("provider set to aws")),
        "{warnings:?}"
    );
    let (code, body, _) = create_raw(&user, &path, &location("gcp", Some("gcp"))).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("the administrator has restricted spec.backupStorageLocationSpec.provider field to: aws"),
        "{body}"
    );

    // With the policy webhook out of the way, a broken policy can land: nac keeps the last valid one,
    // says so on /readyz, and counts the error.
    delete_webhooks(&env.admin).await;
    // The API server stops calling a deleted webhook once its informer sees the deletion: retried until then.
    eventually(
        Duration::from_secs(10),
        "the policy webhook out of the API server's admission chain",
        || async { set_policy(&env.admin, "enforceBackupSpec: {tll: 1h}\n").await.ok() },
    )
    .await;
    let ready = eventually(
        Duration::from_secs(5),
        "readyz to report the rejected policy",
        || async {
            let (code, body) = http_get(env.nac.metrics, "/readyz").await.ok()?;
            (code == 200 && body.contains("rejected")).then_some(body)
        },
    )
    .await;
    assert!(ready.contains("tll"), "{ready}");
    let metrics = env.nac.metrics_text().await;
    assert!(metrics.contains("nac_policy_reload_errors_total 1"), "{metrics}");
    assert!(metrics.contains("nac_policy_generation 3"), "{metrics}");
    register_webhooks(&env.cluster, &env.admin, &env.nac).await;
    let e = api
        .create(&PostParams::default(), &nab("last-valid"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("48h0m0s"), "{e}");

    // The policy ConfigMap deleted behind nac's back (its webhook guards creates and updates, not deletes): the
    // last valid policy stays in force, and /readyz says the ConfigMap is gone.
    set_policy(&env.admin, "backup:\n  maxTtl: 48h\n").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), NAC_NAMESPACE);
    let saved = cms.get(POLICY_CONFIGMAP).await.unwrap();
    cms.delete(POLICY_CONFIGMAP, &DeleteParams::default()).await.unwrap();
    eventually(
        Duration::from_secs(5),
        "readyz to report the deleted policy",
        || async {
            let (code, body) = http_get(env.nac.metrics, "/readyz").await.ok()?;
            (code == 200 && body.contains("was deleted")).then_some(())
        },
    )
    .await;
    let e = api.create(&PostParams::default(), &nab("deleted")).await.unwrap_err();
    assert!(e.to_string().contains("48h0m0s"), "{e}");

    // A nac started with no policy to read admits no tenant object: not ready, every create refused saying why.
    env.nac.start_again(None);
    // Until its first read of the ConfigMap, readyz says it is waiting for the policy; then that it is not found.
    let body = eventually(Duration::from_secs(60), "readyz not ready without a policy", || async {
        let (code, body) = http_get(env.nac.metrics, "/readyz").await.ok()?;
        (code == 503 && !body.contains("waiting for the policy")).then_some(body)
    })
    .await;
    assert!(
        body.contains("no valid policy loaded") && body.contains("not found"),
        "{body}"
    );
    let e = api
        .create(&PostParams::default(), &nab_ttl("no-policy", "24h"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no valid admin policy"), "{e}");
    assert!(api.get_opt("no-policy").await.unwrap().is_none());

    // The policy back: ready, nothing refused any more, and the create admitted with nac's identity.
    let mut back = ConfigMap {
        metadata: saved.metadata.clone(),
        data: saved.data.clone(),
        ..ConfigMap::default()
    };
    back.metadata.resource_version = None;
    back.metadata.uid = None;
    back.metadata.creation_timestamp = None;
    back.metadata.managed_fields = None;
    cms.create(&PostParams::default(), &back).await.unwrap();
    env.nac.wait_ready().await;
    let n = api
        .create(&PostParams::default(), &nab_ttl("back", "24h"))
        .await
        .unwrap();
    let labels = n.metadata.labels.unwrap_or_default();
    assert!(labels.contains_key(NAB_ORIGIN_NACUUID_LABEL), "{labels:?}");
    let e = api
        .create(&PostParams::default(), &nab("over-again"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("48h0m0s"), "{e}");
}
