//! Rights answered from the RBAC objects themselves, as Kubernetes' RBAC authorizer answers them, so that a tenant
//! seen for the first time costs no SubjectAccessReview. Only with `rights.authorizers: rbac` (the default: RBAC
//! taken as the only authorizer that can allow a tenant's request) and while nac's watches of the four RBAC kinds
//! are live (see [`super::rbac`]).
//!
//! A local "yes" is RBAC's own answer over the objects nac has seen: the same subjects, verbs, API groups,
//! resources (`*`, `resource/subresource`, `*/subresource`) and resource names; aggregated ClusterRoles are read
//! as stored, with the rules the controller manager wrote into them, as the API server reads them. A local "no" is
//! final only for requesters no authorizer outside RBAC decides for ([`decided_outside_rbac`]); for the others
//! nac asks the API server. What nac has not seen yet (a change in flight on its watch) is the bound already stated
//! for cached answers: a right revoked applies once the change reaches nac's watch.

use super::{Question, Requester};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use kube::runtime::reflector::{store::Writer, ObjectRef, Store};
use kube::runtime::watcher::Event;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Groups whose members' requests are allowed outside RBAC: `system:masters` by the API server before any
/// authorizer, `system:nodes` by the Node authorizer.
const DECIDED_ELSEWHERE: [&str; 2] = ["system:masters", "system:nodes"];

/// Whether an authorizer other than RBAC may allow `who` something RBAC refuses (then a local "no" is asked again).
pub fn decided_outside_rbac(who: &Requester) -> bool {
    who.groups.iter().any(|g| DECIDED_ELSEWHERE.contains(&g.as_str()))
}

/// The cluster's RBAC objects as nac's watches last saw them.
#[derive(Clone)]
pub struct Rules {
    pub roles: Store<Role>,
    pub role_bindings: ByNamespace<RoleBinding>,
    pub cluster_roles: Store<ClusterRole>,
    pub cluster_role_bindings: Store<ClusterRoleBinding>,
}

/// What the watches write into [`Rules`].
pub struct Writers {
    pub roles: Writer<Role>,
    pub role_bindings: ByNamespaceWriter<RoleBinding>,
    pub cluster_roles: Writer<ClusterRole>,
    pub cluster_role_bindings: Writer<ClusterRoleBinding>,
}

impl Rules {
    /// Empty stores and the writers that fill them.
    pub fn new() -> (Rules, Writers) {
        let w = Writers {
            roles: Writer::default(),
            role_bindings: ByNamespaceWriter::default(),
            cluster_roles: Writer::default(),
            cluster_role_bindings: Writer::default(),
        };
        let r = Rules {
            roles: w.roles.as_reader(),
            role_bindings: w.role_bindings.as_reader(),
            cluster_roles: w.cluster_roles.as_reader(),
            cluster_role_bindings: w.cluster_role_bindings.as_reader(),
        };
        (r, w)
    }

    /// Every rule that applies to `who` in `namespace` (cluster-wide ones for an empty namespace): their
    /// ClusterRoleBindings' and, in the namespace, their RoleBindings'. A binding whose role does not exist
    /// grants nothing.
    pub fn rules_for(&self, who: &Requester, namespace: &str) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        let cluster_role = |name: &str| {
            self.cluster_roles
                .get(&ObjectRef::new(name))
                .map(|r| r.rules.clone().unwrap_or_default())
        };
        for b in self.cluster_role_bindings.state() {
            if b.role_ref.kind == "ClusterRole" && binds(b.subjects.as_deref(), who, "") {
                out.extend(cluster_role(&b.role_ref.name).unwrap_or_default());
            }
        }
        if namespace.is_empty() {
            return out;
        }
        for b in self.role_bindings.in_namespace(namespace) {
            if !binds(b.subjects.as_deref(), who, namespace) {
                continue;
            }
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => cluster_role(&b.role_ref.name),
                "Role" => self
                    .roles
                    .get(&ObjectRef::new(&b.role_ref.name).within(namespace))
                    .map(|r| r.rules.clone().unwrap_or_default()),
                _ => None,
            };
            out.extend(rules.unwrap_or_default());
        }
        out
    }
}

