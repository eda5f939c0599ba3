//! Attempts, with the real Velero and S3 server, to make Velero act beyond the requester's own rights (exec hooks,
//! volume data, status written through a restore, existing objects overwritten, a tarball changed between nac's
//! check and Velero's read, a restore resource list crafted to have nac delete the admin's objects, a tarball in a
//! tenant's own bucket naming a new privileged namespace and a DataUpload, a tarball in a tenant's own bucket naming
//! another snapshot for Velero to delete, a file of a backup downloaded by a user who may not read what it holds, a
//! schedule unpaused by a user with fewer rights, a ServiceAccount Velero would merge into an existing one, Roles and
//! RoleBindings from a tenant's own location, a copy into a namespace the user may not restore into or a tarball
//! naming a third namespace for a copy), each by a user with an
//! ordinary role, asserting that none succeeds and that a user who holds the right keeps the feature. The rules
//! are `crate::rights::features`.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::faults::Part;
use common::velero::*;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminRestore};
use nac::velero::Restore;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

/// The suite's policy: no field of these features enforced, so users may ask for each.
const POLICY: &str = "
enforceBackupSpec:
  ttl: 72h0m0s
  storageLocation: default
backup:
  maxTtl: 2160h
nonAdminBSL:
  enabled: true
  requireApproval: true
  allowedEndpoints: {hosts: [127.0.0.1]}
restore:
  allowNamespaceCopies: true
rights:
  backup: exclude
  restore: exclude
downloads:
  adminLocations: [default]
";

static NAC: OnceCell<Env> = OnceCell::const_new();
/// Held by the tests that stop a shared part (Velero, nac) for a moment, so that they never overlap.
static STOPS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn env() -> &'static Env {
    NAC.get_or_init(|| async {
        use_velero(VeleroMode::Real);
        Env::start(POLICY, NacOptions::default()).await
    })
    .await
}

/// A fresh namespace and a user in it holding nac's editor role and Kubernetes' `role` (`view`, `edit`, `admin`, or
/// none: ""): (namespace, user name, user client, admin client).
async fn tenant_with(prefix: &str, role: &str) -> (String, String, Client, Client) {
    env().await;
    let c = Cluster::load();
    let admin = c.admin().await;
    let ns = unique_ns(prefix);
    ensure_namespace(&admin, &ns).await;
    let user = format!("{role}-{ns}");
    install().editor_role(&admin).await;
    bind_editor(&admin, &ns, &user).await;
    if !role.is_empty() {
        bind(&admin, &ns, &user, role).await;
    }
    let client = c.as_user(&user).await;
    if !role.is_empty() {
        may_soon(&admin, &ns, &user, "list", "", "configmaps").await;
        nac_may_read_soon(&client, &ns, "configmaps").await;
    }
    (ns.clone(), user.clone(), client, admin)
}

/// Waits until nac too sees that `client`'s user may list `resource` in `ns`. nac answers rights from its own watch
/// of the RBAC objects (`rights.authorizers: rbac`), which can trail the API server's authorizer (what `may_soon`
/// waits for) on a loaded machine; a backup created before would leave the kind out, or be refused for naming it.
/// A dry-run NonAdminBackup naming only that kind is admitted once nac sees the right (a dry run stores nothing).
async fn nac_may_read_soon(client: &Client, ns: &str, resource: &str) {
    let body = serde_json::to_value(nab("rights-probe", json!({"includedResources": [resource]}))).unwrap();
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups?dryRun=All");
    eventually(
        std::time::Duration::from_secs(60),
        &format!("nac sees that the user may list {resource} in {ns}"),
        || async { (create_raw(client, &path, &body).await.0 == 201).then_some(()) },
    )
    .await;
}

/// A Role `name` in `ns` granting `verbs` on `resource` (of the core group), bound to `user`.
async fn role(admin: &Client, ns: &str, name: &str, resource: &str, verbs: &str, user: &str) {
    apply_yaml(
        admin,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: {ns}}}
rules: [{{apiGroups: [""], resources: [{resource}], verbs: [{verbs}]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]
"#
        ),
    )
    .await;
}

/// Creates a NonAdminBackup as `client`, returning the API server's warnings.
async fn create_nab(client: &Client, ns: &str, name: &str, spec: Value) -> Vec<String> {
    let body = serde_json::to_value(nab(name, spec)).unwrap();
    let (status, resp, warnings) = create_raw(
        client,
        &format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups"),
        &body,
    )
    .await;
    assert_eq!(status, 201, "NAB {name} not created: {resp:#}");
    warnings
}

async fn create_nar(client: &Client, ns: &str, name: &str, spec: Value) -> Vec<String> {
    create_nar_full(client, ns, name, spec).await.0
}

/// [`create_nar`], also returning the object as created.
async fn create_nar_full(client: &Client, ns: &str, name: &str, spec: Value) -> (Vec<String>, Value) {
    let body = json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
        "metadata": {"name": name}, "spec": {"restoreSpec": spec}
    });
    let (status, resp, warnings) = create_raw(
        client,
        &format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminrestores"),
        &body,
    )
    .await;
    assert_eq!(status, 201, "NAR {name} not created: {resp:#}");
    (warnings, resp)
}

fn any_contains(warnings: &[String], what: &[&str]) -> bool {
    warnings.iter().any(|w| what.iter().all(|p| w.contains(p)))
}

/// The Velero Restore a NonAdminRestore was given.
async fn velero_restore_of(admin: &Client, nars: &Api<NonAdminRestore>, name: &str) -> Restore {
    let n = wait_json(nars, name, T, "Velero Restore named", |n| {
        n["status"]["veleroRestore"]["name"].is_string()
    })
    .await;
    let vr = n["status"]["veleroRestore"]["name"].as_str().unwrap().to_string();
    let api: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    api.get(&vr).await.unwrap()
}

fn exec_hook() -> Value {
    json!({"resources": [{"name": "dump", "labelSelector": {"matchLabels": {"app": "none"}},
        "pre": [{"exec": {"container": "web", "command": ["sh", "-c", "cat /etc/secret"]}}]}]})
}

#[tokio::test]
async fn a_viewers_exec_hooks_and_volume_data_never_reach_velero_and_an_admin_keeps_them() {
    let (ns, viewer, client, admin) = tenant_with("att-hooks", "view").await;
    workload(&admin, &ns).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), &ns);
    // `view` reads pods but may not exec into them, nor create a pod that mounts a claim.
    let warnings = create_nab(
        &client,
        &ns,
        "hooked",
        json!({"hooks": exec_hook(), "defaultVolumesToFsBackup": true, "snapshotVolumes": true}),
    )
    .await;
    assert!(
        any_contains(
            &warnings,
            &["spec.backupSpec.hooks", &format!("{viewer} may not create pods/exec")]
        ),
        "{warnings:?}"
    );
    assert!(any_contains(&warnings, &["pods, in which Velero runs"]), "{warnings:?}");
    assert!(
        any_contains(&warnings, &["volume data", "create pods or create pods/exec"]),
        "{warnings:?}"
    );
    let n = completed(&nabs, "hooked").await;
    let spec = &n["status"]["veleroBackup"]["spec"];
    assert!(spec["hooks"].is_null(), "the exec hook reached Velero: {spec:#}");
    assert!(
        spec["excludedResources"].as_array().unwrap().contains(&json!("pods")),
        "pods, whose hook annotations Velero runs, were backed up: {spec:#}"
    );
    assert_eq!(spec["snapshotVolumes"], json!(false), "{spec:#}");
    assert_eq!(spec["defaultVolumesToFsBackup"], json!(false), "{spec:#}");
    let files = resource_list(n["status"]["veleroBackup"]["name"].as_str().unwrap());
    assert!(listed(&files, "v1/Pod", &ns).is_empty(), "{files:?}");
    assert!(!listed(&files, "v1/ConfigMap", &ns).is_empty(), "{files:?}");

    // The namespace's admin may exec into its pods: the same request keeps its hooks and volumes.
    let owner = format!("owner-{ns}");
    bind_editor(&admin, &ns, &owner).await;
    bind(&admin, &ns, &owner, "admin").await;
    let owner_client = Cluster::load().as_user(&owner).await;
    let warnings = create_nab(
        &owner_client,
        &ns,
        "owner-hooked",
        json!({"hooks": exec_hook(), "defaultVolumesToFsBackup": true}),
    )
    .await;
    assert!(!any_contains(&warnings, &["pods/exec"]), "{warnings:?}");
    // Velero takes the hooks and completes the backup (no pod runs here for a hook to run in: the node suite shows
    // an owner's hook running, tests/e2e_node.rs `ba_`).
    let owner_nabs: Api<NonAdminBackup> = Api::namespaced(owner_client, &ns);
    let n = completed(&owner_nabs, "owner-hooked").await;
    let spec = &n["status"]["veleroBackup"]["spec"];
    assert_eq!(spec["hooks"]["resources"][0]["name"], "dump", "{spec:#}");
    assert_eq!(spec["defaultVolumesToFsBackup"], json!(true), "{spec:#}");
    assert!(
        !spec["excludedResources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|k| k == "pods"),
        "{spec:#}"
    );
}

