//! Spec-like tests of every policy rule.

use super::*;
use proptest::prelude::*;
use serde_json::json;

use crate::wire::object as spec;

fn policy(yaml: &str) -> Policy {
    Policy::parse(yaml).unwrap()
}

const STRICT: &str = "
enforceBackupSpec:
  ttl: 720h0m0s
  defaultVolumesToFsBackup: true
  snapshotVolumes: false
enforceRestoreSpec:
  restorePVs: true
backup:
  maxTtl: 2160h
  minTtl: 1h
";

#[test]
fn empty_backup_gets_own_namespace_and_enforced_fields_with_warnings() {
    let o = evaluate_backup(&Map::new(), &policy(STRICT), "team-a");
    assert!(o.allowed(), "{:?}", o.violations);
    assert_eq!(o.spec["includedNamespaces"], json!(["team-a"]));
    assert_eq!(o.spec["ttl"], json!("720h0m0s"));
    assert_eq!(o.spec["defaultVolumesToFsBackup"], json!(true));
    // Enforced false works (OADP's controller cannot express it).
    assert_eq!(o.spec["snapshotVolumes"], json!(false));
    assert!(o
        .warnings
        .contains(&"spec.backupSpec.ttl set to 720h0m0s by cluster policy".to_string()));
    assert_eq!(o.warnings.len(), 3);
}

#[test]
fn own_namespace_is_accepted_other_namespaces_are_not() {
    let p = Policy::default();
    assert!(evaluate_backup(&spec(json!({"includedNamespaces": ["team-a"]})), &p, "team-a").allowed());
    assert!(evaluate_backup(&spec(json!({"includedNamespaces": []})), &p, "team-a").allowed());
    for bad in [
        json!(["team-b"]),
        json!(["team-a", "team-b"]),
        json!(["*"]),
        json!("team-a"),
    ] {
        let o = evaluate_backup(&spec(json!({ "includedNamespaces": bad })), &p, "team-a");
        assert_eq!(o.violations.len(), 1, "{bad}");
        assert_eq!(o.violations[0].field, "spec.backupSpec.includedNamespaces");
        assert!(o.violations[0]
            .message
            .starts_with("NonAdminBackup spec.backupSpec.includedNamespaces is restricted"));
        assert!(o.violations[0].message.contains("team-a"));
    }
}

#[test]
fn cluster_wide_fields_are_denied() {
    let p = Policy::default();
    let cases = [
        (json!({"excludedNamespaces": ["x"]}), "excludedNamespaces"),
        (json!({"includeClusterResources": true}), "includeClusterResources"),
        (
            json!({"includedClusterScopedResources": ["clusterroles"]}),
            "includedClusterScopedResources",
        ),
        (json!({"volumeSnapshotLocations": ["vsl"]}), "volumeSnapshotLocations"),
        (json!({"storageLocation": "admin-bsl"}), "storageLocation"),
    ];
    for (s, field) in cases {
        let o = evaluate_backup(&spec(s.clone()), &p, "ns");
        assert_eq!(o.violations.len(), 1, "{s}");
        assert_eq!(o.violations[0].field, format!("spec.backupSpec.{field}"));
    }
    // Explicitly harmless values pass.
    let ok = json!({"includeClusterResources": false, "excludedNamespaces": [], "volumeSnapshotLocations": []});
    assert!(evaluate_backup(&spec(ok), &p, "ns").allowed());
}

#[test]
fn references_into_veleros_namespace_are_the_administrators_alone() {
    let cm = json!({"kind": "ConfigMap", "name": "other-tenants-policy"});
    let open = Policy::default();
    let o = evaluate_backup(&spec(json!({"resourcePolicy": cm})), &open, "ns");
    assert_eq!(o.violations.len(), 1);
    assert_eq!(o.violations[0].field, "spec.backupSpec.resourcePolicy");
    assert!(
        o.violations[0].message.contains("Velero's namespace"),
        "{}",
        o.violations[0].message
    );
    // A schedule's template is a BackupSpec too.
    let t = evaluate_backup_as(
        &spec(json!({"resourcePolicy": cm})),
        &open,
        "ns",
        "NonAdminSchedule",
        "spec.template",
    );
    assert_eq!(t.violations[0].field, "spec.template.resourcePolicy");
    for field in ["resourceModifier", "resourcePolicy"] {
        let mut r = serde_json::Map::new();
        r.insert("backupName".into(), json!("nightly"));
        r.insert(field.into(), cm.clone());
        let o = evaluate_restore(&r, &open, "team-a");
        assert_eq!(o.violations.len(), 1, "{field}");
        assert_eq!(o.violations[0].field, format!("spec.restoreSpec.{field}"));
    }
    // Enforced by the policy: filled in, and the same value passes; another is refused as any enforced field.
    let pinned = policy("enforceBackupSpec:\n  resourcePolicy: {kind: ConfigMap, name: skip-big-volumes}\n");
    let filled = evaluate_backup(&Map::new(), &pinned, "ns");
    assert!(filled.allowed());
    assert_eq!(filled.spec["resourcePolicy"]["name"], "skip-big-volumes");
    assert!(evaluate_backup(
        &spec(json!({"resourcePolicy": {"kind": "ConfigMap", "name": "skip-big-volumes"}})),
        &pinned,
        "ns"
    )
    .allowed());
    assert!(!evaluate_backup(&spec(json!({"resourcePolicy": cm})), &pinned, "ns").allowed());
}

