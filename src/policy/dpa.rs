//! `nac policy from-dpa`: the non-admin settings of an OADP DataProtectionApplication (`spec.nonAdmin`) as nac's
//! policy, for an admin moving from OADP's non-admin controller to nac. Pure: it reads the manifest text and
//! returns the policy document, checked by [`Policy::parse`] before it is handed back.
//!
//! What each DPA field becomes (field names as in oadp-operator's `NonAdmin` type):
//! - `enforceBackupSpec` / `enforceRestoreSpec` → `enforceBackupSpec` / `enforceRestoreSpec` (same meaning: filled
//!   when a tenant leaves the field out, refused when different). Fields OADP's operator refuses to enforce are
//!   refused here with its words, as such a DPA never ran.
//! - `enforceBSLSpec` → `nonAdminBSL.enforceBSLSpec`; tenants' own locations stay open (`nonAdminBSL.enabled`), as
//!   they are in OADP; `requireApprovalForBSL` → `nonAdminBSL.requireApproval` (OADP's default: false).
//! - `backupSyncPeriod` (OADP's default 2m; 0 turns sync off) → `backupSync.period`, and the DPA's default
//!   storage location → `backupSync.adminLocations` (OADP syncs the backups on the default location).
//! - `garbageCollectionPeriod` (default 24h) → `garbageCollection.period`.
//! - Downloads of backups on admin locations stay closed (`downloads.adminLocations: deny`), as in OADP.

use super::duration::GoDuration;
use super::{Policy, POLICY_KEY};
use serde_json::{json, Map, Value};

/// OADP's default `spec.nonAdmin.backupSyncPeriod`.
const OADP_SYNC_PERIOD: &str = "2m0s";
/// OADP's default `spec.nonAdmin.garbageCollectionPeriod`.
const OADP_GC_PERIOD: &str = "24h0m0s";

const NON_ADMIN_FIELDS: &[&str] = &[
    "enable",
    "enforceBackupSpec",
    "enforceRestoreSpec",
    "enforceBSLSpec",
    "requireApprovalForBSL",
    "garbageCollectionPeriod",
    "backupSyncPeriod",
];

/// The policy made from a DataProtectionApplication, and what the admin should know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct FromDpa {
    /// The policy document (the `policy.yaml` key of nac's policy ConfigMap), as JSON.
    pub policy: Value,
    /// One line per choice the translation made that is not a plain copy.
    pub notes: Vec<String>,
}

impl FromDpa {
    /// The policy document as YAML.
    pub fn policy_yaml(&self) -> String {
        serde_yaml::to_string(&self.policy).expect("a JSON value serializes as YAML")
    }

    /// nac's policy ConfigMap `name` in `namespace` holding the policy, the notes as comments above it.
    pub fn configmap_yaml(&self, name: &str, namespace: &str) -> String {
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/name": "nac", "nac.oadp.openshift.io/policy": "true"},
            },
            "data": {POLICY_KEY: self.policy_yaml()},
        });
        let mut out = String::from("# nac policy translated from a DataProtectionApplication's spec.nonAdmin\n");
        for n in &self.notes {
            out.push_str(&format!("# - {n}\n"));
        }
        out.push_str(&serde_yaml::to_string(&cm).expect("a JSON value serializes as YAML"));
        out
    }
}

/// Translates the DataProtectionApplication manifest `text` (YAML or JSON). `Err` names what is wrong.
pub fn from_dpa(text: &str) -> Result<FromDpa, String> {
    let dpa: Value = serde_yaml::from_str(text).map_err(|e| format!("not a YAML or JSON manifest: {e}"))?;
    let kind = dpa.get("kind").and_then(Value::as_str);
    if kind != Some("DataProtectionApplication") {
        return Err(format!(
            "expected a DataProtectionApplication (kind: DataProtectionApplication), got kind {}",
            kind.map_or("none".to_string(), |k| format!("{k:?}"))
        ));
    }
    let name = dpa
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let spec = dpa.get("spec").cloned().unwrap_or(Value::Null);
    let non_admin = match spec.get("nonAdmin") {
        Some(Value::Object(m)) => m.clone(),
        Some(Value::Null) | None => {
            return Err("the DataProtectionApplication has no spec.nonAdmin: nothing to translate".into())
        }
        Some(other) => return Err(format!("spec.nonAdmin must be a mapping, got {other}")),
    };
    known_fields(&non_admin)?;
    let mut notes = Vec::new();
    if non_admin.get("enable") != Some(&Value::Bool(true)) {
        notes.push(
            "spec.nonAdmin.enable is not true: OADP's non-admin controller is off in this DataProtectionApplication; \
             its settings are translated all the same"
                .into(),
        );
    }
    let mut policy = Map::new();
    enforced_specs(&non_admin, &mut policy)?;
    policy.insert("nonAdminBSL".into(), locations(&non_admin, &mut notes)?);
    policy.insert("backupSync".into(), sync(&non_admin, &spec, name, &mut notes)?);
    let gc_period = period(&non_admin, "garbageCollectionPeriod", OADP_GC_PERIOD)?;
    policy.insert("garbageCollection".into(), json!({"period": gc_period.to_string()}));
    policy.insert("downloads".into(), json!({"adminLocations": "deny"}));
    notes.push(
        "nac also checks each requester's own rights (rights.backup and rights.restore: exclude, nac's default): \
         a backup leaves out, and a restore does not create, what the user may not read or create themselves; \
         OADP's controller did not check (rights: {backup: off, restore: off} keeps its behaviour)"
            .into(),
    );
    let policy = Value::Object(policy);
    let yaml = serde_yaml::to_string(&policy).expect("a JSON value serializes as YAML");
    Policy::parse(&yaml).map_err(|e| format!("the translated policy is not valid: {e}"))?;
    Ok(FromDpa { policy, notes })
}

