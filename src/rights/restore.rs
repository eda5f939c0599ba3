//! A restore never creates more than its requester could: every kind the backup holds for the namespace is
//! checked against the restoring user's own rights (`create` in the namespace), and RBAC objects get the API
//! server's own escalation rule on top: a RoleBinding only if the user may bind its role (`bind`, or holding every
//! permission it grants), a Role only if the user may `escalate` or holds every permission it grants.
//!
//! Velero creates restored objects with its own cluster-wide rights; without this, anyone who controls a bucket
//! (their own storage location) could restore a RoleBinding to `cluster-admin` into their namespace.

use super::contents::Contents;
use super::{backup_kinds, refused, Access, Kind, Question, Requester, RightsMode, RoleKind};
use futures::StreamExt;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Annotation on the Velero Restore recording what nac left out and why (nac's; the status shows it).
pub const RESTORE_RIGHTS_ANNOTATION: &str = "nac.oadp.openshift.io/restore-rights";

const RBAC: &str = "rbac.authorization.k8s.io";
const ROLES: &str = "roles.rbac.authorization.k8s.io";
const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";
/// The RBAC resources, under whatever API group a cluster also serves them.
const RBAC_RESOURCES: &[&str] = &["roles", "rolebindings", "clusterroles", "clusterrolebindings"];
/// Questions one role may cost before nac gives up on it (it is then treated as not held).
const MAX_QUESTIONS: usize = 2_000;
/// SubjectAccessReviews in flight for one check.
const IN_FLIGHT: usize = 16;

/// The decision for a restore: the mode, the kinds left out and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRights {
    pub mode: RightsMode,
    /// Whose rights: the restoring user.
    #[serde(default)]
    pub requester: String,
    #[serde(default)]
    pub excluded: Vec<String>,
    #[serde(default)]
    pub reasons: Vec<String>,
    /// Spec fields of features left out (`hooks`, `restoreStatus`, `existingResourcePolicy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// The kinds the Velero Restore names in `includedResources`: those checked and allowed, so a different
    /// tarball at Velero's read cannot add a kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included: Vec<String>,
    /// Kinds (filter names) of `included` whose status the requester may not write: the Velero Restore gets nac's
    /// resource modifier removing Velero's restore-status annotation from their items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_guarded: Vec<String>,
    /// The features left out, to apply to the Velero RestoreSpec.
    #[serde(skip)]
    pub lacks: Vec<super::features::Lack>,
}

impl RestoreRights {
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Option<RestoreRights> {
        serde_json::from_str(annotations?.get(RESTORE_RIGHTS_ANNOTATION)?).ok()
    }

    /// One sentence for conditions and refusals.
    pub fn message(&self, namespace: &str) -> String {
        let what: Vec<String> = self
            .excluded
            .iter()
            .cloned()
            .chain(self.dropped.iter().map(|f| format!("spec.restoreSpec.{f}")))
            .collect();
        format!(
            "{} left out of the restore into namespace {namespace}, created with the rights of {} (policy \
             rights.restore: {}): {}",
            what.join(", "),
            self.requester,
            self.mode,
            self.reasons.join("; ")
        )
    }

    /// Whether anything is left out.
    pub fn limits(&self) -> bool {
        !self.excluded.is_empty() || !self.dropped.is_empty()
    }

    /// Applies the decision to a Velero RestoreSpec: the features left out, the kinds left out added to
    /// `excludedResources`, and `includedResources` bound to the kinds checked and allowed.
    pub fn apply(&self, spec: &mut Map<String, Value>) {
        super::features::apply_to_restore(spec, &self.lacks);
        let mut excluded: Vec<String> = spec
            .get("excludedResources")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        for k in &self.excluded {
            if !excluded.contains(k) {
                excluded.push(k.clone());
            }
        }
        // Velero refuses an item both included and excluded.
        excluded.retain(|k| !self.included.contains(k));
        spec.insert("excludedResources".into(), Value::from(excluded));
        spec.insert("includedResources".into(), Value::from(self.included.clone()));
    }

    fn exclude(&mut self, kind: &str, reason: String) {
        if !self.excluded.iter().any(|k| k == kind) {
            self.excluded.push(kind.to_string());
        }
        // Velero stores an object once per API version: one reason each.
        if !self.reasons.contains(&reason) {
            self.reasons.push(reason);
        }
    }
}

/// The namespace a Velero Restore of namespace `source` writes into: its mapping's target (a copy), else `source`.
pub fn target_of(mapping: Option<&BTreeMap<String, String>>, source: &str) -> String {
    mapping
        .and_then(|m| m.get(source))
        .cloned()
        .unwrap_or_else(|| source.to_string())
}

/// For a copy into `target`: the refusal when `who` may not create NonAdminRestores there, the right that makes a
/// namespace theirs to restore into (what the restore then writes there is asked kind by kind, as for any
/// restore).
pub async fn copy_right(access: &dyn Access, who: &Requester, target: &str) -> Result<Option<String>, String> {
    let q = Question {
        verb: "create".into(),
        group: crate::api::GROUP.into(),
        resource: "nonadminrestores".into(),
        namespace: target.into(),
        ..Default::default()
    };
    Ok((!access.ask(who, &q).await?).then(|| {
        format!(
            "NonAdminRestore spec.restoreSpec.namespaceMapping is restricted: {} may not create \
             nonadminrestores.{} in namespace {target}; a copy goes only into a namespace where its requester \
             may restore",
            who.username,
            crate::api::GROUP
        )
    }))
}

