//! NonAdminDownloadRequest: a tenant's signed URL to one file of their own backup or restore (log, resource
//! list, contents, results, ...). nac checks the request names a backup or restore of the request's own
//! namespace, finished, stored where the tenant may download from (their own location always; an admin one only
//! when the policy opens it), then makes one Velero DownloadRequest `nadr-<uid>` and copies Velero's answer.
//!
//! Not a queued kind: one short sequence, no finalizer (the Velero DownloadRequest of a deleted request is
//! collected by `gc`). At the URL's expiration the request and its Velero DownloadRequest are deleted, on time.

use crate::api::{
    NonAdminBackup, NonAdminDownloadRequest, NonAdminDownloadRequestStatus, NonAdminPhase, NonAdminRestore,
    VeleroDownloadRequest,
};
use crate::controller::conditions::{advance_phase, now_seconds, set_condition};
use crate::controller::context::{key_of, Error, Waiters};
use crate::controller::cx::Cx;
use crate::controller::events::Note;
use crate::controller::jobs::Jobs;
use crate::controller::kind::{self, set_status, Kind};
use crate::controller::stores::{self, Stores, StoresWiring};
use crate::controller::tenant::dependency;
use crate::controller::write::{create_or_get, delete_if_present};
use crate::naming::{self, Origin, NAB, NABSL, NADR, NAR};
use crate::policy::Policy;
use crate::velero::{
    backup_phase_unfinished, restore_phase_unfinished, BackupStorageLocation, DownloadRequest, DownloadRequestSpec,
    DownloadRequestStatus, DownloadTarget,
};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub const CONTROLLER: &str = "nonadmindownloadrequest";

pub use crate::api::condition::download as words;
use words::*;

/// What the download controller keeps for a term: the tenants' requests, the Velero DownloadRequests made for
/// them, and the requests waiting for their backup or restore to finish.
pub type State = Stores<NonAdminDownloadRequest, DownloadRequest>;
pub type Wiring = StoresWiring<NonAdminDownloadRequest, DownloadRequest>;
type Ctx = Cx<State>;

crate::has_status!(NonAdminDownloadRequest => NonAdminDownloadRequestStatus, "NonAdminDownloadRequest/status";);
impl crate::controller::write::CompactStatus for NonAdminDownloadRequestStatus {}

/// How long Velero may take to answer before the status says nac is waiting for it (it usually answers within
/// a second; saying so at once would cost every request a second status write).
const ANSWER_GRACE: Duration = Duration::from_secs(10);

/// Where a request stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// The NonAdminBackup it names does not exist in its namespace.
    NoBackup,
    /// The NonAdminRestore it names does not exist in its namespace.
    NoRestore,
    /// The files are not in object storage yet: the request waits (the message says for what).
    NotFinished(String),
    /// The files cannot be had (the message says why).
    Unavailable(String),
    /// The backup is on an admin location the policy does not open for downloads.
    LocationClosed,
    /// The requester may not read what the file exposes (the message names the right; `crate::rights::download`).
    Refused(String),
    /// Velero has the DownloadRequest but has not answered yet.
    Requested(String),
    /// Velero's answer.
    Processed(DownloadRequestStatus),
}

/// The status of a request at `stage`. Phases move forward only: a processed request stays Created.
pub fn plan(
    old: Option<&NonAdminDownloadRequestStatus>,
    stage: &Stage,
    now: Timestamp,
) -> NonAdminDownloadRequestStatus {
    let mut s = old.cloned().unwrap_or_default();
    use NonAdminPhase::{BackingOff, Created, New};
    let (type_, value, reason, message, next) = match stage {
        Stage::NoBackup => (NAB_NOT_AVAILABLE, true, ERROR, NAB_NOT_AVAILABLE_MSG, BackingOff),
        Stage::NoRestore => (NAR_NOT_AVAILABLE, true, ERROR, NAR_NOT_AVAILABLE_MSG, BackingOff),
        Stage::LocationClosed => (BSL_NOT_USED, true, ERROR, BSL_NOT_USED_MSG, BackingOff),
        Stage::Unavailable(msg) => (UNAVAILABLE, true, ERROR, msg.as_str(), BackingOff),
        Stage::Refused(msg) => (REQUESTER_RIGHTS_EXCEEDED, true, ERROR, msg.as_str(), BackingOff),
        Stage::NotFinished(msg) => (PROCESSED, false, NOT_FINISHED, msg.as_str(), New),
        Stage::Requested(msg) => (PROCESSED, false, REQUESTED, msg.as_str(), New),
        Stage::Processed(velero) => {
            s.velero = Some(VeleroDownloadRequest {
                status: Some(velero.clone()),
            });
            (PROCESSED, true, SUCCESS, "", Created)
        }
    };
    // One condition at a time, as OADP: the current answer, not a history.
    s.conditions.retain(|x| x.type_ == type_);
    set_condition(&mut s.conditions, type_, value, reason, message, now);
    advance_phase(&mut s.phase, next);
    s
}

