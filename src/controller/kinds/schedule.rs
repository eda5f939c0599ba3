//! NonAdminSchedule: one Velero Schedule per schedule, named by its nacuuid, whose template is the admitted backup
//! spec (the backup policy, the requester's rights, nac's exclusions, the own namespace only). Edits of the
//! expression, the pause or the template are carried to the Velero Schedule; `spec.skipImmediately` is handed to
//! Velero (which consumes it and records `lastSkipped`) and then removed from the NonAdminSchedule. A schedule
//! that is invalid under the current policy makes no new runs: its Velero Schedule is paused until it is fixed.
//!
//! The runs are Velero's: each Backup it makes carries the Velero Schedule's labels and annotations (nac's
//! identity), and backup sync (`sync.rs`) gives each its NonAdminBackup in the namespace, named as the Velero Backup
//! (`<nacuuid>-<timestamp>`), as OADP's controller names them. The status follows OADP's: `lastBackup` is the
//! newest run (an object), `nextRun` the time Velero computes for the next run, also while paused. Deleting the
//! NonAdminSchedule deletes the Velero Schedule; the backups stay.

use crate::api::condition::ACCEPTED;
use crate::api::{NonAdminPhase, NonAdminSchedule, NonAdminScheduleStatus, RecentBackup, VeleroScheduleRef};
use crate::controller::backup::{recheck_rights, recorded_spec, resolve_location};
use crate::controller::conditions::{now_seconds, set_condition};
use crate::controller::context::{key_of, Error};
use crate::controller::cx::Cx;
use crate::controller::events::Note;
use crate::controller::jobs::Jobs;
use crate::controller::kind::{self, ensure_nacuuid, nacuuid, set_status, Kind};
use crate::controller::stores::{self, Stores, StoresWiring};
use crate::controller::view::Registry;
use crate::controller::write::{create_or_get, delete_if_present};
use crate::naming::{Origin, Tags, NAS};
use crate::policy::{evaluate_schedule, tenant_location, Policy, SCHEDULE_TEMPLATE_PREFIX};
use crate::rights::{BACKUP_RIGHTS_ANNOTATION, REQUESTER_ANNOTATION};
use crate::velero::{run_timestamp, Backup, Schedule, ScheduleSpec, SCHEDULE_NAME_LABEL};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub const CONTROLLER: &str = "nonadminschedule";
pub const SCHEDULE_ACCEPTED: &str = "ScheduleAccepted";
pub const SCHEDULE_ACCEPTED_MESSAGE: &str = "schedule accepted";
pub const INVALID_SCHEDULE_SPEC: &str = "InvalidScheduleSpec";
/// How many of a schedule's backups its status lists.
pub const RECENT_BACKUPS: usize = 5;
/// How often a settled schedule is looked at again (its requester's rights may have changed).
pub const RECHECK: Duration = Duration::from_secs(600);

/// How often the schedules are checked for RBAC changes in their namespaces: a revoked right reaches a schedule's
/// Velero Schedule (its template built with its requester's rights) within this of the change reaching nac.
pub const RBAC_WAKE: Duration = Duration::from_secs(15);

/// Wakes the schedules of each namespace where nac has seen an RBAC change since the last look (a Role or
/// RoleBinding there, or any cluster-scoped one): their runs are rebuilt with the rights as they are now, not at
/// the next [`RECHECK`]. Without RBAC watches (`rbac_stamp` none) the recheck alone applies.
async fn wake_on_rbac_changes(ctx: Arc<Ctx>, stop: CancellationToken) {
    use std::collections::HashMap;
    let mut seen: HashMap<String, crate::rights::rbac::Stamp> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RBAC_WAKE) => {}
        }
        let schedules = ctx.own.objects.state();
        let mut now: HashMap<String, crate::rights::rbac::Stamp> = HashMap::new();
        for nas in &schedules {
            let ns = nas.namespace().unwrap_or_default();
            if now.contains_key(&ns) {
                continue;
            }
            let Some(stamp) = ctx.access.rbac_stamp(&ns) else {
                return;
            };
            now.insert(ns, stamp);
        }
        let mut woken = 0;
        for nas in &schedules {
            let ns = nas.namespace().unwrap_or_default();
            // A namespace first seen is not a change: its schedules were reconciled when they appeared.
            if seen.get(&ns).is_some_and(|before| Some(before) != now.get(&ns)) {
                woken += 1;
                let _ = ctx
                    .own
                    .trigger
                    .unbounded_send(kube::runtime::reflector::ObjectRef::from_obj(&**nas));
            }
        }
        if woken > 0 {
            tracing::info!(
                schedules = woken,
                "RBAC changed in their namespaces: schedules rechecked"
            );
        }
        seen = now;
    }
}

