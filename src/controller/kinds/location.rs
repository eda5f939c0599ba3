//! NonAdminBackupStorageLocation: a tenant's own object storage. Not a queued Velero object like backups and
//! restores, so it has its own short sequence (reusing the skeleton's finalizer, stale-cache guard, status writes
//! and events): validate → approval request → admin's decision → Secret copy → Velero BSL → mirror.
//!
//! What nac makes for a location, all in Velero's namespace and named by its nacuuid: the approval request, a
//! copy of the tenant's Secret (type and data), and the Velero BackupStorageLocation built from the spec the
//! admin approved (the request's `requestedSpec`), with the credential forced to the copy, the prefix forced
//! under the tenant's namespace and `default: false`.

use crate::api::{
    ApprovalDecision, NonAdminBackupStorageLocation, NonAdminBackupStorageLocationRequest,
    NonAdminBackupStorageLocationRequestSpec, NonAdminBackupStorageLocationRequestStatus,
    NonAdminBackupStorageLocationStatus, NonAdminPhase, RequestPhase, RequestedLocation,
};
use crate::controller::conditions::{advance_phase, find, now_seconds, set_condition};
use crate::controller::context::{key_of, Error, Shared, Watched};
use crate::controller::cx::Cx;
use crate::controller::events::Note;
use crate::controller::gc::MadeBy;
use crate::controller::jobs::Jobs;
use crate::controller::kind::{self, nacuuid, set_status, Build, Kind};
use crate::controller::view::Registry;
use crate::controller::watches;
use crate::controller::write::{create_or_get, delete_if_present, update_status, StatusUpdate};
use crate::naming::{generate_nacuuid, Origin, NABSL};
use crate::policy::{evaluate_bsl, tenant_prefix, Policy};
use crate::velero::{BackupStorageLocation, BackupStorageLocationSpec, BackupStorageLocationStatus, SecretKeyRef};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub const CONTROLLER: &str = "nonadminbackupstoragelocation";

/// How often a refused location is judged again.
const REFUSED_RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

pub use crate::api::condition::location as words;
use words::*;

/// What the location controller keeps for a term: the tenants' locations, their approval requests, the Secret
/// copies made for them, and the channel that triggers a location when its Velero BSL or its tenant's Secret
/// changes.
pub struct State {
    pub objects: Watched<NonAdminBackupStorageLocation>,
    pub requests: Watched<NonAdminBackupStorageLocationRequest>,
    pub copies: Watched<Secret>,
    pub trigger: UnboundedSender<ObjectRef<NonAdminBackupStorageLocation>>,
}

/// The write ends of a [`State`], for its watches and triggers.
pub struct Wiring {
    pub objects: Writer<NonAdminBackupStorageLocation>,
    pub requests: Writer<NonAdminBackupStorageLocationRequest>,
    pub copies: Writer<Secret>,
    pub triggers: UnboundedReceiver<ObjectRef<NonAdminBackupStorageLocation>>,
}

type Ctx = Cx<State>;

crate::has_status! {
    NonAdminBackupStorageLocation => NonAdminBackupStorageLocationStatus, "NonAdminBackupStorageLocation/status";
    NonAdminBackupStorageLocationRequest => NonAdminBackupStorageLocationRequestStatus,
        "NonAdminBackupStorageLocationRequest/status";
}
impl crate::controller::write::CompactStatus for NonAdminBackupStorageLocationStatus {}
impl crate::controller::write::CompactStatus for NonAdminBackupStorageLocationRequestStatus {}

impl Build for State {
    type Wiring = Wiring;

    /// Its stores (shared through the view), what the collector collects of it (the approval request, the Secret
    /// copy and the Velero BSL, once their location is gone), and its hook on Velero's storage locations (a
    /// location hears of a change of its own).
    fn build(_shared: &Shared, reg: &mut Registry) -> (Self, Wiring) {
        let (objects, objects_writer) = reg.watched();
        let (requests, requests_writer) = reg.watched();
        let (copies, copies_writer) = reg.watched();
        reg.made(MadeBy::<NonAdminBackupStorageLocation, BackupStorageLocation>::always());
        reg.made(MadeBy::<NonAdminBackupStorageLocation, Secret>::always());
        reg.made(MadeBy::<
            NonAdminBackupStorageLocation,
            NonAdminBackupStorageLocationRequest,
        >::always());
        let (trigger, triggers) = futures::channel::mpsc::unbounded();
        let own = trigger.clone();
        reg.on::<BackupStorageLocation>(move |location, _| {
            if let Some(r) = NABSL.owner(&location.metadata) {
                let _ = own.unbounded_send(r);
            }
        });
        let wiring = Wiring {
            objects: objects_writer,
            requests: requests_writer,
            copies: copies_writer,
            triggers,
        };
        let state = State {
            objects,
            requests,
            copies,
            trigger,
        };
        (state, wiring)
    }
}

/// What happened to a copy nac keeps in sync (the Secret, the Velero BSL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synced {
    Created,
    Updated,
    Unchanged,
}

/// Where a location stands, for the status.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// The spec breaks the policy (before the request was made).
    Invalid(String),
    /// Its requester may not read its credential, or it names an endpoint the policy does not allow: whatever
    /// was made for it is removed (reason, message).
    Refused(&'static str, String),
    /// Valid; its nacuuid is recorded and its request is being made.
    Requesting,
    /// The request is not (or no longer) approved.
    NotApproved(RequestPhase),
    /// The request found under the nacuuid belongs to another location.
    ForeignRequest,
    /// Approved, but the tenant's Secret could not be copied.
    SecretFailed(String),
    /// Approved, but the Velero BSL could not be made.
    LocationFailed(String),
    /// Approved, Secret copied, Velero BSL in place.
    Ready {
        secret: Synced,
        location: Synced,
        velero: Option<BackupStorageLocationStatus>,
    },
}

