//! A file behind a signed object-storage URL, read as a stream: the controller reads a backup's contents through
//! it, the `kubectl nac` plugin a backup's log and resource list.

use crate::endpoints::Guard;
use crate::policy::Host;
use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use std::net::SocketAddr;

/// A part of a downloaded file read as a stream, with a visitor of its own: the `DeserializeSeed` that reads the
/// part (`deserialize_map`, `deserialize_seq`) with it, and the visitor, what it expects and its `visit_*` method.
macro_rules! streamed_part {
    ($de:lifetime, $t:ty, $deserialize:ident, $expecting:literal, $($visit:tt)*) => {
        impl<$de> serde::de::DeserializeSeed<$de> for $t {
            type Value = ();
            fn deserialize<D: serde::Deserializer<$de>>(self, d: D) -> Result<(), D::Error> {
                d.$deserialize(self)
            }
        }
        impl<$de> serde::de::Visitor<$de> for $t {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str($expecting)
            }
            $($visit)*
        }
    };
}
pub(crate) use streamed_part;

/// TLS settings for a storage endpoint: the system's roots plus `ca` (PEM, or base64 of PEM as Velero keeps a
/// location's `caCert`).
pub fn tls_config(ca: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    use base64::Engine;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(ca) = ca.filter(|c| !c.is_empty()) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca.trim_ascii())
            .unwrap_or_else(|_| ca.to_vec());
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("the CA certificate is not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("the CA certificate is not usable: {e}"))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The URL without its query (a signed URL's query is a credential: never logged or shown).
pub fn shown(url: &str) -> String {
    url.split_once('?').map_or(url, |(u, _)| u).to_string()
}

/// GETs `url` and returns its body as a stream of chunks; errors name the URL without its signature.
pub async fn get(
    url: &str,
    tls: rustls::ClientConfig,
) -> Result<impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static, String> {
    get_guarded(url, tls, None).await.map_err(|e| e.to_string())
}

/// Why a guarded fetch did not happen.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The endpoint is not one nac may reach for a tenant, or it redirected: asking again will not change it.
    #[error("{0}")]
    Refused(String),
    /// The storage answered that nothing is there (HTTP 404): asking again will not change it.
    #[error("{0}")]
    Missing(String),
    #[error("{0}")]
    Failed(String),
}

/// The guard's refusal inside the connector's error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refusal(String);

/// [`get`] from inside the cluster, to a tenant's storage when `guard` is set: the host is judged by the policy's
/// rule for tenants' endpoints, its name resolved once and the connection made only to the addresses judged (no
/// second lookup a name could answer differently). No redirect is followed, to anywhere.
pub async fn get_guarded(
    url: &str,
    tls: rustls::ClientConfig,
    guard: Option<Guard>,
) -> Result<impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin + 'static, FetchError> {
    let uri: hyper::Uri = url.parse().map_err(|e| FetchError::Failed(format!("not a URL: {e}")))?;
    let refused = |why: String| FetchError::Refused(format!("nac does not fetch {}: {why}", shown(url)));
    if let Some(g) = &guard {
        // Addresses written in the URL are not resolved, so the resolver below never sees them.
        if let Host::Ip(ip) = crate::policy::host_of(url).map_err(refused)? {
            if let Some(why) = g.refuse(&Host::Ip(ip), &[ip]) {
                return Err(refused(why));
            }
        }
    }
    let mut http = HttpConnector::new_with_resolver(Checked(guard));
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<Bytes>>(https);
    let res = client.get(uri).await.map_err(|e| {
        let mut cause: Option<&dyn std::error::Error> = Some(&e);
        while let Some(c) = cause {
            // An io::Error's source() skips the error it wraps: look into it too.
            let inner = c.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
            if let Some(r) = c
                .downcast_ref::<Refusal>()
                .or_else(|| inner.and_then(|i| i.downcast_ref::<Refusal>()))
            {
                return refused(r.0.clone());
            }
            cause = c.source();
        }
        FetchError::Failed(format!("downloading from {}: {}", shown(url), with_source(&e)))
    })?;
    if res.status().is_redirection() {
        let to = res
            .headers()
            .get(hyper::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(shown)
            .unwrap_or_default();
        return Err(FetchError::Refused(format!(
            "downloading from {}: HTTP {}, a redirect to {to:?}: nac follows no redirect",
            shown(url),
            res.status()
        )));
    }
    if res.status() == hyper::StatusCode::NOT_FOUND {
        return Err(FetchError::Missing(format!(
            "downloading from {}: HTTP 404, no such file",
            shown(url)
        )));
    }
    if !res.status().is_success() {
        return Err(FetchError::Failed(format!(
            "downloading from {}: HTTP {}",
            shown(url),
            res.status()
        )));
    }
    Ok(res.into_body().into_data_stream().map_err(std::io::Error::other))
}

