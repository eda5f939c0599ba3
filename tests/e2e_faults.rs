//! End to end with the real parts, a part dies in the middle of work: Velero killed (kill -9) while a backup or a
//! restore is InProgress, the S3 server stalled (SIGSTOP) and then gone (kill -9, its port refusing) while Velero
//! uploads and while its backup sync reads the storage locations and a schedule's due run fires, the API server
//! restarted (nac's `/readyz` saying so meanwhile) and etcd paused while the webhooks take traffic and nac writes
//! statuses, nac's leader killed between the two steps of a delete (DeleteBackupRequest made, NonAdminBackup not
//! yet gone) and of a location approval (Secret copied, BackupStorageLocation not made), and Velero's backup
//! queue stalled for good (velero#10519).
//!
//! Each test runs a workload of tenant objects, injects its fault at a chosen point, checks what the user sees
//! meanwhile, brings the part back, and ends with the one final check ([`final_check`]): every object in a final
//! state that tells the truth, no duplicate or orphaned Velero object, nothing stuck behind a finalizer, no data
//! gone that nobody asked to delete; nac never panicked. Each prints one `fault:` line (the workload, the time to
//! recover, the counts) for BENCHMARKS.md. One test at a time: they stop and start the one Velero server.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use common::faults::*;
use common::velero::*;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nac::api::{
    NonAdminBackup, NonAdminBackupStorageLocation, NonAdminDownloadRequest, NonAdminRestore, NonAdminSchedule,
};
use nac::naming::NAB_ORIGIN_NACUUID_LABEL;
use nac::velero::DeleteBackupRequest;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OnceCell};

static NAC: OnceCell<Env> = OnceCell::const_new();
static SERIAL: Mutex<()> = Mutex::const_new(());

/// The real-Velero tests' policy without backup sync: a Velero Backup deleted on purpose must not come back
/// from the bucket as a new NonAdminBackup while the final check counts. Restores without the rights check: it
/// reads the backup from the S3 server before the Velero Restore is made, and the restore fault stalls that
/// server to catch Velero's read.
const POLICY: &str = "
enforceBackupSpec:
  ttl: 72h0m0s
  snapshotVolumes: false
  storageLocation: default
backup:
  maxTtl: 2160h
nonAdminBSL:
  enabled: true
  requireApproval: true
  allowedEndpoints: {hosts: [127.0.0.1]}
rights:
  restore: 'off'
";

/// One fault at a time (they stop and start the one Velero), each from a whole environment.
async fn start() -> (tokio::sync::MutexGuard<'static, ()>, &'static Env) {
    let serial = SERIAL.lock().await;
    (serial, env().await)
}

async fn env() -> &'static Env {
    let env = NAC
        .get_or_init(|| async {
            use_velero(VeleroMode::Real);
            // A standstill of Velero's queue is reported after 15 s here (180 s by default).
            let opts = NacOptions {
                extra_env: vec![("NAC_CONTROLLERS__QUEUE_STALL_SECS".into(), QUEUE_STALL_SECS.to_string())],
                ..NacOptions::default()
            };
            Env::start(POLICY, opts).await
        })
        .await;
    // Every fault starts from a whole environment, also after a test that failed with a part down.
    for part in [Part::S3, Part::Etcd] {
        if part.pid().is_some() {
            part.signal("CONT");
        }
    }
    if Part::Velero.pid().is_none() || Part::S3.pid().is_none() {
        velero_up(&Cluster::load(), &[]);
    }
    // And Velero's default location Available: after the object store was gone, Velero validates it again only
    // on its next period, and until then it fails every backup's validation. A restart validates it at once.
    let stale = VELERO_STALE.swap(false, std::sync::atomic::Ordering::Relaxed);
    let bsls: Api<nac::velero::BackupStorageLocation> =
        Api::namespaced(Cluster::load().admin().await, VELERO_NAMESPACE);
    let default = bsls.get_opt("default").await.ok().flatten();
    if stale || default.and_then(|b| b.status?.phase).as_deref() != Some("Available") {
        velero_up(&Cluster::load(), &["--restart"]);
    }
    env
}

const QUEUE_STALL_SECS: u64 = 15;

/// Set while a fault leaves Velero's watches backing off (the API server or etcd gone): the next test restarts
/// Velero if the one that set it could not.
static VELERO_STALE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn velero_name(n: &Value) -> String {
    n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string()
}

/// The phases of the Velero Backups made for namespace `ns`'s NonAdminBackups, as Velero wrote them, counted.
async fn velero_phases_of(admin: &kube::Client, ns: &str) -> std::collections::BTreeMap<String, usize> {
    let backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let mut phases = std::collections::BTreeMap::new();
    for b in backups.list(&ListParams::default()).await.unwrap().items {
        let origin = b
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("openshift.io/oadp-nab-origin-namespace"));
        if origin.map(String::as_str) == Some(ns) {
            let phase = b.status.and_then(|s| s.phase).unwrap_or_default();
            *phases.entry(phase).or_default() += 1;
        }
    }
    phases
}

/// A fresh tenant with the small application: (namespace, user, admin, the user's NonAdminBackups).
async fn tenant(prefix: &str) -> (String, kube::Client, kube::Client, Api<NonAdminBackup>) {
    let (ns, user, admin) = new_tenant(prefix).await;
    workload(&admin, &ns).await;
    let nabs = Api::namespaced(user.clone(), &ns);
    (ns, user, admin, nabs)
}

/// Creates NonAdminBackup `name` with `spec` and waits for it to complete; returns its Velero Backup's name.
async fn backup(nabs: &Api<NonAdminBackup>, name: &str, spec: Value) -> String {
    nabs.create(&PostParams::default(), &nab(name, spec)).await.unwrap();
    velero_name(&completed(nabs, name).await)
}

/// The end of every fault: nac never panicked, and the fault's line for BENCHMARKS.md.
fn report(env: &Env, fault: &str, workload: &str, recovered: Duration, tally: &Tally) {
    assert_no_panic(&env.nac);
    println!(
        "fault: {fault} | {workload} | recovered in {:.1}s | {tally}",
        recovered.as_secs_f64()
    );
}

