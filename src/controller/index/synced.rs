//! Whether a watch has completed its first list: what every store and index waits on.

use std::sync::Arc;

/// Whether a watch has completed its first list. Unlike `Store::wait_until_ready` (a oneshot that wakes only
/// its last poller), any number of reconciles may wait on it at once.
#[derive(Clone, Debug)]
pub struct Synced(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Synced {
    fn default() -> Self {
        Synced(Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl Synced {
    pub fn mark(&self) {
        self.0.send_replace(true);
    }

    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits up to `timeout`; returns whether it is synced.
    pub async fn wait(&self, timeout: std::time::Duration) -> bool {
        let mut rx = self.0.subscribe();
        let synced = matches!(tokio::time::timeout(timeout, rx.wait_for(|v| *v)).await, Ok(Ok(_)));
        synced
    }
}
