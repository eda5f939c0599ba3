//! The reconcilers' writes: status through the status subresource only when it changed (conflicts re-read and
//! re-planned), idempotent creates, tolerant deletes. Every request that writes is counted in `nac_api_writes`.

use crate::metrics::Metrics;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Attempts at a status write before the conflict is handed to the error policy.
const STATUS_ATTEMPTS: usize = 4;

pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason != "AlreadyExists")
}

pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The newest resourceVersion nac knows of each object it wrote, and when. The watch cache lags behind nac's own
/// writes by a few milliseconds; a reconcile that starts in that window would plan from the old object and lose a
/// write to a conflict. It waits for the cache instead (the write's own watch event triggers the next reconcile),
/// and reads the object only when the cache stays behind for longer than [`CACHE_WAIT`].
#[derive(Debug, Default)]
pub struct RecentWrites {
    versions: Mutex<HashMap<String, Written>>,
    /// uids of objects nac just added its finalizer to, until the cache shows it.
    finalizing: Mutex<std::collections::HashSet<String>>,
    /// uids of objects whose finalizer nac removed (they are going), newest last: a reconcile queued meanwhile
    /// from a cached copy that still shows it does not run the cleanup and remove it again. The cache catches up
    /// within milliseconds, so the last few hundred are enough.
    released: Mutex<std::collections::VecDeque<String>>,
    /// Velero objects nac just created (kind/namespace/name, and when), newest last: a reconcile that runs before
    /// the Velero watch shows one waits for that watch event instead of reading the object.
    made: Mutex<std::collections::VecDeque<(String, Instant)>>,
    /// uids of objects nac deleted, newest last: a cached copy that still shows one is behind, and deleting it
    /// again would only be answered 404 (the garbage collector and a retried cleanup look at that copy).
    deleted: Mutex<std::collections::VecDeque<String>>,
}

/// How many released uids [`RecentWrites`] remembers (and as many deleted uids, and made objects).
const RELEASED_KEPT: usize = 512;

/// Appends `item`, dropping the oldest beyond [`RELEASED_KEPT`].
fn push_bounded<T>(q: &mut std::collections::VecDeque<T>, item: T) {
    if q.len() >= RELEASED_KEPT {
        q.pop_front();
    }
    q.push_back(item);
}

/// How long a reconcile waits for the watch cache to show nac's own last write of an object before it reads the
/// object instead (a watch that is down or re-listing). The write's watch event normally arrives within
/// milliseconds, and triggers the reconcile itself.
pub const CACHE_WAIT: Duration = Duration::from_secs(5);

/// nac's last write of an object: its resourceVersion, and when it was written.
#[derive(Debug)]
struct Written {
    version: String,
    at: Instant,
}

/// Whether a cached copy at `cached` shows nac's write at `written`: the same version, or a later one. Versions are
/// opaque to clients, but every API server numbers them from etcd's revision, which only grows: a larger number is
/// a later write (someone else's after nac's). Versions that are not numbers are only ever equal.
fn caught_up(cached: Option<&String>, written: &str) -> bool {
    let Some(cached) = cached else {
        return false;
    };
    cached == written || matches!((cached.parse::<u64>(), written.parse::<u64>()), (Ok(c), Ok(w)) if c > w)
}

impl RecentWrites {
    fn key<K: Resource>(obj: &K) -> String
    where
        K::DynamicType: Default,
    {
        format!(
            "{}/{}/{}",
            K::kind(&Default::default()),
            obj.meta().namespace.as_deref().unwrap_or_default(),
            obj.meta().name.as_deref().unwrap_or_default()
        )
    }

    /// Remembers the resourceVersion of an object as nac last wrote (or read) it.
    pub fn record<K: Resource>(&self, obj: &K)
    where
        K::DynamicType: Default,
    {
        if let Some(rv) = obj.meta().resource_version.clone() {
            self.versions.lock().expect("recent writes lock").insert(
                Self::key(obj),
                Written {
                    version: rv,
                    at: Instant::now(),
                },
            );
        }
    }