/// A LoadBalancer Service whose status the admin set (what a cloud controller would), annotated for Velero to
/// restore its status whatever a restore's spec says.
async fn load_balancer(admin: &Client, ns: &str, ip: &str) {
    apply_yaml(
        admin,
        &format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: lb, namespace: {ns}, annotations: {{velero.io/restore-status: "true"}}}}
spec: {{type: LoadBalancer, selector: {{app: shop}}, ports: [{{port: 80}}]}}
"#
        ),
    )
    .await;
    let services: Api<Service> = Api::namespaced(admin.clone(), ns);
    services
        .patch_status(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .unwrap();
}

fn ingress(s: &Service) -> Option<String> {
    s.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

#[tokio::test]
async fn a_restore_writes_status_only_for_a_user_who_may_write_it() {
    let (ns, editor, client, admin) = tenant_with("att-status", "edit").await;
    load_balancer(&admin, &ns, "203.0.113.7").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), &ns);
    create_nab(&client, &ns, "lb", json!({"includedResources": ["services"]})).await;
    completed(&nabs, "lb").await;
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    services.delete("lb", &DeleteParams::default()).await.unwrap();
    wait_gone(&services, "lb", T, "service deleted").await;

    // `edit` may create Services but not write their status: neither the spec's restoreStatus nor Velero's
    // annotation on the item writes it.
    let warnings = create_nar(
        &client,
        &ns,
        "as-editor",
        json!({"backupName": "lb", "restoreStatus": {"includedResources": ["services"]}}),
    )
    .await;
    assert!(
        any_contains(
            &warnings,
            &[
                "spec.restoreSpec.restoreStatus",
                &format!("{editor} may not update services/status")
            ]
        ),
        "{warnings:?}"
    );
    let nars: Api<NonAdminRestore> = Api::namespaced(client.clone(), &ns);
    assert_eq!(restore_finished(&nars, "as-editor").await, "Completed");
    let vr = velero_restore_of(&admin, &nars, "as-editor").await;
    assert!(vr.spec.restore_status.is_none(), "{:?}", vr.spec);
    let guard = vr.spec.resource_modifier.as_ref().expect("nac's status guard");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let doc = cms.get(&guard.name).await.unwrap().data.unwrap_or_default();
    assert!(doc.values().any(|d| d.contains("velero.io/restore-status")), "{doc:?}");
    let restored = services.get("lb").await.unwrap();
    assert_eq!(ingress(&restored), None, "the restore wrote the Service's status");

    // A user who may write Services' status restores it (no false refusal).
    services.delete("lb", &DeleteParams::default()).await.unwrap();
    wait_gone(&services, "lb", T, "service deleted").await;
    let writer = format!("status-{ns}");
    role(
        &admin,
        &ns,
        "service-status",
        "services/status",
        "update, patch",
        &writer,
    )
    .await;
    bind(&admin, &ns, &writer, "edit").await;
    bind_editor(&admin, &ns, &writer).await;
    let writer_client = Cluster::load().as_user(&writer).await;
    let warnings = create_nar(
        &writer_client,
        &ns,
        "as-writer",
        json!({"backupName": "lb", "restoreStatus": {"includedResources": ["services"]}}),
    )
    .await;
    assert!(!any_contains(&warnings, &["restoreStatus"]), "{warnings:?}");
    let writer_nars: Api<NonAdminRestore> = Api::namespaced(writer_client, &ns);
    assert_eq!(restore_finished(&writer_nars, "as-writer").await, "Completed");
    let restored = services.get("lb").await.unwrap();
    assert_eq!(ingress(&restored).as_deref(), Some("203.0.113.7"));
}

#[tokio::test]
async fn existing_objects_are_overwritten_only_for_a_user_who_may_update_them() {
    let (ns, _, admin_client, admin) = tenant_with("att-update", "admin").await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let cm = |v: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "limits"}, "data": {"quota": v}})).unwrap()
    };
    cms.create(&PostParams::default(), &cm("10")).await.unwrap();
    let nabs: Api<NonAdminBackup> = Api::namespaced(admin_client.clone(), &ns);
    create_nab(
        &admin_client,
        &ns,
        "limits",
        json!({"includedResources": ["configmaps"]}),
    )
    .await;
    completed(&nabs, "limits").await;
    // The admin of the cluster changes the value afterwards.
    cms.replace("limits", &PostParams::default(), &cm("2")).await.unwrap();

    // A user who may create ConfigMaps but not update them.
    let creator = format!("creator-{ns}");
    role(
        &admin,
        &ns,
        "create-configmaps",
        "configmaps",
        "create, get, list",
        &creator,
    )
    .await;
    bind_editor(&admin, &ns, &creator).await;
    let creator_client = Cluster::load().as_user(&creator).await;
    let spec = json!({"backupName": "limits", "existingResourcePolicy": "update", "includedResources": ["configmaps"]});
    let warnings = create_nar(&creator_client, &ns, "as-creator", spec.clone()).await;
    assert!(
        any_contains(
            &warnings,
            &["existingResourcePolicy", "update configmaps", "patch configmaps"]
        ),
        "{warnings:?}"
    );
    let nars: Api<NonAdminRestore> = Api::namespaced(creator_client, &ns);
    assert_eq!(restore_finished(&nars, "as-creator").await, "Completed");
    let vr = velero_restore_of(&admin, &nars, "as-creator").await;
    assert_eq!(vr.spec.existing_resource_policy.as_deref(), Some("none"));
    let n = serde_json::to_value(nars.get("as-creator").await.unwrap()).unwrap();
    assert!(
        left_out(&n).contains("spec.restoreSpec.existingResourcePolicy"),
        "{n:#}"
    );
    assert_eq!(
        cms.get("limits").await.unwrap().data.unwrap()["quota"],
        "2",
        "the restore overwrote it"
    );

    // The namespace's admin may update ConfigMaps: the backup's value comes back.
    let warnings = create_nar(&admin_client, &ns, "as-admin", spec).await;
    assert!(!any_contains(&warnings, &["existingResourcePolicy"]), "{warnings:?}");
    let nars: Api<NonAdminRestore> = Api::namespaced(admin_client, &ns);
    assert_eq!(restore_finished(&nars, "as-admin").await, "Completed");
    assert_eq!(cms.get("limits").await.unwrap().data.unwrap()["quota"], "10");
}

