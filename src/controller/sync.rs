//! Backup sync: Velero's own storage sync re-creates Backup objects from object storage (after a disaster, on a
//! rebuilt cluster, or when only the object was deleted), with the labels and annotations nac wrote. A finished one
//! whose NonAdminBackup is gone gets it back, in its origin namespace and under its origin name, so the tenant can
//! restore from it; the NonAdminBackup reconciler then adopts the Velero Backup (`backup::adopt_synced`).
//!
//! Driven by Velero Backup watch events (a synced backup gets its NonAdminBackup within a reconcile), plus a
//! periodic resync of the whole store (policy `backupSync.period`; it also catches a namespace re-created after
//! its backups came back). Only locations the policy lists in `backupSync.adminLocations` are synced.
//!
//! No duplicates: the NonAdminBackup's name is the origin name, so a second create (a racing event, another
//! replica's last moments of leadership) is refused by the API server with AlreadyExists.

use super::context::{key_of, Ctx};
use super::status::Note;
use crate::api::{NonAdminBackup, NonAdminBackupSpec};
use crate::naming::{
    is_nacuuid_for, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NAB, NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL,
    OADP_LABEL, OADP_LABEL_VALUE,
};
use crate::policy::BackupSync;
use crate::velero::Backup;
use futures::channel::mpsc::UnboundedReceiver;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Velero phases of a backup worth a NonAdminBackup: restorable ones.
const SYNCED_PHASES: &[&str] = &["Completed", "PartiallyFailed"];

/// Where a Velero Backup belongs: the origin NonAdminBackup it was made for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub namespace: String,
    pub name: String,
    pub nacuuid: String,
    /// The tenant's own storage location (NonAdminBackupStorageLocation name) the backup is on, if it is on one.
    pub location: Option<String>,
}

/// The owner of a Velero storage location made for a tenant: `(namespace, NonAdminBackupStorageLocation name)`.
pub type TenantLocations<'a> = &'a dyn Fn(&str) -> Option<(String, String)>;

/// The origin of a Velero Backup that backup sync may give a NonAdminBackup, or None. Pure: the decision is
/// tested without a cluster. The backup must be one nac made (its labels, a nacuuid that is this origin's and is
/// the backup's own name), finished in a restorable phase, and stored on a location the policy opens for sync,
/// or on a tenant's own location **of the origin's namespace**: a tenant controls what is in their bucket, so a
/// backup there claiming another namespace is planted and never synced.
pub fn sync_origin(b: &Backup, sync: &BackupSync, tenant_locations: TenantLocations) -> Option<Origin> {
    let labels = b.metadata.labels.as_ref()?;
    if labels.get(OADP_LABEL).map(String::as_str) != Some(OADP_LABEL_VALUE)
        || labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY_VALUE)
    {
        return None;
    }
    let nacuuid = NAB.nacuuid(&b.metadata)?;
    let (namespace, name) = NAB.origin_of(&b.metadata)?;
    if b.metadata.name.as_deref() != Some(nacuuid) || !is_nacuuid_for(nacuuid, namespace, name) {
        return None;
    }
    let status = b.status.as_ref()?;
    status.completion_timestamp.as_ref()?;
    if !SYNCED_PHASES.contains(&status.phase.as_deref()?) {
        return None;
    }
    let location = b.spec.storage_location.as_deref()?;
    let own = if sync.admin_locations.iter().any(|l| l == location) {
        None
    } else {
        let (owner_ns, nabsl) = tenant_locations(location)?;
        if owner_ns != namespace {
            tracing::warn!(
                backup = %b.name_any(),
                claims = %namespace,
                location = %location,
                owner = %owner_ns,
                "backup sync: a backup in a tenant's own storage claims another namespace; not synced"
            );
            return None;
        }
        Some(nabsl)
    };
    Some(Origin {
        namespace: namespace.to_string(),
        name: name.to_string(),
        nacuuid: nacuuid.to_string(),
        location: own,
    })
}