#[test]
fn storage_location_is_allowed_when_the_policy_pins_it() {
    let p = policy("enforceBackupSpec: {storageLocation: tenant-bsl}");
    assert!(evaluate_backup(&spec(json!({"storageLocation": "tenant-bsl"})), &p, "ns").allowed());
    let o = evaluate_backup(&spec(json!({"storageLocation": "other"})), &p, "ns");
    assert!(o.violations[0].message.contains("tenant-bsl") && o.violations[0].message.contains("other"));
}

#[test]
fn different_enforced_value_names_field_user_value_and_enforced_value() {
    let o = evaluate_backup(
        &spec(json!({"ttl": "24h", "snapshotVolumes": true})),
        &policy(STRICT),
        "ns",
    );
    assert_eq!(o.violations.len(), 2);
    let ttl = o.violations.iter().find(|v| v.field == "spec.backupSpec.ttl").unwrap();
    assert!(
        ttl.message.contains("720h0m0s") && ttl.message.contains("24h"),
        "{}",
        ttl.message
    );
    let snap = o
        .violations
        .iter()
        .find(|v| v.field == "spec.backupSpec.snapshotVolumes")
        .unwrap();
    assert!(snap.message.contains("false") && snap.message.contains("true"));
}

#[test]
fn durations_compare_by_value() {
    let o = evaluate_backup(&spec(json!({"ttl": "720h"})), &policy(STRICT), "ns");
    assert!(o.allowed(), "{:?}", o.violations);
    assert_eq!(o.spec["ttl"], json!("720h"));
}

#[test]
fn nested_values_compare_whole() {
    let p = policy("enforceBackupSpec: {labelSelector: {matchLabels: {backup: 'yes'}}}");
    let same = json!({"labelSelector": {"matchLabels": {"backup": "yes"}}});
    assert!(evaluate_backup(&spec(same), &p, "ns").allowed());
    let more = json!({"labelSelector": {"matchLabels": {"backup": "yes", "extra": "x"}}});
    assert!(!evaluate_backup(&spec(more), &p, "ns").allowed());
}

#[test]
fn ttl_bounds() {
    let p = policy("backup: {maxTtl: 2160h, minTtl: 1h}");
    assert!(evaluate_backup(&spec(json!({"ttl": "100h"})), &p, "ns").allowed());
    let hi = evaluate_backup(&spec(json!({"ttl": "3000h"})), &p, "ns");
    assert!(
        hi.violations[0].message.contains("above the maximum 2160h0m0s"),
        "{:?}",
        hi.violations
    );
    let lo = evaluate_backup(&spec(json!({"ttl": "30m"})), &p, "ns");
    assert!(lo.violations[0].message.contains("below the minimum 1h0m0s"));
    let bad = evaluate_backup(&spec(json!({"ttl": "soon"})), &p, "ns");
    assert!(bad.violations[0].message.contains("invalid duration"));
}

#[test]
fn missing_ttl_gets_a_default_inside_the_bounds() {
    // Velero's own 720h is above this max, so the max is filled in and shown.
    let o = evaluate_backup(&Map::new(), &policy("backup: {maxTtl: 168h}"), "ns");
    assert_eq!(o.spec["ttl"], json!("168h0m0s"));
    assert_eq!(
        o.warnings,
        vec!["spec.backupSpec.ttl set to 168h0m0s by cluster policy"]
    );
    let o = evaluate_backup(&Map::new(), &policy("backup: {defaultTtl: 48h}"), "ns");
    assert_eq!(o.spec["ttl"], json!("48h0m0s"));
    // Without bounds nothing is filled: Velero applies its default.
    let o = evaluate_backup(&Map::new(), &Policy::default(), "ns");
    assert!(!o.spec.contains_key("ttl"));
    // A zero TTL means Velero's default too.
    let o = evaluate_backup(&spec(json!({"ttl": "0s"})), &policy("backup: {maxTtl: 168h}"), "ns");
    assert_eq!(o.spec["ttl"], json!("168h0m0s"));
}

#[test]
fn update_fills_from_the_old_object_so_reapplying_compares_equal() {
    let created = evaluate_backup(&Map::new(), &policy(STRICT), "ns").spec;
    // The policy changed since; the user re-applies the original empty spec.
    let changed = policy("enforceBackupSpec: {ttl: 360h}"); // not applied on update
    let _ = changed;
    let again = fill_from_old(&Map::new(), &created);
    assert_eq!(first_changed_field(&created, &again), None);
    // An explicit different value is still a change.
    let edited = fill_from_old(&spec(json!({"ttl": "1h"})), &created);
    assert_eq!(first_changed_field(&created, &edited).unwrap(), ".ttl");
}

