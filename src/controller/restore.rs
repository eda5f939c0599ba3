//! NonAdminRestore reconciler: the restore must name a NonAdminBackup of its own namespace whose Velero Backup is
//! Completed; the Velero Restore (created once) restores into the own namespace only; its status is mirrored;
//! deleting the NonAdminRestore deletes the Velero Restore.
//!
//! A restore naming a backup that is not Completed (yet) is refused (`BackingOff`, `InvalidRestoreSpec`), as
//! OADP's controller does: it is not retried on its own. Since `BackingOff` may still become `Created`, touching
//! the NonAdminRestore (any update) re-checks it.

use super::conditions::{find, now_seconds};
use super::context::{key_of, Ctx, Error};
use super::objects::{self, nab_nacuuid, nab_velero_backup_name, nar_nacuuid, nar_velero_restore_name};
use super::status::{self, RestoreView};
use super::write::{create_or_get, delete_if_present, update_status, with_finalizer};
use crate::api::condition::QUEUED;
use crate::api::{NonAdminBackup, NonAdminPhase, NonAdminRestore};
use crate::naming::{generate_nacuuid, NAB, NAR, NAR_FINALIZER};
use crate::policy::Policy;
use crate::velero::{Backup, Restore};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as Finalizer;
use kube::{Api, ResourceExt};
use std::sync::Arc;

pub async fn reconcile(nar: Arc<NonAdminRestore>, ctx: &Ctx) -> Result<Action, Error> {
    let api: Api<NonAdminRestore> = Api::namespaced(ctx.client.clone(), &nar.namespace().unwrap_or_default());
    with_finalizer(&api, NAR_FINALIZER, nar, &ctx.recent, &ctx.metrics, |ev| async {
        match ev {
            Finalizer::Apply(nar) => apply(&api, nar, ctx).await,
            Finalizer::Cleanup(nar) => cleanup(&api, nar, ctx).await,
        }
    })
    .await
}

async fn apply(api: &Api<NonAdminRestore>, nar: Arc<NonAdminRestore>, ctx: &Ctx) -> Result<Action, Error> {
    ctx.ready(&ctx.restores_synced, "Velero Restores").await?;
    ctx.ready(&ctx.backups_synced, "Velero Backups").await?;
    // Decisions below read the status: not from a cache that lags behind nac's own last write.
    let nar = ctx.fresh(api, nar).await?;
    let old = nar.status.as_ref();
    if old.and_then(|s| s.phase) == Some(NonAdminPhase::Deleting) {
        return Ok(Action::await_change());
    }
    let created_before =
        old.is_some_and(|s| s.phase == Some(NonAdminPhase::Created) || find(&s.conditions, QUEUED).is_some());
    if created_before {
        return mirror_existing(api, &nar, ctx).await;
    }

    let Some(policy) = ctx.policy.current() else {
        let up = update_status(api, &nar, &ctx.recent, &ctx.metrics, status::nar_first_sight).await?;
        ctx.publish_update(&up, status::nar_notes);
        tracing::info!(nar = %key_of(&*nar), "no valid policy loaded yet; will retry");
        return Ok(Action::requeue(ctx.opts.policy_retry));
    };
    let spec = match validate(&nar, &policy, ctx).await? {
        Ok(spec) => spec,
        Err(message) => {
            let now = now_seconds();
            let up = update_status(api, &nar, &ctx.recent, &ctx.metrics, |s| {
                status::nar_rejected(s, &message, now)
            })
            .await?;
            ctx.publish_update(&up, status::nar_notes);
            return Ok(Action::await_change());
        }
    };

    let res = create_and_mirror(api, nar.clone(), spec, ctx).await;
    if res.is_err() {
        let now = now_seconds();
        if let Ok(up) = update_status(api, &nar, &ctx.recent, &ctx.metrics, |s| status::nar_validated(s, now)).await {
            ctx.publish_update(&up, status::nar_notes);
        }
    }
    res
}

async fn create_and_mirror(
    api: &Api<NonAdminRestore>,
    nar: Arc<NonAdminRestore>,
    spec: crate::velero::RestoreSpec,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let (nar, nacuuid) = match nar_nacuuid(&nar) {
        Some(u) => (nar, u),
        None => persist_new_nacuuid(api, &nar, ctx).await?,
    };
    let name = nar_velero_restore_name(&nar, &nacuuid);
    let vr = match ctx.restores.get(&ctx.velero_ref(&name)) {
        Some(vr) => (*vr).clone(),
        None => {
            let wanted = objects::velero_restore(&nar, &nacuuid, &ctx.opts.velero_namespace, spec);
            let vr = create_or_get(&ctx.velero_api::<Restore>(), &wanted, &ctx.metrics, "Restore").await?;
            tracing::info!(nar = %key_of(&*nar), restore = %name, "Velero Restore created");
            vr
        }
    };
    check_owner(&vr, &nar)?;
    ctx.note_restore(&vr);
    mirror(api, &nar, &vr, &nacuuid, ctx).await
}