/// When the URL in `status` stops working.
pub fn expiration(status: Option<&NonAdminDownloadRequestStatus>) -> Option<Timestamp> {
    status?
        .velero
        .as_ref()?
        .status
        .as_ref()?
        .expiration
        .as_deref()?
        .parse()
        .ok()
}

/// Velero's answer, when it is one: processed, with a URL that still works at `now`.
fn answer(dr: &DownloadRequest, now: Timestamp) -> Option<DownloadRequestStatus> {
    let s = dr.status.as_ref()?;
    let expires: Timestamp = s.expiration.as_deref()?.parse().ok()?;
    (s.phase.as_deref() == Some("Processed")
        && s.download_url.as_deref().is_some_and(|u| !u.is_empty())
        && expires > now)
        .then(|| s.clone())
}

/// The Velero object whose file is asked for: its kind and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub velero_name: String,
}

/// What [`resolve`] reads: the cluster as nac's stores show it.
pub trait Lookup {
    fn nab(&self, namespace: &str, name: &str) -> Option<Arc<NonAdminBackup>>;
    fn nar(&self, namespace: &str, name: &str) -> Option<Arc<NonAdminRestore>>;
    fn backup(&self, name: &str) -> Option<Arc<crate::velero::Backup>>;
    fn restore(&self, name: &str) -> Option<Arc<crate::velero::Restore>>;
    fn location(&self, name: &str) -> Option<Arc<BackupStorageLocation>>;
}

/// Which Velero object a request is for, or the stage that says why there is none. Pure over `look`: a request
/// reaches only its own namespace's backups and restores, finished, on a location its tenant may download from.
pub fn resolve(req: &NonAdminDownloadRequest, look: &dyn Lookup, policy: &Policy) -> Result<Resolved, Stage> {
    if req.spec.unset {
        return Err(Stage::Unavailable(
            "NonAdminDownloadRequest spec.target is not set".into(),
        ));
    }
    let ns = req.namespace().unwrap_or_default();
    let target = &req.spec.target;
    let backup_name = if target.kind.is_restore() {
        let nar = look.nar(&ns, &target.name).ok_or(Stage::NoRestore)?;
        let restore = nar
            .status
            .as_ref()
            .and_then(|s| s.velero_restore.as_ref())
            .and_then(|r| r.name.as_deref())
            .and_then(|n| look.restore(n))
            .filter(|r| NAR.owns(&r.metadata, &ns, &target.name));
        let Some(restore) = restore else {
            return Err(Stage::NotFinished(format!(
                "waiting for NonAdminRestore {} to get its Velero Restore",
                target.name
            )));
        };
        let phase = restore.status.as_ref().and_then(|s| s.phase.as_deref());
        if restore_phase_unfinished(phase) {
            return Err(Stage::NotFinished(format!(
                "waiting for NonAdminRestore {} to finish (Velero phase {})",
                target.name,
                phase.unwrap_or("New")
            )));
        }
        if phase == Some("FailedValidation") {
            return Err(Stage::Unavailable(format!(
                "NonAdminRestore {} failed validation: Velero stored nothing for it",
                target.name
            )));
        }
        let backup = restore.spec.backup_name.clone().unwrap_or_default();
        let b = look.backup(&backup).ok_or_else(|| {
            Stage::Unavailable(format!(
                "the backup of NonAdminRestore {} is gone: Velero finds a restore's files through its backup",
                target.name
            ))
        })?;
        if NAB.origin_of(&*b).is_none_or(|(o, _)| o != ns) {
            return Err(Stage::Unavailable(format!(
                "NonAdminRestore {} restored a backup of another namespace",
                target.name
            )));
        }
        check_location(&b, &ns, look, policy)?;
        return Ok(Resolved {
            velero_name: restore.name_any(),
        });
    } else {
        target.name.clone()
    };
    let nab = look.nab(&ns, &backup_name).ok_or(Stage::NoBackup)?;
    let backup = nab
        .status
        .as_ref()
        .and_then(|s| s.velero_backup.as_ref())
        .and_then(|r| r.name.as_deref())
        .and_then(|n| look.backup(n))
        .filter(|b| NAB.owns(&**b, &ns, &backup_name));
    let Some(backup) = backup else {
        return Err(Stage::NotFinished(format!(
            "waiting for NonAdminBackup {backup_name} to get its Velero Backup"
        )));
    };
    let phase = backup.status.as_ref().and_then(|s| s.phase.as_deref());
    if backup_phase_unfinished(phase) {
        return Err(Stage::NotFinished(format!(
            "waiting for NonAdminBackup {backup_name} to finish (Velero phase {})",
            phase.unwrap_or("New")
        )));
    }
    if matches!(phase, Some("FailedValidation" | "Deleting")) {
        return Err(Stage::Unavailable(format!(
            "NonAdminBackup {backup_name} has no files in object storage (Velero phase {})",
            phase.unwrap_or_default()
        )));
    }
    check_location(&backup, &ns, look, policy)?;
    Ok(Resolved {
        velero_name: backup.name_any(),
    })
}

