//! What every controller shares during one leadership term ([`Shared`]), the reconcile error, the per-object
//! error backoff, the queue-depth gauge, and the small building blocks kinds keep their state in ([`Watched`]
//! stores, [`Waiters`]). Nothing here knows a tenant kind, nor the term's view (a kind's context,
//! [`Cx`](super::cx::Cx), adds it).

pub use super::error::Error;
use super::events::{Note, Recorder};
use super::index::synced::Synced;
use super::write::{HasStatus, RecentWrites, CACHE_WAIT};
use super::Options;
use crate::metrics::{ControllerLabels, Metrics, ReconcileLabels};
use crate::policy::live::PolicyStore;
use kube::runtime::reflector::{self, store::Writer, Lookup, ObjectRef, Store};
use kube::{Api, Client, Resource};
use prometheus_client::metrics::gauge::Gauge;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Capped exponential backoff: `base`, `2·base`, `4·base`, ... up to `max`, by consecutive failures (1-based).
pub fn backoff_delay(failures: u32, base: Duration, max: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << exp).min(max)
}

/// Reconciles waiting to run or running, per controller: refs triggered but not yet started, plus running ones.
pub struct QueueDepth {
    pending: Mutex<HashSet<String>>,
    running: AtomicI64,
    gauge: Gauge,
}

impl QueueDepth {
    pub fn new(metrics: &Metrics, controller: &str) -> Self {
        let gauge = metrics
            .queue_depth
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .clone();
        gauge.set(0);
        QueueDepth {
            pending: Mutex::new(HashSet::new()),
            running: AtomicI64::new(0),
            gauge,
        }
    }

    fn publish(&self, pending: usize) {
        self.gauge.set(pending as i64 + self.running.load(Ordering::Relaxed));
    }

    pub fn enqueue(&self, key: String) {
        let mut p = self.pending.lock().expect("queue depth lock");
        p.insert(key);
        self.publish(p.len());
    }

    /// An object that is gone: a trigger it had waiting will not run (kube skips refs missing from the store), so
    /// it leaves the count here instead of staying in it for good.
    pub fn gone(&self, key: &str) {
        let mut p = self.pending.lock().expect("queue depth lock");
        if p.remove(key) {
            self.publish(p.len());
        }
    }

    pub fn start(&self, key: &str) {
        let mut p = self.pending.lock().expect("queue depth lock");
        p.remove(key);
        self.running.fetch_add(1, Ordering::Relaxed);
        self.publish(p.len());
    }

    pub fn finish(&self) {
        let p = self.pending.lock().expect("queue depth lock");
        self.running.fetch_sub(1, Ordering::Relaxed);
        self.publish(p.len());
    }
}

pub fn key_of<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

pub fn key_of_ref<K: kube::runtime::reflector::Lookup>(r: &ObjectRef<K>) -> String
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name)
}

/// Which objects of a kind wait for which others (by [`dependency`](super::tenant::dependency) key), so a change
/// of one wakes exactly those waiting for it. Filled by admissions that wait; a new term starts empty and every
/// object is reconciled (and registers again) at its first list.
pub struct Waiters<K: Waiter> {
    inner: Mutex<WaitersInner<K>>,
}

/// What can wait: any kind whose references can be keys.
pub trait Waiter: Lookup<DynamicType = ()> {}
impl<K: Lookup<DynamicType = ()>> Waiter for K {}

struct WaitersInner<K: Waiter> {
    by_dependency: HashMap<String, HashSet<ObjectRef<K>>>,
    of: HashMap<ObjectRef<K>, Vec<String>>,
}

impl<K: Waiter> Default for Waiters<K> {
    fn default() -> Self {
        Waiters {
            inner: Mutex::new(WaitersInner {
                by_dependency: HashMap::new(),
                of: HashMap::new(),
            }),
        }
    }
}

impl<K: Waiter> Waiters<K> {
    /// `r` waits for `on` (replacing what it waited for before).
    pub fn register(&self, r: ObjectRef<K>, on: Vec<String>) {
        let mut w = self.inner.lock().expect("waiters lock");
        Self::drop_ref(&mut w, &r);
        for d in &on {
            w.by_dependency.entry(d.clone()).or_default().insert(r.clone());
        }
        w.of.insert(r, on);
    }

