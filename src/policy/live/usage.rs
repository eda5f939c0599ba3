//! What each namespace uses of its quotas, kept from watch events on every replica (the webhooks answer from it
//! without a read; the reconciler counts again from it): NonAdminBackups holding a backup and the bytes they hold,
//! NonAdminSchedules, and the NonAdminRestores of the last hour (deleted ones included, so deleting a restore does
//! not make room).

use crate::api::{NonAdminBackup, NonAdminRestore, NonAdminSchedule};
use crate::policy::Usage;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

/// The window of `quotas.maxRestoresPerHour`.
pub const RESTORE_WINDOW_SECS: i64 = 3600;

/// One object as the counts see it. Objects order by creation, then name: the reconciler counts only those
/// before the object it judges, so two created at once cannot both take the last place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub created: i64,
    pub name: String,
    /// A backup holding (or about to hold) a backup: not being deleted, not asked to delete its backup, not
    /// refused. Schedules and restores: whether it still exists.
    pub counted: bool,
    /// Bytes a finished backup holds.
    pub bytes: u64,
    /// When a Completed backup ended (seconds), for the recovery-point objective.
    pub completed: Option<i64>,
}

#[derive(Default)]
struct Inner {
    backups: HashMap<String, HashMap<String, Entry>>,
    schedules: HashMap<String, HashMap<String, Entry>>,
    restores: HashMap<String, HashMap<String, Entry>>,
}

/// Per-namespace entries of the three counted kinds, keyed by uid.
#[derive(Default)]
pub struct UsageIndex {
    inner: Mutex<Inner>,
    /// How many of the three watches have read their first list.
    synced: std::sync::atomic::AtomicUsize,
}

/// Which of the index's maps.
#[derive(Clone, Copy)]
enum Which {
    Backups,
    Schedules,
    Restores,
}

impl Inner {
    fn map(&mut self, w: Which) -> &mut HashMap<String, HashMap<String, Entry>> {
        match w {
            Which::Backups => &mut self.backups,
            Which::Schedules => &mut self.schedules,
            Which::Restores => &mut self.restores,
        }
    }
}

fn created_of(meta: &kube::core::ObjectMeta) -> i64 {
    meta.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second())
}

/// A NonAdminBackup as the counts read it: only the fields [`backup_entry`] reads are decoded, the rest of each
/// object (spec, the Velero Backup's spec and status copies, managedFields) is skipped while parsing. The watch
/// of every NonAdminBackup runs on every replica; whole objects cost it a page of them at each list and a whole
/// object per event, for a few fields.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CountedBackup {
    #[serde(deserialize_with = "counted_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: CountedSpec,
    status: Option<CountedStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedSpec {
    #[serde(default)]
    delete_backup: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedStatus {
    #[serde(default)]
    conditions: Vec<CountedCondition>,
    velero_backup: Option<CountedVelero>,
    volume_data_progress: Option<CountedProgress>,
}

#[derive(Clone, Debug, Deserialize)]
struct CountedCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct CountedVelero {
    name: Option<String>,
    status: Option<CountedVeleroStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedVeleroStatus {
    phase: Option<String>,
    completion_timestamp: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedProgress {
    total_bytes: i64,
}

/// The metadata the counts and the watch read (the watch resumes from `resourceVersion`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

fn counted_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = CountedMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        ..Default::default()
    })
}

impl Resource for CountedBackup {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        NonAdminBackup::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        NonAdminBackup::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        NonAdminBackup::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        NonAdminBackup::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<&NonAdminBackup> for CountedBackup {
    fn from(b: &NonAdminBackup) -> Self {
        let m = &b.metadata;
        let status = b.status.as_ref().map(|s| CountedStatus {
            conditions: s
                .conditions
                .iter()
                .map(|c| CountedCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                })
                .collect(),
            velero_backup: s.velero_backup.as_ref().map(|v| CountedVelero {
                name: v.name.clone(),
                status: v.status.as_ref().map(|s| CountedVeleroStatus {
                    phase: s.phase.clone(),
                    completion_timestamp: s.completion_timestamp.clone(),
                }),
            }),
            volume_data_progress: s.volume_data_progress.as_ref().map(|p| CountedProgress {
                total_bytes: p.total_bytes,
            }),
        });
        CountedBackup {
            metadata: ObjectMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                creation_timestamp: m.creation_timestamp.clone(),
                deletion_timestamp: m.deletion_timestamp.clone(),
                ..Default::default()
            },
            spec: CountedSpec {
                delete_backup: b.spec.delete_backup,
            },
            status,
        }
    }
}

/// A NonAdminBackup's entry: counted unless deleted, deleting its backup, or refused without a backup; its bytes
/// once Velero finished it (volume data as Velero's per-volume objects report it).
pub fn backup_entry(b: &NonAdminBackup) -> Entry {
    counted_entry(&CountedBackup::from(b))
}

