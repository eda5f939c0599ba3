//! In-memory index of Velero's queue, fed by watch events, answering "where is this backup (or restore) in line?"
//!
//! The estimated position of an object is
//! - 0 once Velero is done with it (a final phase),
//! - Velero's own `status.queuePosition` while Velero (1.18 and newer) reports one for a `Queued` object,
//! - otherwise, as OADP's controller counts, the number of unfinished objects created no later than it, itself
//!   included (the oldest unfinished one is 1); equal creation timestamps are ordered by name.
//!
//! Unfinished objects are kept in a vector sorted by (creation time, name), so a position is a binary search and a
//! change returns exactly the other objects whose position moved (those after the changed one), which are the only
//! ones worth a reconcile. A relist (watch restart) is buffered and swapped in at its end, reporting every object
//! whose position differs between the old and the new picture.

use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeSet, HashMap};

/// What the index needs to know about one Velero object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub name: String,
    /// `metadata.creationTimestamp`; objects without one sort last.
    pub created: Option<Timestamp>,
    /// Whether Velero still has work to do on it.
    pub unfinished: bool,
    /// Velero's own position, when it reports one for a queued object.
    pub velero_position: Option<i64>,
}

impl Observed {
    /// From a Velero phase and `status.queuePosition` (only meaningful while the phase is `Queued`).
    pub fn new(
        name: impl Into<String>,
        created: Option<Timestamp>,
        phase: Option<&str>,
        queue_position: Option<i64>,
        unfinished: fn(Option<&str>) -> bool,
    ) -> Self {
        let velero_position = match (phase, queue_position) {
            (Some("Queued"), Some(p)) if p > 0 => Some(p),
            _ => None,
        };
        Observed {
            name: name.into(),
            created,
            unfinished: unfinished(phase),
            velero_position,
        }
    }

