//! A tenant's own storage location acts only within its requester's rights, with the real Velero and S3 server
//! (`make cluster-up`, VELERO_MODE=real): the Secret it names is handed to Velero only when the user who made it
//! may read that Secret, and its endpoints are only those the policy allows. Each attempt is made by a user with
//! an ordinary role; nac's signed-URL fetch refusing a redirect is a unit test of the fetcher (`src/download.rs`).
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::velero::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use nac::api::NonAdminBackupStorageLocation;
use nac::naming::NABSL_ORIGIN_NAMESPACE_ANNOTATION;
use nac::rights::REQUESTER_ANNOTATION;
use nac::velero::BackupStorageLocation;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::OnceCell;

/// Locations approved on creation (no admin step to wait for); the local S3 server on loopback allowed by name.
const POLICY: &str = "
enforceBackupSpec:
  storageLocation: default
nonAdminBSL:
  enabled: true
  requireApproval: false
  allowedEndpoints: {hosts: [127.0.0.1]}
";

static NAC: OnceCell<Env> = OnceCell::const_new();

async fn env() -> &'static Env {
    NAC.get_or_init(|| async {
        use_velero(VeleroMode::Real);
        Env::start(POLICY, NacOptions::default()).await
    })
    .await
}

/// A fresh namespace with the application's S3 credential `app-s3`, made by the admin; (namespace, admin).
async fn namespace(prefix: &str) -> (String, Client) {
    env().await;
    let c = Cluster::load();
    let admin = c.admin().await;
    let ns = unique_ns(prefix);
    ensure_namespace(&admin, &ns).await;
    tenant_secret(&admin, &ns, "app-s3", None).await;
    (ns, admin)
}

/// `user` in `ns` with nac's editor role and Kubernetes' ClusterRole `role` (none: nac's editor role alone).
async fn user_with(admin: &Client, ns: &str, user: &str, role: Option<&str>) -> Client {
    install().editor_role(admin).await;
    bind_editor(admin, ns, user).await;
    if let Some(r) = role {
        bind(admin, ns, user, r).await;
    }
    Cluster::load().as_user(user).await
}

fn location(name: &str, secret: &str, s3_url: &str) -> Value {
    let mut l = serde_json::to_value(nabsl(name, &format!("rl-{name}"), "", secret)).unwrap();
    l["spec"]["backupStorageLocationSpec"]["config"]["s3Url"] = json!(s3_url);
    l
}

fn local_s3() -> String {
    format!("http://127.0.0.1:{}", Cluster::load().get("S3_PORT"))
}

fn path(ns: &str) -> String {
    format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackupstoragelocations")
}

/// What nac made for namespace `ns` in Velero's namespace: Secret copies and Velero BSLs, by name.
async fn made_for(admin: &Client, ns: &str) -> (Vec<String>, Vec<String>) {
    fn of_ns<K: kube::Resource>(items: Vec<K>, ns: &str) -> Vec<String> {
        items
            .into_iter()
            .filter(|o| {
                o.meta()
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.get(NABSL_ORIGIN_NAMESPACE_ANNOTATION).map(String::as_str) == Some(ns))
            })
            .filter_map(|o| o.meta().name.clone())
            .collect()
    }
    let lp = ListParams::default();
    let secrets = Api::<Secret>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .list(&lp)
        .await
        .unwrap();
    let bsls = Api::<BackupStorageLocation>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .list(&lp)
        .await
        .unwrap();
    (of_ns(secrets.items, ns), of_ns(bsls.items, ns))
}

