//! Prometheus metrics, all named `nac_*`, served as text on the metrics listener.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Verdict {
    Allowed,
    Denied,
    BadRequest,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: String,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

/// A namespace tracked against a recovery-point objective, and its tier (empty under the base policy).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct TrackedLabels {
    pub namespace: String,
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Family<EndpointLabels, Histogram>,
    pub policy_reloads: Counter,
    pub policy_reload_errors: Counter,
    pub policy_generation: Gauge<u64, AtomicU64>,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    pub queue_depth: Family<ControllerLabels, Gauge>,
    pub velero_objects: Family<KindLabels, Gauge>,
    pub leader: Gauge,
    pub api_writes: Family<KindLabels, Counter>,
    pub orphans_collected: Family<KindLabels, Counter>,
    pub sync_writes: Family<KindLabels, Counter>,
    pub occupancy_lists: Counter,
    pub queue_stalled: Gauge,
    pub restores_not_verified: Counter,
    pub stale_reads: Family<KindLabels, Counter>,
    pub last_backup_age: Family<TrackedLabels, Gauge>,
    pub objective_seconds: Family<TrackedLabels, Gauge>,
    pub objective_breached: Family<TrackedLabels, Gauge>,
}

fn latency_buckets() -> Histogram {
    // 50 µs .. ~1.6 s: webhook reviews take well under a millisecond, reconciles tens of milliseconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.00005, 2.0, 16,
    ))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nac");
        let requests = Family::<RequestLabels, Counter>::default();
        let request_duration = Family::<EndpointLabels, Histogram>::new_with_constructor(latency_buckets as fn() -> _);
        let reconcile_duration =
            Family::<ControllerLabels, Histogram>::new_with_constructor(latency_buckets as fn() -> _);
        let m = Metrics {
            requests,
            request_duration: request_duration.clone(),
            policy_reloads: Counter::default(),
            policy_reload_errors: Counter::default(),
            policy_generation: Gauge::default(),
            reconciles: Family::default(),
            reconcile_duration: reconcile_duration.clone(),
            queue_depth: Family::default(),
            velero_objects: Family::default(),
            leader: Gauge::default(),
            api_writes: Family::default(),
            orphans_collected: Family::default(),
            sync_writes: Family::default(),
            occupancy_lists: Counter::default(),
            queue_stalled: Gauge::default(),
            restores_not_verified: Counter::default(),
            stale_reads: Family::default(),
            last_backup_age: Family::default(),
            objective_seconds: Family::default(),
            objective_breached: Family::default(),
            registry: Registry::default(),
        };
        // The metrics are of several types, so a table of (name, help, metric) is a macro, not a loop.
        macro_rules! register {
            ($($name:literal, $help:literal, $metric:expr;)*) => { $(registry.register($name, $help, $metric);)* };
        }
        register! {
            "webhook_requests", "Admission reviews by endpoint and verdict", m.requests.clone();
            "webhook_request_duration_seconds", "Admission review latency", request_duration;
            "policy_reloads", "Policy versions applied", m.policy_reloads.clone();
            "policy_reload_errors", "Policy versions rejected (the last valid policy stays)", m.policy_reload_errors.clone();
            "policy_generation", "Generation of the policy in force (0: none loaded)", m.policy_generation.clone();
            "reconciles", "Reconciles by controller and result", m.reconciles.clone();
            "reconcile_duration_seconds", "Reconcile latency by controller", reconcile_duration;
            "queue_depth", "Reconciles waiting or running, by controller", m.queue_depth.clone();
            "velero_objects_managed", "Velero objects carrying nac's labels, by kind", m.velero_objects.clone();
            "leader", "1 while this replica holds the controller lease", m.leader.clone();
            "api_writes", "Writes to the API server, by kind", m.api_writes.clone();
            "orphans_collected",
                "Velero objects nac made whose tenant object was gone, deleted by garbage collection, by kind",
                m.orphans_collected.clone();
            "backup_sync_writes",
                "Writes of backup sync, by kind (NonAdminBackups given back to backups in object storage, scheduled \
                 runs stamped); counted in api_writes too",
                m.sync_writes.clone();
            "rights_occupancy_lists",
                "Metadata lists of at most one object, of a kind left out of a backup in its namespace, for the \
                 warning to name the kinds that hold objects first",
                m.occupancy_lists.clone();
            "velero_backup_queue_stalled",
                "1 while Velero's backup queue has stood still (backups queued, none running) for longer than \
                 controllers.queue_stall_secs",
                m.queue_stalled.clone();
            "restores_not_verified",
                "Checks of a finished restore that could not confirm from the API server what Velero made (each \
                 is tried again with backoff; the NonAdminRestore shows ResourcesOutsideRights=True \
                 RestoreNotVerified meanwhile)",
                m.restores_not_verified.clone();
            "stale_reads",
                "Reads of a tenant object the watch cache could not answer, by kind: a status write's conflict, or \
                 the cache behind nac's own write (for longer than 5 s before a reconcile, at all before a status \
                 write); none while the watches keep up",
                m.stale_reads.clone();
            "namespace_last_backup_age_seconds",
                "Seconds since the newest completed backup of a namespace tracked against a recovery-point objective \
                 ended (absent: none completed); on the leader",
                m.last_backup_age.clone();
            "namespace_recovery_point_objective_seconds",
                "The recovery-point objective of a tracked namespace, by namespace and tier; on the leader",
                m.objective_seconds.clone();
            "namespace_recovery_point_breached",
                "1 while a tracked namespace's newest completed backup is older than its recovery-point objective \
                 (or it has none), else 0; on the leader",
                m.objective_breached.clone();
        }
        Metrics { registry, ..m }
    }

    pub fn policy_reloaded(&self, generation: u64) {
        self.policy_reloads.inc();
        self.policy_generation.set(generation);
    }

    pub fn policy_reload_failed(&self) {
        self.policy_reload_errors.inc();
    }

    pub fn observe_request(&self, endpoint: &str, verdict: Verdict, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.to_string(),
                verdict,
            })
            .inc();
        self.request_duration
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_string(),
            })
            .observe(seconds);
    }

    pub fn write(&self, kind: &str) {
        self.api_writes
            .get_or_create(&KindLabels { kind: kind.to_string() })
            .inc();
    }

    /// A write of backup sync: in `api_writes` and in `backup_sync_writes`.
    pub fn sync_write(&self, kind: &str) {
        self.write(kind);
        self.sync_writes
            .get_or_create(&KindLabels { kind: kind.to_string() })
            .inc();
    }

    /// A read of a tenant object its watch cache could not answer.
    pub fn stale_read(&self, kind: &str) {
        self.stale_reads
            .get_or_create(&KindLabels { kind: kind.to_string() })
            .inc();
    }

    pub fn collected(&self, kind: &str) {
        self.orphans_collected
            .get_or_create(&KindLabels { kind: kind.to_string() })
            .inc();
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}
