//! Process plumbing, apart from the domain: `nac serve` composes the HTTPS webhook listener (`tls`), the
//! plain-HTTP health/metrics listener, the policy source and (when enabled) the controllers behind the leader
//! Lease (`lease`), with graceful shutdown on SIGINT/SIGTERM through one cancellation tree.

pub mod client;
mod controllers;
pub mod lease;
pub mod reach;
pub mod tls;

use crate::admission::{self, AdmissionState};
use crate::config::Settings;
use crate::metrics::Metrics;
use crate::policy::live::PolicyStore;
use anyhow::Context;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tls::CertStore;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// What `/readyz` looks at.
pub struct Health {
    pub tls_up: AtomicBool,
    /// Set on SIGTERM: the pod is leaving, so it takes itself out of the Service before it stops serving.
    pub stopping: Arc<AtomicBool>,
    pub certs: Arc<CertStore>,
    pub policy: Arc<PolicyStore>,
    /// Whether the API server answers; `None` when nac runs without a cluster.
    pub api: Option<Arc<reach::ApiReach>>,
}

impl Health {
    /// Ok when serving is possible, otherwise the reasons.
    pub fn readiness(&self) -> Result<String, String> {
        let mut problems = Vec::new();
        if self.stopping.load(Ordering::Relaxed) {
            problems.push("shutting down".to_string());
        }
        if !self.tls_up.load(Ordering::Relaxed) || !self.certs.is_ready() {
            problems.push("webhook TLS listener is not up".to_string());
        }
        if let Some(why) = self.api.as_ref().and_then(|a| a.unreachable()) {
            problems.push(why);
        }
        if let Some(why) = self.policy.unreadable() {
            problems.push(why);
        }
        let snap = self.policy.snapshot();
        if snap.policy.is_none() {
            problems.push(format!(
                "no valid policy loaded: {}",
                snap.error.as_deref().unwrap_or("waiting for the policy")
            ));
        }
        if problems.is_empty() {
            let mut msg = format!("ok (policy generation {})", snap.generation);
            if let Some(e) = &snap.error {
                msg.push_str(&format!("; newest policy version rejected, previous one in force: {e}"));
            }
            Ok(msg)
        } else {
            Err(problems.join("; "))
        }
    }
}

/// The health and metrics router.
pub fn ops_router(health: Arc<Health>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let h = health.clone();
                async move {
                    match h.readiness() {
                        Ok(m) => (StatusCode::OK, format!("{m}\n")),
                        Err(m) => (StatusCode::SERVICE_UNAVAILABLE, format!("{m}\n")),
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                        .into_response()
                }
            }),
        )
}

/// Serves `router` over TLS on `listener` until `shutdown` is cancelled, then lets open requests finish. HTTP/2
/// is offered by ALPN when `http2` (otherwise clients speak HTTP/1.1 with keep-alive).
pub async fn serve_tls(
    listener: TcpListener,
    certs: Arc<CertStore>,
    router: Router,
    http2: bool,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let acceptor = TlsAcceptor::from(Arc::new(certs.server_config(http2)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let svc = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection closed with error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {},
        _ = tokio::time::sleep(Duration::from_secs(10)) => tracing::warn!("open webhook connections did not finish in 10 s"),
    }
    Ok(())
}

/// While stopping (the shutdown delay), each HTTP/1.1 response closes its connection. The API server calls webhooks
/// over HTTP/1.1 keep-alive and keeps sending on its connections to a pod whose endpoint has left the Service until
/// they close; closed idle by nac at the end of the delay, one may carry a request already on its way (the API
/// server reads EOF and fails the user's request). Closed after a response, the next request goes to a pod that
/// stays.
async fn close_while_stopping(
    axum::extract::State(stopping): axum::extract::State<Arc<AtomicBool>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let http1 = req.version() == axum::http::Version::HTTP_11;
    let mut res = next.run(req).await;
    if http1 && stopping.load(Ordering::Relaxed) {
        res.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    res
}

/// Serves plain HTTP until shutdown.
pub async fn serve_plain(listener: TcpListener, router: Router, shutdown: CancellationToken) -> anyhow::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .context("metrics listener")
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The user name the API server knows this client as (`kubectl auth whoami`).
async fn own_username(client: &kube::Client) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review: SelfSubjectReview = kube::Api::all(client.clone())
        .create(&kube::api::PostParams::default(), &SelfSubjectReview::default())
        .await?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| anyhow::anyhow!("the SelfSubjectReview names no user"))
}

/// Starts the policy source: the file when `policy.file` is set, else the ConfigMap through `client`.
fn spawn_policy_source(
    settings: &crate::config::PolicySettings,
    client: Option<&kube::Client>,
    store: &Arc<PolicyStore>,
) -> tokio::task::JoinHandle<()> {
    match (&settings.file, client) {
        (Some(file), _) => {
            tracing::info!(file = %file.display(), "policy from file");
            tokio::spawn(crate::policy::live::source::watch_file(file.clone(), store.clone()))
        }
        (None, Some(c)) => {
            tracing::info!(namespace = %settings.namespace, name = %settings.configmap, "policy from ConfigMap");
            tokio::spawn(crate::policy::live::source::watch_configmap(
                c.clone(),
                settings.namespace.clone(),
                settings.configmap.clone(),
                store.clone(),
            ))
        }
        (None, None) => unreachable!("a client is created whenever no policy file is set"),
    }
}

