//! Handler tests: the real HTTPS server on loopback, real AdmissionReview JSON from tests/fixtures.

mod common;

use common::*;
use nac::naming::{is_nacuuid_for, NAB_ORIGIN_NACUUID_LABEL};
use serde_json::{json, Value};

fn resp(v: &Value) -> &Value {
    &v["response"]
}

#[tokio::test]
async fn mutate_nab_create_fills_policy_namespace_and_identity() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let review = fixture("nab-create.json");
    let (status, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(status, 200);
    assert_eq!(resp(&out)["uid"], review["request"]["uid"]);
    assert_eq!(resp(&out)["allowed"], true);
    assert_eq!(resp(&out)["patchType"], "JSONPatch");
    let obj = patched_object(&review, &out);
    let spec = &obj["spec"]["backupSpec"];
    assert_eq!(spec["includedNamespaces"], json!(["team-a"]));
    assert_eq!(spec["ttl"], "720h0m0s");
    assert_eq!(spec["defaultVolumesToFsBackup"], true);
    assert_eq!(spec["snapshotVolumes"], false);
    // The user's own fields are untouched.
    assert_eq!(spec["labelSelector"], json!({"matchLabels": {"app": "shop"}}));
    let id = obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL].as_str().unwrap();
    assert!(is_nacuuid_for(id, "team-a", "nightly"), "{id}");
    assert_eq!(obj["metadata"]["finalizers"], json!([nac::naming::NAB_FINALIZER]));
    let warnings: Vec<&str> = resp(&out)["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings.contains(&"spec.backupSpec.ttl set to 720h0m0s by cluster policy"),
        "{warnings:?}"
    );

    // The mutated object then passes validation.
    let mut validated = review.clone();
    validated["request"]["object"] = obj;
    let (_, out) = s.post_json("/validate/nonadminbackups", &validated).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
}

#[tokio::test]
async fn forged_identity_label_is_replaced_on_create_and_refused_if_it_gets_through() {
    let s = TestServer::start(Some("{}")).await;
    let mut review = fixture("nab-create.json");
    let forged = "team-b-nightly-0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";
    review["request"]["object"]["metadata"]["labels"] = json!({ NAB_ORIGIN_NACUUID_LABEL: forged });
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    let obj = patched_object(&review, &out);
    let id = obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL].as_str().unwrap();
    assert_ne!(id, forged);
    assert!(resp(&out)["warnings"].to_string().contains("was replaced"));
    // Without the mutating webhook the forged value reaches validation: refused, naming the label.
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains(NAB_ORIGIN_NACUUID_LABEL) && msg.contains("forged"),
        "{msg}"
    );
    // nac's own service account may set it (re-creating an object with its original identity).
    review["request"]["userInfo"]["username"] = json!("system:serviceaccount:nac-system:nac");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    let obj = patched_object(&review, &out);
    assert_eq!(obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL], forged);
}

#[tokio::test]
async fn validate_denies_other_namespace_and_cluster_resources_naming_fields() {
    let s = TestServer::start(Some("{}")).await;
    let review = fixture("nab-create-other-namespace.json");
    let (status, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(status, 200);
    let r = resp(&out);
    assert_eq!(r["uid"], review["request"]["uid"]);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 403);
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("NonAdminBackup spec.backupSpec.includedNamespaces is restricted"),
        "{msg}"
    );
    assert!(msg.contains("team-b"), "{msg}");
    assert!(msg.contains("spec.backupSpec.includeClusterResources"), "{msg}");
    let fields: Vec<&str> = r["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.backupSpec.includedNamespaces",
            "spec.backupSpec.includeClusterResources"
        ]
    );
}

/// One call decides: the mutating endpoint refuses what the validating one refuses, with the same message and
/// causes, for creates and updates of each kind (nac registers only the mutating hooks for the tenant kinds).
#[tokio::test]
async fn the_mutating_call_refuses_what_validation_refuses() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let mut conflict = fixture("nab-create.json");
    conflict["request"]["object"]["spec"]["backupSpec"]["snapshotVolumes"] = json!(true);
    let mut sync_label = fixture("nab-create.json");
    sync_label["request"]["object"]["metadata"]["labels"] =
        json!({ nac::naming::NAB_SYNCED_FROM_NACUUID_LABEL: "team-a-nightly-0d0b7b2c-ee76-412d-a867-2c23b8aa51ab" });
    for (name, review, path) in [
        (
            "other namespace",
            fixture("nab-create-other-namespace.json"),
            "nonadminbackups",
        ),
        ("enforced value", conflict, "nonadminbackups"),
        ("sync label", sync_label, "nonadminbackups"),
        ("spec edit", fixture("nab-update-spec.json"), "nonadminbackups"),
    ] {
        let (_, m) = s.post_json(&format!("/mutate/{path}"), &review).await;
        let (_, v) = s.post_json(&format!("/validate/{path}"), &review).await;
        let (m, v) = (resp(&m), resp(&v));
        assert_eq!(m["allowed"], false, "{name}: {m}");
        assert_eq!(m["status"], v["status"], "{name}");
        assert!(m.get("patch").is_none(), "{name}: a refusal carries no patch");
    }
    // What the mutating call fills in passes: the enforced fields and the identity label.
    let (_, m) = s
        .post_json("/mutate/nonadminbackups", &fixture("nab-create.json"))
        .await;
    assert_eq!(resp(&m)["allowed"], true, "{m}");
}

#[tokio::test]
async fn enforced_value_conflict_names_field_and_both_values() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let mut review = fixture("nab-create.json");
    review["request"]["object"]["spec"]["backupSpec"]["snapshotVolumes"] = json!(true);
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.backupSpec.snapshotVolumes") && msg.contains("false") && msg.contains("true"),
        "{msg}"
    );
}

#[tokio::test]
async fn spec_is_immutable_but_delete_backup_may_be_set() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let review = fixture("nab-update-spec.json");
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.backupSpec.ttl"), "{msg}");

    // Re-applying the original manifest with deleteBackup: the webhook fills what it left out and allows it.
    let review = fixture("nab-update-delete.json");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    let obj = patched_object(&review, &out);
    assert_eq!(
        obj["spec"]["backupSpec"],
        review["request"]["oldObject"]["spec"]["backupSpec"]
    );
    assert_eq!(
        obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL],
        review["request"]["oldObject"]["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL]
    );
    let mut validated = review.clone();
    validated["request"]["object"] = obj.clone();
    let (_, out) = s.post_json("/validate/nonadminbackups", &validated).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");

    // deleteBackup only goes one way.
    let mut back = validated.clone();
    back["request"]["oldObject"] = obj.clone();
    back["request"]["object"]["spec"]["deleteBackup"] = json!(false);
    let (_, out) = s.post_json("/validate/nonadminbackups", &back).await;
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("spec.deleteBackup"));
}

#[tokio::test]
async fn identity_label_cannot_be_changed_except_by_nac() {
    let s = TestServer::start(Some("{}")).await;
    let mut review = fixture("nab-update-delete.json");
    let old = review["request"]["oldObject"].clone();
    let mut obj = old.clone();
    obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL] = json!("team-a-nightly-11111111-2222-4333-8444-555555555555");
    review["request"]["object"] = obj;
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot be changed or removed"));
    review["request"]["userInfo"]["username"] = json!("system:serviceaccount:nac-system:nac");
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true);
}

#[tokio::test]
async fn updates_pass_even_without_a_valid_policy_but_creates_fail_closed() {
    let s = TestServer::start(None).await;
    let (_, out) = s
        .post_json("/validate/nonadminbackups", &fixture("nab-create.json"))
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("no valid admin policy"));
    let (_, out) = s
        .post_json("/mutate/nonadminbackups", &fixture("nab-create.json"))
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    // Controller updates (finalizers, deleteBackup) must never be blocked by a broken policy.
    let mut review = fixture("nab-update-delete.json");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true);
    review["request"]["object"] = patched_object(&review, &out);
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
}

#[tokio::test]
async fn creates_fail_closed_while_the_policy_cannot_be_read_and_pass_once_it_can() {
    let s = TestServer::start(Some("{}")).await;
    let create = fixture("nab-create.json");
    // Failing for less than the grace (a watch reconnecting): still admitted under the policy read.
    s.policy.source_failed("watch failed: connection refused");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &create).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    // Failing for longer: every create is refused, saying why and that it passes once the policy can be read.
    let long_ago =
        std::time::Instant::now() - nac::policy::live::store::SOURCE_GRACE - std::time::Duration::from_secs(1);
    s.policy.source_read();
    s.policy.source_failed_at("watch failed: 403 Forbidden", long_ago);
    for path in ["/mutate/nonadminbackups", "/validate/nonadminbackups"] {
        let (_, out) = s.post_json(path, &create).await;
        assert_eq!(resp(&out)["allowed"], false, "{path}: {out}");
        let msg = resp(&out)["status"]["message"].as_str().unwrap();
        assert!(
            msg.contains("cannot read the admin policy")
                && msg.contains("403 Forbidden")
                && msg.contains("admitted again"),
            "{msg}"
        );
    }
    // Controller updates still pass.
    let (_, out) = s
        .post_json("/mutate/nonadminbackups", &fixture("nab-update-delete.json"))
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    s.policy.source_read();
    let (_, out) = s.post_json("/mutate/nonadminbackups", &create).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
}

#[tokio::test]
async fn nar_rules() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let review = fixture("nar-create.json");
    let (_, out) = s.post_json("/mutate/nonadminrestores", &review).await;
    let obj = patched_object(&review, &out);
    assert_eq!(obj["spec"]["restoreSpec"]["restorePVs"], true);
    let id = obj["metadata"]["labels"]["openshift.io/oadp-nar-origin-nacuuid"]
        .as_str()
        .unwrap();
    assert!(is_nacuuid_for(id, "team-a", "restore-1"));
    let (_, out) = s
        .post_json(
            "/validate/nonadminrestores",
            &fixture("nar-create-namespace-mapping.json"),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("NonAdminRestore spec.restoreSpec.namespaceMapping is restricted"),
        "{msg}"
    );
}

#[tokio::test]
async fn wrong_resource_on_an_endpoint_is_denied_not_allowed() {
    let s = TestServer::start(Some("{}")).await;
    let (_, out) = s
        .post_json("/validate/nonadminbackups", &fixture("nar-create.json"))
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("handles NonAdminBackup") && msg.contains("NonAdminRestore"),
        "{msg}"
    );
    let (_, out) = s.post_json("/validate/policies", &fixture("nab-create.json")).await;
    assert_eq!(resp(&out)["allowed"], false);
}