fn counted_entry(b: &CountedBackup) -> Entry {
    let status = b.status.as_ref();
    let velero = status.and_then(|s| s.velero_backup.as_ref());
    let holds = velero.and_then(|v| v.name.as_ref()).is_some();
    let refused = status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == crate::api::condition::ACCEPTED && c.status == "False")
    });
    let phase = velero.and_then(|v| v.status.as_ref()).and_then(|s| s.phase.as_deref());
    let finished = matches!(phase, Some("Completed") | Some("PartiallyFailed"));
    let bytes = if finished {
        status
            .and_then(|s| s.volume_data_progress.as_ref())
            .map_or(0, |p| p.total_bytes.max(0) as u64)
    } else {
        0
    };
    let completed = velero
        .and_then(|v| v.status.as_ref())
        .filter(|s| s.phase.as_deref() == Some("Completed"))
        .and_then(|s| s.completion_timestamp.as_deref()?.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second());
    Entry {
        created: created_of(&b.metadata),
        name: b.name_any(),
        counted: b.metadata.deletion_timestamp.is_none() && !b.spec.delete_backup && (holds || !refused),
        bytes,
        completed,
    }
}

fn plain_entry(meta: &kube::core::ObjectMeta) -> Entry {
    Entry {
        created: created_of(meta),
        name: meta.name.clone().unwrap_or_default(),
        counted: meta.deletion_timestamp.is_none(),
        bytes: 0,
        completed: None,
    }
}

impl UsageIndex {
    /// Whether the counts are whole: the three watches have each read their first list (before, a count could
    /// be short, so quotas are not judged from it).
    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire) >= 3
    }

    /// Marks the counts whole, for a caller that fills the index itself.
    pub fn mark_synced(&self) {
        self.synced.store(3, std::sync::atomic::Ordering::Release);
    }

    fn put(&self, w: Which, namespace: &str, uid: &str, e: Entry) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .map(w)
            .entry(namespace.to_string())
            .or_default()
            .insert(uid.to_string(), e);
    }

    fn remove(&self, w: Which, namespace: &str, uid: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = inner.map(w);
        if let Some(ns) = m.get_mut(namespace) {
            ns.remove(uid);
            if ns.is_empty() {
                m.remove(namespace);
            }
        }
    }

    pub fn put_backup(&self, b: &NonAdminBackup) {
        self.put_counted(&CountedBackup::from(b));
    }

    fn put_counted(&self, b: &CountedBackup) {
        let (ns, uid) = (b.namespace().unwrap_or_default(), b.uid().unwrap_or_default());
        self.put(Which::Backups, &ns, &uid, counted_entry(b));
    }

    pub fn put_schedule(&self, meta: &kube::core::ObjectMeta) {
        let (ns, uid) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.uid.clone().unwrap_or_default(),
        );
        self.put(Which::Schedules, &ns, &uid, plain_entry(meta));
    }

    /// A restore stays for its hour after it is deleted.
    pub fn put_restore(&self, meta: &kube::core::ObjectMeta) {
        let (ns, uid) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.uid.clone().unwrap_or_default(),
        );
        let mut e = plain_entry(meta);
        e.counted = true;
        self.put(Which::Restores, &ns, &uid, e);
    }

    /// The namespace's use, counting the objects ordered before `(created, name)` (all of them: `None`), at `now`
    /// (seconds). Stored bytes count every finished backup.
    pub fn usage(&self, namespace: &str, before: Option<(i64, &str)>, now: i64) -> Usage {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        // Restores older than the window are forgotten.
        if let Some(r) = inner.restores.get_mut(namespace) {
            r.retain(|_, e| e.created > now - RESTORE_WINDOW_SECS);
        }
        let earlier = |e: &Entry| before.is_none_or(|(c, n)| (e.created, e.name.as_str()) < (c, n));
        let count = |m: &HashMap<String, HashMap<String, Entry>>| {
            m.get(namespace)
                .map_or(0, |es| es.values().filter(|e| e.counted && earlier(e)).count() as u64)
        };
        Usage {
            backups: count(&inner.backups),
            schedules: count(&inner.schedules),
            restores_last_hour: count(&inner.restores),
            stored_bytes: inner
                .backups
                .get(namespace)
                .map_or(0, |es| es.values().filter(|e| e.counted).map(|e| e.bytes).sum()),
        }
    }

    /// The newest Completed backup of `namespace` that still holds its backup: when it ended (seconds) and its
    /// NonAdminBackup's name.
    pub fn newest_completed(&self, namespace: &str) -> Option<(i64, String)> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .backups
            .get(namespace)?
            .values()
            .filter(|e| e.counted)
            .filter_map(|e| Some((e.completed?, e.name.clone())))
            .max()
    }

    /// Whether `namespace` has a NonAdminBackup or a NonAdminSchedule (the base's recovery-point objective tracks
    /// only such namespaces).
    pub fn uses_nac(&self, namespace: &str) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.backups.contains_key(namespace) || inner.schedules.contains_key(namespace)
    }

    /// The namespaces that have a NonAdminBackup or a NonAdminSchedule.
    pub fn namespaces_using_nac(&self) -> std::collections::BTreeSet<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.backups.keys().chain(inner.schedules.keys()).cloned().collect()
    }

    /// Follows the three kinds in every namespace until the process ends.
    pub async fn watch(self: std::sync::Arc<Self>, client: kube::Client) {
        let backups = follow(
            Api::<CountedBackup>::all(client.clone()),
            self.clone(),
            |me, b| me.put_counted(b),
            |me, b| {
                me.remove(
                    Which::Backups,
                    &b.namespace().unwrap_or_default(),
                    &b.uid().unwrap_or_default(),
                )
            },
        );
        let schedules = follow(
            Api::<kube::core::PartialObjectMeta<NonAdminSchedule>>::all(client.clone()),
            self.clone(),
            |me, s| me.put_schedule(&s.metadata),
            |me, s| {
                me.remove(
                    Which::Schedules,
                    &s.metadata.namespace.clone().unwrap_or_default(),
                    &s.metadata.uid.clone().unwrap_or_default(),
                )
            },
        );
        // A deleted restore is kept: it was made within the hour all the same.
        let restores = follow(
            Api::<kube::core::PartialObjectMeta<NonAdminRestore>>::all(client),
            self.clone(),
            |me, r| me.put_restore(&r.metadata),
            |me, r| me.put_restore(&r.metadata),
        );
        tokio::join!(backups, schedules, restores);
    }

    /// Backups and schedules the last re-list did not show are gone (a delete missed while the watch was down).
    fn keep_only(&self, w: Which, seen: &std::collections::HashSet<String>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = inner.map(w);
        for es in m.values_mut() {
            es.retain(|uid, _| seen.contains(uid));
        }
        m.retain(|_, es| !es.is_empty());
    }
}