#[test]
fn first_changed_field_names_the_field() {
    let a = spec(json!({"ttl": "1h", "includedNamespaces": ["ns"], "labelSelector": {"matchLabels": {"a": "b"}}}));
    let b = spec(json!({"ttl": "1h", "includedNamespaces": ["ns"], "labelSelector": {"matchLabels": {"a": "c"}}}));
    assert_eq!(first_changed_field(&a, &b).unwrap(), ".labelSelector.matchLabels.a");
    assert_eq!(first_changed_field(&a, &a), None);
    let c = spec(
        json!({"ttl": "1h", "includedNamespaces": ["ns"], "labelSelector": {"matchLabels": {"a": "b"}}, "x": null}),
    );
    assert_eq!(first_changed_field(&a, &c), None);
}

#[test]
fn restore_rules() {
    let p = policy(STRICT);
    let ok = evaluate_restore(&spec(json!({"backupName": "nightly"})), &p, "team-a");
    assert!(ok.allowed());
    assert_eq!(ok.spec["restorePVs"], json!(true));
    assert_eq!(
        ok.warnings,
        vec!["spec.restoreSpec.restorePVs set to true by cluster policy"]
    );

    let missing = evaluate_restore(&Map::new(), &p, "team-a");
    assert_eq!(missing.violations[0].field, "spec.restoreSpec.backupName");
    for (s, field) in [
        (json!({"scheduleName": "s"}), "scheduleName"),
        (json!({"includedNamespaces": ["ns"]}), "includedNamespaces"),
        (json!({"excludedNamespaces": ["x"]}), "excludedNamespaces"),
        (json!({"namespaceMapping": {"a": "b"}}), "namespaceMapping"),
        (json!({"includeClusterResources": true}), "includeClusterResources"),
        (json!({"restorePVs": false}), "restorePVs"),
    ] {
        let mut s = spec(s);
        s.insert("backupName".into(), json!("b"));
        let o = evaluate_restore(&s, &p, "team-a");
        assert_eq!(o.violations.len(), 1, "{field}");
        assert_eq!(o.violations[0].field, format!("spec.restoreSpec.{field}"));
        assert!(o.violations[0].message.starts_with("NonAdminRestore spec.restoreSpec."));
    }
}

#[test]
fn policy_parse_errors_name_the_field() {
    let cases = [
        ("enforceBackupSpec: {ttl: 5}", "enforceBackupSpec.ttl"),
        ("enforceBackupSpec: {tll: 1h}", "enforceBackupSpec.tll"),
        ("enforceBackupSpec: {ttl: forever}", "enforceBackupSpec.ttl"),
        (
            "enforceBackupSpec: {includedNamespaces: [a]}",
            "enforceBackupSpec.includedNamespaces",
        ),
        (
            "enforceBackupSpec: {includeClusterResources: true}",
            "enforceBackupSpec.includeClusterResources",
        ),
        (
            "enforceBackupSpec: {labelSelector: {matchLabelz: {a: b}}}",
            "enforceBackupSpec.labelSelector.matchLabelz",
        ),
        (
            "enforceRestoreSpec: {namespaceMapping: {a: b}}",
            "enforceRestoreSpec.namespaceMapping",
        ),
        (
            "enforceRestoreSpec: {restorePVs: yes please}",
            "enforceRestoreSpec.restorePVs",
        ),
        ("backup: {maxTtl: 1h, minTtl: 2h}", "backup.minTtl"),
        ("backup: {maxTtl: 10x}", "backup.maxTtl"),
        (
            "enforceBackupSpec: {ttl: 3000h}\nbackup: {maxTtl: 2160h}",
            "enforceBackupSpec.ttl",
        ),
        ("unknownSection: 1", "unknown field `unknownSection`"),
        ("enforceBackupSpec: [1, 2]", "enforceBackupSpec"),
        ("enforceBackupSpec: {ttl: null}", "enforceBackupSpec.ttl"),
        ("{{{", "not valid YAML"),
    ];
    for (yaml, needle) in cases {
        let e = Policy::parse(yaml).unwrap_err().to_string();
        assert!(e.contains(needle), "{yaml}: {e}");
    }
}

#[test]
fn empty_policy_is_permissive() {
    for doc in ["", "---\n", "{}"] {
        assert_eq!(Policy::parse(doc).unwrap(), Policy::default());
    }
    assert_eq!(
        Policy::default().summary(),
        vec!["permissive: only the always-on tenant rules apply"]
    );
}