#[tokio::test]
async fn policy_configmap_validation() {
    let s = TestServer::start(Some("{}")).await;
    let (_, out) = s.post_json("/validate/policies", &fixture("policy-bad.json")).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("enforceBackupSpec.snapshotVolume") && msg.contains("unknown field"),
        "{msg}"
    );
    let (_, out) = s.post_json("/validate/policies", &fixture("policy-good.json")).await;
    assert_eq!(resp(&out)["allowed"], true);
    // A broken tier is refused at apply, naming the tier's field; the shipped example with three tiers passes.
    let mut tiered = fixture("policy-good.json");
    tiered["request"]["object"]["data"]["policy.yaml"] =
        json!("backup: {maxTtl: 2160h}\ntiers:\n- {name: gold, namespaceSelector: {}, backup: {maxTtl: 1y}}\n");
    let (_, out) = s.post_json("/validate/policies", &tiered).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(msg.contains("tiers[0].backup.maxTtl"), "{msg}");
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/policies/tiers.yaml")).unwrap();
    tiered["request"]["object"]["data"]["policy.yaml"] = json!(nac::policy::policy_text_of(&example).unwrap());
    let (_, out) = s.post_json("/validate/policies", &tiered).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    // Other ConfigMaps in the namespace are not nac's business.
    let mut other = fixture("policy-bad.json");
    other["request"]["name"] = json!("something-else");
    let (_, out) = s.post_json("/validate/policies", &other).await;
    assert_eq!(resp(&out)["allowed"], true);
}

#[tokio::test]
async fn dry_run_gets_the_same_verdict() {
    let s = TestServer::start(Some("{}")).await;
    let mut review = fixture("nab-create-other-namespace.json");
    review["request"]["dryRun"] = json!(true);
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], false);
}

#[tokio::test]
async fn bad_input_gets_400_with_a_one_line_reason() {
    let s = TestServer::start(Some("{}")).await;
    let good = serde_json::to_vec(&fixture("nab-create.json")).unwrap();
    let mut no_request = fixture("nab-create.json");
    no_request.as_object_mut().unwrap().remove("request");
    let mut v1beta1 = fixture("nab-create.json");
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut wrong_kind = fixture("nab-create.json");
    wrong_kind["kind"] = json!("Pod");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "application/json",
            b"{not json".to_vec(),
            "malformed AdmissionReview JSON",
        ),
        ("application/json", b"".to_vec(), "malformed"),
        (
            "application/json",
            serde_json::to_vec(&no_request).unwrap(),
            "no request",
        ),
        ("application/json", serde_json::to_vec(&v1beta1).unwrap(), "apiVersion"),
        (
            "application/json",
            serde_json::to_vec(&wrong_kind).unwrap(),
            "kind AdmissionReview",
        ),
        ("text/plain", good.clone(), "content type"),
        ("application/json", vec![b' '; 3 * 1024 * 1024 + 1], "larger than"),
        ("application/json", b"[1,2,3]".to_vec(), "malformed"),
    ];
    for (ct, body, needle) in cases {
        let mut c = s.connect().await;
        let (status, text) = c.post("/validate/nonadminbackups", ct, body).await.unwrap();
        let text = String::from_utf8_lossy(&text).to_string();
        assert_eq!(status, 400, "{needle}: {text}");
        assert!(text.contains(needle), "{needle}: {text}");
        assert_eq!(text.trim_end().lines().count(), 1, "{text}");
    }
    // The server is still fine afterwards.
    let mut c = s.connect().await;
    let (status, _) = c
        .post("/validate/nonadminbackups", "application/json", good)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let m = s.metrics.encode();
    assert!(
        m.contains("nac_webhook_requests_total{endpoint=\"/validate/nonadminbackups\",verdict=\"BadRequest\"} 8"),
        "{m}"
    );
}

#[tokio::test]
async fn http2_and_tls12_are_served() {
    let s = TestServer::start(Some("{}")).await;
    let body = serde_json::to_vec(&fixture("nab-create.json")).unwrap();
    let mut h2 = s.connect_with(&[b"h2", b"http/1.1"], false).await;
    assert_eq!(h2.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(h2.tls_version, Some(rustls::ProtocolVersion::TLSv1_3));
    for _ in 0..3 {
        let (status, _) = h2
            .post("/mutate/nonadminbackups", "application/json", body.clone())
            .await
            .unwrap();
        assert_eq!(status, 200);
    }
    let mut t12 = s.connect_with(&[b"http/1.1"], true).await;
    assert_eq!(t12.tls_version, Some(rustls::ProtocolVersion::TLSv1_2));
    let (status, _) = t12
        .post("/mutate/nonadminbackups", "application/json", body)
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn sync_label_is_nacs_alone_and_skips_the_policy_for_nac() {
    use nac::naming::NAB_SYNCED_FROM_NACUUID_LABEL;
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let id = "team-a-nightly-0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";
    let mut review = fixture("nab-create.json");
    review["request"]["object"]["metadata"]["labels"] =
        json!({ NAB_ORIGIN_NACUUID_LABEL: id, NAB_SYNCED_FROM_NACUUID_LABEL: id });
    // A backup made under an older policy: a TTL the strict policy would refuse today.
    review["request"]["object"]["spec"]["backupSpec"]["ttl"] = json!("24h0m0s");

    // A user: refused, naming the label.
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains(NAB_SYNCED_FROM_NACUUID_LABEL) && msg.contains("backup sync"),
        "{msg}"
    );

    // nac itself (backup sync): the object passes as it was made, its identity kept, only the finalizer added.
    review["request"]["userInfo"]["username"] = json!("system:serviceaccount:nac-system:nac");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    let obj = patched_object(&review, &out);
    assert_eq!(obj["spec"], review["request"]["object"]["spec"], "no policy fill");
    assert_eq!(obj["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL], id);
    assert_eq!(obj["metadata"]["finalizers"], json!([nac::naming::NAB_FINALIZER]));
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");

    // Removing it later (or adding it) is refused for users.
    let mut update = fixture("nab-update-delete.json");
    let mut labels = update["request"]["oldObject"]["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    update["request"]["object"]["metadata"]["labels"] = labels.clone();
    labels[NAB_SYNCED_FROM_NACUUID_LABEL] = json!(id);
    update["request"]["oldObject"]["metadata"]["labels"] = labels;
    let (_, out) = s.post_json("/validate/nonadminbackups", &update).await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot be added, changed or removed"));
}

#[tokio::test]
async fn a_restores_wait_timeout_annotation_is_checked_against_the_policy() {
    let s = TestServer::start(Some("restore:\n  maxWaitTimeout: 1h\n")).await;
    let annotated = |v: &str| {
        let mut r = fixture("nar-create.json");
        r["request"]["object"]["metadata"]["annotations"] = json!({ nac::policy::WAIT_TIMEOUT_ANNOTATION: v });
        r
    };
    let (_, out) = s.post_json("/validate/nonadminrestores", &annotated("30m")).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    for (value, says) in [
        ("2h", "above the maximum wait restore.maxWaitTimeout 1h0m0s"),
        ("soon", "is not a duration"),
    ] {
        let (_, out) = s.post_json("/validate/nonadminrestores", &annotated(value)).await;
        assert_eq!(resp(&out)["allowed"], false, "{value}: {out}");
        let msg = resp(&out)["status"]["message"].as_str().unwrap();
        assert!(
            msg.contains(nac::policy::WAIT_TIMEOUT_ANNOTATION) && msg.contains(says),
            "{msg}"
        );
    }
    // An update that raises the wait above the maximum is refused too; one that leaves it alone is not.
    let mut update = annotated("3h");
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = annotated("30m")["request"]["object"].clone();
    let (_, out) = s.post_json("/validate/nonadminrestores", &update).await;
    assert_eq!(resp(&out)["allowed"], false, "{out}");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let (_, out) = s.post_json("/validate/nonadminrestores", &update).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
}

/// A preview stays a preview: its annotation cannot be removed (which would make a restore with its creator's
/// rights), added to a restore, or changed; a create with it is admitted.
#[tokio::test]
async fn a_restores_preview_annotation_cannot_be_added_changed_or_removed() {
    let s = TestServer::start(Some("{}")).await;
    let with = |v: Option<&str>| {
        let mut r = fixture("nar-create.json");
        if let Some(v) = v {
            r["request"]["object"]["metadata"]["annotations"] = json!({ nac::rights::preview::PREVIEW_ANNOTATION: v });
        }
        r
    };
    let (_, out) = s.post_json("/validate/nonadminrestores", &with(Some("true"))).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    for (old, new) in [
        (Some("true"), None),
        (None, Some("true")),
        (Some("true"), Some("false")),
    ] {
        let mut update = with(new);
        update["request"]["operation"] = json!("UPDATE");
        update["request"]["oldObject"] = with(old)["request"]["object"].clone();
        let (_, out) = s.post_json("/validate/nonadminrestores", &update).await;
        assert_eq!(resp(&out)["allowed"], false, "{old:?} -> {new:?}: {out}");
        let msg = resp(&out)["status"]["message"].as_str().unwrap();
        assert!(msg.contains("a preview stays a preview"), "{msg}");
        update["request"]["oldObject"] = update["request"]["object"].clone();
        let (_, out) = s.post_json("/validate/nonadminrestores", &update).await;
        assert_eq!(resp(&out)["allowed"], true, "unchanged: {out}");
    }
}

/// A NonAdminBackupStorageLocation review made from the NAB fixture (same request shape, other kind).
fn nabsl_review(spec: Value) -> Value {
    let mut review = fixture("nab-create.json");
    let r = &mut review["request"];
    for k in ["kind", "requestKind"] {
        r[k]["kind"] = json!("NonAdminBackupStorageLocation");
    }
    for k in ["resource", "requestResource"] {
        r[k]["resource"] = json!("nonadminbackupstoragelocations");
    }
    r["name"] = json!("own-bucket");
    r["object"] = json!({
        "apiVersion": "oadp.openshift.io/v1alpha1",
        "kind": "NonAdminBackupStorageLocation",
        "metadata": {"name": "own-bucket", "namespace": "team-a"},
        "spec": {"backupStorageLocationSpec": spec}
    });
    review
}

#[tokio::test]
async fn storage_locations_are_refused_at_apply_time_with_the_rule() {
    let good =
        json!({"provider": "aws", "objectStorage": {"bucket": "team-a"}, "credential": {"name": "s3", "key": "cloud"}});
    // Not enabled: refused, saying so.
    let s = TestServer::start(Some("{}")).await;
    let (_, out) = s
        .post_json("/validate/nonadminbackupstoragelocations", &nabsl_review(good.clone()))
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(
        resp(&out)["status"]["message"]
            .as_str()
            .unwrap()
            .contains("nonAdminBSL.enabled is false"),
        "{out}"
    );

    let s = TestServer::start(Some(
        "nonAdminBSL:\n  enabled: true\n  enforceBSLSpec: {provider: aws, config: {region: eu-west-1}}\n",
    ))
    .await;
    // Enabled: identity label and finalizer stamped, the enforced config filled with a warning, then valid.
    let review = nabsl_review(good.clone());
    let (_, out) = s.post_json("/mutate/nonadminbackupstoragelocations", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let obj = patched_object(&review, &out);
    let id = obj["metadata"]["labels"][nac::naming::NABSL_ORIGIN_NACUUID_LABEL]
        .as_str()
        .unwrap();
    assert!(is_nacuuid_for(id, "team-a", "own-bucket"), "{id}");
    assert_eq!(obj["metadata"]["finalizers"], json!([nac::naming::NABSL_FINALIZER]));
    assert_eq!(
        obj["spec"]["backupStorageLocationSpec"]["config"],
        json!({"region": "eu-west-1"})
    );
    assert!(resp(&out)["warnings"].to_string().contains("config set to"), "{out}");
    let mut validated = review.clone();
    validated["request"]["object"] = obj.clone();
    let (_, out) = s
        .post_json("/validate/nonadminbackupstoragelocations", &validated)
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");

    // Each refusal names the rule.
    for (spec, want) in [
        (
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "s3", "key": "k"}, "default": true}),
            "NonAdminBackupStorageLocation cannot be used as a default BSL",
        ),
        (
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}}),
            "NonAdminBackupStorageLocation spec.bslSpec.credential is not set",
        ),
        (
            json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "s3", "key": "k", "namespace": "team-b"}}),
            "credential names a Secret of this namespace",
        ),
        (
            json!({"provider": "gcp", "objectStorage": {"bucket": "b"}, "credential": {"name": "s3", "key": "k"}}),
            "the administrator has restricted spec.backupStorageLocationSpec.provider field to: aws",
        ),
    ] {
        let (_, out) = s
            .post_json("/validate/nonadminbackupstoragelocations", &nabsl_review(spec))
            .await;
        assert_eq!(resp(&out)["allowed"], false);
        let msg = resp(&out)["status"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{msg}");
    }

    // A spec edit after creation is refused with a message (OADP freezes it silently).
    let mut update = validated.clone();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = obj.clone();
    update["request"]["object"]["spec"]["backupStorageLocationSpec"]["objectStorage"]["bucket"] = json!("elsewhere");
    let (_, out) = s.post_json("/validate/nonadminbackupstoragelocations", &update).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("cannot be changed after creation") && msg.contains("objectStorage.bucket"),
        "{msg}"
    );
}

