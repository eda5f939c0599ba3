//! The contents of a Velero Backup, read for a restore's rights check (`crate::rights::restore`): a Velero
//! DownloadRequest for its BackupContents, then the tarball from the signed URL Velero answers with, streamed
//! through the scanner (never held whole in memory).
//!
//! The URL points at the backup's storage location, which may be a tenant's own endpoint: the body is untrusted
//! data, read within the scanner's limits and a deadline.

use super::context::{Error, Shared};
use super::view::View;
use super::write::create_or_get;
use crate::naming::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OADP_LABEL, OADP_LABEL_VALUE};
use crate::rights::contents::{scan, Contents, Limits};
use crate::velero::{Backup, BackupStorageLocation, DownloadRequest, DownloadRequestSpec, DownloadTarget};
use kube::api::DeleteParams;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long Velero may take to answer the DownloadRequest.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long reading the whole tarball may take.
const READ_TIMEOUT: Duration = Duration::from_secs(600);

/// The contents, or why they cannot be read.
pub type Scanned = Result<Contents, String>;

/// Where a restore's rights check reads a backup's contents from.
pub enum ContentsSource {
    /// Through Velero and the backup's storage location, within the scanner's limits.
    Velero(Limits),
    /// Fixed contents, for reconcile tests.
    Fixed(Contents),
}

impl ContentsSource {
    /// What backup `backup` holds for `namespace`. `key` names the DownloadRequest (one per restore). The inner
    /// `Err` is contents that cannot be read (not a tarball, over the limits): that will not change on retry.
    pub async fn contents(
        &self,
        ctx: &Shared,
        view: &View,
        backup: &Backup,
        namespace: &str,
        key: &str,
    ) -> Result<Scanned, Error> {
        let limits = match self {
            ContentsSource::Fixed(c) => return Ok(Ok(c.clone())),
            ContentsSource::Velero(limits) => limits,
        };
        let name = format!("rights-{key}");
        let url = signed_url(ctx, "BackupContents", &backup.name_any(), &name).await;
        let api = ctx.velero_api::<DownloadRequest>();
        // Velero deletes expired requests itself; this one is done with as soon as it is read.
        let _ = api.delete(&name, &DeleteParams::background()).await;
        let url = url?;
        let bsl = location_of(ctx, view, Some(backup));
        let ca = bsl.as_ref().and_then(|b| b.spec.object_storage.ca_cert.clone());
        let guard = tenant_guard(ctx, bsl.as_deref());
        let read = fetch_and_scan(url, ca, guard, namespace.to_string(), limits.clone());
        tokio::time::timeout(READ_TIMEOUT, read).await.map_err(|_| {
            Error::NotReady(format!(
                "reading the contents of Velero Backup {} timed out",
                backup.name_any()
            ))
        })?
    }
}

/// Most of a restore's resource list nac reads (a list of names: far more than any namespace holds).
const MAX_RESOURCE_LIST_BYTES: u64 = 64 << 20;

/// What Velero says it restored (its RestoreResourceList: `group/version/Kind` → `namespace/name(action)`), read
/// through a DownloadRequest named `name`. The inner `Err`: the list cannot be read as one (it will not change).
pub async fn restored_list(
    ctx: &Shared,
    view: &View,
    restore: &crate::velero::Restore,
    backup: Option<&Backup>,
    name: &str,
) -> Result<Result<BTreeMap<String, Vec<String>>, String>, Error> {
    let file = VeleroFile {
        kind: "RestoreResourceList",
        what: "the restore's resource list",
        max: MAX_RESOURCE_LIST_BYTES,
    };
    Ok(file
        .read(ctx, view, &restore.name_any(), backup, name)
        .await?
        .and_then(|t| serde_json::from_slice(&t).map_err(|e| format!("not Velero's resource list: {e}"))))
}

/// Most of a backup's or restore's results file nac reads: error and warning messages, a few per item at most.
const MAX_RESULTS_BYTES: u64 = 4 << 20;

