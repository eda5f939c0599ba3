//! TLS for the webhook listener: rustls (ring only), TLS 1.2 and 1.3, ALPN h2 and http/1.1, and certificate
//! hot reload. The certificate files are polled; a new valid pair is used for new connections, while a broken or
//! half-written pair is ignored until it is whole (the old one keeps serving, so no request fails).

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: {reason}")]
    BadPem { path: PathBuf, reason: String },
    #[error("{key}: private key does not match certificate {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// The certificate in use, swapped atomically when the files change.
pub struct CertStore {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: ArcSwap<CertifiedKey>,
    fingerprint: ArcSwap<[u8; 32]>,
    ready: AtomicBool,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore").field("cert_file", &self.cert_file).finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a PEM certificate chain and key into a checked `CertifiedKey`.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_file: &Path,
    key_file: &Path,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::BadPem {
            path: cert_file.to_path_buf(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_file.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadPem {
        path: key_file.to_path_buf(),
        reason: e.to_string(),
    })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| TlsError::BadPem {
        path: key_file.to_path_buf(),
        reason: e.to_string(),
    })?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|e| TlsError::Mismatch {
        cert: cert_file.to_path_buf(),
        key: key_file.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(ck)
}

impl CertStore {
    /// Loads the pair once; start-up fails if it is not valid.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<CertStore>, TlsError> {
        let (c, k) = (read(cert_file)?, read(key_file)?);
        let ck = certified_key(&c, &k, cert_file, key_file)?;
        Ok(Arc::new(CertStore {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            current: ArcSwap::from_pointee(ck),
            fingerprint: ArcSwap::from_pointee(fingerprint(&c, &k)),
            ready: AtomicBool::new(true),
        }))
    }

    /// Re-reads the files; returns Ok(true) when a new certificate was taken into use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (c, k) = (read(&self.cert_file)?, read(&self.key_file)?);
        let fp = fingerprint(&c, &k);
        if **self.fingerprint.load() == fp {
            return Ok(false);
        }
        let ck = certified_key(&c, &k, &self.cert_file, &self.key_file)?;
        self.current.store(Arc::new(ck));
        self.fingerprint.store(Arc::new(fp));
        Ok(true)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Polls the files every `every` until the process ends.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_error: Option<String> = None;
        loop {
            tick.tick().await;
            match self.reload() {
                Ok(true) => {
                    tracing::info!(cert = %self.cert_file.display(), "serving certificate reloaded");
                    last_error = None;
                }
                Ok(false) => last_error = None,
                Err(e) => {
                    // Mid-rotation the pair can be briefly inconsistent: keep serving the old one, say so once.
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(&msg) {
                        tracing::warn!(error = %msg, "serving certificate not reloaded; keeping the current one");
                        last_error = Some(msg);
                    }
                }
            }
        }
    }

    /// A rustls server config that always serves the current certificate; offers h2 by ALPN when `http2`.
    pub fn server_config(self: &Arc<Self>, http2: bool) -> ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        cfg
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

fn fingerprint(c: &[u8], k: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(c);
    h.update([0]);
    h.update(k);
    h.finalize().into()
}