fn velero_review(kind: &str, resource: &str, spec: Value, status: Value, user: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "5f1b7c1e-0000-4000-8000-00000000beef",
            "kind": {"group": "velero.io", "version": "v1", "kind": kind},
            "resource": {"group": "velero.io", "version": "v1", "resource": resource},
            "namespace": "velero",
            "name": "planted",
            "operation": "CREATE",
            "userInfo": {"username": user},
            "object": {
                "apiVersion": "velero.io/v1",
                "kind": kind,
                "metadata": {"name": "planted", "namespace": "velero"},
                "spec": spec,
                "status": status
            },
            "dryRun": false
        }
    })
}

fn snapshot_content_review(backup: &str, source: Value, annotations: Value, user: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "5f1b7c1e-0000-4000-8000-00000000c0de",
            "kind": {"group": "snapshot.storage.k8s.io", "version": "v1", "kind": "VolumeSnapshotContent"},
            "resource": {"group": "snapshot.storage.k8s.io", "version": "v1", "resource": "volumesnapshotcontents"},
            "name": "vsc-1",
            "operation": "CREATE",
            "userInfo": {"username": user},
            "object": {
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "kind": "VolumeSnapshotContent",
                "metadata": {"name": "vsc-1", "labels": {"velero.io/backup-name": backup}, "annotations": annotations},
                "spec": {"driver": "d", "source": source, "deletionPolicy": "Delete",
                    "volumeSnapshotRef": {"name": "n", "namespace": "ns"}}
            },
            "dryRun": false
        }
    })
}

/// Velero deleting a backup creates a VolumeSnapshotContent for each in the tarball labelled with the backup, with
/// `deletionPolicy: Delete`: on a tenant's location only the snapshots nac recorded for the backup pass.
#[tokio::test]
async fn snapshot_contents_of_a_backup_on_a_tenant_location_are_only_those_it_made() {
    let s = TestServer::start(Some("{}")).await;
    let velero = "system:serviceaccount:velero:velero";
    let path = "/validate/volumesnapshotcontents";
    let review = |backup: &str, handle: &str| {
        snapshot_content_review(backup, json!({"snapshotHandle": handle}), json!({}), velero)
    };
    let allowed = |out: &Value| resp(out)["allowed"].as_bool().unwrap();
    let message = |out: &Value| resp(out)["status"]["message"].as_str().unwrap_or_default().to_string();
    let (status, out) = s.post_json(path, &review("on-tenant", "mine")).await;
    assert_eq!(status, 200);
    assert!(allowed(&out), "the recorded snapshot: {out}");
    let (_, out) = s.post_json(path, &review("on-tenant", "theirs")).await;
    assert!(!allowed(&out), "{out}");
    let msg = message(&out);
    assert!(
        msg.contains("VolumeSnapshotContent vsc-1 is refused")
            && msg.contains("Velero Backup on-tenant is on storage location tenant-loc of namespace team-a")
            && msg.contains("snapshot theirs of driver d is not among the 1 nac recorded"),
        "{msg}"
    );
    // The recorded handle with another driver, another deletion Secret, or a volume to snapshot.
    let mut other_driver = review("on-tenant", "mine");
    other_driver["request"]["object"]["spec"]["driver"] = json!("e");
    let secret = snapshot_content_review(
        "on-tenant",
        json!({"snapshotHandle": "mine"}),
        json!({"snapshot.storage.kubernetes.io/deletion-secret-name": "admin-creds",
            "snapshot.storage.kubernetes.io/deletion-secret-namespace": "kube-system"}),
        velero,
    );
    let volume = snapshot_content_review("on-tenant", json!({"volumeHandle": "pv-of-b"}), json!({}), velero);
    for (what, r) in [("driver", other_driver), ("secret", secret), ("volume", volume)] {
        let (_, out) = s.post_json(path, &r).await;
        assert!(!allowed(&out), "{what}: {out}");
    }
    // An admin's location, nac itself, updates: not judged.
    for r in [
        review("on-admin", "theirs"),
        snapshot_content_review(
            "on-tenant",
            json!({"snapshotHandle": "theirs"}),
            json!({}),
            "system:serviceaccount:nac-system:nac",
        ),
    ] {
        let (_, out) = s.post_json(path, &r).await;
        assert!(allowed(&out), "{out}");
    }
    let mut update = review("on-tenant", "theirs");
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let (_, out) = s.post_json(path, &update).await;
    assert!(allowed(&out), "{out}");
    // Closed when the backup or its location cannot be read or is gone (a tenant can make either go while Velero
    // works from the tarball), or its record is not nac's.
    for (backup, want) in [
        ("broken", "connection refused"),
        ("garbled", "is not nac's record"),
        ("gone", "backup gone does not exist in Velero's namespace"),
        (
            "lost-location",
            "storage location missing of backup lost-location does not exist",
        ),
    ] {
        let (_, out) = s.post_json(path, &review(backup, "mine")).await;
        assert!(!allowed(&out), "{out}");
        assert!(message(&out).contains(want), "{}", message(&out));
    }
    // Another kind sent here is a configuration error, said so.
    let mut wrong = review("on-tenant", "mine");
    wrong["request"]["kind"]["kind"] = json!("VolumeSnapshot");
    let (_, out) = s.post_json(path, &wrong).await;
    assert!(
        !allowed(&out) && message(&out).contains("check the webhook configuration"),
        "{out}"
    );
}

/// Whoever asks (nac, Velero's garbage collection, `velero backup delete`), a backup on a tenant's location is not
/// deleted through Velero while it has a VolumeSnapshotLocation: the deletion would delete the native snapshots the
/// backup's files, which the tenant writes, list.
#[tokio::test]
async fn delete_requests_of_a_backup_on_a_tenant_location_are_refused_while_velero_has_snapshot_locations() {
    let s = TestServer::start(Some("{}")).await;
    let path = "/validate/velero-deletebackuprequests";
    let review = |backup: &str, user: &str| {
        let mut r = velero_review(
            "DeleteBackupRequest",
            "deletebackuprequests",
            json!({"backupName": backup}),
            json!({}),
            user,
        );
        r["request"]["object"].as_object_mut().unwrap().remove("status");
        r
    };
    let allowed = |out: &Value| resp(out)["allowed"].as_bool().unwrap();
    for user in [
        "system:serviceaccount:velero:velero",
        "system:serviceaccount:nac-system:nac",
        "admin",
    ] {
        let (status, out) = s.post_json(path, &review("on-tenant", user)).await;
        assert_eq!(status, 200);
        assert!(!allowed(&out), "{user}: {out}");
        let msg = resp(&out)["status"]["message"].as_str().unwrap();
        assert!(
            msg.contains(
                "backup on-tenant is not deleted: it is on storage location tenant-loc (own of namespace team-a)"
            ) && msg.contains("such as ebs"),
            "{msg}"
        );
    }
    // An admin's location, a backup or location Velero will not find: Velero's to decide.
    for backup in ["on-admin", "gone", "lost-location"] {
        let (_, out) = s.post_json(path, &review(backup, "admin")).await;
        assert!(allowed(&out), "{backup}: {out}");
    }
    let (_, out) = s.post_json(path, &review("broken", "admin")).await;
    assert!(!allowed(&out), "{out}");
}

