//! End to end on a real node (`make node-up`: containerd, kubelet, kube-proxy, kube-scheduler, the project's CSI
//! driver with the snapshot machinery, Velero's server and node agent in pods): nac as it ships, its image installed
//! with `helm install`, the API server calling the webhooks through the chart's Service; file-system backup of real
//! volume data by Velero's node agent under the policy; the leader pod deleted mid-burst; `helm upgrade` to a new
//! image while users create backups; Velero's server pod and its node agent's pod killed mid file-system backup;
//! CSI snapshots and Velero's data mover under the policy, with the snapshot controller down and the node agent
//! killed mid DataUpload; and `helm uninstall`. What only a node can show; the process-mode suites cover the rest.
//!
//! The tests share one installation and run in name order, one at a time (`make e2e-node` passes
//! `--test-threads=1`): install, volume data, failover, upgrade, Velero's pods killed, CSI and the data mover,
//! uninstall last. A test that changes the policy puts it back when it ends.
#![cfg(all(feature = "e2e", feature = "node"))]

mod common;

use common::e2e::{bind, bind_editor, condition, eventually, may_soon, parse_env, unique_ns, wait_json, Cluster};
use common::faults::{failed_by_velero_stopping, final_check_of, list_json, velero_idle};
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
    let c = Cluster { env };
    common::velero::watch_velero_queue(&c);
    c
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

/// Writes `mib` MiB of random data into the pod's emptyDir and its claim's local volume, as the tenant's app; Ready
/// once both are written.
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
      command: [sh, -c, 'for d in /scratch /claim; do test -f $d/payload || {{ head -c {bytes} /dev/urandom > $d/.payload && mv $d/.payload $d/payload; }}; done; sync; exec sleep 1000000']
      # Ready once both payloads are whole (a large one takes a while to write).
      readinessProbe: {{exec: {{command: [sh, -c, 'test -f /scratch/payload && test -f /claim/payload']}}, periodSeconds: 1}}
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
    let app = App::new(&c, &admin, "node-fs", mib).await;
    let (ns, alice) = (app.ns.clone(), app.alice.clone());

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
    // OADP's counts leave a zero out: exactly these two, none failed.
    let pvb = &done["status"]["fileSystemPodVolumeBackups"];
    assert_eq!(
        *pvb,
        json!({"total": 2, "completed": 2}),
        "both volumes backed up by the node agent"
    );
    assert_all_bytes_done(&done, 2 * mib);
    println!(
        "fs backup of 2 x {mib} MiB: NonAdminBackup create -> Completed {took:?}; nac: create -> Velero Backup {made_at:?}, \
         Velero Completed -> NonAdminBackup Completed {:?}; Velero (and its node agent) {:?}",
        took.saturating_sub(velero_done_at),
        velero_done_at.saturating_sub(made_at)
    );

    stored_bytes_quota(&c, &admin, &nabs, &ns, &done).await;

    let after = app.lose_and_restore(&c, &admin, "volumes").await;
    assert_eq!(app.before, after, "the restored volumes hold the same bytes");
    println!("checksums before and after:\n{after}");
}

/// `quotas.maxStoredBytes` with Velero's own byte counts: a tier for namespace `ns` alone whose limit lies between
/// what one backup of it holds and two. The second backup is admitted and completes, taking the namespace over;
/// the third is refused, naming the bytes held and the limit. `first` is the namespace's completed backup.
async fn stored_bytes_quota(c: &Cluster, admin: &Client, nabs: &Api<NonAdminBackup>, ns: &str, first: &Value) {
    let one = first["status"]["volumeDataProgress"]["totalBytes"].as_u64().unwrap();
    assert!(one > 0, "{first}");
    let limit = one + one / 2;
    let ttl = "719h0m0s";
    let _policy = PolicyChanged::edit(c, admin, nabs, json!({"ttl": ttl}), |policy| {
        let mut enforced = serde_json::to_value(policy.get("enforceBackupSpec")).unwrap();
        enforced["ttl"] = ttl.into();
        let tier = json!({
            "name": "stored",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "enforceBackupSpec": enforced,
            "quotas": {"maxStoredBytes": limit},
        });
        policy.insert("tiers".into(), serde_yaml::to_value(json!([tier])).unwrap());
    })
    .await;
    nabs.create(&PostParams::default(), &nab("second", json!({})))
        .await
        .unwrap();
    let second = backup_completed(nabs, "second").await;
    let two = second["status"]["volumeDataProgress"]["totalBytes"].as_u64().unwrap();
    assert!(one + two >= limit, "{one} + {two} bytes, limit {limit}");
    // nac counts a backup's bytes from its watch of the NonAdminBackups, a moment after the status just read: a
    // dry run shows when.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(Duration::from_secs(30), "the third backup refused", || async {
        nabs.create(&dry, &nab("third", json!({}))).await.err()
    })
    .await;
    let refused = nabs
        .create(&PostParams::default(), &nab("third", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("(quotas.maxStoredBytes)"), "{refused}");
    assert!(
        refused.contains(&format!("hold {}", nac::policy::quotas::human_bytes(one + two))),
        "{refused}"
    );
    assert!(
        refused.contains(&format!("limit of {}", nac::policy::quotas::human_bytes(limit))),
        "{refused}"
    );
    assert!(refused.contains("set by cluster policy tier \"stored\""), "{refused}");
}

/// A tenant (`alice`'s namespace) whose pod writes `mib` MiB of random data into an emptyDir and into a claim on a
/// local PersistentVolume (`pv`, in directory `dir`), with the checksums it started with.
struct App {
    ns: String,
    alice: Client,
    pv: String,
    dir: PathBuf,
    mib: u64,
    before: String,
}

impl App {
    async fn new(c: &Cluster, admin: &Client, prefix: &str, mib: u64) -> App {
        let (ns, alice) = tenant(c, admin, prefix).await;
        let pv = ns.clone();
        let dir = PathBuf::from(c.get("NODE_DIR")).join("local-pv").join(&pv);
        std::fs::create_dir_all(&dir).unwrap();
        apply(c, &app_yaml(&ns, dir.to_str().unwrap(), &pv, mib));
        pod_ready(admin, &ns, "app", Duration::from_secs(120)).await;
        let before = checksums(c, &ns);
        let sums: Vec<&str> = before.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
        assert_eq!(sums.len(), 2);
        assert_ne!(sums[0], sums[1], "two different random payloads");
        App {
            ns,
            alice,
            pv,
            dir,
            mib,
            before,
        }
    }

    /// The data lost (pod, claim and volume deleted, the volume's directory wiped; the admin provides the volume
    /// again, empty, under its old name: the restored claim names it), then a NonAdminRestore of NonAdminBackup
    /// `backup`: waits for it and both PodVolumeRestores, and returns the restored pod's checksums.
    async fn lose_and_restore(&self, c: &Cluster, admin: &Client, backup: &str) -> String {
        let ns = self.ns.as_str();
        run(kubectl(c).args(["-n", ns, "delete", "pod", "app", "--wait=true"]));
        run(kubectl(c).args(["-n", ns, "delete", "pvc", "data", "--wait=true"]));
        run(kubectl(c).args(["delete", "pv", &self.pv, "--wait=true"]));
        std::fs::remove_dir_all(&self.dir).unwrap();
        std::fs::create_dir_all(&self.dir).unwrap();
        let yaml = app_yaml(ns, self.dir.to_str().unwrap(), &self.pv, self.mib);
        apply(c, yaml.split("---").nth(1).unwrap());

        let nars: Api<NonAdminRestore> = Api::namespaced(self.alice.clone(), ns);
        let nar: NonAdminRestore = serde_json::from_value(json!({
            "metadata": {"name": backup}, "spec": {"restoreSpec": {"backupName": backup}}
        }))
        .unwrap();
        nars.create(&PostParams::default(), &nar).await.unwrap();
        let restored = wait_json(&nars, backup, Duration::from_secs(300), "the restore Completed", |v| {
            let phase = v["status"]["veleroRestore"]["status"]["phase"].as_str().unwrap_or("");
            assert!(
                !matches!(phase, "Failed" | "PartiallyFailed" | "FailedValidation"),
                "restore {phase}: {v}"
            );
            phase == "Completed"
        })
        .await;
        assert_eq!(restored["status"]["phase"], "Created");
        // The node agent's PodVolumeRestores, counted in the status as OADP's controller reports them.
        let counted = wait_json(
            &nars,
            backup,
            Duration::from_secs(60),
            "both PodVolumeRestores counted Completed",
            |v| v["status"]["fileSystemPodVolumeRestores"]["completed"] == json!(2),
        )
        .await;
        assert_eq!(
            counted["status"]["fileSystemPodVolumeRestores"],
            json!({"total": 2, "completed": 2}),
            "none failed"
        );
        pod_ready(admin, ns, "app", Duration::from_secs(120)).await;
        checksums(c, ns)
    }
}