/// For a copy out of namespace `source`: what the backup holds there is restored where `who` may read it, so the
/// kinds they may not `list` in `source` are left out too (or, with `deny`, make `rights` limit the restore). A
/// backup of a namespace may hold what a more privileged user there could read; a copy must not hand it over.
pub async fn copy_reads(
    access: &dyn Access,
    who: &Requester,
    source: &str,
    rights: &mut RestoreRights,
) -> Result<(), String> {
    let all = access.kinds().await?;
    let kinds: Vec<&Kind> = all
        .iter()
        .filter(|k| rights.included.contains(&k.filter_name()))
        .collect();
    let unreadable = access.refused(who, "list", source, &kinds).await?;
    for k in unreadable {
        let why = format!(
            "{} may not list {k} in namespace {source}, whose backup this restore copies",
            who.username
        );
        rights.included.retain(|i| *i != k);
        rights.status_guarded.retain(|i| *i != k);
        rights.exclude(&k, why);
    }
    rights.excluded.sort();
    Ok(())
}

/// Kinds Velero never restores and refuses in `includedResources` (its restore controller's list).
pub const NON_RESTORABLE: &[&str] = &[
    "nodes",
    "events",
    "events.events.k8s.io",
    "backups.velero.io",
    "restores.velero.io",
    "resticrepositories.velero.io",
    "csinodes.storage.k8s.io",
    "volumeattachments.storage.k8s.io",
    "backuprepositories.velero.io",
];

/// Checks what a restore with Velero RestoreSpec `spec` (nac's exclusions applied) would create in `namespace`
/// from `contents` against `who`'s rights, and what Velero would do beyond creating (see [`super::features`]);
/// `storage` says whether the tenant controls what Velero reads. Any failed answer fails the check (closed).
pub async fn decide(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    spec: &Map<String, Value>,
    contents: &Contents,
    mode: RightsMode,
    storage: super::features::Storage,
) -> Result<RestoreRights, String> {
    let mut out = decide_creates(access, who, namespace, spec, contents).await?;
    out.mode = mode;
    let all = access.kinds().await?;
    let allowed: Vec<&Kind> = all
        .iter()
        .filter(|k| contents.kinds.contains(&(k.group.clone(), k.resource.clone())))
        .filter(|k| !out.excluded.contains(&k.filter_name()))
        .collect();
    let allowed = backup_kinds(spec, &allowed.into_iter().cloned().collect::<Vec<_>>())
        .into_iter()
        .cloned()
        .collect::<Vec<Kind>>();
    let refs: Vec<&Kind> = allowed.iter().collect();
    let lacks = super::features::restore_lacks(access, who, namespace, spec, &refs, storage).await?;
    for l in &lacks {
        let why = l.reason(&who.username, namespace);
        match &l.effect {
            super::features::Effect::ExcludeKind(k) => out.exclude(k, why),
            _ => {
                out.dropped.push(l.field.clone());
                out.reasons.push(why);
            }
        }
    }
    out.lacks = lacks;
    out.included = allowed
        .iter()
        .map(Kind::filter_name)
        .filter(|k| !out.excluded.contains(k) && !NON_RESTORABLE.contains(&k.as_str()))
        .collect();
    out.included.sort();
    out.included.dedup();
    out.excluded.sort();
    let bound: Vec<&Kind> = allowed
        .iter()
        .filter(|k| out.included.contains(&k.filter_name()))
        .collect();
    out.status_guarded = super::features::status_unwritable(access, who, namespace, &bound).await?;
    out.status_guarded.dedup();
    Ok(out)
}

/// An item Velero says it restored that is not of a kind nac checked and allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchecked {
    /// As Velero's list names its kind: `group/version/Kind`.
    pub gvk: String,
    /// The kind, when the cluster serves it.
    pub kind: Option<Kind>,
    /// Empty for a cluster-scoped item.
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Unchecked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = self
            .kind
            .as_ref()
            .map(Kind::filter_name)
            .unwrap_or_else(|| self.gvk.clone());
        if self.namespace.is_empty() {
            write!(f, "{what} {}", self.name)
        } else {
            write!(f, "{what} {}/{}", self.namespace, self.name)
        }
    }
}

/// How many of the items outside the checked kinds a verification keeps (to name, and to remove): the list may
/// come from a tenant's bucket, so what is kept of it is bounded; the rest are counted.
pub const LISTED: usize = 50;

/// What Velero's restore resource list (`group/version/Kind` → `namespace/name(action)`) says, as far as
/// verifying a bound restore needs it: how many items it names, and those Velero created or updated that are not
/// of the checked kinds (the first [`LISTED`], and how many in all).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listed {
    pub items: usize,
    pub unchecked: Vec<Unchecked>,
    pub unchecked_total: usize,
}

