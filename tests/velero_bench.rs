//! Measurement with the real Velero and S3 server (`make velero-bench`, not part of `make test`): how long a
//! namespace user waits from creating a NonAdminBackup to seeing Velero's Completed in its status, and how much of
//! that is nac (create → phase Created, i.e. the Velero Backup exists) versus Velero (Created → Completed
//! mirrored). One backup alone, then 50 at once over 10 namespaces. Times are taken client-side from a watch of
//! NonAdminBackups, so they include the API server's and the watch's latency.
#![cfg(all(feature = "e2e", feature = "scale"))]

mod common;

use common::e2e::*;
use common::velero::*;
use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use nac::api::{NonAdminBackup, NonAdminPhase};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Default, Clone, Copy)]
struct Times {
    sent: Option<Instant>,
    created: Option<Instant>,
    completed: Option<Instant>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Creates `per_ns` NABs in each of `namespaces` at once and returns their times.
async fn run(label: &str, namespaces: usize, per_ns: usize) -> Vec<Times> {
    let admin = Cluster::load().admin().await;
    let mut tenants = Vec::new();
    for i in 0..namespaces {
        let (ns, user, _) = new_tenant(&format!("{label}{i}")).await;
        workload(&admin, &ns).await;
        tenants.push((ns, user));
    }
    let times: std::sync::Arc<std::sync::Mutex<HashMap<String, Times>>> = Default::default();
    let t2 = times.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(Api::<NonAdminBackup>::all(admin), watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(n)) = stream.next().await {
            let key = format!(
                "{}/{}",
                n.metadata.namespace.clone().unwrap_or_default(),
                n.metadata.name.clone().unwrap_or_default()
            );
            let now = Instant::now();
            let mut t = t2.lock().unwrap();
            let Some(e) = t.get_mut(&key) else { continue };
            let st = n.status.clone().unwrap_or_default();
            if e.created.is_none() && st.phase == Some(NonAdminPhase::Created) {
                e.created = Some(now);
            }
            let vp = st.velero_backup.and_then(|v| v.status).and_then(|s| s.phase);
            if e.completed.is_none() && vp.as_deref() == Some("Completed") {
                e.completed = Some(now);
            }
        }
    });
    let mut creates = Vec::new();
    for (ns, user) in &tenants {
        for j in 0..per_ns {
            let key = format!("{ns}/b{j}");
            times.lock().unwrap().insert(key.clone(), Times::default());
            let api: Api<NonAdminBackup> = Api::namespaced(user.clone(), ns);
            let times = times.clone();
            creates.push(async move {
                let sent = Instant::now();
                times.lock().unwrap().get_mut(&key).unwrap().sent = Some(sent);
                api.create(&PostParams::default(), &nab(&format!("b{j}"), json!({})))
                    .await
                    .unwrap();
            });
        }
    }
    futures::future::join_all(creates).await;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done = times.lock().unwrap().values().all(|t| t.completed.is_some());
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "backups did not complete in 10 minutes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watch.abort();
    let out = times.lock().unwrap().values().copied().collect();
    out
}

fn report(what: &str, t: &[Times]) {
    let start = t.iter().filter_map(|t| t.sent).min().unwrap();
    let end = t.iter().filter_map(|t| t.completed).max().unwrap();
    let mut nac: Vec<f64> = t.iter().map(|t| ms(t.created.unwrap() - t.sent.unwrap())).collect();
    let mut velero: Vec<f64> = t
        .iter()
        .map(|t| ms(t.completed.unwrap() - t.created.unwrap()))
        .collect();
    let mut total: Vec<f64> = t.iter().map(|t| ms(t.completed.unwrap() - t.sent.unwrap())).collect();
    let nac_sum: f64 = nac.iter().sum();
    let total_sum: f64 = total.iter().sum();
    println!(
        "{what}: {} NABs, all completed after {:.0} ms | create->Created (nac) p50 {:.0} ms p99 {:.0} ms max {:.0} ms | \
         Created->Completed (Velero) p50 {:.0} ms p99 {:.0} ms max {:.0} ms | create->Completed p50 {:.0} ms p99 {:.0} ms \
         max {:.0} ms | nac's share of the waiting {:.1} %",
        t.len(),
        ms(end - start),
        pct(&mut nac, 0.5),
        pct(&mut nac, 0.99),
        pct(&mut nac, 1.0),
        pct(&mut velero, 0.5),
        pct(&mut velero, 0.99),
        pct(&mut velero, 1.0),
        pct(&mut total, 0.5),
        pct(&mut total, 0.99),
        pct(&mut total, 1.0),
        100.0 * nac_sum / total_sum,
    );
}

#[tokio::test]
async fn backup_latency_with_real_velero() {
    use_velero(VeleroMode::Real);
    let env = Env::start(POLICY, NacOptions::default()).await;
    // Warm-up: Velero's first backup starts its plugin processes.
    run("vb-warm", 1, 1).await;
    for round in 0..3 {
        let one = run(&format!("vb-one{round}-"), 1, 1).await;
        report(&format!("round {round}, one backup"), &one);
    }
    let many = run("vb-many", 10, 5).await;
    report("50 backups in 10 namespaces at once", &many);
    if let Some(kib) = env.nac.peak_rss_kib() {
        println!("nac peak RSS {:.1} MiB", kib as f64 / 1024.0);
    }
}
