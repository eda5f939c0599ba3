//! The snapshots Velero's VolumeSnapshotContents hold, by the backup they are labelled with, kept from watch events
//! until nac has recorded them on the Velero Backup (`crate::velero::snapshot`). Velero deletes the contents once
//! the backup is finished, so what was seen stays here after they go.

use crate::velero::snapshot::{SnapshotRef, VolumeSnapshotContent};
use kube::runtime::watcher::Event;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// By backup (label value): each snapshot seen, with the namespace of the VolumeSnapshot its content was bound to.
#[derive(Default)]
pub struct Snapshots {
    seen: Mutex<HashMap<String, BTreeSet<(String, SnapshotRef)>>>,
}

impl Snapshots {
    /// Adds the snapshot of a content labelled with a backup's name; returns the backups (label values) whose set
    /// grew. A deleted content is not forgotten: its snapshot outlives it.
    pub fn apply(&self, ev: &Event<VolumeSnapshotContent>) -> Vec<String> {
        let content = match ev {
            Event::Apply(c) | Event::InitApply(c) => c,
            Event::Delete(_) | Event::Init | Event::InitDone => return Vec::new(),
        };
        let backup = content
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::naming::VELERO_BACKUP_NAME_LABEL));
        let (Some(backup), Some(snapshot)) = (backup, content.snapshot()) else {
            return Vec::new();
        };
        let bound = content.bound_namespace().unwrap_or_default().to_string();
        let mut seen = self.seen.lock().expect("snapshots lock");
        let grew = seen.entry(backup.clone()).or_default().insert((bound, snapshot));
        if grew {
            vec![backup.clone()]
        } else {
            Vec::new()
        }
    }

    /// What was seen of the backup whose label value is `backup`: the snapshots of contents bound in `namespace`,
    /// and the others (a content Velero labelled for it that was bound elsewhere).
    pub fn of(&self, backup: &str, namespace: &str) -> (BTreeSet<SnapshotRef>, Vec<SnapshotRef>) {
        let seen = self.seen.lock().expect("snapshots lock");
        let (mut mine, mut others) = (BTreeSet::new(), Vec::new());
        for (bound, s) in seen.get(backup).into_iter().flatten() {
            if bound == namespace {
                mine.insert(s.clone());
            } else {
                others.push(s.clone());
            }
        }
        (mine, others)
    }

    /// Whether anything of `backup` is still to be recorded.
    pub fn pending(&self, backup: &str) -> bool {
        self.seen.lock().expect("snapshots lock").contains_key(backup)
    }

    /// Forgets what was seen of `backup` that `recorded` holds (the rest is still to be recorded).
    pub fn recorded(&self, backup: &str, recorded: &BTreeSet<SnapshotRef>) {
        let mut seen = self.seen.lock().expect("snapshots lock");
        if let Some(set) = seen.get_mut(backup) {
            set.retain(|(_, s)| !recorded.contains(s));
            if set.is_empty() {
                seen.remove(backup);
            }
        }
    }

    /// Forgets all that was seen of `backup` (not a backup of nac's, or nothing of it to record).
    pub fn forget(&self, backup: &str) {
        self.seen.lock().expect("snapshots lock").remove(backup);
    }

    /// How many backups have snapshots not yet recorded.
    pub fn backups(&self) -> usize {
        self.seen.lock().expect("snapshots lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content(backup: Option<&str>, handle: Option<&str>) -> VolumeSnapshotContent {
        let mut v = json!({"metadata": {"name": "c"}, "spec": {"driver": "d", "source": {"volumeHandle": "v"},
            "volumeSnapshotRef": {"name": "data", "namespace": "team-a"}}});
        if let Some(b) = backup {
            v["metadata"]["labels"] = json!({"velero.io/backup-name": b});
        }
        if let Some(h) = handle {
            v["status"] = json!({"snapshotHandle": h});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_labelled_content_with_a_snapshot_is_kept_past_its_deletion_until_recorded() {
        let s = Snapshots::default();
        assert!(
            s.apply(&Event::Apply(content(Some("b"), None))).is_empty(),
            "no snapshot yet"
        );
        assert!(
            s.apply(&Event::Apply(content(None, Some("h")))).is_empty(),
            "not a backup's"
        );
        assert_eq!(s.apply(&Event::Apply(content(Some("b"), Some("h")))), vec!["b"]);
        assert!(
            s.apply(&Event::InitApply(content(Some("b"), Some("h")))).is_empty(),
            "known"
        );
        assert!(s.apply(&Event::Delete(content(Some("b"), Some("h")))).is_empty());
        let (seen, others) = s.of("b", "team-a");
        assert_eq!((seen.len(), others.len()), (1, 0));
        assert_eq!(s.of("b", "team-b").1.len(), 1, "bound in another namespace");
        assert_eq!(s.apply(&Event::Apply(content(Some("b"), Some("h2")))), vec!["b"]);
        s.recorded("b", &seen);
        assert_eq!(s.of("b", "team-a").0.len(), 1, "the one seen after the record stays");
        assert!(s.pending("b"));
        s.recorded("b", &s.of("b", "team-a").0);
        assert_eq!(s.backups(), 0);
        s.apply(&Event::Apply(content(Some("c"), Some("h"))));
        s.forget("c");
        assert!(!s.pending("c"));
    }
}