/// Reads a restore resource list item by item, never whole (it may come from a tenant's bucket): the items that
/// are not of the kinds `included` (filter names) in `namespace` are what a restore bound to those kinds must
/// never hold. PersistentVolumes, which Velero makes for the claims it restores, pass when claims were allowed.
pub fn unchecked_in(text: &[u8], namespace: &str, included: &[String], kinds: &[Kind]) -> Result<Listed, String> {
    let judge = Judge {
        namespace,
        included,
        kinds,
        claims: included.iter().any(|k| k == "persistentvolumeclaims"),
    };
    let mut out = Listed::default();
    let mut de = serde_json::Deserializer::from_slice(text);
    serde::Deserializer::deserialize_map(
        &mut de,
        resource_list::File {
            judge: &judge,
            out: &mut out,
        },
    )
    .and_then(|()| de.end())
    .map_err(|e| format!("not Velero's resource list: {e}"))?;
    Ok(out)
}

/// What a verification allows of a restore resource list's items.
struct Judge<'a> {
    namespace: &'a str,
    included: &'a [String],
    kinds: &'a [Kind],
    claims: bool,
}

impl Judge<'_> {
    /// `group/version/Kind` split, and the kind when the cluster serves it.
    fn kind_of<'g>(&self, gvk: &'g str) -> (&'g str, &'g str, Option<Kind>) {
        let parts: Vec<&str> = gvk.split('/').collect();
        let (group, kind_name) = match parts.as_slice() {
            [_, k] => ("", *k),
            [g, _, k] => (*g, *k),
            _ => ("?", gvk),
        };
        let kind = self
            .kinds
            .iter()
            .find(|k| k.group == group && k.kind == kind_name)
            .cloned();
        (group, kind_name, kind)
    }

    /// Counts `item` of kind `gvk` into `out`, and keeps it when it is outside the checked kinds.
    fn add(&self, gvk: &str, (group, kind_name, kind): &(&str, &str, Option<Kind>), item: &str, out: &mut Listed) {
        out.items += 1;
        let Some((id, action)) = item.strip_suffix(')').and_then(|i| i.rsplit_once('(')) else {
            return;
        };
        if action != "created" && action != "updated" {
            return;
        }
        let (ns, name) = id.split_once('/').unwrap_or(("", id));
        let allowed = match kind {
            Some(k) if !ns.is_empty() => ns == self.namespace && self.included.contains(&k.filter_name()),
            // Cluster-scoped: only the volumes of restored claims.
            _ => group.is_empty() && *kind_name == "PersistentVolume" && self.claims,
        };
        if allowed {
            return;
        }
        out.unchecked_total += 1;
        if out.unchecked.len() < LISTED {
            out.unchecked.push(Unchecked {
                gvk: gvk.to_string(),
                kind: kind.clone(),
                namespace: ns.to_string(),
                name: name.to_string(),
            });
        }
    }
}

/// A restore resource list as serde visits it, judged item by item.
mod resource_list {
    use super::{Judge, Listed};
    use serde::de::{MapAccess, SeqAccess, Visitor};
    use std::fmt;

    pub(super) struct File<'a, 'j> {
        pub(super) judge: &'a Judge<'j>,
        pub(super) out: &'a mut Listed,
    }

    impl<'de> Visitor<'de> for File<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of kinds to the items restored")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(gvk) = map.next_key::<String>()? {
                map.next_value_seed(Items {
                    gvk: &gvk,
                    judge: self.judge,
                    out: &mut *self.out,
                })?;
            }
            Ok(())
        }
    }

    struct Items<'a, 'j> {
        gvk: &'a str,
        judge: &'a Judge<'j>,
        out: &'a mut Listed,
    }

    crate::download::streamed_part! { 'de, Items<'_, '_>, deserialize_seq, "a list of items restored",
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let kind = self.judge.kind_of(self.gvk);
            while let Some(item) = seq.next_element::<String>()? {
                self.judge.add(self.gvk, &kind, &item, self.out);
            }
            Ok(())
        }
    }
}

/// Whether `obj` is an object Velero made in the Velero Restore `vr`: labelled with the restore's name (as Velero
/// writes label values) and created no earlier than the restore. A resource list may come from a tenant's bucket
/// and name any object, the admin's included: nac removes only what passes this, so a crafted list cannot make
/// nac delete what the tenant could not.
pub fn made_by(vr: &ObjectMeta, obj: &ObjectMeta) -> Result<(), &'static str> {
    let restore = crate::naming::velero_label_value(vr.name.as_deref().unwrap_or_default());
    let labelled = obj
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::naming::VELERO_RESTORE_NAME_LABEL))
        .is_some_and(|v| *v == restore);
    if !labelled {
        return Err("not labelled as made by this restore");
    }
    match (&vr.creation_timestamp, &obj.creation_timestamp) {
        (Some(r), Some(o)) if o.0 >= r.0 => Ok(()),
        _ => Err("made before this restore"),
    }
}

/// An object the API server shows: its kind, whether the kind is namespaced, its metadata.
pub struct Shown<'a> {
    pub kind: &'a Kind,
    pub namespaced: bool,
    pub meta: &'a ObjectMeta,
}

/// Kinds Velero makes in its own namespace to restore a restore's volumes (nac counts them for the status): made
/// by Velero for the restore, not restored from the tarball.
const VELERO_MACHINERY: [&str; 2] = ["datadownloads.velero.io", "podvolumerestores.velero.io"];