/// Velero killed while a backup is InProgress (held there by a stalled S3 server, so the kill lands mid-run):
/// while Velero is down the backup shows InProgress and the next one waits in the queue; once Velero is back it
/// marks the backup Failed, the NonAdminBackup says Velero stopped mid-run and how to retry, the queued backup
/// completes, and a retry completes.
#[tokio::test]
async fn velero_killed_mid_backup() {
    let (_serial, env) = start().await;
    let (ns, _, admin, nabs) = tenant("fault-vk").await;
    let before = backup(&nabs, "before", json!({})).await;

    velero_idle(&admin).await;
    Part::S3.signal("STOP");
    nabs.create(&PostParams::default(), &nab("inflight", json!({})))
        .await
        .unwrap();
    velero_phase(&nabs, "inflight", &["InProgress"]).await;
    // Made only once the first runs: two backups made together may start in either order (nac reconciles them
    // concurrently, and Velero runs them in the order their Backups appear).
    nabs.create(&PostParams::default(), &nab("queued", json!({})))
        .await
        .unwrap();
    velero_phase(&nabs, "queued", &["New", "Queued"]).await;
    Part::Velero.signal("KILL");
    Part::S3.signal("CONT");
    // Down: the user sees the run as it was, and the next backup waiting behind it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = serde_json::to_value(nabs.get("inflight").await.unwrap()).unwrap();
    assert_eq!(n["status"]["veleroBackup"]["status"]["phase"], "InProgress", "{n}");
    let q = serde_json::to_value(nabs.get("queued").await.unwrap()).unwrap();
    // Behind the interrupted run (1 or 2: estimated from Velero's phases, which stopped changing with Velero).
    let position = q["status"]["queueInfo"]["estimatedQueuePosition"].as_i64();
    assert!(matches!(position, Some(1 | 2)), "{q}");
    let queued_phase = q["status"]["veleroBackup"]["status"]["phase"].as_str().unwrap_or("New");
    assert!(matches!(queued_phase, "New" | "Queued"), "{q}");

    let t0 = Instant::now();
    velero_up(&Cluster::load(), &[]);
    let n = velero_phase(&nabs, "inflight", &["Failed"]).await;
    let recovered = t0.elapsed();
    failed_by_velero_stopping(&admin, &ns, "inflight", "Backup", &n).await;
    let queued = velero_name(&completed(&nabs, "queued").await);
    // The retry the Event advises.
    let retry = backup(&nabs, "retry", json!({})).await;

    let tally = final_check(&admin, &[&ns], &[before, queued, retry], &[], T).await;
    tally.expect(&[("Completed", 3), ("Failed", 1)]);
    report(
        env,
        "Velero kill -9 mid-backup",
        "4 NABs (1 InProgress, 1 queued)",
        recovered,
        &tally,
    );
}

/// Velero killed while a restore is InProgress (held there by a stalled S3 server: Velero reads the backup's
/// contents from it): once Velero is back it marks the restore Failed, the NonAdminRestore says Velero stopped
/// mid-run and how to retry, and the retry completes. Nothing duplicated.
#[tokio::test]
async fn velero_killed_mid_restore() {
    let (_serial, env) = start().await;
    let (ns, user, admin, nabs) = tenant("fault-vr").await;
    let before = backup(&nabs, "before", json!({})).await;
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);
    let phase_is = |phases: &'static [&'static str]| {
        move |n: &Value| {
            n["status"]["veleroRestore"]["status"]["phase"]
                .as_str()
                .is_some_and(|p| phases.contains(&p))
        }
    };

    velero_idle(&admin).await;
    Part::S3.signal("STOP");
    nars.create(&PostParams::default(), &nar("inflight", "before"))
        .await
        .unwrap();
    wait_json(
        &nars,
        "inflight",
        T,
        "the restore InProgress",
        phase_is(&["InProgress"]),
    )
    .await;
    Part::Velero.signal("KILL");
    Part::S3.signal("CONT");

    let t0 = Instant::now();
    velero_up(&Cluster::load(), &[]);
    let n = wait_json(
        &nars,
        "inflight",
        T,
        "the restore ended",
        phase_is(&["Completed", "PartiallyFailed", "Failed"]),
    )
    .await;
    let recovered = t0.elapsed();
    failed_by_velero_stopping(&admin, &ns, "inflight", "Restore", &n).await;
    // The retry the Event advises.
    nars.create(&PostParams::default(), &nar("retry", "before"))
        .await
        .unwrap();
    wait_json(
        &nars,
        "retry",
        T,
        "the retry ended",
        phase_is(&["Completed", "PartiallyFailed", "Failed"]),
    )
    .await;

    let tally = final_check(&admin, &[&ns], &[before], &[], T).await;
    tally.expect(&[("Completed", 2), ("Failed", 1)]);
    report(
        env,
        "Velero kill -9 mid-restore",
        "1 NAB, 2 NARs (1 InProgress, 1 retry)",
        recovered,
        &tally,
    );
}

