//! Reconciler scale run (a measurement; the counts that are promises are asserted): 10,000 NonAdminBackups over
//! 1,000 namespaces against the local control plane (fake Velero: the run completes the backups itself, oldest
//! first, as Velero works through its queue). Prints time to all Velero Backups, create→Created latency
//! percentiles, API writes per NAB, the API server's requests and nac's webhook calls per NAB, the status writes
//! of queue advances and of draining the whole queue, and nac's peak memory, for BENCHMARKS.md. Asserts the happy
//! path (one Velero Backup and no Event per NAB, one mutating webhook call per create, none of the guard for nac's
//! own Backups), the bound on writes per queue advance, and that a restart of nac over the settled NABs writes no
//! status.
//!
//! `make scale` (or: cargo test --release --features e2e --test scale_run -- --nocapture); smaller runs with
//! SCALE_NAMESPACES / SCALE_PER_NAMESPACE (`make test` runs 200 over 20 namespaces in debug, for the asserted
//! budget: per NAB one Velero Backup, one status write to Created, queue patches within a bound, no read, no
//! review, one webhook call, no Event). Memory side by side: SCALE_RESTART_BINARIES=a,b restarts nac
//! alternately with those builds over the settled NABs (SCALE_RESTART_ROUNDS rounds), and SCALE_RESTART_ONLY
//! skips the creates to do that over the NABs an earlier run left. SCALE_CONTROLLERS_OFF=1 runs nac with its
//! controllers off and only times the creates (webhooks on): what the creates cost without the reconcilers, the
//! reference for the time to all Created; with SCALE_FLOOR=1 as well, this client then makes each NAB's two
//! happy-path writes itself (the floor nac's share is compared with). Each run also prints where a create's time
//! went: the API server's handling, its webhook call, nac's handling of that call.
#![cfg(feature = "e2e")]

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

/// nac's API writes of one kind so far (`nac_api_writes_total{kind="..."}`).
fn writes_of(metrics: &str, kind: &str) -> f64 {
    counter(metrics, "nac_api_writes_total", &format!("kind=\"{kind}\""))
}

/// The sum of a counter's series whose labels contain `label` (0 when there is none).
fn counter(metrics: &str, name: &str, label: &str) -> f64 {
    let sum: f64 = metrics
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // An empty float sum is -0.
    sum + 0.0
}

const STATUS: &str = "NonAdminBackup/status";
/// Queue-position patches per NonAdminBackup while a burst is created: nac writes each one Created with its
/// estimated place and patches it when the estimate it reported changes, which a burst's concurrent creates can
/// reorder within a second. Measured 0.19–0.42 from 200 to 10,000 on a quiet machine, 0.69 for 200 with two suites
/// running beside it; a patch per NonAdminBackup per change of the queue would be many times this.
const QUEUE_PATCHES_PER_NAB: f64 = 1.0;
/// nac's policy in every run.
const POLICY: &str = "backup:\n  maxTtl: 2160h\n";

/// Whether a Velero Backup was made for a NonAdminBackup of this run's namespaces (`<run>-<i>`).
fn of_run(b: &Backup, run: &str) -> bool {
    b.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("openshift.io/oadp-nab-origin-namespace"))
        .is_some_and(|ns| ns.starts_with(&format!("{run}-")))
}

/// Reconciles of NonAdminBackups triggered and not finished (`nac_queue_depth`).
fn backlog(metrics: &str) -> f64 {
    counter(metrics, "nac_queue_depth", "controller=\"nonadminbackup\"")
}

/// nac's metrics once it is idle: no NonAdminBackup reconcile waiting or running and no write of any kind for three
/// seconds (failing after five minutes).
async fn idle(nac: &NacProcess) -> String {
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut last, mut since) = (nac.metrics_text().await, Instant::now());
    loop {
        assert!(Instant::now() < deadline, "nac never went idle within 5 min");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = nac.metrics_text().await;
        if api_writes(&now) != api_writes(&last) || backlog(&now) > 0.0 {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_secs(3) {
            return now;
        }
    }
}