/// Waits for the location's Accepted=False with `reason`; returns its message.
async fn refused(api: &Api<NonAdminBackupStorageLocation>, name: &str, reason: &str) -> String {
    let n = wait_json(api, name, T, reason, |n| {
        condition_of(n, "Accepted") == ("False".to_string(), reason.to_string())
    })
    .await;
    n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Accepted")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_user_who_may_not_read_the_secret_is_refused_at_apply_and_one_who_may_is_not() {
    let (ns, admin) = namespace("rl-apply").await;
    // Kubernetes' `view` reads no Secret.
    let viewer_name = format!("viewer-{ns}");
    let viewer = user_with(&admin, &ns, &viewer_name, Some("view")).await;
    let (code, body, _) = create_raw(&viewer, &path(&ns), &location("theirs", "app-s3", &local_s3())).await;
    assert_eq!(code, 403, "{body}");
    let msg = body["message"].as_str().unwrap();
    assert!(
        msg.ends_with(&format!(
            "denied the request: NonAdminBackupStorageLocation refused: {viewer_name} may not get Secret \"app-s3\" \
             in namespace {ns}, which spec.backupStorageLocationSpec.credential.name names: nac hands Velero a \
             location's credential only when its requester may read it (policy rights.locations: deny)"
        )),
        "{msg}"
    );
    // A custom Role reading one Secret by name: that one is theirs to use, the application's is not.
    let custom_name = format!("custom-{ns}");
    let custom = user_with(&admin, &ns, &custom_name, None).await;
    tenant_secret(&admin, &ns, "mine", None).await;
    apply_yaml(
        &admin,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: read-mine, namespace: {ns}}}\n\
             rules: [{{apiGroups: [''], resources: [secrets], resourceNames: [mine], verbs: [get]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: read-mine, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-mine}}\n\
             subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {custom_name}}}]\n"
        ),
    )
    .await;
    let (code, body, _) = create_raw(&custom, &path(&ns), &location("app", "app-s3", &local_s3())).await;
    assert_eq!(code, 403, "{body}");
    let (code, body, _) = create_raw(&custom, &path(&ns), &location("mine", "mine", &local_s3())).await;
    assert_eq!(code, 201, "{body}");
    // The namespace's `edit` user reads Secrets: no false refusal, the location is Available.
    let editor = user_with(&admin, &ns, &format!("editor-{ns}"), Some("edit")).await;
    create_bucket("rl-own");
    let (code, body, _) = create_raw(&editor, &path(&ns), &location("own", "app-s3", &local_s3())).await;
    assert_eq!(code, 201, "{body}");
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(editor.clone(), &ns);
    wait_json(&nabsls, "own", T, "Available", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    let (secrets, bsls) = made_for(&admin, &ns).await;
    assert_eq!((secrets.len(), bsls.len()), (2, 2), "{secrets:?} {bsls:?}");
    // nac's record of who made it: the editor, not to be changed by them.
    let own = nabsls.get("own").await.unwrap();
    let who: Value = serde_json::from_str(&own.metadata.annotations.unwrap()[REQUESTER_ANNOTATION]).unwrap();
    assert_eq!(who["username"], format!("editor-{ns}"));
    let forged = nabsls
        .patch(
            "own",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REQUESTER_ANNOTATION: "{\"username\":\"x\"}"}}})),
        )
        .await;
    assert!(
        matches!(forged, Err(kube::Error::Api(e)) if e.code == 403),
        "the record is nac's"
    );
    for name in ["own", "mine"] {
        nabsls.delete(name, &DeleteParams::default()).await.unwrap();
        wait_gone(&nabsls, name, T, "location deleted").await;
    }
}