/// The policy and tenant rules, then the backup reference. `Ok(Err(message))` refuses the restore.
async fn validate(
    nar: &NonAdminRestore,
    policy: &Policy,
    ctx: &Ctx,
) -> Result<Result<crate::velero::RestoreSpec, String>, Error> {
    // The rules first (they also require backupName), with a stand-in for the Velero backup name.
    if let Err(message) = objects::velero_restore_spec(nar, "", policy) {
        return Ok(Err(message));
    }
    let velero_backup = match backup_to_restore(nar, ctx).await? {
        Ok(name) => name,
        Err(message) => return Ok(Err(message)),
    };
    Ok(objects::velero_restore_spec(nar, &velero_backup, policy))
}

/// The name of the Velero Backup to restore: the one of the NonAdminBackup `spec.restoreSpec.backupName` in the
/// restore's namespace, which must exist and be Completed. `Ok(Err(message))` explains a refusal.
async fn backup_to_restore(nar: &NonAdminRestore, ctx: &Ctx) -> Result<Result<String, String>, Error> {
    let ns = nar.namespace().unwrap_or_default();
    let nab_name = nar.spec.restore_spec.backup_name.clone().unwrap_or_default();
    let invalid = |why: String| {
        Ok(Err(format!(
            "NonAdminRestore spec.restoreSpec.backupName is invalid: {why}"
        )))
    };
    let nab = match ctx
        .nabs
        .get(&kube::runtime::reflector::ObjectRef::new(&nab_name).within(&ns))
    {
        Some(n) => Some((*n).clone()),
        None => {
            Api::<NonAdminBackup>::namespaced(ctx.client.clone(), &ns)
                .get_opt(&nab_name)
                .await?
        }
    };
    let Some(nab) = nab else {
        return invalid(format!("NonAdminBackup {nab_name} does not exist in namespace {ns}"));
    };
    if nab.metadata.deletion_timestamp.is_some() || nab.spec.delete_backup {
        return invalid(format!("NonAdminBackup {nab_name} is being deleted"));
    }
    let not_ready = |state: &str| {
        invalid(format!(
            "NonAdminBackup {nab_name} is not ready to be restored: {state}; only a Completed backup can be restored"
        ))
    };
    let Some(nacuuid) = nab_nacuuid(&nab).filter(|_| super::backup::was_created(&nab)) else {
        return not_ready("its Velero Backup has not been created");
    };
    let vb_name = nab_velero_backup_name(&nab, &nacuuid);
    let completed = |b: &Backup| b.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Completed");
    let mut vb = ctx.backups.get(&ctx.velero_ref(&vb_name)).map(|b| (*b).clone());
    if !vb.as_ref().is_some_and(completed) {
        // The store may lag behind a backup that completed a moment ago.
        vb = ctx.velero_api::<Backup>().get_opt(&vb_name).await?;
    }
    let Some(vb) = vb else {
        return invalid(format!(
            "the Velero Backup {}/{vb_name} of NonAdminBackup {nab_name} does not exist",
            ctx.opts.velero_namespace
        ));
    };
    if !NAB.owns(&vb.metadata, &ns, &nab_name) {
        return invalid(format!(
            "Velero Backup {vb_name} does not belong to NonAdminBackup {nab_name}"
        ));
    }
    if !completed(&vb) {
        let phase = vb
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "New".into());
        return not_ready(&format!("its Velero Backup is {phase}"));
    }
    Ok(Ok(vb_name))
}

async fn persist_new_nacuuid(
    api: &Api<NonAdminRestore>,
    nar: &NonAdminRestore,
    ctx: &Ctx,
) -> Result<(Arc<NonAdminRestore>, String), Error> {
    let fresh = api.get(&nar.name_any()).await?;
    if let Some(u) = nar_nacuuid(&fresh) {
        return Ok((Arc::new(fresh), u));
    }
    let generated = generate_nacuuid(&fresh.namespace().unwrap_or_default(), &fresh.name_any());
    let now = now_seconds();
    let vns = ctx.opts.velero_namespace.clone();
    let up = update_status(api, &fresh, &ctx.recent, &ctx.metrics, |s| {
        let recorded = s
            .and_then(|s| s.velero_restore.as_ref())
            .and_then(|v| v.nacuuid.clone())
            .filter(|u| !u.is_empty());
        status::nar_accepted(s, recorded.as_deref().unwrap_or(&generated), &vns, now)
    })
    .await?;
    ctx.publish_update(&up, status::nar_notes);
    let nacuuid = nar_nacuuid(&up.object)
        .ok_or_else(|| Error::Inconsistent(format!("no nacuuid on {} after recording one", key_of(nar))))?;
    Ok((Arc::new(up.object), nacuuid))
}