/// Waits until nac has no NonAdminBackup reconcile waiting or running and its status writes have not changed
/// for `quiet` (failing after 30 minutes); returns their count. (Quiet writes alone are not the end: a nac starved of CPU can stall for
/// longer than `quiet` with thousands of reconciles still queued.)
async fn settled_status_writes(nac: &NacProcess, quiet: Duration) -> f64 {
    let mut last = writes_of(&nac.metrics_text().await, STATUS);
    let mut since = Instant::now();
    // A run far past any measured settle time is a stuck nac, not a slow one.
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        assert!(
            Instant::now() < deadline,
            "nac's NonAdminBackup reconciles never settled within 30 min (status writes {last})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        let metrics = nac.metrics_text().await;
        let now = writes_of(&metrics, STATUS);
        if now != last || backlog(&metrics) > 0.0 {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            return now;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_run() {
    let namespaces = env_usize("SCALE_NAMESPACES", 1000);
    let per_ns = env_usize("SCALE_PER_NAMESPACE", 10);
    let concurrency = env_usize("SCALE_CONCURRENCY", 16);
    let controllers = std::env::var_os("SCALE_CONTROLLERS_OFF").is_none();
    let env = Env::start(
        POLICY,
        NacOptions {
            controllers,
            ..Default::default()
        },
    )
    .await;
    if !controllers {
        create_only(&env, namespaces, per_ns, concurrency).await;
        return;
    }
    // SCALE_RESTART_ONLY: no new NABs; the restarts below go over the settled NABs of an earlier run.
    let total = if std::env::var_os("SCALE_RESTART_ONLY").is_some() {
        let all: Api<NonAdminBackup> = Api::all(env.admin.clone());
        all.list_metadata(&ListParams::default()).await.unwrap().items.len()
    } else {
        create_and_drain(&env, namespaces, per_ns, concurrency).await;
        namespaces * per_ns
    };

    // A restart over settled NABs writes no status: the new process reads, compares and finds nothing to change.
    let (on_restart, peak, _) = restart_over_settled(&env, total, None).await;
    println!(
        "| status writes after restarting nac over {total} settled NABs | {on_restart} |\n| nac peak RSS after the restart | {:.1} MiB |",
        peak as f64 / 1024.0
    );

    // SCALE_RESTART_BINARIES=a,b (SCALE_RESTART_ROUNDS, 2): restarts alternating between nac builds over the same
    // settled NABs, for side-by-side memory figures (each a fresh process: peak and settled RSS).
    let binaries = std::env::var("SCALE_RESTART_BINARIES").unwrap_or_default();
    let binaries: Vec<&str> = binaries.split(',').filter(|b| !b.is_empty()).collect();
    if !binaries.is_empty() {
        println!("\n| round | nac binary | peak RSS MiB | RSS settled MiB | status writes |\n|---|---|---|---|---|");
    }
    for round in 0..env_usize("SCALE_RESTART_ROUNDS", 2) {
        for b in &binaries {
            let (writes, peak, now) = restart_over_settled(&env, total, Some(b)).await;
            let mib = |k: u64| k as f64 / 1024.0;
            println!("| {round} | {b} | {:.1} | {:.1} | {writes} |", mib(peak), mib(now));
        }
    }
}

/// Restarts nac (with `binary`, or this build's) over `total` settled NABs: once every NAB is reconciled and the
/// status writes have been quiet for 5 s, returns the status writes (asserted 0), peak and current RSS (KiB).
async fn restart_over_settled(env: &Env, total: usize, binary: Option<&str>) -> (f64, u64, u64) {
    env.nac.restart_with(binary).await;
    eventually(
        Duration::from_secs(300),
        "every NAB reconciled after the restart",
        || async {
            let m = env.nac.metrics_text().await;
            let done = counter(&m, "nac_reconciles_total", "controller=\"nonadminbackup\"");
            (done >= total as f64).then_some(())
        },
    )
    .await;
    let on_restart = settled_status_writes(&env.nac, Duration::from_secs(5)).await;
    let m = env.nac.metrics_text().await;
    assert_eq!(on_restart, 0.0, "a restart rewrote statuses");
    assert_eq!(writes_of(&m, "Backup"), 0.0, "a restart created Velero Backups");
    let peak = env.nac.peak_rss_kib().unwrap_or(0);
    (on_restart, peak, env.nac.rss_kib().unwrap_or(0))
}

/// CPU ms used so far by the API server, etcd, nac and this test (the tenants' client): where a burst's time goes.
fn cpu_now(env: &Env) -> [f64; 4] {
    let pid = |k: &str| env.cluster.get(k).parse::<u32>().unwrap();
    let of = |p: u32| process_cpu_ms(p).unwrap_or(0.0);
    [
        of(pid("APISERVER_PID")),
        of(pid("ETCD_PID")),
        of(env.nac.nac_pid().expect("nac runs")),
        of(std::process::id()),
    ]
}

/// Prints the CPU each process used between `before` and `after` (`wall` apart), and how busy that kept the
/// machine's cores.
fn print_cpu(before: [f64; 4], after: [f64; 4], wall: Duration, total: usize) {
    let used: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let busy = used.iter().sum::<f64>() / 1000.0 / (wall.as_secs_f64() * cores);
    println!(
        "| CPU ms per NAB: API server / etcd / nac / client | {:.2} / {:.2} / {:.2} / {:.2} |",
        used[0] / total as f64,
        used[1] / total as f64,
        used[2] / total as f64,
        used[3] / total as f64
    );
    println!(
        "| cores kept busy by these four ({cores} cores) | {:.0}% |",
        busy * 100.0
    );
}

/// The API server's requests so far by verb and resource (`apiserver_request_total`), watches left out.
async fn requests_by_kind(admin: &kube::Client) -> std::collections::BTreeMap<String, f64> {
    let req = axum::http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(req).await.unwrap();
    let label = |l: &str, k: &str| -> String {
        let key = format!("{k}=\"");
        l.split_once(&key)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(v, _)| v.to_string())
            .unwrap_or_default()
    };
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let verb = label(l, "verb");
        if verb == "WATCH" {
            continue;
        }
        let sub = label(l, "subresource");
        // A conflict is a write that did not land: counted apart.
        let what = format!(
            "{verb} {}{}{}",
            label(l, "resource"),
            if sub.is_empty() {
                String::new()
            } else {
                format!("/{sub}")
            },
            if label(l, "code") == "409" { " (409)" } else { "" }
        );
        let n: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *out.entry(what).or_insert(0.0) += n;
    }
    out
}

/// Prints the requests per NAB between two [`requests_by_kind`] samples (those at 0.05 per NAB or more).
fn print_requests(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    total: usize,
) {
    let mut rows: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), (v - before.get(k).copied().unwrap_or(0.0)) / total as f64))
        .filter(|(_, v)| *v >= 0.05)
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shown: Vec<String> = rows.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
    println!(
        "| API server requests per NAB (by verb and resource) | {} |",
        shown.join(", ")
    );
}