/// Whether `path` exists in the app pod of `ns` (read with the admin's exec).
fn in_pod(c: &Cluster, ns: &str, path: &str) -> bool {
    let out = kubectl(c)
        .args([
            "-n",
            ns,
            "exec",
            "app",
            "--",
            "sh",
            "-c",
            &format!("test -e {path} && echo yes || echo no"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// Waits for a NonAdminBackup's Velero Backup to complete and returns the NonAdminBackup.
async fn backup_completed(nabs: &Api<NonAdminBackup>, name: &str) -> Value {
    let done = wait_json(
        nabs,
        name,
        Duration::from_secs(300),
        &format!("backup {name} finished"),
        |v| {
            let phase = v["status"]["veleroBackup"]["status"]["phase"].as_str().unwrap_or("");
            ["Completed", "PartiallyFailed", "Failed", "FailedValidation"].contains(&phase)
        },
    )
    .await;
    assert_eq!(
        done["status"]["veleroBackup"]["status"]["phase"], "Completed",
        "{:#}",
        done["status"]
    );
    done
}

#[tokio::test]
async fn ba_a_viewers_backup_runs_no_command_in_pods_and_copies_no_volume_data_an_owners_does() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let app = App::new(&c, &admin, "node-hooks", 1).await;
    let ns = app.ns.clone();
    // Kubernetes' `view`: reads the namespace's pods, may neither exec into them nor create one that mounts the
    // claim. The policy (strict) enforces file-system backup.
    let viewer = format!("viewer-{ns}");
    bind_editor(&admin, &ns, &viewer).await;
    bind(&admin, &ns, &viewer, "view").await;
    let viewer_nabs: Api<NonAdminBackup> = Api::namespaced(c.as_user(&viewer).await, &ns);
    let hook = |file: &str| {
        json!({"resources": [{"name": "h", "labelSelector": {"matchLabels": {"app": "data"}},
            "pre": [{"exec": {"container": "app", "command": ["sh", "-c", format!("touch /scratch/{file}")]}}]}]})
    };
    viewer_nabs
        .create(
            &PostParams::default(),
            &nab("viewer-hook", json!({"hooks": hook("by-viewer")})),
        )
        .await
        .unwrap();
    let done = backup_completed(&viewer_nabs, "viewer-hook").await;
    assert!(
        !in_pod(&c, &ns, "/scratch/by-viewer"),
        "the viewer's exec hook ran in the pod"
    );
    let spec = &done["status"]["veleroBackup"]["spec"];
    assert!(spec["hooks"].is_null(), "{spec:#}");
    assert_eq!(spec["defaultVolumesToFsBackup"], json!(false), "{spec:#}");
    // What Velero made for the backup, in its own namespace (the same query finds the owner's below).
    let viewer_backup = done["status"]["veleroBackup"]["name"].as_str().unwrap();
    let (pvbs, dus) = (
        pod_volume_backups(&admin, viewer_backup).await,
        data_uploads(&admin, viewer_backup).await,
    );
    assert!(
        pvbs.is_empty() && dus.is_empty(),
        "the viewer's backup copied volume data: PodVolumeBackups {pvbs:#?}, DataUploads {dus:#?}"
    );
    assert_eq!(
        done["status"]["fileSystemPodVolumeBackups"],
        json!({}),
        "no count: {:#}",
        done["status"]
    );

    // The namespace's owner (Kubernetes' `admin`) may exec: the same request runs its hook, which Velero counts,
    // and copies the volumes (Velero's PodVolumeBackups, found by the query that found none for the viewer).
    let owner_nabs: Api<NonAdminBackup> = Api::namespaced(app.alice.clone(), &ns);
    owner_nabs
        .create(
            &PostParams::default(),
            &nab("owner-hook", json!({"hooks": hook("by-owner")})),
        )
        .await
        .unwrap();
    let done = backup_completed(&owner_nabs, "owner-hook").await;
    assert!(
        in_pod(&c, &ns, "/scratch/by-owner"),
        "the owner's spec exec hook did not run"
    );
    let velero_status = &done["status"]["veleroBackup"]["status"];
    assert_eq!(
        velero_status["hookStatus"],
        json!({"hooksAttempted": 1}),
        "{velero_status:#}"
    );
    let owner_backup = done["status"]["veleroBackup"]["name"].as_str().unwrap();
    let pvbs = pod_volume_backups(&admin, owner_backup).await;
    assert_eq!(
        phases(&pvbs),
        ["Completed", "Completed"],
        "the owner's PodVolumeBackups: {pvbs:#?}"
    );

    // A hook by annotation, as anyone who may patch the pod's Deployment could add: Velero runs it for any backup
    // that holds the pod, so a viewer's backup holds no pod.
    run(kubectl(&c).args([
        "-n",
        &ns,
        "annotate",
        "pod",
        "app",
        "pre.hook.backup.velero.io/container=app",
        r#"pre.hook.backup.velero.io/command=["sh", "-c", "touch /scratch/annotated"]"#,
    ]));
    viewer_nabs
        .create(&PostParams::default(), &nab("viewer-annotated", json!({})))
        .await
        .unwrap();
    backup_completed(&viewer_nabs, "viewer-annotated").await;
    assert!(
        !in_pod(&c, &ns, "/scratch/annotated"),
        "the annotation's hook ran for the viewer"
    );
    // The owner's: Velero runs the annotation's hook (a pod's annotations take the place of the spec's hooks).
    owner_nabs
        .create(&PostParams::default(), &nab("owner", json!({})))
        .await
        .unwrap();
    let done = backup_completed(&owner_nabs, "owner").await;
    assert!(
        in_pod(&c, &ns, "/scratch/annotated"),
        "the annotation's hook did not run for the owner"
    );
    assert_eq!(
        done["status"]["fileSystemPodVolumeBackups"],
        json!({"total": 2, "completed": 2}),
        "{:#}",
        done["status"]
    );
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
    let mut kept = Vec::new();
    for i in 0..N {
        let name = format!("burst-{i}");
        let v = wait_json(&nabs, &name, Duration::from_secs(120), "Created", |v| {
            v["status"]["phase"] == "Created" && v["status"]["veleroBackup"]["name"].is_string()
        })
        .await;
        kept.push(v["status"]["veleroBackup"]["name"].as_str().unwrap().to_string());
    }
    pod_count_back_to(&admin, 2).await;
    // Counted again once everything settled (a duplicate made late by a replica in its last moments would come
    // after the count above): each backup Completed with its data in the bucket, one Velero Backup each.
    let tally = final_check_of(&c, &admin, &[&ns], &kept, &[], Duration::from_secs(300)).await;
    tally.expect(&[("Completed", N)]);
    assert_eq!((tally.objects, tally.duplicates), (N, 0), "{tally}");
    println!(
        "leader {old_leader} deleted after {} creates; {new_leader} took over; {N} backups, 0 lost, 0 duplicated \
         ({tally})",
        N / 3
    );
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

/// A part of Velero that runs in a pod on the node, killed while a file-system backup runs.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// The Deployment `velero`'s pod: the server that runs the backup.
    Server,
    /// The DaemonSet `node-agent`'s pod: it runs each PodVolumeBackup in a data-path pod of its own.
    NodeAgent,
}

impl Victim {
    fn selector(self) -> &'static str {
        match self {
            Victim::Server => "deploy=velero",
            Victim::NodeAgent => "name=node-agent",
        }
    }
}

/// The one Ready, not deleted pod of `victim`.
async fn victim_pod(admin: &Client, victim: Victim) -> Pod {
    eventually(
        Duration::from_secs(120),
        &format!("{victim:?}'s pod Ready"),
        || async move {
            let pods = Api::<Pod>::namespaced(admin.clone(), VELERO_NS)
                .list(&ListParams::default().labels(victim.selector()))
                .await
                .ok()?
                .items;
            let ready: Vec<&Pod> = nac_pods(&pods);
            (pods.len() == 1 && ready.len() == 1).then(|| ready[0].clone())
        },
    )
    .await
}

/// Kills the pod's containers as a node does when it dies (every process SIGKILLed by the runtime, no SIGTERM
/// first), then deletes the pod object without waiting for the kubelet (`--grace-period=0 --force`): its
/// controller starts a new one.
fn kill_hard(c: &Cluster, pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap();
    for s in pod.status.as_ref().unwrap().container_statuses.iter().flatten() {
        let id = s.container_id.as_deref().unwrap().trim_start_matches("containerd://");
        run(Command::new("ctr")
            .args([
                "--address",
                c.get("CONTAINERD_SOCK"),
                "-n",
                "k8s.io",
                "tasks",
                "kill",
                "--all",
            ])
            .args(["--signal", "SIGKILL", id]));
    }
    run(kubectl(c).args(["-n", VELERO_NS, "delete", "pod", name, "--grace-period=0", "--force"]));
}

/// The S3 server (a host process on the node address) paused while it lives: Velero's uploads stall, so a kill
/// lands mid-run whatever the payload. Resumed on drop, also when the test fails.
struct S3Paused(u32);

impl S3Paused {
    fn new(c: &Cluster) -> S3Paused {
        let pid: u32 = c.get("S3_PID").parse().unwrap();
        run(Command::new("kill").args(["-STOP", &pid.to_string()]));
        S3Paused(pid)
    }
}

impl Drop for S3Paused {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0.to_string()]).status();
    }
}