/// Refuses a key of `spec.nonAdmin` that is not a field of it, with the field meant when it is a known misspelling
/// (OADP's README once used dotted keys).
fn known_fields(non_admin: &Map<String, Value>) -> Result<(), String> {
    let Some(key) = non_admin.keys().find(|k| !NON_ADMIN_FIELDS.contains(&k.as_str())) else {
        return Ok(());
    };
    let hint = ["enforcedBackupSpec", "enforceBackupSpecs"]
        .iter()
        .map(|w| (w, "enforceBackupSpec"))
        .chain(
            ["enforcedRestoreSpec", "enforceRestoreSpecs"]
                .iter()
                .map(|w| (w, "enforceRestoreSpec")),
        )
        .find(|(w, _)| key == *w || key.starts_with(&format!("{w}.")))
        .map(|(_, field)| {
            let sub = key.split_once('.').map(|(_, s)| s).unwrap_or("FIELD");
            format!(" (the field is {field}, a mapping: `{field}: {{{sub}: VALUE}}`)")
        })
        .unwrap_or_default();
    Err(format!(
        "spec.nonAdmin.{key} is not a field of the DataProtectionApplication{hint}; its fields are {}",
        NON_ADMIN_FIELDS.join(", ")
    ))
}

/// `enforceBackupSpec` and `enforceRestoreSpec` into `policy`, refusing what oadp-operator refuses to enforce.
fn enforced_specs(non_admin: &Map<String, Value>, policy: &mut Map<String, Value>) -> Result<(), String> {
    let backup = mapping(non_admin, "enforceBackupSpec")?;
    unset(
        &backup,
        "enforceBackupSpec",
        &[
            "storageLocation",
            "volumeSnapshotLocations",
            "includedNamespaces",
            "excludedNamespaces",
        ],
    )?;
    if backup.get("includeClusterResources") == Some(&Value::Bool(true)) {
        return Err(non_enforceable("enforceBackupSpec", "includeClusterResources"));
    }
    if backup
        .get("includedClusterScopedResources")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(non_enforceable("enforceBackupSpec", "includedClusterScopedResources"));
    }
    if !backup.is_empty() {
        policy.insert("enforceBackupSpec".into(), Value::Object(backup));
    }

    let restore = mapping(non_admin, "enforceRestoreSpec")?;
    unset(
        &restore,
        "enforceRestoreSpec",
        &[
            "scheduleName",
            "includedNamespaces",
            "excludedNamespaces",
            "namespaceMapping",
        ],
    )?;
    if !restore.is_empty() {
        policy.insert("enforceRestoreSpec".into(), Value::Object(restore));
    }
    Ok(())
}

/// The policy's `nonAdminBSL`: tenants' own locations open, as in OADP, with its approval and enforced spec.
fn locations(non_admin: &Map<String, Value>, notes: &mut Vec<String>) -> Result<Value, String> {
    let bsl = mapping(non_admin, "enforceBSLSpec")?;
    let require_approval = match non_admin.get("requireApprovalForBSL") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "spec.nonAdmin.requireApprovalForBSL must be true or false, got {other}"
            ))
        }
    };
    let mut locations = Map::new();
    locations.insert("enabled".into(), Value::Bool(true));
    locations.insert("requireApproval".into(), Value::Bool(require_approval));
    if !bsl.is_empty() {
        locations.insert("enforceBSLSpec".into(), Value::Object(bsl));
    }
    if !require_approval {
        notes.push(
            "tenants' storage locations are approved on creation (requireApprovalForBSL is not true); an admin's \
             reject on a request still stands in nac (OADP's controller turns it back to approve)"
                .into(),
        );
    }
    Ok(Value::Object(locations))
}

