//! When cached answers about rights stop being valid: nac watches the four RBAC kinds (metadata only, or whole
//! objects when it answers from them: [`super::rules`]) and counts their changes, so an answer is reused until something that could change it changes.
//!
//! The invalidation is conservative. A Role or RoleBinding can only change rights in its own namespace: its
//! change drops every answer about that namespace (whoever it binds: a binding's old subjects are not in a
//! metadata event). A ClusterRole or ClusterRoleBinding can change rights anywhere (a ClusterRole is bound in
//! namespaces by RoleBindings; aggregation rewrites `edit` and `admin` when a CRD's role appears): its change
//! drops every answer. A failed watch drops every answer, and until its next complete list answers last only
//! [`super::CACHE_TTL`], as without watches.
//!
//! The API server's RBAC authorizer learns of a change through a watch of its own, which may lag nac's: an answer
//! asked right after nac saw a change could still be the old one. Every change therefore stales answers twice:
//! when nac sees it, and [`SETTLE`] later. A revoked right is applied to the next backup within [`SETTLE`] of the
//! change reaching nac (in practice at once).

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long after a change it is staled again (the API server's authorizer has caught up by then).
pub const SETTLE: Duration = Duration::from_secs(2);

/// Which RBAC changes an answer was given under: equal stamps, no change that could reach it since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    all: u64,
    namespace: u64,
}

/// Change counters of the cluster's RBAC objects, and whether they are being watched.
#[derive(Default)]
pub struct Epochs {
    /// Changes that can reach every namespace (cluster-scoped objects, failed or restarted watches).
    all: AtomicU64,
    /// Changes of each namespace's Roles and RoleBindings (absent: none since nac started).
    namespaces: Mutex<HashMap<String, u64>>,
    /// Each of the four watches has listed and not failed since.
    live: [AtomicBool; 4],
}

impl Epochs {
    /// The stamp answers about `namespace` are given under now. Taken before a question is sent: a change while
    /// it is answered makes the answer stale at once.
    pub fn stamp(&self, namespace: &str) -> Stamp {
        let namespace = self
            .namespaces
            .lock()
            .expect("rbac epochs")
            .get(namespace)
            .copied()
            .unwrap_or(0);
        Stamp {
            all: self.all.load(Ordering::Acquire),
            namespace,
        }
    }

    /// Whether every watch is live: then no change goes unseen.
    pub fn live(&self) -> bool {
        self.live.iter().all(|l| l.load(Ordering::Acquire))
    }

    /// A Role or RoleBinding in `namespace` changed (an empty namespace: a cluster-scoped object).
    pub fn changed(&self, namespace: Option<&str>) {
        match namespace.filter(|n| !n.is_empty()) {
            Some(ns) => {
                *self
                    .namespaces
                    .lock()
                    .expect("rbac epochs")
                    .entry(ns.to_string())
                    .or_default() += 1
            }
            None => self.changed_all(),
        }
    }