/// A tenant downloads from their own location always, from an admin location only when the policy opens it,
/// from another tenant's never.
fn check_location(b: &crate::velero::Backup, ns: &str, look: &dyn Lookup, policy: &Policy) -> Result<(), Stage> {
    let name = b.spec.storage_location.as_deref().unwrap_or("default");
    // Velero answers a request only through the backup's location: without it the request would wait forever.
    // A location that is gone was the tenant's (a name nac gave one of theirs) or an admin location the policy
    // opens; any other is closed to them, as OADP answers.
    let Some(location) = look.location(name) else {
        if naming::is_nacuuid_in(name, ns) || policy.downloads.admin_location_open(name) {
            return Err(Stage::Unavailable(format!(
                "the storage location {name} of backup {} is gone: its files cannot be reached",
                b.name_any()
            )));
        }
        return Err(Stage::LocationClosed);
    };
    let tenant = Some(location)
        .filter(|l| NABSL.is_tagged(&l.metadata))
        .and_then(|l| NABSL.origin_of(&l.metadata).map(|(o, _)| o == ns));
    match tenant {
        Some(true) => Ok(()),
        Some(false) => Err(Stage::Unavailable(format!(
            "backup {} is stored on another namespace's location",
            b.name_any()
        ))),
        None if policy.downloads.admin_location_open(name) => Ok(()),
        None => Err(Stage::LocationClosed),
    }
}

/// The Velero DownloadRequest for `req`.
pub fn build(req: &NonAdminDownloadRequest, velero_namespace: &str, resolved: &Resolved) -> DownloadRequest {
    let uid = req.uid().unwrap_or_default();
    let name = velero_name(&uid);
    DownloadRequest {
        metadata: NADR.stamp(
            &name,
            velero_namespace,
            &uid,
            &req.namespace().unwrap_or_default(),
            &req.name_any(),
            &[],
        ),
        spec: DownloadRequestSpec {
            target: DownloadTarget {
                kind: req.spec.target.kind.as_str().to_string(),
                name: resolved.velero_name.clone(),
            },
        },
        status: None,
    }
}

/// The Velero DownloadRequest's name (OADP's).
pub fn velero_name(uid: &str) -> String {
    format!("nadr-{uid}")
}

struct StoreView<'a>(&'a Ctx);

impl Lookup for StoreView<'_> {
    fn nab(&self, namespace: &str, name: &str) -> Option<Arc<NonAdminBackup>> {
        self.0
            .view
            .get::<NonAdminBackup>()
            .get(&ObjectRef::new(name).within(namespace))
    }
    fn nar(&self, namespace: &str, name: &str) -> Option<Arc<NonAdminRestore>> {
        self.0
            .view
            .get::<NonAdminRestore>()
            .get(&ObjectRef::new(name).within(namespace))
    }
    fn backup(&self, name: &str) -> Option<Arc<crate::velero::Backup>> {
        self.0.view.get().get(&self.0.velero_ref(name))
    }
    fn restore(&self, name: &str) -> Option<Arc<crate::velero::Restore>> {
        self.0.view.get().get(&self.0.velero_ref(name))
    }
    fn location(&self, name: &str) -> Option<Arc<BackupStorageLocation>> {
        self.0.view.get().get(&self.0.velero_ref(name))
    }
}

/// No finalizer (the origin's empty one): the Velero DownloadRequest of a deleted request is collected by `gc`.
impl Kind for NonAdminDownloadRequest {
    const ORIGIN: Origin = NADR;
    const CONTROLLER: &'static str = CONTROLLER;
    type State = State;

    /// The download controller for a term: the tenants' requests and the Velero DownloadRequests made for them (those
    /// whose request is gone go to the collector); a request waiting for a backup or restore is woken by its change.
    async fn controller(ctx: Arc<Ctx>, wiring: Wiring, jobs: &Jobs, stop: CancellationToken) {
        let what = ["nonadmindownloadrequests", "velero downloadrequests"];
        let (controller, triggers) = stores::one_to_one(&ctx, &ctx.own, wiring, jobs, what);
        kind::run(controller.reconcile_on(triggers), &ctx, stop).await
    }

    fn recorded_nacuuid(_: &NonAdminDownloadRequestStatus) -> Option<&str> {
        None
    }

