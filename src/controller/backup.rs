//! NonAdminBackup reconciler: policy re-check, the Velero Backup (created once), status mirroring, both delete
//! paths. The decisions live in `status` and `objects`; this file gathers observations and performs writes.
//!
//! Happy path, three writes: the finalizer, the Velero Backup, one status write straight to `Created`.

use super::conditions::{is_true, now_seconds};
use super::context::{key_of, Ctx, Error};
use super::objects::{self, nab_nacuuid, nab_velero_backup_name};
use super::status::{self, BackupView, DeleteRequestView};
use super::write::{create_or_get, delete_if_present, update_status, with_finalizer};
use crate::api::condition::QUEUED;
use crate::api::{NonAdminBackup, NonAdminPhase};
use crate::naming::{generate_nacuuid, NAB, NAB_FINALIZER, NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL};
use crate::velero::{Backup, DeleteBackupRequest};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as Finalizer;
use kube::{Api, ResourceExt};
use std::sync::Arc;

pub async fn reconcile(nab: Arc<NonAdminBackup>, ctx: &Ctx) -> Result<Action, Error> {
    let api: Api<NonAdminBackup> = Api::namespaced(ctx.client.clone(), &nab.namespace().unwrap_or_default());
    with_finalizer(&api, NAB_FINALIZER, nab, &ctx.recent, &ctx.metrics, |ev| async {
        match ev {
            Finalizer::Apply(nab) => apply(&api, nab, ctx).await,
            Finalizer::Cleanup(nab) => cleanup(&api, nab, ctx).await,
        }
    })
    .await
}

/// Create/update path (and the `deleteBackup: true` request, which starts the deletion).
async fn apply(api: &Api<NonAdminBackup>, nab: Arc<NonAdminBackup>, ctx: &Ctx) -> Result<Action, Error> {
    ctx.ready(&ctx.backups_synced, "Velero Backups").await?;
    // Decisions below read the status: not from a cache that lags behind nac's own last write.
    let nab = ctx.fresh(api, nab).await?;
    if nab.spec.delete_backup {
        return request_deletion(api, &nab, ctx).await;
    }
    let old = nab.status.as_ref();
    if old.and_then(|s| s.phase) == Some(NonAdminPhase::Deleting) {
        // Phases only move forward; the deletion proceeds once the object is deleted.
        return Ok(Action::await_change());
    }
    let created_before = old.is_some_and(|s| {
        s.phase == Some(NonAdminPhase::Created) || super::conditions::find(&s.conditions, QUEUED).is_some()
    });
    if created_before {
        return mirror_existing(api, &nab, ctx).await;
    }

    if nab.labels().contains_key(NAB_SYNCED_FROM_NACUUID_LABEL) {
        return adopt_synced(api, &nab, ctx).await;
    }

    let Some(policy) = ctx.policy.current() else {
        // No valid policy yet: the spec cannot be validated, so nothing is created.
        let up = update_status(api, &nab, &ctx.recent, &ctx.metrics, status::nab_first_sight).await?;
        ctx.publish_update(&up, status::nab_notes);
        tracing::info!(nab = %key_of(&*nab), "no valid policy loaded yet; will retry");
        return Ok(Action::requeue(ctx.opts.policy_retry));
    };
    let spec = match objects::velero_backup_spec(&nab, &policy) {
        Ok(spec) => spec,
        Err(message) => {
            let now = now_seconds();
            let up = update_status(api, &nab, &ctx.recent, &ctx.metrics, |s| {
                status::nab_rejected(s, &message, now)
            })
            .await?;
            ctx.publish_update(&up, status::nab_notes);
            // Terminal until the user changes the object.
            return Ok(Action::await_change());
        }
    };

    let res = create_and_mirror(api, nab.clone(), spec, ctx).await;
    if res.is_err() {
        // Valid but not created yet (the error is retried): show that much.
        let now = now_seconds();
        if let Ok(up) = update_status(api, &nab, &ctx.recent, &ctx.metrics, |s| status::nab_validated(s, now)).await {
            ctx.publish_update(&up, status::nab_notes);
        }
    }
    res
}

