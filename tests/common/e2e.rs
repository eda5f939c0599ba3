//! End-to-end harness: the local control plane from `make cluster-up`, a real `nac serve` process registered
//! as the webhook by URL, and namespace users acting through impersonation with real RBAC.
//!
//! Chart mode (`NAC_E2E_CHART=1`): instead of registering nac itself, the harness installs the Helm chart
//! (`helm upgrade --install` of charts/nac into [`NAC_NAMESPACE`]) with `webhook.url` pointing at the local nac
//! process, and the suite runs against what the chart installed: its webhook configurations, its policy
//! ConfigMap, its editor ClusterRole for users, and nac running with a token of the chart's ServiceAccount, so
//! the chart's least-privilege RBAC is all nac has. See [`chart`].

use futures::future::BoxFuture;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

pub const NAC_NAMESPACE: &str = "nac-system";
pub use super::VELERO_NAMESPACE;
pub const EDITOR_ROLE: &str = "nonadminbackup-editor-role";
/// The policy ConfigMap nac reads (nac's default, and the chart's `policyConfigMap.name`).
pub const POLICY_CONFIGMAP: &str = "nac-policy";

/// The local control plane's settings, read from `$CLUSTER_DIR/env`.
pub struct Cluster {
    pub env: HashMap<String, String>,
}

/// Which Velero a test binary needs. A real Velero acts on every Backup and Restore in its namespace (it fails
/// in-progress ones at start and deletes completed ones missing from the bucket), so tests that play Velero by
/// patching status and tests with the real server never share a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VeleroMode {
    /// No Velero server (`VELERO_MODE=fake make cluster-up`): the test writes Velero's status. The cluster is
    /// `$CLUSTER_DIR`.
    Fake,
    /// The real Velero server and S3 server of `make cluster-up`. The cluster is `$VELERO_CLUSTER_DIR`, or
    /// `$CLUSTER_DIR` when that is unset.
    Real,
}

static MODE: std::sync::OnceLock<VeleroMode> = std::sync::OnceLock::new();

/// Declares this test binary's Velero mode (default [`VeleroMode::Fake`]); call before the first [`Env`].
pub fn use_velero(mode: VeleroMode) {
    assert_eq!(*MODE.get_or_init(|| mode), mode, "a test binary uses one Velero mode");
}

