//! `--wait`: follows a backup or restore until Velero is done with it (or nac refuses it), showing phase changes
//! and items done of total — on one rewritten line on a terminal, as plain lines otherwise.

use super::kinds::{Kind, FINAL};
use super::{Result, Session};
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// The progress line for an object: phase, queue position, items.
pub fn progress(o: &Value, kind: &Kind) -> String {
    let mut line = format!("{}: {}", kind.noun, kind.phase(o));
    if let Some(p) = o["status"]["queueInfo"]["estimatedQueuePosition"]
        .as_i64()
        .filter(|p| *p > 0)
    {
        line.push_str(&format!(", queue position {p}"));
    }
    let p = &kind.velero_status(o)["progress"];
    let done = p["itemsBackedUp"].as_i64().or_else(|| p["itemsRestored"].as_i64());
    if let (Some(done), Some(total)) = (done, p["totalItems"].as_i64()) {
        line.push_str(&format!(", {done}/{total} items"));
    }
    line
}

/// Whether nothing will change any more: Velero finished, or nac refused the object.
pub fn settled(o: &Value, kind: &Kind) -> bool {
    FINAL.contains(&kind.phase(o)) || o["status"]["phase"] == "BackingOff"
}

/// Follows `name` until settled; the object as it ended.
pub async fn until_settled(s: &Session, kind: &Kind, name: &str) -> Result<Value> {
    let tty = std::io::stdout().is_terminal();
    let mut shown = String::new();
    let mut out = std::io::stdout();
    loop {
        let o = s.get(kind, name).await?;
        let line = progress(&o, kind);
        if line != shown {
            if tty {
                let _ = write!(out, "\r\x1b[2K{line}");
            } else {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            shown = line;
        }
        if settled(&o, kind) {
            if tty {
                let _ = writeln!(out);
            }
            return Ok(o);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::kinds::{BACKUP, RESTORE};
    use serde_json::json;

    #[test]
    fn progress_names_phase_queue_and_items() {
        let queued = json!({"status": {"phase": "Created", "queueInfo": {"estimatedQueuePosition": 3},
            "veleroBackup": {"status": {"phase": "Queued"}}}});
        assert_eq!(progress(&queued, &BACKUP), "backup: Queued, queue position 3");
        assert!(!settled(&queued, &BACKUP));
        let running = json!({"status": {"phase": "Created", "veleroRestore": {"status": {"phase": "InProgress",
            "progress": {"itemsRestored": 4, "totalItems": 9}}}}});
        assert_eq!(progress(&running, &RESTORE), "restore: InProgress, 4/9 items");
        let refused = json!({"status": {"phase": "BackingOff"}});
        assert_eq!(progress(&refused, &BACKUP), "backup: BackingOff");
        assert!(settled(&refused, &BACKUP));
        let done = json!({"status": {"veleroBackup": {"status": {"phase": "PartiallyFailed"}}}});
        assert!(settled(&done, &BACKUP));
        assert_eq!(progress(&json!({}), &BACKUP), "backup: New");
    }
}