/// Of the objects the API server shows labelled as made by a restore into `namespace`, those outside it: cluster-
/// scoped objects and objects of other namespaces (Velero's included), but for Velero's own machinery for volumes
/// in `velero_namespace` and, when claims were allowed (`claims`), the PersistentVolumes Velero makes for them.
/// The first [`LISTED`] are kept, all are counted.
pub fn made_outside(
    shown: &[Shown<'_>],
    namespace: &str,
    velero_namespace: &str,
    claims: bool,
) -> (Vec<Unchecked>, usize) {
    let mut kept = Vec::new();
    let mut total = 0;
    for s in shown {
        let ns = s.meta.namespace.clone().unwrap_or_default();
        let filter = s.kind.filter_name();
        let allowed = if s.namespaced {
            ns == namespace || (ns == velero_namespace && VELERO_MACHINERY.contains(&filter.as_str()))
        } else {
            claims && filter == "persistentvolumes"
        };
        if allowed {
            continue;
        }
        total += 1;
        if kept.len() < LISTED {
            kept.push(Unchecked {
                gvk: format!("{}/{}", s.kind.api_resource().api_version, s.kind.kind),
                kind: Some(s.kind.clone()),
                namespace: if s.namespaced { ns } else { String::new() },
                name: s.meta.name.clone().unwrap_or_default(),
            });
        }
    }
    (kept, total)
}

/// The field manager of Velero's API clients (its user agent, `velero-server/<version> ...` for the server, up to
/// the `/`): how the API server records what Velero wrote.
pub const VELERO_MANAGER_PREFIX: &str = "velero";

/// Whether the API server shows Namespace `ns` created by Velero between `from` and `to` (a restore's run): Velero
/// creates an item's namespace (`kube.EnsureNamespaceExistsAndIsReady`) from the tarball's Namespace object,
/// without its restore labels, so the label cannot find it; its creation time and Velero's field manager do.
pub fn namespace_created_by_velero(
    ns: &ObjectMeta,
    from: k8s_openapi::jiff::Timestamp,
    to: k8s_openapi::jiff::Timestamp,
) -> bool {
    let in_run = ns.creation_timestamp.as_ref().is_some_and(|t| t.0 >= from && t.0 <= to);
    let by_velero = ns.managed_fields.iter().flatten().any(|f| {
        f.manager
            .as_deref()
            .is_some_and(|m| m.starts_with(VELERO_MANAGER_PREFIX))
    });
    in_run && by_velero
}

/// The creates of [`decide`]: the kinds `who` may not create, and the RBAC objects they could not create
/// themselves.
async fn decide_creates(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    spec: &Map<String, Value>,
    contents: &Contents,
) -> Result<RestoreRights, String> {
    let all = access.kinds().await?;
    // Kinds the cluster does not serve cannot be restored by Velero either.
    let present: Vec<Kind> = all
        .iter()
        .filter(|k| contents.kinds.contains(&(k.group.clone(), k.resource.clone())))
        .cloned()
        .collect();
    let restored = backup_kinds(spec, &present);
    let mut out = RestoreRights {
        requester: who.username.clone(),
        ..Default::default()
    };
    let user = &who.username;
    // RBAC objects served by another API group (OpenShift serves Roles and RoleBindings as
    // authorization.openshift.io too, stored as the same objects): the escalation rules below read only
    // rbac.authorization.k8s.io's, so copies under another group are never restored. A backup holds each object
    // under rbac.authorization.k8s.io as well.
    for k in &restored {
        if k.group != RBAC && RBAC_RESOURCES.contains(&k.resource.as_str()) {
            out.exclude(
                &k.filter_name(),
                format!(
                    "{} are RBAC objects: nac restores them only as {}.{RBAC}, whose binding and escalation rules \
                     it checks",
                    k.filter_name(),
                    k.resource
                ),
            );
        }
    }
    let kinds = refused(access, who, "create", namespace, &restored).await?;
    if !kinds.is_empty() {
        out.reasons.push(format!("{user} may not create {}", kinds.join(", ")));
        out.excluded.extend(kinds);
    }
    let restores = |name: &str, out: &RestoreRights| {
        restored.iter().any(|k| k.filter_name() == name) && !out.excluded.iter().any(|k| k == name)
    };

    // Roles first: a binding may refer to a Role restored with it.
    let roles_restored = restores(ROLES, &out);
    if roles_restored {
        for (name, rules) in &contents.roles {
            let why = match rules {
                Err(e) => Some(format!("Role {name} cannot be checked: {e}")),
                Ok(_) if may(access, who, "escalate", "roles", name, namespace).await? => None,
                Ok(rules) => lacks(access, who, namespace, rules)
                    .await?
                    .map(|p| format!("Role {name} grants {p}, which {user} does not hold")),
            };
            if let Some(why) = why {
                out.exclude(ROLES, why);
            }
        }
    }
    let roles_restored = roles_restored && !out.excluded.iter().any(|k| k == ROLES);

    if restores(ROLE_BINDINGS, &out) {
        for (name, role_ref) in &contents.role_bindings {
            let why = match role_ref {
                Err(e) => Some(format!("RoleBinding {name} cannot be checked: {e}")),
                Ok(r) => {
                    let kind = match (r.api_group.as_str(), r.kind.as_str()) {
                        (RBAC, "ClusterRole") => Some(RoleKind::ClusterRole),
                        (RBAC, "Role") => Some(RoleKind::Role),
                        _ => None,
                    };
                    match kind {
                        None => Some(format!(
                            "RoleBinding {name} refers to {} {} of API group {:?}, which is not a role",
                            r.kind, r.name, r.api_group
                        )),
                        Some(kind) => {
                            binding_refused(access, who, namespace, contents, roles_restored, kind, &r.name).await?
                        }
                    }
                    .map(|w| format!("RoleBinding {name} {w}"))
                }
            };
            if let Some(why) = why {
                out.exclude(ROLE_BINDINGS, why);
            }
        }
    }
    out.excluded.sort();
    Ok(out)
}

/// Why `who` may not create a binding to role `name` of `kind` in `namespace` (the API server's rule: `bind` on
/// the role, or holding every permission it grants); `None` when they may.
async fn binding_refused(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    contents: &Contents,
    roles_restored: bool,
    kind: RoleKind,
    name: &str,
) -> Result<Option<String>, String> {
    let (resource, label) = match kind {
        RoleKind::ClusterRole => ("clusterroles", "ClusterRole"),
        RoleKind::Role => ("roles", "Role"),
    };
    if may(access, who, "bind", resource, name, namespace).await? {
        return Ok(None);
    }
    // The live role, and for a Role the copies restored with the binding: the binding may end up bound to either.
    let mut rules: Option<Vec<PolicyRule>> = access.role_rules(kind, namespace, name).await?;
    if kind == RoleKind::Role && roles_restored {
        for (n, r) in &contents.roles {
            if n == name {
                match r {
                    Ok(r) => rules.get_or_insert_with(Vec::new).extend(r.iter().cloned()),
                    Err(_) => return Ok(Some(format!("binds Role {name}, which cannot be checked"))),
                }
            }
        }
    }
    let Some(rules) = rules else {
        return Ok(Some(format!(
            "binds {label} {name}, which does not exist, and {} may not bind it",
            who.username
        )));
    };
    Ok(lacks(access, who, namespace, &rules).await?.map(|p| {
        format!(
            "binds {label} {name}, which grants {p}: {} may neither bind it nor holds that",
            who.username
        )
    }))
}

async fn may(
    access: &dyn Access,
    who: &Requester,
    verb: &str,
    resource: &str,
    name: &str,
    namespace: &str,
) -> Result<bool, String> {
    let q = Question {
        verb: verb.into(),
        group: RBAC.into(),
        resource: resource.into(),
        name: name.into(),
        namespace: namespace.into(),
        ..Default::default()
    };
    access.ask(who, &q).await
}

/// The questions a set of rules stands for in `namespace`: one per verb, API group, resource and name. Rules for
/// non-resource URLs grant nothing in a namespace; a rule without API groups matches nothing.
pub fn questions(rules: &[PolicyRule], namespace: &str) -> Vec<Question> {
    let mut out = Vec::new();
    for rule in rules {
        let names: Vec<&str> = match &rule.resource_names {
            Some(n) if !n.is_empty() => n.iter().map(String::as_str).collect(),
            _ => vec![""],
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
                for verb in &rule.verbs {
                    for name in &names {
                        out.push(Question {
                            verb: verb.clone(),
                            group: group.clone(),
                            resource: resource.into(),
                            subresource: subresource.into(),
                            name: name.to_string(),
                            namespace: namespace.into(),
                        });
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.target().cmp(&b.target()).then(a.verb.cmp(&b.verb)));
    out.dedup();
    out
}

/// The first permission of `rules` that `who` does not hold in `namespace` ("verb target"), if any. Wildcards are
/// asked as themselves: the authorizer grants `*` only to a rule that has `*`, as the API server's escalation
/// check does.
pub async fn lacks(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<Option<String>, String> {
    let qs = questions(rules, namespace);
    if qs.len() > MAX_QUESTIONS {
        return Ok(Some(format!(
            "more than {MAX_QUESTIONS} distinct permissions (too many for nac to check)"
        )));
    }
    // Collected first: a lazily mapped stream of borrowing closures is not provably Send.
    let asks: Vec<_> = qs.iter().map(|q| access.ask(who, q)).collect();
    let answers: Vec<Result<bool, String>> = futures::stream::iter(asks).buffered(IN_FLIGHT).collect().await;
    for (q, a) in qs.iter().zip(answers) {
        if !a? {
            return Ok(Some(format!("{} {}", q.verb, q.target())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::super::contents::tests::{binding, tarball};
    use super::super::contents::{scan, Limits};
    use super::super::features::Storage;
    use super::super::Fixed;
    use super::*;
    use crate::rights::testing::{deny, user};
    use serde_json::json;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn access(denied: Vec<(String, String, String)>) -> Fixed {
        Fixed {
            denied,
            roles: vec![
                (
                    (RoleKind::ClusterRole, String::new(), "cluster-admin".into()),
                    vec![rule(&["*"], &["*"], &["*"])],
                ),
                (
                    (RoleKind::ClusterRole, String::new(), "view".into()),
                    vec![rule(&[""], &["configmaps", "pods", "pods/log"], &["get", "list"])],
                ),
            ],
            ..Fixed::common()
        }
    }

    fn crafted() -> Contents {
        let t = tarball(&[
            ("resources/configmaps/namespaces/team-a/cfg.json", json!({})),
            ("resources/pods/namespaces/team-a/root.json", json!({})),
            (
                "resources/rolebindings.rbac.authorization.k8s.io/namespaces/team-a/all.json",
                binding("all", "ClusterRole", "cluster-admin"),
            ),
            (
                "resources/rolebindings.rbac.authorization.k8s.io/namespaces/team-a/viewers.json",
                binding("viewers", "ClusterRole", "view"),
            ),
            ("resources/widgets.example.com/namespaces/team-a/w.json", json!({})),
        ]);
        scan(t.as_slice(), "team-a", &Limits::default()).unwrap()
    }

    fn spec() -> Map<String, Value> {
        json!({"excludedResources": ["nonadminbackups"]})
            .as_object()
            .unwrap()
            .clone()
    }

    /// `name`'s rights to restore `crafted()` into team-a with the whole spec, leaving out what is refused.
    async fn crafted_for(a: &Fixed, name: &str) -> Result<RestoreRights, String> {
        decide(
            a,
            &user(name),
            "team-a",
            &spec(),
            &crafted(),
            RightsMode::Exclude,
            Storage::Admin,
        )
        .await
    }

    #[tokio::test]
    async fn kinds_the_user_may_not_create_are_left_out() {
        let a = access(vec![deny("alice", "create", "pods")]);
        let d = crafted_for(&a, "alice").await.unwrap();
        assert!(d.excluded.contains(&"pods".to_string()), "{d:?}");
        assert!(!d.excluded.contains(&"configmaps".to_string()));
        assert!(d.message("team-a").contains("alice may not create pods"), "{d:?}");
        // A kind the restore spec leaves out is not asked about.
        let mut s = spec();
        s.insert("excludedResources".into(), json!(["pods"]));
        let d = decide(
            &a,
            &user("alice"),
            "team-a",
            &s,
            &crafted(),
            RightsMode::Exclude,
            Storage::Admin,
        )
        .await
        .unwrap();
        assert!(!d.excluded.contains(&"pods".to_string()), "{d:?}");
    }

    #[tokio::test]
    async fn a_copy_needs_the_right_to_restore_into_the_target_and_leaves_out_what_the_source_hides() {
        let a = access(vec![deny("alice", "list", "pods")]);
        let mut d = crafted_for(&a, "alice").await.unwrap();
        assert!(d.included.contains(&"pods".to_string()), "{d:?}");
        copy_reads(&a, &user("alice"), "team-a", &mut d).await.unwrap();
        assert!(!d.included.contains(&"pods".to_string()), "{d:?}");
        assert!(d.excluded.contains(&"pods".to_string()), "{d:?}");
        assert!(d.included.contains(&"configmaps".to_string()), "{d:?}");
        assert!(
            d.message("team-b")
                .contains("alice may not list pods in namespace team-a, whose backup this restore copies"),
            "{d:?}"
        );
        let a = access(vec![deny("alice", "create", "nonadminrestores.oadp.openshift.io")]);
        let e = copy_right(&a, &user("alice"), "team-b").await.unwrap().unwrap();
        assert!(
            e.contains("alice may not create nonadminrestores.oadp.openshift.io in namespace team-b"),
            "{e}"
        );
        assert_eq!(
            copy_right(&access(vec![]), &user("alice"), "team-b").await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn rbac_objects_of_another_api_group_are_never_restored() {
        // OpenShift serves RoleBindings as authorization.openshift.io too: a tarball may hold them there.
        let mut a = access(vec![]);
        let mut kinds = (*a.kinds).clone();
        kinds.push(Kind::new(
            "authorization.openshift.io",
            "rolebindings",
            "RoleBinding",
            &[],
        ));
        kinds.push(Kind::new("authorization.openshift.io", "roles", "Role", &[]));
        a.kinds = std::sync::Arc::new(kinds);
        let t = tarball(&[
            ("resources/configmaps/namespaces/team-a/cfg.json", json!({})),
            (
                "resources/rolebindings.authorization.openshift.io/namespaces/team-a/all.json",
                binding("all", "ClusterRole", "cluster-admin"),
            ),
        ]);
        let contents = scan(t.as_slice(), "team-a", &Limits::default()).unwrap();
        let d = decide(
            &a,
            &user("root"),
            "team-a",
            &spec(),
            &contents,
            RightsMode::Exclude,
            Storage::Admin,
        )
        .await
        .unwrap();
        assert_eq!(d.excluded, ["rolebindings.authorization.openshift.io"], "{d:?}");
        assert!(
            d.reasons[0].contains("nac restores them only as rolebindings.rbac.authorization.k8s.io"),
            "{d:?}"
        );
    }

    #[tokio::test]
    async fn a_binding_to_a_role_the_user_does_not_hold_is_left_out() {
        // A namespace owner: everything in their namespace but the wildcard cluster-admin grants.
        let a = access(vec![
            deny("owner", "bind", "clusterroles.rbac.authorization.k8s.io"),
            deny("owner", "*", "*.*"),
        ]);
        let d = crafted_for(&a, "owner").await.unwrap();
        assert_eq!(d.excluded, [ROLE_BINDINGS]);
        assert_eq!(d.reasons.len(), 1, "the view binding passes: {d:?}");
        assert!(
            d.reasons[0].contains("RoleBinding all binds ClusterRole cluster-admin"),
            "{d:?}"
        );
        // Who may bind it (or holds it), may restore it.
        let d = crafted_for(&access(vec![]), "root").await.unwrap();
        assert!(d.excluded.is_empty(), "{d:?}");
        let binder = access(vec![deny("binder", "*", "*.*")]);
        let d = crafted_for(&binder, "binder").await.unwrap();
        assert!(d.excluded.is_empty(), "bind on the role is enough: {d:?}");
    }

    #[tokio::test]
    async fn roles_need_escalate_or_their_permissions_and_bindings_to_missing_roles_are_refused() {
        let t = tarball(&[
            (
                "resources/roles.rbac.authorization.k8s.io/namespaces/team-a/secrets.json",
                json!({"metadata": {"name": "secrets"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
            ),
            (
                "resources/rolebindings.rbac.authorization.k8s.io/namespaces/team-a/ghost.json",
                binding("ghost", "Role", "nowhere"),
            ),
        ]);
        let c = scan(t.as_slice(), "team-a", &Limits::default()).unwrap();
        let a = access(vec![
            deny("dev", "get", "secrets"),
            deny("dev", "escalate", "roles.rbac.authorization.k8s.io"),
            deny("dev", "bind", "roles.rbac.authorization.k8s.io"),
        ]);
        let d = decide(
            &a,
            &user("dev"),
            "team-a",
            &spec(),
            &c,
            RightsMode::Deny,
            Storage::Admin,
        )
        .await
        .unwrap();
        assert_eq!(d.excluded, [ROLE_BINDINGS, ROLES]);
        let all = d.reasons.join("; ");
        assert!(
            all.contains("Role secrets grants get secrets, which dev does not hold"),
            "{all}"
        );
        assert!(
            all.contains("RoleBinding ghost binds Role nowhere, which does not exist"),
            "{all}"
        );
    }

    #[test]
    fn what_velero_restored_beyond_the_checked_kinds_is_found() {
        let kinds = Fixed::common().kinds;
        let list = serde_json::to_vec(&json!({
            "v1/ConfigMap": ["team-a/cfg(created)", "team-a/old(skipped)", "team-b/cfg(created)"],
            "rbac.authorization.k8s.io/v1/RoleBinding": ["team-a/planted(created)"],
            "v1/PersistentVolume": ["pv-1(created)"],
            "v1/Namespace": ["team-a(created)"],
            "example.com/v1/Widget": ["team-a/w(updated)", "team-a/x(failed)"],
        }))
        .unwrap();
        let listed = unchecked_in(&list, "team-a", &["configmaps".into()], &kinds).unwrap();
        let found: Vec<String> = listed.unchecked.iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "example.com/v1/Widget team-a/w",
                "rolebindings.rbac.authorization.k8s.io team-a/planted",
                "configmaps team-b/cfg",
                "v1/Namespace team-a",
                "v1/PersistentVolume pv-1",
            ]
        );
        assert_eq!((listed.items, listed.unchecked_total), (8, 5));
        // The volumes of restored claims are Velero's to make.
        let listed = unchecked_in(
            &list,
            "team-a",
            &["configmaps".into(), "persistentvolumeclaims".into()],
            &kinds,
        )
        .unwrap();
        assert!(
            !listed.unchecked.iter().any(|u| u.gvk == "v1/PersistentVolume"),
            "{listed:?}"
        );
        assert!(unchecked_in(b"[1]", "team-a", &[], &kinds)
            .unwrap_err()
            .contains("not Velero's resource list"));
        assert!(unchecked_in(br#"{"v1/ConfigMap": [1]}"#, "team-a", &[], &kinds).is_err());
    }

    #[test]
    fn a_huge_resource_list_keeps_only_what_is_named() {
        // A tenant's bucket can hold any list: 200,000 items outside the checked kinds keep LISTED of them.
        let items: Vec<String> = (0..200_000).map(|i| format!("team-a/s{i}(created)")).collect();
        let list = serde_json::to_vec(&json!({"v1/Secret": items, "v1/ConfigMap": ["team-a/c(created)"]})).unwrap();
        let listed = unchecked_in(&list, "team-a", &["configmaps".into()], &Fixed::common().kinds).unwrap();
        assert_eq!(listed.items, 200_001);
        assert_eq!(listed.unchecked_total, 200_000);
        assert_eq!(listed.unchecked.len(), LISTED);
    }

    #[test]
    fn what_velero_made_outside_the_namespace_is_found_and_its_volume_machinery_is_not() {
        let meta = |ns: Option<&str>, name: &str| -> ObjectMeta {
            serde_json::from_value(json!({"name": name, "namespace": ns})).unwrap()
        };
        let cm = Kind::new("", "configmaps", "ConfigMap", &["cm"]);
        let ns_kind = Kind::new("", "namespaces", "Namespace", &["ns"]);
        let pv = Kind::new("", "persistentvolumes", "PersistentVolume", &["pv"]);
        let du = Kind::new("velero.io", "datauploads", "DataUpload", &[]);
        let dd = Kind::new("velero.io", "datadownloads", "DataDownload", &[]);
        let metas = [
            meta(Some("team-a"), "own"),
            meta(Some("openshift-adp"), "dd-1"),
            meta(None, "pv-1"),
            meta(None, "evil"),
            meta(Some("openshift-adp"), "du-1"),
            meta(Some("team-b"), "theirs"),
        ];
        let kinds = [
            (&cm, true),
            (&dd, true),
            (&pv, false),
            (&ns_kind, false),
            (&du, true),
            (&cm, true),
        ];
        let shown: Vec<Shown> = kinds
            .iter()
            .zip(&metas)
            .map(|(&(kind, namespaced), meta)| Shown { kind, namespaced, meta })
            .collect();
        let (found, total) = made_outside(&shown, "team-a", "openshift-adp", true);
        let found: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "namespaces evil",
                "datauploads.velero.io openshift-adp/du-1",
                "configmaps team-b/theirs"
            ]
        );
        assert_eq!(total, 3);
        // Without claims allowed, a PersistentVolume Velero made is outside too.
        let (found, _) = made_outside(&shown, "team-a", "openshift-adp", false);
        assert_eq!(found[0].to_string(), "persistentvolumes pv-1");
    }

    #[test]
    fn a_namespace_velero_created_during_the_restore_is_known_by_its_manager_and_time() {
        let at = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        let ns = |manager: &str, created: &str| -> ObjectMeta {
            serde_json::from_value(json!({"name": "evil", "creationTimestamp": created,
                "managedFields": [{"manager": manager, "operation": "Update", "apiVersion": "v1"}]}))
            .unwrap()
        };
        let (from, to) = (at("2026-11-28T10:00:00Z"), at("2026-11-28T10:00:10Z"));
        assert!(namespace_created_by_velero(
            &ns("velero-server", "2026-11-28T10:00:05Z"),
            from,
            to
        ));
        // Someone else's namespace made meanwhile, or Velero's made before or after the run.
        assert!(!namespace_created_by_velero(
            &ns("kubectl-create", "2026-11-28T10:00:05Z"),
            from,
            to
        ));
        assert!(!namespace_created_by_velero(
            &ns("velero-server", "2026-11-28T09:59:59Z"),
            from,
            to
        ));
        assert!(!namespace_created_by_velero(
            &ns("velero-server", "2026-11-28T10:00:11Z"),
            from,
            to
        ));
    }

    #[test]
    fn only_what_velero_made_in_this_restore_may_be_removed() {
        let meta = |v: Value| -> ObjectMeta { serde_json::from_value(v).unwrap() };
        let vr = meta(json!({"name": "team-a-r1", "creationTimestamp": "2026-11-28T10:00:00Z"}));
        let made = |labels: Value, at: &str| meta(json!({"name": "x", "labels": labels, "creationTimestamp": at}));
        let ours = json!({"velero.io/restore-name": "team-a-r1"});
        assert_eq!(made_by(&vr, &made(ours.clone(), "2026-11-28T10:00:03Z")), Ok(()));
        assert_eq!(made_by(&vr, &made(ours.clone(), "2026-11-28T10:00:00Z")), Ok(()));
        // The admin's object, named by a crafted list: no label, or another restore's, or older than the restore.
        assert!(made_by(&vr, &made(json!({}), "2026-11-28T10:00:03Z")).is_err());
        assert!(made_by(
            &vr,
            &made(json!({"velero.io/restore-name": "other"}), "2026-11-28T10:00:03Z")
        )
        .is_err());
        assert!(made_by(&vr, &made(ours, "2026-11-28T09:59:59Z")).is_err());
        assert!(made_by(&vr, &meta(json!({"name": "x"}))).is_err());
        // A long restore name is matched as Velero writes it into a label.
        let long = "r".repeat(80);
        let vr = meta(json!({"name": long, "creationTimestamp": "2026-11-28T10:00:00Z"}));
        let label = crate::naming::velero_label_value(&long).to_string();
        assert!(label.len() <= 63);
        assert_eq!(
            made_by(
                &vr,
                &made(json!({"velero.io/restore-name": label}), "2026-11-28T10:00:01Z")
            ),
            Ok(())
        );
    }

    #[tokio::test]
    async fn an_unanswered_question_fails_the_check() {
        let e = crafted_for(&access(vec![]), "broken").await.unwrap_err();
        assert!(e.contains("connection refused"), "{e}");
    }

    #[test]
    fn rules_become_one_question_per_permission() {
        let mut r = rule(&["", "apps"], &["pods/log", "deployments"], &["get", "list"]);
        r.resource_names = Some(vec!["a".into()]);
        let qs = questions(&[r, rule(&[], &["secrets"], &["get"])], "ns");
        assert_eq!(qs.len(), 8);
        assert!(qs.iter().any(|q| q.target() == "pods.apps/log/a" && q.verb == "list"));
        let mut urls = rule(&[], &[], &["get"]);
        urls.non_resource_urls = Some(vec!["/metrics".into()]);
        assert!(questions(&[urls], "ns").is_empty());
    }
}