impl Cluster {
    pub fn load() -> Cluster {
        let mode = *MODE.get_or_init(|| VeleroMode::Fake);
        let var = match mode {
            VeleroMode::Real if std::env::var_os("VELERO_CLUSTER_DIR").is_some() => "VELERO_CLUSTER_DIR",
            _ => "CLUSTER_DIR",
        };
        let dir = std::env::var(var)
            .map(PathBuf::from)
            .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join(".cluster"));
        let up = match mode {
            VeleroMode::Fake => "VELERO_MODE=fake make cluster-up",
            VeleroMode::Real => "make cluster-up",
        };
        let text = std::fs::read_to_string(dir.join("env")).unwrap_or_else(|e| {
            panic!(
                "no running local control plane in {} ({e}): run `CLUSTER_DIR={} {up}` or use `make test`",
                dir.display(),
                dir.display()
            )
        });
        let env = parse_env(&text);
        let running = match env.get("VELERO_MODE").map(String::as_str) {
            Some("real") => VeleroMode::Real,
            _ => VeleroMode::Fake,
        };
        assert_eq!(
            running,
            mode,
            "this test needs a cluster with {mode:?} Velero, but {var}={} runs {running:?} Velero: start one with \
             `CLUSTER_DIR=<dir> {up}` and point {var} at it (make test runs both)",
            dir.display()
        );
        let cluster = Cluster { env };
        if running == VeleroMode::Real {
            super::velero::watch_velero_queue(&cluster);
        }
        cluster
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

/// The `export KEY=value` lines of an environment's `env` file.
pub fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches(['"', '\'']).to_string()))
        .collect()
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
    /// The wrapper shell and our end of its stdin (dropping it stops nac).
    child: std::sync::Mutex<(Child, Option<ChildStdin>)>,
    /// How nac was started, to start it again ([`NacProcess::restart`]).
    cmd: std::sync::Mutex<Command>,
    pub log: PathBuf,
    /// Chart mode: nac's kubeconfig (a ServiceAccount token of the test cluster, valid 2 h), next to nac's log;
    /// removed on drop (a binary's shared `static` Env is never dropped: like the log, it then stays).
    kubeconfig: Option<PathBuf>,
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
        NacProcess::spawn_on(cluster, opts, webhook)
    }

    /// Like [`NacProcess::spawn`], with the webhook listener on `webhook` (an installation may fix the webhook
    /// URL before nac starts), and the credentials and settings the installation gives nac.
    pub fn spawn_on(cluster: &Cluster, opts: NacOptions, webhook: SocketAddr) -> NacProcess {
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::env::temp_dir().join(format!("nac-e2e-{}-{}.log", std::process::id(), webhook.port()));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            // NAC_E2E_BIN, when set, runs another build (the scale run's side-by-side restarts), without the
            // settings older builds refuse as unknown.
            .arg(concat!(
                r#"[ -z "$NAC_E2E_BIN" ] || unset NAC_RIGHTS__AUTHORIZERS; "#,
                r#""${NAC_E2E_BIN:-$0}" serve & p=$!; cat >/dev/null; kill -TERM $p 2>/dev/null; wait $p"#
            ))
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
            // The local control plane authorizes with Node and RBAC only: rights answers last until an RBAC change.
            .env("NAC_RIGHTS__AUTHORIZERS", "rbac")
            .stdin(Stdio::piped())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        let (env, kubeconfig) = install().nac_env(cluster, &log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        for (k, v) in &opts.extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting nac");
        let stdin = child.stdin.take();
        NacProcess {
            webhook,
            metrics,
            child: std::sync::Mutex::new((child, stdin)),
            cmd: std::sync::Mutex::new(cmd),
            log,
            kubeconfig,
        }
    }

    /// Stops nac (SIGTERM) and starts it again with the same settings and addresses (its log goes on in the same
    /// file); returns once the new process is ready.
    pub async fn restart(&self) {
        self.restart_with(None).await
    }

    /// [`NacProcess::restart`] with another nac binary (`None`: the one of this build).
    pub async fn restart_with(&self, binary: Option<&str>) {
        self.start_again(binary);
        self.wait_ready().await;
    }

    /// Stops nac and starts it again without waiting for it to be ready (a test of what it does when it cannot be).
    pub fn start_again(&self, binary: Option<&str>) {
        self.stop();
        {
            let mut cmd = self.cmd.lock().unwrap();
            match binary {
                Some(b) => cmd.env("NAC_E2E_BIN", b),
                None => cmd.env_remove("NAC_E2E_BIN"),
            };
            let logf = std::fs::OpenOptions::new().append(true).open(&self.log).unwrap();
            cmd.stdout(logf.try_clone().unwrap()).stderr(logf).stdin(Stdio::piped());
            let mut child = cmd.spawn().expect("starting nac again");
            let stdin = child.stdin.take();
            *self.child.lock().unwrap() = (child, stdin);
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
        let pid = self.child.lock().unwrap().0.id();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        kids.split_whitespace().next()?.parse().ok()
    }

    /// Peak resident memory of nac so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.proc_status_kib("VmHWM:")
    }

    /// Resident memory of nac now (VmRSS), in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        self.proc_status_kib("VmRSS:")
    }

    /// A field of nac's /proc status in KiB (e.g. `RssAnon:`, `RssFile:`).
    pub fn proc_status_kib(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.nac_pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// nac's `/metrics` text; a read that fails, or any answer but 200, fails the test (an empty text would read
    /// as no writes and no leader).
    pub async fn metrics_text(&self) -> String {
        match http_get(self.metrics, "/metrics").await {
            Ok((200, text)) => text,
            Ok((status, text)) => panic!("nac's /metrics answered {status}: {text}\n{}", self.log_tail()),
            Err(e) => panic!("reading nac's /metrics on {}: {e}\n{}", self.metrics, self.log_tail()),
        }
    }

    /// Stops nac (SIGTERM through the wrapper) and waits for it.
    pub fn stop(&self) {
        let mut guard = self.child.lock().unwrap();
        let (child, stdin) = &mut *guard;
        stdin.take();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for NacProcess {
    fn drop(&mut self) {
        self.stop();
        if let Some(path) = self.kubeconfig.take() {
            let _ = std::fs::remove_file(path);
        }
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
    install().editor_role(admin).await;
    bind_editor(admin, ns, user).await;
    // A namespace owner: Kubernetes' `admin` role there, so their backups may read the namespace (a backup
    // leaves out what its requester may not list). Tests of narrower users use `bind_editor` alone.
    bind(admin, ns, user, "admin").await;
    may_soon(admin, ns, user, "list", "", "secrets").await;
}

/// A Secret `app` in `ns`, made as `admin`: something a tenant may hold and not be allowed to read.
pub async fn create_app_secret(admin: &Client, ns: &str) {
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({"metadata": {"name": "app"}, "stringData": {"k": "v"}})).unwrap();
    Api::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Binds `user` to the ClusterRole `role` in `ns`.
pub async fn bind(admin: &Client, ns: &str, user: &str, role: &str) {
    let name = format!("{user}-{role}");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .patch(&name, &PatchParams::apply("nac-e2e").force(), &Patch::Apply(&rb))
        .await
        .unwrap();
}

pub async fn bind_editor(admin: &Client, ns: &str, user: &str) {
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
    may_soon(admin, ns, user, "create", "oadp.openshift.io", "nonadminbackups").await;
}

/// Waits until the API server's authorizer has seen a binding just made: `user` may `verb` `resource` of `group`
/// in `ns`. Its RBAC cache lags behind a write by milliseconds, longer under load: a request in that window is
/// refused.
pub async fn may_soon(admin: &Client, ns: &str, user: &str, verb: &str, group: &str, resource: &str) {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {"user": user,
        "groups": ["system:authenticated"],
        "resourceAttributes": {"namespace": ns, "verb": verb, "group": group, "resource": resource}}}))
    .unwrap();
    let api: Api<SubjectAccessReview> = Api::all(admin.clone());
    eventually(
        Duration::from_secs(60),
        &format!("{user} may {verb} {resource} in {ns}"),
        || {
            let (api, review) = (api.clone(), review.clone());
            async move {
                let r = api.create(&PostParams::default(), &review).await.ok()?;
                r.status.filter(|s| s.allowed).map(|_| ())
            }
        },
    )
    .await;
}