    /// `r` waits for nothing any more.
    pub fn forget(&self, r: &ObjectRef<K>) {
        Self::drop_ref(&mut self.inner.lock().expect("waiters lock"), r);
    }

    fn drop_ref(w: &mut WaitersInner<K>, r: &ObjectRef<K>) {
        for d in w.of.remove(r).unwrap_or_default() {
            if let Some(set) = w.by_dependency.get_mut(&d) {
                set.remove(r);
                if set.is_empty() {
                    w.by_dependency.remove(&d);
                }
            }
        }
    }

    /// The objects waiting for `dependency`.
    pub fn waiting_for(&self, dependency: &str) -> Vec<ObjectRef<K>> {
        let w = self.inner.lock().expect("waiters lock");
        w.by_dependency
            .get(dependency)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many objects wait.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("waiters lock").of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What every controller shares during one leadership term, whatever its kind: the client, the options, the live
/// policy, metrics, the event recorder, nac's recent writes (the stale-cache guard), requesters' rights,
/// and the per-object error backoff. Each kind's own stores, indexes and triggers live beside
/// it, in its own state.
pub struct Shared {
    pub client: Client,
    pub opts: Options,
    pub policy: Arc<PolicyStore>,
    pub metrics: Arc<Metrics>,
    pub recorder: Arc<Recorder>,
    pub recent: RecentWrites,
    /// Requesters' rights (restores are checked against the restoring user's).
    pub access: Arc<dyn crate::rights::Access>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Shared {
    pub fn new(
        client: Client,
        opts: Options,
        policy: Arc<PolicyStore>,
        metrics: Arc<Metrics>,
        recorder: Arc<Recorder>,
        access: Arc<dyn crate::rights::Access>,
    ) -> Self {
        Shared {
            client,
            opts,
            policy,
            metrics,
            recorder,
            recent: RecentWrites::default(),
            access,
            failures: Mutex::new(HashMap::new()),
        }
    }

    pub fn velero_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.opts.velero_namespace)
    }

    pub fn velero_ref<K: kube::runtime::reflector::Lookup>(&self, name: &str) -> ObjectRef<K>
    where
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        ObjectRef::new(name).within(&self.opts.velero_namespace)
    }

    /// Waits (bounded) until a Velero watch has its first full list.
    pub async fn ready(&self, synced: &Synced, what: &str) -> Result<(), Error> {
        if synced.is_synced() || synced.wait(self.opts.store_ready_timeout).await {
            return Ok(());
        }
        Err(Error::NotReady(format!(
            "the watch of {what} in namespace {} has not synced yet (are Velero's CRDs installed and may nac list \
             and watch them?)",
            self.opts.velero_namespace
        )))
    }

    /// A period of the live policy as a timer's (none while no policy is loaded, or when it is zero: off).
    pub fn period(
        &self,
        of: impl Fn(&crate::policy::Policy) -> crate::policy::duration::GoDuration,
    ) -> Option<Duration> {
        self.policy
            .current()
            .map(|p| of(&p))
            .filter(|p| !p.is_zero())
            .map(|p| Duration::from_nanos(u64::try_from(p.0).unwrap_or(u64::MAX)))
    }