#[tokio::test]
async fn without_a_requesters_record_or_with_a_forged_one_the_reconciler_refuses_and_copies_nothing() {
    let (ns, admin) = namespace("rl-bypass").await;
    let viewer_name = format!("viewer-{ns}");
    user_with(&admin, &ns, &viewer_name, Some("view")).await;
    // nac's own identity passes the webhook unstamped (as backup sync does): the same as a bypassed webhook.
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(admin.clone(), &ns);
    let unrecorded: NonAdminBackupStorageLocation =
        serde_json::from_value(location("unrecorded", "app-s3", &local_s3())).unwrap();
    nabsls.create(&PostParams::default(), &unrecorded).await.unwrap();
    let mut forged: NonAdminBackupStorageLocation =
        serde_json::from_value(location("forged", "app-s3", &local_s3())).unwrap();
    forged.metadata.annotations = Some(
        [(
            REQUESTER_ANNOTATION.to_string(),
            json!({"username": viewer_name}).to_string(),
        )]
        .into(),
    );
    nabsls.create(&PostParams::default(), &forged).await.unwrap();
    let msg = refused(&nabsls, "unrecorded", "RequesterRightsExceeded").await;
    assert!(msg.contains("has no record of who created it"), "{msg}");
    let msg = refused(&nabsls, "forged", "RequesterRightsExceeded").await;
    assert!(
        msg.contains(&format!(
            "{viewer_name} may not get Secret \"app-s3\" in namespace {ns}"
        )),
        "{msg}"
    );
    // Nothing in Velero's namespace, now or a moment later; the refusal is an Event too.
    for _ in 0..2 {
        assert_eq!(made_for(&admin, &ns).await, (vec![], vec![]));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(admin.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RequesterRightsExceeded") && e.type_.as_deref() == Some("Warning")),
        "no event"
    );
    for name in ["unrecorded", "forged"] {
        nabsls.delete(name, &DeleteParams::default()).await.unwrap();
        wait_gone(&nabsls, name, T, "location deleted").await;
    }
}

#[tokio::test]
async fn a_revoked_right_removes_the_copy_and_the_velero_location() {
    let (ns, admin) = namespace("rl-revoke").await;
    let name = format!("editor-{ns}");
    let editor = user_with(&admin, &ns, &name, Some("edit")).await;
    create_bucket("rl-kept");
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(editor.clone(), &ns);
    let l: NonAdminBackupStorageLocation = serde_json::from_value(location("kept", "app-s3", &local_s3())).unwrap();
    nabsls.create(&PostParams::default(), &l).await.unwrap();
    wait_json(&nabsls, "kept", T, "Available", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    assert_eq!(made_for(&admin, &ns).await.0.len(), 1);
    // The editor loses `edit` (and with it the Secret); the next reconcile (here: a label the admin adds) refuses
    // the location and removes what was made from its earlier state.
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), &ns)
        .delete(&format!("{name}-edit"), &DeleteParams::default())
        .await
        .unwrap();
    let admins: Api<NonAdminBackupStorageLocation> = Api::namespaced(admin.clone(), &ns);
    let msg = eventually(T, "refused after the right went", || {
        let admins = admins.clone();
        async move {
            // Touched until nac's answer about the right (kept at most 10 s) is asked again.
            let _ = admins
                .patch(
                    "kept",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": {"touched": uuid::Uuid::new_v4().simple().to_string()}}}),
                    ),
                )
                .await;
            let n = serde_json::to_value(admins.get("kept").await.ok()?).ok()?;
            let (status, reason) = condition_of(&n, "Accepted");
            (status == "False" && reason == "RequesterRightsExceeded").then_some(n)
        }
    })
    .await;
    let text = msg.to_string();
    assert!(text.contains(&format!("{name} may not get Secret")), "{text}");
    eventually(T, "the copy and the Velero BSL removed", || {
        let admin = admin.clone();
        let ns = ns.clone();
        async move { (made_for(&admin, &ns).await == (vec![], vec![])).then_some(()) }
    })
    .await;
    admins.delete("kept", &DeleteParams::default()).await.unwrap();
    wait_gone(&admins, "kept", T, "location deleted").await;
}

#[tokio::test]
async fn endpoints_off_the_allow_list_are_refused_at_apply() {
    let (ns, admin) = namespace("rl-endpoints").await;
    let editor = user_with(&admin, &ns, &format!("editor-{ns}"), Some("edit")).await;
    let port = Cluster::load().get("S3_PORT").to_string();
    for (url, says) in [
        (
            "http://169.254.169.254/latest".to_string(),
            "host 169.254.169.254 is not allowed (policy nonAdminBSL.allowedEndpoints allows hosts [127.0.0.1] and \
             cidrs [])",
        ),
        (format!("http://127.0.0.2:{port}"), "host 127.0.0.2 is not allowed"),
        (format!("http://localhost:{port}"), "host localhost is not allowed"),
        (format!("http://[::1]:{port}"), "host ::1 is not allowed"),
        (
            format!("http://kubernetes.default.svc:{port}"),
            "host kubernetes.default.svc is not allowed",
        ),
    ] {
        let mut l = location("elsewhere", "app-s3", &local_s3());
        l["spec"]["backupStorageLocationSpec"]["config"]["publicUrl"] = json!(url);
        let (code, body, _) = create_raw(&editor, &path(&ns), &l).await;
        assert_eq!(code, 403, "{url}: {body}");
        let msg = body["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!(
                "spec.backupStorageLocationSpec.config.publicUrl {url:?} is refused: {says}"
            )),
            "{url}: {msg}"
        );
    }
    // TLS verification off is the administrator's to allow.
    let mut l = location("insecure", "app-s3", &local_s3());
    l["spec"]["backupStorageLocationSpec"]["config"]["insecureSkipTLSVerify"] = json!("true");
    let (code, body, _) = create_raw(&editor, &path(&ns), &l).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("nonAdminBSL.allowInsecureSkipTLSVerify is false"),
        "{body}"
    );
    // Config keys with which Velero's AWS plugin reads something of Velero's own for the tenant's location.
    for (key, value, says) in [
        (
            "customerKeyEncryptionSecret",
            "cloud-credentials/cloud",
            "it names a Secret in Velero's namespace whose key Velero sends with every request",
        ),
        (
            "credentialsFile",
            "/credentials/cloud",
            "it names a file in Velero's container",
        ),
        (
            "enableSharedConfig",
            "true",
            "it makes the SDK read Velero's own AWS config",
        ),
    ] {
        let mut l = location("keys", "app-s3", &local_s3());
        l["spec"]["backupStorageLocationSpec"]["config"][key] = json!(value);
        let (code, body, _) = create_raw(&editor, &path(&ns), &l).await;
        assert_eq!(code, 403, "{key}: {body}");
        let msg = body["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!(
                "spec.backupStorageLocationSpec.config.{key} is refused: {says}"
            )),
            "{key}: {msg}"
        );
    }
    assert_eq!(made_for(&admin, &ns).await, (vec![], vec![]));
}

