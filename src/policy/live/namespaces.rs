//! The labels of every namespace, followed live by a metadata-only watch: tiers select namespaces by them, so a
//! relabelled namespace gets its new tier at the next request, and the schedules there are told (`subscribe`).

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast;

pub type Labels = BTreeMap<String, String>;

/// Every namespace's labels, as the last watch event left them.
pub struct NamespaceLabels {
    state: RwLock<State>,
    /// The names of namespaces whose labels changed (or that went).
    changed: broadcast::Sender<String>,
}

#[derive(Default)]
struct State {
    labels: HashMap<String, Arc<Labels>>,
    /// Whether the first list has been read: before it, no namespace's labels are known.
    synced: bool,
    /// What a re-list is building, replacing `labels` when it is done.
    relist: Option<HashMap<String, Arc<Labels>>>,
}

impl Default for NamespaceLabels {
    fn default() -> Self {
        NamespaceLabels {
            state: RwLock::default(),
            changed: broadcast::channel(1024).0,
        }
    }
}

impl NamespaceLabels {
    /// The labels of `namespace`; `None` until the first list is read, or when there is no such namespace.
    pub fn labels(&self, namespace: &str) -> Option<Arc<Labels>> {
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        s.labels.get(namespace).cloned()
    }

    /// Every namespace with its labels.
    pub fn all(&self) -> Vec<(String, Arc<Labels>)> {
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        s.labels.iter().map(|(n, l)| (n.clone(), l.clone())).collect()
    }

    pub fn synced(&self) -> bool {
        self.state.read().unwrap_or_else(|e| e.into_inner()).synced
    }

    /// Names of namespaces whose labels change from now on. A receiver that lags behind is told so
    /// (`RecvError::Lagged`): it should treat every namespace as changed.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    /// Records one namespace's labels (`None`: it went).
    pub fn set(&self, namespace: &str, labels: Option<Labels>) {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        let before = s.labels.get(namespace).cloned();
        match labels {
            Some(l) => {
                if before.as_deref() == Some(&l) {
                    return;
                }
                s.labels.insert(namespace.to_string(), Arc::new(l));
            }
            None => {
                if s.labels.remove(namespace).is_none() {
                    return;
                }
            }
        }
        drop(s);
        let _ = self.changed.send(namespace.to_string());
    }

    pub(super) fn apply(&self, ev: Event<kube::core::PartialObjectMeta<Namespace>>) {
        let name_labels = |o: &kube::core::PartialObjectMeta<Namespace>| {
            (
                o.metadata.name.clone().unwrap_or_default(),
                o.metadata.labels.clone().unwrap_or_default(),
            )
        };
        match ev {
            Event::Apply(o) => {
                let (n, l) = name_labels(&o);
                self.set(&n, Some(l));
            }
            Event::Delete(o) => self.set(&name_labels(&o).0, None),
            Event::Init => self.state.write().unwrap_or_else(|e| e.into_inner()).relist = Some(HashMap::new()),
            Event::InitApply(o) => {
                let (n, l) = name_labels(&o);
                let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
                s.relist.get_or_insert_with(HashMap::new).insert(n, Arc::new(l));
            }
            Event::InitDone => {
                let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
                let new = s.relist.take().unwrap_or_default();
                let changed: Vec<String> = new
                    .iter()
                    .filter(|(n, l)| s.labels.get(*n) != Some(l))
                    .map(|(n, _)| n.clone())
                    .chain(s.labels.keys().filter(|n| !new.contains_key(*n)).cloned())
                    .collect();
                s.labels = new;
                s.synced = true;
                drop(s);
                for n in changed {
                    let _ = self.changed.send(n);
                }
            }
        }
    }

    /// Follows every namespace's labels (metadata only) until the process ends; the watcher re-lists after
    /// errors, keeping the last labels meanwhile.
    pub async fn watch(self: Arc<Self>, client: kube::Client) {
        // Metadata only: `PartialObjectMeta` makes the watch ask for metadata.
        let api: Api<kube::core::PartialObjectMeta<Namespace>> = Api::all(client);
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => self.apply(ev),
                Err(e) => tracing::warn!(error = %e, "namespace watch failed; retrying"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, labels: &[(&str, &str)]) -> kube::core::PartialObjectMeta<Namespace> {
        let mut o = kube::core::PartialObjectMeta::<Namespace>::default();
        o.metadata.name = Some(name.into());
        o.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        o
    }

    #[test]
    fn labels_follow_the_watch_and_changes_are_announced() {
        let n = NamespaceLabels::default();
        let mut rx = n.subscribe();
        assert!(n.labels("a").is_none() && !n.synced());
        n.apply(Event::Init);
        n.apply(Event::InitApply(ns("a", &[("tier", "gold")])));
        assert!(n.labels("a").is_none(), "nothing is known before the list is done");
        n.apply(Event::InitDone);
        assert!(n.synced());
        assert_eq!(n.labels("a").unwrap().get("tier").map(String::as_str), Some("gold"));
        assert_eq!(rx.try_recv().unwrap(), "a");
        n.apply(Event::Apply(ns("a", &[("tier", "gold")])));
        assert!(rx.try_recv().is_err(), "the same labels are no change");
        n.apply(Event::Apply(ns("a", &[("tier", "silver")])));
        assert_eq!(rx.try_recv().unwrap(), "a");
        assert_eq!(n.labels("a").unwrap().get("tier").map(String::as_str), Some("silver"));
        // A re-list drops what went meanwhile and announces it.
        n.apply(Event::Init);
        n.apply(Event::InitApply(ns("b", &[])));
        n.apply(Event::InitDone);
        assert!(n.labels("a").is_none());
        let mut got = vec![rx.try_recv().unwrap(), rx.try_recv().unwrap()];
        got.sort();
        assert_eq!(got, ["a", "b"]);
        n.apply(Event::Delete(ns("b", &[])));
        assert!(n.labels("b").is_none());
        assert_eq!(rx.try_recv().unwrap(), "b");
    }
}
