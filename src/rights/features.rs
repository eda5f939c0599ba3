//! Velero features that act on the cluster beyond reading (a backup) or creating (a restore), each bound to a
//! right of the requester's own. Velero runs them with its own cluster-wide rights, so each is a way around
//! nac's list/create checks unless nac asks about it too:
//!
//! | feature | right asked, in the namespace |
//! |---|---|
//! | exec hooks of a backup or restore (`hooks`), and pods, whose hook annotations Velero runs | `create pods/exec` and `get pods` |
//! | volume data of a backup (file-system backup, CSI snapshots, the data mover) | `create pods` or `create pods/exec` |
//! | status restored (`restoreStatus`) | `update <kind>/status` for each such kind |
//! | `existingResourcePolicy: update` | `update` and `patch` on each kind restored |
//! | ServiceAccounts restored (Velero merge-patches an existing one under any policy) | `patch serviceaccounts` |
//! | Roles and RoleBindings from a location the tenant controls (its contents can change after nac read them) | `escalate roles`, `bind roles`, `bind clusterroles` |
//!
//! What is evaluated here is pure but for the questions, which go through [`Access`] (answers cached, RBAC-derived
//! where the policy allows): the webhook asks them at `kubectl apply` (to warn or refuse) and the reconciler again
//! when it makes the Velero object (to leave the feature out or refuse).

use super::{Access, Kind, Question, Requester};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

const CORE_PODS: (&str, &str) = ("", "pods");
const CORE_PVCS: (&str, &str) = ("", "persistentvolumeclaims");
const CORE_SAS: (&str, &str) = ("", "serviceaccounts");
/// Velero's annotations on pods that make it run commands in them during a backup.
pub const BACKUP_HOOK_ANNOTATIONS: &str = "pre.hook.backup.velero.io/command, post.hook.backup.velero.io/command";
/// Velero's annotation on pods that makes it run a command in a restored pod.
pub const RESTORE_HOOK_ANNOTATION: &str = "post.hook.restore.velero.io/command";
/// Velero's annotation that makes it restore an item's status whatever the restore's spec says.
pub const RESTORE_STATUS_ANNOTATION: &str = "velero.io/restore-status";

/// How a feature the requester lacks the right for is left out of the Velero spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// `hooks` removed (a backup's hooks are all exec hooks).
    DropBackupHooks,
    /// The exec post-hooks removed from `hooks.resources[].postHooks` (init hooks stay: they add containers to
    /// pods the requester may create).
    DropRestoreExecHooks,
    /// The init post-hooks removed (on OpenShift, Velero's restored pods are admitted against Velero's own
    /// SecurityContextConstraints, so the containers they add run as Velero's pods may).
    DropRestoreInitHooks,
    /// A kind left out (by its filter name).
    ExcludeKind(String),
    /// No volume data: `snapshotVolumes` and `snapshotMoveData` false, `defaultVolumesToFsBackup` false.
    NoVolumeData,
    /// `restoreStatus.includedResources` limited to these kinds (filter names; none: `restoreStatus` removed).
    StatusOnly(Vec<String>),
    /// `existingResourcePolicy` set to `none`.
    NoUpdates,
}

/// A feature the spec uses and the requester lacks the right for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lack {
    /// The spec field it is about, relative to the spec (`hooks`, `existingResourcePolicy`).
    pub field: String,
    /// What Velero would do, as a user reads it.
    pub what: String,
    /// The right it takes ("create pods/exec and get pods").
    pub right: String,
    pub effect: Effect,
}

impl Lack {
    /// One sentence: what is left out and why.
    pub fn reason(&self, user: &str, namespace: &str) -> String {
        format!("{}: {user} may not {} in namespace {namespace}", self.what, self.right)
    }
}

/// The answers a check needs, asked once each.
struct Asker<'a> {
    access: &'a dyn Access,
    who: &'a Requester,
    namespace: &'a str,
    answers: BTreeMap<String, bool>,
}

impl<'a> Asker<'a> {
    fn new(access: &'a dyn Access, who: &'a Requester, namespace: &'a str) -> Self {
        Asker {
            access,
            who,
            namespace,
            answers: BTreeMap::new(),
        }
    }

    async fn may(&mut self, verb: &str, group: &str, resource: &str, subresource: &str) -> Result<bool, String> {
        let q = Question {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: self.namespace.into(),
            ..Default::default()
        };
        let key = format!("{verb} {}", q.target());
        if let Some(a) = self.answers.get(&key) {
            return Ok(*a);
        }
        let a = self.access.ask(self.who, &q).await?;
        self.answers.insert(key, a);
        Ok(a)
    }

