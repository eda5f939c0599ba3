//! nac's API against OADP's, field by field. The facts of OADP's non-admin API (each field's path, type, format,
//! enum values, required fields, map and list types; printer columns; names and short names) are written down in
//! `tests/fixtures/oadp-api.txt`, with the upstream commit or pull request they were read from. The CRDs nac
//! generates (`nac crds`) are walked into the same facts and compared: a difference fails unless
//! `tests/fixtures/oadp-api-differences.txt` lists it with its reason, and every listed difference must still be
//! one and be explained in the admin guide. Then objects as OADP's controller writes them and as OADP's CLI sends
//! them go through nac's types and come back whole.

mod common;

use common::oadp_objects as oadp;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

const FACTS: &str = include_str!("fixtures/oadp-api.txt");
const DIFFERENCES: &str = include_str!("fixtures/oadp-api-differences.txt");
const ADMIN_GUIDE: &str = include_str!("../docs/admin-guide.md");

/// The facts of one API: kinds' names, printer columns in order, and fields by (kind, path).
#[derive(Debug, Default)]
struct Api {
    kinds: BTreeMap<String, String>,
    columns: BTreeMap<String, Vec<Column>>,
    fields: BTreeMap<(String, String), Field>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Column {
    name: String,
    rest: String,
    priority: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Field {
    type_: String,
    attrs: BTreeMap<String, String>,
}

impl Field {
    fn show(&self) -> String {
        let mut s = self.type_.clone();
        for (k, v) in &self.attrs {
            s.push(' ');
            s.push_str(k);
            if !v.is_empty() {
                s.push('=');
                s.push_str(v);
            }
        }
        s
    }
}

/// Parses the facts file's lines (`kind`, `column`, `field`; `source` and comments are for readers).
fn parse_facts(text: &str) -> Api {
    let mut api = Api::default();
    let mut sources = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        match words[0] {
            "source" => {
                sources.insert(words[1].to_string());
            }
            "kind" => {
                api.kinds.insert(words[1].into(), words[2..].join(" "));
            }
            "column" => api.columns.entry(words[1].into()).or_default().push(Column {
                name: words[2].into(),
                rest: words[3..].join(" "),
                priority: 0,
            }),
            "field" => {
                let attrs = words[4..]
                    .iter()
                    .map(|a| match a.split_once('=') {
                        Some((k, v)) => (k.to_string(), v.to_string()),
                        None => (a.to_string(), String::new()),
                    })
                    .collect();
                let f = Field {
                    type_: words[3].into(),
                    attrs,
                };
                assert!(
                    api.fields.insert((words[1].into(), words[2].into()), f).is_none(),
                    "line {}: {line} twice",
                    n + 1
                );
            }
            other => panic!("line {}: unknown fact {other:?}", n + 1),
        }
    }
    for kind in api.kinds.keys() {
        assert!(sources.contains(kind), "no source line for {kind}");
    }
    api
}

/// The facts of nac's generated CRDs, walked as the facts file is written: one set a version the CRDs serve, as
/// each is OADP's API to a client that asks for it.
fn nac_facts() -> BTreeMap<String, Api> {
    let mut apis: BTreeMap<String, Api> = BTreeMap::new();
    for crd in nac::api::crds() {
        let crd = serde_json::to_value(&crd).unwrap();
        let names = &crd["spec"]["names"];
        let kind = names["kind"].as_str().unwrap().to_string();
        let shorts: Vec<&str> = names["shortNames"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let versions = crd["spec"]["versions"].as_array().unwrap();
        assert!(!versions.is_empty(), "{kind}: no version");
        for version in versions {
            let api = apis.entry(version["name"].as_str().unwrap().to_string()).or_default();
            api.kinds.insert(
                kind.clone(),
                format!("{} {}", names["plural"].as_str().unwrap(), shorts.join(",")),
            );
            for c in version["additionalPrinterColumns"].as_array().into_iter().flatten() {
                api.columns.entry(kind.clone()).or_default().push(Column {
                    name: c["name"].as_str().unwrap().into(),
                    rest: format!("{} {}", c["type"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()),
                    priority: c["priority"].as_i64().unwrap_or(0),
                });
            }
            let root = &version["schema"]["openAPIV3Schema"];
            for top in ["spec", "status"] {
                if let Some(s) = root["properties"].get(top) {
                    walk(&kind, top, s, &mut api.fields);
                }
            }
            if let Some(r) = root["required"].as_array() {
                let mut f = Field {
                    type_: "object".into(),
                    ..Default::default()
                };
                f.attrs.insert("required".into(), joined(r, ","));
                api.fields.insert((kind.clone(), ".".into()), f);
            }
        }
    }
    apis
}

fn joined(values: &[Value], sep: &str) -> String {
    let mut v: Vec<String> = values
        .iter()
        .map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string()))
        .collect();
    if sep == "," {
        v.sort();
    }
    v.join(sep)
}

fn walk(kind: &str, path: &str, s: &Value, out: &mut BTreeMap<(String, String), Field>) {
    let mut f = Field {
        type_: s["type"].as_str().unwrap_or_default().to_string(),
        ..Default::default()
    };
    if s.get("x-kubernetes-int-or-string").is_some() {
        f.type_ = "int-or-string".into();
    }
    if let Some(v) = s["format"].as_str() {
        f.attrs.insert("format".into(), v.into());
    }
    if let Some(e) = s["enum"].as_array() {
        f.attrs.insert("enum".into(), joined(e, "|"));
    }
    if let Some(r) = s["required"].as_array().filter(|r| !r.is_empty()) {
        f.attrs.insert("required".into(), joined(r, ","));
    }
    if let Some(v) = s["x-kubernetes-map-type"].as_str() {
        f.attrs.insert("map".into(), v.into());
    }
    if let Some(v) = s["x-kubernetes-list-type"].as_str() {
        f.attrs.insert("list".into(), v.into());
    }
    if let Some(v) = s["minItems"].as_i64() {
        f.attrs.insert("minItems".into(), v.to_string());
    }
    if s["x-kubernetes-preserve-unknown-fields"] == json!(true) {
        f.attrs.insert("open".into(), String::new());
    }
    let map = s["additionalProperties"].is_object();
    if map {
        f.type_ = "map".into();
    }
    out.insert((kind.into(), path.into()), f);
    for (k, v) in s["properties"].as_object().into_iter().flatten() {
        walk(kind, &format!("{path}.{k}"), v, out);
    }
    if let Some(items) = s.get("items") {
        walk(kind, &format!("{path}[]"), items, out);
    }
    if map {
        walk(kind, &format!("{path}{{}}"), &s["additionalProperties"], out);
    }
}

/// One deliberate difference: what, where, and the reason (after ` -- `).
#[derive(Debug)]
struct Difference {
    what: String,
    kind: String,
    path: String,
    attr: Option<String>,
    reason: String,
    line: String,
}

impl Difference {
    /// Whether this entry covers `path` (a trailing `*` covers a subtree: the path and everything under it).
    fn covers(&self, kind: &str, path: &str) -> bool {
        self.kind == kind
            && match self.path.strip_suffix('*') {
                Some(prefix) => {
                    path == prefix
                        || path.starts_with(&format!("{prefix}."))
                        || path.starts_with(&format!("{prefix}["))
                        || path.starts_with(&format!("{prefix}{{"))
                }
                None => path == self.path,
            }
    }
}

fn parse_differences() -> Vec<Difference> {
    DIFFERENCES
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (head, reason) = line
                .split_once(" -- ")
                .unwrap_or_else(|| panic!("no reason (` -- ...`) in: {line}"));
            let w: Vec<&str> = head.split_whitespace().collect();
            assert!(
                matches!(w[0], "extra" | "missing" | "attr" | "column") && w.len() >= 3,
                "not a difference: {line}"
            );
            assert!(reason.trim().len() > 10, "the reason says too little: {line}");
            Difference {
                what: w[0].into(),
                kind: w[1].into(),
                path: w[2].into(),
                attr: w.get(3).map(|s| s.to_string()),
                reason: reason.trim().into(),
                line: line.into(),
            }
        })
        .collect()
}

