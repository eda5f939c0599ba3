//! A copy of a namespace's backup restored into another namespace its user owns: a NonAdminRestore in namespace
//! A with `namespaceMapping: {A: B}`. The mapping is the whole risk (Velero creates what the backup holds in B with
//! its own rights), so it is judged here for both namespaces: its shape, the policy of A and of B
//! (`restore.allowNamespaceCopies`, each namespace under its own tier), and B itself (it must exist, and be no system
//! namespace nor one nac leaves out). The requester's rights in B are asked by the caller (`crate::rights`).

use super::Policy;
use serde_json::{Map, Value};

/// The policy setting that opens copies, in the base or a tier.
pub const COPY_SETTING: &str = "restore.allowNamespaceCopies";
const FIELD: &str = "spec.restoreSpec.namespaceMapping";

/// The namespace a NonAdminRestore in `namespace` copies into: `Ok(None)` without a mapping. `Err` is the refusal
/// of a mapping of another shape than `{<its own namespace>: <another namespace>}`.
pub fn target(spec: &Map<String, Value>, namespace: &str) -> Result<Option<String>, String> {
    let mapping = match spec.get("namespaceMapping") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) if m.is_empty() => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(other) => return Err(format!("NonAdminRestore {FIELD} must be a map (got {other})")),
    };
    let shape = || {
        format!(
            "NonAdminRestore {FIELD} may only map the restore's own namespace to one other namespace \
             ({{{namespace}: <namespace>}}; got {})",
            Value::Object(mapping.clone())
        )
    };
    let [(from, to)] = mapping.iter().collect::<Vec<_>>()[..] else {
        return Err(shape());
    };
    let Some(to) = to.as_str() else {
        return Err(shape());
    };
    if from != namespace {
        return Err(shape());
    }
    if to == namespace {
        return Err(format!(
            "NonAdminRestore {FIELD} maps namespace {namespace} to itself: leave namespaceMapping out"
        ));
    }
    if !is_dns_label(to) {
        return Err(format!(
            "NonAdminRestore {FIELD} names {to:?}, which is not a namespace name"
        ));
    }
    Ok(Some(to.to_string()))
}

/// The refusal of a copy under the source namespace's policy, when it does not open copies.
pub fn source_refusal(policy: &Policy, namespace: &str, target: &str) -> Option<String> {
    (!policy.restore.allow_namespace_copies).then(|| {
        format!(
            "NonAdminRestore {FIELD} is restricted: copies from namespace {namespace} into {target} are off \
             ({COPY_SETTING}: false, set by {})",
            policy.by()
        )
    })
}

/// What nac knows of a copy's target namespace.
pub struct Target<'a> {
    pub name: &'a str,
    /// Whether the namespace exists (nac's watch of namespaces shows it).
    pub exists: bool,
    /// The policy of objects in it (its tier's, else the base); `None` when nac cannot tell which applies.
    pub policy: Option<&'a Policy>,
    /// Namespaces never written by a copy: Velero's, nac's, and those nac's webhooks leave out.
    pub protected: &'a [String],
}

/// The refusal of a copy into `t`, when it may not receive one. Pure: the caller gathers `t` from its caches.
pub fn target_refusal(t: &Target<'_>) -> Option<String> {
    let name = t.name;
    let refused = |why: String| Some(format!("NonAdminRestore {FIELD} is restricted: {why}"));
    if is_system(name) {
        return refused(format!(
            "{name} is a system namespace; copies go only into tenants' namespaces"
        ));
    }
    if t.protected.iter().any(|p| p == name) {
        return refused(format!(
            "namespace {name} is Velero's, nac's, or one nac's webhooks leave out; copies go only into tenants' \
             namespaces"
        ));
    }
    if !t.exists {
        return refused(format!(
            "namespace {name} does not exist; a copy goes only into a namespace that exists (Velero would create it \
             with the backup's namespace labels)"
        ));
    }
    match t.policy {
        None => refused(format!(
            "nac cannot tell which policy applies to namespace {name} yet; retry"
        )),
        Some(p) if !p.restore.allow_namespace_copies => refused(format!(
            "namespace {name} does not take copies ({COPY_SETTING}: false, set by {} for {name})",
            p.by()
        )),
        Some(_) => None,
    }
}

/// Namespaces Kubernetes and OpenShift keep for themselves.
pub fn is_system(name: &str) -> bool {
    name == "default" || name == "openshift" || name.starts_with("kube-") || name.starts_with("openshift-")
}

/// A DNS-1123 label, as namespace names are: an object name of one part, at most 63 characters.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && crate::naming::is_object_name(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::wire::object as spec;

    #[test]
    fn only_the_own_namespace_maps_to_one_other() {
        assert_eq!(target(&spec(json!({})), "a"), Ok(None));
        assert_eq!(target(&spec(json!({"namespaceMapping": {}})), "a"), Ok(None));
        assert_eq!(
            target(&spec(json!({"namespaceMapping": {"a": "b"}})), "a"),
            Ok(Some("b".into()))
        );
        for bad in [
            json!({"b": "c"}),
            json!({"a": "b", "c": "d"}),
            json!({"a": 1}),
            json!(["a", "b"]),
            json!({"a": "a"}),
            json!({"a": "B_"}),
            json!({"a": "x".repeat(64)}),
            json!({"a": "b.c"}),
            json!({"a": "-b"}),
        ] {
            let e = target(&spec(json!({ "namespaceMapping": bad })), "a").unwrap_err();
            assert!(e.contains("spec.restoreSpec.namespaceMapping"), "{e}");
        }
    }

    #[test]
    fn a_copy_needs_both_namespaces_to_allow_it_and_an_existing_tenant_target() {
        let mut open = Policy::default();
        open.restore.allow_namespace_copies = true;
        let closed = Policy::default();
        assert!(source_refusal(&open, "a", "b").is_none());
        let e = source_refusal(&closed, "a", "b").unwrap();
        assert!(
            e.contains("restore.allowNamespaceCopies: false") && e.contains("cluster policy"),
            "{e}"
        );
        let protected = vec!["velero".to_string(), "nac-system".to_string()];
        let t = |name, exists, policy| Target {
            name,
            exists,
            policy,
            protected: &protected,
        };
        assert_eq!(target_refusal(&t("b", true, Some(&open))), None);
        for (target, why) in [
            (t("kube-system", true, Some(&open)), "system namespace"),
            (t("default", true, Some(&open)), "system namespace"),
            (t("openshift-config", true, Some(&open)), "system namespace"),
            (t("velero", true, Some(&open)), "webhooks leave out"),
            (t("nac-system", true, Some(&open)), "webhooks leave out"),
            (t("b", false, Some(&open)), "does not exist"),
            (t("b", true, None), "cannot tell"),
            (t("b", true, Some(&closed)), "does not take copies"),
        ] {
            let e = target_refusal(&target).unwrap();
            assert!(e.contains(why), "{}: {e}", target.name);
        }
    }
}