/// The messages of a Velero results file (`{"errors": {"velero": [...], "cluster": [...], "namespaces": {ns:
/// [...]}}, "warnings": {...}}`) that concern `namespace`, errors first, each marked: Velero's own, then the
/// namespace's. The file may come from a tenant's own storage: only these lists are read, and each message is
/// shown as plain text on one line.
pub fn messages_in_results(text: &[u8], namespace: &str) -> Result<Vec<String>, String> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Messages {
        velero: Vec<String>,
        namespaces: BTreeMap<String, Vec<String>>,
    }
    #[derive(serde::Deserialize)]
    struct Results {
        #[serde(default)]
        errors: Messages,
        #[serde(default)]
        warnings: Messages,
    }
    let r: Results = serde_json::from_slice(text).map_err(|e| format!("not Velero's results: {e}"))?;
    let mut out = Vec::new();
    for (mark, mut m) in [("error", r.errors), ("warning", r.warnings)] {
        let own = m.namespaces.remove(namespace).unwrap_or_default();
        for message in m.velero.into_iter().chain(own) {
            let line: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
            out.push(format!("{mark}: {}", line.trim()));
        }
    }
    Ok(out)
}

/// Most messages a condition shows, and most characters of each.
const SHOWN_MESSAGES: usize = 3;
const SHOWN_MESSAGE_CHARS: usize = 300;

/// What reading a finished run's results gave, for its `VeleroResults` condition.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Results {
    /// Nothing to read, or read before.
    #[default]
    Nothing,
    /// Velero or the storage did not answer now: asked again after [`RESULTS_RETRY`].
    Pending,
    /// The condition's reason and message.
    Read(&'static str, String),
}

/// How soon a results read that got no answer is tried again.
pub const RESULTS_RETRY: Duration = Duration::from_secs(30);
/// How long after the run finished nac keeps trying; then the condition says the results could not be read.
pub const RESULTS_GIVE_UP: Duration = Duration::from_secs(600);

/// Velero's counts of a finished backup or restore: what makes its results worth reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub errors: i64,
    pub warnings: i64,
}

impl Counts {
    /// The counts to read the results for, once: a run whose final phase (`unfinished` false) the status records
    /// already (the phase is never held up by the read), with errors or warnings, and no `VeleroResults` condition
    /// saying they were read.
    pub fn to_read(
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
        unfinished: bool,
        errors: Option<i64>,
        warnings: Option<i64>,
    ) -> Option<Counts> {
        let counts = Counts {
            errors: errors.unwrap_or(0),
            warnings: warnings.unwrap_or(0),
        };
        let read = conditions.iter().any(|c| c.type_ == super::status::VELERO_RESULTS);
        (!read && !unfinished && counts.errors + counts.warnings > 0).then_some(counts)
    }
}

/// The `VeleroResults` condition of tenant object `tenant`, whose Velero `kind` ("Backup", "Restore") `target`
/// finished at `finished` with `counts`: its reason and message, from the results file (stored on `backup`'s
/// location) read through a DownloadRequest of its own. Pending while Velero or the storage does not answer, for
/// [`RESULTS_GIVE_UP`] after the run finished; then the condition says why it could not be read.
#[allow(clippy::too_many_arguments)]
pub async fn results_condition(
    ctx: &Shared,
    view: &View,
    kind: &'static str,
    target: &str,
    backup: Option<&Backup>,
    tenant: &impl ResourceExt,
    counts: Counts,
    finished: Option<&str>,
) -> Results {
    let results = if kind == "Backup" {
        "BackupResults"
    } else {
        "RestoreResults"
    };
    let file = VeleroFile {
        kind: results,
        what: "Velero's results",
        max: MAX_RESULTS_BYTES,
    };
    let name = format!("results-{}", tenant.uid().unwrap_or_else(|| tenant.name_any()));
    let namespace = tenant.namespace().unwrap_or_default();
    let read = match file.read(ctx, view, target, backup, &name).await {
        Ok(read) => read.and_then(|t| messages_in_results(&t, &namespace)),
        Err(e) if !gave_up(finished, super::conditions::now_seconds()) => {
            tracing::info!(velero = %target, error = %e, "Velero's results not read yet");
            return Results::Pending;
        }
        Err(e) => Err(format!(
            "no answer within {} s of the run's end: {e}",
            RESULTS_GIVE_UP.as_secs()
        )),
    };
    let (reason, message) = results_message(kind, &tenant.name_any(), counts, read);
    Results::Read(reason, message)
}