/// The attributes of two facts of one path that differ (`type` for the type).
fn differing(upstream: &Field, ours: &Field) -> Vec<String> {
    let mut d = Vec::new();
    if upstream.type_ != ours.type_ {
        d.push("type".to_string());
    }
    let keys: BTreeSet<&String> = upstream.attrs.keys().chain(ours.attrs.keys()).collect();
    for k in keys {
        if upstream.attrs.get(k) != ours.attrs.get(k) {
            d.push(k.clone());
        }
    }
    d
}

#[test]
fn nac_s_crds_are_oadp_s_but_for_the_listed_differences() {
    let upstream = parse_facts(FACTS);
    let versions = nac_facts();
    assert!(versions.contains_key("v1alpha1"), "nac serves OADP's version, v1alpha1");
    for (version, ours) in &versions {
        same_but_for_the_listed_differences(&upstream, ours, version);
    }
}

/// nac's facts of one served version against OADP's: the same but for the listed differences, each of which is one.
fn same_but_for_the_listed_differences(upstream: &Api, ours: &Api, version: &str) {
    let listed = parse_differences();
    let mut used = vec![false; listed.len()];
    let mut unexplained = Vec::new();
    let mut find = |what: &str, kind: &str, path: &str, attr: Option<&str>| -> bool {
        let hit = listed
            .iter()
            .position(|d| d.what == what && d.covers(kind, path) && (attr.is_none() || d.attr.as_deref() == attr));
        if let Some(i) = hit {
            used[i] = true;
        }
        hit.is_some()
    };

    assert_eq!(
        upstream.kinds.keys().collect::<Vec<_>>(),
        ours.kinds.keys().collect::<Vec<_>>(),
        "{version}: the kinds"
    );
    for (kind, names) in &upstream.kinds {
        assert_eq!(names, &ours.kinds[kind], "{version} {kind}: plural and short names");
    }
    for (kind, theirs) in &upstream.columns {
        let mine = ours.columns.get(kind).cloned().unwrap_or_default();
        let shown: Vec<&Column> = mine.iter().filter(|c| c.priority == 0).collect();
        assert_eq!(
            theirs.iter().collect::<Vec<_>>(),
            shown,
            "{version} {kind}: the printer columns `kubectl get` shows, in order"
        );
        for c in mine.iter().filter(|c| c.priority != 0) {
            if !find("column", kind, &c.name, None) {
                unexplained.push(format!("column {kind} {} (priority {})", c.name, c.priority));
            }
        }
    }
    let paths: BTreeSet<&(String, String)> = upstream.fields.keys().chain(ours.fields.keys()).collect();
    for key @ (kind, path) in paths {
        match (upstream.fields.get(key), ours.fields.get(key)) {
            (Some(u), Some(o)) => {
                for attr in differing(u, o) {
                    if !find("attr", kind, path, Some(&attr)) {
                        unexplained.push(format!(
                            "attr {kind} {path} {attr}: OADP `{}`, nac `{}`",
                            u.show(),
                            o.show()
                        ));
                    }
                }
            }
            (Some(u), None) => {
                if !find("missing", kind, path, None) {
                    unexplained.push(format!("missing {kind} {path}: OADP `{}`", u.show()));
                }
            }
            (None, Some(o)) => {
                if !find("extra", kind, path, None) {
                    unexplained.push(format!("extra {kind} {path}: nac `{}`", o.show()));
                }
            }
            (None, None) => unreachable!(),
        }
    }
    assert!(
        unexplained.is_empty(),
        "{version}: differences from OADP's API not in tests/fixtures/oadp-api-differences.txt:\n{}",
        unexplained.join("\n")
    );
    let stale: Vec<&str> = listed
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(d, _)| d.line.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "{version}: listed differences that are none (any more):\n{}",
        stale.join("\n")
    );
}