/// Velero merges a restored ServiceAccount into one that exists (its labels, annotations and secrets: a patch) under
/// any existingResourcePolicy: a user who may create ServiceAccounts but not patch them restores none (a ConfigMap
/// beside them, so that the restore holds something they may restore); the namespace's admin, who may, gets the
/// backup's label merged back.
#[tokio::test]
async fn a_service_account_is_merged_into_an_existing_one_only_for_a_user_who_may_patch_it() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let (ns, _, owner, admin) = tenant_with("att-sa", "admin").await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "app", "labels": {"from": "backup"}}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    plain_configmap(&admin, &ns).await;
    let kinds = json!(["serviceaccounts", "configmaps"]);
    let nabs: Api<NonAdminBackup> = Api::namespaced(owner.clone(), &ns);
    create_nab(&owner, &ns, "sa", json!({"includedResources": kinds})).await;
    completed(&nabs, "sa").await;
    // The cluster's admin takes the label off afterwards.
    let label = |s: &ServiceAccount| s.metadata.labels.as_ref().and_then(|l| l.get("from").cloned());
    let unlabelled: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "app"}})).unwrap();
    sas.replace("app", &PostParams::default(), &unlabelled).await.unwrap();
    assert_eq!(label(&sas.get("app").await.unwrap()), None);

    let creator = format!("creator-{ns}");
    role(
        &admin,
        &ns,
        "create-sas",
        "serviceaccounts, configmaps",
        "create, get, list",
        &creator,
    )
    .await;
    bind_editor(&admin, &ns, &creator).await;
    let creator_client = Cluster::load().as_user(&creator).await;
    let spec = json!({"backupName": "sa", "includedResources": kinds});
    let warnings = create_nar(&creator_client, &ns, "as-creator", spec.clone()).await;
    assert!(any_contains(&warnings, &["patch serviceaccounts"]), "{warnings:?}");
    let nars: Api<NonAdminRestore> = Api::namespaced(creator_client, &ns);
    assert_eq!(restore_finished(&nars, "as-creator").await, "Completed");
    let vr = velero_restore_of(&admin, &nars, "as-creator").await;
    assert!(
        vr.spec
            .excluded_resources
            .iter()
            .flatten()
            .any(|k| k == "serviceaccounts"),
        "{:?}",
        vr.spec
    );
    assert_eq!(
        label(&sas.get("app").await.unwrap()),
        None,
        "the restore patched the ServiceAccount"
    );

    let warnings = create_nar(&owner, &ns, "as-owner", spec).await;
    assert!(!any_contains(&warnings, &["serviceaccounts"]), "{warnings:?}");
    let nars: Api<NonAdminRestore> = Api::namespaced(owner, &ns);
    assert_eq!(restore_finished(&nars, "as-owner").await, "Completed");
    assert_eq!(label(&sas.get("app").await.unwrap()).as_deref(), Some("backup"));
}

/// Roles and RoleBindings restored from a storage location the tenant controls (the bucket's contents can change
/// after nac read them): only for a user who may escalate Roles and bind Roles and ClusterRoles, which Kubernetes'
/// `admin` may not; the same user given those verbs restores them.
#[tokio::test]
async fn roles_from_a_tenants_own_location_are_restored_only_for_a_user_who_may_bind_and_escalate() {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let (ns, owner_name, owner, admin) = tenant_with("att-rbac", "admin").await;
    let bucket = format!("loc-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<nac::api::NonAdminBackupStorageLocation> = Api::namespaced(owner.clone(), &ns);
    own_location(&admin, &nabsls, &ns, &bucket).await;
    apply_yaml(
        &admin,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {ns}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: someone}}]
"#
        ),
    )
    .await;
    // A ConfigMap beside them: the restore holds something the user may restore whatever else is left out.
    plain_configmap(&admin, &ns).await;
    let kinds = [
        "roles.rbac.authorization.k8s.io",
        "rolebindings.rbac.authorization.k8s.io",
    ];
    let nabs: Api<NonAdminBackup> = Api::namespaced(owner.clone(), &ns);
    create_nab(
        &owner,
        &ns,
        "rbac",
        json!({"includedResources": [kinds[0], kinds[1], "configmaps"], "storageLocation": "own"}),
    )
    .await;
    completed(&nabs, "rbac").await;
    let (roles, bindings): (Api<Role>, Api<RoleBinding>) =
        (Api::namespaced(admin.clone(), &ns), Api::namespaced(admin.clone(), &ns));
    // Only the two made here: the test's own bindings stay.
    roles.delete("reader", &DeleteParams::default()).await.unwrap();
    bindings.delete("reader", &DeleteParams::default()).await.unwrap();
    wait_gone(&bindings, "reader", T, "RoleBinding deleted").await;
    let spec = json!({"backupName": "rbac"});
    let nars: Api<NonAdminRestore> = Api::namespaced(owner.clone(), &ns);

    create_nar(&owner, &ns, "as-admin", spec.clone()).await;
    assert_eq!(restore_finished(&nars, "as-admin").await, "Completed");
    let vr = velero_restore_of(&admin, &nars, "as-admin").await;
    let excluded = vr.spec.excluded_resources.clone().unwrap_or_default();
    assert!(kinds.iter().all(|k| excluded.iter().any(|e| e == k)), "{excluded:?}");
    let said = left_out(&serde_json::to_value(nars.get("as-admin").await.unwrap()).unwrap());
    assert!(
        said.contains("escalate roles") && said.contains("bind roles") && said.contains("bind clusterroles"),
        "{said}"
    );
    assert!(
        roles.get_opt("reader").await.unwrap().is_none(),
        "the Role was restored"
    );
    assert!(
        bindings.get_opt("reader").await.unwrap().is_none(),
        "the RoleBinding was restored"
    );

    // The same user may escalate and bind: both come back.
    apply_yaml(
        &admin,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: rbac-rights, namespace: {ns}}}
rules: [{{apiGroups: [rbac.authorization.k8s.io], resources: [roles, clusterroles], verbs: [bind, escalate]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: rbac-rights, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-rights}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {owner_name}}}]
"#
        ),
    )
    .await;
    may_soon(
        &admin,
        &ns,
        &owner_name,
        "bind",
        "rbac.authorization.k8s.io",
        "clusterroles",
    )
    .await;
    create_nar(&owner, &ns, "as-granted", spec).await;
    assert_eq!(restore_finished(&nars, "as-granted").await, "Completed");
    let vr = velero_restore_of(&admin, &nars, "as-granted").await;
    let excluded = vr.spec.excluded_resources.clone().unwrap_or_default();
    assert!(!kinds.iter().any(|k| excluded.iter().any(|e| e == k)), "{excluded:?}");
    assert!(
        roles.get_opt("reader").await.unwrap().is_some(),
        "the Role was not restored"
    );
    assert!(
        bindings.get_opt("reader").await.unwrap().is_some(),
        "the RoleBinding was not restored"
    );
}

/// ConfigMap `plain` in `ns`, made by the admin.
async fn plain_configmap(admin: &Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"k": "v"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
}

/// ConfigMap `plain` in `ns` (made by the admin) and NonAdminBackup `plain` of ConfigMaps (by `client`), completed;
/// returns its Velero Backup's name.
async fn configmap_backup(client: &Client, admin: &Client, ns: &str) -> String {
    plain_configmap(admin, ns).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), ns);
    create_nab(client, ns, "plain", json!({"includedResources": ["configmaps"]})).await;
    completed(&nabs, "plain").await["status"]["veleroBackup"]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A backup whose tarball is gone from its storage (whoever controls the bucket deleted it): the restore is refused
/// at once, saying so, instead of waiting on a file that will not come.
#[tokio::test]
async fn a_restore_of_a_backup_whose_tarball_is_gone_is_refused_saying_so() {
    let (ns, _, client, admin) = tenant_with("att-gone", "edit").await;
    let backup = configmap_backup(&client, &admin, &ns).await;
    std::fs::remove_file(bucket_dir(&backup).join(format!("{backup}.tar.gz"))).unwrap();
    create_nar(&client, &ns, "from-gone", json!({"backupName": "plain"})).await;
    let nars: Api<NonAdminRestore> = Api::namespaced(client, &ns);
    let refused = wait_for(&nars, "from-gone", T, "refused", |o| {
        let v = serde_json::to_value(o?).unwrap();
        (v["status"]["phase"] == "BackingOff").then_some(v)
    })
    .await;
    let accepted = condition(&refused, "Accepted").unwrap();
    assert_eq!(accepted["status"], "False", "{accepted}");
    let message = accepted["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("the contents of Velero Backup {backup} cannot be checked"))
            && message.contains("HTTP 404, no such file"),
        "{message}"
    );
    let restores: Api<Restore> = Api::namespaced(admin, VELERO_NAMESPACE);
    let made = velero_restores_of(&restores, &ns).await;
    assert!(made.is_empty(), "Velero Restores made: {made:?}");
}