/// nac's webhook calls so far by endpoint (`nac_webhook_requests_total`, every verdict).
fn webhook_calls(metrics: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for l in metrics.lines().filter(|l| l.starts_with("nac_webhook_requests_total{")) {
        let endpoint = l
            .split_once("endpoint=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(e, _)| e.to_string())
            .unwrap_or_default();
        let n: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *out.entry(endpoint).or_insert(0.0) += n;
    }
    out
}

/// Prints nac's webhook calls per NAB by endpoint between two [`webhook_calls`] samples; returns the calls of
/// `endpoint` in between.
fn print_webhook_calls(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    total: usize,
    endpoint: &str,
) -> f64 {
    let delta = |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
    let shown: Vec<String> = after
        .keys()
        .filter(|k| delta(k) > 0.0)
        .map(|k| format!("{k} {:.2}", delta(k) / total as f64))
        .collect();
    let all: f64 = after.keys().map(|k| delta(k)).sum();
    println!(
        "| nac webhook calls per NAB (by endpoint) | {:.2}: {} |",
        all / total as f64,
        if shown.is_empty() {
            "none".to_string()
        } else {
            shown.join(", ")
        }
    );
    delta(endpoint)
}

/// nac's metrics and the API server's, sampled together: where a create's time goes ([`print_create_times`]).
async fn create_times(env: &Env) -> (String, String) {
    let req = axum::http::Request::get("/metrics").body(Vec::new()).unwrap();
    (env.nac.metrics_text().await, env.admin.request_text(req).await.unwrap())
}

/// The mean of a histogram's observations between two samples, over its series whose labels hold every one of
/// `labels`: (observations, mean seconds).
fn mean_between(before: &str, after: &str, name: &str, labels: &[&str]) -> (f64, f64) {
    let total = |text: &str, part: &str| -> f64 {
        let prefix = format!("{name}_{part}{{");
        let sum: f64 = text
            .lines()
            .filter(|l| l.starts_with(&prefix) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        sum + 0.0
    };
    let n = total(after, "count") - total(before, "count");
    let s = total(after, "sum") - total(before, "sum");
    (n, if n > 0.0 { s / n } else { 0.0 })
}

/// Where a tenant's create spent its time on average: the API server's whole handling of `POST nonadminbackups`,
/// its call of nac's mutating webhook, and nac's handling of that call (the rest of the first is the API server's
/// own work and waits).
fn print_create_times(before: &(String, String), after: &(String, String)) {
    let (n, api) = mean_between(
        &before.1,
        &after.1,
        "apiserver_request_duration_seconds",
        &["verb=\"POST\"", "resource=\"nonadminbackups\""],
    );
    let (_, call) = mean_between(
        &before.1,
        &after.1,
        "apiserver_admission_webhook_admission_duration_seconds",
        &["operation=\"CREATE\"", "name=\"mnab.nac.oadp.openshift.io\""],
    );
    let (_, nac) = mean_between(
        &before.0,
        &after.0,
        "nac_webhook_request_duration_seconds",
        &["endpoint=\"/mutate/nonadminbackups\""],
    );
    println!(
        "| mean ms per create ({n}): API server / its webhook call / nac's handling | {:.1} / {:.1} / {:.1} |",
        api * 1e3,
        call * 1e3,
        nac * 1e3
    );
}

/// SubjectAccessReviews the API server has answered so far (nac's questions about requesters' rights).
async fn reviews_answered(admin: &kube::Client) -> f64 {
    let req = axum::http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(req).await.unwrap();
    counter(&text, "apiserver_request_total{", "resource=\"subjectaccessreviews\"")
}

/// `namespaces` fresh tenants of run `run`, each its own user in its own namespace.
async fn tenants(env: &Env, run: &str, namespaces: usize) -> Vec<(String, kube::Client)> {
    let mut tenants = Vec::new();
    for i in 0..namespaces {
        let ns = format!("{run}-{i}");
        ensure_namespace(&env.admin, &ns).await;
        let user = format!("user-{ns}");
        grant_editor(&env.admin, &ns, &user).await;
        tenants.push((ns, env.cluster.as_user(&user).await));
    }
    tenants
}

/// `per_ns` creates in each tenant's namespace, `concurrency` at a time: when each was accepted.
async fn create_all(
    tenants: &[(String, kube::Client)],
    per_ns: usize,
    concurrency: usize,
) -> Vec<((String, String), Instant)> {
    let jobs: Vec<_> = tenants
        .iter()
        .flat_map(|(ns, c)| (0..per_ns).map(move |j| (ns.clone(), c.clone(), format!("b{j}"))))
        .collect();
    futures::stream::iter(jobs)
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
        .await
}

/// When each NAB (namespace, name) was seen Created.
type SeenCreated = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// A watch of every NAB, as a client waiting for its backups would keep: when did each become Created? Both runs
/// keep it (with the controllers off nothing becomes Created), so the API server sends the same watch events to
/// the same watchers in both.
fn watch_created(env: &Env) -> (tokio::task::JoinHandle<()>, SeenCreated) {
    let seen: SeenCreated = Arc::default();
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
    (watch, seen)
}

/// The creates alone, nac's controllers off (SCALE_CONTROLLERS_OFF).
async fn create_only(env: &Env, namespaces: usize, per_ns: usize, concurrency: usize) {
    let run = unique_ns("scale-off");
    let tenants = tenants(env, &run, namespaces).await;
    let (watch, _) = watch_created(env);
    let reviews = reviews_answered(&env.admin).await;
    let times = create_times(env).await;
    let hooks = webhook_calls(&times.0);
    let (cpu, requests) = (cpu_now(env), requests_by_kind(&env.admin).await);
    let start = Instant::now();
    create_all(&tenants, per_ns, concurrency).await;
    let took = start.elapsed();
    let requests_after = requests_by_kind(&env.admin).await;
    let times_after = create_times(env).await;
    watch.abort();
    let hooks_after = webhook_calls(&times_after.0);
    let reviews = reviews_answered(&env.admin).await - reviews;
    let total = namespaces * per_ns;
    println!("\n| measure (controllers off) | value |\n|---|---|");
    println!("| NABs / namespaces | {total} / {namespaces} |");
    println!("| all creates accepted (webhooks only) | {:.1} s |", took.as_secs_f64());
    println!("| SubjectAccessReviews per NAB | {:.3} |", reviews / total as f64);
    print_cpu(cpu, cpu_now(env), took, total);
    print_requests(&requests, &requests_after, total);
    print_webhook_calls(&hooks, &hooks_after, total, "/mutate/nonadminbackups");
    print_create_times(&times, &times_after);
    if std::env::var_os("SCALE_FLOOR").is_some() {
        the_two_writes_alone(env, &run, total, concurrency).await;
    }
}

/// SCALE_FLOOR: after the creates with nac's controllers off, the two writes of each NonAdminBackup's happy path,
/// made by this client instead of nac, `concurrency` at a time: its Velero Backup as nac builds it, then its status
/// as nac writes it at Created, with a watch of each kind open as a controller keeps them. What these cost the
/// API server is the least that any controller making them costs it; nac's share is compared with it.
async fn the_two_writes_alone(env: &Env, run: &str, total: usize, concurrency: usize) {
    use nac::controller::kinds::backup::{mirrored, velero_backup_for, BackupView};
    use nac::controller::status::{created, Placed};
    let policy = nac::policy::Policy::parse(POLICY).unwrap();
    let all: Api<NonAdminBackup> = Api::all(env.admin.clone());
    let nabs: Vec<NonAdminBackup> = all
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|n| n.metadata.namespace.as_deref().is_some_and(|ns| ns.starts_with(run)))
        .collect();
    assert_eq!(nabs.len(), total);
    let backups: Api<Backup> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let backup_watch = tokio::spawn(async move {
        let mut s = watcher::watcher(backups, watcher::Config::default()).boxed();
        while let Ok(Some(_)) = s.try_next().await {}
    });
    let (nab_watch, _) = watch_created(env);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu, requests) = (cpu_now(env), requests_by_kind(&env.admin).await);
    let start = Instant::now();
    futures::stream::iter(nabs)
        .map(|mut nab| {
            let (admin, policy) = (env.admin.clone(), &policy);
            async move {
                let ns = nab.metadata.namespace.clone().unwrap();
                let name = nab.metadata.name.clone().unwrap();
                let nacuuid = nac::naming::generate_nacuuid(&ns, &name);
                let vb = velero_backup_for(&nab, &nacuuid, VELERO_NAMESPACE, policy).unwrap();
                let made = Api::<Backup>::namespaced(admin.clone(), VELERO_NAMESPACE)
                    .create(&PostParams::default(), &vb)
                    .await
                    .unwrap();
                let view = BackupView {
                    placed: Placed {
                        nacuuid: nacuuid.clone(),
                        name: nacuuid.clone(),
                        namespace: VELERO_NAMESPACE.to_string(),
                        queue_position: 1,
                    },
                    mirrored: mirrored(&made, Some(&nacuuid)),
                    ..Default::default()
                };
                nab.status = Some(created::<NonAdminBackup>(
                    None,
                    &view,
                    nac::controller::conditions::now_seconds(),
                ));
                Api::<NonAdminBackup>::namespaced(admin, &ns)
                    .replace_status(&name, &PostParams::default(), &nab)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
    let took = start.elapsed();
    let requests_after = requests_by_kind(&env.admin).await;
    backup_watch.abort();
    nab_watch.abort();
    println!("\n| the two writes alone, made by this client | value |\n|---|---|");
    println!("| all made | {:.1} s |", took.as_secs_f64());
    print_cpu(cpu, cpu_now(env), took, total);
    print_requests(&requests, &requests_after, total);
}

/// Creates `namespaces` × `per_ns` NABs as their tenants, measures create→Created and the writes, then drains the
/// queue as Velero does (asserting the bounds on writes per advance and per drain).
async fn create_and_drain(env: &Env, namespaces: usize, per_ns: usize, concurrency: usize) {
    let total = namespaces * per_ns;
    let run = unique_ns("scale");

    let tenants = tenants(env, &run, namespaces).await;
    // What nac does first with objects an earlier run left is not this run's: the counts below are from here.
    let base = idle(&env.nac).await;
    let writes_before = api_writes(&base);
    let reviews_before = reviews_answered(&env.admin).await;

    let (watch, seen) = watch_created(env);

    let times = create_times(env).await;
    let hooks = webhook_calls(&times.0);
    let (cpu, requests) = (cpu_now(env), requests_by_kind(&env.admin).await);
    let start = Instant::now();
    let created_at = create_all(&tenants, per_ns, concurrency).await;
    let creates_done = start.elapsed();

    let velero: Api<Backup> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let all_backups = eventually(Duration::from_secs(600), "all Velero Backups", || async {
        let n = velero
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .filter(|b| of_run(b, &run))
            .count();
        (n >= total).then(|| start.elapsed())
    })
    .await;
    let all_created = eventually(Duration::from_secs(120), "all NABs seen Created", || async {
        let seen = seen.lock().unwrap();
        (seen.len() >= total).then(|| seen.values().max().map(|t| t.duration_since(start)))
    })
    .await
    .unwrap_or_default();
    // Measured up to here: the creates and the reconciles that make them Created.
    let cpu_until_created = (cpu_now(env), start.elapsed());
    let requests_until_created = requests_by_kind(&env.admin).await;
    let times_until_created = create_times(env).await;
    let hooks_until_created = webhook_calls(&times_until_created.0);
    // Webhook and reconciler together (one cache of answers serves both).
    let reviews = reviews_answered(&env.admin).await - reviews_before;
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
    println!("| all NABs Created | {:.1} s |", all_created.as_secs_f64());
    println!(
        "| SubjectAccessReviews per NAB (webhook and reconciler) | {:.3} |",
        reviews / total as f64
    );
    println!("| create→Created p50 | {} ms |", percentile(&lat, 0.5).as_millis());
    println!("| create→Created p99 | {} ms |", percentile(&lat, 0.99).as_millis());
    println!("| create→Created max | {} ms |", lat.last().unwrap().as_millis());
    println!("| nac API writes per NAB | {:.2} |", writes / total as f64);
    println!("| nac peak RSS (VmHWM) | {:.1} MiB |", rss as f64 / 1024.0);
    // What is resident now, by kind: the heap and stacks (anonymous), the binary's text and read-only data (file).
    let now = |f: &str| {
        let kib = env.nac.proc_status_kib(f);
        kib.map_or("unread".to_string(), |k| format!("{:.1}", k as f64 / 1024.0))
    };
    println!(
        "| nac resident after the creates: anonymous / file-backed | {} / {} MiB |",
        now("RssAnon:"),
        now("RssFile:")
    );
    print_cpu(cpu, cpu_until_created.0, cpu_until_created.1, total);
    print_requests(&requests, &requests_until_created, total);
    let guard = print_webhook_calls(&hooks, &hooks_until_created, total, "/validate/velero-backups");
    print_create_times(&times, &times_until_created);
    let mutate = hooks_until_created
        .get("/mutate/nonadminbackups")
        .copied()
        .unwrap_or(0.0)
        - hooks.get("/mutate/nonadminbackups").copied().unwrap_or(0.0);
    for l in metrics.lines().filter(|l| l.starts_with("nac_api_writes_total")) {
        println!("  {l}");
    }
    // The happy path: one Velero Backup and one status write straight to Created per NAB, no Event (the status
    // writes beyond one per NAB are queue refreshes, counted below). nac's own Backups skip its guard; each
    // tenant's create calls the mutating webhook once.
    let since = |kind: &str| writes_of(&metrics, kind) - writes_of(&base, kind);
    assert_eq!(since("Backup"), total as f64, "one Velero Backup per NAB");
    assert_eq!(since("Event"), 0.0, "no Event on the happy path");
    assert_eq!(guard, 0.0, "nac's own Velero Backups called its guard");
    assert_eq!(mutate, total as f64, "one mutating webhook call per create");
    // The budget, from the API server's own counts while creating: per NAB one Velero Backup created and one status
    // written straight to Created, queue patches within QUEUE_PATCHES_PER_NAB, no read, no SubjectAccessReview.
    let per_nab = |k: &str| {
        (requests_until_created.get(k).copied().unwrap_or(0.0) - requests.get(k).copied().unwrap_or(0.0)) / total as f64
    };
    let (made, put, patched) = (
        per_nab("POST backups"),
        per_nab("PUT nonadminbackups/status"),
        per_nab("PATCH nonadminbackups/status"),
    );
    println!(
        "| writes per NAB while creating: Velero Backup / status to Created / queue patches | {made:.2} / {put:.2} / \
         {patched:.2} |"
    );
    assert_eq!(made, 1.0, "Velero Backups created per NAB");
    assert_eq!(put, 1.0, "status writes to Created per NAB");
    assert!(
        patched <= QUEUE_PATCHES_PER_NAB,
        "{patched:.2} queue patches per NAB while creating (at most {QUEUE_PATCHES_PER_NAB})"
    );
    println!(
        "| nac's NonAdminBackup status writes until all Created, and a moment after | {} |",
        since(STATUS)
    );
    // Reads only where a watch fell behind (nac counts those; none while the watches keep up, a few on a loaded
    // machine): any other read per object is a regression.
    let stale = counter(&metrics, "nac_stale_reads_total", "kind=\"NonAdminBackup\"")
        - counter(&base, "nac_stale_reads_total", "kind=\"NonAdminBackup\"");
    println!("| reads because a watch was behind (nac_stale_reads_total, NonAdminBackup) | {stale} |");
    let reads: Vec<String> = requests_until_created
        .keys()
        // Discovery (`GET /api`, ...) and the leader's Lease are nac's process, not its objects.
        .filter(|k| k.starts_with("GET ") && !k.starts_with("GET /") && *k != "GET leases" && per_nab(k) > 0.0)
        .filter(|k| !(*k == "GET nonadminbackups" && per_nab(k) * total as f64 <= stale))
        .map(|k| format!("{k} {:.2}", per_nab(k)))
        .collect();
    assert!(reads.is_empty(), "reads while creating: {reads:?}");
    assert_eq!(reviews, 0.0, "SubjectAccessReviews while creating");

    // Drain the queue as Velero does, oldest first. First a sample of single advances, each let settle.
    let mut queue: Vec<Backup> = velero
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| of_run(b, &run))
        .collect();
    queue.sort_by_key(|b| {
        (
            b.metadata.creation_timestamp.clone().map(|t| t.0),
            b.metadata.name.clone(),
        )
    });
    let complete = |name: String| {
        let velero = velero.clone();
        async move {
            velero
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"status": {"phase": "Completed"}})),
                )
                .await
                .unwrap();
        }
    };
    let quiet = Duration::from_millis(2500);
    let mut before = settled_status_writes(&env.nac, quiet).await;
    let sample = 20.min(total);
    let mut per_advance = Vec::new();
    for b in &queue[..sample] {
        complete(b.metadata.name.clone().unwrap()).await;
        let after = settled_status_writes(&env.nac, quiet).await;
        per_advance.push(after - before);
        before = after;
    }
    // Then the rest, one after the other without waiting (nac coalesces what arrives within a second).
    let drain_start = Instant::now();
    for b in &queue[sample..] {
        complete(b.metadata.name.clone().unwrap()).await;
    }
    let drained = settled_status_writes(&env.nac, Duration::from_secs(5)).await - before;
    let drain_took = drain_start.elapsed();
    // An idle nac is not the end by itself (a watch the API server closed as unresponsive is resumed or
    // re-listed first): every NonAdminBackup of the run must show its Backup Completed.
    let nabs: Api<NonAdminBackup> = Api::all(env.admin.clone());
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let behind = nabs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|n| {
                n.metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| ns.starts_with(&format!("{run}-")))
            })
            .filter(|n| {
                let copy = n.status.as_ref().and_then(|s| s.velero_backup.as_ref());
                copy.and_then(|v| v.status.as_ref()?.phase.as_deref()) != Some("Completed")
            })
            .count();
        if behind == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{behind} NonAdminBackups do not show their completed Velero Backup 180 s after nac went idle"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let worst = per_advance.iter().cloned().fold(0.0, f64::max);
    let exact = (total * (total - 1) / 2 + total) as f64;
    let all_drain = per_advance.iter().sum::<f64>() + drained;
    println!(
        "| status writes per queue advance (first {sample}, each settled) | {:.1} mean, {worst} max |",
        per_advance.iter().sum::<f64>() / sample as f64
    );
    println!(
        "| status writes to drain the queue of {total} | {all_drain} ({:.2}% of {exact} with exact positions); drain took {:.0} s |",
        all_drain / exact * 100.0,
        drain_took.as_secs_f64()
    );
    println!(
        "| nac peak RSS (VmHWM) after the drain | {:.1} MiB |",
        env.nac.peak_rss_kib().unwrap_or(0) as f64 / 1024.0
    );
    // The promise: an advance in a queue of n writes the completed NAB (position 0 and phase) and only the
    // NABs whose reported position changed (exact up to 10, then one per grid point crossed), never all n.
    let mut bound = 0.0;
    for (i, n) in (1..=total).rev().enumerate() {
        let advance = advance_bound(n);
        if let Some(&measured) = per_advance.get(i) {
            assert!(
                measured <= advance,
                "advance {i} in a queue of {n} cost {measured} status writes, at most {advance} promised"
            );
        }
        bound += advance;
    }
    println!("| status writes to drain, at most (positions rounded to the grid) | {bound} |");
    assert!(
        all_drain <= bound,
        "draining cost {all_drain} status writes, at most {bound} promised"
    );
}

/// Status writes one queue advance may cost in a queue of `n`: the finished NAB, and each NAB behind it whose
/// reported position changes when its true position drops by one.
fn advance_bound(n: usize) -> f64 {
    use nac::controller::index::queue::reported;
    let moved = (2..=n as i64).filter(|&p| reported(p) != reported(p - 1)).count();
    (1 + moved) as f64
}