    pub fn changed_all(&self) {
        self.all.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn set_live(&self, watch: usize, live: bool) {
        self.live[watch].store(live, Ordering::Release);
    }
}

/// Runs the four watches until the process ends (spawned next to the webhooks when nac has a cluster).
pub async fn watch(client: kube::Client, epochs: Arc<Epochs>) {
    tokio::join!(
        watch_one(
            Api::<PartialObjectMeta<Role>>::all(client.clone()),
            "Role",
            0,
            epochs.clone(),
            |_| {}
        ),
        watch_one(
            Api::<PartialObjectMeta<RoleBinding>>::all(client.clone()),
            "RoleBinding",
            1,
            epochs.clone(),
            |_| {}
        ),
        watch_one(
            Api::<PartialObjectMeta<ClusterRole>>::all(client.clone()),
            "ClusterRole",
            2,
            epochs.clone(),
            |_| {}
        ),
        watch_one(
            Api::<PartialObjectMeta<ClusterRoleBinding>>::all(client),
            "ClusterRoleBinding",
            3,
            epochs,
            |_| {}
        ),
    );
}

/// The same watches of whole objects, which also fill the stores rights are answered from (`rights.authorizers:
/// rbac`, see [`super::rules`]). A store is written before the change stales answers, so an answer stamped
/// before the change is never kept with the rules after it.
pub async fn watch_rules(client: kube::Client, epochs: Arc<Epochs>, w: super::rules::Writers) {
    let super::rules::Writers {
        mut roles,
        mut role_bindings,
        mut cluster_roles,
        mut cluster_role_bindings,
    } = w;
    tokio::join!(
        watch_one(
            Api::<Role>::all(client.clone()),
            "Role",
            0,
            epochs.clone(),
            move |e: &Event<Role>| roles.apply_watcher_event(e)
        ),
        watch_one(
            Api::<RoleBinding>::all(client.clone()),
            "RoleBinding",
            1,
            epochs.clone(),
            move |e: &Event<RoleBinding>| role_bindings.apply_watcher_event(e)
        ),
        watch_one(
            Api::<ClusterRole>::all(client.clone()),
            "ClusterRole",
            2,
            epochs.clone(),
            move |e: &Event<ClusterRole>| cluster_roles.apply_watcher_event(e)
        ),
        watch_one(
            Api::<ClusterRoleBinding>::all(client),
            "ClusterRoleBinding",
            3,
            epochs,
            move |e: &Event<ClusterRoleBinding>| cluster_role_bindings.apply_watcher_event(e)
        ),
    );
}

/// What the rules stores keep of an RBAC object for the process's life: rules, subjects, role reference, and of
/// the metadata what identifies it (managedFields, labels and annotations go; `tests/store_memory.rs` counts it).
pub fn rules_store_copy<K: kube::Resource>(o: &mut K) {
    let m = o.meta_mut();
    (m.managed_fields, m.annotations, m.labels) = (None, None, None);
}

/// One kind's watch, each event given to `feed` first. On an error the watch is started again from a fresh list (kube's watcher would
/// resume from the last version without one, and nothing would say when it is live again), after a pause that
/// doubles up to 30 s.
async fn watch_one<K>(api: Api<K>, kind: &str, index: usize, epochs: Arc<Epochs>, mut feed: impl FnMut(&Event<K>))
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut pause = Duration::from_secs(1);
    loop {
        let mut events = watcher::watcher(api.clone(), watcher::Config::default())
            .modify(rules_store_copy)
            .boxed();
        while let Some(event) = events.next().await {
            if let Ok(e) = &event {
                feed(e);
            }
            match event {
                Ok(Event::Apply(o)) | Ok(Event::Delete(o)) => {
                    let namespace = o.meta().namespace.clone();
                    epochs.changed(namespace.as_deref());
                    let epochs = epochs.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(SETTLE).await;
                        epochs.changed(namespace.as_deref());
                    });
                }
                Ok(Event::Init) | Ok(Event::InitApply(_)) => {}
                Ok(Event::InitDone) => {
                    // Whatever changed while the watch was down is in this list: everything is asked again.
                    epochs.changed_all();
                    epochs.set_live(index, true);
                    let epochs = epochs.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(SETTLE).await;
                        epochs.changed_all();
                    });
                    pause = Duration::from_secs(1);
                }
                Err(e) => {
                    epochs.set_live(index, false);
                    epochs.changed_all();
                    tracing::warn!(kind = %kind, error = %e, "RBAC watch failed: rights answers are kept 10 s until it lists again");
                    break;
                }
            }
        }
        epochs.set_live(index, false);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_stales_its_namespace_or_everything() {
        let e = Epochs::default();
        let (a, b) = (e.stamp("team-a"), e.stamp("team-b"));
        e.changed(Some("team-a"));
        assert_ne!(e.stamp("team-a"), a);
        assert_eq!(e.stamp("team-b"), b);
        let (a, b) = (e.stamp("team-a"), e.stamp("team-b"));
        e.changed(None);
        assert_ne!(e.stamp("team-a"), a);
        assert_ne!(e.stamp("team-b"), b);
        assert!(!e.live(), "not live before every watch has listed");
        for w in 0..4 {
            e.set_live(w, true);
        }
        assert!(e.live());
        e.set_live(2, false);
        assert!(!e.live());
    }
}