/// Wakes the schedules of each namespace whose labels change: a policy tier selects namespaces by their labels,
/// so a relabelled namespace's schedules are judged under its new tier at once, not at the next [`RECHECK`].
async fn wake_on_relabel(ctx: Arc<Ctx>, stop: CancellationToken) {
    let Some(namespaces) = ctx.policy.namespaces() else {
        return;
    };
    let mut changed = namespaces.subscribe();
    loop {
        let ns = tokio::select! {
            _ = stop.cancelled() => return,
            ns = changed.recv() => ns,
        };
        let ns = match ns {
            Ok(ns) => Some(ns),
            // Behind: every schedule may have moved.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let mut woken = 0;
        for nas in ctx.own.objects.state() {
            if ns.is_none() || nas.namespace() == ns {
                woken += 1;
                let _ = ctx
                    .own
                    .trigger
                    .unbounded_send(kube::runtime::reflector::ObjectRef::from_obj(&*nas));
            }
        }
        if woken > 0 {
            tracing::info!(namespace = ?ns, schedules = woken, "namespace labels changed: schedules rechecked");
        }
    }
}

/// What the schedule controller keeps for a term: the tenants' schedules, the Velero Schedules made for them, and
/// the channel that wakes a schedule when one of its runs changes.
pub type State = Stores<NonAdminSchedule, Schedule>;
pub type Wiring = StoresWiring<NonAdminSchedule, Schedule>;
type Ctx = Cx<State>;

crate::has_status!(NonAdminSchedule => NonAdminScheduleStatus, "NonAdminSchedule/status";);
impl crate::controller::write::CompactStatus for NonAdminScheduleStatus {}

impl Kind for NonAdminSchedule {
    const ORIGIN: Origin = NAS;
    const CONTROLLER: &'static str = CONTROLLER;
    type State = State;

    /// Its hook on Velero Backups: a schedule hears of each change of its runs (recent backups, last backup).
    fn wire(state: &State, reg: &mut Registry) {
        let trigger = state.trigger.clone();
        reg.on::<Backup>(move |b, _| {
            if let Some(r) = NAS.owner::<NonAdminSchedule>(b) {
                let _ = trigger.unbounded_send(r);
            }
        });
    }

    /// The schedule controller for a term: the tenants' schedules and the Velero Schedules made for them (those whose
    /// schedule is gone go to the collector); the changes of their runs come coalesced through its hook on Velero
    /// Backups.
    async fn controller(ctx: Arc<Ctx>, wiring: Wiring, jobs: &Jobs, stop: CancellationToken) {
        let what = ["nonadminschedules", "velero schedules"];
        let (controller, triggers) = stores::one_to_one(&ctx, &ctx.own, wiring, jobs, what);
        let triggers = crate::controller::watches::coalesce(triggers, ctx.opts.queue_update_interval);
        let waker = wake_on_rbac_changes(ctx.clone(), stop.clone());
        let relabel = wake_on_relabel(ctx.clone(), stop.clone());
        tokio::join!(kind::run(controller.reconcile_on(triggers), &ctx, stop), waker, relabel);
    }

    fn recorded_nacuuid(s: &NonAdminScheduleStatus) -> Option<&str> {
        s.velero_schedule.as_ref()?.nacuuid.as_deref()
    }

    fn notes(old: Option<&NonAdminScheduleStatus>, new: &NonAdminScheduleStatus) -> Vec<Note> {
        notes(old, new)
    }

    async fn ready(ctx: &Ctx) -> Result<(), Error> {
        ctx.ready(&ctx.own.velero.synced, "Velero Schedules").await?;
        ctx.ready(&ctx.view.get::<Backup>().synced, "Velero Backups").await
    }

    async fn apply(api: &Api<NonAdminSchedule>, nas: Arc<NonAdminSchedule>, ctx: &Ctx) -> Result<Action, Error> {
        let Some(policy) = ctx.policy.current_in(&nas.namespace().unwrap_or_default()) else {
            tracing::info!(object = %key_of(&*nas), "no valid policy loaded yet; will retry");
            return Ok(Action::requeue(ctx.opts.policy_retry));
        };
        let vns = ctx.opts.velero_namespace.clone();
        let (nas, nacuuid) = ensure_nacuuid(api, nas, ctx, |s, u| record_nacuuid(s, u, &vns)).await?;
        let ns = nas.namespace().unwrap_or_default();
        let owned = |v: &Schedule| {
            if NAS.owns(&v.metadata, &ns, &nas.name_any()) {
                return Ok(());
            }
            Err(Error::Inconsistent(format!(
                "Velero Schedule {nacuuid} belongs to another NonAdminSchedule; refusing to use it for {}",
                key_of(&*nas)
            )))
        };
        // From the store only: one made a moment ago that it does not show yet is found by the create below (and
        // its watch event brings this schedule back), so a new schedule costs no read.
        let existing = ctx.own.velero.get(&ctx.velero_ref(&nacuuid)).map(|v| (*v).clone());
        if let Some(v) = &existing {
            owned(v)?;
        }
        let want = match wanted(ctx, &nas, &ns, &nacuuid, &policy).await? {
            Ok(w) => w,
            Err((reason, message)) => {
                // No new runs while invalid: its Velero Schedule (made when it was valid) is paused.
                if let Some(v) = existing.as_ref().filter(|v| !v.spec.paused) {
                    patch_velero(
                        ctx,
                        &v.name_any(),
                        vec![json!({"op": "add", "path": "/spec/paused", "value": true})],
                    )
                    .await?;
                    tracing::warn!(object = %key_of(&*nas), velero = %v.name_any(), "schedule invalid now; Velero Schedule paused");
                }
                set(api, &nas, ctx, &Stage::Invalid(reason, message)).await?;
                // A location may become usable, the policy change: looked at again now and then.
                return Ok(Action::requeue(Duration::from_secs(60)));
            }
        };
        let velero = match existing {
            None => {
                let v = create_or_get(&ctx.velero_api::<Schedule>(), &want, &ctx.metrics, "Schedule").await?;
                owned(&v)?;
                tracing::info!(object = %key_of(&*nas), velero = %nacuuid, "Velero Schedule created");
                v
            }
            Some(have) => match changes(&have, &{
                let mut want = want.clone();
                if have.spec.schedule != want.spec.schedule && policy.schedule.min_interval.is_some() {
                    // As the webhook does: a changed expression does not run at once under a minimum interval.
                    want.spec.skip_immediately = Some(true);
                }
                want
            }) {
                Some(ops) => {
                    let v = patch_velero(ctx, &nacuuid, ops).await?;
                    tracing::info!(object = %key_of(&*nas), velero = %nacuuid, "Velero Schedule updated");
                    v
                }
                None => have,
            },
        };
        if nas.spec.skip_immediately.is_some() {
            // Handed to Velero (or false, which asks for nothing): consumed, so a later unpause skips only when asked.
            ctx.metrics.write("NonAdminSchedule");
            api.patch(
                &nas.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"skipImmediately": null}})),
            )
            .await?;
        }
        let tenant_locations =
            |l: &str| crate::controller::sync::tenant_location_of(&ctx.view, &ctx.opts.velero_namespace, l);
        let recent = recent_backups(
            (&ns, &nas.name_any()),
            &velero,
            ctx.view.get::<Backup>().state().iter().map(|b| &**b),
            &tenant_locations,
        );
        let vns = ctx.opts.velero_namespace.clone();
        let stage = Stage::Created {
            nacuuid: &nacuuid,
            velero_namespace: &vns,
            velero: &velero,
            recent,
            next_run: next_run(&velero),
        };
        set(api, &nas, ctx, &stage).await?;
        Ok(Action::requeue(RECHECK))
    }

    /// The finalizer's cleanup: the Velero Schedule goes (no more runs); the backups it made stay.
    async fn cleanup(_api: &Api<Self>, nas: Arc<NonAdminSchedule>, ctx: &Ctx) -> Result<Action, Error> {
        ctx.ready(&ctx.own.velero.synced, "Velero Schedules").await?;
        if let Some(u) = nacuuid(&*nas) {
            let ns = nas.namespace().unwrap_or_default();
            let mine = ctx
                .get_velero(&ctx.own.velero, &u)
                .await?
                .filter(|v| NAS.owns(&v.metadata, &ns, &nas.name_any()));
            if let Some(v) = mine {
                delete_if_present(&ctx.velero_api::<Schedule>(), &v.name_any(), &ctx.metrics, "Schedule").await?;
                tracing::info!(object = %key_of(&*nas), velero = %u, "Velero Schedule deleted; its backups stay");
            }
        }
        Ok(Action::await_change())
    }
}

