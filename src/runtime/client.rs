//! nac's Kubernetes API client. kube's own builder speaks HTTP/1.1 only: every watch and every request in flight
//! holds a TLS connection of its own, with read and write buffers that keep the size a large list grew them to
//! (measured: 39% of nac's heap at 1,000 NonAdminBackups, fifty connections). With HTTP/2 (`api.http2: true`),
//! which every kube-apiserver serves over TLS (client-go's default), one connection carries them all; the default
//! keeps kube's HTTP/1.1 client, as under a burst of creates HTTP/2 delays reconciles by seconds (BENCHMARKS.md
//! §4, not yet explained: neither the windows below nor watches on a connection of their own changed it). The
//! stack is kube's own otherwise, from its public layers: the cluster URL, the retry of 429/503/504, the
//! credentials (refreshed tokens included), the impersonation headers, and the connect, read and write timeouts.

use anyhow::Context;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use std::time::Duration;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How often an idle HTTP/2 connection is pinged, and how long a ping may go unanswered before the connection is
/// dropped (and every watch on it relists on a new one): a peer gone without a word (a node lost, a NAT entry
/// expired) is found within the sum, where a silent TCP connection would otherwise wait for the read timeout.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(20);
const CONNECTION_WINDOW: u32 = 1 << 30;
const STREAM_WINDOW: u32 = 4 << 20;

/// A client for the cluster `kube::Config::infer` finds (in-cluster, or `KUBECONFIG`); `http2`: offer HTTP/2.
pub async fn connect(http2: bool) -> anyhow::Result<kube::Client> {
    let config = kube::Config::infer()
        .await
        .context("reading the cluster's configuration")?;
    if !http2 {
        return kube::Client::try_from(config).context("building the API client");
    }
    build(config)
}

fn build(config: kube::Config) -> anyhow::Result<kube::Client> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config().context("the API client's TLS settings")?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name.clone().try_into().context("the kubeconfig's tls-server-name")?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut connector = TimeoutConnector::new(tls.enable_http2().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            // HTTP/2 known in advance: requests made together wait for the one connection being made (offered
            // both by ALPN, the pool cannot know, and opens one per request until the first is up).
            .http2_only(true)
            // Flow-control windows as Go's HTTP/2 client (client-go) sets them: a connection window of 1 GiB, so
            // a watch whose events wait to be read never holds up the other streams, and 4 MiB a stream.
            .http2_initial_connection_window_size(CONNECTION_WINDOW)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_EVERY)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().context("the API client's credentials")?)
        .layer(config.extra_headers_layer().context("the API client's headers")?)
        .map_err(BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace))
}

// The development CA of `nac certs` and the tests, for a server the client must trust (its key is not needed).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../devtools/dev_ca.rs"]
mod dev_ca;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use k8s_openapi::api::core::v1::ConfigMap;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// What the server below saw: connections accepted, and the HTTP version of each request.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        versions: Mutex<Vec<hyper::Version>>,
    }

    /// An HTTPS server on loopback offering h2 and HTTP/1.1, as kube-apiserver does, that answers every request
    /// with an empty ConfigMap after 300 ms (so that requests sent together are in flight together).
    async fn api_server(ca: &dev_ca::DevCa) -> (String, Arc<Seen>) {
        let (cert, key) = ca.issue(&["127.0.0.1".into()], 1).unwrap();
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                s.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, s) = (acceptor.clone(), s.clone());
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(acceptor.accept(tcp).await.unwrap());
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        s.versions.lock().unwrap().push(req.version());
                        async {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#;
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        (url, seen)
    }

    async fn five_at_once(http2: bool) -> Arc<Seen> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = dev_ca::DevCa::new(1).unwrap();
        let (url, seen) = api_server(&ca).await;
        let mut config = kube::Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())
            .unwrap()
            .to_vec()]);
        let client = if http2 {
            build(config).unwrap()
        } else {
            kube::Client::try_from(config).unwrap()
        };
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
        let gets = (0..5).map(|_| api.get("c"));
        for cm in futures::future::join_all(gets).await {
            assert_eq!(cm.unwrap().metadata.name.as_deref(), Some("c"));
        }
        seen
    }

    #[tokio::test]
    async fn requests_in_flight_together_share_one_http2_connection() {
        let seen = five_at_once(true).await;
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
        assert_eq!(*seen.versions.lock().unwrap(), vec![hyper::Version::HTTP_2; 5]);
        // The control: kube's own client, HTTP/1.1, a connection per request in flight.
        let seen = five_at_once(false).await;
        assert_eq!(seen.connections.load(Ordering::SeqCst), 5);
        assert_eq!(*seen.versions.lock().unwrap(), vec![hyper::Version::HTTP_11; 5]);
    }
}
