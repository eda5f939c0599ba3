//! Whether nac can reach the API server, for `/readyz`: a GET of `/version` every second (cheap: no storage, no
//! authorization beyond discovery). A replica that cannot reach the API server can neither check a requester's
//! rights nor read the policy, so it leaves the webhook Service to replicas that can.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the API server may be unreachable before `/readyz` says so: longer than a watch's reconnect or one
/// slow answer, short enough that a partitioned replica leaves the Service within seconds.
pub const GRACE: Duration = Duration::from_secs(5);
const PROBE_EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The last answer from the API server and, while it does not answer, the last error.
pub struct ApiReach {
    state: Mutex<(Instant, Option<String>)>,
}

impl Default for ApiReach {
    fn default() -> Self {
        ApiReach {
            state: Mutex::new((Instant::now(), None)),
        }
    }
}

impl ApiReach {
    /// Why the API server counts as unreachable: no answer for longer than [`GRACE`].
    pub fn unreachable(&self) -> Option<String> {
        self.unreachable_at(Instant::now())
    }

    fn unreachable_at(&self, now: Instant) -> Option<String> {
        let guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last_ok, error) = &*guard;
        let silent = now.saturating_duration_since(*last_ok);
        match error {
            Some(e) if silent > GRACE => Some(format!("the API server did not answer for {} s: {e}", silent.as_secs())),
            _ => None,
        }
    }

    fn answered_at(&self, now: Instant) {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if guard.1.take().is_some() {
            tracing::info!(
                silent_secs = now.saturating_duration_since(guard.0).as_secs(),
                "the API server answers again"
            );
        }
        guard.0 = now;
    }

    fn failed(&self, error: String) {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if guard.1.is_none() {
            tracing::warn!(error = %error, "the API server does not answer");
        }
        guard.1 = Some(error);
    }

    /// Probes the API server until the process ends.
    pub async fn probe(self: std::sync::Arc<Self>, client: kube::Client) {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
                Ok(Ok(_)) => self.answered_at(Instant::now()),
                Ok(Err(e)) => self.failed(e.to_string()),
                Err(_) => self.failed(format!("no answer to GET /version within {PROBE_TIMEOUT:?}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_only_after_the_grace_and_reachable_with_the_next_answer() {
        let r = ApiReach::default();
        let t0 = Instant::now();
        r.answered_at(t0);
        r.failed("connection refused".into());
        assert_eq!(r.unreachable_at(t0 + GRACE), None);
        let why = r.unreachable_at(t0 + GRACE + Duration::from_secs(2)).unwrap();
        assert_eq!(why, "the API server did not answer for 7 s: connection refused");
        r.answered_at(t0 + Duration::from_secs(20));
        assert_eq!(r.unreachable_at(t0 + Duration::from_secs(60)), None);
    }

    #[test]
    fn a_quiet_time_without_errors_is_not_unreachable() {
        let r = ApiReach::default();
        let t0 = Instant::now();
        r.answered_at(t0);
        assert_eq!(r.unreachable_at(t0 + Duration::from_secs(600)), None);
    }
}