/// The policy's `backupSync`: OADP's period, and the DPA's default location as the admin location synced.
fn sync(non_admin: &Map<String, Value>, spec: &Value, dpa: &str, notes: &mut Vec<String>) -> Result<Value, String> {
    let sync_period = period(non_admin, "backupSyncPeriod", OADP_SYNC_PERIOD)?;
    let mut sync = Map::new();
    if sync_period.is_zero() {
        notes.push(
            "backup sync is off (backupSyncPeriod 0): no backup found in object storage gets its NonAdminBackup back"
                .into(),
        );
        sync.insert("adminLocations".into(), json!([]));
        sync.insert("period".into(), json!("0s"));
        return Ok(Value::Object(sync));
    }
    match default_location(spec, dpa)? {
        Some(l) => {
            sync.insert("adminLocations".into(), json!([l]));
        }
        None => notes.push(
            "no default location in spec.backupLocations: list the name of Velero's default \
             BackupStorageLocation in backupSync.adminLocations, or backups on it do not get their \
             NonAdminBackups back after a namespace is lost"
                .into(),
        ),
    }
    sync.insert("period".into(), json!(sync_period.to_string()));
    Ok(Value::Object(sync))
}

/// Refuses any of `fields` set in `section`: oadp-operator does not let admins enforce them.
fn unset(spec: &Map<String, Value>, section: &str, fields: &[&str]) -> Result<(), String> {
    match fields.iter().find(|f| spec.get(**f).is_some_and(|v| !v.is_null())) {
        Some(field) => Err(non_enforceable(section, field)),
        None => Ok(()),
    }
}

fn non_enforceable(section: &str, field: &str) -> String {
    // oadp-operator's own refusal, so an admin recognises it: such a DataProtectionApplication never ran.
    format!("DPA spec.nonAdmin.{section}.{field} is non-enforceable by admins")
}

/// The mapping at `spec.nonAdmin.<key>` (empty when absent).
fn mapping(non_admin: &Map<String, Value>, key: &str) -> Result<Map<String, Value>, String> {
    match non_admin.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => Err(format!("spec.nonAdmin.{key} must be a mapping, got {other}")),
    }
}

/// The duration at `spec.nonAdmin.<key>`, OADP's default when absent.
fn period(non_admin: &Map<String, Value>, key: &str, default: &str) -> Result<GoDuration, String> {
    let text = match non_admin.get(key) {
        None | Some(Value::Null) => default.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.as_u64() == Some(0) => "0s".into(),
        Some(other) => {
            return Err(format!(
                "spec.nonAdmin.{key} must be a duration such as 2m0s, got {other}"
            ))
        }
    };
    if text.trim_start().starts_with('-') {
        return Err(format!("DPA spec.nonAdmin.{key} can not be negative"));
    }
    GoDuration::parse(&text).map_err(|e| format!("spec.nonAdmin.{key} {text:?}: {e}"))
}

