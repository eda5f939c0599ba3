//! Files of the user's backups and restores, through a NonAdminDownloadRequest: made, answered by nac with
//! Velero's signed URL, read (gunzipped) as a stream, and deleted again.

use super::kinds::DOWNLOAD;
use super::{Error, Result, Session};
use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, Instant};

/// How long nac and Velero have to answer a request.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(90);

/// Where the storage's TLS certificate is trusted from.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Tls {
    /// PEM file of the CA that signed the object storage's certificate (besides the system's roots)
    #[arg(long = "cacert", value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
}

impl Tls {
    pub(super) fn config(&self) -> Result<rustls::ClientConfig> {
        let ca = match &self.cacert {
            Some(p) => Some(std::fs::read(p).map_err(|e| Error::User(format!("reading {}: {e}", p.display())))?),
            None => None,
        };
        crate::download::tls_config(ca.as_deref()).map_err(Error::User)
    }
}

/// Makes a request for file `kind` of `name` and waits for its signed URL; the request is deleted again
/// whatever happens.
pub(super) async fn signed_url(s: &Session, kind: &str, name: &str) -> Result<String> {
    let request = json!({
        "apiVersion": "oadp.openshift.io/v1alpha1",
        "kind": DOWNLOAD.kind,
        "metadata": {"generateName": format!("{}-{}-", truncate(name, 40), kind.to_ascii_lowercase())},
        "spec": {"target": {"kind": kind, "name": name}},
    });
    let (made, _) = s.create(&DOWNLOAD, &request).await?;
    let made_name = made["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let answer = wait_for_url(s, &made_name).await;
    if let Err(e) = s.delete(&DOWNLOAD, &made_name).await {
        eprintln!("Warning: {e}");
    }
    answer
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => s[..i].trim_end_matches(['-', '.']),
        None => s,
    }
}

async fn wait_for_url(s: &Session, name: &str) -> Result<String> {
    let start = Instant::now();
    loop {
        let o = s.get(&DOWNLOAD, name).await?;
        if let Some(url) = o["status"]["velero"]["status"]["downloadURL"].as_str() {
            return Ok(url.to_string());
        }
        if let Some(why) = refusal(&o) {
            return Err(Error::Api(why));
        }
        if start.elapsed() > ANSWER_TIMEOUT {
            return Err(Error::Api(format!(
                "no download URL after {}s (NonAdminDownloadRequest {name}: phase {})",
                ANSWER_TIMEOUT.as_secs(),
                o["status"]["phase"].as_str().unwrap_or("New")
            )));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Why nac will not answer a request: a condition that is True and says so, or the phase BackingOff.
fn refusal(o: &Value) -> Option<String> {
    let conditions = o["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let failing = conditions.iter().find(|c| {
        c["status"] == "True" && c["type"] != "Accepted" && c["type"] != "Processed"
            || c["type"] == "Accepted" && c["status"] == "False"
    });
    match (failing, o["status"]["phase"].as_str()) {
        (Some(c), _) => Some(format!(
            "the file cannot be downloaded: {} ({})",
            c["message"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or("")
        )),
        (None, Some("BackingOff")) => Some("the file cannot be downloaded (request refused)".into()),
        _ => None,
    }
}

/// Copies file `kind` of `name`, gunzipped, to `out`. Needs the multi-thread runtime (the plugin's).
pub async fn copy(s: &Session, kind: &str, name: &str, tls: &Tls, out: &mut (dyn Write + Send)) -> Result<()> {
    let url = signed_url(s, kind, name).await?;
    let stream = crate::download::get(&url, tls.config()?).await.map_err(Error::Api)?;
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    // The decoding reads the network through a blocking bridge: off the async threads, copied out as it comes.
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(16);
    let reading = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut gz = flate2::read::MultiGzDecoder::new(reader);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match gz.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if tx.send(Ok(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });
    let out_result = tokio::task::block_in_place(|| {
        for chunk in rx {
            let chunk = chunk.map_err(|e| Error::Api(format!("reading the {kind} of {name}: {e}")))?;
            out.write_all(&chunk)
                .map_err(|e| Error::User(format!("writing the {kind}: {e}")))?;
        }
        out.flush().map_err(|e| Error::User(format!("writing the {kind}: {e}")))
    });
    let _ = reading.await;
    out_result
}

/// File `kind` of `name`, gunzipped, as JSON.
pub async fn json(s: &Session, kind: &str, name: &str, tls: &Tls) -> Result<Value> {
    let mut buf = Vec::new();
    copy(s, kind, name, tls, &mut buf).await?;
    serde_json::from_slice(&buf).map_err(|e| Error::Api(format!("the {kind} of {name} is not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_read_from_the_request_status() {
        let waiting = json!({"status": {"phase": "New", "conditions": [{"type": "Accepted", "status": "True"}]}});
        assert_eq!(refusal(&waiting), None);
        let closed = json!({"status": {"phase": "BackingOff", "conditions": [{"type": "NonAdminBackupStorageLocationNotUsed",
            "status": "True", "reason": "Error", "message": "backup does not use nonadminbackupstoragelocation"}]}});
        assert_eq!(
            refusal(&closed).unwrap(),
            "the file cannot be downloaded: backup does not use nonadminbackupstoragelocation (Error)"
        );
        assert!(refusal(&json!({"status": {"phase": "BackingOff"}})).is_some());
        assert_eq!(truncate("a-very-long-name", 7), "a-very");
    }
}