/// What the reconciler decided about a schedule under the current policy.
pub enum Stage<'a> {
    /// Refused for this reason, with this message; no new runs.
    Invalid(&'static str, String),
    /// Its Velero Schedule as it is now, with its backups' summary and next run.
    Created {
        nacuuid: &'a str,
        velero_namespace: &'a str,
        velero: &'a Schedule,
        recent: Vec<RecentBackup>,
        next_run: Option<Timestamp>,
    },
}

/// The status for a stage (pure). Phases move forward only; a fixed schedule leaves BackingOff for Created.
pub fn plan(old: Option<&NonAdminScheduleStatus>, stage: &Stage, now: Timestamp) -> NonAdminScheduleStatus {
    let mut s = old.cloned().unwrap_or_default();
    match stage {
        Stage::Invalid(reason, message) => {
            set_condition(&mut s.conditions, ACCEPTED, false, reason, message, now);
            s.next_run = None;
            if s.phase != Some(NonAdminPhase::Deleting) {
                s.phase = Some(NonAdminPhase::BackingOff);
            }
        }
        Stage::Created {
            nacuuid,
            velero_namespace,
            velero,
            recent,
            next_run,
        } => {
            let vs = velero.status.clone().unwrap_or_default();
            match vs.phase.as_deref() {
                Some("FailedValidation") => {
                    let errors = vs.validation_errors.clone().unwrap_or_default().join("; ");
                    let msg = format!("Velero refused the schedule: {errors}");
                    set_condition(&mut s.conditions, ACCEPTED, false, INVALID_SCHEDULE_SPEC, &msg, now);
                }
                _ => {
                    set_condition(
                        &mut s.conditions,
                        ACCEPTED,
                        true,
                        SCHEDULE_ACCEPTED,
                        SCHEDULE_ACCEPTED_MESSAGE,
                        now,
                    );
                }
            }
            s.velero_schedule = Some(VeleroScheduleRef {
                nacuuid: Some(nacuuid.to_string()),
                name: Some(velero.name_any()),
                namespace: Some(velero_namespace.to_string()),
                status: velero.status.clone().map(Box::new),
            });
            s.last_backup = recent.first().cloned();
            s.last_skipped = vs.last_skipped.clone();
            s.next_run = next_run.map(|t| t.to_string());
            s.recent_backups = recent.clone();
            if s.phase != Some(NonAdminPhase::Deleting) {
                s.phase = Some(NonAdminPhase::Created);
            }
        }
    }
    s
}

