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
/// How long the storage may keep silent: before it answers a request, and between two parts of a body. A silent
/// endpoint (a tenant's own location may be one) holds a reconcile worker no longer than this per try.
const STORAGE_SILENCE: Duration = Duration::from_secs(30);
/// The slowest pace a body may keep, in bytes a second, averaged over each span of the silence allowed: an endpoint
/// that trickles a byte now and then, never silent for long, holds a worker no longer than two such spans per try.
/// Any real object store is faster by orders of magnitude.
const MIN_STORAGE_RATE: u64 = 64 << 10;

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
        let url = signed_url(ctx, "BackupContents", &backup.name_any(), &name, RESTORE_WAIT).await;
        let api = ctx.velero_api::<DownloadRequest>();
        // Velero deletes expired requests itself; this one is done with as soon as it is read.
        let _ = api.delete(&name, &DeleteParams::background()).await;
        let url = url?;
        let bsl = location_of(ctx, view, Some(backup));
        let ca = bsl.as_ref().and_then(|b| b.spec.object_storage.ca_cert.clone());
        let guard = tenant_guard(ctx, bsl.as_deref());
        let read = fetch_and_scan(url, ca, guard, namespace.to_string(), limits.clone(), STORAGE_SILENCE);
        tokio::time::timeout(READ_TIMEOUT, read).await.map_err(|_| {
            Error::NotReady(format!(
                "reading the contents of Velero Backup {} timed out",
                backup.name_any()
            ))
        })?
    }
}

/// Most of a restore's resource list nac reads, compressed: a list of names, 32 MiB of them uncompressed (hundreds
/// of thousands of items, more than any namespace holds). It may come from a tenant's bucket; it is read item by
/// item (`rights::restore::unchecked_in`), never kept whole.
const MAX_RESOURCE_LIST_BYTES: u64 = 8 << 20;

/// What Velero says it restored (its RestoreResourceList: `group/version/Kind` → `namespace/name(action)`),
/// uncompressed, read through a DownloadRequest named `name`. The inner `Err`: the list cannot be read (it will
/// not change).
pub async fn restored_list(
    ctx: &Shared,
    view: &View,
    restore: &crate::velero::Restore,
    backup: Option<&Backup>,
    name: &str,
) -> Result<Result<Vec<u8>, String>, Error> {
    let file = VeleroFile {
        kind: "RestoreResourceList",
        what: "the restore's resource list",
        max: MAX_RESOURCE_LIST_BYTES,
        answer: RESTORE_WAIT,
        read: READ_TIMEOUT,
    };
    file.read(ctx, view, &restore.name_any(), backup, name).await
}

/// Most of a backup's or restore's results file nac reads, compressed (4 MiB of messages uncompressed: thousands
/// of items' warnings). The file may be a tenant's: it is parsed keeping only what the condition shows.
const MAX_RESULTS_BYTES: u64 = 1 << 20;

/// The messages of a Velero results file (`{"errors": {"velero": [...], "cluster": [...], "namespaces": {ns:
/// [...]}}, "warnings": {...}}`) that concern `namespace`, errors first, each marked: Velero's own, then the
/// namespace's. The file may come from a tenant's own storage: it is parsed without keeping more than the first
/// [`SHOWN_MESSAGES`] messages (each cut to [`SHOWN_MESSAGE_CHARS`] and put on one line) and a count of all, so
/// that no file within the size limit costs more memory than that.
pub fn messages_in_results(text: &[u8], namespace: &str) -> Result<Shown, String> {
    let mut parts: [Shown; 4] = Default::default();
    let mut de = serde_json::Deserializer::from_slice(text);
    serde::Deserializer::deserialize_map(
        &mut de,
        results_file::File {
            parts: &mut parts,
            namespace,
        },
    )
    .and_then(|()| de.end())
    .map_err(|e| format!("not Velero's results: {e}"))?;
    let mut all = Shown::default();
    for p in parts {
        all.total += p.total;
        for m in p.messages {
            if all.messages.len() < SHOWN_MESSAGES {
                all.messages.push(m);
            }
        }
    }
    Ok(all)
}

