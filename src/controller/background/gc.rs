//! Garbage collection: Velero objects nac made whose tenant object is gone are removed. Orphans appear when a
//! tenant object goes without its finalizer running (removed by hand, the CRD deleted, a crash between two
//! writes) and when a download request goes (it has no finalizer). A Velero Schedule whose NonAdminSchedule is gone
//! is collected too (it would go on making backups); the backups it made are kept like any other.
//!
//! Driven by the tenant objects' delete events (the objects made for that origin are looked at) and by Velero
//! object events whose origin is not in the store, plus a sweep of everything at the start of each term and
//! every `garbageCollection.period` of the policy (default 24h; 0: no sweep).
//!
//! What is never collected:
//! - anything without nac's labels and origin annotations;
//! - anything whose origin exists and carries the same identity (nacuuid, or uid for download requests);
//! - a Velero Backup whose data is in object storage (Completed, PartiallyFailed, Failed and the phases after
//!   the upload): deleting its object would only make Velero's own sync bring it back a minute later (OADP's
//!   GC and sync fight this way), and backup sync gives it its NonAdminBackup back where it may. It stays until
//!   Velero expires it with its TTL;
//! - a DeleteBackupRequest Velero has not processed: the data deletion the tenant asked for finishes first.
//!
//! A store that says "orphan" is confirmed with a read of the origin from the API server before anything is
//! deleted, and the delete is conditional on the object's uid: a lagging cache never costs a live object.

use crate::controller::context::Shared;
use crate::controller::cx::Cx;
use crate::controller::jobs::{Candidate, Trigger};
use crate::controller::kind::{Kind, VeleroSide};
use crate::controller::view::{Collect, Presence, View};
use crate::naming::{Origin, Tags, MANAGED_BY_LABEL, MANAGED_BY_VALUE, OADP_LABEL, OADP_LABEL_VALUE};
use crate::velero::{Backup, DeleteBackupRequest};
use futures::channel::mpsc::UnboundedReceiver;
use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::reflector::{Lookup, ObjectRef};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// Velero objects of type `V` made for tenant kind `K`.
pub struct MadeBy<K, V> {
    kind: String,
    kept: fn(&V, &View, &str) -> Option<&'static str>,
    meta: fn(&V) -> ObjectMeta,
    of: PhantomData<fn() -> K>,
}

impl<K, V> MadeBy<K, V>
where
    K: Kind + Lookup<DynamicType = ()> + Clone,
    V: VeleroSide + Lookup<DynamicType = ()> + Tags,
{
    /// Collected once their origin is gone, unless `kept` (given the view and the Velero namespace) says why not.
    pub fn keep_when(kept: fn(&V, &View, &str) -> Option<&'static str>) -> Arc<dyn Collect> {
        Self::with_meta(kept, |v| v.meta().clone())
    }

    /// The same, with the metadata read by `meta` (for store copies that keep labels elsewhere).
    pub fn with_meta(
        kept: fn(&V, &View, &str) -> Option<&'static str>,
        meta: fn(&V) -> ObjectMeta,
    ) -> Arc<dyn Collect> {
        Arc::new(MadeBy::<K, V> {
            kind: <V as Resource>::kind(&()).into_owned(),
            kept,
            meta,
            of: PhantomData,
        })
    }

    /// Collected once their origin is gone.
    pub fn always() -> Arc<dyn Collect> {
        Self::keep_when(|_, _, _| None)
    }
}

fn presence(found: Option<Option<String>>) -> Presence {
    found.map_or(Presence::Missing, Presence::Present)
}

impl<K, V> Collect for MadeBy<K, V>
where
    K: Kind + Lookup<DynamicType = ()> + Clone,
    V: VeleroSide + Lookup<DynamicType = ()> + Tags,
{
    fn kind(&self) -> &str {
        &self.kind
    }

    fn origin(&self) -> Origin {
        K::ORIGIN
    }

    fn names_where(&self, view: &View, keep: &dyn Fn(&dyn Tags) -> bool) -> Vec<String> {
        let tagged = K::ORIGIN;
        view.get::<V>()
            .state()
            .iter()
            .filter(|o| tagged.is_tagged(&***o) && keep(&***o))
            .map(|o| o.name_any())
            .collect()
    }

    fn stored(&self, view: &View, velero_namespace: &str, name: &str) -> Option<(ObjectMeta, Option<&'static str>)> {
        let o = view.get::<V>().get(&ObjectRef::new(name).within(velero_namespace))?;
        Some(((self.meta)(&o), (self.kept)(&o, view, velero_namespace)))
    }

    fn owner_in_store(&self, view: &View, namespace: &str, name: &str) -> Presence {
        presence(
            view.get::<K>()
                .get(&ObjectRef::new(name).within(namespace))
                .map(|o| K::identity(&o)),
        )
    }

    fn owner_in_api<'a>(
        &'a self,
        client: Client,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Presence, kube::Error>> {
        Box::pin(async move {
            let found = Api::<K>::namespaced(client, namespace).get_opt(name).await?;
            Ok(presence(found.map(|o| K::identity(&o))))
        })
    }

    fn delete<'a>(
        &'a self,
        shared: &'a Shared,
        name: &'a str,
        dp: &'a DeleteParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move { shared.velero_api::<V>().delete(name, dp).await.map(|_| ()) })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep(&'static str),
    Collect,
}

