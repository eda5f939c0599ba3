//! Watch streams feeding the stores and indexes (one [`WatchIndex`] protocol for all of them), and the triggers
//! that map Velero objects back to the tenant objects they belong to. Watches resume from their resourceVersion
//! and relist when it expired (kube's watcher), back off per stream on errors, and never pass errors on to the
//! controllers (a missing optional Velero CRD must not pause the others).

use crate::controller::counts::{Bytes, PhaseCounts};
use crate::metrics::{KindLabels, Metrics};
use crate::naming::{VELERO_BACKUP_NAME_LABEL, VELERO_RESTORE_NAME_LABEL};
use crate::velero::{BackupStorageLocation, DataDownload, DataUpload, PodVolumeBackup, PodVolumeRestore};
use futures::{Future, Stream, StreamExt, TryStreamExt};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::synced::Synced;

/// Collects items and releases each distinct one once per `every`: a queue advance or a burst of DataUpload
/// progress then costs one reconcile (and at most one write) per object and interval, not one per event. An item
/// that is due and not yet taken is not queued again: what waits is at most one copy of each distinct item,
/// however long the input floods (a drain of 10,000 backups once held over 100,000 copies here).
pub fn coalesce<T, S>(input: S, every: std::time::Duration) -> impl Stream<Item = T> + Send
where
    T: Eq + std::hash::Hash + Clone + Send + Unpin + 'static,
    S: Stream<Item = T> + Send + 'static,
{
    Coalesce::new(input, every)
}

/// Items [`coalesce`] takes in per poll.
const COALESCE_BUDGET: usize = 1024;

struct Coalesce<T> {
    input: std::pin::Pin<Box<dyn Stream<Item = T> + Send>>,
    every: std::time::Duration,
    /// Arrived in the current interval, in order; `seen` holds the same items.
    pending: Vec<T>,
    seen: std::collections::HashSet<T>,
    /// Due and not taken yet, in order; `due` holds the same items.
    ready: std::collections::VecDeque<T>,
    due: std::collections::HashSet<T>,
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    done: bool,
}

impl<T: Eq + std::hash::Hash + Clone + Unpin> Coalesce<T> {
    fn new<S: Stream<Item = T> + Send + 'static>(input: S, every: std::time::Duration) -> Self {
        Coalesce {
            input: Box::pin(input),
            every,
            pending: Vec::new(),
            seen: std::collections::HashSet::new(),
            ready: std::collections::VecDeque::new(),
            due: std::collections::HashSet::new(),
            timer: None,
            done: false,
        }
    }

    /// Gives back what a burst grew (a start or a drain triggers every queued object once: thousands of keys in
    /// four collections that would otherwise keep their size for the life of the process).
    fn release_capacity(&mut self) {
        const KEEP: usize = 64;
        if self.due.capacity() > KEEP || self.seen.capacity() > KEEP {
            self.pending.shrink_to(KEEP);
            self.seen.shrink_to(KEEP);
            self.ready.shrink_to(KEEP);
            self.due.shrink_to(KEEP);
        }
    }

    /// Items held: each distinct one at most once in `pending` and once in `ready`.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.pending.len() + self.ready.len()
    }
}

