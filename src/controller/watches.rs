//! Watch streams feeding the stores and indexes, and the triggers that map Velero objects back to the
//! NonAdminBackups/NonAdminRestores they belong to. Watches resume from their resourceVersion and relist when it
//! expired (kube's watcher), back off per stream on errors, and never pass errors on to the controllers (a missing
//! optional Velero CRD must not pause the others).

use super::counts::PhaseCounts;
use super::queue::{Observed, QueueIndex};
use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::metrics::{KindLabels, Metrics};
use crate::naming::VELERO_BACKUP_NAME_LABEL;
use crate::naming::{NAB, NAR};
use crate::velero::{backup_phase_unfinished, restore_phase_unfinished, Backup, Restore};
use futures::channel::mpsc::UnboundedSender;
use futures::{Future, Stream, StreamExt, TryStreamExt};
use kube::runtime::reflector::{store::Writer, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

/// Whether a watch has completed its first list. Unlike `Store::wait_until_ready` (a oneshot that wakes only
/// its last poller), any number of reconciles may wait on it at once.
#[derive(Clone, Debug)]
pub struct Synced(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Synced {
    fn default() -> Self {
        Synced(Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl Synced {
    pub fn mark(&self) {
        self.0.send_replace(true);
    }

    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits up to `timeout`; returns whether it is synced.
    pub async fn wait(&self, timeout: std::time::Duration) -> bool {
        let mut rx = self.0.subscribe();
        let synced = matches!(tokio::time::timeout(timeout, rx.wait_for(|v| *v)).await, Ok(Ok(_)));
        synced
    }
}

/// Collects items and releases each distinct one once per `every`: a queue advance or a burst of DataUpload
/// progress then costs one reconcile (and at most one write) per object and interval, not one per event.
pub fn coalesce<T, S>(input: S, every: std::time::Duration) -> impl Stream<Item = T> + Send
where
    T: Eq + std::hash::Hash + Clone + Send + Unpin + 'static,
    S: Stream<Item = T> + Send + 'static,
{
    Coalesce {
        input: Box::pin(input),
        every,
        pending: Vec::new(),
        seen: std::collections::HashSet::new(),
        ready: std::collections::VecDeque::new(),
        timer: None,
        done: false,
    }
}

struct Coalesce<T> {
    input: std::pin::Pin<Box<dyn Stream<Item = T> + Send>>,
    every: std::time::Duration,
    pending: Vec<T>,
    seen: std::collections::HashSet<T>,
    ready: std::collections::VecDeque<T>,
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    done: bool,
}

impl<T: Eq + std::hash::Hash + Clone + Unpin> Stream for Coalesce<T> {
    type Item = T;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        use std::task::Poll;
        let this = self.get_mut();
        while !this.done {
            match this.input.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    if this.every.is_zero() {
                        return Poll::Ready(Some(item));
                    }
                    if this.seen.insert(item.clone()) {
                        this.pending.push(item);
                    }
                    if this.timer.is_none() {
                        this.timer = Some(Box::pin(tokio::time::sleep(this.every)));
                    }
                }
                Poll::Ready(None) => this.done = true,
                Poll::Pending => break,
            }
        }
        let due = match this.timer.as_mut() {
            Some(t) => t.as_mut().poll(cx).is_ready(),
            None => false,
        };
        if due || (this.done && !this.pending.is_empty()) {
            this.timer = None;
            this.seen.clear();
            this.ready.extend(this.pending.drain(..));
        }
        match this.ready.pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            None if this.done && this.pending.is_empty() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

/// What the queue index needs of a Velero Backup.
pub fn observe_backup(b: &Backup) -> Observed {
    let status = b.status.as_ref();
    Observed::new(
        b.name_any(),
        b.metadata.creation_timestamp.as_ref().map(|t| t.0),
        status.and_then(|s| s.phase.as_deref()),
        status.and_then(|s| s.queue_position),
        backup_phase_unfinished,
    )
}

/// What the queue index needs of a Velero Restore.
pub fn observe_restore(r: &Restore) -> Observed {
    let status = r.status.as_ref();
    Observed::new(
        r.name_any(),
        r.metadata.creation_timestamp.as_ref().map(|t| t.0),
        status.and_then(|s| s.phase.as_deref()),
        status.and_then(|s| s.queue_position),
        restore_phase_unfinished,
    )
}

/// Drops (after logging) the errors of a watch stream that already backs off on its own.
fn log_errors<S, K>(stream: S, what: &'static str) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    S: Stream<Item = Result<K, watcher::Error>> + Send,
    K: Send,
{
    stream.filter_map(move |r| async move {
        match r {
            Ok(o) => Some(Ok(o)),
            Err(e) => {
                tracing::warn!(error = %e, watch = what, "watch error; retrying with backoff");
                None
            }
        }
    })
}

/// Applies a watch event to a store, keeping only objects `keep` accepts (an object that stops matching leaves).
fn apply_filtered<K>(writer: &mut Writer<K>, ev: &Event<K>, keep: impl Fn(&K) -> bool)
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    match ev {
        Event::Apply(o) if !keep(o) => writer.apply_watcher_event(&Event::Delete(o.clone())),
        Event::InitApply(o) if !keep(o) => {}
        _ => writer.apply_watcher_event(ev),
    }
}

fn set_gauge(metrics: &Metrics, kind: &str, n: usize) {
    metrics
        .velero_objects
        .get_or_create(&KindLabels { kind: kind.to_string() })
        .set(n as i64);
}

/// Feeds a queue index from watch events; returns the names whose position changed.
fn index_event<K: ResourceExt>(index: &Mutex<QueueIndex>, ev: &Event<K>, observe: fn(&K) -> Observed) -> Vec<String> {
    let mut q = index.lock().expect("queue lock");
    match ev {
        Event::Apply(o) => q.upsert(observe(o)),
        Event::Delete(o) => q.remove(&o.name_any()),
        Event::Init => {
            q.start_relist();
            Vec::new()
        }
        Event::InitApply(o) => {
            q.relist_item(observe(o));
            Vec::new()
        }
        Event::InitDone => q.finish_relist(),
    }
}

/// The NonAdminBackup stream for the controller (all namespaces), reflected into `writer`.
pub fn nab_stream(
    api: Api<NonAdminBackup>,
    writer: Writer<NonAdminBackup>,
) -> impl Stream<Item = Result<NonAdminBackup, watcher::Error>> + Send {
    let s = watcher(api)
        .default_backoff()
        .modify(|o: &mut NonAdminBackup| o.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects();
    log_errors(s, "nonadminbackups")
}

/// The NonAdminRestore stream for the controller (all namespaces), reflected into `writer`.
pub fn nar_stream(
    api: Api<NonAdminRestore>,
    writer: Writer<NonAdminRestore>,
) -> impl Stream<Item = Result<NonAdminRestore, watcher::Error>> + Send {
    let s = watcher(api)
        .default_backoff()
        .modify(|o: &mut NonAdminRestore| o.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects();
    log_errors(s, "nonadminrestores")
}

fn watcher<K>(api: Api<K>) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    kube::runtime::watcher(api, watcher::Config::default())
}

/// Velero Backups of the Velero namespace. All of them feed the queue index (admins' backups wait in the same
/// Velero queue, as OADP's controller counts them); only nac's (with the nacuuid label) are kept in the store and
/// trigger reconciles. Queue moves trigger the NonAdminBackups whose position changed through `triggers`.
pub fn backup_stream(
    api: Api<Backup>,
    mut writer: Writer<Backup>,
    index: Arc<Mutex<QueueIndex>>,
    triggers: UnboundedSender<ObjectRef<NonAdminBackup>>,
    synced: Synced,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<Backup, watcher::Error>> + Send {
    let store = writer.as_reader();
    let namespace = api_namespace(&api);
    let s = watcher(api)
        .default_backoff()
        .modify(|b: &mut Backup| {
            b.metadata.managed_fields = None;
            if !NAB.is_tagged(&b.metadata) {
                // Only the queue fields of other backups are needed.
                b.spec = Default::default();
                if let Some(s) = b.status.as_mut() {
                    *s = crate::velero::BackupStatus {
                        phase: s.phase.take(),
                        queue_position: s.queue_position,
                        ..Default::default()
                    };
                }
            }
        })
        .map_ok(move |ev| {
            // The index first: once the store reports ready, positions must be complete too.
            let changed = index_event(&index, &ev, observe_backup);
            apply_filtered(&mut writer, &ev, |b: &Backup| NAB.is_tagged(&b.metadata));
            if matches!(ev, Event::InitDone) {
                synced.mark();
            }
            for name in changed {
                let r = store
                    .get(&ObjectRef::new(&name).within(&namespace))
                    .and_then(|b| NAB.owner(&b.metadata));
                if let Some(r) = r {
                    let _ = triggers.unbounded_send(r);
                }
            }
            set_gauge(&metrics, "Backup", store.len());
            ev
        })
        .touched_objects();
    log_errors(s, "velero backups")
}

/// Velero Restores of the Velero namespace, as [`backup_stream`].
pub fn restore_stream(
    api: Api<Restore>,
    mut writer: Writer<Restore>,
    index: Arc<Mutex<QueueIndex>>,
    triggers: UnboundedSender<ObjectRef<NonAdminRestore>>,
    synced: Synced,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<Restore, watcher::Error>> + Send {
    let store = writer.as_reader();
    let namespace = api_namespace(&api);
    let s = watcher(api)
        .default_backoff()
        .modify(|r: &mut Restore| {
            r.metadata.managed_fields = None;
            if !NAR.is_tagged(&r.metadata) {
                r.spec = Default::default();
                if let Some(s) = r.status.as_mut() {
                    *s = crate::velero::RestoreStatus {
                        phase: s.phase.take(),
                        queue_position: s.queue_position,
                        ..Default::default()
                    };
                }
            }
        })
        .map_ok(move |ev| {
            // The index first: once the store reports ready, positions must be complete too.
            let changed = index_event(&index, &ev, observe_restore);
            apply_filtered(&mut writer, &ev, |r: &Restore| NAR.is_tagged(&r.metadata));
            if matches!(ev, Event::InitDone) {
                synced.mark();
            }
            for name in changed {
                let r = store
                    .get(&ObjectRef::new(&name).within(&namespace))
                    .and_then(|o| NAR.owner(&o.metadata));
                if let Some(r) = r {
                    let _ = triggers.unbounded_send(r);
                }
            }
            set_gauge(&metrics, "Restore", store.len());
            ev
        })
        .touched_objects();
    log_errors(s, "velero restores")
}

/// nac's DeleteBackupRequests (label-selected), reflected into `writer`.
pub fn delete_request_stream(
    api: Api<crate::velero::DeleteBackupRequest>,
    writer: Writer<crate::velero::DeleteBackupRequest>,
    synced: Synced,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<crate::velero::DeleteBackupRequest, watcher::Error>> + Send {
    let store = writer.as_reader();
    let s = kube::runtime::watcher(
        api,
        watcher::Config::default().labels(crate::naming::NAB_ORIGIN_NACUUID_LABEL),
    )
    .default_backoff()
    .modify(|o: &mut crate::velero::DeleteBackupRequest| o.metadata.managed_fields = None)
    .reflect(writer)
    .inspect_ok(move |ev| {
        if matches!(ev, Event::InitDone) {
            synced.mark();
        }
        set_gauge(&metrics, "DeleteBackupRequest", store.len())
    })
    .touched_objects();
    log_errors(s, "velero deletebackuprequests")
}

/// Per-volume objects of backups (DataUploads, PodVolumeBackups; labelled `velero.io/backup-name`): counted by
/// backup and phase; a change of a count triggers the NonAdminBackup of that backup. Only feeds `counts`, so the
/// stream yields nothing. `synced` is marked after the first list, or when the kind does not exist (no such
/// objects to count).
pub fn volume_count_stream<K>(
    api: Api<K>,
    counts: Arc<Mutex<PhaseCounts>>,
    synced: Synced,
    backups: Store<Backup>,
    triggers: UnboundedSender<ObjectRef<NonAdminBackup>>,
    phase: fn(&K) -> Option<String>,
    what: &'static str,
) -> impl Stream<Item = ()> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let namespace = api_namespace(&api);
    let s = kube::runtime::watcher(api, watcher::Config::default().labels(VELERO_BACKUP_NAME_LABEL))
        .default_backoff()
        .inspect_err({
            let synced = synced.clone();
            move |e| {
                if let watcher::Error::InitialListFailed(kube::Error::Api(s)) = e {
                    if s.code == 404 {
                        synced.mark();
                    }
                }
            }
        })
        .map_ok(move |ev| {
            let owner = |o: &K| o.labels().get(VELERO_BACKUP_NAME_LABEL).cloned().unwrap_or_default();
            let changed = {
                let mut c = counts.lock().expect("counts lock");
                match &ev {
                    Event::Apply(o) => c.upsert(&o.name_any(), &owner(o), phase(o).as_deref()),
                    Event::Delete(o) => c.remove(&o.name_any()),
                    Event::Init => {
                        c.start_relist();
                        Vec::new()
                    }
                    Event::InitApply(o) => {
                        c.relist_item(&o.name_any(), &owner(o), phase(o).as_deref());
                        Vec::new()
                    }
                    Event::InitDone => {
                        synced.mark();
                        c.finish_relist()
                    }
                }
            };
            for backup in changed {
                let r = backups
                    .get(&ObjectRef::new(&backup).within(&namespace))
                    .and_then(|b| NAB.owner(&b.metadata));
                if let Some(r) = r {
                    let _ = triggers.unbounded_send(r);
                }
            }
        });
    log_errors(s, what).map(|_| ())
}

fn api_namespace<K: Resource>(api: &Api<K>) -> String {
    api.namespace().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn synced_is_seen_by_waiters_and_times_out_otherwise() {
        let s = Synced::default();
        assert!(!s.is_synced());
        assert!(!s.wait(Duration::from_millis(10)).await);
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.wait(Duration::from_secs(5)).await })
        };
        s.mark();
        assert!(waiter.await.unwrap());
        assert!(s.is_synced());
    }

    #[tokio::test]
    async fn coalescing_releases_each_object_once_per_interval() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<&str>();
        let mut out = Box::pin(coalesce(rx, Duration::from_millis(50)));
        for x in ["a", "b", "a", "a", "c", "b"] {
            tx.unbounded_send(x).unwrap();
        }
        let first: Vec<&str> = vec![
            out.next().await.unwrap(),
            out.next().await.unwrap(),
            out.next().await.unwrap(),
        ];
        assert_eq!(first, vec!["a", "b", "c"]);
        tx.unbounded_send("a").unwrap();
        drop(tx);
        assert_eq!(out.next().await, Some("a"));
        assert_eq!(out.next().await, None);
    }

    #[tokio::test]
    async fn a_zero_interval_passes_items_straight_through() {
        let mut out = Box::pin(coalesce(futures::stream::iter(vec![1, 1, 2]), Duration::ZERO));
        assert_eq!(out.next().await, Some(1));
        assert_eq!(out.next().await, Some(1));
        assert_eq!(out.next().await, Some(2));
        assert_eq!(out.next().await, None);
    }

    #[test]
    fn a_velero_backup_is_observed_with_its_queue_fields() {
        let mut b = Backup::new("x", Default::default());
        b.status = Some(crate::velero::BackupStatus {
            phase: Some("Queued".into()),
            queue_position: Some(4),
            ..Default::default()
        });
        let o = observe_backup(&b);
        assert_eq!(o.name, "x");
        assert!(o.unfinished);
        assert_eq!(o.velero_position, Some(4));
        b.status.as_mut().unwrap().phase = Some("Completed".into());
        assert!(!observe_backup(&b).unfinished);
    }
}