async fn create_and_mirror(
    api: &Api<NonAdminBackup>,
    nab: Arc<NonAdminBackup>,
    spec: crate::velero::BackupSpec,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let (nab, nacuuid) = match nab_nacuuid(&nab) {
        Some(u) => (nab, u),
        None => persist_new_nacuuid(api, &nab, ctx).await?,
    };
    let name = nab_velero_backup_name(&nab, &nacuuid);
    let vb = match ctx.backups.get(&ctx.velero_ref(&name)) {
        Some(vb) => (*vb).clone(),
        None => {
            let wanted = objects::velero_backup(&nab, &nacuuid, &ctx.opts.velero_namespace, spec);
            let vb = create_or_get(&ctx.velero_api::<Backup>(), &wanted, &ctx.metrics, "Backup").await?;
            tracing::info!(nab = %key_of(&*nab), backup = %name, "Velero Backup created");
            vb
        }
    };
    check_owner(&vb, &nab)?;
    ctx.note_backup(&vb);
    mirror(api, &nab, &vb, &nacuuid, ctx).await
}

/// A NonAdminBackup that backup sync re-created for a backup found in object storage: its Velero Backup exists
/// already and is adopted as it is (the policy governs new backups; nothing is created). Only a Velero Backup
/// whose nacuuid is the one the label names and whose origin is this very object is adopted: a sync label that
/// got past the webhook adopts nothing of anyone else's and creates nothing.
async fn adopt_synced(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let synced = nab
        .labels()
        .get(NAB_SYNCED_FROM_NACUUID_LABEL)
        .cloned()
        .unwrap_or_default();
    let vb = nab_nacuuid(nab)
        .filter(|u| *u == synced)
        .and_then(|u| ctx.backups.get(&ctx.velero_ref(&nab_velero_backup_name(nab, &u))))
        .filter(|vb| check_owner(vb, nab).is_ok());
    let Some(vb) = vb else {
        let message = format!(
            "NonAdminBackup is labelled {NAB_SYNCED_FROM_NACUUID_LABEL}={synced}, but no Velero Backup of that \
             nacuuid made for {} exists; backup sync re-creates NonAdminBackups only for backups it found",
            key_of(nab)
        );
        let now = now_seconds();
        let up = update_status(api, nab, &ctx.recent, &ctx.metrics, |s| {
            status::nab_rejected(s, &message, now)
        })
        .await?;
        ctx.publish_update(&up, status::nab_notes);
        return Ok(Action::await_change());
    };
    tracing::info!(nab = %key_of(nab), backup = %vb.name_any(), "adopting the synced Velero Backup");
    ctx.note_backup(&vb);
    mirror(api, nab, &vb, &synced, ctx).await
}

/// The NonAdminBackup has no nacuuid (no webhook label): generate one and persist it in status before anything
/// is created, so a crash cannot lead to a second Velero Backup. The object is read fresh first: the cache may not
/// show a nacuuid written moments ago.
async fn persist_new_nacuuid(
    api: &Api<NonAdminBackup>,
    nab: &NonAdminBackup,
    ctx: &Ctx,
) -> Result<(Arc<NonAdminBackup>, String), Error> {
    let fresh = api.get(&nab.name_any()).await?;
    if let Some(u) = nab_nacuuid(&fresh) {
        return Ok((Arc::new(fresh), u));
    }
    let ns = fresh.namespace().unwrap_or_default();
    let generated = generate_nacuuid(&ns, &fresh.name_any());
    let now = now_seconds();
    let vns = ctx.opts.velero_namespace.clone();
    let up = update_status(api, &fresh, &ctx.recent, &ctx.metrics, |s| {
        let recorded = s
            .and_then(|s| s.velero_backup.as_ref())
            .and_then(|v| v.nacuuid.clone())
            .filter(|u| !u.is_empty());
        status::nab_accepted(s, recorded.as_deref().unwrap_or(&generated), &vns, now)
    })
    .await?;
    ctx.publish_update(&up, status::nab_notes);
    let nacuuid = nab_nacuuid(&up.object)
        .ok_or_else(|| Error::Inconsistent(format!("no nacuuid on {} after recording one", key_of(nab))))?;
    tracing::info!(nab = %key_of(nab), %nacuuid, label = NAB_ORIGIN_NACUUID_LABEL, "no nacuuid label; generated one");
    Ok((Arc::new(up.object), nacuuid))
}

fn check_owner(vb: &Backup, nab: &NonAdminBackup) -> Result<(), Error> {
    let ns = nab.namespace().unwrap_or_default();
    if NAB.owns(&vb.metadata, &ns, &nab.name_any()) {
        Ok(())
    } else {
        Err(Error::Inconsistent(format!(
            "Velero Backup {} belongs to another NonAdminBackup; refusing to use it for {}",
            vb.name_any(),
            key_of(nab)
        )))
    }
}