/// The PodVolumeBackups of Velero backup `backup`, as JSON.
async fn pod_volume_backups(admin: &Client, backup: &str) -> Vec<Value> {
    let gvk = kube::api::GroupVersionKind::gvk("velero.io", "v1", "PodVolumeBackup");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podvolumebackups");
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(admin.clone(), VELERO_NS, &ar);
    let label = format!(
        "{}={}",
        nac::naming::VELERO_BACKUP_NAME_LABEL,
        nac::naming::velero_label_value(backup)
    );
    list_json(api, &ListParams::default().labels(&label)).await
}

fn phases(pvbs: &[Value]) -> Vec<String> {
    pvbs.iter()
        .map(|p| p["status"]["phase"].as_str().unwrap_or("New").to_string())
        .collect()
}

/// NonAdminBackup `name` made, and `victim` killed while one of its PodVolumeBackups is InProgress (the S3 server
/// paused from the moment the node agent takes it on, so its upload stalls there); the S3 server resumed at
/// once. Waits until the NonAdminBackup and every PodVolumeBackup are final and nac's count shows none in
/// progress; returns the NonAdminBackup, its PodVolumeBackups and the time from the kill.
async fn killed_mid_pod_volume_backup(
    c: &Cluster,
    admin: &Client,
    nabs: &Api<NonAdminBackup>,
    name: &str,
    victim: Victim,
) -> (Value, Vec<Value>, Duration) {
    velero_idle(admin).await;
    let pod = victim_pod(admin, victim).await;
    nabs.create(&PostParams::default(), &nab(name, json!({})))
        .await
        .unwrap();
    let made = wait_json(nabs, name, Duration::from_secs(60), "its Velero Backup", |v| {
        v["status"]["veleroBackup"]["name"].is_string()
    })
    .await;
    let backup = made["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    // Taken on by the node agent (its data-path pod made, not yet uploading): the store pauses here.
    eventually(Duration::from_secs(120), "a PodVolumeBackup taken on", || async {
        let p = phases(&pod_volume_backups(admin, &backup).await);
        assert!(
            !p.iter().any(|p| p == "Completed"),
            "a PodVolumeBackup completed before the store paused: {p:?}"
        );
        p.iter()
            .any(|p| matches!(p.as_str(), "Accepted" | "Prepared" | "InProgress"))
            .then_some(())
    })
    .await;
    let paused = S3Paused::new(c);
    let running = eventually(Duration::from_secs(120), "a PodVolumeBackup InProgress", || async {
        let pvbs = pod_volume_backups(admin, &backup).await;
        phases(&pvbs).iter().any(|p| p == "InProgress").then_some(pvbs)
    })
    .await;
    // Stalled on the store for a moment: the kill lands mid-upload, not at its start.
    tokio::time::sleep(Duration::from_secs(2)).await;
    kill_hard(c, &pod);
    let t0 = Instant::now();
    drop(paused);
    // Meanwhile the user sees the run as Velero last reported it.
    let seen = serde_json::to_value(nabs.get(name).await.unwrap()).unwrap();
    assert_eq!(
        seen["status"]["veleroBackup"]["status"]["phase"], "InProgress",
        "{seen}"
    );

    let terminal = |p: &str| matches!(p, "Completed" | "Failed" | "Canceled");
    let pvbs = eventually(Duration::from_secs(300), "every PodVolumeBackup final", || async {
        let pvbs = pod_volume_backups(admin, &backup).await;
        (pvbs.len() == 2 && phases(&pvbs).iter().all(|p| terminal(p))).then_some(pvbs)
    })
    .await;
    // nac's counts end as Velero's objects did (a Canceled one only in the total: OADP's status has no field), a
    // zero count left out as OADP writes them.
    let mut want = json!({"total": 2});
    for (field, phase) in [("completed", "Completed"), ("failed", "Failed")] {
        let n = phases(&pvbs).iter().filter(|p| *p == phase).count();
        if n > 0 {
            want[field] = json!(n);
        }
    }
    let n = wait_json(
        nabs,
        name,
        Duration::from_secs(300),
        "the NonAdminBackup final, counted as Velero's",
        |v| {
            !nac::velero::backup_phase_unfinished(v["status"]["veleroBackup"]["status"]["phase"].as_str())
                && v["status"]["fileSystemPodVolumeBackups"] == want
        },
    )
    .await;
    let recovered = t0.elapsed();
    victim_pod(admin, victim).await;
    println!(
        "{victim:?} killed mid PodVolumeBackup ({:?} then): NonAdminBackup's Velero phase {} after {recovered:?}, \
         PodVolumeBackups {:?} {:?}",
        phases(&running),
        n["status"]["veleroBackup"]["status"]["phase"],
        phases(&pvbs),
        pvbs.iter()
            .map(|p| p["status"]["message"].as_str().unwrap_or(""))
            .collect::<Vec<_>>(),
    );
    (n, pvbs, recovered)
}

/// No nac container restarted, and no panic in the logs of nac's pods.
fn assert_nac_never_panicked(c: &Cluster) {
    let pods: Value = serde_json::from_str(&run(kubectl(c).args([
        "-n",
        NAC_NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=nac",
        "-o",
        "json",
    ])))
    .unwrap();
    let pods = pods["items"].as_array().unwrap();
    // The chart's two replicas at least: a selector that matched nothing would check nothing.
    assert!(pods.len() >= 2, "nac's pods: {pods:#?}");
    for p in pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        for s in p["status"]["containerStatuses"].as_array().into_iter().flatten() {
            assert_eq!(s["restartCount"], 0, "pod {name} restarted: {s}");
        }
        let log = run(kubectl(c).args(["-n", NAC_NS, "logs", name]));
        assert!(!log.contains("panicked at"), "pod {name} panicked:\n{log}");
    }
}

/// Velero's server pod killed (SIGKILL to its processes, the pod force-deleted) while a PodVolumeBackup uploads:
/// the new server fails the backup with its reason and cancels the PodVolumeBackups, the NonAdminBackup says
/// Velero stopped and how to retry. The node agent's pod killed the same way: the new one takes the running
/// data-path pod back and the backup completes, for real (its restore gives the same bytes). The retry completes
/// and restores the same bytes; nothing duplicated, orphaned or stuck.
#[tokio::test]
async fn e_velero_server_and_node_agent_pods_killed_mid_file_system_backup_lose_nothing() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let app = App::new(&c, &admin, "node-kill", 4).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(app.alice.clone(), &app.ns);

    let (server, _, server_recovered) =
        killed_mid_pod_volume_backup(&c, &admin, &nabs, "server-killed", Victim::Server).await;
    failed_by_velero_stopping(&admin, &app.ns, "server-killed", "Backup", &server).await;

    let (agent, agent_pvbs, agent_recovered) =
        killed_mid_pod_volume_backup(&c, &admin, &nabs, "agent-killed", Victim::NodeAgent).await;
    assert_eq!(
        (&agent["status"]["veleroBackup"]["status"]["phase"], phases(&agent_pvbs)),
        (&json!("Completed"), vec!["Completed".to_string(); 2]),
        "the node agent resumes its data path: {agent}"
    );
    let after = app.lose_and_restore(&c, &admin, "agent-killed").await;
    assert_eq!(
        app.before, after,
        "the backup the node agent's kill interrupted restores the same bytes"
    );

    // The retry the Event advises.
    nabs.create(&PostParams::default(), &nab("retry", json!({})))
        .await
        .unwrap();
    let retry = wait_json(&nabs, "retry", Duration::from_secs(300), "the retry Completed", |v| {
        v["status"]["veleroBackup"]["status"]["phase"] == "Completed"
            && v["status"]["fileSystemPodVolumeBackups"]["completed"] == json!(2)
    })
    .await;
    // The uploader its PodVolumeBackups name, for OADP's `describe`.
    assert_eq!(retry["status"]["uploaderType"], "kopia", "{retry}");
    let after = app.lose_and_restore(&c, &admin, "retry").await;
    assert_eq!(app.before, after, "the retry restores the same bytes");

    let velero_name = |n: &Value| n["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let kept = [velero_name(&agent), velero_name(&retry)];
    let tally = final_check_of(&c, &admin, &[&app.ns], &kept, &[], Duration::from_secs(120)).await;
    tally.expect(&[("Completed", 4), ("Failed", 1)]);
    assert_nac_never_panicked(&c);
    for (victim, recovered) in [("server", server_recovered), ("node agent", agent_recovered)] {
        println!(
            "fault: Velero's {victim} pod killed mid file-system backup | recovered in {:.1}s | {tally}",
            recovered.as_secs_f64()
        );
    }
    remove_namespace(&admin, &app.ns).await;
}

