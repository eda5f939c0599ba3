//! The live admin policy: the newest valid version, its generation, and the last load error.
//!
//! Readers (webhook requests, reconciles) take a cheap snapshot; a source (file poller or ConfigMap watch) swaps
//! in new versions. An invalid version never replaces a valid one.

use crate::policy::Policy;
use arc_swap::ArcSwap;
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct PolicyState {
    /// The newest valid policy; `None` until one has loaded (NAB/NAR reviews fail closed meanwhile).
    pub policy: Option<Arc<Policy>>,
    /// Counts accepted policy versions, starting at 1 for the first.
    pub generation: u64,
    /// Why the newest version was rejected, while it is the newest.
    pub error: Option<String>,
    /// The raw text of the newest version seen (valid or not), to skip reloads of unchanged input.
    pub source_text: Option<String>,
}

#[derive(Default)]
pub struct PolicyStore {
    state: ArcSwap<PolicyState>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// What happened to an offered policy text.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer {
    Unchanged,
    Applied(u64),
    Rejected(String),
}

impl PolicyStore {
    pub fn new(metrics: Option<Arc<crate::metrics::Metrics>>) -> Self {
        PolicyStore {
            state: ArcSwap::from_pointee(PolicyState::default()),
            metrics,
        }
    }

    pub fn snapshot(&self) -> Arc<PolicyState> {
        self.state.load_full()
    }

    pub fn current(&self) -> Option<Arc<Policy>> {
        self.state.load().policy.clone()
    }

    /// Offers a new policy text; a valid one becomes current, an invalid one is recorded as the error.
    pub fn offer(&self, text: &str, source: &str) -> Offer {
        let old = self.state.load_full();
        if old.source_text.as_deref() == Some(text) {
            return Offer::Unchanged;
        }
        match Policy::parse(text) {
            Ok(p) => {
                let generation = old.generation + 1;
                self.state.store(Arc::new(PolicyState {
                    policy: Some(Arc::new(p)),
                    generation,
                    error: None,
                    source_text: Some(text.to_string()),
                }));
                if let Some(m) = &self.metrics {
                    m.policy_reloaded(generation);
                }
                tracing::info!(generation, source, "policy applied");
                Offer::Applied(generation)
            }
            Err(e) => {
                let msg = format!("{source}: {e}");
                self.record_error(&msg, Some(text));
                Offer::Rejected(msg)
            }
        }
    }

    /// Records a problem reading the policy (missing ConfigMap, unreadable file); the current policy stays.
    pub fn record_error(&self, msg: &str, text: Option<&str>) {
        let old = self.state.load_full();
        if old.error.as_deref() == Some(msg) {
            return;
        }
        self.state.store(Arc::new(PolicyState {
            policy: old.policy.clone(),
            generation: old.generation,
            error: Some(msg.to_string()),
            source_text: text.map(str::to_string).or(old.source_text.clone()),
        }));
        if let Some(m) = &self.metrics {
            m.policy_reload_failed();
        }
        if old.policy.is_some() {
            tracing::error!(
                error = msg,
                generation = old.generation,
                "policy rejected; keeping the last valid one"
            );
        } else {
            tracing::error!(
                error = msg,
                "policy rejected; no valid policy loaded, NAB/NAR requests are denied"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_versions_never_replace_valid_ones() {
        let s = PolicyStore::new(None);
        assert!(s.current().is_none());
        assert_eq!(s.offer("enforceBackupSpec: {ttl: 1h}", "t"), Offer::Applied(1));
        assert_eq!(s.offer("enforceBackupSpec: {ttl: 1h}", "t"), Offer::Unchanged);
        assert!(matches!(
            s.offer("enforceBackupSpec: {tll: 1h}", "t"),
            Offer::Rejected(_)
        ));
        let snap = s.snapshot();
        assert_eq!(snap.generation, 1);
        assert!(snap.error.as_deref().unwrap().contains("tll"));
        assert_eq!(s.current().unwrap().enforce_backup_spec["ttl"], "1h");
        assert_eq!(s.offer("{}", "t"), Offer::Applied(2));
        assert!(s.snapshot().error.is_none());
    }
}