#[test]
fn every_listed_difference_is_explained_in_the_admin_guide() {
    let section = ADMIN_GUIDE
        .split("\n## ")
        .find(|s| s.lines().next() == Some("Compatibility with OADP's API"))
        .expect("docs/admin-guide.md has a section `## Compatibility with OADP's API`");
    // What the section names: its code spans (between backticks), each whole.
    let named: BTreeSet<&str> = section.split('`').skip(1).step_by(2).collect();
    for d in parse_differences() {
        // The field's path or the column's name.
        let name = d.path.trim_end_matches('*');
        assert!(
            named.contains(name),
            "the admin guide's compatibility section does not name `{name}` ({}; {})",
            d.line,
            d.reason
        );
    }
}

/// `value` without its null fields (an unset field: Go writes some as null, Kubernetes prunes them).
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        v => v.clone(),
    }
}

/// The keys of `value` its schema does not name, as paths: what a type with a catch-all map for unknown fields
/// would keep there (and give back whole), so a round trip alone cannot show a field the type misspells or lacks.
/// Maps (`additionalProperties`) and objects the schema leaves free-form (no `properties`) take any key.
fn unknown_keys(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(m) => {
            let props = schema["properties"].as_object();
            let map = schema["additionalProperties"].as_object();
            for (k, v) in m {
                let at = format!("{path}.{k}");
                match (props.and_then(|p| p.get(k)), map) {
                    (Some(s), _) => unknown_keys(s, v, &at, out),
                    (None, Some(s)) => unknown_keys(&Value::Object(s.clone()), v, &at, out),
                    (None, None) if props.is_some() => out.push(at),
                    (None, None) => {}
                }
            }
        }
        Value::Array(a) => a
            .iter()
            .for_each(|v| unknown_keys(&schema["items"], v, &format!("{path}[]"), out)),
        _ => {}
    }
}

