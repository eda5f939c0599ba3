//! What the reconcilers share during one leadership term: client, options, watch-fed stores and indexes, the
//! event recorder, metrics, and the per-object error backoff.

use super::counts::PhaseCounts;
use super::queue::QueueIndex;
use super::status::Note;
use super::watches::Synced;
use super::write::{HasStatus, RecentWrites, StatusUpdate};
use super::Options;
use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::metrics::{ControllerLabels, Metrics, ReconcileLabels};
use crate::policy::live::PolicyStore;
use crate::velero::{Backup, DeleteBackupRequest, Restore};
use futures::channel::mpsc::UnboundedSender;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
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

/// Shared state of the reconcilers for one leadership term.
pub struct Ctx {
    pub client: Client,
    pub opts: Options,
    pub policy: Arc<PolicyStore>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub nabs: Store<NonAdminBackup>,
    pub nars: Store<NonAdminRestore>,
    pub backups_synced: Synced,
    pub backups: Store<Backup>,
    pub delete_requests_synced: Synced,
    pub delete_requests: Store<DeleteBackupRequest>,
    pub restores_synced: Synced,
    pub restores: Store<Restore>,
    pub backup_queue: Arc<Mutex<QueueIndex>>,
    pub restore_queue: Arc<Mutex<QueueIndex>>,
    pub data_uploads: Arc<Mutex<PhaseCounts>>,
    pub pod_volume_backups: Arc<Mutex<PhaseCounts>>,
    pub data_uploads_synced: Synced,
    pub pod_volume_backups_synced: Synced,
    pub nab_triggers: UnboundedSender<ObjectRef<NonAdminBackup>>,
    pub nar_triggers: UnboundedSender<ObjectRef<NonAdminRestore>>,
    pub nab_depth: QueueDepth,
    pub nar_depth: QueueDepth,
    pub recent: RecentWrites,
    failures: Mutex<HashMap<String, u32>>,
}

pub const NAB_CONTROLLER: &str = "nonadminbackup";
pub const NAR_CONTROLLER: &str = "nonadminrestore";

/// The pieces a term builds before the context.
pub struct CtxParts {
    pub client: Client,
    pub opts: Options,
    pub policy: Arc<PolicyStore>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub nabs: Store<NonAdminBackup>,
    pub nars: Store<NonAdminRestore>,
    pub backups_synced: Synced,
    pub backups: Store<Backup>,
    pub delete_requests_synced: Synced,
    pub delete_requests: Store<DeleteBackupRequest>,
    pub restores_synced: Synced,
    pub restores: Store<Restore>,
    pub backup_queue: Arc<Mutex<QueueIndex>>,
    pub restore_queue: Arc<Mutex<QueueIndex>>,
    pub data_uploads: Arc<Mutex<PhaseCounts>>,
    pub pod_volume_backups: Arc<Mutex<PhaseCounts>>,
    pub data_uploads_synced: Synced,
    pub pod_volume_backups_synced: Synced,
    pub nab_triggers: UnboundedSender<ObjectRef<NonAdminBackup>>,
    pub nar_triggers: UnboundedSender<ObjectRef<NonAdminRestore>>,
}

impl Ctx {
    pub fn new(p: CtxParts) -> Self {
        let nab_depth = QueueDepth::new(&p.metrics, NAB_CONTROLLER);
        let nar_depth = QueueDepth::new(&p.metrics, NAR_CONTROLLER);
        Ctx {
            client: p.client,
            opts: p.opts,
            policy: p.policy,
            metrics: p.metrics,
            recorder: p.recorder,
            nabs: p.nabs,
            nars: p.nars,
            backups: p.backups,
            backups_synced: p.backups_synced,
            delete_requests: p.delete_requests,
            delete_requests_synced: p.delete_requests_synced,
            restores: p.restores,
            restores_synced: p.restores_synced,
            backup_queue: p.backup_queue,
            restore_queue: p.restore_queue,
            data_uploads: p.data_uploads,
            pod_volume_backups: p.pod_volume_backups,
            data_uploads_synced: p.data_uploads_synced,
            pod_volume_backups_synced: p.pod_volume_backups_synced,
            nab_triggers: p.nab_triggers,
            nar_triggers: p.nar_triggers,
            nab_depth,
            nar_depth,
            recent: RecentWrites::default(),
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
                let ev = KubeEvent {
                    type_: if n.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: n.reason.clone(),
                    note: Some(truncate(&n.message, 1000)),
                    action: n.reason,
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&ev, &reference).await {
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

    /// Publishes the Events of a status transition.
    pub fn publish_update<K: HasStatus>(
        &self,
        up: &StatusUpdate<K>,
        notes: fn(Option<&K::Status>, &K::Status) -> Vec<Note>,
    ) {
        if let Some(new) = up.status() {
            self.publish(&up.object, notes(up.old.as_ref(), new));
        }
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

    /// Records a Velero object nac just created in the queue index (the watch event may come later) and triggers
    /// the NonAdminBackups whose position that moved.
    pub fn note_backup(&self, b: &Backup) {
        let changed = self
            .backup_queue
            .lock()
            .expect("queue lock")
            .upsert(super::watches::observe_backup(b));
        for name in changed {
            if let Some(r) = self
                .backups
                .get(&self.velero_ref(&name))
                .and_then(|o| crate::naming::NAB.owner(&o.metadata))
            {
                let _ = self.nab_triggers.unbounded_send(r);
            }
        }
    }

    /// As [`Ctx::note_backup`], for restores.
    pub fn note_restore(&self, r: &Restore) {
        let changed = self
            .restore_queue
            .lock()
            .expect("queue lock")
            .upsert(super::watches::observe_restore(r));
        for name in changed {
            if let Some(n) = self
                .restores
                .get(&self.velero_ref(&name))
                .and_then(|o| crate::naming::NAR.owner(&o.metadata))
            {
                let _ = self.nar_triggers.unbounded_send(n);
            }
        }
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

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
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
    fn waiting_is_not_a_failure_even_inside_the_finalizer_helper() {
        assert!(Error::Waiting("x".into()).is_waiting());
        let wrapped: Error = kube::runtime::finalizer::Error::CleanupFailed(Error::Waiting("x".into())).into();
        assert!(wrapped.is_waiting());
        assert!(!Error::NotReady("x".into()).is_waiting());
    }

    #[test]
    fn event_notes_are_cut_to_the_api_limit() {
        let long = "é".repeat(800);
        let t = truncate(&long, 1000);
        assert!(t.len() <= 1004);
        assert!(t.ends_with('…'));
    }
}