#[tokio::test]
async fn a_tarball_changed_after_nacs_check_restores_no_kind_nac_did_not_allow() {
    let _stops = STOPS.lock().await;
    let (ns, user, client, admin) = tenant_with("att-swap", "edit").await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let backup = configmap_backup(&client, &admin, &ns).await;
    cms.delete("plain", &DeleteParams::default()).await.unwrap();
    let tarball = bucket_dir(&backup).join(format!("{backup}.tar.gz"));
    let original = std::fs::read(&tarball).unwrap();
    // What whoever controls the storage writes once nac has read the tarball: a RoleBinding of the user to
    // `admin`, which nac never saw; and a DataUpload in a new namespace, privileged by the Namespace object
    // beside it, which Velero restores whatever the restore includes (nac's check after the restore must find it
    // from the API server: Velero's resource list comes from the same storage).
    let swapped_ns = format!("{ns}-swapped");
    let mut extra = item_entries(
        "rolebindings.rbac.authorization.k8s.io",
        &ns,
        "planted",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "planted", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    );
    extra.push((
        format!("resources/namespaces/cluster/{swapped_ns}.json"),
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": swapped_ns, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}))
        .unwrap(),
    ));
    extra.push((
        format!("resources/datauploads.velero.io/namespaces/{swapped_ns}/planted.json"),
        serde_json::to_vec(&json!({"apiVersion": "velero.io/v2alpha1", "kind": "DataUpload",
            "metadata": {"name": "planted", "namespace": swapped_ns},
            "spec": {"snapshotType": "CSI", "sourceNamespace": swapped_ns, "sourcePVC": "data"}}))
        .unwrap(),
    ));
    let changed = with_entries(&original, extra);

    let nars: Api<NonAdminRestore> = Api::namespaced(client.clone(), &ns);
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let mut attempt = 0;
    let name = loop {
        attempt += 1;
        let name = if attempt == 1 {
            "swap".to_string()
        } else {
            format!("swap-{attempt}")
        };
        // Velero is paused the moment it has answered nac's DownloadRequest for the contents (nac reads them from
        // the bucket itself), so the Velero Restore nac then makes waits for the change.
        let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
        let uid = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let pauser = {
            use futures::StreamExt;
            use kube::runtime::watcher;
            let drs: Api<nac::velero::DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
            let uid = uid.clone();
            tokio::spawn(async move {
                let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(watcher::watcher(
                    drs,
                    watcher::Config::default()
                )));
                while let Some(Ok(dr)) = events.next().await {
                    let ours = uid
                        .lock()
                        .unwrap()
                        .as_ref()
                        .is_some_and(|u| dr.metadata.name.as_deref() == Some(&format!("rights-{u}")));
                    let processed = dr.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Processed");
                    if ours && processed {
                        Part::Velero.signal("STOP");
                        let _ = paused_tx.send(());
                        return;
                    }
                }
            })
        };
        // The watch runs before the restore exists.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let (_, created) = create_nar_full(&client, &ns, &name, json!({"backupName": "plain"})).await;
        *uid.lock().unwrap() = created["metadata"]["uid"].as_str().map(str::to_string);
        let paused = tokio::time::timeout(T, paused_rx).await;
        pauser.abort();
        assert!(paused.is_ok(), "Velero never answered nac's DownloadRequest");
        let made = tokio::time::timeout(
            T,
            eventually(T, "Velero Restore made", || {
                let nars = nars.clone();
                let name = name.clone();
                async move { nars.get(&name).await.ok()?.status?.velero_restore?.name }
            }),
        )
        .await;
        let vr = match made {
            Ok(vr_name) => restores.get(&vr_name).await.ok(),
            Err(_) => None,
        };
        let fresh = vr.as_ref().is_some_and(|vr| {
            vr.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_none_or(|p| p == "New")
        });
        if fresh {
            std::fs::write(&tarball, &changed).unwrap();
        }
        Part::Velero.signal("CONT");
        let swapped = vr.filter(|_| fresh).map(|vr| (name, vr));
        let (name, vr) = swapped.expect("Velero was never paused before it read the tarball");
        assert_eq!(
            vr.spec.included_resources.as_deref(),
            Some(&["configmaps".to_string()][..])
        );
        restore_finished(&nars, &name).await;
        std::fs::write(&tarball, &original).unwrap();
        let failed = nars
            .get(&name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.velero_restore?.status);
        let errors = failed
            .map(|s| s.validation_errors.unwrap_or_default())
            .unwrap_or_default();
        if errors
            .iter()
            .any(|e| e.starts_with("failed to get resource modifiers configmap"))
        {
            // Velero was stopped while nac wrote its resource modifier ConfigMap and then the Restore: resumed, it
            // may validate the Restore before its ConfigMap informer has caught up (this test's own pause makes
            // that likely; the admin guide tells of it, by the status guard). Not what this test is about: it
            // tries again.
            assert!(
                attempt < 3,
                "Velero failed the restore at validation {attempt} times: {errors:?}"
            );
            eprintln!("attempt {attempt}: Velero validated {name} before its cache held nac's ConfigMap: {errors:?}");
            continue;
        }
        break name;
    };
    // nac compared what Velero says it restored with what it allowed.
    let n = wait_json(&nars, &name, T, "restore verified", |n| {
        !condition_of(n, "ResourcesOutsideRights").1.is_empty()
    })
    .await;
    // The namespace Velero made from the changed tarball, found from the API server (the resource list alone
    // would give UncheckedResourcesRestored).
    assert_eq!(
        condition_of(&n, "ResourcesOutsideRights"),
        ("True".into(), "RestoredOutsideNamespace".into()),
        "{n:#}"
    );
    let message = condition(&n, "ResourcesOutsideRights").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!(
            "namespaces {swapped_ns} (outside the namespace: for the cluster administrator)"
        )),
        "{message}"
    );
    assert!(
        cms.get_opt("plain").await.unwrap().is_some(),
        "the checked kind was restored"
    );
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), &ns);
    assert!(
        bindings.get_opt("planted").await.unwrap().is_none(),
        "a kind nac never checked was restored from the changed tarball"
    );
}

/// Sends SIGCONT to a stopped process when dropped, so a failing assertion never leaves nac stopped.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn signal_pid(pid: u32, signal: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

#[tokio::test]
async fn a_crafted_resource_list_makes_nac_delete_nothing_velero_did_not_make() {
    let _stops = STOPS.lock().await;
    let (ns, _user, client, admin) = tenant_with("att-list", "edit").await;
    // The admin's objects in the namespace, of kinds `edit` may not delete.
    apply_yaml(
        &admin,
        &format!(
            r#"
apiVersion: v1
kind: ResourceQuota
metadata: {{name: quota, namespace: {ns}}}
spec: {{hard: {{pods: "10"}}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: monitoring, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}
subjects: [{{kind: ServiceAccount, name: default, namespace: {ns}}}]
"#
        ),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"k": "v"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), &ns);
    create_nab(&client, &ns, "plain", json!({"includedResources": ["configmaps"]})).await;
    completed(&nabs, "plain").await;
    cms.delete("plain", &DeleteParams::default()).await.unwrap();

    // nac is stopped as soon as its Velero Restore appears, and resumed once the restore is Completed and the
    // resource list in the bucket says what whoever controls the storage wants: the admin's objects "created".
    let pid = env().await.nac.nac_pid().expect("nac runs");
    let restores: Api<Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let stopper = {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let (restores, ns) = (restores.clone(), ns.clone());
        tokio::spawn(async move {
            let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(watcher::watcher(
                restores,
                watcher::Config::default()
            )));
            while let Some(Ok(vr)) = events.next().await {
                let ours = vr
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("openshift.io/oadp-nar-origin-namespace"))
                    == Some(&ns);
                if ours {
                    signal_pid(pid, "STOP");
                    return (Resume(pid), vr.metadata.name.unwrap());
                }
            }
            panic!("the watch of Velero Restores ended");
        })
    };
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let nars: Api<NonAdminRestore> = Api::namespaced(client.clone(), &ns);
    create_nar(&client, &ns, "crafted", json!({"backupName": "plain"})).await;
    let (resume, vr) = tokio::time::timeout(T, stopper)
        .await
        .expect("no Velero Restore for the NonAdminRestore")
        .unwrap();
    eventually(T, "Velero Restore Completed", || {
        let (restores, vr) = (restores.clone(), vr.clone());
        async move {
            let r = restores.get(&vr).await.ok()?;
            (r.status?.phase.as_deref() == Some("Completed")).then_some(())
        }
    })
    .await;
    let c = Cluster::load();
    let file = std::path::PathBuf::from(c.get("S3_DATA_DIR"))
        .join(c.get("S3_BUCKET"))
        .join(c.get("S3_PREFIX"))
        .join("restores")
        .join(&vr)
        .join(format!("restore-{vr}-resource-list.json.gz"));
    assert!(file.exists(), "no resource list at {}", file.display());
    let crafted = json!({
        "v1/ConfigMap": [format!("{ns}/plain(created)")],
        "v1/ResourceQuota": [format!("{ns}/quota(created)")],
        "rbac.authorization.k8s.io/v1/RoleBinding": [format!("{ns}/monitoring(created)")],
    });
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, crafted.to_string().as_bytes()).unwrap();
    std::fs::write(&file, gz.finish().unwrap()).unwrap();
    let n = nars.get("crafted").await.unwrap();
    assert!(
        n.status
            .as_ref()
            .is_none_or(|s| s.conditions.iter().all(|c| c.type_ != "ResourcesOutsideRights")),
        "nac verified the restore before it was stopped"
    );
    drop(resume);

    let n = wait_json(&nars, "crafted", T, "restore verified", |n| {
        !condition_of(n, "ResourcesOutsideRights").1.is_empty()
    })
    .await;
    assert_eq!(
        condition_of(&n, "ResourcesOutsideRights"),
        ("True".into(), "UncheckedResourcesRestored".into()),
        "{n:#}"
    );
    let message = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ResourcesOutsideRights")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("not removed")
            && message.contains(&format!(
                "{ns}/quota (not labelled as made by this restore: left alone)"
            ))
            && message.contains(&format!(
                "{ns}/monitoring (not labelled as made by this restore: left alone)"
            )),
        "{message}"
    );
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> = Api::namespaced(admin.clone(), &ns);
    assert!(
        quotas.get_opt("quota").await.unwrap().is_some(),
        "nac deleted the admin's ResourceQuota"
    );
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), &ns);
    assert!(
        bindings.get_opt("monitoring").await.unwrap().is_some(),
        "nac deleted the admin's RoleBinding"
    );
    assert!(
        cms.get_opt("plain").await.unwrap().is_some(),
        "the checked kind was restored"
    );
}