/// The schema of a type's spec and status, every subschema inlined.
trait Schema {
    fn schema() -> Value;
}

impl<K: kube::CustomResourceExt> Schema for K {
    fn schema() -> Value {
        let crd = serde_json::to_value(K::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }
}

/// Velero's Backup, which nac types by hand (a compact store copy): its spec and status types' schemas.
struct VeleroBackup;

impl Schema for VeleroBackup {
    fn schema() -> Value {
        let generator = || {
            schemars::generate::SchemaSettings::openapi3()
                .with(|s| s.inline_subschemas = true)
                .into_generator()
        };
        let spec = generator().into_root_schema_for::<nac::velero::BackupSpec>();
        let status = generator().into_root_schema_for::<nac::velero::BackupStatus>();
        json!({"properties": {"spec": spec, "status": status}})
    }
}

/// Decodes `object` as `K` and encodes it again: every field comes back as it was, and every field is one the
/// type knows by `S`'s schema (none kept in a catch-all).
fn round_trips_as<K: DeserializeOwned + Serialize, S: Schema>(what: &str, object: Value) {
    let schema = S::schema();
    let mut unknown = Vec::new();
    for top in ["spec", "status"] {
        if let Some(v) = object.get(top) {
            unknown_keys(&schema["properties"][top], v, top, &mut unknown);
        }
    }
    assert!(
        unknown.is_empty(),
        "{what}: fields nac's type does not know: {unknown:?}"
    );
    let typed: K = serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{object:#}"));
    let back = serde_json::to_value(&typed).unwrap();
    let mut expected = without_nulls(&object);
    // apiVersion and kind are the type's own; nac writes them.
    if let Some(m) = expected.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    let mut got = back.clone();
    if let Some(m) = got.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    assert_eq!(got, expected, "{what} did not round-trip");
}

fn round_trips<K: DeserializeOwned + Serialize + kube::CustomResourceExt>(what: &str, object: Value) {
    round_trips_as::<K, K>(what, object)
}

#[test]
fn objects_as_oadp_s_controller_writes_them_round_trip_through_nac_s_types() {
    use nac::api::*;
    let ns = "team-a";
    let spec = json!({"includedResources": ["configmaps"], "ttl": "720h0m0s",
                      "hooks": {"resources": [{"name": "freeze", "includedNamespaces": [ns],
                                               "labelSelector": {"matchLabels": {"app": "db"}},
                                               "pre": [{"exec": {"container": "db", "command": ["fsfreeze", "-f", "/data"],
                                                                 "onError": "Fail", "timeout": "30s"}}],
                                               "post": [{"exec": {"command": ["fsfreeze", "-u", "/data"]}}]}]},
                      "uploaderConfig": {"parallelFilesUpload": 4}, "resourcePolicy": {"kind": "configmap", "name": "rp"}});
    let id = oadp::nacuuid(ns, "nightly");
    let vb = oadp::velero_backup(ns, "nightly", &id, &spec, "720h0m0s");
    round_trips_as::<nac::velero::Backup, VeleroBackup>("a Velero Backup OADP made", vb.clone());
    round_trips_as::<nac::velero::Backup, VeleroBackup>(
        "a Velero Backup as OADP creates it",
        oadp::velero_backup_request(ns, "nightly", &id, &spec),
    );
    for synced in [false, true] {
        round_trips::<NonAdminBackup>(
            "a NonAdminBackup OADP made",
            oadp::nab(ns, "nightly", &spec, &vb, synced),
        );
    }
    let rid = oadp::nacuuid(ns, "back");
    let vr = oadp::velero_restore(ns, "back", &rid, &id);
    round_trips::<nac::velero::Restore>("a Velero Restore OADP made", vr.clone());
    round_trips::<nac::velero::Restore>(
        "a Velero Restore as OADP creates it",
        oadp::velero_restore_request(ns, "back", &rid, &id),
    );
    round_trips::<NonAdminRestore>("a NonAdminRestore OADP made", oadp::nar(ns, "back", "nightly", &vr));
    let lid = oadp::nacuuid(ns, "own");
    let location = oadp::location_spec("creds");
    let approved = oadp::approved_location(ns, "own", &lid, &location, &json!({"cloud": "Yw=="}));
    round_trips::<nac::velero::BackupStorageLocation>("a Velero BSL OADP made", approved.bsl);
    round_trips::<NonAdminBackupStorageLocationRequest>("an approval request", approved.request);
    round_trips::<NonAdminBackupStorageLocationRequest>(
        "a pending request",
        oadp::request(ns, "later", &lid, &location, "pending", "Pending"),
    );
    for ok in [true, false] {
        round_trips::<NonAdminBackupStorageLocation>(
            "a NonAdminBackupStorageLocation",
            oadp::nabsl(ns, "own", &lid, &location, ok),
        );
    }
    // OADP's newer kinds and fields: a NonAdminBackup with its uploader type, an answered download request, a
    // schedule with its runs (oadp-non-admin's NonAdminSchedule: lastBackup an object, runs named as their Velero
    // Backups).
    let mut with_uploader = oadp::nab(ns, "fs", &spec, &vb, false);
    with_uploader["status"]["uploaderType"] = json!("kopia");
    with_uploader["status"]["fileSystemPodVolumeBackups"] = json!({"total": 2, "completed": 2});
    round_trips::<NonAdminBackup>("a NonAdminBackup with its uploader", with_uploader);
    round_trips::<NonAdminDownloadRequest>(
        "an answered download request",
        json!({"metadata": {"name": "log", "namespace": ns},
               "spec": {"target": {"kind": "BackupLog", "name": "nightly"}},
               "status": {"phase": "Created",
                          "conditions": [oadp::condition("Processed", "True", "Success", "")],
                          "velero": {"status": {"phase": "Processed", "downloadURL": "https://s3.example/log?sig=x",
                                                "expiration": "2026-11-20T08:10:00Z"}}}}),
    );
    let sid = oadp::nacuuid(ns, "daily");
    let run = |ts: &str, phase: &str| {
        json!({"name": format!("{sid}-{ts}"), "veleroBackupName": format!("{sid}-{ts}"), "phase": phase,
               "startTimestamp": "2026-11-20T02:00:01Z", "completionTimestamp": "2026-11-20T02:00:09Z",
               "expiration": "2026-12-20T02:00:01Z"})
    };
    round_trips::<NonAdminSchedule>(
        "a NonAdminSchedule as oadp-non-admin writes it",
        json!({"metadata": {"name": "daily", "namespace": ns, "finalizers": ["nonadminschedule.oadp.openshift.io/finalizer"]},
               "spec": {"schedule": "0 2 * * *", "paused": true,
                        "template": {"backupSpec": {"includedResources": ["configmaps"], "backupType": "Full"}}},
               "status": {"phase": "Created",
                          "conditions": [oadp::condition("Accepted", "True", "ScheduleAccepted", "schedule accepted")],
                          "veleroSchedule": {"nacuuid": sid, "name": sid, "namespace": common::VELERO_NAMESPACE,
                                             "status": {"phase": "Enabled", "lastBackup": "2026-11-20T02:00:00Z"}},
                          "nextRun": "2026-11-21T02:00:00Z",
                          "lastBackup": run("20261120020000", "Completed"),
                          "recentBackups": [run("20261120020000", "Completed"), run("20261119020000", "PartiallyFailed")]}}),
    );
}

#[test]
fn objects_as_oadp_s_cli_sends_them_round_trip_through_nac_s_types() {
    use nac::api::*;
    let all: Value = serde_json::from_str(include_str!("fixtures/go-clients.json")).unwrap();
    round_trips::<NonAdminBackup>("oadp nonadmin backup create", all["oadpCliBackupCreate"].clone());
    round_trips::<NonAdminRestore>("oadp nonadmin restore create", all["oadpCliRestoreCreate"].clone());
    round_trips::<NonAdminBackupStorageLocation>("oadp nonadmin bsl create", all["oadpCliBslCreate"].clone());
    round_trips::<NonAdminDownloadRequest>(
        "oadp nonadmin backup logs (its download request)",
        all["oadpCliDownloadRequestCreate"].clone(),
    );
    // A Go client's zero values of Velero's specs, written back after a read.
    let mut nab = all["oadpCliBackupCreate"].clone();
    for (k, v) in all["zeroBackupSpec"].as_object().unwrap() {
        nab["spec"]["backupSpec"][k] = v.clone();
    }
    round_trips::<NonAdminBackup>("a NonAdminBackup a Go client writes back", nab);
}

#[test]
fn an_object_without_spec_decodes_as_unset_and_writes_no_spec_fields_of_its_own() {
    use nac::api::*;
    let nab: NonAdminBackup = serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "a"}})).unwrap();
    assert!(nab.spec.unset);
    let with: NonAdminBackup =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"backupSpec": {}}})).unwrap();
    assert!(!with.spec.unset);
    let nas: NonAdminSchedule = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    assert!(nas.spec.unset);
    let nar: NonAdminRestore = serde_json::from_value(json!({"metadata": {"name": "r"}})).unwrap();
    assert!(nar.spec.unset);
    let l: NonAdminBackupStorageLocation = serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap();
    assert!(l.spec.unset);
    let d: NonAdminDownloadRequest = serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap();
    assert!(d.spec.unset);
    let r: NonAdminBackupStorageLocationRequest = serde_json::from_value(json!({"metadata": {"name": "q"}})).unwrap();
    assert_eq!(r.spec.approval_decision, None);
}

/// The round trips' schema check sees a field a type would only keep in its catch-all (a misspelling, a field
/// nac's type lacks), in a tenant kind and in Velero's Backup.
#[test]
fn a_field_nac_s_types_do_not_know_is_named() {
    let mut unknown = Vec::new();
    let nab = json!({"backupSpec": {"includedResources": ["configmaps"], "snapshotVolumez": true,
                                    "hooks": {"resources": [{"name": "h", "pre": [{"exec": {"comand": ["x"]}}]}]}}});
    let schema = <nac::api::NonAdminBackup as Schema>::schema();
    unknown_keys(&schema["properties"]["spec"], &nab, "spec", &mut unknown);
    assert_eq!(
        unknown,
        vec![
            "spec.backupSpec.hooks.resources[].pre[].exec.comand",
            "spec.backupSpec.snapshotVolumez"
        ]
    );
    let mut unknown = Vec::new();
    let status = json!({"phase": "Completed", "progress": {"itemsBackedUp": 1, "itemsBackedup": 1}});
    unknown_keys(
        &VeleroBackup::schema()["properties"]["status"],
        &status,
        "status",
        &mut unknown,
    );
    assert_eq!(unknown, vec!["status.progress.itemsBackedup"]);
}
