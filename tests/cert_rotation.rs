//! Replacing the certificate files (as a Secret update or cert-manager renewal does) takes effect for new
//! connections within 10 seconds, with no failed request while it happens.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn write_atomically(path: &std::path::Path, body: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn leaf_der(pem: &str) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_has_no_failed_requests() {
    let s = Arc::new(TestServer::start(Some(STRICT_POLICY)).await);
    let body = serde_json::to_vec(&fixture("nab-create.json")).unwrap();
    let old_der = leaf_der(&std::fs::read_to_string(s.cert_path()).unwrap());
    let (new_cert, new_key) = s.ca.issue(&hosts(), 2).unwrap();
    let new_der = leaf_der(&new_cert);

    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let seen_new = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (s, body, ok, failed, seen_new, stop, new_der) = (
            s.clone(),
            body.clone(),
            ok.clone(),
            failed.clone(),
            seen_new.clone(),
            stop.clone(),
            new_der.clone(),
        );
        workers.push(tokio::spawn(async move {
            // New connections keep coming (each sees the certificate current at its handshake), and each
            // connection is kept alive for a few requests, spanning the swap.
            while !stop.load(Ordering::Relaxed) {
                let cfg = client_config(s.ca.cert_pem.as_bytes(), &[b"http/1.1"], false).unwrap();
                let mut c = match Conn::connect(s.addr, Arc::new(cfg)).await {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("connect failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                if c.peer_cert == new_der {
                    seen_new.store(true, Ordering::Relaxed);
                }
                for _ in 0..5 {
                    match c
                        .post("/mutate/nonadminbackups", "application/json", body.clone())
                        .await
                    {
                        Ok((200, _)) => ok.fetch_add(1, Ordering::Relaxed),
                        other => {
                            eprintln!("request failed: {other:?}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    let rotated_at = Instant::now();
    // Cert first, key second: for a moment the pair does not match, and the old pair must keep serving.
    write_atomically(&s.cert_path(), &new_cert);
    tokio::time::sleep(Duration::from_millis(300)).await;
    write_atomically(&s.key_path(), &new_key);
    while !seen_new.load(Ordering::Relaxed) && rotated_at.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = rotated_at.elapsed();
    // Keep the load on a little longer after the switch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("rotation seen after {took:?}; {ok} requests ok, {failed} failed");
    assert!(
        seen_new.load(Ordering::Relaxed),
        "new certificate not served within 10 s"
    );
    assert_ne!(old_der, new_der);
    assert_eq!(failed, 0);
    assert!(ok > 100, "too little load to mean anything: {ok}");
}
