//! End to end on a real node (`make node-up`: containerd, kubelet, kube-proxy, kube-scheduler, Velero's server and
//! node agent in pods): nac as it ships, its image installed with `helm install`, the API server calling the
//! webhooks through the chart's Service; file-system backup of real volume data by Velero's node agent under the
//! policy; the leader pod deleted mid-burst; `helm upgrade` to a new image while users create backups; and
//! `helm uninstall`. What only a node can show; the process-mode suites cover the rest.
//!
//! The tests share one installation and run in name order, one at a time (`make e2e-node` passes
//! `--test-threads=1`): install, volume data, failover, upgrade, uninstall last.
#![cfg(all(feature = "e2e", feature = "node"))]

mod common;

use common::e2e::{bind, bind_editor, eventually, parse_env, unique_ns, wait_json, Cluster};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminRestore};
use nac::velero::Backup;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAC_NS: &str = "nac-system";
const VELERO_NS: &str = "openshift-adp";
const USER: &str = "alice";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The node environment's settings (`$NODE_CLUSTER_DIR/env`, else `$CLUSTER_DIR/env`).
fn node_env() -> Cluster {
    let dir = std::env::var("NODE_CLUSTER_DIR")
        .or_else(|_| std::env::var("CLUSTER_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join(".cluster"));
    let text = std::fs::read_to_string(dir.join("env")).unwrap_or_else(|e| {
        panic!(
            "no local environment in {} ({e}): `CLUSTER_DIR={} make node-up` (root), or `make test`",
            dir.display(),
            dir.display()
        )
    });
    let env = parse_env(&text);
    assert_eq!(
        env.get("NODE").map(String::as_str),
        Some("1"),
        "the environment in {} has no node: start it with `make node-up`",
        dir.display()
    );
    Cluster { env }
}

/// Runs a command, panicking with its output when it fails; returns stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl(c: &Cluster) -> Command {
    let mut cmd = Command::new(c.get("KUBECTL"));
    cmd.arg("--kubeconfig").arg(c.get("KUBECONFIG"));
    cmd
}

fn helm(c: &Cluster) -> Command {
    let mut cmd = Command::new(root().join("bin/helm"));
    cmd.arg("--kubeconfig").arg(c.get("KUBECONFIG"));
    cmd
}

fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// nac installed as the README says (hack/nac-install.sh: image imported, `helm upgrade --install`, strict
/// policy, Pod Security `restricted` on the namespace), once per test binary.
async fn installed(c: &Cluster) {
    static ONCE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    ONCE.get_or_init(|| async {
        run(Command::new(root().join("hack/nac-install.sh"))
            .args(["--policy", "policies/strict.yaml"])
            .env("CLUSTER_DIR", c.get("CLUSTER_DIR"))
            .current_dir(root()));
    })
    .await;
}

/// A tenant namespace with `alice` as its owner (nac's editor role and Kubernetes' `admin` role).
async fn tenant(c: &Cluster, admin: &Client, prefix: &str) -> (String, Client) {
    let ns = unique_ns(prefix);
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    bind_editor(admin, &ns, USER).await;
    bind(admin, &ns, USER, "admin").await;
    (ns, c.as_user(USER).await)
}

fn nab(name: &str, spec: Value) -> NonAdminBackup {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"backupSpec": spec}})).unwrap()
}

fn nac_pods(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect()
}

async fn ready_nac_pods(admin: &Client) -> Vec<Pod> {
    let pods = Api::<Pod>::namespaced(admin.clone(), NAC_NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=nac"))
        .await
        .unwrap()
        .items;
    nac_pods(&pods).into_iter().cloned().collect()
}

/// `/proc/<pid>/status` fields of the host processes whose executable is `name` (the node's containers are
/// processes of this machine).
fn processes(name: &str) -> Vec<(u32, BTreeMap<String, String>, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if exe.as_deref().and_then(Path::file_name).is_none_or(|f| f != name) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let fields = status
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
        found.push((pid, fields, mounts));
    }
    found
}

