//! `nac serve` as a process with no cluster: file policy, controllers off. Start-up errors, readiness, live
//! policy reload from the file, and a clean exit on SIGTERM.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, text.split_once("\r\n\r\n")?.1.to_string()))
}

async fn wait_for(port: u16, path: &str, what: &str, pred: impl Fn(u16, &str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((code, body)) = get(port, path).await {
            if pred(code, &body) {
                return body;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn bad_settings_stop_start_up_naming_the_key() {
    let out = Command::new(env!("CARGO_BIN_EXE_nac"))
        .arg("serve")
        .env("NAC_CONTROLLERS__ENABLD", "false")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("enabld"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_nac"))
        .arg("serve")
        .env("NAC_METRICS__LISTEN", "everywhere")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("metrics.listen"));
}

#[tokio::test]
async fn serves_without_a_cluster_and_reloads_the_policy_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = common::DevCa::new(1).unwrap();
    let (cert, key) = ca.issue(&common::hosts(), 1).unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), key).unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "enforceBackupSpec: {tll: 1h}\n").unwrap();
    let (wport, mport) = (free_port(), free_port());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nac"))
        .arg("serve")
        .env("NAC_WEBHOOK__LISTEN", format!("127.0.0.1:{wport}"))
        .env("NAC_METRICS__LISTEN", format!("127.0.0.1:{mport}"))
        .env("NAC_WEBHOOK__CERT_FILE", dir.path().join("tls.crt"))
        .env("NAC_WEBHOOK__KEY_FILE", dir.path().join("tls.key"))
        .env("NAC_POLICY__FILE", &policy)
        .env("NAC_CONTROLLERS__ENABLED", "false")
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // Up, but not ready: the only policy version is invalid, and /readyz says why (once the file is read: before,
    // it says it is waiting for a policy).
    let body = wait_for(mport, "/readyz", "readyz 503 naming the error", |c, b| {
        c == 503 && !b.contains("waiting for the policy")
    })
    .await;
    assert!(body.contains("no valid policy") && body.contains("tll"), "{body}");
    assert_eq!(get(mport, "/healthz").await.unwrap().0, 200);

    // Fixing the file makes it ready within 2 s.
    let fixed = Instant::now();
    // Without a cluster nac cannot ask about a requester's rights, and refuses backups that need the answer
    // (fail closed); this policy does not check them.
    std::fs::write(&policy, "enforceBackupSpec: {ttl: 1h}\nrights: {backup: off}\n").unwrap();
    wait_for(mport, "/readyz", "readyz 200", |c, _| c == 200).await;
    assert!(fixed.elapsed() < Duration::from_secs(2), "{:?}", fixed.elapsed());

    // A later broken edit keeps the valid policy in force and is reported.
    std::fs::write(&policy, "enforceBackupSpec: [\n").unwrap();
    let body = wait_for(mport, "/readyz", "rejected edit reported", |c, b| {
        c == 200 && b.contains("rejected")
    })
    .await;
    assert!(body.contains("generation 1"), "{body}");
    let metrics = get(mport, "/metrics").await.unwrap().1;
    assert!(metrics.contains("nac_policy_generation 1"), "{metrics}");
    assert!(metrics.contains("nac_policy_reload_errors_total 2"), "{metrics}");

    // The webhook answers with the policy in force.
    let cfg = common::client_config(ca.cert_pem.as_bytes(), &[b"h2"], false).unwrap();
    let mut conn = common::Conn::connect(([127, 0, 0, 1], wport).into(), std::sync::Arc::new(cfg))
        .await
        .unwrap();
    let review = common::fixture("nab-create.json");
    let (code, body) = conn
        .post(
            "/mutate/nonadminbackups",
            "application/json",
            serde_json::to_vec(&review).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(code, 200);
    let out: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(common::patched_object(&review, &out)["spec"]["backupSpec"]["ttl"], "1h");

    // SIGTERM: a clean, prompt exit.
    let pid = child.id().unwrap() as i32;
    Command::new("kill").arg("-TERM").arg(pid.to_string()).status().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}