/// `webhook.privileged_users` plus nac's own identity: nac's own writes (backup sync re-creating NonAdminBackups
/// with their identity) pass its webhooks under whatever identity nac has, a ServiceAccount in a pod or a user's
/// kubeconfig in a local run.
async fn privileged_users(configured: &[String], client: Option<&kube::Client>) -> Vec<String> {
    let mut users = configured.to_vec();
    let Some(c) = client else { return users };
    match own_username(c).await {
        Ok(me) if !users.contains(&me) => {
            tracing::info!(user = %me, "nac's own identity is a privileged webhook user");
            users.push(me);
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "could not learn nac's own user name (SelfSubjectReview); only webhook.privileged_users are privileged"
        ),
    }
    users
}

/// The rights cache, with its watches of the RBAC objects (run until the process ends): with
/// `rights.authorizers: rbac` an answer lasts until an RBAC change could reach it.
fn rights_access(
    client: &kube::Client,
    settings: &crate::config::RightsSettings,
    metrics: &Metrics,
) -> Arc<dyn crate::rights::Access> {
    let rbac_only = settings.authorizers == crate::config::Authorizers::Rbac;
    let fresh = crate::rights::Freshness {
        epochs: Arc::default(),
        rbac_only,
        lifetime: Duration::from_secs(settings.cache_lifetime_secs),
    };
    let epochs = fresh.epochs.clone();
    let mut access =
        crate::rights::KubeAccess::with(client.clone(), fresh).counting_lists(metrics.occupancy_lists.clone());
    if !settings.warning_lookups {
        access = access.without_lookups();
    }
    // With RBAC the only authorizer, rights are answered from the RBAC objects (whole objects watched).
    let access = if rbac_only {
        let (rules, writers) = crate::rights::rules::Rules::new();
        tokio::spawn(crate::rights::rbac::watch_rules(client.clone(), epochs, writers));
        access.with_rules(rules)
    } else {
        tokio::spawn(crate::rights::rbac::watch(client.clone(), epochs));
        access
    };
    tracing::info!(
        authorizers = ?settings.authorizers,
        lifetime_secs = if rbac_only { settings.cache_lifetime_secs } else { crate::rights::CACHE_TTL.as_secs() },
        answered_from_rbac_objects = rbac_only,
        "rights answers kept until an RBAC change could reach them, at most the lifetime"
    );
    Arc::new(access)
}

