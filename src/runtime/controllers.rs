//! The controllers as a process runs them: behind the leader Lease when leader election is enabled (one
//! [`term`] per term of leadership), directly otherwise.

use super::lease::{run_elected, Elector, LeaseConfig};
use crate::controller::{term, Options};
use crate::metrics::Metrics;
use crate::policy::live::PolicyStore;
use kube::Client;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs the controllers with `opts` until `shutdown` is cancelled: behind the leader Lease when leader election
/// is enabled, directly otherwise. Returns after the controllers stopped and the Lease was released. `access`
/// answers about requesters' rights (shared with the webhooks, so a reconcile right after admission reuses their
/// answers).
pub async fn run(
    client: Client,
    opts: Options,
    policy: Arc<PolicyStore>,
    metrics: Arc<Metrics>,
    access: Arc<dyn crate::rights::Access>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    tracing::info!(
        velero_namespace = %opts.velero_namespace,
        leader_election = opts.leader_election,
        identity = %opts.identity,
        "starting controllers"
    );
    crate::controller::watches::choose_initial_lists(&client, &opts).await;
    if !opts.leader_election {
        metrics.leader.set(1);
        let res = term(client, opts, policy, metrics.clone(), access, shutdown).await;
        metrics.leader.set(0);
        return res;
    }
    let elector = Elector::new(
        client.clone(),
        LeaseConfig {
            namespace: opts.lease_namespace.clone(),
            name: opts.lease_name.clone(),
            identity: opts.identity.clone(),
            lease_duration: opts.lease_duration,
            renew_interval: opts.renew_interval,
        },
        metrics.clone(),
    );
    let grace = opts.shutdown_grace + Duration::from_secs(1);
    let m = metrics.clone();
    let res = run_elected(elector, shutdown.clone(), grace, metrics, move |stop| {
        term(
            client.clone(),
            opts.clone(),
            policy.clone(),
            m.clone(),
            access.clone(),
            stop,
        )
    })
    .await;
    shutdown.cancelled().await;
    res
}