/// The status of a location at `stage`. Phases only move forward: a location once Created stays Created when
/// the admin revokes it; its conditions say why it cannot be used.
pub fn plan(
    old: Option<&NonAdminBackupStorageLocationStatus>,
    stage: &Stage,
    nacuuid: Option<&str>,
    velero_namespace: &str,
    now: Timestamp,
) -> NonAdminBackupStorageLocationStatus {
    let mut s = old.cloned().unwrap_or_default();
    let c = &mut s.conditions;
    if let Some(u) = nacuuid {
        let r = s.velero_backup_storage_location.get_or_insert_with(Default::default);
        r.nacuuid = Some(u.to_string());
        r.name = Some(u.to_string());
        r.namespace = Some(velero_namespace.to_string());
    }
    let accepted = |c: &mut Vec<Condition>| set_condition(c, ACCEPTED, true, SPEC_VALIDATION, VALIDATION_OK, now);
    let forget_copies = |c: &mut Vec<Condition>| c.retain(|x| x.type_ != SECRET_SYNCED && x.type_ != BSL_SYNCED);
    let next = match stage {
        Stage::Invalid(msg) => {
            set_condition(c, ACCEPTED, false, SPEC_VALIDATION, msg, now);
            NonAdminPhase::BackingOff
        }
        Stage::Refused(reason, msg) => {
            forget_copies(c);
            set_condition(c, ACCEPTED, false, reason, msg, now);
            if let Some(r) = s.velero_backup_storage_location.as_mut() {
                r.status = None;
            }
            NonAdminPhase::BackingOff
        }
        Stage::Requesting => {
            accepted(c);
            NonAdminPhase::New
        }
        Stage::NotApproved(phase) => {
            accepted(c);
            forget_copies(c);
            let (reason, msg) = match phase {
                RequestPhase::Rejected => (SPEC_REJECTED, REJECTED_MSG),
                _ => (APPROVAL_PENDING, PENDING_MSG),
            };
            set_condition(c, APPROVED, false, reason, msg, now);
            if let Some(r) = s.velero_backup_storage_location.as_mut() {
                r.status = None;
            }
            if *phase == RequestPhase::Rejected {
                NonAdminPhase::BackingOff
            } else {
                NonAdminPhase::New
            }
        }
        Stage::ForeignRequest => {
            forget_copies(c);
            set_condition(c, APPROVED, false, UPDATE_REJECTED, INVALID_REQUEST_MSG, now);
            NonAdminPhase::BackingOff
        }
        Stage::SecretFailed(detail) => {
            accepted(c);
            set_condition(c, APPROVED, true, SPEC_APPROVED, APPROVED_MSG, now);
            set_condition(
                c,
                SECRET_SYNCED,
                false,
                SECRET_FAILED,
                &format!("{SECRET_FAILED_MSG}: {detail}"),
                now,
            );
            NonAdminPhase::New
        }
        Stage::LocationFailed(detail) => {
            accepted(c);
            set_condition(c, APPROVED, true, SPEC_APPROVED, APPROVED_MSG, now);
            set_condition(
                c,
                BSL_SYNCED,
                false,
                BSL_FAILED,
                &format!("{BSL_FAILED_MSG}: {detail}"),
                now,
            );
            NonAdminPhase::New
        }
        Stage::Ready {
            secret,
            location,
            velero,
        } => {
            accepted(c);
            set_condition(c, APPROVED, true, SPEC_APPROVED, APPROVED_MSG, now);
            sync_condition(
                c,
                SECRET_SYNCED,
                *secret,
                (SECRET_CREATED, SECRET_CREATED_MSG),
                (SECRET_UPDATED, SECRET_UPDATED_MSG),
                now,
            );
            sync_condition(
                c,
                BSL_SYNCED,
                *location,
                (BSL_CREATED, BSL_CREATED_MSG),
                (BSL_UPDATED, BSL_UPDATED_MSG),
                now,
            );
            if let Some(r) = s.velero_backup_storage_location.as_mut() {
                r.status = velero.clone().map(Box::new);
            }
            NonAdminPhase::Created
        }
    };
    advance_phase(&mut s.phase, next);
    s
}

/// A copy's condition: Created or Updated when that happened now; unchanged keeps what it said (a True one), or
/// says Created when the condition was missing or False (the copy exists and matches).
fn sync_condition(
    c: &mut Vec<Condition>,
    type_: &str,
    what: Synced,
    created: (&str, &str),
    updated: (&str, &str),
    now: Timestamp,
) {
    let (reason, msg) = match what {
        Synced::Created => created,
        Synced::Updated => updated,
        Synced::Unchanged => match find(c, type_) {
            Some(x) if x.status == "True" => return,
            _ => created,
        },
    };
    set_condition(c, type_, true, reason, msg, now);
}

/// The Velero BSL for an approved spec.
pub fn build_location(
    nabsl: &NonAdminBackupStorageLocation,
    nacuuid: &str,
    velero_namespace: &str,
    approved: &BackupStorageLocationSpec,
) -> BackupStorageLocation {
    let ns = nabsl.namespace().unwrap_or_default();
    let mut spec = approved.clone();
    let key = spec.credential.as_ref().map(|c| c.key.clone()).unwrap_or_default();
    spec.credential = Some(SecretKeyRef {
        name: nacuuid.to_string(),
        key,
        optional: None,
    });
    spec.object_storage.prefix = Some(tenant_prefix(&ns, spec.object_storage.prefix.as_deref()));
    spec.default = false;
    BackupStorageLocation {
        metadata: kind::made_meta(nabsl, nacuuid, velero_namespace),
        spec,
        status: None,
    }
}

/// What nac copies of a tenant's credential: an Opaque Secret holding, under the location's key, the credential
/// file nac wrote from the static keys it accepted (`policy::credential_copy`): never the tenant's bytes, labels
/// or annotations.
pub fn build_secret_copy(
    nabsl: &NonAdminBackupStorageLocation,
    nacuuid: &str,
    velero_namespace: &str,
    key: &str,
    file: String,
) -> Secret {
    Secret {
        metadata: kind::made_meta(nabsl, nacuuid, velero_namespace),
        type_: Some("Opaque".into()),
        data: Some([(key.to_string(), k8s_openapi::ByteString(file.into_bytes()))].into()),
        ..Secret::default()
    }
}

impl Kind for NonAdminBackupStorageLocation {
    const ORIGIN: Origin = NABSL;
    const CONTROLLER: &'static str = CONTROLLER;
    type State = State;