    fn key(&self) -> Option<Key> {
        self.unfinished.then(|| Key {
            created: self.created.unwrap_or(Timestamp::MAX),
            name: self.name.clone(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    created: Timestamp,
    name: String,
}

#[derive(Debug, Default)]
pub struct QueueIndex {
    items: HashMap<String, Observed>,
    /// Unfinished objects in queue order.
    queue: Vec<Key>,
    /// Objects seen since the current relist started.
    relist: Option<HashMap<String, Observed>>,
}

impl QueueIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of objects known.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Number of unfinished objects.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The estimated queue position of `name`, or None if the index does not know it.
    pub fn position(&self, name: &str) -> Option<i64> {
        let item = self.items.get(name)?;
        Some(self.position_of(item))
    }

    fn position_of(&self, item: &Observed) -> i64 {
        match (item.velero_position, item.key()) {
            (_, None) => 0,
            (Some(p), Some(_)) => p,
            (None, Some(key)) => self.rank(&key),
        }
    }

    /// 1-based rank of a queued key (or where it would go).
    fn rank(&self, key: &Key) -> i64 {
        match self.queue.binary_search(key) {
            Ok(i) | Err(i) => i as i64 + 1,
        }
    }

    /// Records a new or changed object. Returns the other objects whose position changed because of it.
    pub fn upsert(&mut self, obs: Observed) -> Vec<String> {
        if let Some(buffer) = self.relist.as_mut() {
            // Watch events during a relist belong to the new picture too.
            buffer.insert(obs.name.clone(), obs.clone());
        }
        let old_key = self.items.get(&obs.name).and_then(Observed::key);
        let new_key = obs.key();
        let name = obs.name.clone();
        self.items.insert(name.clone(), obs);
        self.move_key(&name, old_key, new_key)
    }

    /// Forgets a deleted object. Returns the other objects whose position changed.
    pub fn remove(&mut self, name: &str) -> Vec<String> {
        if let Some(buffer) = self.relist.as_mut() {
            buffer.remove(name);
        }
        let Some(old) = self.items.remove(name) else {
            return Vec::new();
        };
        self.move_key(name, old.key(), None)
    }

    fn move_key(&mut self, name: &str, old: Option<Key>, new: Option<Key>) -> Vec<String> {
        if old == new {
            return Vec::new();
        }
        // Only objects after the first affected place can move; remember their positions to compare.
        let from = match (&old, &new) {
            (Some(a), Some(b)) => a.min(b).clone(),
            (Some(k), None) | (None, Some(k)) => k.clone(),
            (None, None) => unreachable!("old != new"),
        };
        let start = self.queue.partition_point(|k| *k <= from);
        let before: Vec<(String, i64)> = self.queue[start..]
            .iter()
            .filter(|k| k.name != name)
            .filter_map(|k| self.items.get(&k.name).map(|o| (k.name.clone(), self.position_of(o))))
            .collect();
        if let Some(k) = old {
            if let Ok(i) = self.queue.binary_search(&k) {
                self.queue.remove(i);
            }
        }
        if let Some(k) = new {
            if let Err(i) = self.queue.binary_search(&k) {
                self.queue.insert(i, k);
            }
        }
        before
            .into_iter()
            .filter(|(n, p)| self.position(n) != Some(*p))
            .map(|(n, _)| n)
            .collect()
    }

    /// A watch restart: objects listed until [`QueueIndex::finish_relist`] replace the current picture.
    pub fn start_relist(&mut self) {
        self.relist = Some(HashMap::new());
    }

    /// One object of the relist.
    pub fn relist_item(&mut self, obs: Observed) {
        self.relist
            .get_or_insert_with(HashMap::new)
            .insert(obs.name.clone(), obs);
    }

    /// Ends a relist; returns every object (old or new) whose position differs from before.
    pub fn finish_relist(&mut self) -> Vec<String> {
        let Some(items) = self.relist.take() else {
            return Vec::new();
        };
        let before: HashMap<String, i64> = self
            .items
            .values()
            .map(|o| (o.name.clone(), self.position_of(o)))
            .collect();
        let mut queue: Vec<Key> = items.values().filter_map(Observed::key).collect();
        queue.sort();
        self.items = items;
        self.queue = queue;
        let names: BTreeSet<&String> = before.keys().chain(self.items.keys()).collect();
        names
            .into_iter()
            .filter(|n| before.get(*n).copied() != self.position(n))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::velero::backup_phase_unfinished;
    use proptest::prelude::*;

    fn at(s: i64) -> Option<Timestamp> {
        Some(Timestamp::from_second(1_700_000_000 + s).unwrap())
    }

    fn obs(name: &str, created: i64, phase: Option<&str>) -> Observed {
        Observed::new(name, at(created), phase, None, backup_phase_unfinished)
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn the_oldest_unfinished_backup_is_first_in_line() {
        let mut q = QueueIndex::new();
        q.upsert(obs("b", 2, Some("New")));
        q.upsert(obs("a", 1, Some("InProgress")));
        q.upsert(obs("c", 3, None));
        assert_eq!(q.position("a"), Some(1));
        assert_eq!(q.position("b"), Some(2));
        assert_eq!(
            q.position("c"),
            Some(3),
            "a backup Velero has not seen yet is queued too"
        );
        assert_eq!(q.position("unknown"), None);
    }

    #[test]
    fn finished_backups_are_at_position_zero_and_do_not_count() {
        let mut q = QueueIndex::new();
        q.upsert(obs("done", 1, Some("Completed")));
        q.upsert(obs("failed", 2, Some("PartiallyFailed")));
        q.upsert(obs("next", 3, Some("New")));
        assert_eq!(q.position("done"), Some(0));
        assert_eq!(q.position("failed"), Some(0));
        assert_eq!(q.position("next"), Some(1));
    }

    #[test]
    fn equal_creation_times_are_ordered_by_name() {
        let mut q = QueueIndex::new();
        q.upsert(obs("team-b-x", 5, Some("New")));
        q.upsert(obs("team-a-x", 5, Some("New")));
        assert_eq!(q.position("team-a-x"), Some(1));
        assert_eq!(q.position("team-b-x"), Some(2));
    }

    #[test]
    fn when_the_queue_advances_only_later_backups_are_reported() {
        let mut q = QueueIndex::new();
        for (i, n) in ["a", "b", "c", "d"].iter().enumerate() {
            q.upsert(obs(n, i as i64, Some("New")));
        }
        let changed = q.upsert(obs("b", 1, Some("Completed")));
        assert_eq!(sorted(changed), vec!["c", "d"]);
        assert_eq!(q.position("a"), Some(1));
        assert_eq!(q.position("b"), Some(0));
        assert_eq!(q.position("c"), Some(2));
        assert_eq!(q.position("d"), Some(3));
    }

    #[test]
    fn a_phase_change_inside_the_unfinished_set_moves_nobody() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("New")));
        q.upsert(obs("b", 2, Some("New")));
        assert!(q.upsert(obs("a", 1, Some("InProgress"))).is_empty());
        assert!(q.upsert(obs("a", 1, Some("WaitingForPluginOperations"))).is_empty());
    }

    #[test]
    fn a_new_backup_at_the_end_moves_nobody() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("New")));
        assert!(q.upsert(obs("b", 2, None)).is_empty());
    }

    #[test]
    fn an_older_backup_appearing_pushes_later_ones_back() {
        let mut q = QueueIndex::new();
        q.upsert(obs("b", 2, Some("New")));
        q.upsert(obs("c", 3, Some("New")));
        assert_eq!(sorted(q.upsert(obs("a", 1, Some("New")))), vec!["b", "c"]);
        assert_eq!(q.position("c"), Some(3));
    }

    #[test]
    fn deleting_an_unfinished_backup_advances_the_later_ones() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("InProgress")));
        q.upsert(obs("b", 2, Some("New")));
        assert_eq!(q.remove("a"), vec!["b"]);
        assert_eq!(q.position("b"), Some(1));
        assert!(q.remove("a").is_empty(), "removing twice is harmless");
        assert!(q.remove("never-seen").is_empty());
    }

    #[test]
    fn deleting_a_finished_backup_moves_nobody() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("Completed")));
        q.upsert(obs("b", 2, Some("New")));
        assert!(q.remove("a").is_empty());
    }

    #[test]
    fn velero_queue_position_wins_while_queued() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("InProgress")));
        q.upsert(Observed::new(
            "b",
            at(2),
            Some("Queued"),
            Some(7),
            backup_phase_unfinished,
        ));
        q.upsert(obs("c", 3, Some("New")));
        assert_eq!(q.position("b"), Some(7));
        assert_eq!(q.position("c"), Some(3), "counted objects still count the queued one");
        // A backup whose position comes from Velero is not re-triggered by the count; Velero's patch does that.
        assert_eq!(q.upsert(obs("a", 1, Some("Completed"))), vec!["c"]);
    }

    #[test]
    fn queue_position_outside_queued_phase_is_ignored() {
        let o = Observed::new("x", at(1), Some("InProgress"), Some(3), backup_phase_unfinished);
        assert_eq!(o.velero_position, None);
        let o = Observed::new("x", at(1), Some("Queued"), Some(0), backup_phase_unfinished);
        assert_eq!(o.velero_position, None);
    }

    #[test]
    fn a_relist_reports_what_moved_and_forgets_what_vanished() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("New")));
        q.upsert(obs("b", 2, Some("New")));
        q.upsert(obs("c", 3, Some("New")));
        q.start_relist();
        // "a" vanished while the watch was down, "b" finished, "c" unchanged, "d" appeared.
        q.relist_item(obs("b", 2, Some("Completed")));
        q.relist_item(obs("c", 3, Some("New")));
        q.relist_item(obs("d", 4, Some("New")));
        // Until the relist ends, answers come from the old picture.
        assert_eq!(q.position("c"), Some(3));
        let changed = q.finish_relist();
        assert_eq!(sorted(changed), vec!["a", "b", "c", "d"]);
        assert_eq!(q.position("a"), None);
        assert_eq!(q.position("c"), Some(1));
        assert_eq!(q.position("d"), Some(2));
        assert_eq!(q.len(), 3);
        assert_eq!(q.queued(), 2);
    }

    #[test]
    fn a_relist_that_changes_nothing_reports_nothing() {
        let mut q = QueueIndex::new();
        q.upsert(obs("a", 1, Some("New")));
        q.start_relist();
        q.relist_item(obs("a", 1, Some("New")));
        assert!(q.finish_relist().is_empty());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Upsert(u8, i64, Option<&'static str>),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let phase = prop::sample::select(vec![
            None,
            Some("New"),
            Some("InProgress"),
            Some("Completed"),
            Some("Failed"),
        ]);
        prop_oneof![
            (0u8..12, 0i64..5, phase).prop_map(|(n, t, p)| Op::Upsert(n, t, p)),
            (0u8..12).prop_map(Op::Remove),
        ]
    }

    /// The definition, computed the slow way.
    fn brute_force(items: &HashMap<String, Observed>, name: &str) -> i64 {
        let me = &items[name];
        if !me.unfinished {
            return 0;
        }
        let key = |o: &Observed| (o.created.unwrap_or(Timestamp::MAX), o.name.clone());
        items.values().filter(|o| o.unfinished && key(o) <= key(me)).count() as i64
    }

    proptest! {
        #[test]
        fn positions_match_the_definition_and_changes_are_reported(ops in prop::collection::vec(op(), 1..60)) {
            let mut q = QueueIndex::new();
            let mut model: HashMap<String, Observed> = HashMap::new();
            for op in ops {
                let before: HashMap<String, i64> =
                    model.keys().map(|n| (n.clone(), brute_force(&model, n))).collect();
                let (changed, touched) = match op {
                    Op::Upsert(n, t, p) => {
                        let o = obs(&format!("b{n}"), t, p);
                        model.insert(o.name.clone(), o.clone());
                        (q.upsert(o), format!("b{n}"))
                    }
                    Op::Remove(n) => {
                        model.remove(&format!("b{n}"));
                        (q.remove(&format!("b{n}")), format!("b{n}"))
                    }
                };
                let mut expected: Vec<String> = model
                    .keys()
                    .filter(|n| **n != touched && before.get(*n) != Some(&brute_force(&model, n)))
                    .cloned()
                    .collect();
                expected.sort();
                prop_assert_eq!(sorted(changed), expected);
                for n in model.keys() {
                    prop_assert_eq!(q.position(n), Some(brute_force(&model, n)));
                }
            }
        }
    }
}
