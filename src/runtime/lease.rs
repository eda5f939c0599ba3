//! Leader election on a `coordination.k8s.io/v1` Lease in nac's namespace, so the controllers run on one replica.
//!
//! - A candidate takes the Lease when it has no holder, or when its record has not changed for a whole lease
//!   duration as measured on the candidate's own clock (as client-go does, so clock skew between replicas does not
//!   matter).
//! - The leader renews every `renew_interval`; every write is conditional on the resourceVersion it read, so two
//!   replicas can never both win.
//! - The leader steps down (stops its controllers) as soon as it sees another holder, or when it could not renew
//!   for `lease_duration - renew_interval`, which is before any other replica may take over.
//! - On shutdown the leader stops its controllers, then releases the Lease (clears `holderIdentity`) so another
//!   replica takes over at once.

use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where the Lease lives and how it is held.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_interval: Duration,
}

impl LeaseConfig {
    /// How long the leader keeps working without a successful renewal.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration
            .saturating_sub(self.renew_interval)
            .max(self.renew_interval)
    }
}

/// What a replica should do with the Lease it just read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds it, or the holder let it expire: take it.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds it.
    Wait,
}

/// The decision for replica `me`, given the Lease and how long its record has been unchanged (on our clock).
pub fn decide(spec: Option<&LeaseSpec>, me: &str, unchanged_for: Duration, default_duration: Duration) -> Decision {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    match holder {
        None => Decision::Acquire,
        Some(h) if h == me => Decision::Renew,
        Some(_) => {
            let duration = spec
                .and_then(|s| s.lease_duration_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64))
                .unwrap_or(default_duration);
            if unchanged_for >= duration {
                Decision::Acquire
            } else {
                Decision::Wait
            }
        }
    }
}

/// The outcome of one acquire-or-renew attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// We hold the Lease (just acquired or renewed).
    Held,
    /// Another replica holds a live Lease.
    HeldByOther,
    /// Our write lost a race; read again next time.
    Contended,
}

struct Observation {
    resource_version: Option<String>,
    since: Instant,
}