    /// The location controller for a term: the tenants' locations, their approval requests and Secret copies, and the
    /// tenants' Secrets (a location hears of a change of its credential); Velero's storage locations trigger theirs
    /// through its hook.
    async fn controller(ctx: Arc<Ctx>, wiring: Wiring, jobs: &Jobs, stop: CancellationToken) {
        let secret_ctx = ctx.clone();
        let tenant_secrets = watches::secret_changes(Api::all(ctx.client.clone()), move |ns, name| {
            for r in using_secret(&secret_ctx.own.objects, ns, name) {
                let _ = secret_ctx.own.trigger.unbounded_send(r);
            }
        })
        .take_until(stop.clone().cancelled_owned())
        .for_each(|_| async {});
        let requests = watches::store_stream(
            ctx.velero_api::<NonAdminBackupStorageLocationRequest>(),
            watches::config(),
            wiring.requests,
            ctx.own.requests.synced.clone(),
            "nonadminbackupstoragelocationrequests",
        );
        let copies = kind::made::<NonAdminBackupStorageLocation, Secret>(
            &ctx,
            wiring.copies,
            ctx.own.copies.synced.clone(),
            "secret copies",
        );
        let objects = ctx.own.objects.synced.clone();
        let controller = kind::controller(&ctx, wiring.objects, objects, jobs, "nonadminbackupstoragelocations")
            .watches_stream(requests, |r| NABSL.owner(&r.metadata))
            .watches_stream(copies, |s| NABSL.owner(&s.metadata))
            .reconcile_on(wiring.triggers);
        tokio::join!(kind::run(controller, &ctx, stop), tenant_secrets);
    }

    fn recorded_nacuuid(s: &NonAdminBackupStorageLocationStatus) -> Option<&str> {
        s.velero_backup_storage_location.as_ref()?.nacuuid.as_deref()
    }

    fn notes(
        old: Option<&NonAdminBackupStorageLocationStatus>,
        new: &NonAdminBackupStorageLocationStatus,
    ) -> Vec<Note> {
        notes(old, new)
    }

    async fn ready(ctx: &Ctx) -> Result<(), Error> {
        stores_ready(ctx).await
    }

    async fn apply(
        api: &Api<NonAdminBackupStorageLocation>,
        obj: Arc<NonAdminBackupStorageLocation>,
        ctx: &Ctx,
    ) -> Result<Action, Error> {
        if obj.status.as_ref().and_then(|s| s.phase) == Some(NonAdminPhase::Deleting) {
            return Ok(Action::await_change());
        }
        if obj.spec.unset {
            let message = format!("{} spec.backupStorageLocationSpec is not set", NABSL.kind);
            set(api, &obj, ctx, &Stage::Invalid(message), None).await?;
            return Ok(Action::await_change());
        }
        let Some(policy) = ctx.policy.current_in(&obj.namespace().unwrap_or_default()) else {
            tracing::info!(object = %key_of(&*obj), "no valid policy loaded yet; will retry");
            return Ok(Action::requeue(ctx.opts.policy_retry));
        };
        let nacuuid = match nacuuid(&*obj) {
            Some(u) => u,
            None => generate_nacuuid(&obj.namespace().unwrap_or_default(), &obj.name_any()),
        };
        let vns = ctx.opts.velero_namespace.clone();
        let ns = obj.namespace().unwrap_or_default();
        let own = crate::velero::exclusions::to_map(&obj.spec.backup_storage_location_spec);
        if let Some(action) = refuse_unless_allowed(api, &obj, ctx, &policy, &own, &nacuuid).await? {
            return Ok(action);
        }
        // A request of this location whose status was never written (a crash between its create and its status
        // write) is finished by the same path that makes one.
        let unfinished = |r: &NonAdminBackupStorageLocationRequest| {
            NABSL.owns(&r.metadata, &ns, &obj.name_any())
                && r.status
                    .as_ref()
                    .is_none_or(|s| s.non_admin_backup_storage_location.is_none())
        };
        let request = match ctx.own.requests.get(&ctx.velero_ref(&nacuuid)) {
            Some(r) if !unfinished(&r) => (*r).clone(),
            _ => match request_for(api, &obj, ctx, &policy, &nacuuid).await? {
                Ok(r) => r,
                Err(action) => return Ok(action),
            },
        };
        let requested = request
            .status
            .as_ref()
            .and_then(|s| s.non_admin_backup_storage_location.as_ref())
            .filter(|l| l.nacuuid.as_deref() == Some(nacuuid.as_str()));
        let (Some(requested), true) = (requested, NABSL.owns(&request.metadata, &ns, &obj.name_any())) else {
            tracing::warn!(object = %key_of(&*obj), request = %nacuuid, "approval request belongs to another location");
            teardown(ctx, &obj, &nacuuid).await?;
            set(api, &obj, ctx, &Stage::ForeignRequest, Some(&nacuuid)).await?;
            return Ok(Action::await_change());
        };
        let phase = ApprovalDecision::phase(request.spec.approval_decision);
        if request.status.as_ref().and_then(|s| s.phase) != Some(phase) {
            // The request's phase follows the admin's decision.
            let requests: Api<NonAdminBackupStorageLocationRequest> = ctx.velero_api();
            update_status(&requests, &request, &ctx.recent, &ctx.metrics, |old| {
                let mut s = old.cloned().unwrap_or_default();
                s.phase = Some(phase);
                s
            })
            .await?;
        }
        if phase != RequestPhase::Approved {
            teardown(ctx, &obj, &nacuuid).await?;
            set(api, &obj, ctx, &Stage::NotApproved(phase), Some(&nacuuid)).await?;
            return Ok(Action::await_change());
        }
        let approved = with_enforced(requested.requested_spec.clone(), &policy);
        // What the admin approved is what Velero gets: judged too (a request OADP's controller made holds the
        // tenant's spec as it was then).
        let approved_map = crate::velero::exclusions::to_map(&approved);
        if approved_map != own {
            if let Some(action) = refuse_unless_allowed(api, &obj, ctx, &policy, &approved_map, &nacuuid).await? {
                return Ok(action);
            }
        }
        let secret = match sync_secret(ctx, &obj, &nacuuid, &approved).await? {
            Ok(s) => s,
            Err(detail) => {
                set(api, &obj, ctx, &Stage::SecretFailed(detail), Some(&nacuuid)).await?;
                // The tenant's Secret appearing or changing triggers a reconcile (a watch on Secret metadata).
                return Ok(Action::await_change());
            }
        };
        let wanted = build_location(&obj, &nacuuid, &vns, &approved);
        let (location, velero) = match sync_location(ctx, &obj, &nacuuid, wanted).await {
            Ok(x) => x,
            Err(Error::Kube(e)) if is_refusal(&e) => {
                set(api, &obj, ctx, &Stage::LocationFailed(e.to_string()), Some(&nacuuid)).await?;
                return Ok(Action::await_change());
            }
            Err(e) => return Err(e),
        };
        let stage = Stage::Ready {
            secret,
            location,
            velero: velero.status,
        };
        set(api, &obj, ctx, &stage, Some(&nacuuid)).await?;
        Ok(Action::await_change())
    }

