//! A backup never reads more than its requester could: the resource kinds a NonAdminBackup would include are
//! checked against the requesting user's own rights (SubjectAccessReview, `list` in the namespace) when it is
//! created (a warning names what is left out, or the create is refused), and again when its Velero Backup is
//! made, which leaves out what the requester may not list then. The object records who asked and the mode.
//!
//! Velero reads with its own cluster-wide rights; without this, a user who may create NonAdminBackups but not
//! read Secrets would get the namespace's Secrets into a bucket they control.

pub mod contents;
pub mod credential;
pub mod download;
pub mod features;
pub mod occupancy;
pub mod preview;
pub mod rbac;
pub mod restore;
pub mod rules;
#[cfg(test)]
pub(crate) mod testing;

use futures::future::BoxFuture;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Annotation recording who created a NonAdminBackup or NonAdminRestore (stamped at admission, nac's alone).
pub const REQUESTER_ANNOTATION: &str = "nac.oadp.openshift.io/requester";
/// Annotation recording the rights decision for a NonAdminBackup (stamped at admission, nac's alone).
pub const BACKUP_RIGHTS_ANNOTATION: &str = "nac.oadp.openshift.io/backup-rights";

/// How long an answer of the API server about one right is reused when nac cannot see every change that could
/// alter it: another authorizer than RBAC may decide (`rights.authorizers: other`), or its watches
/// of the RBAC objects are not live. A right revoked is applied to the next backup within this; with
/// `rights.authorizers: rbac` and live watches, within [`rbac::SETTLE`] of the change reaching nac's watch (see
/// [`rbac`]).
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// How long the list of namespaced resource kinds is reused (new CRDs are seen within this).
const KINDS_TTL: Duration = Duration::from_secs(60);

/// What the policy does with kinds the requester may not read (`rights.backup`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RightsMode {
    /// Left out of the backup, with a warning.
    #[default]
    Exclude,
    /// The backup is refused, naming them.
    Deny,
    /// Not checked (Velero's rights decide, as in OADP).
    Off,
}

impl RightsMode {
    /// The mode a restore is checked under: a copy into another namespace always is (`off` as `exclude`), since
    /// the requester's rights there are the only limit nac has on what it writes.
    pub fn for_restore(self, copy: bool) -> RightsMode {
        match self {
            RightsMode::Off if copy => RightsMode::Exclude,
            m => m,
        }
    }
}

impl std::fmt::Display for RightsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RightsMode::Exclude => "exclude",
            RightsMode::Deny => "deny",
            RightsMode::Off => "off",
        })
    }
}

/// The refusal of an object of `kind` with no requester recorded: it did not pass nac's webhook, so `what` cannot
/// be checked, under `policy` (its setting and mode) when one applies.
pub fn no_requester(kind: &str, what: &str, policy: Option<(&str, RightsMode)>) -> String {
    let policy = policy.map(|(s, m)| format!(" (policy {s}: {m})")).unwrap_or_default();
    format!(
        "{kind} has no record of who created it (annotation {REQUESTER_ANNOTATION}): it was not created through \
         nac's admission webhook, so {what} cannot be checked{policy}; create it again"
    )
}

/// The user a request came from, as the API server authenticated them.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requester {
    pub username: String,
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Requester {
    pub fn from_user_info(u: &k8s_openapi::api::authentication::v1::UserInfo) -> Requester {
        Requester {
            username: u.username.clone().unwrap_or_default(),
            uid: u.uid.clone().filter(|s| !s.is_empty()),
            groups: u.groups.clone().unwrap_or_default(),
            extra: u.extra.clone().unwrap_or_default().into_iter().collect(),
        }
    }
}

/// The decision recorded on a NonAdminBackup: the mode it was made under (and, in records nac wrote before
/// 2026-11-26, the kinds left out at admission, still applied).
///
/// The kinds are not recorded: the reconciler asks again when it makes the Velero Backup (whose spec, mirrored in
/// the NonAdminBackup's status, lists them), and the list was most of what nac stored on every object — some 60
/// kinds a namespace user may not read are common — which every create paid for in the API server and etcd
/// (BENCHMARKS.md §5).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupRights {
    pub mode: RightsMode,
    /// Kinds as Velero names them in resource filters (`secrets`, `roles.rbac.authorization.k8s.io`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
}

impl BackupRights {
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Result<Option<BackupRights>, String> {
        match annotations.and_then(|a| a.get(BACKUP_RIGHTS_ANNOTATION)) {
            None => Ok(None),
            Some(v) => serde_json::from_str(v)
                .map(Some)
                .map_err(|e| format!("annotation {BACKUP_RIGHTS_ANNOTATION} is not nac's record: {e}")),
        }
    }
}

/// A namespaced resource kind that can be listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kind {
    pub group: String,
    /// The version the cluster prefers (objects are read in it).
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    pub singular: String,
    pub kind: String,
    pub short_names: Vec<String>,
}