/// Whether a Velero object nac may have made goes. Pure. `persisted` is the kind's own reason to keep it
/// whatever its origin (a backup's data in storage, a data deletion in flight).
pub fn verdict(meta: &ObjectMeta, origin: &Origin, persisted: Option<&'static str>, owner: &Presence) -> Verdict {
    let labels = meta.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    if label(MANAGED_BY_LABEL) != Some(MANAGED_BY_VALUE) || label(OADP_LABEL) != Some(OADP_LABEL_VALUE) {
        return Verdict::Keep("not made by nac");
    }
    let Some(nacuuid) = origin.nacuuid(meta) else {
        return Verdict::Keep("not made by nac");
    };
    if origin.origin_of(meta).is_none() {
        return Verdict::Keep("origin unknown");
    }
    match owner {
        Presence::Present(Some(id)) if id == nacuuid => return Verdict::Keep("origin exists"),
        Presence::Present(None) => return Verdict::Keep("origin has no identity recorded yet"),
        // Its origin is gone, or was replaced by another object of the same name.
        Presence::Present(Some(_)) | Presence::Missing => {}
    }
    match persisted {
        Some(reason) => Verdict::Keep(reason),
        None => Verdict::Collect,
    }
}

/// Velero phases of a backup whose data Velero has written to object storage.
const STORED_BACKUP_PHASES: &[&str] = &[
    "Completed",
    "PartiallyFailed",
    "Failed",
    "WaitingForPluginOperations",
    "WaitingForPluginOperationsPartiallyFailed",
    "Finalizing",
    "FinalizingPartiallyFailed",
    "Deleting",
];

/// Why a Velero Backup whose origin is gone stays. `location_gone`: its storage location no longer exists, so
/// Velero can neither expire it nor sync it back, and the object only blocks a later sync of the same data from
/// a new location (Velero skips backups whose name exists): it goes, the data stays in the bucket.
pub fn backup_kept(b: &Backup, location_gone: bool) -> Option<&'static str> {
    let s = b.status.as_ref();
    let phase = s.and_then(|s| s.phase.as_deref());
    if !crate::velero::deletable_now(phase) {
        return Some("Velero is starting or running it (deleting it now would stall Velero's backup queue)");
    }
    if location_gone {
        return None;
    }
    (phase.is_some_and(|p| STORED_BACKUP_PHASES.contains(&p))
        || s.and_then(|s| s.completion_timestamp.as_ref()).is_some())
    .then_some("its data is in object storage (Velero's sync would bring it back; its TTL expires it)")
}

pub fn delete_request_kept(r: &DeleteBackupRequest) -> Option<&'static str> {
    (r.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Processed"))
        .then_some("Velero is still deleting the backup's data")
}

/// The objects made for `origin` `namespace/name` that the stores hold.
fn made_for(view: &View, origin: &Origin, namespace: &str, name: &str) -> Vec<Candidate> {
    let mut out = Vec::new();
    for made in view.made().iter().filter(|m| m.origin() == *origin) {
        for n in made.names_where(view, &|meta| origin.owns(meta, namespace, name)) {
            out.push(Candidate {
                kind: made.kind().to_string(),
                name: n,
            });
        }
    }
    out
}

