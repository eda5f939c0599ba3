//! Tenants' own storage locations (NonAdminBackupStorageLocation): whether they are allowed, whether the admin
//! approves each one, and the BSL fields the admin pins. Evaluation is pure, shared by webhook and reconciler.

pub mod credential_file;
mod endpoints;

pub use endpoints::{host_of, judge_host, names_to_resolve, AllowedEndpoints, Host, HostRule, Network, PRIVATE};

use super::duration::GoDuration;
use super::{display_value, problem, Outcome, PolicyProblem, Violation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The `nonAdminBSL` section of the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct NonAdminBsl {
    /// Whether tenants may bring their own storage at all. Off by default: an admin opts in.
    pub enabled: bool,
    /// Whether the admin decides on each location (`approve` on its request); otherwise approved on creation,
    /// though an explicit admin `reject` still stands.
    pub require_approval: bool,
    /// BackupStorageLocationSpec fields every tenant location gets (filled when absent, denied when different).
    pub enforce_bsl_spec: Map<String, Value>,
    /// The only endpoints tenants' locations may name; none: any but loopback, link-local, unspecified and the
    /// cluster's own networks (see `endpoints`).
    pub allowed_endpoints: Option<AllowedEndpoints>,
    /// Whether tenants may turn TLS verification off (`config.insecureSkipTLSVerify`). Off by default.
    pub allow_insecure_skip_tls_verify: bool,
    /// Whether tenants may name a CA of their own (`objectStorage.caCert`, `config.caCert`). Off by default.
    pub allow_ca_cert: bool,
    /// `config` keys tenants may set beyond [`CONFIG_KEYS`] (the admin's additions).
    pub allowed_config_keys: Vec<String>,
}

impl Default for NonAdminBsl {
    fn default() -> Self {
        NonAdminBsl {
            enabled: false,
            require_approval: true,
            enforce_bsl_spec: Map::new(),
            allowed_endpoints: None,
            allow_insecure_skip_tls_verify: false,
            allow_ca_cert: false,
            allowed_config_keys: Vec::new(),
        }
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawNonAdminBsl {
    enabled: Option<bool>,
    require_approval: Option<bool>,
    #[serde(rename = "enforceBSLSpec")]
    enforce_bsl_spec: Option<Map<String, Value>>,
    allowed_endpoints: Option<endpoints::RawAllowedEndpoints>,
    #[serde(rename = "allowInsecureSkipTLSVerify")]
    allow_insecure_skip_tls_verify: Option<bool>,
    #[serde(rename = "allowCACert")]
    allow_ca_cert: Option<bool>,
    allowed_config_keys: Option<Vec<String>>,
}

/// What an admin may pin: the BSL spec without `default` (always false for tenants). Typed, so a wrong shape or
/// an unknown field is a policy problem naming it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // Parsed to check the shape; evaluation works on the raw map.
struct EnforceableBsl {
    provider: Option<String>,
    object_storage: Option<EnforceableObjectStorage>,
    config: Option<BTreeMap<String, String>>,
    credential: Option<EnforceableCredential>,
    access_mode: Option<AccessMode>,
    backup_sync_period: Option<String>,
    validation_frequency: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct EnforceableObjectStorage {
    bucket: Option<String>,
    prefix: Option<String>,
    ca_cert: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct EnforceableCredential {
    name: String,
    key: String,
}

#[derive(Debug, Deserialize)]
enum AccessMode {
    ReadWrite,
    ReadOnly,
}

const BSL_DURATION_FIELDS: &[&str] = &["backupSyncPeriod", "validationFrequency"];

/// The providers whose credentials and settings nac can judge: Velero's AWS plugin (S3 and S3-compatible stores).
pub const PROVIDERS: &[&str] = &["aws", "velero.io/aws"];

/// The `config` keys a tenant's location may set (Velero's AWS plugin's storage settings): endpoints and TLS keys
/// are judged further (`endpoints`, [`tls_options`]), `profile` selects a profile of the credential nac copies.
/// Keys are matched exactly, as the plugin reads them.
pub const CONFIG_KEYS: &[&str] = &[
    "region",
    "s3Url",
    "publicUrl",
    "s3ForcePathStyle",
    "checksumAlgorithm",
    "signatureVersion",
    "serverSideEncryption",
    "tagging",
    "profile",
    "insecureSkipTLSVerify",
    "caCert",
];

/// Keys no policy may open to tenants: each makes Velero read something of its own for the tenant's location.
const NEVER_CONFIG_KEYS: &[(&str, &str)] = &[
    (
        "credentialsFile",
        "names a file in Velero's container to use as the credential",
    ),
    (
        "customerKeyEncryptionSecret",
        "names a Secret in Velero's namespace whose key Velero sends with every request",
    ),
    (
        "customerKeyEncryptionFile",
        "names a file in Velero's container whose key Velero sends with every request",
    ),
    ("enableSharedConfig", "makes the SDK read Velero's own AWS config"),
];
const OBJECT_STORAGE_FIELDS: &[&str] = &["bucket", "prefix", "caCert"];

pub(super) fn parse_bsl(raw: RawNonAdminBsl, problems: &mut Vec<PolicyProblem>) -> NonAdminBsl {
    let mut out = NonAdminBsl::default();
    if let Some(b) = raw.enabled {
        out.enabled = b;
    }
    if let Some(b) = raw.require_approval {
        out.require_approval = b;
    }
    out.allowed_endpoints = raw.allowed_endpoints.map(|a| endpoints::parse_allowed(a, problems));
    out.allow_insecure_skip_tls_verify = raw.allow_insecure_skip_tls_verify.unwrap_or(false);
    out.allow_ca_cert = raw.allow_ca_cert.unwrap_or(false);
    for (i, k) in raw.allowed_config_keys.unwrap_or_default().into_iter().enumerate() {
        let field = format!("nonAdminBSL.allowedConfigKeys[{i}]");
        if let Some((_, why)) = NEVER_CONFIG_KEYS.iter().find(|(n, _)| n.eq_ignore_ascii_case(&k)) {
            problems.push(problem(field, format!("{k:?} cannot be opened to tenants: it {why}")));
        } else if k.is_empty() || k.contains(char::is_whitespace) {
            problems.push(problem(field, format!("{k:?} is not a config key")));
        } else if !CONFIG_KEYS.contains(&k.as_str()) && !out.allowed_config_keys.contains(&k) {
            out.allowed_config_keys.push(k);
        }
    }
    let map = raw.enforce_bsl_spec.unwrap_or_default();
    let before = problems.len();
    if map.contains_key("default") {
        problems.push(problem(
            "nonAdminBSL.enforceBSLSpec.default",
            "a tenant's location is never the default one; remove the key",
        ));
    }
    let checked: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| *k != "default")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Err(e) = serde_path_to_error::deserialize::<_, EnforceableBsl>(Value::Object(checked)) {
        problems.push(problem(
            format!("nonAdminBSL.enforceBSLSpec.{}", e.path()),
            e.into_inner().to_string(),
        ));
    }
    for field in BSL_DURATION_FIELDS {
        if let Some(s) = map.get(*field).and_then(Value::as_str) {
            if let Err(e) = GoDuration::parse(s) {
                problems.push(problem(format!("nonAdminBSL.enforceBSLSpec.{field}"), e.to_string()));
            }
        }
    }
    if let Some(p) = map.get("provider").and_then(Value::as_str) {
        if !PROVIDERS.contains(&p) {
            problems.push(problem(
                "nonAdminBSL.enforceBSLSpec.provider",
                format!(
                    "{p:?}: nac can check tenants' credentials and settings for provider aws only ({})",
                    PROVIDERS.join(", ")
                ),
            ));
        }
    }
    if problems.len() == before {
        out.enforce_bsl_spec = map;
    }
    out
}

const NABSL: &str = "NonAdminBackupStorageLocation";
const PREFIX: &str = "spec.backupStorageLocationSpec";

fn deny(out: &mut Outcome, field: &str, message: String) {
    let field = if field.is_empty() {
        PREFIX.to_string()
    } else {
        format!("{PREFIX}.{field}")
    };
    out.violations.push(Violation { field, message });
}

fn fill(out: &mut Outcome, field: &str, value: Value, by: &str) {
    out.warnings
        .push(format!("{PREFIX}.{field} set to {} by {by}", display_value(&value)));
}

/// Applies the policy and the tenant rules to a NonAdminBackupStorageLocation's `spec.backupStorageLocationSpec`.
/// Messages of the rules OADP's controller has are OADP's, so its tooling and users' scripts keep matching them.
pub fn evaluate_bsl(spec: &Map<String, Value>, policy: &super::Policy) -> Outcome {
    let rules = &policy.non_admin_bsl;
    let spec = &super::zero::without_unset(spec, super::zero::STORAGE_LOCATION);
    let mut out = Outcome {
        spec: spec.clone(),
        ..Outcome::default()
    };
    if !rules.enabled {
        deny(
            &mut out,
            "",
            format!(
                "{NABSL} is not enabled on this cluster (policy nonAdminBSL.enabled is false): backups use the \
                 storage the cluster administrator chose"
            ),
        );
        return out;
    }
    if spec
        .get("default")
        .is_some_and(|v| *v != Value::Bool(false) && !v.is_null())
    {
        deny(&mut out, "default", format!("{NABSL} cannot be used as a default BSL"));
    }
    match spec.get("credential").filter(|v| !v.is_null()) {
        None => deny(
            &mut out,
            "credential",
            format!("{NABSL} spec.bslSpec.credential is not set"),
        ),
        Some(Value::Object(c)) => {
            let set = |k: &str| c.get(k).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            if !set("name") || !set("key") {
                deny(
                    &mut out,
                    "credential",
                    format!("{NABSL} spec.bslSpec.credential.name or spec.bslSpec.credential.key is not set"),
                );
            } else if let Some(name) = c.get("name").and_then(Value::as_str) {
                if !crate::naming::is_object_name(name) {
                    deny(
                        &mut out,
                        "credential.name",
                        format!(
                            "{NABSL} {PREFIX}.credential.name {name:?} is not the name of a Secret in this namespace"
                        ),
                    );
                }
            }
            for k in c.keys().filter(|k| !matches!(k.as_str(), "name" | "key" | "optional")) {
                deny(
                    &mut out,
                    &format!("credential.{k}"),
                    format!("{NABSL} {PREFIX}.credential names a Secret of this namespace by name and key only ({k} is not a field)"),
                );
            }
        }
        Some(other) => deny(
            &mut out,
            "credential",
            format!(
                "{NABSL} {PREFIX}.credential must be {{name, key}} (got {})",
                display_value(other)
            ),
        ),
    }
    if let Some(mode) = spec.get("accessMode").filter(|v| !v.is_null()) {
        if !matches!(mode.as_str(), Some("ReadWrite" | "ReadOnly")) {
            deny(
                &mut out,
                "accessMode",
                format!(
                    "{NABSL} {PREFIX}.accessMode must be ReadWrite or ReadOnly (got {})",
                    display_value(mode)
                ),
            );
        }
    }
    for field in BSL_DURATION_FIELDS {
        if let Some(v) = spec.get(*field).filter(|v| !v.is_null()) {
            if let Err(e) = v
                .as_str()
                .ok_or_else(|| "must be a duration string".to_string())
                .and_then(|s| GoDuration::parse(s).map(|_| ()).map_err(|e| e.to_string()))
            {
                deny(
                    &mut out,
                    field,
                    format!("{NABSL} {PREFIX}.{field} {}: {e}", display_value(v)),
                );
            }
        }
    }
    let prefix = spec
        .get("objectStorage")
        .and_then(|o| o.get("prefix"))
        .filter(|v| !v.is_null());
    if let Some(p) = prefix {
        match p.as_str() {
            Some(s) if s.split('/').any(|seg| seg == "." || seg == "..") => deny(
                &mut out,
                "objectStorage.prefix",
                format!("{NABSL} {PREFIX}.objectStorage.prefix {s:?} may not contain . or .. segments: it is always kept under the namespace's own prefix"),
            ),
            Some(_) => {}
            None => deny(
                &mut out,
                "objectStorage.prefix",
                format!("{NABSL} {PREFIX}.objectStorage.prefix must be a string (got {})", display_value(p)),
            ),
        }
    }
    apply_enforced(&mut out, &rules.enforce_bsl_spec, policy);
    provider_and_config(&mut out, rules);
    tls_options(&mut out, rules);
    out
}

/// The provider is one whose credential nac can judge, and `config` holds only keys Velero's plugin reads as
/// storage settings ([`CONFIG_KEYS`], the admin's `allowedConfigKeys`, or a value the policy pins itself): any
/// other key may make Velero act with its own files, Secrets or identity for the tenant.
fn provider_and_config(out: &mut Outcome, rules: &NonAdminBsl) {
    match out.spec.get("provider").filter(|v| !v.is_null()) {
        Some(Value::String(p)) if PROVIDERS.contains(&p.as_str()) => {}
        other => deny(
            out,
            "provider",
            format!(
                "{NABSL} {PREFIX}.provider {:?} is refused: nac can check the credential and settings of provider \
                 aws only (Velero's AWS plugin, for S3 and S3-compatible storage)",
                other.map(display_value).unwrap_or_default()
            ),
        ),
    }
    let pinned = rules.enforce_bsl_spec.get("config").and_then(Value::as_object);
    let config = config_of(out);
    for (k, v) in &config {
        if pinned.and_then(|p| p.get(k)) == Some(v) {
            continue;
        }
        if let Some((_, why)) = NEVER_CONFIG_KEYS.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)) {
            deny(
                out,
                &format!("config.{k}"),
                format!("{NABSL} {PREFIX}.config.{k} is refused: it {why}"),
            );
        } else if !CONFIG_KEYS.contains(&k.as_str()) && !rules.allowed_config_keys.contains(k) {
            let mut allowed: Vec<&str> = CONFIG_KEYS.to_vec();
            allowed.extend(rules.allowed_config_keys.iter().map(String::as_str));
            deny(
                out,
                &format!("config.{k}"),
                format!(
                    "{NABSL} {PREFIX}.config.{k} is refused: a tenant's location may set {} (policy \
                     nonAdminBSL.allowedConfigKeys adds to these)",
                    allowed.join(", ")
                ),
            );
        } else if k == "region" && !v.as_str().is_some_and(credential_file::is_region) {
            // Velero's repository code builds the storage's host name from it (`s3-<region>.amazonaws.com`).
            deny(
                out,
                "config.region",
                format!(
                    "{NABSL} {PREFIX}.config.region {} is not a region (letters, digits, - and _)",
                    display_value(v)
                ),
            );
        } else if k == "profile" {
            let ok = v.as_str().is_some_and(credential_file::is_profile_name);
            if !ok {
                deny(
                    out,
                    "config.profile",
                    format!(
                        "{NABSL} {PREFIX}.config.profile {} is not a profile name (letters, digits and -_.+@/:)",
                        display_value(v)
                    ),
                );
            }
        }
    }
}

/// [`evaluate_bsl`] and the endpoint rule (`endpoints`): `net` holds the cluster's networks and the addresses of
/// the names [`names_to_resolve`] lists for this spec, which the caller resolved.
pub fn evaluate_bsl_endpoints(spec: &Map<String, Value>, policy: &super::Policy, net: &Network) -> Outcome {
    let mut out = evaluate_bsl(spec, policy);
    if policy.non_admin_bsl.enabled {
        let found = endpoints::check(&out.spec, &policy.non_admin_bsl, net);
        out.violations.extend(found);
    }
    out
}

/// The endpoint rule alone (what [`evaluate_bsl_endpoints`] adds to [`evaluate_bsl`]).
pub fn endpoint_violations(spec: &Map<String, Value>, policy: &super::Policy, net: &Network) -> Vec<Violation> {
    if !policy.non_admin_bsl.enabled {
        return Vec::new();
    }
    let spec = evaluate_bsl(spec, policy).spec;
    endpoints::check(&spec, &policy.non_admin_bsl, net)
}

/// The spec's `config` as it stands in `out` (empty when absent).
fn config_of(out: &Outcome) -> Map<String, Value> {
    out.spec
        .get("config")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// TLS verification off, or a CA of the tenant's own, only where the policy allows it (a value the policy pins
/// itself is the administrator's): both let a server other than the named one answer for it.
fn tls_options(out: &mut Outcome, rules: &NonAdminBsl) {
    let pinned = |section: &str, key: &str| rules.enforce_bsl_spec.get(section).and_then(|s| s.get(key)).cloned();
    let config = config_of(out);
    if !rules.allow_insecure_skip_tls_verify {
        for (k, v) in &config {
            let Some(s) = v.as_str() else { continue };
            if k.eq_ignore_ascii_case("insecureSkipTLSVerify")
                && endpoints::skips_tls_verify(s)
                && pinned("config", k) != Some(v.clone())
            {
                deny(
                    out,
                    &format!("config.{k}"),
                    format!(
                        "{NABSL} {PREFIX}.config.{k} {s:?} is refused: TLS verification may not be turned off on a \
                         tenant's location (policy nonAdminBSL.allowInsecureSkipTLSVerify is false)"
                    ),
                );
            }
        }
    }
    if !rules.allow_ca_cert {
        let stored = out.spec.get("objectStorage").and_then(|o| o.get("caCert")).cloned();
        let mut found: Vec<(String, Value)> = Vec::new();
        if let Some(v) = stored.filter(|v| !super::is_empty_value(v)) {
            if pinned("objectStorage", "caCert") != Some(v.clone()) {
                found.push(("objectStorage.caCert".into(), v));
            }
        }
        for (k, v) in &config {
            if k.eq_ignore_ascii_case("caCert") && !super::is_empty_value(v) && pinned("config", k) != Some(v.clone()) {
                found.push((format!("config.{k}"), v.clone()));
            }
        }
        for (field, _) in found {
            deny(
                out,
                &field,
                format!(
                    "{NABSL} {PREFIX}.{field} is refused: a tenant's location may not name a CA of its own, which \
                     would let a server the CA vouches for answer for the endpoint (policy nonAdminBSL.allowCACert \
                     is false)"
                ),
            );
        }
    }
}

fn apply_enforced(out: &mut Outcome, enforced: &Map<String, Value>, policy: &super::Policy) {
    let (by, note) = (policy.by(), super::eval::tier_note(policy));
    for (field, want) in enforced {
        if field == "objectStorage" {
            enforce_object_storage(out, want, &by, &note);
            continue;
        }
        match out.spec.get(field).filter(|v| !v.is_null()).cloned() {
            None => {
                fill(out, field, want.clone(), &by);
                out.spec.insert(field.clone(), want.clone());
            }
            Some(got) if same(field, &got, want) => {}
            Some(_) => deny(
                out,
                field,
                format!(
                    "the administrator has restricted {PREFIX}.{field} field to: {}{note}",
                    render(want)
                ),
            ),
        }
    }
}

/// Bucket, prefix and CA certificate are pinned one by one: an absent one is filled, a different one refused.
fn enforce_object_storage(out: &mut Outcome, want: &Value, by: &str, note: &str) {
    let Some(want) = want.as_object() else { return };
    let mut storage = out
        .spec
        .get("objectStorage")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut differs = false;
    for k in OBJECT_STORAGE_FIELDS {
        let Some(w) = want.get(*k) else { continue };
        match storage.get(*k).filter(|v| !v.is_null()) {
            None => {
                fill(out, &format!("objectStorage.{k}"), w.clone(), by);
                storage.insert(k.to_string(), w.clone());
            }
            Some(got) if got == w => {}
            Some(_) => differs = true,
        }
    }
    if differs {
        let s = |k: &str| want.get(k).map(display_value).unwrap_or_default();
        deny(
            out,
            "objectStorage",
            format!(
                "the administrator has restricted {PREFIX}.objectStorage field value(s) to: bucket: {}, prefix: {}, caCert: {}{note}",
                s("bucket"),
                s("prefix"),
                s("caCert")
            ),
        );
    } else {
        out.spec.insert("objectStorage".into(), Value::Object(storage));
    }
}

fn same(field: &str, got: &Value, want: &Value) -> bool {
    if got == want {
        return true;
    }
    if BSL_DURATION_FIELDS.contains(&field) {
        if let (Some(a), Some(b)) = (got.as_str(), want.as_str()) {
            return matches!((GoDuration::parse(a), GoDuration::parse(b)), (Ok(a), Ok(b)) if a == b);
        }
    }
    false
}

/// Values as OADP renders them: a credential `name: X, key: Y`, a map `k: v, k2: v2`.
fn render(v: &Value) -> String {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}: {}", display_value(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => display_value(other),
    }
}

/// The credential nac writes for Velero from a tenant's Secret value `bytes`, the location's `config` selecting
/// the profile (`credential_file`), or the refusal naming the Secret, the key and what in it is refused.
pub fn credential_copy(
    secret: &str,
    key: &str,
    bytes: &[u8],
    config: Option<&BTreeMap<String, String>>,
) -> Result<String, String> {
    let profile = config.and_then(|c| c.get("profile")).map(String::as_str);
    credential_file::aws_static_keys(bytes, profile)
        .map(|k| k.render())
        .map_err(|why| format!("{NABSL} credential Secret {secret:?} key {key:?} is refused: {why}"))
}

/// The NonAdminBackupStorageLocation a backup's `storageLocation` names, if it names one (tenants' locations
/// enabled, and not the admin's enforced location).
pub fn tenant_location<'a>(storage_location: Option<&'a str>, policy: &super::Policy) -> Option<&'a str> {
    let name = storage_location.filter(|s| !s.is_empty())?;
    let enforced = policy
        .enforce_backup_spec
        .get("storageLocation")
        .and_then(Value::as_str);
    (policy.non_admin_bsl.enabled && enforced != Some(name)).then_some(name)
}

