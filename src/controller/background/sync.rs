//! Backup sync: Velero's own storage sync re-creates Backup objects from object storage (after a disaster, on a
//! rebuilt cluster, or when only the object was deleted), with the labels and annotations nac wrote. A finished one
//! whose NonAdminBackup is gone gets it back, in its origin namespace and under its origin name, so the tenant can
//! restore from it; the NonAdminBackup reconciler then adopts the Velero Backup (`backup::adopt_synced`).
//!
//! Driven by Velero Backup watch events (a synced backup gets its NonAdminBackup within a reconcile), plus a
//! periodic resync of the whole store (policy `backupSync.period`; it also catches a namespace re-created after
//! its backups came back). Only locations the policy lists in `backupSync.adminLocations` are synced.
//!
//! Scheduled runs: each Backup a Velero Schedule nac made runs carries the schedule's identity (Velero copies the
//! Schedule's labels and annotations onto it). While that schedule exists, every run of it gets its NonAdminBackup
//! at once, running or not, in the schedule's namespace, named as the Velero Backup is (`<the schedule's
//! nacuuid>-<timestamp>`, OADP's naming; runs nac named `<schedule>-<timestamp>` before keep those names) and
//! labelled with the schedule's nacuuid; nac then stamps the Backup with that NonAdminBackup's identity, so the rest
//! of nac treats it as any backup of the namespace. A run found in object storage whose schedule is gone is synced
//! like any other backup.
//!
//! No duplicates: the NonAdminBackup's name is the origin name, so a second create (a racing event, another
//! replica's last moments of leadership) is refused by the API server with AlreadyExists.

use crate::api::{NonAdminBackup, NonAdminBackupSpec};
use crate::controller::context::key_of;
use crate::controller::cx::Cx;
use crate::controller::events::Note;
use crate::controller::index::velero::StoreCopy;
use crate::controller::view::View;
use crate::naming::{
    is_nacuuid_for, legacy_run_name, nacuuid_with, Tags, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NAB,
    NAB_ORIGIN_NACUUID_LABEL, NAB_SYNCED_FROM_NACUUID_LABEL, NAS, NAS_ORIGIN_NACUUID_LABEL, OADP_LABEL,
    OADP_LABEL_VALUE,
};
use crate::policy::BackupSync;
use crate::velero::{run_timestamp, SCHEDULE_NAME_LABEL};
use crate::velero::{Backup, BackupStorageLocation, Schedule};
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
    /// The NonAdminSchedule whose Velero Schedule made this backup, while that schedule exists: a new run, not a
    /// backup found in object storage.
    pub scheduled_by: Option<String>,
    /// The nacuuid of that NonAdminSchedule (its Velero Schedule's name), labelled on the run's NonAdminBackup.
    pub schedule: Option<String>,
}

/// The owner of a Velero storage location made for a tenant: `(namespace, NonAdminBackupStorageLocation name)`.
pub type TenantLocations<'a> = &'a dyn Fn(&str) -> Option<(String, String)>;

/// A Velero Schedule nac made that exists now: `(its NonAdminSchedule's namespace, its template's storage
/// location)`.
pub type LiveSchedules<'a> = &'a dyn Fn(&str) -> Option<(String, Option<String>)>;

/// Whether a run's storage location is its schedule's: the template's, or, when the template names none,
/// Velero's default (which Velero writes into the run), never a tenant's own location.
pub fn run_location_ok(template: Option<&str>, run: Option<&str>, tenant_locations: TenantLocations) -> bool {
    match template {
        Some(t) => run == Some(t),
        None => run.is_none_or(|l| tenant_locations(l).is_none()),
    }
}

/// The tenant a Velero BackupStorageLocation belongs to, `(namespace, NonAdminBackupStorageLocation)`, when nac
/// made it for one.
pub fn tenant_location_of(view: &View, velero_namespace: &str, location: &str) -> Option<(String, String)> {
    let bsl = view
        .get::<BackupStorageLocation>()
        .get(&ObjectRef::new(location).within(velero_namespace))?;
    crate::naming::NABSL
        .origin_of(&bsl.metadata)
        .filter(|_| crate::naming::NABSL.is_tagged(&bsl.metadata))
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
}

/// A Backup a Velero Schedule nac made for a NonAdminSchedule ran: where its NonAdminBackup goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub namespace: String,
    /// The NonAdminBackup's name: the Velero Backup's, or the one nac stamped on it in its earlier naming.
    pub name: String,
    /// The Velero Schedule's name.
    pub schedule: String,
    /// The NonAdminSchedule's name.
    pub nas: String,
}