#[tokio::test]
async fn unfinished_velero_objects_on_a_tenant_location_come_only_from_nac() {
    let s = TestServer::start(Some("{}")).await;
    let velero = "system:serviceaccount:velero:velero";
    let backup = |loc: &str, phase: Value, user: &str| {
        velero_review(
            "Backup",
            "backups",
            json!({"storageLocation": loc, "includedNamespaces": ["team-b"]}),
            json!({ "phase": phase }),
            user,
        )
    };
    let allowed = |out: &Value| resp(out)["allowed"].as_bool().unwrap();
    let path = "/validate/velero-backups";
    // What backup sync of a planted file creates: phase New (or none) on the tenant's location.
    for phase in [
        json!("New"),
        json!(""),
        Value::Null,
        json!("InProgress"),
        json!("Finalizing"),
    ] {
        let (status, out) = s.post_json(path, &backup("tenant-loc", phase.clone(), velero)).await;
        assert_eq!(status, 200);
        assert!(!allowed(&out), "{phase}: {out}");
        let msg = resp(&out)["status"]["message"].as_str().unwrap();
        assert!(
            msg.contains("Velero Backup planted") && msg.contains("tenant-loc") && msg.contains("team-a/own"),
            "{msg}"
        );
        assert_eq!(
            resp(&out)["status"]["details"]["causes"][0]["field"],
            "spec.storageLocation"
        );
    }
    // A real backup synced back: finished.
    for phase in ["Completed", "PartiallyFailed", "Failed", "FailedValidation"] {
        let (_, out) = s.post_json(path, &backup("tenant-loc", json!(phase), velero)).await;
        assert!(allowed(&out), "{phase}: {out}");
    }
    // A finished one carrying nac's snapshot record (only nac writes it, after a backup ran): from the bucket.
    let mut forged = backup("tenant-loc", json!("Completed"), velero);
    forged["request"]["object"]["metadata"]["annotations"] =
        json!({"nac.oadp.openshift.io/snapshot-contents": "[{\"driver\":\"d\",\"snapshotHandle\":\"theirs\"}]"});
    let (_, out) = s.post_json(path, &forged).await;
    assert!(!allowed(&out), "{out}");
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("carries annotation nac.oadp.openshift.io/snapshot-contents"),
        "{msg}"
    );
    forged["request"]["object"]["spec"]["storageLocation"] = json!("admin-loc");
    let (_, out) = s.post_json(path, &forged).await;
    assert!(allowed(&out), "an admin's location: {out}");
    // nac's own backups; admin locations; the default location; a location that does not exist.
    let (_, out) = s
        .post_json(
            path,
            &backup("tenant-loc", json!(""), "system:serviceaccount:nac-system:nac"),
        )
        .await;
    assert!(allowed(&out), "{out}");
    for loc in ["admin-loc", "", "missing"] {
        let (_, out) = s.post_json(path, &backup(loc, json!("New"), velero)).await;
        assert!(allowed(&out), "{loc}: {out}");
    }
    // The lookup failing: closed, with the reason.
    let (_, out) = s.post_json(path, &backup("broken", json!("New"), velero)).await;
    assert!(!allowed(&out));
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("connection refused"));
    // A non-string location is refused, not guessed.
    let mut odd = backup("tenant-loc", json!("New"), velero);
    odd["request"]["object"]["spec"]["storageLocation"] = json!(["tenant-loc"]);
    let (_, out) = s.post_json(path, &odd).await;
    assert!(!allowed(&out));
    // Updates are Velero's own progress: not reviewed.
    let mut update = backup("tenant-loc", json!("New"), velero);
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let (_, out) = s.post_json(path, &update).await;
    assert!(allowed(&out));

    // Pod volume backups stored beside a backup are synced the same way.
    let pvb = |phase: &str| {
        velero_review(
            "PodVolumeBackup",
            "podvolumebackups",
            json!({"backupStorageLocation": "tenant-loc", "pod": {"namespace": "team-b", "name": "db-0"}}),
            json!({ "phase": phase }),
            velero,
        )
    };
    let (_, out) = s.post_json("/validate/velero-podvolumebackups", &pvb("New")).await;
    assert!(!allowed(&out), "{out}");
    let (_, out) = s
        .post_json("/validate/velero-podvolumebackups", &pvb("Completed"))
        .await;
    assert!(allowed(&out), "{out}");
    // The wrong kind on an endpoint is refused.
    let (_, out) = s
        .post_json("/validate/velero-podvolumebackups", &backup("x", json!("New"), velero))
        .await;
    assert!(!allowed(&out));
}

#[tokio::test]
async fn a_backup_leaves_out_what_its_requester_may_not_read_and_records_who_asked() {
    use nac::rights::{BACKUP_RIGHTS_ANNOTATION, REQUESTER_ANNOTATION};
    let as_user = |user: &str, spec: Value| {
        let mut r = fixture("nab-create.json");
        r["request"]["userInfo"] = json!({"username": user, "groups": ["system:authenticated"]});
        r["request"]["object"]["spec"]["backupSpec"] = spec;
        r
    };
    let record = |obj: &Value| -> Value {
        serde_json::from_str(
            obj["metadata"]["annotations"][BACKUP_RIGHTS_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap()
    };
    // The test access table: user "restricted" may not list secrets.
    let s = TestServer::start(Some("{}")).await;
    let review = as_user("restricted", json!({}));
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let obj = patched_object(&review, &out);
    // The mode and the requester are recorded, not the kinds: the reconciler decides those again (smaller objects).
    assert_eq!(record(&obj), json!({"mode": "exclude"}));
    let who: Value =
        serde_json::from_str(obj["metadata"]["annotations"][REQUESTER_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(
        who,
        json!({"username": "restricted", "groups": ["system:authenticated"]})
    );
    let warnings = resp(&out)["warnings"].to_string();
    assert!(
        // The Secrets hold objects in the namespace (the table says so), and the warning says it.
        warnings.contains(
            "secrets left out of the backup (1 holds objects there): restricted may not list them in namespace team-a"
        ),
        "{warnings}"
    );
    // The user's spec is left as written: the exclusion is the reconciler's to apply.
    assert!(obj["spec"]["backupSpec"].get("excludedResources").is_none());
    // Kinds the backup does not include are not asked about; a short or singular name is.
    for (spec, left_out) in [
        (json!({"includedResources": ["configmaps"]}), false),
        (json!({"includedResources": ["secret"]}), true),
        (json!({"excludedResources": ["secrets"]}), false),
    ] {
        let review = as_user("restricted", spec.clone());
        let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
        assert_eq!(
            record(&patched_object(&review, &out)),
            json!({"mode": "exclude"}),
            "{spec}"
        );
        let warned = resp(&out)["warnings"]
            .to_string()
            .contains("secrets left out of the backup");
        assert_eq!(warned, left_out, "{spec}: {out}");
    }
    // Someone who may read everything gets no warning.
    let review = as_user("alice", json!({}));
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(record(&patched_object(&review, &out)), json!({"mode": "exclude"}));
    assert!(!resp(&out)["warnings"].to_string().contains("left out"));
    // A check that cannot be made refuses (closed).
    let (_, out) = s
        .post_json("/mutate/nonadminbackups", &as_user("broken", json!({})))
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot check what broken may read now (connection refused)"));

    // rights.backup: deny refuses naming the kinds; leaving them out passes.
    assert!(matches!(
        s.policy.offer("rights: {backup: deny}", "test"),
        nac::policy::live::Offer::Applied(_)
    ));
    let (_, out) = s
        .post_json("/mutate/nonadminbackups", &as_user("restricted", json!({})))
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("resources restricted may not list in namespace team-a: secrets")
            && msg.contains("rights.backup: deny"),
        "{msg}"
    );
    let (_, out) = s
        .post_json(
            "/mutate/nonadminbackups",
            &as_user("restricted", json!({"excludedResources": ["secrets"]})),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    // off: recorded as such, nothing asked.
    assert!(matches!(
        s.policy.offer("rights: {backup: off}", "test"),
        nac::policy::live::Offer::Applied(_)
    ));
    let review = as_user("broken", json!({}));
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(record(&patched_object(&review, &out)), json!({"mode": "off"}));

    // The records are nac's: a supplied requester is replaced, and refused when it reaches validation.
    assert!(matches!(
        s.policy.offer("{}", "test"),
        nac::policy::live::Offer::Applied(_)
    ));
    let mut forged = as_user("restricted", json!({}));
    forged["request"]["object"]["metadata"]["annotations"] =
        json!({ REQUESTER_ANNOTATION: "{\"username\":\"system:admin\"}" });
    let (_, out) = s.post_json("/mutate/nonadminbackups", &forged).await;
    assert!(resp(&out)["warnings"].to_string().contains("was replaced"));
    assert!(
        patched_object(&forged, &out)["metadata"]["annotations"][REQUESTER_ANNOTATION]
            .as_str()
            .unwrap()
            .contains("restricted")
    );
    let (_, out) = s.post_json("/validate/nonadminbackups", &forged).await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(resp(&out)["status"]["message"].as_str().unwrap().contains("forged"));
    // ...and cannot be changed afterwards; removed ones are put back.
    let created = patched_object(&as_user("restricted", json!({})), &{
        let (_, out) = s
            .post_json("/mutate/nonadminbackups", &as_user("restricted", json!({})))
            .await;
        out
    });
    let mut update = as_user("restricted", json!({}));
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = created.clone();
    let mut changed = created.clone();
    changed["metadata"]["annotations"][BACKUP_RIGHTS_ANNOTATION] = json!("{\"mode\":\"off\",\"excluded\":[]}");
    update["request"]["object"] = changed;
    let (_, out) = s.post_json("/mutate/nonadminbackups", &update).await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(resp(&out)["status"]["message"]
        .as_str()
        .unwrap()
        .contains("recorded by nac and cannot be changed"));
    let mut removed = created.clone();
    removed["metadata"]["annotations"] = json!({});
    update["request"]["object"] = removed;
    let (_, out) = s.post_json("/mutate/nonadminbackups", &update).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    assert_eq!(
        patched_object(&update, &out)["metadata"]["annotations"][BACKUP_RIGHTS_ANNOTATION],
        created["metadata"]["annotations"][BACKUP_RIGHTS_ANNOTATION]
    );
}

/// A NonAdminSchedule AdmissionReview of `user` in `namespace` (`old`: an UPDATE from it).
fn nas_review(user: &str, namespace: &str, object: Value, old: Option<Value>) -> Value {
    let mut r = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7a1b7c1e-0000-4000-8000-00000000cafe",
            "kind": {"group": "oadp.openshift.io", "version": "v1alpha1", "kind": "NonAdminSchedule"},
            "resource": {"group": "oadp.openshift.io", "version": "v1alpha1", "resource": "nonadminschedules"},
            "namespace": namespace,
            "name": "nightly",
            "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object,
            "dryRun": false
        }
    });
    if let Some(o) = old {
        r["request"]["oldObject"] = o;
    }
    r
}

fn nas(schedule: &str, backup_spec: Value) -> Value {
    json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {"schedule": schedule, "template": {"backupSpec": backup_spec}}
    })
}