#[test]
fn shipped_policies_parse() {
    for f in ["permissive", "strict", "fs-backup-only", "own-storage", "tiers"] {
        let path = format!("{}/policies/{f}.yaml", env!("CARGO_MANIFEST_DIR"));
        let cm: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let doc = cm["data"][POLICY_KEY].as_str().unwrap();
        Policy::parse(doc).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

proptest! {
    /// Whatever namespaces a user lists, the resulting backup covers only their own namespace or is denied.
    #[test]
    fn never_escapes_own_namespace(ns in "[a-z]{1,8}", list in proptest::collection::vec("[a-z*]{0,8}", 0..4)) {
        let s = spec(json!({ "includedNamespaces": list }));
        let o = evaluate_backup(&s, &Policy::default(), &ns);
        if o.allowed() {
            prop_assert_eq!(&o.spec["includedNamespaces"], &json!([ns.clone()]));
        } else {
            prop_assert!(list.iter().any(|n| n != &ns));
        }
    }

    /// An enforced value is always either the result or a named violation, never silently dropped.
    #[test]
    fn enforcement_is_fill_or_deny(enforced in any::<bool>(), user in proptest::option::of(any::<bool>())) {
        let p = policy(&format!("enforceBackupSpec: {{snapshotVolumes: {enforced}}}"));
        let s = match user { Some(u) => spec(json!({"snapshotVolumes": u})), None => Map::new() };
        let o = evaluate_backup(&s, &p, "ns");
        match user {
            Some(u) if u != enforced => {
                prop_assert!(!o.allowed());
                prop_assert_eq!(&o.violations[0].field, "spec.backupSpec.snapshotVolumes");
            }
            _ => {
                prop_assert!(o.allowed());
                prop_assert_eq!(&o.spec["snapshotVolumes"], &json!(enforced));
            }
        }
    }
}

#[test]
fn backup_sync_defaults_to_no_admin_location_and_the_seed_period() {
    let p = policy("");
    assert!(p.backup_sync.admin_locations.is_empty());
    assert_eq!(p.backup_sync.period, DEFAULT_BACKUP_SYNC_PERIOD);
    let p = policy("backupSync:\n  adminLocations: [default, default, archive]\n  period: 0\n");
    assert_eq!(p.backup_sync.admin_locations, vec!["default", "archive"]);
    assert!(p.backup_sync.period.is_zero());
    assert!(p
        .summary()
        .iter()
        .any(|l| l.contains("default, archive") && l.contains("event-driven only")));
}

#[test]
fn backup_sync_mistakes_name_the_field() {
    let e = Policy::parse("backupSync:\n  adminLocations: [Default]\n  period: 5x\n").unwrap_err();
    let fields: Vec<&str> = e.0.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, vec!["backupSync.period", "backupSync.adminLocations[0]"], "{e}");
    let e = Policy::parse("backupSync:\n  locations: [default]\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `locations`"), "{e}");
}

#[test]
fn restores_wait_ten_minutes_by_default_within_a_day() {
    let p = Policy::parse("").unwrap();
    assert_eq!(p.restore, RestoreRules::default());
    assert_eq!(p.restore.wait_for(None).unwrap().to_string(), "10m0s");
    assert_eq!(p.restore.wait_for(Some("2h")).unwrap().to_string(), "2h0m0s");
    assert!(p.restore.allow_partially_failed);
}

#[test]
fn restore_waits_are_configurable_and_bounded() {
    let p =
        Policy::parse("restore:\n  waitTimeout: 0\n  maxWaitTimeout: 30m\n  allowPartiallyFailed: false\n").unwrap();
    assert!(p.restore.wait_timeout.is_zero());
    assert!(!p.restore.allow_partially_failed);
    assert_eq!(p.restore.wait_for(Some("0s")).unwrap().to_string(), "0s");
    let e = p.restore.wait_for(Some("1h")).unwrap_err();
    assert!(
        e.contains(WAIT_TIMEOUT_ANNOTATION) && e.contains("restore.maxWaitTimeout 30m0s"),
        "{e}"
    );
    let e = p.restore.wait_for(Some("soon")).unwrap_err();
    assert!(e.contains("\"soon\" is not a duration"), "{e}");
    assert!(
        p.summary().iter().any(|l| l.contains("refused at once")),
        "{:?}",
        p.summary()
    );
}

#[test]
fn a_default_wait_above_the_maximum_is_refused() {
    let e = Policy::parse("restore:\n  waitTimeout: 2h\n  maxWaitTimeout: 1h\n").unwrap_err();
    assert_eq!(e.0[0].field, "restore.waitTimeout", "{e}");
    let e = Policy::parse("restore:\n  waitTimeout: true\n").unwrap_err();
    assert_eq!(e.0[0].field, "restore.waitTimeout", "{e}");
    let e = Policy::parse("restore:\n  waitTimeut: 1m\n").unwrap_err();
    assert!(e.to_string().contains("waitTimeut"), "{e}");
}

/// What Go clients send (tests/fixtures/go-clients.json): Velero's spec types (`pkg/apis/velero/v1`, v1.18) as
/// Go's JSON encoder writes them with nothing set. `BackupSpec` holds `metadata`, `ttl`, `hooks`,
/// `csiSnapshotTimeout` and `itemOperationTimeout` by value, `RestoreSpec` holds `hooks` and
/// `itemOperationTimeout`; everything else is a pointer, slice, map or `omitempty` string, left out when unset.
/// `BackupStorageLocationSpec` writes `provider` and `objectStorage` without `omitempty`.
fn go_clients(key: &str) -> Value {
    let all: Value = serde_json::from_str(include_str!("../../tests/fixtures/go-clients.json")).unwrap();
    all[key].clone()
}

