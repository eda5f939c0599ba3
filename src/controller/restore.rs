//! NonAdminRestore: its own decisions on the tenant skeleton (`tenant.rs`). Admission is the restore policy plus
//! the backup reference: a NonAdminBackup of the restore's own namespace whose Velero Backup is Completed. The
//! Velero Restore restores into the own namespace only; its status and queue position are mirrored; deleting the
//! NonAdminRestore deletes the Velero Restore.
//!
//! A restore naming a backup that is not Completed (yet) is refused (`BackingOff`, `InvalidRestoreSpec`), as
//! OADP's controller does: it is not retried on its own. Since `BackingOff` may still become `Created`, touching
//! the NonAdminRestore (any update) re-checks it.

use super::conditions::now_seconds;
use super::context::{key_of, Ctx, Error, KindState};
use super::objects::{add_restore_exclusions, to_map};
use super::status::{self, Words};
use super::tenant::{self, set_status, Tenant};
use crate::api::condition::*;
use crate::api::{NonAdminBackup, NonAdminRestore, NonAdminRestoreStatus, VeleroRestoreRef};
use crate::naming::{Origin, NAB, NAR};
use crate::policy::{evaluate_restore, Policy};
use crate::velero::{restore_phase_unfinished, Backup, Restore, RestoreSpec, RestoreStatus};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::Value;
use std::sync::Arc;

pub const NAR_CONTROLLER: &str = "nonadminrestore";
pub const RESTORE_ACCEPTED_MESSAGE: &str = "restore accepted";
pub const RESTORE_SCHEDULED_MESSAGE: &str = "Created Velero Restore object";
pub const RESTORE_DELETE_MESSAGE: &str = "restore accepted for deletion";

/// A Velero Restore as the NonAdminRestore status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestoreView {
    pub nacuuid: String,
    pub name: String,
    pub namespace: String,
    pub status: Option<RestoreStatus>,
    pub queue_position: i64,
}

crate::tenant_types! {
    velero: Restore, spec: RestoreSpec, velero_status: RestoreStatus, kind: "Restore",
    unfinished: restore_phase_unfinished,
    failure: |v: &RestoreStatus| {
        v.failure_reason.clone().or_else(|| {
            let errors = v.extra.get("validationErrors")?.as_array()?;
            Some(errors.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join("; "))
        })
    },
    status: NonAdminRestoreStatus, reference: velero_restore, VeleroRestoreRef,
}

impl Tenant for NonAdminRestore {
    const ORIGIN: Origin = NAR;
    const CONTROLLER: &'static str = NAR_CONTROLLER;
    const WORDS: Words = Words {
        kind: "Restore",
        accepted_reason: RESTORE_ACCEPTED,
        accepted_message: RESTORE_ACCEPTED_MESSAGE,
        invalid_reason: INVALID_RESTORE_SPEC,
        scheduled_reason: RESTORE_SCHEDULED,
        scheduled_message: RESTORE_SCHEDULED_MESSAGE,
        not_found_reason: VELERO_RESTORE_NOT_FOUND,
        again: "restore again",
    };
    type Velero = Restore;
    type View = RestoreView;

    fn state(ctx: &Ctx) -> &KindState<Self> {
        &ctx.nar
    }

    /// The policy and tenant rules, then the backup reference.
    async fn admit(nar: &Self, policy: &Policy, ctx: &Ctx) -> Result<Result<RestoreSpec, String>, Error> {
        // The rules first (they also require backupName), with a stand-in for the Velero backup name.
        if let Err(message) = velero_restore_spec(nar, "", policy) {
            return Ok(Err(message));
        }
        ctx.ready(&ctx.nab.synced, "Velero Backups").await?;
        let velero_backup = match backup_to_restore(nar, ctx).await? {
            Ok(name) => name,
            Err(message) => return Ok(Err(message)),
        };
        Ok(velero_restore_spec(nar, &velero_backup, policy))
    }