fn parse_time(t: Option<&str>) -> Option<Timestamp> {
    t.and_then(|t| t.parse().ok())
}

/// When Velero runs the schedule next, computed as Velero's schedule controller does: the expression's next time
/// after the last backup (or the Velero Schedule's creation), or after the last skip when that is later. Also while
/// paused, as OADP's controller reports it: the run that follows the unpause. None when the expression is not one
/// Velero accepts. A time in the past means the run is due now (at the unpause, for a paused schedule).
pub fn next_run(velero: &Schedule) -> Option<Timestamp> {
    let status = velero.status.as_ref();
    let created = velero.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut from = parse_time(status.and_then(|s| s.last_backup.as_deref())).or(created)?;
    if let Some(skipped) = parse_time(status.and_then(|s| s.last_skipped.as_deref())) {
        from = from.max(skipped);
    }
    crate::cron::Schedule::parse(&velero.spec.schedule).ok()?.next(from)
}

/// The newest backups Velero Schedule `schedule` made for NonAdminSchedule `namespace/nas_name`, newest first, as
/// the NonAdminSchedule lists them: a Backup counts when it carries the schedule's identity and lies on the
/// template's location (a copy planted in another tenant's bucket does not).
pub fn recent_backups<'b>(
    (namespace, nas_name): (&str, &str),
    schedule: &Schedule,
    backups: impl Iterator<Item = &'b Backup>,
    tenant_locations: crate::controller::sync::TenantLocations,
) -> Vec<RecentBackup> {
    let template_location = schedule.spec.template.storage_location.as_deref();
    let schedule = schedule.metadata.name.as_deref().unwrap_or_default();
    let mut runs: Vec<(&str, &Backup)> = backups
        .filter(|b| b.label(SCHEDULE_NAME_LABEL) == Some(schedule))
        .filter(|b| NAS.owns(*b, namespace, nas_name))
        .filter(|b| {
            crate::controller::sync::run_location_ok(
                template_location,
                b.spec.storage_location.as_deref(),
                tenant_locations,
            )
        })
        .filter_map(|b| Some((run_timestamp(b.metadata.name.as_deref()?, schedule)?, b)))
        .collect();
    runs.sort_by(|a, b| b.0.cmp(a.0));
    runs.into_iter()
        .take(RECENT_BACKUPS)
        .map(|(ts, b)| {
            let st = b.status.clone().unwrap_or_default();
            RecentBackup {
                name: crate::controller::sync::run_nab_name(b, namespace, nas_name, ts),
                velero_backup_name: b.name_any(),
                phase: st.phase,
                start_timestamp: st.start_timestamp,
                completion_timestamp: st.completion_timestamp,
                expiration: st.expiration,
            }
        })
        .collect()
}