/// The policy generation nac has loaded (`nac_policy_generation`).
async fn policy_generation(env: &Env) -> u64 {
    let text = env.nac.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix("nac_policy_generation "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Writes `policy` and waits until nac has loaded it.
async fn load_policy(env: &Env, admin: &kube::Client, policy: &str) {
    let before = policy_generation(env).await;
    set_policy(admin, policy).await.unwrap();
    eventually(T, "nac loaded the edited policy", || async {
        (policy_generation(env).await > before).then_some(())
    })
    .await;
}

/// The S3 server stalls (SIGSTOP) while nac reads a backup's contents for a restore's rights check: the tenant
/// sees why nothing happens (phase New, `Queued=False` `AdmissionRetrying` naming the storage's silence, one
/// Warning Event) and no Velero Restore is made; once the server is back, nac's retry checks the contents and the
/// restore completes. The suite's policy has the check off: on for this test only.
#[tokio::test]
async fn s3_server_stalled_while_a_restore_is_checked() {
    let (_serial, env) = start().await;
    let (ns, user, admin, nabs) = tenant("fault-check").await;
    // Kubernetes' edit role: the user may create what the backup holds, so the restore has something to restore.
    bind(&admin, &ns, &format!("user-{ns}"), "edit").await;
    let before = backup(&nabs, "before", json!({})).await;
    load_policy(env, &admin, &POLICY.replace("restore: 'off'", "restore: exclude")).await;
    let nars: Api<NonAdminRestore> = Api::namespaced(user.clone(), &ns);

    velero_idle(&admin).await;
    Part::S3.signal("STOP");
    let stalled = Instant::now();
    nars.create(&PostParams::default(), &nar("checked", "before"))
        .await
        .unwrap();
    // nac's read gives up after 30 s of silence (or Velero, stalled on the same server, does not answer nac's
    // DownloadRequest within 60 s); either way the tenant is told.
    let n = wait_json(
        &nars,
        "checked",
        Duration::from_secs(150),
        "the restore saying why it waits",
        |n| condition(n, "Queued").is_some_and(|q| q["reason"] == "AdmissionRetrying"),
    )
    .await;
    let told = stalled.elapsed();
    let q = condition(&n, "Queued").unwrap();
    let message = q["message"].as_str().unwrap();
    assert_eq!(q["status"], "False", "{q}");
    assert!(
        message.starts_with("nac could not finish checking this NonAdminRestore and retries with backoff: ")
            && (message.contains("the storage did not answer within 30s")
                || message.contains("did not answer DownloadRequest")),
        "{message}"
    );
    assert_eq!(n["status"]["phase"], "New", "{n}");
    let restores: Api<nac::velero::Restore> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let made = velero_restores_of(&restores, &ns).await;
    assert!(made.is_empty(), "a Velero Restore made before the check: {made:?}");
    // Published in the background, a moment after the status.
    eventually(T, "the AdmissionRetrying Event", || async {
        (!events_of(&admin, &ns, "checked", "AdmissionRetrying").await.is_empty()).then_some(())
    })
    .await;

    Part::S3.signal("CONT");
    let t0 = Instant::now();
    // Velero may have marked its location Unavailable meanwhile: the restore then waits for it (its next
    // validation), as for any restore.
    let n = wait_json(
        &nars,
        "checked",
        Duration::from_secs(240),
        "the restore completed",
        |n| n["status"]["veleroRestore"]["status"]["phase"] == "Completed",
    )
    .await;
    let recovered = t0.elapsed();
    assert_eq!(condition(&n, "Queued").unwrap()["status"], "True", "{n}");
    // One Event for the whole wait, however many retries failed alike.
    assert_eq!(events_of(&admin, &ns, "checked", "AdmissionRetrying").await.len(), 1);
    load_policy(env, &admin, POLICY).await;

    let tally = final_check(&admin, &[&ns], &[before], &[], T).await;
    tally.expect(&[("Completed", 2)]);
    report(
        env,
        "S3 server stalled mid rights check",
        &format!("1 backup, 1 restore (told after {:.1}s)", told.as_secs_f64()),
        recovered,
        &tally,
    );
}

/// The S3 server stalls (SIGSTOP: a network stall) while Velero uploads, then dies (kill -9: its port refuses):
/// the backup in flight fails with Velero's reason and the retry advice; Velero marks its location Unavailable;
/// once the S3 server is back on its port the location is Available again and a retry completes. Data written
/// before the fault stays.
#[tokio::test]
async fn s3_server_gone_mid_upload() {
    let (_serial, env) = start().await;
    let (ns, _, admin, nabs) = tenant("fault-s3").await;
    let before = backup(&nabs, "before", json!({})).await;

    velero_idle(&admin).await;
    Part::S3.signal("STOP");
    nabs.create(&PostParams::default(), &nab("inflight", json!({})))
        .await
        .unwrap();
    velero_phase(&nabs, "inflight", &["InProgress"]).await;
    Part::S3.signal("KILL");
    let n = velero_phase(&nabs, "inflight", &["Failed", "Completed", "PartiallyFailed"]).await;
    assert_eq!(n["status"]["veleroBackup"]["status"]["phase"], "Failed", "{n}");
    let bsls: Api<nac::velero::BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    wait_json(&bsls, "default", T, "the location Unavailable", |b| {
        b["status"]["phase"] == "Unavailable"
    })
    .await;

    let t0 = Instant::now();
    velero_up(&Cluster::load(), &[]);
    wait_json(&bsls, "default", T, "the location Available again", |b| {
        b["status"]["phase"] == "Available"
    })
    .await;
    let recovered = t0.elapsed();
    eventually(T, "the BackupFailed Event", || async {
        let e = events_of(&admin, &ns, "inflight", "BackupFailed").await;
        e.iter()
            .any(|m| m.contains("To try again, create a new NonAdminBackup"))
            .then_some(())
    })
    .await;
    let retry = backup(&nabs, "retry", json!({})).await;

    let tally = final_check(&admin, &[&ns], &[before, retry], &[], T).await;
    tally.expect(&[("Completed", 2), ("Failed", 1)]);
    report(
        env,
        "S3 server SIGSTOP then kill -9 mid-upload",
        "3 NABs (1 uploading)",
        recovered,
        &tally,
    );
}

/// The API server restarted while users create NonAdminBackups (one a second) and nac writes the statuses of
/// those in flight. Kept down until nac's `/readyz` says it cannot reach it (after the grace), and once it is back
/// `/readyz` is ready again.
#[tokio::test]
async fn api_server_restart_under_webhook_traffic() {
    under_traffic("fault-api", "API server restart under webhook traffic", true, || {
        let metrics = NAC.get().expect("the environment is up").nac.metrics;
        let rt = tokio::runtime::Handle::current();
        let readyz = move || rt.block_on(http_get(metrics, "/readyz")).ok();
        restart_apiserver_when(
            || matches!(readyz(), Some((503, body)) if body.contains("the API server did not answer for")),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while readyz().map(|(code, _)| code) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "not ready a minute after the API server came back: {:?}",
                readyz()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // Velero's own recovery from it took from 2 to more than 7 minutes here (its watches refused while
        // the new API server's RBAC warms up, then new Backups only on its one-minute resync): an admin's
        // restart of Velero at once (before it runs a backup the restart would fail), so what is measured is
        // nac's.
        velero_up(&Cluster::load(), &["--restart"]);
    })
    .await;
}

/// etcd paused for 10 s (SIGSTOP: a storage stall; the API server stays up and times requests out) while users
/// create NonAdminBackups and nac writes statuses.
#[tokio::test]
async fn etcd_paused_under_webhook_traffic() {
    under_traffic("fault-etcd", "etcd paused 10 s under webhook traffic", false, || {
        Part::Etcd.signal("STOP");
        std::thread::sleep(Duration::from_secs(10));
        Part::Etcd.signal("CONT");
    })
    .await;
}

/// Creates a NonAdminBackup a second while `inject` runs (3 s after the first): every create either failed
/// with an error or was admitted with nac's identity (finalizer, nacuuid label once reconciled); the creates
/// refused (`refusals`: some must be) form one outage, and none is refused once it is over; every backup
/// completes, once, but for at most the one Velero was running when its API server went away, which fails with
/// Velero's reason.
async fn under_traffic(prefix: &str, fault: &str, refusals: bool, inject: impl FnOnce() + Send + 'static) {
    let (_serial, env) = start().await;
    let (ns, _, admin, nabs) = tenant(prefix).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (stop, nabs) = (stop.clone(), nabs.clone());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let name = format!("w{i:03}");
                let r = tokio::time::timeout(
                    Duration::from_secs(10),
                    nabs.create(&PostParams::default(), &nab(&name, json!({}))),
                )
                .await;
                outcomes.push((name, matches!(r, Ok(Ok(_))), Instant::now()));
                i += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            outcomes
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    VELERO_STALE.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::task::spawn_blocking(inject).await.unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let outcomes = traffic.await.unwrap();
    let refused: Vec<&String> = outcomes.iter().filter(|(_, ok, _)| !ok).map(|(n, ..)| n).collect();
    assert_eq!(!refused.is_empty(), refusals, "refusals during the fault: {outcomes:?}");
    // How long users could not create: from the first refusal to the next create that went through, or else
    // the longest wait for an answer (beyond the 1 s between creates).
    let down = if let (Some(first), Some(last)) = (
        outcomes.iter().position(|(_, ok, _)| !ok),
        outcomes.iter().rposition(|(_, ok, _)| !ok),
    ) {
        assert!(
            outcomes[first..=last].iter().all(|(_, ok, _)| !ok),
            "creates refused after the fault was over: {outcomes:?}"
        );
        assert!(
            last + 3 < outcomes.len(),
            "creates still refused at the end: {outcomes:?}"
        );
        outcomes[last + 1].2 - outcomes[first].2
    } else {
        outcomes
            .windows(2)
            .map(|w| w[1].2 - w[0].2)
            .max()
            .unwrap()
            .saturating_sub(Duration::from_secs(1))
    };
    // What the users' side saw stored: every create answered Created, and any other stored anyway.
    let mut stored = 0;
    for (name, ok, _) in &outcomes {
        let got = nabs.get_opt(name).await.unwrap();
        if !ok {
            // Refused or timed out: a create stored anyway (its answer lost) still has its identity.
            if let Some(n) = got {
                assert!(n.metadata.finalizers.is_some(), "{name} stored without nac's finalizer");
                stored += 1;
            }
            continue;
        }
        let n = got.unwrap_or_else(|| panic!("{name} was created and is gone"));
        assert!(
            n.metadata.finalizers.is_some(),
            "{name} admitted without nac's finalizer"
        );
        stored += 1;
    }
    let t1 = Instant::now();
    let (mut kept, mut failed) = (Vec::new(), 0);
    for n in nabs.list(&ListParams::default()).await.unwrap().items {
        let name = n.metadata.name.unwrap();
        // Longer than the usual wait: after an API server restart Velero takes new Backups only on its resync.
        let n = wait_json(
            &nabs,
            &name,
            Duration::from_secs(360),
            "finished after the fault",
            |n| {
                matches!(
                    n["status"]["veleroBackup"]["status"]["phase"].as_str(),
                    Some("Completed" | "Failed")
                )
            },
        )
        .await;
        // A backup Velero was running when the API server went away fails with Velero's reason (the final check
        // wants it and the retry advice); every other one completes.
        if n["status"]["veleroBackup"]["status"]["phase"] == "Completed" {
            kept.push(velero_name(&n));
        } else {
            failed += 1;
        }
        let labels = nabs.get(&name).await.unwrap().metadata.labels.unwrap_or_default();
        assert!(
            labels.contains_key(NAB_ORIGIN_NACUUID_LABEL),
            "{name} has no nacuuid label"
        );
    }
    let settled = t1.elapsed();
    let tally = final_check(&admin, &[&ns], &kept, &[], T).await;
    // The next tests (and test binaries) get a Velero with fresh watches, not one still backing off.
    velero_up(&Cluster::load(), &["--restart"]);
    VELERO_STALE.store(false, std::sync::atomic::Ordering::Relaxed);
    // The tally (read from the NonAdminBackups' statuses) against what the creates stored and what Velero's own
    // Backups say, read apart from the statuses that mirror them.
    let velero_phases = velero_phases_of(&admin, &ns).await;
    assert_eq!(tally.objects, stored, "one NonAdminBackup per create stored: {tally}");
    assert_eq!(
        velero_phases.values().sum::<usize>(),
        stored,
        "Velero Backups: {velero_phases:?}"
    );
    for phase in ["Completed", "Failed"] {
        assert_eq!(
            tally.states.get(phase).copied().unwrap_or(0),
            velero_phases.get(phase).copied().unwrap_or(0),
            "{phase}: {tally}; Velero's Backups: {velero_phases:?}"
        );
    }
    assert_eq!(tally.states.get("Completed"), Some(&kept.len()), "{tally}");
    assert_eq!(tally.states.get("Failed").copied().unwrap_or(0), failed, "{tally}");
    assert!(failed <= 1, "more than the one backup in flight failed: {tally}");
    assert_eq!(http_get(env.nac.metrics, "/readyz").await.unwrap().0, 200);
    report(
        env,
        fault,
        &format!(
            "{} creates (1/s), {} refused, creates failing or waiting {:.0} s, {} NABs",
            outcomes.len(),
            refused.len(),
            down.as_secs_f64(),
            kept.len() + failed
        ),
        down + settled,
        &tally,
    );
}

/// nac's leader killed (kill -9) between the two steps of deletes: a NonAdminBackup with `deleteBackup` whose
/// DeleteBackupRequest is made but not yet processed (Velero is stopped), and a plain delete made while no nac
/// runs. Once nac and Velero are back: the first's data is gone from the bucket (asked for), the second's stays
/// (not asked for), both NonAdminBackups are gone, one DeleteBackupRequest was ever made and none is left.
#[tokio::test]
async fn leader_killed_mid_delete() {
    let (_serial, env) = start().await;
    let (ns, _, admin, nabs) = tenant("fault-del").await;
    let wipe = backup(&nabs, "wipe", json!({})).await;
    let plain = backup(&nabs, "plain", json!({})).await;
    let keep = backup(&nabs, "keep", json!({})).await;

    velero_up(&Cluster::load(), &["--stop-velero"]);
    nabs.patch(
        "wipe",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deleteBackup": true}})),
    )
    .await
    .unwrap();
    let dbrs: Api<DeleteBackupRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let sel = format!("{NAB_ORIGIN_NACUUID_LABEL}={wipe}");
    eventually(T, "the DeleteBackupRequest made", || async {
        (dbrs
            .list(&ListParams::default().labels(&sel))
            .await
            .unwrap()
            .items
            .len()
            == 1)
            .then_some(())
    })
    .await;
    let n = wait_json(&nabs, "wipe", T, "wipe Deleting", |n| {
        n["status"]["phase"] == "Deleting"
    })
    .await;
    assert_eq!(condition_of(&n, "Deleting").0, "True", "{n}");

    let pid = env.nac.nac_pid().expect("nac runs");
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    // No nac: a plain delete waits behind the finalizer, and says nothing yet.
    nabs.delete("plain", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(nabs.get("plain").await.unwrap().metadata.deletion_timestamp.is_some());

    let t0 = Instant::now();
    env.nac.restart().await;
    velero_up(&Cluster::load(), &["--restart"]);
    wait_gone(&nabs, "wipe", T, "wipe gone").await;
    wait_gone(&nabs, "plain", T, "plain gone").await;
    let recovered = t0.elapsed();

    let tally = final_check(&admin, &[&ns], &[plain, keep], &[wipe], T).await;
    tally.expect(&[("Completed", 1)]);
    report(
        env,
        "nac leader kill -9 mid-delete (DeleteBackupRequest made, NAB not yet gone)",
        "3 NABs (1 deleteBackup, 1 plain delete, 1 kept)",
        recovered,
        &tally,
    );
}

/// Waits until the tenant's location `own` shows Velero's `Unavailable`, with Velero's reason.
async fn location_unavailable(nabsls: &Api<NonAdminBackupStorageLocation>) {
    let n = wait_json(nabsls, "own", T, "the location Unavailable", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Unavailable"
    })
    .await;
    assert!(
        n["status"]["veleroBackupStorageLocation"]["status"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{n}"
    );
}

/// The S3 server gone (kill -9, its port refusing) while a tenant's storage location is validated and while a
/// download request is answered: the location shows Velero's `Unavailable` with its reason, and once the S3
/// server is back on its port it turns `Available` by itself; the download request is answered (Velero signs
/// the URL without the store) and its URL works once the store is back. One BackupStorageLocation and one Secret
/// copy for the location throughout; the data in both buckets untouched.
#[tokio::test]
async fn s3_server_gone_while_a_location_is_validated_and_a_download_answered() {
    let (_serial, env) = start().await;
    let (ns, user, admin, nabs) = tenant("fault-loc").await;
    let bucket = format!("loc-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    own_location(&admin, &nabsls, &ns, &bucket).await;
    let before = backup(&nabs, "before", json!({})).await;
    let offsite = backup(&nabs, "offsite", json!({"storageLocation": "own"})).await;

    Part::S3.signal("KILL");
    location_unavailable(&nabsls).await;
    let nadrs: Api<NonAdminDownloadRequest> = Api::namespaced(user.clone(), &ns);
    let req: NonAdminDownloadRequest = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": "list"}, "spec": {"target": {"kind": "BackupResourceList", "name": "offsite"}}
    }))
    .unwrap();
    nadrs.create(&PostParams::default(), &req).await.unwrap();
    let d = wait_json(&nadrs, "list", T, "download request answered", |n| {
        n["status"]["phase"] == "Created" || n["status"]["phase"] == "BackingOff"
    })
    .await;

    let t0 = Instant::now();
    velero_up(&Cluster::load(), &[]);
    wait_json(&nabsls, "own", T, "location Available again", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    let recovered = t0.elapsed();
    assert_eq!(d["status"]["phase"], "Created", "{d}");
    let url = d["status"]["velero"]["status"]["downloadURL"].as_str().unwrap();
    let (status, body) = fetch_url(url).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&gunzip_bytes(&body)).contains("app-config"));
    assert!(files_in(&bucket, &format!("{ns}/p"), &offsite).contains(&format!("{offsite}.tar.gz")));

    let tally = final_check(&admin, &[&ns], &[before], &[], T).await;
    tally.expect(&[("Available", 1), ("Completed", 2)]);
    report(
        env,
        "S3 server kill -9 while a location is validated and a download answered",
        "2 NABs (1 on the tenant's location), 1 NABSL, 1 NADR",
        recovered,
        &tally,
    );
}

/// nac's leader killed (kill -9) between the two steps of a location approval: the tenant's Secret copied into
/// Velero's namespace, the BackupStorageLocation not yet made. The API server holds nac at exactly that point: a
/// ValidatingAdmissionPolicy refuses this tenant's BackupStorageLocation creates while the test wants it (no code
/// hook in nac). Once the refusal is lifted and nac is back, the new leader finishes: one Secret copy, one
/// BackupStorageLocation, the location Available.
#[tokio::test]
async fn leader_killed_mid_location_approval() {
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    use k8s_openapi::api::core::v1::Secret;
    use nac::velero::BackupStorageLocation;

    let (_serial, env) = start().await;
    let (ns, user, admin, _) = tenant("fault-appr").await;
    let bucket = format!("loc-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    let uuid = requested_location(&admin, &nabsls, &ns, &bucket).await;

    // The refusal: this tenant's BackupStorageLocations (named by their nacuuid) cannot be created.
    let hold = format!("nac-e2e-hold-{ns}");
    let message = format!("held by the fault test {hold}");
    let vaps: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    vaps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": hold},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["velero.io"], "apiVersions": ["*"], "operations": ["CREATE"],
                    "resources": ["backupstoragelocations"]
                }]},
                "validations": [{
                    "expression": format!("!object.metadata.name.startsWith('{ns}-')"),
                    "message": message
                }]
            }
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": hold},
                "spec": {
                    "policyName": hold,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {
                        "kubernetes.io/metadata.name": VELERO_NAMESPACE
                    }}}
                }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // In force (the API server loads policies asynchronously) or lifted: a dry-run create of a location of the
    // tenant tells.
    let bsls: Api<BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let probe: BackupStorageLocation = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
        "metadata": {"name": format!("{ns}-probe")},
        "spec": {"provider": "aws", "objectStorage": {"bucket": bucket}}
    }))
    .unwrap();
    let refused = || async {
        match bsls
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
        {
            Ok(_) => Some(false),
            Err(kube::Error::Api(e)) if e.message.contains(&message) => Some(true),
            Err(_) => None,
        }
    };
    eventually(T, "the refusal in force", || async { refused().await.filter(|r| *r) }).await;

    decide(&admin, &uuid, "approve").await;
    // nac copied the Secret, then the API server refused the location: the tenant sees why.
    let n = wait_json(&nabsls, "own", T, "the location's create refused", |n| {
        n["status"].to_string().contains(&message)
    })
    .await;
    assert_ne!(
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"], "Available",
        "{n}"
    );
    let copies: Api<Secret> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    assert!(copies.get_opt(&uuid).await.unwrap().is_some(), "no Secret copy");
    assert!(bsls.get_opt(&uuid).await.unwrap().is_none(), "a location made");

    let pid = env.nac.nac_pid().expect("nac runs");
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    bindings.delete(&hold, &DeleteParams::default()).await.unwrap();
    vaps.delete(&hold, &DeleteParams::default()).await.unwrap();
    eventually(T, "the refusal lifted", || async {
        refused().await.filter(|r| !*r).map(|_| ())
    })
    .await;

    let t0 = Instant::now();
    env.nac.restart().await;
    wait_json(&nabsls, "own", T, "location Available", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    let recovered = t0.elapsed();

    let tally = final_check(&admin, &[&ns], &[], &[], T).await;
    tally.expect(&[("Available", 1)]);
    assert!(copies.get_opt(&uuid).await.unwrap().is_some() && bsls.get_opt(&uuid).await.unwrap().is_some());
    report(
        env,
        "nac leader kill -9 mid location approval (Secret copied, BSL not yet made)",
        "1 NABSL approved",
        recovered,
        &tally,
    );
}