/// Status mirror of an existing Velero Backup (or the report that it vanished).
async fn mirror_existing(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let nacuuid = nab_nacuuid(nab)
        .ok_or_else(|| Error::Inconsistent(format!("{} is Created but has no nacuuid", key_of(nab))))?;
    let name = nab_velero_backup_name(nab, &nacuuid);
    match ctx.get_velero(&ctx.backups, &name).await? {
        Some(vb) => {
            check_owner(&vb, nab)?;
            mirror(api, nab, &vb, &nacuuid, ctx).await
        }
        None => {
            let now = now_seconds();
            let vns = ctx.opts.velero_namespace.clone();
            let up = update_status(api, nab, &ctx.recent, &ctx.metrics, |s| {
                status::nab_velero_backup_missing(s, &vns, &name, now)
            })
            .await?;
            if up.written {
                tracing::warn!(nab = %key_of(nab), backup = %name, "Velero Backup vanished");
            }
            ctx.publish_update(&up, status::nab_notes);
            Ok(Action::await_change())
        }
    }
}

/// The observations behind a Created NonAdminBackup's status.
pub fn backup_view(ctx: &Ctx, vb: &Backup, nacuuid: &str) -> BackupView {
    let name = vb.name_any();
    let position = ctx
        .backup_queue
        .lock()
        .expect("queue lock")
        .position(&name)
        .unwrap_or(0);
    BackupView {
        nacuuid: nacuuid.to_string(),
        name: name.clone(),
        namespace: ctx.opts.velero_namespace.clone(),
        spec: Some(vb.spec.clone()),
        status: vb.status.clone(),
        queue_position: position,
        data_uploads: ctx.data_uploads.lock().expect("counts lock").tally(&name),
        pod_volume_backups: ctx.pod_volume_backups.lock().expect("counts lock").tally(&name),
    }
}

async fn mirror(
    api: &Api<NonAdminBackup>,
    nab: &NonAdminBackup,
    vb: &Backup,
    nacuuid: &str,
    ctx: &Ctx,
) -> Result<Action, Error> {
    ctx.counts_ready().await;
    let view = backup_view(ctx, vb, nacuuid);
    let now = now_seconds();
    let up = update_status(api, nab, &ctx.recent, &ctx.metrics, |s| {
        status::nab_created(s, &view, now)
    })
    .await?;
    ctx.publish_update(&up, status::nab_notes);
    Ok(Action::await_change())
}

/// `spec.deleteBackup: true` on a live object: phase Deleting, then delete the object; the finalizer cleanup does
/// the rest (DeleteBackupRequest, wait for Velero).
async fn request_deletion(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let now = now_seconds();
    let up = update_status(api, nab, &ctx.recent, &ctx.metrics, |s| {
        status::nab_deleting(s, status::BACKUP_DELETE_REQUESTED_MESSAGE, None, now)
    })
    .await?;
    ctx.publish_update(&up, status::nab_notes);
    if nab.metadata.deletion_timestamp.is_none() {
        delete_if_present(api, &nab.name_any(), &ctx.metrics, "NonAdminBackup").await?;
        tracing::info!(nab = %key_of(nab), "deleteBackup requested; NonAdminBackup marked for deletion");
    }
    Ok(Action::await_change())
}

/// The object is being deleted: clean up Velero objects before the finalizer goes.
async fn cleanup(api: &Api<NonAdminBackup>, nab: Arc<NonAdminBackup>, ctx: &Ctx) -> Result<Action, Error> {
    ctx.ready(&ctx.backups_synced, "Velero Backups").await?;
    ctx.ready(&ctx.delete_requests_synced, "Velero DeleteBackupRequests")
        .await?;
    if nab.spec.delete_backup {
        delete_backup_data(api, &nab, ctx).await
    } else {
        delete_backup_object(api, &nab, ctx).await
    }
}

/// The DeleteBackupRequests nac made for this nacuuid (named by it; any other carrying its label too).
fn delete_requests_for(ctx: &Ctx, nacuuid: &str) -> Vec<Arc<DeleteBackupRequest>> {
    let mut found: Vec<Arc<DeleteBackupRequest>> =
        ctx.delete_requests.get(&ctx.velero_ref(nacuuid)).into_iter().collect();
    if found.is_empty() {
        found = ctx
            .delete_requests
            .state_filter(|r| r.labels().get(NAB_ORIGIN_NACUUID_LABEL).map(String::as_str) == Some(nacuuid));
    }
    found
}