/// Namespaced objects by namespace, then name: a rights question reads its namespace's RoleBindings, not every
/// RoleBinding of the cluster (2,000 at 1,000 tenants, for each question). kube's store is keyed by name alone.
pub struct ByNamespace<K>(Arc<RwLock<Namespaces<K>>>);

type Namespaces<K> = HashMap<String, HashMap<String, Arc<K>>>;

impl<K> Clone for ByNamespace<K> {
    fn clone(&self) -> Self {
        ByNamespace(self.0.clone())
    }
}

impl<K> ByNamespace<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Namespaces<K>> {
        // A writer that panicked left a whole map behind (each change is one insert or remove).
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The objects of one namespace.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.read()
            .get(namespace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The first object, in no order, that `f` accepts.
    pub fn find(&self, f: impl Fn(&K) -> bool) -> Option<Arc<K>> {
        self.read().values().flat_map(|m| m.values()).find(|o| f(o)).cloned()
    }

    pub fn len(&self) -> usize {
        self.read().values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Fills a [`ByNamespace`] from a watch as kube's reflector fills its store: a relist is gathered aside and
/// replaces the whole store once complete.
pub struct ByNamespaceWriter<K> {
    store: ByNamespace<K>,
    relist: Option<Namespaces<K>>,
}

impl<K> Default for ByNamespaceWriter<K> {
    fn default() -> Self {
        ByNamespaceWriter {
            store: ByNamespace(Arc::default()),
            relist: None,
        }
    }
}

impl<K: kube::Resource + Clone> ByNamespaceWriter<K> {
    pub fn as_reader(&self) -> ByNamespace<K> {
        self.store.clone()
    }

    pub fn apply_watcher_event(&mut self, event: &Event<K>) {
        let key = |o: &K| {
            let m = o.meta();
            (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
            )
        };
        let insert = |map: &mut Namespaces<K>, o: &K| {
            let (ns, name) = key(o);
            map.entry(ns).or_default().insert(name, Arc::new(o.clone()));
        };
        // Readers wait only for a change of what they read: a relist is gathered without the lock.
        let live = || self.store.0.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(o) => insert(&mut live(), o),
            Event::Delete(o) => {
                let (ns, name) = key(o);
                let mut live = live();
                if let Some(m) = live.get_mut(&ns) {
                    m.remove(&name);
                    if m.is_empty() {
                        live.remove(&ns);
                    }
                }
            }
            Event::Init => self.relist = Some(HashMap::new()),
            Event::InitApply(o) => insert(self.relist.get_or_insert_with(HashMap::new), o),
            Event::InitDone => *live() = self.relist.take().unwrap_or_default(),
        }
    }
}

/// Whether a binding in `namespace` ("" for a ClusterRoleBinding) with these subjects binds `who`.
fn binds(subjects: Option<&[Subject]>, who: &Requester, namespace: &str) -> bool {
    subjects.unwrap_or_default().iter().any(|s| applies(s, who, namespace))
}

/// One subject against a user, as the RBAC authorizer matches them: a ServiceAccount without a namespace is
/// the binding's namespace's (none for a ClusterRoleBinding: it matches nobody).
fn applies(s: &Subject, who: &Requester, namespace: &str) -> bool {
    match s.kind.as_str() {
        "User" => who.username == s.name,
        "Group" => who.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(namespace);
            !ns.is_empty() && who.username == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}

/// Whether one rule allows the question.
pub fn allows(rule: &PolicyRule, q: &Question) -> bool {
    let has = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    let resource_matches = || {
        let combined = if q.subresource.is_empty() {
            q.resource.clone()
        } else {
            format!("{}/{}", q.resource, q.subresource)
        };
        rule.resources.as_deref().unwrap_or_default().iter().any(|r| {
            r == "*"
                || *r == combined
                || (!q.subresource.is_empty() && r.strip_prefix("*/") == Some(q.subresource.as_str()))
        })
    };
    let name_matches = || match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => names.contains(&q.name),
    };
    has(&rule.verbs, &q.verb)
        && has(rule.api_groups.as_deref().unwrap_or_default(), &q.group)
        && resource_matches()
        && name_matches()
}

/// RBAC's answer to the question over these rules.
pub fn any_allows(rules: &[PolicyRule], q: &Question) -> bool {
    rules.iter().any(|r| allows(r, q))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::rbac::v1::RoleRef;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| Some(l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: if names.is_empty() { None } else { v(names) },
            non_resource_urls: None,
        }
    }

    fn q(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Question {
        Question {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: "team-a".into(),
        }
    }

    #[test]
    fn a_rule_matches_as_rbac_does() {
        let secrets = rule(&["get", "list"], &[""], &["secrets"], &[]);
        assert!(allows(&secrets, &q("list", "", "secrets", "", "")));
        assert!(!allows(&secrets, &q("watch", "", "secrets", "", "")));
        assert!(!allows(&secrets, &q("list", "apps", "secrets", "", "")));
        assert!(
            !allows(&secrets, &q("list", "", "secrets", "status", "")),
            "a subresource is named"
        );
        let every = rule(&["*"], &["*"], &["*"], &[]);
        assert!(allows(&every, &q("list", "*", "*", "", "")));
        assert!(allows(&every, &q("create", "apps", "deployments", "scale", "x")));
        // `*` asked is matched only by `*` granted.
        assert!(!allows(&secrets, &q("list", "*", "*", "", "")));
        let scale = rule(&["update"], &["apps"], &["*/scale"], &[]);
        assert!(allows(&scale, &q("update", "apps", "deployments", "scale", "")));
        assert!(!allows(&scale, &q("update", "apps", "deployments", "", "")));
        let logs = rule(&["get"], &[""], &["pods/log"], &[]);
        assert!(allows(&logs, &q("get", "", "pods", "log", "p")));
        assert!(!allows(&logs, &q("get", "", "pods", "", "p")));
        let named = rule(&["get"], &["rbac.authorization.k8s.io"], &["clusterroles"], &["admin"]);
        assert!(allows(
            &named,
            &q("get", "rbac.authorization.k8s.io", "clusterroles", "", "admin")
        ));
        assert!(!allows(
            &named,
            &q("get", "rbac.authorization.k8s.io", "clusterroles", "", "edit")
        ));
        assert!(!allows(
            &named,
            &q("list", "rbac.authorization.k8s.io", "clusterroles", "", "")
        ));
        let no_groups = PolicyRule {
            api_groups: None,
            ..secrets.clone()
        };
        assert!(!allows(&no_groups, &q("list", "", "secrets", "", "")));
    }

    fn who(name: &str, groups: &[&str]) -> Requester {
        Requester {
            username: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn subject(kind: &str, name: &str, namespace: Option<&str>) -> Subject {
        Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(str::to_string),
            api_group: None,
        }
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts() {
        let alice = who("alice", &["devs", "system:authenticated"]);
        assert!(applies(&subject("User", "alice", None), &alice, ""));
        assert!(!applies(&subject("User", "bob", None), &alice, ""));
        assert!(applies(&subject("Group", "devs", None), &alice, ""));
        assert!(!applies(&subject("Group", "alice", None), &alice, ""));
        let sa = who("system:serviceaccount:team-a:builder", &[]);
        assert!(applies(&subject("ServiceAccount", "builder", Some("team-a")), &sa, ""));
        assert!(applies(&subject("ServiceAccount", "builder", None), &sa, "team-a"));
        assert!(!applies(&subject("ServiceAccount", "builder", None), &sa, ""));
        assert!(!applies(
            &subject("ServiceAccount", "builder", Some("team-b")),
            &sa,
            "team-a"
        ));
        assert!(!applies(&subject("Robot", "alice", None), &alice, ""));
        assert!(decided_outside_rbac(&who("root", &["system:masters"])));
        assert!(!decided_outside_rbac(&alice));
    }

    fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(str::to_string),
            ..Default::default()
        }
    }

    fn role_ref(kind: &str, name: &str) -> RoleRef {
        RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn bindings_reach_their_namespace_or_everywhere() {
        let (rules, mut w) = Rules::new();
        w.cluster_roles.apply_watcher_event(&Event::Apply(ClusterRole {
            metadata: meta("reader", None),
            rules: Some(vec![rule(&["list"], &[""], &["configmaps"], &[])]),
            ..Default::default()
        }));
        w.roles.apply_watcher_event(&Event::Apply(Role {
            metadata: meta("secrets", Some("team-a")),
            rules: Some(vec![rule(&["list"], &[""], &["secrets"], &[])]),
        }));
        for (name, ns, kind, role) in [
            ("a", "team-a", "Role", "secrets"),
            ("b", "team-b", "ClusterRole", "reader"),
            ("c", "team-a", "Role", "missing"),
        ] {
            w.role_bindings.apply_watcher_event(&Event::Apply(RoleBinding {
                metadata: meta(name, Some(ns)),
                role_ref: role_ref(kind, role),
                subjects: Some(vec![subject("User", "alice", None)]),
            }));
        }
        let alice = who("alice", &[]);
        let can = |ns: &str, resource: &str| {
            let mut q = q("list", "", resource, "", "");
            q.namespace = ns.into();
            any_allows(&rules.rules_for(&alice, ns), &q)
        };
        assert!(can("team-a", "secrets") && !can("team-a", "configmaps"));
        assert!(can("team-b", "configmaps") && !can("team-b", "secrets"));
        assert!(!can("team-c", "configmaps"));
        w.cluster_role_bindings
            .apply_watcher_event(&Event::Apply(ClusterRoleBinding {
                metadata: meta("everywhere", None),
                role_ref: role_ref("ClusterRole", "reader"),
                subjects: Some(vec![subject("Group", "system:authenticated", None)]),
            }));
        assert!(!can("team-c", "configmaps"), "alice is not in the group");
        let bob = who("bob", &["system:authenticated"]);
        let mut q = q("list", "", "configmaps", "", "");
        q.namespace = "team-c".into();
        assert!(any_allows(&rules.rules_for(&bob, "team-c"), &q));
    }

    #[test]
    fn bindings_by_namespace_follow_a_relist_as_kubes_store_does() {
        let mut w = ByNamespaceWriter::<RoleBinding>::default();
        let store = w.as_reader();
        let rb = |name: &str, ns: &str| RoleBinding {
            metadata: meta(name, Some(ns)),
            role_ref: role_ref("ClusterRole", "edit"),
            subjects: None,
        };
        let names = |ns: &str| {
            let mut n: Vec<_> = store
                .in_namespace(ns)
                .iter()
                .map(|b| b.metadata.name.clone().unwrap())
                .collect();
            n.sort();
            n
        };
        for (name, ns) in [("a", "team-a"), ("b", "team-a"), ("c", "team-b")] {
            w.apply_watcher_event(&Event::Apply(rb(name, ns)));
        }
        assert_eq!(
            (names("team-a"), names("team-b"), store.len()),
            (vec!["a".into(), "b".into()], vec!["c".into()], 3)
        );
        w.apply_watcher_event(&Event::Delete(rb("a", "team-a")));
        w.apply_watcher_event(&Event::Delete(rb("c", "team-b")));
        assert_eq!((names("team-a"), store.len()), (vec!["b".to_string()], 1));
        // A relist is seen whole once done: until then the old objects answer.
        w.apply_watcher_event(&Event::Init);
        w.apply_watcher_event(&Event::InitApply(rb("d", "team-c")));
        assert_eq!(names("team-a"), vec!["b".to_string()]);
        assert!(names("team-c").is_empty());
        w.apply_watcher_event(&Event::InitDone);
        assert!(names("team-a").is_empty());
        assert_eq!((names("team-c"), store.len()), (vec!["d".to_string()], 1));
        assert!(store.find(|b| b.metadata.name.as_deref() == Some("d")).is_some());
    }
}
