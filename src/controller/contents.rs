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
        let bsl = backup
            .spec
            .storage_location
            .as_deref()
            .and_then(|l| view.get::<BackupStorageLocation>().get(&ctx.velero_ref(l)));
        let ca = bsl.as_ref().and_then(|b| b.spec.object_storage.ca_cert.clone());
        // A tenant's location (or one nac cannot see) is reached only where the policy lets tenants' endpoints go.
        let guard = bsl
            .is_none_or(|b| crate::naming::NABSL.origin_of(&b.metadata).is_some())
            .then(|| crate::endpoints::Guard {
                rules: std::sync::Arc::new(
                    ctx.policy
                        .current()
                        .map(|p| p.non_admin_bsl.clone())
                        .unwrap_or_default(),
                ),
                endpoints: ctx.opts.endpoints.clone(),
            });
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
    let url = signed_url(ctx, "RestoreResourceList", &restore.name_any(), name).await;
    let _ = ctx
        .velero_api::<DownloadRequest>()
        .delete(name, &DeleteParams::background())
        .await;
    let url = url?;
    let ca = backup
        .and_then(|b| b.spec.storage_location.as_deref())
        .and_then(|l| view.get::<BackupStorageLocation>().get(&ctx.velero_ref(l)))
        .and_then(|bsl| bsl.spec.object_storage.ca_cert.clone());
    let tls = crate::download::tls_config(ca.as_deref().map(str::as_bytes))
        .map_err(|e| Error::Inconsistent(format!("the storage location's caCert: {e}")))?;
    let read = async {
        use futures::TryStreamExt;
        let mut stream = crate::download::get(&url, tls)
            .await
            .map_err(|e| Error::NotReady(format!("the restore's resource list: {e}")))?;
        let mut body = Vec::new();
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| Error::NotReady(format!("the restore's resource list: {e}")))?
        {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > MAX_RESOURCE_LIST_BYTES {
                return Ok(Err(format!("larger than {MAX_RESOURCE_LIST_BYTES} bytes compressed")));
            }
        }
        Ok::<_, Error>(Ok(body))
    };
    let body = match tokio::time::timeout(READ_TIMEOUT, read).await {
        Err(_) => return Err(Error::NotReady("reading the restore's resource list timed out".into())),
        Ok(r) => r?,
    };
    Ok(body.and_then(|b| {
        let mut text = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(flate2::read::GzDecoder::new(b.as_slice()), MAX_RESOURCE_LIST_BYTES * 4),
            &mut text,
        )
        .map_err(|e| format!("not gzipped: {e}"))?;
        serde_json::from_slice(&text).map_err(|e| format!("not Velero's resource list: {e}"))
    }))
}

/// Asks Velero for a signed URL of a file of backup or restore `target` (`kind`: `BackupContents`,
/// `RestoreResourceList`) and waits for the answer.
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
