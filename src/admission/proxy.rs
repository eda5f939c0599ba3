//! Mutation and validation of NonAdminBackup, NonAdminRestore, NonAdminBackupStorageLocation, NonAdminSchedule
//! and NonAdminDownloadRequest objects.
//!
//! Mutating: applies the policy (enforced fields, own namespace, TTL defaults) on CREATE and stamps a fresh
//! nacuuid label; on UPDATE keeps stored values for fields left out and puts a removed identity label back; then
//! applies the validating rules to the result, so one call per request decides.
//! Validating: on CREATE the policy and tenant rules; on UPDATE immutability of the spec, the one-way
//! `deleteBackup`, and the identity label — nothing the current policy says can block controller updates.
//! Schedules are the exception to immutability: their expression, pause and template are meant to be edited; an
//! edited schedule is checked again like a new one, and whoever edited it becomes its requester.
//! Download requests have no policy of their own and no identity label (their uid is their identity): they get
//! their requester stamped and are refused when the requester may not read the file (`crate::rights::download`).

use super::{deny, with_warnings, AdmissionState};
use crate::naming::{self, NAB_SYNCED_FROM_NACUUID_LABEL};
use crate::policy::{self, Outcome, Policy};
use crate::rights::occupancy::Seen;
use crate::rights::preview::PREVIEW_ANNOTATION;
use crate::rights::{BackupRights, Requester, RightsMode, BACKUP_RIGHTS_ANNOTATION, REQUESTER_ANNOTATION};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::DynamicObject;
use serde_json::{Map, Value};

/// What the webhooks need to know of one tenant kind: a table entry per kind, the rest of this file is the same
/// for all.
#[derive(Clone, Copy, Debug)]
pub struct ProxyKind {
    /// The kind's identity scheme (nacuuid label, origin annotations, finalizer), shared with the reconciler.
    pub origin: &'static naming::Origin,
    /// The webhook paths (`/mutate/<plural>`, `/validate/<plural>`).
    pub mutate_path: &'static str,
    pub validate_path: &'static str,
    /// The key under `spec` holding what the policy reads; none: the policy reads the whole spec.
    spec_key: Option<&'static str>,
    /// Where the BackupSpec whose reads are checked against the requester's rights sits, for the kinds with one.
    backup_spec_path: Option<&'static str>,
    /// The Velero spec type a Go client marshals for this kind.
    go_fields: policy::zero::GoFields,
    /// The policy's decision on a spec, in a namespace.
    evaluate: fn(&Map<String, Value>, &Policy, &str) -> Outcome,
    /// Edited after creation and checked again like a new one (schedules), with the schedule rules at create.
    edited: bool,
    /// The requester is stamped (what is made for it reads or writes the tenant's namespace as them).
    acts_as_requester: bool,
    /// Backup sync may create it with its sync label (privileged requesters only).
    synced: bool,
    /// The policy limits its wait-timeout annotation.
    waits: bool,
    /// Identified by nac's nacuuid label (download requests are identified by their uid, as in OADP).
    labeled: bool,
}

impl PartialEq for ProxyKind {
    fn eq(&self, other: &Self) -> bool {
        self.origin == other.origin
    }
}
impl Eq for ProxyKind {}

/// A spec type without duration fields: nothing a Go client writes for an unset field to read as unset.
const NO_DURATIONS: policy::zero::GoFields = policy::zero::GoFields {
    value_durations: &[],
    pointer_durations: &[],
};

/// The webhook paths of a kind's plural: `/mutate/<plural>`, `/validate/<plural>`.
macro_rules! webhook_paths {
    ($plural:literal) => {
        (concat!("/mutate/", $plural), concat!("/validate/", $plural))
    };
}

impl ProxyKind {
    pub const BACKUP: ProxyKind =
        ProxyKind::new(&naming::NAB, webhook_paths!("nonadminbackups"), policy::evaluate_backup)
            .spec_key("backupSpec", policy::zero::BACKUP)
            .backup_spec("spec.backupSpec")
            .synced();
    pub const RESTORE: ProxyKind = ProxyKind::new(
        &naming::NAR,
        webhook_paths!("nonadminrestores"),
        policy::evaluate_restore,
    )
    .spec_key("restoreSpec", policy::zero::RESTORE)
    .waits();
    pub const STORAGE_LOCATION: ProxyKind = ProxyKind::new(
        &naming::NABSL,
        webhook_paths!("nonadminbackupstoragelocations"),
        |spec, policy, _| policy::evaluate_bsl(spec, policy),
    )
    .spec_key("backupStorageLocationSpec", policy::zero::STORAGE_LOCATION);
    pub const SCHEDULE: ProxyKind =
        ProxyKind::new(&naming::NAS, webhook_paths!("nonadminschedules"), |spec, policy, ns| {
            policy::evaluate_schedule(spec, policy, ns, jiff::Timestamp::now())
        })
        // A schedule's template is a BackupSpec.
        .go_fields(policy::zero::BACKUP)
        .backup_spec(crate::policy::SCHEDULE_TEMPLATE_PREFIX)
        .edited();
    // No policy of its own: what it may reach is decided by its requester's rights (`stamp_rights`) and by the
    // reconciler (the namespace's own backups, the locations the policy opens). No duration fields; the spec is
    // immutable (a CRD rule).
    pub const DOWNLOAD: ProxyKind = ProxyKind::new(
        &naming::NADR,
        webhook_paths!("nonadmindownloadrequests"),
        |spec, _, _| Outcome {
            spec: spec.clone(),
            warnings: Vec::new(),
            violations: Vec::new(),
        },
    )
    .spec_key("target", NO_DURATIONS)
    .unlabeled();

    /// A kind with webhooks at `paths` and the policy's decision `evaluate`; by default the policy reads the whole
    /// spec, which has no duration fields and no BackupSpec, is immutable, has its requester stamped, is never
    /// created by backup sync, has no wait timeout and is identified by its nacuuid label.
    const fn new(
        origin: &'static naming::Origin,
        (mutate_path, validate_path): (&'static str, &'static str),
        evaluate: fn(&Map<String, Value>, &Policy, &str) -> Outcome,
    ) -> Self {
        ProxyKind {
            origin,
            mutate_path,
            validate_path,
            spec_key: None,
            backup_spec_path: None,
            go_fields: NO_DURATIONS,
            evaluate,
            edited: false,
            acts_as_requester: true,
            synced: false,
            waits: false,
            labeled: true,
        }
    }
    /// What the policy reads is `spec.<key>`, of the Velero spec type `go_fields`.
    const fn spec_key(self, key: &'static str, go_fields: policy::zero::GoFields) -> Self {
        ProxyKind {
            spec_key: Some(key),
            go_fields,
            ..self
        }
    }
    const fn go_fields(self, go_fields: policy::zero::GoFields) -> Self {
        ProxyKind { go_fields, ..self }
    }
    const fn backup_spec(self, path: &'static str) -> Self {
        ProxyKind {
            backup_spec_path: Some(path),
            ..self
        }
    }
    const fn edited(self) -> Self {
        ProxyKind { edited: true, ..self }
    }
    const fn synced(self) -> Self {
        ProxyKind { synced: true, ..self }
    }
    const fn waits(self) -> Self {
        ProxyKind { waits: true, ..self }
    }
    const fn unlabeled(self) -> Self {
        ProxyKind { labeled: false, ..self }
    }