impl Kind {
    /// Its resource in the cluster's preferred version, for a dynamic `Api`.
    pub fn api_resource(&self) -> kube::discovery::ApiResource {
        kube::discovery::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: if self.group.is_empty() {
                self.version.clone()
            } else {
                format!("{}/{}", self.group, self.version)
            },
            kind: self.kind.clone(),
            plural: self.resource.clone(),
        }
    }

    /// A kind whose singular name is its lower-cased kind.
    pub fn new(group: &str, resource: &str, kind: &str, short_names: &[&str]) -> Kind {
        Kind {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            short_names: short_names.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The name Velero's resource filters take: `resource` for the core group, `resource.group` otherwise.
    pub fn filter_name(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// Whether a resource filter entry names this kind (Velero resolves resource, singular, kind and short
    /// names, optionally qualified by the group; `*` is everything). Ambiguous bare names match every group,
    /// which only ever checks a kind more.
    pub fn named_by(&self, pattern: &str) -> bool {
        let p = pattern.trim().to_ascii_lowercase();
        if p == "*" {
            return true;
        }
        let (name, group) = match p.split_once('.') {
            Some((n, g)) => (n, Some(g)),
            None => (p.as_str(), None),
        };
        if group.is_some_and(|g| g != self.group) {
            return false;
        }
        name == self.resource
            || name == self.singular
            || name == self.kind.to_ascii_lowercase()
            || self.short_names.iter().any(|s| s == name)
    }
}

fn strings(spec: &Map<String, Value>, field: &str) -> Vec<String> {
    spec.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The kinds of `all` a backup spec would include: Velero's include/exclude resource filters, old style
/// (`includedResources`) and new (`includedNamespaceScopedResources`), exclusions winning, and never nac's own
/// kinds, which every Velero object nac makes excludes (`velero::exclusions`): the webhook (on the tenant's
/// spec) and the reconciler (on the Velero spec) then decide over the same kinds.
pub fn backup_kinds<'a>(spec: &Map<String, Value>, all: &'a [Kind]) -> Vec<&'a Kind> {
    // Each filter read once, not once per kind (this runs in every admission review).
    let [inc, inc_ns, exc, exc_ns] = [
        "includedResources",
        "includedNamespaceScopedResources",
        "excludedResources",
        "excludedNamespaceScopedResources",
    ]
    .map(|f| strings(spec, f));
    let included = |list: &[String], k: &Kind| list.is_empty() || list.iter().any(|p| k.named_by(p));
    let excluded = |list: &[String], k: &Kind| list.iter().any(|p| k.named_by(p));
    let nacs: Vec<String> = crate::velero::exclusions::EXCLUDED_NAMESPACED_RESOURCES
        .iter()
        .map(|k| k.to_string())
        .collect();
    all.iter()
        .filter(|k| included(&inc, k) && included(&inc_ns, k))
        .filter(|k| !excluded(&exc, k) && !excluded(&exc_ns, k) && !excluded(&nacs, k))
        .collect()
}

/// Adds kinds to a Velero BackupSpec's exclusions, in the filter style the spec uses (Velero refuses a mix).
pub fn exclude(spec: &mut Map<String, Value>, kinds: &[String]) {
    if kinds.is_empty() {
        return;
    }
    let new_style = [
        "includedNamespaceScopedResources",
        "excludedNamespaceScopedResources",
        "includedClusterScopedResources",
        "excludedClusterScopedResources",
    ]
    .iter()
    .any(|f| spec.get(*f).is_some_and(|v| !v.is_null()));
    let field = if new_style {
        "excludedNamespaceScopedResources"
    } else {
        "excludedResources"
    };
    let mut list = strings(spec, field);
    if list.iter().any(|k| k == "*") {
        // Everything is excluded already (new style); Velero refuses "*" beside other items.
        return;
    }
    for k in kinds {
        if !list.contains(k) {
            list.push(k.clone());
        }
    }
    spec.insert(field.into(), Value::from(list));
    crate::velero::validation::drop_excluded_from_includes(spec);
}

/// [`exclude`], refused when what is left is a spec Velero fails at validation (an include list of nothing but
/// kinds `user` may not list): the webhook and the reconciler say it alike. `kind` and `path` name the BackupSpec.
pub fn exclude_checked(
    spec: &mut Map<String, Value>,
    kinds: &[String],
    (kind, path): (&str, &str),
    user: &str,
    namespace: &str,
) -> Result<(), String> {
    exclude(spec, kinds);
    crate::velero::validation::check(kind, path, spec).map_err(|e| {
        format!(
            "{kind} refused: left out what {user} may not list in namespace {namespace} ({}), {e}",
            kinds.join(", ")
        )
    })
}

/// One question to the API server's authorizer: may a user `verb` this resource (the object `name`, when set)
/// in `namespace`. Empty strings are absent attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Question {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub namespace: String,
}

impl Question {
    /// `verb` on every object of `kind` in `namespace`.
    pub fn on(kind: &Kind, verb: &str, namespace: &str) -> Question {
        Question {
            verb: verb.into(),
            group: kind.group.clone(),
            resource: kind.resource.clone(),
            namespace: namespace.into(),
            ..Default::default()
        }
    }

    /// The SubjectAccessReview that asks it for `who`.
    pub fn review_for(&self, who: &Requester) -> k8s_openapi::api::authorization::v1::SubjectAccessReview {
        use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(who.username.clone()),
                uid: who.uid.clone(),
                groups: Some(who.groups.clone()),
                extra: (!who.extra.is_empty()).then(|| who.extra.clone().into_iter().collect()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: some(&self.namespace),
                    verb: Some(self.verb.clone()),
                    group: Some(self.group.clone()),
                    resource: Some(self.resource.clone()),
                    subresource: some(&self.subresource),
                    name: some(&self.name),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// What it asks about, as resource filters name it: `secrets`, `pods/log`, `clusterroles.rbac.authorization.k8s.io/admin`
    /// (the name after the kind).
    pub fn target(&self) -> String {
        let mut t = self.resource.clone();
        if !self.subresource.is_empty() {
            t = format!("{t}/{}", self.subresource);
        }
        if !self.group.is_empty() {
            t = match t.split_once('/') {
                Some((r, sub)) => format!("{r}.{}/{sub}", self.group),
                None => format!("{t}.{}", self.group),
            };
        }
        if !self.name.is_empty() {
            t = format!("{t}/{}", self.name);
        }
        t
    }
}

/// Which role a RoleBinding refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleKind {
    Role,
    ClusterRole,
}

/// Answers about rights: the namespaced kinds the cluster serves, whether a user may do something, and what a
/// role grants.
pub trait Access: Send + Sync {
    fn kinds(&self) -> BoxFuture<'_, Result<Arc<Vec<Kind>>, String>>;
    fn ask<'a>(&'a self, who: &'a Requester, q: &'a Question) -> BoxFuture<'a, Result<bool, String>>;
    /// The kinds among `kinds` that `who` may not `verb` in `namespace`, as filter names, sorted; any failed
    /// answer fails the whole check (closed). By default each kind is asked on its own.
    fn refused<'a>(
        &'a self,
        who: &'a Requester,
        verb: &'a str,
        namespace: &'a str,
        kinds: &'a [&'a Kind],
    ) -> BoxFuture<'a, Result<Vec<String>, String>> {
        Box::pin(async move {
            let answers = futures::future::join_all(kinds.iter().map(|k| async move {
                let q = Question::on(k, verb, namespace);
                self.ask(who, &q).await
            }))
            .await;
            let mut out = Vec::new();
            for (k, a) in kinds.iter().zip(answers) {
                if !a? {
                    out.push(k.filter_name());
                }
            }
            out.sort();
            out.dedup();
            Ok(out)
        })
    }
    /// The rules of a live Role (in `namespace`) or ClusterRole; `None` when it does not exist.
    fn role_rules<'a>(
        &'a self,
        kind: RoleKind,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<PolicyRule>>, String>>;
    /// For each of `kinds`: what nac knows of whether it holds objects in `namespace` (it words warnings only;
    /// see [`occupancy`]). By default nothing is known.
    fn occupied<'a>(&'a self, namespace: &'a str, kinds: &'a [&'a Kind]) -> BoxFuture<'a, Vec<occupancy::Seen>> {
        let _ = namespace;
        Box::pin(async move { vec![occupancy::Seen::Unknown; kinds.len()] })
    }
    /// Which RBAC changes that could reach `namespace` nac has seen (see [`rbac`]): a different stamp, rights there
    /// may have changed. `None`: nac does not follow RBAC changes.
    fn rbac_stamp(&self, namespace: &str) -> Option<rbac::Stamp> {
        let _ = namespace;
        None
    }
    /// Whether the cluster serves OpenShift's SecurityContextConstraints (`features::SCC`). By default not.
    fn serves_sccs(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }
}