    fn build(nar: &Self, nacuuid: &str, velero_namespace: &str, spec: RestoreSpec) -> Restore {
        velero_restore(nar, nacuuid, velero_namespace, spec)
    }

    async fn view(ctx: &Ctx, vr: &Restore, nacuuid: &str) -> RestoreView {
        let name = vr.name_any();
        RestoreView {
            nacuuid: nacuuid.to_string(),
            queue_position: ctx.nar.position(&name),
            name,
            namespace: ctx.opts.velero_namespace.clone(),
            status: vr.status.clone(),
        }
    }

    fn position(view: &RestoreView) -> i64 {
        view.queue_position
    }

    fn mirror(s: &mut NonAdminRestoreStatus, vr: &RestoreView) {
        s.velero_restore = Some(VeleroRestoreRef {
            nacuuid: Some(vr.nacuuid.clone()),
            name: Some(vr.name.clone()),
            namespace: Some(vr.namespace.clone()),
            status: vr.status.clone(),
        });
    }

    /// Deleting a NonAdminRestore deletes its Velero Restore. Velero keeps a finalizer on Restores; when it holds
    /// the Velero Restore longer than `restore_finalizer_grace` (Velero not running), the condition says so.
    async fn cleanup(api: &Api<Self>, nar: Arc<Self>, ctx: &Ctx) -> Result<Action, Error> {
        ctx.ready(&ctx.nar.synced, "Velero Restores").await?;
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
            return Ok(Action::await_change());
        };
        if tenant::delete_velero::<NonAdminRestore>(ctx, &name, &vr).await? {
            tracing::info!(nar = %key_of(&*nar), restore = %name, "Velero Restore deleted; releasing the NonAdminRestore");
            return Ok(Action::await_change());
        }
        Err(Error::Waiting(format!(
            "waiting for Velero to finalize Restore {}/{name}",
            ctx.opts.velero_namespace
        )))
    }
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
    let nab = match ctx.nab.objects.get(&ObjectRef::new(&nab_name).within(&ns)) {
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
    let Some(nacuuid) = tenant::nacuuid(&nab).filter(|_| tenant::was_created(&nab)) else {
        return not_ready("its Velero Backup has not been created");
    };
    let vb_name = tenant::velero_name(&nab, &nacuuid);
    let completed = |b: &Backup| b.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Completed");
    let mut vb = ctx.nab.velero.get(&ctx.velero_ref(&vb_name)).map(|b| (*b).clone());
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

/// The Velero RestoreSpec for a NonAdminRestore restoring Velero backup `velero_backup_name`: policy applied, own
/// namespace only, no cluster resources, the exclusions. `Err` carries the message for an invalid spec.
pub fn velero_restore_spec(
    nar: &NonAdminRestore,
    velero_backup_name: &str,
    policy: &Policy,
) -> Result<RestoreSpec, String> {
    let ns = nar.namespace().unwrap_or_default();
    let outcome = evaluate_restore(&to_map(&nar.spec.restore_spec), policy);
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
    let mut r = Restore::new(nacuuid, spec);
    r.metadata = NAR.stamp(
        nacuuid,
        velero_namespace,
        nacuuid,
        &nar.namespace().unwrap_or_default(),
        &nar.name_any(),
        &[],
    );
    r
}

/// Validates a NonAdminRestore against the policy and builds its Velero Restore in one go.
pub fn velero_restore_for(
    nar: &NonAdminRestore,
    nacuuid: &str,
    velero_namespace: &str,
    velero_backup_name: &str,
    policy: &Policy,
) -> Result<Restore, String> {
    Ok(velero_restore(
        nar,
        nacuuid,
        velero_namespace,
        velero_restore_spec(nar, velero_backup_name, policy)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NonAdminRestoreSpec;
    use crate::naming::*;
    use serde_json::json;

    fn nar(spec: Value) -> NonAdminRestore {
        let mut n = NonAdminRestore::new(
            "undo",
            NonAdminRestoreSpec {
                restore_spec: serde_json::from_value(spec).unwrap(),
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
}
