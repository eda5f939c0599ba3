//! NonAdminRestore: its own decisions on the tenant skeleton (`tenant.rs`). Admission is the restore policy plus
//! the backup reference: a NonAdminBackup of the restore's own namespace whose Velero Backup is Completed. The
//! Velero Restore restores into the own namespace only; its status and queue position are mirrored; deleting the
//! NonAdminRestore deletes the Velero Restore.
//!
//! A restore whose backup is not ready yet (not created, queued, in progress, its storage location not Available)
//! waits for it, as Velero waits for additional items: phase New, `Queued=False` `WaitingForBackup` naming what
//! it waits for and until when, woken by changes of the NonAdminBackup, its Velero Backup or the location (no
//! polling), up to the policy's `restore.waitTimeout` (10m by default; the `nac.oadp.openshift.io/wait-timeout`
//! annotation overrides it within `restore.maxWaitTimeout`), counted from the NonAdminRestore's creation so a
//! restart of nac does not restart the clock. A source that can never be restored (failed, deleted, refused) or
//! a wait that timed out is `BackingOff` with the reason; a wait timeout of 0 refuses at once, as OADP does.

use crate::api::condition::*;
use crate::api::{
    NonAdminBackup, NonAdminPhase, NonAdminRestore, NonAdminRestoreStatus, RestorePreview, VeleroRestoreRef,
};
use crate::controller::conditions::{now_seconds, set_condition};
use crate::controller::contents::{self, Results, RESULTS_RETRY};
use crate::controller::contents::{restored_list, ContentsSource};
use crate::controller::context::{key_of, Error, Shared};
use crate::controller::counts::{data_uploads, pod_volume_backups, PhaseTally, Volumes};
use crate::controller::cx::Cx;
use crate::controller::gc::MadeBy;
use crate::controller::index::velero::StoreCopy;
use crate::controller::jobs::Jobs;
use crate::controller::kind::{self, set_status, Build, Kind};
use crate::controller::queue::reported;
use crate::controller::status::{
    self, Mirrors, Placed, Words, BACKUP_PARTIALLY_FAILED, REQUESTER_RIGHTS_EXCEEDED, RESOURCES_LEFT_OUT,
    RESOURCES_OUTSIDE_RIGHTS, RESTORED_AS_CHECKED, RESTORED_OUTSIDE_NAMESPACE, RESTORE_NOT_VERIFIED,
    UNCHECKED_RESOURCES_RESTORED, WAITING_FOR_BACKUP,
};
use crate::controller::tenant::{self, Admission, Tenant, Waiting};
use crate::controller::tenant::{KindState, KindWiring};
use crate::controller::view::Registry;
use crate::naming::{
    Origin, COPIED_FROM_NAMESPACE_LABEL, NAB, NABSL_ORIGIN_NACUUID_LABEL, NAB_ORIGIN_NACUUID_LABEL, NAR,
};
use crate::policy::{evaluate_restore, Policy, RestoreRules, WAIT_TIMEOUT_ANNOTATION};
use crate::rights::contents::Contents;
use crate::rights::features::Storage;
use crate::rights::preview::{is_preview, table as preview_table, totals as preview_totals, Existing, Stage};
use crate::rights::restore::{copy_reads, copy_right, decide, target_of, RestoreRights, RESTORE_RIGHTS_ANNOTATION};
use crate::rights::{Requester, RightsMode, REQUESTER_ANNOTATION};
use crate::velero::exclusions::{add_restore_exclusions, to_map};
use crate::velero::{
    backup_phase_unfinished, restore_phase_unfinished, Backup, BackupStorageLocation, DataDownload, PodVolumeRestore,
    Restore, RestoreSpec, RestoreStatus,
};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What the restore controller keeps for a term: the queued tier's state (NonAdminRestores, nac's Velero
/// Restores, their queue) and the per-volume progress of restores.
pub struct State {
    pub queued: KindState<NonAdminRestore>,
    pub volumes: Volumes,
    /// Where the restore's rights check reads a backup's contents.
    pub contents: ContentsSource,
}

impl Build for State {
    type Wiring = KindWiring<NonAdminRestore>;

    /// The queued tier's stores, empty per-volume counts, and what the collector collects of a restore: its
    /// Velero Restore once it is gone.
    fn build(shared: &Shared, reg: &mut Registry) -> (State, Self::Wiring) {
        reg.made(MadeBy::<NonAdminRestore, Restore>::always());
        let (queued, wiring) = KindState::build(shared, reg);
        let volumes = Volumes::default();
        let contents = ContentsSource::Velero(Default::default());
        (
            State {
                queued,
                volumes,
                contents,
            },
            wiring,
        )
    }
}

type Ctx = Cx<State>;

crate::has_status!(NonAdminRestore => NonAdminRestoreStatus, "NonAdminRestore/status";);
impl crate::controller::write::CompactStatus for NonAdminRestoreStatus {}

pub const NAR_CONTROLLER: &str = "nonadminrestore";
pub const RESTORE_DELETE_MESSAGE: &str = "restore accepted for deletion";

/// A Velero Restore as the NonAdminRestore status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestoreView {
    pub placed: Placed,
    pub status: Option<RestoreStatus>,
    /// The warning about a PartiallyFailed source backup, if it is one.
    pub source_warning: Option<String>,
    /// What the restore leaves out for its requester's rights (the record on the Velero Restore), as a message.
    pub left_out: Option<String>,
    /// DataDownloads and PodVolumeRestores of the restore by phase.
    pub data_downloads: PhaseTally,
    pub pod_volume_restores: PhaseTally,
    /// What nac found comparing what Velero made (the API server's objects labelled with the restore, and its
    /// resource list) with the kinds it allowed in the namespace, once the restore is finished: (anything outside
    /// them, or not verifiable, reason, message).
    pub verdict: Option<(bool, &'static str, String)>,
    /// When to verify again: what Velero made could not be confirmed now.
    pub verify_retry: Option<std::time::Duration>,
    /// What reading Velero's results gave now (the `VeleroResults` condition).
    pub results: Results,
}

impl AsRef<Placed> for RestoreView {
    fn as_ref(&self) -> &Placed {
        &self.placed
    }
}

/// What admission hands to `build`: the Velero RestoreSpec and the rights decision to record with it.
pub struct RestorePlan {
    pub spec: RestoreSpec,
    pub rights: Option<RestoreRights>,
    /// For a preview: what its table is made of. A plan with one is reported, never made.
    pub preview: Option<PreviewInput>,
}

/// What a preview's table is made of beyond the plan: the backup's contents, the spec as the rights check got it,
/// and why the restore would be refused, if it would be.
pub struct PreviewInput {
    pub contents: Contents,
    pub checked: serde_json::Map<String, Value>,
    pub refused: Option<String>,
}

crate::tenant_types! {
    velero: Restore, spec: RestorePlan, velero_status: RestoreStatus, kind: "Restore",
    unfinished: restore_phase_unfinished,
    failure: |v: &RestoreStatus| {
        v.failure_reason.clone().or_else(|| v.validation_errors.as_ref().map(|e| e.join("; ")))
    },
    status: NonAdminRestoreStatus, reference: velero_restore, VeleroRestoreRef,
}

/// A Velero Restore is kept whole: its status is all a NonAdminRestore mirrors, and it has no large parts.
impl StoreCopy for Restore {}

impl Mirrors for NonAdminRestore {
    const WORDS: Words = crate::api::condition::RESTORE_WORDS;
    type View = RestoreView;