fn denial(out: &Value) -> (String, Vec<String>) {
    let r = resp(out);
    assert_eq!(r["allowed"], false, "{out}");
    let fields = r["status"]["details"]["causes"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| c["field"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    (r["status"]["message"].as_str().unwrap().to_string(), fields)
}

const SCHEDULE_POLICY: &str = "
enforceBackupSpec:
  ttl: 720h0m0s
schedule:
  minInterval: 1h
  maxPerNamespace: 3
  skipImmediately: true
";

#[tokio::test]
async fn a_schedule_gets_the_backup_policy_on_its_template_and_its_own_bounds() {
    use nac::naming::{NAS, NAS_FINALIZER, NAS_ORIGIN_NACUUID_LABEL};
    use nac::rights::{BACKUP_RIGHTS_ANNOTATION, REQUESTER_ANNOTATION};
    let s = TestServer::start(Some(SCHEDULE_POLICY)).await;
    s.count_usage();
    let path = "/mutate/nonadminschedules";
    let review = nas_review("alice", "team-a", nas("0 2 * * *", json!({})), None);
    let (status, out) = s.post_json(path, &review).await;
    assert_eq!(status, 200);
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let obj = patched_object(&review, &out);
    let t = &obj["spec"]["template"]["backupSpec"];
    assert_eq!(t["includedNamespaces"], json!(["team-a"]));
    assert_eq!(t["ttl"], "720h0m0s");
    assert_eq!(obj["spec"]["skipImmediately"], true, "the policy's default");
    let id = obj["metadata"]["labels"][NAS_ORIGIN_NACUUID_LABEL].as_str().unwrap();
    assert!(is_nacuuid_for(id, "team-a", "nightly"), "{id}");
    assert_eq!(obj["metadata"]["finalizers"], json!([NAS_FINALIZER]));
    assert!(obj["metadata"]["annotations"][REQUESTER_ANNOTATION]
        .as_str()
        .unwrap()
        .contains("alice"));
    assert!(obj["metadata"]["annotations"][BACKUP_RIGHTS_ANNOTATION].is_string());
    let warnings = resp(&out)["warnings"].to_string();
    assert!(
        warnings.contains("spec.template.backupSpec.ttl set to 720h0m0s by cluster policy"),
        "{warnings}"
    );
    assert!(
        warnings.contains("spec.skipImmediately set to true by cluster policy"),
        "{warnings}"
    );
    assert_eq!(NAS.kind, "NonAdminSchedule");

    // Refused at create, naming the field: another namespace, an enforced value, template labels, a bad or too
    // frequent expression, a namespace at its limit.
    for (ns, schedule, spec, field, words) in [
        (
            "team-a",
            "0 2 * * *",
            json!({"includedNamespaces": ["team-b"]}),
            "spec.template.backupSpec.includedNamespaces",
            "team-b",
        ),
        (
            "team-a",
            "0 2 * * *",
            json!({"ttl": "24h"}),
            "spec.template.backupSpec.ttl",
            "720h0m0s",
        ),
        (
            "team-a",
            "0 2 * * *",
            json!({"metadata": {"labels": {"a": "b"}}}),
            "spec.template.backupSpec.metadata",
            "identity",
        ),
        ("team-a", "0 2 * * * *", json!({}), "spec.schedule", "invalid"),
        (
            "team-a",
            "*/10 * * * *",
            json!({}),
            "spec.schedule",
            "schedule.minInterval",
        ),
        (
            "full",
            "0 2 * * *",
            json!({}),
            "metadata.namespace",
            "schedule.maxPerNamespace: 3",
        ),
    ] {
        let mut o = nas(schedule, spec);
        o["metadata"]["namespace"] = json!(ns);
        let (_, out) = s.post_json(path, &nas_review("alice", ns, o, None)).await;
        let (msg, fields) = denial(&out);
        assert!(fields.contains(&field.to_string()), "{field}: {fields:?} {msg}");
        assert!(msg.contains(words), "{words}: {msg}");
    }

    // Without counts (no cluster), a schedule the quota limits cannot be judged: refused, saying why.
    let bare = TestServer::start(Some(SCHEDULE_POLICY)).await;
    let (_, out) = bare
        .post_json(path, &nas_review("alice", "team-a", nas("0 2 * * *", json!({})), None))
        .await;
    let (msg, fields) = denial(&out);
    assert_eq!(fields, ["metadata.namespace"]);
    assert!(msg.contains("nac runs without a connection to the cluster"), "{msg}");

    // Updates: a pause passes even when the policy now refuses the expression, and keeps the requester; any other
    // edit (an unpause, the expression, the template) is checked again like a new schedule and recorded as its
    // editor's, with the editor's rights; an unpause gets the policy's skip.
    let created = obj.clone();
    let mut paused = created.clone();
    paused["spec"]["paused"] = json!(true);
    paused["spec"]["skipImmediately"] = Value::Null;
    let (_, out) = s
        .post_json(
            path,
            &nas_review("alice", "team-a", paused.clone(), Some(created.clone())),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    s.policy.offer("schedule: {minInterval: 48h}", "test");
    let review = nas_review("bob", "team-a", paused.clone(), Some(created.clone()));
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "a pause is never refused: {out}");
    assert_eq!(
        patched_object(&review, &out)["metadata"]["annotations"][REQUESTER_ANNOTATION],
        created["metadata"]["annotations"][REQUESTER_ANNOTATION],
        "a pause keeps the requester"
    );
    let mut unpaused = paused.clone();
    unpaused["spec"]["paused"] = json!(false);
    let (_, out) = s
        .post_json(
            path,
            &nas_review("alice", "team-a", unpaused.clone(), Some(paused.clone())),
        )
        .await;
    assert!(
        denial(&out).1.contains(&"spec.schedule".to_string()),
        "an unpause is checked as a new schedule: {out}"
    );
    s.policy.offer(SCHEDULE_POLICY, "test");
    // Unpaused by a user who may not list Secrets: the runs are theirs, without Secrets.
    let review = nas_review("restricted", "team-a", unpaused.clone(), Some(paused.clone()));
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let obj = patched_object(&review, &out);
    let annotations = &obj["metadata"]["annotations"];
    assert!(
        annotations[REQUESTER_ANNOTATION]
            .as_str()
            .unwrap()
            .contains("\"restricted\""),
        "{obj}"
    );
    assert!(annotations[nac::rights::BACKUP_RIGHTS_ANNOTATION].is_string(), "{obj}");
    let (_, out) = s
        .post_json(
            "/validate/nonadminschedules",
            &nas_review("restricted", "team-a", obj, Some(paused.clone())),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], true, "the mutated edit validates: {out}");
    let (_, out) = s
        .post_json(
            path,
            &nas_review("alice", "team-a", unpaused.clone(), Some(paused.clone())),
        )
        .await;
    assert_eq!(
        patched_object(&nas_review("alice", "team-a", unpaused.clone(), None), &out)["spec"]["skipImmediately"],
        true
    );
    let mut edited = paused.clone();
    edited["spec"]["template"]["backupSpec"]["includedNamespaces"] = json!(["team-b"]);
    let (_, out) = s
        .post_json(path, &nas_review("bob", "team-a", edited.clone(), Some(paused.clone())))
        .await;
    assert!(denial(&out)
        .1
        .contains(&"spec.template.backupSpec.includedNamespaces".to_string()));
    let mut edited = paused.clone();
    edited["spec"]["template"]["backupSpec"]["excludedResources"] = json!(["secrets"]);
    let review = nas_review("bob", "team-a", edited.clone(), Some(paused.clone()));
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let obj = patched_object(&review, &out);
    assert!(obj["metadata"]["annotations"][REQUESTER_ANNOTATION]
        .as_str()
        .unwrap()
        .contains("bob"));
    // A changed expression under a minimum interval never runs at once (edit after edit would run backups more
    // often than the policy allows), whatever the edit says; an unchanged one is left as it is.
    let mut retimed = paused.clone();
    retimed["spec"]["schedule"] = json!("0 3 * * *");
    retimed["spec"]["skipImmediately"] = json!(false);
    let review = nas_review("alice", "team-a", retimed.clone(), Some(paused.clone()));
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    assert_eq!(patched_object(&review, &out)["spec"]["skipImmediately"], true, "{out}");
    assert!(
        resp(&out)["warnings"].to_string().contains("schedule.minInterval"),
        "{out}"
    );
    let mut same = paused.clone();
    same["spec"]["skipImmediately"] = json!(false);
    let review = nas_review("alice", "team-a", same, Some(paused.clone()));
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(patched_object(&review, &out)["spec"]["skipImmediately"], false, "{out}");

    // nac's records are not the user's to change otherwise.
    let mut forged = paused.clone();
    forged["metadata"]["annotations"][REQUESTER_ANNOTATION] = json!("{\"username\":\"admin\"}");
    let (_, out) = s
        .post_json(
            "/validate/nonadminschedules",
            &nas_review("alice", "team-a", forged, Some(paused.clone())),
        )
        .await;
    assert!(denial(&out)
        .1
        .contains(&format!("metadata.annotations[{REQUESTER_ANNOTATION}]")));
    // Nor with a pause, which records no one: the user's own name or a rights record of theirs is refused there.
    let mut forged = created.clone();
    forged["spec"]["paused"] = json!(true);
    forged["metadata"]["annotations"][REQUESTER_ANNOTATION] =
        json!("{\"username\":\"bob\",\"groups\":[\"system:authenticated\"]}");
    forged["metadata"]["annotations"][nac::rights::BACKUP_RIGHTS_ANNOTATION] = json!("{\"mode\":\"off\"}");
    let (_, out) = s
        .post_json(
            "/validate/nonadminschedules",
            &nas_review("bob", "team-a", forged, Some(created.clone())),
        )
        .await;
    let fields = denial(&out).1;
    assert!(
        fields.contains(&format!("metadata.annotations[{REQUESTER_ANNOTATION}]"))
            && fields.contains(&format!(
                "metadata.annotations[{}]",
                nac::rights::BACKUP_RIGHTS_ANNOTATION
            )),
        "{out}"
    );
}

#[tokio::test]
async fn a_run_of_a_tenant_s_schedule_passes_the_guard_only_as_its_schedule_makes_it() {
    use nac::naming::NAS;
    let s = TestServer::start(Some("{}")).await;
    let velero = "system:serviceaccount:velero:velero";
    let run = |spec: Value, origin_ns: &str| {
        let mut r = velero_review("Backup", "backups", spec, json!({"phase": "New"}), velero);
        let name = format!("{VELERO_SCHEDULE}-20261125020000");
        let meta = NAS.stamp(
            &name,
            "velero",
            VELERO_SCHEDULE,
            origin_ns,
            "nightly",
            &[("velero.io/schedule-name", VELERO_SCHEDULE)],
        );
        r["request"]["object"]["metadata"] = serde_json::to_value(meta).unwrap();
        r
    };
    let allowed = |out: &Value| resp(out)["allowed"].as_bool().unwrap();
    let path = "/validate/velero-backups";
    let own = json!({"includedNamespaces": ["team-a"], "storageLocation": "tenant-loc"});
    let (_, out) = s.post_json(path, &run(own.clone(), "team-a")).await;
    assert!(allowed(&out), "{out}");
    // Not the template (another namespace), another origin, or a schedule that does not exist: refused.
    let (_, out) = s
        .post_json(
            path,
            &run(
                json!({"includedNamespaces": ["team-b"], "storageLocation": "tenant-loc"}),
                "team-a",
            ),
        )
        .await;
    assert!(!allowed(&out), "{out}");
    let (_, out) = s.post_json(path, &run(own.clone(), "team-b")).await;
    assert!(!allowed(&out), "{out}");
    let mut other = run(own, "team-a");
    other["request"]["object"]["metadata"]["labels"]["velero.io/schedule-name"] = json!("someone-else");
    let (_, out) = s.post_json(path, &other).await;
    assert!(!allowed(&out), "{out}");
}

/// A NonAdminBackup as OADP's CLI (a Go client on OADP's and Velero's types) sends it, in a review.
fn go_client_review(operation: &str, object: Value, old: Option<Value>) -> Value {
    let all: Value = serde_json::from_str(include_str!("fixtures/go-clients.json")).unwrap();
    let mut review = fixture("nab-create.json");
    let mut object = if object.is_null() {
        all["oadpCliBackupCreate"].clone()
    } else {
        object
    };
    object["metadata"]["name"] = json!("nightly");
    review["request"]["object"] = object;
    review["request"]["operation"] = json!(operation);
    if let Some(old) = old {
        review["request"]["oldObject"] = old;
    }
    review
}

#[tokio::test]
async fn go_clients_zero_values_are_fields_left_out_on_create_and_on_update() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    // `kubectl oadp nonadmin backup create nightly`: ttl, csiSnapshotTimeout, itemOperationTimeout at "0s".
    let review = go_client_review("CREATE", Value::Null, None);
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let stored = patched_object(&review, &out);
    let mut left_out = review.clone();
    left_out["request"]["object"]["spec"]["backupSpec"] =
        json!({"includedNamespaces": ["team-a"], "includedResources": ["*"]});
    let (_, out_left_out) = s.post_json("/mutate/nonadminbackups", &left_out).await;
    assert_eq!(
        stored["spec"]["backupSpec"],
        patched_object(&left_out, &out_left_out)["spec"]["backupSpec"]
    );
    assert_eq!(resp(&out)["warnings"], resp(&out_left_out)["warnings"]);
    assert_eq!(stored["spec"]["backupSpec"]["ttl"], "720h0m0s");

    // `kubectl oadp nonadmin backup delete nightly`: a GET, then an UPDATE of the whole object as Go reads it
    // back (unset fields at their zero values again) with deleteBackup set.
    let mut sent = stored.clone();
    let spec = sent["spec"]["backupSpec"].as_object_mut().unwrap();
    for (k, v) in [
        ("metadata", json!({})),
        ("hooks", json!({})),
        ("csiSnapshotTimeout", json!("0s")),
        ("itemOperationTimeout", json!("0s")),
    ] {
        spec.insert(k.into(), v);
    }
    sent["spec"]["deleteBackup"] = json!(true);
    let review = go_client_review("UPDATE", sent, Some(stored.clone()));
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let updated = patched_object(&review, &out);
    assert_eq!(updated["spec"]["backupSpec"], stored["spec"]["backupSpec"]);
    assert_eq!(updated["spec"]["deleteBackup"], true);

    // A real change in the same update is still refused.
    let mut changed = review.clone();
    changed["request"]["object"]["spec"]["backupSpec"]["ttl"] = json!("1h0m0s");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &changed).await;
    assert_eq!(resp(&out)["allowed"], false, "{out}");
    assert!(
        resp(&out)["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.backupSpec.ttl"),
        "{out}"
    );
}