fn which_of<K: 'static>() -> Option<Which> {
    use std::any::TypeId;
    let t = TypeId::of::<K>();
    if t == TypeId::of::<CountedBackup>() {
        Some(Which::Backups)
    } else if t == TypeId::of::<kube::core::PartialObjectMeta<NonAdminSchedule>>() {
        Some(Which::Schedules)
    } else {
        None
    }
}

async fn follow<K>(
    api: Api<K>,
    me: std::sync::Arc<UsageIndex>,
    put: impl Fn(&UsageIndex, &K),
    gone: impl Fn(&UsageIndex, &K),
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut seen: Option<std::collections::HashSet<String>> = None;
    let mut first = true;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(o)) => put(&me, &o),
            Ok(Event::Delete(o)) => gone(&me, &o),
            Ok(Event::Init) => seen = Some(Default::default()),
            Ok(Event::InitApply(o)) => {
                if let Some(s) = seen.as_mut() {
                    s.insert(o.meta().uid.clone().unwrap_or_default());
                }
                put(&me, &o);
            }
            Ok(Event::InitDone) => {
                if let (Some(s), Some(w)) = (seen.take(), which_of::<K>()) {
                    me.keep_only(w, &s);
                }
                if std::mem::take(&mut first) {
                    me.synced.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
            }
            Err(e) => tracing::warn!(error = %e, "quota usage watch failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NonAdminBackupStatus, VeleroBackupRef, VolumeDataProgress};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn nab(name: &str, created: i64, bytes: Option<i64>, phase: &str) -> NonAdminBackup {
        let mut b = NonAdminBackup::new(name, Default::default());
        b.metadata.namespace = Some("team-a".into());
        b.metadata.uid = Some(format!("uid-{name}"));
        b.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(created).unwrap()));
        let velero = (!phase.is_empty()).then(|| VeleroBackupRef {
            name: Some(format!("v-{name}")),
            status: Some(Box::new(crate::velero::BackupStatus {
                phase: Some(phase.into()),
                ..Default::default()
            })),
            ..Default::default()
        });
        b.status = Some(NonAdminBackupStatus {
            velero_backup: velero,
            volume_data_progress: bytes.map(|t| VolumeDataProgress {
                bytes_done: t,
                total_bytes: t,
            }),
            ..Default::default()
        });
        b
    }

    #[test]
    fn backups_count_until_deleted_and_bytes_once_finished() {
        let u = UsageIndex::default();
        u.put_backup(&nab("a", 10, Some(1000), "Completed"));
        u.put_backup(&nab("b", 20, Some(500), "InProgress"));
        u.put_backup(&nab("c", 30, None, ""));
        let all = u.usage("team-a", None, 100);
        assert_eq!((all.backups, all.stored_bytes), (3, 1000));
        // Before b: only a.
        assert_eq!(u.usage("team-a", Some((20, "b")), 100).backups, 1);
        // Same second: by name.
        assert_eq!(u.usage("team-a", Some((10, "b")), 100).backups, 1);
        let mut deleting = nab("a", 10, Some(1000), "Completed");
        deleting.spec.delete_backup = true;
        u.put_backup(&deleting);
        assert_eq!(u.usage("team-a", None, 100).stored_bytes, 0);
        u.remove(Which::Backups, "team-a", "uid-b");
        assert_eq!(u.usage("team-a", None, 100).backups, 1);
        assert_eq!(u.usage("team-b", None, 100), Usage::default());
    }

    #[test]
    fn a_refused_backup_without_a_backup_is_not_counted() {
        let mut b = nab("x", 10, None, "");
        b.status
            .as_mut()
            .unwrap()
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: crate::api::condition::ACCEPTED.into(),
                status: "False".into(),
                reason: "QuotaExceeded".into(),
                message: String::new(),
                last_transition_time: Time(jiff::Timestamp::from_second(11).unwrap()),
                observed_generation: None,
            });
        assert!(!backup_entry(&b).counted);
        assert!(backup_entry(&nab("y", 10, None, "")).counted);
    }

    /// A whole NonAdminBackup as the API server sends it decodes into the counted fields alone, to the same entry.
    #[test]
    fn a_whole_backup_decodes_to_the_same_entry() {
        let mut b = nab("w", 10, Some(2048), "Completed");
        b.metadata.resource_version = Some("4711".into());
        b.spec.backup_spec = std::sync::Arc::new(
            serde_json::from_value(serde_json::json!({"includedNamespaces": ["team-a"], "ttl": "720h0m0s"})).unwrap(),
        );
        let status = b.status.as_mut().unwrap();
        status
            .velero_backup
            .as_mut()
            .unwrap()
            .status
            .as_mut()
            .unwrap()
            .completion_timestamp = Some("2026-11-25T10:00:00Z".into());
        status
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: crate::api::condition::ACCEPTED.into(),
                status: "True".into(),
                reason: "BackupAccepted".into(),
                message: "accepted".into(),
                last_transition_time: Time(jiff::Timestamp::from_second(11).unwrap()),
                observed_generation: Some(1),
            });
        let mut json = serde_json::to_value(&b).unwrap();
        json["metadata"]["managedFields"] = serde_json::json!([{"manager": "nac", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {".": {}, "f:conditions": {}}}}]);
        json["metadata"]["labels"] = serde_json::json!({"openshift.io/oadp-nab-origin-nacuuid": "team-a-w-1"});
        json["status"]["queueInfo"] = serde_json::json!({"estimatedQueuePosition": 0});
        let counted: CountedBackup = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(counted_entry(&counted), backup_entry(&b));
        assert_eq!(backup_entry(&b).completed, Some(1_795_600_800));
        assert_eq!(backup_entry(&b).bytes, 2048);
        assert_eq!(counted.meta().resource_version.as_deref(), Some("4711"));
        assert_eq!(counted.uid().as_deref(), Some("uid-w"));
        assert!(counted.meta().managed_fields.is_none() && counted.meta().labels.is_none());
        // Deleting its backup, then deleted: no longer counted, as the whole object reads.
        json["spec"]["deleteBackup"] = serde_json::json!(true);
        b.spec.delete_backup = true;
        let counted: CountedBackup = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(counted_entry(&counted), backup_entry(&b));
        assert!(!counted_entry(&counted).counted);
        json["spec"] = serde_json::json!({});
        json["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-25T11:00:00Z");
        let counted: CountedBackup = serde_json::from_value(json).unwrap();
        assert!(!counted_entry(&counted).counted && counted_entry(&counted).created == 10);
    }

    #[test]
    fn restores_count_for_their_hour_even_once_deleted() {
        let u = UsageIndex::default();
        let meta = |name: &str, created: i64| kube::core::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team-a".into()),
            uid: Some(name.into()),
            creation_timestamp: Some(Time(jiff::Timestamp::from_second(created).unwrap())),
            deletion_timestamp: Some(Time(jiff::Timestamp::from_second(created + 1).unwrap())),
            ..Default::default()
        };
        u.put_restore(&meta("r1", 1000));
        u.put_restore(&meta("r2", 2000));
        assert_eq!(u.usage("team-a", None, 2100).restores_last_hour, 2);
        assert_eq!(
            u.usage("team-a", None, 1000 + RESTORE_WINDOW_SECS + 1)
                .restores_last_hour,
            1
        );
    }
}