    /// A results read that got no answer is tried again (`results_condition` gives up in time).
    fn retry_after(v: &RestoreView) -> Option<std::time::Duration> {
        let results = matches!(v.results, Results::Pending).then_some(RESULTS_RETRY);
        match (results, v.verify_retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn mirror(s: &mut NonAdminRestoreStatus, vr: &RestoreView) {
        s.velero_restore = Some(vr.placed.reference(vr.status.clone()));
        s.data_mover_data_downloads = Some(data_uploads(&vr.data_downloads));
        s.file_system_pod_volume_restores = Some(pod_volume_backups(&vr.pod_volume_restores));
        if let Some(w) = &vr.source_warning {
            set_condition(
                &mut s.conditions,
                BACKUP_PARTIALLY_FAILED,
                true,
                BACKUP_PARTIALLY_FAILED,
                w,
                now_seconds(),
            );
        }
        if let Some((outside, reason, message)) = &vr.verdict {
            set_condition(
                &mut s.conditions,
                RESOURCES_OUTSIDE_RIGHTS,
                *outside,
                reason,
                message,
                now_seconds(),
            );
        }
        vr.results.mirror(&mut s.conditions);
        if let Some(w) = &vr.left_out {
            set_condition(
                &mut s.conditions,
                RESOURCES_LEFT_OUT,
                true,
                REQUESTER_RIGHTS_EXCEEDED,
                w,
                now_seconds(),
            );
        }
    }
}

impl Tenant for NonAdminRestore {
    const COUNTED: crate::policy::Counted = crate::policy::Counted::Restore;
    type Velero = Restore;

    fn state(ctx: &Ctx) -> &KindState<Self> {
        &ctx.own.queued
    }

    fn spec_unset(&self) -> Option<String> {
        self.spec
            .unset
            .then(|| format!("{} spec.restoreSpec is not set", NAR.kind))
    }

    /// The policy and tenant rules, then the source: ready, worth waiting for (within the wait timeout), or not
    /// restorable.
    async fn admit(nar: &Self, policy: &Policy, ctx: &Ctx) -> Result<Admission<RestorePlan>, Error> {
        // The rules first (they also require backupName), with a stand-in for the Velero backup name.
        if let Err(message) = velero_restore_spec(nar, "", policy) {
            return Ok(Admission::from_spec::<Self>(Err(message)));
        }
        // A copy: the target namespace's side, from the caches (the source's was judged with the spec).
        if let Some(t) = copy_target(nar) {
            if let Some(refusal) = ctx.policy.copy_refusal(&t).map_err(Error::NotReady)? {
                return Ok(Admission::from_spec::<Self>(Err(refusal)));
            }
        }
        let annotation = nar.annotations().get(WAIT_TIMEOUT_ANNOTATION).map(String::as_str);
        let wait = match policy.restore.wait_for(annotation) {
            Ok(d) => d,
            Err(message) => return Ok(Admission::from_spec::<Self>(Err(message))),
        };
        ctx.ready(&ctx.view.get::<Backup>().synced, "Velero Backups").await?;
        ctx.ready(
            &ctx.view.get::<BackupStorageLocation>().synced,
            "Velero BackupStorageLocations",
        )
        .await?;
        let source = observe_source(nar, ctx, wait.is_zero()).await?;
        Ok(match judge(&source, &policy.restore) {
            Source::Ready(velero_backup) => match velero_restore_spec(nar, &velero_backup, policy) {
                Err(message) => Admission::from_spec::<Self>(Err(message)),
                Ok(spec) => {
                    let backup = source.backup.as_ref().expect("a ready source has its Velero Backup");
                    return check_rights(nar, spec, backup, policy.rights.restore, ctx).await;
                }
            },
            Source::Unusable(why) => Admission::Refuse {
                reason: BACKUP_NOT_RESTORABLE,
                message: invalid(&why),
            },
            Source::NotYet { refusal, .. } if wait.is_zero() => Admission::from_spec::<Self>(Err(invalid(&refusal))),
            Source::NotYet { state, .. } => {
                let created = nar.creation_timestamp().map(|t| t.0).unwrap_or_else(Timestamp::now);
                let until = created.checked_add(wait.as_std()).unwrap_or(Timestamp::MAX);
                let nab = &source.nab_name;
                if Timestamp::now() >= until {
                    Admission::Refuse {
                        reason: BACKUP_WAIT_TIMED_OUT,
                        message: format!(
                            "NonAdminRestore waited {wait} for NonAdminBackup {nab} and gave up: {state}. Create a new \
                             NonAdminRestore once the backup is Completed (the wait is the policy's restore.waitTimeout \
                             or the {WAIT_TIMEOUT_ANNOTATION} annotation)"
                        ),
                    }
                } else {
                    Admission::Wait(Waiting {
                        reason: WAITING_FOR_BACKUP,
                        message: format!(
                            "waiting for NonAdminBackup {nab}: {state}; the restore starts once the backup is \
                             Completed, or backs off at {} ({wait} after the NonAdminRestore was created)",
                            until.strftime("%Y-%m-%dT%H:%M:%SZ")
                        ),
                        until,
                        on: source.dependencies(),
                    })
                }
            }
        })
    }

    /// A preview judged for its current generation is done: nothing changes it but an edit.
    async fn early(_api: &Api<Self>, nar: &Self, _ctx: &Ctx) -> Result<Option<Action>, Error> {
        let done = preview_of(nar).is_some_and(|p| p.observed_generation == nar.metadata.generation);
        Ok(done.then(Action::await_change))
    }

    /// A preview's plan is reported in its status; no Velero Restore is made.
    async fn divert(
        api: &Api<Self>,
        nar: &Self,
        plan: RestorePlan,
        ctx: &Ctx,
    ) -> Result<std::ops::ControlFlow<Action, RestorePlan>, Error> {
        use std::ops::ControlFlow;
        if plan.preview.is_none() {
            return Ok(ControlFlow::Continue(plan));
        }
        let preview = preview(nar, plan, ctx).await?;
        let message = preview_message(&preview);
        let now = now_seconds();
        set_status(api, nar, ctx, |s| {
            let mut s = status::validated::<NonAdminRestore>(s, now);
            set_condition(&mut s.conditions, ACCEPTED, true, RESTORE_PREVIEWED, &message, now);
            s.preview = Some(preview.clone());
            s
        })
        .await?;
        tracing::info!(nar = %key_of(nar), "restore previewed");
        Ok(ControlFlow::Break(Action::await_change()))
    }

    fn build(nar: &Self, nacuuid: &str, velero_namespace: &str, plan: RestorePlan) -> Restore {
        let mut r = velero_restore(nar, nacuuid, velero_namespace, plan.spec);
        if let Some(rights) = plan.rights {
            r.metadata.annotations.get_or_insert_with(Default::default).insert(
                RESTORE_RIGHTS_ANNOTATION.into(),
                serde_json::to_string(&rights).expect("record serializes"),
            );
        }
        r
    }

    async fn view(ctx: &Ctx, nar: &Self, vr: &Restore, nacuuid: &str) -> RestoreView {
        ctx.own.volumes.ready(ctx.opts.store_ready_timeout).await;
        let name = vr.name_any();
        let (data_downloads, pod_volume_restores) = ctx.own.volumes.tallies(&name);
        let source = vr
            .spec
            .backup_name
            .as_deref()
            .and_then(|b| ctx.view.get::<Backup>().get(&ctx.velero_ref(b)));
        let (verdict, verify_retry) = verify(ctx, nar, vr, source.as_deref()).await;
        let results = results_of(ctx, nar, vr, source.as_deref()).await;
        RestoreView {
            verdict,
            verify_retry,
            results,
            placed: ctx.own.queued.placed(&ctx.opts.velero_namespace, vr, nacuuid),
            data_downloads,
            pod_volume_restores,
            status: vr.status.clone().map(|mut s| {
                s.queue_position = s.queue_position.map(reported);
                s
            }),
            source_warning: source.and_then(|b| partially_failed_warning(&b)),
            left_out: RestoreRights::of(vr.metadata.annotations.as_ref())
                .filter(RestoreRights::limits)
                .map(|r| {
                    r.message(&target_of(
                        vr.spec.namespace_mapping.as_ref(),
                        &nar.namespace().unwrap_or_default(),
                    ))
                }),
        }
    }
}

impl Kind for NonAdminRestore {
    const ORIGIN: Origin = NAR;
    const CONTROLLER: &'static str = NAR_CONTROLLER;
    type State = State;
    crate::queued_kind!();

    /// The restore controller for a term: NonAdminRestores and nac's Velero Restores; one whose NonAdminRestore is not
    /// in the store goes to the collector.
    async fn controller(ctx: Arc<Ctx>, wiring: KindWiring<NonAdminRestore>, jobs: &Jobs, stop: CancellationToken) {
        let (nars, j) = (ctx.own.queued.objects.clone(), jobs.clone());
        let orphans = move |v: &Restore, r: &ObjectRef<NonAdminRestore>| {
            if nars.get(r).is_none() {
                j.orphan::<Restore>(v.name_any());
            }
        };
        let j = jobs.clone();
        let controller = tenant::controller(
            &ctx,
            wiring,
            |_| {},
            orphans,
            move |o| j.gone(NonAdminRestore::ORIGIN, o),
        );
        // Per-volume progress of restores, counted for the NonAdminRestore status.
        tenant::run_counting::<_, DataDownload, PodVolumeRestore>(controller, &ctx, &ctx.own.volumes, stop).await;
    }

    /// Deleting a NonAdminRestore deletes its Velero Restore. Velero keeps a finalizer on Restores; when it holds
    /// the Velero Restore longer than `restore_finalizer_grace` (Velero not running), the condition says so.
    async fn cleanup(api: &Api<Self>, nar: Arc<Self>, ctx: &Ctx) -> Result<Action, Error> {
        ctx.ready(&ctx.own.queued.synced, "Velero Restores").await?;
        let target = tenant::target(&*nar, ctx).await?;
        let name = target.as_ref().map(|t| t.name.clone()).unwrap_or_default();
        let vr = target.and_then(|t| t.object);
        let stalled = vr.as_ref().and_then(|vr| {
            let since = vr.metadata.deletion_timestamp.as_ref()?;
            let waited = Timestamp::now().duration_since(since.0).unsigned_abs();
            (waited >= ctx.opts.restore_finalizer_grace && !vr.finalizers().is_empty()).then(|| {
                restore_finalizer_stalled_message(
                    &ctx.opts.velero_namespace,
                    &name,
                    vr.finalizers(),
                    &since.0.to_string(),
                )
            })
        });
        let message = stalled.clone().unwrap_or_else(|| RESTORE_DELETE_MESSAGE.to_string());
        let now = now_seconds();
        let up = set_status(api, &nar, ctx, |s| status::deleting(s, &message, now)).await?;
        if up.written && stalled.is_some() {
            tracing::warn!(nar = %key_of(&*nar), "Velero has not finalized the Velero Restore; is Velero running?");
        }
        let Some(vr) = vr else {
            // nac's resource modifier is written before the Velero Restore that names it: a restore deleted in
            // between (or whose Velero Restore Velero has collected) leaves it to go here.
            crate::controller::write::delete_if_present(
                &ctx.velero_api::<k8s_openapi::api::core::v1::ConfigMap>(),
                &status_guard_name(&nar),
                &ctx.metrics,
                "ConfigMap",
            )
            .await?;
            return Ok(Action::await_change());
        };
        if tenant::delete_velero::<NonAdminRestore>(ctx, &name, &vr).await? {
            delete_status_guard(&nar, &vr, ctx).await?;
            tracing::info!(nar = %key_of(&*nar), restore = %name, "Velero Restore deleted; releasing the NonAdminRestore");
            return Ok(Action::await_change());
        }
        Err(Error::Waiting(format!(
            "waiting for Velero to finalize Restore {}/{name}",
            ctx.opts.velero_namespace
        )))
    }
}

/// Deletes nac's resource modifier of a NonAdminRestore once its Velero Restore, which names it, is gone.
async fn delete_status_guard(nar: &NonAdminRestore, vr: &Restore, ctx: &Ctx) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let name = status_guard_name(nar);
    if vr.spec.resource_modifier.as_ref().is_some_and(|m| m.name == name) {
        crate::controller::write::delete_if_present(&ctx.velero_api::<ConfigMap>(), &name, &ctx.metrics, "ConfigMap")
            .await?;
    }
    Ok(())
}

/// Once a bound restore is finished: what Velero made, confirmed from the API server (objects labelled with the
/// Velero Restore's name, and namespaces Velero created while it ran), and Velero's restore resource list, both
/// compared with the kinds nac checked and allowed in the namespace; what is outside them removed where nac may
/// (in the namespace, made in this restore), the rest named for the cluster administrator. `None`: not finished,
/// not bound, or verified before, as the NonAdminRestore's condition records. A check the API server cannot
/// answer is `RestoreNotVerified` (True: not known to be clean), with a Warning Event and a metric, and is tried
/// again after the returned delay; it is never recorded as verified.
async fn verify(
    ctx: &Ctx,
    nar: &NonAdminRestore,
    vr: &Restore,
    backup: Option<&Backup>,
) -> (Option<(bool, &'static str, String)>, Option<std::time::Duration>) {
    let done = nar.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == RESOURCES_OUTSIDE_RIGHTS && c.reason != RESTORE_NOT_VERIFIED)
    });
    let phase = vr.status.as_ref().and_then(|s| s.phase.as_deref());
    if done || !matches!(phase, Some("Completed" | "PartiallyFailed")) {
        return (None, None);
    }
    let Some(rights) = RestoreRights::of(vr.metadata.annotations.as_ref()).filter(|r| !r.included.is_empty()) else {
        return (None, None);
    };
    // What Velero made is looked for where it restored to: the copy's target, else the restore's namespace.
    let ns = target_of(vr.spec.namespace_mapping.as_ref(), &nar.namespace().unwrap_or_default());
    let key = format!("verify-{}", nar.uid().unwrap_or_else(|| nar.name_any()));
    let unverified = |why: String| {
        tracing::warn!(nar = %key_of(nar), error = %why, "what Velero restored cannot be verified; trying again");
        ctx.metrics.restores_not_verified.inc();
        let finished = vr
            .status
            .as_ref()
            .and_then(|s| s.completion_timestamp.as_deref())
            .and_then(|t| t.parse::<Timestamp>().ok());
        (
            Some((
                true,
                RESTORE_NOT_VERIFIED,
                format!(
                    "nac cannot confirm from the API server what Velero made in this restore, so it is not known \
                     to hold only what nac checked; nac tries again: {why}"
                ),
            )),
            Some(verify_backoff(finished, Timestamp::now())),
        )
    };
    let kinds = match ctx.access.kinds().await {
        Ok(k) => k,
        Err(e) => return unverified(e),
    };
    let claims = rights.included.iter().any(|k| k == "persistentvolumeclaims");
    let (outside, outside_total) = match made_outside_namespace(ctx, vr, &ns, claims).await {
        Ok(found) => found,
        Err(why) => return unverified(why),
    };
    // Velero's list names the items it restored in the namespace, kinds included; in a tenant's bucket it can be
    // forged, so it only adds to what the API server shows (what it names is removed only when labelled as made by
    // this restore), and a list that cannot be read takes nothing away from the API server's answer.
    let (mut unchecked, mut unchecked_total, mut items, mut list_note) = (Vec::new(), 0, None, String::new());
    match restored_list(ctx, &ctx.view, vr, backup, &key).await {
        Ok(Ok(text)) => match crate::rights::restore::unchecked_in(&text, &ns, &rights.included, &kinds) {
            Ok(l) => {
                items = Some(l.items);
                unchecked_total = l.unchecked_total;
                unchecked = l.unchecked;
            }
            Err(why) => list_note = format!("; Velero's resource list of the restore was not used: {why}"),
        },
        Ok(Err(why)) => list_note = format!("; Velero's resource list of the restore was not used: {why}"),
        // Velero or the storage not answering now: the next reconcile asks again.
        Err(e) => {
            tracing::info!(nar = %key_of(nar), error = %e, "restore resource list not read yet");
            return (None, Some(RESULTS_RETRY));
        }
    }
    for o in outside {
        // The same item as the list names it (its kind unknown to nac when cluster-scoped): the API server's
        // account of it replaces the list's.
        let same = |u: &&mut crate::rights::restore::Unchecked| {
            (&u.gvk, &u.namespace, &u.name) == (&o.gvk, &o.namespace, &o.name)
        };
        match unchecked.iter_mut().find(same) {
            Some(u) => *u = o,
            None => {
                unchecked.push(o);
                unchecked_total += 1;
            }
        }
    }
    let outside_seen = outside_total > 0;
    if unchecked_total == 0 {
        let items = items.map(|n| format!(" ({n})")).unwrap_or_default();
        return (
            Some((
                false,
                RESTORED_AS_CHECKED,
                format!(
                    "every item Velero restored{items} is of a kind nac checked against {}'s rights, and the API \
                     server shows nothing Velero made in this restore outside namespace {ns}{list_note}",
                    rights.requester
                ),
            )),
            None,
        );
    }
    tracing::warn!(nar = %key_of(nar), items = unchecked_total, outside = outside_total, "Velero restored items nac did not check");
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    for u in &unchecked {
        match (&u.kind, u.namespace == ns) {
            (Some(k), true) => {
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(ctx.client.clone(), &ns, &k.api_resource());
                match remove_made_by(ctx, &api, &k.kind, &u.name, vr).await {
                    Ok(true) => removed.push(u.to_string()),
                    Ok(false) => kept.push(format!("{u} (not found)")),
                    Err(why) => kept.push(format!("{u} ({why})")),
                }
            }
            _ => kept.push(format!("{u} (outside the namespace: for the cluster administrator)")),
        }
    }
    if unchecked_total > unchecked.len() {
        kept.push(format!("{} more, not looked at", unchecked_total - unchecked.len()));
    }
    let mut message = format!(
        "Velero restored what nac did not check against {}'s rights (allowed: {} in namespace {ns})",
        rights.requester,
        rights.included.join(", ")
    );
    if !removed.is_empty() {
        message.push_str(&format!("; removed: {}", removed.join(", ")));
    }
    if !kept.is_empty() {
        message.push_str(&format!("; not removed: {}", kept.join(", ")));
    }
    message.push_str(&list_note);
    let reason = if outside_seen {
        RESTORED_OUTSIDE_NAMESPACE
    } else {
        UNCHECKED_RESOURCES_RESTORED
    };
    (Some((true, reason, message)), None)
}