    /// Deletion: the request, the Secret copy and the Velero BSL go. Backups made on the location are left alone
    /// (their data stays in the tenant's bucket); their NonAdminBackups report the location gone.
    async fn cleanup(
        api: &Api<NonAdminBackupStorageLocation>,
        obj: Arc<NonAdminBackupStorageLocation>,
        ctx: &Ctx,
    ) -> Result<Action, Error> {
        stores_ready(ctx).await?;
        let Some(nacuuid) = nacuuid(&*obj) else {
            return Ok(Action::await_change());
        };
        let now = now_seconds();
        update_status(api, &obj, &ctx.recent, &ctx.metrics, |s| {
            let mut s = s.cloned().unwrap_or_default();
            advance_phase(&mut s.phase, NonAdminPhase::Deleting);
            set_condition(&mut s.conditions, DELETING, true, DELETION_PENDING, DELETION_MSG, now);
            s
        })
        .await?;
        teardown(ctx, &obj, &nacuuid).await?;
        if let Some(r) = ctx.own.requests.get(&ctx.velero_ref(&nacuuid)) {
            if NABSL.owns(&r.metadata, &obj.namespace().unwrap_or_default(), &obj.name_any()) {
                let requests: Api<NonAdminBackupStorageLocationRequest> = ctx.velero_api();
                delete_if_present(
                    &requests,
                    &nacuuid,
                    &ctx.metrics,
                    "NonAdminBackupStorageLocationRequest",
                )
                .await?;
            }
        }
        tracing::info!(object = %key_of(&*obj), "storage location removed");
        Ok(Action::await_change())
    }
}

/// The location's rules that need the cluster, before anything is made or kept for it: its requester may `get`
/// the Secret it names (`rights.locations`), and its endpoints are ones the policy allows (judged by their
/// addresses now). Refused: what was made for it from an earlier state goes, and the status says why
/// (`Some(action)`). A name that does not resolve now, or a rights answer nac cannot get, is retried rather than
/// taken as a refusal, so a passing DNS or API failure never tears down a working location.
async fn refuse_unless_allowed(
    api: &Api<NonAdminBackupStorageLocation>,
    obj: &NonAdminBackupStorageLocation,
    ctx: &Ctx,
    policy: &Policy,
    spec: &serde_json::Map<String, serde_json::Value>,
    nacuuid: &str,
) -> Result<Option<Action>, Error> {
    use crate::rights::{credential, Requester, REQUESTER_ANNOTATION};
    let ns = obj.namespace().unwrap_or_default();
    let mut refusal = None;
    if let Some(secret) = obj
        .spec
        .backup_storage_location_spec
        .credential
        .as_ref()
        .map(|c| c.name.as_str())
    {
        let who: Option<Requester> = obj
            .annotations()
            .get(REQUESTER_ANNOTATION)
            .and_then(|v| serde_json::from_str(v).ok());
        let answer = credential::check(ctx.access.as_ref(), who.as_ref(), &ns, secret, policy.rights.locations)
            .await
            .map_err(Error::NotReady)?;
        if let Err(msg) = answer {
            refusal = Some((REQUESTER_RIGHTS_EXCEEDED, msg));
        }
    }
    if refusal.is_none() && policy.non_admin_bsl.enabled {
        let net = ctx.opts.endpoints.network(spec, &policy.non_admin_bsl).await;
        if let Some((name, Err(e))) = net.resolved.iter().find(|(_, a)| a.is_err()) {
            return Err(Error::NotReady(format!(
                "resolving {name}, an endpoint of NonAdminBackupStorageLocation {}: {e}",
                key_of(obj)
            )));
        }
        // The spec rules first (a config key or provider refused since the location was made): then the
        // endpoints.
        let rules = crate::policy::evaluate_bsl(spec, policy);
        if let Some(v) = rules.violations.first() {
            refusal = Some((SPEC_VALIDATION, v.message.clone()));
        } else if let Some(v) = crate::policy::endpoint_violations(spec, policy, &net).first() {
            refusal = Some((ENDPOINT_NOT_ALLOWED, v.message.clone()));
        }
    }
    let Some((reason, msg)) = refusal else {
        return Ok(None);
    };
    tracing::warn!(object = %key_of(obj), reason, message = %msg, "storage location refused");
    teardown(ctx, obj, nacuuid).await?;
    let recorded = nacuuid_recorded(obj);
    set(api, obj, ctx, &Stage::Refused(reason, msg), recorded.then_some(nacuuid)).await?;
    // Looked at again now and then: a right granted, or a name that now resolves elsewhere, is seen.
    Ok(Some(Action::requeue(REFUSED_RECHECK)))
}

/// Whether the location's status already names its nacuuid (things may have been made under it).
fn nacuuid_recorded(obj: &NonAdminBackupStorageLocation) -> bool {
    obj.status
        .as_ref()
        .and_then(|s| s.velero_backup_storage_location.as_ref())
        .is_some_and(|r| r.nacuuid.is_some())
}

async fn set(
    api: &Api<NonAdminBackupStorageLocation>,
    obj: &NonAdminBackupStorageLocation,
    ctx: &Ctx,
    stage: &Stage,
    nacuuid: Option<&str>,
) -> Result<StatusUpdate<NonAdminBackupStorageLocation>, Error> {
    let now = now_seconds();
    let vns = ctx.opts.velero_namespace.clone();
    set_status(api, obj, ctx, |s| plan(s, stage, nacuuid, &vns, now)).await
}