/// Writes the policy as an admin would (bypassing nothing: the policy webhook checks it when registered).
pub async fn set_policy(admin: &Client, policy_yaml: &str) -> Result<(), kube::Error> {
    install().set_policy(admin, policy_yaml).await
}

/// Registers `nac` as the cluster's webhooks; re-creates deleted webhook configurations.
pub async fn register_webhooks(cluster: &Cluster, admin: &Client, nac: &NacProcess) {
    install().register_webhooks(cluster, admin, nac).await
}

/// How nac gets into the test cluster, chosen once per test binary by [`chart::MODE_ENV`]: the harness installs
/// it itself ([`Direct`]) or the Helm chart does ([`chart::Chart`]). Helpers call [`install()`] and never ask which.
pub trait Install: Sync {
    /// Before nac starts with its webhook listener on `webhook`: the policy and whatever nac needs to run.
    fn before_nac<'a>(
        &'a self,
        cluster: &'a Cluster,
        admin: &'a Client,
        webhook: SocketAddr,
        policy: &'a str,
    ) -> BoxFuture<'a, ()>;
    /// Once nac is ready: what the installation does then (the webhooks, when they are registered after nac).
    fn after_nac<'a>(&'a self, cluster: &'a Cluster, admin: &'a Client, nac: &'a NacProcess) -> BoxFuture<'a, ()>;
    /// The environment the installation gives the nac process (credentials, settings), and a file of it to remove
    /// when nac stops.
    fn nac_env(&self, cluster: &Cluster, log: &Path) -> (Vec<(String, String)>, Option<PathBuf>);
    /// Registers nac's webhooks (again: deleted webhook configurations come back).
    fn register_webhooks<'a>(
        &'a self,
        cluster: &'a Cluster,
        admin: &'a Client,
        nac: &'a NacProcess,
    ) -> BoxFuture<'a, ()>;
    /// Makes sure the user roles exist (the editor ClusterRole users are bound to).
    fn editor_role<'a>(&'a self, admin: &'a Client) -> BoxFuture<'a, ()>;
    /// Writes the policy document as an admin would.
    fn set_policy<'a>(&'a self, admin: &'a Client, policy: &'a str) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// The installation in use.
pub fn install() -> &'static dyn Install {
    if chart::enabled() {
        &chart::Chart
    } else {
        &Direct
    }
}

/// The harness installs nac itself: the policy ConfigMap it writes, `nac webhook-config` for the webhooks (by
/// URL, leaving out nac's own requests as the chart does), hack/demo-rbac.yaml for the user roles (as `make run`
/// does); nac runs with the admin's rights, as its ServiceAccount's user ([`write_nac_kubeconfig`]).
pub struct Direct;

/// The local control plane's admin user (hack/cluster-up.sh's admin certificate).
pub const ADMIN_USER: &str = "admin";