// ------------------------------------------------------------------------------------------- CSI, the data mover

/// The node's CSI StorageClass (hack/node-csi.sh: the project's host-path driver).
const CSI_CLASS: &str = "csi-hostpath";

/// A claim of the CSI StorageClass, and a pod that writes `mib` MiB of random data into it; Ready once written.
fn csi_app_yaml(ns: &str, mib: u64) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {ns}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: {CSI_CLASS}
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
      command: [sh, -c, 'test -f /claim/payload || {{ head -c {bytes} /dev/urandom > /claim/.payload && mv /claim/.payload /claim/payload; }}; sync; exec sleep 1000000']
      readinessProbe: {{exec: {{command: [test, -f, /claim/payload]}}, periodSeconds: 1}}
      volumeMounts: [{{name: claim, mountPath: /claim}}]
  volumes:
    - {{name: claim, persistentVolumeClaim: {{claimName: data}}}}
"#,
        bytes = mib * 1024 * 1024
    )
}

/// `kubectl get ARGS -o name`: the names listed.
fn names(c: &Cluster, args: &[&str]) -> Vec<String> {
    run(kubectl(c).args(["get"]).args(args).args(["-o", "name"]))
        .lines()
        .map(str::to_string)
        .collect()
}

/// A tenant whose pod wrote `mib` MiB of random data into a claim of the CSI StorageClass; its checksum then.
struct CsiApp {
    ns: String,
    alice: Client,
    before: String,
}

impl CsiApp {
    /// A CSI app of `mib` MiB in a new tenant namespace, the tenant's NonAdminBackups, and a policy that enforces
    /// the data mover and allows copies into another namespace (restored on drop).
    async fn under_the_data_mover(
        c: &Cluster,
        admin: &Client,
        prefix: &str,
        mib: u64,
    ) -> (CsiApp, Api<NonAdminBackup>, PolicyChanged) {
        let app = CsiApp::new(c, admin, prefix, mib).await;
        let nabs: Api<NonAdminBackup> = Api::namespaced(app.alice.clone(), &app.ns);
        let fields = json!({"snapshotMoveData": true, "snapshotVolumes": true, "defaultVolumesToFsBackup": false});
        let set = fields.clone();
        let policy = PolicyChanged::edit(c, admin, &nabs, fields, move |policy| {
            let mapping = |policy: &mut serde_yaml::Mapping, key: &str| {
                policy
                    .entry(key.into())
                    .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()))
                    .as_mapping_mut()
                    .unwrap()
                    .clone()
            };
            let mut enforced = mapping(policy, "enforceBackupSpec");
            for (k, v) in set.as_object().unwrap() {
                enforced.insert(k.as_str().into(), serde_yaml::to_value(v).unwrap());
            }
            policy.insert("enforceBackupSpec".into(), enforced.into());
            let mut restore = mapping(policy, "restore");
            restore.insert("allowNamespaceCopies".into(), true.into());
            policy.insert("restore".into(), restore.into());
        })
        .await;
        (app, nabs, policy)
    }

    async fn new(c: &Cluster, admin: &Client, prefix: &str, mib: u64) -> CsiApp {
        let (ns, alice) = tenant(c, admin, prefix).await;
        apply(c, &csi_app_yaml(&ns, mib));
        pod_ready(admin, &ns, "app", Duration::from_secs(120)).await;
        let before = csi_checksum(c, &ns);
        CsiApp { ns, alice, before }
    }

    /// The volume the claim is bound to, and its directory on the node (the driver's volume ID is the PV's name).
    fn volume(&self, c: &Cluster) -> (String, PathBuf) {
        let pv = run(kubectl(c).args([
            "-n",
            &self.ns,
            "get",
            "pvc",
            "data",
            "-o",
            "jsonpath={.spec.volumeName}",
        ]));
        let dir = PathBuf::from(c.get("CSI_DIR")).join("volumes").join(&pv);
        (pv, dir)
    }

    /// The data lost (pod and claim deleted; the StorageClass deletes the volume, whose directory goes), then a
    /// NonAdminRestore of NonAdminBackup `backup`: waits until it completed and the restored pod is Ready; returns
    /// the NonAdminRestore and the restored checksum.
    async fn lose_and_restore(&self, c: &Cluster, admin: &Client, backup: &str) -> (Value, String) {
        let ns = self.ns.as_str();
        let (pv, dir) = self.volume(c);
        assert!(
            dir.is_dir(),
            "the claim's volume is a directory of the driver: {}",
            dir.display()
        );
        run(kubectl(c).args(["-n", ns, "delete", "pod", "app", "--wait=true"]));
        run(kubectl(c).args(["-n", ns, "delete", "pvc", "data", "--wait=true"]));
        eventually(Duration::from_secs(60), "the volume deleted with its claim", || async {
            (names(c, &["pv"]).iter().all(|n| *n != format!("persistentvolume/{pv}")) && !dir.exists()).then_some(())
        })
        .await;

        let nars: Api<NonAdminRestore> = Api::namespaced(self.alice.clone(), ns);
        let nar: NonAdminRestore = serde_json::from_value(json!({
            "metadata": {"name": backup}, "spec": {"restoreSpec": {"backupName": backup}}
        }))
        .unwrap();
        nars.create(&PostParams::default(), &nar).await.unwrap();
        let restored = wait_json(&nars, backup, Duration::from_secs(300), "the restore Completed", |v| {
            let phase = v["status"]["veleroRestore"]["status"]["phase"].as_str().unwrap_or("");
            assert!(
                !matches!(phase, "Failed" | "PartiallyFailed" | "FailedValidation"),
                "restore {phase}: {v}"
            );
            phase == "Completed"
        })
        .await;
        pod_ready(admin, ns, "app", Duration::from_secs(120)).await;
        let (pv_after, _) = self.volume(c);
        assert_ne!(pv_after, pv, "a new volume");
        (restored, csi_checksum(c, ns))
    }
}

fn csi_checksum(c: &Cluster, ns: &str) -> String {
    run(kubectl(c).args(["-n", ns, "exec", "app", "--", "sha256sum", "/claim/payload"]))
}

/// The policy in nac's ConfigMap with `enforceBackupSpec` changed; the one before written back on drop (also
/// when the test fails).
struct PolicyChanged {
    kubectl: Vec<String>,
    before: String,
}

impl PolicyChanged {
    /// Enforces `fields` on every backup, and waits until both of nac's pods apply them: a dry-run create of
    /// `probe` (a NonAdminBackup API of a tenant) comes back with them five times in a row.
    async fn enforce(c: &Cluster, admin: &Client, probe: &Api<NonAdminBackup>, fields: Value) -> PolicyChanged {
        let set = fields.clone();
        Self::edit(c, admin, probe, fields, move |policy| {
            let enforced = policy
                .entry("enforceBackupSpec".into())
                .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
            for (k, v) in set.as_object().unwrap() {
                enforced
                    .as_mapping_mut()
                    .unwrap()
                    .insert(k.as_str().into(), serde_yaml::to_value(v).unwrap());
            }
        })
        .await
    }