    /// A request's identity is its uid (OADP's scheme).
    fn identity(obj: &Self) -> Option<String> {
        obj.uid()
    }

    fn notes(old: Option<&NonAdminDownloadRequestStatus>, new: &NonAdminDownloadRequestStatus) -> Vec<Note> {
        note(old, new).into_iter().collect()
    }

    fn waiting(ctx: &Ctx) -> Option<&Waiters<Self>> {
        Some(&ctx.own.waiting)
    }

    async fn ready(ctx: &Ctx) -> Result<(), Error> {
        let view = &ctx.view;
        ctx.ready(&view.get::<crate::velero::Backup>().synced, "Velero Backups")
            .await?;
        ctx.ready(&view.get::<crate::velero::Restore>().synced, "Velero Restores")
            .await?;
        ctx.ready(
            &view.get::<BackupStorageLocation>().synced,
            "Velero BackupStorageLocations",
        )
        .await?;
        ctx.ready(&ctx.own.velero.synced, "Velero DownloadRequests").await
    }

    async fn apply(
        api: &Api<NonAdminDownloadRequest>,
        obj: Arc<NonAdminDownloadRequest>,
        ctx: &Ctx,
    ) -> Result<Action, Error> {
        let ns = obj.namespace().unwrap_or_default();
        let me = ObjectRef::from_obj(&*obj);
        if obj.metadata.deletion_timestamp.is_some() {
            ctx.own.waiting.forget(&me);
            return Ok(Action::await_change());
        }
        let now = Timestamp::now();
        let uid = obj.uid().unwrap_or_default();
        let dr_name = velero_name(&uid);
        if let Some(at) = expiration(obj.status.as_ref()) {
            if at <= now {
                return expire(ctx, api, &obj, &dr_name).await;
            }
            if obj.status.as_ref().and_then(|s| s.phase) == Some(NonAdminPhase::Created) {
                return Ok(until(at, now));
            }
        }
        let Some(policy) = ctx.policy.current_in(&obj.namespace().unwrap_or_default()) else {
            tracing::info!(object = %key_of(&*obj), "no valid policy loaded yet; will retry");
            return Ok(Action::requeue(ctx.opts.policy_retry));
        };
        let target = &obj.spec.target;
        let resolved = match resolve(&obj, &StoreView(ctx), &policy) {
            Ok(r) => r,
            Err(stage) => {
                let (kind, name) = if target.kind.is_restore() {
                    (NAR.kind, target.name.as_str())
                } else {
                    (NAB.kind, target.name.as_str())
                };
                // Whatever the reason, a change of the backup or restore it names may change the answer.
                ctx.own.waiting.register(me, vec![dependency(kind, &ns, name)]);
                stage.write(api, &obj, ctx).await?;
                return Ok(Action::await_change());
            }
        };
        ctx.own.waiting.forget(&me);
        let dr_api: Api<DownloadRequest> = ctx.velero_api();
        let wanted = build(&obj, &ctx.opts.velero_namespace, &resolved);
        let dr = match ctx.own.velero.get(&ctx.velero_ref(&dr_name)) {
            Some(d) => (*d).clone(),
            None => {
                if let Some(action) = refuse_unless_allowed(api, &obj, ctx, &policy).await? {
                    return Ok(action);
                }
                create_or_get(&dr_api, &wanted, &ctx.metrics, "DownloadRequest").await?
            }
        };
        if !NADR.owns(&dr.metadata, &ns, &obj.name_any())
            || NADR.nacuuid(&dr.metadata) != Some(uid.as_str())
            || dr.spec.target != wanted.spec.target
        {
            tracing::warn!(object = %key_of(&*obj), request = %dr_name, "Velero DownloadRequest belongs to another request");
            let stage = Stage::Unavailable(format!("Velero DownloadRequest {dr_name} belongs to another request"));
            stage.write(api, &obj, ctx).await?;
            return Ok(Action::await_change());
        }
        if let Some(answer) = answer(&dr, now) {
            let at = answer.expiration.as_deref().and_then(|e| e.parse().ok()).unwrap_or(now);
            Stage::Processed(answer).write(api, &obj, ctx).await?;
            return Ok(until(at, now));
        }
        // Not answered yet: Velero's update of the DownloadRequest triggers the next reconcile.
        let asked = dr.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(now);
        let waited = now.duration_since(asked).unsigned_abs();
        if waited < ANSWER_GRACE {
            return Ok(Action::requeue(ANSWER_GRACE - waited));
        }
        let msg = format!("waiting for Velero to process DownloadRequest {dr_name} (is Velero running?)");
        Stage::Requested(msg).write(api, &obj, ctx).await?;
        Ok(Action::requeue(ctx.opts.deletion_poll))
    }