#[tokio::test]
async fn a_helm_install_runs_both_pods_as_the_chart_secures_them() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;

    // Settled: an install over an earlier one (another tag) rolls out; its old pods leave after the new are Ready.
    pod_count_back_to(&admin, 2).await;
    let pods = ready_nac_pods(&admin).await;
    assert_eq!(pods.len(), 2, "both replicas Ready");
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        let image = spec.containers[0].image.as_deref().unwrap();
        assert_eq!(
            image,
            format!("localhost/nac:{}", version()),
            "the image make image built"
        );
    }
    // The namespace enforces Pod Security `restricted`: the API server admitted the pods under it.
    let ns = Api::<Namespace>::all(admin.clone()).get(NAC_NS).await.unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"],
        "restricted"
    );

    // What the kubelet and runc made of the security context, read from the processes themselves.
    let in_pods = eventually(Duration::from_secs(60), "two nac processes (old pods gone)", || async {
        let procs: Vec<_> = processes("nac")
            .into_iter()
            .filter(|(_, status, _)| {
                status
                    .get("Uid")
                    .is_some_and(|u| u.split_whitespace().all(|x| x == "65532"))
            })
            .collect();
        (procs.len() == 2).then_some(procs)
    })
    .await;
    for (pid, status, mounts) in in_pods {
        assert_eq!(status["Gid"].split_whitespace().next(), Some("65532"), "pid {pid}: GID");
        assert_eq!(
            status["CapEff"], "0000000000000000",
            "pid {pid}: no effective capabilities"
        );
        assert_eq!(
            status["CapBnd"], "0000000000000000",
            "pid {pid}: no capabilities at all"
        );
        assert_eq!(status["NoNewPrivs"], "1", "pid {pid}: no privilege escalation");
        assert_eq!(status["Seccomp"], "2", "pid {pid}: seccomp filter (RuntimeDefault)");
        let root = mounts
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some("/"))
            .unwrap_or_else(|| panic!("pid {pid}: no root mount"));
        let opts = root.split_whitespace().nth(5).unwrap();
        assert!(
            opts.split(',').any(|o| o == "ro"),
            "pid {pid}: read-only root filesystem ({root})"
        );
    }

    // The API server reaches the webhooks through the Service: a tenant's create is mutated (nac's identity).
    let (ns, alice) = tenant(&c, &admin, "node-install").await;
    let api: Api<NonAdminBackup> = Api::namespaced(alice, &ns);
    let made = api
        .create(&PostParams::default(), &nab("first", json!({})))
        .await
        .unwrap();
    let annotations = made.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations.keys().any(|k| k.contains("requester")),
        "the mutating webhook stamped the requester: {annotations:?}"
    );
    let made = serde_json::to_value(&made).unwrap();
    assert_eq!(
        made["spec"]["backupSpec"]["ttl"], "720h0m0s",
        "the policy's enforced TTL filled in"
    );
}

/// Writes `mib` MiB of random data into the pod's emptyDir and its claim's local volume, as the tenant's app.
fn app_yaml(ns: &str, pv_dir: &str, pv: &str, mib: u64) -> String {
    format!(
        r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: local-storage}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local-storage
  local: {{path: "{pv_dir}"}}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [nac-node]}}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-storage
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: app, namespace: {ns}, labels: {{app: data}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: localhost/toolbox:1
      imagePullPolicy: Never
      command: [sh, -c, 'for d in /scratch /claim; do test -f $d/payload || head -c {bytes} /dev/urandom > $d/payload; done; sync; exec sleep 1000000']
      volumeMounts: [{{name: scratch, mountPath: /scratch}}, {{name: claim, mountPath: /claim}}]
  volumes:
    - {{name: scratch, emptyDir: {{}}}}
    - {{name: claim, persistentVolumeClaim: {{claimName: data}}}}
"#,
        bytes = mib * 1024 * 1024
    )
}