    /// The policy as `edit` changes it; applied once `probe`'s dry-run creates come back with `fields` enforced.
    async fn edit(
        c: &Cluster,
        admin: &Client,
        probe: &Api<NonAdminBackup>,
        fields: Value,
        edit: impl FnOnce(&mut serde_yaml::Mapping),
    ) -> PolicyChanged {
        let before = common::e2e::chart::current_policy(admin).await;
        let mut policy: serde_yaml::Value = serde_yaml::from_str(&before).unwrap();
        edit(policy.as_mapping_mut().unwrap());
        let guard = PolicyChanged {
            kubectl: vec![
                c.get("KUBECTL").into(),
                "--kubeconfig".into(),
                c.get("KUBECONFIG").into(),
            ],
            before,
        };
        common::e2e::chart::edit_policy(admin, &serde_yaml::to_string(&policy).unwrap())
            .await
            .unwrap();
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let (deadline, mut in_a_row) = (Instant::now() + Duration::from_secs(60), 0);
        while in_a_row < 5 {
            assert!(Instant::now() < deadline, "nac did not apply the policy within 60 s");
            let applied = match probe.create(&dry, &nab("policy-probe", json!({}))).await {
                Ok(made) => {
                    let spec = serde_json::to_value(made).unwrap()["spec"]["backupSpec"].clone();
                    fields.as_object().unwrap().iter().all(|(k, v)| spec[k] == *v)
                }
                Err(_) => false,
            };
            in_a_row = if applied { in_a_row + 1 } else { 0 };
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        guard
    }
}

impl Drop for PolicyChanged {
    fn drop(&mut self) {
        let patch = json!({"data": {"policy.yaml": self.before}}).to_string();
        let put_back = Command::new(&self.kubectl[0])
            .args(&self.kubectl[1..])
            .args([
                "-n",
                NAC_NS,
                "patch",
                "configmap",
                "nac-policy",
                "--type",
                "merge",
                "-p",
                &patch,
            ])
            .output();
        put_back_or_fail("the policy put back", put_back);
    }
}

/// Fails the test when what a guard puts back on drop (the policy, the snapshot controller) was not put back: the
/// next tests would run under the wrong state. Only said on stderr when the test fails already (a second panic
/// would abort the run).
fn put_back_or_fail(what: &str, out: std::io::Result<std::process::Output>) {
    let problem = match out {
        Ok(o) if o.status.success() => return,
        Ok(o) => format!(
            "{}: {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => e.to_string(),
    };
    if std::thread::panicking() {
        eprintln!("{what} failed: {problem}");
    } else {
        panic!("{what} failed: {problem}");
    }
}

/// How long a backup took from its create to Completed, and nac's part of it.
struct Timed {
    took: Duration,
    /// nac: create → Velero Backup.
    made: Duration,
    /// nac: Velero Completed → NonAdminBackup Completed.
    lag: Duration,
    /// Velero and its node agent: Velero Backup → Completed.
    velero: Duration,
}

impl std::fmt::Display for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NonAdminBackup create -> Completed {:?}; nac: create -> Velero Backup {:?}, Velero Completed -> \
             NonAdminBackup Completed {:?}; Velero (and its node agent) {:?}",
            self.took, self.made, self.lag, self.velero
        )
    }
}

/// Waits for NonAdminBackup `name` to complete, polling every 50 ms from both sides for nac's share of the time;
/// returns it and its [`Timed`].
async fn completed_timed(admin: &Client, nabs: &Api<NonAdminBackup>, name: &str, t0: Instant) -> (Value, Timed) {
    let backups: Api<Backup> = Api::namespaced(admin.clone(), VELERO_NS);
    let (mut made_at, mut velero_done_at) = (None, None);
    let done = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "backup {name} did not complete in 5 minutes"
        );
        let v = serde_json::to_value(nabs.get(name).await.unwrap()).unwrap();
        if let Some(b) = v["status"]["veleroBackup"]["name"].as_str() {
            if let Ok(b) = backups.get(b).await {
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
    let (made, velero_done) = (made_at.unwrap(), velero_done_at.unwrap_or(took));
    let timed = Timed {
        took,
        made,
        lag: took.saturating_sub(velero_done),
        velero: velero_done.saturating_sub(made),
    };
    (done, timed)
}

/// No VolumeSnapshot, VolumeSnapshotContent of theirs or claim left in the tenant's namespace or Velero's by a
/// data-mover backup, and no pod of Velero's but its server and node agent.
async fn nothing_left_by_the_data_mover(c: &Cluster, ns: &str) {
    eventually(
        Duration::from_secs(60),
        "no snapshot, temporary claim or pod left",
        || async {
            let mut left = names(c, &["-n", ns, "volumesnapshots"]);
            left.extend(names(c, &["-n", VELERO_NS, "volumesnapshots,persistentvolumeclaims"]));
            left.extend(
                names(c, &["-n", VELERO_NS, "pods"])
                    .into_iter()
                    .filter(|p| !p.starts_with("pod/velero-") && !p.starts_with("pod/node-agent-")),
            );
            let contents: Value =
                serde_json::from_str(&run(kubectl(c).args(["get", "volumesnapshotcontents", "-o", "json"]))).unwrap();
            left.extend(
                contents["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|i| {
                        [ns, VELERO_NS].contains(&i["spec"]["volumeSnapshotRef"]["namespace"].as_str().unwrap_or(""))
                    })
                    .map(|i| format!("volumesnapshotcontent/{}", i["metadata"]["name"].as_str().unwrap())),
            );
            if !left.is_empty() {
                println!("left for now: {left:?}");
            }
            left.is_empty().then_some(())
        },
    )
    .await;
}

/// The NonAdminBackup's status shows every byte of its volume data done (Velero's per-volume progress summed by
/// nac; at least `mib` MiB of payload).
fn assert_all_bytes_done(nab: &Value, mib: u64) {
    let p = &nab["status"]["volumeDataProgress"];
    let (done, total) = (
        p["bytesDone"].as_u64().unwrap_or(0),
        p["totalBytes"].as_u64().unwrap_or(0),
    );
    assert!(
        total >= mib * 1024 * 1024 && done == total,
        "volumeDataProgress {p} for {mib} MiB"
    );
}

/// Bytes under the bucket's kopia repository of namespace `ns` (where Velero's data mover and file-system backup
/// upload volume data).
fn kopia_bytes(c: &Cluster, ns: &str) -> u64 {
    fn size(p: &Path) -> u64 {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => std::fs::read_dir(p).unwrap().flatten().map(|e| size(&e.path())).sum(),
            Ok(m) => m.len(),
            Err(_) => 0,
        }
    }
    size(
        &PathBuf::from(c.get("S3_DATA_DIR"))
            .join(c.get("S3_BUCKET"))
            .join(c.get("S3_PREFIX"))
            .join("kopia")
            .join(ns),
    )
}