/// Every subset of the fields of `zero` that `base` does not set, added to `base`.
fn with_zero_subsets(base: &Value, zero: &Value) -> Vec<Map<String, Value>> {
    let fields: Vec<(&String, &Value)> = zero
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| base.get(k.as_str()).is_none())
        .collect();
    (0..1u32 << fields.len())
        .map(|mask| {
            let mut m = spec(base.clone());
            for (i, (k, v)) in fields.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    m.insert((*k).clone(), (*v).clone());
                }
            }
            m
        })
        .collect()
}

const GO_POLICIES: &[&str] = &[
    "",
    STRICT,
    "enforceBackupSpec: {ttl: 168h, csiSnapshotTimeout: 10m, itemOperationTimeout: 4h, storageLocation: shared, \
     hooks: {resources: [{name: audit, pre: [{exec: {command: [sync]}}]}]}}\n\
     enforceRestoreSpec: {itemOperationTimeout: 2h, hooks: {resources: []}}",
    "backup: {maxTtl: 168h, minTtl: 1h}",
    "backup: {defaultTtl: 48h}",
    "nonAdminBSL: {enabled: true}\nenforceBackupSpec: {itemOperationTimeout: 1h}",
];

#[test]
fn a_backup_spec_as_go_writes_it_is_a_backup_spec_leaving_those_fields_out() {
    let zero = go_clients("zeroBackupSpec");
    let bases = [
        json!({}),
        json!({"includedNamespaces": ["team-a"], "includedResources": ["*"]}),
        json!({"snapshotVolumes": false, "storageLocation": "mine", "labelSelector": {"matchLabels": {"a": "b"}}}),
        json!({"includedNamespaces": ["team-b"], "ttl": "10000h"}),
    ];
    for text in GO_POLICIES {
        let p = policy(text);
        for base in &bases {
            let left_out = evaluate_backup(&spec(base.clone()), &p, "team-a");
            for sent in with_zero_subsets(base, &zero) {
                let label = format!("policy {text:?}, sent {}", Value::Object(sent.clone()));
                assert_eq!(evaluate_backup(&sent, &p, "team-a"), left_out, "{label}");
                // The reconciler re-checks the stored object as its typed spec reads it back.
                let typed: crate::velero::BackupSpec = serde_json::from_value(Value::Object(sent.clone())).unwrap();
                let Value::Object(reread) = serde_json::to_value(&typed).unwrap() else {
                    unreachable!()
                };
                assert_eq!(evaluate_backup(&reread, &p, "team-a"), left_out, "reconciler, {label}");
                // A schedule's template is the same BackupSpec.
                let schedule = |t: &Map<String, Value>| {
                    spec(json!({"schedule": "@daily", "template": {"backupSpec": Value::Object(t.clone())}}))
                };
                let now = "2026-11-25T10:00:00Z".parse().unwrap();
                assert_eq!(
                    evaluate_schedule(&schedule(&sent), &p, "team-a", now),
                    evaluate_schedule(&schedule(&spec(base.clone())), &p, "team-a", now),
                    "schedule, {label}"
                );
            }
        }
    }
}

#[test]
fn a_restore_spec_as_go_writes_it_is_a_restore_spec_leaving_those_fields_out() {
    let zero = go_clients("zeroRestoreSpec");
    let bases = [
        json!({"backupName": "b1"}),
        json!({"backupName": "b1", "includedResources": ["*"], "restorePVs": false}),
        json!({}),
    ];
    for text in GO_POLICIES {
        let p = policy(text);
        for base in &bases {
            let left_out = evaluate_restore(&spec(base.clone()), &p, "team-a");
            for sent in with_zero_subsets(base, &zero) {
                assert_eq!(
                    evaluate_restore(&sent, &p, "team-a"),
                    left_out,
                    "policy {text:?}, sent {sent:?}"
                );
                let typed: crate::velero::RestoreSpec = serde_json::from_value(Value::Object(sent.clone())).unwrap();
                let Value::Object(reread) = serde_json::to_value(&typed).unwrap() else {
                    unreachable!()
                };
                assert_eq!(
                    evaluate_restore(&reread, &p, "team-a"),
                    left_out,
                    "reconciler, policy {text:?}"
                );
            }
        }
    }
}

#[test]
fn a_storage_location_spec_as_go_writes_it_is_one_leaving_those_fields_out() {
    let zero = go_clients("zeroBackupStorageLocationSpec");
    let p = policy(
        "nonAdminBSL:\n  enabled: true\n  enforceBSLSpec: {provider: aws, objectStorage: {bucket: tenants}, \
         config: {region: eu-1}}",
    );
    let base = json!({"credential": {"name": "creds", "key": "cloud"}, "config": {}});
    let left_out = evaluate_bsl(&spec(json!({"credential": {"name": "creds", "key": "cloud"}})), &p);
    assert!(left_out.allowed(), "{:?}", left_out.violations);
    for sent in with_zero_subsets(&base, &zero) {
        assert_eq!(evaluate_bsl(&sent, &p), left_out, "{sent:?}");
    }
}

