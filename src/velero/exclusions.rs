//! What every Velero object nac builds for a tenant carries: the kinds no tenant backup or restore may include.
//! The objects themselves are built by each tenant kind's own file (`controller/kinds/`).

use serde_json::{Map, Value};

/// Namespaced kinds never included in a tenant's backup or restore: nac's own objects. A restored one would act
/// again (a download request asks for a URL long expired) or stand for what nac makes anew.
pub const EXCLUDED_NAMESPACED_RESOURCES: &[&str] = &[
    "nonadminbackups",
    "nonadminrestores",
    "nonadminbackupstoragelocations",
    "nonadminschedules",
    "nonadmindownloadrequests",
];
/// Cluster-scoped kinds never included in a tenant's backup or restore: cluster security objects.
pub const EXCLUDED_CLUSTER_RESOURCES: &[&str] = &[
    "securitycontextconstraints",
    "clusterroles",
    "clusterrolebindings",
    "priorityclasses",
    "customresourcedefinitions",
];

/// Velero's new-style resource filters; Velero refuses a spec mixing them with `excludedResources`.
const NEW_STYLE_FILTERS: &[&str] = &[
    "includedClusterScopedResources",
    "excludedClusterScopedResources",
    "includedNamespaceScopedResources",
    "excludedNamespaceScopedResources",
];

fn append_unique(spec: &mut Map<String, Value>, field: &str, items: &[&str]) {
    // A list holding "*" already excludes everything (new style); Velero refuses "*" beside other items.
    if spec
        .get(field)
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|v| v.as_str() == Some("*")))
    {
        return;
    }
    let list = spec
        .entry(field.to_string())
        .and_modify(|v| {
            if !v.is_array() {
                *v = Value::Array(Vec::new());
            }
        })
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(list) = list else {
        unreachable!("made an array above")
    };
    for item in items {
        if !list.iter().any(|v| v.as_str() == Some(item)) {
            list.push(Value::String((*item).to_string()));
        }
    }
}

/// Adds the kinds no tenant backup may carry: into the new-style `excluded*ScopedResources` when the spec uses
/// new-style filters, otherwise into `excludedResources`.
pub fn add_backup_exclusions(spec: &mut Map<String, Value>) {
    let new_style = NEW_STYLE_FILTERS
        .iter()
        .any(|f| spec.get(*f).and_then(Value::as_array).is_some_and(|a| !a.is_empty()));
    if new_style {
        append_unique(spec, "excludedNamespaceScopedResources", EXCLUDED_NAMESPACED_RESOURCES);
        append_unique(spec, "excludedClusterScopedResources", EXCLUDED_CLUSTER_RESOURCES);
    } else {
        append_unique(spec, "excludedResources", EXCLUDED_NAMESPACED_RESOURCES);
        append_unique(spec, "excludedResources", EXCLUDED_CLUSTER_RESOURCES);
    }
    super::validation::drop_excluded_from_includes(spec);
}

/// Whether a tenant's include list names only kinds nac leaves out of every tenant backup (as nac adds them,
/// exact strings): the backup would hold none of what it asks for. Returns the list's field.
pub fn includes_only_excluded(spec: &Map<String, Value>) -> Option<&'static str> {
    ["includedResources", "includedNamespaceScopedResources"]
        .into_iter()
        .find(|f| {
            let items: Vec<&str> = spec
                .get(*f)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            !items.is_empty()
                && items
                    .iter()
                    .all(|i| EXCLUDED_NAMESPACED_RESOURCES.contains(i) || EXCLUDED_CLUSTER_RESOURCES.contains(i))
        })
}

/// Adds the same kinds to a restore (restores only have `excludedResources`).
pub fn add_restore_exclusions(spec: &mut Map<String, Value>) {
    append_unique(spec, "excludedResources", EXCLUDED_NAMESPACED_RESOURCES);
    append_unique(spec, "excludedResources", EXCLUDED_CLUSTER_RESOURCES);
}

pub fn to_map<T: serde::Serialize>(value: &T) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NonAdminBackup;
    use crate::naming::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn exclusions_are_not_duplicated() {
        let mut spec = Map::new();
        add_backup_exclusions(&mut spec);
        add_backup_exclusions(&mut spec);
        let n = spec["excludedResources"].as_array().unwrap().len();
        assert_eq!(
            n,
            EXCLUDED_NAMESPACED_RESOURCES.len() + EXCLUDED_CLUSTER_RESOURCES.len()
        );
    }

    #[test]
    fn objects_without_nac_metadata_map_to_nothing() {
        assert_eq!(NAB.owner::<NonAdminBackup>(&ObjectMeta::default()), None);
        let mut m = ObjectMeta {
            annotations: Some(labels(&[
                (NAB_ORIGIN_NAME_ANNOTATION, "n"),
                (NAB_ORIGIN_NAMESPACE_ANNOTATION, "ns"),
            ])),
            ..Default::default()
        };
        assert_eq!(
            NAB.owner::<NonAdminBackup>(&m),
            None,
            "the identity label is required too"
        );
        m.labels = Some(labels(&[(NAB_ORIGIN_NACUUID_LABEL, "x")]));
        assert!(NAB.owner::<NonAdminBackup>(&m).is_some());
        assert!(NAB.owns(&m, "ns", "n"));
        assert!(!NAB.owns(&m, "other", "n"));
        assert!(!NAR.owns(&m, "ns", "n"));
    }
}