/// The Velero Schedule a valid NonAdminSchedule asks for now, or why it is not valid.
async fn wanted(
    ctx: &Ctx,
    nas: &NonAdminSchedule,
    ns: &str,
    nacuuid: &str,
    policy: &Policy,
) -> Result<Result<Schedule, (&'static str, String)>, Error> {
    if nas.spec.unset {
        return Ok(Err((
            INVALID_SCHEDULE_SPEC,
            format!("{} spec.template.backupSpec is not set", NAS.kind),
        )));
    }
    let spec = crate::velero::exclusions::to_map(&nas.spec);
    let outcome = evaluate_schedule(&spec, policy, ns, now_seconds());
    if !outcome.allowed() {
        return Ok(Err((INVALID_SCHEDULE_SPEC, outcome.message())));
    }
    // Counted in creation order: a schedule past the limit waits until an older one goes.
    let created = nas.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second());
    let schedules = ctx
        .own
        .objects
        .state()
        .iter()
        .filter(|o| o.namespace().as_deref() == Some(ns) && o.metadata.deletion_timestamp.is_none())
        .filter(|o| {
            let c = o.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second());
            (c, o.name_any()) < (created, nas.name_any())
        })
        .count() as u64;
    let usage = crate::policy::Usage {
        schedules,
        ..Default::default()
    };
    if let Err(r) = crate::policy::check_quota(policy, crate::policy::Counted::Schedule, ns, &usage) {
        return Ok(Err((crate::policy::QUOTA_EXCEEDED, r.message)));
    }
    let template = outcome.spec["template"]["backupSpec"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut template = match recorded_spec(template, &nas.metadata, NAS.kind, SCHEDULE_TEMPLATE_PREFIX, policy) {
        Ok(t) => t,
        Err(e) => return Ok(Err((INVALID_SCHEDULE_SPEC, e))),
    };
    if let Err(message) = recheck_rights(
        &nas.metadata,
        NAS.kind,
        SCHEDULE_TEMPLATE_PREFIX,
        &mut template,
        policy,
        ctx,
    )
    .await?
    {
        return Ok(Err((INVALID_SCHEDULE_SPEC, message)));
    }
    if let Some(name) = tenant_location(template.storage_location.as_deref(), policy) {
        let locations = ctx.view.get::<crate::api::NonAdminBackupStorageLocation>();
        ctx.ready(&locations.synced, "NonAdminBackupStorageLocations").await?;
        match resolve_location(ctx, ns, name) {
            Ok(velero_location) => template.storage_location = Some(velero_location),
            Err(message) => return Ok(Err((INVALID_SCHEDULE_SPEC, message))),
        }
    }
    // Never template labels: Velero would put them on each run instead of the Schedule's (nac's identity).
    template.metadata = None;
    let vns = &ctx.opts.velero_namespace;
    let mut s = Schedule::new(
        nacuuid,
        ScheduleSpec {
            template,
            schedule: nas.spec.schedule.clone(),
            paused: nas.spec.paused,
            skip_immediately: nas.spec.skip_immediately.filter(|s| *s),
            use_owner_references_in_backup: None,
            extra: Default::default(),
        },
    );
    s.metadata = kind::made_meta(nas, nacuuid, vns);
    // Each run carries who asked and what they may read (Velero copies the Schedule's annotations onto it).
    let annotations = s.metadata.annotations.get_or_insert_with(Default::default);
    for key in [REQUESTER_ANNOTATION, BACKUP_RIGHTS_ANNOTATION] {
        if let Some(v) = nas.annotations().get(key) {
            annotations.insert(key.to_string(), v.clone());
        }
    }
    Ok(Ok(s))
}