#[test]
fn oadp_cli_backup_create_gets_the_enforced_ttl_instead_of_a_refusal() {
    let nab = go_clients("oadpCliBackupCreate");
    let sent = spec(nab["spec"]["backupSpec"].clone());
    let p = policy("enforceBackupSpec: {storageLocation: shared, ttl: 720h0m0s}");
    let o = evaluate_backup(&sent, &p, "team-a");
    assert!(o.allowed(), "{:?}", o.violations);
    assert_eq!(
        Value::Object(o.spec),
        json!({"includedNamespaces": ["team-a"], "includedResources": ["*"], "ttl": "720h0m0s",
               "storageLocation": "shared"})
    );
    assert_eq!(
        o.warnings,
        vec![
            "spec.backupSpec.storageLocation set to shared by cluster policy",
            "spec.backupSpec.ttl set to 720h0m0s by cluster policy",
        ]
    );
    // A bound on TTLs sees Velero's default, not a zero TTL.
    let o = evaluate_backup(&sent, &policy("backup: {minTtl: 1h}"), "team-a");
    assert!(o.allowed() && !o.spec.contains_key("ttl"), "{o:?}");
}

#[test]
fn zero_that_a_go_client_sends_only_on_request_stands() {
    // Booleans are pointers in Velero's types: an explicit false is a request, and it meets the enforced value.
    let p = policy("enforceBackupSpec: {snapshotVolumes: true}\nenforceRestoreSpec: {restorePVs: true}");
    let o = evaluate_backup(&spec(json!({"snapshotVolumes": false})), &p, "ns");
    assert_eq!(o.violations.len(), 1, "{o:?}");
    assert!(o.message().contains("requested false"), "{}", o.message());
    let o = evaluate_restore(&spec(json!({"backupName": "b", "restorePVs": false})), &p, "team-a");
    assert!(!o.allowed());
    // A storage location's sync period is a pointer: zero asks Velero not to sync it.
    let p = policy("nonAdminBSL: {enabled: true, enforceBSLSpec: {backupSyncPeriod: 2m}}");
    let s = spec(json!({"credential": {"name": "c", "key": "k"}, "backupSyncPeriod": "0s"}));
    assert!(!evaluate_bsl(&s, &p).allowed());
}

/// The policy reference in docs/admin-guide.md: its example sets every key a policy has and parses, its table
/// names every key, and each default it states as a single value is the default.
#[test]
fn the_admin_guides_policy_reference_names_every_key_with_its_default() {
    let guide = include_str!("../../docs/admin-guide.md");
    let section = &guide[guide.find("## Policy reference").expect("a policy reference section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |end| end + 3)];
    let example = section.split("```yaml\n").nth(1).unwrap().split("```").next().unwrap();
    Policy::parse(example).expect("the reference's example parses");
    let example: Value = serde_yaml::from_str(example).unwrap();

    // Every key of the document, from the raw form with every section present.
    let every = serde_json::to_value(RawPolicy {
        enforce_backup_spec: Some(Map::new()),
        enforce_restore_spec: Some(Map::new()),
        backup: Some(Default::default()),
        backup_sync: Some(Default::default()),
        restore: Some(Default::default()),
        non_admin_bsl: Some(Default::default()),
        downloads: Some(Default::default()),
        garbage_collection: Some(Default::default()),
        rights: Some(Default::default()),
        schedule: Some(Default::default()),
        quotas: Some(Default::default()),
        recovery_point_objective: Some(String::new()),
    })
    .unwrap();
    let mut keys = Vec::new();
    for (top, v) in every.as_object().unwrap() {
        match v.as_object() {
            Some(m) if !m.is_empty() => keys.extend(m.keys().map(|k| (top.clone(), Some(k.clone())))),
            _ => keys.push((top.clone(), None)),
        }
    }
    assert!(keys.len() >= 20, "{keys:?}");
    for (top, sub) in &keys {
        let (path, in_example) = match sub {
            Some(k) => (format!("{top}.{k}"), example[top].get(k).is_some()),
            None => (top.clone(), example.get(top).is_some()),
        };
        assert!(in_example, "the reference's example does not set {path}");
        assert!(
            section.contains(&format!("`{path}`")),
            "the reference's table does not name {path}"
        );
    }

    // Each stated default that is one value: setting it changes nothing.
    fn single(s: &str) -> Option<&str> {
        s.strip_prefix('`')
            .and_then(|s| s.strip_suffix('`'))
            .filter(|s| !s.contains('`'))
    }
    let default = Policy::parse("").unwrap();
    let mut checked = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let (key, stated) = (cells[0].trim_start_matches("| "), cells[1]);
        let (Some(key), Some(value)) = (single(key), single(stated)) else {
            continue;
        };
        let Some((top, sub)) = key.split_once('.') else {
            continue;
        };
        let yaml = format!("{top}:\n  {sub}: {value}\n");
        assert_eq!(
            Policy::parse(&yaml).unwrap(),
            default,
            "{key}: the stated default {value} is not the default"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} defaults checked");
}

#[test]
fn a_spec_velero_fails_at_validation_is_refused_naming_field_and_value() {
    let p = Policy::default();
    let refused = |v: Value| evaluate_backup(&spec(v), &p, "team-a").violations;
    let v = refused(json!({"includedResources": ["configmaps"], "excludedResources": ["configmaps"]}));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.backupSpec.excludedResources");
    assert_eq!(
        v[0].message,
        "NonAdminBackup spec.backupSpec.excludedResources cannot hold \"configmaps\", which includedResources holds \
         too: Velero fails such a backup at validation"
    );
    let v = refused(
        json!({"labelSelector": {"matchLabels": {"a": "b"}}, "orLabelSelectors": [{"matchLabels": {"c": "d"}}]}),
    );
    assert_eq!(v[0].field, "spec.backupSpec.orLabelSelectors");
    // includeClusterResources: false is allowed alone, and is an old-style filter to Velero.
    assert!(refused(json!({"includeClusterResources": false})).is_empty());
    let v = refused(json!({"includeClusterResources": false, "excludedNamespaceScopedResources": ["secrets"]}));
    assert_eq!(v[0].field, "spec.backupSpec.excludedNamespaceScopedResources");
    assert!(v[0].message.contains("includeClusterResources"), "{v:?}");
    // Nothing but nac's own kinds: the backup would hold nothing (nac leaves them out).
    let v = refused(json!({"includedResources": ["nonadminbackups", "nonadminrestores"]}));
    assert_eq!(v[0].field, "spec.backupSpec.includedResources");
    assert!(v[0].message.contains("nac leaves out of every tenant backup"), "{v:?}");
    // A schedule's template gets the same checks under its own path.
    let o = evaluate_backup_as(
        &spec(json!({"includedResources": ["*", "pods"]})),
        &p,
        "team-a",
        "NonAdminSchedule",
        "spec.template.backupSpec",
    );
    assert_eq!(o.violations[0].field, "spec.template.backupSpec.includedResources");
    // A field nac refuses for its own reason is not named twice.
    let v = refused(json!({"excludedNamespaces": ["*"]}));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].message.contains("must remain empty"));
}