/// Writes a kubeconfig for nac with a client certificate of the cluster's CA for `user` in group `system:masters`
/// (made once per control plane, beside the admin's): the API server sees nac's requests as its ServiceAccount's,
/// as in a cluster, so the webhooks' match conditions on nac's user apply, and nac keeps the admin's rights at
/// the admin's cost per request. (A ServiceAccount token, or impersonation with a ServiceAccount's groups, cost
/// the local API server many times the CPU per request of a certificate of `system:masters`: the scale run would
/// measure that instead of nac.)
pub fn write_nac_kubeconfig(cluster: &Cluster, path: &Path, user: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pki = cluster.get("PKI_DIR");
    let out = format!("{pki}/nac-e2e");
    let made = Command::new("bash")
        .arg("-c")
        .arg(r#"source "$1/hack/lib/cluster.sh" && new_cert "$2" "$3" "/O=system:masters/CN=$4" clientAuth"#)
        .args(["nac-e2e-cert", env!("CARGO_MANIFEST_DIR"), pki, &out, user])
        .status()
        .expect("running openssl through hack/lib/cluster.sh");
    assert!(made.success(), "making nac's client certificate in {pki}");
    let text = std::fs::read_to_string(cluster.get("KUBECONFIG")).unwrap();
    let mut kc: Value = serde_yaml::from_str(&text).unwrap();
    for u in kc["users"].as_array_mut().expect("kubeconfig users") {
        let creds = u["user"].as_object_mut().expect("kubeconfig user");
        creds.remove("client-certificate-data");
        creds.remove("client-key-data");
        creds.insert("client-certificate".into(), json!(format!("{out}.crt")));
        creds.insert("client-key".into(), json!(format!("{out}.key")));
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(serde_json::to_string_pretty(&kc).unwrap().as_bytes())
        .unwrap();
}

impl Install for Direct {
    fn before_nac<'a>(
        &'a self,
        _: &'a Cluster,
        admin: &'a Client,
        _: SocketAddr,
        policy: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // A webhook configuration deleted a moment ago may still be in the API server's cache, calling a nac
            // that is gone: the write is refused until the cache catches up.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match self.set_policy(admin, policy).await {
                    Ok(()) => return,
                    Err(kube::Error::Api(e))
                        if e.message.contains("failed calling webhook") && Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_millis(200)).await
                    }
                    Err(e) => panic!("writing the policy ConfigMap: {e}"),
                }
            }
        })
    }

    fn after_nac<'a>(&'a self, cluster: &'a Cluster, admin: &'a Client, nac: &'a NacProcess) -> BoxFuture<'a, ()> {
        self.register_webhooks(cluster, admin, nac)
    }

    fn nac_env(&self, cluster: &Cluster, log: &Path) -> (Vec<(String, String)>, Option<PathBuf>) {
        let path = log.with_extension("kubeconfig");
        let me = chart::service_account_user();
        write_nac_kubeconfig(cluster, &path, &me);
        let env = vec![
            ("KUBECONFIG".to_string(), path.display().to_string()),
            // The tests play nac's part with the admin's client where they must (as nac did when it ran as the
            // admin): the admin stays privileged at nac's webhooks.
            (
                "NAC_WEBHOOK__PRIVILEGED_USERS".to_string(),
                format!("{me},{ADMIN_USER}"),
            ),
        ];
        (env, Some(path))
    }

    fn register_webhooks<'a>(
        &'a self,
        cluster: &'a Cluster,
        admin: &'a Client,
        nac: &'a NacProcess,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let out = Command::new(env!("CARGO_BIN_EXE_nac"))
                .args(["webhook-config", "--url"])
                .arg(format!("https://{}", nac.webhook))
                .arg("--ca-file")
                .arg(cluster.get("WEBHOOK_CA_CERT"))
                .args(["--namespace", NAC_NAMESPACE, "--velero-namespace", VELERO_NAMESPACE])
                .args(["--timeout-seconds", "5"])
                .args(["--service-account", chart::SERVICE_ACCOUNT])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let yaml = String::from_utf8(out.stdout).unwrap();
            apply_yaml(admin, &yaml).await;
        })
    }

    fn editor_role<'a>(&'a self, admin: &'a Client) -> BoxFuture<'a, ()> {
        Box::pin(apply_yaml(admin, include_str!("../../hack/demo-rbac.yaml")))
    }

    fn set_policy<'a>(&'a self, admin: &'a Client, policy: &'a str) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {
                    "name": POLICY_CONFIGMAP,
                    "namespace": NAC_NAMESPACE,
                    "labels": {"nac.oadp.openshift.io/policy": "true"}
                },
                "data": {"policy.yaml": policy}
            }))
            .unwrap();
            Api::<ConfigMap>::namespaced(admin.clone(), NAC_NAMESPACE)
                .patch(
                    POLICY_CONFIGMAP,
                    &PatchParams::apply("nac-e2e").force(),
                    &Patch::Apply(&cm),
                )
                .await
                .map(|_| ())
        })
    }
}