/// JSON-pointer form of a key (`/` and `~` escaped).
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that makes `have` what `want` asks for (spec and nac's annotations), or None. Velero's own
/// fields (status, a consumed `skipImmediately: false`) are left alone.
pub fn changes(have: &Schedule, want: &Schedule) -> Option<Vec<Value>> {
    let mut ops = Vec::new();
    if have.spec.template != want.spec.template {
        ops.push(json!({"op": "replace", "path": "/spec/template", "value": want.spec.template}));
    }
    if have.spec.schedule != want.spec.schedule {
        ops.push(json!({"op": "replace", "path": "/spec/schedule", "value": want.spec.schedule}));
    }
    if have.spec.paused != want.spec.paused {
        ops.push(json!({"op": "add", "path": "/spec/paused", "value": want.spec.paused}));
    }
    if want.spec.skip_immediately == Some(true) {
        ops.push(json!({"op": "add", "path": "/spec/skipImmediately", "value": true}));
    }
    let have_a = have.metadata.annotations.clone().unwrap_or_default();
    let want_a = want.metadata.annotations.clone().unwrap_or_default();
    if have.metadata.annotations.is_none() && !want_a.is_empty() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    for (k, v) in &want_a {
        if have_a.get(k) != Some(v) {
            ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(k)), "value": v}));
        }
    }
    for k in [REQUESTER_ANNOTATION, BACKUP_RIGHTS_ANNOTATION] {
        if have_a.contains_key(k) && !want_a.contains_key(k) {
            ops.push(json!({"op": "remove", "path": format!("/metadata/annotations/{}", pointer(k))}));
        }
    }
    (!ops.is_empty()).then_some(ops)
}

async fn patch_velero(ctx: &Ctx, name: &str, ops: Vec<Value>) -> Result<Schedule, Error> {
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
        .map_err(|e| Error::Inconsistent(format!("building the Velero Schedule patch: {e}")))?;
    ctx.metrics.write("Schedule");
    Ok(ctx
        .velero_api::<Schedule>()
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await?)
}

async fn set(api: &Api<NonAdminSchedule>, nas: &NonAdminSchedule, ctx: &Ctx, stage: &Stage<'_>) -> Result<(), Error> {
    let now = now_seconds();
    set_status(api, nas, ctx, |s| plan(s, stage, now)).await?;
    Ok(())
}

/// Events for what users act on: the schedule refused, a run skipped.
pub fn notes(old: Option<&NonAdminScheduleStatus>, new: &NonAdminScheduleStatus) -> Vec<Note> {
    let mut out = Vec::new();
    let accepted = |s: Option<&NonAdminScheduleStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == ACCEPTED))
            .map(|c| (c.status.clone(), c.message.clone()))
    };
    let (was, now) = (accepted(old), accepted(Some(new)));
    if was != now {
        // Accepted is a routine step (the condition says it); a refusal is what the user acts on.
        if let Some((_, message)) = now.filter(|(status, _)| status != "True") {
            out.push(Note {
                warning: true,
                reason: INVALID_SCHEDULE_SPEC.into(),
                message,
            });
        }
    }
    if new.last_skipped.is_some() && old.and_then(|o| o.last_skipped.as_ref()) != new.last_skipped.as_ref() {
        out.push(Note {
            warning: false,
            reason: "RunSkipped".into(),
            message: format!(
                "the run due at {} was skipped (spec.skipImmediately); next run {}",
                new.last_skipped.as_deref().unwrap_or_default(),
                new.next_run.as_deref().unwrap_or("when unpaused")
            ),
        });
    }
    out
}

