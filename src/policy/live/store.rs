//! The live admin policy: the newest valid version, its generation, and the last load error.
//!
//! Readers (webhook requests, reconciles) take a cheap snapshot; a source (file poller or ConfigMap watch) swaps
//! in new versions. An invalid version never replaces a valid one.

use super::NamespaceLabels;
use crate::policy::Policy;
use arc_swap::ArcSwap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the policy source may fail to be read (a watch erroring, a file unreadable) before the webhooks stop
/// admitting under the last policy read, which may then be out of date. Longer than a watch's reconnect.
pub const SOURCE_GRACE: Duration = Duration::from_secs(5);

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
    /// Since when and why the source cannot be read, while it cannot.
    unreadable: Mutex<Option<(Instant, String)>>,
    /// Namespaces' labels, which tiers select by; unset without a cluster (a policy with tiers then admits
    /// nothing).
    namespaces: std::sync::OnceLock<Arc<NamespaceLabels>>,
    /// Namespaces' use of their quotas; unset without a cluster (quotas then cannot be counted: a policy with
    /// quotas refuses what they limit).
    usage: std::sync::OnceLock<Arc<super::UsageIndex>>,
    /// Namespaces no copy may go into whatever the policy says (Velero's, nac's, those nac's webhooks leave out).
    protected: std::sync::OnceLock<Vec<String>>,
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
            unreadable: Mutex::default(),
            namespaces: std::sync::OnceLock::new(),
            usage: std::sync::OnceLock::new(),
            protected: std::sync::OnceLock::new(),
        }
    }

    /// Sets the namespaces no copy may go into (once, at start).
    pub fn protect_namespaces(&self, namespaces: Vec<String>) {
        let _ = self.protected.set(namespaces);
    }

    /// The refusal of a copy into namespace `target`, judged from nac's caches (`crate::policy::copy`). `Err`
    /// while nac has not read the cluster's namespaces yet: whether `target` exists cannot be told, so ask again.
    pub fn copy_refusal(&self, target: &str) -> Result<Option<String>, String> {
        let namespaces = self
            .namespaces
            .get()
            .filter(|n| n.synced())
            .ok_or_else(|| "nac has not read the cluster's namespaces yet".to_string())?;
        let exists = namespaces.labels(target).is_some();
        let policy = self.current_in(target);
        Ok(crate::policy::copy::target_refusal(&crate::policy::copy::Target {
            name: target,
            exists,
            policy: policy.as_deref(),
            protected: self.protected.get().map(Vec::as_slice).unwrap_or_default(),
        }))
    }

    /// Gives the store the namespaces' use of their quotas (once).
    pub fn count_usage(&self, usage: Arc<super::UsageIndex>) {
        let _ = self.usage.set(usage);
    }

    pub fn usage(&self) -> Option<&Arc<super::UsageIndex>> {
        self.usage.get()
    }

    /// Gives the store the namespaces' labels tiers select by (once).
    pub fn follow_namespaces(&self, namespaces: Arc<NamespaceLabels>) {
        let _ = self.namespaces.set(namespaces);
    }

    pub fn namespaces(&self) -> Option<&Arc<NamespaceLabels>> {
        self.namespaces.get()
    }

    /// The policy of objects in `namespace`: its tier's, else the base. `None` without a policy, or when the
    /// policy has tiers and the namespace's labels are not known (yet): a tier cannot be guessed.
    pub fn current_in(&self, namespace: &str) -> Option<Arc<Policy>> {
        self.resolve(self.current()?, namespace)
    }

    /// [`Self::admissible`] for objects in `namespace`, resolved as [`Self::current_in`].
    pub fn admissible_in(&self, namespace: &str) -> Option<Arc<Policy>> {
        self.resolve(self.admissible()?, namespace)
    }

    fn resolve(&self, policy: Arc<Policy>, namespace: &str) -> Option<Arc<Policy>> {
        if policy.tiers.is_empty() {
            return Some(policy);
        }
        let labels = self.namespaces.get()?.labels(namespace)?;
        Some(policy.for_labels(&labels))
    }

    pub fn snapshot(&self) -> Arc<PolicyState> {
        self.state.load_full()
    }

    pub fn current(&self) -> Option<Arc<Policy>> {
        self.state.load().policy.clone()
    }

    /// The policy new objects are admitted under: the current one, unless the source could not be read for
    /// longer than [`SOURCE_GRACE`] (an admin's change since may be unseen, so the webhooks fail closed).
    pub fn admissible(&self) -> Option<Arc<Policy>> {
        if self.unreadable().is_some() {
            return None;
        }
        self.current()
    }

    /// Why the source counts as unreadable: it could not be read for longer than [`SOURCE_GRACE`].
    pub fn unreadable(&self) -> Option<String> {
        self.unreadable_at(Instant::now())
    }

    fn unreadable_at(&self, now: Instant) -> Option<String> {
        let guard = self.unreadable.lock().unwrap_or_else(|e| e.into_inner());
        let (since, why) = guard.as_ref()?;
        let failing = now.saturating_duration_since(*since);
        (failing > SOURCE_GRACE).then(|| {
            format!(
                "the policy could not be read for {} s ({why}); the last policy read may be out of date",
                failing.as_secs()
            )
        })
    }

    /// Records a failed read of the source (a watch error, an unreadable file); the first failure of a run of
    /// them starts the grace.
    pub fn source_failed(&self, why: &str) {
        self.source_failed_at(why, Instant::now());
    }

    pub fn source_failed_at(&self, why: &str, now: Instant) {
        let mut guard = self.unreadable.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some((_, w)) => *w = why.to_string(),
            None => {
                tracing::warn!(error = why, "the policy source cannot be read");
                *guard = Some((now, why.to_string()));
            }
        }
    }

    /// Records a successful read of the source: the webhooks admit again.
    pub fn source_read(&self) {
        let mut guard = self.unreadable.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((since, _)) = guard.take() {
            tracing::info!(
                failing_secs = since.elapsed().as_secs(),
                "the policy source can be read again"
            );
        }
    }

    /// Whether the last read of the source failed (so it is worth checking again).
    pub fn source_failing(&self) -> bool {
        self.unreadable.lock().unwrap_or_else(|e| e.into_inner()).is_some()
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
    fn a_copy_target_is_judged_once_the_namespaces_are_read_and_by_its_own_tier() {
        use k8s_openapi::api::core::v1::Namespace;
        use kube::runtime::watcher::Event;
        let s = PolicyStore::new(None);
        let policy = "tiers:\n- name: open\n  namespaceSelector: {matchLabels: {copies: open}}\n  restore: {allowNamespaceCopies: true}\n";
        assert_eq!(s.offer(policy, "t"), Offer::Applied(1));
        s.protect_namespaces(vec!["velero".into()]);
        assert!(s.copy_refusal("b").is_err(), "no namespace watch");
        let n = Arc::new(NamespaceLabels::default());
        s.follow_namespaces(n.clone());
        assert!(s.copy_refusal("b").is_err(), "its first list not read yet");
        let ns = |name: &str, labels: &[(&str, &str)]| {
            let mut o = kube::core::PartialObjectMeta::<Namespace>::default();
            o.metadata.name = Some(name.into());
            o.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
            o
        };
        n.apply(Event::Init);
        n.apply(Event::InitApply(ns("b", &[("copies", "open")])));
        n.apply(Event::InitApply(ns("c", &[])));
        n.apply(Event::InitApply(ns("velero", &[("copies", "open")])));
        n.apply(Event::InitDone);
        assert_eq!(s.copy_refusal("b"), Ok(None));
        let base = s.copy_refusal("c").unwrap().unwrap();
        assert!(base.contains("namespace c does not take copies"), "{base}");
        assert!(s.copy_refusal("gone").unwrap().unwrap().contains("does not exist"));
        assert!(s.copy_refusal("velero").unwrap().unwrap().contains("Velero's, nac's"));
    }

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

    #[test]
    fn an_unreadable_source_stops_admission_after_the_grace_and_only_then() {
        let s = PolicyStore::new(None);
        assert_eq!(s.offer("{}", "t"), Offer::Applied(1));
        let t0 = Instant::now();
        s.source_failed_at("watch failed: connection refused", t0);
        // A later failure of the same run keeps its start.
        s.source_failed_at("watch failed: 403", t0 + Duration::from_secs(3));
        assert!(s.source_failing());
        assert_eq!(s.unreadable_at(t0 + SOURCE_GRACE), None);
        let why = s.unreadable_at(t0 + SOURCE_GRACE + Duration::from_secs(1)).unwrap();
        assert!(why.contains("could not be read for 6 s (watch failed: 403)"), "{why}");
        s.source_read();
        assert!(!s.source_failing());
        assert_eq!(s.unreadable_at(t0 + Duration::from_secs(60)), None);
        assert!(s.admissible().is_some());
    }

    #[test]
    fn admissible_is_none_while_the_source_is_unreadable() {
        let s = PolicyStore::new(None);
        assert_eq!(s.offer("{}", "t"), Offer::Applied(1));
        s.source_failed_at("gone", Instant::now() - SOURCE_GRACE - Duration::from_secs(1));
        assert!(s.admissible().is_none());
        // The controllers still see the last policy read.
        assert!(s.current().is_some());
        s.source_read();
        assert!(s.admissible().is_some());
    }
}