    /// How long ago nac wrote a version of `obj` that the cached `obj` does not show yet (`None`: it shows nac's
    /// last write, or nac wrote none); forgets the record once the cache caught up.
    pub fn behind<K: Resource>(&self, obj: &K) -> Option<Duration>
    where
        K::DynamicType: Default,
    {
        let key = Self::key(obj);
        let mut m = self.versions.lock().expect("recent writes lock");
        let written = m.get(&key)?;
        if caught_up(obj.meta().resource_version.as_ref(), &written.version) {
            m.remove(&key);
            return None;
        }
        Some(written.at.elapsed())
    }

    /// Whether a cached `obj` is older than what nac knows; forgets the record once the cache caught up.
    pub fn is_stale<K: Resource>(&self, obj: &K) -> bool
    where
        K::DynamicType: Default,
    {
        self.behind(obj).is_some()
    }
}

impl RecentWrites {
    /// Notes that nac created `obj` (a Velero object).
    pub fn made<K: Resource>(&self, obj: &K)
    where
        K::DynamicType: Default,
    {
        push_bounded(
            &mut self.made.lock().expect("made lock"),
            (Self::key(obj), Instant::now()),
        );
    }

    /// How long ago nac created the `K` named `name` in `namespace`, if it did lately.
    pub fn made_since<K: Resource>(&self, namespace: &str, name: &str) -> Option<Duration>
    where
        K::DynamicType: Default,
    {
        let key = format!("{}/{namespace}/{name}", K::kind(&Default::default()));
        let q = self.made.lock().expect("made lock");
        q.iter().rev().find(|(k, _)| *k == key).map(|(_, at)| at.elapsed())
    }

    /// Notes that nac added its finalizer to the object with this uid.
    pub fn finalizer_added(&self, uid: &str) {
        self.finalizing.lock().expect("finalizing lock").insert(uid.to_string());
    }

    /// Whether the finalizer was added but the cache does not show it yet (adding again would fail).
    pub fn finalizer_in_flight(&self, uid: &str) -> bool {
        self.finalizing.lock().expect("finalizing lock").contains(uid)
    }

    /// The cache shows the finalizer: nothing in flight any more.
    pub fn finalizer_seen(&self, uid: &str) {
        self.finalizing.lock().expect("finalizing lock").remove(uid);
    }

    /// Notes that nac removed its finalizer from the object with this uid.
    pub fn finalizer_removed(&self, uid: &str) {
        push_bounded(&mut self.released.lock().expect("released lock"), uid.to_string());
    }

    /// Notes that nac deleted the object with this uid (it is gone, or going).
    pub fn deleted(&self, uid: Option<&str>) {
        if let Some(uid) = uid {
            push_bounded(&mut self.deleted.lock().expect("deleted lock"), uid.to_string());
        }
    }

    /// Whether nac deleted the object with this uid lately (a cached copy showing it is behind).
    pub fn was_deleted(&self, uid: Option<&str>) -> bool {
        uid.is_some_and(|uid| self.deleted.lock().expect("deleted lock").iter().any(|u| u == uid))
    }

    /// Whether nac removed its finalizer from this object already (a cached copy showing it is behind).
    pub fn was_released(&self, uid: &str) -> bool {
        self.released.lock().expect("released lock").iter().any(|u| u == uid)
    }
}

/// Runs kube's finalizer helper around `body`, counting its own patches as writes, and not adding the finalizer
/// a second time while the cache still shows the object without it.
pub async fn with_finalizer<K, F, Fut>(
    api: &Api<K>,
    finalizer_name: &str,
    obj: std::sync::Arc<K>,
    recent: &RecentWrites,
    metrics: &Metrics,
    body: F,
) -> Result<kube::runtime::controller::Action, super::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
    K::DynamicType: Default,
    F: FnOnce(kube::runtime::finalizer::Event<K>) -> Fut,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, super::Error>>,
{
    use kube::runtime::finalizer::Error as F;
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let has = obj.finalizers().iter().any(|f| f == finalizer_name);
    let deleting = obj.meta().deletion_timestamp.is_some();
    if has && deleting && recent.was_released(&uid) {
        // Released already: the object's removal event is on its way; cleaning up again would write for nothing.
        return Ok(kube::runtime::controller::Action::await_change());
    }
    if has {
        recent.finalizer_seen(&uid);
    } else if !deleting && recent.finalizer_in_flight(&uid) {
        // The add's watch event brings the object back.
        return Ok(kube::runtime::controller::Action::await_change());
    }
    let kind = K::kind(&Default::default()).to_string();
    let res = kube::runtime::finalizer::finalizer(api, finalizer_name, obj, body).await;
    if !has && !deleting {
        metrics.write(&kind);
        if res.is_ok() {
            recent.finalizer_added(&uid);
        }
    }
    if has && deleting && matches!(&res, Ok(_) | Err(F::RemoveFinalizer(_))) {
        metrics.write(&kind);
        recent.finalizer_seen(&uid);
        if res.is_ok() {
            recent.finalizer_removed(&uid);
        }
    }
    Ok(res?)
}