/// Deletes the webhook configurations. The chart's have the same names (`<fullname>-mutating`/`-validating`,
/// fullname `nac` for release `nac`), so this also removes the chart's until the next `helm upgrade`.
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

/// Asserts that no DeleteBackupRequest matching the label selector `sel` exists in the Velero namespace.
pub async fn assert_no_delete_requests(admin: &Client, sel: &str) {
    let dbrs: Api<nac::velero::DeleteBackupRequest> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let left = dbrs
        .list(&kube::api::ListParams::default().labels(sel))
        .await
        .unwrap()
        .items;
    assert!(left.is_empty(), "DeleteBackupRequests left for {sel}: {}", left.len());
}

/// An object as a timed-out wait reports it: its status first, then the rest without `managedFields` (which
/// would fill the report before the status is reached), at most 3,000 characters.
fn last_seen<K: serde::Serialize>(object: Option<&K>) -> String {
    let Some(object) = object else {
        return "nothing (no such object)".into();
    };
    let mut v = serde_json::to_value(object).unwrap_or_default();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let status = v.as_object_mut().and_then(|o| o.remove("status")).unwrap_or_default();
    format!("status {status}; object {v}").chars().take(3000).collect()
}

/// Waits until `check` accepts object `name` as a watch of it shows it (`None`: it does not exist), and returns
/// what `check` made of it. Watch-driven: the API server reports each change, nothing is polled. Panics after
/// `timeout`, naming `what` and the last state seen.
pub async fn wait_for<K, T>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    check: impl Fn(Option<&K>) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::runtime::WatchStreamExt;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api.clone(), config).default_backoff());
    let deadline = tokio::time::Instant::now() + timeout;
    // The state is only judged outside a (re)list: mid-list, "not seen yet" does not mean "gone".
    let (mut current, mut listing, mut in_list): (Option<K>, Option<K>, bool) = (None, None, true);
    loop {
        let ev = match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(ev))) => ev,
            Ok(Some(Err(_))) => continue,
            Ok(None) => unreachable!("a watcher stream does not end"),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what}; last seen: {}",
                last_seen(current.as_ref())
            ),
        };
        match ev {
            Event::Init => (listing, in_list) = (None, true),
            Event::InitApply(o) => listing = Some(o),
            Event::InitDone => (current, in_list) = (listing.take(), false),
            Event::Apply(o) => current = Some(o),
            Event::Delete(_) => current = None,
        }
        if in_list {
            continue;
        }
        if let Some(v) = check(current.as_ref()) {
            return v;
        }
    }
}

/// Waits (watch-driven) until object `name` is gone.
/// Waits until object `name`, as JSON, passes `check`; returns it.
pub async fn wait_json<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
{
    wait_for(api, name, timeout, what, |o| {
        let v = serde_json::to_value(o?).unwrap();
        check(&v).then_some(v)
    })
    .await
}

/// Waits up to `timeout` for the Event with `reason` about object `name` in `ns`, and returns it.
pub async fn event_about(
    admin: &Client,
    ns: &str,
    name: &str,
    reason: &str,
    timeout: Duration,
) -> k8s_openapi::api::core::v1::Event {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), ns);
    let fields = format!("involvedObject.name={name}");
    eventually(timeout, &format!("the {reason} Event of {name}"), || async {
        events
            .list(&kube::api::ListParams::default().fields(&fields))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    })
    .await
}

/// A kubeconfig acting as `user` in `ns`, written into `dir`: the admin's of `c`, impersonating the user (a
/// client such as the plugin then has only the user's rights).
pub fn user_kubeconfig(c: &Cluster, dir: &Path, user: &str, ns: &str) -> PathBuf {
    let mut kc = Kubeconfig::read_from(c.get("KUBECONFIG")).unwrap();
    for a in &mut kc.auth_infos {
        if let Some(info) = a.auth_info.as_mut() {
            info.impersonate = Some(user.to_string());
            info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        }
    }
    for ctx in &mut kc.contexts {
        if let Some(c) = ctx.context.as_mut() {
            c.namespace = Some(ns.to_string());
        }
    }
    let path = dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
}

/// `(status, reason)` of condition `ty` of an object as JSON (empty when it has none).
pub fn condition_of(v: &Value, ty: &str) -> (String, String) {
    condition(v, ty)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"))
        })
        .unwrap_or_default()
}

