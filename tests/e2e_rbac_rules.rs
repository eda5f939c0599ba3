//! End to end: rights answered from the RBAC objects (`rights.authorizers: rbac`) are the API server's answers.
//! Roles, ClusterRoles (one aggregated by the controller manager) and bindings of every shape are generated, nac's
//! watches fill its stores, and each of many generated questions is asked both of the local rules and of the
//! API server (a SubjectAccessReview): they must agree on every one. And what a backup leaves out for want of
//! rights is told as it matters: the kinds holding objects in the requester's namespace first.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nac::rights::{rbac, rules, Question, Requester};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// A small deterministic generator (xorshift), so a failure names a case that can be made again.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
    fn some<'a>(&mut self, from: &[&'a str], max: u64) -> Vec<&'a str> {
        let n = 1 + self.next() % max;
        let mut out: Vec<&str> = (0..n).map(|_| self.pick(from)).collect();
        out.sort();
        out.dedup();
        out
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
}

const VERBS: [&str; 6] = ["get", "list", "watch", "create", "delete", "*"];
const GROUPS: [&str; 4] = ["", "apps", "batch", "*"];
const RESOURCES: [&str; 9] = [
    "pods",
    "secrets",
    "deployments",
    "jobs",
    "pods/log",
    "deployments/scale",
    "*/scale",
    "*",
    "configmaps",
];
const NAMES: [&str; 2] = ["x", "y"];

fn gen_rules(g: &mut Gen) -> Value {
    let n = 1 + g.next() % 3;
    (0..n)
        .map(|_| {
            let mut r = json!({
                "verbs": g.some(&VERBS, 2),
                "apiGroups": g.some(&GROUPS, 2),
                "resources": g.some(&RESOURCES, 3),
            });
            if g.chance(4) {
                r["resourceNames"] = json!(g.some(&NAMES, 2));
            }
            r
        })
        .collect::<Vec<_>>()
        .into()
}

