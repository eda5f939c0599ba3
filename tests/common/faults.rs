//! Fault injection for the end-to-end tests with the real parts (`tests/e2e_faults.rs`): signals to one process
//! of the local environment (kill -9, a pause and its end), starting it again, and the one final check every
//! fault ends with: each tenant object in a final state that tells the truth, no duplicate or orphaned Velero
//! object, nothing stuck behind a finalizer, no backup data gone that nobody asked to delete.

use super::e2e::*;
use super::velero::{backup_data_problem, bucket_dir_of, bucket_files_of, velero_queue_report};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, ListParams};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminBackupStorageLocation, NonAdminRestore};
use nac::naming::{NABSL_ORIGIN_NACUUID_LABEL, NAB_ORIGIN_NACUUID_LABEL, NAR_ORIGIN_NACUUID_LABEL};
use nac::velero::{Backup, BackupStorageLocation, DeleteBackupRequest, Restore};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

/// A process of the local environment, as `$CLUSTER_DIR/env` records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Velero,
    S3,
    Etcd,
}

impl Part {
    fn pid_key(self) -> &'static str {
        match self {
            Part::Velero => "VELERO_PID",
            Part::S3 => "S3_PID",
            Part::Etcd => "ETCD_PID",
        }
    }

    fn exe(self) -> &'static str {
        match self {
            Part::Velero => "velero",
            Part::S3 => "versitygw",
            Part::Etcd => "etcd",
        }
    }

    /// Its pid now (the env file is read again: a restart records a new one), checked to run its binary.
    pub fn pid(self) -> Option<u32> {
        let pid: u32 = Cluster::load().env.get(self.pid_key())?.parse().ok()?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let exe = exe.to_string_lossy();
        (exe.trim_end_matches(" (deleted)").rsplit('/').next() == Some(self.exe())).then_some(pid)
    }

    /// Sends `signal` (KILL, STOP, CONT) to its process group: the scripts start every server with setsid, and
    /// Velero's plugins are its children, so kill -9 takes them all, as a container's end would.
    pub fn signal(self, signal: &str) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{self:?} is not running (no live {} in the env file)", self.pid_key()));
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{pid}"))
            .status()
            .expect("running kill")
            .success();
        assert!(ok, "kill -{signal} -- -{pid} ({self:?})");
        if signal == "KILL" {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::path::Path::new(&format!("/proc/{pid}/exe")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// `hack/cluster-up.sh --restart-apiserver`, the API server down for `down_secs`.
pub fn restart_apiserver(down_secs: u32) {
    let c = Cluster::load();
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/cluster-up.sh"))
        .arg("--restart-apiserver")
        .env("CLUSTER_DIR", c.get("CLUSTER_DIR"))
        .env("RESTART_DOWN_SECS", down_secs.to_string())
        .output()
        .expect("running hack/cluster-up.sh");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The API server stopped (SIGTERM: it refuses new connections at once and lets open watches drain) and kept
/// down until `down_until()` holds (checked every 200 ms, at most 2 minutes); then `hack/cluster-up.sh
/// --restart-apiserver` ends it as a restart does (at most 20 s more, then SIGKILL) and starts it again.
pub fn restart_apiserver_when(mut down_until: impl FnMut() -> bool) {
    let pid: u32 = Cluster::load()
        .get("APISERVER_PID")
        .parse()
        .expect("APISERVER_PID in the env file");
    assert!(Command::new("kill")
        .args(["-TERM", "--", &format!("-{pid}")])
        .status()
        .expect("running kill")
        .success());
    let deadline = Instant::now() + Duration::from_secs(120);
    while !down_until() {
        assert!(
            Instant::now() < deadline,
            "the API server down for 2 minutes and the condition never held"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    restart_apiserver(0);
}

/// What the final check counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Tenant objects (NonAdminBackups, NonAdminRestores, NonAdminBackupStorageLocations) at the end.
    pub objects: usize,
    /// Final states: `Completed`, `Failed` (Velero's phase, with its reason and Event), `BackingOff`, `Available`.
    pub states: BTreeMap<String, usize>,
    pub duplicates: usize,
    pub orphans: usize,
    pub stuck: usize,
    pub lost: usize,
    /// Why Velero failed what it failed (its validation errors or failure reason), to read on a mismatch.
    pub why_failed: Vec<String>,
}

impl Tally {
    /// Asserts how many objects ended in each of the named states.
    pub fn expect(&self, want: &[(&str, usize)]) {
        for (state, n) in want {
            assert_eq!(self.states.get(*state), Some(n), "{state}: {self}");
        }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let states: Vec<String> = self.states.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(
            f,
            "objects {}, final states: {}; duplicates {}, orphans {}, stuck {}, data lost {}",
            self.objects,
            states.join(", "),
            self.duplicates,
            self.orphans,
            self.stuck,
            self.lost
        )?;
        if !self.why_failed.is_empty() {
            write!(f, "; Velero's reasons: {}", self.why_failed.join("; "))?;
        }
        Ok(())
    }
}

/// Waits until everything of the tenants in `namespaces` is settled and true, then returns the counts; panics
/// after `timeout` with what is still wrong. `kept` names Velero backups whose data must still be in the bucket
/// (nobody asked to delete them); `deleted` those whose data the tenant asked to delete.
pub async fn final_check(
    admin: &Client,
    namespaces: &[&str],
    kept: &[String],
    deleted: &[String],
    timeout: Duration,
) -> Tally {
    final_check_of(&Cluster::load(), admin, namespaces, kept, deleted, timeout).await
}

/// [`final_check`] in environment `c`, whose bucket holds the backups' data.
pub async fn final_check_of(
    c: &Cluster,
    admin: &Client,
    namespaces: &[&str],
    kept: &[String],
    deleted: &[String],
    timeout: Duration,
) -> Tally {
    let deadline = Instant::now() + timeout;
    loop {
        let (tally, problems) = survey(c, admin, namespaces, kept, deleted).await;
        if problems.is_empty() {
            return tally;
        }
        if Instant::now() > deadline {
            panic!(
                "not settled after {timeout:?} ({tally}):\n  {}\n{}",
                problems.join("\n  "),
                velero_queue_report(c, admin).await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn list<K>(api: Api<K>) -> Vec<Value>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    list_json(api, &ListParams::default()).await
}

/// The objects `lp` selects, as JSON.
pub async fn list_json<K>(api: Api<K>, lp: &ListParams) -> Vec<Value>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.list(lp)
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect()
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, k| &v[*k]).as_str().unwrap_or_default()
}

async fn survey(
    c: &Cluster,
    admin: &Client,
    namespaces: &[&str],
    kept: &[String],
    deleted: &[String],
) -> (Tally, Vec<String>) {
    let mut t = Tally::default();
    let mut problems = Vec::new();
    let vns = VELERO_NAMESPACE;
    // nacuuid → tenant object, per kind.
    let (mut nab_ids, mut nar_ids, mut nabsl_ids) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    // Velero Backup name → its phase, as the NonAdminBackups mirror it: one that failed validation never ran.
    let mut backup_phases = BTreeMap::new();
    for ns in namespaces {
        let events = list(Api::<Event>::namespaced(admin.clone(), ns)).await;
        let event_of = |name: &str, reason: &str| {
            events
                .iter()
                .find(|e| s(e, &["involvedObject", "name"]) == name && s(e, &["reason"]) == reason)
                .map(|e| s(e, &["message"]).to_string())
        };
        for (kind, items, reference) in [
            (
                "NonAdminBackup",
                list(Api::<NonAdminBackup>::namespaced(admin.clone(), ns)).await,
                "veleroBackup",
            ),
            (
                "NonAdminRestore",
                list(Api::<NonAdminRestore>::namespaced(admin.clone(), ns)).await,
                "veleroRestore",
            ),
        ] {
            for o in items {
                t.objects += 1;
                let key = format!("{kind} {ns}/{}", s(&o, &["metadata", "name"]));
                if !o["metadata"]["deletionTimestamp"].is_null() {
                    t.stuck += 1;
                    problems.push(format!("{key}: being deleted, still there: {:#}", o["status"]));
                    continue;
                }
                let uuid = s(&o, &["status", reference, "nacuuid"]).to_string();
                if kind == "NonAdminBackup" {
                    backup_phases.insert(
                        s(&o, &["status", reference, "name"]).to_string(),
                        s(&o, &["status", reference, "status", "phase"]).to_string(),
                    );
                    nab_ids.insert(uuid);
                } else {
                    nar_ids.insert(uuid);
                }
                let velero_kind = &kind["NonAdmin".len()..];
                match (
                    s(&o, &["status", "phase"]),
                    s(&o, &["status", reference, "status", "phase"]),
                ) {
                    ("Created", p @ ("Completed" | "PartiallyFailed")) => *t.states.entry(p.into()).or_default() += 1,
                    ("Created", p @ ("Failed" | "FailedValidation")) => {
                        let reason = s(&o, &["status", reference, "status", "failureReason"]);
                        t.why_failed.push(format!(
                            "{key} {p}: {reason}{}",
                            o["status"][reference]["status"]["validationErrors"]
                        ));
                        let event = event_of(s(&o, &["metadata", "name"]), &format!("{velero_kind}{p}"));
                        match event {
                            Some(m) if !reason.is_empty() || p == "FailedValidation" => {
                                *t.states.entry(p.into()).or_default() += 1;
                                if !m.contains(&format!("create a new {kind}")) {
                                    problems.push(format!(
                                        "{key}: the {velero_kind}{p} Event does not say how to retry: {m}"
                                    ));
                                }
                            }
                            _ => problems.push(format!(
                                "{key}: Velero phase {p} without its reason and a {velero_kind}{p} Event: {:#}",
                                o["status"]
                            )),
                        }
                    }
                    ("BackingOff", _) if condition_of(&o, "Accepted").0 == "False" => {
                        *t.states.entry("BackingOff".into()).or_default() += 1
                    }
                    (phase, velero) => problems.push(format!(
                        "{key}: not final: phase {phase:?}, Velero phase {velero:?}: {:#}",
                        o["status"]
                    )),
                }
            }
        }
        for o in list(Api::<NonAdminBackupStorageLocation>::namespaced(admin.clone(), ns)).await {
            t.objects += 1;
            let key = format!("NonAdminBackupStorageLocation {ns}/{}", s(&o, &["metadata", "name"]));
            if !o["metadata"]["deletionTimestamp"].is_null() {
                t.stuck += 1;
                problems.push(format!("{key}: being deleted, still there"));
                continue;
            }
            nabsl_ids.insert(s(&o, &["status", "veleroBackupStorageLocation", "nacuuid"]).to_string());
            match s(&o, &["status", "veleroBackupStorageLocation", "status", "phase"]) {
                "Available" => *t.states.entry("Available".into()).or_default() += 1,
                p => problems.push(format!("{key}: location phase {p:?}: {:#}", o["status"])),
            }
        }
    }
    let ours = |o: &Value, label: &str| -> Option<String> {
        let ns = o["metadata"]["annotations"]
            .as_object()
            .and_then(|a| a.iter().find(|(k, _)| k.ends_with("-origin-namespace")))
            .and_then(|(_, v)| v.as_str())?;
        namespaces
            .contains(&ns)
            .then(|| s(o, &["metadata", "labels", label]).to_string())
    };
    // One Velero object per tenant object, and none without one.
    for (what, items, label, ids) in [
        (
            "Backup",
            list(Api::<Backup>::namespaced(admin.clone(), vns)).await,
            NAB_ORIGIN_NACUUID_LABEL,
            &nab_ids,
        ),
        (
            "Restore",
            list(Api::<Restore>::namespaced(admin.clone(), vns)).await,
            NAR_ORIGIN_NACUUID_LABEL,
            &nar_ids,
        ),
        (
            "BackupStorageLocation",
            list(Api::<BackupStorageLocation>::namespaced(admin.clone(), vns)).await,
            NABSL_ORIGIN_NACUUID_LABEL,
            &nabsl_ids,
        ),
        (
            "Secret",
            list(Api::<Secret>::namespaced(admin.clone(), vns)).await,
            NABSL_ORIGIN_NACUUID_LABEL,
            &nabsl_ids,
        ),
    ] {
        let mut seen = BTreeMap::<String, usize>::new();
        for o in &items {
            let Some(uuid) = ours(o, label) else { continue };
            *seen.entry(uuid.clone()).or_default() += 1;
            // A Backup whose data is in the bucket outlives its NonAdminBackup by design: a plain delete removes
            // only the object, Velero's sync brings it back, and its TTL ends it (gc.rs).
            let in_bucket =
                what == "Backup" && matches!(s(o, &["status", "phase"]), "Completed" | "PartiallyFailed" | "Failed");
            if !ids.contains(&uuid) && !in_bucket {
                t.orphans += 1;
                problems.push(format!(
                    "Velero {what} {} ({uuid}): its tenant object is gone",
                    s(o, &["metadata", "name"])
                ));
            }
        }
        for (uuid, n) in seen.into_iter().filter(|(_, n)| *n > 1) {
            t.duplicates += n - 1;
            problems.push(format!("{n} Velero {what}s for {uuid}"));
        }
    }
    // A DeleteBackupRequest is done once its NonAdminBackup is gone: none may stay.
    for o in list(Api::<DeleteBackupRequest>::namespaced(admin.clone(), vns)).await {
        if ours(&o, NAB_ORIGIN_NACUUID_LABEL).is_some() {
            t.orphans += 1;
            problems.push(format!(
                "DeleteBackupRequest {} left: {:#}",
                s(&o, &["metadata", "name"]),
                o["status"]
            ));
        }
    }
    for b in kept {
        let phase = backup_phases.get(b).map(String::as_str).unwrap_or("");
        if phase == "FailedValidation" {
            // Counted with its reason above (`why_failed`); Velero never ran it, so it wrote no data to lose.
            problems.push(format!("backup {b} has no data to keep: Velero's phase is {phase}"));
        } else if !bucket_files_of(c, b).contains(&format!("{b}.tar.gz")) {
            t.lost += 1;
            problems.push(format!(
                "the data of backup {b} is gone from the bucket; nobody asked to delete it"
            ));
        } else if let Some(p) = backup_data_problem(&bucket_dir_of(c, b), b) {
            t.lost += 1;
            problems.push(p);
        }
    }
    for b in deleted {
        let files = bucket_files_of(c, b);
        if !files.is_empty() {
            problems.push(format!("the data of backup {b} is still in the bucket: {files:?}"));
        }
    }
    (t, problems)
}

/// The Events of `kind` object `name` in `ns` with `reason`: their messages.
pub async fn events_of(admin: &Client, ns: &str, name: &str, reason: &str) -> Vec<String> {
    list(Api::<Event>::namespaced(admin.clone(), ns))
        .await
        .iter()
        .filter(|e| s(e, &["involvedObject", "name"]) == name && s(e, &["reason"]) == reason)
        .map(|e| s(e, &["message"]).to_string())
        .collect()
}

/// The messages of `reason` Events on `name` once one of them contains `text`: nac publishes an Event beside the
/// write it is about, not before it, so the object's new state can show before its Event does.
pub async fn event_said(admin: &Client, ns: &str, name: &str, reason: &str, text: &str) -> Vec<String> {
    eventually(
        Duration::from_secs(60),
        &format!("the {reason} Event on {name}"),
        || async {
            let said = events_of(admin, ns, name, reason).await;
            said.iter().any(|m| m.contains(text)).then_some(said)
        },
    )
    .await
}

/// Waits until Velero runs nothing (no Backup New, queued or in progress), so the next backup is the one a fault
/// catches mid-run, not one queued behind another test's.
pub async fn velero_idle(admin: &kube::Client) {
    let backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    eventually(Duration::from_secs(300), "Velero idle", || async {
        let busy = backups
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|b| nac::velero::backup_phase_unfinished(b.status.as_ref().and_then(|s| s.phase.as_deref())));
        (!busy).then_some(())
    })
    .await;
}

/// `n` (a NonAdmin`kind`) failed because Velero stopped mid-run: Velero's phase and reason say so, and so does the
/// `{kind}Failed` Event, with how to retry.
pub async fn failed_by_velero_stopping(admin: &kube::Client, ns: &str, name: &str, kind: &str, n: &Value) {
    let velero = &n["status"][format!("velero{kind}")]["status"];
    assert_eq!(velero["phase"], "Failed", "{n}");
    assert!(
        velero["failureReason"]
            .as_str()
            .unwrap_or_default()
            .contains("during the server starting"),
        "{n}"
    );
    let reason = format!("{kind}Failed");
    let events = eventually(super::velero::T, &format!("the {reason} Event"), || async {
        let e = events_of(admin, ns, name, &reason).await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        events[0].contains(&format!("Velero stopped while this {} ran", kind.to_lowercase()))
            && events[0].contains(&format!("To try again, create a new NonAdmin{kind}")),
        "{events:?}"
    );
}

/// No panic in nac's log, which must be there to be read (nac logs as it starts).
pub fn assert_no_panic(nac: &NacProcess) {
    let log =
        std::fs::read_to_string(&nac.log).unwrap_or_else(|e| panic!("reading nac's log {}: {e}", nac.log.display()));
    assert!(!log.trim().is_empty(), "nac's log {} is empty", nac.log.display());
    assert!(!log.contains("panicked at"), "nac panicked:\n{}", nac.log_tail());
}