const TIERED: &str = "
enforceBackupSpec:
  ttl: 720h0m0s
  storageLocation: default
backup:
  maxTtl: 2160h
schedule:
  minInterval: 1h
tiers:
- name: gold
  namespaceSelector:
    matchLabels: {nac.example.com/tier: gold}
  enforceBackupSpec:
    ttl: 2160h0m0s
    storageLocation: gold
  backup:
    maxTtl: 4320h
- name: sandbox
  namespaceSelector:
    matchExpressions:
    - {key: nac.example.com/tier, operator: In, values: [sandbox, dev]}
  backup:
    maxTtl: 168h
  enforceBackupSpec:
    ttl: 168h0m0s
- name: catch-gold
  namespaceSelector:
    matchExpressions:
    - {key: nac.example.com/tier, operator: Exists}
  schedule:
    minInterval: 24h
";

fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_namespace_takes_the_first_tier_that_selects_it_else_the_base() {
    let p = Arc::new(policy(TIERED));
    let tier = |l: &[(&str, &str)]| p.for_labels(&labels(l)).tier.clone();
    assert_eq!(tier(&[("nac.example.com/tier", "gold")]), Some("gold".into()));
    assert_eq!(tier(&[("nac.example.com/tier", "dev")]), Some("sandbox".into()));
    // Both the second and the third select it: the first of them wins.
    assert_eq!(tier(&[("nac.example.com/tier", "sandbox")]), Some("sandbox".into()));
    assert_eq!(tier(&[("nac.example.com/tier", "other")]), Some("catch-gold".into()));
    assert_eq!(tier(&[("team", "a")]), None);
    assert!(
        Arc::ptr_eq(&p.for_labels(&labels(&[])), &p),
        "the base is the policy itself"
    );
}

#[test]
fn a_tier_replaces_the_parts_it_names_and_keeps_the_rest_of_the_base() {
    let p = Arc::new(policy(TIERED));
    let gold = p.for_labels(&labels(&[("nac.example.com/tier", "gold")]));
    // Replaced whole: enforceBackupSpec and backup.
    assert_eq!(gold.enforce_backup_spec["ttl"], json!("2160h0m0s"));
    assert_eq!(gold.enforce_backup_spec["storageLocation"], json!("gold"));
    assert_eq!(gold.backup.max_ttl, Some(GoDuration::from_secs(4320 * 3600)));
    // Kept: schedule.
    assert_eq!(gold.schedule, p.schedule);
    let other = p.for_labels(&labels(&[("nac.example.com/tier", "x")]));
    assert_eq!(other.schedule.min_interval, Some(GoDuration::from_secs(24 * 3600)));
    assert_eq!(other.enforce_backup_spec, p.enforce_backup_spec);
    // A part replaced is replaced whole, not merged: sandbox's enforceBackupSpec has no storageLocation.
    let sandbox = p.for_labels(&labels(&[("nac.example.com/tier", "dev")]));
    assert!(sandbox.enforce_backup_spec.get("storageLocation").is_none());

    let o = evaluate_backup(&Map::new(), &gold, "team-a");
    assert!(o.allowed(), "{:?}", o.violations);
    assert_eq!(o.spec["ttl"], json!("2160h0m0s"));
    assert!(o
        .warnings
        .contains(&"spec.backupSpec.ttl set to 2160h0m0s by cluster policy tier \"gold\"".to_string()));
    let o = evaluate_backup(&Map::new(), &p, "team-a");
    assert!(o
        .warnings
        .contains(&"spec.backupSpec.ttl set to 720h0m0s by cluster policy".to_string()));
}

