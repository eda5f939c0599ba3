//! A restore's preview table: what a restore would do with each kind the backup holds in the namespace, judged as
//! the restore itself is (the spec's and the policy's filters, nac's exclusions, the requester's rights) and
//! compared with what the namespace holds now. Pure: the backup's contents, the decision and the namespace's
//! names in, the table out.

use super::contents::Contents;
use super::restore::{RestoreRights, NON_RESTORABLE};
use super::{backup_kinds, Kind};
use crate::api::{PreviewItems, PreviewKind};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Names shown of each part of a kind's row (the rest are counted).
pub const PREVIEW_NAMES: usize = 5;

/// The annotation marking a NonAdminRestore as a preview (`"true"`): judged, never made.
pub const PREVIEW_ANNOTATION: &str = "nac.oadp.openshift.io/preview";

/// Whether annotations mark a preview.
pub fn is_preview(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(PREVIEW_ANNOTATION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// One filter of the restore and who set it: a kind it does not select is left out for `who`.
pub struct Stage<'a> {
    pub who: &'a str,
    pub spec: &'a Map<String, Value>,
}

impl<'a> Stage<'a> {
    pub fn new(who: &'a str, spec: &'a Map<String, Value>) -> Self {
        Stage { who, spec }
    }
}

/// What the namespace holds now of a kind: its names, or why they could not be listed.
pub type Existing = Result<BTreeSet<String>, String>;

/// The table. `stages` in the order they apply (the spec as written, the policy's, the spec Velero gets): the
/// first that leaves a kind out names the reason. `rights` is the requester's rights decision (none when the
/// policy does not check rights); `existing` what the namespace holds of each kind the restore would write (by
/// filter name); `update` whether existing objects would be updated rather than skipped.
pub fn table(
    contents: &Contents,
    kinds: &[Kind],
    stages: &[Stage<'_>],
    rights: Option<&RestoreRights>,
    existing: &BTreeMap<String, Existing>,
    update: bool,
) -> Vec<PreviewKind> {
    let mut rows = Vec::new();
    for ((group, resource), names) in &contents.names {
        let kind = kinds.iter().find(|k| &k.group == group && &k.resource == resource);
        let filter = kind.map(Kind::filter_name).unwrap_or_else(|| {
            if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            }
        });
        let mut row = PreviewKind {
            kind: filter.clone(),
            ..Default::default()
        };
        match left_out(kind, &filter, stages, rights) {
            Some(reason) => {
                row.left_out = items(names.iter());
                row.reason = Some(reason);
            }
            None => match existing.get(&filter) {
                Some(Ok(now)) => {
                    row.create = items(names.iter().filter(|n| !now.contains(*n)));
                    let there = items(names.iter().filter(|n| now.contains(*n)));
                    if update {
                        row.update = there;
                    } else {
                        row.skip = there;
                    }
                }
                Some(Err(why)) => {
                    row.create = items(names.iter());
                    row.reason = Some(format!(
                        "what the namespace holds now could not be listed ({why}): every item is counted as created"
                    ));
                }
                None => row.create = items(names.iter()),
            },
        }
        rows.push(row);
    }
    rows
}

/// Why a kind is left out, or `None` when the restore would write it.
fn left_out(kind: Option<&Kind>, filter: &str, stages: &[Stage<'_>], rights: Option<&RestoreRights>) -> Option<String> {
    let Some(kind) = kind else {
        return Some("the cluster does not serve this kind: Velero cannot restore it".into());
    };
    if NON_RESTORABLE.contains(&filter) {
        return Some("Velero never restores this kind".into());
    }
    let one = std::slice::from_ref(kind);
    if let Some(s) = stages.iter().find(|s| backup_kinds(s.spec, one).is_empty()) {
        return Some(format!("left out by {}", s.who));
    }
    let rights = rights?;
    if rights.included.iter().any(|k| k == filter) {
        return None;
    }
    let mine: Vec<&str> = rights
        .reasons
        .iter()
        .filter(|r| mentions(r, filter))
        .map(String::as_str)
        .collect();
    let why = if mine.is_empty() {
        rights.reasons.join("; ")
    } else {
        mine.join("; ")
    };
    Some(format!("{why} (policy rights.restore: {})", rights.mode))
}

/// Whether `reason` names the kind `filter` as a word (`secrets`, not `secretsfoo`).
fn mentions(reason: &str, filter: &str) -> bool {
    reason
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        .any(|w| w.trim_end_matches('.') == filter)
}

/// The count and the first [`PREVIEW_NAMES`] names of `names`; `None` when there are none.
fn items<'a>(names: impl Iterator<Item = &'a String>) -> Option<PreviewItems> {
    let mut out = PreviewItems::default();
    for n in names {
        out.count += 1;
        if out.names.len() < PREVIEW_NAMES {
            out.names.push(n.clone());
        }
    }
    (out.count > 0).then_some(out)
}

/// The table's totals: (created, skipped, updated, left out).
pub fn totals(rows: &[PreviewKind]) -> [i64; 4] {
    let n = |i: &Option<PreviewItems>| i.as_ref().map_or(0, |i| i.count);
    rows.iter().fold([0; 4], |t, r| {
        [
            t[0] + n(&r.create),
            t[1] + n(&r.skip),
            t[2] + n(&r.update),
            t[3] + n(&r.left_out),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rights::RightsMode;
    use serde_json::json;

    fn contents(items: &[(&str, &str, &[&str])]) -> Contents {
        let mut c = Contents::default();
        for (g, r, names) in items {
            let key = (g.to_string(), r.to_string());
            c.kinds.insert(key.clone());
            c.names.insert(key, names.iter().map(|n| n.to_string()).collect());
        }
        c
    }

    fn kinds() -> Vec<Kind> {
        vec![
            Kind::new("", "configmaps", "ConfigMap", &["cm"]),
            Kind::new("", "secrets", "Secret", &[]),
            Kind::new("apps", "deployments", "Deployment", &["deploy"]),
            Kind::new("", "events", "Event", &["ev"]),
        ]
    }

    use crate::wire::object as map;

    fn names(i: &Option<PreviewItems>) -> (i64, Vec<&str>) {
        i.as_ref()
            .map(|i| (i.count, i.names.iter().map(String::as_str).collect()))
            .unwrap_or((0, vec![]))
    }

    #[test]
    fn items_are_created_skipped_or_updated_by_what_the_namespace_holds_now() {
        let c = contents(&[("", "configmaps", &["a", "b", "c"]), ("apps", "deployments", &["web"])]);
        let empty = map(json!({}));
        let stages = [Stage::new("spec.restoreSpec", &empty)];
        let existing = BTreeMap::from([
            ("configmaps".to_string(), Ok(BTreeSet::from(["b".to_string()]))),
            ("deployments.apps".to_string(), Ok(BTreeSet::new())),
        ]);
        let rows = table(&c, &kinds(), &stages, None, &existing, false);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].kind, "configmaps");
        assert_eq!(names(&rows[0].create), (2, vec!["a", "c"]));
        assert_eq!(names(&rows[0].skip), (1, vec!["b"]));
        assert_eq!(rows[0].update, None);
        assert_eq!(rows[1].kind, "deployments.apps");
        assert_eq!(names(&rows[1].create), (1, vec!["web"]));
        assert_eq!(totals(&rows), [3, 1, 0, 0]);
        let updated = table(&c, &kinds(), &stages, None, &existing, true);
        assert_eq!(names(&updated[0].update), (1, vec!["b"]));
        assert_eq!(updated[0].skip, None);
        assert_eq!(totals(&updated), [3, 0, 1, 0]);
    }

    #[test]
    fn a_kind_left_out_names_the_first_rule_that_leaves_it_out() {
        let c = contents(&[
            ("", "configmaps", &["a"]),
            ("", "secrets", &["s1", "s2"]),
            ("apps", "deployments", &["web"]),
            ("", "events", &["e"]),
            ("example.com", "widgets", &["w"]),
        ]);
        let user = map(json!({"excludedResources": ["deployments"]}));
        let policy = map(json!({"excludedResources": ["deployments", "secrets"]}));
        let stages = [
            Stage::new("spec.restoreSpec", &user),
            Stage::new("the policy's restore rules", &policy),
        ];
        let rows = table(&c, &kinds(), &stages, None, &BTreeMap::new(), false);
        let row = |k: &str| rows.iter().find(|r| r.kind == k).unwrap();
        assert_eq!(
            row("deployments.apps").reason.as_deref(),
            Some("left out by spec.restoreSpec")
        );
        assert_eq!(
            row("secrets").reason.as_deref(),
            Some("left out by the policy's restore rules")
        );
        assert_eq!(names(&row("secrets").left_out), (2, vec!["s1", "s2"]));
        assert_eq!(row("events").reason.as_deref(), Some("Velero never restores this kind"));
        assert!(row("widgets.example.com")
            .reason
            .as_deref()
            .unwrap()
            .contains("does not serve"));
        assert_eq!(names(&row("configmaps").create), (1, vec!["a"]));
        assert_eq!(totals(&rows), [1, 0, 0, 5]);
    }

    #[test]
    fn a_kind_outside_the_requesters_rights_names_the_missing_right() {
        let c = contents(&[("", "configmaps", &["a"]), ("", "secrets", &["s"])]);
        let empty = map(json!({}));
        let stages = [Stage::new("spec.restoreSpec", &empty)];
        let rights = RestoreRights {
            mode: RightsMode::Exclude,
            requester: "alice".into(),
            excluded: vec!["secrets".into()],
            reasons: vec![
                "alice may not create secrets".into(),
                "alice may not create secretsfoo".into(),
            ],
            included: vec!["configmaps".into()],
            ..Default::default()
        };
        let rows = table(&c, &kinds(), &stages, Some(&rights), &BTreeMap::new(), false);
        assert_eq!(
            rows[1].reason.as_deref(),
            Some("alice may not create secrets (policy rights.restore: exclude)")
        );
        assert_eq!(names(&rows[1].left_out), (1, vec!["s"]));
        assert_eq!(names(&rows[0].create), (1, vec!["a"]));
    }

    #[test]
    fn only_the_first_names_are_kept_and_all_are_counted() {
        let many: Vec<String> = (0..12).map(|i| format!("cm-{i:02}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let c = contents(&[("", "configmaps", &refs)]);
        let existing = BTreeMap::from([("configmaps".to_string(), Err("forbidden".to_string()))]);
        let rows = table(&c, &kinds(), &[], None, &existing, false);
        let (count, shown) = names(&rows[0].create);
        assert_eq!(count, 12);
        assert_eq!(shown, ["cm-00", "cm-01", "cm-02", "cm-03", "cm-04"]);
        assert!(rows[0].reason.as_deref().unwrap().contains("forbidden"));
    }

    #[test]
    fn only_true_marks_a_preview() {
        let a = |v: &str| BTreeMap::from([(PREVIEW_ANNOTATION.to_string(), v.to_string())]);
        assert!(is_preview(&a("true")));
        assert!(is_preview(&a("True")));
        assert!(!is_preview(&a("false")));
        assert!(!is_preview(&a("")));
        assert!(!is_preview(&BTreeMap::new()));
    }
}
