//! Values shared between store copies: many compact copies hold equal parts (the compact spec of every Backup of
//! one namespace and location is the same), and one allocation can serve them all.

use serde::Serialize;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

/// Hands out one `Arc` per distinct value while any holder keeps it; forgets values nobody holds (swept as the
/// table grows, so it never holds more than about twice the live values).
pub struct Interner<T> {
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    /// Values added since the last sweep, and how many were live at it: a sweep is due when the additions
    /// outnumber them (amortized, each addition pays for one value swept).
    added: usize,
    live: usize,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            inner: Mutex::new(Inner {
                by_hash: HashMap::new(),
                added: 0,
                live: 0,
            }),
        }
    }
}

impl<T: Serialize + PartialEq> Interner<T> {
    /// The shared `Arc` of a value equal to `value`, or `value` itself, now shared.
    pub fn share(&self, value: Arc<T>) -> Arc<T> {
        let mut h = DefaultHasher::new();
        // Equal values serialize alike; a value that does not serialize is not shared.
        let Ok(bytes) = serde_json::to_vec(&*value) else {
            return value;
        };
        bytes.hash(&mut h);
        let key = h.finish();
        let mut inner = self.inner.lock().expect("interner lock");
        let bucket = inner.by_hash.entry(key).or_default();
        if let Some(found) = bucket.iter().filter_map(Weak::upgrade).find(|v| **v == *value) {
            return found;
        }
        bucket.retain(|w| w.strong_count() > 0);
        bucket.push(Arc::downgrade(&value));
        inner.added += 1;
        if inner.added > inner.live.max(1024) {
            inner.by_hash.retain(|_, b| {
                b.retain(|w| w.strong_count() > 0);
                !b.is_empty()
            });
            inner.by_hash.shrink_to_fit();
            inner.live = inner.by_hash.values().map(Vec::len).sum();
            inner.added = 0;
        }
        value
    }

    /// Values in the table (live or not yet swept).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .expect("interner lock")
            .by_hash
            .values()
            .map(Vec::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_allocation_and_forgotten_ones_are_swept() {
        let shared = Interner::<Vec<String>>::default();
        let a = shared.share(Arc::new(vec!["team-a".into()]));
        let b = shared.share(Arc::new(vec!["team-a".into()]));
        let c = shared.share(Arc::new(vec!["team-b".into()]));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(shared.len(), 2);
        drop((a, b, c));
        // Nobody holds them: a new value takes the place, and a flood of short-lived values stays bounded.
        for i in 0..10_000 {
            drop(shared.share(Arc::new(vec![format!("ns-{i}")])));
        }
        assert!(shared.len() <= 2 * 1024 + 2, "{} values kept", shared.len());
        let kept = shared.share(Arc::new(vec!["team-a".into()]));
        assert_eq!(*kept, vec!["team-a".to_string()]);
    }
}