/// Events for the transitions users act on: approval decided, the location ready or failing.
pub fn notes(
    old: Option<&NonAdminBackupStorageLocationStatus>,
    new: &NonAdminBackupStorageLocationStatus,
) -> Vec<Note> {
    let mut out = Vec::new();
    for type_ in [ACCEPTED, APPROVED, SECRET_SYNCED, BSL_SYNCED] {
        let before = old.and_then(|o| find(&o.conditions, type_));
        let Some(now) = find(&new.conditions, type_) else {
            continue;
        };
        if before.is_some_and(|b| b.status == now.status && b.reason == now.reason) {
            continue;
        }
        out.push(Note {
            warning: now.status != "True",
            reason: now.reason.clone(),
            message: now.message.clone(),
        });
    }
    let phase = |s: Option<&NonAdminBackupStorageLocationStatus>| {
        s.and_then(|s| s.velero_backup_storage_location.as_ref())
            .and_then(|r| r.status.as_ref())
            .and_then(|v| v.phase.clone())
    };
    let (was, is) = (phase(old), phase(Some(new)));
    if was != is {
        if let Some(p) = is {
            out.push(Note {
                warning: p != "Available",
                reason: format!("BackupStorageLocation{p}"),
                message: format!("Velero reports the backup storage location {p}"),
            });
        }
    }
    out
}

/// Decisions read the Velero BSLs, the requests and the Secret copies from stores: only once those are listed.
async fn stores_ready(ctx: &Ctx) -> Result<(), Error> {
    ctx.ready(
        &ctx.view.get::<BackupStorageLocation>().synced,
        "Velero BackupStorageLocations",
    )
    .await?;
    ctx.ready(&ctx.own.requests.synced, "NonAdminBackupStorageLocationRequests")
        .await?;
    ctx.ready(&ctx.own.copies.synced, "Secret copies").await
}

/// An API answer that retrying will not change (the object is invalid): reported, not retried.
fn is_refusal(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 || s.code == 400)
}

/// Validates a location that has no request yet and makes its request (approved at once when the policy does
/// not ask for approval). `Err(action)`: not valid, the status says why.
async fn request_for(
    api: &Api<NonAdminBackupStorageLocation>,
    obj: &NonAdminBackupStorageLocation,
    ctx: &Ctx,
    policy: &Policy,
    nacuuid: &str,
) -> Result<Result<NonAdminBackupStorageLocationRequest, Action>, Error> {
    let spec = crate::velero::exclusions::to_map(&obj.spec.backup_storage_location_spec);
    let outcome = evaluate_bsl(&spec, policy);
    let requested: Result<BackupStorageLocationSpec, String> = if outcome.allowed() {
        serde_json::from_value(serde_json::Value::Object(outcome.spec.clone())).map_err(|e| e.to_string())
    } else {
        Err(outcome.message())
    };
    let requested = match requested {
        Ok(r) => r,
        Err(msg) => {
            set(api, obj, ctx, &Stage::Invalid(msg), None).await?;
            return Ok(Err(Action::await_change()));
        }
    };
    // The nacuuid is recorded before anything is made under it, so a crash cannot make a second set.
    let recorded = set(api, obj, ctx, &Stage::Requesting, Some(nacuuid)).await?;
    let ns = obj.namespace().unwrap_or_default();
    let vns = &ctx.opts.velero_namespace;
    let decision = if policy.non_admin_bsl.require_approval {
        ApprovalDecision::Pending
    } else {
        ApprovalDecision::Approve
    };
    let wanted = NonAdminBackupStorageLocationRequest {
        metadata: kind::made_meta(obj, nacuuid, vns),
        spec: NonAdminBackupStorageLocationRequestSpec {
            approval_decision: Some(decision),
        },
        status: None,
    };
    let requests: Api<NonAdminBackupStorageLocationRequest> = ctx.velero_api();
    let made = create_or_get(&requests, &wanted, &ctx.metrics, "NonAdminBackupStorageLocationRequest").await?;
    if !NABSL.owns(&made.metadata, &ns, &obj.name_any()) {
        return Ok(Ok(made));
    }
    let status = NonAdminBackupStorageLocationRequestStatus {
        phase: Some(ApprovalDecision::phase(made.spec.approval_decision)),
        non_admin_backup_storage_location: Some(RequestedLocation {
            nacuuid: Some(nacuuid.to_string()),
            name: Some(obj.name_any()),
            namespace: Some(ns.clone()),
            requested_spec: requested,
        }),
    };
    let up = update_status(&requests, &made, &ctx.recent, &ctx.metrics, |old| match old {
        // Whatever was requested first stays what the admin decides on.
        Some(s) if s.non_admin_backup_storage_location.is_some() => s.clone(),
        _ => status.clone(),
    })
    .await?;
    tracing::info!(object = %key_of(&recorded.object), request = %nacuuid, ?decision, "approval request made");
    Ok(Ok(up.object))
}

/// Copies the tenant's Secret to Velero's namespace. `Ok(Err(detail))`: the tenant's Secret cannot be used.
async fn sync_secret(
    ctx: &Ctx,
    obj: &NonAdminBackupStorageLocation,
    nacuuid: &str,
    approved: &BackupStorageLocationSpec,
) -> Result<Result<Synced, String>, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let Some(cred) = approved
        .credential
        .as_ref()
        .filter(|c| !c.name.is_empty() && !c.key.is_empty())
    else {
        return Ok(Err(
            "NonAdminBackupStorageLocation spec.bslSpec.credential is not set".into()
        ));
    };
    let tenant: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let source = match tenant.get_opt(&cred.name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Ok(Err(format!(
                "BSL credentials secret not found: Secret {:?} not found in namespace {ns}",
                cred.name
            )))
        }
        Err(e) => return Ok(Err(format!("failed to get BSL credentials secret: {e}"))),
    };
    // Only a plain credential Secret is copied: never a service-account token or another typed Secret.
    if let Some(t) = source.type_.as_deref().filter(|t| *t != "Opaque") {
        return Ok(Err(format!(
            "Secret {:?} is of type {t}: a storage location's credential must be an Opaque Secret",
            cred.name
        )));
    }
    let Some(value) = source.data.as_ref().and_then(|d| d.get(&cred.key)) else {
        return Ok(Err(format!("Secret {:?} has no key {:?}", cred.name, cred.key)));
    };
    // Judged on every change of the Secret, before the copy changes: a refused value leaves the copy as it was.
    let file = match crate::policy::credential_copy(&cred.name, &cred.key, &value.0, approved.config.as_ref()) {
        Ok(f) => f,
        Err(why) => {
            // A copy made from an earlier value (or by an earlier nac that copied tenants' bytes) goes with the
            // Velero BSL using it: Velero never reads a credential nac has refused.
            teardown(ctx, obj, nacuuid).await?;
            return Ok(Err(why));
        }
    };
    let vns = &ctx.opts.velero_namespace;
    let wanted = build_secret_copy(obj, nacuuid, vns, &cred.key, file);
    let copies: Api<Secret> = ctx.velero_api();
    let existing = ctx.own.copies.get(&ctx.velero_ref(nacuuid)).map(|s| (*s).clone());
    match existing {
        None => {
            if let Err(e) = create_or_get(&copies, &wanted, &ctx.metrics, "Secret").await {
                if is_refusal(&e) {
                    return Ok(Err(format!("the API server refused the copy: {e}")));
                }
                return Err(e.into());
            }
            tracing::info!(object = %key_of(obj), secret = %nacuuid, "Secret copied to Velero's namespace");
            Ok(Ok(Synced::Created))
        }
        Some(have) => {
            if !NABSL.owns(&have.metadata, &ns, &obj.name_any()) {
                return Err(Error::Inconsistent(format!(
                    "Secret {vns}/{nacuuid} belongs to another NonAdminBackupStorageLocation; refusing to use it"
                )));
            }
            // Kept only as nac wrote it: a copy of the tenant's bytes (OADP's controller made such copies) is
            // rewritten once, since the SDK may read bytes otherwise than nac does.
            if have.type_ == wanted.type_ && have.data == wanted.data {
                return Ok(Ok(Synced::Unchanged));
            }
            let mut next = have.clone();
            next.type_ = wanted.type_;
            next.data = wanted.data;
            ctx.metrics.write("Secret");
            match copies.replace(nacuuid, &PostParams::default(), &next).await {
                Err(e) if is_refusal(&e) => return Ok(Err(format!("the API server refused the copy: {e}"))),
                r => r?,
            };
            tracing::info!(object = %key_of(obj), secret = %nacuuid, "Secret copy updated");
            Ok(Ok(Synced::Updated))
        }
    }
}