/// The NonAdminBackup backup sync creates for `b`: the origin's name and namespace, the backup's nacuuid as its
/// identity and in the sync label, and the backup's spec as it was made, its storage location named as the tenant
/// names it: their own location's name, or left out for an admin one (tenants never name admin locations).
pub fn synced_nab(b: &Backup, origin: &Origin) -> NonAdminBackup {
    let mut spec = b.spec.clone();
    spec.storage_location = origin.location.clone();
    let labels = BTreeMap::from([
        (NAB_ORIGIN_NACUUID_LABEL.to_string(), origin.nacuuid.clone()),
        (NAB_SYNCED_FROM_NACUUID_LABEL.to_string(), origin.nacuuid.clone()),
    ]);
    let mut nab = NonAdminBackup::new(
        &origin.name,
        NonAdminBackupSpec {
            backup_spec: spec,
            delete_backup: false,
        },
    );
    nab.metadata = ObjectMeta {
        name: Some(origin.name.clone()),
        namespace: Some(origin.namespace.clone()),
        labels: Some(labels),
        ..Default::default()
    };
    nab
}

/// Names of namespaces created while nac runs (not the initial list): a re-created namespace gets the
/// NonAdminBackups of its backups back at once, not at the next resync.
fn created_namespaces(client: kube::Client) -> impl futures::Stream<Item = String> + Send {
    use kube::core::PartialObjectMeta;
    use kube::runtime::{watcher, WatchStreamExt};
    watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|e| async move {
        match e {
            Ok(watcher::Event::Apply(m)) => m.metadata.name,
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(error = %e, "namespace watch (backup sync)");
                None
            }
        }
    })
}

/// Runs until `triggers` ends (the term stops): each trigger names a Velero Backup that changed; a new namespace
/// triggers the backups made there; every resync period, all of them are looked at.
pub async fn run(ctx: Arc<Ctx>, mut triggers: UnboundedReceiver<String>) {
    let namespaces = created_namespaces(ctx.client.clone());
    futures::pin_mut!(namespaces);
    // The period is the policy's, read at each wait so a policy edit applies at the next one.
    let period = |ctx: &Ctx| {
        ctx.policy
            .current()
            .map(|p| p.backup_sync.period)
            .filter(|p| !p.is_zero())
            .map(|p| Duration::from_nanos(u64::try_from(p.0).unwrap_or(u64::MAX)))
    };
    let mut next_resync = tokio::time::Instant::now();
    // Backups to look at again soon: their NonAdminBackup was still being deleted.
    let mut retries = Retries::new();
    loop {
        let wait = async {
            match period(&ctx) {
                Some(_) => tokio::time::sleep_until(next_resync).await,
                None => futures::future::pending::<()>().await,
            }
        };
        let retry_at = retries.first().map(|(at, _)| *at);
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            t = triggers.next() => match t {
                Some(name) => sync_or_retry(&ctx, name, &mut retries).await,
                None => return,
            },
            () = retry => {
                if let Some((_, name)) = retries.pop_first() {
                    sync_or_retry(&ctx, name, &mut retries).await;
                }
            }
            Some(ns) = namespaces.next() => {
                let names: Vec<String> = ctx
                    .nab.velero
                    .state()
                    .iter()
                    .filter(|b| NAB.origin_of(&b.metadata).is_some_and(|(origin_ns, _)| origin_ns == ns))
                    .map(|b| b.name_any())
                    .collect();
                for name in names {
                    sync_or_retry(&ctx, name, &mut retries).await;
                }
            }
            () = wait => {
                if ctx.ready(&ctx.nab.synced, "Velero Backups").await.is_ok() {
                    let names: Vec<String> = ctx.nab.velero.state().iter().map(|b| b.name_any()).collect();
                    tracing::debug!(backups = names.len(), "backup sync: periodic resync");
                    for name in names {
                        sync_or_retry(&ctx, name, &mut retries).await;
                    }
                }
                next_resync = tokio::time::Instant::now() + period(&ctx).unwrap_or(Duration::from_secs(60));
            }
        }
    }
}

type Retries = BTreeSet<(tokio::time::Instant, String)>;

/// [`sync_one`], remembering the backup for another look in [`RETRY_AFTER`] when it asks for one.
async fn sync_or_retry(ctx: &Ctx, name: String, retries: &mut Retries) {
    if sync_one(ctx, &name).await == Outcome::Retry {
        retries.insert((tokio::time::Instant::now() + RETRY_AFTER, name));
    }
}