    /// The kinds with webhooks. Adding one adds its entry here.
    pub const ALL: [ProxyKind; 5] = [
        Self::BACKUP,
        Self::RESTORE,
        Self::STORAGE_LOCATION,
        Self::SCHEDULE,
        Self::DOWNLOAD,
    ];

    pub fn kind(&self) -> &'static str {
        self.origin.kind
    }
    /// `spec.<key>` (or `spec`) for messages.
    fn spec_path(&self) -> String {
        match self.spec_key {
            Some(k) => format!("spec.{k}"),
            None => "spec".into(),
        }
    }
    fn set_spec(&self, object: &mut Value, spec: Map<String, Value>) {
        match self.spec_key {
            Some(k) => object["spec"][k] = Value::Object(spec),
            None => object["spec"] = Value::Object(spec),
        }
    }
    fn finalizer(&self) -> &'static str {
        self.origin.finalizer
    }
    pub fn identity_label(&self) -> &'static str {
        self.origin.nacuuid_label
    }
    fn evaluate(&self, spec: &Map<String, Value>, policy: &Policy, namespace: &str) -> Outcome {
        (self.evaluate)(spec, policy, namespace)
    }
}

/// The parts of a review both webhooks need, or the denial explaining why they are missing.
struct Parsed<'a> {
    kind: ProxyKind,
    req: &'a AdmissionRequest<DynamicObject>,
    namespace: &'a str,
    name: String,
    object: Value,
    spec: Map<String, Value>,
    old: Option<(Value, Map<String, Value>)>,
}

fn parse<'a>(kind: ProxyKind, req: &'a AdmissionRequest<DynamicObject>) -> Result<Parsed<'a>, String> {
    if req.kind.group != crate::api::GROUP || req.kind.kind != kind.kind() {
        return Err(format!(
            "this webhook endpoint handles {}.{} only, not {}.{} {}: check the webhook configuration",
            kind.kind(),
            crate::api::GROUP,
            req.kind.kind,
            if req.kind.group.is_empty() {
                "core"
            } else {
                &req.kind.group
            },
            req.kind.version,
        ));
    }
    let namespace = req
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{} must be namespaced", kind.kind()))?;
    let object = req
        .object
        .as_ref()
        .ok_or_else(|| format!("{} review has no object", kind.kind()))?;
    let object = serde_json::to_value(object).map_err(|e| e.to_string())?;
    let spec = spec_of(kind, &object)?;
    let old = match &req.old_object {
        // An object that had no spec is checked, once it gets one, as a new object is.
        Some(o) if req.operation == Operation::Update && has_spec(o) => {
            let o = serde_json::to_value(o).map_err(|e| e.to_string())?;
            let s = spec_of(kind, &o)?;
            Some((o, s))
        }
        _ => None,
    };
    // On CREATE with generateName the name is not known yet; the nacuuid then uses the prefix.
    let name = object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| object["metadata"]["generateName"].as_str())
        .unwrap_or(&req.name)
        .to_string();
    Ok(Parsed {
        kind,
        req,
        namespace,
        name,
        object,
        spec,
        old,
    })
}

fn has_spec(o: &DynamicObject) -> bool {
    o.data.get("spec").is_some_and(|s| !s.is_null())
}

fn spec_of(kind: ProxyKind, object: &Value) -> Result<Map<String, Value>, String> {
    let spec = object.get("spec");
    let value = match kind.spec_key {
        Some(k) => spec.and_then(|s| s.get(k)),
        None => spec,
    };
    match value {
        Some(Value::Object(m)) => Ok(m.clone()),
        None | Some(Value::Null) => Err(format!("{} {} is required", kind.kind(), kind.spec_path())),
        Some(_) => Err(format!("{} {} must be an object", kind.kind(), kind.spec_path())),
    }
}

/// The BackupSpec of `object` whose reads are checked, for the kinds with one.
fn backup_spec_of(kind: ProxyKind, object: &Value) -> Option<Map<String, Value>> {
    let mut v = object;
    for part in kind.backup_spec_path?.split('.') {
        v = v.get(part)?;
    }
    v.as_object().cloned()
}

fn label<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object["metadata"]["labels"].get(key).and_then(Value::as_str)
}

/// A NonAdminBackup that nac's backup sync creates: the sync label, set by nac itself.
fn synced_by_nac(
    state: &AdmissionState,
    kind: ProxyKind,
    req: &AdmissionRequest<DynamicObject>,
    object: &Value,
) -> bool {
    kind.synced && label(object, NAB_SYNCED_FROM_NACUUID_LABEL).is_some() && is_privileged(state, req)
}

pub(super) fn is_privileged(state: &AdmissionState, req: &AdmissionRequest<DynamicObject>) -> bool {
    req.user_info
        .username
        .as_deref()
        .is_some_and(|u| state.privileged_users.iter().any(|p| p == u))
}

fn no_policy_message(state: &AdmissionState, kind: ProxyKind, namespace: &str) -> String {
    if state.policy.admissible().is_some() {
        // A policy with tiers, and the namespace's labels are not known yet.
        return format!(
            "{} requests are refused: nac does not know the labels of namespace {namespace} yet, which select its              policy tier; retry in a moment",
            kind.kind()
        );
    }
    if let Some(why) = state.policy.unreadable() {
        return format!(
            "{} requests are refused while nac cannot read the admin policy: {why}; they are admitted again once \
             it can (retry then; if this lasts, tell the cluster administrator)",
            kind.kind()
        );
    }
    let why = state
        .policy
        .snapshot()
        .error
        .clone()
        .unwrap_or_else(|| "not loaded yet".into());
    format!(
        "{} requests are refused: nac has no valid admin policy ({why}); ask the cluster administrator to fix the policy ConfigMap",
        kind.kind()
    )
}

/// The response to build on and the parsed review; or the finished response when there is nothing to review
/// (not a CREATE or UPDATE) or the review cannot be understood.
fn prepare(
    kind: ProxyKind,
    req: &AdmissionRequest<DynamicObject>,
) -> Result<(AdmissionResponse, Parsed<'_>), Box<AdmissionResponse>> {
    let resp = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Err(Box::new(resp));
    }
    let had_none = req.operation == Operation::Create || !req.old_object.as_ref().is_some_and(has_spec);
    if had_none && !req.object.as_ref().is_some_and(has_spec) {
        // As OADP's API does: admitted (and so are its controller's writes, its finalizer), and its controller
        // reports it BackingOff. A spec once given cannot be taken away (`parse` refuses that).
        let warning = format!(
            "{} has no spec: admitted, and reported BackingOff until it gets one",
            kind.kind()
        );
        return Err(Box::new(with_warnings(resp, vec![warning])));
    }
    match parse(kind, req) {
        Ok(p) => Ok((resp, p)),
        Err(msg) => Err(Box::new(deny(resp, msg, []))),
    }
}