/// An error with its causes (a refused address is the connector's inner error).
fn with_source(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out = format!("{out}: {c}");
        cause = c.source();
    }
    out
}

/// The connector's resolver: the system's, judged by the guard when there is one.
#[derive(Clone)]
struct Checked(Option<Guard>);

impl tower::Service<Name> for Checked {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let guard = self.0.clone();
        Box::pin(async move {
            let addrs = match guard {
                Some(g) => g
                    .addresses(name.as_str())
                    .await
                    .map_err(|why| std::io::Error::other(Refusal(why)))?,
                None => tokio::net::lookup_host((name.as_str(), 0))
                    .await?
                    .map(|a| a.ip())
                    .collect(),
            };
            Ok(addrs
                .into_iter()
                .map(|ip| SocketAddr::new(ip, 0))
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::Endpoints;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback answering every request with `response`; counts the connections.
    async fn server(response: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        (addr, seen)
    }

    fn guard(policy: &str) -> Guard {
        let p = crate::policy::Policy::parse(policy).unwrap();
        Guard {
            rules: Arc::new(p.non_admin_bsl),
            endpoints: Arc::new(Endpoints::fixed(
                &[("store.test", &["127.0.0.1"]), ("rebound.test", &["169.254.169.254"])],
                &["10.96.0.0/12"],
            )),
        }
    }

    fn tls() -> rustls::ClientConfig {
        tls_config(None).unwrap()
    }

    async fn body(s: impl Stream<Item = std::io::Result<Bytes>> + Unpin) -> String {
        let chunks: Vec<Bytes> = s.try_collect().await.unwrap();
        String::from_utf8(chunks.concat()).unwrap()
    }

    const ALLOW_LOOPBACK: &str = "nonAdminBSL: {enabled: true, allowedEndpoints: {cidrs: [127.0.0.1/32]}}";

    #[tokio::test]
    async fn a_redirect_is_never_followed() {
        let (addr, seen) = server(
            "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data?sig=secret\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        let url = format!("http://{addr}/bucket/backup.tar.gz?X-Amz-Signature=abc");
        for g in [Some(guard(ALLOW_LOOPBACK)), None] {
            let e = get_guarded(&url, tls(), g).await.err().expect("refused");
            let msg = e.to_string();
            assert!(matches!(e, FetchError::Refused(_)), "{msg}");
            assert!(
                msg.contains("HTTP 302 Found, a redirect to \"http://169.254.169.254/latest/meta-data\": nac follows no redirect"),
                "{msg}"
            );
            assert!(
                !msg.contains("secret") && !msg.contains("abc"),
                "signatures are never shown: {msg}"
            );
        }
        assert_eq!(seen.load(Ordering::SeqCst), 2, "one request each, nothing followed");
    }

    #[tokio::test]
    async fn a_tenants_endpoint_is_reached_only_at_addresses_the_policy_allows() {
        let (addr, seen) = server("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
        let port = addr.port();
        // Loopback without an allow-list: refused before any connection.
        let e = get_guarded(
            &format!("http://127.0.0.1:{port}/x"),
            tls(),
            Some(guard("nonAdminBSL: {enabled: true}")),
        )
        .await
        .err()
        .unwrap();
        assert!(matches!(e, FetchError::Refused(_)));
        assert!(e.to_string().contains("127.0.0.1 is in 127.0.0.0/8, loopback"), "{e}");
        // A name is resolved once and judged: the connection goes to the address judged.
        let ok = get_guarded(
            &format!("http://store.test:{port}/x"),
            tls(),
            Some(guard(ALLOW_LOOPBACK)),
        )
        .await
        .unwrap();
        assert_eq!(body(ok).await, "ok");
        // A name that resolves to a refused address is refused at connect time.
        let e = get_guarded(
            &format!("http://rebound.test:{port}/x"),
            tls(),
            Some(guard(ALLOW_LOOPBACK)),
        )
        .await
        .err()
        .unwrap();
        assert!(matches!(e, FetchError::Refused(_)), "{e}");
        assert!(
            e.to_string()
                .contains("host rebound.test resolves to 169.254.169.254, which is not allowed"),
            "{e}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1, "only the allowed fetch connected");
        // Unguarded (the admin's own locations, the plugin on the user's machine): as before.
        let ok = get(&format!("http://127.0.0.1:{port}/x"), tls()).await.unwrap();
        assert_eq!(body(ok).await, "ok");
    }
}