/// OADP's API admits an object without `spec` (its controller reports it BackingOff); so does nac, with a warning,
/// and untouched (no identity, no finalizer: nothing is made for it). Once it gets a spec it is checked as a new
/// object is; a spec cannot be taken away.
#[tokio::test]
async fn an_object_without_spec_is_admitted_as_oadp_admits_it_and_checked_once_it_gets_one() {
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    for (kind, resource) in [
        ("NonAdminBackup", "nonadminbackups"),
        ("NonAdminRestore", "nonadminrestores"),
        ("NonAdminBackupStorageLocation", "nonadminbackupstoragelocations"),
        ("NonAdminSchedule", "nonadminschedules"),
        ("NonAdminDownloadRequest", "nonadmindownloadrequests"),
    ] {
        let bare = json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": kind,
                          "metadata": {"name": "bare", "namespace": "team-a"}});
        let mut review = nas_review("alice", "team-a", bare.clone(), None);
        review["request"]["kind"]["kind"] = json!(kind);
        review["request"]["resource"]["resource"] = json!(resource);
        for op in ["mutate", "validate"] {
            let (status, out) = s.post_json(&format!("/{op}/{resource}"), &review).await;
            assert_eq!(status, 200);
            assert_eq!(resp(&out)["allowed"], true, "{kind} {op}: {out}");
            assert!(resp(&out).get("patch").is_none(), "{kind} {op}: nothing added: {out}");
            let warnings = resp(&out)["warnings"].to_string();
            assert!(warnings.contains("has no spec"), "{kind} {op}: {out}");
        }
    }
    // nac's own writes to it (its finalizer) pass; so does any update that leaves it without a spec.
    let bare = json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
                      "metadata": {"name": "bare", "namespace": "team-a"}});
    let mut finalized = bare.clone();
    finalized["metadata"]["finalizers"] = json!([nac::naming::NAB_FINALIZER]);
    let mut review = nas_review("nac", "team-a", finalized, Some(bare.clone()));
    review["request"]["kind"]["kind"] = json!("NonAdminBackup");
    review["request"]["resource"]["resource"] = json!("nonadminbackups");
    for op in ["mutate", "validate"] {
        let (_, out) = s.post_json(&format!("/{op}/nonadminbackups"), &review).await;
        assert_eq!(resp(&out)["allowed"], true, "{op}: {out}");
    }
    // A NonAdminBackup that gets its spec: the policy applies as on a create (here a field the policy refuses).
    let mut with_spec = bare.clone();
    with_spec["spec"] = json!({"backupSpec": {"includedNamespaces": ["team-b"]}});
    let mut review = nas_review("alice", "team-a", with_spec.clone(), Some(bare.clone()));
    review["request"]["kind"]["kind"] = json!("NonAdminBackup");
    review["request"]["resource"]["resource"] = json!("nonadminbackups");
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    let (message, _) = denial(&out);
    assert!(message.contains("includedNamespaces"), "{message}");
    with_spec["spec"] = json!({"backupSpec": {}});
    review["request"]["object"] = with_spec.clone();
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let patched = patched_object(&review, &out);
    assert_eq!(
        patched["spec"]["backupSpec"]["ttl"], "720h0m0s",
        "filled in as on a create"
    );
    assert_eq!(patched["metadata"]["finalizers"], json!([nac::naming::NAB_FINALIZER]));
    // Taking the spec away is refused.
    let mut review = nas_review("alice", "team-a", bare, Some(with_spec));
    review["request"]["kind"]["kind"] = json!("NonAdminBackup");
    review["request"]["resource"]["resource"] = json!("nonadminbackups");
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    let (message, _) = denial(&out);
    assert!(message.contains("spec.backupSpec is required"), "{message}");
}

/// A NABSL review by `user` (the fixture's request, another user).
fn nabsl_review_by(user: &str, spec: Value) -> Value {
    let mut r = nabsl_review(spec);
    r["request"]["userInfo"] = json!({"username": user, "groups": ["system:authenticated"]});
    r
}