/// Whether a run that finished at `finished` (RFC 3339; unknown: now) ended more than [`RESULTS_GIVE_UP`] before
/// `now`.
fn gave_up(finished: Option<&str>, now: k8s_openapi::jiff::Timestamp) -> bool {
    finished
        .and_then(|f| f.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|f| {
            now.duration_since(f) > k8s_openapi::jiff::SignedDuration::try_from(RESULTS_GIVE_UP).unwrap_or_default()
        })
}

/// The condition's reason and message for `counts` and what the results file gave.
pub fn results_message(
    kind: &str,
    tenant: &str,
    counts: Counts,
    read: Result<Vec<String>, String>,
) -> (&'static str, String) {
    use super::status::{ERRORS_REPORTED, RESULTS_NOT_READ, WARNINGS_REPORTED};
    let lower = kind.to_lowercase();
    let logs = format!("`kubectl nac {lower} logs {tenant}` shows Velero's log of it");
    let finished = format!(
        "Velero {kind} finished with {} error(s) and {} warning(s)",
        counts.errors, counts.warnings
    );
    let reason = if counts.errors > 0 {
        ERRORS_REPORTED
    } else {
        WARNINGS_REPORTED
    };
    match read {
        Ok(messages) if messages.is_empty() => (
            reason,
            format!("{finished}, none of them for this namespace in its results; {logs}"),
        ),
        Ok(messages) => {
            let shown: Vec<String> = messages
                .iter()
                .take(SHOWN_MESSAGES)
                .map(|e| {
                    let mut m: String = e.chars().take(SHOWN_MESSAGE_CHARS).collect();
                    if e.chars().count() > SHOWN_MESSAGE_CHARS {
                        m.push_str("...");
                    }
                    m
                })
                .collect();
            let more = if messages.len() > shown.len() {
                format!(" (and {} more)", messages.len() - shown.len())
            } else {
                String::new()
            };
            (
                reason,
                format!("{finished}; Velero's results say: {}{more}; {logs}", shown.join(" | ")),
            )
        }
        Err(why) => (
            RESULTS_NOT_READ,
            format!("{finished}; its results cannot be read: {why}; {logs}"),
        ),
    }
}

/// A gzipped file of a Velero Backup or Restore in object storage, read whole through a DownloadRequest.
struct VeleroFile {
    /// The DownloadRequest's target kind.
    kind: &'static str,
    /// How errors name it.
    what: &'static str,
    /// Most bytes read, compressed (and four times that uncompressed).
    max: u64,
}

impl VeleroFile {
    /// The file of `target`, stored on `backup`'s location, uncompressed. A location of a tenant's (or one nac
    /// cannot see) is reached only where the policy lets tenants' endpoints go. The inner `Err`: the file cannot
    /// be read from there or is not gzipped within the limit (asking again will not change it).
    async fn read(
        &self,
        ctx: &Shared,
        view: &View,
        target: &str,
        backup: Option<&Backup>,
        name: &str,
    ) -> Result<Result<Vec<u8>, String>, Error> {
        let url = signed_url(ctx, self.kind, target, name).await;
        let _ = ctx
            .velero_api::<DownloadRequest>()
            .delete(name, &DeleteParams::background())
            .await;
        let url = url?;
        let bsl = location_of(ctx, view, backup);
        let ca = bsl.as_ref().and_then(|b| b.spec.object_storage.ca_cert.clone());
        let tls = crate::download::tls_config(ca.as_deref().map(str::as_bytes))
            .map_err(|e| Error::Inconsistent(format!("the storage location's caCert: {e}")))?;
        let guard = tenant_guard(ctx, bsl.as_deref());
        let (what, max) = (self.what, self.max);
        let read = async {
            use futures::TryStreamExt;
            let mut stream = match crate::download::get_guarded(&url, tls, guard).await {
                Ok(s) => s,
                Err(crate::download::FetchError::Refused(why) | crate::download::FetchError::Missing(why)) => {
                    return Ok(Err(why))
                }
                Err(e) => return Err(Error::NotReady(format!("{what}: {e}"))),
            };
            let mut body = Vec::new();
            while let Some(chunk) = stream
                .try_next()
                .await
                .map_err(|e| Error::NotReady(format!("{what}: {e}")))?
            {
                body.extend_from_slice(&chunk);
                if body.len() as u64 > max {
                    return Ok(Err(format!("{what}: larger than {max} bytes compressed")));
                }
            }
            Ok::<_, Error>(Ok(body))
        };
        let body = match tokio::time::timeout(READ_TIMEOUT, read).await {
            Err(_) => return Err(Error::NotReady(format!("reading {what} timed out"))),
            Ok(r) => r?,
        };
        Ok(body.and_then(|b| {
            let mut text = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(flate2::read::GzDecoder::new(b.as_slice()), max * 4),
                &mut text,
            )
            .map_err(|e| format!("{what}: not gzipped: {e}"))?;
            Ok(text)
        }))
    }
}