    /// `create pods/exec` and `get pods`: what running a command in a pod of the namespace takes.
    async fn may_exec(&mut self) -> Result<bool, String> {
        Ok(self.may("create", "", "pods", "exec").await? && self.may("get", "", "pods", "").await?)
    }
}

const EXEC_RIGHT: &str = "create pods/exec and get pods";

fn has(kinds: &[&Kind], (group, resource): (&str, &str)) -> bool {
    kinds.iter().any(|k| k.group == group && k.resource == resource)
}

fn truthy(spec: &Map<String, Value>, field: &str) -> Option<bool> {
    spec.get(field).and_then(Value::as_bool)
}

/// Whether a BackupSpec's hooks hold an exec hook (`hooks.resources[].pre/post[].exec`).
pub fn backup_exec_hooks(spec: &Map<String, Value>) -> bool {
    hook_resources(spec).any(|r| {
        ["pre", "post"].iter().any(|phase| {
            r[*phase]
                .as_array()
                .is_some_and(|hs| hs.iter().any(|h| !h["exec"].is_null()))
        })
    })
}

/// OpenShift's SecurityContextConstraints (group, resource): a cluster that serves them admits pods by them.
pub const SCC: (&str, &str) = ("security.openshift.io", "securitycontextconstraints");
/// The SCC that admits any pod, under which OpenShift admits the pods Velero creates.
pub const PRIVILEGED_SCC: &str = "privileged";

/// Whether a RestoreSpec's hooks hold an init post-hook (`hooks.resources[].postHooks[].init`).
pub fn restore_init_hooks(spec: &Map<String, Value>) -> bool {
    hook_resources(spec).any(|r| {
        r["postHooks"]
            .as_array()
            .is_some_and(|hs| hs.iter().any(|h| !h["init"].is_null()))
    })
}

/// Whether a RestoreSpec's hooks hold an exec post-hook (`hooks.resources[].postHooks[].exec`).
pub fn restore_exec_hooks(spec: &Map<String, Value>) -> bool {
    hook_resources(spec).any(|r| {
        r["postHooks"]
            .as_array()
            .is_some_and(|hs| hs.iter().any(|h| !h["exec"].is_null()))
    })
}

fn hook_resources(spec: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    spec.get("hooks")
        .and_then(|h| h["resources"].as_array())
        .into_iter()
        .flatten()
}

/// Whether a backup of `included` with this spec may copy volume data: file-system backup (through pods),
/// snapshots of claims (`snapshotVolumes`, unset meaning yes) and the data mover.
pub fn backup_copies_volumes(spec: &Map<String, Value>, included: &[&Kind]) -> bool {
    let actions = has_volume_policy(spec);
    let fs = has(included, CORE_PODS) && (truthy(spec, "defaultVolumesToFsBackup") != Some(false) || actions);
    let snapshots = has(included, CORE_PVCS)
        && (truthy(spec, "snapshotVolumes") != Some(false)
            || truthy(spec, "snapshotMoveData") == Some(true)
            || actions);
    fs || snapshots
}

/// Whether the spec names a resource policy (only an admin's enforced one passes the policy): its volume policies'
/// actions (`snapshot`, `fs-backup`) take precedence over `snapshotVolumes` and `defaultVolumesToFsBackup` in
/// Velero, and nac cannot see them (a ConfigMap in Velero's namespace), so it counts as copying volume data.
fn has_volume_policy(spec: &Map<String, Value>) -> bool {
    spec.get("resourcePolicy").is_some_and(|v| !v.is_null())
}