/// One replica's handle on the Lease.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observed: Option<Observation>,
    metrics: Arc<Metrics>,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Elector {
    pub fn new(client: kube::Client, cfg: LeaseConfig, metrics: Arc<Metrics>) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
            metrics,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    fn duration_secs(&self) -> i32 {
        self.cfg.lease_duration.as_secs().clamp(1, i32::MAX as u64) as i32
    }

    /// Reads the Lease and takes or renews it when allowed.
    pub async fn try_acquire_or_renew(&mut self) -> Result<LeaseState, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            self.metrics.write("Lease");
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(LeaseState::Held),
                Err(e) if is_conflict(&e) => Ok(LeaseState::Contended),
                Err(e) => Err(e),
            };
        };
        let rv = lease.metadata.resource_version.clone();
        if self.observed.as_ref().map(|o| &o.resource_version) != Some(&rv) {
            self.observed = Some(Observation {
                resource_version: rv,
                since: Instant::now(),
            });
        }
        let unchanged_for = self.observed.as_ref().map(|o| o.since.elapsed()).unwrap_or_default();
        let duration_secs = self.duration_secs();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        match decide(Some(spec), &self.cfg.identity, unchanged_for, self.cfg.lease_duration) {
            Decision::Wait => return Ok(LeaseState::HeldByOther),
            Decision::Renew => {
                spec.renew_time = Some(now);
                spec.lease_duration_seconds = Some(duration_secs);
            }
            Decision::Acquire => {
                let had_holder = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
                if had_holder {
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.holder_identity = Some(self.cfg.identity.clone());
                spec.acquire_time = Some(now.clone());
                spec.renew_time = Some(now);
                spec.lease_duration_seconds = Some(duration_secs);
            }
        }
        self.metrics.write("Lease");
        // The resourceVersion read above makes this conditional: a concurrent writer gets a conflict.
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(l) => {
                self.observed = Some(Observation {
                    resource_version: l.metadata.resource_version,
                    since: Instant::now(),
                });
                Ok(LeaseState::Held)
            }
            Err(e) if is_conflict(&e) => Ok(LeaseState::Contended),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if we hold it, so another replica can take it at once.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.metrics.write("Lease");
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            // Someone else already moved on.
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

enum TermEnd {
    Shutdown,
    Lost(&'static str),
    Exited(String),
}

/// Runs `lead` only while this replica holds the Lease, until `shutdown`.
///
/// `lead` is started for each term with a child of `shutdown`, cancelled when the term ends (shutdown, lost
/// lease); it must return soon after. A term that does not finish within `grace` after that is aborted.
pub async fn run_elected<F, Fut>(
    mut elector: Elector,
    shutdown: CancellationToken,
    grace: Duration,
    metrics: Arc<Metrics>,
    mut lead: F,
) -> anyhow::Result<()>
where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let cfg = elector.config().clone();
    let call_timeout = cfg.renew_interval.max(Duration::from_secs(1));
    loop {
        // Candidate: poll the Lease every renew interval until we hold it.
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            match tokio::time::timeout(call_timeout, elector.try_acquire_or_renew()).await {
                Ok(Ok(LeaseState::Held)) => break,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, lease = %cfg.name, "reading the leader lease failed"),
                Err(_) => tracing::warn!(lease = %cfg.name, "reading the leader lease timed out"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(cfg.renew_interval) => {}
            }
        }
        tracing::info!(identity = %cfg.identity, lease = %cfg.name, "became leader; starting controllers");
        metrics.leader.set(1);
        let stop = shutdown.child_token();
        let mut term = tokio::spawn(lead(stop.clone()));
        let mut last_renewal = Instant::now();
        let end = loop {
            tokio::select! {
                _ = shutdown.cancelled() => break TermEnd::Shutdown,
                res = &mut term => {
                    let why = match res {
                        Ok(Ok(())) => "controllers stopped".to_string(),
                        Ok(Err(e)) => format!("controllers failed: {e:#}"),
                        Err(e) => format!("controllers panicked: {e}"),
                    };
                    break TermEnd::Exited(why);
                }
                _ = tokio::time::sleep(cfg.renew_interval) => {
                    match tokio::time::timeout(call_timeout, elector.try_acquire_or_renew()).await {
                        Ok(Ok(LeaseState::Held)) => last_renewal = Instant::now(),
                        Ok(Ok(LeaseState::HeldByOther)) => break TermEnd::Lost("another replica holds the lease"),
                        other => {
                            if let Ok(Err(e)) = other {
                                tracing::warn!(error = %e, "renewing the leader lease failed");
                            }
                            if last_renewal.elapsed() >= cfg.renew_deadline() {
                                break TermEnd::Lost("the lease could not be renewed in time");
                            }
                        }
                    }
                }
            }
        };
        stop.cancel();
        if !matches!(end, TermEnd::Exited(_)) && tokio::time::timeout(grace, &mut term).await.is_err() {
            tracing::warn!("controllers did not stop in time; aborting them");
            term.abort();
        }
        metrics.leader.set(0);
        match end {
            TermEnd::Shutdown => {
                if let Err(e) = elector.release().await {
                    tracing::warn!(error = %e, "releasing the leader lease failed; another replica takes over when it expires");
                } else {
                    tracing::info!(lease = %cfg.name, "released the leader lease");
                }
                return Ok(());
            }
            TermEnd::Lost(why) => tracing::warn!(reason = why, "stepped down as leader; controllers stopped"),
            TermEnd::Exited(why) => {
                tracing::error!(reason = %why, "controllers ended while leading; releasing the lease and retrying");
                let _ = elector.release().await;
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(cfg.renew_interval) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn lease(holder: Option<&str>, secs: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: secs,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_missing_or_released_lease_is_taken() {
        assert_eq!(decide(None, "me", Duration::ZERO, D), Decision::Acquire);
        assert_eq!(
            decide(Some(&lease(None, Some(15))), "me", Duration::ZERO, D),
            Decision::Acquire
        );
        assert_eq!(
            decide(Some(&lease(Some(""), Some(15))), "me", Duration::ZERO, D),
            Decision::Acquire
        );
    }

    #[test]
    fn our_own_lease_is_renewed() {
        assert_eq!(
            decide(Some(&lease(Some("me"), Some(15))), "me", D * 10, D),
            Decision::Renew
        );
    }

    #[test]
    fn a_live_lease_of_another_replica_is_respected() {
        let l = lease(Some("other"), Some(15));
        assert_eq!(decide(Some(&l), "me", Duration::ZERO, D), Decision::Wait);
        assert_eq!(decide(Some(&l), "me", Duration::from_secs(14), D), Decision::Wait);
    }

    #[test]
    fn a_lease_unchanged_for_its_whole_duration_is_taken_over() {
        let l = lease(Some("other"), Some(15));
        assert_eq!(decide(Some(&l), "me", Duration::from_secs(15), D), Decision::Acquire);
    }

    #[test]
    fn the_lease_own_duration_wins_over_ours() {
        let l = lease(Some("other"), Some(60));
        assert_eq!(decide(Some(&l), "me", Duration::from_secs(30), D), Decision::Wait);
        let l = lease(Some("other"), None);
        assert_eq!(decide(Some(&l), "me", Duration::from_secs(15), D), Decision::Acquire);
    }

    #[test]
    fn the_leader_stops_before_anyone_may_take_over() {
        let c = LeaseConfig {
            namespace: "nac".into(),
            name: "nac-leader".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
        };
        assert_eq!(c.renew_deadline(), Duration::from_secs(10));
        assert!(c.renew_deadline() < c.lease_duration);
    }
}