/// Allows when there is no violation, otherwise denies with all of them.
fn deny_all(resp: AdmissionResponse, violations: Vec<(String, String)>) -> AdmissionResponse {
    if violations.is_empty() {
        return resp;
    }
    let message = violations
        .iter()
        .map(|(_, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    deny(resp, message, violations)
}

/// A review of a tenant kind at its mutating (`mutating`) or validating webhook.
pub(super) async fn review(
    state: &AdmissionState,
    kind: ProxyKind,
    req: &AdmissionRequest<DynamicObject>,
    mutating: bool,
) -> AdmissionResponse {
    let (resp, p) = match prepare(kind, req) {
        Ok(x) => x,
        Err(done) => return *done,
    };
    if mutating {
        mutate(state, resp, p).await
    } else {
        validate(state, resp, p).await
    }
}

async fn mutate(state: &AdmissionState, resp: AdmissionResponse, p: Parsed<'_>) -> AdmissionResponse {
    let (kind, req) = (p.kind, p.req);
    if let Some(answer) = status_probe(state, &p) {
        return with_warnings(resp, vec![answer]);
    }
    let mut patched = p.object.clone();
    let mut warnings = Vec::new();
    let label_key = kind.identity_label();
    match &p.old {
        None if synced_by_nac(state, kind, req, &p.object) => {
            // Backup sync re-creates the NonAdminBackup of a backup that already exists in object storage, as it
            // was made: the policy governs new backups, and nac's own identity label stays.
            add_finalizer(&mut patched, kind.finalizer());
        }
        None => {
            let Some(policy) = state.policy.admissible_in(p.namespace) else {
                return deny(resp, no_policy_message(state, kind, p.namespace), []);
            };
            let outcome = kind.evaluate(&p.spec, &policy, p.namespace);
            let outcome_allowed = outcome.allowed();
            // Violations are reported by the validating webhook; here only what can be filled is filled.
            kind.set_spec(&mut patched, outcome.spec);
            warnings.extend(outcome.warnings);
            if kind.edited {
                if let Some((field, message)) = quota_violation(state, kind, &policy, p.namespace) {
                    return with_warnings(deny(resp, message.clone(), [(field, message)]), warnings);
                }
                warnings.extend(default_skip(&mut patched, &policy));
            }
            let supplied = label(&p.object, label_key).map(str::to_string);
            let keep = !kind.labeled || (supplied.is_some() && is_privileged(state, req));
            if !keep {
                if let Some(v) = &supplied {
                    warnings.push(format!(
                        "label {label_key} is assigned by nac; the supplied value {v:?} was replaced"
                    ));
                }
                let id = naming::generate_nacuuid(p.namespace, &p.name);
                set_label(&mut patched, label_key, id);
            }
            // The reconciler needs its finalizer anyway; adding it here saves it a write and a round trip.
            if !kind.finalizer().is_empty() {
                add_finalizer(&mut patched, kind.finalizer());
            }
            if !is_privileged(state, req) && kind.acts_as_requester {
                let who = Requester::from_user_info(&req.user_info);
                let stamped = serde_json::to_string(&who).expect("requester serializes");
                if annotation(&p.object, REQUESTER_ANNOTATION).is_some_and(|v| v != stamped) {
                    warnings.push(format!(
                        "annotation {REQUESTER_ANNOTATION} is assigned by nac; the supplied value was replaced"
                    ));
                }
                set_annotation(&mut patched, REQUESTER_ANNOTATION, stamped);
                if outcome_allowed {
                    if let Err((field, message)) =
                        stamp_rights(state, kind, &policy, &who, p.namespace, &mut patched, &mut warnings).await
                    {
                        return with_warnings(deny(resp, message.clone(), [(field, message)]), warnings);
                    }
                }
            }
        }
        Some((old_obj, old_spec)) if kind.edited => {
            // Schedules are edited. Whoever changes the spec (an unpause, the expression, the template, anything
            // but a pause alone) becomes the schedule's requester, checked as for a new schedule: the policy again, their rights stamped, so the
            // runs act with the rights of the last user who changed what they do. An unpause gets the policy's
            // skipImmediately default. nac's own writes (status, the consumed skipImmediately) pass as they are.
            if !is_privileged(state, req) {
                let template_changed = !same_template(old_spec, &p.spec);
                let mut spec = p.spec.clone();
                if !template_changed && old_spec.get("template") != p.spec.get("template") {
                    // A Go client's read-modify-write: the stored template stays as it was.
                    if let Some(t) = old_spec.get("template") {
                        patched["spec"]["template"] = t.clone();
                        spec.insert("template".into(), t.clone());
                    }
                }
                let expression_changed = old_spec.get("schedule") != p.spec.get("schedule");
                let unpaused = old_spec.get("paused").and_then(Value::as_bool).unwrap_or(false)
                    && !p.spec.get("paused").and_then(Value::as_bool).unwrap_or(false);
                // A pause alone stops runs: never refused, and the requester stays (the next unpause records its
                // user).
                if &spec != old_spec && !only_paused(old_spec, &spec) {
                    let Some(policy) = state.policy.admissible_in(p.namespace) else {
                        return deny(resp, no_policy_message(state, kind, p.namespace), []);
                    };
                    let outcome = kind.evaluate(&spec, &policy, p.namespace);
                    let allowed = outcome.allowed();
                    kind.set_spec(&mut patched, outcome.spec);
                    warnings.extend(outcome.warnings);
                    let who = Requester::from_user_info(&req.user_info);
                    let stamped = serde_json::to_string(&who).expect("requester serializes");
                    set_annotation(&mut patched, REQUESTER_ANNOTATION, stamped);
                    if allowed {
                        if let Err((field, message)) =
                            stamp_rights(state, kind, &policy, &who, p.namespace, &mut patched, &mut warnings).await
                        {
                            return with_warnings(deny(resp, message.clone(), [(field, message)]), warnings);
                        }
                    }
                    if unpaused {
                        warnings.extend(default_skip(&mut patched, &policy));
                    }
                    if expression_changed
                        && policy.schedule.min_interval.is_some()
                        && patched["spec"]["skipImmediately"] != Value::Bool(true)
                    {
                        // Velero runs an edited expression at once when its new time has passed: edit after edit
                        // would run backups more often than the policy allows.
                        patched["spec"]["skipImmediately"] = Value::Bool(true);
                        warnings.push(
                            "spec.skipImmediately set to true by cluster policy (schedule.minInterval): a changed \
                             expression runs at its next time, not at once"
                                .into(),
                        );
                    }
                }
            }
            keep_identity(kind, &p.object, old_obj, &mut patched);
        }
        Some((old_obj, old_spec)) => {
            let fields = kind.go_fields;
            let spec = if policy::zero::same_request(old_spec, &p.spec, fields) {
                // A Go client updates with the whole object it read, unset fields at their zero values: the
                // stored spec stays as it was.
                old_spec.clone()
            } else {
                policy::fill_from_old(&policy::zero::without_unset(&p.spec, fields), old_spec)
            };
            kind.set_spec(&mut patched, spec);
            keep_identity(kind, &p.object, old_obj, &mut patched);
        }
    }
    // One webhook call per create or update: the object as mutated is checked here with the validating rules,
    // so a refusal comes from this call (the validating endpoints stay served for installations that register
    // a second check; nac's own registrations no longer do, see BENCHMARKS.md §5).
    let verdict = validate_patched(state, &p, &patched);
    if !verdict.allowed {
        return with_warnings(verdict, warnings);
    }
    let patch = json_patch::diff(&p.object, &patched);
    let resp = with_warnings(resp, warnings);
    if patch.0.is_empty() {
        return resp;
    }
    match resp.clone().with_patch(patch) {
        Ok(r) => r,
        Err(e) => deny(resp, format!("internal error building the patch: {e}"), []),
    }
}

/// Whether `new` pauses `old` and changes nothing else (but `skipImmediately`, which only an unpause reads): an
/// edit that only stops runs.
fn only_paused(old: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    let rest = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter()
            .filter(|(k, v)| !v.is_null() && !matches!(k.as_str(), "paused" | "skipImmediately"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    new.get("paused") == Some(&Value::Bool(true)) && rest(old) == rest(new)
}

/// Whether two schedule specs hold the same template, as a Go client reads and writes it back.
fn same_template(old: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    let backup_spec = |m: &Map<String, Value>| m.get("template").and_then(|t| t.get("backupSpec")).cloned();
    let rest = |m: &Map<String, Value>| {
        let mut t = m
            .get("template")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        t.remove("backupSpec");
        t
    };
    let same_spec = match (backup_spec(old), backup_spec(new)) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => policy::zero::same_request(&a, &b, policy::zero::BACKUP),
        (a, b) => a == b,
    };
    same_spec && rest(old) == rest(new)
}

/// On an update: a removed identity label is put back, and nac's records too, so `kubectl replace` of the user's
/// original manifest works.
fn keep_identity(kind: ProxyKind, object: &Value, old: &Value, patched: &mut Value) {
    let label_key = kind.identity_label();
    if let (true, None, Some(old_id)) = (kind.labeled, label(object, label_key), label(old, label_key)) {
        set_label(patched, label_key, old_id.to_string());
    }
    for key in [REQUESTER_ANNOTATION, BACKUP_RIGHTS_ANNOTATION] {
        if let (None, Some(v)) = (annotation(patched, key), annotation(old, key)) {
            set_annotation(patched, key, v.to_string());
        }
    }
}

/// The answer to `kubectl nac status`: a dry-run create of a NonAdminBackup carrying [`STATUS_PROBE_ANNOTATION`]
/// is answered, without judging it (a dry run stores nothing), by one warning `nac-status: <JSON>` with the
/// namespace's tier and each quota's use and limit: what a tenant cannot read in the policy, about its own
/// namespace only (the namespace of the request, where the caller may create backups).
fn status_probe(state: &AdmissionState, p: &Parsed<'_>) -> Option<String> {
    if !is_status_probe(p) {
        return None;
    }
    let kind = p.kind;
    let Some(policy) = state.policy.admissible_in(p.namespace) else {
        return Some(format!(
            "nac-status: {}",
            serde_json::json!({"namespace": p.namespace, "error": no_policy_message(state, kind, p.namespace)})
        ));
    };
    let index = state.policy.usage().filter(|u| u.synced());
    let usage = index.map(|u| u.usage(p.namespace, None, jiff::Timestamp::now().as_second()));
    // The probe is itself a NonAdminBackup in the namespace: tracked as one that uses nac.
    let objective = crate::policy::objective::tracked(&policy, true);
    Some(format!(
        "nac-status: {}",
        crate::policy::quotas::status_json(&policy, p.namespace, usage.as_ref(), objective)
    ))
}

fn is_status_probe(p: &Parsed<'_>) -> bool {
    p.kind == ProxyKind::BACKUP
        && p.req.dry_run
        && p.old.is_none()
        && annotation(&p.object, crate::policy::STATUS_PROBE_ANNOTATION).is_some()
}

/// A create that would take its namespace over one of the policy's quotas, counted from nac's caches (no read);
/// the reconciler counts again, so two creates racing past the webhook cannot both take the last place.
fn quota_violation(
    state: &AdmissionState,
    kind: ProxyKind,
    policy: &Policy,
    namespace: &str,
) -> Option<(String, String)> {
    use crate::policy::Counted;
    let what = if kind == ProxyKind::BACKUP {
        Counted::Backup
    } else if kind == ProxyKind::RESTORE {
        Counted::Restore
    } else if kind == ProxyKind::SCHEDULE {
        Counted::Schedule
    } else {
        return None;
    };
    if !policy.quotas.limits(what) {
        return None;
    }
    let field = "metadata.namespace".to_string();
    let Some(usage) = state.policy.usage().filter(|u| u.synced()) else {
        let why = if state.policy.usage().is_none() {
            "nac runs without a connection to the cluster"
        } else {
            "nac has not finished reading them since it started"
        };
        return Some((
            field,
            format!(
                "{} refused: nac cannot count the objects of namespace {namespace} its quotas limit now ({why}); retry",
                kind.kind()
            ),
        ));
    };
    let now = jiff::Timestamp::now().as_second();
    crate::policy::check_quota(policy, what, namespace, &usage.usage(namespace, None, now))
        .err()
        .map(|r| (field, r.message))
}

/// The policy's `schedule.skipImmediately` default on a schedule that does not say (creation, unpause).
fn default_skip(patched: &mut Value, policy: &Policy) -> Option<String> {
    if !policy.schedule.skip_immediately || !patched["spec"]["skipImmediately"].is_null() {
        return None;
    }
    patched["spec"]["skipImmediately"] = Value::Bool(true);
    Some(
        "spec.skipImmediately set to true by cluster policy: a run due now (an overdue schedule unpaused) is skipped"
            .into(),
    )
}

/// Records what the requester may read, for the kinds holding a BackupSpec: the record is stamped on the
/// object, or the refusal returned with its field. A storage location gets its rules that need the cluster
/// instead (`location_rules`; nac's own writes skip them here, and the reconciler judges those).
async fn stamp_rights(
    state: &AdmissionState,
    kind: ProxyKind,
    policy: &Policy,
    who: &Requester,
    namespace: &str,
    patched: &mut Value,
    warnings: &mut Vec<String>,
) -> Result<(), (String, String)> {
    if kind == ProxyKind::RESTORE {
        let spec = spec_of(kind, patched).unwrap_or_default();
        // A copy (its shape and the source's policy judged with the spec): the target's side from nac's caches.
        let target = crate::policy::copy::target(&spec, namespace).ok().flatten();
        if let Some(t) = target.as_deref() {
            let refusal = state
                .policy
                .copy_refusal(t)
                .unwrap_or_else(|not_yet| Some(format!("NonAdminRestore refused: {not_yet}; retry")));
            if let Some(refusal) = refusal {
                return Err(("spec.restoreSpec.namespaceMapping".into(), refusal));
            }
        }
        let into = target.as_deref().unwrap_or(namespace);
        warnings.extend(restore_rights(state, policy.rights.restore, who, into, namespace != into, &spec).await?);
        return Ok(());
    }
    if kind == ProxyKind::DOWNLOAD {
        let target = spec_of(kind, patched).unwrap_or_default();
        return download_rights(state, policy, who, namespace, target).await;
    }
    if kind == ProxyKind::STORAGE_LOCATION {
        let spec = spec_of(kind, patched).unwrap_or_default();
        let refused = location_rules(state, policy, Some(who), namespace, &spec).await;
        let all: Vec<&str> = refused.iter().map(|(_, m)| m.as_str()).collect();
        return match refused.first() {
            None => Ok(()),
            Some((field, _)) => Err((field.clone(), all.join("; "))),
        };
    }
    let (Some(path), Some(spec)) = (kind.backup_spec_path, backup_spec_of(kind, patched)) else {
        return Ok(());
    };
    let (record, warning) = backup_rights(state, kind, path, policy.rights.backup, who, namespace, &spec).await?;
    warnings.extend(warning);
    let v = serde_json::to_string(&record).expect("record serializes");
    set_annotation(patched, BACKUP_RIGHTS_ANNOTATION, v);
    Ok(())
}

/// A new download request's requester `who` may read what its file exposes (`crate::rights::download`). A file
/// not made yet (its backup or restore unfinished) is admitted: the reconciler checks once it exists, and again
/// before it asks Velero for any file.
async fn download_rights(
    state: &AdmissionState,
    policy: &Policy,
    who: &Requester,
    namespace: &str,
    target: Map<String, Value>,
) -> Result<(), (String, String)> {
    use crate::rights::download;
    let field = download::FIELD.to_string();
    let target: crate::api::NonAdminDownloadTarget = serde_json::from_value(Value::Object(target)).map_err(|e| {
        (
            field.clone(),
            format!("NonAdminDownloadRequest {field} is not a download target (kind and name): {e}"),
        )
    })?;
    let mode = download::mode(policy, target.kind);
    if mode == RightsMode::Off {
        return Ok(());
    }
    let fail = |e: String| {
        (
            field.clone(),
            format!(
                "NonAdminDownloadRequest refused: nac cannot check whether {} may read {} of {} now ({e}); retry",
                who.username,
                target.kind.as_str(),
                target.name
            ),
        )
    };
    let no_cluster = || "nac runs without a connection to the cluster".to_string();
    let lookup = state.locations.as_deref().ok_or_else(|| fail(no_cluster()))?;
    let Some(file) = lookup.download_file(namespace, &target).await.map_err(fail)? else {
        return Ok(());
    };
    let access = state.access.as_deref().ok_or_else(|| fail(no_cluster()))?;
    match download::check(access, Some(who), namespace, &file, mode)
        .await
        .map_err(fail)?
    {
        Ok(()) => Ok(()),
        Err(message) => Err((field, message)),
    }
}

/// The validating rules applied to `req` with its object replaced by `patched` (parsed as `p`).
fn validate_patched(state: &AdmissionState, p: &Parsed<'_>, patched: &Value) -> AdmissionResponse {
    let resp = AdmissionResponse::from(p.req);
    let spec = match spec_of(p.kind, patched) {
        Ok(s) => s,
        Err(e) => return deny(resp, e, []),
    };
    let checked = Parsed {
        kind: p.kind,
        req: p.req,
        namespace: p.namespace,
        name: p.name.clone(),
        object: patched.clone(),
        spec,
        old: p.old.clone(),
    };
    validate_parsed(state, resp, &checked)
}

/// A NonAdminRestore's wait-timeout annotation outside the policy (checked when set or changed).
fn wait_timeout_violation(
    kind: ProxyKind,
    object: &Value,
    old: Option<&Value>,
    policy: &Policy,
) -> Option<(String, String)> {
    if !kind.waits {
        return None;
    }
    let value = |o: &Value| {
        o["metadata"]["annotations"][policy::WAIT_TIMEOUT_ANNOTATION]
            .as_str()
            .map(str::to_string)
    };
    let v = value(object)?;
    if old.is_some_and(|o| value(o).as_deref() == Some(v.as_str())) {
        return None;
    }
    let message = policy.restore.wait_for(Some(&v)).err()?;
    Some((
        format!("metadata.annotations[{}]", policy::WAIT_TIMEOUT_ANNOTATION),
        message,
    ))
}

/// The rights decision for a new NonAdminBackup (or schedule template, at `path`) of `who` (see `crate::rights`):
/// the record to stamp and the warning to show, or the refused field and why.
async fn backup_rights(
    state: &AdmissionState,
    kind: ProxyKind,
    path: &str,
    mode: RightsMode,
    who: &Requester,
    namespace: &str,
    spec: &Map<String, Value>,
) -> Result<(BackupRights, Vec<String>), (String, String)> {
    // The kinds are not recorded (see `BackupRights`): the reconciler decides them again with the same answers.
    let record = BackupRights {
        mode,
        excluded: Vec::new(),
    };
    if mode == RightsMode::Off {
        return Ok((record, Vec::new()));
    }
    let field = format!("{path}.includedResources");
    let what = kind.kind();
    let fail = unchecked(field.clone(), what, &who.username, "read");
    let (access, kinds) = rights_access(state, &fail).await?;
    let included = crate::rights::backup_kinds(spec, &kinds);
    let denied = crate::rights::unreadable(access, who, namespace, &included)
        .await
        .map_err(&fail)?;
    let readable: Vec<_> = included
        .iter()
        .copied()
        .filter(|k| !denied.contains(&k.filter_name()))
        .collect();
    let lacks = crate::rights::features::backup_lacks(access, who, namespace, spec, &readable)
        .await
        .map_err(&fail)?;
    if denied.is_empty() && lacks.is_empty() {
        return Ok((record, Vec::new()));
    }
    let mut warnings = lacked(&lacks, (what, path, "backup"), mode, &who.username, namespace)?;
    if mode == RightsMode::Exclude {
        // What the reconciler will hand Velero: an include list of nothing but left-out kinds makes a spec Velero
        // fails at validation (see `velero::validation`).
        let mut fin = spec.clone();
        crate::velero::exclusions::add_backup_exclusions(&mut fin);
        crate::rights::features::apply_to_backup(&mut fin, &lacks);
        crate::rights::exclude_checked(&mut fin, &denied, (what, path), &who.username, namespace)
            .map_err(|e| (field.clone(), e))?;
    }
    if denied.is_empty() {
        return Ok((record, warnings));
    }
    let list = denied.join(", ");
    match mode {
        RightsMode::Deny => Err((
            field,
            format!(
                "{what} would include resources {} may not list in namespace {namespace}: {list}; leave them \
                 out with {path}.excludedResources or ask for read access (policy rights.backup: deny)",
                who.username
            ),
        )),
        _ => {
            // Each name gets its own kind's answer, and a name whose kind is not found none (`Unknown`).
            let kinds: Vec<&crate::rights::Kind> = denied
                .iter()
                .filter_map(|d| included.iter().copied().find(|k| k.filter_name() == *d))
                .collect();
            let answers = access.occupied(namespace, &kinds).await;
            let seen: Vec<Seen> = denied
                .iter()
                .map(|d| {
                    let at = kinds.iter().position(|k| k.filter_name() == *d);
                    at.and_then(|i| answers.get(i).copied()).unwrap_or(Seen::Unknown)
                })
                .collect();
            warnings.insert(0, left_out_warning(path, &denied, &seen, &who.username, namespace));
            Ok((record, warnings))
        }
    }
}

/// Rights fail closed: the refusal, at `field`, of a request of `what` whose requester's rights (what `user` may
/// `may`) nac cannot check now.
fn unchecked<'a>(
    field: String,
    what: &'a str,
    user: &'a str,
    may: &'a str,
) -> impl Fn(String) -> (String, String) + 'a {
    move |e| {
        (
            field.clone(),
            format!("{what} refused: nac cannot check what {user} may {may} now ({e}); retry"),
        )
    }
}

/// The cluster's answers about rights and the kinds it serves, or `fail`'s refusal when nac cannot have them.
async fn rights_access<'a>(
    state: &'a AdmissionState,
    fail: &impl Fn(String) -> (String, String),
) -> Result<(&'a dyn crate::rights::Access, std::sync::Arc<Vec<crate::rights::Kind>>), (String, String)> {
    let access = state
        .access
        .as_deref()
        .ok_or_else(|| fail("nac runs without a connection to the cluster".into()))?;
    let kinds = access.kinds().await.map_err(&fail)?;
    Ok((access, kinds))
}

