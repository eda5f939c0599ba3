//! Webhook registrations that call nac by URL (local runs and end-to-end tests; the Helm chart renders its own,
//! pointing at the Service).

use base64::Engine;
use nac::admission::{Endpoint, GuardedKind};

/// Label that marks the policy ConfigMap, so the policy webhook's objectSelector sees only it.
pub const POLICY_LABEL: &str = "nac.oadp.openshift.io/policy";

/// The user name of ServiceAccount `name` in `namespace`, as the API server authenticates its tokens.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The match condition under which the API server leaves out requests by `user` (nac's own identity): nac's own
/// writes (a Velero Backup it makes, a finalizer it removes, a NonAdminBackup backup sync re-creates) cost no
/// admission round trip, while every other user still goes through the webhook. YAML lines at `indent`.
pub fn not_by(user: &str, indent: &str) -> String {
    format!("{indent}- name: {NOT_BY_NAC}\n{indent}  expression: \"request.userInfo.username != '{user}'\"\n")
}

/// The name of [`not_by`]'s condition.
pub const NOT_BY_NAC: &str = "not-by-nac";

/// Where every webhook calls nac, and how long the API server waits for it.
struct Target<'a> {
    url: &'a str,
    ca: &'a str,
    timeout_seconds: u32,
}

/// One webhook: its name, nac's path for it, the one resource it reviews (group, version, operations, scope), and
/// the YAML lines that narrow it (selectors, match conditions).
struct Hook<'a> {
    name: &'a str,
    path: &'a str,
    group: &'a str,
    version: &'a str,
    operations: &'a str,
    resource: &'a str,
    scope: &'a str,
    narrowed: String,
}

impl Target<'_> {
    fn hook(&self, h: Hook) -> String {
        let Target {
            url,
            ca,
            timeout_seconds,
        } = self;
        let Hook {
            name,
            path,
            group,
            version,
            operations,
            resource,
            scope,
            narrowed,
        } = h;
        format!(
            r#"- name: {name}
  clientConfig:
    url: {url}{path}
    caBundle: {ca}
  rules:
  - apiGroups: ["{group}"]
    apiVersions: ["{version}"]
    operations: [{operations}]
    resources: ["{resource}"]
    scope: {scope}
{narrowed}  failurePolicy: Fail
  matchPolicy: Equivalent
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: {timeout_seconds}
"#
        )
    }
}

/// Mutating and validating webhook configurations as a YAML stream. With `own_user` (nac's identity), the tenant
/// webhooks and the guard leave out its requests ([`not_by`]).
pub fn render(
    url: &str,
    ca_pem: &[u8],
    namespace: &str,
    velero_namespace: &str,
    timeout_seconds: u32,
    own_user: Option<&str>,
) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let target = Target {
        url: url.trim_end_matches('/'),
        ca: &ca,
        timeout_seconds,
    };
    let not_nac = |indent: &str| own_user.map(|u| not_by(u, indent)).unwrap_or_default();
    let mut out = String::new();
    out.push_str("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n");
    out.push_str("metadata:\n  name: nac-mutating\n  labels:\n    app.kubernetes.io/name: nac\nwebhooks:\n");
    for (short, plural) in [
        ("nab", "nonadminbackups"),
        ("nar", "nonadminrestores"),
        ("nabsl", "nonadminbackupstoragelocations"),
        ("nas", "nonadminschedules"),
        ("nadr", "nonadmindownloadrequests"),
    ] {
        let conditions = own_user
            .map(|_| format!("  matchConditions:\n{}", not_nac("  ")))
            .unwrap_or_default();
        out.push_str(&target.hook(Hook {
            name: &format!("m{short}.nac.oadp.openshift.io"),
            path: &format!("/mutate/{plural}"),
            group: "oadp.openshift.io",
            version: "v1alpha1",
            operations: r#""CREATE", "UPDATE""#,
            resource: plural,
            scope: "Namespaced",
            narrowed: format!(
                "  namespaceSelector:\n    matchExpressions:\n    - key: kubernetes.io/metadata.name\n      \
                 operator: NotIn\n      values: [\"kube-system\", \"{namespace}\"]\n{conditions}"
            ),
        }));
        out.push_str("  reinvocationPolicy: Never\n");
    }
    out.push_str("---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n");
    out.push_str("metadata:\n  name: nac-validating\n  labels:\n    app.kubernetes.io/name: nac\nwebhooks:\n");
    // The tenant kinds are decided by the mutating call alone (it applies the validating rules to its result):
    // a second call per request costs a third of a create's latency (BENCHMARKS.md §5).
    out.push_str(&target.hook(Hook {
        name: "vpolicy.nac.oadp.openshift.io",
        path: "/validate/policies",
        group: "",
        version: "v1",
        operations: r#""CREATE", "UPDATE""#,
        resource: "configmaps",
        scope: "Namespaced",
        narrowed: format!(
            "{}  objectSelector:\n    matchLabels:\n      {POLICY_LABEL}: \"true\"\n",
            in_namespace(namespace)
        ),
    }));
    out.push_str(&velero_hooks(&target, velero_namespace, own_user));
    out
}

/// The selector of the objects of `namespace` (YAML lines).
fn in_namespace(namespace: &str) -> String {
    format!("  namespaceSelector:\n    matchLabels:\n      kubernetes.io/metadata.name: {namespace}\n")
}