impl<T: Eq + std::hash::Hash + Clone + Unpin> Stream for Coalesce<T> {
    type Item = T;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        use std::task::Poll;
        let this = self.get_mut();
        // A flood of input (a queue drained as fast as the API server takes it) must not keep this poll from
        // returning: at most this many items per poll, then what is due goes out and the task is woken again.
        let mut budget = COALESCE_BUDGET;
        while !this.done {
            if budget == 0 {
                cx.waker().wake_by_ref();
                break;
            }
            budget -= 1;
            match this.input.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    if this.every.is_zero() {
                        return Poll::Ready(Some(item));
                    }
                    // Already due: its release is still to come and reads the newest state then.
                    if !this.due.contains(&item) && this.seen.insert(item.clone()) {
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
            for item in this.pending.drain(..) {
                if this.due.insert(item.clone()) {
                    this.ready.push_back(item);
                }
            }
        }
        match this.ready.pop_front() {
            Some(item) => {
                this.due.remove(&item);
                if this.ready.is_empty() && this.pending.is_empty() {
                    this.release_capacity();
                }
                Poll::Ready(Some(item))
            }
            None if this.done && this.pending.is_empty() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

/// Drops (after logging) the errors of a watch stream that already backs off on its own.
pub fn log_errors<S, K>(stream: S, what: &'static str) -> impl Stream<Item = Result<K, watcher::Error>> + Send
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
pub fn apply_filtered<K>(writer: &mut Writer<K>, ev: &Event<K>, keep: impl Fn(&K) -> bool)
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

pub fn set_gauge(metrics: &Metrics, kind: &str, n: usize) {
    metrics
        .velero_objects
        .get_or_create(&KindLabels { kind: kind.to_string() })
        .set(n as i64);
}

/// The protocol of every watch-fed index (queue positions, per-backup counts, and the indexes of kinds to come):
/// objects come and go one event at a time, and a relist (watch restart) is buffered and swapped in whole at its
/// end. Each step returns the keys whose indexed value changed, so exactly their tenant objects are triggered.
pub trait WatchIndex<K> {
    fn upsert_object(&mut self, o: &K) -> Vec<String>;
    fn remove_object(&mut self, o: &K) -> Vec<String>;
    fn relist_start(&mut self);
    fn relist_object(&mut self, o: &K);
    fn relist_done(&mut self) -> Vec<String>;

    /// Applies one watch event.
    fn apply(&mut self, ev: &Event<K>) -> Vec<String> {
        match ev {
            Event::Apply(o) => self.upsert_object(o),
            Event::Delete(o) => self.remove_object(o),
            Event::Init => {
                self.relist_start();
                Vec::new()
            }
            Event::InitApply(o) => {
                self.relist_object(o);
                Vec::new()
            }
            Event::InitDone => self.relist_done(),
        }
    }
}

/// A per-volume object of a backup or restore (labelled with its owner's name) counted by phase.
pub trait VolumeProgress:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The label naming its Velero Backup or Restore.
    const OWNER_LABEL: &'static str;
    /// Its watch's name in logs.
    const WATCH: &'static str;
    fn phase(&self) -> Option<String>;
    /// The uploader it names (`spec.uploaderType` of a PodVolumeBackup), if any.
    fn uploader(&self) -> Option<&str>;
    /// The bytes it reports done of its total (`status.progress`).
    fn bytes(&self) -> Bytes;
    fn backup(&self) -> String {
        self.labels().get(Self::OWNER_LABEL).cloned().unwrap_or_default()
    }
}

macro_rules! volume_progress {
    ($($t:ty => $label:expr, $watch:literal),* $(,)?) => {$(
        impl VolumeProgress for $t {
            const OWNER_LABEL: &'static str = $label;
            const WATCH: &'static str = $watch;
            fn phase(&self) -> Option<String> {
                self.status.as_ref().and_then(|s| s.phase.clone())
            }
            fn uploader(&self) -> Option<&str> {
                self.spec.rest.get("uploaderType").and_then(|u| u.as_str()).filter(|u| !u.is_empty())
            }
            fn bytes(&self) -> Bytes {
                let p = self.status.as_ref().and_then(|s| s.progress.as_ref());
                Bytes {
                    done: p.and_then(|p| p.bytes_done).unwrap_or(0).max(0),
                    total: p.and_then(|p| p.total_bytes).unwrap_or(0).max(0),
                }
            }
        }
    )*};
}

volume_progress!(
    DataUpload => VELERO_BACKUP_NAME_LABEL, "velero datauploads",
    PodVolumeBackup => VELERO_BACKUP_NAME_LABEL, "velero podvolumebackups",
    DataDownload => VELERO_RESTORE_NAME_LABEL, "velero datadownloads",
    PodVolumeRestore => VELERO_RESTORE_NAME_LABEL, "velero podvolumerestores",
);

/// What the counts hold of a per-volume object.
fn entry<V: VolumeProgress>(o: &V) -> super::counts::Entry {
    super::counts::Entry::new(&o.backup(), o.phase().as_deref(), o.uploader(), o.bytes())
}

/// Per-volume counts, keyed by the owning Velero Backup's name.
impl<V: VolumeProgress> WatchIndex<V> for PhaseCounts {
    fn upsert_object(&mut self, o: &V) -> Vec<String> {
        self.upsert_with(&o.name_any(), entry(o))
    }
    fn remove_object(&mut self, o: &V) -> Vec<String> {
        self.remove(&o.name_any())
    }
    fn relist_start(&mut self) {
        self.start_relist()
    }
    fn relist_object(&mut self, o: &V) {
        self.relist_item_with(&o.name_any(), entry(o))
    }
    fn relist_done(&mut self) -> Vec<String> {
        self.finish_relist()
    }
}

pub fn watcher<K>(api: Api<K>) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    kube::runtime::watcher(api, config())
}

/// Whether watches start by streaming (WatchList): chosen once per process by [`choose_initial_lists`].
static STREAMING_LISTS: AtomicBool = AtomicBool::new(false);

/// The watch settings of every store and trigger of the controllers. A streamed start holds one object at a time
/// before it is made compact; a paged list holds a page of 500 whole objects (managedFields and all) and the
/// response body, for every kind listing at once — most of nac's peak memory when it starts over many objects.
pub fn config() -> watcher::Config {
    let c = watcher::Config::default();
    if STREAMING_LISTS.load(Ordering::Relaxed) {
        c.streaming_lists()
    } else {
        c
    }
}

/// Sets how watches start, from `opts.initial_lists`; `auto` asks the API server once (a streamed watch of the
/// ConfigMaps of nac's namespace named as its Lease, which nac may watch): an API server without WatchList
/// refuses `sendInitialEvents`, and a watcher asking for it would then retry forever.
pub async fn choose_initial_lists(client: &kube::Client, opts: &crate::controller::Options) {
    use crate::config::InitialLists;
    let stream = match opts.initial_lists {
        InitialLists::Stream => true,
        InitialLists::Paged => false,
        InitialLists::Auto => streams_initial_events(client, &opts.lease_namespace, &opts.lease_name).await,
    };
    tracing::info!(streaming = stream, setting = ?opts.initial_lists, "watches' initial lists");
    STREAMING_LISTS.store(stream, Ordering::Relaxed);
}

/// Whether the API server answers a watch with `sendInitialEvents` by the end-of-initial-events bookmark.
async fn streams_initial_events(client: &kube::Client, namespace: &str, name: &str) -> bool {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{WatchEvent, WatchParams};
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(10)
        .initial_events();
    let probe = async {
        let events = api.watch(&wp, "0").await?;
        futures::pin_mut!(events);
        while let Some(ev) = events.try_next().await? {
            match ev {
                WatchEvent::Bookmark(b) => {
                    return Ok(b.metadata.annotations.contains_key("k8s.io/initial-events-end"));
                }
                WatchEvent::Error(e) => return Err(kube::Error::Api(e)),
                _ => {}
            }
        }
        Ok(false)
    };
    match tokio::time::timeout(std::time::Duration::from_secs(15), probe).await {
        Ok(Ok(streams)) => streams,
        Ok(Err(e)) => {
            tracing::info!(error = %e, "the API server does not stream initial lists: watches list in pages");
            false
        }
        Err(_) => {
            tracing::info!("no answer to a streamed watch in 15 s: watches list in pages");
            false
        }
    }
}

/// nac's DeleteBackupRequests (label-selected), reflected into `writer`.
pub fn delete_request_stream(
    api: Api<crate::velero::DeleteBackupRequest>,
    writer: Writer<crate::velero::DeleteBackupRequest>,
    synced: Synced,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<crate::velero::DeleteBackupRequest, watcher::Error>> + Send {
    let store = writer.as_reader();
    let cfg = config().labels(crate::naming::NAB_ORIGIN_NACUUID_LABEL);
    store_stream(api, cfg, writer, synced, "velero deletebackuprequests")
        .inspect(move |_| set_gauge(&metrics, "DeleteBackupRequest", store.len()))
}

/// Velero's BackupStorageLocations, reflected into `writer`; `changed` hears each location on every change, and
/// whether it exists now (restores wait for their backup's location to be Available). Told from the event, not
/// the store: during the first list the store is filled only at its end. `synced` is marked after the first list,
/// or when the kind does not exist.
pub fn location_stream(
    api: Api<BackupStorageLocation>,
    writer: Writer<BackupStorageLocation>,
    synced: Synced,
    mut changed: impl FnMut(&BackupStorageLocation, bool) + Send + 'static,
) -> impl Stream<Item = ()> + Send {
    let s = watcher(api)
        .default_backoff()
        .inspect_err({
            let synced = synced.clone();
            move |e| mark_if_missing(&synced, e)
        })
        .modify(|o: &mut BackupStorageLocation| o.metadata.managed_fields = None)
        .reflect(writer)
        .map_ok(move |ev| match &ev {
            Event::InitDone => synced.mark(),
            Event::Apply(o) | Event::InitApply(o) => changed(o, true),
            Event::Delete(o) => changed(o, false),
            _ => {}
        });
    log_errors(s, "velero backupstoragelocations").map(|_| ())
}

/// A watch whose kind does not exist has nothing to wait for: its store counts as synced (empty).
pub fn mark_if_missing(synced: &Synced, e: &watcher::Error) {
    if let watcher::Error::InitialListFailed(kube::Error::Api(s)) = e {
        if s.code == 404 {
            synced.mark();
        }
    }
}

/// A kind nac keeps a store of (DeleteBackupRequests, storage locations, approval requests, label-selected Secret
/// copies), reflected into `writer`; `synced` is marked after the first list, or when the kind does not exist.
pub fn store_stream<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    synced: Synced,
    what: &'static str,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    origin_stream(api, config, writer, synced, what, |_: &K| {})
}

/// [`store_stream`] of a tenant kind: `deleted` hears each object's delete event (garbage collection).
pub fn origin_stream<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    synced: Synced,
    what: &'static str,
    deleted: impl Fn(&K) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let store = writer.as_reader();
    let s = kube::runtime::watcher(api, config)
        .default_backoff()
        .inspect_err({
            let synced = synced.clone();
            move |e| mark_if_missing(&synced, e)
        })
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .inspect_ok(move |ev| match ev {
            Event::InitDone => synced.mark(),
            Event::Delete(o) => deleted(o),
            _ => {}
        });
    log_errors(super::after_init::touched_after_init(s, store), what)
}

/// Secrets' metadata, cluster-wide, without a store: nac reads a tenant's Secret only when a storage location
/// names it, but hears of every change so a rotated credential reaches its copy within seconds. `changed` hears
/// `(namespace, name)` of each Secret added or changed.
pub fn secret_changes(
    api: Api<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>>,
    changed: impl Fn(&str, &str) + Send + 'static,
) -> impl Stream<Item = ()> + Send {
    let s = kube::runtime::watcher(api, config())
        .default_backoff()
        .map_ok(move |ev| {
            if let Event::Apply(m) | Event::InitApply(m) = &ev {
                changed(
                    m.metadata.namespace.as_deref().unwrap_or_default(),
                    m.metadata.name.as_deref().unwrap_or_default(),
                );
            }
        });
    log_errors(s, "secrets (metadata)").map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::index::velero::VeleroObject;
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

    #[test]
    fn a_flood_of_input_does_not_hold_back_what_is_due() {
        // An input that is always ready (a queue drained as fast as the API server takes it): items still come
        // out once per interval. On a thread of its own, so a poll that never returns fails the test, not hangs it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut n = 0u64;
                let flood = futures::stream::poll_fn(move |_| {
                    n += 1;
                    std::task::Poll::Ready(Some(n % 3))
                });
                let mut out = Box::pin(coalesce(flood, Duration::from_millis(20)));
                let mut got = std::collections::HashSet::new();
                while got.len() < 3 {
                    got.insert(out.next().await.unwrap());
                }
                let _ = tx.send(got);
            })
        });
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("nothing released from a flood of input");
        assert_eq!(got, [0, 1, 2].into());
    }

    #[tokio::test]
    async fn a_flood_of_repeats_holds_at_most_one_copy_of_each_item() {
        // Three distinct items arriving without end, taken more slowly than they come (one per poll, while each
        // poll takes in up to a budget of input): what waits stays at one copy of each.
        let mut n = 0u64;
        let flood = futures::stream::poll_fn(move |_| {
            n += 1;
            std::task::Poll::Ready(Some(n % 3))
        });
        let mut c = Coalesce::new(flood, Duration::from_millis(1));
        let mut out = std::collections::HashSet::new();
        let mut most = 0;
        for _ in 0..300 {
            out.insert(c.next().await.unwrap());
            most = most.max(c.held());
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        assert_eq!(out, [0, 1, 2].into());
        assert!(most <= 6, "held {most} items for 3 distinct ones");
    }

    #[tokio::test]
    async fn a_burst_gives_its_memory_back_once_released() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut c = Coalesce::new(rx, Duration::from_millis(5));
        for i in 0..10_000 {
            tx.unbounded_send(i).unwrap();
        }
        for _ in 0..10_000 {
            c.next().await.unwrap();
        }
        assert!(c.seen.capacity() <= 64 * 2, "seen kept {}", c.seen.capacity());
        assert!(c.due.capacity() <= 64 * 2, "due kept {}", c.due.capacity());
        assert!(c.pending.capacity() <= 64 && c.ready.capacity() <= 64);
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
        let mut b = crate::velero::Backup::new("x", Default::default());
        b.status = Some(crate::velero::BackupStatus {
            phase: Some("Queued".into()),
            queue_position: Some(4),
            ..Default::default()
        });
        let o = b.observe();
        assert_eq!(o.name, "x");
        assert!(o.unfinished);
        assert_eq!(o.velero_position, Some(4));
        b.status.as_mut().unwrap().phase = Some("Completed".into());
        assert!(!b.observe().unfinished);
    }
}