    /// Publishes Events on `obj` in the background: they inform, they never hold up a reconcile.
    pub fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, notes: Vec<Note>) {
        if notes.is_empty() {
            return;
        }
        let reference = obj.object_ref(&());
        for n in notes {
            let recorder = self.recorder.clone();
            let reference = reference.clone();
            self.metrics.write("Event");
            tokio::spawn(async move {
                if let Err(e) = recorder.publish(&n, &reference).await {
                    tracing::debug!(error = %e, "publishing an event failed");
                }
            });
        }
    }

    /// The object to plan from: as is when the watch cache shows nac's own last write of it; `Err(wait)` while the
    /// cache is behind it (the write's own watch event triggers the next reconcile, so no read: `wait` is only the
    /// wake-up should that event never come); read once when the cache has stayed behind for [`CACHE_WAIT`].
    pub async fn fresh<K: HasStatus>(&self, api: &Api<K>, obj: Arc<K>) -> Result<Result<Arc<K>, Duration>, Error> {
        match self.recent.behind(&*obj) {
            None => return Ok(Ok(obj)),
            Some(since) if since < CACHE_WAIT => return Ok(Err(CACHE_WAIT - since)),
            Some(_) => {}
        }
        self.metrics.stale_read(&K::kind(&()));
        let fresh = api.get(&obj.meta().name.clone().unwrap_or_default()).await?;
        self.recent.record(&fresh);
        Ok(Ok(Arc::new(fresh)))
    }

    /// Records a reconcile's outcome and latency; resets or advances the object's error backoff.
    pub fn record(
        &self,
        controller: &str,
        key: &str,
        outcome: &Result<kube::runtime::controller::Action, Error>,
        took: Duration,
    ) {
        let result = match outcome {
            Ok(_) => "ok",
            Err(e) if e.is_waiting() => "waiting",
            Err(_) => "error",
        };
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.to_string(),
                result: result.to_string(),
            })
            .inc();
        self.metrics
            .reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .observe(took.as_secs_f64());
        if result != "error" {
            self.failures
                .lock()
                .expect("failures lock")
                .remove(&format!("{controller}:{key}"));
        }
    }

    /// The requeue delay after a failed reconcile of `key`.
    pub fn next_backoff(&self, controller: &str, key: &str) -> Duration {
        let mut f = self.failures.lock().expect("failures lock");
        let n = f.entry(format!("{controller}:{key}")).or_insert(0);
        *n += 1;
        backoff_delay(*n, self.opts.backoff_base, self.opts.backoff_max)
    }

    /// A Velero object by name: from the store, else (the store may lag behind a fresh create) from the API.
    pub async fn get_velero<K>(&self, store: &Store<K>, name: &str) -> Result<Option<K>, Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + kube::runtime::reflector::Lookup
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + 'static,
        <K as kube::runtime::reflector::Lookup>::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        if let Some(o) = store.get(&self.velero_ref(name)) {
            return Ok(Some((*o).clone()));
        }
        Ok(self.velero_api::<K>().get_opt(name).await?)
    }
}

/// A store fed by a watch, and whether that watch has completed its first list.
pub struct Watched<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    pub synced: Synced,
}

impl<K: Lookup + Clone + 'static> Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// An empty store and the write end its watch feeds.
    pub fn new() -> (Self, Writer<K>) {
        let (store, writer) = reflector::store();
        (
            Watched {
                store,
                synced: Synced::default(),
            },
            writer,
        )
    }
}

impl<K: Lookup + Clone + 'static> Clone for Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Watched {
            store: self.store.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K: Lookup + Clone + 'static> std::ops::Deref for Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    type Target = Store<K>;
    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let base = Duration::from_millis(500);
        let max = Duration::from_secs(60);
        assert_eq!(backoff_delay(1, base, max), Duration::from_millis(500));
        assert_eq!(backoff_delay(2, base, max), Duration::from_secs(1));
        assert_eq!(backoff_delay(4, base, max), Duration::from_secs(4));
        assert_eq!(backoff_delay(8, base, max), Duration::from_secs(60));
        assert_eq!(backoff_delay(1000, base, max), Duration::from_secs(60));
    }

    #[test]
    fn a_gone_object_leaves_the_queue_depth() {
        let metrics = Metrics::new();
        let d = QueueDepth::new(&metrics, "test");
        d.enqueue("ns/a".into());
        d.enqueue("ns/b".into());
        d.start("ns/b");
        assert_eq!(d.gauge.get(), 2);
        // `a` was deleted before its reconcile ran: kube never runs it, so nothing else would take it out.
        d.gone("ns/a");
        d.gone("ns/never-queued");
        assert_eq!(d.gauge.get(), 1);
        d.finish();
        assert_eq!(d.gauge.get(), 0);
    }

    #[test]
    fn waiting_is_not_a_failure_even_inside_the_finalizer_helper() {
        assert!(Error::Waiting("x".into()).is_waiting());
        let wrapped: Error = kube::runtime::finalizer::Error::CleanupFailed(Error::Waiting("x".into())).into();
        assert!(wrapped.is_waiting());
        assert!(!Error::NotReady("x".into()).is_waiting());
    }
}