/// The validating hooks in Velero's own path (admission/velero_guard.rs): its unfinished Backups, the
/// VolumeSnapshotContents it creates for a backup, its DeleteBackupRequests.
fn velero_hooks(target: &Target, velero_namespace: &str, own_user: Option<&str>) -> String {
    let not_nac = |indent: &str| own_user.map(|u| not_by(u, indent)).unwrap_or_default();
    let mut out = String::new();
    // Velero's unfinished Backups and PodVolumeBackups, so a tenant's bucket cannot start one (admission/velero_guard.rs);
    // the match condition keeps finished ones (every real sync) from calling nac at all.
    // PodVolumeBackups are served but not registered yet: Velero itself creates unfinished ones for nac's own fs
    // backups, and telling those from synced ones needs a look at their Backup's phase.
    #[allow(clippy::single_element_loop)]
    for kind in [GuardedKind::Backup] {
        out.push_str(&target.hook(Hook {
            name: &format!("v{}.velero.nac.oadp.openshift.io", kind.resource()),
            path: Endpoint::Guard(kind).path(),
            group: "velero.io",
            version: "v1",
            operations: r#""CREATE""#,
            resource: kind.resource(),
            scope: "Namespaced",
            narrowed: format!(
                "{}  matchConditions:\n{}  - name: unfinished\n    expression: \"{}\"\n",
                in_namespace(velero_namespace),
                not_nac("  "),
                kind.match_condition()
            ),
        }));
    }
    // The VolumeSnapshotContents Velero creates for a backup (deleting one of its snapshots, or restoring from
    // one): on a tenant's location only those nac recorded (admission/velero_guard.rs).
    out.push_str(&target.hook(Hook {
        name: "vvolumesnapshotcontents.velero.nac.oadp.openshift.io",
        path: Endpoint::GuardSnapshots.path(),
        group: "snapshot.storage.k8s.io",
        version: "v1",
        operations: r#""CREATE""#,
        resource: "volumesnapshotcontents",
        scope: "Cluster",
        // Velero's label on what it makes for a backup.
        narrowed: format!(
            "  objectSelector:\n    matchExpressions:\n    - key: velero.io/backup-name\n      operator: Exists\n{}",
            own_user
                .map(|_| format!("  matchConditions:\n{}", not_nac("  ")))
                .unwrap_or_default()
        ),
    }));
    // Velero's DeleteBackupRequests, whoever makes them (nac's own too): a backup on a tenant's location is not
    // deleted while Velero has a VolumeSnapshotLocation (admission/velero_guard.rs).
    out.push_str(&target.hook(Hook {
        name: "vdeletebackuprequests.velero.nac.oadp.openshift.io",
        path: Endpoint::GuardDeleteRequests.path(),
        group: "velero.io",
        version: "v1",
        operations: r#""CREATE""#,
        resource: "deletebackuprequests",
        scope: "Namespaced",
        narrowed: in_namespace(velero_namespace),
    }));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_valid_yaml_with_both_configurations() {
        let y = super::render("https://127.0.0.1:9443/", b"PEM", "nac-system", "velero", 5, None);
        let docs: Vec<serde_json::Value> = y.split("---\n").map(|d| serde_yaml::from_str(d).unwrap()).collect();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["webhooks"].as_array().unwrap().len(), 5);
        assert_eq!(docs[1]["webhooks"].as_array().unwrap().len(), 4);
        assert!(
            docs[1]["webhooks"][3].get("matchConditions").is_none(),
            "nac's own requests too"
        );
        let snapshots = &docs[1]["webhooks"][2];
        assert_eq!(snapshots["rules"][0]["resources"][0], "volumesnapshotcontents");
        assert_eq!(
            snapshots["objectSelector"]["matchExpressions"][0],
            serde_json::json!({"key": "velero.io/backup-name", "operator": "Exists"})
        );
        assert!(snapshots.get("matchConditions").is_none());
        assert_eq!(
            docs[1]["webhooks"][1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "velero"
        );
        assert_eq!(
            docs[1]["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate/policies"
        );
        assert_eq!(docs[0]["webhooks"][0]["failurePolicy"], "Fail");
        assert!(docs[0]["webhooks"][0].get("matchConditions").is_none());
    }

    #[test]
    fn nac_s_own_requests_skip_the_tenant_webhooks_and_the_guard_but_not_the_policy_s() {
        let nac = super::service_account_user("nac-system", "nac");
        let y = super::render("https://127.0.0.1:9443", b"PEM", "nac-system", "velero", 5, Some(&nac));
        let docs: Vec<serde_json::Value> = y.split("---\n").map(|d| serde_yaml::from_str(d).unwrap()).collect();
        let not_nac = serde_json::json!({
            "name": "not-by-nac",
            "expression": "request.userInfo.username != 'system:serviceaccount:nac-system:nac'"
        });
        for hook in docs[0]["webhooks"].as_array().unwrap() {
            assert_eq!(
                hook["matchConditions"],
                serde_json::json!([not_nac]),
                "{}",
                hook["name"]
            );
        }
        let guard = &docs[1]["webhooks"][1];
        assert_eq!(guard["matchConditions"][0], not_nac);
        assert_eq!(guard["matchConditions"][1]["name"], "unfinished");
        assert_eq!(docs[1]["webhooks"][2]["matchConditions"], serde_json::json!([not_nac]));
        // nac never writes the policy: its webhook is everyone's.
        assert!(docs[1]["webhooks"][0].get("matchConditions").is_none());
    }
}