/// When an unverifiable restore is checked again: half the time since it finished, within 15 s and 10 min (soon
/// for a passing hitch, rarely for a lasting one).
fn verify_backoff(finished: Option<Timestamp>, now: Timestamp) -> std::time::Duration {
    let since = finished
        .map(|f| now.duration_since(f).unsigned_abs())
        .unwrap_or_default();
    (since / 2).clamp(std::time::Duration::from_secs(15), std::time::Duration::from_secs(600))
}

/// How long after a restore's end a namespace it made may still be seen created (the API server's clock and
/// Velero's completion time differ by up to a second; Velero stamps completion after its last create).
const NAMESPACE_SLACK: std::time::Duration = std::time::Duration::from_secs(5);

/// What the API server shows Velero made in the Velero Restore `vr` outside namespace `ns`: objects of every kind
/// nac can list labelled `velero.io/restore-name=<vr>` (cluster-wide), and Namespaces Velero created while `vr`
/// ran (they carry no restore label). `Err`: a kind could not be listed, so the answer is not whole.
async fn made_outside_namespace(
    ctx: &Ctx,
    vr: &Restore,
    ns: &str,
    claims: bool,
) -> Result<(Vec<crate::rights::restore::Unchecked>, usize), String> {
    use crate::rights::restore::{made_outside, namespace_created_by_velero, Shown};
    use futures::StreamExt;
    use kube::api::{DynamicObject, ListParams};
    let kinds = crate::rights::discover_scoped(&ctx.client).await?;
    let label = crate::naming::velero_label_value(&vr.name_any()).into_owned();
    let selector = format!("{}={label}", crate::naming::VELERO_RESTORE_NAME_LABEL);
    // Owned futures (a kind, a client, a selector each): borrowed ones are not `Send` across the stream.
    let futures: Vec<_> = kinds
        .iter()
        .cloned()
        .map(|(k, namespaced)| {
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &k.api_resource());
            let selector = selector.clone();
            async move {
                let params = ListParams::default().labels(&selector);
                match api.list_metadata(&params).await {
                    Ok(l) => Ok(Some((k, namespaced, l.items))),
                    // Gone since discovery, or not listable after all: nothing of it to show.
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => Ok(None),
                    Err(e) => Err(format!("listing {} labelled {selector}: {e}", k.filter_name())),
                }
            }
        })
        .collect();
    let lists: Vec<Result<_, String>> = futures::stream::iter(futures).buffer_unordered(8).collect().await;
    let mut metas = Vec::new();
    for l in lists {
        if let Some((k, namespaced, items)) = l? {
            metas.extend(items.into_iter().map(|o| (k.clone(), namespaced, o.metadata)));
        }
    }
    let shown: Vec<Shown<'_>> = metas
        .iter()
        .map(|(kind, namespaced, meta)| Shown {
            kind,
            namespaced: *namespaced,
            meta,
        })
        .collect();
    let (mut outside, mut total) = made_outside(&shown, ns, &ctx.opts.velero_namespace, claims);
    let from = vr.creation_timestamp().map(|t| t.0).unwrap_or(Timestamp::UNIX_EPOCH);
    let to = vr
        .status
        .as_ref()
        .and_then(|s| s.completion_timestamp.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .unwrap_or_else(Timestamp::now)
        .checked_add(NAMESPACE_SLACK)
        .unwrap_or(Timestamp::MAX);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    let all = namespaces
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| format!("listing namespaces: {e}"))?;
    let ns_kind = kinds
        .iter()
        .find(|(k, _)| k.group.is_empty() && k.resource == "namespaces")
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| crate::rights::Kind::new("", "namespaces", "Namespace", &["ns"]));
    for n in all.items {
        let name = n.metadata.name.clone().unwrap_or_default();
        let listed = outside.iter().any(|u| {
            u.namespace.is_empty() && u.name == name && u.kind.as_ref().is_some_and(|k| k.resource == "namespaces")
        });
        if name != ns && !listed && namespace_created_by_velero(&n.metadata, from, to) {
            total += 1;
            if outside.len() < crate::rights::restore::LISTED {
                outside.push(crate::rights::restore::Unchecked {
                    gvk: "v1/Namespace".into(),
                    kind: Some(ns_kind.clone()),
                    namespace: String::new(),
                    name,
                });
            }
        }
    }
    Ok((outside, total))
}