/// `nac serve`.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(PolicyStore::new(Some(metrics.clone())));
    // No restore copies into Velero's namespace, nac's, or one nac's webhooks never see.
    let mut protected = settings.webhook.excluded_namespaces.clone();
    protected.extend([
        settings.controllers.velero_namespace.clone(),
        settings.policy.namespace.clone(),
    ]);
    store.protect_namespaces(protected);
    // The root of the shutdown tree: servers and controllers stop when it is cancelled.
    let shutdown = CancellationToken::new();

    let needs_client = settings.controllers.enabled || settings.policy.file.is_none();
    let client = if needs_client {
        Some(client::connect(settings.api.http2).await.context(
            "connecting to the Kubernetes API (set policy.file and controllers.enabled=false to run without a cluster)",
        )?)
    } else {
        None
    };

    let mut tasks = tokio::task::JoinSet::new();
    // The policy source runs until the process ends; it is aborted at shutdown.
    let policy_task = spawn_policy_source(&settings.policy, client.as_ref(), &store);
    // Namespaces' labels, which policy tiers select by, for the webhooks and the reconcilers alike.
    if let Some(c) = &client {
        let namespaces = Arc::new(crate::policy::live::NamespaceLabels::default());
        store.follow_namespaces(namespaces.clone());
        tokio::spawn(namespaces.watch(c.clone()));
        let usage = Arc::new(crate::policy::live::UsageIndex::default());
        store.count_usage(usage.clone());
        tokio::spawn(usage.watch(c.clone()));
    }

    let certs = CertStore::load(&settings.webhook.cert_file, &settings.webhook.key_file)
        .context("loading the webhook serving certificate")?;
    tokio::spawn(
        certs
            .clone()
            .watch(Duration::from_secs(settings.webhook.cert_reload_secs)),
    );

    let health = Arc::new(Health {
        tls_up: AtomicBool::new(false),
        stopping: Arc::default(),
        certs: certs.clone(),
        policy: store.clone(),
        api: client.as_ref().map(|c| {
            let reach = Arc::new(reach::ApiReach::default());
            tokio::spawn(reach.clone().probe(c.clone()));
            reach
        }),
    });
    let privileged_users = privileged_users(&settings.webhook.privileged_users, client.as_ref()).await;
    // One cache of answers about requesters' rights for the webhooks and the reconcilers.
    let access = client.as_ref().map(|c| rights_access(c, &settings.rights, &metrics));
    if client.is_none() {
        // Not silent: every create that needs the check is refused with a reason, and the log says so up front.
        tracing::warn!(
            "no cluster connection (policy.file set, controllers off): the rights check cannot ask the API server, \
             so every NonAdminBackup and NonAdminSchedule create is refused unless the policy sets rights.backup: off"
        );
    }
    // One view of the cluster's networks for the webhooks and the reconcilers.
    let controller_opts = crate::controller::Options::from_settings(&settings);
    let endpoints = controller_opts.endpoints.clone();
    if let Some(c) = &client {
        endpoints.watch_cluster(c.clone());
    }
    let state = Arc::new(AdmissionState {
        policy: store.clone(),
        metrics: metrics.clone(),
        privileged_users,
        policy_configmap: settings.policy.configmap.clone(),
        policy_namespace: settings.policy.namespace.clone(),
        locations: client.as_ref().map(|c| {
            Arc::new(admission::velero_guard::KubeLocations(kube::Api::namespaced(
                c.clone(),
                &settings.controllers.velero_namespace,
            ))) as Arc<dyn admission::LocationLookup>
        }),
        access: access.clone(),
        endpoints: endpoints.clone(),
    });

    let tls_listener = TcpListener::bind(settings.webhook.listen)
        .await
        .with_context(|| format!("binding webhook.listen {}", settings.webhook.listen))?;
    let ops_listener = TcpListener::bind(settings.metrics.listen)
        .await
        .with_context(|| format!("binding metrics.listen {}", settings.metrics.listen))?;
    tracing::info!(webhook = %tls_listener.local_addr()?, metrics = %ops_listener.local_addr()?, "listening");
    health.tls_up.store(true, Ordering::Relaxed);

    tasks.spawn(serve_tls(
        tls_listener,
        certs,
        admission::router(state).layer(axum::middleware::from_fn_with_state(
            health.stopping.clone(),
            close_while_stopping,
        )),
        settings.webhook.http2,
        shutdown.clone(),
    ));
    tasks.spawn(serve_plain(
        ops_listener,
        ops_router(health.clone(), metrics.clone()),
        shutdown.clone(),
    ));

    if settings.controllers.enabled {
        let client = client.clone().expect("client exists when controllers are enabled");
        let access = access.clone().expect("client exists when controllers are enabled");
        tasks.spawn(controllers::run(
            client,
            controller_opts,
            store.clone(),
            metrics.clone(),
            access,
            shutdown.clone(),
        ));
    }

    tokio::select! {
        _ = shutdown_signal() => {
            // Not ready at once, still serving for the delay: the endpoint leaves the Service first.
            health.stopping.store(true, Ordering::Relaxed);
            let delay = settings.webhook.shutdown_delay_secs;
            tracing::info!(delay_secs = delay, "shutting down");
            tokio::time::sleep(Duration::from_secs(delay)).await;
        }
        Some(res) = tasks.join_next() => {
            // A task ending on its own is fatal: report it and stop the rest.
            shutdown.cancel();
            policy_task.abort();
            return match res {
                Ok(Ok(())) => Err(anyhow::anyhow!("a server task stopped unexpectedly")),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(anyhow::anyhow!("a server task panicked: {e}")),
            };
        }
    }
    shutdown.cancel();
    let drain = async {
        while let Some(res) = tasks.join_next().await {
            if let Ok(Err(e)) = res {
                tracing::warn!(error = %e, "task ended with error during shutdown");
            }
        }
    };
    // Give the servers and controllers a bounded time to finish.
    let _ = tokio::time::timeout(Duration::from_secs(15), drain).await;
    tasks.abort_all();
    policy_task.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, Request, Version};
    use tower::ServiceExt;

    #[tokio::test]
    async fn while_stopping_an_http1_response_closes_its_connection() {
        let stopping = Arc::new(AtomicBool::new(false));
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(
                stopping.clone(),
                close_while_stopping,
            ));
        let connection = |version| {
            let app = app.clone();
            async move {
                let req = Request::builder()
                    .uri("/")
                    .version(version)
                    .body(axum::body::Body::empty());
                let res = app.oneshot(req.unwrap()).await.unwrap();
                res.headers().get("connection").cloned()
            }
        };
        assert_eq!(connection(Version::HTTP_11).await, None, "serving: keep-alive");
        stopping.store(true, Ordering::Relaxed);
        assert_eq!(
            connection(Version::HTTP_11).await,
            Some(HeaderValue::from_static("close"))
        );
        // HTTP/2 has no such header (its GOAWAY at the close tells the client what was not served).
        assert_eq!(connection(Version::HTTP_2).await, None);
    }
}