/// How soon a backup whose NonAdminBackup was still being deleted is looked at again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    /// The name is held by a NonAdminBackup being deleted (Velero synced its backup back meanwhile): again soon.
    Retry,
}

/// Gives the Velero Backup `name` its NonAdminBackup back when it has none and may have one.
async fn sync_one(ctx: &Ctx, name: &str) -> Outcome {
    let Some(policy) = ctx.policy.current() else {
        return Outcome::Done;
    };
    let Some(b) = ctx.nab.velero.get(&ctx.velero_ref(name)) else {
        return Outcome::Done;
    };
    let tenant_locations = |location: &str| {
        let bsl = ctx.locations.get(&ctx.velero_ref(location))?;
        crate::naming::NABSL
            .origin_of(&bsl.metadata)
            .filter(|_| crate::naming::NABSL.is_tagged(&bsl.metadata))
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
    };
    let Some(origin) = sync_origin(&b, &policy.backup_sync, &tenant_locations) else {
        return Outcome::Done;
    };
    // Any NonAdminBackup of that name means the backup has one (or the name is taken): nothing to do, unless it
    // is on its way out.
    if let Some(existing) = ctx
        .nab
        .objects
        .get(&ObjectRef::new(&origin.name).within(&origin.namespace))
    {
        return if existing.metadata.deletion_timestamp.is_some() {
            Outcome::Retry
        } else {
            Outcome::Done
        };
    }
    let nab = synced_nab(&b, &origin);
    let api: Api<NonAdminBackup> = Api::namespaced(ctx.client.clone(), &origin.namespace);
    ctx.metrics.write("NonAdminBackup");
    match api.create(&PostParams::default(), &nab).await {
        Ok(created) => {
            tracing::info!(nab = %key_of(&created), backup = %name, "backup sync: re-created the NonAdminBackup");
            ctx.publish(
                &created,
                vec![Note {
                    warning: false,
                    reason: "BackupSynced".into(),
                    message: format!("re-created from Velero Backup {name} found in object storage"),
                }],
            );
        }
        // Taken: by a NonAdminBackup the cache has not shown yet, which may be one being deleted.
        Err(kube::Error::Api(e)) if e.code == 409 => return Outcome::Retry,
        // The origin namespace does not exist (yet): its creation, or the periodic resync, tries again.
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::debug!(namespace = %origin.namespace, backup = %name, "backup sync: origin namespace missing")
        }
        // Being deleted: like a missing one, its re-creation brings the NonAdminBackup back.
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("is being terminated") => {
            tracing::debug!(namespace = %origin.namespace, backup = %name, "backup sync: origin namespace terminating")
        }
        Err(e) => tracing::warn!(backup = %name, error = %e, "backup sync: creating the NonAdminBackup failed"),
    }
    Outcome::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::{nacuuid_with, NAB_ORIGIN_NAMESPACE_ANNOTATION, NAB_ORIGIN_NAME_ANNOTATION};
    use crate::velero::{BackupSpec, BackupStatus};

    const UUID: &str = "0b7a1c2e-6f47-4d4e-9a55-3a7c0e6b1f00";

    fn backup(phase: &str, location: &str) -> Backup {
        let id = nacuuid_with("team-a", "nightly", UUID);
        let mut b = Backup::new(
            &id,
            BackupSpec {
                included_namespaces: Some(vec!["team-a".into()]),
                storage_location: Some(location.into()),
                ttl: Some("720h0m0s".into()),
                ..Default::default()
            },
        );
        b.metadata.labels = Some(BTreeMap::from([
            (OADP_LABEL.to_string(), OADP_LABEL_VALUE.to_string()),
            (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
            (NAB_ORIGIN_NACUUID_LABEL.to_string(), id.clone()),
        ]));
        b.metadata.annotations = Some(BTreeMap::from([
            (NAB_ORIGIN_NAME_ANNOTATION.to_string(), "nightly".to_string()),
            (NAB_ORIGIN_NAMESPACE_ANNOTATION.to_string(), "team-a".to_string()),
        ]));
        b.status = Some(BackupStatus {
            phase: Some(phase.into()),
            completion_timestamp: Some("2026-11-23T00:00:00Z".into()),
            ..Default::default()
        });
        b
    }

    fn none(_: &str) -> Option<(String, String)> {
        None
    }

    /// The tenant locations of these tests: `team-a-own` is team-a's NonAdminBackupStorageLocation `own`,
    /// `team-b-own` team-b's.
    fn tenants(location: &str) -> Option<(String, String)> {
        match location {
            "team-a-own" => Some(("team-a".into(), "own".into())),
            "team-b-own" => Some(("team-b".into(), "own".into())),
            _ => None,
        }
    }

    #[test]
    fn a_backup_on_a_tenants_own_location_goes_back_only_to_that_tenant() {
        let sync = open(&["default"]);
        let b = backup("Completed", "team-a-own");
        let o = sync_origin(&b, &sync, &tenants).unwrap();
        assert_eq!(o.location.as_deref(), Some("own"));
        let nab = synced_nab(&b, &o);
        assert_eq!(nab.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(nab.spec.backup_spec.storage_location.as_deref(), Some("own"));
        // Planted: in team-b's bucket, claiming team-a. Never synced, whatever its labels and annotations say.
        assert!(sync_origin(&backup("Completed", "team-b-own"), &sync, &tenants).is_none());
        // No admin location needs opening for a tenant's own backups; unknown locations stay closed.
        assert!(sync_origin(&backup("Completed", "team-a-own"), &BackupSync::default(), &tenants).is_some());
        assert!(sync_origin(&backup("Completed", "archive"), &sync, &tenants).is_none());
    }

    fn open(locations: &[&str]) -> BackupSync {
        BackupSync {
            admin_locations: locations.iter().map(|l| l.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_finished_backup_on_an_open_location_goes_back_to_its_origin() {
        let b = backup("Completed", "default");
        let o = sync_origin(&b, &open(&["default"]), &none).unwrap();
        assert_eq!((o.namespace.as_str(), o.name.as_str()), ("team-a", "nightly"));
        let nab = synced_nab(&b, &o);
        assert_eq!(nab.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(nab.metadata.name.as_deref(), Some("nightly"));
        let labels = nab.metadata.labels.unwrap();
        assert_eq!(labels[NAB_ORIGIN_NACUUID_LABEL], o.nacuuid);
        assert_eq!(labels[NAB_SYNCED_FROM_NACUUID_LABEL], o.nacuuid);
        assert_eq!(nab.spec.backup_spec.storage_location, None);
        assert_eq!(
            nab.spec.backup_spec.included_namespaces,
            Some(vec!["team-a".to_string()])
        );
        assert!(!nab.spec.delete_backup);
        assert!(sync_origin(&backup("PartiallyFailed", "default"), &open(&["default"]), &none).is_some());
    }

    #[test]
    fn nothing_else_is_synced() {
        let sync = open(&["default"]);
        // Locations the policy does not open, the default policy (none), unfinished or failed backups.
        assert!(sync_origin(&backup("Completed", "archive"), &sync, &none).is_none());
        assert!(sync_origin(&backup("Completed", "default"), &BackupSync::default(), &none).is_none());
        for phase in ["New", "InProgress", "Failed", "Deleting"] {
            assert!(
                sync_origin(&backup(phase, "default"), &sync, &none).is_none(),
                "{phase}"
            );
        }
        let mut b = backup("Completed", "default");
        b.status.as_mut().unwrap().completion_timestamp = None;
        assert!(sync_origin(&b, &sync, &none).is_none());
        // Not made by nac, or an origin that does not match the nacuuid (a backup claiming another namespace).
        let mut b = backup("Completed", "default");
        b.metadata.labels.as_mut().unwrap().remove(MANAGED_BY_LABEL);
        assert!(sync_origin(&b, &sync, &none).is_none());
        let mut b = backup("Completed", "default");
        b.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NAB_ORIGIN_NAMESPACE_ANNOTATION.into(), "team-b".into());
        assert!(sync_origin(&b, &sync, &none).is_none());
        // A nacuuid that is not the backup's own name.
        let mut b = backup("Completed", "default");
        b.metadata.name = Some("renamed".into());
        assert!(sync_origin(&b, &sync, &none).is_none());
    }
}
