//! The admin policy: parse, validate, evaluate. Pure: no Kubernetes client in here, so the webhook and the
//! reconciler apply exactly the same rules and both are tested without a cluster.

mod bsl;
pub mod copy;
mod dpa;
pub use crate::duration;
mod eval;
mod lifecycle;
pub mod live;
pub mod objective;
pub mod quotas;
mod schedule;
pub mod tiers;
pub mod zero;

pub use bsl::{
    credential_copy, credential_file, endpoint_violations, evaluate_bsl, evaluate_bsl_endpoints, host_of, judge_host,
    names_to_resolve, tenant_location, tenant_prefix, AllowedEndpoints, Host, HostRule, Network, NonAdminBsl,
    PRIVATE as PRIVATE_RANGES,
};
pub use dpa::{from_dpa, FromDpa};
pub use eval::*;
pub use lifecycle::{AdminDownloads, Downloads, GarbageCollection, DEFAULT_GC_PERIOD};
pub use quotas::{check_quota, Counted, QuotaRefusal, Quotas, Usage, QUOTA_EXCEEDED, STATUS_PROBE_ANNOTATION};
pub use schedule::{check_expression, evaluate_schedule, ScheduleRules, TEMPLATE_PREFIX as SCHEDULE_TEMPLATE_PREFIX};
pub use tiers::{Selector, Tier, TIER_PARTS};

use crate::velero::{BackupSpec, RestoreSpec};
use duration::GoDuration;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Key of the policy document inside the policy ConfigMap.
pub const POLICY_KEY: &str = "policy.yaml";

/// Velero's TTL when a backup names none.
pub const VELERO_DEFAULT_TTL: GoDuration = GoDuration(720 * 3600 * 1_000_000_000);

/// Backup spec fields holding Go durations: compared by value, so `720h` equals `720h0m0s`.
pub(crate) const BACKUP_DURATION_FIELDS: &[&str] = &["ttl", "csiSnapshotTimeout", "itemOperationTimeout"];
pub(crate) const RESTORE_DURATION_FIELDS: &[&str] = &["itemOperationTimeout"];

/// A validated admin policy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    /// BackupSpec fields every NonAdminBackup gets (filled when absent, denied when different).
    pub enforce_backup_spec: Map<String, Value>,
    /// RestoreSpec fields every NonAdminRestore gets.
    pub enforce_restore_spec: Map<String, Value>,
    /// Bounds on what users may ask for in backups.
    pub backup: BackupBounds,
    /// Which backups found in object storage get their NonAdminBackup back.
    pub backup_sync: BackupSync,
    /// How restores wait for their source and which sources they may use.
    pub restore: RestoreRules,
    /// Tenants' own storage locations.
    pub non_admin_bsl: NonAdminBsl,
    /// Which files of backups tenants may download.
    pub downloads: Downloads,
    /// The periodic sweep for orphaned Velero objects.
    pub garbage_collection: GarbageCollection,
    /// What backups and restores do with kinds their requester may not read or create.
    pub rights: Rights,
    /// Bounds on tenants' schedules (NonAdminSchedule).
    pub schedule: ScheduleRules,
    /// Limits per namespace.
    pub quotas: Quotas,
    /// How old a namespace's newest completed backup may get before the namespace is in breach; `None`: not
    /// tracked.
    pub recovery_point_objective: Option<GoDuration>,
    /// The tier this policy is the effective policy of; `None`: the base.
    pub tier: Option<String>,
    /// The base's tiers, in order (empty in a tier's own policy).
    pub tiers: Vec<Tier>,
}

impl Policy {
    /// The tier that selects a namespace with these labels: the first whose selector matches.
    pub fn tier_for(&self, labels: &BTreeMap<String, String>) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.selector.matches(labels))
    }

    /// The policy a namespace with these labels gets: its tier's, else the base (this one).
    pub fn for_labels(self: &Arc<Self>, labels: &BTreeMap<String, String>) -> Arc<Policy> {
        match self.tier_for(labels) {
            Some(t) => t.policy.clone(),
            None => self.clone(),
        }
    }

    /// Who set what this policy enforces, for warnings and refusals: `cluster policy`, or
    /// `cluster policy tier "gold"` in a tier's policy.
    pub fn by(&self) -> String {
        match &self.tier {
            None => "cluster policy".to_string(),
            Some(t) => format!("cluster policy tier {t:?}"),
        }
    }
}

