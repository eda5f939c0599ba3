//! Evaluation: (spec, policy, namespace) → mutated spec, warnings, violations.
//!
//! Specs are handled as raw JSON maps so fields nac does not model pass through untouched and the webhook can
//! diff the result into a JSON patch.

use super::duration::GoDuration;
use super::{
    display_value, is_empty_value, Policy, BACKUP_DURATION_FIELDS, RESTORE_DURATION_FIELDS, VELERO_DEFAULT_TTL,
};
use serde_json::{Map, Value};

/// A rule the spec breaks, with the field it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Full path of the field, e.g. `spec.backupSpec.ttl`.
    pub field: String,
    pub message: String,
}

/// The result of applying the policy to a spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The spec with enforced and defaulted fields filled in.
    pub spec: Map<String, Value>,
    /// What was filled in, for the user to see.
    pub warnings: Vec<String>,
    /// Why the spec is not allowed; empty when it is.
    pub violations: Vec<Violation>,
}

impl Outcome {
    pub fn allowed(&self) -> bool {
        self.violations.is_empty()
    }

    /// All violations as one message, as the webhook denies and the reconciler reports.
    pub fn message(&self) -> String {
        self.violations
            .iter()
            .map(|v| v.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

const NAB: &str = "NonAdminBackup";
const NAR: &str = "NonAdminRestore";
const BACKUP_PREFIX: &str = "spec.backupSpec";
const RESTORE_PREFIX: &str = "spec.restoreSpec";
/// Spec fields (of a BackupSpec or a RestoreSpec) that reference an object in Velero's namespace.
const VELERO_NAMESPACE_REFS: &[&str] = &["resourcePolicy", "resourceModifier"];

struct Ctx<'p> {
    kind: &'p str,
    prefix: &'p str,
    /// Who set what is enforced (`Policy::by`).
    by: String,
    /// The tier's name in refusals of enforced values; empty under the base (OADP's wording exactly).
    tier_note: String,
    out: Outcome,
}

impl Ctx<'_> {
    fn deny(&mut self, field: &str, detail: String) {
        let path = format!("{}.{field}", self.prefix);
        let message = if detail.is_empty() {
            format!("{} {path} is restricted", self.kind)
        } else {
            format!("{} {path} is restricted, {detail}", self.kind)
        };
        self.out.violations.push(Violation { field: path, message });
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.out.spec.get(field).filter(|v| !v.is_null())
    }

    fn fill(&mut self, field: &str, value: Value, warn: bool) {
        if warn {
            self.out.warnings.push(format!(
                "{}.{field} set to {} by {}",
                self.prefix,
                display_value(&value),
                self.by
            ));
        }
        self.out.spec.insert(field.to_string(), value);
    }

    /// Denies any non-empty value of `field`.
    fn must_be_empty(&mut self, field: &str, detail: &str) {
        if let Some(v) = self.get(field).filter(|v| !is_empty_value(v)) {
            let got = display_value(v);
            self.deny(field, format!("{detail} (got {got})"));
        }
    }

    fn must_not_be_true(&mut self, field: &str) {
        if let Some(v) = self.get(field) {
            if *v != Value::Bool(false) {
                let got = display_value(v);
                self.deny(field, format!("can only be set to false (got {got})"));
            }
        }
    }

    /// Fields naming an object Velero reads in its own namespace: a tenant could point Velero at any ConfigMap
    /// there (another tenant's resource policy, a modifier that rewrites what is restored). Only the policy may set
    /// them, by enforcing them.
    fn only_enforced(&mut self, fields: &[&str], enforced: &Map<String, Value>) {
        for field in fields.iter().filter(|f| !enforced.contains_key(**f)) {
            self.must_be_empty(
                field,
                "names a ConfigMap in Velero's namespace, which only the cluster administrator may choose (by \
                 enforcing it in the policy)",
            );
        }
    }

    fn apply_enforced(&mut self, enforced: &Map<String, Value>, duration_fields: &[&str]) {
        for (field, want) in enforced {
            match self.get(field).cloned() {
                None => self.fill(field, want.clone(), true),
                Some(got) if equivalent(field, &got, want, duration_fields) => {}
                Some(got) => {
                    let path = format!("{}.{field}", self.prefix);
                    let (got, want) = (display_value(&got), display_value(want));
                    self.deny(
                        field,
                        format!(
                            "the administrator has restricted {path} field value to {want} (requested {got}){}",
                            self.tier_note
                        ),
                    );
                }
            }
        }
    }

    /// What Velero would refuse at validation (see `velero::validation`: such a backup can stall Velero's queue for
    /// every tenant), and an include list of nothing but kinds nac leaves out. A field already refused above is
    /// not named twice.
    fn velero_checks(&mut self) {
        use crate::velero::{exclusions, validation};
        if let Some(field) = exclusions::includes_only_excluded(&self.out.spec) {
            let got = self.get(field).map(display_value).unwrap_or_default();
            let path = format!("{}.{field}", self.prefix);
            self.out.violations.push(Violation {
                message: format!(
                    "{} {path} names only kinds nac leaves out of every tenant backup (got {got}): the backup would \
                     hold none of them",
                    self.kind
                ),
                field: path,
            });
        }
        for p in validation::backup_spec_problems(&self.out.spec) {
            let path = format!("{}.{}", self.prefix, p.field);
            if self.out.violations.iter().any(|v| v.field == path) {
                continue;
            }
            let message = validation::message(self.kind, self.prefix, &p);
            self.out.violations.push(Violation { field: path, message });
        }
    }

    fn check_durations(&mut self, duration_fields: &[&str]) {
        for field in duration_fields {
            match self.get(field) {
                Some(Value::String(s)) => {
                    if let Err(e) = GoDuration::parse(s) {
                        self.deny(field, e.to_string());
                    }
                }
                Some(other) => {
                    let got = display_value(other);
                    self.deny(field, format!("must be a duration string (got {got})"));
                }
                None => {}
            }
        }
    }
}

/// ` (cluster policy tier "gold")` under a tier, nothing under the base.
pub(crate) fn tier_note(policy: &Policy) -> String {
    match &policy.tier {
        Some(_) => format!(" ({})", policy.by()),
        None => String::new(),
    }
}

/// Whether a user's value matches an enforced one: durations by value, everything else as whole JSON values.
fn equivalent(field: &str, got: &Value, want: &Value, duration_fields: &[&str]) -> bool {
    if got == want {
        return true;
    }
    if duration_fields.contains(&field) {
        if let (Some(a), Some(b)) = (got.as_str(), want.as_str()) {
            if let (Ok(a), Ok(b)) = (GoDuration::parse(a), GoDuration::parse(b)) {
                return a == b;
            }
        }
    }
    false
}

/// Applies the policy and the tenant rules to a NonAdminBackup's `spec.backupSpec`.
pub fn evaluate_backup(spec: &Map<String, Value>, policy: &Policy, namespace: &str) -> Outcome {
    evaluate_backup_as(spec, policy, namespace, NAB, BACKUP_PREFIX)
}

/// [`evaluate_backup`] for a BackupSpec held by another kind (a schedule's template): messages name `kind` and
/// fields start with `prefix`.
pub fn evaluate_backup_as(
    spec: &Map<String, Value>,
    policy: &Policy,
    namespace: &str,
    kind: &str,
    prefix: &str,
) -> Outcome {
    let mut c = Ctx {
        kind,
        prefix,
        by: policy.by(),
        tier_note: tier_note(policy),
        out: Outcome {
            spec: super::zero::without_unset(spec, super::zero::BACKUP),
            ..Outcome::default()
        },
    };

    // The tenant boundary: the own namespace only, nothing cluster-wide.
    match c.get("includedNamespaces").cloned() {
        None => c.fill("includedNamespaces", Value::Array(vec![namespace.into()]), false),
        Some(Value::Array(list)) if list.is_empty() => {
            c.fill("includedNamespaces", Value::Array(vec![namespace.into()]), false)
        }
        Some(Value::Array(list)) if list.iter().all(|n| n.as_str() == Some(namespace)) => {
            c.out
                .spec
                .insert("includedNamespaces".into(), Value::Array(vec![namespace.into()]));
        }
        Some(other) => {
            let got = display_value(&other);
            c.deny(
                "includedNamespaces",
                format!("can only contain namespace {namespace} (got {got})"),
            );
        }
    }
    c.must_be_empty("excludedNamespaces", "must remain empty");
    c.must_not_be_true("includeClusterResources");
    c.must_be_empty("includedClusterScopedResources", "must remain empty");
    c.must_be_empty("volumeSnapshotLocations", "must remain empty");
    c.only_enforced(VELERO_NAMESPACE_REFS, &policy.enforce_backup_spec);
    // storageLocation: absent, the enforced value, or (when tenants may bring their own) the name of a
    // NonAdminBackupStorageLocation of this namespace, which the reconciler resolves.
    let enforced_location = policy.enforce_backup_spec.get("storageLocation");
    let own_location = match c.get("storageLocation").cloned() {
        Some(v) if Some(&v) == enforced_location || is_empty_value(&v) => None,
        Some(Value::String(name)) if policy.non_admin_bsl.enabled => {
            if !crate::naming::is_object_name(&name) {
                c.deny(
                    "storageLocation",
                    format!("must name a NonAdminBackupStorageLocation of this namespace (got {name:?})"),
                );
            }
            Some(name)
        }
        Some(_) if policy.non_admin_bsl.enabled => {
            c.deny(
                "storageLocation",
                "must name a NonAdminBackupStorageLocation of this namespace".into(),
            );
            None
        }
        Some(_) if enforced_location.is_none() => {
            let detail = format!("the {} does not let users choose a storage location", policy.by());
            c.must_be_empty("storageLocation", &detail);
            None
        }
        Some(_) | None => None,
    };
    if own_location.is_some() {
        let mut others = policy.enforce_backup_spec.clone();
        others.remove("storageLocation");
        c.apply_enforced(&others, BACKUP_DURATION_FIELDS);
    } else {
        c.apply_enforced(&policy.enforce_backup_spec, BACKUP_DURATION_FIELDS);
    }
    c.check_durations(BACKUP_DURATION_FIELDS);

    // TTL bounds. A missing TTL (zero is missing, see `zero`) means Velero's default, which must itself fit the
    // bounds.
    let bounds = &policy.backup;
    let requested = c
        .get("ttl")
        .and_then(Value::as_str)
        .and_then(|s| GoDuration::parse(s).ok());
    match requested {
        None if c.get("ttl").is_none() => {
            let mut d = bounds.default_ttl.unwrap_or(VELERO_DEFAULT_TTL);
            if let Some(max) = bounds.max_ttl {
                d = d.min(max);
            }
            if let Some(min) = bounds.min_ttl {
                d = d.max(min);
            }
            if d != VELERO_DEFAULT_TTL || bounds.default_ttl.is_some() {
                c.fill("ttl", Value::String(d.to_string()), true);
            }
        }
        None => {}
        Some(d) => {
            if let Some(max) = bounds.max_ttl.filter(|max| d > *max) {
                let by = c.by.clone();
                c.deny("ttl", format!("{d} is above the maximum {max} set by {by}"));
            }
            if let Some(min) = bounds.min_ttl.filter(|min| d < *min) {
                let by = c.by.clone();
                c.deny("ttl", format!("{d} is below the minimum {min} set by {by}"));
            }
        }
    }
    c.velero_checks();
    c.out
}

/// Applies the policy and the tenant rules to a NonAdminRestore's `spec.restoreSpec` in `namespace`. A mapping of
/// the namespace to another (a copy) is judged here for its shape and the source's policy; the target's side
/// needs the cluster ([`super::copy::target_refusal`]).
pub fn evaluate_restore(spec: &Map<String, Value>, policy: &Policy, namespace: &str) -> Outcome {
    let mut c = Ctx {
        kind: NAR,
        prefix: RESTORE_PREFIX,
        by: policy.by(),
        tier_note: tier_note(policy),
        out: Outcome {
            spec: super::zero::without_unset(spec, super::zero::RESTORE),
            ..Outcome::default()
        },
    };
    match c.get("backupName") {
        Some(Value::String(s)) if !s.is_empty() => {}
        _ => {
            let path = format!("{RESTORE_PREFIX}.backupName");
            c.out.violations.push(Violation {
                message: format!("{NAR} {path} is required: name a NonAdminBackup in this namespace"),
                field: path,
            });
        }
    }
    c.must_be_empty("scheduleName", "restores name a NonAdminBackup with backupName");
    c.must_be_empty(
        "includedNamespaces",
        "nac restores into the NonAdminRestore's own namespace only",
    );
    c.must_be_empty("excludedNamespaces", "must remain empty");
    let copy = super::copy::target(&c.out.spec, namespace).and_then(|t| {
        match t.and_then(|t| super::copy::source_refusal(policy, namespace, &t)) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    });
    if let Err(message) = copy {
        c.out.violations.push(Violation {
            field: format!("{RESTORE_PREFIX}.namespaceMapping"),
            message,
        });
    }
    c.must_not_be_true("includeClusterResources");
    c.only_enforced(VELERO_NAMESPACE_REFS, &policy.enforce_restore_spec);
    c.apply_enforced(&policy.enforce_restore_spec, RESTORE_DURATION_FIELDS);
    c.check_durations(RESTORE_DURATION_FIELDS);
    c.out
}

/// On an update: fields the user left out keep their stored values. Specs are immutable, so leaving a field out
/// can only mean "as before"; this keeps `kubectl replace` of the original manifest working after a policy edit.
pub fn fill_from_old(new: &Map<String, Value>, old: &Map<String, Value>) -> Map<String, Value> {
    let mut out = new.clone();
    for (k, v) in old {
        if out.get(k).is_none_or(Value::is_null) && !v.is_null() {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// The first field in which two specs differ (nulls count as absent), for "may not change" messages.
pub fn first_changed_field(old: &Map<String, Value>, new: &Map<String, Value>) -> Option<String> {
    let strip = |m: &Map<String, Value>| -> Value {
        Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    let (a, b) = (strip(old), strip(new));
    if a == b {
        None
    } else {
        Some(super::first_difference(&a, &b, ""))
    }
}