/// The credential Velero reads as an AWS config file: a `credential_process` line would run a command as Velero
/// (here: on this machine, where Velero runs as a process), an `endpoint_url` line would move the endpoint past
/// the allow-list. Refused at apply naming the key; changed after the location works, the reconciler refuses it
/// before the copy changes and removes what used the earlier value, and the command never runs.
#[tokio::test]
async fn a_credential_that_would_run_a_command_or_move_the_endpoint_never_reaches_velero() {
    let (ns, admin) = namespace("rl-credential").await;
    let editor = user_with(&admin, &ns, &format!("editor-{ns}"), Some("edit")).await;
    let marker = std::env::temp_dir().join(format!("nac-credential-process-{ns}"));
    let _ = std::fs::remove_file(&marker);
    let c = Cluster::load();
    let keys = format!(
        "aws_access_key_id = {}\naws_secret_access_key = {}\n",
        c.get("S3_ACCESS_KEY"),
        c.get("S3_SECRET_KEY")
    );
    let process = format!(
        "[default]\ncredential_process = /bin/sh -c 'touch {}'\n",
        marker.display()
    );
    let endpoint = format!("[default]\n{keys}endpoint_url = http://127.0.0.2:9\n");
    let secrets: Api<Secret> = Api::namespaced(editor.clone(), &ns);
    for (name, file, says) in [
        (
            "process",
            &process,
            "key \"credential_process\" (line 2, profile [default]) is not a static key",
        ),
        (
            "endpoint",
            &endpoint,
            "key \"endpoint_url\" (line 4, profile [default]) is not a static key",
        ),
    ] {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": name}, "type": "Opaque", "stringData": {"cloud": file}
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
        let (code, body, _) = create_raw(&editor, &path(&ns), &location(name, name, &local_s3())).await;
        assert_eq!(code, 403, "{name}: {body}");
        let msg = body["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!(
                "NonAdminBackupStorageLocation credential Secret \"{name}\" key \"cloud\" is refused: {says}"
            )),
            "{msg}"
        );
    }
    // A working location, checked by Velero every few seconds; then its Secret gains the command.
    create_bucket("rl-cred");
    let mut l = location("own", "app-s3", &local_s3());
    l["spec"]["backupStorageLocationSpec"]["validationFrequency"] = json!("5s");
    let (code, body, _) = create_raw(&editor, &path(&ns), &l).await;
    assert_eq!(code, 201, "{body}");
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(editor.clone(), &ns);
    wait_json(&nabsls, "own", T, "Available", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    let (copies, _) = made_for(&admin, &ns).await;
    assert_eq!(copies.len(), 1);
    // What Velero reads is the file nac wrote: the static keys alone, not the tenant's bytes.
    let copy = Api::<Secret>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .get(&copies[0])
        .await
        .unwrap();
    let copied = String::from_utf8(copy.data.unwrap()["cloud"].0.clone()).unwrap();
    assert_eq!(
        copied,
        format!(
            "[default]\naws_access_key_id={}\naws_secret_access_key={}\n",
            c.get("S3_ACCESS_KEY"),
            c.get("S3_SECRET_KEY")
        )
    );
    secrets
        .patch(
            "app-s3",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"cloud": process}})),
        )
        .await
        .unwrap();
    let n = wait_json(&nabsls, "own", T, "SecretSynced=False", |n| {
        condition_of(n, "SecretSynced").0 == "False"
    })
    .await;
    let text = n.to_string();
    assert!(text.contains("credential_process"), "{text}");
    eventually(T, "the copy and the Velero BSL removed", || {
        let admin = admin.clone();
        let ns = ns.clone();
        async move { (made_for(&admin, &ns).await == (vec![], vec![])).then_some(()) }
    })
    .await;
    // Three of Velero's validation periods later, nothing has run.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(!marker.exists(), "Velero ran the tenant's credential_process");
    nabsls.delete("own", &DeleteParams::default()).await.unwrap();
    wait_gone(&nabsls, "own", T, "location deleted").await;
}