    async fn cleanup(_api: &Api<Self>, _obj: Arc<Self>, _ctx: &Ctx) -> Result<Action, Error> {
        Ok(Action::await_change())
    }
}

/// The request's requester (recorded by nac's webhook) may read what its file exposes (`crate::rights::download`):
/// asked again here, before the Velero DownloadRequest is made, as the webhook's answer may be old, a request
/// made before its backup finished was not checked there, and one that did not pass the webhook has no requester.
/// Refused: the status says why and nothing is made (`Some(action)`); an answer nac cannot get is retried.
async fn refuse_unless_allowed(
    api: &Api<NonAdminDownloadRequest>,
    obj: &NonAdminDownloadRequest,
    ctx: &Ctx,
    policy: &Policy,
) -> Result<Option<Action>, Error> {
    use crate::rights::{download, Requester, RightsMode, REQUESTER_ANNOTATION};
    let ns = obj.namespace().unwrap_or_default();
    let target = &obj.spec.target;
    let mode = download::mode(policy, target.kind);
    if mode == RightsMode::Off {
        return Ok(None);
    }
    let file = download::fetch(&ctx.client, &ctx.opts.velero_namespace, &ns, target)
        .await
        .map_err(Error::NotReady)?
        .ok_or_else(|| {
            // `resolve` found it in the stores a moment ago: changed since; the change reconciles again.
            Error::NotReady(format!(
                "the Velero objects of {} {} changed while nac read them",
                target.kind.as_str(),
                target.name
            ))
        })?;
    // An annotation nac cannot read is no record of who asked.
    let who: Option<Requester> = obj
        .annotations()
        .get(REQUESTER_ANNOTATION)
        .and_then(|v| serde_json::from_str(v).ok());
    let answer = download::check(ctx.access.as_ref(), who.as_ref(), &ns, &file, mode)
        .await
        .map_err(Error::NotReady)?;
    let Err(msg) = answer else {
        return Ok(None);
    };
    tracing::warn!(object = %key_of(obj), message = %msg, "download request refused");
    Stage::Refused(msg).write(api, obj, ctx).await?;
    Ok(Some(Action::await_change()))
}

/// A reconcile at `at` (the URL's expiration), when the request goes.
fn until(at: Timestamp, now: Timestamp) -> Action {
    let left = at.duration_since(now).unsigned_abs();
    Action::requeue(left + Duration::from_millis(100))
}