/// Creates the Velero BSL, or puts its spec back to the approved one.
async fn sync_location(
    ctx: &Ctx,
    obj: &NonAdminBackupStorageLocation,
    nacuuid: &str,
    wanted: BackupStorageLocation,
) -> Result<(Synced, BackupStorageLocation), Error> {
    let api: Api<BackupStorageLocation> = ctx.velero_api();
    let ns = obj.namespace().unwrap_or_default();
    let existing = ctx
        .view
        .get::<BackupStorageLocation>()
        .get(&ctx.velero_ref(nacuuid))
        .map(|b| (*b).clone());
    match existing {
        None => {
            let made = create_or_get(&api, &wanted, &ctx.metrics, "BackupStorageLocation").await?;
            tracing::info!(object = %key_of(obj), location = %nacuuid, "Velero BackupStorageLocation created");
            Ok((Synced::Created, made))
        }
        Some(have) => {
            if !NABSL.owns(&have.metadata, &ns, &obj.name_any()) {
                return Err(Error::Inconsistent(format!(
                    "Velero BackupStorageLocation {nacuuid} belongs to another NonAdminBackupStorageLocation; \
                     refusing to use it"
                )));
            }
            if have.spec == wanted.spec || have.spec == oadp_form(&wanted.spec) {
                return Ok((Synced::Unchanged, have));
            }
            let mut next = have.clone();
            next.spec = wanted.spec;
            ctx.metrics.write("BackupStorageLocation");
            let put = api.replace(nacuuid, &PostParams::default(), &next).await?;
            tracing::info!(object = %key_of(obj), location = %nacuuid, "Velero BackupStorageLocation put back to the approved spec");
            Ok((Synced::Updated, put))
        }
    }
}

/// The approved spec with what the policy enforces filled in where it is left out. OADP's non-admin controller
/// kept the tenant's own spec in the request and filled the enforced fields in only when it built the Velero BSL,
/// so a location it approved keeps them under nac (a request nac made holds them already).
fn with_enforced(approved: BackupStorageLocationSpec, policy: &Policy) -> BackupStorageLocationSpec {
    let outcome = evaluate_bsl(&crate::velero::exclusions::to_map(&approved), policy);
    if !outcome.allowed() {
        return approved;
    }
    serde_json::from_value(serde_json::Value::Object(outcome.spec)).unwrap_or(approved)
}

/// A Velero BSL spec as oadp-operator's helper (`UpdateBackupStorageLocation`) writes it for aws: the default
/// port dropped from `s3Url`, and `checksumAlgorithm: ""` when the config names none (checksums off, for
/// S3-compatible stores). A location OADP's controller made so is the approved one: rewriting it would change
/// how Velero talks to the bucket.
fn oadp_form(spec: &BackupStorageLocationSpec) -> BackupStorageLocationSpec {
    let mut s = spec.clone();
    if s.provider == "aws" {
        if let Some(c) = s.config.as_mut() {
            if let Some(u) = c.get_mut("s3Url") {
                *u = without_default_port(u);
            }
            c.entry("checksumAlgorithm".to_string()).or_default();
        }
    }
    s
}

fn without_default_port(url: &str) -> String {
    for (scheme, port) in [("http://", ":80"), ("https://", ":443")] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            if let Some(h) = host.strip_suffix(port) {
                return format!("{scheme}{h}{path}");
            }
        }
    }
    url.to_string()
}

/// Removes the Velero BSL and the Secret copy (revoked, rejected or deleted); the request stays unless deleting.
async fn teardown(ctx: &Ctx, obj: &NonAdminBackupStorageLocation, nacuuid: &str) -> Result<(), Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    if let Some(b) = ctx.view.get::<BackupStorageLocation>().get(&ctx.velero_ref(nacuuid)) {
        if NABSL.owns(&b.metadata, &ns, &name) {
            delete_if_present(
                &ctx.velero_api::<BackupStorageLocation>(),
                nacuuid,
                &ctx.metrics,
                "BackupStorageLocation",
            )
            .await?;
            tracing::info!(object = %key_of(obj), location = %nacuuid, "Velero BackupStorageLocation removed");
        }
    }
    if let Some(s) = ctx.own.copies.get(&ctx.velero_ref(nacuuid)) {
        if NABSL.owns(&s.metadata, &ns, &name) {
            delete_if_present(&ctx.velero_api::<Secret>(), nacuuid, &ctx.metrics, "Secret").await?;
        }
    }
    Ok(())
}