/// A schedule runs with the rights of whoever last changed what it does: a namespace `view` user who unpauses an
/// `edit` user's paused schedule becomes its requester, so its runs read no Secrets (`view` may not list them);
/// before, the runs kept the owner's rights. A pause alone keeps the requester.
#[tokio::test]
async fn a_schedule_unpaused_by_a_viewer_runs_with_the_viewers_rights() {
    use nac::api::NonAdminSchedule;
    use nac::rights::REQUESTER_ANNOTATION;
    use nac::velero::Schedule;
    let (ns, owner_name, owner, admin) = tenant_with("att-sched", "edit").await;
    let viewer_name = format!("view-{ns}");
    bind_editor(&admin, &ns, &viewer_name).await;
    bind(&admin, &ns, &viewer_name, "view").await;
    may_soon(&admin, &ns, &viewer_name, "list", "", "configmaps").await;
    let viewer = Cluster::load().as_user(&viewer_name).await;
    nac_may_read_soon(&viewer, &ns, "configmaps").await;
    let nas: NonAdminSchedule = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule", "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "paused": true, "template": {"backupSpec": {}}}
    }))
    .unwrap();
    Api::<NonAdminSchedule>::namespaced(owner.clone(), &ns)
        .create(&PostParams::default(), &nas)
        .await
        .unwrap();
    let nases: Api<NonAdminSchedule> = Api::namespaced(viewer.clone(), &ns);
    let s = wait_json(&nases, "nightly", T, "schedule Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    let vname = s["status"]["veleroSchedule"]["name"].as_str().unwrap().to_string();
    let schedules: Api<Schedule> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let excluded = |v: &Value| -> Vec<String> {
        v["spec"]["template"]["excludedResources"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let made = wait_json(&schedules, &vname, T, "Velero Schedule paused", |v| {
        v["spec"]["paused"] == true
    })
    .await;
    assert!(
        !excluded(&made).contains(&"secrets".to_string()),
        "the owner reads Secrets: {made}"
    );
    // A pause alone (already paused: a no-op edit of another field would be a change) keeps the owner.
    let requester = |n: &Value| {
        n["metadata"]["annotations"][REQUESTER_ANNOTATION]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(requester(&s).contains(&owner_name), "{s}");
    nases
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let n = serde_json::to_value(nases.get("nightly").await.unwrap()).unwrap();
    assert!(
        requester(&n).contains(&viewer_name),
        "the unpause records its user: {n}"
    );
    // The Velero Schedule the runs come from: unpaused, and built with the viewer's rights.
    let v = wait_json(&schedules, &vname, T, "Velero Schedule unpaused without Secrets", |v| {
        v["spec"]["paused"] == false && excluded(v).contains(&"secrets".to_string())
    })
    .await;
    assert!(excluded(&v).contains(&"secrets".to_string()), "{v}");
    // The owner's next edit makes the runs theirs again.
    Api::<NonAdminSchedule>::namespaced(owner.clone(), &ns)
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"schedule": "0 4 * * *"}})),
        )
        .await
        .unwrap();
    wait_json(&schedules, &vname, T, "Velero Schedule with the owner's rights", |v| {
        v["spec"]["schedule"] == "0 4 * * *" && !excluded(v).contains(&"secrets".to_string())
    })
    .await;
    Api::<NonAdminSchedule>::namespaced(owner.clone(), &ns)
        .delete("nightly", &DeleteParams::default())
        .await
        .unwrap();
}

/// A NonAdminDownloadRequest of `kind` for `target`, as a tenant writes it.
fn download_request(name: &str, kind: &str, target: &str) -> Value {
    json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
           "metadata": {"name": name}, "spec": {"target": {"kind": kind, "name": target}}})
}

/// A `view` user of the namespace (with nac's editor role) asks for the contents and the log of a backup an `edit`
/// user made, which holds the namespace's Secrets: refused at apply, naming the right. Past the webhook (created
/// by nac's own identity, unstamped, or with a requester record naming the viewer) the reconciler refuses and no
/// Velero DownloadRequest is made. The `edit` user gets their own backup's contents, Secrets included.
#[tokio::test]
async fn a_viewer_downloads_nothing_of_an_editors_backup_holding_secrets_and_the_editor_does() {
    use nac::api::NonAdminDownloadRequest;
    use nac::rights::REQUESTER_ANNOTATION;
    let (ns, _, editor, admin) = tenant_with("att-dl", "edit").await;
    let viewer_name = format!("view-{ns}");
    bind_editor(&admin, &ns, &viewer_name).await;
    bind(&admin, &ns, &viewer_name, "view").await;
    may_soon(&admin, &ns, &viewer_name, "list", "", "configmaps").await;
    let viewer = Cluster::load().as_user(&viewer_name).await;
    nac_may_read_soon(&viewer, &ns, "configmaps").await;
    tenant_secret(&admin, &ns, "app-token", None).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(editor.clone(), &ns);
    create_nab(&editor, &ns, "everything", json!({})).await;
    completed(&nabs, "everything").await;

    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadmindownloadrequests");
    for kind in ["BackupContents", "BackupLog"] {
        let name = format!("viewer-{}", kind.to_lowercase());
        let (code, body, _) = create_raw(&viewer, &path, &download_request(&name, kind, "everything")).await;
        assert_eq!(code, 403, "{kind}: {body}");
        let msg = body["message"].as_str().unwrap();
        // `view` lists no Secrets (nor a few other kinds, such as Leases): the refusal names each.
        assert!(
            msg.contains(&format!(
                "NonAdminDownloadRequest refused: {kind} of NonAdminBackup everything exposes objects {viewer_name} \
                 may not read in namespace {ns}: they may not list "
            )) && msg.contains("list secrets"),
            "{msg}"
        );
    }

    // Past the webhook: unstamped (nac's own identity), or stamped with the viewer by whoever passes it.
    let admins: Api<NonAdminDownloadRequest> = Api::namespaced(admin.clone(), &ns);
    let unrecorded: NonAdminDownloadRequest =
        serde_json::from_value(download_request("unrecorded", "BackupContents", "everything")).unwrap();
    admins.create(&PostParams::default(), &unrecorded).await.unwrap();
    let mut forged = download_request("forged", "BackupLog", "everything");
    forged["metadata"]["annotations"] = json!({REQUESTER_ANNOTATION: json!({"username": viewer_name}).to_string()});
    let forged: NonAdminDownloadRequest = serde_json::from_value(forged).unwrap();
    admins.create(&PostParams::default(), &forged).await.unwrap();
    for (name, says) in [
        ("unrecorded", "has no record of who created it".to_string()),
        (
            "forged",
            format!("BackupLog of NonAdminBackup everything exposes objects {viewer_name} may not read"),
        ),
    ] {
        let n = wait_json(&admins, name, T, "refused", |n| n["status"]["phase"] == "BackingOff").await;
        let c = condition(&n, "RequesterRightsExceeded").unwrap_or_else(|| panic!("{name}: {n}"));
        assert_eq!(c["status"], "True", "{c}");
        assert!(c["message"].as_str().unwrap().contains(&says), "{name}: {c}");
        assert!(n["status"]["velero"].is_null(), "{name}: no URL: {n}");
    }
    // No Velero DownloadRequest for either, now or a moment later.
    let drs: Api<nac::velero::DownloadRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    for _ in 0..2 {
        let made: Vec<String> = drs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|d| {
                d.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(nac::naming::NADR_ORIGIN_NAMESPACE_ANNOTATION))
                    .map(String::as_str)
                    == Some(ns.as_str())
            })
            .filter_map(|d| d.metadata.name)
            .collect();
        assert!(made.is_empty(), "Velero DownloadRequests made: {made:?}");
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }

    // The editor's own: the contents, with the Secret.
    let mine: Api<NonAdminDownloadRequest> = Api::namespaced(editor.clone(), &ns);
    let tarball = download(&mine, "mine", "BackupContents", "everything").await;
    let listing = String::from_utf8_lossy(&tarball);
    assert!(
        listing.contains(&format!("resources/secrets/namespaces/{ns}/app-token.json")),
        "the editor's backup holds the Secret"
    );
}