/// What a backup of `included` (the kinds left after the requester's list check) with `spec` would have Velero do
/// that `who` may not do in `namespace`. Any failed answer fails the check (closed).
pub async fn backup_lacks(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    spec: &Map<String, Value>,
    included: &[&Kind],
) -> Result<Vec<Lack>, String> {
    let mut ask = Asker::new(access, who, namespace);
    let mut out = Vec::new();
    let exec_used = backup_exec_hooks(spec) || has(included, CORE_PODS);
    let exec = if exec_used { ask.may_exec().await? } else { true };
    if backup_exec_hooks(spec) && !exec {
        out.push(Lack {
            field: "hooks".into(),
            what: "exec hooks, which Velero runs in the namespace's pods".into(),
            right: EXEC_RIGHT.into(),
            effect: Effect::DropBackupHooks,
        });
    }
    if has(included, CORE_PODS) && !exec {
        out.push(Lack {
            field: "includedResources".into(),
            what: format!(
                "pods, in which Velero runs the commands of their hook annotations ({BACKUP_HOOK_ANNOTATIONS}) and \
                 whose volumes it copies"
            ),
            right: EXEC_RIGHT.into(),
            effect: Effect::ExcludeKind("pods".into()),
        });
    }
    if backup_copies_volumes(spec, included)
        && !(ask.may("create", "", "pods", "").await? || ask.may("create", "", "pods", "exec").await?)
    {
        out.push(Lack {
            field: "snapshotVolumes".into(),
            what: "volume data (file-system backup, CSI snapshots and the data mover copy what the volumes hold)"
                .into(),
            right: "create pods or create pods/exec".into(),
            effect: Effect::NoVolumeData,
        });
        if has_volume_policy(spec) && has(included, CORE_PVCS) {
            // The flags above do not bind a volume policy's actions: the claims go, and with them their volumes.
            out.push(Lack {
                field: "resourcePolicy".into(),
                what: "persistentvolumeclaims, whose volumes the resource policy's volume actions (snapshot, \
                       fs-backup) would copy whatever snapshotVolumes says"
                    .into(),
                right: "create pods or create pods/exec".into(),
                effect: Effect::ExcludeKind("persistentvolumeclaims".into()),
            });
        }
    }
    Ok(out)
}

/// Applies `lacks` to a Velero BackupSpec: each feature left out (kinds through `exclude`, which keeps Velero's
/// filter style).
pub fn apply_to_backup(spec: &mut Map<String, Value>, lacks: &[Lack]) {
    let mut kinds = Vec::new();
    for l in lacks {
        match &l.effect {
            Effect::DropBackupHooks => {
                spec.remove("hooks");
            }
            Effect::ExcludeKind(k) => kinds.push(k.clone()),
            Effect::NoVolumeData => {
                spec.insert("snapshotVolumes".into(), Value::Bool(false));
                for f in ["snapshotMoveData", "defaultVolumesToFsBackup"] {
                    if spec.contains_key(f) {
                        spec.insert(f.into(), Value::Bool(false));
                    }
                }
            }
            Effect::DropRestoreExecHooks | Effect::DropRestoreInitHooks | Effect::StatusOnly(_) | Effect::NoUpdates => {
            }
        }
    }
    super::exclude(spec, &kinds);
}

/// The kinds of `restored` whose status a RestoreSpec asks Velero to restore (`restoreStatus`'s filters).
pub fn status_kinds<'a>(spec: &Map<String, Value>, restored: &[&'a Kind]) -> Vec<&'a Kind> {
    let Some(rs) = spec.get("restoreStatus").and_then(Value::as_object) else {
        return Vec::new();
    };
    let names = |f: &str| -> Vec<String> {
        rs.get(f)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let (inc, exc) = (names("includedResources"), names("excludedResources"));
    // Velero restores no status when the include list is empty.
    restored
        .iter()
        .copied()
        .filter(|k| inc.iter().any(|p| k.named_by(p)) && !exc.iter().any(|p| k.named_by(p)))
        .collect()
}

/// Whether the tenant controls what a backup's storage holds: its contents at Velero's read can differ from what
/// nac read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    Admin,
    Tenant,
}