/// The storage location of `backup`: the one it names, else Velero's default location (where Velero stores a
/// backup that names none; only an admin's location is a default: nac makes tenants' copies non-default).
fn location_of(ctx: &Shared, view: &View, backup: Option<&Backup>) -> Option<std::sync::Arc<BackupStorageLocation>> {
    let locations = view.get::<BackupStorageLocation>();
    match backup?.spec.storage_location.as_deref().filter(|l| !l.is_empty()) {
        Some(l) => locations.get(&ctx.velero_ref(l)),
        None => locations
            .store
            .find(|b| b.spec.default && b.metadata.namespace.as_deref() == Some(ctx.opts.velero_namespace.as_str())),
    }
}

/// The guard on fetches from a backup's location: a tenant's location (or one nac cannot see) is reached only
/// where the policy lets tenants' endpoints go; an admin's is not guarded.
fn tenant_guard(ctx: &Shared, bsl: Option<&BackupStorageLocation>) -> Option<crate::endpoints::Guard> {
    bsl.is_none_or(|b| crate::naming::NABSL.origin_of(&b.metadata).is_some())
        .then(|| crate::endpoints::Guard {
            rules: std::sync::Arc::new(
                ctx.policy
                    .current()
                    .map(|p| p.non_admin_bsl.clone())
                    .unwrap_or_default(),
            ),
            endpoints: ctx.opts.endpoints.clone(),
        })
}