/// A tenant with an `edit` user, their own location on a bucket of theirs, ConfigMap `plain`, and the completed
/// NonAdminBackups `names` of the ConfigMaps there: (namespace, user client, admin client, bucket, the Velero
/// Backups' names).
async fn backups_on_own_location(prefix: &str, names: &[&str]) -> (String, Client, Client, String, Vec<String>) {
    let (ns, _user, client, admin) = tenant_with(prefix, "edit").await;
    let bucket = format!("loc-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<nac::api::NonAdminBackupStorageLocation> = Api::namespaced(client.clone(), &ns);
    own_location(&admin, &nabsls, &ns, &bucket).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"k": "v"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), &ns);
    let mut backups = Vec::new();
    for name in names {
        create_nab(
            &client,
            &ns,
            name,
            json!({"includedResources": ["configmaps"], "storageLocation": "own"}),
        )
        .await;
        let vb = completed(&nabs, name).await["status"]["veleroBackup"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        backups.push(vb);
    }
    (ns, client, admin, bucket, backups)
}

/// What Velero restores whatever a restore includes (Velero v1.18 `pkg/restore/restore.go`): every DataUpload in
/// the tarball, in any namespace, and before it the item's namespace, created from the tarball's Namespace object
/// with its labels. A tenant who writes their own bucket adds both to a backup of theirs: a namespace that would be
/// created privileged. nac refuses the restore, and nothing outside the tenant's namespace is created.
#[tokio::test]
async fn a_tarball_in_a_tenants_bucket_naming_a_new_namespace_creates_nothing_outside_theirs() {
    let (ns, client, admin, bucket, backups) = backups_on_own_location("att-nsx", &["offsite"]).await;
    let backup = backups[0].clone();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    cms.delete("plain", &DeleteParams::default()).await.unwrap();

    // What the tenant writes into their own bucket: namespace `evil` (privileged) and a DataUpload in it.
    let evil = format!("{ns}-evil");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": evil, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
    let data_upload = json!({"apiVersion": "velero.io/v2alpha1", "kind": "DataUpload",
        "metadata": {"name": "planted", "namespace": evil},
        "spec": {"snapshotType": "CSI", "sourceNamespace": evil, "sourcePVC": "data", "operationTimeout": "10m"}});
    let tarball = backup_dir_in(&bucket, &format!("{ns}/p"), &backup).join(format!("{backup}.tar.gz"));
    let original = std::fs::read(&tarball).unwrap();
    let mut extra = vec![
        (
            format!("resources/namespaces/cluster/{evil}.json"),
            serde_json::to_vec(&namespace).unwrap(),
        ),
        (
            format!("resources/namespaces/v1-preferredversion/cluster/{evil}.json"),
            serde_json::to_vec(&namespace).unwrap(),
        ),
    ];
    let body = serde_json::to_vec(&data_upload).unwrap();
    extra.push((
        format!("resources/datauploads.velero.io/namespaces/{evil}/planted.json"),
        body.clone(),
    ));
    extra.push((
        format!("resources/datauploads.velero.io/v2alpha1-preferredversion/namespaces/{evil}/planted.json"),
        body,
    ));
    std::fs::write(&tarball, with_entries(&original, extra)).unwrap();

    let nars: Api<NonAdminRestore> = Api::namespaced(client.clone(), &ns);
    create_nar(&client, &ns, "planted", json!({"backupName": "offsite"})).await;
    // Refused, or (without the check) restored by Velero: either way the outcome is final.
    let n = wait_json(&nars, "planted", T, "refused or restored", |n| {
        n["status"]["phase"] == "BackingOff"
            || matches!(
                n["status"]["veleroRestore"]["status"]["phase"].as_str(),
                Some("Completed" | "PartiallyFailed" | "Failed")
            )
    })
    .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let created = namespaces.get_opt(&evil).await.unwrap();
    assert!(
        created.is_none(),
        "Velero created namespace {evil} from the tenant's tarball: {:?}",
        created.map(|c| (c.metadata.labels, c.metadata.managed_fields))
    );
    let uploads: Api<nac::velero::DataUpload> = Api::all(admin.clone());
    let planted: Vec<_> = uploads
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|d| d.metadata.name.as_deref() == Some("planted"))
        .map(|d| d.metadata.namespace)
        .collect();
    assert!(planted.is_empty(), "DataUploads restored: {planted:?}");
    let accepted = condition(&n, "Accepted").unwrap();
    assert_eq!(
        (accepted["status"].as_str(), accepted["reason"].as_str()),
        (Some("False"), Some("BackupHoldsItemsOutsideNamespace")),
        "{n:#}"
    );
    let message = accepted["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("namespaces {evil} (cluster-scoped)"))
            && message.contains(&format!("datauploads.velero.io {evil}/planted")),
        "{message}"
    );
    let restores: Api<Restore> = Api::namespaced(admin, VELERO_NAMESPACE);
    let made = velero_restores_of(&restores, &ns).await;
    assert!(made.is_empty(), "Velero Restores made: {made:?}");
}

