//! Arbitrary text as a policy document: parsing must not panic, and a policy that parses must evaluate a few
//! fixed specs without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nac::policy::{evaluate_backup, evaluate_restore, Policy};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("spec literals are objects"),
    }
}

struct Specs {
    backups: Vec<Map<String, Value>>,
    restores: Vec<Map<String, Value>>,
}

fn specs() -> &'static Specs {
    static SPECS: OnceLock<Specs> = OnceLock::new();
    SPECS.get_or_init(|| Specs {
        backups: vec![
            Map::new(),
            object(json!({"labelSelector": {"matchLabels": {"app": "shop"}}})),
            object(json!({
                "includedNamespaces": ["team-a"],
                "ttl": "240h",
                "defaultVolumesToFsBackup": true,
                "snapshotVolumes": false,
                "csiSnapshotTimeout": "10m",
                "itemOperationTimeout": "4h"
            })),
            object(json!({
                "includedNamespaces": ["team-b"],
                "excludedNamespaces": ["x"],
                "includeClusterResources": true,
                "storageLocation": "mine",
                "ttl": "0s",
                "csiSnapshotTimeout": "bogus",
                "snapshotVolumes": null
            })),
            object(json!({"ttl": 5, "includedNamespaces": "team-a", "hooks": {"resources": []}})),
        ],
        restores: vec![
            Map::new(),
            object(json!({"backupName": "nightly", "restorePVs": true})),
            object(json!({
                "backupName": "",
                "scheduleName": "s",
                "namespaceMapping": {"a": "b"},
                "includeClusterResources": true,
                "itemOperationTimeout": "1h"
            })),
        ],
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::parse(text) else {
        return;
    };
    let _ = policy.summary();
    let s = specs();
    for spec in &s.backups {
        let out = evaluate_backup(spec, &policy, "team-a");
        let _ = out.message();
    }
    for spec in &s.restores {
        let out = evaluate_restore(spec, &policy);
        let _ = out.message();
    }
});