/// Deletes `name` when it is what Velero made in the Velero Restore `vr` (`rights::restore::made_by`), in the
/// version judged (its uid and resourceVersion as preconditions): the resource list naming it may be a tenant's
/// crafted file, and nac deletes with its own rights. `Ok(false)`: there is no such object.
async fn remove_made_by(
    ctx: &Ctx,
    api: &Api<kube::api::DynamicObject>,
    kind: &str,
    name: &str,
    vr: &Restore,
) -> Result<bool, String> {
    let obj = match api.get_opt(name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    crate::rights::restore::made_by(&vr.metadata, &obj.metadata).map_err(|why| format!("{why}: left alone"))?;
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    ctx.metrics.write(kind);
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if crate::controller::write::is_not_found(&e) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Velero's first messages of a restore it finished with errors or warnings, read once.
async fn results_of(ctx: &Ctx, nar: &NonAdminRestore, vr: &Restore, backup: Option<&Backup>) -> Results {
    let Some(s) = nar.status.as_ref() else {
        return Results::Nothing;
    };
    let run = s.velero_restore.as_ref().and_then(|v| v.status.as_deref());
    contents::results_of(ctx, &ctx.view, nar, (&s.conditions, run), &vr.name_any(), backup).await
}

/// The Deleting message while Velero's own finalizer holds the Velero Restore longer than expected.
pub fn restore_finalizer_stalled_message(namespace: &str, name: &str, finalizers: &[String], since: &str) -> String {
    format!(
        "{RESTORE_DELETE_MESSAGE}; Velero Restore {namespace}/{name} is marked for deletion since {since} but \
         Velero has not removed its finalizer ({}). Is Velero running? The NonAdminRestore is deleted as soon as \
         the Velero Restore is gone",
        finalizers.join(", ")
    )
}

/// The namespace a NonAdminRestore copies into, when its spec maps its namespace to another (its shape judged
/// with the spec: a mapping of another shape is refused before this is asked).
fn copy_target(nar: &NonAdminRestore) -> Option<String> {
    crate::policy::copy::target(&to_map(&nar.spec.restore_spec), &nar.namespace().unwrap_or_default())
        .ok()
        .flatten()
}

/// The user who created a NonAdminRestore, as nac's webhook recorded it.
fn requester(nar: Option<&NonAdminRestore>) -> Option<Requester> {
    serde_json::from_str(nar?.annotations().get(REQUESTER_ANNOTATION)?).ok()
}

/// The requester's rights applied to a restore that is otherwise ready: what the backup holds for the namespace
/// (read from its contents) checked against what the restoring user may create there. Kinds they may not create
/// are left out (`rights.restore: exclude`) or the restore is refused (`deny`). A preview reads the contents even
/// when rights are not checked, writes nothing (no resource modifier), and gets its plan where the restore would
/// be refused for its rights, with the refusal in it.
async fn check_rights(
    nar: &NonAdminRestore,
    mut spec: RestoreSpec,
    backup: &Backup,
    mode: RightsMode,
    ctx: &Ctx,
) -> Result<Admission<RestorePlan>, Error> {
    let preview = is_preview(nar.annotations());
    let ns = nar.namespace().unwrap_or_default();
    let target = target_of(spec.namespace_mapping.as_ref(), &ns);
    let copy = target != ns;
    let mode = mode.for_restore(copy);
    if mode == RightsMode::Off && !preview {
        return Ok(Admission::Admit(RestorePlan {
            spec,
            rights: None,
            preview: None,
        }));
    }
    let refuse = |message: String| {
        Ok(Admission::Refuse {
            reason: REQUESTER_RIGHTS_EXCEEDED,
            message,
        })
    };
    let who = requester(Some(nar));
    if who.is_none() && mode != RightsMode::Off {
        return refuse(crate::rights::no_requester(
            "NonAdminRestore",
            "its rights",
            Some(("rights.restore", mode)),
        ));
    }
    let key = nar.uid().unwrap_or_else(|| nar.name_any());
    let contents = match ctx.own.contents.contents(ctx, &ctx.view, backup, &ns, &key).await? {
        Ok(c) => c,
        Err(why) => {
            let whose = who.as_ref().map_or("its requester", |w| w.username.as_str());
            return refuse(format!(
                "the contents of Velero Backup {} cannot be checked against {whose}'s rights: {why}",
                backup.name_any(),
            ));
        }
    };
    let mut map = to_map(&spec);
    let Some(who) = who.filter(|_| mode != RightsMode::Off) else {
        let preview = Some(PreviewInput {
            contents,
            checked: map,
            refused: None,
        });
        return Ok(Admission::Admit(RestorePlan {
            spec,
            rights: None,
            preview,
        }));
    };
    let storage = storage_of(backup, ctx);
    // Velero restores these whatever the restore includes (namespaces from the tarball, DataUploads and
    // VolumeSnapshotContents always): from storage the tenant writes, none of them is trusted.
    if storage == Storage::Tenant && contents.foreign.total > 0 {
        return Ok(Admission::Refuse {
            reason: status::BACKUP_HOLDS_FOREIGN_ITEMS,
            message: format!(
                "NonAdminRestore refused: the contents of Velero Backup {}, on a storage location the tenant \
                 controls, hold {} item(s) Velero would restore outside namespace {ns} whatever the restore \
                 includes: {}",
                backup.name_any(),
                contents.foreign.total,
                contents.foreign.describe()
            ),
        });
    }
    // A copy: the requester must be allowed to restore into the target (a preview too: it would list the
    // target's objects), and gets only what they may read in the source.
    if copy {
        let denied = copy_right(ctx.access.as_ref(), &who, &target)
            .await
            .map_err(Error::NotReady)?;
        if let Some(message) = denied {
            return refuse(message);
        }
    }
    let mut rights = decide(ctx.access.as_ref(), &who, &target, &map, &contents, mode, storage)
        .await
        .map_err(Error::NotReady)?;
    if copy {
        copy_reads(ctx.access.as_ref(), &who, &ns, &mut rights)
            .await
            .map_err(Error::NotReady)?;
    }
    let mut refused = None;
    if rights.limits() {
        tracing::info!(nar = %key_of(nar), excluded = ?rights.excluded, dropped = ?rights.dropped, "restore limited to its requester's rights");
        if mode == RightsMode::Deny {
            refused = Some(format!("NonAdminRestore refused: {}", rights.message(&target)));
        }
    }
    if refused.is_none() && rights.included.is_empty() {
        // Velero restores every kind when none is named: a restore of nothing cannot be bound.
        let why = if rights.limits() {
            format!(": {}", rights.message(&target))
        } else {
            String::new()
        };
        refused = Some(format!(
            "NonAdminRestore refused: Velero Backup {} holds nothing in namespace {ns} that {} may restore{why}",
            backup.name_any(),
            who.username
        ));
    }
    if let (Some(message), false) = (&refused, preview) {
        return refuse(message.clone());
    }
    let checked = map.clone();
    rights.apply(&mut map);
    if (!rights.status_guarded.is_empty() || copy) && !preview {
        let admin = spec.resource_modifier.as_ref().map(|r| r.name.clone());
        // A copy's objects name where they came from: the namespace, and the backup by its identity.
        let mut labels = BTreeMap::from([(COPIED_FROM_NAMESPACE_LABEL.to_string(), ns.clone())]);
        // The store keeps a Backup's labels as compact tags: read them through them.
        if let Some(id) = NAB.nacuuid(backup) {
            labels.insert(NAB_ORIGIN_NACUUID_LABEL.to_string(), id.to_string());
        }
        let copy_labels = copy.then_some((rights.included.as_slice(), &labels));
        let name = match status_guard(nar, &ns, &rights.status_guarded, admin.as_deref(), copy_labels, ctx).await? {
            Ok(name) => name,
            Err(why) => return refuse(format!("NonAdminRestore refused: {why}")),
        };
        map.insert(
            "resourceModifier".into(),
            serde_json::json!({"kind": "ConfigMap", "name": name}),
        );
    }
    spec = serde_json::from_value(Value::Object(map))
        .map_err(|e| Error::Inconsistent(format!("Velero RestoreSpec after the rights check: {e}")))?;
    let preview = preview.then_some(PreviewInput {
        contents,
        checked,
        refused,
    });
    Ok(Admission::Admit(RestorePlan {
        spec,
        rights: Some(rights),
        preview,
    }))
}

/// The preview recorded in a NonAdminRestore's status, when it is a preview.
fn preview_of(nar: &NonAdminRestore) -> Option<&RestorePreview> {
    is_preview(nar.annotations())
        .then(|| nar.status.as_ref()?.preview.as_ref())
        .flatten()
}

/// Where a preview's stages come from, in the order they apply to a kind (see [`crate::rights::preview::table`]).
const NAC_EXCLUSIONS: &str = "nac's exclusions (kinds nac never restores)";

/// A preview's table: the plan's decision, and what the namespace holds now of each kind the restore would write
/// (listed from the API server's watch cache, names only; never an object read).
async fn preview(nar: &NonAdminRestore, plan: RestorePlan, ctx: &Ctx) -> Result<RestorePreview, Error> {
    let input = plan.preview.expect("a preview's plan has its input");
    // What exists now where the restore would write: a copy's target, else the namespace.
    let ns = target_of(
        plan.spec.namespace_mapping.as_ref(),
        &nar.namespace().unwrap_or_default(),
    );
    let kinds = ctx.access.kinds().await.map_err(Error::NotReady)?;
    let user = to_map(&nar.spec.restore_spec);
    let source = nar.namespace().unwrap_or_default();
    let policy = ctx
        .policy
        .current_in(&source)
        .map(|p| evaluate_restore(&user, &p, &source).spec)
        .unwrap_or_default();
    let none = serde_json::Map::new();
    let stages = [
        Stage::new(NAC_EXCLUSIONS, &none),
        Stage::new("spec.restoreSpec", &user),
        Stage::new("the policy's restore rules", &policy),
        Stage::new(NAC_EXCLUSIONS, &input.checked),
    ];
    let rights = plan.rights.as_ref();
    let update = plan.spec.existing_resource_policy.as_deref() == Some("update");
    let first = preview_table(&input.contents, &kinds, &stages, rights, &BTreeMap::new(), update);
    let written: Vec<crate::rights::Kind> = first
        .iter()
        .filter(|r| r.left_out.is_none())
        .filter_map(|r| kinds.iter().find(|k| k.filter_name() == r.kind).cloned())
        .collect();
    // Names are shown only of the kinds the requester may list there: which names exist is theirs to know.
    let who =
        requester(Some(nar)).ok_or_else(|| Error::Inconsistent("a preview without its recorded requester".into()))?;
    let asked: Vec<&crate::rights::Kind> = written.iter().collect();
    let unlisted = ctx
        .access
        .refused(&who, "list", &ns, &asked)
        .await
        .map_err(Error::NotReady)?;
    let (listable, hidden): (Vec<_>, Vec<_>) = written.into_iter().partition(|k| !unlisted.contains(&k.filter_name()));
    let hidden = hidden.into_iter().map(|k| {
        let why = format!("{} may not list {} in namespace {ns}", who.username, k.filter_name());
        (k.filter_name(), Err(why))
    });
    let lists = listable.into_iter().map(|k| {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &k.api_resource());
        async move {
            // resourceVersion 0: answered from the API server's watch cache.
            let listed = api
                .list_metadata(&kube::api::ListParams::default().match_any())
                .await
                .map(|l| l.items.into_iter().filter_map(|o| o.metadata.name).collect())
                .map_err(|e| e.to_string());
            (k.filter_name(), listed)
        }
    });
    let mut existing: BTreeMap<String, Existing> = futures::stream::iter(lists).buffer_unordered(8).collect().await;
    existing.extend(hidden);
    let mut notes = Vec::new();
    if plan.spec.label_selector.is_some() || plan.spec.or_label_selectors.is_some() {
        notes.push(
            "the restore's label selectors are not applied to the counts (they need the items' bodies): Velero \
             restores only the items they select"
                .to_string(),
        );
    }
    if let Some(r) = rights.filter(|r| !r.dropped.is_empty()) {
        notes.push(format!(
            "left out of the restore's spec: {}",
            r.dropped
                .iter()
                .map(|f| format!("spec.restoreSpec.{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(RestorePreview {
        observed_generation: nar.metadata.generation,
        namespace: ns,
        existing_resource_policy: if update { "update" } else { "none" }.into(),
        refused: input.refused,
        kinds: preview_table(&input.contents, &kinds, &stages, rights, &existing, update),
        notes,
    })
}

/// The Accepted message of a preview: its totals, and that nothing was made.
fn preview_message(p: &RestorePreview) -> String {
    let [created, skipped, updated, left_out] = preview_totals(&p.kinds);
    let verdict = match &p.refused {
        Some(why) => format!("the restore would be refused ({why})"),
        None => format!(
            "a restore would create {created}, skip {skipped}, update {updated} and leave out {left_out} item(s) in \
             namespace {}",
            p.namespace
        ),
    };
    format!("preview only, no Velero Restore is made: {verdict}; status.preview lists them by kind")
}

/// The name of the resource modifier ConfigMap nac makes in Velero's namespace for a NonAdminRestore (by its uid:
/// known before the Velero Restore is made, which must name it from the start).
pub fn status_guard_name(nar: &NonAdminRestore) -> String {
    format!("nac-status-guard-{}", nar.uid().unwrap_or_else(|| nar.name_any()))
}

/// Writes the ConfigMap of nac's resource modifier that keeps Velero from restoring the status of `kinds` (whose
/// status the requester may not write) through its restore-status annotation, after the rules of the modifier
/// the policy enforces (`admin`, a ConfigMap in Velero's namespace), and returns its name. `Err`: the admin's
/// modifier cannot be read as Velero would.
async fn status_guard(
    nar: &NonAdminRestore,
    namespace: &str,
    kinds: &[String],
    admin: Option<&str>,
    labels: Option<(&[String], &BTreeMap<String, String>)>,
    ctx: &Ctx,
) -> Result<Result<String, String>, Error> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = ctx.velero_api();
    let admin_doc = match admin {
        None => None,
        Some(name) => {
            let Some(cm) = api.get_opt(name).await? else {
                return Ok(Err(format!(
                    "the resource modifier ConfigMap {}/{name} the policy enforces does not exist",
                    ctx.opts.velero_namespace
                )));
            };
            let data = cm.data.unwrap_or_default();
            if data.len() != 1 {
                return Ok(Err(format!(
                    "the resource modifier ConfigMap {}/{name} the policy enforces holds {} keys, Velero reads one",
                    ctx.opts.velero_namespace,
                    data.len()
                )));
            }
            data.into_values().next()
        }
    };
    let doc = match crate::rights::features::status_guard(namespace, kinds, admin_doc.as_deref(), labels) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    let name = status_guard_name(nar);
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "nac"},
            "annotations": {NAR.name_annotation: nar.name_any(), NAR.namespace_annotation: namespace},
        },
        "data": {"modifiers.yaml": doc},
    });
    ctx.metrics.write("ConfigMap");
    api.patch(
        &name,
        &kube::api::PatchParams::apply("nac").force(),
        &kube::api::Patch::Apply(cm),
    )
    .await?;
    Ok(Ok(name))
}