/// The locations whose credential is Secret `namespace`/`name`.
pub fn using_secret(
    store: &kube::runtime::reflector::Store<NonAdminBackupStorageLocation>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<NonAdminBackupStorageLocation>> {
    store
        .state()
        .iter()
        .filter(|l| {
            l.namespace().as_deref() == Some(namespace)
                && l.spec
                    .backup_storage_location_spec
                    .credential
                    .as_ref()
                    .is_some_and(|c| c.name == name)
        })
        .map(|l| ObjectRef::from_obj(&**l))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NonAdminBackupStorageLocationSpec;
    use crate::velero::ObjectStorageLocation;
    use std::collections::BTreeMap;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn nabsl() -> NonAdminBackupStorageLocation {
        let mut n = NonAdminBackupStorageLocation::new(
            "own",
            NonAdminBackupStorageLocationSpec {
                backup_storage_location_spec: spec(),
                unset: false,
            },
        );
        n.metadata.namespace = Some("team-a".into());
        n
    }

    fn spec() -> BackupStorageLocationSpec {
        BackupStorageLocationSpec {
            provider: "aws".into(),
            object_storage: ObjectStorageLocation {
                bucket: "tenant".into(),
                prefix: Some("nightly".into()),
                ca_cert: None,
            },
            config: Some(BTreeMap::from([("region".into(), "minio".into())])),
            credential: Some(SecretKeyRef {
                name: "s3".into(),
                key: "cloud".into(),
                optional: None,
            }),
            default: true,
            ..Default::default()
        }
    }

    fn cond<'a>(s: &'a NonAdminBackupStorageLocationStatus, t: &str) -> (&'a str, &'a str) {
        let c = find(&s.conditions, t).unwrap_or_else(|| panic!("no {t}: {s:?}"));
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn the_velero_location_is_the_approved_spec_with_nacs_credential_prefix_and_identity() {
        let b = build_location(&nabsl(), "team-a-own-uuid", "openshift-adp", &spec());
        assert_eq!(b.metadata.name.as_deref(), Some("team-a-own-uuid"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("openshift-adp"));
        let c = b.spec.credential.unwrap();
        assert_eq!((c.name.as_str(), c.key.as_str()), ("team-a-own-uuid", "cloud"));
        assert_eq!(b.spec.object_storage.prefix.as_deref(), Some("team-a/nightly"));
        assert!(!b.spec.default);
        assert_eq!(b.spec.config, spec().config);
        assert!(NABSL.owns(&b.metadata, "team-a", "own"));
        assert_eq!(NABSL.nacuuid(&b.metadata), Some("team-a-own-uuid"));
        let labels = b.metadata.labels.unwrap();
        assert_eq!(labels["openshift.io/oadp"], "True");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "oadp-nac-controller");
    }

    proptest::proptest! {
        /// Whatever an approved spec holds (the webhook bypassed, a bucket or prefix of any shape), the Velero
        /// location uses nac's Secret copy, stays under the tenant's prefix and is never the default.
        #[test]
        fn any_approved_spec_is_confined(
            prefix in proptest::option::of("[a-z./]{0,12}"),
            name in "[a-z]{0,6}",
            key in "[a-z]{0,6}",
            default in proptest::bool::ANY,
            no_credential in proptest::bool::ANY,
        ) {
            let mut approved = spec();
            approved.object_storage.prefix = prefix;
            approved.default = default;
            approved.credential = (!no_credential).then(|| SecretKeyRef { name, key: key.clone(), optional: Some(true) });
            let b = build_location(&nabsl(), "u", "v", &approved);
            let c = b.spec.credential.unwrap();
            proptest::prop_assert_eq!(c.name.as_str(), "u");
            proptest::prop_assert!(c.optional.is_none());
            let p = b.spec.object_storage.prefix.unwrap();
            proptest::prop_assert!(p == "team-a" || p.starts_with("team-a/"), "{}", p);
            proptest::prop_assert!(!p.split('/').any(|s| s == ".." || s == "." || s.is_empty()), "{}", p);
            proptest::prop_assert!(!b.spec.default);
        }
    }

    #[test]
    fn a_location_oadps_controller_made_is_the_approved_one() {
        let mut approved = spec();
        approved.provider = "aws".into();
        approved.config = Some(BTreeMap::from([
            ("region".to_string(), "us-east-1".to_string()),
            ("s3Url".to_string(), "https://s3.example.com:443/base".to_string()),
        ]));
        let wanted = build_location(&nabsl(), "u1", "velero", &approved);
        // As oadp-operator's helper wrote it: port dropped, checksums off.
        let mut oadp = wanted.spec.clone();
        let c = oadp.config.as_mut().unwrap();
        c.insert("s3Url".into(), "https://s3.example.com/base".into());
        c.insert("checksumAlgorithm".into(), String::new());
        assert_eq!(oadp_form(&wanted.spec), oadp);
        // A checksum the tenant chose, and a port that is not the default, stay.
        let mut chosen = wanted.spec.clone();
        chosen
            .config
            .as_mut()
            .unwrap()
            .insert("checksumAlgorithm".into(), "CRC32".into());
        assert_eq!(oadp_form(&chosen).config.unwrap()["checksumAlgorithm"], "CRC32");
        assert_eq!(without_default_port("http://10.0.0.1:9000"), "http://10.0.0.1:9000");
        assert_eq!(without_default_port("http://minio:80"), "http://minio");
        // Another provider: as approved.
        let mut gcp = wanted.spec.clone();
        gcp.provider = "gcp".into();
        assert_eq!(oadp_form(&gcp), gcp);
    }

    #[test]
    fn what_the_policy_enforces_is_filled_into_a_request_oadps_controller_made() {
        let policy =
            crate::policy::Policy::parse("nonAdminBSL: {enabled: true, enforceBSLSpec: {config: {region: eu-west-1}}}")
                .unwrap();
        let mut approved = spec();
        approved.config = None;
        approved.default = false;
        let filled = with_enforced(approved.clone(), &policy);
        assert_eq!(filled.config.unwrap()["region"], "eu-west-1");
        // What nac itself requested holds it already: unchanged.
        let again = with_enforced(with_enforced(approved.clone(), &policy), &policy);
        assert_eq!(again, with_enforced(approved, &policy));
    }

    #[test]
    fn the_secret_copy_is_the_file_nac_wrote_and_nothing_of_the_tenants() {
        let tenant = b"# theirs\n[default]\naws_access_key_id = A\naws_secret_access_key = B\n";
        let file = crate::policy::credential_copy("s3", "cloud", tenant, None).unwrap();
        let copy = build_secret_copy(&nabsl(), "u", "openshift-adp", "cloud", file);
        assert_eq!(copy.type_.as_deref(), Some("Opaque"));
        let data = copy.data.as_ref().unwrap();
        assert_eq!(data.len(), 1);
        assert_eq!(
            data["cloud"].0,
            b"[default]\naws_access_key_id=A\naws_secret_access_key=B\n".to_vec()
        );
        assert!(NABSL.owns(&copy.metadata, "team-a", "own"));
        // The profile the location selects; a refused credential names the Secret and the key.
        let config = BTreeMap::from([("profile".to_string(), "team".to_string())]);
        let err = crate::policy::credential_copy("s3", "cloud", tenant, Some(&config)).unwrap_err();
        assert!(
            err.starts_with(
                "NonAdminBackupStorageLocation credential Secret \"s3\" key \"cloud\" is refused: profile [team]"
            ),
            "{err}"
        );
        let err = crate::policy::credential_copy("s3", "cloud", b"[default]\ncredential_process = touch /x\n", None)
            .unwrap_err();
        assert!(
            err.contains("\"credential_process\" (line 2, profile [default]) is not a static key"),
            "{err}"
        );
    }

    #[test]
    fn a_pending_location_waits_in_new_and_an_approved_one_is_created_with_oadps_conditions() {
        let s = plan(None, &Stage::Requesting, Some("u"), "openshift-adp", t(0));
        assert_eq!(s.phase, Some(NonAdminPhase::New));
        let s = plan(
            Some(&s),
            &Stage::NotApproved(RequestPhase::Pending),
            Some("u"),
            "openshift-adp",
            t(1),
        );
        assert_eq!(s.phase, Some(NonAdminPhase::New));
        assert_eq!(cond(&s, APPROVED), ("False", APPROVAL_PENDING));
        assert_eq!(cond(&s, ACCEPTED), ("True", SPEC_VALIDATION));
        let ready = Stage::Ready {
            secret: Synced::Created,
            location: Synced::Created,
            velero: Some(BackupStorageLocationStatus {
                phase: Some("Available".into()),
                ..Default::default()
            }),
        };
        let s = plan(Some(&s), &ready, Some("u"), "openshift-adp", t(2));
        assert_eq!(s.phase, Some(NonAdminPhase::Created));
        let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [ACCEPTED, APPROVED, SECRET_SYNCED, BSL_SYNCED]);
        assert_eq!(cond(&s, SECRET_SYNCED), ("True", SECRET_CREATED));
        assert_eq!(cond(&s, BSL_SYNCED), ("True", BSL_CREATED));
        let r = s.velero_backup_storage_location.as_ref().unwrap();
        assert_eq!(r.name.as_deref(), Some("u"));
        assert_eq!(r.status.as_ref().unwrap().phase.as_deref(), Some("Available"));
        // Unchanged copies keep their conditions: recomputing is a no-op (no status write).
        let again = Stage::Ready {
            secret: Synced::Unchanged,
            location: Synced::Unchanged,
            velero: r.status.as_deref().cloned(),
        };
        assert_eq!(plan(Some(&s), &again, Some("u"), "openshift-adp", t(3)), s);
        // A rotated credential says Updated.
        let rotated = Stage::Ready {
            secret: Synced::Updated,
            location: Synced::Unchanged,
            velero: r.status.as_deref().cloned(),
        };
        let s2 = plan(Some(&s), &rotated, Some("u"), "openshift-adp", t(4));
        assert_eq!(cond(&s2, SECRET_SYNCED), ("True", SECRET_UPDATED));
    }

    #[test]
    fn velero_validation_never_moves_the_phase_back_and_revoking_keeps_created_with_the_reason() {
        let ready = |phase: &str| Stage::Ready {
            secret: Synced::Unchanged,
            location: Synced::Unchanged,
            velero: Some(BackupStorageLocationStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        };
        let s = plan(None, &ready("Available"), Some("u"), "v", t(0));
        let s = plan(Some(&s), &ready("Unavailable"), Some("u"), "v", t(1));
        assert_eq!(s.phase, Some(NonAdminPhase::Created));
        let revoked = plan(
            Some(&s),
            &Stage::NotApproved(RequestPhase::Rejected),
            Some("u"),
            "v",
            t(2),
        );
        assert_eq!(revoked.phase, Some(NonAdminPhase::Created));
        assert_eq!(cond(&revoked, APPROVED), ("False", SPEC_REJECTED));
        assert!(find(&revoked.conditions, SECRET_SYNCED).is_none());
        assert!(find(&revoked.conditions, BSL_SYNCED).is_none());
        assert!(revoked.velero_backup_storage_location.unwrap().status.is_none());
        // Rejected before it was ever created: BackingOff.
        let s = plan(None, &Stage::NotApproved(RequestPhase::Rejected), Some("u"), "v", t(0));
        assert_eq!(s.phase, Some(NonAdminPhase::BackingOff));
        let s = plan(None, &Stage::Invalid("bad".into()), None, "v", t(0));
        assert_eq!(s.phase, Some(NonAdminPhase::BackingOff));
        assert_eq!(cond(&s, ACCEPTED), ("False", SPEC_VALIDATION));
        assert!(s.velero_backup_storage_location.is_none());
    }

    #[test]
    fn events_tell_the_decision_and_velero_phase_changes_once() {
        let pending = plan(None, &Stage::NotApproved(RequestPhase::Pending), Some("u"), "v", t(0));
        let n = notes(None, &pending);
        assert!(n.iter().any(|n| n.reason == APPROVAL_PENDING && n.warning));
        let ready = Stage::Ready {
            secret: Synced::Created,
            location: Synced::Created,
            velero: Some(BackupStorageLocationStatus {
                phase: Some("Unavailable".into()),
                ..Default::default()
            }),
        };
        let s = plan(Some(&pending), &ready, Some("u"), "v", t(1));
        let n = notes(Some(&pending), &s);
        let reasons: Vec<&str> = n.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                SPEC_APPROVED,
                SECRET_CREATED,
                BSL_CREATED,
                "BackupStorageLocationUnavailable"
            ]
        );
        assert!(notes(Some(&s), &s).is_empty());
    }
}