/// Requesters' own rights as the limit of what their backups read (`crate::rights`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rights {
    /// Kinds the requester may not `list` in the namespace: left out (default), refused, or not checked.
    pub backup: crate::rights::RightsMode,
    /// Kinds in the backup the restoring user may not `create` in the namespace (and RBAC objects they could not
    /// create themselves): left out (default), refused, or not checked.
    pub restore: crate::rights::RightsMode,
    /// A tenant's storage location naming a Secret its requester may not `get`: refused (`deny`, the default;
    /// there is nothing to leave out of a credential) or not checked (`off`).
    pub locations: crate::rights::RightsMode,
}

impl Default for Rights {
    fn default() -> Self {
        Rights {
            backup: crate::rights::RightsMode::Exclude,
            restore: crate::rights::RightsMode::Exclude,
            locations: crate::rights::RightsMode::Deny,
        }
    }
}

/// Annotation on a NonAdminRestore overriding how long it waits for its source (`restore.waitTimeout`), within
/// `restore.maxWaitTimeout`.
pub const WAIT_TIMEOUT_ANNOTATION: &str = "nac.oadp.openshift.io/wait-timeout";

/// A restore whose backup is not ready yet waits for it (Velero's wait-for-additional-items pattern): up to a
/// default timeout that each restore may override within a maximum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreRules {
    /// How long a restore waits for its backup by default; zero: refused at once, as before waiting existed.
    pub wait_timeout: GoDuration,
    /// The longest wait a restore may ask for with [`WAIT_TIMEOUT_ANNOTATION`].
    pub max_wait_timeout: GoDuration,
    /// Whether a restore may use a backup Velero finished `PartiallyFailed` (with a warning condition).
    pub allow_partially_failed: bool,
    /// Whether restores may copy a backup into another namespace (`namespaceMapping`), asked of the source's and
    /// the target's policy alike ([`copy`]).
    pub allow_namespace_copies: bool,
}

/// The default wait (Velero's own default for additional items).
pub const DEFAULT_RESTORE_WAIT: GoDuration = GoDuration(10 * 60 * 1_000_000_000);
/// The default longest wait a restore may ask for.
pub const DEFAULT_MAX_RESTORE_WAIT: GoDuration = GoDuration(24 * 3600 * 1_000_000_000);

impl Default for RestoreRules {
    fn default() -> Self {
        RestoreRules {
            wait_timeout: DEFAULT_RESTORE_WAIT,
            max_wait_timeout: DEFAULT_MAX_RESTORE_WAIT,
            allow_partially_failed: true,
            allow_namespace_copies: false,
        }
    }
}

impl RestoreRules {
    /// The summary's line for rules other than the default.
    fn summary(&self) -> String {
        let wait = if self.wait_timeout.is_zero() {
            "restores of unfinished backups are refused at once".to_string()
        } else {
            format!("restores wait up to {} for their backup", self.wait_timeout)
        };
        let pf = if self.allow_partially_failed {
            "allowed"
        } else {
            "refused"
        };
        let copies = if self.allow_namespace_copies {
            "; copies into another namespace the user may restore into allowed"
        } else {
            ""
        };
        format!(
            "{wait} (at most {} on request); restores of PartiallyFailed backups {pf}{copies}",
            self.max_wait_timeout
        )
    }

    /// The wait of a restore with this value of [`WAIT_TIMEOUT_ANNOTATION`] (absent: the default). `Err` names
    /// the problem; the webhook refuses with it and the reconciler backs off with it.
    pub fn wait_for(&self, annotation: Option<&str>) -> Result<GoDuration, String> {
        let Some(v) = annotation else {
            return Ok(self.wait_timeout);
        };
        let field = format!("metadata.annotations[{WAIT_TIMEOUT_ANNOTATION}]");
        let d =
            GoDuration::parse(v.trim()).map_err(|e| format!("NonAdminRestore {field} {v:?} is not a duration: {e}"))?;
        if d > self.max_wait_timeout {
            return Err(format!(
                "NonAdminRestore {field} {d} is above the maximum wait restore.maxWaitTimeout {}",
                self.max_wait_timeout
            ));
        }
        Ok(d)
    }
}