#[test]
fn refusals_under_a_tier_name_it_and_the_base_keeps_its_wording() {
    let p = Arc::new(policy(TIERED));
    let sandbox = p.for_labels(&labels(&[("nac.example.com/tier", "dev")]));
    let o = evaluate_backup(&spec(json!({"ttl": "720h"})), &sandbox, "ns");
    assert_eq!(
        o.message(),
        "NonAdminBackup spec.backupSpec.ttl is restricted, the administrator has restricted spec.backupSpec.ttl \
         field value to 168h0m0s (requested 720h) (cluster policy tier \"sandbox\"); NonAdminBackup \
         spec.backupSpec.ttl is restricted, 720h0m0s is above the maximum 168h0m0s set by cluster policy tier \
         \"sandbox\""
    );
    let o = evaluate_backup(&spec(json!({"ttl": "4000h"})), &p, "ns");
    assert_eq!(
        o.message(),
        "NonAdminBackup spec.backupSpec.ttl is restricted, the administrator has restricted spec.backupSpec.ttl \
         field value to 720h0m0s (requested 4000h); NonAdminBackup spec.backupSpec.ttl is restricted, 4000h0m0s \
         is above the maximum 2160h0m0s set by cluster policy"
    );
    let other = p.for_labels(&labels(&[("nac.example.com/tier", "x")]));
    let o = evaluate_schedule(
        &spec(json!({"schedule": "@every 2h", "template": {"backupSpec": {}}})),
        &other,
        "ns",
        "2026-11-25T10:00:00Z".parse().unwrap(),
    );
    assert!(
        o.message()
            .contains("minimum interval 24h0m0s set by cluster policy tier \"catch-gold\""),
        "{}",
        o.message()
    );
}

#[test]
fn a_broken_tier_is_refused_naming_the_tier_and_field() {
    let base = "backup: {maxTtl: 2160h}\nenforceBackupSpec: {ttl: 720h0m0s}\n";
    for (tiers, field) in [
        // A value the base would refuse, alone or against the base's other parts.
        (
            "- {name: a, namespaceSelector: {}, backup: {maxTtl: soon}}",
            "tiers[0].backup.maxTtl",
        ),
        (
            "- {name: a, namespaceSelector: {}, backup: {maxTtl: 1h}}",
            "tiers[0].enforceBackupSpec.ttl",
        ),
        (
            "- {name: a, namespaceSelector: {}, enforceBackupSpec: {includedNamespaces: [x]}}",
            "tiers[0].enforceBackupSpec.includedNamespaces",
        ),
        // Unknown keys, cluster-wide parts, a bad selector, names.
        ("- {name: a, namespaceSelector: {}, colour: red}", "tiers[0].colour"),
        (
            "- {name: a, namespaceSelector: {}, backupSync: {period: 1h}}",
            "tiers[0].backupSync",
        ),
        (
            "- {name: a, namespaceSelector: {matchLabels: {'a b': c}}}",
            "tiers[0].namespaceSelector.matchLabels.a b",
        ),
        (
            "- {name: a, namespaceSelector: {matchExpressions: [{key: a, operator: Gt, values: ['1']}]}}",
            "tiers[0].namespaceSelector.matchExpressions[0].operator",
        ),
        ("- {name: a}", "tiers[0].namespaceSelector"),
        ("- {namespaceSelector: {}}", "tiers[0].name"),
        ("- {name: Gold, namespaceSelector: {}}", "tiers[0].name"),
        (
            "- {name: a, namespaceSelector: {}}\n- {name: a, namespaceSelector: {}}",
            "tiers[1].name",
        ),
        ("- just-a-name", "tiers[0]"),
    ] {
        let doc = format!("{base}tiers:\n{tiers}\n");
        let err = Policy::parse(&doc).expect_err(&doc);
        assert_eq!(err.0[0].field, field, "{doc}\n{err}");
    }
    assert_eq!(Policy::parse("tiers: {}").unwrap_err().0[0].field, "tiers");
    // A broken base is reported as the base, not once per tier.
    let err = Policy::parse("backup: {maxTtl: soon}\ntiers:\n- {name: a, namespaceSelector: {}}").unwrap_err();
    assert_eq!(err.0.len(), 1);
    assert_eq!(err.0[0].field, "backup.maxTtl");
}

#[test]
fn the_summary_lists_each_tier_with_its_selector() {
    let lines = policy(TIERED).summary();
    let i = lines
        .iter()
        .position(|l| l == "tier \"gold\" for namespaces with labels nac.example.com/tier=gold:")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(lines[i + 1], "  enforces spec.backupSpec.storageLocation = gold");
    assert!(lines
        .contains(&"tier \"sandbox\" for namespaces with labels nac.example.com/tier in (sandbox,dev):".to_string()));
}
