//! The snapshots Velero's VolumeSnapshotContents hold, by the backup they are labelled with, kept from watch events
//! until nac has recorded them on the Velero Backup (`crate::velero::snapshot`). Velero deletes the contents once
//! the backup is finished, so what was seen stays here after they go.

use crate::velero::snapshot::{SnapshotRef, VolumeSnapshotContent};
use kube::runtime::watcher::Event;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

#[derive(Default)]
pub struct Snapshots {
    seen: Mutex<HashMap<String, BTreeSet<SnapshotRef>>>,
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
        let mut seen = self.seen.lock().expect("snapshots lock");
        let grew = seen.entry(backup.clone()).or_default().insert(snapshot);
        if grew {
            vec![backup.clone()]
        } else {
            Vec::new()
        }
    }

    /// What was seen of the backup whose label value is `backup`.
    pub fn of(&self, backup: &str) -> BTreeSet<SnapshotRef> {
        self.seen
            .lock()
            .expect("snapshots lock")
            .get(backup)
            .cloned()
            .unwrap_or_default()
    }

    /// Forgets what was seen of `backup` that `recorded` holds (the rest is still to be recorded).
    pub fn recorded(&self, backup: &str, recorded: &BTreeSet<SnapshotRef>) {
        let mut seen = self.seen.lock().expect("snapshots lock");
        if let Some(set) = seen.get_mut(backup) {
            set.retain(|s| !recorded.contains(s));
            if set.is_empty() {
                seen.remove(backup);
            }
        }
    }

    /// How many backups have snapshots not yet recorded.
    pub fn pending(&self) -> usize {
        self.seen.lock().expect("snapshots lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content(backup: Option<&str>, handle: Option<&str>) -> VolumeSnapshotContent {
        let mut v = json!({"metadata": {"name": "c"}, "spec": {"driver": "d", "source": {"volumeHandle": "v"}}});
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
        let seen = s.of("b");
        assert_eq!(seen.len(), 1);
        assert_eq!(s.apply(&Event::Apply(content(Some("b"), Some("h2")))), vec!["b"]);
        s.recorded("b", &seen);
        assert_eq!(s.of("b").len(), 1, "the one seen after the record stays");
        s.recorded("b", &s.of("b"));
        assert_eq!(s.pending(), 0);
    }
}
