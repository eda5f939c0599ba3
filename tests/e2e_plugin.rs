//! End to end with the real Velero: the built `kubectl-nac` plugin driven as a namespace user (a kubeconfig that
//! impersonates the tenant, whose only rights are nac's editor role in their namespace): create → wait →
//! describe → logs → restore → describe, schedules, and the refusal and missing-right cases.
#![cfg(feature = "e2e")]
mod common;

use common::e2e::*;
use common::velero::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use tokio::sync::OnceCell;

static NAC: OnceCell<Env> = OnceCell::const_new();

/// The real-Velero policy, with the admin's default location opened for tenants' downloads (logs, lists) and copies
/// into another namespace allowed.
async fn env() -> &'static Env {
    NAC.get_or_init(|| async {
        use_velero(VeleroMode::Real);
        let policy =
            format!("{POLICY}downloads:\n  adminLocations: [default]\nrestore:\n  allowNamespaceCopies: true\n");
        Env::start(&policy, NacOptions::default()).await
    })
    .await
}

struct Run {
    ok: bool,
    out: String,
    err: String,
}

/// `kubectl-nac ARGS` with `kubeconfig`, off the async threads.
async fn nac(kubeconfig: &Path, args: &[&str]) -> Run {
    let (kc, args): (PathBuf, Vec<String>) = (kubeconfig.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let o = Command::new(env!("CARGO_BIN_EXE_kubectl-nac"))
            .env("KUBECONFIG", &kc)
            .args(&args)
            .output()
            .unwrap();
        Run {
            ok: o.status.success(),
            out: String::from_utf8_lossy(&o.stdout).into_owned(),
            err: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// The cells of `kind`'s row in a preview into `namespace` that `r` printed (KIND, CREATE, SKIP (EXISTS), LEFT OUT:
/// cells three spaces or more apart).
fn preview_row(r: &Run, namespace: &str, kind: &str) -> Vec<String> {
    assert!(r.ok, "{}{}", r.out, r.err);
    let head = format!("Restore preview into namespace {namespace} (nothing was changed):");
    assert!(r.out.starts_with(&head), "{}", r.out);
    let line = r.out.lines().find(|l| l.starts_with(&format!("{kind} ")));
    let line = line.unwrap_or_else(|| panic!("no {kind} row:\n{}", r.out));
    line.split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_namespace_user_backs_up_and_restores_with_the_plugin_alone() {
    env().await;
    let (ns, _, admin) = new_tenant("vel-plugin").await;
    workload(&admin, &ns).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = user_kubeconfig(&Cluster::load(), dir.path(), &format!("user-{ns}"), &ns);

    // A dry run first: what a backup with these filters would hold (events left out: they come and go).
    let filters = ["--exclude-resources", "secrets,events,events.events.k8s.io"];
    let preview = dir.path().join("preview.json");
    let r = nac(
        &kc,
        &[
            &["backup", "preview", "--file", preview.to_str().unwrap()][..],
            &filters,
        ]
        .concat(),
    )
    .await;
    assert!(r.ok, "{}", r.err);
    assert!(
        r.err.contains("Warning: spec.backupSpec.ttl set to 72h0m0s"),
        "{}",
        r.err
    );

    // create --wait: progress as plain lines (no terminal), the policy's warnings, Completed.
    let r = nac(&kc, &[&["backup", "create", "first", "--wait"][..], &filters].concat()).await;
    assert!(r.ok, "{}{}", r.out, r.err);
    assert!(
        r.err
            .contains("Warning: spec.backupSpec.ttl set to 72h0m0s by cluster policy"),
        "{}",
        r.err
    );
    assert!(r.out.contains("backup: Completed"), "{}", r.out);
    assert!(
        r.out.lines().filter(|l| l.starts_with("backup: ")).count() >= 2,
        "{}",
        r.out
    );

    // get: velero's columns; -o json the object itself.
    let r = nac(&kc, &["backup", "get"]).await;
    assert!(r.ok, "{}", r.err);
    let row = r
        .out
        .lines()
        .find(|l| l.starts_with("first "))
        .unwrap_or_else(|| panic!("{}", r.out));
    assert!(r.out.starts_with("NAME "), "{}", r.out);
    assert!(
        row.contains("Completed") && row.contains("default") && row.contains("2d"),
        "{row}"
    );
    let r = nac(&kc, &["backup", "get", "first", "-o", "json"]).await;
    let v: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(v["kind"], "NonAdminBackup");
    assert_eq!(v["status"]["veleroBackup"]["status"]["phase"], "Completed");

    // The manifest of the real backup: the preview's items exactly, plus the namespace Velero adds itself.
    let r = nac(
        &kc,
        &["backup", "diff", preview.to_str().unwrap(), "first", "-o", "json"],
    )
    .await;
    assert!(r.ok, "{}", r.err);
    let d: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(
        d["onlyA"],
        serde_json::json!([]),
        "in the preview, not the backup: {d:#}"
    );
    assert_eq!(
        d["onlyB"],
        serde_json::json!([format!("namespaces//v1/{ns}.json")]),
        "{d:#}"
    );
    assert!(d["both"].as_array().unwrap().len() >= 8, "{d:#}");
    let r = nac(&kc, &["backup", "manifest", "first"]).await;
    assert!(r.ok, "{}", r.err);
    assert!(
        r.out.contains("deployments.apps (1)") && r.out.contains("<- deployments.apps/web"),
        "{}",
        r.out
    );
    assert!(!r.out.contains("secrets"), "{}", r.out);

    // describe --details: the resource list through a download request (which the plugin deletes again).
    let r = nac(&kc, &["backup", "describe", "first", "--details"]).await;
    assert!(r.ok, "{}", r.err);
    for want in [
        "Phase:  Completed",
        "Excluded:  secrets, events",
        "TTL:  72h0m0s",
        "Items backed up:",
        "Resource List:",
        "v1/ConfigMap:",
        &format!("- {ns}/app-config"),
    ] {
        assert!(r.out.contains(want), "{want} not in:\n{}", r.out);
    }
    assert!(!r.out.contains("v1/Secret:"), "{}", r.out);
    let nadrs: Api<nac::api::NonAdminDownloadRequest> = Api::namespaced(admin.clone(), &ns);
    none_left(&nadrs, &Default::default(), "the plugin's download requests deleted").await;

    // logs: Velero's backup log, un-gzipped.
    let r = nac(&kc, &["backup", "logs", "first"]).await;
    assert!(r.ok, "{}", r.err);
    assert!(r.out.contains("app-config") && r.out.contains(&ns), "{}", r.out);

    // A ConfigMap lost and another changed: the preview counts one to create and the changed one (and the rest)
    // as existing, skipped; it changes nothing, makes no Velero Restore, and its NonAdminRestore is gone after.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    cms.delete("app-config", &DeleteParams::default()).await.unwrap();
    let changed = serde_json::json!({"data": {"items": "changed"}});
    cms.patch("app-data", &PatchParams::default(), &Patch::Merge(&changed))
        .await
        .unwrap();
    let r = nac(&kc, &["restore", "preview", "first"]).await;
    let row = |kind: &str| preview_row(&r, &ns, kind);
    assert_eq!(
        row("configmaps"),
        ["configmaps", "1 (app-config)", "2 (app-data, kube-root-ca.crt)", "0"],
        "{}",
        r.out
    );
    assert_eq!(
        row("deployments.apps"),
        ["deployments.apps", "0", "1 (web)", "0"],
        "{}",
        r.out
    );
    assert_eq!(row("endpoints"), ["endpoints", "0", "0", "1 (web)"], "{}", r.out);
    assert!(
        r.out
            .contains(&format!("  endpoints: user-{ns} may not create endpoints")),
        "the missing right: {}",
        r.out
    );
    assert!(!r.out.contains("secrets"), "excluded from the backup: {}", r.out);
    assert!(r.out.contains("SKIP (EXISTS)"), "{}", r.out);
    assert!(
        cms.get_opt("app-config").await.unwrap().is_none(),
        "the preview restored nothing"
    );
    assert_eq!(cms.get("app-data").await.unwrap().data.unwrap()["items"], "changed");
    let nars: Api<nac::api::NonAdminRestore> = Api::namespaced(admin.clone(), &ns);
    none_left(&nars, &Default::default(), "the preview's NonAdminRestore deleted").await;
    let restores: Api<nac::velero::Restore> = Api::namespaced(admin.clone(), common::VELERO_NAMESPACE);
    let made = restores.list(&Default::default()).await.unwrap().items;
    assert!(
        !made
            .iter()
            .any(|r| r.annotations().get(nac::naming::NAR_ORIGIN_NAMESPACE_ANNOTATION) == Some(&ns)),
        "a Velero Restore for the preview"
    );

    // Restore after losing a ConfigMap, waited for; described.
    let r = nac(&kc, &["restore", "create", "back", "--from-backup", "first", "--wait"]).await;
    assert!(r.ok, "{}{}", r.out, r.err);
    assert!(r.out.contains("restore: Completed"), "{}", r.out);
    cms.get("app-config").await.unwrap();
    let r = nac(&kc, &["restore", "describe", "back"]).await;
    assert!(
        r.out.contains("Phase:  Completed") && r.out.contains("Backup:  first"),
        "{}",
        r.out
    );
    let r = nac(&kc, &["restore", "get"]).await;
    assert!(
        r.out.lines().any(|l| l.starts_with("back ") && l.contains("first")),
        "{}",
        r.out
    );
    let r = nac(&kc, &["restore", "logs", "back"]).await;
    assert!(r.ok && !r.out.is_empty(), "{}", r.err);

    // A copy into another namespace the user owns: previewed there (all to create but the namespace's own
    // kube-root-ca.crt), made, each object labelled with where it came from; the backup's namespace untouched.
    let copy_ns = format!("{ns}-copy");
    ensure_namespace(&admin, &copy_ns).await;
    grant_editor(&admin, &copy_ns, &format!("user-{ns}")).await;
    let mapping = format!("{ns}:{copy_ns}");
    let r = nac(&kc, &["restore", "preview", "first", "--namespace-mappings", &mapping]).await;
    let copy_row = |kind: &str| preview_row(&r, &copy_ns, kind);
    assert_eq!(
        copy_row("configmaps"),
        ["configmaps", "2 (app-config, app-data)", "1 (kube-root-ca.crt)", "0"],
        "{}",
        r.out
    );
    assert_eq!(
        copy_row("deployments.apps"),
        ["deployments.apps", "1 (web)", "0", "0"],
        "{}",
        r.out
    );
    let copies: Api<ConfigMap> = Api::namespaced(admin.clone(), &copy_ns);
    assert!(
        copies.get_opt("app-config").await.unwrap().is_none(),
        "the preview copied"
    );
    let r = nac(
        &kc,
        &[
            "restore",
            "create",
            "copy",
            "--from-backup",
            "first",
            "--namespace-mappings",
            &mapping,
            "--wait",
        ],
    )
    .await;
    assert!(r.ok, "{}{}", r.out, r.err);
    assert!(r.out.contains("restore: Completed"), "{}", r.out);
    let copied = copies.get("app-config").await.unwrap();
    assert_eq!(
        copied
            .metadata
            .labels
            .unwrap_or_default()
            .get(nac::naming::COPIED_FROM_NAMESPACE_LABEL),
        Some(&ns)
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(admin.clone(), &copy_ns);
    deployments.get("web").await.unwrap();
    assert_eq!(cms.get("app-data").await.unwrap().data.unwrap()["items"], "changed");

    // Refused by the policy: the webhook's message, naming the field; nothing made.
    let r = nac(&kc, &["backup", "create", "long", "--ttl", "9999h"]).await;
    assert!(!r.ok);
    assert!(
        r.err.contains("refused") && r.err.contains("spec.backupSpec.ttl"),
        "{}",
        r.err
    );
    let r = nac(&kc, &["backup", "get", "long"]).await;
    assert!(!r.ok && r.err.contains("not found"), "{}", r.err);

    // Schedules: create, see, pause, delete (the runs themselves are tested in e2e_velero).
    let r = nac(
        &kc,
        &[
            "schedule",
            "create",
            "nightly",
            "--schedule",
            "0 3 * * *",
            "--skip-immediately",
        ],
    )
    .await;
    assert!(r.ok, "{}", r.err);
    assert!(
        r.err.contains("spec.template.backupSpec.ttl set to 72h0m0s"),
        "{}",
        r.err
    );
    let r = nac(&kc, &["schedule", "pause", "nightly"]).await;
    assert!(r.ok, "{}", r.err);
    let r = nac(&kc, &["schedule", "describe", "nightly"]).await;
    assert!(
        r.out.contains("Paused:  true") && r.out.contains("Schedule:  0 3 * * *"),
        "{}",
        r.out
    );
    let r = nac(&kc, &["schedule", "get"]).await;
    assert!(
        r.out.lines().any(|l| l.starts_with("nightly ") && l.ends_with("true")),
        "{}",
        r.out
    );
    let r = nac(&kc, &["schedule", "create", "often", "--schedule", "61 * * * *"]).await;
    assert!(!r.ok && r.err.contains("spec.schedule"), "{}", r.err);
    assert!(nac(&kc, &["schedule", "delete", "nightly"]).await.ok);

    // Their own bucket: the request with a credentials Secret the plugin makes, waiting for the admin's approval;
    // deleted with that Secret.
    let creds = dir.path().join("credentials");
    std::fs::write(&creds, "[default]\naws_access_key_id=a\naws_secret_access_key=b\n").unwrap();
    let r = nac(
        &kc,
        &[
            "bsl",
            "create",
            "mine",
            "--provider",
            "aws",
            "--bucket",
            "plugin-bucket",
            "--prefix",
            "p",
            "--config",
            "region=us-east-1,s3ForcePathStyle=true",
            "--credential-file",
            creds.to_str().unwrap(),
        ],
    )
    .await;
    assert!(r.ok, "{}{}", r.out, r.err);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(admin.clone(), &ns);
    assert!(secrets.get("mine-credentials").await.is_ok());
    let r = eventually(T, "the location waiting for approval", || {
        let kc = kc.clone();
        async move {
            let r = nac(&kc, &["bsl", "get"]).await;
            r.out
                .lines()
                .any(|l| l.starts_with("mine ") && l.contains("plugin-bucket/p") && l.contains("False"))
                .then_some(r)
        }
    })
    .await;
    assert!(r.out.starts_with("NAME "), "{}", r.out);
    let r = nac(&kc, &["bsl", "describe", "mine"]).await;
    assert!(
        r.out.contains("Credential:  secret mine-credentials key cloud"),
        "{}",
        r.out
    );
    assert!(r.out.contains("Approved by the cluster admin:  False"), "{}", r.out);
    let r = nac(&kc, &["bsl", "delete", "mine"]).await;
    assert!(
        r.ok && r.out.contains("Secret \"mine-credentials\""),
        "{}{}",
        r.out,
        r.err
    );
    let locations: Api<nac::api::NonAdminBackupStorageLocation> = Api::namespaced(admin.clone(), &ns);
    wait_gone(&locations, "mine", T, "the location deleted").await;
    assert!(secrets.get_opt("mine-credentials").await.unwrap().is_none());

    // Deleted with its data: the NonAdminBackup goes once Velero has deleted the backup.
    let r = nac(&kc, &["backup", "delete", "first", "--data"]).await;
    assert!(r.ok && r.out.contains("and its data"), "{}{}", r.out, r.err);
    let nabs: Api<nac::api::NonAdminBackup> = Api::namespaced(admin.clone(), &ns);
    wait_gone(&nabs, "first", T, "the backup deleted with its data").await;

    // Someone without nac's role in the namespace: told which right is missing.
    let stranger = user_kubeconfig(&Cluster::load(), dir.path(), "stranger", &ns);
    let r = nac(&stranger, &["backup", "get"]).await;
    assert!(!r.ok && r.err.contains("you lack the right"), "{}", r.err);
    let r = nac(&stranger, &["backup", "create", "x"]).await;
    assert!(!r.ok && r.err.contains("you lack the right"), "{}", r.err);
}
