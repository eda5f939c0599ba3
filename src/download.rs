//! A file behind a signed object-storage URL, read as a stream: the controller reads a backup's contents through
//! it, the `kubectl nac` plugin a backup's log and resource list.

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use http_body_util::{BodyExt, Empty};

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
    let uri: hyper::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<Bytes>>(https);
    let res = client
        .get(uri)
        .await
        .map_err(|e| format!("downloading from {}: {e}", shown(url)))?;
    if !res.status().is_success() {
        return Err(format!("downloading from {}: HTTP {}", shown(url), res.status()));
    }
    Ok(res.into_body().into_data_stream().map_err(std::io::Error::other))
}
