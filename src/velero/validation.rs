//! What Velero refuses in a BackupSpec before it backs up anything: the checks of Velero 1.18's backup controller
//! that read the spec alone (its `prepareBackupRequest`: resource and namespace filters, label selectors).
//!
//! Why nac repeats them: a Backup that fails validation ends the moment Velero dequeues it, and Velero 1.18.3 can
//! then lose count of it and start no other backup until it restarts (velero-io/velero#10519). Every tenant shares
//! that queue, so a spec Velero would refuse is refused by nac, at `kubectl apply` and again before a Velero Backup
//! is made. The checks compare strings as Velero does (`configmap` and `configmaps` are different items here; Velero
//! resolves them later, exclusions winning).

use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Velero's old-style resource filters (a spec uses these or the new ones, never both).
const OLD_FILTERS: [&str; 3] = ["includedResources", "excludedResources", "includeClusterResources"];
/// Velero's new-style resource filters.
const NEW_FILTERS: [&str; 4] = [
    "includedNamespaceScopedResources",
    "excludedNamespaceScopedResources",
    "includedClusterScopedResources",
    "excludedClusterScopedResources",
];

/// One thing Velero would refuse: the BackupSpec field it is about, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub field: &'static str,
    pub detail: String,
}

fn list(spec: &Map<String, Value>, field: &str) -> Vec<String> {
    spec.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether `field` is set as Velero's Go types see it: a non-empty list, or any other value but null.
fn set(spec: &Map<String, Value>, field: &str) -> bool {
    match spec.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

fn shown(items: &BTreeSet<String>) -> String {
    serde_json::to_string(items).unwrap_or_default()
}

/// An include list and its exclude list. `scoped`: the new-style rules (an exclude of `*` alone is allowed, and
/// then nothing may be included); otherwise the old ones (no `*` in excludes). `all_when_empty`: no includes mean
/// `*` (Velero's reading of namespaces).
fn includes_excludes(
    spec: &Map<String, Value>,
    (inc_field, exc_field): (&'static str, &'static str),
    scoped: bool,
    all_when_empty: bool,
    out: &mut Vec<Problem>,
) {
    let mut inc: BTreeSet<String> = list(spec, inc_field).into_iter().collect();
    if all_when_empty && inc.is_empty() {
        inc.insert("*".into());
    }
    let exc: BTreeSet<String> = list(spec, exc_field).into_iter().collect();
    if inc.len() > 1 && inc.contains("*") {
        out.push(Problem {
            field: inc_field,
            detail: format!("must be [\"*\"] alone or a list without \"*\" (got {})", shown(&inc)),
        });
    }
    if scoped {
        if exc.len() > 1 && exc.contains("*") {
            out.push(Problem {
                field: exc_field,
                detail: format!("must be [\"*\"] alone or a list without \"*\" (got {})", shown(&exc)),
            });
        }
        if !inc.is_empty() && exc.contains("*") {
            out.push(Problem {
                field: inc_field,
                detail: format!("must be empty when {exc_field} holds \"*\" (got {})", shown(&inc)),
            });
        }
    } else if exc.contains("*") {
        out.push(Problem {
            field: exc_field,
            detail: format!("cannot hold \"*\" (got {})", shown(&exc)),
        });
    }
    for both in exc.intersection(&inc) {
        out.push(Problem {
            field: exc_field,
            detail: format!("cannot hold {both:?}, which {inc_field} holds too"),
        });
    }
}

/// What Velero 1.18 would refuse in `spec` (a BackupSpec as JSON), in Velero's order; empty when nothing.
pub fn backup_spec_problems(spec: &Map<String, Value>) -> Vec<Problem> {
    let mut out = Vec::new();
    let old: Vec<&str> = OLD_FILTERS.into_iter().filter(|f| set(spec, f)).collect();
    let new: Vec<&str> = NEW_FILTERS.into_iter().filter(|f| set(spec, f)).collect();
    if let (Some(first_new), false) = (new.first(), old.is_empty()) {
        out.push(Problem {
            field: first_new,
            detail: format!(
                "cannot be used with {} (Velero takes either includedResources, excludedResources and \
                 includeClusterResources, or the namespace- and cluster-scoped filters, not both)",
                old.join(", ")
            ),
        });
    }
    if !old.is_empty() {
        includes_excludes(spec, ("includedResources", "excludedResources"), false, false, &mut out);
    } else {
        includes_excludes(
            spec,
            ("includedClusterScopedResources", "excludedClusterScopedResources"),
            true,
            false,
            &mut out,
        );
        includes_excludes(
            spec,
            ("includedNamespaceScopedResources", "excludedNamespaceScopedResources"),
            true,
            false,
            &mut out,
        );
    }
    // Namespaces: Velero reads no includes as all of them.
    includes_excludes(
        spec,
        ("includedNamespaces", "excludedNamespaces"),
        false,
        true,
        &mut out,
    );
    if set(spec, "labelSelector") && set(spec, "orLabelSelectors") {
        out.push(Problem {
            field: "orLabelSelectors",
            detail: "cannot be used with labelSelector: Velero takes one or the other".into(),
        });
    }
    out
}

/// The message of one problem, for the BackupSpec at `path` of a `kind` (`NonAdminBackup spec.backupSpec`).
pub fn message(kind: &str, path: &str, p: &Problem) -> String {
    format!(
        "{kind} {path}.{} {}: Velero fails such a backup at validation",
        p.field, p.detail
    )
}

/// All problems as one message (the reconciler's refusal), or `Ok` when Velero would accept the spec.
pub fn check(kind: &str, path: &str, spec: &Map<String, Value>) -> Result<(), String> {
    let problems = backup_spec_problems(spec);
    if problems.is_empty() {
        return Ok(());
    }
    Err(problems
        .iter()
        .map(|p| message(kind, path, p))
        .collect::<Vec<_>>()
        .join("; "))
}

/// Takes out of a spec's include lists the items nac also excludes there (exact strings, as Velero compares them),
/// so that nac's own exclusions never make a spec Velero refuses: included and excluded, an item is left out
/// either way. An include list that would be left empty (which Velero reads as everything) is kept as it is, and
/// [`backup_spec_problems`] then names the overlap.
pub fn drop_excluded_from_includes(spec: &mut Map<String, Value>) {
    for (inc, exc) in [
        ("includedResources", "excludedResources"),
        ("includedNamespaceScopedResources", "excludedNamespaceScopedResources"),
        ("includedClusterScopedResources", "excludedClusterScopedResources"),
    ] {
        let excluded = list(spec, exc);
        let included = list(spec, inc);
        let kept: Vec<String> = included.iter().filter(|i| !excluded.contains(i)).cloned().collect();
        if !kept.is_empty() && kept.len() < included.len() {
            spec.insert(inc.into(), Value::from(kept));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(v: Value) -> Vec<(&'static str, String)> {
        let Value::Object(m) = v else { unreachable!() };
        backup_spec_problems(&m)
            .into_iter()
            .map(|p| (p.field, p.detail))
            .collect()
    }

    #[test]
    fn specs_velero_accepts_pass() {
        for ok in [
            json!({}),
            json!({"includedNamespaces": ["team-a"], "includedResources": ["*"], "excludedResources": ["secrets"]}),
            json!({"includedNamespaceScopedResources": ["*"], "excludedNamespaceScopedResources": ["secrets"]}),
            // New style: excluding everything namespaced is allowed with nothing included.
            json!({"excludedNamespaceScopedResources": ["*"], "excludedClusterScopedResources": ["*"]}),
            json!({"includeClusterResources": false, "includedResources": ["pods"]}),
            json!({"labelSelector": {"matchLabels": {"a": "b"}}, "orLabelSelectors": null}),
            // Duplicates are one item to Velero.
            json!({"includedResources": ["*", "*"]}),
            // Velero compares strings: these overlap only once resolved, which Velero allows.
            json!({"includedResources": ["configmap"], "excludedResources": ["configmaps"]}),
        ] {
            assert_eq!(problems(ok.clone()), vec![], "{ok}");
        }
    }

    #[test]
    fn what_velero_fails_at_validation_is_named_by_field() {
        let cases = [
            (
                json!({"includedResources": ["configmaps"], "excludedResources": ["configmaps"]}),
                vec!["excludedResources"],
            ),
            (json!({"includedResources": ["*", "pods"]}), vec!["includedResources"]),
            (json!({"excludedResources": ["*"]}), vec!["excludedResources"]),
            (
                json!({"includeClusterResources": false, "includedNamespaceScopedResources": ["pods"]}),
                vec!["includedNamespaceScopedResources"],
            ),
            (
                json!({"excludedNamespaceScopedResources": ["*", "pods"]}),
                vec!["excludedNamespaceScopedResources"],
            ),
            (
                json!({"includedNamespaceScopedResources": ["pods"], "excludedNamespaceScopedResources": ["*"]}),
                vec!["includedNamespaceScopedResources"],
            ),
            (
                json!({"includedNamespaces": ["a"], "excludedNamespaces": ["a"]}),
                vec!["excludedNamespaces"],
            ),
            // No includes is all namespaces ("*"), which then is both excluded and included: two, as Velero says.
            (
                json!({"excludedNamespaces": ["*"]}),
                vec!["excludedNamespaces", "excludedNamespaces"],
            ),
            (
                json!({"labelSelector": {}, "orLabelSelectors": [{"matchLabels": {"a": "b"}}]}),
                vec!["orLabelSelectors"],
            ),
        ];
        for (spec, fields) in cases {
            let got: Vec<&str> = problems(spec.clone()).into_iter().map(|p| p.0).collect();
            assert_eq!(got, fields, "{spec}");
        }
        let (_, detail) =
            &problems(json!({"includedResources": ["configmaps"], "excludedResources": ["configmaps"]}))[0];
        assert_eq!(detail, "cannot hold \"configmaps\", which includedResources holds too");
    }

    #[test]
    fn nac_exclusions_leave_an_include_list_velero_accepts() {
        let mut spec =
            json!({"includedResources": ["pods", "nonadminbackups"], "excludedResources": ["nonadminbackups"]});
        let m = spec.as_object_mut().unwrap();
        drop_excluded_from_includes(m);
        assert_eq!(m["includedResources"], json!(["pods"]));
        assert!(backup_spec_problems(m).is_empty());
        // Left empty, the list would mean every kind: kept, and the overlap named.
        let mut only = json!({"includedResources": ["nonadminbackups"], "excludedResources": ["nonadminbackups"]});
        let m = only.as_object_mut().unwrap();
        drop_excluded_from_includes(m);
        assert_eq!(m["includedResources"], json!(["nonadminbackups"]));
        assert_eq!(backup_spec_problems(m).len(), 1);
    }
}