/// What a restore of `restored` (kinds the requester may create) with the Velero RestoreSpec `spec` would have
/// Velero do beyond creating them that `who` may not do in `namespace`. Any failed answer fails the check
/// (closed).
pub async fn restore_lacks(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    spec: &Map<String, Value>,
    restored: &[&Kind],
    storage: Storage,
) -> Result<Vec<Lack>, String> {
    let mut ask = Asker::new(access, who, namespace);
    let mut out = Vec::new();
    let hooks = restore_exec_hooks(spec);
    let exec = if hooks || has(restored, CORE_PODS) {
        ask.may_exec().await?
    } else {
        true
    };
    if hooks && !exec {
        out.push(Lack {
            field: "hooks".into(),
            what: "exec hooks, which Velero runs in the restored pods".into(),
            right: EXEC_RIGHT.into(),
            effect: Effect::DropRestoreExecHooks,
        });
    }
    if has(restored, CORE_PODS) && !exec {
        out.push(Lack {
            field: "includedResources".into(),
            what: format!("pods, in which Velero runs the command of their {RESTORE_HOOK_ANNOTATION} annotation"),
            right: EXEC_RIGHT.into(),
            effect: Effect::ExcludeKind("pods".into()),
        });
    }
    if access.serves_sccs().await? && (has(restored, CORE_PODS) || restore_init_hooks(spec)) {
        // OpenShift admits a pod Velero creates against Velero's SCCs (privileged), not the requester's: pods and
        // the init containers hooks add come only for a user who may use the SCC that admits anything.
        let q = Question {
            verb: "use".into(),
            group: SCC.0.into(),
            resource: SCC.1.into(),
            name: PRIVILEGED_SCC.into(),
            namespace: namespace.into(),
            ..Default::default()
        };
        if !access.ask(who, &q).await? {
            let right = format!("use securitycontextconstraints/{PRIVILEGED_SCC}");
            if has(restored, CORE_PODS)
                && !out
                    .iter()
                    .any(|l: &Lack| l.effect == Effect::ExcludeKind("pods".into()))
            {
                out.push(Lack {
                    field: "includedResources".into(),
                    what: "pods, which OpenShift admits against Velero's own SecurityContextConstraints when Velero \
                           creates them"
                        .into(),
                    right: right.clone(),
                    effect: Effect::ExcludeKind("pods".into()),
                });
            }
            if restore_init_hooks(spec) {
                out.push(Lack {
                    field: "hooks".into(),
                    what: "init hooks, whose containers OpenShift admits against Velero's own \
                           SecurityContextConstraints"
                        .into(),
                    right,
                    effect: Effect::DropRestoreInitHooks,
                });
            }
        }
    }
    let wanted = status_kinds(spec, restored);
    if !wanted.is_empty() {
        let mut allowed = Vec::new();
        let mut refused = Vec::new();
        for k in &wanted {
            if ask.may("update", &k.group, &k.resource, "status").await? {
                allowed.push(k.filter_name());
            } else {
                refused.push(format!("{}/status", k.filter_name()));
            }
        }
        if !refused.is_empty() {
            out.push(Lack {
                field: "restoreStatus".into(),
                what: "status restored, which Velero writes through the status subresource".into(),
                right: format!("update {}", refused.join(", ")),
                effect: Effect::StatusOnly(allowed),
            });
        }
    }
    if spec.get("existingResourcePolicy").and_then(Value::as_str) == Some("update") {
        let mut refused = Vec::new();
        for k in restored {
            for verb in ["update", "patch"] {
                if !ask.may(verb, &k.group, &k.resource, "").await? {
                    refused.push(format!("{verb} {}", k.filter_name()));
                }
            }
        }
        if !refused.is_empty() {
            out.push(Lack {
                field: "existingResourcePolicy".into(),
                what: "objects that exist already updated to the backup's version".into(),
                right: refused.join(", "),
                effect: Effect::NoUpdates,
            });
        }
    }
    if has(restored, CORE_SAS) && !ask.may("patch", "", "serviceaccounts", "").await? {
        out.push(Lack {
            field: "includedResources".into(),
            what: "serviceaccounts, which Velero merges into those that exist already (a patch) under any \
                   existingResourcePolicy"
                .into(),
            right: "patch serviceaccounts".into(),
            effect: Effect::ExcludeKind("serviceaccounts".into()),
        });
    }
    if storage == Storage::Tenant {
        const RBAC: &str = "rbac.authorization.k8s.io";
        let checks = [
            ("roles", vec![("escalate", "roles")]),
            ("rolebindings", vec![("bind", "roles"), ("bind", "clusterroles")]),
        ];
        for (resource, rights) in checks {
            if !has(restored, (RBAC, resource)) {
                continue;
            }
            let mut refused = Vec::new();
            for (verb, r) in rights {
                if !ask.may(verb, RBAC, r, "").await? {
                    refused.push(format!("{verb} {r}.{RBAC}"));
                }
            }
            if !refused.is_empty() {
                out.push(Lack {
                    field: "includedResources".into(),
                    what: format!(
                        "{resource}.{RBAC} from a storage location the tenant controls (what Velero reads there can \
                         differ from what nac checked)"
                    ),
                    right: refused.join(" and "),
                    effect: Effect::ExcludeKind(format!("{resource}.{RBAC}")),
                });
            }
        }
    }
    Ok(out)
}