/// Deletes nac's DeleteBackupRequests for this nacuuid.
async fn delete_requests(ctx: &Ctx, nacuuid: &str) -> Result<(), Error> {
    let api = ctx.velero_api::<DeleteBackupRequest>();
    for r in delete_requests_for(ctx, nacuuid) {
        if r.metadata.deletion_timestamp.is_none() {
            delete_if_present(&api, &r.name_any(), &ctx.metrics, "DeleteBackupRequest").await?;
        }
    }
    Ok(())
}

/// `deleteBackup: true` path: ask Velero (DeleteBackupRequest, once) to delete the backup and its data, mirror the
/// request, and let the finalizer go once the Velero Backup is gone.
async fn delete_backup_data(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let Some(nacuuid) = nab_nacuuid(nab) else {
        return Ok(Action::await_change());
    };
    let name = nab_velero_backup_name(nab, &nacuuid);
    let vb = match ctx.get_velero(&ctx.backups, &name).await? {
        Some(vb) if check_owner(&vb, nab).is_ok() => vb,
        _ => {
            // Velero keeps processed requests for a while; nac leaves nothing of the backup behind.
            delete_requests(ctx, &nacuuid).await?;
            tracing::info!(nab = %key_of(nab), backup = %name, "Velero Backup gone; releasing the NonAdminBackup");
            return Ok(Action::await_change());
        }
    };
    let request = match delete_requests_for(ctx, &nacuuid).into_iter().next() {
        Some(r) => (*r).clone(),
        None => {
            let wanted = objects::delete_backup_request(nab, &nacuuid, &vb);
            let r = create_or_get(
                &ctx.velero_api::<DeleteBackupRequest>(),
                &wanted,
                &ctx.metrics,
                "DeleteBackupRequest",
            )
            .await?;
            tracing::info!(nab = %key_of(nab), backup = %name, "DeleteBackupRequest created");
            r
        }
    };
    let view = DeleteRequestView {
        nacuuid: nacuuid.clone(),
        name: request.name_any(),
        namespace: ctx.opts.velero_namespace.clone(),
        status: request.status.clone(),
    };
    let message = status::delete_request_message(Some(&view));
    let now = now_seconds();
    let up = update_status(api, nab, &ctx.recent, &ctx.metrics, |s| {
        status::nab_deleting(s, &message, Some(&view), now)
    })
    .await?;
    ctx.publish_update(&up, status::nab_notes);
    Err(Error::Waiting(format!(
        "waiting for Velero to delete Backup {}/{name} (DeleteBackupRequest {})",
        ctx.opts.velero_namespace, view.name
    )))
}

/// Plain `kubectl delete`: remove the Velero Backup object (not its data) and nac's DeleteBackupRequests, and let
/// the finalizer go once the Velero Backup is gone.
async fn delete_backup_object(api: &Api<NonAdminBackup>, nab: &NonAdminBackup, ctx: &Ctx) -> Result<Action, Error> {
    let now = now_seconds();
    let up = update_status(api, nab, &ctx.recent, &ctx.metrics, |s| {
        status::nab_deleting(s, status::BACKUP_DIRECT_DELETE_MESSAGE, None, now)
    })
    .await?;
    ctx.publish_update(&up, status::nab_notes);
    let Some(nacuuid) = nab_nacuuid(nab) else {
        return Ok(Action::await_change());
    };
    let name = nab_velero_backup_name(nab, &nacuuid);
    let mut gone = true;
    if let Some(vb) = ctx.get_velero(&ctx.backups, &name).await? {
        if check_owner(&vb, nab).is_ok() {
            gone = if vb.metadata.deletion_timestamp.is_none() {
                delete_if_present(&ctx.velero_api::<Backup>(), &name, &ctx.metrics, "Backup").await?
            } else {
                false
            };
        }
    }
    delete_requests(ctx, &nacuuid).await?;
    if gone {
        tracing::info!(nab = %key_of(nab), backup = %name, "Velero Backup object deleted; releasing the NonAdminBackup");
        Ok(Action::await_change())
    } else {
        Err(Error::Waiting(format!(
            "waiting for Velero Backup {}/{name} to be deleted",
            ctx.opts.velero_namespace
        )))
    }
}

/// Whether a NonAdminBackup's Velero Backup was created (used by the restore checks).
pub fn was_created(nab: &NonAdminBackup) -> bool {
    nab.status
        .as_ref()
        .is_some_and(|s| s.phase == Some(NonAdminPhase::Created) || is_true(&s.conditions, QUEUED))
}