/// A status recording nacuuid `u` (unless one is recorded already).
fn record_nacuuid(s: Option<&NonAdminScheduleStatus>, u: &str, velero_namespace: &str) -> NonAdminScheduleStatus {
    let mut s = s.cloned().unwrap_or_default();
    let r = s.velero_schedule.get_or_insert_with(Default::default);
    if r.nacuuid.as_deref().is_none_or(str::is_empty) {
        r.nacuuid = Some(u.to_string());
        r.name = Some(u.to_string());
        r.namespace = Some(velero_namespace.to_string());
    }
    s.phase.get_or_insert(NonAdminPhase::New);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::velero::{BackupStatus, ScheduleStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn velero(expr: &str, created: &str, last_backup: Option<&str>, last_skipped: Option<&str>) -> Schedule {
        let mut s = Schedule::new(
            "team-a-nightly-0b7a1c2e-6f47-4d4e-9a55-3a7c0e6b1f00",
            ScheduleSpec {
                schedule: expr.into(),
                ..Default::default()
            },
        );
        s.metadata.creation_timestamp = Some(Time(ts(created)));
        s.status = Some(ScheduleStatus {
            last_backup: last_backup.map(Into::into),
            last_skipped: last_skipped.map(Into::into),
            ..Default::default()
        });
        s
    }

    #[test]
    fn next_run_follows_velero_and_the_design_s_example() {
        // The design: `45 * * * *`, last backup 10:45, paused at 11:43, unpaused at 11:50. Without a skip the
        // next run (11:45) is overdue, so Velero runs at once; with one recorded at 11:50, the next is 12:45.
        let mut v = velero("45 * * * *", "2026-11-25T09:00:00Z", Some("2026-11-25T10:45:00Z"), None);
        v.spec.paused = true;
        // Paused, as OADP's controller reports it: the run that is due once unpaused.
        assert_eq!(
            next_run(&v),
            Some(ts("2026-11-25T11:45:00Z")),
            "paused: the run after the unpause"
        );
        v.spec.paused = false;
        let next = next_run(&v).unwrap();
        assert_eq!(next, ts("2026-11-25T11:45:00Z"));
        assert!(next < ts("2026-11-25T11:50:00Z"), "overdue at the unpause");
        v.status.as_mut().unwrap().last_skipped = Some("2026-11-25T11:50:00Z".into());
        assert_eq!(next_run(&v).unwrap(), ts("2026-11-25T12:45:00Z"));
        // A skip older than the last backup does not count; a new schedule counts from its creation.
        v.status.as_mut().unwrap().last_skipped = Some("2026-11-25T10:00:00Z".into());
        assert_eq!(next_run(&v).unwrap(), ts("2026-11-25T11:45:00Z"));
        let fresh = velero("@every 1m", "2026-11-25T09:00:30Z", None, None);
        assert_eq!(next_run(&fresh).unwrap(), ts("2026-11-25T09:01:30Z"));
        assert_eq!(
            next_run(&velero("61 * * * *", "2026-11-25T09:00:00Z", None, None)),
            None
        );
    }

    /// A run of team-a's schedule `nightly` as Velero makes it (the Schedule's identity copied onto it).
    fn run(name: &str, schedule: &str, phase: &str) -> Backup {
        let mut b = Backup::new(name, Default::default());
        b.metadata = NAS.stamp(
            name,
            "velero",
            schedule,
            "team-a",
            "nightly",
            &[(SCHEDULE_NAME_LABEL, schedule)],
        );
        b.status = Some(BackupStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        b
    }

    #[test]
    fn recent_backups_are_the_newest_runs_of_this_schedule_only() {
        let s = "team-a-nightly-0b7a1c2e-6f47-4d4e-9a55-3a7c0e6b1f00";
        let mut all: Vec<Backup> = (0..8)
            .map(|i| run(&format!("{s}-2026112501{i:02}00"), s, "Completed"))
            .collect();
        all.push(run(&format!("{s}-20261125020000"), s, "InProgress"));
        all.push(run("other-20261125030000", "other", "Completed"));
        all.push(run(&format!("{s}-x"), s, "Completed"));
        let mut schedule = Schedule::new(s, ScheduleSpec::default());
        schedule.metadata = NAS.stamp(s, "velero", s, "team-a", "nightly", &[]);
        let no_tenants = |_: &str| None;
        // Planted in team-b's own bucket with the schedule's identity and a later timestamp: not a run.
        let mut planted = run(&format!("{s}-20261125090000"), s, "Completed");
        planted.spec_mut().storage_location = Some("team-b-own".into());
        all.push(planted);
        let tenants = |l: &str| (l == "team-b-own").then(|| ("team-b".to_string(), "own".to_string()));
        let r = recent_backups(("team-a", "nightly"), &schedule, all.iter(), &tenants);
        assert_eq!(
            r,
            recent_backups(
                ("team-a", "nightly"),
                &schedule,
                all[..all.len() - 1].iter(),
                &no_tenants
            )
        );
        assert!(recent_backups(("team-b", "nightly"), &schedule, all.iter(), &tenants).is_empty());
        assert_eq!(r.len(), RECENT_BACKUPS);
        // OADP's naming: a run's NonAdminBackup is named as its Velero Backup.
        assert_eq!(r[0].name, format!("{s}-20261125020000"));
        assert_eq!(r[0].velero_backup_name, r[0].name);
        assert_eq!(r[0].phase.as_deref(), Some("InProgress"));
        assert_eq!(r[1].name, format!("{s}-20261125010700"));
        assert_eq!(r[4].velero_backup_name, format!("{s}-20261125010400"));

        // A run nac stamped in its earlier naming keeps that name; a stamp naming anything else does not count.
        let mut legacy = run(&format!("{s}-20261125030000"), s, "Completed");
        let stamp = crate::naming::NAB.stamp(
            &legacy.name_any(),
            "velero",
            "u",
            "team-a",
            "nightly-20261125030000",
            &[],
        );
        legacy
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(stamp.labels.unwrap());
        legacy
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(stamp.annotations.unwrap());
        let mut odd = run(&format!("{s}-20261125040000"), s, "Completed");
        let stamp = crate::naming::NAB.stamp(&odd.name_any(), "velero", "u", "team-a", "someone-else", &[]);
        odd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(stamp.annotations.unwrap());
        let r = recent_backups(
            ("team-a", "nightly"),
            &schedule,
            [&odd, &legacy].into_iter(),
            &no_tenants,
        );
        assert_eq!(r[0].name, format!("{s}-20261125040000"));
        assert_eq!(r[1].name, "nightly-20261125030000");
        assert_eq!(r[1].velero_backup_name, format!("{s}-20261125030000"));
    }

    #[test]
    fn changes_touch_only_what_differs_and_never_velero_s_own_fields() {
        let mut have = velero("@daily", "2026-11-25T09:00:00Z", Some("2026-11-25T10:00:00Z"), None);
        have.spec.skip_immediately = Some(false);
        have.metadata.annotations = Some(BTreeMap::from([("a".to_string(), "1".to_string())]));
        let mut want = have.clone();
        want.spec.skip_immediately = None;
        want.status = None;
        assert_eq!(changes(&have, &want), None);
        want.spec.paused = true;
        want.spec.skip_immediately = Some(true);
        want.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(REQUESTER_ANNOTATION.into(), "{}".into());
        let ops = changes(&have, &want).unwrap();
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/spec/paused", "value": true}),
                json!({"op": "add", "path": "/spec/skipImmediately", "value": true}),
                json!({"op": "add", "path": "/metadata/annotations/nac.oadp.openshift.io~1requester", "value": "{}"}),
            ]
        );
    }

    #[test]
    fn status_follows_the_stage() {
        let v = velero("@daily", "2026-11-25T09:00:00Z", Some("2026-11-25T10:00:00Z"), None);
        let now = ts("2026-11-25T11:00:00Z");
        let runs = vec![
            RecentBackup {
                name: "u-20261125100000".into(),
                velero_backup_name: "u-20261125100000".into(),
                phase: Some("Completed".into()),
                start_timestamp: Some("2026-11-25T10:00:01Z".into()),
                ..Default::default()
            },
            RecentBackup {
                name: "u-20261124100000".into(),
                velero_backup_name: "u-20261124100000".into(),
                ..Default::default()
            },
        ];
        let created = Stage::Created {
            nacuuid: "u",
            velero_namespace: "openshift-adp",
            velero: &v,
            recent: runs.clone(),
            next_run: next_run(&v),
        };
        // Stored by nac before: lastBackup a timestamp. Written back as OADP's object, the newest run.
        let old: NonAdminScheduleStatus =
            serde_json::from_value(json!({"phase": "Created", "lastBackup": "2026-11-24T10:00:00Z"})).unwrap();
        let s = plan(Some(&old), &created, now);
        assert_eq!(s.phase, Some(NonAdminPhase::Created));
        assert_eq!(s.next_run.as_deref(), Some("2026-11-26T00:00:00Z"));
        assert_eq!(s.last_backup.as_ref(), Some(&runs[0]));
        assert_eq!(
            serde_json::to_value(&s).unwrap()["lastBackup"],
            json!({"name": "u-20261125100000", "veleroBackupName": "u-20261125100000", "phase": "Completed",
                   "startTimestamp": "2026-11-25T10:00:01Z"})
        );
        assert_eq!(s.recent_backups, runs);
        assert_eq!(s.conditions[0].reason, SCHEDULE_ACCEPTED);
        let none_yet = Stage::Created {
            nacuuid: "u",
            velero_namespace: "openshift-adp",
            velero: &v,
            recent: vec![],
            next_run: next_run(&v),
        };
        assert_eq!(plan(Some(&old), &none_yet, now).last_backup, None);
        let bad = plan(Some(&s), &Stage::Invalid(INVALID_SCHEDULE_SPEC, "nope".into()), now);
        assert_eq!(bad.phase, Some(NonAdminPhase::BackingOff));
        assert_eq!(bad.next_run, None);
        assert_eq!(
            (bad.conditions[0].status.as_str(), bad.conditions[0].reason.as_str()),
            ("False", INVALID_SCHEDULE_SPEC)
        );
        assert_eq!(notes(Some(&s), &bad)[0].reason, INVALID_SCHEDULE_SPEC);
        assert_eq!(plan(Some(&bad), &created, now).phase, Some(NonAdminPhase::Created));
    }
}
