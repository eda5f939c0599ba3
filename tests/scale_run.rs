//! Reconciler scale run (a measurement, not a timed test): 1,000 NonAdminBackups over 100 namespaces against the
//! local control plane. Prints time to all Velero Backups, create→Created latency percentiles, API writes per
//! NAB and nac's peak memory, for BENCHMARKS.md.
//!
//! `make scale` (or: cargo test --release --features e2e,scale --test scale_run -- --nocapture)
#![cfg(all(feature = "e2e", feature = "scale"))]

mod common;

use common::e2e::*;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use nac::api::{NonAdminBackup, NonAdminPhase};
use nac::velero::Backup;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn api_writes(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("nac_api_writes_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_run() {
    let namespaces = env_usize("SCALE_NAMESPACES", 100);
    let per_ns = env_usize("SCALE_PER_NAMESPACE", 10);
    let concurrency = env_usize("SCALE_CONCURRENCY", 16);
    let total = namespaces * per_ns;
    let env = Env::start("backup:\n  maxTtl: 2160h\n", NacOptions::default()).await;
    let run = unique_ns("scale");

    let mut tenants = Vec::new();
    for i in 0..namespaces {
        let ns = format!("{run}-{i}");
        ensure_namespace(&env.admin, &ns).await;
        let user = format!("user-{ns}");
        grant_editor(&env.admin, &ns, &user).await;
        tenants.push((ns, env.cluster.as_user(&user).await));
    }
    let writes_before = api_writes(&env.nac.metrics_text().await);

    // Watch every NAB: when did each become Created?
    let seen: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let all: Api<NonAdminBackup> = Api::all(env.admin.clone());
    let seen_w = seen.clone();
    let watch = tokio::spawn(async move {
        let mut s = watcher::watcher(all, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(n)) = s.try_next().await {
            if n.status.as_ref().and_then(|s| s.phase) == Some(NonAdminPhase::Created) {
                let key = (n.metadata.namespace.clone().unwrap(), n.metadata.name.clone().unwrap());
                seen_w.lock().unwrap().entry(key).or_insert_with(Instant::now);
            }
        }
    });

    let start = Instant::now();
    let jobs: Vec<_> = tenants
        .iter()
        .flat_map(|(ns, c)| (0..per_ns).map(move |j| (ns.clone(), c.clone(), format!("b{j}"))))
        .collect();
    let created_at: Vec<((String, String), Instant)> = futures::stream::iter(jobs)
        .map(|(ns, c, name)| async move {
            let api: Api<NonAdminBackup> = Api::namespaced(c, &ns);
            let nab: NonAdminBackup = serde_json::from_value(json!({
                "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
                "metadata": {"name": name}, "spec": {"backupSpec": {}}
            }))
            .unwrap();
            api.create(&PostParams::default(), &nab).await.unwrap();
            ((ns, name), Instant::now())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let creates_done = start.elapsed();

    let velero: Api<Backup> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let all_backups = eventually(Duration::from_secs(600), "all Velero Backups", || async {
        let n = velero
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|b| {
                b.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("openshift.io/oadp-nab-origin-namespace"))
                    .is_some_and(|ns| ns.starts_with(&format!("{run}-")))
            })
            .count();
        (n >= total).then(|| start.elapsed())
    })
    .await;
    eventually(Duration::from_secs(120), "all NABs seen Created", || async {
        (seen.lock().unwrap().len() >= total).then_some(())
    })
    .await;
    // Let status updates settle (queue positions), then count writes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    watch.abort();

    let seen = seen.lock().unwrap().clone();
    let mut lat: Vec<Duration> = created_at
        .iter()
        .map(|(k, t)| seen.get(k).map(|s| s.saturating_duration_since(*t)).unwrap_or_default())
        .collect();
    lat.sort();
    let metrics = env.nac.metrics_text().await;
    let writes = api_writes(&metrics) - writes_before;
    let rss = env.nac.peak_rss_kib().unwrap_or(0);
    println!("\n| measure | value |\n|---|---|");
    println!("| NABs / namespaces | {total} / {namespaces} |");
    println!("| client create concurrency | {concurrency} |");
    println!(
        "| all creates accepted (webhooks included) | {:.1} s |",
        creates_done.as_secs_f64()
    );
    println!("| all Velero Backups created | {:.1} s |", all_backups.as_secs_f64());
    println!("| create→Created p50 | {} ms |", percentile(&lat, 0.5).as_millis());
    println!("| create→Created p99 | {} ms |", percentile(&lat, 0.99).as_millis());
    println!("| create→Created max | {} ms |", lat.last().unwrap().as_millis());
    println!("| nac API writes per NAB | {:.2} |", writes / total as f64);
    println!("| nac peak RSS (VmHWM) | {:.1} MiB |", rss as f64 / 1024.0);
    for l in metrics.lines().filter(|l| l.starts_with("nac_api_writes_total")) {
        println!("  {l}");
    }
}
