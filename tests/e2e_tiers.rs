//! End to end: policy tiers chosen by namespace labels, followed live, and quotas counted again by the reconciler
//! when the webhook is bypassed.
#![cfg(feature = "e2e")]

mod common;

use common::e2e::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nac::api::{NonAdminBackup, NonAdminRestore, NonAdminSchedule};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
const TIER_LABEL: &str = "nac-e2e/tier";

const POLICY: &str = "
enforceBackupSpec: {ttl: 720h0m0s}
schedule: {minInterval: 1h}
quotas: {maxBackups: 1, maxSchedules: 1, maxRestoresPerHour: 1}
rights: {backup: off, restore: off}
tiers:
- name: gold
  namespaceSelector:
    matchLabels: {nac-e2e/tier: gold}
  enforceBackupSpec: {ttl: 2160h0m0s}
  schedule: {minInterval: 24h}
  quotas: {maxBackups: 5, maxSchedules: 5}
  restore: {allowNamespaceCopies: true}
- name: watched
  namespaceSelector:
    matchLabels: {nac-e2e/tier: watched}
  recoveryPointObjective: 20s
";

fn nab(name: &str) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": {"includedResources": ["configmaps"]}}
    }))
    .unwrap()
}

fn nar(name: &str, backup: &str) -> NonAdminRestore {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
        "metadata": {"name": name}, "spec": {"restoreSpec": {"backupName": backup}}
    }))
    .unwrap()
}

/// Plays Velero: the Velero Backup of NonAdminBackup `name` Completed now.
async fn complete(env: &Env, nabs: &Api<NonAdminBackup>, name: &str) {
    let v = wait_json(nabs, name, T, "the backup Created", |v| {
        v["status"]["veleroBackup"]["name"].is_string()
    })
    .await;
    let velero: Api<nac::velero::Backup> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let done = k8s_openapi::jiff::Timestamp::now().to_string();
    velero
        .patch(
            v["status"]["veleroBackup"]["name"].as_str().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed", "completionTimestamp": done}})),
        )
        .await
        .unwrap();
}

fn nas(name: &str, schedule: &str) -> NonAdminSchedule {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule", "metadata": {"name": name},
        "spec": {"schedule": schedule, "template": {"backupSpec": {"includedResources": ["configmaps"]}}}
    }))
    .unwrap()
}