/// A results file's parts as serde visits them, keeping only what [`Shown`] holds.
mod results_file {
    use super::{Shown, SHOWN_MESSAGE_CHARS};
    use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    /// Where the messages of one list go: marked and cut while there is room, counted always.
    struct Into<'a> {
        shown: &'a mut Shown,
        mark: &'static str,
    }
    crate::download::streamed_part! { 'de, Into<'_>, deserialize_seq, "a list of messages",
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(m) = seq.next_element::<Message>()? {
                self.shown.add(self.mark, &m.0);
            }
            Ok(())
        }
    }
    /// A message, cut while it is read (never held whole when it is long).
    struct Message(String);
    impl<'de> serde::Deserialize<'de> for Message {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Message;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a message")
                }
                fn visit_str<E>(self, v: &str) -> Result<Message, E> {
                    Ok(Message(v.chars().take(SHOWN_MESSAGE_CHARS + 1).collect()))
                }
            }
            d.deserialize_str(V)
        }
    }
    /// One of "errors" and "warnings": Velero's own list and the namespace's, in `first` and `then`.
    struct Part<'a> {
        first: Into<'a>,
        then: Into<'a>,
        namespace: &'a str,
    }
    crate::download::streamed_part! { 'de, Part<'_>, deserialize_map, "Velero's messages by where they arose",
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let Part { first, then, namespace } = self;
            let (mut first, mut then) = (Some(first), Some(then));
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match (key.as_ref(), first.take()) {
                    ("velero", Some(f)) => map.next_value_seed(f)?,
                    // A key given twice (a crafted file) is read the first time only.
                    ("namespaces", f) if then.is_some() => {
                        first = f;
                        let into = then.take().expect("checked just above");
                        map.next_value_seed(Namespaces { into, namespace })?;
                    }
                    (_, f) => {
                        first = f;
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    /// The namespaces' lists: only `namespace`'s is read, the others skipped.
    struct Namespaces<'a> {
        into: Into<'a>,
        namespace: &'a str,
    }
    crate::download::streamed_part! { 'de, Namespaces<'_>, deserialize_map, "messages by namespace",
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut into = Some(self.into);
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match into.take() {
                    Some(i) if key == self.namespace => map.next_value_seed(i)?,
                    i => {
                        into = i;
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    /// The file: "errors", then "warnings", whatever their order in it.
    pub(super) struct File<'a> {
        pub(super) parts: &'a mut [Shown; 4],
        pub(super) namespace: &'a str,
    }
    impl<'de> Visitor<'de> for File<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("Velero's results")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let [ev, en, wv, wn] = self.parts;
            let (mut errors, mut warnings) = (Some((ev, en)), Some((wv, wn)));
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                let (part, mark) = match key.as_ref() {
                    "errors" => (errors.take(), "error"),
                    "warnings" => (warnings.take(), "warning"),
                    _ => (None, ""),
                };
                match part {
                    Some((v, n)) => map.next_value_seed(Part {
                        first: Into { shown: v, mark },
                        then: Into { shown: n, mark },
                        namespace: self.namespace,
                    })?,
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
}

/// The first messages of a results file, marked and cut, and how many there are in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    pub messages: Vec<String>,
    pub total: usize,
}

impl Shown {
    fn add(&mut self, mark: &str, message: &str) {
        self.total += 1;
        if self.messages.len() < SHOWN_MESSAGES {
            let line: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
            let mut line = line.trim().to_string();
            if line.chars().count() > SHOWN_MESSAGE_CHARS {
                line = line.chars().take(SHOWN_MESSAGE_CHARS).collect::<String>() + "...";
            }
            self.messages.push(format!("{mark}: {line}"));
        }
    }
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

impl Results {
    /// Sets the `VeleroResults` condition in `conditions` once the results are read (only then is there one).
    pub fn mirror(&self, conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>) {
        if let Results::Read(reason, message) = self {
            let now = super::conditions::now_seconds();
            super::conditions::set_condition(conditions, super::status::VELERO_RESULTS, true, reason, message, now);
        }
    }
}

/// How soon a results read that got no answer is tried again.
pub const RESULTS_RETRY: Duration = Duration::from_secs(30);
/// How long after the run finished nac keeps trying; then the condition says the results could not be read.
pub const RESULTS_GIVE_UP: Duration = Duration::from_secs(600);
/// Runs that ended longer ago than this are not read at all.
pub const RESULTS_STALE: Duration = Duration::from_secs(3600);

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
        (!read && !unfinished && (counts.errors > 0 || counts.warnings > 0)).then_some(counts)
    }
}

/// What a tenant object's status copies of its Velero run's status, as far as the run's results go.
pub struct Run<'a> {
    /// "Backup" or "Restore".
    pub kind: &'static str,
    pub unfinished: bool,
    pub errors: Option<i64>,
    pub warnings: Option<i64>,
    pub finished: Option<&'a str>,
}

macro_rules! run_of {
    ($status:ty, $kind:literal, $unfinished:path) => {
        impl<'a> From<&'a $status> for Run<'a> {
            fn from(r: &'a $status) -> Self {
                Run {
                    kind: $kind,
                    unfinished: $unfinished(r.phase.as_deref()),
                    errors: r.errors,
                    warnings: r.warnings,
                    finished: r.completion_timestamp.as_deref(),
                }
            }
        }
    };
}
run_of!(
    crate::velero::BackupStatus,
    "Backup",
    crate::velero::backup_phase_unfinished
);
run_of!(
    crate::velero::RestoreStatus,
    "Restore",
    crate::velero::restore_phase_unfinished
);