/// Whether `who` may `verb` every object of `kind` in `namespace`.
pub async fn allowed(
    access: &dyn Access,
    who: &Requester,
    verb: &str,
    kind: &Kind,
    namespace: &str,
) -> Result<bool, String> {
    access.ask(who, &Question::on(kind, verb, namespace)).await
}

/// The kinds among `kinds` that `who` may not `verb` in `namespace`, as filter names, sorted. Asked all at once;
/// any failed answer fails the whole check (closed).
pub async fn refused(
    access: &dyn Access,
    who: &Requester,
    verb: &str,
    namespace: &str,
    kinds: &[&Kind],
) -> Result<Vec<String>, String> {
    access.refused(who, verb, namespace, kinds).await
}

/// The kinds among `kinds` that `who` may not `list` in `namespace` (what a backup may not read).
pub async fn unreadable(
    access: &dyn Access,
    who: &Requester,
    namespace: &str,
    kinds: &[&Kind],
) -> Result<Vec<String>, String> {
    refused(access, who, "list", namespace, kinds).await
}

type Key = (Requester, Question);

/// An answer and when it was given (empty while it is being asked), under the RBAC state it was asked in.
struct Cell {
    stamp: rbac::Stamp,
    answer: tokio::sync::OnceCell<(bool, Instant)>,
}
type Answer = Arc<Cell>;

/// How long answers last and what makes them stale.
pub struct Freshness {
    pub epochs: Arc<rbac::Epochs>,
    /// RBAC is the only authorizer (`rights.authorizers: rbac`): with live watches an answer lasts until a
    /// change could reach it, at most `lifetime`.
    pub rbac_only: bool,
    pub lifetime: Duration,
}

impl Freshness {
    /// Answers kept [`CACHE_TTL`], nothing watched (tests, and nac before its watches run).
    pub fn short() -> Freshness {
        Freshness {
            epochs: Arc::default(),
            rbac_only: false,
            lifetime: CACHE_TTL,
        }
    }

    fn lifetime(&self) -> Duration {
        if self.rbac_only && self.epochs.live() {
            self.lifetime
        } else {
            CACHE_TTL
        }
    }

    /// Whether an answer about `namespace` given at `at` under `stamp` still holds.
    fn holds(&self, stamp: rbac::Stamp, namespace: &str, at: Instant) -> bool {
        stamp == self.epochs.stamp(namespace) && at.elapsed() < self.lifetime()
    }
}

/// A map that drops what is no longer fresh when it grows past a bound that follows its live size (so a cache
/// of many fresh answers is not swept on every insert).
struct Swept<K, V> {
    map: HashMap<K, V>,
    sweep_at: usize,
}

impl<K: std::hash::Hash + Eq, V> Swept<K, V> {
    fn new() -> Self {
        Swept {
            map: HashMap::new(),
            sweep_at: 10_000,
        }
    }

    fn sweep_if_large(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        if self.map.len() > self.sweep_at {
            self.map.retain(keep);
            self.sweep_at = (self.map.len() * 2).max(10_000);
        }
    }
}

/// One user's answer over a whole list of kinds (what an admission review asks: ~70 questions), kept while the
/// oldest answer it was made from is fresh, so a review costs one lookup instead of one per kind.
struct Decision {
    verb: String,
    namespace: String,
    /// The kinds asked about, (group, resource), in order.
    kinds: Vec<(String, String)>,
    refused: Vec<String>,
    oldest: Instant,
    stamp: rbac::Stamp,
}

impl Decision {
    fn holds(&self, fresh: &Freshness) -> bool {
        fresh.holds(self.stamp, &self.namespace, self.oldest)
    }

    fn answers(&self, verb: &str, namespace: &str, kinds: &[&Kind], fresh: &Freshness) -> bool {
        self.verb == verb
            && self.namespace == namespace
            && self.holds(fresh)
            && self.kinds.len() == kinds.len()
            && self
                .kinds
                .iter()
                .zip(kinds)
                .all(|((g, r), k)| *g == k.group && *r == k.resource)
    }
}

/// [`Access`] against the API server: discovery, SubjectAccessReviews (each answer cached as long as
/// [`Freshness`] says) and role reads.
pub struct KubeAccess {
    client: kube::Client,
    fresh: Freshness,
    /// One cell per question: concurrent askers of a question that is not answered (or whose answer is stale)
    /// wait for one SubjectAccessReview instead of each sending their own.
    answers: Mutex<Swept<Key, Answer>>,
    /// Whole decisions per user, made from `answers` (never older than they are).
    decisions: Mutex<Swept<Requester, Vec<Decision>>>,
    kinds: tokio::sync::Mutex<Option<(Arc<Vec<Kind>>, Instant)>>,
    /// Whether the cluster serves SecurityContextConstraints, and when that was read (as `kinds`).
    sccs: tokio::sync::Mutex<Option<(bool, Instant)>>,
    occupancy: occupancy::KubeOccupancy,
    /// The RBAC objects rights are answered from without a review (`rights.authorizers: rbac`).
    rules: Option<rules::Rules>,
}