/// Backup sync: Velero re-creates Backup objects from object storage (after a disaster, or on a new cluster);
/// nac gives those that carry its origin labels their NonAdminBackup back, so tenants can restore them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSync {
    /// Admin storage locations (Velero BSL names) whose backups are synced to tenants. Empty: none. A tenant
    /// cannot write to these, so the origin recorded in a backup there is what nac itself wrote.
    pub admin_locations: Vec<String>,
    /// Safety resync of everything; sync is otherwise driven by Velero Backup events. Zero disables it.
    pub period: GoDuration,
}

/// The seed design's default resync period.
pub const DEFAULT_BACKUP_SYNC_PERIOD: GoDuration = GoDuration(30 * 60 * 1_000_000_000);

impl Default for BackupSync {
    fn default() -> Self {
        BackupSync {
            admin_locations: Vec::new(),
            period: DEFAULT_BACKUP_SYNC_PERIOD,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupBounds {
    pub max_ttl: Option<GoDuration>,
    pub min_ttl: Option<GoDuration>,
    /// TTL given to backups that name none (otherwise Velero's 720h, kept inside the bounds).
    pub default_ttl: Option<GoDuration>,
}

/// The document as admins write it.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPolicy {
    enforce_backup_spec: Option<Map<String, Value>>,
    enforce_restore_spec: Option<Map<String, Value>>,
    backup: Option<RawBackupBounds>,
    backup_sync: Option<RawBackupSync>,
    restore: Option<RawRestoreRules>,
    #[serde(rename = "nonAdminBSL")]
    non_admin_bsl: Option<bsl::RawNonAdminBsl>,
    downloads: Option<lifecycle::RawDownloads>,
    garbage_collection: Option<lifecycle::RawGarbageCollection>,
    rights: Option<RawRights>,
    schedule: Option<schedule::RawScheduleRules>,
    quotas: Option<quotas::RawQuotas>,
    /// A Go duration: the age the newest completed backup of a namespace may reach.
    recovery_point_objective: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRights {
    backup: Option<crate::rights::RightsMode>,
    restore: Option<crate::rights::RightsMode>,
    locations: Option<crate::rights::RightsMode>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRestoreRules {
    /// Go duration strings; a plain `0` (YAML integer) too.
    wait_timeout: Option<Value>,
    max_wait_timeout: Option<Value>,
    allow_partially_failed: Option<bool>,
    allow_namespace_copies: Option<bool>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawBackupSync {
    admin_locations: Option<Vec<String>>,
    /// A Go duration string; a plain `0` (YAML integer) disables the resync too.
    period: Option<Value>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawBackupBounds {
    max_ttl: Option<String>,
    min_ttl: Option<String>,
    default_ttl: Option<String>,
}

/// One problem in a policy document, naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyProblem {
    pub field: String,
    pub reason: String,
}

/// Everything wrong with a policy document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError(pub Vec<PolicyProblem>);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|p| {
                if p.field.is_empty() {
                    p.reason.clone()
                } else {
                    format!("{}: {}", p.field, p.reason)
                }
            })
            .collect();
        write!(f, "invalid policy: {}", parts.join("; "))
    }
}

pub(crate) fn problem(field: impl Into<String>, reason: impl Into<String>) -> PolicyProblem {
    PolicyProblem {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Fields that are the tenant boundary: no policy may pin them (nac owns them).
const BACKUP_UNENFORCEABLE: &[&str] = &["includedNamespaces", "excludedNamespaces"];
const RESTORE_UNENFORCEABLE: &[&str] = &[
    "backupName",
    "scheduleName",
    "includedNamespaces",
    "excludedNamespaces",
    "namespaceMapping",
];

impl Policy {
    /// Parses and validates a policy document (the `policy.yaml` key of the policy ConfigMap).
    pub fn parse(yaml: &str) -> Result<Policy, PolicyError> {
        // An empty document is the permissive policy: only the always-on rules apply.
        let value: Value = if yaml.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            serde_yaml::from_str::<Value>(yaml)
                .map_err(|e| PolicyError(vec![problem("", format!("not valid YAML: {e}"))]))?
        };
        let mut value = if value.is_null() {
            Value::Object(Map::new())
        } else {
            value
        };
        let tiers = value.as_object_mut().and_then(|m| m.remove("tiers"));
        let mut base = Self::parse_value(value.clone())?;
        if let (Some(tiers), Value::Object(map)) = (tiers, &value) {
            let mut problems = Vec::new();
            base.tiers = tiers::parse_tiers(map, tiers, Self::parse_value, &mut problems);
            if !problems.is_empty() {
                return Err(PolicyError(problems));
            }
        }
        Ok(base)
    }

    /// Parses and validates a policy document without tiers.
    fn parse_value(value: Value) -> Result<Policy, PolicyError> {
        let raw: RawPolicy = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            PolicyError(vec![problem(
                if path == "." { String::new() } else { path },
                e.into_inner().to_string(),
            )])
        })?;

        let mut problems = Vec::new();
        let backup = parse_bounds(raw.backup.unwrap_or_default(), &mut problems);
        let enforce_backup_spec = check_enforced::<BackupSpec>(
            "enforceBackupSpec",
            raw.enforce_backup_spec.unwrap_or_default(),
            BACKUP_UNENFORCEABLE,
            BACKUP_DURATION_FIELDS,
            &mut problems,
        );
        let enforce_restore_spec = check_enforced::<RestoreSpec>(
            "enforceRestoreSpec",
            raw.enforce_restore_spec.unwrap_or_default(),
            RESTORE_UNENFORCEABLE,
            RESTORE_DURATION_FIELDS,
            &mut problems,
        );
        // Enforced values must themselves pass the always-on rules.
        for (field, bad) in [
            ("includeClusterResources", Value::Bool(true)),
            ("includedClusterScopedResources", Value::Null),
            ("volumeSnapshotLocations", Value::Null),
        ] {
            if let Some(v) = enforce_backup_spec.get(field) {
                if (bad.is_boolean() && *v == bad) || (bad.is_null() && !is_empty_value(v)) {
                    problems.push(problem(
                        format!("enforceBackupSpec.{field}"),
                        format!(
                            "{} crosses the tenant boundary and cannot be enforced",
                            display_value(v)
                        ),
                    ));
                }
            }
        }
        if enforce_restore_spec.get("includeClusterResources") == Some(&Value::Bool(true)) {
            problems.push(problem(
                "enforceRestoreSpec.includeClusterResources",
                "true crosses the tenant boundary and cannot be enforced",
            ));
        }
        let backup_sync = parse_sync(raw.backup_sync.unwrap_or_default(), &mut problems);
        let restore = parse_restore(raw.restore.unwrap_or_default(), &mut problems);
        let non_admin_bsl = bsl::parse_bsl(raw.non_admin_bsl.unwrap_or_default(), &mut problems);
        let downloads = lifecycle::parse_downloads(raw.downloads.unwrap_or_default(), &mut problems);
        let garbage_collection = lifecycle::parse_gc(raw.garbage_collection.unwrap_or_default(), &mut problems);
        let raw_rights = raw.rights.unwrap_or_default();
        if raw_rights.locations == Some(crate::rights::RightsMode::Exclude) {
            problems.push(problem(
                "rights.locations",
                "exclude has nothing to leave out of a storage location's credential: use deny (the default) or off",
            ));
        }
        let rights = Rights {
            backup: raw_rights.backup.unwrap_or_default(),
            restore: raw_rights.restore.unwrap_or_default(),
            locations: raw_rights.locations.unwrap_or(crate::rights::RightsMode::Deny),
        };
        let (schedule, per_namespace) = schedule::parse_schedule(raw.schedule.unwrap_or_default(), &mut problems);
        let quotas = quotas::parse_quotas(raw.quotas.unwrap_or_default(), per_namespace, &mut problems);
        let recovery_point_objective = raw
            .recovery_point_objective
            .and_then(|s| objective::parse_objective(&s, &mut problems));
        let policy = Policy {
            schedule,
            quotas,
            recovery_point_objective,
            rights,
            non_admin_bsl,
            downloads,
            garbage_collection,
            enforce_backup_spec,
            enforce_restore_spec,
            backup,
            backup_sync,
            restore,
            tier: None,
            tiers: Vec::new(),
        };
        if let Some(ttl) = policy.enforced_ttl() {
            if let Some(max) = policy.backup.max_ttl {
                if ttl > max {
                    problems.push(problem(
                        "enforceBackupSpec.ttl",
                        format!("{ttl} is above backup.maxTtl {max}"),
                    ));
                }
            }
            if let Some(min) = policy.backup.min_ttl {
                if ttl < min {
                    problems.push(problem(
                        "enforceBackupSpec.ttl",
                        format!("{ttl} is below backup.minTtl {min}"),
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(policy)
        } else {
            Err(PolicyError(problems))
        }
    }

    fn enforced_ttl(&self) -> Option<GoDuration> {
        self.enforce_backup_spec
            .get("ttl")
            .and_then(Value::as_str)
            .and_then(|s| GoDuration::parse(s).ok())
    }

    /// What the policy does, one line per rule, for `nac policy check`.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (k, v) in &self.enforce_backup_spec {
            lines.push(format!("enforces spec.backupSpec.{k} = {}", display_value(v)));
        }
        for (k, v) in &self.enforce_restore_spec {
            lines.push(format!("enforces spec.restoreSpec.{k} = {}", display_value(v)));
        }
        if let Some(d) = self.backup.default_ttl {
            lines.push(format!("default backup TTL {d}"));
        }
        if let Some(d) = self.backup.min_ttl {
            lines.push(format!("minimum backup TTL {d}"));
        }
        if let Some(d) = self.backup.max_ttl {
            lines.push(format!("maximum backup TTL {d}"));
        }
        if !self.backup_sync.admin_locations.is_empty() {
            let every = if self.backup_sync.period.is_zero() {
                "event-driven only".to_string()
            } else {
                format!("event-driven, resync every {}", self.backup_sync.period)
            };
            lines.push(format!(
                "backup sync from admin storage locations {} ({every})",
                self.backup_sync.admin_locations.join(", ")
            ));
        }
        if self.restore != RestoreRules::default() {
            lines.push(self.restore.summary());
        }
        let bsl = &self.non_admin_bsl;
        if bsl.enabled {
            let approval = if bsl.require_approval {
                "each approved by the cluster admin"
            } else {
                "approved on creation unless the cluster admin rejects them"
            };
            lines.push(format!("tenants may bring their own storage locations, {approval}"));
            match &bsl.allowed_endpoints {
                None => lines.push(
                    "tenants' locations may name any endpoint but loopback, link-local, unspecified addresses and \
                     the cluster's own networks"
                        .into(),
                ),
                Some(a) => {
                    let hosts: Vec<String> = a.hosts.iter().map(|h| h.to_string()).collect();
                    let cidrs: Vec<String> = a.cidrs.iter().map(|c| c.to_string()).collect();
                    lines.push(format!(
                        "tenants' locations may name only the endpoints of hosts [{}] and cidrs [{}]",
                        hosts.join(", "),
                        cidrs.join(", ")
                    ));
                }
            }
            if bsl.allow_insecure_skip_tls_verify {
                lines.push("tenants' locations may turn TLS verification off".into());
            }
            if bsl.allow_ca_cert {
                lines.push("tenants' locations may name a CA certificate of their own".into());
            }
            if self.rights.locations == crate::rights::RightsMode::Off {
                lines.push(
                    "tenants' locations may name Secrets their requester may not read (rights.locations: off)".into(),
                );
            }
            for (k, v) in &bsl.enforce_bsl_spec {
                lines.push(format!(
                    "enforces spec.backupStorageLocationSpec.{k} = {}",
                    display_value(v)
                ));
            }
        }
        match &self.downloads.admin_locations {
            AdminDownloads::Deny => {}
            AdminDownloads::Allow => {
                lines.push("tenants may download files of their backups on every storage location".into())
            }
            AdminDownloads::Only(names) => lines.push(format!(
                "tenants may download files of their backups on admin storage locations {}",
                names.join(", ")
            )),
        }
        for (mode, deny, off) in [
            (
                self.rights.backup,
                "backups that would include kinds their requester may not list are refused",
                "backups read with Velero's rights, not their requester's (rights.backup: off)",
            ),
            (
                self.rights.restore,
                "restores of backups holding kinds their requester may not create are refused",
                "restores create with Velero's rights, not their requester's (rights.restore: off)",
            ),
        ] {
            match mode {
                crate::rights::RightsMode::Exclude => {}
                crate::rights::RightsMode::Deny => lines.push(deny.into()),
                crate::rights::RightsMode::Off => lines.push(off.into()),
            }
        }
        if self.garbage_collection != GarbageCollection::default() {
            lines.push(if self.garbage_collection.period.is_zero() {
                "orphaned Velero objects are collected when their tenant object goes; no periodic sweep".to_string()
            } else {
                format!(
                    "orphaned Velero objects are also swept every {}",
                    self.garbage_collection.period
                )
            });
        }
        let sched = &self.schedule;
        if let Some(d) = sched.min_interval {
            lines.push(format!("schedules run at most once every {d}"));
        }
        lines.extend(self.quotas.summary());
        if let Some(d) = self.recovery_point_objective {
            lines.push(format!(
                "a namespace whose newest completed backup is older than {d} is in breach (recoveryPointObjective)"
            ));
        }
        if sched.skip_immediately {
            lines.push(
                "schedules skip a run due at once when unpaused overdue (skipImmediately) unless they say otherwise"
                    .into(),
            );
        }
        if lines.is_empty() {
            lines.push("permissive: only the always-on tenant rules apply".to_string());
        }
        for t in &self.tiers {
            lines.push(format!("tier {:?} for namespaces with labels {}:", t.name, t.selector));
            lines.extend(t.policy.summary().into_iter().map(|l| format!("  {l}")));
        }
        lines
    }
}

/// A duration field that may also be a plain `0`; problems are recorded under `field`.
pub(crate) fn duration_value(field: &str, v: Option<Value>, problems: &mut Vec<PolicyProblem>) -> Option<GoDuration> {
    match v? {
        Value::Number(n) if n.as_u64() == Some(0) => Some(GoDuration(0)),
        Value::String(p) => match GoDuration::parse(&p) {
            Ok(d) => Some(d),
            Err(e) => {
                problems.push(problem(field, e.to_string()));
                None
            }
        },
        other => {
            problems.push(problem(
                field,
                format!("{other} is not a duration (expected Go duration syntax such as 30m, or 0)"),
            ));
            None
        }
    }
}

fn parse_restore(raw: RawRestoreRules, problems: &mut Vec<PolicyProblem>) -> RestoreRules {
    let mut r = RestoreRules::default();
    if let Some(d) = duration_value("restore.waitTimeout", raw.wait_timeout, problems) {
        r.wait_timeout = d;
    }
    if let Some(d) = duration_value("restore.maxWaitTimeout", raw.max_wait_timeout, problems) {
        r.max_wait_timeout = d;
    }
    if let Some(b) = raw.allow_partially_failed {
        r.allow_partially_failed = b;
    }
    if let Some(b) = raw.allow_namespace_copies {
        r.allow_namespace_copies = b;
    }
    if r.wait_timeout > r.max_wait_timeout {
        problems.push(problem(
            "restore.waitTimeout",
            format!(
                "{} is above restore.maxWaitTimeout {}",
                r.wait_timeout, r.max_wait_timeout
            ),
        ));
    }
    r
}

fn parse_sync(raw: RawBackupSync, problems: &mut Vec<PolicyProblem>) -> BackupSync {
    let mut sync = BackupSync::default();
    if let Some(d) = duration_value("backupSync.period", raw.period, problems) {
        sync.period = d;
    }
    for (i, loc) in raw.admin_locations.unwrap_or_default().into_iter().enumerate() {
        if !crate::naming::is_object_name(&loc) {
            problems.push(problem(
                format!("backupSync.adminLocations[{i}]"),
                format!("{loc:?} is not a BackupStorageLocation name"),
            ));
        } else if !sync.admin_locations.contains(&loc) {
            sync.admin_locations.push(loc);
        }
    }
    sync
}

fn parse_bounds(raw: RawBackupBounds, problems: &mut Vec<PolicyProblem>) -> BackupBounds {
    let mut parse = |name: &str, v: Option<String>| -> Option<GoDuration> {
        let s = v?;
        match GoDuration::parse(&s) {
            Ok(d) => Some(d),
            Err(e) => {
                problems.push(problem(format!("backup.{name}"), e.to_string()));
                None
            }
        }
    };
    let b = BackupBounds {
        max_ttl: parse("maxTtl", raw.max_ttl),
        min_ttl: parse("minTtl", raw.min_ttl),
        default_ttl: parse("defaultTtl", raw.default_ttl),
    };
    if let (Some(min), Some(max)) = (b.min_ttl, b.max_ttl) {
        if min > max {
            problems.push(problem("backup.minTtl", format!("{min} is above backup.maxTtl {max}")));
        }
    }
    if let Some(d) = b.default_ttl {
        if b.max_ttl.is_some_and(|max| d > max) || b.min_ttl.is_some_and(|min| d < min) {
            problems.push(problem(
                "backup.defaultTtl",
                format!("{d} is outside backup.minTtl..backup.maxTtl"),
            ));
        }
    }
    b
}

/// Checks an enforce*Spec map against the Velero type `T`: known fields only, right types, no nulls.
fn check_enforced<T: DeserializeOwned + Serialize + schemars::JsonSchema>(
    section: &str,
    map: Map<String, Value>,
    unenforceable: &[&str],
    duration_fields: &[&str],
    problems: &mut Vec<PolicyProblem>,
) -> Map<String, Value> {
    let before = problems.len();
    for (k, v) in &map {
        if v.is_null() {
            problems.push(problem(
                format!("{section}.{k}"),
                "null is not a value to enforce; remove the key",
            ));
        }
        if unenforceable.contains(&k.as_str()) {
            problems.push(problem(
                format!("{section}.{k}"),
                "is set by nac for every object (the tenant boundary) and cannot be enforced",
            ));
        }
        if duration_fields.contains(&k.as_str()) {
            if let Some(s) = v.as_str() {
                if let Err(e) = GoDuration::parse(s) {
                    problems.push(problem(format!("{section}.{k}"), e.to_string()));
                }
            }
        }
    }
    let typed: Result<T, _> = serde_path_to_error::deserialize(Value::Object(map.clone()));
    match typed {
        Err(e) => problems.push(problem(format!("{section}.{}", e.path()), e.into_inner().to_string())),
        Ok(t) => {
            // Re-serializing drops what the Velero type does not know: any difference is an unknown field.
            let known = serde_json::to_value(&t).unwrap_or_default();
            let names = known_fields::<T>();
            for (k, v) in &map {
                if !names.iter().any(|n| n == k) {
                    problems.push(problem(
                        format!("{section}.{k}"),
                        format!(
                            "unknown field (not in Velero's spec; known fields: {})",
                            names.join(", ")
                        ),
                    ));
                    continue;
                }
                match known.get(k) {
                    Some(kv) if kv != v && !v.is_null() => {
                        let path = first_difference(v, kv, &format!("{section}.{k}"));
                        problems.push(problem(path, "unknown field or wrong shape (not in Velero's spec)"));
                    }
                    _ => {}
                }
            }
        }
    }
    if problems.len() > before {
        Map::new()
    } else {
        map
    }
}

/// Top-level field names of a Velero spec type, from its generated schema.
pub(crate) fn known_fields<T: schemars::JsonSchema>() -> Vec<String> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The path of the first place two JSON values differ.
pub(crate) fn first_difference(a: &Value, b: &Value, path: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let (xa, yb) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                if xa != yb {
                    return first_difference(xa, yb, &format!("{path}.{k}"));
                }
            }
            path.to_string()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (xa, yb)) in x.iter().zip(y).enumerate() {
                if xa != yb {
                    return first_difference(xa, yb, &format!("{path}[{i}]"));
                }
            }
            path.to_string()
        }
        _ => path.to_string(),
    }
}