/// nac's resources with a status subresource.
pub trait HasStatus:
    Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug + Send + Sync + 'static
{
    type Status: Clone + PartialEq + Debug + Send + Sync + CompactStatus + Serialize;
    /// Kind label for the write counter (`<Kind>/status`).
    const STATUS_KIND: &'static str;
    fn status_ref(&self) -> Option<&Self::Status>;
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
    /// Leaves out of a store's copy what the reconcilers do not read (see [`CompactStatus`]): kubectl's copy of
    /// the applied manifest (kubectl's alone), and once the object is settled the webhook's records of its
    /// requester and what they may read (read only before the Velero object is made; the rights record lists
    /// every kind left out, often a kilobyte or two). A status write never sends metadata (the API server keeps
    /// its own for a status update), so what is left out here is never lost.
    fn make_compact(&mut self) {
        let settled = self.status_mut().as_mut().is_some_and(|s| {
            s.make_compact();
            s.is_settled()
        });
        // A settled object's only label is its identity label, which the status records too and which the
        // reconcilers read from the status first (`kind::nacuuid`): its B-tree node (half a KiB) is not kept.
        let identity = self.status_ref().and_then(CompactStatus::identity);
        let only_identity =
            self.meta().labels.as_ref().is_some_and(|l| {
                l.len() == 1 && identity.is_some() && l.values().next().map(String::as_str) == identity
            });
        let meta = self.meta_mut();
        if settled && only_identity {
            meta.labels = None;
        }
        if let Some(a) = meta.annotations.as_mut() {
            a.remove(LAST_APPLIED_ANNOTATION);
            if settled {
                a.remove(crate::rights::REQUESTER_ANNOTATION);
                a.remove(crate::rights::BACKUP_RIGHTS_ANNOTATION);
            }
            if a.is_empty() {
                // An emptied map keeps its node (half a KiB).
                meta.annotations = None;
            }
        }
    }
    /// Whether this is such a copy: a status write then patches only the fields that changed.
    fn is_compact(&self) -> bool {
        self.status_ref().is_some_and(CompactStatus::is_compact)
    }
}

/// kubectl's record of the last applied manifest (`kubectl apply`): a whole copy of the object.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Statuses whose store copies can leave parts out (by default none do).
pub trait CompactStatus {
    fn make_compact(&mut self) {}
    fn is_compact(&self) -> bool {
        false
    }
    /// Whether the object's Velero object exists and its store copy is compact: admission (the only reader of
    /// the webhook's records) is behind it, and a status write patches only the fields that changed.
    fn is_settled(&self) -> bool {
        false
    }
    /// Whether what this compact status left out is left out of `other` too, unchanged: a write of the fields in
    /// which this status differs from `other` then loses nothing (see `update_status`).
    fn left_out_as_in(&self, _other: &Self) -> bool {
        false
    }
    /// The identity (nacuuid) the status records, for kinds whose store copy may leave out the identity label.
    fn identity(&self) -> Option<&str> {
        None
    }
}

/// `HasStatus` for nac's resources: each has a `status: Option<Status>` field.
#[macro_export]
macro_rules! has_status {
    ($($kind:ty => $status:ty, $label:literal;)*) => {$(
        impl $crate::controller::write::HasStatus for $kind {
            type Status = $status;
            const STATUS_KIND: &'static str = $label;
            fn status_ref(&self) -> Option<&Self::Status> {
                self.status.as_ref()
            }
            fn status_mut(&mut self) -> &mut Option<Self::Status> {
                &mut self.status
            }
        }
    )*};
}