/// Condition `ty` of an object as JSON, whole.
pub fn condition(v: &Value, ty: &str) -> Option<Value> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
{
    wait_for(api, name, timeout, what, |o| o.is_none().then_some(())).await
}

/// Polls `f` until it returns Some or `timeout` passes: for what no single-object watch shows (lists by label,
/// metrics, files in the bucket).
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
        // The webhook address is fixed first: an installation may register it before nac starts.
        let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        install().before_nac(&cluster, &admin, webhook, policy).await;
        let nac = NacProcess::spawn_on(&cluster, opts, webhook);
        nac.wait_ready().await;
        install().after_nac(&cluster, &admin, &nac).await;
        Env { cluster, admin, nac }
    }

    /// A fresh namespace with `user` holding only the editor role in it; returns (namespace, user client).
    pub async fn tenant(&self, prefix: &str) -> (String, Client) {
        let (ns, user, _) = new_tenant(prefix).await;
        (ns, user)
    }
}

/// A fresh namespace whose user holds only the editor role there: (namespace, user client, admin client).
/// The clients are made in the calling test's runtime (a kube client is bound to the runtime that made it), so
/// tests sharing one nac process each call this rather than reusing the shared [`Env`]'s clients.
pub async fn new_tenant(prefix: &str) -> (String, Client, Client) {
    let c = Cluster::load();
    let admin = c.admin().await;
    let ns = unique_ns(prefix);
    ensure_namespace(&admin, &ns).await;
    let user = format!("user-{ns}");
    grant_editor(&admin, &ns, &user).await;
    (ns, c.as_user(&user).await, admin)
}

/// Chart mode (`NAC_E2E_CHART=1`): the suite against what `helm install` of charts/nac puts in the cluster.
///
/// The release `nac` in [`NAC_NAMESPACE`] is installed or upgraded by every [`Env::start`] (`helm upgrade
/// --install`, so test binaries can run one after the other on one control plane) with
/// - `certs.mode=existing`: a Secret made from the control plane's `pki/webhook` certificate, the one the local
///   nac serves; `webhook.url` at the local nac and `webhook.caBundle` = `WEBHOOK_CA_CERT`;
/// - `policy` = the test's policy, rendered by the chart into its policy ConfigMap ([`POLICY_CONFIGMAP`]);
/// - `velero.namespace` = [`VELERO_NAMESPACE`].
///
/// nac runs with a kubeconfig holding a token of the chart's ServiceAccount (the Deployment's identity), so the
/// chart's RBAC is exactly what nac has; users are bound to the chart's editor ClusterRole.
///
/// `NAC_E2E_CHART` is not a nac setting (no `__`), so nac processes started with it in their environment ignore it.
pub mod chart {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    use kube::api::ListParams;
    use std::collections::BTreeMap;

    /// The variable that turns chart mode on (`1` or `true`).
    pub const MODE_ENV: &str = "NAC_E2E_CHART";
    /// The Helm release; the chart's full name is the release name (it contains "nac").
    pub const RELEASE: &str = "nac";
    /// The chart's ServiceAccount (`serviceAccount.name` empty: the full name).
    pub const SERVICE_ACCOUNT: &str = "nac";
    /// The chart's read-only user role (`userRoles.viewerName`); the editor is [`EDITOR_ROLE`].
    pub const VIEWER_ROLE: &str = "nonadminbackup-viewer-role";
    /// The `certs.existing.secretName` the harness creates.
    pub const TLS_SECRET: &str = "nac-e2e-webhook-tls";

    pub fn enabled() -> bool {
        matches!(std::env::var(MODE_ENV).as_deref(), Ok("1" | "true"))
    }

    fn repo(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
    }

    fn tool(rel: &str, how: &str) -> PathBuf {
        let p = repo(rel);
        assert!(p.is_file(), "chart mode needs {} ({how})", p.display());
        p
    }

    /// The user nac authenticates as: the chart's ServiceAccount.
    pub fn service_account_user() -> String {
        format!("system:serviceaccount:{NAC_NAMESPACE}:{SERVICE_ACCOUNT}")
    }