/// The object-storage prefix of a tenant's Velero BSL: always under the tenant's namespace, so two tenants
/// sharing a bucket never see each other's backups (and backup sync knows whose a backup is).
pub fn tenant_prefix(namespace: &str, prefix: Option<&str>) -> String {
    // `.` and `..` segments are refused at admission; dropped here too, since Velero joins paths and `..` would
    // climb out of the namespace's prefix.
    let rest: Vec<&str> = prefix
        .unwrap_or_default()
        .split('/')
        .filter(|seg| !seg.is_empty() && *seg != "." && *seg != "..")
        .collect();
    if rest.is_empty() {
        namespace.to_string()
    } else {
        format!("{namespace}/{}", rest.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use serde_json::json;

    fn policy(yaml: &str) -> Policy {
        Policy::parse(yaml).unwrap()
    }

    use crate::wire::object as spec;

    fn good() -> Map<String, Value> {
        spec(
            json!({"provider": "aws", "objectStorage": {"bucket": "team-a"}, "credential": {"name": "s3", "key": "cloud"}}),
        )
    }

    const ON: &str = "nonAdminBSL: {enabled: true}";

    #[test]
    fn disabled_by_default_and_refused_with_the_reason() {
        let out = evaluate_bsl(&good(), &Policy::default());
        assert!(!out.allowed());
        assert!(
            out.message().contains("nonAdminBSL.enabled is false"),
            "{}",
            out.message()
        );
        assert!(Policy::default().non_admin_bsl.require_approval);
    }

    #[test]
    fn a_valid_location_passes_unchanged() {
        let out = evaluate_bsl(&good(), &policy(ON));
        assert!(out.allowed(), "{:?}", out.violations);
        assert_eq!(out.spec, good());
        assert!(out.warnings.is_empty());
    }

    #[test]
    fn oadp_messages_for_default_and_credential() {
        let p = policy(ON);
        let mut s = good();
        s.insert("default".into(), json!(true));
        assert_eq!(
            evaluate_bsl(&s, &p).message(),
            "NonAdminBackupStorageLocation cannot be used as a default BSL"
        );
        let mut s = good();
        s.remove("credential");
        assert_eq!(
            evaluate_bsl(&s, &p).message(),
            "NonAdminBackupStorageLocation spec.bslSpec.credential is not set"
        );
        let mut s = good();
        s.insert("credential".into(), json!({"name": "s3"}));
        assert_eq!(
            evaluate_bsl(&s, &p).message(),
            "NonAdminBackupStorageLocation spec.bslSpec.credential.name or spec.bslSpec.credential.key is not set"
        );
    }

    #[test]
    fn a_secret_of_another_namespace_is_refused() {
        let p = policy(ON);
        let mut s = good();
        s.insert(
            "credential".into(),
            json!({"name": "s3", "key": "cloud", "namespace": "other"}),
        );
        let out = evaluate_bsl(&s, &p);
        assert_eq!(
            out.violations[0].field,
            "spec.backupStorageLocationSpec.credential.namespace"
        );
        let mut s = good();
        s.insert("credential".into(), json!({"name": "other/s3", "key": "cloud"}));
        assert!(evaluate_bsl(&s, &p)
            .message()
            .contains("not the name of a Secret in this namespace"));
    }

    #[test]
    fn prefixes_cannot_climb_out_of_the_namespace() {
        let p = policy(ON);
        for bad in ["../other", "a/../../b", "./x"] {
            let mut s = good();
            s.insert("objectStorage".into(), json!({"bucket": "b", "prefix": bad}));
            assert!(!evaluate_bsl(&s, &p).allowed(), "{bad}");
        }
        assert_eq!(tenant_prefix("team-a", None), "team-a");
        assert_eq!(tenant_prefix("team-a", Some("/nightly/")), "team-a/nightly");
        assert_eq!(tenant_prefix("team-a", Some("")), "team-a");
        assert_eq!(tenant_prefix("team-a", Some("../../team-b")), "team-a/team-b");
        assert_eq!(tenant_prefix("team-a", Some("a//./b")), "team-a/a/b");
    }

    #[test]
    fn config_keys_are_an_allow_list_and_the_provider_is_aws() {
        let p = policy("nonAdminBSL: {enabled: true}");
        let with = |config: Value| {
            let mut s = good();
            s.insert("config".into(), config);
            evaluate_bsl(&s, &p)
        };
        assert!(with(json!({"region": "eu-west-1", "s3ForcePathStyle": "true", "profile": "team"})).allowed());
        for (config, says) in [
            (
                json!({"customerKeyEncryptionSecret": "cloud/key"}),
                "names a Secret in Velero's namespace",
            ),
            (
                json!({"CredentialsFile": "/credentials/cloud"}),
                "names a file in Velero's container",
            ),
            (
                json!({"kmsKeyId": "k"}),
                "config.kmsKeyId is refused: a tenant's location may set region",
            ),
            (json!({"Region": "eu-west-1"}), "config.Region is refused"),
            (json!({"region": "x@10.0.0.5:8443#"}), "is not a region"),
            (json!({"profile": "a]\n[b"}), "is not a profile name"),
        ] {
            let out = with(config.clone());
            assert!(out.message().contains(says), "{config}: {}", out.message());
        }
        let mut s = good();
        s.insert("provider".into(), json!("gcp"));
        assert!(evaluate_bsl(&s, &p).message().contains("provider \"gcp\" is refused"));
        // The admin opens a key; never one that reads Velero's own files or Secrets.
        let opened = policy("nonAdminBSL: {enabled: true, allowedConfigKeys: [kmsKeyId]}");
        let mut s = good();
        s.insert("config".into(), json!({"kmsKeyId": "k"}));
        assert!(evaluate_bsl(&s, &opened).allowed());
        assert!(Policy::parse("nonAdminBSL: {allowedConfigKeys: [credentialsFile]}").is_err());
        assert!(Policy::parse("nonAdminBSL: {enforceBSLSpec: {provider: azure}}").is_err());
    }

    #[test]
    fn enforced_fields_are_filled_or_refused() {
        let p = policy(
            "nonAdminBSL:\n  enabled: true\n  enforceBSLSpec:\n    provider: aws\n    config: {region: eu-west-1}\n    objectStorage: {bucket: tenants}\n",
        );
        let s = spec(json!({"objectStorage": {"prefix": "x"}, "credential": {"name": "s3", "key": "cloud"}}));
        let out = evaluate_bsl(&s, &p);
        assert!(out.allowed(), "{:?}", out.violations);
        assert_eq!(out.spec["provider"], "aws");
        assert_eq!(out.spec["config"], json!({"region": "eu-west-1"}));
        assert_eq!(out.spec["objectStorage"], json!({"bucket": "tenants", "prefix": "x"}));
        assert_eq!(out.warnings.len(), 3, "{:?}", out.warnings);

        let mut s = good();
        s.insert("config".into(), json!({"region": "us-east-1"}));
        let out = evaluate_bsl(&s, &p);
        let msgs: Vec<&str> = out.violations.iter().map(|v| v.message.as_str()).collect();
        assert!(
            msgs.contains(
                &"the administrator has restricted spec.backupStorageLocationSpec.config field to: region: eu-west-1"
            ),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"the administrator has restricted spec.backupStorageLocationSpec.objectStorage field value(s) to: bucket: tenants, prefix: , caCert: "), "{msgs:?}");
    }

    #[test]
    fn broken_enforcements_are_policy_problems() {
        for (yaml, field) in [
            (
                "nonAdminBSL: {enforceBSLSpec: {default: true}}",
                "nonAdminBSL.enforceBSLSpec.default",
            ),
            (
                "nonAdminBSL: {enforceBSLSpec: {bucket: x}}",
                "nonAdminBSL.enforceBSLSpec",
            ),
            (
                "nonAdminBSL: {enforceBSLSpec: {objectStorage: {bucket: 3}}}",
                "nonAdminBSL.enforceBSLSpec.objectStorage.bucket",
            ),
            (
                "nonAdminBSL: {enforceBSLSpec: {accessMode: Sometimes}}",
                "nonAdminBSL.enforceBSLSpec.accessMode",
            ),
            (
                "nonAdminBSL: {enforceBSLSpec: {validationFrequency: soon}}",
                "nonAdminBSL.enforceBSLSpec.validationFrequency",
            ),
            ("nonAdminBSL: {enable: true}", "nonAdminBSL"),
        ] {
            let e = Policy::parse(yaml).unwrap_err();
            assert!(e.0.iter().any(|p| p.field.starts_with(field)), "{yaml}: {e}");
        }
    }

    proptest::proptest! {
        /// No spec shape makes evaluation panic, and every refusal names a field under the spec.
        #[test]
        fn any_spec_is_judged_without_panicking(v in arb_json(3)) {
            let p = policy("nonAdminBSL: {enabled: true, enforceBSLSpec: {provider: aws, objectStorage: {bucket: b}}}");
            if let Value::Object(m) = v {
                let out = evaluate_bsl(&m, &p);
                for viol in &out.violations {
                    proptest::prop_assert!(viol.field.starts_with(PREFIX));
                }
            }
        }
    }

    fn arb_json(depth: u32) -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            prop::sample::select(vec!["", "aws", "..", "a/../b", "s3", "true", "ReadWrite", "1m"])
                .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(depth, 32, 6, |inner| {
            let keys = prop::sample::select(vec![
                "provider",
                "objectStorage",
                "bucket",
                "prefix",
                "caCert",
                "credential",
                "name",
                "key",
                "namespace",
                "default",
                "config",
                "accessMode",
                "backupSyncPeriod",
                "validationFrequency",
            ]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(keys, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        })
    }
}