/// The kinds among `kinds` (filter names of `all`) whose status `who` may not write in `namespace`: Velero restores
/// the status of an item annotated [`RESTORE_STATUS_ANNOTATION`] whatever the spec says, so for these kinds nac has
/// Velero remove that annotation before it decides (a resource modifier of nac's).
pub async fn status_unwritable(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    kinds: &[&Kind],
) -> Result<Vec<String>, String> {
    let mut ask = Asker::new(access, who, namespace);
    let mut out = Vec::new();
    for k in kinds {
        if !ask.may("update", &k.group, &k.resource, "status").await? {
            out.push(k.filter_name());
        }
    }
    Ok(out)
}

/// The resource modifier document (Velero's `version: v1` format, as JSON, which Velero's YAML reader takes) that
/// removes [`RESTORE_STATUS_ANNOTATION`] from every item of `kinds` restored from `namespace`, after the rules of
/// `admin` (the document of a modifier the policy enforces) when there is one; for a copy, `labels` (the kinds
/// restored and the labels) adds those labels to every item. Velero matches a rule's namespaces before it maps
/// an item to its target namespace, so `namespace` is the backup's.
pub fn status_guard(
    namespace: &str,
    kinds: &[String],
    admin: Option<&str>,
    labels: Option<(&[String], &BTreeMap<String, String>)>,
) -> Result<String, String> {
    let mut rules: Vec<Value> = match admin {
        None => Vec::new(),
        Some(doc) => {
            let v: Value = serde_yaml::from_str(doc)
                .map_err(|e| format!("the resource modifier the policy enforces is not valid YAML: {e}"))?;
            if v["version"] != "v1" {
                return Err(format!(
                    "the resource modifier the policy enforces has version {}, nac knows v1",
                    v["version"]
                ));
            }
            v["resourceModifierRules"].as_array().cloned().unwrap_or_default()
        }
    };
    let patch = serde_json::json!({"metadata": {"annotations": {RESTORE_STATUS_ANNOTATION: null}}}).to_string();
    for k in kinds {
        rules.push(serde_json::json!({
            "conditions": {"groupResource": k, "namespaces": [namespace]},
            "mergePatches": [{"patchData": patch}],
        }));
    }
    if let Some((restored, labels)) = labels {
        let patch = serde_json::json!({"metadata": {"labels": labels}}).to_string();
        for k in restored {
            rules.push(serde_json::json!({
                "conditions": {"groupResource": k, "namespaces": [namespace]},
                "mergePatches": [{"patchData": patch}],
            }));
        }
    }
    Ok(serde_json::json!({"version": "v1", "resourceModifierRules": rules}).to_string())
}

/// Applies `lacks` to a Velero RestoreSpec, all but the kinds left out (the caller binds the included kinds).
pub fn apply_to_restore(spec: &mut Map<String, Value>, lacks: &[Lack]) {
    for l in lacks {
        match &l.effect {
            Effect::DropRestoreExecHooks => drop_restore_hooks(spec, "exec"),
            Effect::DropRestoreInitHooks => drop_restore_hooks(spec, "init"),
            Effect::StatusOnly(allowed) if allowed.is_empty() => {
                spec.remove("restoreStatus");
            }
            Effect::StatusOnly(allowed) => {
                spec.insert(
                    "restoreStatus".into(),
                    serde_json::json!({ "includedResources": allowed }),
                );
            }
            Effect::NoUpdates => {
                spec.insert("existingResourcePolicy".into(), Value::String("none".into()));
            }
            Effect::DropBackupHooks | Effect::ExcludeKind(_) | Effect::NoVolumeData => {}
        }
    }
}