impl KubeAccess {
    /// Answers kept [`CACHE_TTL`].
    pub fn new(client: kube::Client) -> KubeAccess {
        KubeAccess::with(client, Freshness::short())
    }

    pub fn with(client: kube::Client, fresh: Freshness) -> KubeAccess {
        KubeAccess {
            occupancy: occupancy::KubeOccupancy::new(client.clone(), fresh.epochs.clone()),
            client,
            fresh,
            answers: Mutex::new(Swept::new()),
            decisions: Mutex::new(Swept::new()),
            kinds: tokio::sync::Mutex::new(None),
            sccs: tokio::sync::Mutex::new(None),
            rules: None,
        }
    }

    /// No lists to learn which left-out kinds hold objects (`rights.warning_lookups: false`).
    pub fn without_lookups(mut self) -> KubeAccess {
        self.occupancy = self.occupancy.off();
        self
    }

    /// Counts the lists sent to learn which left-out kinds hold objects on `counter` (see [`occupancy`]).
    pub fn counting_lists(mut self, counter: prometheus_client::metrics::counter::Counter) -> KubeAccess {
        self.occupancy = self.occupancy.counting(counter);
        self
    }

    /// Answers from these RBAC objects where RBAC's answer is final (see [`rules`]); only used while
    /// `rights.authorizers: rbac` and the watches filling them are live.
    pub fn with_rules(mut self, rules: rules::Rules) -> KubeAccess {
        self.rules = Some(rules);
        self
    }

    /// The RBAC rules that apply to `who` in `namespace`, when they may answer for the API server.
    fn local_rules(&self, who: &Requester, namespace: &str) -> Option<Vec<PolicyRule>> {
        let rules = self.rules.as_ref()?;
        (self.fresh.rbac_only && self.fresh.epochs.live()).then(|| rules.rules_for(who, namespace))
    }

    /// RBAC's answer from `mine` (see `local_rules`) when it is final: a "yes", or a "no" for a requester no
    /// other authorizer decides for.
    fn local_answer(mine: &[PolicyRule], who: &Requester, q: &Question) -> Option<bool> {
        let yes = rules::any_allows(mine, q);
        (yes || !rules::decided_outside_rbac(who)).then_some(yes)
    }

    /// The answer to `q` and when it was given (one SubjectAccessReview per question while its answer holds).
    async fn ask_at(&self, who: &Requester, q: &Question) -> Result<(bool, Instant), String> {
        // A yes from the RBAC objects nac watches is final. A no is asked of the API server (and kept like any
        // answer): nac's watch can lag behind the API server's own authorizer, and a right granted a moment ago
        // would be refused.
        if self
            .local_rules(who, &q.namespace)
            .and_then(|mine| Self::local_answer(&mine, who, q))
            == Some(true)
        {
            return Ok((true, Instant::now()));
        }
        let key: Key = (who.clone(), q.clone());
        // Taken before the question is sent: an RBAC change while it is answered stales the answer.
        let stamp = self.fresh.epochs.stamp(&q.namespace);
        let fresh = |c: &Cell| {
            c.stamp == stamp
                && c.answer
                    .get()
                    .is_none_or(|(_, at)| at.elapsed() < self.fresh.lifetime())
        };
        let cell = {
            let mut answers = self.answers.lock().expect("rights cache");
            match answers.map.get(&key) {
                // Answered and fresh, or being asked right now under the same RBAC state.
                Some(c) if fresh(c) => c.clone(),
                _ => {
                    // Stale answers go when the cache grows.
                    answers.sweep_if_large(|(_, q), c| {
                        c.answer
                            .get()
                            .is_none_or(|(_, at)| self.fresh.holds(c.stamp, &q.namespace, *at))
                    });
                    let c = Arc::new(Cell {
                        stamp,
                        answer: tokio::sync::OnceCell::new(),
                    });
                    answers.map.insert(key, c.clone());
                    c
                }
            }
        };
        // A failed review leaves the cell empty: the next asker tries again.
        let a = cell
            .answer
            .get_or_try_init(|| async { Ok::<_, String>((self.review(who, q).await?, Instant::now())) })
            .await?;
        Ok(*a)
    }

    async fn discover(&self) -> Result<Vec<Kind>, String> {
        discover(&self.client).await
    }

    async fn review(&self, who: &Requester, q: &Question) -> Result<bool, String> {
        use k8s_openapi::api::authorization::v1::SubjectAccessReview;
        let review = q.review_for(who);
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let mut answer = api.create(&PostParams::default(), &review).await;
        // A review has no effect: one that never got an answer (a pooled connection the API server had closed) is
        // sent once more before a user's request is refused for it. An answer of the API server's is final.
        if matches!(answer, Err(kube::Error::Service(_) | kube::Error::HyperError(_))) {
            answer = api.create(&PostParams::default(), &review).await;
        }
        let answer = answer.map_err(|e| {
            format!(
                "asking the API server whether {} may {} {}: {e}",
                who.username,
                q.verb,
                q.target()
            )
        })?;
        Ok(answer.status.is_some_and(|s| s.allowed && !s.denied.unwrap_or(false)))
    }
}

/// The cluster's namespaced kinds that can be listed, in their preferred versions.
pub async fn discover(client: &kube::Client) -> Result<Vec<Kind>, String> {
    Ok(discover_scoped(client)
        .await?
        .into_iter()
        .filter_map(|(k, namespaced)| namespaced.then_some(k))
        .collect())
}

/// The cluster's kinds that can be listed, namespaced (`true`) or cluster-scoped, in their preferred versions.
pub async fn discover_scoped(client: &kube::Client) -> Result<Vec<(Kind, bool)>, String> {
    let fail = |e: kube::Error| format!("discovery of the cluster's resource kinds failed: {e}");
    // Resource lists rather than kube's Discovery: they carry the short names Velero's filters accept.
    let mut lists = Vec::new();
    for v in client.list_core_api_versions().await.map_err(fail)?.versions {
        lists.push(client.list_core_api_resources(&v).await.map_err(fail)?);
    }
    for g in client.list_api_groups().await.map_err(fail)?.groups {
        let Some(v) = g.preferred_version.or_else(|| g.versions.into_iter().next()) else {
            continue;
        };
        lists.push(client.list_api_group_resources(&v.group_version).await.map_err(fail)?);
    }
    let mut out = Vec::new();
    for list in lists {
        let (group, version) = match list.group_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), list.group_version.clone()),
        };
        for r in list.resources {
            if r.name.contains('/') || !r.verbs.iter().any(|v| v == "list") {
                continue;
            }
            let namespaced = r.namespaced;
            out.push((
                Kind {
                    group: group.clone(),
                    version: version.clone(),
                    singular: if r.singular_name.is_empty() {
                        r.kind.to_ascii_lowercase()
                    } else {
                        r.singular_name.clone()
                    },
                    resource: r.name,
                    kind: r.kind,
                    short_names: r.short_names.unwrap_or_default(),
                },
                namespaced,
            ));
        }
    }
    Ok(out)
}

