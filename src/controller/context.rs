//! What the reconcilers share during one leadership term: client, options, one [`KindState`] per tenant kind
//! (watch-fed stores, queue index, triggers), the per-backup counts, the event recorder, metrics, and the
//! per-object error backoff.

use super::counts::PhaseCounts;
use super::events::Recorder;
use super::queue::QueueIndex;
use super::status::Note;
use super::tenant::{Tenant, VeleroObject};
use super::watches::Synced;
use super::write::{HasStatus, RecentWrites};
use super::Options;
use crate::api::NonAdminSchedule;
use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::api::{NonAdminBackupStorageLocation, NonAdminBackupStorageLocationRequest, NonAdminDownloadRequest};
use crate::metrics::{ControllerLabels, Metrics, ReconcileLabels};
use crate::policy::live::PolicyStore;
use crate::velero::{BackupStorageLocation, DeleteBackupRequest, DownloadRequest, Schedule};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, store::Writer, Lookup, ObjectRef, Store};
use kube::{Api, Client, Resource};
use prometheus_client::metrics::gauge::Gauge;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Errors of a reconcile. `Waiting` is not a failure: the object waits for Velero and is polled at a fixed pace.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Waiting(String),
    #[error("{0}")]
    NotReady(String),
    #[error("{0}")]
    Inconsistent(String),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    pub fn is_waiting(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Waiting(_) => true,
            Error::Finalizer(f) => matches!(
                f.as_ref(),
                F::ApplyFailed(Error::Waiting(_)) | F::CleanupFailed(Error::Waiting(_))
            ),
            _ => false,
        }
    }
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    fn from(e: kube::runtime::finalizer::Error<Error>) -> Self {
        Error::Finalizer(Box::new(e))
    }
}

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
    fn new(metrics: &Metrics, controller: &str) -> Self {
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

/// One tenant kind's share of a term: its store, its Velero objects (nac's own, in the Velero namespace) and their
/// queue index, the channel that triggers its reconciles, and its queue-depth gauge.
pub struct KindState<K: Tenant> {
    pub objects: Store<K>,
    /// The tenant objects' watch has completed its first list.
    pub objects_synced: Synced,
    pub velero: Store<K::Velero>,
    /// The Velero objects' watch has completed its first list.
    pub synced: Synced,
    pub queue: Arc<Mutex<QueueIndex>>,
    pub triggers: UnboundedSender<ObjectRef<K>>,
    pub trigger: Trigger<K>,
    pub depth: QueueDepth,
    /// Objects of this kind waiting for others (see [`Waiters`]).
    pub waiting: Waiters<K>,
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

/// The write ends of a [`KindState`], for the watch streams that feed it.
pub struct KindWiring<K: Tenant> {
    pub objects: Writer<K>,
    pub velero: Writer<K::Velero>,
    pub triggers: UnboundedReceiver<ObjectRef<K>>,
}

impl<K: Tenant> KindState<K> {
    fn new(metrics: &Metrics, velero_namespace: &str) -> (Self, KindWiring<K>) {
        let (objects, objects_writer) = reflector::store::<K>();
        let (velero, velero_writer) = reflector::store::<K::Velero>();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let trigger = Trigger {
            velero: velero.clone(),
            namespace: velero_namespace.to_string(),
            triggers: tx.clone(),
        };
        let state = KindState {
            objects,
            objects_synced: Synced::default(),
            velero,
            synced: Synced::default(),
            queue: Arc::new(Mutex::new(QueueIndex::new())),
            triggers: tx,
            trigger,
            depth: QueueDepth::new(metrics, K::CONTROLLER),
            waiting: Waiters::default(),
        };
        let wiring = KindWiring {
            objects: objects_writer,
            velero: velero_writer,
            triggers: rx,
        };
        (state, wiring)
    }

    /// The queue position to report for Velero object `name` (0 when unknown): see [`super::queue::reported`].
    pub fn position(&self, name: &str) -> i64 {
        self.queue
            .lock()
            .expect("queue lock")
            .reported_position(name)
            .unwrap_or(0)
    }

    /// Records a Velero object nac just created in the queue index (the watch event may come later) and triggers
    /// the tenant objects whose position that moved.
    pub fn note(&self, v: &K::Velero) {
        let changed = self.queue.lock().expect("queue lock").upsert(v.observe());
        self.trigger.send(changed);
    }

    /// Triggers the objects of this kind waiting for `dependency`.
    pub fn wake(&self, dependency: &str) {
        for r in self.waiting.waiting_for(dependency) {
            let _ = self.triggers.unbounded_send(r);
        }
    }

    /// Counts a trigger in the queue-depth gauge when the object still exists.
    pub fn enqueued(&self, r: &ObjectRef<K>) {
        if self.objects.get(r).is_some() {
            self.depth.enqueue(key_of_ref(r));
        }
    }
}

/// Maps Velero object names back to their tenant objects and triggers those: the one way every watch-fed index
/// (and every create nac makes) turns "these Velero objects moved" into reconciles.
pub struct Trigger<K: Tenant> {
    velero: Store<K::Velero>,
    namespace: String,
    triggers: UnboundedSender<ObjectRef<K>>,
}

impl<K: Tenant> Clone for Trigger<K> {
    fn clone(&self) -> Self {
        Trigger {
            velero: self.velero.clone(),
            namespace: self.namespace.clone(),
            triggers: self.triggers.clone(),
        }
    }
}

impl<K: Tenant> Trigger<K> {
    /// Triggers the owners of the Velero objects `names` (those nac made; others are skipped).
    pub fn send(&self, names: Vec<String>) {
        for name in names {
            let owner = self
                .velero
                .get(&ObjectRef::new(&name).within(&self.namespace))
                // A label in Velero's short form of a long name (a scheduled run's): looked for by that form.
                .or_else(|| {
                    (name.len() == crate::naming::MAX_NAME_LEN).then(|| {
                        self.velero.find(|v| {
                            crate::naming::velero_label_value(v.meta().name.as_deref().unwrap_or_default())
                                == name.as_str()
                        })
                    })?
                })
                .and_then(|v| K::ORIGIN.owner(&*v));
            if let Some(r) = owner {
                let _ = self.triggers.unbounded_send(r);
            }
        }
    }
}

/// Shared state of the reconcilers for one leadership term.
pub struct Ctx {
    pub client: Client,
    pub opts: Options,
    pub policy: Arc<PolicyStore>,
    pub metrics: Arc<Metrics>,
    pub recorder: Arc<Recorder>,
    pub nab: KindState<NonAdminBackup>,
    pub nar: KindState<NonAdminRestore>,
    pub delete_requests_synced: Synced,
    pub delete_requests: Store<DeleteBackupRequest>,
    /// Velero's storage locations (restores wait for theirs to be Available).
    pub locations: Store<BackupStorageLocation>,
    pub locations_synced: Synced,
    /// Tenants' storage locations, their approval requests and the Secret copies made for them.
    pub storage_locations: Store<NonAdminBackupStorageLocation>,
    pub storage_locations_synced: Synced,
    pub location_requests: Store<NonAdminBackupStorageLocationRequest>,
    pub location_requests_synced: Synced,
    pub secret_copies: Store<Secret>,
    pub secret_copies_synced: Synced,
    /// Tenants' download requests, Velero's DownloadRequests made for them, and the requests waiting for their
    /// backup or restore to finish.
    pub downloads: Store<NonAdminDownloadRequest>,
    pub downloads_synced: Synced,
    pub download_requests: Store<DownloadRequest>,
    pub download_requests_synced: Synced,
    pub downloads_waiting: Waiters<NonAdminDownloadRequest>,
    pub downloads_trigger: UnboundedSender<ObjectRef<NonAdminDownloadRequest>>,
    /// Tenants' schedules, the Velero Schedules made for them, and the channel that wakes a schedule when one of
    /// its runs changes.
    pub schedules: Store<NonAdminSchedule>,
    pub schedules_synced: Synced,
    pub velero_schedules: Store<Schedule>,
    pub velero_schedules_synced: Synced,
    pub schedules_trigger: UnboundedSender<ObjectRef<NonAdminSchedule>>,
    pub data_uploads: Arc<Mutex<PhaseCounts>>,
    pub pod_volume_backups: Arc<Mutex<PhaseCounts>>,
    pub data_uploads_synced: Synced,
    pub pod_volume_backups_synced: Synced,
    pub recent: RecentWrites,
    /// Requesters' rights (restores are checked against the restoring user's) and where backups' contents are read.
    pub access: Arc<dyn crate::rights::Access>,
    pub contents: Arc<dyn super::contents::ContentsSource>,
    failures: Mutex<HashMap<String, u32>>,
}

/// The write ends of a term's stores, for the watch streams.
pub struct Wiring {
    pub nab: KindWiring<NonAdminBackup>,
    pub nar: KindWiring<NonAdminRestore>,
    pub delete_requests: Writer<DeleteBackupRequest>,
    pub locations: Writer<BackupStorageLocation>,
    pub storage_locations: Writer<NonAdminBackupStorageLocation>,
    pub location_requests: Writer<NonAdminBackupStorageLocationRequest>,
    pub secret_copies: Writer<Secret>,
    pub downloads: Writer<NonAdminDownloadRequest>,
    pub download_requests: Writer<DownloadRequest>,
    pub downloads_triggers: UnboundedReceiver<ObjectRef<NonAdminDownloadRequest>>,
    pub schedules: Writer<NonAdminSchedule>,
    pub velero_schedules: Writer<Schedule>,
    pub schedules_triggers: UnboundedReceiver<ObjectRef<NonAdminSchedule>>,
}

impl Ctx {
    /// A fresh context (empty stores and indexes) and the write ends that feed it.
    pub fn new(
        client: Client,
        opts: Options,
        policy: Arc<PolicyStore>,
        metrics: Arc<Metrics>,
        recorder: Arc<Recorder>,
        access: Arc<dyn crate::rights::Access>,
    ) -> (Self, Wiring) {
        let (nab, nab_wiring) = KindState::new(&metrics, &opts.velero_namespace);
        let (nar, nar_wiring) = KindState::new(&metrics, &opts.velero_namespace);
        let (delete_requests, dbr_writer) = reflector::store();
        let (locations, locations_writer) = reflector::store();
        let (storage_locations, storage_locations_writer) = reflector::store();
        let (location_requests, location_requests_writer) = reflector::store();
        let (secret_copies, secret_copies_writer) = reflector::store();
        let (downloads, downloads_writer) = reflector::store();
        let (download_requests, download_requests_writer) = reflector::store();
        let (downloads_trigger, downloads_triggers) = futures::channel::mpsc::unbounded();
        let (schedules, schedules_writer) = reflector::store();
        let (velero_schedules, velero_schedules_writer) = reflector::store();
        let (schedules_trigger, schedules_triggers) = futures::channel::mpsc::unbounded();
        let ctx = Ctx {
            schedules,
            schedules_synced: Synced::default(),
            velero_schedules,
            velero_schedules_synced: Synced::default(),
            schedules_trigger,
            access,
            contents: Arc::new(super::contents::VeleroContents {
                limits: Default::default(),
            }),
            downloads,
            download_requests,
            download_requests_synced: Synced::default(),
            downloads_synced: Synced::default(),
            downloads_waiting: Waiters::default(),
            downloads_trigger,
            storage_locations,
            storage_locations_synced: Synced::default(),
            location_requests,
            location_requests_synced: Synced::default(),
            secret_copies,
            secret_copies_synced: Synced::default(),
            client,
            opts,
            policy,
            metrics,
            recorder,
            nab,
            nar,
            delete_requests_synced: Synced::default(),
            delete_requests,
            locations,
            locations_synced: Synced::default(),
            data_uploads: Arc::new(Mutex::new(PhaseCounts::new())),
            pod_volume_backups: Arc::new(Mutex::new(PhaseCounts::new())),
            data_uploads_synced: Synced::default(),
            pod_volume_backups_synced: Synced::default(),
            recent: RecentWrites::default(),
            failures: Mutex::new(HashMap::new()),
        };
        let wiring = Wiring {
            nab: nab_wiring,
            nar: nar_wiring,
            delete_requests: dbr_writer,
            locations: locations_writer,
            storage_locations: storage_locations_writer,
            location_requests: location_requests_writer,
            secret_copies: secret_copies_writer,
            downloads: downloads_writer,
            download_requests: download_requests_writer,
            downloads_triggers,
            schedules: schedules_writer,
            velero_schedules: velero_schedules_writer,
            schedules_triggers,
        };
        (ctx, wiring)
    }

    /// Wakes every object of every kind waiting for `dependency`.
    pub fn wake(&self, dependency: &str) {
        self.nab.wake(dependency);
        self.nar.wake(dependency);
        for r in self.downloads_waiting.waiting_for(dependency) {
            let _ = self.downloads_trigger.unbounded_send(r);
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

    /// Waits (bounded, once per term) until the DataUpload and PodVolumeBackup counts have their first list, so a
    /// restart does not report empty counts for a moment.
    pub async fn counts_ready(&self) {
        for (flag, what) in [
            (&self.data_uploads_synced, "DataUploads"),
            (&self.pod_volume_backups_synced, "PodVolumeBackups"),
        ] {
            if !flag.is_synced() && !flag.wait(self.opts.store_ready_timeout).await {
                tracing::warn!(kind = what, "watch not synced in time; counting without it for now");
                flag.mark();
            }
        }
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

    /// The object as nac last wrote it when the watch cache still shows an older version (one read), else as is.
    pub async fn fresh<K: HasStatus>(&self, api: &Api<K>, obj: Arc<K>) -> Result<Arc<K>, Error> {
        if !self.recent.is_stale(&*obj) {
            return Ok(obj);
        }
        let fresh = api.get(&obj.meta().name.clone().unwrap_or_default()).await?;
        self.recent.record(&fresh);
        Ok(Arc::new(fresh))
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