/// Whether the tenant controls the storage `backup` is read from: a location nac made for a
/// NonAdminBackupStorageLocation, or one nac cannot find (closed).
fn storage_of(backup: &Backup, ctx: &Ctx) -> Storage {
    let Some(name) = backup.spec.storage_location.as_deref() else {
        return Storage::Tenant;
    };
    match ctx.view.get::<BackupStorageLocation>().get(&ctx.velero_ref(name)) {
        Some(bsl) if !bsl.labels().contains_key(NABSL_ORIGIN_NACUUID_LABEL) => Storage::Admin,
        _ => Storage::Tenant,
    }
}

/// Accepted=False reason of a restore whose backup can never be restored (failed, deleted, refused).
pub const BACKUP_NOT_RESTORABLE: &str = "BackupNotRestorable";
/// Accepted=False reason of a restore that waited for its backup until its wait timeout.
pub const BACKUP_WAIT_TIMED_OUT: &str = "BackupWaitTimedOut";

fn invalid(why: &str) -> String {
    format!("NonAdminRestore spec.restoreSpec.backupName is invalid: {why}")
}

/// What a restore's source looks like now: the NonAdminBackup `spec.restoreSpec.backupName` of the restore's
/// own namespace, its Velero Backup, and that backup's storage location.
pub struct SourceView {
    pub namespace: String,
    pub nab_name: String,
    pub nab: Option<NonAdminBackup>,
    pub velero_namespace: String,
    /// The Velero Backup's name (once the NonAdminBackup has one) and the object, if it exists.
    pub backup_name: Option<String>,
    pub backup: Option<Backup>,
    /// The storage location the backup is in, and its phase (`None`: no such location).
    pub location: Option<(String, Option<String>)>,
}