/// The result of [`update_status`].
pub struct StatusUpdate<K: HasStatus> {
    /// The object as stored after the update (or as read, when nothing changed).
    pub object: K,
    /// The status it had before the write.
    pub old: Option<K::Status>,
    pub written: bool,
    /// Not written: the planned status holds a compact copy of what it mirrors (planned from a store's compact
    /// copy of it) that differs from the one the object has, and a compact copy is never written. The caller plans
    /// again from the mirrored object itself.
    pub incomplete: bool,
}

impl<K: HasStatus> StatusUpdate<K> {
    fn unwritten(object: K, incomplete: bool) -> Self {
        let old = object.status_ref().cloned();
        StatusUpdate {
            object,
            old,
            written: false,
            incomplete,
        }
    }

    pub fn status(&self) -> Option<&K::Status> {
        self.object.status_ref()
    }
}

/// Writes the status `plan` computes from the current one, if it differs. The write is conditional on the
/// object's resourceVersion; on a conflict the object is read again and the status planned again from it.
pub async fn update_status<K, F>(
    api: &Api<K>,
    obj: &K,
    recent: &RecentWrites,
    metrics: &Metrics,
    plan: F,
) -> Result<StatusUpdate<K>, kube::Error>
where
    K: HasStatus,
    F: Fn(Option<&K::Status>) -> K::Status,
{
    let name = obj.name_any();
    let mut current = if recent.is_stale(obj) {
        metrics.stale_read(&K::kind(&()));
        let fresh = api.get(&name).await?;
        recent.record(&fresh);
        fresh
    } else {
        obj.clone()
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let desired = plan(current.status_ref());
        if current.status_ref() == Some(&desired) {
            return Ok(StatusUpdate::unwritten(current, false));
        }
        let compact_unchanged = current.status_ref().is_some_and(|c| desired.left_out_as_in(c));
        if desired.is_compact() && !compact_unchanged {
            return Ok(StatusUpdate::unwritten(current, true));
        }
        let old = current.status_ref().cloned();
        metrics.write(K::STATUS_KIND);
        let written = if current.is_compact() {
            // A store's compact copy would write back what it left out: only the fields that changed, on the
            // version they were planned from (no read of the object first).
            let patch = status_patch(&current, &desired)?;
            api.patch_status(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
        } else {
            let mut next = current.clone();
            *next.status_mut() = Some(desired);
            api.replace_status(&name, &PostParams::default(), &next).await
        };
        match written {
            Ok(object) => {
                recent.record(&object);
                return Ok(StatusUpdate {
                    object,
                    old,
                    written: true,
                    incomplete: false,
                });
            }
            Err(e) if is_conflict(&e) && attempt < STATUS_ATTEMPTS => {
                tracing::debug!(object = %name, attempt, "status write conflict; re-reading");
                metrics.stale_read(&K::kind(&()));
                current = api.get(&name).await?;
                recent.record(&current);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A JSON patch of the status fields in which `desired` differs from `current`'s status, conditional on
/// `current`'s resourceVersion (a conflict when the object changed since). Each field is written whole: a
/// compact copy compares its left-out parts by fingerprint, so a field whose copy is compact and unchanged is not
/// written, and one planned anew carries its whole value.
fn status_patch<K: HasStatus>(current: &K, desired: &K::Status) -> Result<json_patch::Patch, kube::Error> {
    use serde_json::{json, Value};
    let old = serde_json::to_value(current.status_ref()).map_err(kube::Error::SerdeError)?;
    let new = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
    let mut ops = vec![json!({
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": current.meta().resource_version.clone().unwrap_or_default(),
    })];
    match (old.as_object(), new.as_object()) {
        (Some(old), Some(new)) => {
            let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            for k in keys {
                let path = format!("/status/{}", k.replace('~', "~0").replace('/', "~1"));
                match (old.get(k), new.get(k)) {
                    (a, Some(b)) if a != Some(b) => ops.push(json!({"op": "add", "path": path, "value": b})),
                    (Some(_), None) => ops.push(json!({"op": "remove", "path": path})),
                    _ => {}
                }
            }
        }
        _ => ops.push(json!({"op": "add", "path": "/status", "value": new})),
    }
    serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)
}

/// Creates `obj`; if it already exists (a previous attempt, another term), reads the existing one instead.
pub async fn create_or_get<K>(api: &Api<K>, obj: &K, metrics: &Metrics, kind: &str) -> Result<K, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    metrics.write(kind);
    match api.create(&PostParams::default(), obj).await {
        Ok(created) => Ok(created),
        Err(e) if is_already_exists(&e) => api.get(&obj.name_any()).await,
        Err(e) => Err(e),
    }
}

/// Deletes `name`. Returns true when it is gone now, false when it lingers (finalizers).
pub async fn delete_if_present<K>(api: &Api<K>, name: &str, metrics: &Metrics, kind: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    metrics.write(kind);
    match api.delete(name, &DeleteParams::background()).await {
        // Custom resources come back as the deleted object: gone unless finalizers hold it.
        Ok(either) => Ok(either.either(|o| o.finalizers().is_empty(), |_| true)),
        Err(e) if is_not_found(&e) => Ok(true),
        Err(e) => Err(e),
    }
}

/// Deletes object `name` only in the version nac judged (`seen`'s uid and resourceVersion): the API server refuses
/// (409 Conflict) once anyone changed it since, so a decision made from the store never applies to a newer
/// version. `Ok(None)`: it changed; the watch brings the new version and the caller decides again. Otherwise as
/// [`delete_if_present`].
pub async fn delete_as_seen<K>(
    api: &Api<K>,
    name: &str,
    seen: &kube::api::ObjectMeta,
    metrics: &Metrics,
    kind: &str,
) -> Result<Option<bool>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    metrics.write(kind);
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: seen.uid.clone(),
            resource_version: seen.resource_version.clone(),
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &dp).await {
        Ok(either) => Ok(Some(either.either(|o| o.finalizers().is_empty(), |_| true))),
        Err(e) if is_not_found(&e) => Ok(Some(true)),
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NonAdminBackup, NonAdminBackupSpec, NonAdminBackupStatus};

    #[test]
    fn a_released_object_is_remembered_within_bounds() {
        let r = RecentWrites::default();
        r.finalizer_removed("u0");
        assert!(r.was_released("u0"));
        assert!(!r.was_released("u1"));
        for i in 1..=RELEASED_KEPT {
            r.finalizer_removed(&format!("u{i}"));
        }
        assert!(!r.was_released("u0"), "the oldest is forgotten");
        assert!(r.was_released(&format!("u{RELEASED_KEPT}")));
        assert_eq!(r.released.lock().unwrap().len(), RELEASED_KEPT);
    }

    #[test]
    fn a_deleted_object_is_remembered_by_uid() {
        let r = RecentWrites::default();
        assert!(!r.was_deleted(Some("u1")));
        r.deleted(None);
        assert!(!r.was_deleted(None), "no uid, nothing recorded");
        r.deleted(Some("u1"));
        assert!(r.was_deleted(Some("u1")));
        assert!(!r.was_deleted(Some("u2")));
    }

    fn nab(rv: &str) -> NonAdminBackup {
        let mut n = NonAdminBackup::new("b", NonAdminBackupSpec::default());
        n.metadata.namespace = Some("ns".into());
        n.metadata.resource_version = Some(rv.into());
        n
    }

    #[test]
    fn a_cache_behind_our_own_write_is_stale_until_it_catches_up() {
        let r = RecentWrites::default();
        assert!(!r.is_stale(&nab("1")), "nothing written: trust the cache");
        r.record(&nab("5"));
        assert!(r.is_stale(&nab("4")));
        assert!(r.is_stale(&nab("4")), "still stale on the next reconcile");
        assert!(!r.is_stale(&nab("5")), "caught up");
        assert!(!r.is_stale(&nab("4")), "the record is gone once the cache caught up");
    }

    #[test]
    fn a_settled_backup_is_stored_without_its_identity_label_whose_nacuuid_the_status_records() {
        use crate::api::{NonAdminPhase, VeleroBackupRef};
        use crate::naming::{nacuuid_with, NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL};
        let u = nacuuid_with("ns", "b", "0d0b7b2c-ee76-412d-a867-2c23b8aa51ab");
        let made = |phase: NonAdminPhase, labels: &[(&str, &str)], recorded: &str| {
            let mut n = nab("1");
            n.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
            n.status = Some(NonAdminBackupStatus {
                phase: Some(phase),
                velero_backup: Some(VeleroBackupRef {
                    nacuuid: Some(recorded.into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
            n.make_compact();
            n
        };
        let settled = made(NonAdminPhase::Created, &[(NAB_ORIGIN_NACUUID_LABEL, &u)], &u);
        assert_eq!(settled.metadata.labels, None);
        assert_eq!(super::super::kind::nacuuid(&settled).as_deref(), Some(u.as_str()));
        // Not settled yet, another value than the status's, or another label beside it: kept as they are.
        let pending = made(NonAdminPhase::New, &[(NAB_ORIGIN_NACUUID_LABEL, &u)], &u);
        assert_eq!(pending.labels().len(), 1);
        let other = made(NonAdminPhase::Created, &[(NAB_ORIGIN_NACUUID_LABEL, "x")], &u);
        assert_eq!(other.labels().len(), 1);
        let synced = made(
            NonAdminPhase::Created,
            &[(NAB_ORIGIN_NACUUID_LABEL, &u), (NAB_SYNCED_FROM_NACUUID_LABEL, &u)],
            &u,
        );
        assert_eq!(synced.labels().len(), 2);
    }

    #[test]
    fn a_settled_backup_is_stored_without_the_webhook_records_an_unsettled_one_with_them() {
        use crate::api::{NonAdminPhase, VeleroBackupRef};
        use crate::rights::{BACKUP_RIGHTS_ANNOTATION, REQUESTER_ANNOTATION};
        let annotated = |phase: Option<NonAdminPhase>| {
            let mut n = nab("1");
            n.metadata.annotations = Some(
                [
                    REQUESTER_ANNOTATION,
                    BACKUP_RIGHTS_ANNOTATION,
                    LAST_APPLIED_ANNOTATION,
                    "team/owner",
                ]
                .iter()
                .map(|k| (k.to_string(), "{}".to_string()))
                .collect(),
            );
            n.status = Some(NonAdminBackupStatus {
                phase,
                // Recorded before the Velero Backup is made (a nacuuid generated by the reconciler).
                velero_backup: Some(VeleroBackupRef {
                    nacuuid: Some("u".into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
            n
        };
        let keys = |n: &NonAdminBackup| n.annotations().keys().cloned().collect::<Vec<_>>();
        // Accepted, Velero Backup not made yet: admission will read the records.
        let mut pending = annotated(Some(NonAdminPhase::New));
        pending.make_compact();
        assert!(pending.is_compact());
        assert_eq!(
            keys(&pending),
            vec![BACKUP_RIGHTS_ANNOTATION, REQUESTER_ANNOTATION, "team/owner"]
        );
        // Created: admission is behind it.
        let mut settled = annotated(Some(NonAdminPhase::Created));
        settled.make_compact();
        assert_eq!(keys(&settled), vec!["team/owner"]);
        // Nothing left: no empty map either.
        let mut bare = annotated(Some(NonAdminPhase::Created));
        bare.annotations_mut().remove("team/owner");
        bare.make_compact();
        assert_eq!(bare.metadata.annotations, None);
    }

    #[test]
    fn a_finalizer_add_is_in_flight_until_seen() {
        let r = RecentWrites::default();
        assert!(!r.finalizer_in_flight("u1"));
        r.finalizer_added("u1");
        assert!(r.finalizer_in_flight("u1"));
        assert!(!r.finalizer_in_flight("u2"));
        r.finalizer_seen("u1");
        assert!(!r.finalizer_in_flight("u1"));
    }

    #[test]
    fn api_errors_are_classified() {
        let err = |code: u16, reason: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                reason: reason.into(),
                ..Default::default()
            }))
        };
        assert!(is_conflict(&err(409, "Conflict")));
        assert!(!is_conflict(&err(409, "AlreadyExists")));
        assert!(is_already_exists(&err(409, "AlreadyExists")));
        assert!(is_not_found(&err(404, "NotFound")));
    }
}