/// Velero's first messages of a run it finished with errors or warnings, read once ([`Counts::to_read`]): the
/// [`results_condition`] of `tenant`, whose status holds `conditions` and the copy `run` of Velero `target`'s
/// status; nothing while it has no copy.
pub async fn results_of<'a>(
    ctx: &Shared,
    view: &View,
    tenant: &impl ResourceExt,
    (conditions, run): (
        &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
        Option<impl Into<Run<'a>>>,
    ),
    target: &str,
    backup: Option<&Backup>,
) -> Results {
    let Some(run) = run.map(Into::into) else {
        return Results::Nothing;
    };
    let Some(counts) = Counts::to_read(conditions, run.unfinished, run.errors, run.warnings) else {
        return Results::Nothing;
    };
    results_condition(ctx, view, run.kind, target, backup, tenant, counts, run.finished).await
}

/// The `VeleroResults` condition of tenant object `tenant`, whose Velero `kind` ("Backup", "Restore") `target`
/// finished at `finished` with `counts`: its reason and message, from the results file (stored on `backup`'s
/// location) read through a DownloadRequest of its own. Pending while Velero or the storage does not answer, for
/// [`RESULTS_GIVE_UP`] after the run finished; then (and at once for a run whose end is unknown or in the future)
/// the condition says why it could not be read. A run that ended more than [`RESULTS_STALE`] ago is not read: a
/// run from before nac was installed or upgraded, or one synced from object storage.
#[allow(clippy::too_many_arguments)]
async fn results_condition(
    ctx: &Shared,
    view: &View,
    kind: &'static str,
    target: &str,
    backup: Option<&Backup>,
    tenant: &impl ResourceExt,
    counts: Counts,
    finished: Option<&str>,
) -> Results {
    let age = age_of(finished, super::conditions::now_seconds());
    if age.is_some_and(|a| a > RESULTS_STALE) {
        return Results::Nothing;
    }
    let results = if kind == "Backup" {
        "BackupResults"
    } else {
        "RestoreResults"
    };
    let file = VeleroFile {
        kind: results,
        what: "Velero's results",
        max: MAX_RESULTS_BYTES,
        answer: RESULTS_WAIT,
        read: RESULTS_READ_TIMEOUT,
    };
    let name = format!("results-{}", tenant.uid().unwrap_or_else(|| tenant.name_any()));
    let namespace = tenant.namespace().unwrap_or_default();
    let read = match file.read(ctx, view, target, backup, &name).await {
        Ok(read) => read.and_then(|t| messages_in_results(&t, &namespace)),
        Err(e) if age.is_some_and(|a| a <= RESULTS_GIVE_UP) => {
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

/// How long before `now` a run finished at `finished` (RFC 3339) ended; `None` when that is unknown or in the
/// future (a status from object storage may say anything).
fn age_of(finished: Option<&str>, now: k8s_openapi::jiff::Timestamp) -> Option<Duration> {
    let f = finished?.parse::<k8s_openapi::jiff::Timestamp>().ok()?;
    Duration::try_from(now.duration_since(f)).ok()
}

/// The condition's reason and message for `counts` and what the results file gave.
pub fn results_message(
    kind: &str,
    tenant: &str,
    counts: Counts,
    read: Result<Shown, String>,
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
        Ok(shown) if shown.messages.is_empty() => (
            reason,
            format!("{finished}, none of them for this namespace in its results; {logs}"),
        ),
        Ok(shown) => {
            let more = shown.total.saturating_sub(shown.messages.len());
            let more = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            (
                reason,
                format!(
                    "{finished}; Velero's results say: {}{more}; {logs}",
                    shown.messages.join(" | ")
                ),
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
    /// How long Velero may take to answer the DownloadRequest, and how often nac looks.
    answer: Wait,
    /// How long the download may take, connecting included.
    read: Duration,
}

/// How long to wait for Velero's answer to a DownloadRequest, looking every `every`.
#[derive(Clone, Copy)]
struct Wait {
    timeout: Duration,
    every: Duration,
}

/// A restore's reads: Velero is given a minute, looked at often (the restore waits for it).
const RESTORE_WAIT: Wait = Wait {
    timeout: ANSWER_TIMEOUT,
    every: Duration::from_millis(250),
};
/// A results read: short, since it is tried again, and it holds a reconcile worker while it runs.
const RESULTS_WAIT: Wait = Wait {
    timeout: Duration::from_secs(20),
    every: Duration::from_secs(1),
};
const RESULTS_READ_TIMEOUT: Duration = Duration::from_secs(30);

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
        let url = signed_url(ctx, self.kind, target, name, self.answer).await;
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
            let (mut stream, _) = match get_within(&url, tls, guard, what, STORAGE_SILENCE).await? {
                Ok(s) => s,
                Err(why) => return Ok(Err(why)),
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
        let body = match tokio::time::timeout(self.read, read).await {
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
async fn signed_url(ctx: &Shared, kind: &str, target: &str, name: &str, wait: Wait) -> Result<String, Error> {
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
    let deadline = tokio::time::Instant::now() + wait.timeout;
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
                wait.timeout.as_secs()
            )));
        }
        tokio::time::sleep(wait.every).await;
    }
}

/// A body from the storage as it arrives, each part within the silence allowed.
type Body = std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send>>;

/// What broke the transport under a body, once it did (a silence, a reset): the reader above sees only an I/O
/// error, which would read as bad contents.
type Broken = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// GET `url` from the storage: the answer within `silence`, each part of the body within `silence` of the last,
/// and at least [`MIN_STORAGE_RATE`] over each span of `silence`. `Err`: may pass (retried); inner `Err`: the file
/// cannot be read from there or is not there (final).
async fn get_within(
    url: &str,
    tls: rustls::ClientConfig,
    guard: Option<crate::endpoints::Guard>,
    what: &str,
    silence: Duration,
) -> Result<Result<(Body, Broken), String>, Error> {
    use crate::download::FetchError;
    use futures::StreamExt;
    let stream = match tokio::time::timeout(silence, crate::download::get_guarded(url, tls, guard)).await {
        Err(_) => {
            return Err(Error::NotReady(format!(
                "{what}: the storage did not answer within {silence:?}"
            )))
        }
        Ok(Ok(s)) => s,
        Ok(Err(FetchError::Refused(why) | FetchError::Missing(why))) => return Ok(Err(why)),
        Ok(Err(e)) => return Err(Error::NotReady(format!("{what}: {e}"))),
    };
    let broken = Broken::default();
    let record = broken.clone();
    let least = MIN_STORAGE_RATE.saturating_mul(silence.as_millis() as u64) / 1000;
    // (the stream, when the current span began, bytes received in it)
    let start = Some((stream, tokio::time::Instant::now(), 0u64));
    let body = futures::stream::unfold(start, move |state| {
        let record = record.clone();
        async move {
            let (mut s, since, got) = state?;
            let e = match tokio::time::timeout(silence, s.next()).await {
                Ok(Some(Ok(part))) => {
                    let got = got.saturating_add(part.len() as u64);
                    if since.elapsed() < silence {
                        return Some((Ok(part), Some((s, since, got))));
                    }
                    if got >= least {
                        return Some((Ok(part), Some((s, tokio::time::Instant::now(), 0))));
                    }
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the storage sent {got} bytes in {:?}, slower than {} KiB/s",
                            since.elapsed(),
                            MIN_STORAGE_RATE >> 10
                        ),
                    )
                }
                Ok(None) => return None,
                Ok(Some(Err(e))) => e,
                Err(_) => std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the storage sent nothing for {silence:?}"),
                ),
            };
            *record.lock().expect("broken lock") = Some(e.to_string());
            Some((Err(e), None))
        }
    });
    Ok(Ok((Box::pin(body), broken)))
}