/// Deleting a backup, Velero (v1.18 `internal/delete/actions/csi`) creates for each VolumeSnapshotContent in its
/// tarball labelled with the backup a new one for the item's snapshot handle, with `deletionPolicy: Delete`, and
/// deletes it: the CSI driver deletes that snapshot. A tenant who writes their own bucket adds one naming a
/// snapshot that is not theirs. nac admits only what it recorded from the cluster while the backup ran: the other
/// snapshot's content is never created; the backup's own is (no CSI driver runs here, so Velero's contents are
/// what shows it).
#[tokio::test]
async fn a_tarball_in_a_tenants_bucket_naming_another_snapshot_makes_velero_delete_only_the_backups_own() {
    use futures::StreamExt;
    use nac::velero::snapshot::{VolumeSnapshotContent, SNAPSHOTS_ANNOTATION};
    // Not while another test gives Velero a VolumeSnapshotLocation (its deletions would wait for it).
    let _one_at_a_time = STOPS.lock().await;
    let (ns, client, admin, bucket, backups) = backups_on_own_location("att-vsc", &["mine", "forged"]).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), &ns);
    let (mine, forged) = (backups[0].clone(), backups[1].clone());
    let (own_handle, other_handle) = (format!("{ns}-own-snapshot"), format!("{ns}-another-tenants-snapshot"));

    // The cluster as a CSI backup leaves it (no driver runs here): the snapshot controller made a content for the
    // backup's snapshot, which Velero labelled with the backup's name. nac records it on the Velero Backup.
    let contents: Api<VolumeSnapshotContent> = Api::all(admin.clone());
    let made = |name: &str, handle: &str| -> VolumeSnapshotContent {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"driver": "hostpath.csi.k8s.io", "source": {"snapshotHandle": handle}, "deletionPolicy": "Retain",
                "volumeSnapshotRef": {"name": "data", "namespace": ns}}
        }))
        .unwrap()
    };
    let own_content = format!("snapcontent-{ns}");
    contents
        .create(&PostParams::default(), &made(&own_content, &own_handle))
        .await
        .unwrap();
    let label = json!({"metadata": {"labels": {"velero.io/backup-name": mine}}});
    contents
        .patch(&own_content, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let velero_backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    eventually(T, "nac recorded the backup's snapshot on its Velero Backup", || async {
        let b = velero_backups.get(&mine).await.ok()?;
        let record = b.metadata.annotations?.get(SNAPSHOTS_ANNOTATION)?.clone();
        record.contains(&own_handle).then_some(())
    })
    .await;
    contents.delete(&own_content, &DeleteParams::default()).await.unwrap();

    // What the tenant writes into their bucket: each tarball names a snapshot content labelled with its backup,
    // `forged`'s another tenant's snapshot, `mine`'s its own.
    let item = |backup: &str, handle: &str| {
        json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
            "metadata": {"name": format!("snapcontent-{backup}"), "labels": {"velero.io/backup-name": backup}},
            "spec": {"driver": "hostpath.csi.k8s.io", "source": {"volumeHandle": "pv"}, "deletionPolicy": "Retain",
                "volumeSnapshotRef": {"name": "data", "namespace": ns}},
            "status": {"snapshotHandle": handle, "readyToUse": true}})
    };
    for (backup, handle) in [(&forged, &other_handle), (&mine, &own_handle)] {
        let tarball = backup_dir_in(&bucket, &format!("{ns}/p"), backup).join(format!("{backup}.tar.gz"));
        let original = std::fs::read(&tarball).unwrap();
        let body = serde_json::to_vec(&item(backup, handle)).unwrap();
        let path = |version: &str| {
            format!(
                "resources/volumesnapshotcontents.snapshot.storage.k8s.io/{version}cluster/snapcontent-{backup}.json"
            )
        };
        let extra = vec![(path(""), body.clone()), (path("v1-preferredversion/"), body)];
        std::fs::write(&tarball, with_entries(&original, extra)).unwrap();
    }

    // Every content created from now on, as the API server saw it.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watch = {
        let (seen, contents) = (seen.clone(), contents.clone());
        tokio::spawn(async move {
            let mut events = kube::runtime::watcher(contents, Default::default()).boxed();
            while let Some(Ok(ev)) = events.next().await {
                if let kube::runtime::watcher::Event::Apply(c) = ev {
                    if let Some(s) = c.snapshot() {
                        seen.lock().unwrap().push(s.snapshot_handle);
                    }
                }
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let delete_backup = json!({"spec": {"deleteBackup": true}});
    for name in ["forged", "mine"] {
        nabs.patch(name, &PatchParams::default(), &Patch::Merge(&delete_backup))
            .await
            .unwrap();
        // Velero logs a refused item and goes on: the backup is deleted, with its files.
        eventually(T, &format!("NonAdminBackup {name} deleted with its backup"), || async {
            nabs.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.contains(&other_handle),
        "Velero created a content to delete another tenant's snapshot {other_handle} from the tenant's tarball: \
         {seen:?}"
    );
    assert!(
        seen.contains(&own_handle),
        "Velero deleted the backup's own snapshot through a content: {seen:?}"
    );
    for backup in [&forged, &mine] {
        let left = files_in(&bucket, &format!("{ns}/p"), backup);
        assert!(
            left.is_empty(),
            "backup {backup}'s files deleted from the bucket: {left:?}"
        );
    }
}

/// Velero's VolumeSnapshotLocation `name`, deleted on drop (also when the test fails): while it exists, tenants'
/// backups on their own locations are deleted only when their files list no native snapshot.
struct SnapshotLocation(String);

impl Drop for SnapshotLocation {
    fn drop(&mut self) {
        let c = Cluster::load();
        let _ = std::process::Command::new(c.get("KUBECTL"))
            .args(["--kubeconfig", c.get("KUBECONFIG"), "-n", VELERO_NAMESPACE])
            .args([
                "delete",
                "volumesnapshotlocation",
                &self.0,
                "--ignore-not-found",
                "--wait=false",
            ])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// Deleting a backup, Velero also deletes the native volume snapshots the backup's files list
/// (`<backup>-volumesnapshots.json.gz`), each through the VolumeSnapshotLocation the list names, with that
/// location's credentials. A tenant who writes their own bucket lists another's snapshot under the admin's location,
/// and can change the list up to the moment Velero reads it. So while Velero has a VolumeSnapshotLocation, no one's
/// DeleteBackupRequest of a backup on a tenant's location is admitted (nac's, Velero's garbage collection's, an
/// admin's), and nac says why; without one, the backup is deleted. The admin's EBS API is a listener on loopback
/// here (the location's AWS config file points the plugin at it).
#[tokio::test]
async fn a_native_snapshot_list_in_a_tenants_bucket_deletes_nothing_through_the_admins_snapshot_location() {
    use std::io::Write as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The location exists for a while: the other tests that delete backups on tenants' locations wait.
    let _one_at_a_time = STOPS.lock().await;
    let (ns, client, admin, bucket, backups) = backups_on_own_location("att-ebs", &["listed"]).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(client.clone(), &ns);
    let listed = backups[0].clone();

    // The EC2 API of the admin's snapshot location: every request that reaches it.
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = api.local_addr().unwrap().port();
    let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let server = {
        let requests = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = api.accept().await {
                let mut buf = vec![0u8; 65536];
                let n = tokio::time::timeout(std::time::Duration::from_secs(2), c.read(&mut buf))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(0);
                requests
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let _ = c
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        })
    };
    let config = std::env::temp_dir().join(format!("{ns}-ebs-config"));
    std::fs::write(
        &config,
        format!(
            "[default]\naws_access_key_id = AKIAEXAMPLEADMIN\naws_secret_access_key = admin-secret\n\
             endpoint_url = http://127.0.0.1:{port}\n"
        ),
    )
    .unwrap();
    let location_name = format!("ebs-{ns}");
    let locations: Api<nac::velero::VolumeSnapshotLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let location: nac::velero::VolumeSnapshotLocation = serde_json::from_value(json!({
        "metadata": {"name": location_name},
        "spec": {"provider": "aws", "config": {"region": "us-east-1", "credentialsFile": config.to_string_lossy()}}
    }))
    .unwrap();
    locations.create(&PostParams::default(), &location).await.unwrap();
    let snapshot_location = SnapshotLocation(location_name.clone());

    // What the tenant writes into their bucket: the backup made a snapshot through the admin's location.
    let list_file =
        backup_dir_in(&bucket, &format!("{ns}/p"), &listed).join(format!("{listed}-volumesnapshots.json.gz"));
    let original = std::fs::read(&list_file).ok();
    let list = json!([{"spec": {"backupName": listed, "location": location_name, "persistentVolumeName": "pv-b",
        "providerVolumeID": "vol-b"}, "status": {"providerSnapshotID": "snap-another-tenants", "phase": "Completed"}}]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(list.to_string().as_bytes()).unwrap();
    std::fs::write(&list_file, gz.finish().unwrap()).unwrap();

    // Asked by the tenant through nac, and by anyone straight from Velero (as its garbage collection does when a
    // backup expires).
    let delete_backup = json!({"spec": {"deleteBackup": true}});
    nabs.patch("listed", &PatchParams::default(), &Patch::Merge(&delete_backup))
        .await
        .unwrap();
    let requests_api: Api<nac::velero::DeleteBackupRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let direct: nac::velero::DeleteBackupRequest = serde_json::from_value(json!({
        "metadata": {"name": format!("{listed}-expired")}, "spec": {"backupName": listed}
    }))
    .unwrap();
    let made = requests_api.create(&PostParams::default(), &direct).await;
    // Refused, or (without the guard) processed by Velero: either way the outcome is final.
    let refused = wait_json(&nabs, "listed", T, "the deletion refused or processed", |n| {
        n.to_string().contains("is not deleted")
            || n["status"]["veleroDeleteBackupRequest"]["status"]["phase"] == "Processed"
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let reached = requests.lock().unwrap().clone();
    assert!(
        reached.is_empty(),
        "Velero called the admin's snapshot API for the tenant's list: {reached:?}"
    );
    match made {
        Err(kube::Error::Api(e)) => assert!(e.message.contains(&format!("backup {listed} is not deleted")), "{e:?}"),
        other => panic!("a DeleteBackupRequest of the tenant's backup was admitted: {other:?}"),
    }
    let said = refused.to_string();
    assert!(
        said.contains(&format!("backup {listed} is not deleted"))
            && said.contains(&format!("such as {location_name}"))
            && said.contains("Ask the cluster administrator"),
        "{refused:#}"
    );
    let left: Vec<_> = requests_api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.backup_name == listed)
        .collect();
    assert!(left.is_empty(), "a DeleteBackupRequest for {listed}: {left:?}");

    // Without a snapshot location (and the list as Velero wrote it): deleted.
    match original {
        Some(bytes) => std::fs::write(&list_file, bytes).unwrap(),
        None => std::fs::remove_file(&list_file).unwrap(),
    }
    drop(snapshot_location);
    eventually(T, "the snapshot location gone", || async {
        locations.get_opt(&location_name).await.unwrap().is_none().then_some(())
    })
    .await;
    let touch = json!({"metadata": {"annotations": {"touched": "1"}}});
    eventually(
        T,
        "NonAdminBackup listed deleted without a snapshot location",
        || async {
            let _ = nabs
                .patch("listed", &PatchParams::default(), &Patch::Merge(&touch))
                .await;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            nabs.get_opt("listed").await.unwrap().is_none().then_some(())
        },
    )
    .await;
    server.abort();
    let _ = std::fs::remove_file(&config);
}

/// A copy of a backup into another namespace (`namespaceMapping: {A: B}`): refused at apply unless B is a tenant's
/// namespace that exists and where the requester may restore (a system namespace, Velero's, one where they only
/// view, one that does not exist, and every other shape of mapping are refused, naming why). Into B, from a
/// tarball in the tenant's own bucket with an item in the backup's namespace claiming a third namespace the user
/// also owns: Velero restores only the backup's namespace, into B, each object labelled with where it came from.
/// The same tarball with an item in the third namespace's own directory is refused (nac restores nothing from a
/// tenant's tarball that names another namespace). The third namespace and the backup's own receive nothing.
#[tokio::test]
async fn a_copy_goes_only_into_a_namespace_its_user_may_restore_into_and_nowhere_else() {
    let (ns, client, admin, bucket, backups) = backups_on_own_location("att-copy", &["offsite"]).await;
    let backup = backups[0].clone();
    let user = format!("edit-{ns}");
    let (into, viewed, third) = (format!("{ns}-b"), format!("{ns}-v"), format!("{ns}-t"));
    for (n, role) in [(&into, "edit"), (&viewed, "view"), (&third, "edit")] {
        ensure_namespace(&admin, n).await;
        if role == "edit" {
            bind_editor(&admin, n, &user).await;
        }
        bind(&admin, n, &user, role).await;
        may_soon(&admin, n, &user, "list", "", "configmaps").await;
    }
    may_soon(&admin, &into, &user, "create", "oadp.openshift.io", "nonadminrestores").await;

    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminrestores");
    let refused = |name: &str, mapping: Value| {
        let body = json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
            "metadata": {"name": name}, "spec": {"restoreSpec": {"backupName": "offsite", "namespaceMapping": mapping}}});
        let (client, path, name) = (client.clone(), path.clone(), name.to_string());
        async move {
            let (status, resp, _) = create_raw(&client, &path, &body).await;
            assert!(status >= 400, "{name} admitted: {resp:#}");
            resp["message"].as_str().unwrap_or_default().to_string()
        }
    };
    let m = refused("sys", json!({&ns: "kube-system"})).await;
    assert!(m.contains("kube-system is a system namespace"), "{m}");
    let m = refused("velero", json!({&ns: VELERO_NAMESPACE})).await;
    assert!(m.contains(&format!("{VELERO_NAMESPACE} is a system namespace")), "{m}");
    let m = refused("nac", json!({&ns: NAC_NAMESPACE})).await;
    assert!(
        m.contains(&format!("namespace {NAC_NAMESPACE} is Velero's, nac's")),
        "{m}"
    );
    let m = refused("viewed", json!({&ns: &viewed})).await;
    assert!(
        m.contains(&format!(
            "{user} may not create nonadminrestores.oadp.openshift.io in namespace {viewed}"
        )),
        "{m}"
    );
    let m = refused("missing", json!({&ns: format!("{ns}-none")})).await;
    assert!(m.contains("does not exist"), "{m}");
    for mapping in [json!({&third: &into}), json!({&ns: &into, &third: &into})] {
        let m = refused("shape", mapping).await;
        assert!(
            m.contains("may only map the restore's own namespace to one other namespace"),
            "{m}"
        );
    }

    // The tenant's bucket: a ConfigMap in the backup's own directory claiming the third namespace.
    let planted = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": &third}, "data": {"k": "planted"}})
    };
    let tarball = backup_dir_in(&bucket, &format!("{ns}/p"), &backup).join(format!("{backup}.tar.gz"));
    let original = std::fs::read(&tarball).unwrap();
    let stray = item_entries("configmaps", &ns, "stray", &planted("stray"));
    std::fs::write(&tarball, with_entries(&original, stray.clone())).unwrap();

    create_nar(
        &client,
        &ns,
        "copy",
        json!({"backupName": "offsite", "namespaceMapping": {&ns: &into}}),
    )
    .await;
    let nars: Api<NonAdminRestore> = Api::namespaced(client.clone(), &ns);
    let vr = velero_restore_of(&admin, &nars, "copy").await;
    assert_eq!(vr.spec.included_namespaces, Some(vec![ns.clone()]));
    assert_eq!(
        vr.spec.namespace_mapping,
        Some([(ns.clone(), into.clone())].into_iter().collect())
    );
    let n = wait_json(&nars, "copy", T, "the copy restored", |n| {
        matches!(
            n["status"]["veleroRestore"]["status"]["phase"].as_str(),
            Some("Completed" | "PartiallyFailed" | "Failed")
        )
    })
    .await;
    let verified = wait_json(&nars, "copy", T, "what Velero made verified", |n| {
        condition(n, "ResourcesOutsideRights").is_some()
    })
    .await;
    assert_eq!(
        condition(&verified, "ResourcesOutsideRights").unwrap()["status"],
        "False",
        "{verified:#}"
    );
    let copied: Api<ConfigMap> = Api::namespaced(admin.clone(), &into);
    let plain = copied
        .get("plain")
        .await
        .unwrap_or_else(|e| panic!("not copied ({e}): {n:#}"));
    let labels = plain.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get(nac::naming::COPIED_FROM_NAMESPACE_LABEL),
        Some(&ns),
        "{labels:?}"
    );
    let nab_id = nac::naming::NAB_ORIGIN_NACUUID_LABEL;
    let vb: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    assert_eq!(
        labels.get(nab_id),
        vb.get(&backup).await.unwrap().metadata.labels.unwrap().get(nab_id)
    );

    // An item in the third namespace's own directory: the copy is refused, nothing restored anywhere.
    let mut extra = stray;
    extra.extend(item_entries("configmaps", &third, "planted", &planted("planted")));
    std::fs::write(&tarball, with_entries(&original, extra)).unwrap();
    create_nar(
        &client,
        &ns,
        "copy-2",
        json!({"backupName": "offsite", "namespaceMapping": {&ns: &into}}),
    )
    .await;
    let refused = wait_json(&nars, "copy-2", T, "refused", |n| n["status"]["phase"] == "BackingOff").await;
    let accepted = condition(&refused, "Accepted").unwrap();
    assert_eq!(accepted["reason"], "BackupHoldsItemsOutsideNamespace", "{refused:#}");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains(&format!("configmaps {third}/planted")),
        "{accepted:#}"
    );
    for (namespace, name) in [
        (&third, "planted"),
        (&third, "stray"),
        (&into, "stray"),
        (&into, "planted"),
        (&ns, "stray"),
    ] {
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), namespace);
        assert!(
            cms.get_opt(name).await.unwrap().is_none(),
            "{namespace}/{name} restored from the tenant's tarball"
        );
    }
}