fn check_owner(vr: &Restore, nar: &NonAdminRestore) -> Result<(), Error> {
    if NAR.owns(&vr.metadata, &nar.namespace().unwrap_or_default(), &nar.name_any()) {
        Ok(())
    } else {
        Err(Error::Inconsistent(format!(
            "Velero Restore {} belongs to another NonAdminRestore; refusing to use it for {}",
            vr.name_any(),
            key_of(nar)
        )))
    }
}

async fn mirror_existing(api: &Api<NonAdminRestore>, nar: &NonAdminRestore, ctx: &Ctx) -> Result<Action, Error> {
    let nacuuid = nar_nacuuid(nar)
        .ok_or_else(|| Error::Inconsistent(format!("{} is Created but has no nacuuid", key_of(nar))))?;
    let name = nar_velero_restore_name(nar, &nacuuid);
    match ctx.get_velero(&ctx.restores, &name).await? {
        Some(vr) => {
            check_owner(&vr, nar)?;
            mirror(api, nar, &vr, &nacuuid, ctx).await
        }
        None => {
            let now = now_seconds();
            let vns = ctx.opts.velero_namespace.clone();
            let up = update_status(api, nar, &ctx.recent, &ctx.metrics, |s| {
                status::nar_velero_restore_missing(s, &vns, &name, now)
            })
            .await?;
            ctx.publish_update(&up, status::nar_notes);
            Ok(Action::await_change())
        }
    }
}

pub fn restore_view(ctx: &Ctx, vr: &Restore, nacuuid: &str) -> RestoreView {
    let name = vr.name_any();
    let position = ctx
        .restore_queue
        .lock()
        .expect("queue lock")
        .position(&name)
        .unwrap_or(0);
    RestoreView {
        nacuuid: nacuuid.to_string(),
        name,
        namespace: ctx.opts.velero_namespace.clone(),
        status: vr.status.clone(),
        queue_position: position,
    }
}

async fn mirror(
    api: &Api<NonAdminRestore>,
    nar: &NonAdminRestore,
    vr: &Restore,
    nacuuid: &str,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let view = restore_view(ctx, vr, nacuuid);
    let now = now_seconds();
    let up = update_status(api, nar, &ctx.recent, &ctx.metrics, |s| {
        status::nar_created(s, &view, now)
    })
    .await?;
    ctx.publish_update(&up, status::nar_notes);
    Ok(Action::await_change())
}

/// Deleting a NonAdminRestore deletes its Velero Restore. Velero keeps a finalizer on Restores; when it holds the
/// Velero Restore longer than `restore_finalizer_grace` (Velero not running), the condition says so.
async fn cleanup(api: &Api<NonAdminRestore>, nar: Arc<NonAdminRestore>, ctx: &Ctx) -> Result<Action, Error> {
    ctx.ready(&ctx.restores_synced, "Velero Restores").await?;
    let target = match nar_nacuuid(&nar) {
        Some(nacuuid) => {
            let name = nar_velero_restore_name(&nar, &nacuuid);
            match ctx.get_velero(&ctx.restores, &name).await? {
                Some(vr) if check_owner(&vr, &nar).is_ok() => Some((name, vr)),
                _ => None,
            }
        }
        None => None,
    };
    // Velero's finalizer holding the Velero Restore too long is reported in the condition.
    let stalled = target.as_ref().and_then(|(name, vr)| {
        let since = vr.metadata.deletion_timestamp.as_ref()?;
        let waited = Timestamp::now().duration_since(since.0).unsigned_abs();
        (waited >= ctx.opts.restore_finalizer_grace && !vr.finalizers().is_empty()).then(|| {
            status::restore_finalizer_stalled_message(
                &ctx.opts.velero_namespace,
                name,
                vr.finalizers(),
                &since.0.to_string(),
            )
        })
    });
    let message = stalled
        .clone()
        .unwrap_or_else(|| status::RESTORE_DELETE_MESSAGE.to_string());
    let now = now_seconds();
    let up = update_status(api, &nar, &ctx.recent, &ctx.metrics, |s| {
        status::nar_deleting(s, &message, now)
    })
    .await?;
    ctx.publish_update(&up, status::nar_notes);
    if up.written && stalled.is_some() {
        tracing::warn!(nar = %key_of(&*nar), "Velero has not finalized the Velero Restore; is Velero running?");
    }
    let Some((name, vr)) = target else {
        return Ok(Action::await_change());
    };
    if vr.metadata.deletion_timestamp.is_none()
        && delete_if_present(&ctx.velero_api::<Restore>(), &name, &ctx.metrics, "Restore").await?
    {
        tracing::info!(nar = %key_of(&*nar), restore = %name, "Velero Restore deleted; releasing the NonAdminRestore");
        return Ok(Action::await_change());
    }
    Err(Error::Waiting(format!(
        "waiting for Velero to finalize Restore {}/{name}",
        ctx.opts.velero_namespace
    )))
}