/// The lines of Velero's log written since byte `offset` (the log of one Velero run).
fn velero_log_since(offset: u64) -> String {
    let log = std::fs::read(Cluster::load().get("VELERO_LOG")).unwrap_or_default();
    String::from_utf8_lossy(log.get(offset as usize..).unwrap_or_default()).into_owned()
}

/// The S3 server stalled (SIGSTOP) and then gone (kill -9, its port refusing) while Velero's backup sync reads the
/// storage locations and while a NonAdminSchedule's run is due. One Velero lifetime for both faults: each then
/// waits for Velero's one-minute tick (its sync and its schedules run on it), once.
///
/// Backup sync, as on a new cluster: a tenant's two backups on their own location, their NonAdminBackups and
/// Velero Backups gone while Velero is stopped, the data in their bucket. Velero starts over the stalled S3 server
/// (its sync at start lists every location and hangs), then the server dies: nothing is half-synced, nothing is
/// deleted for want of a listing (a backup on the admin's location keeps its Velero Backup), the location shows
/// Velero's `Unavailable` with its reason; once the S3 server is back on its port, the sync resumes by itself and
/// the two NonAdminBackups come back, each once, with their identity, their data untouched.
///
/// The schedule: every minute, paused until Velero is stopped, so its run falls due while Velero is down; Velero,
/// started over the stalled S3 server, fires it (once: Velero does not catch up missed runs) and it hangs uploading;
/// the S3 server dies and the run fails with Velero's reason and the retry advice; the next run is not blocked by
/// it and completes once the S3 server is back. One Velero Backup and one NonAdminBackup per run; the schedule's
/// status lists the runs as they ended.
#[tokio::test]
async fn s3_server_gone_while_backup_sync_reads_and_a_schedule_fires() {
    let (_serial, env) = start().await;
    let c = Cluster::load();
    let (ns, user, admin, nabs) = tenant("fault-sync").await;
    let bucket = format!("loc-{ns}");
    create_bucket(&bucket);
    let nabsls: Api<NonAdminBackupStorageLocation> = Api::namespaced(user.clone(), &ns);
    own_location(&admin, &nabsls, &ns, &bucket).await;
    let (sns, suser, _, snabs) = tenant("fault-sched").await;
    let nases: Api<NonAdminSchedule> = Api::namespaced(suser.clone(), &sns);
    let schedule: NonAdminSchedule = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule",
        "metadata": {"name": "minutely"},
        "spec": {"schedule": "* * * * *", "paused": true, "template": {"backupSpec": {}}}
    }))
    .unwrap();
    nases.create(&PostParams::default(), &schedule).await.unwrap();
    let s = wait_json(&nases, "minutely", T, "the schedule accepted", |n| {
        n["status"]["phase"] == "Created" && n["status"]["veleroSchedule"]["name"].is_string()
    })
    .await;
    let vschedule = s["status"]["veleroSchedule"]["name"].as_str().unwrap().to_string();
    let keep = backup(&nabs, "keep", json!({})).await;
    let mut synced = Vec::new();
    for name in ["a", "b"] {
        synced.push((name, backup(&nabs, name, json!({"storageLocation": "own"})).await));
    }

    // As on a new cluster: Velero stopped, the NonAdminBackups and Velero Backups of the two gone, their data kept.
    velero_idle(&admin).await;
    velero_up(&c, &["--stop-velero"]);
    for (name, _) in &synced {
        nabs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    for (name, velero) in &synced {
        wait_gone(&nabs, name, T, "the NonAdminBackup deleted").await;
        wait_gone(&backups, velero, T, "its Velero Backup deleted").await;
        let dir = backup_dir_in(&bucket, &format!("{ns}/p"), velero);
        assert_eq!(backup_data_problem(&dir, velero), None, "{name}: its data kept");
    }
    // Nor any sync recorded on the locations (Velero skips at its start a location it synced within its period):
    // its sync at start reads them.
    let own = serde_json::to_value(nabsls.get("own").await.unwrap()).unwrap()["status"]["veleroBackupStorageLocation"]
        ["nacuuid"]
        .as_str()
        .unwrap()
        .to_string();
    let bsls: Api<nac::velero::BackupStorageLocation> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    for location in ["default", own.as_str()] {
        bsls.patch(
            location,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"lastSyncedTime": null}})),
        )
        .await
        .unwrap();
    }
    // The schedule's run falls due while Velero is down.
    nases
        .patch(
            "minutely",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let s = wait_json(&nases, "minutely", T, "the schedule's next run", |n| {
        n["status"]["nextRun"].is_string()
    })
    .await;
    let due: k8s_openapi::jiff::Timestamp = s["status"]["nextRun"].as_str().unwrap().parse().unwrap();
    let wait = due.duration_since(k8s_openapi::jiff::Timestamp::now()).as_secs_f64() + 1.0;
    tokio::time::sleep(Duration::from_secs_f64(wait.max(0.0))).await;

    // Velero started over the stalled S3 server: its sync lists the locations, the due run uploads; both hang.
    Part::S3.signal("STOP");
    let log_offset = std::fs::metadata(c.get("VELERO_LOG")).map(|m| m.len()).unwrap_or(0);
    velero_up(&c, &["--restart-unvalidated"]);
    let run = eventually(T, "the due run fired", || async {
        runs_of(&snabs, "minutely")
            .await
            .into_iter()
            .next()
            .and_then(|n| n.metadata.name)
    })
    .await;
    velero_phase(&snabs, &run, &["InProgress"]).await;
    // Meanwhile: nothing synced, nothing deleted.
    for (name, _) in &synced {
        assert!(
            nabs.get_opt(name).await.unwrap().is_none(),
            "{name} synced from a stalled store"
        );
    }
    assert!(backups.get_opt(&keep).await.unwrap().is_some());

    Part::S3.signal("KILL");
    let failed = velero_phase(
        &snabs,
        &run,
        &["Failed", "FailedValidation", "Completed", "PartiallyFailed"],
    )
    .await;
    assert_eq!(
        failed["status"]["veleroBackup"]["status"]["phase"], "Failed",
        "{failed}"
    );
    location_unavailable(&nabsls).await;
    // The sync was reading when the server died, and gave up on the listing (Velero then syncs and deletes nothing).
    eventually(T, "Velero's sync failing to list", || async {
        velero_log_since(log_offset)
            .contains("Error listing backups in backup store")
            .then_some(())
    })
    .await;
    for (name, _) in &synced {
        assert!(
            nabs.get_opt(name).await.unwrap().is_none(),
            "{name} synced from a dead store"
        );
    }
    assert!(
        backups.get_opt(&keep).await.unwrap().is_some(),
        "a backup deleted as not in the store"
    );

    // The S3 server back on its port: the location Available, the sync resumes by itself, the next run completes.
    let t0 = Instant::now();
    velero_up(&c, &[]);
    wait_json(&nabsls, "own", T, "the location Available again", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
    for (name, velero) in &synced {
        // Velero's next tick: at most a minute after its start.
        let back = wait_json(&nabs, name, Duration::from_secs(150), "synced back", |n| {
            n["status"]["veleroBackup"]["status"]["phase"] == "Completed"
        })
        .await;
        assert_eq!(velero_name(&back), *velero, "{back}");
        assert_eq!(
            back["metadata"]["labels"][NAB_ORIGIN_NACUUID_LABEL],
            velero.as_str(),
            "{back}"
        );
        event_said(&admin, &ns, name, "BackupSynced", "found in object storage").await;
    }
    let sync_recovered = t0.elapsed();
    // The runs after the failed one, in order: one that fell due while the store was dead, or before Velero
    // validated the default location again (the kill and the checks above can span a minute), fails Velero's
    // validation, as Velero does; the first that completes is the next run.
    let deadline = Instant::now() + Duration::from_secs(150);
    let next = loop {
        let mut completed_run = None;
        for r in runs_of(&snabs, "minutely")
            .await
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .filter(|n| *n != run)
        {
            let v = velero_phase(
                &snabs,
                &r,
                &["Failed", "FailedValidation", "Completed", "PartiallyFailed"],
            )
            .await;
            let phase = v["status"]["veleroBackup"]["status"]["phase"].clone();
            if phase == "Completed" {
                completed_run = Some(r);
                break;
            }
            assert!(
                phase == "FailedValidation" || phase == "Failed",
                "{r} neither completed nor failed for the store: {v}"
            );
        }
        if let Some(r) = completed_run {
            break r;
        }
        assert!(Instant::now() < deadline, "no run completed after the store came back");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    completed(&snabs, &next).await;
    let schedule_recovered = t0.elapsed();
    // No more runs from here (the list keeps five, and the final check counts); the schedule goes at the end, and
    // its Velero Schedule with it.
    nases
        .patch(
            "minutely",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let schedules: Api<nac::velero::Schedule> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    wait_json(&schedules, &vschedule, T, "the Velero Schedule paused", |v| {
        v["spec"]["paused"] == true
    })
    .await;
    // Listed newest first as they ended (a run that fired as the pause arrived may stand before them).
    let s = wait_json(&nases, "minutely", T, "the runs listed as they ended", |n| {
        let recent = n["status"]["recentBackups"].as_array().cloned().unwrap_or_default();
        let at = |name: &str, phase: &str| recent.iter().position(|b| b["name"] == name && b["phase"] == phase);
        matches!((at(&next, "Completed"), at(&run, "Failed")), (Some(n), Some(r)) if n < r)
    })
    .await;
    assert_eq!(condition_of(&s, "Accepted").0, "True", "{s}");
    // Each run's Events say what it is: a run of the schedule (not a backup found in object storage).
    for r in [&run, &next] {
        event_said(&admin, &sns, r, "ScheduledRun", "NonAdminSchedule minutely").await;
        assert!(events_of(&admin, &sns, r, "BackupSynced").await.is_empty(), "{r}");
    }

    let tally = final_check(&admin, &[&ns], &[keep], &[], T).await;
    tally.expect(&[("Completed", 3), ("Available", 1)]);
    for (name, velero) in &synced {
        let dir = backup_dir_in(&bucket, &format!("{ns}/p"), velero);
        assert_eq!(backup_data_problem(&dir, velero), None, "{name}: its data kept");
    }
    report(
        env,
        "S3 server SIGSTOP then kill -9 while backup sync reads the locations",
        "2 NABs on the tenant's location synced back (as on a new cluster), 1 kept, 1 NABSL",
        sync_recovered,
        &tally,
    );

    // One Velero Backup per run, one NonAdminBackup per Velero Backup (a run fired as the pause arrived included).
    let runs = eventually(T, "every run with its NonAdminBackup", || async {
        let runs = runs_of(&snabs, "minutely").await;
        let velero_runs = backups
            .list(&ListParams::default().labels(&format!("velero.io/schedule-name={vschedule}")))
            .await
            .ok()?
            .items;
        let named: std::collections::BTreeSet<String> = runs
            .iter()
            .filter_map(|n| n.status.as_ref()?.velero_backup.as_ref()?.name.clone())
            .collect();
        (named.len() == runs.len() && velero_runs.len() == runs.len()).then_some(named)
    })
    .await;
    let kept: Vec<String> = runs.iter().filter(|v| **v != velero_name(&failed)).cloned().collect();
    let tally = final_check(&admin, &[&sns], &kept, &[], T).await;
    tally.expect(&[("Failed", 1), ("Completed", runs.len() - 1)]);
    nases.delete("minutely", &DeleteParams::default()).await.unwrap();
    wait_gone(&nases, "minutely", T, "the schedule deleted").await;
    wait_gone(&schedules, &vschedule, T, "its Velero Schedule deleted").await;
    report(
        env,
        "S3 server SIGSTOP then kill -9 while a schedule's due run fires",
        &format!(
            "NonAdminSchedule every minute, its run due while Velero was down; {} runs",
            runs.len()
        ),
        schedule_recovered,
        &tally,
    );
}

/// Leaves Velero's backup queue stalled for good, as Velero 1.18.0 to 1.18.3 do on their own (velero#10519):
/// an admin's Velero Backup of `ns` is deleted the moment Velero's queue makes it ready to start, with Velero
/// paused for that moment so the delete lands before Velero's backup controller takes it. Velero's count of
/// running backups keeps it (had the controller taken it first, Velero counts it for the 10 minutes its last
/// status write retries): no backup starts until Velero restarts.
async fn stall_velero_queue(admin: &kube::Client, ns: &str) {
    use futures::{StreamExt, TryStreamExt};
    let backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let probe = format!("queue-probe-{ns}");
    let wp = kube::api::WatchParams::default().fields(&format!("metadata.name={probe}"));
    let mut events = backups.watch(&wp, "0").await.unwrap().boxed();
    let b: nac::velero::Backup = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "Backup", "metadata": {"name": probe},
        "spec": {"includedNamespaces": [ns], "storageLocation": "default"}
    }))
    .unwrap();
    backups.create(&PostParams::default(), &b).await.unwrap();
    let ready = tokio::time::timeout(T, async {
        while let Some(e) = events.try_next().await.unwrap() {
            if let kube::api::WatchEvent::Modified(b) = e {
                if b.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("ReadyToStart") {
                    return;
                }
            }
        }
        panic!("the watch of {probe} ended");
    });
    ready.await.expect("the probe ready to start");
    Part::Velero.signal("STOP");
    let deleted = backups.delete(&probe, &DeleteParams::default()).await;
    Part::Velero.signal("CONT");
    deleted.unwrap();
}