#[tokio::test]
async fn f_the_data_mover_backs_up_a_csi_claim_under_policy_and_a_restore_brings_the_same_bytes_back() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let mib: u64 = std::env::var("NODE_DM_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (app, nabs, _policy) = CsiApp::under_the_data_mover(&c, &admin, "node-dm", mib).await;

    // The tenant asks for nothing about volumes; the policy enforces the data mover.
    velero_idle(&admin).await;
    let t0 = Instant::now();
    nabs.create(&PostParams::default(), &nab("moved", json!({})))
        .await
        .unwrap();
    let (done, timed) = completed_timed(&admin, &nabs, "moved", t0).await;
    assert_eq!(done["spec"]["backupSpec"]["snapshotMoveData"], json!(true), "enforced");
    assert_eq!(done["status"]["veleroBackup"]["spec"]["snapshotMoveData"], json!(true));
    // Velero's DataUploads, counted as OADP's controller counts them (a zero count left out).
    let counted = wait_json(&nabs, "moved", Duration::from_secs(60), "the DataUpload counted", |v| {
        v["status"]["dataMoverDataUploads"]["completed"] == json!(1)
    })
    .await;
    assert_eq!(
        counted["status"]["dataMoverDataUploads"],
        json!({"total": 1, "completed": 1})
    );
    // Velero's own objects: the one DataUpload, no PodVolumeBackup (the same queries the viewer's backup is checked
    // with below).
    let moved = counted["status"]["veleroBackup"]["name"].as_str().unwrap();
    assert_eq!(phases(&data_uploads(&admin, moved).await), ["Completed"]);
    let pvbs = pod_volume_backups(&admin, moved).await;
    assert!(pvbs.is_empty(), "{pvbs:#?}");
    assert!(
        counted["status"]["fileSystemPodVolumeBackups"] == json!({}),
        "{:#}",
        counted["status"]
    );
    assert_all_bytes_done(&counted, mib);
    let uploaded = kopia_bytes(&c, &app.ns);
    assert!(
        uploaded >= mib * 1024 * 1024,
        "the claim's {mib} MiB are in the bucket's kopia repository of {}: {uploaded} bytes",
        app.ns
    );
    nothing_left_by_the_data_mover(&c, &app.ns).await;
    println!("data mover backup of 1 x {mib} MiB: {timed}; {uploaded} bytes in the bucket");

    let (restored, after) = app.lose_and_restore(&c, &admin, "moved").await;
    assert_eq!(app.before, after, "the restored claim holds the same bytes");
    let counted = wait_json(
        &Api::<NonAdminRestore>::namespaced(app.alice.clone(), &app.ns),
        "moved",
        Duration::from_secs(60),
        "the DataDownload counted",
        |v| v["status"]["dataMoverDataDownloads"]["completed"] == json!(1),
    )
    .await;
    assert_eq!(
        counted["status"]["dataMoverDataDownloads"],
        json!({"total": 1, "completed": 1}),
        "{restored}"
    );
    nothing_left_by_the_data_mover(&c, &app.ns).await;
    println!("checksum before and after: {after}");

    // A copy into another namespace alice owns: a claim of its own there with the same bytes, each object
    // labelled with where it came from.
    let copy_ns = format!("{}-copy", app.ns);
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": copy_ns}})).unwrap(),
        )
        .await
        .unwrap();
    bind_editor(&admin, &copy_ns, USER).await;
    bind(&admin, &copy_ns, USER, "admin").await;
    may_soon(&admin, &copy_ns, USER, "create", "", "persistentvolumeclaims").await;
    let nars: Api<NonAdminRestore> = Api::namespaced(app.alice.clone(), &app.ns);
    let copy: NonAdminRestore = serde_json::from_value(json!({"metadata": {"name": "copy"},
        "spec": {"restoreSpec": {"backupName": "moved", "namespaceMapping": {&app.ns: &copy_ns}}}}))
    .unwrap();
    nars.create(&PostParams::default(), &copy).await.unwrap();
    wait_json(&nars, "copy", Duration::from_secs(300), "the copy Completed", |v| {
        let phase = v["status"]["veleroRestore"]["status"]["phase"].as_str().unwrap_or("");
        assert!(
            !matches!(phase, "Failed" | "PartiallyFailed" | "FailedValidation"),
            "copy {phase}: {v}"
        );
        phase == "Completed"
    })
    .await;
    pod_ready(&admin, &copy_ns, "app", Duration::from_secs(120)).await;
    assert_eq!(csi_checksum(&c, &copy_ns), app.before, "the copy holds the same bytes");
    let pod = Api::<Pod>::namespaced(admin.clone(), &copy_ns)
        .get("app")
        .await
        .unwrap();
    assert_eq!(
        pod.metadata
            .labels
            .unwrap_or_default()
            .get(nac::naming::COPIED_FROM_NAMESPACE_LABEL),
        Some(&app.ns)
    );
    println!("copy into {copy_ns}: checksum {}", csi_checksum(&c, &copy_ns));
    remove_namespace(&admin, &copy_ns).await;

    // A viewer of the namespace reaches no volume data: its backup holds none, whatever the policy enforces.
    let viewer = format!("viewer-{}", app.ns);
    bind_editor(&admin, &app.ns, &viewer).await;
    bind(&admin, &app.ns, &viewer, "view").await;
    let viewer_nabs: Api<NonAdminBackup> = Api::namespaced(c.as_user(&viewer).await, &app.ns);
    viewer_nabs
        .create(&PostParams::default(), &nab("by-viewer", json!({})))
        .await
        .unwrap();
    let done = backup_completed(&viewer_nabs, "by-viewer").await;
    let spec = &done["status"]["veleroBackup"]["spec"];
    for f in ["snapshotMoveData", "snapshotVolumes", "defaultVolumesToFsBackup"] {
        assert_eq!(spec[f], json!(false), "{f}: {spec:#}");
    }
    // What Velero made for the backup, in its own namespace: nothing that reads volume data.
    let viewer_backup = done["status"]["veleroBackup"]["name"].as_str().unwrap();
    let (dus, pvbs) = (
        data_uploads(&admin, viewer_backup).await,
        pod_volume_backups(&admin, viewer_backup).await,
    );
    assert!(
        dus.is_empty() && pvbs.is_empty(),
        "the viewer's backup moved volume data: DataUploads {dus:#?}, PodVolumeBackups {pvbs:#?}"
    );
    // Velero leaves a zero count out of its status (g shows the field where a snapshot was attempted), and nac's
    // counts are empty (OADP leaves a zero count out).
    let velero_status = &done["status"]["veleroBackup"]["status"];
    assert!(
        velero_status["csiVolumeSnapshotsAttempted"].is_null() && done["status"]["dataMoverDataUploads"] == json!({}),
        "{done:#}"
    );
    remove_namespace(&admin, &app.ns).await;
}

/// A long data-mover upload shows its progress to the tenant while it runs, in the status and in `kubectl nac
/// backup describe`, the tenant's only view (Velero's DataUploads are in Velero's namespace). Velero's uploader
/// reports at most every 10 s, counting bytes as it reads them: the S3 server is paused for longer than that from
/// the first report on, so that the report after it lands mid-run whatever this machine's speed.
#[tokio::test]
async fn fa_a_long_data_upload_shows_its_bytes_done_to_the_tenant_while_it_runs() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    // Large enough that the upload outlasts the uploader's 10 s between reports on this machine (about 80 MB/s).
    let mib: u64 = 1024;
    let (app, nabs, _policy) = CsiApp::under_the_data_mover(&c, &admin, "node-dmprog", mib).await;
    velero_idle(&admin).await;
    nabs.create(&PostParams::default(), &nab("long", json!({})))
        .await
        .unwrap();
    let made = wait_json(&nabs, "long", Duration::from_secs(60), "its Velero Backup", |v| {
        v["status"]["veleroBackup"]["name"].is_string()
    })
    .await;
    let backup = made["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    // The uploader's first report (the total, before any byte is read) starts its 10 s: the store paused from
    // then on for longer than that, the upload stalls part way, and the first report after it shows the part.
    eventually(Duration::from_secs(120), "the DataUpload's first report", || async {
        data_uploads(&admin, &backup)
            .await
            .iter()
            .any(|d| d["status"]["phase"] == "InProgress" && d["status"]["progress"]["totalBytes"].as_i64() > Some(0))
            .then_some(())
    })
    .await;
    let paused = S3Paused::new(&c);
    tokio::time::sleep(Duration::from_secs(12)).await;
    drop(paused);

    // Watched as the tenant sees it, until the backup is final: a status with bytes done short of the total while
    // the upload is still in progress.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = common::e2e::user_kubeconfig(&c, dir.path(), USER, &app.ns);
    let mut seen = Vec::new();
    let mut observed: Vec<String> = Vec::new();
    let mut described = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    let ended = loop {
        let v = serde_json::to_value(nabs.get("long").await.unwrap()).unwrap();
        let s = &v["status"];
        let p = &s["volumeDataProgress"];
        let (done, total) = (
            p["bytesDone"].as_i64().unwrap_or(0),
            p["totalBytes"].as_i64().unwrap_or(0),
        );
        let running = s["dataMoverDataUploads"]["inProgress"].as_i64().unwrap_or(0) > 0;
        let du = data_uploads(&admin, &backup).await;
        let now = format!(
            "status {} {}; DataUploads {:?}",
            s["dataMoverDataUploads"],
            p,
            du.iter()
                .map(|d| (d["status"]["phase"].clone(), d["status"]["progress"].clone()))
                .collect::<Vec<_>>()
        );
        if observed
            .last()
            .is_none_or(|l| l.split_once(": ").map(|x| x.1) != Some(now.as_str()))
        {
            observed.push(format!(
                "{:.1}s: {now}",
                (Instant::now() + Duration::from_secs(300) - deadline).as_secs_f64()
            ));
        }
        if running && done > 0 && done < total {
            seen.push((done, total));
            if described.is_none() {
                let out = Command::new(env!("CARGO_BIN_EXE_kubectl-nac"))
                    .env("KUBECONFIG", &kubeconfig)
                    .args(["backup", "describe", "long"])
                    .output()
                    .unwrap();
                described = Some(String::from_utf8_lossy(&out.stdout).into_owned());
            }
        }
        if !nac::velero::backup_phase_unfinished(s["veleroBackup"]["status"]["phase"].as_str())
            && s["veleroBackup"]["status"]["phase"].is_string()
        {
            break v;
        }
        assert!(Instant::now() < deadline, "the backup did not finish: {s:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        ended["status"]["veleroBackup"]["status"]["phase"], "Completed",
        "{:#}",
        ended["status"]
    );
    assert!(
        !seen.is_empty(),
        "no bytes done short of the total seen while the upload ran:\n{}\n{:#}",
        observed.join("\n"),
        ended["status"]
    );
    let described = described.unwrap();
    assert!(
        described.contains("Volume data:") && described.contains("%)") && !described.contains("(100%)"),
        "{described}"
    );
    let counted = wait_json(&nabs, "long", Duration::from_secs(60), "the DataUpload counted", |v| {
        v["status"]["dataMoverDataUploads"]["completed"] == json!(1)
    })
    .await;
    assert_all_bytes_done(&counted, mib);
    let line = described
        .lines()
        .find(|l| l.starts_with("Volume data:"))
        .unwrap_or_default()
        .to_string();
    println!(
        "data mover progress of 1 x {mib} MiB: {} reading(s) short of the total while running, first {:?}; describe: \
         {line}",
        seen.len(),
        seen[0]
    );
    nothing_left_by_the_data_mover(&c, &app.ns).await;
    remove_namespace(&admin, &app.ns).await;
}

#[tokio::test]
async fn g_csi_snapshots_back_up_a_claim_where_the_policy_allows_and_a_restore_brings_the_same_bytes_back() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let app = CsiApp::new(&c, &admin, "node-snap", 1).await;
    let nabs: Api<NonAdminBackup> = Api::namespaced(app.alice.clone(), &app.ns);
    let _policy = PolicyChanged::enforce(
        &c,
        &admin,
        &nabs,
        json!({"snapshotMoveData": false, "snapshotVolumes": true, "defaultVolumesToFsBackup": false}),
    )
    .await;
    velero_idle(&admin).await;
    let t0 = Instant::now();
    nabs.create(&PostParams::default(), &nab("snapshot", json!({})))
        .await
        .unwrap();
    let (done, timed) = completed_timed(&admin, &nabs, "snapshot", t0).await;
    let status = &done["status"]["veleroBackup"]["status"];
    assert_eq!(status["csiVolumeSnapshotsAttempted"], json!(1), "{status:#}");
    assert_eq!(status["csiVolumeSnapshotsCompleted"], json!(1), "{status:#}");
    let backup = done["status"]["veleroBackup"]["name"].as_str().unwrap();
    let dus = data_uploads(&admin, backup).await;
    assert!(dus.is_empty(), "no data moved: {dus:#?}");
    assert!(done["status"]["dataMoverDataUploads"] == json!({}), "{done:#}");
    // The snapshot stays on the node, as a copy of the volume, as long as the backup: its content is Velero's.
    let (_, volume) = app.volume(&c);
    let snapshots = PathBuf::from(c.get("CSI_DIR")).join("snapshots");
    let copies: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("payload").is_file())
        .collect();
    assert_eq!(copies.len(), 1, "one snapshot of the claim in {}", snapshots.display());
    assert_eq!(
        std::fs::read(copies[0].join("payload")).unwrap(),
        std::fs::read(volume.join("payload")).unwrap()
    );
    assert!(
        names(&c, &["-n", &app.ns, "volumesnapshots"]).is_empty(),
        "Velero keeps only the content"
    );
    println!("CSI snapshot backup of 1 MiB: {timed}");

    let (_, after) = app.lose_and_restore(&c, &admin, "snapshot").await;
    assert_eq!(
        app.before, after,
        "the claim made from the snapshot holds the same bytes"
    );

    // The backup deleted: Velero deletes its snapshot, and the driver the copy.
    let mut patch = json!({"spec": {"deleteBackup": true}});
    patch["metadata"] = json!({});
    nabs.patch(
        "snapshot",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let copy = copies[0].clone();
    eventually(
        Duration::from_secs(180),
        "the snapshot's copy deleted with the backup",
        || {
            let copy = copy.clone();
            async move { (!copy.exists()).then_some(()) }
        },
    )
    .await;
    remove_namespace(&admin, &app.ns).await;
}