/// What a new NonAdminRestore asks of Velero beyond creating objects (see `crate::rights::features`), as far as
/// its spec tells: exec hooks, and `restoreStatus` and `existingResourcePolicy: update` on the kinds its
/// `includedResources` names, in `namespace`, where it restores (for a `copy`, the target, where the requester
/// must also be allowed to create NonAdminRestores, whatever `mode`). The kinds the backup holds are known once the
/// reconciler reads its contents, which asks again about all of them.
async fn restore_rights(
    state: &AdmissionState,
    mode: RightsMode,
    who: &Requester,
    namespace: &str,
    copy: bool,
    spec: &Map<String, Value>,
) -> Result<Vec<String>, (String, String)> {
    const PATH: &str = "spec.restoreSpec";
    let mode = mode.for_restore(copy);
    if mode == RightsMode::Off {
        return Ok(Vec::new());
    }
    let fail = unchecked(PATH.to_string(), "NonAdminRestore", &who.username, "do");
    let (access, kinds) = rights_access(state, &fail).await?;
    if copy {
        if let Some(refusal) = crate::rights::restore::copy_right(access, who, namespace)
            .await
            .map_err(&fail)?
        {
            return Err((format!("{PATH}.namespaceMapping"), refusal));
        }
    }
    // The kinds the spec names: in `includedResources`, and those whose status it asks for.
    let names = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let mut named = names(spec.get("includedResources"));
    named.extend(names(
        spec.get("restoreStatus").and_then(|r| r.get("includedResources")),
    ));
    named.retain(|n| n != "*");
    let named: Vec<&crate::rights::Kind> = kinds.iter().filter(|k| named.iter().any(|n| k.named_by(n))).collect();
    let lacks = crate::rights::features::restore_lacks(
        access,
        who,
        namespace,
        spec,
        &named,
        crate::rights::features::Storage::Admin,
    )
    .await
    .map_err(&fail)?;
    lacked(
        &lacks,
        ("NonAdminRestore", PATH, "restore"),
        mode,
        &who.username,
        namespace,
    )
}