fn message(out: &Value) -> String {
    resp(out)["status"]["message"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_storage_location_naming_a_secret_its_requester_may_not_read_is_refused_naming_the_right() {
    use nac::rights::REQUESTER_ANNOTATION;
    let s = TestServer::start(Some("nonAdminBSL: {enabled: true}\n")).await;
    let spec =
        json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "app-key", "key": "cloud"}});
    // `restricted` may not get Secrets in team-a (tests/common): refused at apply, by both endpoints.
    for path in [
        "/mutate/nonadminbackupstoragelocations",
        "/validate/nonadminbackupstoragelocations",
    ] {
        let (_, out) = s.post_json(path, &nabsl_review_by("restricted", spec.clone())).await;
        assert_eq!(resp(&out)["allowed"], false, "{path}: {out}");
        assert_eq!(
            message(&out),
            "NonAdminBackupStorageLocation refused: restricted may not get Secret \"app-key\" in namespace team-a, \
             which spec.backupStorageLocationSpec.credential.name names: nac hands Velero a location's credential \
             only when its requester may read it (policy rights.locations: deny)",
            "{path}"
        );
        assert_eq!(
            resp(&out)["status"]["details"]["causes"][0]["field"],
            "spec.backupStorageLocationSpec.credential.name"
        );
    }
    // alice may: admitted, and her record stamped (a forged one replaced).
    let mut review = nabsl_review(spec.clone());
    review["request"]["object"]["metadata"]["annotations"] =
        json!({ REQUESTER_ANNOTATION: "{\"username\":\"restricted\"}" });
    let (_, out) = s.post_json("/mutate/nonadminbackupstoragelocations", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let obj = patched_object(&review, &out);
    let stamped: Value =
        serde_json::from_str(obj["metadata"]["annotations"][REQUESTER_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(stamped["username"], "alice");
    assert!(
        resp(&out)["warnings"].to_string().contains("is assigned by nac"),
        "{out}"
    );
    // The record cannot be changed afterwards.
    let mut update = review.clone();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = obj.clone();
    update["request"]["object"] = obj.clone();
    update["request"]["object"]["metadata"]["annotations"][REQUESTER_ANNOTATION] = json!("{\"username\":\"bob\"}");
    let (_, out) = s.post_json("/validate/nonadminbackupstoragelocations", &update).await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(
        message(&out).contains("is recorded by nac and cannot be changed"),
        "{out}"
    );
    // rights.locations: off: not asked.
    let off = TestServer::start(Some("nonAdminBSL: {enabled: true}\nrights: {locations: 'off'}\n")).await;
    let (_, out) = off
        .post_json(
            "/mutate/nonadminbackupstoragelocations",
            &nabsl_review_by("restricted", spec.clone()),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
}

#[tokio::test]
async fn a_credential_with_anything_but_static_keys_is_refused_at_apply_naming_the_key() {
    // tests/common's Secrets: `process` holds a credential_process line, `static-keys` static keys only.
    let spec = |secret: &str, provider: &str| {
        json!({"provider": provider, "objectStorage": {"bucket": "b"}, "credential": {"name": secret, "key": "cloud"},
               "config": {"s3Url": "https://s3.example.com"}})
    };
    let s = TestServer::start(Some("nonAdminBSL: {enabled: true}\n")).await;
    let (_, out) = s
        .post_json(
            "/validate/nonadminbackupstoragelocations",
            &nabsl_review(spec("process", "aws")),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], false, "{out}");
    assert!(
        message(&out).contains(
            "NonAdminBackupStorageLocation credential Secret \"process\" key \"cloud\" is refused: key \
             \"credential_process\" (line 2, profile [default]) is not a static key"
        ),
        "{}",
        message(&out)
    );
    for ok in ["static-keys", "not-yet-created"] {
        let (_, out) = s
            .post_json(
                "/validate/nonadminbackupstoragelocations",
                &nabsl_review(spec(ok, "aws")),
            )
            .await;
        assert_eq!(resp(&out)["allowed"], true, "{ok}: {out}");
    }
    // A Secret nac cannot read now: refused, saying to retry.
    let (_, out) = s
        .post_json(
            "/validate/nonadminbackupstoragelocations",
            &nabsl_review(spec("unreadable", "aws")),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], false, "{out}");
    assert!(message(&out).contains("nac cannot read Secret \"unreadable\""), "{out}");
    // A requester who may not read the Secret hears nothing of what it holds.
    let (_, out) = s
        .post_json(
            "/validate/nonadminbackupstoragelocations",
            &nabsl_review_by("restricted", spec("process", "aws")),
        )
        .await;
    assert!(message(&out).contains("restricted may not get Secret"), "{out}");
    assert!(!message(&out).contains("credential_process"), "{out}");
    // Only the provider whose credential nac can read.
    let (_, out) = s
        .post_json(
            "/validate/nonadminbackupstoragelocations",
            &nabsl_review(spec("static-keys", "azure")),
        )
        .await;
    assert!(
        message(&out)
            .contains("provider \"azure\" is refused: nac can check the credential and settings of provider aws only"),
        "{out}"
    );
}

#[tokio::test]
async fn storage_location_endpoints_are_judged_at_apply_by_address_and_allow_list() {
    let spec = |config: Value| {
        json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "s3", "key": "cloud"},
               "config": config})
    };
    // No allow-list: link-local, loopback and the cluster's networks (tests/common: 10.96.0.0/12, 10.244.0.0/16)
    // refused, by address or by what a name resolves to; a public name passes.
    let s = TestServer::start(Some("nonAdminBSL: {enabled: true}\n")).await;
    for (config, want) in [
        (
            json!({"s3Url": "http://169.254.169.254"}),
            "config.s3Url \"http://169.254.169.254\" is refused: 169.254.169.254 is a cloud metadata service",
        ),
        (
            json!({"s3Url": "http://metadata.internal/latest"}),
            "host metadata.internal resolves to 169.254.169.254: 169.254.169.254 is a cloud metadata service",
        ),
        // Metadata services outside link-local, whatever the networks (known here: no private range stands in).
        (
            json!({"s3Url": "http://168.63.129.16"}),
            "168.63.129.16 is a cloud platform service (Azure WireServer): tenants' endpoints may not reach it",
        ),
        (
            json!({"s3Url": "http://[fd00:ec2::254]"}),
            "fd00:ec2::254 is a cloud metadata service (AWS, IPv6)",
        ),
        (
            json!({"s3Url": "http://100.100.100.200"}),
            "100.100.100.200 is a cloud metadata service (Alibaba Cloud)",
        ),
        // Config keys the AWS plugin reads as Velero's own files or Secrets, or that are no storage setting.
        (
            json!({"s3Url": "https://s3.example.com", "customerKeyEncryptionSecret": "velero/cloud"}),
            "config.customerKeyEncryptionSecret is refused: it names a Secret in Velero's namespace",
        ),
        (
            json!({"s3Url": "https://s3.example.com", "credentialsFile": "/credentials/cloud"}),
            "config.credentialsFile is refused: it names a file in Velero's container",
        ),
        (
            json!({"s3Url": "https://s3.example.com", "kmsKeyId": "k"}),
            "config.kmsKeyId is refused: a tenant's location may set region, s3Url",
        ),
        (
            json!({"s3Url": "http://127.0.0.1:9000"}),
            "127.0.0.1 is in 127.0.0.0/8, loopback",
        ),
        (
            json!({"publicUrl": "http://10.96.0.10"}),
            "10.96.0.10 is in 10.96.0.0/12",
        ),
        (
            json!({"s3Url": "http://nowhere.invalid"}),
            "host nowhere.invalid cannot be resolved",
        ),
        (
            json!({"s3Url": "https://s3.example.com", "insecureSkipTLSVerify": "true"}),
            "TLS verification may not be turned off",
        ),
    ] {
        for path in [
            "/mutate/nonadminbackupstoragelocations",
            "/validate/nonadminbackupstoragelocations",
        ] {
            let (_, out) = s.post_json(path, &nabsl_review(spec(config.clone()))).await;
            assert_eq!(resp(&out)["allowed"], false, "{path} {config}: {out}");
            assert!(message(&out).contains(want), "{path} {config}: {}", message(&out));
        }
    }
    let (_, out) = s
        .post_json(
            "/mutate/nonadminbackupstoragelocations",
            &nabsl_review(spec(json!({"s3Url": "https://s3.example.com"}))),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");

    // An allow-list: only what it names.
    let s = TestServer::start(Some(
        "nonAdminBSL:\n  enabled: true\n  allowedEndpoints: {hosts: [127.0.0.1], cidrs: [203.0.113.0/24]}\n",
    ))
    .await;
    for ok in ["http://127.0.0.1:9000", "https://s3.example.com"] {
        let (_, out) = s
            .post_json(
                "/mutate/nonadminbackupstoragelocations",
                &nabsl_review(spec(json!({"s3Url": ok}))),
            )
            .await;
        assert_eq!(resp(&out)["allowed"], true, "{ok}: {out}");
    }
    let (_, out) = s
        .post_json(
            "/mutate/nonadminbackupstoragelocations",
            &nabsl_review(spec(json!({"s3Url": "http://metadata.internal"}))),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], false);
    assert!(
        message(&out).contains(
            "host metadata.internal resolves to 169.254.169.254, which is not allowed (policy \
             nonAdminBSL.allowedEndpoints allows hosts [127.0.0.1] and cidrs [203.0.113.0/24])"
        ),
        "{}",
        message(&out)
    );
    // The admin may open a config key; never one that hands the tenant Velero's own Secrets or files.
    let s = TestServer::start(Some("nonAdminBSL:\n  enabled: true\n  allowedConfigKeys: [kmsKeyId]\n")).await;
    let (_, out) = s
        .post_json(
            "/mutate/nonadminbackupstoragelocations",
            &nabsl_review(spec(json!({"s3Url": "https://s3.example.com", "kmsKeyId": "k"}))),
        )
        .await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    assert!(
        nac::policy::Policy::parse("nonAdminBSL: {allowedConfigKeys: [customerKeyEncryptionSecret]}")
            .unwrap_err()
            .to_string()
            .contains("cannot be opened to tenants"),
    );

    // A broken allow-list never loads: the policy webhook refuses it, naming the entry.
    assert!(
        nac::policy::Policy::parse("nonAdminBSL: {allowedEndpoints: {cidrs: [10.0.0.0/40]}}")
            .unwrap_err()
            .to_string()
            .contains("nonAdminBSL.allowedEndpoints.cidrs[0]")
    );
}

/// A NonAdminDownloadRequest review of `object` by `user` in team-a (UPDATE when `old` is given).
fn nadr_review(user: &str, object: Value, old: Option<Value>) -> Value {
    let mut r = nas_review(user, "team-a", object, old);
    r["request"]["kind"]["kind"] = json!("NonAdminDownloadRequest");
    r["request"]["resource"]["resource"] = json!("nonadmindownloadrequests");
    r["request"]["name"] = json!("dl");
    r
}

fn nadr(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": "dl", "namespace": "team-a"},
        "spec": {"target": {"kind": kind, "name": name}}
    })
}