/// The snapshot controller stopped while it lives (hack/node-csi.sh), started again on drop, also when the test
/// fails.
struct SnapshotControllerStopped(String);

impl SnapshotControllerStopped {
    fn new(c: &Cluster) -> SnapshotControllerStopped {
        run(Command::new(root().join("hack/node-csi.sh"))
            .arg("--stop-snapshot-controller")
            .env("CLUSTER_DIR", c.get("CLUSTER_DIR")));
        SnapshotControllerStopped(c.get("CLUSTER_DIR").to_string())
    }
}

impl Drop for SnapshotControllerStopped {
    fn drop(&mut self) {
        let started = Command::new(root().join("hack/node-csi.sh"))
            .arg("--start-snapshot-controller")
            .env("CLUSTER_DIR", &self.0)
            .output();
        put_back_or_fail("the snapshot controller started again", started);
    }
}

/// The items of Velero backup `backup`'s tarball in the bucket.
fn tarball(c: &Cluster, backup: &str) -> nac::manifest::Manifest {
    let path = common::velero::bucket_dir_of(c, backup).join(format!("{backup}.tar.gz"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nac::manifest::Manifest::from_tarball(file, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The DataUploads of Velero backup `backup`, as JSON.
async fn data_uploads(admin: &Client, backup: &str) -> Vec<Value> {
    let gvk = kube::api::GroupVersionKind::gvk("velero.io", "v2alpha1", "DataUpload");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "datauploads");
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(admin.clone(), VELERO_NS, &ar);
    let label = format!(
        "{}={}",
        nac::naming::VELERO_BACKUP_NAME_LABEL,
        nac::naming::velero_label_value(backup)
    );
    list_json(api, &ListParams::default().labels(&label)).await
}

/// The data mover's policy, a claim's snapshot asked for while the snapshot controller is down: Velero gives up on
/// it after the backup's csiSnapshotTimeout and ends the backup PartiallyFailed, which the tenant sees in its status
/// and an Event; the VolumeSnapshot it made is deleted, nothing else is made. With the controller back, a retry
/// completes and restores the same bytes.
#[tokio::test]
async fn h_a_backup_started_while_the_snapshot_controller_is_down_ends_partially_failed_and_a_retry_completes() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let (app, nabs, _policy) = CsiApp::under_the_data_mover(&c, &admin, "node-nosnap", 1).await;
    velero_idle(&admin).await;
    let stopped = SnapshotControllerStopped::new(&c);
    nabs.create(
        &PostParams::default(),
        &nab("no-controller", json!({"csiSnapshotTimeout": "15s"})),
    )
    .await
    .unwrap();
    let ended = wait_json(
        &nabs,
        "no-controller",
        Duration::from_secs(180),
        "the backup final",
        |v| {
            !nac::velero::backup_phase_unfinished(v["status"]["veleroBackup"]["status"]["phase"].as_str())
                && v["status"]["veleroBackup"]["status"]["phase"].is_string()
        },
    )
    .await;
    let status = &ended["status"]["veleroBackup"]["status"];
    assert_eq!(status["phase"], "PartiallyFailed", "{:#}", ended["status"]);
    assert!(status["errors"].as_i64().is_some_and(|n| n >= 1), "{status:#}");
    let backup = ended["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let dus = data_uploads(&admin, &backup).await;
    assert!(dus.is_empty(), "no data moved without a snapshot: {dus:#?}");
    assert!(ended["status"]["dataMoverDataUploads"] == json!({}), "{ended:#}");
    let events = eventually(Duration::from_secs(60), "the BackupPartiallyFailed Event", || async {
        let e = common::faults::events_of(&admin, &app.ns, "no-controller", "BackupPartiallyFailed").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(events[0].contains("error"), "{events:?}");
    // Why, in the tenant's own status: Velero's results file read by nac (the tenant cannot read Velero's
    // namespace, and its log names the reason among thousands of lines).
    let explained = wait_json(
        &nabs,
        "no-controller",
        Duration::from_secs(60),
        "the VeleroResults condition",
        |v| condition(v, "VeleroResults").is_some(),
    )
    .await;
    let reason = condition(&explained, "VeleroResults").unwrap();
    assert_eq!(reason["reason"], "ErrorsReported", "{reason:#}");
    let said = reason["message"].as_str().unwrap_or_default().to_string();
    assert!(said.contains("Velero's results say: error: "), "{said}");
    nothing_left_by_the_data_mover(&c, &app.ns).await;
    drop(stopped);

    nabs.create(&PostParams::default(), &nab("retry", json!({})))
        .await
        .unwrap();
    let retry = backup_completed(&nabs, "retry").await;
    let counted = wait_json(&nabs, "retry", Duration::from_secs(60), "the DataUpload counted", |v| {
        v["status"]["dataMoverDataUploads"]["completed"] == json!(1)
    })
    .await;
    nothing_left_by_the_data_mover(&c, &app.ns).await;
    let (_, after) = app.lose_and_restore(&c, &admin, "retry").await;
    assert_eq!(app.before, after, "the retry restores the same bytes");
    // The PartiallyFailed backup's tarball lacks the items whose backup failed (the claim, and the pod that mounts
    // it): only the retry's data is whole.
    let retried = retry["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let (partial, whole) = (tarball(&c, &backup), tarball(&c, &retried));
    let app_items = |m: &nac::manifest::Manifest| {
        (
            m.get("namespaces", "", &app.ns).is_some(),
            m.get("persistentvolumeclaims", &app.ns, "data").is_some(),
            m.get("pods", &app.ns, "app").is_some(),
        )
    };
    assert_eq!(
        app_items(&partial),
        (true, false, false),
        "the PartiallyFailed backup's tarball (namespace, claim, pod): {:?}",
        partial.set()
    );
    assert_eq!(
        app_items(&whole),
        (true, true, true),
        "the retry's tarball (namespace, claim, pod): {:?}",
        whole.set()
    );
    let kept = [retried];
    let tally = final_check_of(&c, &admin, &[&app.ns], &kept, &[], Duration::from_secs(120)).await;
    tally.expect(&[("PartiallyFailed", 1), ("Completed", 2)]);
    println!(
        "fault: the snapshot controller down at a data-mover backup's start | Velero {} with {} error(s), Event: {} | \
         VeleroResults: {said} | retry {} with {} | {tally}",
        status["phase"],
        status["errors"],
        events[0],
        retry["status"]["veleroBackup"]["status"]["phase"],
        counted["status"]["dataMoverDataUploads"]
    );
    remove_namespace(&admin, &app.ns).await;
}

/// The node agent's pod killed hard while a DataUpload runs (the S3 server paused from the moment the node agent
/// takes it on, so its upload stalls there), the S3 server resumed at once: the backup ends with a final phase that
/// nac's counts match, nothing of the data mover is left, and
/// a completed backup (the run itself, else a retry) restores the same bytes.
#[tokio::test]
async fn i_the_node_agent_killed_mid_data_upload_leaves_nothing_behind_and_the_data_comes_back() {
    let c = node_env();
    let admin = c.admin().await;
    installed(&c).await;
    let (app, nabs, _policy) = CsiApp::under_the_data_mover(&c, &admin, "node-dmkill", 4).await;
    velero_idle(&admin).await;
    let pod = victim_pod(&admin, Victim::NodeAgent).await;
    nabs.create(&PostParams::default(), &nab("agent-killed", json!({})))
        .await
        .unwrap();
    let made = wait_json(
        &nabs,
        "agent-killed",
        Duration::from_secs(60),
        "its Velero Backup",
        |v| v["status"]["veleroBackup"]["name"].is_string(),
    )
    .await;
    let backup = made["status"]["veleroBackup"]["name"].as_str().unwrap().to_string();
    let phase_of = |dus: &[Value]| -> Vec<String> { phases(dus) };
    eventually(Duration::from_secs(120), "the DataUpload taken on", || async {
        let p = phase_of(&data_uploads(&admin, &backup).await);
        assert!(
            !p.iter().any(|p| p == "Completed"),
            "completed before the store paused: {p:?}"
        );
        p.iter()
            .any(|p| matches!(p.as_str(), "Accepted" | "Prepared" | "InProgress"))
            .then_some(())
    })
    .await;
    let paused = S3Paused::new(&c);
    eventually(Duration::from_secs(120), "the DataUpload InProgress", || async {
        phase_of(&data_uploads(&admin, &backup).await)
            .iter()
            .any(|p| p == "InProgress")
            .then_some(())
    })
    .await;
    // Stalled on the store for a moment (kopia reports no progress before it reaches the store): the kill lands
    // mid-run, not at its start.
    tokio::time::sleep(Duration::from_secs(2)).await;
    kill_hard(&c, &pod);
    let t0 = Instant::now();
    drop(paused);

    let terminal = |p: &str| matches!(p, "Completed" | "Failed" | "Canceled");
    let dus = eventually(Duration::from_secs(300), "the DataUpload final", || async {
        let dus = data_uploads(&admin, &backup).await;
        (!dus.is_empty() && phase_of(&dus).iter().all(|p| terminal(p))).then_some(dus)
    })
    .await;
    let mut want = json!({"total": dus.len()});
    for (field, phase) in [
        ("completed", "Completed"),
        ("failed", "Failed"),
        ("canceled", "Canceled"),
    ] {
        let n = phase_of(&dus).iter().filter(|p| *p == phase).count();
        if n > 0 {
            want[field] = json!(n);
        }
    }
    let ended = wait_json(
        &nabs,
        "agent-killed",
        Duration::from_secs(300),
        "the NonAdminBackup final, counted as Velero's",
        |v| {
            !nac::velero::backup_phase_unfinished(v["status"]["veleroBackup"]["status"]["phase"].as_str())
                && v["status"]["veleroBackup"]["status"]["phase"].is_string()
                && v["status"]["dataMoverDataUploads"] == want
        },
    )
    .await;
    let recovered = t0.elapsed();
    victim_pod(&admin, Victim::NodeAgent).await;
    nothing_left_by_the_data_mover(&c, &app.ns).await;
    let phase = ended["status"]["veleroBackup"]["status"]["phase"]
        .as_str()
        .unwrap()
        .to_string();
    let good = if phase == "Completed" {
        "agent-killed"
    } else {
        // Not completed: the user's way forward is a new backup.
        nabs.create(&PostParams::default(), &nab("retry", json!({})))
            .await
            .unwrap();
        backup_completed(&nabs, "retry").await;
        nothing_left_by_the_data_mover(&c, &app.ns).await;
        "retry"
    };
    let (_, after) = app.lose_and_restore(&c, &admin, good).await;
    assert_eq!(app.before, after, "{good} restores the same bytes");
    let mut kept = Vec::new();
    for n in nabs.list(&ListParams::default()).await.unwrap() {
        let v = serde_json::to_value(n).unwrap();
        kept.push(v["status"]["veleroBackup"]["name"].as_str().unwrap().to_string());
    }
    let tally = final_check_of(&c, &admin, &[&app.ns], &kept, &[], Duration::from_secs(120)).await;
    // The restore and the completed backup it read; the interrupted backup in its own final phase besides.
    let mut want = BTreeMap::from([("Completed".to_string(), 2)]);
    if phase != "Completed" {
        *want.entry(phase.clone()).or_default() += 1;
    }
    let objects = want.values().sum::<usize>();
    assert_eq!(
        (&tally.states, tally.objects, tally.duplicates, tally.orphans),
        (&want, objects, 0, 0),
        "{tally}"
    );
    assert_nac_never_panicked(&c);
    println!(
        "fault: the node agent's pod killed mid DataUpload | Velero {phase} after \
         {recovered:.1?}, DataUploads {:?} {:?} | restored from {good} | {tally}",
        phase_of(&dus),
        dus.iter()
            .map(|d| d["status"]["message"].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
    );
    remove_namespace(&admin, &app.ns).await;
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

    // What the chart installed, by its label: each query finds its objects before the uninstall, so that finding
    // none after it means they are gone.
    let sel = "app.kubernetes.io/instance=nac";
    let cluster_kinds = [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "clusterroles",
        "clusterrolebindings",
    ];
    let namespaced = "roles,rolebindings,serviceaccounts,services,deployments,configmaps,secrets";
    let labelled = |args: &[&str]| names(&c, &[args, &["-l", sel][..]].concat());
    for kind in cluster_kinds {
        assert!(!labelled(&[kind]).is_empty(), "the query finds no {kind} of the chart");
    }
    for (namespace, kinds) in [
        (
            NAC_NS,
            &[
                "role.rbac.authorization.k8s.io/",
                "rolebinding.rbac.authorization.k8s.io/",
                "serviceaccount/",
                "service/",
                "deployment.apps/",
                "configmap/",
                "secret/",
            ][..],
        ),
        (
            VELERO_NS,
            &[
                "role.rbac.authorization.k8s.io/",
                "rolebinding.rbac.authorization.k8s.io/",
            ][..],
        ),
    ] {
        let found = labelled(&["-n", namespace, namespaced]);
        for kind in kinds {
            assert!(
                found.iter().any(|n| n.starts_with(kind)),
                "the query finds no {kind} of the chart in {namespace}: {found:?}"
            );
        }
    }
    let pod_processes = || {
        processes("nac")
            .iter()
            .filter(|(_, s, _)| s["Uid"].starts_with("65532"))
            .count()
    };
    assert!(!ready_nac_pods(&admin).await.is_empty(), "no pod of nac's found");
    assert!(pod_processes() > 0, "no process of nac's pods found");

    run(helm(&c).args(["uninstall", "nac", "-n", NAC_NS, "--wait", "--timeout", "2m"]));
    for kind in cluster_kinds {
        let left = labelled(&[kind]);
        assert!(left.is_empty(), "{kind} left: {left:?}");
    }
    for namespace in [NAC_NS, VELERO_NS] {
        let left = labelled(&["-n", namespace, namespaced]);
        assert!(left.is_empty(), "left in {namespace}: {left:?}");
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
    assert_eq!(pod_processes(), 0, "a nac process is left");
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
