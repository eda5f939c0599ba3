//! Counts of Velero's per-volume objects (DataUploads, PodVolumeBackups) by owning backup and phase, kept
//! incrementally from watch events so a reconcile reads its backup's counts without listing anything.

use super::synced::Synced;
use crate::api::{DataMoverDataUploads, FileSystemPodVolumeBackups, VolumeDataProgress};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Phase → number of objects; the empty string stands for "no phase yet".
pub type PhaseTally = BTreeMap<String, i64>;

/// The per-volume objects a tenant status counts for its Velero object: the data mover's (DataUploads of a
/// backup, DataDownloads of a restore) and the file-system ones (PodVolumeBackups, PodVolumeRestores), each counted
/// by owner and phase, with whether its watch has completed its first list.
#[derive(Default)]
pub struct Volumes {
    pub data_mover: Arc<Mutex<PhaseCounts>>,
    pub data_mover_synced: Synced,
    pub file_system: Arc<Mutex<PhaseCounts>>,
    pub file_system_synced: Synced,
}

impl Volumes {
    /// Waits (bounded by `timeout`, once per term) until both counts have their first list, so a restart does
    /// not report empty counts for a moment.
    pub async fn ready(&self, timeout: Duration) {
        for (flag, what) in [
            (&self.data_mover_synced, "data mover"),
            (&self.file_system_synced, "file system"),
        ] {
            if !flag.is_synced() && !flag.wait(timeout).await {
                tracing::warn!(
                    kind = what,
                    "per-volume watch not synced in time; counting without it for now"
                );
                flag.mark();
            }
        }
    }

    /// The data mover's and the file-system tallies of Velero object `name` (counted by their owner label: the
    /// name in Velero's label form).
    pub fn tallies(&self, name: &str) -> (PhaseTally, PhaseTally) {
        let owner = crate::naming::velero_label_value(name);
        (
            self.data_mover.lock().expect("counts lock").tally(&owner),
            self.file_system.lock().expect("counts lock").tally(&owner),
        )
    }

    /// The uploader of Velero object `name`'s file-system volume objects (`kopia`, `restic`), if it has any.
    pub fn uploader(&self, name: &str) -> Option<String> {
        let owner = crate::naming::velero_label_value(name);
        self.file_system.lock().expect("counts lock").uploader(&owner)
    }

    /// The bytes Velero object `name`'s per-volume objects (data mover's and file-system ones together) report
    /// done of their total, once any reports a total.
    pub fn progress(&self, name: &str) -> Option<VolumeDataProgress> {
        let owner = crate::naming::velero_label_value(name);
        let mut sum = self.data_mover.lock().expect("counts lock").bytes(&owner);
        sum.add(self.file_system.lock().expect("counts lock").bytes(&owner));
        (sum.total > 0).then_some(VolumeDataProgress {
            bytes_done: sum.done,
            total_bytes: sum.total,
        })
    }
}

/// Bytes a per-volume object reports done of its total (Velero's `status.progress`); zero when it reports none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bytes {
    pub done: i64,
    pub total: i64,
}

impl Bytes {
    fn add(&mut self, o: Bytes) {
        self.done += o.done;
        self.total += o.total;
    }
}

fn count(t: &PhaseTally, phase: &str) -> i64 {
    t.get(phase).copied().unwrap_or(0)
}

/// DataUpload (or DataDownload) counts by phase, as OADP's controller reports them.
pub fn data_uploads(t: &PhaseTally) -> DataMoverDataUploads {
    DataMoverDataUploads {
        total: t.values().sum(),
        new: count(t, "New"),
        accepted: count(t, "Accepted"),
        prepared: count(t, "Prepared"),
        in_progress: count(t, "InProgress"),
        canceling: count(t, "Canceling"),
        canceled: count(t, "Canceled"),
        failed: count(t, "Failed"),
        completed: count(t, "Completed"),
    }
}

