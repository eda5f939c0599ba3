//! Where the live policy comes from: the policy ConfigMap (watched) or, for local runs, a file (polled).

use super::store::PolicyStore;
use crate::policy::POLICY_KEY;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Polls a policy file (every 500 ms, so edits apply well within 2 s).
pub async fn watch_file(path: PathBuf, store: Arc<PolicyStore>) {
    let source = path.display().to_string();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        match tokio::fs::read_to_string(&path).await {
            Ok(text) => {
                store.source_read();
                store.offer(&text, &source);
            }
            // A missing file is an answer (like a deleted ConfigMap: the last valid policy stays); any other
            // error means the policy cannot be read at all.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                store.source_read();
                store.record_error(&format!("{source}: {e}"), None)
            }
            Err(e) => store.source_failed(&format!("{source}: {e}")),
        }
    }
}

/// Watches the policy ConfigMap; the kube watcher re-lists after API server restarts and expired versions.
/// While the watch fails, a GET every second tells when the ConfigMap can be read again (the watcher may resume
/// without an event, and backs off for up to its maximum), so the webhooks admit again as soon as it can.
pub async fn watch_configmap(client: kube::Client, namespace: String, name: String, store: Arc<PolicyStore>) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let source = format!("ConfigMap {namespace}/{name}");
    let mut seen = false;
    let mut stream = watcher::watcher(api.clone(), cfg).default_backoff().boxed();
    let mut recheck = tokio::time::interval(Duration::from_secs(1));
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            ev = stream.next() => match ev {
                Some(ev) => ev,
                None => break,
            },
            _ = recheck.tick(), if store.source_failing() => {
                // Only whether it can be read: the content comes in order through the watch.
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(3), api.get_opt(&name)).await {
                    store.source_read();
                }
                continue;
            }
        };
        if ev.is_ok() {
            store.source_read();
        }
        match ev {
            Ok(Event::Apply(cm)) | Ok(Event::InitApply(cm)) => {
                seen = true;
                apply(&cm, &source, &store);
            }
            Ok(Event::Init) => seen = false,
            Ok(Event::InitDone) => {
                if !seen {
                    store.record_error(&format!("{source} not found"), None);
                }
            }
            Ok(Event::Delete(_)) => {
                store.record_error(&format!("{source} was deleted; keeping the last valid policy"), None)
            }
            Err(e) => {
                tracing::warn!(error = %e, "policy ConfigMap watch failed; retrying");
                store.source_failed(&format!("{source}: {e}"));
            }
        }
    }
}

fn apply(cm: &ConfigMap, source: &str, store: &PolicyStore) {
    match cm.data.as_ref().and_then(|d| d.get(POLICY_KEY)) {
        Some(text) => {
            store.offer(text, source);
        }
        None => store.record_error(&format!("{source} has no key {POLICY_KEY}"), None),
    }
}