/// Removes the post-hooks of one kind (`exec`, `init`) from a RestoreSpec's hooks.
fn drop_restore_hooks(spec: &mut Map<String, Value>, which: &str) {
    let Some(resources) = spec
        .get_mut("hooks")
        .and_then(|h| h.get_mut("resources"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for r in resources.iter_mut() {
        if let Some(hs) = r.get_mut("postHooks").and_then(Value::as_array_mut) {
            hs.retain(|h| h[which].is_null());
        }
    }
    // A resource hook left with no post-hook is dropped: Velero refuses an empty one.
    resources.retain(|r| r["postHooks"].as_array().is_none_or(|hs| !hs.is_empty()));
}

/// The kinds `lacks` leave out.
pub fn excluded_kinds(lacks: &[Lack]) -> Vec<String> {
    lacks
        .iter()
        .filter_map(|l| match &l.effect {
            Effect::ExcludeKind(k) => Some(k.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Fixed;
    use super::*;
    use crate::rights::testing::{deny, user};
    use serde_json::json;

    fn access(denied: Vec<(String, String, String)>) -> Fixed {
        let mut f = Fixed::common();
        let mut kinds = (*f.kinds).clone();
        kinds.push(Kind::new("", "serviceaccounts", "ServiceAccount", &["sa"]));
        kinds.push(Kind::new("", "services", "Service", &["svc"]));
        f.kinds = std::sync::Arc::new(kinds);
        Fixed { denied, ..f }
    }

    /// Kubernetes' `view` role in the namespace: reads, no exec, no creates.
    fn viewer() -> Vec<(String, String, String)> {
        vec![deny("viewer", "create", "pods/exec"), deny("viewer", "create", "pods")]
    }

    use crate::wire::object as map;

    fn kinds<'a>(a: &'a Fixed, names: &[&str]) -> Vec<&'a Kind> {
        a.kinds
            .iter()
            .filter(|k| names.contains(&k.resource.as_str()))
            .collect()
    }

    fn hooks() -> Value {
        json!({"resources": [{"name": "dump", "pre": [{"exec": {"command": ["sh", "-c", "cat /etc/secret"]}}]}]})
    }

    #[tokio::test]
    async fn a_backups_exec_hooks_need_exec_in_the_namespace() {
        let a = access(viewer());
        let spec = map(json!({"hooks": hooks(), "snapshotVolumes": false}));
        let inc = kinds(&a, &["configmaps"]);
        let lacks = backup_lacks(&a, &user("viewer"), "team-a", &spec, &inc).await.unwrap();
        assert_eq!(lacks.len(), 1, "{lacks:?}");
        assert_eq!(lacks[0].effect, Effect::DropBackupHooks);
        assert!(lacks[0]
            .reason("viewer", "team-a")
            .contains("viewer may not create pods/exec and get pods in namespace team-a"));
        let mut applied = spec.clone();
        apply_to_backup(&mut applied, &lacks);
        assert!(!applied.contains_key("hooks"));
        // An admin of the namespace keeps them.
        let lacks = backup_lacks(&a, &user("admin"), "team-a", &spec, &inc).await.unwrap();
        assert!(lacks.is_empty(), "{lacks:?}");
    }

    #[tokio::test]
    async fn pods_are_left_out_for_a_requester_who_may_not_exec_and_volume_data_for_one_who_may_not_reach_it() {
        let a = access(viewer());
        let spec = map(json!({"defaultVolumesToFsBackup": true}));
        let inc = kinds(&a, &["configmaps", "pods", "persistentvolumeclaims"]);
        let lacks = backup_lacks(&a, &user("viewer"), "team-a", &spec, &inc).await.unwrap();
        let effects: Vec<_> = lacks.iter().map(|l| l.effect.clone()).collect();
        assert_eq!(effects, [Effect::ExcludeKind("pods".into()), Effect::NoVolumeData]);
        let mut applied = spec.clone();
        apply_to_backup(&mut applied, &lacks);
        assert_eq!(applied["excludedResources"], json!(["pods"]));
        assert_eq!(applied["snapshotVolumes"], json!(false));
        assert_eq!(applied["defaultVolumesToFsBackup"], json!(false));
        // Who may create pods reaches the data anyway: volumes stay (pods go without exec).
        let a = access(vec![deny("maker", "create", "pods/exec")]);
        let lacks = backup_lacks(&a, &user("maker"), "team-a", &spec, &inc).await.unwrap();
        assert_eq!(lacks.len(), 1, "{lacks:?}");
        assert_eq!(lacks[0].effect, Effect::ExcludeKind("pods".into()));
        // An enforced resource policy's volume actions override the flags: the claims go too, for the viewer only.
        let a = access(viewer());
        let spec = map(json!({"snapshotVolumes": false, "defaultVolumesToFsBackup": false,
                              "resourcePolicy": {"kind": "configmap", "name": "volumes"}}));
        let inc = kinds(&a, &["configmaps", "persistentvolumeclaims"]);
        let lacks = backup_lacks(&a, &user("viewer"), "team-a", &spec, &inc).await.unwrap();
        let effects: Vec<_> = lacks.iter().map(|l| l.effect.clone()).collect();
        assert_eq!(
            effects,
            [
                Effect::NoVolumeData,
                Effect::ExcludeKind("persistentvolumeclaims".into())
            ]
        );
        let mut applied = spec.clone();
        apply_to_backup(&mut applied, &lacks);
        assert_eq!(applied["excludedResources"], json!(["persistentvolumeclaims"]));
        assert!(backup_lacks(&a, &user("admin"), "team-a", &spec, &inc)
            .await
            .unwrap()
            .is_empty());
        // No volume data asked for: nothing to refuse.
        let a = access(viewer());
        let spec = map(json!({"snapshotVolumes": false, "defaultVolumesToFsBackup": false}));
        let inc = kinds(&a, &["persistentvolumeclaims"]);
        assert!(backup_lacks(&a, &user("viewer"), "team-a", &spec, &inc)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn on_openshift_pods_and_init_hooks_come_only_for_a_user_who_may_use_the_privileged_scc() {
        let spec = map(json!({"hooks": {"resources": [{"name": "h", "postHooks": [
            {"init": {"initContainers": [{"name": "i", "image": "busybox"}]}}]}]}}));
        // An owner of the namespace: exec and create everywhere in it, but not the privileged SCC.
        let mut a = access(vec![deny(
            "owner",
            "use",
            "securitycontextconstraints.security.openshift.io/privileged",
        )]);
        let plain = a.clone();
        let inc = kinds(&plain, &["configmaps", "pods"]);
        // Without SCCs (any other cluster): nothing to leave out.
        let lacks = restore_lacks(&plain, &user("owner"), "team-a", &spec, &inc, Storage::Admin)
            .await
            .unwrap();
        assert!(lacks.is_empty(), "{lacks:?}");
        a.sccs = true;
        let lacks = restore_lacks(&a, &user("owner"), "team-a", &spec, &inc, Storage::Admin)
            .await
            .unwrap();
        let effects: Vec<_> = lacks.iter().map(|l| l.effect.clone()).collect();
        assert_eq!(
            effects,
            [Effect::ExcludeKind("pods".into()), Effect::DropRestoreInitHooks]
        );
        assert!(
            lacks[0]
                .reason("owner", "team-a")
                .contains("owner may not use securitycontextconstraints/privileged"),
            "{lacks:?}"
        );
        let mut applied = spec.clone();
        apply_to_restore(&mut applied, &lacks);
        assert!(
            applied["hooks"]["resources"].as_array().unwrap().is_empty(),
            "{applied:?}"
        );
        // Who may use it keeps both.
        let lacks = restore_lacks(&a, &user("admin"), "team-a", &spec, &inc, Storage::Admin)
            .await
            .unwrap();
        assert!(lacks.is_empty(), "{lacks:?}");
    }

    #[tokio::test]
    async fn restore_features_need_their_rights() {
        let a = access(vec![
            deny("dev", "create", "pods/exec"),
            deny("dev", "update", "services/status"),
            deny("dev", "update", "configmaps"),
            deny("dev", "patch", "serviceaccounts"),
        ]);
        let spec = map(json!({
            "hooks": {"resources": [{"name": "h", "postHooks": [
                {"exec": {"command": ["id"]}}, {"init": {"initContainers": []}}]}]},
            "restoreStatus": {"includedResources": ["*"]},
            "existingResourcePolicy": "update",
        }));
        let restored = kinds(&a, &["configmaps", "services", "pods", "serviceaccounts"]);
        let lacks = restore_lacks(&a, &user("dev"), "team-a", &spec, &restored, Storage::Admin)
            .await
            .unwrap();
        let fields: Vec<_> = lacks.iter().map(|l| l.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "hooks",
                "includedResources",
                "restoreStatus",
                "existingResourcePolicy",
                "includedResources"
            ]
        );
        assert!(lacks[2].right.contains("update services/status"), "{lacks:?}");
        assert!(lacks[3].right.contains("update configmaps"), "{lacks:?}");
        assert_eq!(excluded_kinds(&lacks), ["pods", "serviceaccounts"]);
        let mut applied = spec.clone();
        apply_to_restore(&mut applied, &lacks);
        assert_eq!(
            applied["hooks"],
            json!({"resources": [{"name": "h", "postHooks": [{"init": {"initContainers": []}}]}]})
        );
        assert_eq!(
            applied["restoreStatus"]["includedResources"],
            json!(["configmaps", "pods", "serviceaccounts"])
        );
        assert_eq!(applied["existingResourcePolicy"], json!("none"));
        // Whoever holds every right keeps every feature.
        let lacks = restore_lacks(&a, &user("admin"), "team-a", &spec, &restored, Storage::Admin)
            .await
            .unwrap();
        assert!(lacks.is_empty(), "{lacks:?}");
    }

    #[tokio::test]
    async fn rbac_objects_from_a_tenants_own_storage_need_bind_and_escalate() {
        let a = access(vec![
            deny("owner", "escalate", "roles.rbac.authorization.k8s.io"),
            deny("owner", "bind", "clusterroles.rbac.authorization.k8s.io"),
        ]);
        let restored = kinds(&a, &["roles", "rolebindings", "configmaps"]);
        let spec = Map::new();
        let lacks = restore_lacks(&a, &user("owner"), "team-a", &spec, &restored, Storage::Tenant)
            .await
            .unwrap();
        assert_eq!(
            excluded_kinds(&lacks),
            [
                "roles.rbac.authorization.k8s.io",
                "rolebindings.rbac.authorization.k8s.io"
            ]
        );
        // From the admin's storage the contents nac checked are what Velero reads.
        let lacks = restore_lacks(&a, &user("owner"), "team-a", &spec, &restored, Storage::Admin)
            .await
            .unwrap();
        assert!(lacks.is_empty(), "{lacks:?}");
    }

    #[tokio::test]
    async fn an_unanswered_question_fails_the_check() {
        let a = access(vec![]);
        let spec = map(json!({"hooks": hooks()}));
        let e = backup_lacks(&a, &user("broken"), "team-a", &spec, &[])
            .await
            .unwrap_err();
        assert!(e.contains("connection refused"), "{e}");
    }

    #[test]
    fn the_status_guard_removes_velero_s_annotation_after_the_admins_rules() {
        let doc = status_guard("team-a", &["services".into()], None, None).unwrap();
        let v: Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["version"], "v1");
        assert_eq!(
            v["resourceModifierRules"],
            json!([{"conditions": {"groupResource": "services", "namespaces": ["team-a"]},
                    "mergePatches": [{"patchData": r#"{"metadata":{"annotations":{"velero.io/restore-status":null}}}"#}]}])
        );
        let admin = "version: v1\nresourceModifierRules:\n- conditions: {groupResource: deployments.apps}\n  patches: [{operation: replace, path: /spec/replicas, value: \"0\"}]\n";
        let v: Value =
            serde_json::from_str(&status_guard("team-a", &["services".into()], Some(admin), None).unwrap()).unwrap();
        let rules = v["resourceModifierRules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0]["conditions"]["groupResource"], "deployments.apps");
        assert!(status_guard("team-a", &[], Some("version: v2"), None).is_err());
        assert!(status_guard("team-a", &[], Some(": :"), None).is_err());
        // A copy's items get the labels naming where they came from, matched in the backup's namespace.
        let labels = BTreeMap::from([("a".to_string(), "b".to_string())]);
        let kinds = ["configmaps".to_string(), "pods".to_string()];
        let v: Value =
            serde_json::from_str(&status_guard("team-a", &[], None, Some((&kinds, &labels))).unwrap()).unwrap();
        assert_eq!(
            v["resourceModifierRules"][1],
            json!({"conditions": {"groupResource": "pods", "namespaces": ["team-a"]},
                   "mergePatches": [{"patchData": r#"{"metadata":{"labels":{"a":"b"}}}"#}]})
        );
    }

    #[tokio::test]
    async fn status_is_guarded_for_kinds_the_requester_may_not_write_status_of() {
        let a = access(vec![deny("dev", "update", "services/status")]);
        let k = kinds(&a, &["configmaps", "services"]);
        assert_eq!(
            status_unwritable(&a, &user("dev"), "team-a", &k).await.unwrap(),
            ["services"]
        );
        assert!(status_unwritable(&a, &user("admin"), "team-a", &k)
            .await
            .unwrap()
            .is_empty());
    }

    #[test]
    fn status_kinds_follow_velero_s_filters() {
        let a = access(vec![]);
        let restored = kinds(&a, &["configmaps", "services", "pods"]);
        let spec = map(json!({"restoreStatus": {"includedResources": ["*"], "excludedResources": ["po"]}}));
        let names: Vec<_> = status_kinds(&spec, &restored).iter().map(|k| k.filter_name()).collect();
        assert_eq!(names, ["configmaps", "services"]);
        assert!(status_kinds(&map(json!({"restoreStatus": {}})), &restored).is_empty());
    }
}
