//! Unset fields as Go clients send them. Velero's and OADP's Go types hold some fields by value
//! (`metav1.Duration`, structs such as `hooks`), and Go's JSON encoder writes those even when nothing set them:
//! an unset TTL arrives as `"ttl": "0s"`, unset hooks as `"hooks": {}`. OADP's controller reads a field at its
//! zero value as not set; so does nac, with this one rule, at admission and in the reconciler's re-check alike.
//!
//! A field is unset when it holds `null`, `""`, `[]`, `{}`, or, where its Go type is a value duration, a zero
//! duration. `false` and numbers always stand: every boolean of these specs is a Go pointer (`*bool`), so a Go
//! client sends `false` only when it was asked to, and a pointer duration (a storage location's
//! `backupSyncPeriod`, `validationFrequency`) set to zero is Velero's way to turn that work off.

use super::duration::GoDuration;
use serde_json::{Map, Value};

/// What a Go client writes for the unset fields of one Velero spec type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoFields {
    /// Top-level `metav1.Duration` fields held by value: zero means unset.
    pub value_durations: &'static [&'static str],
    /// Top-level `*metav1.Duration` fields: compared by value, zero stands.
    pub pointer_durations: &'static [&'static str],
}

/// `velerov1.BackupSpec` (also a schedule's template).
pub const BACKUP: GoFields = GoFields {
    value_durations: super::BACKUP_DURATION_FIELDS,
    pointer_durations: &[],
};
/// `velerov1.RestoreSpec`.
pub const RESTORE: GoFields = GoFields {
    value_durations: super::RESTORE_DURATION_FIELDS,
    pointer_durations: &[],
};
/// `velerov1.BackupStorageLocationSpec`.
pub const STORAGE_LOCATION: GoFields = GoFields {
    value_durations: &[],
    pointer_durations: &["backupSyncPeriod", "validationFrequency"],
};

/// Value durations below the top level: hook timeouts (`timeout` of backup exec hooks, `execTimeout` and
/// `waitTimeout` of restore exec hooks). Only the update comparison looks this deep.
const NESTED_VALUE_DURATIONS: &[&str] = &["timeout", "execTimeout", "waitTimeout"];

fn is_zero_duration(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| GoDuration::parse(s).ok())
        .is_some_and(|d| d.is_zero())
}

/// Whether `value` of field `key` is what a Go client writes when nothing set it.
fn unset(key: &str, value: &Value, value_durations: &[&str]) -> bool {
    super::is_empty_value(value) || (value_durations.contains(&key) && is_zero_duration(value))
}

/// The spec without its unset top-level fields: what policy evaluation reads, so a Go client's zero values get
/// the same enforced values, defaults and bounds as fields left out.
pub fn without_unset(spec: &Map<String, Value>, fields: GoFields) -> Map<String, Value> {
    spec.iter()
        .filter(|(k, v)| !unset(k, v, fields.value_durations))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether two specs ask for the same thing once a Go client has read one and written it back: unset fields at
/// any depth count as absent and durations compare by value (Go writes `720h` back as `720h0m0s`). A Go client
/// updates by sending the whole object it read, so this is how an update that changes nothing in the spec (say,
/// setting `deleteBackup`) is told from one that does.
pub fn same_request(a: &Map<String, Value>, b: &Map<String, Value>, fields: GoFields) -> bool {
    let durations: Vec<&str> = fields
        .value_durations
        .iter()
        .chain(fields.pointer_durations)
        .copied()
        .collect();
    same_map(a, b, fields.value_durations, &durations)
}

fn same_map(a: &Map<String, Value>, b: &Map<String, Value>, zero_unset: &[&str], durations: &[&str]) -> bool {
    let set = |m: &Map<String, Value>, k: &str| m.get(k).filter(|v| !unset(k, v, zero_unset)).cloned();
    a.keys().chain(b.keys()).all(|k| match (set(a, k), set(b, k)) {
        (None, None) => true,
        (Some(x), Some(y)) => same_value(k, &x, &y, durations),
        _ => false,
    })
}

fn same_value(key: &str, a: &Value, b: &Value, durations: &[&str]) -> bool {
    if a == b {
        return true;
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) if durations.contains(&key) || NESTED_VALUE_DURATIONS.contains(&key) => {
            matches!((GoDuration::parse(x), GoDuration::parse(y)), (Ok(x), Ok(y)) if x == y)
        }
        (Value::Object(x), Value::Object(y)) => same_map(x, y, NESTED_VALUE_DURATIONS, NESTED_VALUE_DURATIONS),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value("", x, y, &[]))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::wire::object as map;

    #[test]
    fn zero_durations_and_empty_values_are_unset_false_is_not() {
        let got = without_unset(
            &map(
                json!({"ttl": "0s", "csiSnapshotTimeout": "0", "itemOperationTimeout": "0h0m0s", "hooks": {},
                        "metadata": {}, "storageLocation": "", "excludedResources": [], "snapshotVolumes": false,
                        "labelSelector": null, "includedResources": ["pods"]}),
            ),
            BACKUP,
        );
        assert_eq!(
            Value::Object(got),
            json!({"snapshotVolumes": false, "includedResources": ["pods"]})
        );
        // A pointer duration at zero is a request (Velero: stop syncing).
        let got = without_unset(
            &map(json!({"backupSyncPeriod": "0s", "provider": ""})),
            STORAGE_LOCATION,
        );
        assert_eq!(Value::Object(got), json!({"backupSyncPeriod": "0s"}));
        // A restore's TTL is not a field: a string there is not read as a duration.
        let got = without_unset(&map(json!({"ttl": "0s"})), RESTORE);
        assert_eq!(Value::Object(got), json!({"ttl": "0s"}));
    }

    #[test]
    fn a_go_round_trip_is_the_same_request_a_change_is_not() {
        let stored = map(json!({"ttl": "720h", "includedNamespaces": ["ns"],
            "hooks": {"resources": [{"name": "h", "pre": [{"exec": {"command": ["true"], "timeout": "1m"}}]}]}}));
        let round_trip = map(json!({"metadata": {}, "ttl": "720h0m0s", "includedNamespaces": ["ns"],
            "csiSnapshotTimeout": "0s", "itemOperationTimeout": "0s",
            "hooks": {"resources": [{"name": "h", "pre": [{"exec": {"command": ["true"], "timeout": "1m0s"}}]}]}}));
        assert!(same_request(&stored, &round_trip, BACKUP));
        for changed in [
            json!({"ttl": "1h"}),
            json!({"snapshotVolumes": false}),
            json!({"includedNamespaces": ["other"]}),
            json!({"hooks": {"resources": [{"name": "h", "pre": [{"exec": {"command": ["true"], "timeout": "2m"}}]}]}}),
        ] {
            let mut m = round_trip.clone();
            m.extend(map(changed.clone()));
            assert!(!same_request(&stored, &m, BACKUP), "{changed}");
        }
        // Durations outside the known fields are plain strings.
        assert!(!same_request(
            &map(json!({"datamover": "1h"})),
            &map(json!({"datamover": "60m"})),
            BACKUP
        ));
        assert!(same_request(
            &map(json!({"backupSyncPeriod": "1m"})),
            &map(json!({"backupSyncPeriod": "1m0s"})),
            STORAGE_LOCATION
        ));
        assert!(!same_request(
            &map(json!({})),
            &map(json!({"backupSyncPeriod": "0s"})),
            STORAGE_LOCATION
        ));
    }
}