/// What the webhook says of features a request uses that its requester lacks the rights for (see
/// `crate::rights::features`): with `deny` the first refused, naming its field and right; otherwise a warning
/// each. `what` is (kind, spec path, "backup" or "restore").
fn lacked(
    lacks: &[crate::rights::features::Lack],
    (kind, path, what): (&str, &str, &str),
    mode: RightsMode,
    user: &str,
    namespace: &str,
) -> Result<Vec<String>, (String, String)> {
    if mode == RightsMode::Deny {
        if let Some(l) = lacks.first() {
            return Err((
                format!("{path}.{}", l.field),
                format!(
                    "{kind} {path}.{} asks Velero for {}; leave it out or ask for that right (policy \
                     rights.{what}: deny)",
                    l.field,
                    l.reason(user, namespace)
                ),
            ));
        }
    }
    Ok(lacks
        .iter()
        .map(|l| {
            format!(
                "{path}.{}: left out of the {what}, {} (policy rights.{what}: exclude)",
                l.field,
                l.reason(user, namespace)
            )
        })
        .collect())
}

/// The warning of a backup that leaves out kinds its requester may not list. They are often many (other
/// controllers' kinds, mostly empty in a tenant's namespace): it names a few, those that hold objects first, and
/// counts those that hold none; of kinds nac may not look into, or could not tell of in time, it says so rather
/// than guess. The Velero Backup's spec, mirrored in the status, lists them all.
fn left_out_warning(path: &str, denied: &[String], seen: &[Seen], user: &str, namespace: &str) -> String {
    const SHOWN: usize = 6;
    let r = crate::rights::occupancy::by_occupancy(denied, seen);
    let total = r.names.len();
    let shown = if total > SHOWN {
        format!("{} and {} more kinds", r.names[..SHOWN].join(", "), total - SHOWN)
    } else {
        r.names.join(", ")
    };
    let mut notes = Vec::new();
    let verb = |n: usize| if n == 1 { "holds" } else { "hold" };
    if r.holding > 0 {
        notes.push(format!("{} {} objects there", r.holding, verb(r.holding)));
    }
    if r.empty > 0 {
        notes.push(format!("{} {} none", r.empty, verb(r.empty)));
    }
    match r.not_allowed {
        0 => {}
        n if n == total => notes.push("named alphabetically: nac may not look which hold objects".into()),
        n => notes.push(format!("{n} nac may not look into")),
    }
    match r.unknown {
        0 => {}
        n if n == total => notes.push("named alphabetically: nac could not tell which hold objects".into()),
        n => notes.push(format!("{n} nac could not tell of")),
    }
    if total > SHOWN {
        notes.push("status.veleroBackup.spec lists them all once the backup is made".to_string());
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    format!(
        "{path}: {shown} left out of the backup{notes}: {user} may not list them in namespace {namespace} \
         (policy rights.backup: exclude)"
    )
}

fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object["metadata"]["annotations"].get(key).and_then(Value::as_str)
}