/// Asks Velero for a signed URL of a file of backup or restore `target` (`kind`: `BackupContents`,
/// `RestoreResourceList`, `BackupResults`, ...) and waits for the answer.
async fn signed_url(ctx: &Shared, kind: &str, target: &str, name: &str) -> Result<String, Error> {
    let backup = target;
    let api = ctx.velero_api::<DownloadRequest>();
    let mut dr = DownloadRequest::new(
        name,
        DownloadRequestSpec {
            target: DownloadTarget {
                kind: kind.into(),
                name: backup.into(),
            },
        },
    );
    dr.metadata.namespace = Some(ctx.opts.velero_namespace.clone());
    dr.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
        (OADP_LABEL.to_string(), OADP_LABEL_VALUE.to_string()),
    ]));
    let made = create_or_get(&api, &dr, &ctx.metrics, "DownloadRequest").await?;
    if made.spec.target != dr.spec.target {
        return Err(Error::Inconsistent(format!(
            "Velero DownloadRequest {name} exists for another target"
        )));
    }
    let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
    loop {
        if let Some(dr) = api.get_opt(name).await? {
            let s = dr.status.unwrap_or_default();
            if s.phase.as_deref() == Some("Processed") {
                return s.download_url.filter(|u| !u.is_empty()).ok_or_else(|| {
                    Error::NotReady(format!(
                        "Velero processed DownloadRequest {name} for the {kind} of {backup} without a URL"
                    ))
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::NotReady(format!(
                "Velero did not answer DownloadRequest {name} for the {kind} of {backup} within {}s; is Velero \
                 running?",
                ANSWER_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn fetch_and_scan(
    url: String,
    ca: Option<String>,
    guard: Option<crate::endpoints::Guard>,
    namespace: String,
    limits: Limits,
) -> Result<Scanned, Error> {
    let tls = crate::download::tls_config(ca.as_deref().map(str::as_bytes))
        .map_err(|e| Error::Inconsistent(format!("the storage location's caCert: {e}")))?;
    let stream = match crate::download::get_guarded(&url, tls, guard).await {
        Ok(s) => s,
        // Not retried: the contents cannot be read from there (the restore says why).
        Err(crate::download::FetchError::Refused(why)) => return Ok(Err(why)),
        Err(e) => return Err(Error::NotReady(format!("the backup's contents: {e}"))),
    };
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    tokio::task::spawn_blocking(move || scan(reader, &namespace, &limits))
        .await
        .map_err(|e| Error::Inconsistent(format!("scanning the backup's contents: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::status::{ERRORS_REPORTED, RESULTS_NOT_READ, WARNINGS_REPORTED};

    #[test]
    fn a_results_file_gives_errors_then_warnings_of_velero_and_the_namespace_and_nothing_of_others() {
        let file = serde_json::json!({
            "errors": {
                "velero": ["timed out waiting for the snapshot"],
                "cluster": ["a cluster-scoped item"],
                "namespaces": {"team-a": [" pvc data: not ready\nretry"], "team-b": ["someone else's"]}
            },
            "warnings": {"namespaces": {"team-a": ["pod is not scheduled"], "team-b": ["theirs"]}}
        });
        let messages = messages_in_results(file.to_string().as_bytes(), "team-a").unwrap();
        assert_eq!(
            messages,
            [
                "error: timed out waiting for the snapshot",
                "error: pvc data: not ready retry",
                "warning: pod is not scheduled"
            ]
        );
        assert!(messages_in_results(br#"{"warnings": {}}"#, "team-a")
            .unwrap()
            .is_empty());
        let bad = messages_in_results(b"<html>", "team-a").unwrap_err();
        assert!(bad.starts_with("not Velero's results"), "{bad}");
        let wrong_shape = messages_in_results(br#"{"errors": {"velero": "one"}}"#, "team-a");
        assert!(wrong_shape.is_err(), "{wrong_shape:?}");
    }

    #[test]
    fn a_read_without_an_answer_is_given_up_ten_minutes_after_the_run_ended() {
        let now: k8s_openapi::jiff::Timestamp = "2026-11-28T12:20:00Z".parse().unwrap();
        assert!(!gave_up(Some("2026-11-28T12:15:00Z"), now));
        assert!(!gave_up(Some("2026-11-28T12:10:00Z"), now), "exactly ten minutes");
        assert!(gave_up(Some("2026-11-28T12:09:59Z"), now));
        assert!(!gave_up(None, now), "an unknown end is now");
        assert!(!gave_up(Some("yesterday"), now));
    }

    #[test]
    fn the_condition_shows_the_first_messages_cut_and_says_where_the_rest_are() {
        let long = format!("error: {}", "x".repeat(SHOWN_MESSAGE_CHARS));
        let read = Ok(vec![
            "error: first".into(),
            long,
            "warning: third".into(),
            "warning: fourth".into(),
        ]);
        let counts = Counts { errors: 2, warnings: 2 };
        let (reason, m) = results_message("Backup", "nightly", counts, read);
        assert_eq!(reason, ERRORS_REPORTED);
        assert!(
            m.starts_with("Velero Backup finished with 2 error(s) and 2 warning(s); Velero's results say: error: first | error: xxx"),
            "{m}"
        );
        assert!(m.contains("x... | warning: third (and 1 more)"), "{m}");
        assert!(!m.contains("fourth"), "{m}");
        assert!(
            m.ends_with("`kubectl nac backup logs nightly` shows Velero's log of it"),
            "{m}"
        );

        let warned = Counts { errors: 0, warnings: 1 };
        let (reason, m) = results_message("Restore", "r1", warned, Ok(vec![]));
        assert_eq!(reason, WARNINGS_REPORTED);
        assert!(m.contains("none of them for this namespace"), "{m}");
        assert!(m.contains("kubectl nac restore logs r1"), "{m}");

        let (reason, m) = results_message("Backup", "b", counts, Err("HTTP 404".into()));
        assert_eq!(reason, RESULTS_NOT_READ);
        assert!(m.contains("its results cannot be read: HTTP 404"), "{m}");
    }
}