impl SourceView {
    /// What a wait for this source wakes on.
    fn dependencies(&self) -> Vec<String> {
        let mut on = vec![tenant::dependency(NAB.kind, &self.namespace, &self.nab_name)];
        if let Some((name, _)) = &self.location {
            on.push(tenant::dependency(
                "BackupStorageLocation",
                &self.velero_namespace,
                name,
            ));
        }
        on
    }
}

/// Where a restore's source stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Source {
    /// Restorable: the Velero Backup's name.
    Ready(String),
    /// Not yet; `refusal` is the message when not waiting, `state` what is awaited.
    NotYet { refusal: String, state: String },
    /// It will never be restorable, and why.
    Unusable(String),
}

/// Gathers the source from the stores (the API when the store may lag behind: a missing object, or an unfinished
/// backup when the restore would be refused at once; a waiting restore is woken when the store catches up).
async fn observe_source(nar: &NonAdminRestore, ctx: &Ctx, refuse_unfinished: bool) -> Result<SourceView, Error> {
    let namespace = nar.namespace().unwrap_or_default();
    let nab_name = nar.spec.restore_spec.backup_name.clone().unwrap_or_default();
    let nab = match ctx
        .view
        .get::<NonAdminBackup>()
        .get(&ObjectRef::new(&nab_name).within(&namespace))
    {
        Some(n) => Some((*n).clone()),
        None => {
            Api::<NonAdminBackup>::namespaced(ctx.client.clone(), &namespace)
                .get_opt(&nab_name)
                .await?
        }
    };
    let backup_name = nab
        .as_ref()
        .filter(|n| tenant::was_created(*n))
        .and_then(|n| kind::nacuuid(n).map(|u| tenant::velero_name(n, &u)));
    let mut backup = None;
    if let Some(name) = &backup_name {
        backup = ctx
            .view
            .get::<Backup>()
            .get(&ctx.velero_ref(name))
            .map(|b| (*b).clone());
        let unfinished = backup.as_ref().map(|b| backup_phase_unfinished(phase(b)));
        if unfinished.is_none() || (refuse_unfinished && unfinished == Some(true)) {
            backup = ctx.velero_api::<Backup>().get_opt(name).await?;
        }
    }
    let location = backup
        .as_ref()
        .and_then(|b| b.spec.storage_location.clone())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let phase = ctx
                .view
                .get::<BackupStorageLocation>()
                .get(&ctx.velero_ref(&l))
                .map(|bsl| bsl.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default());
            (l, phase)
        });
    Ok(SourceView {
        namespace,
        nab_name,
        nab,
        velero_namespace: ctx.opts.velero_namespace.clone(),
        backup_name,
        backup,
        location,
    })
}