/// PodVolumeBackup (or PodVolumeRestore) counts by phase, as OADP's controller reports them.
pub fn pod_volume_backups(t: &PhaseTally) -> FileSystemPodVolumeBackups {
    FileSystemPodVolumeBackups {
        total: t.values().sum(),
        new: count(t, "New"),
        in_progress: count(t, "InProgress"),
        failed: count(t, "Failed"),
        completed: count(t, "Completed"),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    owner: String,
    phase: String,
    /// The uploader the object names (empty when it names none).
    uploader: String,
    bytes: Bytes,
}

impl Entry {
    pub fn new(owner: &str, phase: Option<&str>, uploader: Option<&str>, bytes: Bytes) -> Self {
        Entry {
            owner: owner.to_string(),
            phase: phase.unwrap_or_default().to_string(),
            uploader: uploader.unwrap_or_default().to_string(),
            bytes,
        }
    }
}

#[derive(Debug, Default)]
pub struct PhaseCounts {
    objects: HashMap<String, Entry>,
    by_owner: HashMap<String, PhaseTally>,
    /// Owner → uploader → number of objects naming it.
    uploaders: HashMap<String, BTreeMap<String, i64>>,
    /// Owner → the bytes of its objects, summed.
    bytes: HashMap<String, Bytes>,
    relist: Option<HashMap<String, Entry>>,
}

impl PhaseCounts {
    pub fn new() -> Self {
        Self::default()
    }

    /// The tally for one owner (empty when it has no objects).
    pub fn tally(&self, owner: &str) -> PhaseTally {
        self.by_owner.get(owner).cloned().unwrap_or_default()
    }

    /// The uploader most of `owner`'s objects name, if any names one.
    pub fn uploader(&self, owner: &str) -> Option<String> {
        let counts = self.uploaders.get(owner)?;
        let most = counts.values().max()?;
        counts.iter().find(|(_, n)| *n == most).map(|(u, _)| u.clone())
    }

    /// The bytes of `owner`'s objects, summed.
    pub fn bytes(&self, owner: &str) -> Bytes {
        self.bytes.get(owner).copied().unwrap_or_default()
    }

    /// Records object `name` belonging to `owner` in `phase`. Returns the owners whose tally changed.
    pub fn upsert(&mut self, name: &str, owner: &str, phase: Option<&str>) -> Vec<String> {
        self.upsert_with(name, Entry::new(owner, phase, None, Bytes::default()))
    }

    /// [`upsert`](Self::upsert) of an object that names its uploader and reports its bytes (a change of either
    /// is a change of the owner's).
    pub fn upsert_with(&mut self, name: &str, entry: Entry) -> Vec<String> {
        if let Some(buffer) = self.relist.as_mut() {
            buffer.insert(name.to_string(), entry.clone());
        }
        let old = self.objects.insert(name.to_string(), entry.clone());
        if old.as_ref() == Some(&entry) {
            return Vec::new();
        }
        let mut changed = BTreeSet::new();
        if let Some(old) = old {
            self.take(&old);
            changed.insert(old.owner);
        }
        self.add(&entry);
        changed.insert(entry.owner);
        changed.into_iter().collect()
    }

    /// Forgets object `name`. Returns the owner whose tally changed, if any.
    pub fn remove(&mut self, name: &str) -> Vec<String> {
        if let Some(buffer) = self.relist.as_mut() {
            buffer.remove(name);
        }
        match self.objects.remove(name) {
            Some(old) => {
                self.take(&old);
                vec![old.owner]
            }
            None => Vec::new(),
        }
    }

    pub fn start_relist(&mut self) {
        self.relist = Some(HashMap::new());
    }

    pub fn relist_item(&mut self, name: &str, owner: &str, phase: Option<&str>) {
        self.relist_item_with(name, Entry::new(owner, phase, None, Bytes::default()))
    }

    /// [`relist_item`](Self::relist_item) of an object that names its uploader and reports its bytes.
    pub fn relist_item_with(&mut self, name: &str, entry: Entry) {
        self.relist
            .get_or_insert_with(HashMap::new)
            .insert(name.to_string(), entry);
    }

    /// Ends a relist; returns the owners whose tally (or uploader) differs from before.
    pub fn finish_relist(&mut self) -> Vec<String> {
        let Some(objects) = self.relist.take() else {
            return Vec::new();
        };
        let before = std::mem::take(&mut self.by_owner);
        let uploaders_before = std::mem::take(&mut self.uploaders);
        let bytes_before = std::mem::take(&mut self.bytes);
        self.objects = objects;
        let entries: Vec<Entry> = self.objects.values().cloned().collect();
        for e in &entries {
            self.add(e);
        }
        let owners: BTreeSet<&String> = before
            .keys()
            .chain(self.by_owner.keys())
            .chain(uploaders_before.keys())
            .chain(self.uploaders.keys())
            .chain(bytes_before.keys())
            .chain(self.bytes.keys())
            .collect();
        owners
            .into_iter()
            .filter(|o| {
                before.get(*o) != self.by_owner.get(*o)
                    || uploaders_before.get(*o) != self.uploaders.get(*o)
                    || bytes_before.get(*o) != self.bytes.get(*o)
            })
            .cloned()
            .collect()
    }

    fn add(&mut self, e: &Entry) {
        *self
            .by_owner
            .entry(e.owner.clone())
            .or_default()
            .entry(e.phase.clone())
            .or_default() += 1;
        if !e.uploader.is_empty() {
            *self
                .uploaders
                .entry(e.owner.clone())
                .or_default()
                .entry(e.uploader.clone())
                .or_default() += 1;
        }
        if e.bytes != Bytes::default() {
            self.bytes.entry(e.owner.clone()).or_default().add(e.bytes);
        }
    }

    fn take(&mut self, e: &Entry) {
        for (map, key) in [(&mut self.by_owner, &e.phase), (&mut self.uploaders, &e.uploader)] {
            if let Some(t) = map.get_mut(&e.owner) {
                if let Some(n) = t.get_mut(key) {
                    *n -= 1;
                    if *n <= 0 {
                        t.remove(key);
                    }
                }
                if t.is_empty() {
                    map.remove(&e.owner);
                }
            }
        }
        if let Some(b) = self.bytes.get_mut(&e.owner) {
            b.done -= e.bytes.done;
            b.total -= e.bytes.total;
            if *b == Bytes::default() {
                self.bytes.remove(&e.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(pairs: &[(&str, i64)]) -> PhaseTally {
        pairs.iter().map(|(p, n)| (p.to_string(), *n)).collect()
    }

    #[test]
    fn objects_are_counted_by_owner_and_phase() {
        let mut c = PhaseCounts::new();
        assert_eq!(c.upsert("du-1", "bk", Some("New")), vec!["bk"]);
        c.upsert("du-2", "bk", Some("InProgress"));
        c.upsert("du-3", "other", Some("New"));
        c.upsert("du-4", "bk", None);
        assert_eq!(c.tally("bk"), tally(&[("", 1), ("InProgress", 1), ("New", 1)]));
        assert_eq!(c.tally("other"), tally(&[("New", 1)]));
        assert!(c.tally("nobody").is_empty());
    }

    #[test]
    fn a_phase_change_moves_the_count() {
        let mut c = PhaseCounts::new();
        c.upsert("du-1", "bk", Some("InProgress"));
        assert_eq!(c.upsert("du-1", "bk", Some("Completed")), vec!["bk"]);
        assert_eq!(c.tally("bk"), tally(&[("Completed", 1)]));
    }

    #[test]
    fn an_unchanged_object_reports_nothing() {
        let mut c = PhaseCounts::new();
        c.upsert("du-1", "bk", Some("New"));
        assert!(c.upsert("du-1", "bk", Some("New")).is_empty());
    }

    #[test]
    fn removal_decrements_and_forgets_empty_owners() {
        let mut c = PhaseCounts::new();
        c.upsert("du-1", "bk", Some("New"));
        assert_eq!(c.remove("du-1"), vec!["bk"]);
        assert!(c.tally("bk").is_empty());
        assert!(c.remove("du-1").is_empty());
    }

    #[test]
    fn the_uploader_is_the_one_most_objects_name() {
        let mut c = PhaseCounts::new();
        assert_eq!(c.uploader("bk"), None);
        c.upsert_with("pvb-1", Entry::new("bk", Some("New"), Some("kopia"), Bytes::default()));
        assert_eq!(c.uploader("bk"), Some("kopia".into()));
        // A change of uploader alone is a change of the owner.
        assert_eq!(
            c.upsert_with("pvb-1", Entry::new("bk", Some("New"), Some("restic"), Bytes::default())),
            vec!["bk"]
        );
        c.upsert_with("pvb-2", Entry::new("bk", Some("New"), Some("kopia"), Bytes::default()));
        c.upsert_with("pvb-3", Entry::new("bk", Some("New"), Some("kopia"), Bytes::default()));
        assert_eq!(c.uploader("bk"), Some("kopia".into()));
        c.upsert("pvb-4", "bk", Some("New"));
        assert_eq!(c.tally("bk"), tally(&[("New", 4)]));
        for n in ["pvb-1", "pvb-2", "pvb-3"] {
            c.remove(n);
        }
        assert_eq!(c.uploader("bk"), None);
        c.start_relist();
        c.relist_item_with(
            "pvb-5",
            Entry::new("bk", Some("Completed"), Some("restic"), Bytes::default()),
        );
        assert_eq!(c.finish_relist(), vec!["bk"]);
        assert_eq!(c.uploader("bk"), Some("restic".into()));
    }

    #[test]
    fn a_relist_reports_owners_whose_counts_differ() {
        let mut c = PhaseCounts::new();
        c.upsert("du-1", "a", Some("New"));
        c.upsert("du-2", "b", Some("New"));
        c.start_relist();
        c.relist_item("du-1", "a", Some("New"));
        c.relist_item("du-3", "c", Some("Completed"));
        assert_eq!(c.finish_relist(), vec!["b", "c"]);
        assert!(c.tally("b").is_empty());
        assert_eq!(c.tally("c"), tally(&[("Completed", 1)]));
    }

    #[test]
    fn bytes_are_summed_by_owner_and_follow_each_object() {
        let mut c = PhaseCounts::new();
        let b = |done, total| Bytes { done, total };
        assert_eq!(
            c.upsert_with("du-1", Entry::new("bk", Some("InProgress"), None, b(10, 100))),
            vec!["bk"]
        );
        c.upsert_with("du-2", Entry::new("bk", Some("InProgress"), None, b(5, 50)));
        c.upsert_with("du-3", Entry::new("other", Some("InProgress"), None, b(1, 2)));
        assert_eq!(c.bytes("bk"), b(15, 150));
        // Progress alone is a change of the owner's.
        assert_eq!(
            c.upsert_with("du-1", Entry::new("bk", Some("InProgress"), None, b(60, 100))),
            vec!["bk"]
        );
        assert_eq!(c.bytes("bk"), b(65, 150));
        c.remove("du-2");
        assert_eq!(c.bytes("bk"), b(60, 100));
        c.remove("du-1");
        assert_eq!(c.bytes("bk"), Bytes::default());
        c.start_relist();
        c.relist_item_with("du-3", Entry::new("other", Some("Completed"), None, b(2, 2)));
        assert_eq!(c.finish_relist(), vec!["other"]);
        assert_eq!(c.bytes("other"), b(2, 2));
    }
}