/// The Velero name of the DPA's default storage location: its `name`, or `<dpa>-<n>` for the n-th entry without
/// one (as oadp-operator names them).
fn default_location(spec: &Value, dpa: &str) -> Result<Option<String>, String> {
    let Some(locations) = spec.get("backupLocations").and_then(Value::as_array) else {
        return Ok(None);
    };
    for (i, l) in locations.iter().enumerate() {
        if l.pointer("/velero/default") != Some(&Value::Bool(true)) {
            continue;
        }
        if let Some(n) = l.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Ok(Some(n.to_string()));
        }
        if dpa.is_empty() {
            return Err(format!(
                "spec.backupLocations[{i}] is the default location and has no name, and the \
                 DataProtectionApplication has no metadata.name to name it after"
            ));
        }
        return Ok(Some(format!("{dpa}-{}", i + 1)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = format!("{}/tests/fixtures/dpa/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn policy_of(name: &str) -> (Policy, FromDpa) {
        let t = from_dpa(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        (Policy::parse(&t.policy_yaml()).unwrap(), t)
    }

    #[test]
    fn enforced_location_fields_become_the_tenant_location_rules() {
        let (p, t) = policy_of("enforced-location.yaml");
        assert!(p.non_admin_bsl.enabled);
        assert!(!p.non_admin_bsl.require_approval, "OADP's default");
        assert_eq!(
            Value::Object(p.non_admin_bsl.enforce_bsl_spec.clone()),
            json!({
                "provider": "aws",
                "objectStorage": {"bucket": "tenants-bucket", "prefix": "velero"},
                "config": {"region": "us-west-2", "profile": "default", "checksumAlgorithm": ""},
            })
        );
        // The DPA's unnamed default location is named as oadp-operator names it.
        assert_eq!(p.backup_sync.admin_locations, vec!["dpa-sample-1".to_string()]);
        assert_eq!(p.backup_sync.period.to_string(), "2m0s");
        assert_eq!(p.garbage_collection.period.to_string(), "24h0m0s");
        assert!(p.enforce_backup_spec.is_empty() && p.enforce_restore_spec.is_empty());
        assert!(
            t.notes.iter().any(|n| n.contains("approved on creation")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn enforced_backup_and_restore_fields_are_carried_over() {
        let (p, t) = policy_of("enforced-specs.yaml");
        assert_eq!(
            Value::Object(p.enforce_backup_spec.clone()),
            json!({"ttl": "158h0m0s", "snapshotMoveData": true, "defaultVolumesToFsBackup": false})
        );
        assert_eq!(
            Value::Object(p.enforce_restore_spec.clone()),
            json!({"restorePVs": true, "itemOperationTimeout": "7h0m0s"})
        );
        assert!(p.non_admin_bsl.require_approval);
        assert_eq!(p.backup_sync.admin_locations, vec!["main".to_string()]);
        assert_eq!(p.backup_sync.period.to_string(), "5m0s");
        assert_eq!(p.garbage_collection.period.to_string(), "12h0m0s");
        assert!(!t.notes.iter().any(|n| n.contains("approved on creation")));
        // The ConfigMap holds the same document, and `nac policy check` reads it back.
        let cm = t.configmap_yaml("nac-policy", "nac-system");
        let doc = crate::policy::policy_text_of(&cm).unwrap();
        assert_eq!(Policy::parse(&doc).unwrap(), p);
        assert!(cm.starts_with("# nac policy translated"), "{cm}");
    }

    #[test]
    fn sync_off_and_controller_off_are_said() {
        let (p, t) = policy_of("sync-off.yaml");
        assert!(p.backup_sync.admin_locations.is_empty());
        assert!(p.backup_sync.period.is_zero());
        assert!(
            t.notes.iter().any(|n| n.contains("backup sync is off")),
            "{:?}",
            t.notes
        );
        assert!(
            t.notes.iter().any(|n| n.contains("enable is not true")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn the_dotted_keys_of_oadps_readme_are_refused_with_the_field_to_use() {
        let e = from_dpa(&fixture("dotted-keys.yaml")).unwrap_err();
        assert!(
            e.contains("spec.nonAdmin.enforcedBackupSpec.snapshotMoveData is not a field")
                && e.contains("`enforceBackupSpec: {snapshotMoveData: VALUE}`"),
            "{e}"
        );
    }

    #[test]
    fn what_oadps_operator_refuses_is_refused_in_its_words() {
        let e = from_dpa(&fixture("enforced-location-name.yaml")).unwrap_err();
        assert_eq!(
            e,
            "DPA spec.nonAdmin.enforceBackupSpec.storageLocation is non-enforceable by admins"
        );
        let dpa = |non_admin: &str| {
            format!("kind: DataProtectionApplication\nmetadata: {{name: d}}\nspec:\n  nonAdmin: {non_admin}\n")
        };
        for (non_admin, want) in [
            (
                "{enforceRestoreSpec: {namespaceMapping: {a: b}}}",
                "DPA spec.nonAdmin.enforceRestoreSpec.namespaceMapping is non-enforceable by admins",
            ),
            (
                "{enforceBackupSpec: {includeClusterResources: true}}",
                "DPA spec.nonAdmin.enforceBackupSpec.includeClusterResources is non-enforceable by admins",
            ),
            (
                "{backupSyncPeriod: -1m}",
                "DPA spec.nonAdmin.backupSyncPeriod can not be negative",
            ),
        ] {
            assert_eq!(from_dpa(&dpa(non_admin)).unwrap_err(), want);
        }
        // nac's own checks of the result: a TTL that is not a duration.
        let e = from_dpa(&dpa("{enforceBackupSpec: {ttl: soon}}")).unwrap_err();
        assert!(
            e.starts_with("the translated policy is not valid: ") && e.contains("ttl"),
            "{e}"
        );
        assert!(from_dpa(&dpa("{enable: true}")).is_ok());
    }

    #[test]
    fn not_a_dpa_or_no_non_admin_section_is_refused() {
        assert!(from_dpa("kind: ConfigMap\n")
            .unwrap_err()
            .contains("expected a DataProtectionApplication"));
        assert_eq!(
            from_dpa("kind: DataProtectionApplication\nspec: {}\n").unwrap_err(),
            "the DataProtectionApplication has no spec.nonAdmin: nothing to translate"
        );
        assert!(from_dpa(": :").unwrap_err().starts_with("not a YAML or JSON manifest"));
    }
}