fn phase(b: &Backup) -> Option<&str> {
    b.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Decides about a restore's source. Pure: the reconciler's observations in, the verdict out.
pub fn judge(src: &SourceView, rules: &RestoreRules) -> Source {
    let (ns, n) = (&src.namespace, &src.nab_name);
    let not_ready = |state: String| Source::NotYet {
        refusal: format!(
            "NonAdminBackup {n} is not ready to be restored: {state}; only a Completed backup can be restored"
        ),
        state,
    };
    let Some(nab) = &src.nab else {
        return Source::NotYet {
            refusal: format!("NonAdminBackup {n} does not exist in namespace {ns}"),
            state: format!("it does not exist in namespace {ns} yet"),
        };
    };
    if nab.metadata.deletion_timestamp.is_some() || nab.spec.delete_backup {
        return Source::Unusable(format!("NonAdminBackup {n} is being deleted"));
    }
    let Some(backup_name) = &src.backup_name else {
        let refused = nab
            .status
            .as_ref()
            .filter(|s| s.phase == Some(NonAdminPhase::BackingOff));
        if let Some(s) = refused {
            let why = crate::controller::conditions::find(&s.conditions, ACCEPTED)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            return Source::Unusable(format!("NonAdminBackup {n} was refused: {why}"));
        }
        return not_ready("its Velero Backup has not been created".into());
    };
    let Some(b) = &src.backup else {
        return Source::Unusable(format!(
            "the Velero Backup {}/{backup_name} of NonAdminBackup {n} does not exist",
            src.velero_namespace
        ));
    };
    if !NAB.owns(b, ns, n) {
        return Source::Unusable(format!(
            "Velero Backup {backup_name} does not belong to NonAdminBackup {n}"
        ));
    }
    match phase(b) {
        Some("Completed") => {}
        Some("PartiallyFailed") if rules.allow_partially_failed => {}
        Some("PartiallyFailed") => {
            return Source::Unusable(format!(
                "NonAdminBackup {n} cannot be restored: its Velero Backup finished PartiallyFailed and the policy \
                 (restore.allowPartiallyFailed: false) allows only Completed backups"
            ))
        }
        Some(p @ ("Failed" | "FailedValidation" | "Deleting")) => {
            let status = b.status.as_ref();
            let detail = status
                .and_then(|s| s.failure_reason.clone())
                .or_else(|| status.and_then(|s| s.validation_errors.as_ref()).map(|e| e.join("; ")))
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            return Source::Unusable(format!(
                "NonAdminBackup {n} cannot be restored: its Velero Backup is {p}{detail}; create a new \
                 NonAdminBackup and restore that one"
            ));
        }
        other => return not_ready(format!("its Velero Backup is {}", other.unwrap_or("New"))),
    }
    match &src.location {
        Some((l, None)) => not_ready(format!("its storage location {l} does not exist")),
        Some((l, Some(p))) if p != "Available" => not_ready(format!(
            "its storage location {l} is {}",
            if p.is_empty() { "not validated yet" } else { p }
        )),
        _ => Source::Ready(backup_name.clone()),
    }
}

/// The BackupPartiallyFailed condition message for a restore from `b`, when `b` finished PartiallyFailed.
fn partially_failed_warning(b: &Backup) -> Option<String> {
    let s = b.status.as_ref()?;
    (s.phase.as_deref() == Some("PartiallyFailed")).then(|| {
        format!(
            "restoring from Velero Backup {} that finished PartiallyFailed ({} error(s), {} warning(s)): some of \
             its items may be missing (velero backup logs {} lists them)",
            b.name_any(),
            s.errors.unwrap_or(0),
            s.warnings.unwrap_or(0),
            b.name_any()
        )
    })
}

/// The Velero RestoreSpec for a NonAdminRestore restoring Velero backup `velero_backup_name`: policy applied, own
/// namespace only, no cluster resources, the exclusions. `Err` carries the message for an invalid spec.
pub fn velero_restore_spec(
    nar: &NonAdminRestore,
    velero_backup_name: &str,
    policy: &Policy,
) -> Result<RestoreSpec, String> {
    let ns = nar.namespace().unwrap_or_default();
    let outcome = evaluate_restore(&to_map(&nar.spec.restore_spec), policy, &ns);
    if !outcome.allowed() {
        return Err(outcome.message());
    }
    let mut spec = outcome.spec;
    spec.insert("backupName".into(), Value::String(velero_backup_name.to_string()));
    spec.insert("includedNamespaces".into(), Value::Array(vec![Value::String(ns)]));
    spec.insert("includeClusterResources".into(), Value::Bool(false));
    add_restore_exclusions(&mut spec);
    serde_json::from_value(Value::Object(spec))
        .map_err(|e| format!("NonAdminRestore spec.restoreSpec is not a valid Velero RestoreSpec: {e}"))
}

/// The Velero Restore nac creates for a NonAdminRestore, named by its nacuuid.
pub fn velero_restore(nar: &NonAdminRestore, nacuuid: &str, velero_namespace: &str, spec: RestoreSpec) -> Restore {
    kind::made_for(nar, nacuuid, velero_namespace, Restore::new(nacuuid, spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NonAdminRestoreSpec;
    use crate::naming::*;
    use serde_json::json;

    /// Validates a NonAdminRestore against the policy and builds its Velero Restore in one go.
    fn velero_restore_for(
        nar: &NonAdminRestore,
        nacuuid: &str,
        velero_namespace: &str,
        velero_backup_name: &str,
        policy: &Policy,
    ) -> Result<Restore, String> {
        velero_restore_spec(nar, velero_backup_name, policy)
            .map(|spec| velero_restore(nar, nacuuid, velero_namespace, spec))
    }

    fn nar(spec: Value) -> NonAdminRestore {
        let mut n = NonAdminRestore::new(
            "undo",
            NonAdminRestoreSpec {
                restore_spec: serde_json::from_value(spec).unwrap(),
                unset: false,
            },
        );
        n.metadata.namespace = Some("team-a".into());
        n
    }

    #[test]
    fn velero_restore_restores_into_the_own_namespace_only() {
        let r = velero_restore_for(
            &nar(json!({"backupName": "nightly", "excludedResources": ["secrets"]})),
            "rid",
            "velero",
            "team-a-nightly-uuid",
            &Policy::default(),
        )
        .unwrap();
        assert_eq!(r.name_any(), "rid");
        assert_eq!(r.spec.backup_name.as_deref(), Some("team-a-nightly-uuid"));
        assert_eq!(r.spec.included_namespaces, Some(vec!["team-a".to_string()]));
        assert_eq!(r.spec.include_cluster_resources, Some(false));
        let ex = r.spec.excluded_resources.clone().unwrap();
        assert_eq!(ex[0], "secrets");
        assert!(ex.iter().any(|e| e == "clusterroles"));
        assert!(ex.iter().any(|e| e == "nonadminbackups"));
        assert_eq!(r.labels()[NAR_ORIGIN_NACUUID_LABEL], "rid");
        assert_eq!(
            NAR.owner(&r.metadata),
            Some(ObjectRef::<NonAdminRestore>::new("undo").within("team-a"))
        );
    }

    #[test]
    fn velero_restore_refuses_namespace_changes() {
        let e = velero_restore_for(
            &nar(json!({"backupName": "nightly", "namespaceMapping": {"team-a": "team-b"}})),
            "rid",
            "velero",
            "b",
            &Policy::default(),
        )
        .unwrap_err();
        assert!(e.contains("namespaceMapping"), "{e}");
    }

    /// A Created NonAdminBackup whose Velero Backup is in `phase`, made for `namespace`; its location unknown.
    fn created(phase: &str, namespace: &str) -> SourceView {
        source(Some(nab_in(NonAdminPhase::Created)), Some((phase, namespace)), None)
    }

    fn source(nab: Option<NonAdminBackup>, backup: Option<(&str, &str)>, location: Option<Option<&str>>) -> SourceView {
        let backup_name = nab
            .as_ref()
            .filter(|n| tenant::was_created(*n))
            .map(|_| "vb".to_string());
        let backup = backup.map(|(phase, owner_ns)| {
            let mut b = Backup::new("vb", Default::default());
            b.metadata = NAB.stamp("vb", "velero", "vb", owner_ns, "nightly", &[]);
            b.status = Some(crate::velero::BackupStatus {
                phase: Some(phase.into()),
                failure_reason: (phase == "Failed").then(|| "bucket gone".into()),
                ..Default::default()
            });
            b
        });
        SourceView {
            namespace: "team-a".into(),
            nab_name: "nightly".into(),
            nab,
            velero_namespace: "velero".into(),
            backup_name,
            backup,
            location: location.map(|p| ("default".to_string(), p.map(str::to_string))),
        }
    }

    fn nab_in(phase: NonAdminPhase) -> NonAdminBackup {
        let mut n = NonAdminBackup::new("nightly", Default::default());
        n.metadata.namespace = Some("team-a".into());
        n.status = Some(crate::api::NonAdminBackupStatus {
            phase: Some(phase),
            ..Default::default()
        });
        n
    }

    #[test]
    fn a_source_that_is_not_ready_yet_is_waited_for() {
        let rules = RestoreRules::default();
        let missing = judge(&source(None, None, None), &rules);
        assert!(
            matches!(&missing, Source::NotYet { refusal, .. } if refusal == "NonAdminBackup nightly does not exist in namespace team-a"),
            "{missing:?}"
        );
        let new = judge(&source(Some(nab_in(NonAdminPhase::New)), None, None), &rules);
        assert!(
            matches!(&new, Source::NotYet { state, .. } if state.contains("has not been created")),
            "{new:?}"
        );
        for phase in [
            "New",
            "Queued",
            "InProgress",
            "WaitingForPluginOperations",
            "Finalizing",
        ] {
            let s = judge(
                &source(Some(nab_in(NonAdminPhase::Created)), Some((phase, "team-a")), None),
                &rules,
            );
            assert!(
                matches!(&s, Source::NotYet { state, .. } if state.ends_with(phase)),
                "{phase}: {s:?}"
            );
        }
        let unavailable = source(
            Some(nab_in(NonAdminPhase::Created)),
            Some(("Completed", "team-a")),
            Some(Some("Unavailable")),
        );
        assert!(
            matches!(judge(&unavailable, &rules), Source::NotYet { state, .. } if state == "its storage location default is Unavailable")
        );
        let gone = source(
            Some(nab_in(NonAdminPhase::Created)),
            Some(("Completed", "team-a")),
            Some(None),
        );
        assert!(matches!(judge(&gone, &rules), Source::NotYet { state, .. } if state.contains("does not exist")));
        assert_eq!(
            gone.dependencies(),
            vec![
                "NonAdminBackup:team-a/nightly".to_string(),
                "BackupStorageLocation:velero/default".to_string()
            ]
        );
    }

    #[test]
    fn a_ready_source_is_restored() {
        let rules = RestoreRules::default();
        let ok = source(
            Some(nab_in(NonAdminPhase::Created)),
            Some(("Completed", "team-a")),
            Some(Some("Available")),
        );
        assert_eq!(judge(&ok, &rules), Source::Ready("vb".into()));
        let pf = created("PartiallyFailed", "team-a");
        assert_eq!(judge(&pf, &rules), Source::Ready("vb".into()));
        let strict = RestoreRules {
            allow_partially_failed: false,
            ..Default::default()
        };
        assert!(matches!(judge(&pf, &strict), Source::Unusable(m) if m.contains("restore.allowPartiallyFailed")));
    }

    #[test]
    fn a_source_that_can_never_be_restored_is_refused_at_once() {
        let rules = RestoreRules::default();
        let failed = judge(&created("Failed", "team-a"), &rules);
        assert!(
            matches!(&failed, Source::Unusable(m) if m.contains("is Failed (bucket gone)")),
            "{failed:?}"
        );
        let invalid = judge(&created("FailedValidation", "team-a"), &rules);
        assert!(matches!(invalid, Source::Unusable(_)));
        let theirs = judge(&created("Completed", "team-b"), &rules);
        assert!(
            matches!(&theirs, Source::Unusable(m) if m.contains("does not belong")),
            "{theirs:?}"
        );
        let vanished = judge(&source(Some(nab_in(NonAdminPhase::Created)), None, None), &rules);
        assert!(
            matches!(&vanished, Source::Unusable(m) if m.contains("does not exist")),
            "{vanished:?}"
        );
        let mut refused = nab_in(NonAdminPhase::BackingOff);
        let mut conditions = Vec::new();
        crate::controller::conditions::set_condition(
            &mut conditions,
            ACCEPTED,
            false,
            INVALID_BACKUP_SPEC,
            "ttl is restricted",
            now_seconds(),
        );
        refused.status.as_mut().unwrap().conditions = conditions;
        let s = judge(&source(Some(refused), None, None), &rules);
        assert!(
            matches!(&s, Source::Unusable(m) if m.contains("was refused: ttl is restricted")),
            "{s:?}"
        );
        let mut deleting = nab_in(NonAdminPhase::Created);
        deleting.spec.delete_backup = true;
        assert!(
            matches!(judge(&source(Some(deleting), None, None), &rules), Source::Unusable(m) if m.contains("being deleted"))
        );
    }

    #[test]
    fn an_unverifiable_restore_is_checked_again_sooner_when_it_finished_recently() {
        use std::time::Duration;
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let now = at("2026-11-28T12:00:00Z");
        assert_eq!(verify_backoff(Some(now), now), Duration::from_secs(15));
        assert_eq!(
            verify_backoff(Some(at("2026-11-28T11:58:00Z")), now),
            Duration::from_secs(60)
        );
        assert_eq!(
            verify_backoff(Some(at("2026-11-27T12:00:00Z")), now),
            Duration::from_secs(600)
        );
        assert_eq!(verify_backoff(None, now), Duration::from_secs(15));
    }
}