/// The URL expired: the request and its Velero DownloadRequest go (Velero deletes its own too, later).
async fn expire(
    ctx: &Ctx,
    api: &Api<NonAdminDownloadRequest>,
    obj: &NonAdminDownloadRequest,
    dr_name: &str,
) -> Result<Action, Error> {
    let dr_api: Api<DownloadRequest> = ctx.velero_api();
    delete_if_present(&dr_api, dr_name, &ctx.metrics, "DownloadRequest").await?;
    // This very request: one re-created under the same name meanwhile is a new request.
    let dp = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: obj.uid(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::background()
    };
    ctx.metrics.write("NonAdminDownloadRequest");
    match api.delete(&obj.name_any(), &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(object = %key_of(obj), "download request expired; deleted");
    ctx.own.waiting.forget(&ObjectRef::from_obj(obj));
    Ok(Action::await_change())
}

impl Stage {
    /// Writes the status this stage plans.
    async fn write(
        &self,
        api: &Api<NonAdminDownloadRequest>,
        obj: &NonAdminDownloadRequest,
        ctx: &Ctx,
    ) -> Result<(), Error> {
        let now = now_seconds();
        set_status(api, obj, ctx, |s| plan(s, self, now)).await?;
        Ok(())
    }
}

/// An Event when a request is refused: the condition keeps OADP's words, the Event says exactly why.
fn note(old: Option<&NonAdminDownloadRequestStatus>, new: &NonAdminDownloadRequestStatus) -> Option<Note> {
    let became = |s: Option<&NonAdminDownloadRequestStatus>| s.and_then(|s| s.phase);
    if became(Some(new)) != Some(NonAdminPhase::BackingOff) || became(old) == Some(NonAdminPhase::BackingOff) {
        return None;
    }
    let first = new.conditions.first();
    let message = match first {
        // Refused for the location (Stage::LocationClosed): said in full.
        Some(c) if c.type_ == BSL_NOT_USED => {
            "the backup is stored on an admin storage location that the policy does not open for downloads \
             (downloads.adminLocations); files of backups on your own NonAdminBackupStorageLocation can always be \
             downloaded"
                .to_string()
        }
        _ => first.map(|c| c.message.clone()).unwrap_or_default(),
    };
    let reason = first.map(|c| c.type_.clone()).unwrap_or_default();
    Some(Note {
        warning: true,
        reason,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DownloadTargetKind, NonAdminDownloadTarget};
    use crate::velero::{Backup, Restore};
    use serde_json::json;
    use std::collections::HashMap;

    #[derive(Default)]
    struct World {
        nabs: HashMap<(String, String), Arc<NonAdminBackup>>,
        nars: HashMap<(String, String), Arc<NonAdminRestore>>,
        backups: HashMap<String, Arc<Backup>>,
        restores: HashMap<String, Arc<Restore>>,
        locations: HashMap<String, Arc<BackupStorageLocation>>,
    }

    impl Lookup for World {
        fn nab(&self, ns: &str, name: &str) -> Option<Arc<NonAdminBackup>> {
            self.nabs.get(&(ns.into(), name.into())).cloned()
        }
        fn nar(&self, ns: &str, name: &str) -> Option<Arc<NonAdminRestore>> {
            self.nars.get(&(ns.into(), name.into())).cloned()
        }
        fn backup(&self, name: &str) -> Option<Arc<Backup>> {
            self.backups.get(name).cloned()
        }
        fn restore(&self, name: &str) -> Option<Arc<Restore>> {
            self.restores.get(name).cloned()
        }
        fn location(&self, name: &str) -> Option<Arc<BackupStorageLocation>> {
            self.locations.get(name).cloned()
        }
    }

    impl World {
        /// NonAdminBackup `ns/name` and its Velero Backup `<ns>-<name>` in `phase` on `location` (the admin's
        /// `default` location exists in every world).
        fn add_backup(&mut self, ns: &str, name: &str, phase: &str, location: &str) {
            self.locations
                .entry("default".into())
                .or_insert_with(|| Arc::new(BackupStorageLocation::new("default", Default::default())));
            let spec = json!({"storageLocation": location});
            let (velero, nab, b) = pair(&NAB, ns, name, ("backupSpec", "veleroBackup"), spec, phase);
            self.nabs.insert((ns.into(), name.into()), nab);
            self.backups.insert(velero, b);
        }

        /// NonAdminRestore `ns/name` of NonAdminBackup `ns/backup`, Velero Restore `<ns>-<name>` in `phase`.
        fn add_restore(&mut self, ns: &str, name: &str, backup: &str, phase: &str) {
            let spec = json!({"backupName": format!("{ns}-{backup}")});
            let (velero, nar, r) = pair(&NAR, ns, name, ("restoreSpec", "veleroRestore"), spec, phase);
            self.nars.insert((ns.into(), name.into()), nar);
            self.restores.insert(velero, r);
        }

        /// Velero BSL `name` made for NonAdminBackupStorageLocation `ns/own`.
        fn tenant_location(&mut self, name: &str, ns: &str) {
            let mut l = BackupStorageLocation::new(name, Default::default());
            l.metadata = NABSL.stamp(name, "velero", name, ns, "own", &[]);
            self.locations.insert(name.into(), Arc::new(l));
        }
    }

    /// A tenant object `ns/name` and its Velero object `<ns>-<name>` (with `origin`'s identity, `spec`, in `phase`),
    /// which the tenant's status names; `fields`: the tenant spec's Velero spec and the status' reference.
    fn pair<T: serde::de::DeserializeOwned, V: serde::de::DeserializeOwned>(
        origin: &Origin,
        ns: &str,
        name: &str,
        (spec_field, ref_field): (&str, &str),
        spec: serde_json::Value,
        phase: &str,
    ) -> (String, Arc<T>, Arc<V>) {
        let velero = format!("{ns}-{name}");
        let tenant = json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {spec_field: {}},
            "status": {ref_field: {"name": velero}},
        });
        let object = json!({
            "metadata": origin.stamp(&velero, "velero", &velero, ns, name, &[]),
            "spec": spec,
            "status": {"phase": phase},
        });
        let (tenant, object) = (serde_json::from_value(tenant), serde_json::from_value(object));
        (velero, Arc::new(tenant.unwrap()), Arc::new(object.unwrap()))
    }

    fn request(ns: &str, kind: DownloadTargetKind, name: &str) -> NonAdminDownloadRequest {
        let mut r = NonAdminDownloadRequest::new(
            "dl",
            crate::api::NonAdminDownloadRequestSpec {
                target: NonAdminDownloadTarget {
                    kind,
                    name: name.into(),
                },
                unset: false,
            },
        );
        r.metadata.namespace = Some(ns.into());
        r.metadata.uid = Some("0b7a1c2e-6f47-4d4e-9a55-3a7c0e6b1f00".into());
        r
    }

    fn policy(yaml: &str) -> Policy {
        Policy::parse(yaml).unwrap()
    }

    #[test]
    fn a_backup_on_the_tenants_own_location_is_downloadable_whatever_the_policy() {
        let mut w = World::default();
        w.tenant_location("team-a-bsl", "team-a");
        w.add_backup("team-a", "nightly", "Completed", "team-a-bsl");
        let req = request("team-a", DownloadTargetKind::BackupLog, "nightly");
        let r = resolve(&req, &w, &policy("")).unwrap();
        assert_eq!(r.velero_name, "team-a-nightly");
        let dr = build(&req, "velero", &r);
        assert_eq!(
            dr.metadata.name.as_deref(),
            Some("nadr-0b7a1c2e-6f47-4d4e-9a55-3a7c0e6b1f00")
        );
        assert_eq!(dr.spec.target.kind, "BackupLog");
        assert_eq!(dr.spec.target.name, "team-a-nightly");
        assert!(NADR.owns(&dr.metadata, "team-a", "dl"));
        assert_eq!(NADR.nacuuid(&dr.metadata), req.metadata.uid.as_deref());
    }

    #[test]
    fn a_backup_whose_location_is_gone_is_unavailable_not_waited_for() {
        let mut w = World::default();
        let own = crate::naming::generate_nacuuid("team-a", "own");
        w.add_backup("team-a", "nightly", "Completed", &own);
        w.add_backup("team-a", "archived", "Completed", "archive");
        let req = request("team-a", DownloadTargetKind::BackupLog, "nightly");
        let stage = resolve(&req, &w, &policy(""));
        assert!(
            matches!(&stage, Err(Stage::Unavailable(m)) if m.contains(&format!("storage location {own} of backup team-a-nightly is gone"))),
            "{stage:?}"
        );
        // An admin location that is gone: closed unless the policy opens it, then unavailable.
        let req = request("team-a", DownloadTargetKind::BackupLog, "archived");
        assert_eq!(resolve(&req, &w, &policy("")), Err(Stage::LocationClosed));
        let open = resolve(&req, &w, &policy("downloads: {adminLocations: allow}"));
        assert!(matches!(open, Err(Stage::Unavailable(_))), "{open:?}");
    }

    #[test]
    fn admin_locations_are_closed_unless_the_policy_opens_them() {
        let mut w = World::default();
        w.add_backup("team-a", "nightly", "PartiallyFailed", "default");
        let req = request("team-a", DownloadTargetKind::BackupResourceList, "nightly");
        assert_eq!(resolve(&req, &w, &policy("")), Err(Stage::LocationClosed));
        assert_eq!(
            resolve(&req, &w, &policy("downloads: {adminLocations: [archive]}")),
            Err(Stage::LocationClosed)
        );
        assert!(resolve(&req, &w, &policy("downloads: {adminLocations: [default]}")).is_ok());
        assert!(resolve(&req, &w, &policy("downloads: {adminLocations: allow}")).is_ok());
    }

    #[test]
    fn another_namespaces_backup_or_location_is_never_reached() {
        let mut w = World::default();
        w.add_backup("team-b", "nightly", "Completed", "default");
        let open = policy("downloads: {adminLocations: allow}");
        // The name resolves in the request's own namespace only.
        let req = request("team-a", DownloadTargetKind::BackupLog, "nightly");
        assert_eq!(resolve(&req, &w, &open), Err(Stage::NoBackup));
        // A NonAdminBackup whose status names another namespace's Velero Backup (forged) is not followed.
        let mut nab = (*w.nabs[&("team-b".to_string(), "nightly".to_string())]).clone();
        nab.metadata.namespace = Some("team-a".into());
        w.nabs.insert(("team-a".into(), "nightly".into()), Arc::new(nab));
        assert!(matches!(resolve(&req, &w, &open), Err(Stage::NotFinished(_))));
        // A backup on another tenant's own location.
        let mut w = World::default();
        w.tenant_location("team-b-bsl", "team-b");
        w.add_backup("team-a", "nightly", "Completed", "team-b-bsl");
        assert!(matches!(resolve(&req, &w, &open), Err(Stage::Unavailable(_))));
    }

    #[test]
    fn unfinished_or_empty_backups_wait_or_back_off() {
        let mut w = World::default();
        let open = policy("downloads: {adminLocations: allow}");
        let req = request("team-a", DownloadTargetKind::BackupLog, "nightly");
        w.add_backup("team-a", "nightly", "InProgress", "default");
        let Err(Stage::NotFinished(msg)) = resolve(&req, &w, &open) else {
            panic!("an unfinished backup waits")
        };
        assert!(msg.contains("InProgress"), "{msg}");
        w.add_backup("team-a", "nightly", "FailedValidation", "default");
        assert!(matches!(resolve(&req, &w, &open), Err(Stage::Unavailable(_))));
        w.add_backup("team-a", "nightly", "Failed", "default");
        assert!(
            resolve(&req, &w, &open).is_ok(),
            "a failed backup's log is what its owner wants"
        );
    }

    #[test]
    fn restore_files_follow_the_restores_backup_location() {
        let mut w = World::default();
        w.tenant_location("team-a-bsl", "team-a");
        w.add_backup("team-a", "nightly", "Completed", "team-a-bsl");
        w.add_restore("team-a", "back", "nightly", "Completed");
        let req = request("team-a", DownloadTargetKind::RestoreLog, "back");
        assert_eq!(resolve(&req, &w, &policy("")).unwrap().velero_name, "team-a-back");
        // Missing restore; restore not finished; its backup gone.
        let other = request("team-a", DownloadTargetKind::RestoreResults, "other");
        assert_eq!(resolve(&other, &w, &policy("")), Err(Stage::NoRestore));
        w.add_restore("team-a", "back", "nightly", "InProgress");
        assert!(matches!(resolve(&req, &w, &policy("")), Err(Stage::NotFinished(_))));
        w.add_restore("team-a", "back", "nightly", "Completed");
        w.backups.clear();
        assert!(matches!(resolve(&req, &w, &policy("")), Err(Stage::Unavailable(_))));
    }

    #[test]
    fn status_plans_follow_oadp() {
        let now = now_seconds();
        let s = plan(None, &Stage::NoBackup, now);
        assert_eq!(s.phase, Some(NonAdminPhase::BackingOff));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(
            (
                s.conditions[0].type_.as_str(),
                s.conditions[0].reason.as_str(),
                s.conditions[0].message.as_str()
            ),
            (NAB_NOT_AVAILABLE, ERROR, NAB_NOT_AVAILABLE_MSG)
        );
        let s = plan(Some(&s), &Stage::LocationClosed, now);
        assert_eq!(s.conditions.len(), 1, "one condition: the current answer");
        assert_eq!(s.conditions[0].message, BSL_NOT_USED_MSG);
        let answer = DownloadRequestStatus {
            phase: Some("Processed".into()),
            download_url: Some("http://127.0.0.1/bucket/x?sig".into()),
            expiration: Some("2026-11-24T10:00:00Z".into()),
        };
        let s = plan(Some(&s), &Stage::Processed(answer.clone()), now);
        assert_eq!(s.phase, Some(NonAdminPhase::Created));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(
            (
                s.conditions[0].type_.as_str(),
                s.conditions[0].status.as_str(),
                s.conditions[0].reason.as_str()
            ),
            (PROCESSED, "True", SUCCESS)
        );
        assert_eq!(s.velero.as_ref().unwrap().status.as_ref(), Some(&answer));
        assert_eq!(expiration(Some(&s)), Some("2026-11-24T10:00:00Z".parse().unwrap()));
        // Forward only: a created request is not set back by a later refusal.
        assert_eq!(
            plan(Some(&s), &Stage::NoBackup, now).phase,
            Some(NonAdminPhase::Created)
        );
        // Refused for the requester's rights: a True/Error condition naming the right, BackingOff.
        let s = plan(None, &Stage::Refused("viewer may not list secrets".into()), now);
        assert_eq!(s.phase, Some(NonAdminPhase::BackingOff));
        assert_eq!(refusal(&s), (REQUESTER_RIGHTS_EXCEEDED, "viewer may not list secrets"));
        let s = plan(None, &Stage::NotFinished("waiting".into()), now);
        assert_eq!(s.phase, Some(NonAdminPhase::New));
        // A file that cannot exist: a True/Error condition as OADP's refusals, so waiting clients stop.
        let s = plan(
            Some(&s),
            &Stage::Unavailable("on another namespace's location".into()),
            now,
        );
        assert_eq!(s.phase, Some(NonAdminPhase::BackingOff));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(refusal(&s), (UNAVAILABLE, "on another namespace's location"));
    }

    /// The type and message of a status's one condition, checked to be a True/Error refusal.
    fn refusal(s: &NonAdminDownloadRequestStatus) -> (&str, &str) {
        let c = &s.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", ERROR));
        (c.type_.as_str(), c.message.as_str())
    }

    #[test]
    fn only_a_processed_unexpired_answer_counts() {
        let now: Timestamp = "2026-11-24T09:00:00Z".parse().unwrap();
        let mut dr = DownloadRequest::new("nadr-x", Default::default());
        assert_eq!(answer(&dr, now), None);
        dr.status = Some(DownloadRequestStatus {
            phase: Some("Processed".into()),
            download_url: Some("http://x".into()),
            expiration: Some("2026-11-24T09:10:00Z".into()),
        });
        assert!(answer(&dr, now).is_some());
        assert_eq!(answer(&dr, "2026-11-24T09:10:00Z".parse().unwrap()), None, "expired");
        dr.status.as_mut().unwrap().download_url = Some(String::new());
        assert_eq!(answer(&dr, now), None);
    }
}