/// Download requests get their requester stamped, and are refused when the requester may not list what the file
/// exposes ("restricted" lists no Secrets; the backup holds every kind). nac's record cannot be forged or changed.
#[tokio::test]
async fn a_download_request_is_stamped_and_refused_beyond_its_requesters_rights() {
    use nac::rights::REQUESTER_ANNOTATION;
    let s = TestServer::start(Some(STRICT_POLICY)).await;
    let path = "/mutate/nonadmindownloadrequests";
    let (_, out) = s
        .post_json(
            path,
            &nadr_review("restricted", nadr("BackupContents", "nightly"), None),
        )
        .await;
    let (message, fields) = denial(&out);
    assert_eq!(fields, ["spec.target"], "{out}");
    assert!(
        message.contains(
            "NonAdminDownloadRequest refused: BackupContents of NonAdminBackup nightly exposes objects restricted \
             may not read in namespace team-a: they may not list secrets"
        ),
        "{out}"
    );
    // Who may list every kind gets it: the requester stamped, no identity label, no finalizer (uid identity).
    let review = nadr_review("alice", nadr("BackupContents", "nightly"), None);
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let stamped = patched_object(&review, &out);
    let who: Value = serde_json::from_str(
        stamped["metadata"]["annotations"][REQUESTER_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(who["username"], "alice");
    assert!(stamped["metadata"].get("labels").is_none(), "{stamped}");
    assert!(stamped["metadata"].get("finalizers").is_none(), "{stamped}");
    // A file not made yet: admitted, the reconciler checks once it exists. One that cannot be read: refused.
    let review = nadr_review("restricted", nadr("BackupContents", "unfinished"), None);
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    let (_, out) = s
        .post_json(path, &nadr_review("restricted", nadr("BackupLog", "broken"), None))
        .await;
    assert!(
        resp(&out)["status"]["message"].as_str().unwrap().contains(
            "nac cannot check whether restricted may read BackupLog of broken now (connection refused); retry"
        ),
        "{out}"
    );
    // A requester the user names is replaced by the user who asks.
    let mut forged = nadr("BackupContents", "unfinished");
    forged["metadata"]["annotations"] = json!({REQUESTER_ANNOTATION: "{\"username\":\"alice\"}"});
    let review = nadr_review("restricted", forged, None);
    let (_, out) = s.post_json(path, &review).await;
    let who = patched_object(&review, &out)["metadata"]["annotations"][REQUESTER_ANNOTATION].clone();
    assert!(who.as_str().unwrap().contains("\"restricted\""), "{out}");
    assert!(resp(&out)["warnings"].to_string().contains("was replaced"), "{out}");
    // Once stamped, not the user's to change or remove.
    let mut old = nadr("BackupContents", "nightly");
    old["metadata"]["annotations"] = json!({REQUESTER_ANNOTATION: "{\"username\":\"alice\"}"});
    let mut changed = old.clone();
    changed["metadata"]["annotations"][REQUESTER_ANNOTATION] = json!("{\"username\":\"root\"}");
    let (_, out) = s
        .post_json(path, &nadr_review("alice", changed, Some(old.clone())))
        .await;
    assert_eq!(
        denial(&out).1,
        [format!("metadata.annotations[{REQUESTER_ANNOTATION}]")],
        "{out}"
    );
    // nac's own identity passes unstamped (the reconciler then refuses a request without a requester).
    let review = nadr_review(
        "system:serviceaccount:nac-system:nac",
        nadr("BackupContents", "nightly"),
        None,
    );
    let (_, out) = s.post_json(path, &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    assert!(resp(&out).get("patch").is_none(), "{out}");
}

/// Two namespaces in different tiers get different enforced values through the real handler; a namespace whose
/// labels nac does not know yet is refused with a retry, not judged under a guessed tier; a relabel applies to
/// the next request.
#[tokio::test]
async fn tiers_select_the_policy_by_the_namespaces_labels() {
    let policy = format!(
        "{STRICT_POLICY}tiers:\n- name: gold\n  namespaceSelector:\n    matchLabels: {{nac.example.com/tier: gold}}\n  \
         enforceBackupSpec: {{ttl: 2160h0m0s}}\n  backup: {{maxTtl: 4320h}}\n"
    );
    let s = TestServer::start(Some(&policy)).await;
    let namespaces = std::sync::Arc::new(nac::policy::live::NamespaceLabels::default());
    s.policy.follow_namespaces(namespaces.clone());
    let gold = || Some([("nac.example.com/tier".to_string(), "gold".to_string())].into());
    let review_in = |ns: &str| {
        let mut r = fixture("nab-create.json");
        r["request"]["namespace"] = json!(ns);
        r["request"]["object"]["metadata"]["namespace"] = json!(ns);
        r
    };
    let warnings = |out: &Value| -> Vec<String> {
        resp(out)["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };

    // Labels not known yet: refused, saying to retry.
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review_in("team-a")).await;
    assert_eq!(resp(&out)["allowed"], false, "{out}");
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("does not know the labels of namespace team-a yet"),
        "{msg}"
    );

    namespaces.set("team-a", gold());
    namespaces.set("team-b", Some(Default::default()));
    let review = review_in("team-a");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    assert_eq!(patched_object(&review, &out)["spec"]["backupSpec"]["ttl"], "2160h0m0s");
    assert!(
        warnings(&out).contains(&"spec.backupSpec.ttl set to 2160h0m0s by cluster policy tier \"gold\"".into()),
        "{out}"
    );
    // The tier's other parts are the base's: defaultVolumesToFsBackup is not enforced any more (replaced whole).
    assert!(patched_object(&review, &out)["spec"]["backupSpec"]["defaultVolumesToFsBackup"].is_null());

    let review = review_in("team-b");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(patched_object(&review, &out)["spec"]["backupSpec"]["ttl"], "720h0m0s");
    assert!(warnings(&out).contains(&"spec.backupSpec.ttl set to 720h0m0s by cluster policy".into()));

    // A refusal names the tier.
    let mut review = review_in("team-a");
    review["request"]["object"]["spec"]["backupSpec"]["ttl"] = json!("720h");
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], false);
    let msg = resp(&out)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("field value to 2160h0m0s (requested 720h) (cluster policy tier \"gold\")"),
        "{msg}"
    );

    // Relabelled: the next request is judged under the base.
    namespaces.set("team-a", Some(Default::default()));
    let review = review_in("team-a");
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(patched_object(&review, &out)["spec"]["backupSpec"]["ttl"], "720h0m0s");
}

/// Each quota refuses a create at apply, naming the quota, the namespace's use and the limit, counted from nac's
/// caches; what is under the limit passes.
#[tokio::test]
async fn quotas_refuse_at_apply_naming_use_and_limit() {
    let s = TestServer::start(Some(
        "quotas: {maxBackups: 2, maxRestoresPerHour: 1, maxStoredBytes: 1Gi}\n\
         tiers:\n- name: big\n  namespaceSelector: {matchLabels: {size: big}}\n  quotas: {maxBackups: 3}\n",
    ))
    .await;
    let usage = s.count_usage();
    let namespaces = std::sync::Arc::new(nac::policy::live::NamespaceLabels::default());
    namespaces.set("team-a", Some(Default::default()));
    s.policy.follow_namespaces(namespaces.clone());
    let nab = |name: &str, bytes: i64| -> nac::api::NonAdminBackup {
        serde_json::from_value(json!({
            "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
            "metadata": {"name": name, "namespace": "team-a", "uid": name, "creationTimestamp": "2026-11-29T10:00:00Z"},
            "spec": {"backupSpec": {}},
            "status": {"veleroBackup": {"name": name, "status": {"phase": "Completed"}},
                       "volumeDataProgress": {"bytesDone": bytes, "totalBytes": bytes}}
        }))
        .unwrap()
    };
    let validate = |path: &'static str, fixture_name: &'static str| {
        let s = &s;
        async move { s.post_json(path, &fixture(fixture_name)).await.1 }
    };
    usage.put_backup(&nab("one", 1000));
    let out = validate("/validate/nonadminbackups", "nab-create.json").await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");

    usage.put_backup(&nab("two", 1000));
    let (msg, fields) = denial(&validate("/validate/nonadminbackups", "nab-create.json").await);
    assert_eq!(fields, ["metadata.namespace"]);
    assert_eq!(
        msg,
        "NonAdminBackup refused: namespace team-a has 2 NonAdminBackups holding a backup, the most cluster policy \
         allows (quotas.maxBackups: 2); delete one first (or wait for one to expire)"
    );
    // A tier has its own limit, named with the tier.
    namespaces.set("team-a", Some([("size".to_string(), "big".to_string())].into()));
    let out = validate("/validate/nonadminbackups", "nab-create.json").await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    usage.put_backup(&nab("three", 1000));
    let (msg, _) = denial(&validate("/validate/nonadminbackups", "nab-create.json").await);
    assert!(
        msg.contains("the most cluster policy tier \"big\" allows (quotas.maxBackups: 3)"),
        "{msg}"
    );

    // Stored bytes: the base again, one backup that took the namespace over the limit.
    namespaces.set("team-a", Some(Default::default()));
    for name in ["one", "two"] {
        let mut deleting = nab(name, 1000);
        deleting.spec.delete_backup = true;
        usage.put_backup(&deleting);
    }
    usage.put_backup(&nab("three", 2 << 30));
    let (msg, _) = denial(&validate("/validate/nonadminbackups", "nab-create.json").await);
    assert!(
        msg.contains(
            "the backups of namespace team-a hold 2.0 GiB (2147483648 bytes), at or over the limit of 1.0 GiB"
        ),
        "{msg}"
    );

    // Restores an hour: one made now (and deleted since) uses the hour's one.
    let out = validate("/validate/nonadminrestores", "nar-create.json").await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    usage.put_restore(&kube::core::ObjectMeta {
        name: Some("r".into()),
        namespace: Some("team-a".into()),
        uid: Some("r".into()),
        creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::now(),
        )),
        deletion_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::now(),
        )),
        ..Default::default()
    });
    let (msg, _) = denial(&validate("/validate/nonadminrestores", "nar-create.json").await);
    assert!(msg.contains("made 1 NonAdminRestores in the last hour"), "{msg}");
    assert!(msg.contains("(quotas.maxRestoresPerHour: 1)"), "{msg}");
}

/// `kubectl nac status` asks with a dry-run create carrying the probe annotation: answered with the namespace's
/// tier and quota use as one warning, without judging (a dry run stores nothing); the same object not a dry run
/// is judged as any other.
#[tokio::test]
async fn a_dry_run_status_probe_is_answered_with_the_namespaces_tier_and_quotas() {
    let s = TestServer::start(Some(
        "quotas: {maxBackups: 1}\ntiers:\n- name: gold\n  namespaceSelector: {matchLabels: {t: gold}}\n  \
         quotas: {maxBackups: 3}\n",
    ))
    .await;
    let namespaces = std::sync::Arc::new(nac::policy::live::NamespaceLabels::default());
    namespaces.set("team-a", Some([("t".to_string(), "gold".to_string())].into()));
    s.policy.follow_namespaces(namespaces);
    s.count_usage();
    let mut review = fixture("nab-create.json");
    review["request"]["dryRun"] = json!(true);
    review["request"]["object"]["metadata"]["annotations"] = json!({nac::policy::STATUS_PROBE_ANNOTATION: "true"});
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    assert!(resp(&out)["patch"].is_null(), "{out}");
    let warning = resp(&out)["warnings"][0].as_str().unwrap();
    let answer: Value = serde_json::from_str(warning.strip_prefix("nac-status: ").unwrap()).unwrap();
    assert_eq!(answer["tier"], "gold");
    assert_eq!(
        answer["quotas"][0],
        json!({"quota": "quotas.maxBackups", "use": 0, "limit": 3})
    );
    let (_, out) = s.post_json("/validate/nonadminbackups", &review).await;
    assert_eq!(resp(&out)["allowed"], true, "{out}");
    // Not a dry run: judged as any create (the mutating webhook fills and stamps it), no status answer.
    review["request"]["dryRun"] = json!(false);
    let (_, out) = s.post_json("/mutate/nonadminbackups", &review).await;
    assert!(resp(&out)["patch"].is_string(), "{out}");
    assert!(!resp(&out)["warnings"].to_string().contains("nac-status"), "{out}");
}
