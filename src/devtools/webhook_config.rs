//! Webhook registrations that call nac by URL (local runs and end-to-end tests; the Helm chart renders its own,
//! pointing at the Service).

use base64::Engine;
use nac::admission::{Endpoint, GuardedKind};

/// Label that marks the policy ConfigMap, so the policy webhook's objectSelector sees only it.
pub const POLICY_LABEL: &str = "nac.oadp.openshift.io/policy";

/// Mutating and validating webhook configurations as a YAML stream.
pub fn render(url: &str, ca_pem: &[u8], namespace: &str, velero_namespace: &str, timeout_seconds: u32) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let url = url.trim_end_matches('/');
    let proxy_hook = |name: &str, path: &str, resource: &str| {
        format!(
            r#"- name: {name}
  clientConfig:
    url: {url}{path}
    caBundle: {ca}
  rules:
  - apiGroups: ["oadp.openshift.io"]
    apiVersions: ["v1alpha1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["{resource}"]
    scope: Namespaced
  namespaceSelector:
    matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: ["kube-system", "{namespace}"]
  failurePolicy: Fail
  matchPolicy: Equivalent
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: {timeout_seconds}
"#
        )
    };
    let mut out = String::new();
    out.push_str("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n");
    out.push_str("metadata:\n  name: nac-mutating\n  labels:\n    app.kubernetes.io/name: nac\nwebhooks:\n");
    out.push_str(&proxy_hook(
        "mnab.nac.oadp.openshift.io",
        "/mutate/nonadminbackups",
        "nonadminbackups",
    ));
    out.push_str("  reinvocationPolicy: Never\n");
    out.push_str(&proxy_hook(
        "mnar.nac.oadp.openshift.io",
        "/mutate/nonadminrestores",
        "nonadminrestores",
    ));
    out.push_str("  reinvocationPolicy: Never\n");
    out.push_str(&proxy_hook(
        "mnabsl.nac.oadp.openshift.io",
        "/mutate/nonadminbackupstoragelocations",
        "nonadminbackupstoragelocations",
    ));
    out.push_str("  reinvocationPolicy: Never\n");
    out.push_str(&proxy_hook(
        "mnas.nac.oadp.openshift.io",
        "/mutate/nonadminschedules",
        "nonadminschedules",
    ));
    out.push_str("  reinvocationPolicy: Never\n");
    out.push_str("---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n");
    out.push_str("metadata:\n  name: nac-validating\n  labels:\n    app.kubernetes.io/name: nac\nwebhooks:\n");
    // The tenant kinds are decided by the mutating call alone (it applies the validating rules to its result):
    // a second call per request costs a third of a create's latency (BENCHMARKS.md §5).
    out.push_str(&format!(
        r#"- name: vpolicy.nac.oadp.openshift.io
  clientConfig:
    url: {url}/validate/policies
    caBundle: {ca}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["configmaps"]
    scope: Namespaced
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {namespace}
  objectSelector:
    matchLabels:
      {POLICY_LABEL}: "true"
  failurePolicy: Fail
  matchPolicy: Equivalent
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: {timeout_seconds}
"#
    ));
    // Velero's unfinished Backups and PodVolumeBackups, so a tenant's bucket cannot start one (admission/velero_guard.rs);
    // the match condition keeps finished ones (every real sync) from calling nac at all.
    // PodVolumeBackups are served but not registered yet: Velero itself creates unfinished ones for nac's own fs
    // backups, and telling those from synced ones needs a look at their Backup's phase.
    #[allow(clippy::single_element_loop)]
    for kind in [GuardedKind::Backup] {
        out.push_str(&format!(
            r#"- name: v{resource}.velero.nac.oadp.openshift.io
  clientConfig:
    url: {url}{path}
    caBundle: {ca}
  rules:
  - apiGroups: ["velero.io"]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["{resource}"]
    scope: Namespaced
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {velero_namespace}
  matchConditions:
  - name: unfinished
    expression: "{condition}"
  failurePolicy: Fail
  matchPolicy: Equivalent
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: {timeout_seconds}
"#,
            resource = kind.resource(),
            path = Endpoint::Guard(kind).path(),
            condition = kind.match_condition(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_valid_yaml_with_both_configurations() {
        let y = super::render("https://127.0.0.1:9443/", b"PEM", "nac-system", "velero", 5);
        let docs: Vec<serde_json::Value> = y.split("---\n").map(|d| serde_yaml::from_str(d).unwrap()).collect();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["webhooks"].as_array().unwrap().len(), 4);
        assert_eq!(docs[1]["webhooks"].as_array().unwrap().len(), 2);
        assert_eq!(
            docs[1]["webhooks"][1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "velero"
        );
        assert_eq!(
            docs[1]["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate/policies"
        );
        assert_eq!(docs[0]["webhooks"][0]["failurePolicy"], "Fail");
    }
}
