//! The read-only view of one term's stores, and what the kinds tell each other. Each kind builds its own state
//! and registers here what others may read of it (its watch-fed stores), what wakes it (its waiters), what it
//! hears of others' watches (hooks), and what it makes in the Velero namespace (for garbage collection). Nothing
//! here knows a tenant kind: a store is found by the type of its objects, of which a term watches one store each.

use super::context::Shared;
use super::context::Watched;
use super::index::synced::Synced;
use crate::naming::{Origin, Tags};
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DeleteParams;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::Lookup;
use kube::Client;
use std::any::{type_name, Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

type Hook<T> = Box<dyn Fn(&T, bool) + Send + Sync>;
type Waker = Box<dyn Fn(&str) + Send + Sync>;

/// What the kinds register while a term is built; frozen into a [`View`] before any controller runs.
#[derive(Default)]
pub struct Registry {
    stores: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    synced: Vec<(&'static str, Synced)>,
    wakers: Vec<Waker>,
    hooks: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    made: Vec<Arc<dyn Collect>>,
}

/// The read-only view of a term's stores, shared by every kind and background job of the term: what was
/// registered, no longer open to registration.
pub struct View(Registry);

impl Registry {
    /// A new store of `T` objects for a watch to fill, readable by all through the view; the write end is the
    /// watch's.
    pub fn watched<T>(&mut self) -> (Watched<T>, Writer<T>)
    where
        T: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let (w, writer) = Watched::new();
        self.share(&w);
        (w, writer)
    }

    /// Makes a store (and whether its watch has listed) readable by all through the view.
    pub fn share<T>(&mut self, w: &Watched<T>)
    where
        T: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let previous = self.stores.insert(TypeId::of::<T>(), Box::new(w.clone()));
        // One store per type and term: a second would leave readers on the wrong one.
        assert!(previous.is_none(), "two stores of {} in one term", type_name::<T>());
        self.synced.push((type_name::<T>(), w.synced.clone()));
    }

    /// `wake` hears of every change that objects may wait for (see [`View::wake`]).
    pub fn waker(&mut self, wake: impl Fn(&str) + Send + Sync + 'static) {
        self.wakers.push(Box::new(wake));
    }

    /// `hook` hears of each change of a `T` object that the watch owning `T`s tells the view of (and whether the
    /// object still exists).
    pub fn on<T: 'static>(&mut self, hook: impl Fn(&T, bool) + Send + Sync + 'static) {
        self.hooks
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(Vec::<Hook<T>>::new()))
            .downcast_mut::<Vec<Hook<T>>>()
            .expect("hooks are kept by their type")
            .push(Box::new(hook));
    }

    /// A kind of Velero object a tenant kind makes, for the garbage collector.
    pub fn made(&mut self, made: Arc<dyn Collect>) {
        self.made.push(made);
    }

    pub fn into_view(self) -> View {
        View(self)
    }
}

impl View {
    /// The store of `T` objects. Every store a kind reads is registered before the term runs: a missing one is a
    /// wiring mistake that every controller test would show, not something input can cause.
    pub fn get<T>(&self) -> &Watched<T>
    where
        T: Lookup<DynamicType = ()> + Clone + 'static,
    {
        self.0
            .stores
            .get(&TypeId::of::<T>())
            .and_then(|s| s.downcast_ref::<Watched<T>>())
            .unwrap_or_else(|| panic!("no store of {} registered in this term", type_name::<T>()))
    }

    /// Wakes every object, of any kind, waiting for `dependency` (a [`dependency`](super::tenant::dependency)
    /// key).
    pub fn wake(&self, dependency: &str) {
        for w in &self.0.wakers {
            w(dependency);
        }
    }

    /// Tells the hooks registered for `T` of a change of `obj`.
    pub fn notify<T: 'static>(&self, obj: &T, exists: bool) {
        let hooks = self
            .0
            .hooks
            .get(&TypeId::of::<T>())
            .and_then(|h| h.downcast_ref::<Vec<Hook<T>>>());
        for h in hooks.into_iter().flatten() {
            h(obj, exists);
        }
    }

    /// The kinds of Velero objects the tenant kinds make.
    pub fn made(&self) -> &[Arc<dyn Collect>] {
        &self.0.made
    }

    /// Whether every registered store has its first list.
    pub fn all_synced(&self) -> bool {
        self.0.synced.iter().all(|(_, s)| s.is_synced())
    }

    /// The stores not listed yet, by type.
    pub fn unsynced(&self) -> Vec<&'static str> {
        self.0
            .synced
            .iter()
            .filter(|(_, s)| !s.is_synced())
            .map(|(t, _)| *t)
            .collect()
    }
}

/// One kind of Velero object a tenant kind makes, as the collector sees it: where its objects are stored, which
/// tenant kind they are made for, the kind's own reason to keep one, and how one is deleted. Each tenant kind
/// registers its own (see [`MadeBy`]); the collector knows none of them.
pub trait Collect: Send + Sync {
    /// The Velero object's kind (its key in triggers, logs and metrics).
    fn kind(&self) -> &str;
    /// The tenant kind it is made for.
    fn origin(&self) -> Origin;
    /// The names of the stored objects carrying the origin's label that pass `keep`. Only the names are copied:
    /// a sweep looks at every object nac made (10,000 metadata copies were ~20 MiB at once).
    fn names_where(&self, view: &View, keep: &dyn Fn(&dyn Tags) -> bool) -> Vec<String>;
    /// The stored object's metadata and the kind's own reason to keep it.
    fn stored(&self, view: &View, velero_namespace: &str, name: &str) -> Option<(ObjectMeta, Option<&'static str>)>;
    /// The origin's presence as the stores show it.
    fn owner_in_store(&self, view: &View, namespace: &str, name: &str) -> Presence;
    /// The origin's presence as the API server has it (the confirmation before a delete).
    fn owner_in_api<'a>(
        &'a self,
        client: Client,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Presence, kube::Error>>;
    fn delete<'a>(
        &'a self,
        shared: &'a Shared,
        name: &'a str,
        dp: &'a DeleteParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// Is the origin there, and with which identity?
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    Missing,
    /// It exists; its identity, when it has one recorded yet.
    Present(Option<String>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::velero::{Backup, BackupStorageLocation};

    #[test]
    fn stores_hooks_and_wakers_reach_who_registered_them() {
        let mut reg = Registry::default();
        let (_backups, _writer) = reg.watched::<Backup>();
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = heard.clone();
        reg.on::<BackupStorageLocation>(move |l, exists| {
            h.lock()
                .unwrap()
                .push((l.metadata.name.clone().unwrap_or_default(), exists))
        });
        let w = heard.clone();
        reg.waker(move |d| w.lock().unwrap().push((d.to_string(), true)));
        let view = reg.into_view();
        assert!(view.get::<Backup>().state().is_empty());
        assert!(!view.all_synced());
        assert_eq!(view.unsynced().len(), 1);
        view.get::<Backup>().synced.mark();
        assert!(view.all_synced());
        let mut l = BackupStorageLocation::new("default", Default::default());
        l.metadata.namespace = Some("velero".into());
        view.notify(&l, false);
        view.notify(&Backup::new("b", Default::default()), true);
        view.wake("x");
        assert_eq!(
            *heard.lock().unwrap(),
            vec![("default".to_string(), false), ("x".to_string(), true)]
        );
    }

    #[test]
    #[should_panic(expected = "no store of")]
    fn an_unregistered_store_is_a_wiring_mistake() {
        Registry::default().into_view().get::<Backup>();
    }
}