fn set_annotation(object: &mut Value, key: &str, value: String) {
    let meta = &mut object["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = Value::Object(Map::new());
    }
    meta["annotations"][key] = Value::String(value);
}

fn add_finalizer(object: &mut Value, finalizer: &str) {
    let meta = &mut object["metadata"];
    if !meta["finalizers"].is_array() {
        meta["finalizers"] = Value::Array(Vec::new());
    }
    let list = meta["finalizers"].as_array_mut().expect("just made an array");
    if !list.iter().any(|f| f.as_str() == Some(finalizer)) {
        list.push(Value::String(finalizer.to_string()));
    }
}

fn set_label(object: &mut Value, key: &str, value: String) {
    let meta = &mut object["metadata"];
    if !meta["labels"].is_object() {
        meta["labels"] = Value::Object(Map::new());
    }
    meta["labels"][key] = Value::String(value);
}

async fn validate(state: &AdmissionState, resp: AdmissionResponse, p: Parsed<'_>) -> AdmissionResponse {
    let (kind, req) = (p.kind, p.req);
    let verdict = validate_parsed(state, resp.clone(), &p);
    if !verdict.allowed || kind != ProxyKind::STORAGE_LOCATION || p.old.is_some() {
        return verdict;
    }
    let Some(policy) = state.policy.admissible_in(p.namespace) else {
        return verdict;
    };
    let who = (!is_privileged(state, req)).then(|| Requester::from_user_info(&req.user_info));
    deny_all(
        verdict,
        location_rules(state, &policy, who.as_ref(), p.namespace, &p.spec).await,
    )
}