async fn label(admin: &kube::Client, ns: &str, tier: Option<&str>) {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let patch = json!({"metadata": {"labels": {TIER_LABEL: tier}}});
    namespaces
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn ttl(b: &NonAdminBackup) -> String {
    serde_json::to_value(&b.spec.backup_spec).unwrap()["ttl"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// One test, so that the webhook's removal cannot race with other tests in this binary.
#[tokio::test]
async fn tiers_follow_namespace_labels_live_and_quotas_hold_at_reconcile() {
    let env = Env::start(POLICY, NacOptions::default()).await;
    let (gold, gold_user) = env.tenant("e2e-tier-gold").await;
    let (base, base_user) = env.tenant("e2e-tier-base").await;
    label(&env.admin, &gold, Some("gold")).await;

    // Two namespaces in different tiers get different enforced values (the relabel reaches nac within seconds).
    let gold_nabs: Api<NonAdminBackup> = Api::namespaced(gold_user.clone(), &gold);
    let made = eventually(T, "the gold tier's TTL", || async {
        let name = format!("g-{}", rand_suffix());
        let b = gold_nabs.create(&PostParams::default(), &nab(&name)).await.ok()?;
        (ttl(&b) == "2160h0m0s").then_some(b)
    })
    .await;
    assert_eq!(ttl(&made), "2160h0m0s");
    // Copies: the gold tier opens them, the base does not; a copy asks both namespaces' policies, each under its
    // own tier, before anything else.
    let copy = |name: &str, from: &str, to: &str| -> NonAdminRestore {
        serde_json::from_value(json!({
            "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore", "metadata": {"name": name},
            "spec": {"restoreSpec": {"backupName": "made", "namespaceMapping": {from: to}}}
        }))
        .unwrap()
    };
    let gold_nars: Api<NonAdminRestore> = Api::namespaced(gold_user.clone(), &gold);
    let e = gold_nars
        .create(&PostParams::default(), &copy("c-1", &gold, &base))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "namespace {base} does not take copies (restore.allowNamespaceCopies: false, set by cluster policy for \
             {base})"
        )),
        "{e}"
    );
    let base_nars: Api<NonAdminRestore> = Api::namespaced(base_user.clone(), &base);
    let e = base_nars
        .create(&PostParams::default(), &copy("c-2", &base, &gold))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "copies from namespace {base} into {gold} are off (restore.allowNamespaceCopies: false, set by cluster \
             policy)"
        )),
        "{e}"
    );
    let base_nabs: Api<NonAdminBackup> = Api::namespaced(base_user.clone(), &base);
    let b = base_nabs.create(&PostParams::default(), &nab("b-1")).await.unwrap();
    assert_eq!(ttl(&b), "720h0m0s");
    // The base's quota: one backup; refused at apply, naming the quota, the use and the limit.
    wait_json(&base_nabs, "b-1", T, "the first backup Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    let e = base_nabs.create(&PostParams::default(), &nab("b-2")).await.unwrap_err();
    assert!(e.to_string().contains("has 1 NonAdminBackups holding a backup"), "{e}");
    assert!(e.to_string().contains("(quotas.maxBackups: 1)"), "{e}");

    // A schedule in the base (hourly is allowed there) is judged again at once when its namespace moves to the
    // gold tier, whose minimum interval is a day: refused, naming the tier, its Velero Schedule paused.
    let base_nases: Api<NonAdminSchedule> = Api::namespaced(base_user.clone(), &base);
    base_nases
        .create(&PostParams::default(), &nas("hourly", "@every 1h"))
        .await
        .unwrap();
    wait_json(&base_nases, "hourly", T, "the schedule Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    label(&env.admin, &base, Some("gold")).await;
    let refused = wait_json(
        &base_nases,
        "hourly",
        Duration::from_secs(15),
        "the schedule refused under gold",
        |v| condition_of(v, "Accepted").0 == "False",
    )
    .await;
    let message = condition(&refused, "Accepted").unwrap()["message"].to_string();
    assert!(message.contains("set by cluster policy tier \\\"gold\\\""), "{message}");
    // And the next backup there gets gold's values and quota.
    let b = eventually(T, "the relabelled namespace's next backup under gold", || async {
        base_nabs
            .create(&PostParams::default(), &nab(&format!("b-{}", rand_suffix())))
            .await
            .ok()
    })
    .await;
    assert_eq!(ttl(&b), "2160h0m0s");

    // `kubectl nac status` as the namespace's user: its tier, each quota's use and limit.
    let text = nac_status(&env, &base).await;
    assert!(text.contains("Tier:       \"gold\""), "{text}");
    assert!(text.contains("quotas.maxBackups            2 of 5"), "{text}");
    assert!(text.contains("quotas.maxSchedules          1 of 5"), "{text}");
    assert!(text.contains("Newest completed backup: none"), "{text}");
    assert!(text.contains("Recovery point objective: none (not tracked)"), "{text}");

    recovery_point_objective(&env).await;

    // With the webhooks out of the way, the reconciler counts again: in a base namespace the second backup and
    // the second schedule are refused with QuotaExceeded and get no Velero object.
    delete_webhooks(&env.admin).await;
    let (probe_ns, _) = env.tenant("e2e-tier-probe").await;
    let probe: Api<NonAdminBackup> = Api::namespaced(env.admin.clone(), &probe_ns);
    eventually(
        Duration::from_secs(10),
        "the webhooks out of the admission chain",
        || async {
            // What the validating webhook refuses: admitted once it is out of the way.
            let mut escape = nab(&format!("escape-{}", rand_suffix()));
            escape.spec.backup_spec = serde_json::from_value(json!({"includedNamespaces": ["kube-system"]})).unwrap();
            probe.create(&PostParams::default(), &escape).await.ok()
        },
    )
    .await;
    let (ns, _) = env.tenant("e2e-tier-bypass").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(env.admin.clone(), &ns);
    let nases: Api<NonAdminSchedule> = Api::namespaced(env.admin.clone(), &ns);
    nabs.create(&PostParams::default(), &nab("first")).await.unwrap();
    wait_json(&nabs, "first", T, "the first backup Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    nabs.create(&PostParams::default(), &nab("second")).await.unwrap();
    let second = wait_json(&nabs, "second", T, "the second backup refused", |v| {
        condition_of(v, "Accepted") == ("False".into(), "QuotaExceeded".into())
    })
    .await;
    assert!(second["status"]["veleroBackup"]["name"].is_null(), "{second}");
    let message = condition(&second, "Accepted").unwrap()["message"].to_string();
    assert!(message.contains("(quotas.maxBackups: 1)"), "{message}");
    nases
        .create(&PostParams::default(), &nas("one", "@daily"))
        .await
        .unwrap();
    wait_json(&nases, "one", T, "the first schedule Created", |v| {
        v["status"]["phase"] == "Created"
    })
    .await;
    nases
        .create(&PostParams::default(), &nas("two", "@daily"))
        .await
        .unwrap();
    let two = wait_json(&nases, "two", T, "the second schedule refused", |v| {
        condition_of(v, "Accepted") == ("False".into(), "QuotaExceeded".into())
    })
    .await;
    // Its name is recorded, but no Velero Schedule was made under it.
    let velero: Api<nac::velero::Schedule> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let name = two["status"]["veleroSchedule"]["name"].as_str().unwrap_or("none");
    assert!(velero.get_opt(name).await.unwrap().is_none(), "{two}");
    // Two restores made at once: the later one is refused (one an hour), and gets no Velero Restore.
    complete(&env, &nabs, "first").await;
    let nars: Api<NonAdminRestore> = Api::namespaced(env.admin.clone(), &ns);
    for name in ["r-1", "r-2"] {
        nars.create(&PostParams::default(), &nar(name, "first")).await.unwrap();
    }
    let refused = wait_json(&nars, "r-2", T, "the second restore refused", |v| {
        condition_of(v, "Accepted") == ("False".into(), "QuotaExceeded".into())
    })
    .await;
    let message = condition(&refused, "Accepted").unwrap()["message"].to_string();
    assert!(message.contains("(quotas.maxRestoresPerHour: 1)"), "{message}");
    let first = wait_json(&nars, "r-1", T, "the first restore handed to Velero", |v| {
        v["status"]["veleroRestore"]["name"].is_string()
    })
    .await;
    let restores: Api<nac::velero::Restore> = Api::namespaced(env.admin.clone(), VELERO_NAMESPACE);
    let made = restores
        .get_opt(first["status"]["veleroRestore"]["name"].as_str().unwrap())
        .await
        .unwrap();
    assert!(made.is_some(), "{first}");
    let name = refused["status"]["veleroRestore"]["name"].as_str().unwrap_or("none");
    assert!(restores.get_opt(name).await.unwrap().is_none(), "{refused}");
    register_webhooks(&env.cluster, &env.admin, &env.nac).await;
}

/// `kubectl nac status` as the user of `ns`.
async fn nac_status(env: &Env, ns: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let kc = user_kubeconfig(&env.cluster, dir.path(), &format!("user-{ns}"), ns);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-nac"))
            .env("KUBECONFIG", &kc)
            .arg("status")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// A namespace of the `watched` tier (objective 20 s): in breach at once without a completed backup (the gauge,
/// one Event, `kubectl nac status`), met once a backup completes, in breach again 20 s later (a second Event).
async fn recovery_point_objective(env: &Env) {
    let (ns, user) = env.tenant("e2e-tier-rpo").await;
    label(&env.admin, &ns, Some("watched")).await;
    let series = format!("{{namespace=\"{ns}\",tier=\"watched\"}} ");
    let gauge = |name: &'static str| {
        let series = series.clone();
        async move {
            let text = env.nac.metrics_text().await;
            let prefix = format!("nac_{name}{series}");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map(|v| v.trim().parse::<f64>().unwrap())
        }
    };
    let breaches = || async {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.admin.clone(), &ns);
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("RecoveryPointObjectiveBreached")
                    && e.involved_object.kind.as_deref() == Some("Namespace")
                    && e.involved_object.name.as_deref() == Some(ns.as_str())
            })
            .map(|e| e.message.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    eventually(T, "the namespace in breach", || async {
        (gauge("namespace_recovery_point_breached").await == Some(1.0)).then_some(())
    })
    .await;
    assert_eq!(gauge("namespace_recovery_point_objective_seconds").await, Some(20.0));
    assert_eq!(
        gauge("namespace_last_backup_age_seconds").await,
        None,
        "no backup, no age"
    );
    let said = eventually(T, "the breach's Event", || async {
        Some(breaches().await).filter(|b| !b.is_empty())
    })
    .await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("has no completed backup"), "{said:?}");
    assert!(said[0].contains("set by cluster policy tier \"watched\""), "{said:?}");
    let text = nac_status(env, &ns).await;
    assert!(
        text.contains(
            "Recovery point objective: 20s (set by cluster policy tier \"watched\"): BREACHED: no completed backup"
        ),
        "{text}"
    );

    // A backup completes (Velero's part played: its status patched): the breach ends.
    let nabs: Api<NonAdminBackup> = Api::namespaced(user.clone(), &ns);
    nabs.create(&PostParams::default(), &nab("protect")).await.unwrap();
    complete(env, &nabs, "protect").await;
    eventually(T, "the breach ended", || async {
        (gauge("namespace_recovery_point_breached").await == Some(0.0)).then_some(())
    })
    .await;
    let age = gauge("namespace_last_backup_age_seconds").await.unwrap();
    assert!((0.0..=20.0).contains(&age), "{age}");
    let text = nac_status(env, &ns).await;
    assert!(text.contains("(set by cluster policy tier \"watched\"): met"), "{text}");

    // 20 s after it completed, the namespace is in breach again: a second Event, naming the backup.
    eventually(Duration::from_secs(45), "in breach again", || async {
        (gauge("namespace_recovery_point_breached").await == Some(1.0)).then_some(())
    })
    .await;
    let said = eventually(T, "the second breach's Event", || async {
        Some(breaches().await).filter(|b| b.len() >= 2)
    })
    .await;
    assert_eq!(said.len(), 2, "one Event per breach: {said:?}");
    assert!(
        said.iter()
            .any(|m| m.contains("the newest completed backup, protect, is")),
        "{said:?}"
    );
    // Moved out of the tier, the namespace is not tracked: its gauges go.
    label(&env.admin, &ns, None).await;
    eventually(T, "the gauges gone", || async {
        gauge("namespace_recovery_point_breached").await.is_none().then_some(())
    })
    .await;

    // The base allows one restore an hour: the second is refused at apply, naming the quota, the use and the limit.
    let nars: Api<NonAdminRestore> = Api::namespaced(user, &ns);
    nars.create(&PostParams::default(), &nar("r-1", "protect"))
        .await
        .unwrap();
    // Once nac's counts show it (the webhook counts from its watch, a moment behind the create).
    eventually(T, "the restore counted", || async {
        nac_status(env, &ns)
            .await
            .contains("quotas.maxRestoresPerHour    1 of 1")
            .then_some(())
    })
    .await;
    let e = nars
        .create(&PostParams::default(), &nar("r-2", "protect"))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("made 1 NonAdminRestores in the last hour"),
        "{e}"
    );
    assert!(e.to_string().contains("(quotas.maxRestoresPerHour: 1)"), "{e}");
}

fn rand_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}