/// Whether a JSON value counts as "not set": null, empty list, empty map, empty string.
pub(crate) fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// A value as users wrote it: strings bare, everything else as compact JSON.
pub fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;

/// The policy document `doc` with `hosts` added to `nonAdminBSL.allowedEndpoints.hosts`, checked to be a valid
/// policy before and after.
pub fn with_allowed_hosts(doc: &str, hosts: &[String]) -> Result<String, PolicyError> {
    Policy::parse(doc)?;
    let mut v: Value = serde_yaml::from_str(doc).unwrap_or(Value::Null);
    if !v.is_object() {
        v = Value::Object(Map::new());
    }
    let list = &mut v["nonAdminBSL"]["allowedEndpoints"]["hosts"];
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().expect("just made an array");
    for h in hosts {
        if !list.iter().any(|x| x.as_str() == Some(h)) {
            list.push(Value::String(h.clone()));
        }
    }
    let out = serde_yaml::to_string(&v).expect("a policy serializes");
    Policy::parse(&out)?;
    Ok(out)
}

/// The policy document in `text`: the text itself, or the `policy.yaml` key when `text` is a ConfigMap manifest.
pub fn policy_text_of(text: &str) -> Result<String, String> {
    let v: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        // Not YAML at all: let the policy parser report it with its own wording.
        Err(_) => return Ok(text.to_string()),
    };
    if v.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
        return v
            .get("data")
            .and_then(|d| d.get(POLICY_KEY))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("ConfigMap has no string key data.{POLICY_KEY}"));
    }
    Ok(text.to_string())
}