/// The nacuuid of a run's NonAdminBackup: an ordinary one for its namespace and name (a run's own name is longer
/// than a label value may be), its uuid the Backup's uid, so every look at the run finds the same one.
pub fn run_nacuuid(b: &Backup, run: &Run) -> Option<String> {
    let uid = b.metadata.uid.as_deref()?;
    uuid::Uuid::parse_str(uid).ok()?;
    Some(nacuuid_with(&run.namespace, &run.name, uid))
}

/// The run a Velero Backup is, by the schedule identity Velero copied onto it: the schedule label naming a Velero
/// Schedule whose name is the nacuuid of the NonAdminSchedule the origin annotations name, and Velero's name for a
/// run of that schedule.
pub fn run_of(b: &Backup) -> Option<Run> {
    let schedule = NAS.nacuuid(b)?;
    if b.label(SCHEDULE_NAME_LABEL) != Some(schedule) {
        return None;
    }
    let (namespace, nas) = NAS.origin_of(b)?;
    if !is_nacuuid_for(schedule, namespace, nas) {
        return None;
    }
    let backup = b.metadata.name.as_deref()?;
    let ts = run_timestamp(backup, schedule)?;
    Some(Run {
        namespace: namespace.to_string(),
        name: run_nab_name(b, namespace, nas, ts),
        schedule: schedule.to_string(),
        nas: nas.to_string(),
    })
}

/// The name of the NonAdminBackup of run `b` (at `ts`) of NonAdminSchedule `namespace/nas`: the Velero Backup's
/// name, as OADP's controller names it, unless nac stamped the run in its earlier naming (`<nas>-<ts>`), whose
/// NonAdminBackups keep their names.
pub fn run_nab_name(b: &Backup, namespace: &str, nas: &str, ts: &str) -> String {
    let legacy = legacy_run_name(nas, ts);
    match NAB.origin_of(b) {
        Some((n, stamped)) if n == namespace && stamped == legacy => legacy,
        _ => b.name_any(),
    }
}

/// The origin of a Velero Backup that backup sync may give a NonAdminBackup, or None. Pure: the decision is
/// tested without a cluster. The backup must be one nac made (its labels, a nacuuid that is this origin's and is
/// the backup's own name), finished in a restorable phase, and stored on a location the policy opens for sync,
/// or on a tenant's own location **of the origin's namespace**: a tenant controls what is in their bucket, so a
/// backup there claiming another namespace is planted and never synced.
///
/// A run of a Velero Schedule that exists now (same namespace, the backup on the template's location) is synced in
/// any phase but Deleting, on any location: it is what the tenant's schedule makes. The backup must cover its own
/// namespace only.
pub fn sync_origin(
    b: &Backup,
    sync: &BackupSync,
    tenant_locations: TenantLocations,
    live: LiveSchedules,
) -> Option<Origin> {
    if b.label(OADP_LABEL) != Some(OADP_LABEL_VALUE)
        || b.label(MANAGED_BY_LABEL) != Some(MANAGED_BY_VALUE)
        || b.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    let run = run_of(b);
    let (namespace, name, nacuuid) = match NAB.nacuuid(b) {
        Some(nacuuid) => {
            let (namespace, name) = NAB.origin_of(b)?;
            if !is_nacuuid_for(nacuuid, namespace, name) {
                return None;
            }
            // A backup is named by its NonAdminBackup's nacuuid, or a run by its schedule (Velero names runs): then
            // the identity nac stamped on it must name the NonAdminBackup its schedule identity names.
            let named = match &run {
                Some(r) => (r.namespace.as_str(), r.name.as_str()) == (namespace, name),
                None => b.metadata.name.as_deref() == Some(nacuuid),
            };
            if !named {
                return None;
            }
            (namespace.to_string(), name.to_string(), nacuuid.to_string())
        }
        None => {
            let r = run.as_ref()?;
            (r.namespace.clone(), r.name.clone(), run_nacuuid(b, r)?)
        }
    };
    if b.spec.included_namespaces.as_deref() != Some(std::slice::from_ref(&namespace)) {
        return None;
    }
    let status = b.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    let location = b.spec.storage_location.clone();
    let is_live = run.as_ref().is_some_and(|r| {
        live(&r.schedule).is_some_and(|(ns, template_location)| {
            ns == r.namespace && run_location_ok(template_location.as_deref(), location.as_deref(), tenant_locations)
        })
    });
    if is_live {
        if phase == Some("Deleting") {
            return None;
        }
        let own = match location.as_deref().and_then(tenant_locations) {
            Some((owner_ns, nabsl)) if owner_ns == namespace => Some(nabsl),
            Some(_) => return None,
            None => None,
        };
        return Some(Origin {
            namespace,
            name,
            nacuuid,
            location: own,
            schedule: run.as_ref().map(|r| r.schedule.clone()),
            scheduled_by: run.map(|r| r.nas),
        });
    }
    status?.completion_timestamp.as_ref()?;
    if !SYNCED_PHASES.contains(&phase?) {
        return None;
    }
    let location = location.as_deref()?;
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
        namespace,
        name,
        nacuuid,
        location: own,
        scheduled_by: None,
        schedule: None,
    })
}