impl Access for KubeAccess {
    fn rbac_stamp(&self, namespace: &str) -> Option<rbac::Stamp> {
        Some(self.fresh.epochs.stamp(namespace))
    }

    fn serves_sccs(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            let mut cached = self.sccs.lock().await;
            if let Some((served, at)) = *cached {
                if at.elapsed() < KINDS_TTL {
                    return Ok(served);
                }
            }
            let (group, resource) = features::SCC;
            let served = match self.client.list_api_group_resources(&format!("{group}/v1")).await {
                Ok(list) => list.resources.iter().any(|r| r.name == resource),
                // Not served: the API server answers 404 for an unknown group.
                Err(kube::Error::Api(e)) if e.code == 404 => false,
                Err(e) => return Err(format!("discovery of {group}: {e}")),
            };
            *cached = Some((served, Instant::now()));
            Ok(served)
        })
    }

    fn kinds(&self) -> BoxFuture<'_, Result<Arc<Vec<Kind>>, String>> {
        Box::pin(async move {
            let mut cached = self.kinds.lock().await;
            if let Some((k, at)) = cached.as_ref() {
                if at.elapsed() < KINDS_TTL {
                    return Ok(k.clone());
                }
            }
            let k = Arc::new(self.discover().await?);
            *cached = Some((k.clone(), Instant::now()));
            Ok(k)
        })
    }

    fn ask<'a>(&'a self, who: &'a Requester, q: &'a Question) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move { Ok(self.ask_at(who, q).await?.0) })
    }

    fn refused<'a>(
        &'a self,
        who: &'a Requester,
        verb: &'a str,
        namespace: &'a str,
        kinds: &'a [&'a Kind],
    ) -> BoxFuture<'a, Result<Vec<String>, String>> {
        Box::pin(async move {
            if let Some(d) = self.decisions.lock().expect("rights cache").map.get(who) {
                if let Some(d) = d.iter().find(|d| d.answers(verb, namespace, kinds, &self.fresh)) {
                    return Ok(d.refused.clone());
                }
            }
            // Taken before any question is sent (see `ask_at`).
            let stamp = self.fresh.epochs.stamp(namespace);
            let (mut refused, mut oldest) = (Vec::new(), Instant::now());
            // Answered from the RBAC objects where RBAC's answer is final: no review at all.
            let local = self.local_rules(who, namespace);
            // Otherwise a requester whose rights cover every kind in the namespace (a namespace owner bound to a
            // role of `*`) is answered by one review instead of one per kind.
            let every = Question {
                verb: verb.into(),
                group: "*".into(),
                resource: "*".into(),
                namespace: namespace.into(),
                ..Default::default()
            };
            let (all, at) = match kinds.len() {
                _ if local.is_some() => (false, oldest),
                0 | 1 => (false, oldest),
                _ => self.ask_at(who, &every).await?,
            };
            oldest = oldest.min(at);
            if !all {
                let local = &local;
                let answers = futures::future::join_all(kinds.iter().map(|k| async move {
                    let q = Question::on(k, verb, namespace);
                    match local.as_deref().and_then(|mine| Self::local_answer(mine, who, &q)) {
                        Some(a) => Ok((a, Instant::now())),
                        None => self.ask_at(who, &q).await,
                    }
                }))
                .await;
                for (k, a) in kinds.iter().zip(answers) {
                    let (allowed, at) = a?;
                    oldest = oldest.min(at);
                    if !allowed {
                        refused.push(k.filter_name());
                    }
                }
            }
            refused.sort();
            refused.dedup();
            let mut decisions = self.decisions.lock().expect("rights cache");
            // Like the answers, stale decisions go when the cache grows.
            decisions.sweep_if_large(|_, d| {
                d.retain(|d| d.holds(&self.fresh));
                !d.is_empty()
            });
            let mine = decisions.map.entry(who.clone()).or_default();
            mine.retain(|d| (d.verb != verb || d.namespace != namespace) && d.holds(&self.fresh));
            mine.push(Decision {
                verb: verb.into(),
                namespace: namespace.into(),
                kinds: kinds.iter().map(|k| (k.group.clone(), k.resource.clone())).collect(),
                refused: refused.clone(),
                oldest,
                stamp,
            });
            Ok(refused)
        })
    }

    fn role_rules<'a>(
        &'a self,
        kind: RoleKind,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<PolicyRule>>, String>> {
        use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
        Box::pin(async move {
            let fail = |e: kube::Error| format!("reading {kind:?} {name}: {e}");
            Ok(match kind {
                RoleKind::ClusterRole => Api::<ClusterRole>::all(self.client.clone())
                    .get_opt(name)
                    .await
                    .map_err(fail)?
                    .map(|r| r.rules.unwrap_or_default()),
                RoleKind::Role => Api::<Role>::namespaced(self.client.clone(), namespace)
                    .get_opt(name)
                    .await
                    .map_err(fail)?
                    .map(|r| r.rules.unwrap_or_default()),
            })
        })
    }

    fn occupied<'a>(&'a self, namespace: &'a str, kinds: &'a [&'a Kind]) -> BoxFuture<'a, Vec<occupancy::Seen>> {
        Box::pin(self.occupancy.occupied(namespace, kinds))
    }
}