async fn fetch_and_scan(
    url: String,
    ca: Option<String>,
    guard: Option<crate::endpoints::Guard>,
    namespace: String,
    limits: Limits,
    silence: Duration,
) -> Result<Scanned, Error> {
    let tls = crate::download::tls_config(ca.as_deref().map(str::as_bytes))
        .map_err(|e| Error::Inconsistent(format!("the storage location's caCert: {e}")))?;
    let what = "the backup's contents";
    // An inner Err is not retried: the contents cannot be read from there, or are not there (the restore says why).
    let (stream, broken) = match get_within(&url, tls, guard, what, silence).await? {
        Ok(s) => s,
        Err(why) => return Ok(Err(why)),
    };
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let scanned = tokio::task::spawn_blocking(move || scan(reader, &namespace, &limits))
        .await
        .map_err(|e| Error::Inconsistent(format!("scanning {what}: {e}")))?;
    // Cut short by the transport, not by what it held: asked again.
    if let Some(e) = broken.lock().expect("broken lock").take() {
        return Err(Error::NotReady(format!("{what}: {e}")));
    }
    Ok(scanned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::status::{ERRORS_REPORTED, RESULTS_NOT_READ, WARNINGS_REPORTED};

    /// A storage on loopback that reads one request, sends `answer` (if any), then closes the connection or keeps
    /// it open in silence.
    async fn storage(answer: Option<Vec<u8>>, close: bool) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            let _ = c.read(&mut [0u8; 4096]).await;
            if let Some(a) = answer {
                c.write_all(&a).await.unwrap();
            }
            if !close {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        });
        format!("http://{addr}/backup.tar.gz")
    }

    #[tokio::test]
    async fn a_silent_or_broken_storage_is_asked_again_and_contents_it_sent_whole_are_judged() {
        let tarball = crate::rights::contents::tests::tarball(&[(
            "resources/configmaps/namespaces/team-a/app.json",
            serde_json::json!({"kind": "ConfigMap"}),
        )]);
        let ok = |len: usize| format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").into_bytes();
        let half = [ok(tarball.len()), tarball[..tarball.len() / 2].to_vec()].concat();
        let silence = Duration::from_millis(300);
        let read = |url: String| fetch_and_scan(url, None, None, "team-a".into(), Limits::default(), silence);
        let retried = |r: Result<Scanned, Error>| match r {
            Err(Error::NotReady(m)) => m,
            other => panic!("not retried: {other:?}"),
        };

        let whole = [ok(tarball.len()), tarball.clone()].concat();
        let contents = read(storage(Some(whole), true).await).await.unwrap().unwrap();
        assert!(contents.kinds.contains(&("".to_string(), "configmaps".to_string())));

        let m = retried(read(storage(None, false).await).await);
        assert_eq!(m, "the backup's contents: the storage did not answer within 300ms");
        let m = retried(read(storage(Some(half.clone()), false).await).await);
        assert_eq!(m, "the backup's contents: the storage sent nothing for 300ms");
        // A trickle, never silent for long but too slow: cut after a span or two, and asked again.
        let trickle = {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let (head, body) = (ok(tarball.len()), tarball.clone());
            tokio::spawn(async move {
                let (mut c, _) = l.accept().await.unwrap();
                let _ = c.read(&mut [0u8; 4096]).await;
                c.write_all(&head).await.unwrap();
                for b in body {
                    if c.write_all(&[b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            format!("http://{addr}/backup.tar.gz")
        };
        let t0 = std::time::Instant::now();
        let m = retried(read(trickle).await);
        assert!(m.contains("slower than 64 KiB/s"), "{m}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        // Closed halfway: the transport's error, not a verdict on the contents.
        let m = retried(read(storage(Some(half), true).await).await);
        assert!(m.starts_with("the backup's contents: "), "{m}");

        // Final: nothing there, or what was sent whole is not a tarball.
        let missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec();
        let why = read(storage(Some(missing), true).await).await.unwrap().unwrap_err();
        assert!(why.contains("HTTP 404, no such file"), "{why}");
        let junk = [ok(5), b"hello".to_vec()].concat();
        assert!(read(storage(Some(junk), true).await).await.unwrap().is_err());
    }

    #[test]
    fn a_results_file_gives_errors_then_warnings_of_velero_and_the_namespace_and_nothing_of_others() {
        // Warnings before errors in the file, keys Velero does not write, other namespaces first.
        let text = br#"{"warnings": {"namespaces": {"team-b": ["theirs"], "team-a": ["pod is not scheduled"]}},
            "other": [1, {"x": null}],
            "errors": {"cluster": ["a cluster-scoped item"], "namespaces": {"team-b": ["someone else's"],
            "team-a": [" pvc data: not ready\nretry", "second of team-a"]}, "velero": ["timed out waiting"]}}"#;
        let shown = messages_in_results(text, "team-a").unwrap();
        assert_eq!(
            shown.messages,
            [
                "error: timed out waiting",
                "error: pvc data: not ready retry",
                "error: second of team-a"
            ]
        );
        assert_eq!(shown.total, 4, "three errors and a warning of team-a and Velero's");
        assert_eq!(
            messages_in_results(br#"{"warnings": {}}"#, "team-a").unwrap(),
            Shown::default()
        );
        // Keys given twice: each read the first time, the rest skipped, nothing panics.
        let twice = br#"{"errors": {"namespaces": {"team-a": ["one"], "team-a": ["two"]}, "namespaces": {"team-a":
            ["three"]}, "velero": ["v1"], "velero": ["v2"]}, "errors": {"velero": ["v3"]}}"#;
        let shown = messages_in_results(twice, "team-a").unwrap();
        assert_eq!(
            (shown.messages, shown.total),
            (vec!["error: v1".to_string(), "error: one".to_string()], 2)
        );
        for bad in [
            &b"<html>"[..],
            br#"{"errors": {"velero": "one"}}"#,
            br#"{"errors": {"velero": [1]}}"#,
            b"{} x",
        ] {
            let e = messages_in_results(bad, "team-a").unwrap_err();
            assert!(e.starts_with("not Velero's results"), "{e}");
        }
    }

    #[test]
    fn a_large_file_costs_no_more_than_what_is_shown() {
        // 200,000 messages of another namespace and of this one, and one very long message: parsed, counted,
        // and only three cut messages kept.
        let long = "y".repeat(1 << 20);
        let many: Vec<String> = (0..100_000).map(|i| format!("m{i}")).collect();
        let file = serde_json::json!({
            "errors": {"namespaces": {"other": many, "team-a": [long]}},
            "warnings": {"namespaces": {"team-a": many}}
        });
        let shown = messages_in_results(file.to_string().as_bytes(), "team-a").unwrap();
        assert_eq!(shown.total, 100_001);
        assert_eq!(shown.messages.len(), SHOWN_MESSAGES);
        assert_eq!(
            shown.messages[0],
            format!("error: {}...", "y".repeat(SHOWN_MESSAGE_CHARS))
        );
        assert_eq!(shown.messages[1..], ["warning: m0", "warning: m1"]);
    }

    #[test]
    fn a_run_s_age_is_known_only_for_a_past_parsable_end() {
        let now: k8s_openapi::jiff::Timestamp = "2026-11-28T12:20:00Z".parse().unwrap();
        assert_eq!(age_of(Some("2026-11-28T12:10:00Z"), now), Some(RESULTS_GIVE_UP));
        assert_eq!(age_of(Some("2026-11-28T12:20:00Z"), now), Some(Duration::ZERO));
        assert_eq!(age_of(Some("2026-11-28T12:20:01Z"), now), None, "in the future");
        assert_eq!(age_of(Some("yesterday"), now), None);
        assert_eq!(age_of(None, now), None);
    }

    #[test]
    fn the_condition_shows_the_first_messages_cut_and_says_where_the_rest_are() {
        let read = Ok(Shown {
            messages: vec!["error: first".into(), "error: second".into(), "warning: third".into()],
            total: 4,
        });
        let counts = Counts { errors: 2, warnings: 2 };
        let (reason, m) = results_message("Backup", "nightly", counts, read);
        assert_eq!(reason, ERRORS_REPORTED);
        assert!(
            m.starts_with(
                "Velero Backup finished with 2 error(s) and 2 warning(s); Velero's results say: error: first | \
                 error: second | warning: third (and 1 more); "
            ),
            "{m}"
        );
        assert!(
            m.ends_with("`kubectl nac backup logs nightly` shows Velero's log of it"),
            "{m}"
        );

        let warned = Counts { errors: 0, warnings: 1 };
        let (reason, m) = results_message("Restore", "r1", warned, Ok(Shown::default()));
        assert_eq!(reason, WARNINGS_REPORTED);
        assert!(m.contains("none of them for this namespace"), "{m}");
        assert!(m.contains("kubectl nac restore logs r1"), "{m}");

        let (reason, m) = results_message("Backup", "b", counts, Err("HTTP 404".into()));
        assert_eq!(reason, RESULTS_NOT_READ);
        assert!(m.contains("its results cannot be read: HTTP 404"), "{m}");
    }
}