    /// Writes a kubeconfig for nac with a fresh token of the chart's ServiceAccount.
    pub fn write_service_account_kubeconfig(cluster: &Cluster, path: &Path) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let out = Command::new(tool("bin/kubectl", "make cluster-up builds it"))
            .arg("--kubeconfig")
            .arg(cluster.get("KUBECONFIG"))
            .args(["-n", NAC_NAMESPACE, "create", "token", SERVICE_ACCOUNT, "--duration=2h"])
            .output()
            .expect("running kubectl create token");
        assert!(
            out.status.success(),
            "a token for ServiceAccount {NAC_NAMESPACE}/{SERVICE_ACCOUNT} (installed by the chart): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let token = String::from_utf8(out.stdout).unwrap();
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": cluster.get("KUBE_APISERVER_URL"),
                "certificate-authority": cluster.get("CA_CERT"),
            }}],
            "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token.trim()}}],
            "contexts": [{"name": "nac", "context": {
                "cluster": "local", "user": SERVICE_ACCOUNT, "namespace": NAC_NAMESPACE,
            }}],
            "current-context": "nac",
        });
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .unwrap();
        f.write_all(serde_json::to_string_pretty(&kubeconfig).unwrap().as_bytes())
            .unwrap();
    }

    /// Before `helm upgrade --install`: the serving certificate Secret (certs.mode=existing); objects with the
    /// chart's names that Helm does not own (the default mode's policy ConfigMap and editor role, or
    /// hack/demo-rbac.yaml), which would make the install fail; a release left pending by a test binary killed
    /// mid-upgrade, which would block every later upgrade.
    pub async fn prepare(cluster: &Cluster, admin: &Client) {
        let read = |k: &str| std::fs::read(cluster.get(k)).unwrap_or_else(|e| panic!("{}: {e}", cluster.get(k)));
        let data = BTreeMap::from([
            ("tls.crt".to_string(), ByteString(read("WEBHOOK_TLS_CERT"))),
            ("tls.key".to_string(), ByteString(read("WEBHOOK_TLS_KEY"))),
        ]);
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(TLS_SECRET.into()),
                namespace: Some(NAC_NAMESPACE.into()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Default::default()
        };
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), NAC_NAMESPACE);
        secrets
            .patch(
                TLS_SECRET,
                &PatchParams::apply("nac-e2e").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();

        delete_unless_released(Api::<ClusterRole>::all(admin.clone()), EDITOR_ROLE).await;
        delete_unless_released(Api::<ClusterRole>::all(admin.clone()), VIEWER_ROLE).await;
        delete_unless_released(
            Api::<ConfigMap>::namespaced(admin.clone(), NAC_NAMESPACE),
            POLICY_CONFIGMAP,
        )
        .await;

        let pending = format!("owner=helm,name={RELEASE},status in (pending-install,pending-upgrade,pending-rollback)");
        secrets
            .delete_collection(&DeleteParams::default(), &ListParams::default().labels(&pending))
            .await
            .unwrap();
    }

    async fn delete_unless_released<K>(api: Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let Some(obj) = api.get_opt(name).await.unwrap() else {
            return;
        };
        let ann = obj.meta().annotations.clone().unwrap_or_default();
        let released = ann.get("meta.helm.sh/release-name").map(String::as_str) == Some(RELEASE)
            && ann.get("meta.helm.sh/release-namespace").map(String::as_str) == Some(NAC_NAMESPACE);
        if !released {
            api.delete(name, &DeleteParams::default()).await.unwrap();
        }
    }

    /// `helm upgrade --install` of charts/nac: webhooks at `webhook` by URL, `policy` in the policy ConfigMap.
    /// Webhook configurations deleted since the last upgrade are created again.
    pub async fn upgrade(cluster: &Cluster, webhook: SocketAddr, policy: &str) {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let policy_file = std::env::temp_dir().join(format!(
            "nac-e2e-chart-{}-{}-policy.yaml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&policy_file, policy).unwrap();
        let ca = cluster.get("WEBHOOK_CA_CERT");
        let started = Instant::now();
        let out = tokio::process::Command::new(tool("bin/helm", "make helm builds it"))
            .args(["upgrade", "--install", RELEASE])
            .arg(repo("charts/nac"))
            .args(["--namespace", NAC_NAMESPACE, "--kubeconfig", cluster.get("KUBECONFIG")])
            .args(["--wait=false", "--timeout", "60s", "--history-max", "5"])
            .args(["--set", "certs.mode=existing"])
            .args(["--set", &format!("certs.existing.secretName={TLS_SECRET}")])
            .args(["--set-file", &format!("certs.existing.caBundle={ca}")])
            .args(["--set", &format!("webhook.url=https://{webhook}")])
            .args(["--set-file", &format!("webhook.caBundle={ca}")])
            .args(["--set", "webhook.timeoutSeconds=5"])
            .args(["--set", &format!("velero.namespace={VELERO_NAMESPACE}")])
            .arg("--set-file")
            .arg(format!("policy={}", policy_file.display()))
            .output()
            .await
            .expect("running helm");
        let _ = std::fs::remove_file(&policy_file);
        assert!(
            out.status.success(),
            "helm upgrade --install {RELEASE} charts/nac failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "chart mode: helm upgrade --install {RELEASE} (webhook.url https://{webhook}) took {:?}",
            started.elapsed()
        );
    }

    /// The Helm chart installs nac: webhooks by URL at the local nac, RBAC, the policy ConfigMap; nac runs with a
    /// token of the chart's ServiceAccount and the chart's settings.
    pub struct Chart;

    impl Install for Chart {
        fn before_nac<'a>(
            &'a self,
            cluster: &'a Cluster,
            admin: &'a Client,
            webhook: SocketAddr,
            policy: &'a str,
        ) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                prepare(cluster, admin).await;
                upgrade(cluster, webhook, policy).await;
            })
        }

        fn after_nac<'a>(&'a self, _: &'a Cluster, _: &'a Client, _: &'a NacProcess) -> BoxFuture<'a, ()> {
            // The webhooks were registered at nac's address before it started.
            Box::pin(async {})
        }

        fn nac_env(&self, cluster: &Cluster, log: &Path) -> (Vec<(String, String)>, Option<PathBuf>) {
            // Like a pod of the chart's Deployment: the ServiceAccount's credentials, the chart's settings.
            let path = log.with_extension("kubeconfig");
            write_service_account_kubeconfig(cluster, &path);
            let env = vec![
                ("KUBECONFIG".to_string(), path.display().to_string()),
                ("NAC_WEBHOOK__PRIVILEGED_USERS".to_string(), service_account_user()),
                ("NAC_POLICY__CONFIGMAP".to_string(), POLICY_CONFIGMAP.to_string()),
            ];
            (env, Some(path))
        }

        fn register_webhooks<'a>(
            &'a self,
            cluster: &'a Cluster,
            admin: &'a Client,
            nac: &'a NacProcess,
        ) -> BoxFuture<'a, ()> {
            // `helm upgrade` keeping the policy now in the ConfigMap re-creates deleted webhook configurations.
            Box::pin(async move {
                let policy = current_policy(admin).await;
                upgrade(cluster, nac.webhook, &policy).await;
            })
        }

        fn editor_role<'a>(&'a self, _: &'a Client) -> BoxFuture<'a, ()> {
            // Helm owns the chart's user roles: they are bound, never written.
            Box::pin(async {})
        }

        fn set_policy<'a>(&'a self, admin: &'a Client, policy: &'a str) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(edit_policy(admin, policy))
        }
    }

    /// Edits the policy in the chart's ConfigMap (only `data.policy.yaml`, like `kubectl edit`).
    pub async fn edit_policy(admin: &Client, policy_yaml: &str) -> Result<(), kube::Error> {
        let patch = json!({"data": {"policy.yaml": policy_yaml}});
        Api::<ConfigMap>::namespaced(admin.clone(), NAC_NAMESPACE)
            .patch(
                POLICY_CONFIGMAP,
                &PatchParams {
                    field_manager: Some("nac-e2e".into()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
    }

    /// The policy document now in the chart's ConfigMap: what a later `helm upgrade` must keep.
    pub async fn current_policy(admin: &Client) -> String {
        let cm = Api::<ConfigMap>::namespaced(admin.clone(), NAC_NAMESPACE)
            .get(POLICY_CONFIGMAP)
            .await
            .unwrap();
        cm.data
            .and_then(|d| d.get("policy.yaml").cloned())
            .unwrap_or_else(|| "{}".into())
    }
}

/// Deletes an object without its finalizers running, as when an admin removes them by hand while nac is away: the
/// finalizers are removed and the object deleted with that very resourceVersion as precondition (a reconcile that
/// puts the finalizer back in between makes the delete fail, and the two steps are repeated).
pub async fn delete_uncleaned<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..20 {
        let stripped = api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        let dp = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: None,
                resource_version: stripped.meta().resource_version.clone(),
            }),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("deleting {name}: {e}"),
        }
    }
    panic!("{name}: its finalizer came back every time");
}

/// CPU time (user + system) a process has used so far, in milliseconds; `None` when it is gone.
pub fn process_cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks * 1000.0 / hz)
}

/// The Velero Restores nac made for NonAdminRestores of `ns`.
pub async fn velero_restores_of(restores: &Api<nac::velero::Restore>, ns: &str) -> Vec<nac::velero::Restore> {
    restores
        .list(&kube::api::ListParams::default().labels(nac::naming::NAR_ORIGIN_NACUUID_LABEL))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| {
            r.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.get("openshift.io/oadp-nar-origin-namespace").map(String::as_str) == Some(ns))
        })
        .collect()
}