/// [`Access`] from a fixed table: the kinds, the (user, verb, target) answers that are "no" (target as
/// [`Question::target`] writes it; a target without a name also refuses every name), and the roles. For
/// benchmarks, fuzzing and handler tests, where the answers of a warm cache are what is measured.
#[derive(Clone)]
pub struct Fixed {
    pub kinds: Arc<Vec<Kind>>,
    pub denied: Vec<(String, String, String)>,
    /// (kind, namespace or "" for ClusterRoles, name) and the rules.
    pub roles: Vec<((RoleKind, String, String), Vec<PolicyRule>)>,
    /// Kinds (filter names) that hold objects in every namespace; the others hold none.
    pub holding: Vec<String>,
    /// The cluster serves SecurityContextConstraints (OpenShift).
    pub sccs: bool,
}

impl Fixed {
    /// A few core and apps kinds, everything allowed.
    pub fn common() -> Fixed {
        let k = Kind::new;
        Fixed {
            kinds: Arc::new(vec![
                k("", "configmaps", "ConfigMap", &["cm"]),
                k("", "secrets", "Secret", &[]),
                k("", "pods", "Pod", &["po"]),
                k("", "persistentvolumeclaims", "PersistentVolumeClaim", &["pvc"]),
                k("apps", "deployments", "Deployment", &["deploy"]),
                k("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", &[]),
                k("rbac.authorization.k8s.io", "roles", "Role", &[]),
            ]),
            denied: Vec::new(),
            roles: Vec::new(),
            holding: vec!["configmaps".into(), "secrets".into()],
            sccs: false,
        }
    }
}

