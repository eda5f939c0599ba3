//! A small HTTPS client for tests, the fuzz harness and the load generator: one kept-alive connection,
//! HTTP/1.1 or HTTP/2 by ALPN, trusting a given CA.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls_pki_types::pem::PemObject;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// TLS client settings trusting `ca_pem`, offering the given ALPN protocols.
pub fn client_config(ca_pem: &[u8], alpn: &[&[u8]], tls12_only: bool) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One connection to the webhook server.
pub struct Conn {
    sender: Sender,
    /// The certificate the server presented (leaf, DER).
    pub peer_cert: Vec<u8>,
    pub alpn: Option<Vec<u8>>,
    pub tls_version: Option<rustls::ProtocolVersion>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> anyhow::Result<Conn> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = TlsConnector::from(cfg).connect(name, tcp).await?;
        let (_, session) = tls.get_ref();
        let peer_cert = session
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let alpn = session.alpn_protocol().map(|p| p.to_vec());
        let tls_version = session.protocol_version();
        let io = TokioIo::new(tls);
        let sender = if alpn.as_deref() == Some(b"h2") {
            let (s, conn) = http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            Sender::H2(s)
        } else {
            let (s, conn) = http1::handshake(io).await?;
            tokio::spawn(conn);
            Sender::H1(s)
        };
        Ok(Conn {
            sender,
            peer_cert,
            alpn,
            tls_version,
        })
    }

    /// POSTs `body` to `path`; returns the status and the response body.
    pub async fn post(&mut self, path: &str, content_type: &str, body: Vec<u8>) -> anyhow::Result<(u16, Bytes)> {
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, "nac")
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(body)))?;
        let resp = match &mut self.sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}