/// The Event on a NonAdminBackup backup sync created for Velero Backup `backup`: a run of a schedule is a new
/// backup its schedule made, not one found in object storage.
pub fn synced_note(backup: &str, origin: &Origin) -> Note {
    match &origin.scheduled_by {
        Some(nas) => Note {
            warning: false,
            reason: "ScheduledRun".into(),
            message: format!("a run of NonAdminSchedule {nas}: Velero Backup {backup}, made by its Velero Schedule"),
        },
        None => Note {
            warning: false,
            reason: "BackupSynced".into(),
            message: format!("re-created from Velero Backup {backup} found in object storage"),
        },
    }
}

/// The NonAdminBackup backup sync creates for `b`: the origin's name and namespace, the backup's nacuuid as its
/// identity and in the sync label, and the backup's spec as it was made, its storage location named as the tenant
/// names it: their own location's name, or left out for an admin one (tenants never name admin locations).
pub fn synced_nab(b: &Backup, origin: &Origin) -> NonAdminBackup {
    let mut spec = (*b.spec).clone();
    spec.storage_location = origin.location.clone();
    let mut labels = BTreeMap::from([
        (NAB_ORIGIN_NACUUID_LABEL.to_string(), origin.nacuuid.clone()),
        (NAB_SYNCED_FROM_NACUUID_LABEL.to_string(), origin.nacuuid.clone()),
    ]);
    // A run lists with its schedule's (`-l openshift.io/oadp-nas-origin-nacuuid=...`), as OADP's do.
    if let Some(s) = &origin.schedule {
        labels.insert(NAS_ORIGIN_NACUUID_LABEL.to_string(), s.clone());
    }
    let mut nab = NonAdminBackup::new(
        &origin.name,
        NonAdminBackupSpec {
            backup_spec: std::sync::Arc::new(spec),
            delete_backup: false,
            unset: false,
        },
    );
    nab.metadata = ObjectMeta {
        name: Some(origin.name.clone()),
        namespace: Some(origin.namespace.clone()),
        labels: Some(labels),
        // nac's own creates do not go through its mutating webhook, which adds it to everyone else's.
        finalizers: Some(vec![crate::naming::NAB_FINALIZER.to_string()]),
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
        crate::controller::watches::config(),
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
pub async fn run(ctx: Arc<Cx<()>>, mut triggers: UnboundedReceiver<String>) {
    let namespaces = created_namespaces(ctx.client.clone());
    futures::pin_mut!(namespaces);
    // The period is the policy's, read at each wait so a policy edit applies at the next one.
    let period = |ctx: &Cx<()>| ctx.period(|p| p.backup_sync.period);
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
        let retry = crate::controller::jobs::until(retry_at);
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
                    .view
                    .get::<Backup>()
                    .state()
                    .iter()
                    .filter(|b| NAB.origin_of(&***b).is_some_and(|(origin_ns, _)| origin_ns == ns))
                    .map(|b| b.name_any())
                    .collect();
                for name in names {
                    sync_or_retry(&ctx, name, &mut retries).await;
                }
            }
            () = wait => {
                let backups = ctx.view.get::<Backup>();
                if ctx.ready(&backups.synced, "Velero Backups").await.is_ok() {
                    let names: Vec<String> = backups.state().iter().map(|b| b.name_any()).collect();
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
async fn sync_or_retry(ctx: &Cx<()>, name: String, retries: &mut Retries) {
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
async fn sync_one(ctx: &Cx<()>, name: &str) -> Outcome {
    let Some(policy) = ctx.policy.current() else {
        return Outcome::Done;
    };
    let Some(b) = ctx.view.get::<Backup>().get(&ctx.velero_ref(name)) else {
        return Outcome::Done;
    };
    let tenant_locations = |location: &str| tenant_location_of(&ctx.view, &ctx.opts.velero_namespace, location);
    let live = |schedule: &str| {
        let s = ctx.view.get::<Schedule>().get(&ctx.velero_ref(schedule))?;
        let (ns, _) = NAS.origin_of(&s.metadata)?;
        Some((ns.to_string(), s.spec.template.storage_location.clone()))
    };
    let Some(origin) = sync_origin(&b, &policy.backup_sync, &tenant_locations, &live) else {
        return Outcome::Done;
    };
    // A run as Velero made it is stamped with its NonAdminBackup's identity once that NonAdminBackup exists
    // (stamped before, it would look like an orphan to garbage collection for a moment): then the NonAdminBackup
    // adopts it, and the rest of nac (collection, downloads, restores) knows whose it is.
    // Any NonAdminBackup of that name means the backup has one (or the name is taken): nothing to do, unless it
    // is on its way out, or it is this run's own and the run is not stamped yet.
    if let Some(existing) = ctx
        .view
        .get::<NonAdminBackup>()
        .get(&ObjectRef::new(&origin.name).within(&origin.namespace))
    {
        if existing.metadata.deletion_timestamp.is_some() {
            return Outcome::Retry;
        }
        if NAB.nacuuid(&existing.metadata) == Some(origin.nacuuid.as_str()) {
            return stamp_if_new(ctx, &b, &origin).await;
        }
        return Outcome::Done;
    }
    // The store's copy is compact; the NonAdminBackup gets the spec the backup was made with, whole.
    let b = if b.is_compact() {
        match ctx.velero_api::<Backup>().get_opt(name).await {
            Ok(Some(whole)) => Arc::new(whole),
            Ok(None) => return Outcome::Done,
            Err(e) => {
                tracing::warn!(backup = %name, error = %e, "backup sync: reading the backup failed");
                return Outcome::Retry;
            }
        }
    } else {
        b
    };
    let nab = synced_nab(&b, &origin);
    let api: Api<NonAdminBackup> = Api::namespaced(ctx.client.clone(), &origin.namespace);
    ctx.metrics.sync_write("NonAdminBackup");
    match api.create(&PostParams::default(), &nab).await {
        Ok(created) => {
            tracing::info!(nab = %key_of(&created), backup = %name, "backup sync: re-created the NonAdminBackup");
            ctx.publish(&created, vec![synced_note(name, &origin)]);
            return stamp_if_new(ctx, &b, &origin).await;
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

/// A run as Velero made it is stamped with its NonAdminBackup's identity once that NonAdminBackup exists
/// (stamped before, it would look like an orphan to garbage collection for a moment): then the NonAdminBackup
/// adopts it, and the rest of nac (collection, downloads, restores) knows whose it is.
async fn stamp_if_new(ctx: &Cx<()>, b: &Backup, origin: &Origin) -> Outcome {
    if NAB.is_tagged(b) {
        return Outcome::Done;
    }
    let name = b.name_any();
    match stamp_run(ctx, &name, origin).await {
        Ok(()) => Outcome::Done,
        Err(e) => {
            tracing::warn!(backup = %name, error = %e, "backup sync: stamping the scheduled run failed");
            Outcome::Retry
        }
    }
}

/// Adds the NonAdminBackup identity of `origin` to the scheduled run `name` (a merge patch of its labels and
/// annotations only: Velero's own writes to the run are not touched).
async fn stamp_run(ctx: &Cx<()>, name: &str, origin: &Origin) -> Result<(), kube::Error> {
    let meta = NAB.stamp(
        name,
        &ctx.opts.velero_namespace,
        &origin.nacuuid,
        &origin.namespace,
        &origin.name,
        &[],
    );
    let patch = serde_json::json!({"metadata": {"labels": meta.labels, "annotations": meta.annotations}});
    ctx.metrics.sync_write("Backup");
    ctx.velero_api::<Backup>()
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await?;
    tracing::info!(backup = %name, nab = %format!("{}/{}", origin.namespace, origin.name), "backup sync: stamped a scheduled run");
    Ok(())
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

    fn no_live(_: &str) -> Option<(String, Option<String>)> {
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
        let o = sync_origin(&b, &sync, &tenants, &no_live).unwrap();
        assert_eq!(o.location.as_deref(), Some("own"));
        let nab = synced_nab(&b, &o);
        assert_eq!(nab.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(nab.spec.backup_spec.storage_location.as_deref(), Some("own"));
        // Planted: in team-b's bucket, claiming team-a. Never synced, whatever its labels and annotations say.
        assert!(sync_origin(&backup("Completed", "team-b-own"), &sync, &tenants, &no_live).is_none());
        // No admin location needs opening for a tenant's own backups; unknown locations stay closed.
        assert!(sync_origin(
            &backup("Completed", "team-a-own"),
            &BackupSync::default(),
            &tenants,
            &no_live
        )
        .is_some());
        assert!(sync_origin(&backup("Completed", "archive"), &sync, &tenants, &no_live).is_none());
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
        let o = sync_origin(&b, &open(&["default"]), &none, &no_live).unwrap();
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
        assert!(sync_origin(
            &backup("PartiallyFailed", "default"),
            &open(&["default"]),
            &none,
            &no_live
        )
        .is_some());
    }

    const SCHEDULE: &str = "team-a-weekly-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    const RUN_UID: &str = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a";

    /// A run of team-a's schedule `weekly` as Velero makes it: the Schedule's identity, no NonAdminBackup's yet.
    fn run(phase: &str, location: &str) -> Backup {
        let mut b = backup(phase, location);
        b.metadata.name = Some(format!("{SCHEDULE}-20261125020000"));
        b.metadata.uid = Some(RUN_UID.into());
        let meta = NAS.stamp(
            "x",
            "velero",
            SCHEDULE,
            "team-a",
            "weekly",
            &[(SCHEDULE_NAME_LABEL, SCHEDULE)],
        );
        b.metadata.labels = meta.labels;
        b.metadata.annotations = meta.annotations;
        b
    }

    fn live(name: &str) -> Option<(String, Option<String>)> {
        (name == SCHEDULE).then(|| ("team-a".to_string(), Some("default".to_string())))
    }

    #[test]
    fn a_run_of_a_live_schedule_gets_its_nonadminbackup_at_once() {
        let sync = BackupSync::default();
        let b = run("InProgress", "default");
        let r = run_of(&b).unwrap();
        // Named as the Velero Backup, as OADP's controller names a run's NonAdminBackup.
        let name = format!("{SCHEDULE}-20261125020000");
        assert_eq!((r.namespace.as_str(), r.name.as_str()), ("team-a", name.as_str()));
        // Running, on an admin location the policy does not open for sync: still the tenant's, while the schedule
        // that makes it exists.
        let o = sync_origin(&b, &sync, &none, &live).unwrap();
        assert_eq!((o.namespace.as_str(), o.name.as_str()), ("team-a", name.as_str()));
        assert_eq!(o.nacuuid, nacuuid_with("team-a", &name, RUN_UID));
        assert!(o.nacuuid.len() <= crate::naming::MAX_NAME_LEN);
        assert_eq!(o.schedule.as_deref(), Some(SCHEDULE));
        assert_eq!(
            synced_nab(&b, &o).metadata.labels.unwrap()[NAS_ORIGIN_NACUUID_LABEL],
            SCHEDULE,
            "a run lists with its schedule's"
        );
        // A run nac stamped in its earlier naming (`<schedule>-<timestamp>`) keeps that name.
        let mut legacy = b.clone();
        let old_nacuuid = nacuuid_with("team-a", "weekly-20261125020000", RUN_UID);
        let meta = NAB.stamp("x", "velero", &old_nacuuid, "team-a", "weekly-20261125020000", &[]);
        legacy.metadata.labels.as_mut().unwrap().extend(meta.labels.unwrap());
        legacy
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .extend(meta.annotations.unwrap());
        let lo = sync_origin(&legacy, &sync, &none, &live).unwrap();
        assert_eq!(
            (lo.name.as_str(), lo.nacuuid.as_str()),
            ("weekly-20261125020000", old_nacuuid.as_str())
        );
        // Its Event says what it is: a new run of the schedule, not a backup found in object storage.
        assert_eq!(o.scheduled_by.as_deref(), Some("weekly"));
        let note = synced_note("r", &o);
        assert_eq!(note.reason, "ScheduledRun");
        assert!(note.message.contains("NonAdminSchedule weekly") && !note.message.contains("object storage"));
        // Stamped by nac with that identity, it is the same origin.
        let mut stamped = b.clone();
        let meta = NAB.stamp("x", "velero", &o.nacuuid, "team-a", &name, &[]);
        stamped.metadata.labels.as_mut().unwrap().extend(meta.labels.unwrap());
        stamped
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .extend(meta.annotations.unwrap());
        assert_eq!(sync_origin(&stamped, &sync, &none, &live), Some(o.clone()));
        // Stamped as another NonAdminBackup than its schedule identity names: nobody's.
        let mut other = stamped.clone();
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NAB_ORIGIN_NAME_ANNOTATION.into(), "weekly-20261125030000".into());
        assert_eq!(sync_origin(&other, &sync, &none, &live), None);
        // Being deleted; not on the template's location; covering another namespace; the schedule gone (then the
        // usual rules: finished, on an open location).
        assert_eq!(sync_origin(&run("Deleting", "default"), &sync, &none, &live), None);
        assert_eq!(sync_origin(&run("InProgress", "other"), &sync, &none, &live), None);
        let mut wide = run("InProgress", "default");
        wide.spec_mut().included_namespaces = Some(vec!["team-a".into(), "team-b".into()]);
        assert_eq!(sync_origin(&wide, &sync, &none, &live), None);
        assert_eq!(sync_origin(&b, &sync, &none, &no_live), None);
        // Found in object storage once its schedule is gone: synced as any backup, and said so.
        let found = sync_origin(&run("Completed", "default"), &open(&["default"]), &none, &no_live).unwrap();
        assert_eq!(found.scheduled_by, None);
        assert_eq!(synced_note("r", &found).reason, "BackupSynced");
        // A template naming no location: the run is on Velero's default, never on a tenant's own location.
        let unnamed = |name: &str| (name == SCHEDULE).then(|| ("team-a".to_string(), None));
        assert!(sync_origin(&run("InProgress", "default"), &sync, &tenants, &unnamed).is_some());
        assert_eq!(
            sync_origin(&run("InProgress", "team-b-own"), &sync, &tenants, &unnamed),
            None
        );
        // A run on a tenant's own location is that tenant's only.
        let own = |name: &str| (name == SCHEDULE).then(|| ("team-a".to_string(), Some("team-b-own".to_string())));
        assert_eq!(
            sync_origin(&run("InProgress", "team-b-own"), &sync, &tenants, &own),
            None
        );
        let own = |name: &str| (name == SCHEDULE).then(|| ("team-a".to_string(), Some("team-a-own".to_string())));
        let o = sync_origin(&run("InProgress", "team-a-own"), &sync, &tenants, &own).unwrap();
        assert_eq!(o.location.as_deref(), Some("own"));
        // Not a run: the schedule label missing, or naming another schedule, or a name Velero would not give.
        let mut b = run("InProgress", "default");
        b.metadata.labels.as_mut().unwrap().remove(SCHEDULE_NAME_LABEL);
        assert_eq!(run_of(&b), None);
        let mut b = run("InProgress", "default");
        b.metadata.name = Some(format!("{SCHEDULE}-x"));
        assert_eq!(run_of(&b), None);
    }

    #[test]
    fn nothing_else_is_synced() {
        let sync = open(&["default"]);
        // Locations the policy does not open, the default policy (none), unfinished or failed backups.
        assert!(sync_origin(&backup("Completed", "archive"), &sync, &none, &no_live).is_none());
        assert!(sync_origin(&backup("Completed", "default"), &BackupSync::default(), &none, &no_live).is_none());
        for phase in ["New", "InProgress", "Failed", "Deleting"] {
            assert!(
                sync_origin(&backup(phase, "default"), &sync, &none, &no_live).is_none(),
                "{phase}"
            );
        }
        let mut b = backup("Completed", "default");
        b.status.as_mut().unwrap().completion_timestamp = None;
        assert!(sync_origin(&b, &sync, &none, &no_live).is_none());
        // Not made by nac, or an origin that does not match the nacuuid (a backup claiming another namespace).
        let mut b = backup("Completed", "default");
        b.metadata.labels.as_mut().unwrap().remove(MANAGED_BY_LABEL);
        assert!(sync_origin(&b, &sync, &none, &no_live).is_none());
        let mut b = backup("Completed", "default");
        b.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NAB_ORIGIN_NAMESPACE_ANNOTATION.into(), "team-b".into());
        assert!(sync_origin(&b, &sync, &none, &no_live).is_none());
        // A nacuuid that is not the backup's own name.
        let mut b = backup("Completed", "default");
        b.metadata.name = Some("renamed".into());
        assert!(sync_origin(&b, &sync, &none, &no_live).is_none());
    }
}