/// A new storage location's rules that need the cluster (`crate::rights::credential`, `crate::endpoints`): its
/// endpoints judged by the addresses their names resolve to, and its credential readable by its requester `who`
/// (none for nac's own writes: the reconciler then refuses a location without a requester's record).
async fn location_rules(
    state: &AdmissionState,
    policy: &Policy,
    who: Option<&Requester>,
    namespace: &str,
    spec: &Map<String, Value>,
) -> Vec<(String, String)> {
    use crate::rights::credential;
    let mut out: Vec<(String, String)> = state
        .endpoints
        .evaluate(spec, policy)
        .await
        .violations
        .into_iter()
        .map(|v| (v.field, v.message))
        .collect();
    let secret = spec
        .get("credential")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str);
    let (Some(who), Some(secret)) = (who, secret) else {
        return out;
    };
    let mode = policy.rights.locations;
    let answer = match state.access.as_deref() {
        Some(access) => credential::check(access, Some(who), namespace, secret, mode).await,
        None if mode == RightsMode::Off => Ok(Ok(())),
        None => Err("nac runs without a connection to the cluster".to_string()),
    };
    match answer {
        Ok(Ok(())) => out.extend(credential_content(state, namespace, spec, secret).await),
        Ok(Err(message)) => out.push((credential::FIELD.to_string(), message)),
        Err(e) => out.push((
            credential::FIELD.to_string(),
            format!(
                "NonAdminBackupStorageLocation refused: nac cannot check whether {} may get Secret {secret:?} in \
                 namespace {namespace} now ({e}); retry",
                who.username
            ),
        )),
    }
    out
}

/// The credential's content (`policy::credential_copy`), judged at apply when the Secret exists already (it is
/// judged again before every copy): anything but static keys is refused naming the key. Asked only once the
/// requester may read the Secret, so the answer tells nothing of a Secret they may not read.
async fn credential_content(
    state: &AdmissionState,
    namespace: &str,
    spec: &Map<String, Value>,
    secret: &str,
) -> Option<(String, String)> {
    let lookup = state.locations.as_ref()?;
    let key = spec.get("credential")?.get("key")?.as_str()?;
    let field = "spec.backupStorageLocationSpec.credential".to_string();
    let found = match lookup.secret(namespace, secret).await {
        Ok(found) => found?,
        Err(e) => {
            return Some((
                field,
                format!(
                    "NonAdminBackupStorageLocation refused: nac cannot read Secret {secret:?} in namespace \
                     {namespace} to check its credential now ({e}); retry"
                ),
            ))
        }
    };
    let bytes = found.data.as_ref()?.get(key)?;
    let config: Option<std::collections::BTreeMap<String, String>> =
        spec.get("config").and_then(Value::as_object).map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        });
    policy::credential_copy(secret, key, &bytes.0, config.as_ref())
        .err()
        .map(|why| (field, why))
}

/// The validating rules on a parsed review.
/// A preview made by one user must not become a restore made with their rights by another's edit.
fn preview_changed(kind: ProxyKind, old: &Value, new: &Value) -> Option<(String, String)> {
    let preview = |o: &Value| annotation(o, PREVIEW_ANNOTATION).map(str::to_string);
    (kind.waits && preview(old) != preview(new)).then(|| {
        (
            format!("metadata.annotations[{PREVIEW_ANNOTATION}]"),
            format!(
                "{} annotation {PREVIEW_ANNOTATION} cannot be added, changed or removed after creation: a preview \
                 stays a preview; create a new NonAdminRestore to restore",
                kind.kind()
            ),
        )
    })
}

