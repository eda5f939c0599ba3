//! End-to-end harness: the local control plane from `make cluster-up`, a real `nac serve` process registered
//! as the webhook by URL, and namespace users acting through impersonation with real RBAC.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

pub const NAC_NAMESPACE: &str = "nac-system";
pub const VELERO_NAMESPACE: &str = "openshift-adp";
pub const EDITOR_ROLE: &str = "nonadminbackup-editor-role";

/// The local control plane's settings, read from `$CLUSTER_DIR/env`.
pub struct Cluster {
    pub env: HashMap<String, String>,
}

impl Cluster {
    pub fn load() -> Cluster {
        let dir = std::env::var("CLUSTER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join(".cluster"));
        let text = std::fs::read_to_string(dir.join("env")).unwrap_or_else(|e| {
            panic!(
                "no running local control plane in {} ({e}): run `make cluster-up` or use `make test`",
                dir.display()
            )
        });
        let env = text
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches(['"', '\'']).to_string()))
            .collect();
        Cluster { env }
    }

    pub fn get(&self, k: &str) -> &str {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing from cluster env"))
    }

    pub async fn config(&self) -> Config {
        let kc = Kubeconfig::read_from(self.get("KUBECONFIG")).unwrap();
        Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap()
    }

    pub async fn admin(&self) -> Client {
        Client::try_from(self.config().await).unwrap()
    }

    /// A client acting as `user` (with the usual authenticated group), through impersonation.
    pub async fn as_user(&self, user: &str) -> Client {
        let mut cfg = self.config().await;
        cfg.auth_info.impersonate = Some(user.to_string());
        cfg.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        Client::try_from(cfg).unwrap()
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `nac serve` child process. It dies with the test binary: it runs under a shell that kills it when our
/// end of its stdin closes, which happens however this process ends.
pub struct NacProcess {
    pub webhook: SocketAddr,
    pub metrics: SocketAddr,
    child: Child,
    stdin: Option<ChildStdin>,
    pub log: PathBuf,
}

pub struct NacOptions {
    pub controllers: bool,
    pub identity: String,
    pub extra_env: Vec<(String, String)>,
}

impl Default for NacOptions {
    fn default() -> Self {
        NacOptions {
            controllers: true,
            identity: format!("nac-e2e-{}", std::process::id()),
            extra_env: vec![],
        }
    }
}

impl NacProcess {
    pub fn spawn(cluster: &Cluster, opts: NacOptions) -> NacProcess {
        let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::env::temp_dir().join(format!("nac-e2e-{}-{}.log", std::process::id(), webhook.port()));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#""$0" serve & p=$!; cat >/dev/null; kill -TERM $p 2>/dev/null; wait $p"#)
            .arg(env!("CARGO_BIN_EXE_nac"))
            .env("KUBECONFIG", cluster.get("KUBECONFIG"))
            .env("NAC_WEBHOOK__LISTEN", webhook.to_string())
            .env("NAC_METRICS__LISTEN", metrics.to_string())
            .env("NAC_WEBHOOK__CERT_FILE", cluster.get("WEBHOOK_TLS_CERT"))
            .env("NAC_WEBHOOK__KEY_FILE", cluster.get("WEBHOOK_TLS_KEY"))
            .env("NAC_POLICY__NAMESPACE", NAC_NAMESPACE)
            .env("NAC_CONTROLLERS__ENABLED", opts.controllers.to_string())
            .env("NAC_CONTROLLERS__VELERO_NAMESPACE", VELERO_NAMESPACE)
            .env("NAC_CONTROLLERS__LEADER_ELECTION__IDENTITY", &opts.identity)
            .env("NAC_LOG__LEVEL", "info,nac=debug")
            .stdin(Stdio::piped())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        for (k, v) in &opts.extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting nac");
        let stdin = child.stdin.take();
        NacProcess {
            webhook,
            metrics,
            child,
            stdin,
            log,
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(body) = http_get(self.metrics, "/readyz").await {
                if body.0 == 200 {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!("nac did not become ready; log:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The pid of nac itself (the wrapper shell's child).
    pub fn nac_pid(&self) -> Option<u32> {
        let pid = self.child.id();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        kids.split_whitespace().next()?.parse().ok()
    }

    /// Peak resident memory of nac so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.nac_pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    pub async fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default()
    }

    /// Stops nac (SIGTERM through the wrapper) and waits for it.
    pub fn stop(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NacProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Minimal plain-HTTP GET for the health/metrics listener.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: nac\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    Ok((status, body))
}

pub async fn ensure_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// Applies `yaml` (one or more documents) with server-side apply as the admin.
pub async fn apply_yaml(client: &Client, yaml: &str) {
    use kube::core::{DynamicObject, GroupVersionKind};
    for doc in yaml.split("\n---\n").filter(|d| !d.trim().is_empty()) {
        let obj: DynamicObject = serde_yaml::from_str(doc).unwrap();
        let types = obj.types.clone().unwrap();
        let (group, version) = types.api_version.split_once('/').unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
        let api: Api<DynamicObject> = match (caps.scope, obj.metadata.namespace.as_deref()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        let name = obj.metadata.name.clone().unwrap();
        api.patch(&name, &PatchParams::apply("nac-e2e").force(), &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("applying {} {name}: {e}", types.kind));
    }
}

/// The design's editor ClusterRole, bound in `ns` to `user`: the only rights the user has.
pub async fn grant_editor(admin: &Client, ns: &str, user: &str) {
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": EDITOR_ROLE},
        "rules": [
            {"apiGroups": ["oadp.openshift.io"],
             "resources": ["nonadminbackups", "nonadminrestores", "nonadminbackupstoragelocations"],
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
            {"apiGroups": ["oadp.openshift.io"],
             "resources": ["nonadminbackups/status", "nonadminrestores/status", "nonadminbackupstoragelocations/status"],
             "verbs": ["get"]}
        ]
    }))
    .unwrap();
    roles
        .patch(
            EDITOR_ROLE,
            &PatchParams::apply("nac-e2e").force(),
            &Patch::Apply(&role),
        )
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-editor"), "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EDITOR_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .patch(
            &format!("{user}-editor"),
            &PatchParams::apply("nac-e2e").force(),
            &Patch::Apply(&rb),
        )
        .await
        .unwrap();
}

/// Writes the policy ConfigMap (bypassing nothing: the policy webhook checks it when registered).
pub async fn set_policy(admin: &Client, policy_yaml: &str) -> Result<(), kube::Error> {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": "nac-policy",
            "namespace": NAC_NAMESPACE,
            "labels": {"nac.oadp.openshift.io/policy": "true"}
        },
        "data": {"policy.yaml": policy_yaml}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), NAC_NAMESPACE)
        .patch("nac-policy", &PatchParams::apply("nac-e2e").force(), &Patch::Apply(&cm))
        .await
        .map(|_| ())
}

/// Registers `nac` as the cluster's webhooks (by URL, with the generated CA bundle).
pub async fn register_webhooks(cluster: &Cluster, admin: &Client, nac: &NacProcess) {
    let out = Command::new(env!("CARGO_BIN_EXE_nac"))
        .args(["webhook-config", "--url"])
        .arg(format!("https://{}", nac.webhook))
        .arg("--ca-file")
        .arg(cluster.get("WEBHOOK_CA_CERT"))
        .args(["--namespace", NAC_NAMESPACE, "--timeout-seconds", "5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let yaml = String::from_utf8(out.stdout).unwrap();
    apply_yaml(admin, &yaml).await;
}

pub async fn delete_webhooks(admin: &Client) {
    let _ = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .delete("nac-mutating", &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete("nac-validating", &DeleteParams::default())
        .await;
}

/// A unique, valid namespace name for one test.
pub fn unique_ns(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id() % 100_000)
}

/// Polls `f` until it returns Some or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates an object as the given client through a raw request, returning (HTTP status, body, warnings).
pub async fn create_raw(
    client: &Client,
    path: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value, Vec<String>) {
    let req = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    let resp = client.send(req).await.unwrap();
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|w| w.to_str().unwrap_or("").to_string())
        .collect();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or_default(), warnings)
}

/// One shared environment per test binary: nac started with `policy`, registered, ready.
pub struct Env {
    pub cluster: Cluster,
    pub admin: Client,
    pub nac: NacProcess,
}

impl Env {
    pub async fn start(policy: &str, opts: NacOptions) -> Env {
        let cluster = Cluster::load();
        let admin = cluster.admin().await;
        ensure_namespace(&admin, NAC_NAMESPACE).await;
        // Register nothing stale from an earlier run before the policy is written.
        delete_webhooks(&admin).await;
        set_policy(&admin, policy).await.unwrap();
        let nac = NacProcess::spawn(&cluster, opts);
        nac.wait_ready().await;
        register_webhooks(&cluster, &admin, &nac).await;
        Env { cluster, admin, nac }
    }

    /// A fresh namespace with `user` holding only the editor role in it; returns (namespace, user client).
    pub async fn tenant(&self, prefix: &str) -> (String, Client) {
        let ns = unique_ns(prefix);
        ensure_namespace(&self.admin, &ns).await;
        let user = format!("user-{ns}");
        grant_editor(&self.admin, &ns, &user).await;
        let client = self.cluster.as_user(&user).await;
        (ns, client)
    }
}