impl Access for Fixed {
    fn kinds(&self) -> BoxFuture<'_, Result<Arc<Vec<Kind>>, String>> {
        Box::pin(async move { Ok(self.kinds.clone()) })
    }

    fn serves_sccs(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move { Ok(self.sccs) })
    }

    fn ask<'a>(&'a self, who: &'a Requester, q: &'a Question) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            if who.username == "broken" {
                return Err("connection refused".into());
            }
            let target = q.target();
            let unnamed = Question {
                name: String::new(),
                ..q.clone()
            }
            .target();
            Ok(!self
                .denied
                .iter()
                .any(|(u, v, t)| *u == who.username && *v == q.verb && (*t == target || *t == unnamed)))
        })
    }

    fn role_rules<'a>(
        &'a self,
        kind: RoleKind,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<PolicyRule>>, String>> {
        let ns = if kind == RoleKind::ClusterRole { "" } else { namespace };
        Box::pin(async move {
            Ok(self
                .roles
                .iter()
                .find(|((k, n, m), _)| *k == kind && n == ns && m == name)
                .map(|(_, r)| r.clone()))
        })
    }

    fn occupied<'a>(&'a self, _: &'a str, kinds: &'a [&'a Kind]) -> BoxFuture<'a, Vec<occupancy::Seen>> {
        Box::pin(async move {
            kinds
                .iter()
                .map(|k| match self.holding.contains(&k.filter_name()) {
                    true => occupancy::Seen::Holds,
                    false => occupancy::Seen::Empty,
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rights::testing::user;
    use serde_json::json;
    use std::time::Duration;

    /// Answers kept an hour, the four RBAC watches live; `rbac_only`: RBAC the only authorizer.
    fn live_freshness(rbac_only: bool) -> Freshness {
        let fresh = Freshness {
            epochs: Arc::default(),
            rbac_only,
            lifetime: Duration::from_secs(3600),
        };
        for w in 0..4 {
            fresh.epochs.set_live(w, true);
        }
        fresh
    }

    fn all() -> Vec<Kind> {
        vec![
            Kind::new("", "secrets", "Secret", &[]),
            Kind::new("", "configmaps", "ConfigMap", &["cm"]),
            Kind::new("apps", "deployments", "Deployment", &["deploy"]),
            Kind::new("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", &[]),
        ]
    }

    fn names(ks: Vec<&Kind>) -> Vec<String> {
        ks.into_iter().map(Kind::filter_name).collect()
    }

    use crate::wire::object as map;

    #[test]
    fn the_kinds_a_backup_includes_follow_velero_filters() {
        let all = all();
        assert_eq!(names(backup_kinds(&map(json!({})), &all)).len(), 4);
        assert_eq!(
            names(backup_kinds(
                &map(json!({"includedResources": ["*"], "excludedResources": ["secret"]})),
                &all
            )),
            [
                "configmaps",
                "deployments.apps",
                "rolebindings.rbac.authorization.k8s.io"
            ]
        );
        assert_eq!(
            names(backup_kinds(
                &map(json!({"includedResources": ["cm", "Deployment.apps"]})),
                &all
            )),
            ["configmaps", "deployments.apps"]
        );
        // nac's own kinds: never included, whatever the filters say.
        let mut with_nacs = all.clone();
        with_nacs.push(Kind::new(
            "oadp.openshift.io",
            "nonadminbackups",
            "NonAdminBackup",
            &["nab"],
        ));
        assert_eq!(
            names(backup_kinds(&map(json!({"includedResources": ["*"]})), &with_nacs)).len(),
            4
        );
        assert!(backup_kinds(&map(json!({"includedResources": ["nab"]})), &with_nacs).is_empty());
        // A group that does not match names nothing.
        assert!(backup_kinds(&map(json!({"includedResources": ["deployments.batch"]})), &all).is_empty());
        assert_eq!(
            names(backup_kinds(
                &map(json!({"includedNamespaceScopedResources": ["secrets", "rolebindings"]})),
                &all
            )),
            ["secrets", "rolebindings.rbac.authorization.k8s.io"]
        );
    }

    #[test]
    fn exclusions_go_in_the_style_of_the_spec() {
        let mut old = map(json!({"excludedResources": ["pods"]}));
        exclude(&mut old, &["secrets".into(), "pods".into()]);
        assert_eq!(old["excludedResources"], json!(["pods", "secrets"]));
        let mut new = map(json!({"includedNamespaceScopedResources": ["*"]}));
        exclude(&mut new, &["secrets".into()]);
        assert_eq!(new["excludedNamespaceScopedResources"], json!(["secrets"]));
        assert!(new.get("excludedResources").is_none());
        let mut none = map(json!({}));
        exclude(&mut none, &[]);
        assert!(none.is_empty());
    }

    /// The mock API server's answer to one request.
    fn reply(
        send: tower_test::mock::SendResponse<hyper::http::Response<kube::client::Body>>,
        status: u16,
        body: &Value,
    ) {
        send.send_response(
            hyper::http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap(),
        );
    }

    type MockApi =
        tower_test::mock::Handle<hyper::http::Request<kube::client::Body>, hyper::http::Response<kube::client::Body>>;

    /// A `KubeAccess` whose API server is the test's: each request comes out of the handle.
    fn mock_api() -> (KubeAccess, MockApi) {
        let (service, handle) = tower_test::mock::pair();
        (KubeAccess::new(kube::Client::new(service, "default")), handle)
    }

    #[tokio::test]
    async fn a_review_lost_in_transport_is_sent_once_more() {
        let (access, mut handle) = mock_api();
        let server = tokio::spawn(async move {
            let mut reviews = 0;
            while let Some((_, send)) = handle.next_request().await {
                reviews += 1;
                // Questions 1 and 2 lose their first review on the way; question 2 its second too.
                if reviews == 1 || reviews == 3 || reviews == 4 {
                    send.send_error("connection closed before message completed");
                } else {
                    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                      "spec": {}, "status": {"allowed": true}});
                    reply(send, 201, &body);
                }
            }
            reviews
        });
        let who = user("alice");
        let q = |r: &str| Question::on(&Kind::new("", r, "Secret", &[]), "list", "team-a");
        assert_eq!(access.ask(&who, &q("secrets")).await, Ok(true));
        let e = access.ask(&who, &q("configmaps")).await.unwrap_err();
        assert!(e.contains("connection closed"), "{e}");
        drop(access);
        assert_eq!(server.await.unwrap(), 4, "one retry per question, no more");
    }

    #[tokio::test]
    async fn concurrent_askers_of_one_question_cost_one_review_and_failures_are_not_kept() {
        let (access, mut handle) = mock_api();
        let access = Arc::new(access);
        // The API server: each SubjectAccessReview answered after a pause (so the askers overlap), the first one
        // with an error, every other one allowed; the count of reviews comes back when the mock is dropped.
        let server = tokio::spawn(async move {
            let mut reviews = 0;
            while let Some((req, send)) = handle.next_request().await {
                assert!(req.uri().path().ends_with("/subjectaccessreviews"), "{}", req.uri());
                reviews += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let (status, body) = if reviews == 1 {
                    (
                        500,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "message": "etcd down"}),
                    )
                } else {
                    (
                        201,
                        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                 "spec": {}, "status": {"allowed": true}}),
                    )
                };
                reply(send, status, &body);
            }
            reviews
        });
        let who = user("alice");
        let q = Question::on(&Kind::new("", "secrets", "Secret", &[]), "list", "team-a");
        // The first question fails, for its one asker only.
        assert!(access.ask(&who, &q).await.unwrap_err().contains("etcd down"));
        // Sixteen at once: one review.
        let answers = futures::future::join_all((0..16).map(|_| access.ask(&who, &q))).await;
        assert!(answers.iter().all(|a| *a == Ok(true)), "{answers:?}");
        // Answered from the cache.
        assert_eq!(access.ask(&who, &q).await, Ok(true));
        drop(access);
        assert_eq!(server.await.unwrap(), 2, "one failed review, then one for all sixteen");
    }

    #[tokio::test]
    async fn a_whole_decision_is_reused_only_for_the_same_user_verb_namespace_and_kinds() {
        let (access, mut handle) = mock_api();
        // The API server: secrets may not be listed, everything else may; counts the reviews.
        let server = tokio::spawn(async move {
            let mut reviews = 0;
            while let Some((req, send)) = handle.next_request().await {
                reviews += 1;
                let body = axum::body::to_bytes(axum::body::Body::new(req.into_body()), 1 << 20)
                    .await
                    .unwrap();
                let sar: Value = serde_json::from_slice(&body).unwrap();
                // Not every kind (`*`): each is asked on its own.
                let resource = &sar["spec"]["resourceAttributes"]["resource"];
                let allowed = resource != "secrets" && resource != "*";
                let answer = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                    "spec": {}, "status": {"allowed": allowed}});
                reply(send, 201, &answer);
            }
            reviews
        });
        let (alice, bob) = (user("alice"), user("bob"));
        let all = [
            Kind::new("", "secrets", "Secret", &[]),
            Kind::new("", "pods", "Pod", &["po"]),
            Kind::new("apps", "deployments", "Deployment", &["deploy"]),
        ];
        let kinds: Vec<&Kind> = all.iter().collect();
        let secrets = Ok(vec!["secrets".to_string()]);
        assert_eq!(refused(&access, &alice, "list", "team-a", &kinds).await, secrets);
        // The same decision, from the cache; other lists, users and namespaces are decided on their own.
        assert_eq!(refused(&access, &alice, "list", "team-a", &kinds).await, secrets);
        assert_eq!(
            refused(&access, &alice, "list", "team-a", &kinds[1..]).await,
            Ok(vec![])
        );
        assert_eq!(refused(&access, &alice, "list", "team-a", &kinds).await, secrets);
        assert_eq!(refused(&access, &bob, "list", "team-a", &kinds[..1]).await, secrets);
        assert_eq!(refused(&access, &alice, "list", "team-b", &kinds[..2]).await, secrets);
        drop(access);
        // alice in team-a: every kind (`*`), then 3; bob: 1 (one kind is asked on its own); alice in team-b: `*`
        // and 2 (the sub-list in team-a was answered question by question from the cache).
        assert_eq!(server.await.unwrap(), 8);
    }

    /// A mock API server answering SubjectAccessReviews with `allowed(resource)`, counting them.
    fn reviews_answered(mut handle: MockApi, allowed: fn(&str) -> bool) -> tokio::task::JoinHandle<Vec<String>> {
        tokio::spawn(async move {
            let mut asked = Vec::new();
            while let Some((req, send)) = handle.next_request().await {
                let body = axum::body::to_bytes(axum::body::Body::new(req.into_body()), 1 << 20)
                    .await
                    .unwrap();
                let sar: Value = serde_json::from_slice(&body).unwrap();
                let attrs = &sar["spec"]["resourceAttributes"];
                let resource = attrs["resource"].as_str().unwrap().to_string();
                asked.push(format!("{}/{resource}", attrs["namespace"].as_str().unwrap()));
                let answer = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                    "spec": {}, "status": {"allowed": allowed(&resource)}});
                reply(send, 201, &answer);
            }
            asked
        })
    }

    fn some_kinds() -> Vec<Kind> {
        vec![
            Kind::new("", "secrets", "Secret", &[]),
            Kind::new("", "pods", "Pod", &["po"]),
            Kind::new("apps", "deployments", "Deployment", &["deploy"]),
        ]
    }

    #[tokio::test]
    async fn a_requester_who_may_read_every_kind_costs_one_review() {
        let (access, handle) = mock_api();
        let server = reviews_answered(handle, |_| true);
        let all = some_kinds();
        let kinds: Vec<&Kind> = all.iter().collect();
        let alice = user("alice");
        assert_eq!(refused(&access, &alice, "list", "team-a", &kinds).await, Ok(vec![]));
        assert_eq!(
            refused(&access, &alice, "list", "team-a", &kinds[..2]).await,
            Ok(vec![])
        );
        drop(access);
        assert_eq!(server.await.unwrap(), ["team-a/*"]);
    }

    #[tokio::test]
    async fn an_rbac_change_stales_the_answers_it_could_reach() {
        let (service, handle) = tower_test::mock::pair();
        let fresh = live_freshness(true);
        let epochs = fresh.epochs.clone();
        assert_eq!(
            fresh.lifetime(),
            Duration::from_secs(3600),
            "live watches: the long lifetime"
        );
        let access = KubeAccess::with(kube::Client::new(service, "default"), fresh);
        let server = reviews_answered(handle, |r| r != "*" && r != "secrets");
        let all = some_kinds();
        let kinds: Vec<&Kind> = all.iter().collect();
        let alice = user("alice");
        let secrets = Ok(vec!["secrets".to_string()]);
        for ns in ["team-a", "team-b"] {
            assert_eq!(refused(&access, &alice, "list", ns, &kinds).await, secrets);
        }
        // A RoleBinding in team-a changed: team-a is asked again, team-b's answers hold.
        epochs.changed(Some("team-a"));
        for ns in ["team-a", "team-b"] {
            assert_eq!(refused(&access, &alice, "list", ns, &kinds).await, secrets);
        }
        // A ClusterRoleBinding changed: everything is asked again.
        epochs.changed(None);
        assert_eq!(refused(&access, &alice, "list", "team-b", &kinds).await, secrets);
        // A watch failed: the short lifetime until it lists again.
        epochs.set_live(3, false);
        assert_eq!(access.fresh.lifetime(), CACHE_TTL);
        drop(access);
        let asked = server.await.unwrap();
        let count = |ns: &str| asked.iter().filter(|a| a.starts_with(ns)).count();
        assert_eq!((count("team-a/"), count("team-b/")), (8, 8), "{asked:?}");
    }

    #[tokio::test]
    async fn from_the_rbac_objects_a_new_requester_costs_no_review_unless_decided_outside_rbac() {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
        use kube::runtime::watcher::Event;
        let (service, handle) = tower_test::mock::pair();
        let fresh = live_freshness(true);
        // alice may list pods and deployments in team-a, through a Role.
        let (rules, mut w) = rules::Rules::new();
        let meta = |name: &str| kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team-a".into()),
            ..Default::default()
        };
        let rule = |group: &str, resource: &str| PolicyRule {
            verbs: vec!["list".into()],
            api_groups: Some(vec![group.into()]),
            resources: Some(vec![resource.into()]),
            ..Default::default()
        };
        w.roles.apply_watcher_event(&Event::Apply(Role {
            metadata: meta("reader"),
            rules: Some(vec![rule("", "pods"), rule("apps", "deployments")]),
        }));
        w.role_bindings.apply_watcher_event(&Event::Apply(RoleBinding {
            metadata: meta("alice-reads"),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: "reader".into(),
            },
            subjects: Some(vec![Subject {
                kind: "User".into(),
                name: "alice".into(),
                ..Default::default()
            }]),
        }));
        let access = KubeAccess::with(kube::Client::new(service, "default"), fresh).with_rules(rules);
        // The API server allows everything: whatever nac asks it is allowed.
        let server = reviews_answered(handle, |_| true);
        let all = some_kinds();
        let kinds: Vec<&Kind> = all.iter().collect();
        let alice = user("alice");
        assert_eq!(
            refused(&access, &alice, "list", "team-a", &kinds).await,
            Ok(vec!["secrets".to_string()])
        );
        // system:masters is allowed before RBAC: RBAC's "no" is asked of the API server.
        let root = Requester {
            username: "root".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        assert_eq!(refused(&access, &root, "list", "team-a", &kinds).await, Ok(vec![]));
        drop(access);
        let mut asked = server.await.unwrap();
        asked.sort();
        assert_eq!(asked, ["team-a/deployments", "team-a/pods", "team-a/secrets"]);
    }

    #[test]
    fn other_authorizers_keep_answers_short() {
        let fresh = live_freshness(false);
        assert_eq!(fresh.lifetime(), CACHE_TTL);
    }

    #[test]
    fn the_record_reads_back_and_refuses_garbage() {
        let r = BackupRights {
            mode: RightsMode::Exclude,
            excluded: vec!["secrets".into()],
        };
        let a = BTreeMap::from([(BACKUP_RIGHTS_ANNOTATION.to_string(), serde_json::to_string(&r).unwrap())]);
        assert_eq!(BackupRights::of(Some(&a)).unwrap(), Some(r));
        assert_eq!(BackupRights::of(None).unwrap(), None);
        // What nac records now: the mode alone (the kinds are decided when the Velero Backup is made).
        let mode_only = BackupRights {
            mode: RightsMode::Exclude,
            excluded: Vec::new(),
        };
        assert_eq!(serde_json::to_string(&mode_only).unwrap(), r#"{"mode":"exclude"}"#);
        let a = BTreeMap::from([(
            BACKUP_RIGHTS_ANNOTATION.to_string(),
            r#"{"mode":"exclude"}"#.to_string(),
        )]);
        assert_eq!(BackupRights::of(Some(&a)).unwrap(), Some(mode_only));
        let bad = BTreeMap::from([(BACKUP_RIGHTS_ANNOTATION.to_string(), "{\"mode\":\"all\"}".to_string())]);
        assert!(BackupRights::of(Some(&bad)).is_err());
    }
}