#[tokio::test]
async fn local_rbac_answers_are_the_api_servers() {
    let cluster = Cluster::load();
    let admin = cluster.admin().await;
    let tag = unique_ns("rbacdiff");
    let (ns_a, ns_b) = (format!("{tag}-a"), format!("{tag}-b"));
    for ns in [&ns_a, &ns_b] {
        ensure_namespace(&admin, ns).await;
    }
    let users: Vec<String> = (1..=3).map(|i| format!("{tag}-u{i}")).collect();
    let groups: Vec<String> = (1..=2).map(|i| format!("{tag}-g{i}")).collect();
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let pp = PostParams::default();
    let crs: Api<ClusterRole> = Api::all(admin.clone());
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());

    // ClusterRoles: generated ones, two carrying the aggregation label, and one aggregating them.
    let mut cluster_roles = Vec::new();
    for i in 0..6 {
        let name = format!("{tag}-cr{i}");
        let mut cr = json!({"metadata": {"name": name}, "rules": gen_rules(&mut g)});
        if i < 2 {
            cr["metadata"]["labels"] = json!({ "nac-test/aggregate-to": tag });
        }
        crs.create(&pp, &serde_json::from_value(cr).unwrap()).await.unwrap();
        cluster_roles.push(name);
    }
    let aggregated = format!("{tag}-aggregated");
    let cr = json!({"metadata": {"name": aggregated},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"nac-test/aggregate-to": tag}}]}});
    crs.create(&pp, &serde_json::from_value(cr).unwrap()).await.unwrap();
    eventually(
        Duration::from_secs(60),
        "the controller manager aggregates the ClusterRole",
        || {
            let crs = crs.clone();
            let name = aggregated.clone();
            async move {
                let r = crs.get(&name).await.ok()?;
                r.rules.filter(|r| !r.is_empty()).map(|_| ())
            }
        },
    )
    .await;
    cluster_roles.push(aggregated.clone());
    cluster_roles.push(format!("{tag}-missing"));

    // Roles in each namespace, and bindings of every shape.
    let subject = |g: &mut Gen| -> Value {
        match g.next() % 5 {
            0 | 1 => {
                json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": users[(g.next() % 3) as usize]})
            }
            2 => {
                json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": groups[(g.next() % 2) as usize]})
            }
            // A ServiceAccount without a namespace is the RoleBinding's namespace's.
            3 => match g.next() % 3 {
                0 => json!({"kind": "ServiceAccount", "name": "sa", "namespace": &ns_a}),
                1 => json!({"kind": "ServiceAccount", "name": "sa", "namespace": &ns_b}),
                _ => json!({"kind": "ServiceAccount", "name": "sa"}),
            },
            _ => json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:serviceaccounts"}),
        }
    };
    for ns in [&ns_a, &ns_b] {
        let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
        let rbs: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
        for i in 0..4 {
            let r = json!({"metadata": {"name": format!("role{i}")}, "rules": gen_rules(&mut g)});
            roles.create(&pp, &serde_json::from_value(r).unwrap()).await.unwrap();
        }
        for i in 0..10 {
            let role_ref = if g.chance(2) {
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("role{}", g.next() % 5)})
            } else {
                let name = &cluster_roles[(g.next() % cluster_roles.len() as u64) as usize];
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name})
            };
            let subjects: Vec<Value> = (0..1 + g.next() % 2).map(|_| subject(&mut g)).collect();
            let b = json!({"metadata": {"name": format!("rb{i}")}, "roleRef": role_ref, "subjects": subjects});
            rbs.create(&pp, &serde_json::from_value(b).unwrap()).await.unwrap();
        }
    }
    // ClusterRoleBindings only to this test's own users and groups (others' tests share the cluster).
    for i in 0..3 {
        let name = &cluster_roles[(g.next() % cluster_roles.len() as u64) as usize];
        let s = if g.chance(2) {
            json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": users[i]})
        } else {
            json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": groups[i % 2]})
        };
        let b = json!({"metadata": {"name": format!("{tag}-crb{i}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [s]});
        crbs.create(&pp, &serde_json::from_value(b).unwrap()).await.unwrap();
    }

    // nac's watches fill the stores; wait until they hold what was made, then until the API server's own
    // authorizer has caught up (it reads RBAC through a watch of its own).
    let (local, writers) = rules::Rules::new();
    let epochs = Arc::new(rbac::Epochs::default());
    let watches = tokio::spawn(rbac::watch_rules(admin.clone(), epochs.clone(), writers));
    eventually(
        Duration::from_secs(60),
        "nac's stores hold the test's RBAC objects",
        || {
            let (local, epochs, ns_b, aggregated) = (local.clone(), epochs.clone(), ns_b.clone(), aggregated.clone());
            async move {
                let bound = local.role_bindings.find(|b| {
                    b.metadata.namespace.as_deref() == Some(&ns_b) && b.metadata.name.as_deref() == Some("rb9")
                });
                let agg = local.cluster_roles.find(|r| {
                    r.metadata.name.as_deref() == Some(&aggregated) && r.rules.as_ref().is_some_and(|r| !r.is_empty())
                });
                (epochs.live() && bound.is_some() && agg.is_some() && local.cluster_role_bindings.len() >= 3)
                    .then_some(())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Requesters: the users with and without the groups, and the ServiceAccounts.
    let mut who: Vec<Requester> = Vec::new();
    for (i, u) in users.iter().enumerate() {
        for gs in [vec![], vec![groups[i % 2].clone()], groups.clone()] {
            let mut all = gs;
            all.push("system:authenticated".into());
            who.push(Requester {
                username: u.clone(),
                groups: all,
                ..Default::default()
            });
        }
    }
    for ns in [&ns_a, &ns_b] {
        who.push(Requester {
            username: format!("system:serviceaccount:{ns}:sa"),
            groups: vec!["system:serviceaccounts".into(), "system:authenticated".into()],
            ..Default::default()
        });
    }
    let mut cases = Vec::new();
    for _ in 0..1500 {
        let r = &who[(g.next() % who.len() as u64) as usize];
        let (resource, subresource) = match g
            .pick(&[
                "pods",
                "secrets",
                "deployments",
                "jobs",
                "configmaps",
                "pods/log",
                "deployments/scale",
                "jobs/status",
                "*",
            ])
            .split_once('/')
        {
            Some((r, s)) => (r.to_string(), s.to_string()),
            None => (
                g.pick(&["pods", "secrets", "deployments", "jobs", "configmaps", "*"])
                    .to_string(),
                String::new(),
            ),
        };
        let q = Question {
            verb: g.pick(&["get", "list", "watch", "create", "delete", "patch"]).into(),
            group: g.pick(&["", "apps", "batch", "*"]).into(),
            resource,
            subresource,
            name: g.pick(&["", "", "x", "z"]).into(),
            namespace: g.pick(&[&ns_a, &ns_b, &ns_b, ""]).to_string(),
        };
        cases.push((r.clone(), q));
    }
    let sars: Api<SubjectAccessReview> = Api::all(admin.clone());
    let api_answers = futures::future::join_all(cases.iter().map(|(r, q)| {
        let sars = sars.clone();
        async move {
            let review = q.review_for(r);
            let s = sars
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap();
            s.allowed && !s.denied.unwrap_or(false)
        }
    }))
    .await;
    let mut disagree = Vec::new();
    let mut yes = 0;
    for ((r, q), api) in cases.iter().zip(&api_answers) {
        let mine = rules::any_allows(&local.rules_for(r, &q.namespace), q);
        yes += usize::from(*api);
        if mine != *api {
            disagree.push(format!(
                "{} {:?} {} {}: api {api}, local {mine}",
                r.username,
                r.groups,
                q.verb,
                q.target()
            ));
        }
    }
    watches.abort();
    // Both answers are common, so the comparison means something either way.
    assert!(
        yes > 150 && yes < 1350,
        "{yes} of 1500 allowed: the generated cases are one-sided"
    );
    assert!(
        disagree.is_empty(),
        "{} of 1500 disagree:\n{}",
        disagree.len(),
        disagree.join("\n")
    );

    for ns in [&ns_a, &ns_b] {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
            .delete(ns, &DeleteParams::default())
            .await
            .unwrap();
    }
    for cr in crs.list(&ListParams::default()).await.unwrap() {
        let name = cr.metadata.name.unwrap_or_default();
        if name.starts_with(&tag) {
            crs.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    }
    for i in 0..3 {
        crbs.delete(&format!("{tag}-crb{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// The value of a counter in nac's metrics.
async fn counter(nac: &NacProcess, name: &str) -> u64 {
    let text = nac.metrics_text().await;
    let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
    let line = line.unwrap_or_else(|| panic!("no {name} in nac's metrics:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Creates `n` NonAdminBackups at once as `user` in `ns`; their left-out warnings.
async fn left_out_warnings(user: &kube::Client, ns: &str, tag: &str, n: usize) -> Vec<String> {
    let path = format!("/apis/oadp.openshift.io/v1alpha1/namespaces/{ns}/nonadminbackups");
    let creates = (0..n).map(|i| {
        let body = json!({"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
                          "metadata": {"name": format!("{tag}-{i}")}, "spec": {"backupSpec": {}}});
        let path = path.clone();
        async move { create_raw(user, &path, &body).await }
    });
    futures::future::join_all(creates)
        .await
        .into_iter()
        .map(|(status, body, warnings)| {
            assert_eq!(status, 201, "{body}");
            let w = warnings.into_iter().find(|w| w.contains("left out of the backup"));
            let w = w.unwrap_or_else(|| panic!("no left-out warning for {body}"));
            // As the API server sends it: `299 - "<text>"`.
            w.trim_start_matches("299 - \"").trim_end_matches('"').to_string()
        })
        .collect()
}

/// The left-out warning of one more create in `ns` once nac could tell which kinds hold objects there (the
/// lookups a create waited for past its budget go on without it).
async fn settled_warning(user: &kube::Client, ns: &str, tag: &str) -> String {
    let mut n = 0;
    eventually(
        Duration::from_secs(30),
        "a warning telling which kinds hold objects",
        || {
            n += 1;
            let name = format!("{tag}-{n}");
            async move {
                let w = left_out_warnings(user, ns, &name, 1).await.remove(0);
                (!w.contains("nac could not tell")).then_some(w)
            }
        },
    )
    .await
}

/// `(N, M)` of a warning saying `N hold(s) objects there; M hold none`.
fn counts(warning: &str) -> (usize, usize) {
    let number_before = |what: &str| -> usize {
        let at = warning.find(what).unwrap_or_else(|| panic!("no '{what}' in {warning}"));
        let digits: String = warning[..at].chars().rev().take_while(char::is_ascii_digit).collect();
        digits.chars().rev().collect::<String>().parse().unwrap()
    };
    let holding = if warning.contains(" holds objects there") {
        number_before(" holds objects there")
    } else {
        number_before(" hold objects there")
    };
    let none = if warning.contains(" holds none") {
        number_before(" holds none")
    } else {
        number_before(" hold none")
    };
    (holding, none)
}

/// A user with Kubernetes' `view` role (no Secrets, no RBAC objects, no Velero kinds) and nac's editor role in two
/// namespaces, one holding a Secret. The warning there names the kinds that hold objects first (the user's own
/// RoleBindings and the Secret, before Velero's kinds, which sort first but hold nothing), from one metadata list
/// per left-out kind however many creates arrive at once; the other namespace is looked at on its own.
#[tokio::test]
async fn the_left_out_warning_names_first_the_kinds_holding_objects_in_the_namespace() {
    let env = Env::start(
        common::STRICT_POLICY,
        NacOptions {
            controllers: false,
            ..NacOptions::default()
        },
    )
    .await;
    let admin = env.cluster.admin().await;
    let (with, without) = (unique_ns("occupied"), unique_ns("unoccupied"));
    let name = format!("user-{with}");
    install().editor_role(&admin).await;
    for ns in [&with, &without] {
        ensure_namespace(&admin, ns).await;
        bind_editor(&admin, ns, &name).await;
        bind(&admin, ns, &name, "view").await;
    }
    create_app_secret(&admin, &with).await;
    let user = env.cluster.as_user(&name).await;
    let lists = "nac_rights_occupancy_lists_total";
    let unknown = "nac could not tell";

    // Eight creates at once. Each waits at most 1 s for the lookups; past that (a loaded API server) its warning
    // says nac could not tell, and the lookups go on for the next create.
    let before = counter(&env.nac, lists).await;
    let burst = left_out_warnings(&user, &with, "burst", 8).await;
    let settled = settled_warning(&user, &with, "settled").await;
    assert!(
        settled.starts_with("spec.backupSpec: rolebindings.rbac.authorization.k8s.io, secrets, "),
        "{settled}"
    );
    let (holding, none) = counts(&settled);
    assert_eq!(holding, 2, "{settled}");
    assert!(
        settled.contains("backups.velero.io") && !settled.contains("may not look"),
        "{settled}"
    );
    assert!(burst.iter().all(|w| *w == settled || w.contains(unknown)), "{burst:#?}");
    // Every left-out kind listed once for all the creates.
    let after = counter(&env.nac, lists).await;
    assert_eq!(after - before, (holding + none) as u64, "{settled}");

    // More creates while the answers are kept: no list.
    let again = left_out_warnings(&user, &with, "again", 4).await;
    assert!(again.iter().all(|w| *w == settled), "{again:#?}");
    assert_eq!(counter(&env.nac, lists).await, after);

    // The other namespace: its own lists, and its Secrets (none) are counted, not named first.
    let other = settled_warning(&user, &without, "other").await;
    assert!(
        other.starts_with("spec.backupSpec: rolebindings.rbac.authorization.k8s.io, ")
            && !other.contains("rolebindings.rbac.authorization.k8s.io, secrets"),
        "{other}"
    );
    assert_eq!(counts(&other), (1, none + 1), "{other}");
    assert_eq!(counter(&env.nac, lists).await, after + (holding + none) as u64);

    for ns in [&with, &without] {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
            .delete(ns, &DeleteParams::default())
            .await
            .unwrap();
    }
}