fn apply(c: &Cluster, yaml: &str) {
    let mut child = kubectl(c)
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(yaml.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn pod_ready(admin: &Client, ns: &str, name: &str, timeout: Duration) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    wait_json(&pods, name, timeout, &format!("pod {ns}/{name} Ready"), |p| {
        p["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
    .await;
}

/// sha256 of both payloads, read inside the pod.
fn checksums(c: &Cluster, ns: &str) -> String {
    run(kubectl(c).args([
        "-n",
        ns,
        "exec",
        "app",
        "--",
        "sha256sum",
        "/scratch/payload",
        "/claim/payload",
    ]))
}

#[tokio::test]
async fn b_file_system_backup_restores_the_same_bytes_for_an_empty_dir_and_a_claim() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let mib: u64 = std::env::var("NODE_FS_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (ns, alice) = tenant(&c, &admin, "node-fs").await;
    let pv_root = PathBuf::from(c.get("NODE_DIR")).join("local-pv");
    let (pv1, pv2) = (format!("{ns}-1"), format!("{ns}-2"));
    for pv in [&pv1, &pv2] {
        std::fs::create_dir_all(pv_root.join(pv)).unwrap();
    }
    apply(&c, &app_yaml(&ns, pv_root.join(&pv1).to_str().unwrap(), &pv1, mib));
    pod_ready(&admin, &ns, "app", Duration::from_secs(120)).await;
    let before = checksums(&c, &ns);
    let sums: Vec<&str> = before.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(sums.len(), 2);
    assert_ne!(sums[0], sums[1], "two different random payloads");

    // The tenant asks for nothing about volumes; the policy enforces file-system backup.
    let nabs: Api<NonAdminBackup> = Api::namespaced(alice.clone(), &ns);
    let t0 = Instant::now();
    let made = nabs
        .create(&PostParams::default(), &nab("volumes", json!({})))
        .await
        .unwrap();
    let made = serde_json::to_value(&made).unwrap();
    assert_eq!(
        made["spec"]["backupSpec"]["defaultVolumesToFsBackup"],
        json!(true),
        "enforced by the policy"
    );
    // Polled every 50 ms from both sides, for nac's share of the time: until the Velero Backup exists, and from
    // Velero's Completed until the NonAdminBackup says so.
    let backups: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NS);
    let (mut made_at, mut velero_done_at) = (None, None);
    let done = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "the fs backup did not complete in 5 minutes"
        );
        let v = serde_json::to_value(nabs.get("volumes").await.unwrap()).unwrap();
        if let Some(name) = v["status"]["veleroBackup"]["name"].as_str() {
            if let Ok(b) = backups.get(name).await {
                made_at.get_or_insert(t0.elapsed());
                let b = serde_json::to_value(b).unwrap();
                let phase = b["status"]["phase"].as_str().unwrap_or("");
                assert!(
                    !matches!(phase, "Failed" | "PartiallyFailed" | "FailedValidation"),
                    "backup {phase}: {b}"
                );
                if phase == "Completed" {
                    velero_done_at.get_or_insert(t0.elapsed());
                }
            }
        }
        if v["status"]["veleroBackup"]["status"]["phase"] == "Completed" {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = t0.elapsed();
    let (made_at, velero_done_at) = (made_at.unwrap(), velero_done_at.unwrap_or(took));
    let pvb = &done["status"]["fileSystemPodVolumeBackups"];
    assert_eq!(
        pvb["completed"],
        json!(2),
        "both volumes backed up by the node agent: {pvb}"
    );
    assert_eq!(pvb["failed"].as_i64().unwrap_or(0), 0);
    println!(
        "fs backup of 2 x {mib} MiB: NonAdminBackup create -> Completed {took:?}; nac: create -> Velero Backup {made_at:?}, \
         Velero Completed -> NonAdminBackup Completed {:?}; Velero (and its node agent) {:?}",
        took.saturating_sub(velero_done_at),
        velero_done_at.saturating_sub(made_at)
    );

    // The data is lost: pod, claim and volume deleted, the volume's directory wiped.
    run(kubectl(&c).args(["-n", &ns, "delete", "pod", "app", "--wait=true"]));
    run(kubectl(&c).args(["-n", &ns, "delete", "pvc", "data", "--wait=true"]));
    run(kubectl(&c).args(["delete", "pv", &pv1, "--wait=true"]));
    std::fs::remove_dir_all(pv_root.join(&pv1)).unwrap();
    // The admin provides the volume again, empty, under its old name (the restored claim names it).
    apply(
        &c,
        app_yaml(&ns, pv_root.join(&pv2).to_str().unwrap(), &pv1, mib)
            .split("---")
            .nth(1)
            .unwrap(),
    );

    let nars: Api<NonAdminRestore> = Api::namespaced(alice, &ns);
    let nar: NonAdminRestore = serde_json::from_value(json!({
        "metadata": {"name": "volumes"}, "spec": {"restoreSpec": {"backupName": "volumes"}}
    }))
    .unwrap();
    nars.create(&PostParams::default(), &nar).await.unwrap();
    let restored = wait_json(
        &nars,
        "volumes",
        Duration::from_secs(300),
        "the restore Completed",
        |v| {
            let phase = v["status"]["veleroRestore"]["status"]["phase"].as_str().unwrap_or("");
            assert!(
                !matches!(phase, "Failed" | "PartiallyFailed" | "FailedValidation"),
                "restore {phase}: {v}"
            );
            phase == "Completed"
        },
    )
    .await;
    assert_eq!(restored["status"]["phase"], "Created");
    // The node agent's PodVolumeRestores, counted in the status as OADP's controller reports them.
    let counted = wait_json(
        &nars,
        "volumes",
        Duration::from_secs(60),
        "both PodVolumeRestores counted Completed",
        |v| v["status"]["fileSystemPodVolumeRestores"]["completed"] == json!(2),
    )
    .await;
    assert_eq!(
        counted["status"]["fileSystemPodVolumeRestores"]["failed"]
            .as_i64()
            .unwrap_or(0),
        0
    );
    pod_ready(&admin, &ns, "app", Duration::from_secs(120)).await;
    let after = checksums(&c, &ns);
    assert_eq!(before, after, "the restored volumes hold the same bytes");
    println!("checksums before and after:\n{after}");
}

/// The Lease holder's pod name, once there is one (between two terms the Lease has no holder).
async fn leader(admin: &Client) -> String {
    eventually(Duration::from_secs(60), "a leader", || async move {
        let lease = Api::<Lease>::namespaced(admin.clone(), NAC_NS)
            .get("nac-leader")
            .await
            .ok()?;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await
}

/// Deletes a test namespace: nac lets its NonAdminBackups go and removes their Velero Backups, so Velero's
/// queue is not left holding a test's backups for the next one.
async fn remove_namespace(admin: &Client, ns: &str) {
    Api::<Namespace>::all(admin.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn c_the_leader_pod_deleted_mid_burst_loses_and_duplicates_nothing() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let (ns, alice) = tenant(&c, &admin, "node-leader").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(alice, &ns);
    let old_leader = leader(&admin).await;
    const N: usize = 24;
    let mut failures = Vec::new();
    for i in 0..N {
        if i == N / 3 {
            // A normal delete: SIGTERM, the Lease handed over, the Deployment starts a replacement.
            let pods: Api<Pod> = Api::namespaced(admin.clone(), NAC_NS);
            pods.delete(&old_leader, &DeleteParams::default()).await.unwrap();
        }
        if let Err(e) = nabs
            .create(&PostParams::default(), &nab(&format!("burst-{i}"), json!({})))
            .await
        {
            failures.push(format!("burst-{i}: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        failures.is_empty(),
        "creates refused while the leader left: {failures:?}"
    );
    let new_leader = eventually(Duration::from_secs(60), "a new leader", || {
        let admin = admin.clone();
        let old = old_leader.clone();
        async move { Some(leader(&admin).await).filter(|l| *l != old) }
    })
    .await;
    // Every NonAdminBackup gets exactly one Velero Backup.
    let backups: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NS);
    let per_nab = eventually(Duration::from_secs(180), "one Velero Backup per NonAdminBackup", || {
        let backups = backups.clone();
        let ns = ns.clone();
        async move {
            let list = backups
                .list(&ListParams::default().labels("openshift.io/oadp=True"))
                .await
                .ok()?
                .items;
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for b in list {
                let ann = b.metadata.annotations.unwrap_or_default();
                if ann.get("openshift.io/oadp-nab-origin-namespace") == Some(&ns) {
                    *per.entry(ann["openshift.io/oadp-nab-origin-name"].clone()).or_default() += 1;
                }
            }
            (per.len() == N).then_some(per)
        }
    })
    .await;
    assert!(per_nab.values().all(|&n| n == 1), "duplicates: {per_nab:?}");
    for i in 0..N {
        let name = format!("burst-{i}");
        wait_json(&nabs, &name, Duration::from_secs(120), "Created", |v| {
            v["status"]["phase"] == "Created" && v["status"]["veleroBackup"]["name"].is_string()
        })
        .await;
    }
    println!(
        "leader {old_leader} deleted after {} creates; {new_leader} took over; {N} backups, 0 lost, 0 duplicated",
        N / 3
    );
    pod_count_back_to(&admin, 2).await;
    remove_namespace(&admin, &ns).await;
}

async fn pod_count_back_to(admin: &Client, n: usize) {
    eventually(Duration::from_secs(120), "nac's pods Ready again", || {
        let admin = admin.clone();
        async move { (ready_nac_pods(&admin).await.len() == n).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn d_helm_upgrade_to_a_new_image_fails_no_admission_request() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    pod_count_back_to(&admin, 2).await;
    let (ns, alice) = tenant(&c, &admin, "node-upgrade").await;

    // A new tag of the same build: what an upgrade rolls out (new pods replace the old ones).
    let tag = format!("{}-upgrade", version());
    run(Command::new(root().join("hack/images.sh"))
        .args(["nac"])
        .env("TAG", &tag)
        .current_dir(root()));
    run(Command::new(root().join("hack/node-up.sh"))
        .args(["--import", &format!("target/image/nac-{tag}.tar")])
        .env("CLUSTER_DIR", c.get("CLUSTER_DIR"))
        .current_dir(root()));

    // A client that keeps creating NonAdminBackups through the rollout, counting every refusal.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(tokio::sync::Mutex::new(Vec::<String>::new()));
    let nabs: Api<NonAdminBackup> = Api::namespaced(alice, &ns);
    let client = {
        let (stop, ok, errors, nabs) = (stop.clone(), ok.clone(), errors.clone(), nabs.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Only ConfigMaps: the backups are quick for Velero, whose queue runs one at a time.
                let spec = json!({"includedResources": ["configmaps"]});
                match nabs.create(&PostParams::default(), &nab(&format!("u-{i}"), spec)).await {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        errors.lock().await.push(format!("u-{i}: {e}"));
                        0
                    }
                };
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t0 = Instant::now();
    run(helm(&c)
        .args([
            "upgrade",
            "nac",
            "charts/nac",
            "-n",
            NAC_NS,
            "--reuse-values",
            "--set",
            &format!("image.tag={tag}"),
            "--wait",
            "--timeout",
            "4m",
        ])
        .current_dir(root()));
    let rollout = t0.elapsed();
    // Until the old pods are gone, not just until the new ones are Ready.
    eventually(Duration::from_secs(120), "only new pods left", || {
        let admin = admin.clone();
        let tag = tag.clone();
        async move {
            let pods = Api::<Pod>::namespaced(admin, NAC_NS)
                .list(&ListParams::default().labels("app.kubernetes.io/name=nac"))
                .await
                .ok()?
                .items;
            let all_new = pods.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(&format!("localhost/nac:{tag}"))
            });
            (all_new && pods.len() == 2).then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    client.await.unwrap();
    let errors = errors.lock().await.clone();
    let ok = ok.load(Ordering::Relaxed);
    println!(
        "helm upgrade rollout {rollout:?}: {ok} creates admitted, {} refused",
        errors.len()
    );
    assert!(ok >= 20, "the client kept creating through the rollout ({ok})");
    assert!(
        errors.is_empty(),
        "admission requests failed during the rollout: {errors:?}"
    );
    remove_namespace(&admin, &ns).await;
}

#[tokio::test]
async fn z_helm_uninstall_leaves_no_webhook_rbac_or_pod_but_keeps_crds_and_tenants_objects() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let (ns, alice) = tenant(&c, &admin, "node-uninstall").await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(alice, &ns);
    nabs.create(&PostParams::default(), &nab("kept", json!({})))
        .await
        .unwrap();

    run(helm(&c).args(["uninstall", "nac", "-n", NAC_NS, "--wait", "--timeout", "2m"]));
    let sel = "app.kubernetes.io/instance=nac";
    for kind in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "clusterroles",
        "clusterrolebindings",
    ] {
        let left = run(kubectl(&c).args(["get", kind, "-l", sel, "-o", "name"]));
        assert!(left.trim().is_empty(), "{kind} left: {left}");
    }
    for namespace in [NAC_NS, VELERO_NS] {
        let left = run(kubectl(&c).args([
            "-n",
            namespace,
            "get",
            "roles,rolebindings,serviceaccounts,services,deployments,configmaps,secrets",
            "-l",
            sel,
            "-o",
            "name",
        ]));
        assert!(left.trim().is_empty(), "left in {namespace}: {left}");
    }
    eventually(Duration::from_secs(60), "nac's pods gone", || {
        let admin = admin.clone();
        async move {
            let pods = Api::<Pod>::namespaced(admin, NAC_NS)
                .list(&ListParams::default().labels("app.kubernetes.io/name=nac"))
                .await
                .ok()?;
            pods.items.is_empty().then_some(())
        }
    })
    .await;
    assert!(
        processes("nac").iter().all(|(_, s, _)| !s["Uid"].starts_with("65532")),
        "a nac process is left"
    );
    let crds = run(kubectl(&c).args(["get", "crd", "-o", "name"]));
    for crd in [
        "nonadminbackups",
        "nonadminrestores",
        "nonadminbackupstoragelocations",
        "nonadminschedules",
    ] {
        assert!(crds.contains(&format!("{crd}.oadp.openshift.io")), "CRD {crd} kept");
    }
    let api: Api<NonAdminBackup> = Api::namespaced(admin.clone(), &ns);
    assert!(api.get("kept").await.is_ok(), "the tenant's NonAdminBackup stays");
}