/// Looks at one object; collects it when it is an orphan. Returns whether it was deleted.
async fn collect(ctx: &Cx<()>, c: &Candidate) -> Result<bool, kube::Error> {
    let Some(made) = ctx.view.made().iter().find(|m| m.kind() == c.kind) else {
        return Ok(false);
    };
    let Some((meta, persisted)) = made.stored(&ctx.view, &ctx.opts.velero_namespace, &c.name) else {
        return Ok(false);
    };
    let origin = &made.origin();
    let Some((ns, name)) = origin.origin_of(&meta).map(|(a, b)| (a.to_string(), b.to_string())) else {
        return Ok(false);
    };
    if verdict(&meta, origin, persisted, &made.owner_in_store(&ctx.view, &ns, &name)) != Verdict::Collect {
        return Ok(false);
    }
    // nac deleted it a moment ago (its owner's cleanup) and the store still shows it.
    if ctx.recent.was_deleted(meta.uid.as_deref()) {
        tracing::debug!(kind = c.kind, object = %c.name, "garbage collection: nac deleted it already");
        return Ok(false);
    }
    // The store may lag behind a fresh create: the API server decides.
    let owner = made.owner_in_api(ctx.client.clone(), &ns, &name).await?;
    if let Verdict::Keep(why) = verdict(&meta, origin, persisted, &owner) {
        tracing::debug!(kind = c.kind, object = %c.name, why, "garbage collection: kept");
        return Ok(false);
    }
    // Only the version judged: Velero may have moved it on since (Queued to ReadyToStart, which must not go).
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
        }),
        ..DeleteParams::background()
    };
    ctx.metrics.write(made.kind());
    let res = made.delete(&ctx.shared, &c.name, &dp).await;
    match res {
        Ok(()) => {
            ctx.recent.deleted(meta.uid.as_deref());
            ctx.metrics.collected(made.kind());
            tracing::info!(
                kind = c.kind,
                object = %c.name,
                origin = %format!("{ns}/{name}"),
                "garbage collection: deleted an orphan (its {} is gone)",
                origin.kind
            );
            Ok(true)
        }
        // Gone already, changed since it was judged, or replaced by a new object of the same name: the next
        // trigger or sweep judges what is there now.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Looks at each candidate once; failures are logged and left to the next trigger or sweep.
async fn collect_all(ctx: &Cx<()>, candidates: BTreeSet<Candidate>) -> usize {
    let mut deleted = 0;
    for c in candidates {
        match collect(ctx, &c).await {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(e) => tracing::warn!(kind = c.kind, object = %c.name, error = %e, "garbage collection failed"),
        }
    }
    deleted
}

/// One sweep: every object nac may have made.
pub async fn sweep(ctx: &Cx<()>) -> usize {
    let all: BTreeSet<Candidate> = ctx
        .view
        .made()
        .iter()
        .flat_map(|made| {
            made.names_where(&ctx.view, &|_| true)
                .into_iter()
                .map(|name| Candidate {
                    kind: made.kind().to_string(),
                    name,
                })
        })
        .collect();
    let n = all.len();
    let deleted = collect_all(ctx, all).await;
    tracing::info!(looked_at = n, deleted, "garbage collection: sweep done");
    deleted
}

/// How long after a tenant object's delete event its Velero objects are looked at once more: a reconcile that
/// was creating one when the object went finishes within this.
const SECOND_LOOK: Duration = Duration::from_secs(10);

/// Runs until `triggers` ends (the term stops): a sweep once the stores are listed, then triggers as they come,
/// and a sweep every period of the policy.
pub async fn run(ctx: Arc<Cx<()>>, mut triggers: UnboundedReceiver<Trigger>) {
    // Wait for the first lists (bounded per store; a store that never syncs, e.g. a missing Velero CRD, leaves
    // the collector to event triggers only, each confirmed by the API).
    for _ in 0..600 {
        if ctx.view.all_synced() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let period = |ctx: &Cx<()>| ctx.period(|p| p.garbage_collection.period);
    let mut next_sweep = tokio::time::Instant::now();
    // Origins to look at again (one delay for all: the queue stays in time order). The objects made for them
    // are found again then, so one an in-flight reconcile created after the delete event is among them.
    let mut second_looks: std::collections::VecDeque<(tokio::time::Instant, Origin, String, String)> =
        std::collections::VecDeque::new();
    let mut first = true;
    loop {
        let sweep_at = async {
            match (first, period(&ctx)) {
                (true, _) | (_, Some(_)) => tokio::time::sleep_until(next_sweep).await,
                _ => futures::future::pending::<()>().await,
            }
        };
        let look_at = second_looks.front().map(|(at, ..)| *at);
        let look = crate::controller::jobs::until(look_at);
        tokio::select! {
            t = triggers.next() => match t {
                None => return,
                // Until the start sweep ran, it covers what a trigger would (it comes once the stores are listed,
                // or after the wait above; later triggers are acted on whatever the stores say, each confirmed by
                // the API server).
                Some(_) if first => {}
                Some(Trigger::Gone { origin, namespace, name }) => {
                    let found: BTreeSet<Candidate> = made_for(&ctx.view, &origin, &namespace, &name).into_iter().collect();
                    second_looks.push_back((tokio::time::Instant::now() + SECOND_LOOK, origin, namespace, name));
                    collect_all(&ctx, found).await;
                }
                Some(Trigger::Object(c)) => {
                    collect_all(&ctx, BTreeSet::from([c])).await;
                }
            },
            () = look => {
                if let Some((_, origin, namespace, name)) = second_looks.pop_front() {
                    let found = made_for(&ctx.view, &origin, &namespace, &name).into_iter().collect();
                    collect_all(&ctx, found).await;
                }
            }
            () = sweep_at => {
                first = false;
                sweep(&ctx).await;
                next_sweep = tokio::time::Instant::now() + period(&ctx).unwrap_or(Duration::from_secs(3600));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::{NAB, NABSL, NADR, NAR};
    use std::collections::BTreeMap;

    fn meta(origin: &Origin, nacuuid: &str) -> ObjectMeta {
        origin.stamp(nacuuid, "velero", nacuuid, "team-a", "nightly", &[])
    }

    #[test]
    fn an_object_whose_origin_is_gone_or_replaced_goes() {
        for origin in [&NAB, &NAR, &NABSL, &NADR] {
            let m = meta(origin, "u1");
            assert_eq!(
                verdict(&m, origin, None, &Presence::Missing),
                Verdict::Collect,
                "{}",
                origin.kind
            );
            assert_eq!(
                verdict(&m, origin, None, &Presence::Present(Some("u2".into()))),
                Verdict::Collect,
                "replaced by a new object of the same name: {}",
                origin.kind
            );
        }
    }

    #[test]
    fn live_unknown_or_foreign_objects_stay() {
        let m = meta(&NAB, "u1");
        assert_eq!(
            verdict(&m, &NAB, None, &Presence::Present(Some("u1".into()))),
            Verdict::Keep("origin exists")
        );
        assert!(matches!(
            verdict(&m, &NAB, None, &Presence::Present(None)),
            Verdict::Keep(_)
        ));
        // Without nac's labels, or without the origin annotations: never touched.
        for strip in [MANAGED_BY_LABEL, OADP_LABEL, NAB.nacuuid_label] {
            let mut m = meta(&NAB, "u1");
            m.labels.as_mut().unwrap().remove(strip);
            assert_eq!(
                verdict(&m, &NAB, None, &Presence::Missing),
                Verdict::Keep("not made by nac"),
                "{strip}"
            );
        }
        let mut m = meta(&NAB, "u1");
        m.labels
            .as_mut()
            .unwrap()
            .insert(MANAGED_BY_LABEL.into(), "someone-else".into());
        assert!(matches!(verdict(&m, &NAB, None, &Presence::Missing), Verdict::Keep(_)));
        let mut m = meta(&NAB, "u1");
        m.annotations = Some(BTreeMap::new());
        assert_eq!(
            verdict(&m, &NAB, None, &Presence::Missing),
            Verdict::Keep("origin unknown")
        );
        // Another kind's label does not make it this kind's.
        assert!(matches!(
            verdict(&meta(&NAR, "u1"), &NAB, None, &Presence::Missing),
            Verdict::Keep(_)
        ));
    }

    #[test]
    fn stored_backups_and_deletions_in_flight_stay() {
        let m = meta(&NAB, "u1");
        let mut b = Backup::new("u1", Default::default());
        b.metadata = m.clone();
        assert_eq!(backup_kept(&b, false), None, "never started: nothing in storage");
        for phase in [
            "Completed",
            "PartiallyFailed",
            "Failed",
            "Finalizing",
            "Deleting",
            "ReadyToStart",
            "InProgress",
        ] {
            b.status = Some(crate::velero::BackupStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            let kept = backup_kept(&b, false);
            assert!(kept.is_some(), "{phase}");
            let stranded = backup_kept(&b, true);
            assert_eq!(
                stranded.is_some(),
                matches!(phase, "ReadyToStart" | "InProgress"),
                "{phase}: its location is gone"
            );
            assert!(matches!(verdict(&m, &NAB, kept, &Presence::Missing), Verdict::Keep(_)));
        }
        for phase in ["New", "Queued", "FailedValidation"] {
            b.status = Some(crate::velero::BackupStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            assert_eq!(backup_kept(&b, false), None, "{phase}");
        }
        let mut r = DeleteBackupRequest::new("u1", Default::default());
        assert!(delete_request_kept(&r).is_some());
        r.status = Some(crate::velero::DeleteBackupRequestStatus {
            phase: Some("Processed".into()),
            ..Default::default()
        });
        assert_eq!(delete_request_kept(&r), None);
    }
}