fn validate_parsed(state: &AdmissionState, resp: AdmissionResponse, p: &Parsed<'_>) -> AdmissionResponse {
    let (kind, req) = (p.kind, p.req);
    if is_status_probe(p) {
        // A dry run asking for the namespace's status: nothing is stored, so nothing to refuse.
        return resp;
    }
    let label_key = kind.identity_label();
    let label_field = format!("metadata.labels[{label_key}]");
    let privileged = is_privileged(state, req);
    let sync_field = format!("metadata.labels[{NAB_SYNCED_FROM_NACUUID_LABEL}]");
    let sync_label = |o: &Value| {
        kind.synced
            .then(|| label(o, NAB_SYNCED_FROM_NACUUID_LABEL).map(str::to_string))
            .flatten()
    };
    match &p.old {
        None if synced_by_nac(state, kind, req, &p.object) => resp,
        None if sync_label(&p.object).is_some() => deny_all(
            resp,
            vec![(
                sync_field,
                format!(
                    "NonAdminBackup label {NAB_SYNCED_FROM_NACUUID_LABEL} is set only by nac's backup sync; remove it"
                ),
            )],
        ),
        None => {
            let Some(policy) = state.policy.admissible_in(p.namespace) else {
                return deny(resp, no_policy_message(state, kind, p.namespace), []);
            };
            let outcome = kind.evaluate(&p.spec, &policy, p.namespace);
            let mut violations: Vec<(String, String)> = outcome
                .violations
                .iter()
                .map(|v| (v.field.clone(), v.message.clone()))
                .collect();
            if let Some(id) = label(&p.object, label_key).filter(|_| kind.labeled) {
                if !privileged && !naming::is_nacuuid_for(id, p.namespace, &p.name) {
                    violations.push((
                        label_field.clone(),
                        format!(
                            "{} label {label_key}={id} is forged: it is assigned by nac and names another object",
                            kind.kind()
                        ),
                    ));
                }
            }
            violations.extend(wait_timeout_violation(kind, &p.object, None, &policy));
            if !privileged {
                violations.extend(quota_violation(state, kind, &policy, p.namespace));
                let who = serde_json::to_string(&Requester::from_user_info(&req.user_info)).expect("serializes");
                if annotation(&p.object, REQUESTER_ANNOTATION).is_some_and(|v| v != who) {
                    violations.push((
                        format!("metadata.annotations[{REQUESTER_ANNOTATION}]"),
                        format!(
                            "{} annotation {REQUESTER_ANNOTATION} is forged: it names another user",
                            kind.kind()
                        ),
                    ));
                }
            }
            deny_all(resp, violations)
        }
        Some((old_obj, old_spec)) => {
            let mut violations = Vec::new();
            // What a schedule's edit may change: its spec, checked again as a new one; nac's records only as the
            // mutating webhook writes them for an edited spec (the editor becomes the requester).
            let mut edited = false;
            if kind.edited {
                edited = old_spec != &p.spec;
                if edited && !privileged && !only_paused(old_spec, &p.spec) {
                    let Some(policy) = state.policy.admissible_in(p.namespace) else {
                        return deny(resp, no_policy_message(state, kind, p.namespace), []);
                    };
                    let outcome = kind.evaluate(&p.spec, &policy, p.namespace);
                    violations.extend(outcome.violations.into_iter().map(|v| (v.field, v.message)));
                }
            } else if let Some(path) = policy::first_changed_field(old_spec, &p.spec)
                // A download request's CRD rule refuses any change of its spec, in its own words.
                .filter(|_| kind != ProxyKind::DOWNLOAD)
            {
                let field = format!("{}{path}", kind.spec_path());
                violations.push((
                    field.clone(),
                    format!(
                        "{} {} cannot be changed after creation ({field} differs); create a new {} instead",
                        kind.kind(),
                        kind.spec_path(),
                        kind.kind()
                    ),
                ));
            }
            if kind == ProxyKind::BACKUP {
                let was = old_obj["spec"]["deleteBackup"].as_bool().unwrap_or(false);
                let now = p.object["spec"]["deleteBackup"].as_bool().unwrap_or(false);
                if was && !now {
                    violations.push((
                        "spec.deleteBackup".into(),
                        "NonAdminBackup spec.deleteBackup cannot be set back to false once deletion was requested"
                            .into(),
                    ));
                }
            }
            let (old_sync, new_sync) = (sync_label(old_obj), sync_label(&p.object));
            if old_sync != new_sync && !privileged {
                violations.push((
                    sync_field,
                    format!(
                        "NonAdminBackup label {NAB_SYNCED_FROM_NACUUID_LABEL} is set only by nac's backup sync and \
                         cannot be added, changed or removed"
                    ),
                ));
            }
            if let Some(policy) = state.policy.current_in(p.namespace) {
                violations.extend(wait_timeout_violation(kind, &p.object, Some(old_obj), &policy));
            }
            violations.extend(preview_changed(kind, old_obj, &p.object));
            let me = serde_json::to_string(&Requester::from_user_info(&req.user_info)).expect("serializes");
            for key in [REQUESTER_ANNOTATION, BACKUP_RIGHTS_ANNOTATION] {
                // Only an edit that makes its user the requester re-records them (a pause alone does not).
                let restamped = edited
                    && !only_paused(old_spec, &p.spec)
                    && annotation(&p.object, key).is_some()
                    && (key != REQUESTER_ANNOTATION || annotation(&p.object, key) == Some(me.as_str()));
                if annotation(old_obj, key) != annotation(&p.object, key) && !privileged && !restamped {
                    violations.push((
                        format!("metadata.annotations[{key}]"),
                        format!(
                            "{} annotation {key} is recorded by nac and cannot be changed or removed",
                            kind.kind()
                        ),
                    ));
                }
            }
            let (old_id, new_id) = (label(old_obj, label_key), label(&p.object, label_key));
            if old_id != new_id && !privileged && kind.labeled {
                violations.push((
                    label_field,
                    format!(
                        "{} label {label_key} is assigned by nac and cannot be changed or removed (was {}, now {})",
                        kind.kind(),
                        old_id.unwrap_or("unset"),
                        new_id.unwrap_or("unset")
                    ),
                ));
            }
            deny_all(resp, violations)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize, f: impl Fn(usize) -> String) -> Vec<String> {
        (0..n).map(f).collect()
    }

    #[test]
    fn a_long_list_of_left_out_kinds_is_cut_in_the_warning() {
        let kinds = names(9, |i| format!("k{i}"));
        let w = left_out_warning("spec.backupSpec", &kinds, &[Seen::Empty; 9], "alice", "team-a");
        assert_eq!(
            w,
            "spec.backupSpec: k0, k1, k2, k3, k4, k5 and 3 more kinds left out of the backup (9 hold none; \
             status.veleroBackup.spec lists them all once the backup is made): alice may not list them in namespace \
             team-a (policy rights.backup: exclude)"
        );
        let w = left_out_warning(
            "spec.backupSpec",
            &kinds[..2],
            &[Seen::Holds, Seen::Empty],
            "alice",
            "team-a",
        );
        assert!(
            w.starts_with(
                "spec.backupSpec: k0, k1 left out of the backup (1 holds objects there; 1 holds none): alice"
            ),
            "{w}"
        );
    }

    #[test]
    fn the_warning_names_first_the_kinds_that_hold_objects() {
        // Velero's kinds sort first and hold nothing in a tenant's namespace; the Secrets are what matters.
        let mut kinds = names(8, |i| format!("k{i}.velero.io"));
        kinds.push("secrets".into());
        let mut seen = vec![Seen::Empty; 6];
        seen.extend([Seen::Unknown, Seen::NotAllowed, Seen::Holds]);
        let w = left_out_warning("spec.backupSpec", &kinds, &seen, "alice", "team-a");
        assert!(
            w.starts_with(
                "spec.backupSpec: secrets, k6.velero.io, k7.velero.io, k0.velero.io, k1.velero.io, k2.velero.io and \
                 3 more kinds left out of the backup (1 holds objects there; 6 hold none; 1 nac may not look into; \
                 1 nac could not tell of; status.veleroBackup.spec"
            ),
            "{w}"
        );
    }

    #[test]
    fn without_the_right_or_the_time_to_look_the_warning_says_it_names_kinds_alphabetically() {
        let kinds = names(8, |i| format!("k{i}"));
        let w = left_out_warning("spec.backupSpec", &kinds, &[Seen::NotAllowed; 8], "alice", "team-a");
        assert!(
            w.starts_with(
                "spec.backupSpec: k0, k1, k2, k3, k4, k5 and 2 more kinds left out of the backup (named \
                 alphabetically: nac may not look which hold objects; status.veleroBackup.spec lists them all"
            ),
            "{w}"
        );
        let w = left_out_warning("spec.backupSpec", &kinds[..3], &[Seen::Unknown; 3], "alice", "team-a");
        assert!(
            w.starts_with(
                "spec.backupSpec: k0, k1, k2 left out of the backup (named alphabetically: nac could not tell which \
                 hold objects): alice"
            ),
            "{w}"
        );
        // Secrets seen, the rest not looked into (nac as the chart installs it without rights.listEveryKind).
        let mut kinds = names(7, |i| format!("k{i}.velero.io"));
        kinds.push("secrets".into());
        let mut seen = vec![Seen::NotAllowed; 7];
        seen.push(Seen::Holds);
        let w = left_out_warning("spec.backupSpec", &kinds, &seen, "alice", "team-a");
        assert!(
            w.starts_with(
                "spec.backupSpec: secrets, k0.velero.io, k1.velero.io, k2.velero.io, k3.velero.io, k4.velero.io and \
                 2 more kinds left out of the backup (1 holds objects there; 7 nac may not look into; status"
            ),
            "{w}"
        );
    }
}