/// Velero's backup queue stalled for good: nac tells the tenant whose backup waits (a `VeleroQueueStalled`
/// Event on the NonAdminBackup, with its place in line) and the admin (`nac_velero_backup_queue_stalled` 1 and a
/// warning in the log) once the queue has stood still for `controllers.queue_stall_secs`; a Velero restart starts
/// the queue again, the backup completes, and the gauge goes back to 0.
#[tokio::test]
async fn velero_queue_stalled_is_reported_to_the_waiting_tenant_and_the_admin() {
    let (_serial, env) = start().await;
    let (ns, _, admin, nabs) = tenant("fault-qs").await;
    velero_idle(&admin).await;
    let stalled = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("nac_velero_backup_queue_stalled "))
            .map(str::to_string)
    };
    assert_eq!(stalled(&env.nac.metrics_text().await).as_deref(), Some("0"));
    stall_velero_queue(&admin, &ns).await;
    let t0 = Instant::now();
    nabs.create(&PostParams::default(), &nab("waits", json!({})))
        .await
        .unwrap();
    velero_phase(&nabs, "waits", &["Queued"]).await;
    // Told within 60 s (a standstill of 15 s, looked at every 2.5 s), before the harness's watchdog would restart
    // the stalled Velero (75 s); otherwise what Velero and nac saw is printed.
    let told = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(e) = events_of(&admin, &ns, "waits", "VeleroQueueStalled").await.pop() {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let Ok(told) = told.await else {
        let backups = Api::<nac::velero::Backup>::namespaced(admin.clone(), VELERO_NAMESPACE)
            .list(&ListParams::default())
            .await
            .map(|l| {
                let line = |b: &nac::velero::Backup| {
                    let s = b.status.as_ref();
                    let phase = s.and_then(|s| s.phase.clone());
                    format!(
                        "{:?} {phase:?} at {:?}",
                        b.metadata.name,
                        s.and_then(|s| s.queue_position)
                    )
                };
                l.items.iter().map(line).collect::<Vec<_>>()
            });
        let log = std::fs::read_to_string(&env.nac.log).unwrap_or_default();
        let queue: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("standstill") || l.contains("leader"))
            .collect();
        panic!(
            "no VeleroQueueStalled Event within 60 s; Velero's Backups: {backups:#?}\nnac's standstill and leader \
             lines:\n{}",
            queue.join("\n")
        );
    };
    let waited = t0.elapsed();
    assert!(
        told.starts_with("Velero has started no backup for ") && told.contains("this one at position 1"),
        "{told}"
    );
    assert!(waited >= Duration::from_secs(QUEUE_STALL_SECS), "told after {waited:?}");
    assert_eq!(stalled(&env.nac.metrics_text().await).as_deref(), Some("1"));
    let log = std::fs::read_to_string(&env.nac.log).unwrap();
    assert!(
        log.contains("Velero's backup queue has not moved"),
        "{}",
        env.nac.log_tail()
    );

    velero_up(&Cluster::load(), &["--restart"]);
    let restarted = Instant::now();
    let done = completed(&nabs, "waits").await;
    eventually(T, "the gauge back to 0", || async {
        (stalled(&env.nac.metrics_text().await).as_deref() == Some("0")).then_some(())
    })
    .await;
    let tally = final_check(&admin, &[&ns], &[velero_name(&done)], &[], T).await;
    tally.expect(&[("Completed", 1)]);
    report(
        env,
        "Velero's backup queue stalled (velero#10519), told after a standstill of 15 s",
        &format!("1 NAB queued behind it, told after {:.1}s", waited.as_secs_f64()),
        restarted.elapsed(),
        &tally,
    );
}
