//! The second tier of the skeleton, for the kinds queued in Velero (backups, restores), written once on top of
//! the base ([`Kind`]): first sight, admission, idempotent create of the Velero object,
//! ownership check, queue position, status mirror, conditions and forward-only phases. A queued kind brings only
//! its own decisions through [`Tenant`] (how it is admitted, what Velero object it builds, what status it mirrors,
//! how it is deleted), in one file of its own (`backup.rs`, `restore.rs`), and takes its base entries from
//! [`queued_kind!`](crate::queued_kind).

use super::conditions::{find, now_seconds};
use super::context::{key_of, key_of_ref, Error, QueueDepth, Shared, Waiters};
use super::counts::{PhaseCounts, Volumes};
use super::cx::Cx;
use super::index::synced::Synced;
use super::index::velero::{StoreCopy, VeleroObject};
use super::kind::{ensure_nacuuid, nacuuid, set_status};
use super::queue::QueueIndex;
use super::status::{self, Mirrors, TenantStatus};
use super::view::Registry;
use super::watches::{self, VolumeProgress, WatchIndex};
use super::write::CompactStatus;
use super::write::{create_or_get, delete_as_seen, CACHE_WAIT};
use crate::api::condition::QUEUED;
use crate::api::NonAdminPhase;
use crate::metrics::Metrics;
use crate::policy::Policy;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use futures::{Stream, TryStreamExt};
use kube::runtime::controller::Action;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{store::Writer, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::Mutex;

/// The table entries of a tenant kind's types: its Velero object's queue fields and its status's common fields.
/// `failure` turns the Velero object's status into the failure text events quote.
#[macro_export]
macro_rules! tenant_types {
    (
        velero: $velero:ty, spec: $spec:ty, velero_status: $vstatus:ident, kind: $kind:literal,
        unfinished: $unfinished:path, failure: $failure:expr,
        status: $status:ty, reference: $field:ident, $reference:ty $(,)?
    ) => {
        impl $crate::controller::index::velero::VeleroObject for $velero {
            type Spec = $spec;
            const KIND: &'static str = $kind;

            fn observe(&self) -> $crate::controller::queue::Observed {
                let status = self.status.as_ref();
                $crate::controller::queue::Observed::new(
                    kube::ResourceExt::name_any(self),
                    self.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    status.and_then(|s| s.phase.as_deref()),
                    status.and_then(|s| s.queue_position),
                    $unfinished,
                )
            }

            fn phase(&self) -> Option<&str> {
                self.status.as_ref().and_then(|s| s.phase.as_deref())
            }

            fn keep_queue_fields_only(&mut self) {
                self.spec = $crate::controller::index::velero::EmptySpec::empty();
                if let Some(s) = self.status.as_mut() {
                    *s = $vstatus {
                        phase: s.phase.take(),
                        queue_position: s.queue_position,
                        ..Default::default()
                    };
                }
            }
        }

        impl $crate::controller::status::TenantStatus for $status {
            fn phase(&self) -> Option<$crate::api::NonAdminPhase> {
                self.phase
            }
            fn phase_mut(&mut self) -> &mut Option<$crate::api::NonAdminPhase> {
                &mut self.phase
            }
            fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
                &self.conditions
            }
            fn conditions_mut(&mut self) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
                &mut self.conditions
            }
            fn queue_info_mut(&mut self) -> &mut Option<$crate::api::QueueInfo> {
                &mut self.queue_info
            }
            fn recorded(&self) -> (Option<&str>, Option<&str>) {
                let r = self.$field.as_ref();
                (
                    r.and_then(|r| r.nacuuid.as_deref()),
                    r.and_then(|r| r.name.as_deref()),
                )
            }
            fn record(&mut self, nacuuid: &str, velero_namespace: &str) {
                let r = self.$field.get_or_insert_with(<$reference>::default);
                r.nacuuid = Some(nacuuid.to_string());
                r.name.get_or_insert_with(|| nacuuid.to_string());
                r.namespace = Some(velero_namespace.to_string());
            }
            fn summary(&self) -> $crate::controller::status::Summary<'_> {
                let r = self.$field.as_ref();
                let vs: Option<&$vstatus> = r.and_then(|v| v.status.as_deref());
                $crate::controller::status::Summary {
                    phase: self.phase,
                    conditions: &self.conditions,
                    velero_phase: vs.and_then(|v| v.phase.as_deref()),
                    failure: vs.and_then($failure),
                    velero_name: r.and_then(|v| Some(format!("{}/{}", v.namespace.as_deref()?, v.name.as_deref()?))),
                    errors: vs.and_then(|v| v.errors).unwrap_or(0),
                    warnings: vs.and_then(|v| v.warnings).unwrap_or(0),
                }
            }
        }
    };
}

/// One tenant kind's own decisions; everything else is the skeleton below.
pub trait Tenant: Mirrors {
    type Velero: VeleroObject;

    /// Which of the policy's quotas a new object of the kind counts against.
    const COUNTED: crate::policy::Counted;

    /// The kind's stores, queue index and triggers in the context.
    fn state(ctx: &Cx<Self::State>) -> &KindState<Self>;

    /// Whether a Velero object is one nac keeps in the kind's store (and reconciles for): by default those
    /// carrying the kind's identity label.
    fn keeps<T: crate::naming::Tags + ?Sized>(meta: &T) -> bool {
        Self::ORIGIN.is_tagged(meta)
    }

    /// Leaves the spec out of the store's copy of a settled object (its Velero object made, its copy compact):
    /// the spec is read only to admit the object, which a settled one never is again (`apply` checks). By
    /// default kept.
    fn leave_out_spec(&mut self) {}

    /// Whether this copy left its spec out (then it is never admitted from).
    fn spec_left_out(&self) -> bool {
        false
    }

    /// The BackingOff message of an object that came without a spec (OADP's API admits one); `None` when it has
    /// one.
    fn spec_unset(&self) -> Option<String>;

    /// Decisions before anything else on a live object (e.g. a deletion the spec asks for). `None`: go on.
    fn early(
        _api: &Api<Self>,
        _obj: &Self,
        _ctx: &Cx<Self::State>,
    ) -> impl Future<Output = Result<Option<Action>, Error>> + Send {
        async { Ok(None) }
    }

    /// An object whose Velero object exists already by design (e.g. re-created by backup sync): adopted instead
    /// of admitted. `None`: admit it as new.
    fn adopt(
        _api: &Api<Self>,
        _obj: &Self,
        _ctx: &Cx<Self::State>,
    ) -> impl Future<Output = Result<Option<Action>, Error>> + Send {
        async { Ok(None) }
    }

    /// What the current policy would refuse in the spec of an object whose Velero object exists (one nac took
    /// over from OADP's non-admin controller): shown in its status, nothing undone. `None`: nothing.
    fn refused_now(_obj: &Self, _policy: &Policy) -> Option<String> {
        None
    }

    /// The policy and the kind's own rules, and whether what it depends on is ready.
    fn admit(
        obj: &Self,
        policy: &Policy,
        ctx: &Cx<Self::State>,
    ) -> impl Future<Output = Result<Admission<<Self::Velero as VeleroObject>::Spec>, Error>> + Send;

    /// What to do with an admitted object instead of creating its Velero object (a restore preview: reported,
    /// never made). `Continue` hands the spec on to be created.
    fn divert(
        _api: &Api<Self>,
        _obj: &Self,
        spec: <Self::Velero as VeleroObject>::Spec,
        _ctx: &Cx<Self::State>,
    ) -> impl Future<Output = Result<ControlFlow<Action, <Self::Velero as VeleroObject>::Spec>, Error>> + Send {
        async { Ok(ControlFlow::Continue(spec)) }
    }

    /// The Velero object for an admitted object, named by its nacuuid.
    fn build(
        obj: &Self,
        nacuuid: &str,
        velero_namespace: &str,
        spec: <Self::Velero as VeleroObject>::Spec,
    ) -> Self::Velero;

    /// The observations of the Velero object the status mirrors.
    fn view(
        ctx: &Cx<Self::State>,
        obj: &Self,
        velero: &Self::Velero,
        nacuuid: &str,
    ) -> impl Future<Output = Self::View> + Send;
}

/// The base entries ([`Kind`]) every queued kind takes from the skeleton below, for inside its `impl Kind`:
/// everything but its identity constants and its delete path.
#[macro_export]
macro_rules! queued_kind {
    () => {
        fn recorded_nacuuid(status: &Self::Status) -> Option<&str> {
            $crate::controller::status::TenantStatus::recorded(status).0
        }

        fn notes(
            old: Option<&Self::Status>,
            new: &Self::Status,
        ) -> Vec<$crate::controller::events::Note> {
            $crate::controller::status::notes::<Self>(old, new)
        }

        fn depth(ctx: &$crate::controller::cx::Cx<Self::State>) -> Option<&$crate::controller::context::QueueDepth> {
            Some(&<Self as $crate::controller::tenant::Tenant>::state(ctx).depth)
        }

        fn waiting(ctx: &$crate::controller::cx::Cx<Self::State>) -> Option<&$crate::controller::context::Waiters<Self>> {
            Some(&<Self as $crate::controller::tenant::Tenant>::state(ctx).waiting)
        }

        fn ready(
            ctx: &$crate::controller::cx::Cx<Self::State>,
        ) -> impl std::future::Future<Output = Result<(), $crate::controller::Error>> + Send {
            $crate::controller::tenant::ready::<Self>(ctx)
        }

        fn apply(
            api: &kube::Api<Self>,
            obj: std::sync::Arc<Self>,
            ctx: &$crate::controller::cx::Cx<Self::State>,
        ) -> impl std::future::Future<Output = Result<kube::runtime::controller::Action, $crate::controller::Error>> + Send
        {
            $crate::controller::tenant::apply(api, obj, ctx)
        }
    };
}

/// One tenant kind's share of a term: its store, its Velero objects (nac's own, in the Velero namespace) and their
/// queue index, the channel that triggers its reconciles, and its queue-depth gauge.
pub struct KindState<K: Tenant> {
    pub objects: Store<K>,
    /// The tenant objects' watch has completed its first list.
    pub objects_synced: Synced,
    pub velero: Store<K::Velero>,
    /// The Velero objects' watch has completed its first list.
    pub synced: Synced,
    pub queue: Arc<Mutex<QueueIndex>>,
    pub triggers: UnboundedSender<ObjectRef<K>>,
    pub trigger: Trigger<K>,
    pub depth: QueueDepth,
    /// Objects of this kind waiting for others (see [`Waiters`]).
    pub waiting: Arc<Waiters<K>>,
}

/// The write ends of a [`KindState`], for the watch streams that feed it.
pub struct KindWiring<K: Tenant> {
    pub objects: Writer<K>,
    pub velero: Writer<K::Velero>,
    pub triggers: UnboundedReceiver<ObjectRef<K>>,
}

impl<K: Tenant> super::kind::Build for KindState<K> {
    type Wiring = KindWiring<K>;

    /// Its stores (shared through the view) and its waiters (woken through the view).
    fn build(shared: &Shared, reg: &mut Registry) -> (Self, KindWiring<K>) {
        let (objects, objects_writer) = reg.watched::<K>();
        let (velero, velero_writer) = reg.watched::<K::Velero>();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let trigger = Trigger {
            velero: velero.store.clone(),
            namespace: shared.opts.velero_namespace.clone(),
            triggers: tx.clone(),
        };
        let waiting = Arc::new(Waiters::default());
        super::kind::wake_on(reg, &waiting, &tx);
        let state = KindState {
            objects: objects.store,
            objects_synced: objects.synced,
            velero: velero.store,
            synced: velero.synced,
            queue: Arc::new(Mutex::new(QueueIndex::new())),
            triggers: tx,
            trigger,
            depth: QueueDepth::new(&shared.metrics, K::CONTROLLER),
            waiting,
        };
        let wiring = KindWiring {
            objects: objects_writer,
            velero: velero_writer,
            triggers: rx,
        };
        (state, wiring)
    }
}

impl<K: Tenant> KindState<K> {
    /// Velero object `velero`'s identity and queue position, as the status mirrors them. The object judged decides
    /// whether it still waits, not the index's copy of it: a copy read from the API server can be finished before
    /// the index has heard, and a finished backup shown as waiting in line would be wrong.
    pub fn placed(&self, velero_namespace: &str, velero: &K::Velero, nacuuid: &str) -> status::Placed {
        let name = velero.name_any();
        status::Placed {
            nacuuid: nacuuid.to_string(),
            queue_position: if velero.observe().unfinished {
                self.position(&name)
            } else {
                0
            },
            name,
            namespace: velero_namespace.to_string(),
        }
    }

    /// The queue position to report for Velero object `name` (0 when unknown): see [`super::queue::reported`].
    pub fn position(&self, name: &str) -> i64 {
        self.queue
            .lock()
            .expect("queue lock")
            .reported_position(name)
            .unwrap_or(0)
    }

    /// Records a Velero object nac just created in the queue index (the watch event may come later) and triggers
    /// the tenant objects whose position that moved.
    pub fn note(&self, v: &K::Velero) {
        let changed = self.queue.lock().expect("queue lock").upsert(v.observe());
        self.trigger.send(changed);
    }

    /// Counts a trigger in the queue-depth gauge when the object still exists.
    pub fn enqueued(&self, r: &ObjectRef<K>) {
        if self.objects.get(r).is_some() {
            self.depth.enqueue(key_of_ref(r));
        }
    }
}

/// Maps Velero object names back to their tenant objects and triggers those: the one way every watch-fed index
/// (and every create nac makes) turns "these Velero objects moved" into reconciles.
pub struct Trigger<K: Tenant> {
    velero: Store<K::Velero>,
    namespace: String,
    triggers: UnboundedSender<ObjectRef<K>>,
}

impl<K: Tenant> Clone for Trigger<K> {
    fn clone(&self) -> Self {
        Trigger {
            velero: self.velero.clone(),
            namespace: self.namespace.clone(),
            triggers: self.triggers.clone(),
        }
    }
}

impl<K: Tenant> Trigger<K> {
    /// Triggers the owners of the Velero objects `names` (those nac made; others are skipped).
    pub fn send(&self, names: Vec<String>) {
        for name in names {
            let owner = self
                .velero
                .get(&ObjectRef::new(&name).within(&self.namespace))
                // A label in Velero's short form of a long name (a scheduled run's): looked for by that form.
                .or_else(|| {
                    (name.len() == crate::naming::MAX_NAME_LEN).then(|| {
                        self.velero.find(|v| {
                            crate::naming::velero_label_value(v.meta().name.as_deref().unwrap_or_default())
                                == name.as_str()
                        })
                    })?
                })
                .and_then(|v| K::ORIGIN.owner(&*v));
            if let Some(r) = owner {
                let _ = self.triggers.unbounded_send(r);
            }
        }
    }
}

/// What admission decided about a tenant object.
pub enum Admission<S> {
    /// Create the Velero object with this spec.
    Admit(S),
    /// BackingOff with this condition reason and message, until the object changes.
    Refuse { reason: &'static str, message: String },
    /// Not yet: what it depends on is not ready.
    Wait(Waiting),
}

impl<S> Admission<S> {
    /// Admits `Ok`, refuses `Err` with the kind's invalid-spec reason.
    pub fn from_spec<K: Tenant>(spec: Result<S, String>) -> Self {
        match spec {
            Ok(s) => Admission::Admit(s),
            Err(message) => Admission::Refuse {
                reason: K::WORDS.invalid_reason,
                message,
            },
        }
    }
}

/// A wait for something a tenant object depends on. No timer per object beyond one wake-up at `until`: changes of
/// the objects named in `on` ([`dependency`] keys) wake it.
pub struct Waiting {
    /// Queued=False reason.
    pub reason: &'static str,
    /// What it waits for, and until when.
    pub message: String,
    /// When the wait gives up (the next admission refuses it).
    pub until: k8s_openapi::jiff::Timestamp,
    pub on: Vec<String>,
}

/// The key of an object others may wait for: a tenant object (`NonAdminBackup`) or a Velero one.
pub fn dependency(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}:{namespace}/{name}")
}

/// Refuses the object with `reason` and `message`: BackingOff until the user changes it.
pub async fn reject<K: Tenant>(
    api: &Api<K>,
    obj: &K,
    ctx: &Shared,
    reason: &str,
    message: &str,
) -> Result<Action, Error> {
    let now = now_seconds();
    set_status(api, obj, ctx, |s| status::refused::<K>(s, reason, message, now)).await?;
    Ok(Action::await_change())
}

/// Whether the object's Velero object was created: answered here only. Created, or (being deleted now) it was
/// queued or went missing after creation; a Queued condition of a wait does not count.
pub fn was_created<K: Tenant>(obj: &K) -> bool {
    let w = K::WORDS;
    obj.status_ref().is_some_and(|s| {
        s.phase() == Some(NonAdminPhase::Created)
            || find(s.conditions(), QUEUED)
                .is_some_and(|c| c.reason == w.scheduled_reason || c.reason == w.not_found_reason)
    })
}

/// Name of the object's Velero object: as recorded in status, else the nacuuid.
pub fn velero_name<K: Tenant>(obj: &K, nacuuid: &str) -> String {
    obj.status_ref()
        .and_then(|s| s.recorded().1)
        .filter(|n| !n.is_empty())
        .unwrap_or(nacuuid)
        .to_string()
}

/// Refuses a Velero object found under this object's name that was made for another tenant object.
pub fn check_owner<K: Tenant>(velero: &K::Velero, obj: &K) -> Result<(), Error> {
    if K::ORIGIN.owns(velero, &obj.namespace().unwrap_or_default(), &obj.name_any()) {
        Ok(())
    } else {
        Err(Error::Inconsistent(format!(
            "Velero {} {} belongs to another {}; refusing to use it for {}",
            <K::Velero as VeleroObject>::KIND,
            velero.name_any(),
            K::ORIGIN.kind,
            key_of(obj)
        )))
    }
}

/// The queued kinds' decisions read their Velero objects' store.
pub async fn ready<K: Tenant>(ctx: &Cx<K::State>) -> Result<(), Error> {
    let what = format!("Velero {}s", <K::Velero as VeleroObject>::KIND);
    ctx.ready(&K::state(ctx).synced, &what).await
}

/// Create/update path of a live object (read fresh by the base: decisions below read the status).
pub async fn apply<K: Tenant>(api: &Api<K>, obj: Arc<K>, ctx: &Cx<K::State>) -> Result<Action, Error> {
    if let Some(action) = K::early(api, &obj, ctx).await? {
        return Ok(action);
    }
    if obj.status_ref().and_then(|s| s.phase()) == Some(NonAdminPhase::Deleting) {
        // Phases only move forward; the deletion proceeds once the object is deleted.
        return Ok(Action::await_change());
    }
    if was_created(&*obj) {
        return mirror_existing(api, &obj, ctx).await;
    }
    if let Some(message) = obj.spec_unset() {
        return reject(api, &obj, ctx, K::WORDS.invalid_reason, &message).await;
    }
    if let Some(action) = K::adopt(api, &obj, ctx).await? {
        return Ok(action);
    }
    let Some(policy) = ctx.policy.current_in(&obj.namespace().unwrap_or_default()) else {
        // No valid policy yet (or, with tiers, the namespace's labels not known yet): the spec cannot be validated, so nothing is created.
        set_status(api, &obj, ctx, status::first_sight::<K::Status>).await?;
        tracing::info!(object = %key_of(&*obj), "no valid policy loaded yet; will retry");
        return Ok(Action::requeue(ctx.opts.policy_retry));
    };
    // Unreachable for a store copy without its spec (only settled, Created ones are), yet admitting from one would
    // build the Velero object from an empty spec: the object as the API server has it instead.
    let obj = if obj.spec_left_out() {
        Arc::new(api.get(&obj.name_any()).await?)
    } else {
        obj
    };
    let me = kube::runtime::reflector::ObjectRef::from_obj(&*obj);
    let admission = match K::admit(&obj, &policy, ctx).await {
        Ok(a) => a,
        Err(Error::NotReady(why)) => {
            // Retried with backoff by the error policy; meanwhile the tenant sees why nothing happens.
            let now = now_seconds();
            set_status(api, &obj, ctx, |s| status::retrying::<K>(s, &why, now)).await?;
            return Err(Error::NotReady(why));
        }
        Err(e) => return Err(e),
    };
    let spec = match admission {
        Admission::Admit(spec) => {
            K::state(ctx).waiting.forget(&me);
            if let Some(message) = over_quota(&*obj, &policy, ctx) {
                return reject(api, &obj, ctx, crate::policy::QUOTA_EXCEEDED, &message).await;
            }
            spec
        }
        Admission::Refuse { reason, message } => {
            K::state(ctx).waiting.forget(&me);
            return reject(api, &obj, ctx, reason, &message).await;
        }
        Admission::Wait(w) => {
            let now = now_seconds();
            set_status(api, &obj, ctx, |s| status::waiting::<K>(s, w.reason, &w.message, now)).await?;
            K::state(ctx).waiting.register(me, w.on);
            // One wake-up at the deadline; the dependencies' changes wake it before.
            let left = w.until.duration_since(now).unsigned_abs();
            return Ok(Action::requeue(left.max(std::time::Duration::from_secs(1))));
        }
    };
    let spec = match K::divert(api, &obj, spec, ctx).await? {
        ControlFlow::Break(action) => return Ok(action),
        ControlFlow::Continue(spec) => spec,
    };
    let res = create_and_mirror(api, obj.clone(), spec, ctx).await;
    if res.is_err() {
        // Valid but not created yet (the error is retried): show that much.
        let now = now_seconds();
        let _ = set_status(api, &obj, ctx, |s| status::validated::<K>(s, now)).await;
    }
    res
}

/// The quota a new object would take its namespace over, counted again from nac's caches (the webhook counted
/// before it was stored): only the objects created before it count, so of two created at once the later one is
/// refused, not both. Without the counts (no cluster, or not read yet) nothing limited is created.
fn over_quota<K: Tenant>(obj: &K, policy: &crate::policy::Policy, ctx: &Cx<K::State>) -> Option<String> {
    if !policy.quotas.limits(K::COUNTED) {
        return None;
    }
    let ns = obj.namespace().unwrap_or_default();
    let Some(usage) = ctx.policy.usage().filter(|u| u.synced()) else {
        return Some(format!(
            "{} not created: nac cannot count the objects of namespace {ns} its quotas limit yet",
            K::ORIGIN.kind
        ));
    };
    let created = obj.meta().creation_timestamp.as_ref().map_or(0, |t| t.0.as_second());
    let name = obj.name_any();
    let use_ = usage.usage(&ns, Some((created, &name)), now_seconds().as_second());
    crate::policy::check_quota(policy, K::COUNTED, &ns, &use_)
        .err()
        .map(|r| r.message)
}

async fn create_and_mirror<K: Tenant>(
    api: &Api<K>,
    obj: Arc<K>,
    spec: <K::Velero as VeleroObject>::Spec,
    ctx: &Cx<K::State>,
) -> Result<Action, Error> {
    let now = now_seconds();
    let vns = ctx.opts.velero_namespace.clone();
    let (obj, nacuuid) = ensure_nacuuid(api, obj, ctx, |s, u| status::accepted::<K>(s, u, &vns, now)).await?;
    let name = velero_name(&*obj, &nacuuid);
    let state = K::state(ctx);
    let velero = match state.velero.get(&ctx.velero_ref(&name)) {
        Some(v) => (*v).clone(),
        None => {
            let wanted = <K as Tenant>::build(&obj, &nacuuid, &ctx.opts.velero_namespace, spec);
            let kind = <K::Velero as VeleroObject>::KIND;
            let v = create_or_get(&ctx.velero_api::<K::Velero>(), &wanted, &ctx.metrics, kind).await?;
            tracing::info!(object = %key_of(&*obj), velero = %name, "Velero {kind} created");
            ctx.recent.made(&v);
            v
        }
    };
    check_owner(&velero, &*obj)?;
    state.note(&velero);
    mirror(api, &obj, &velero, &nacuuid, ctx).await
}

/// Status mirror of an existing Velero object (or the report that it vanished: never re-created).
async fn mirror_existing<K: Tenant>(api: &Api<K>, obj: &K, ctx: &Cx<K::State>) -> Result<Action, Error> {
    let nacuuid =
        nacuuid(obj).ok_or_else(|| Error::Inconsistent(format!("{} is Created but has no nacuuid", key_of(obj))))?;
    let name = velero_name(obj, &nacuuid);
    let store = &K::state(ctx).velero;
    if store.get(&ctx.velero_ref(&name)).is_none() {
        // nac created it a moment ago and the Velero watch has not shown it yet: its watch event triggers this
        // object's reconcile, so no read (the requeue is only the wake-up should that event never come).
        let since = ctx.recent.made_since::<K::Velero>(&ctx.opts.velero_namespace, &name);
        if let Some(left) = since.and_then(|s| CACHE_WAIT.checked_sub(s)) {
            return Ok(Action::requeue(left));
        }
    }
    match ctx.get_velero(store, &name).await? {
        Some(v) => {
            check_owner(&v, obj)?;
            mirror(api, obj, &v, &nacuuid, ctx).await
        }
        None => {
            let now = now_seconds();
            let vns = ctx.opts.velero_namespace.clone();
            let up = set_status(api, obj, ctx, |s| status::missing::<K>(s, &vns, &name, now)).await?;
            if up.written {
                let kind = <K::Velero as VeleroObject>::KIND;
                tracing::warn!(object = %key_of(obj), velero = %name, "Velero {kind} vanished");
            }
            Ok(Action::await_change())
        }
    }
}

/// Mirrors `velero` into the status of `obj`: phase Created, Queued, the kind's view.
pub async fn mirror<K: Tenant>(
    api: &Api<K>,
    obj: &K,
    velero: &K::Velero,
    nacuuid: &str,
    ctx: &Cx<K::State>,
) -> Result<Action, Error> {
    let view = K::view(ctx, obj, velero, nacuuid).await;
    let now = now_seconds();
    // Judged only where the spec is at hand (a store copy leaves out the spec of objects nac admitted itself).
    let refused = match ctx.policy.current_in(&obj.namespace().unwrap_or_default()) {
        Some(p) if !obj.spec_left_out() => Some(K::refused_now(obj, &p)),
        _ => None,
    };
    let plan = |s: Option<&K::Status>| {
        let mut next = status::created::<K>(s, &view, now);
        if let Some(r) = &refused {
            status::refused_now(&mut next, r.as_deref(), now);
        }
        next
    };
    let up = set_status(api, obj, ctx, plan).await?;
    if up.incomplete {
        // The store's copy of the Velero object is compact (it compares by fingerprint: enough to see that the
        // status's copy is current, the settled case, with no request) and the status's copy is behind: the
        // object as the API server has it.
        let name = velero.name_any();
        let Some(whole) = ctx.velero_api::<K::Velero>().get_opt(&name).await? else {
            // Gone meanwhile: its delete event brings this object back.
            return Ok(Action::await_change());
        };
        check_owner(&whole, obj)?;
        let view = K::view(ctx, obj, &whole, nacuuid).await;
        set_status(api, &up.object, ctx, |s| {
            let mut next = status::created::<K>(s, &view, now);
            if let Some(r) = &refused {
                status::refused_now(&mut next, r.as_deref(), now);
            }
            next
        })
        .await?;
        return Ok(K::retry_after(&view).map_or_else(Action::await_change, Action::requeue));
    }
    Ok(K::retry_after(&view).map_or_else(Action::await_change, Action::requeue))
}

/// What a deleting object has in Velero.
pub struct Target<K: Tenant> {
    pub nacuuid: String,
    pub name: String,
    /// The Velero object, when it exists and is this object's own.
    pub object: Option<K::Velero>,
}

/// The Velero object of a deleting object; `None` when it never got a nacuuid (nothing was created).
pub async fn target<K: Tenant>(obj: &K, ctx: &Cx<K::State>) -> Result<Option<Target<K>>, Error> {
    let Some(nacuuid) = nacuuid(obj) else {
        return Ok(None);
    };
    let name = velero_name(obj, &nacuuid);
    let object = ctx
        .get_velero(&K::state(ctx).velero, &name)
        .await?
        .filter(|v| check_owner(v, obj).is_ok());
    Ok(Some(Target { nacuuid, name, object }))
}

/// Deletes the Velero object (once: not again while it is being deleted). Whether it is gone now.
pub async fn delete_velero<K: Tenant>(ctx: &Shared, name: &str, velero: &K::Velero) -> Result<bool, Error> {
    if velero.meta().deletion_timestamp.is_some() {
        return Ok(false);
    }
    if !crate::velero::deletable_now(velero.phase()) {
        // Woken by Velero's next phase change of the object.
        return Err(Error::Waiting(format!(
            "waiting for Velero to move {} {}/{name} on before deleting it (deleting it in phase {} would stall \
             Velero's queue for every tenant)",
            <K::Velero as VeleroObject>::KIND,
            ctx.opts.velero_namespace,
            velero.phase().unwrap_or_default()
        )));
    }
    // Only the version judged above: Velero may have moved it on (Queued to ReadyToStart) since the store's copy.
    let kind = <K::Velero as VeleroObject>::KIND;
    match delete_as_seen(&ctx.velero_api::<K::Velero>(), name, velero.meta(), &ctx.metrics, kind).await? {
        Some(gone) => {
            ctx.recent.deleted(velero.meta().uid.as_deref());
            Ok(gone)
        }
        // Woken by the watch's newer version, which is judged again.
        None => Err(Error::Waiting(format!(
            "Velero changed {kind} {}/{name} since nac read it; deciding again on its new version",
            ctx.opts.velero_namespace
        ))),
    }
}

/// The controller of one tenant kind: its own objects, its Velero objects (mapped back through the origin
/// annotations; `seen` hears of every one, `orphan` of those whose tenant object is not in the store, `deleted` of its own objects'
/// delete events), and the coalesced triggers of queue moves and per-volume progress. Every trigger counts in the kind's queue-depth gauge.
pub fn controller<K: Tenant>(
    ctx: &Arc<Cx<K::State>>,
    wiring: KindWiring<K>,
    seen: impl Fn(&K::Velero) + Send + Sync + 'static,
    orphan: impl Fn(&K::Velero, &ObjectRef<K>) + Send + Sync + 'static,
    deleted: impl Fn(&K) + Send + Sync + 'static,
) -> Controller<K>
where
    QueueIndex: watches::WatchIndex<K::Velero>,
{
    let client = ctx.client.clone();
    let config = ControllerConfig::default().concurrency(ctx.opts.concurrency);
    let (c1, c2, c3, c4) = (ctx.clone(), ctx.clone(), ctx.clone(), ctx.clone());
    let objects = tenant_stream(
        Api::<K>::all(client.clone()),
        wiring.objects,
        K::state(ctx).objects_synced.clone(),
        move |o: &K| {
            K::state(&c4).depth.gone(&key_of(o));
            deleted(o)
        },
    )
    .map(move |r| {
        if let Ok(o) = &r {
            let me = ObjectRef::from_obj(o);
            K::state(&c1).enqueued(&me);
            // Whatever waits for this object hears of its change.
            c1.view.wake(&dependency(
                K::ORIGIN.kind,
                me.namespace.as_deref().unwrap_or_default(),
                &me.name,
            ));
        }
        r
    });
    let velero = velero_stream(
        Api::namespaced(client, &ctx.opts.velero_namespace),
        K::state(ctx),
        wiring.velero,
        ctx.metrics.clone(),
    );
    Controller::for_stream(objects, K::state(ctx).objects.clone())
        .with_config(config)
        .watches_stream(velero, move |v: K::Velero| {
            seen(&v);
            let r = K::ORIGIN.owner::<K>(&v)?;
            orphan(&v, &r);
            K::state(&c2).enqueued(&r);
            // A Velero object's progress is its tenant object's: waiters hear of it without waiting for the mirror.
            c2.view.wake(&dependency(
                K::ORIGIN.kind,
                r.namespace.as_deref().unwrap_or_default(),
                &r.name,
            ));
            Some(r)
        })
        .reconcile_on(
            watches::coalesce(wiring.triggers, ctx.opts.queue_update_interval).map(move |r| {
                K::state(&c3).enqueued(&r);
                r
            }),
        )
}

// ---- The watches of a queued kind ----

/// A tenant kind's objects for its controller (all namespaces), reflected into `writer`; `synced` is marked after
/// the first list, `deleted` hears each object's delete event (garbage collection).
pub fn tenant_stream<K: Tenant>(
    api: Api<K>,
    writer: Writer<K>,
    synced: Synced,
    deleted: impl Fn(&K) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send {
    let store = writer.as_reader();
    let s = watches::watcher(api)
        .default_backoff()
        .modify(tenant_store_copy::<K>)
        .reflect(writer)
        .inspect_ok(move |ev| match ev {
            Event::InitDone => synced.mark(),
            Event::Delete(o) => deleted(o),
            _ => {}
        });
    watches::log_errors(super::index::after_init::applied_after_init(s, store), K::CONTROLLER)
}

/// What a tenant kind's store keeps of an object: no managedFields (the API server's, often the largest part),
/// and the kind's compact copy.
pub fn tenant_store_copy<K: Tenant>(o: &mut K) {
    o.meta_mut().managed_fields = None;
    // One without nac's identity label did not come through nac's webhook (OADP's controller made it): it keeps
    // its spec, which the status mirror judges against the current policy (`Tenant::refused_now`).
    let admitted_by_nac = K::ORIGIN.is_tagged(o.meta());
    o.make_compact();
    if admitted_by_nac && o.status_ref().is_some_and(CompactStatus::is_settled) {
        o.leave_out_spec();
    }
}

/// What a tenant kind's Velero store keeps of a Velero object: of nac's own a compact copy, of the others (only
/// counted in the queue) the queue fields.
pub fn velero_store_copy<K: Tenant>(v: &mut K::Velero) {
    v.meta_mut().managed_fields = None;
    if K::keeps(v) {
        v.make_compact();
    } else {
        v.keep_queue_fields_only();
    }
}

/// The Velero objects of a tenant kind (Backups, Restores) in the Velero namespace. All of them feed the queue
/// index (admins' objects wait in the same Velero queue, as OADP's controller counts them); only nac's (with the
/// kind's nacuuid label) are kept in the store and trigger reconciles. Queue moves trigger the tenant objects whose
/// position changed.
pub fn velero_stream<K: Tenant>(
    api: Api<K::Velero>,
    state: &KindState<K>,
    mut writer: Writer<K::Velero>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<K::Velero, watcher::Error>> + Send
where
    QueueIndex: WatchIndex<K::Velero>,
{
    let store = writer.as_reader();
    let index = state.queue.clone();
    let synced = state.synced.clone();
    let trigger = state.trigger.clone();
    let s = watches::watcher(api)
        .default_backoff()
        .modify(velero_store_copy::<K>)
        .map_ok(move |ev| {
            // The index first: once the store reports ready, positions must be complete too.
            let changed = index.lock().expect("queue lock").apply(&ev);
            watches::apply_filtered(&mut writer, &ev, |v: &K::Velero| K::keeps(v));
            if matches!(ev, Event::InitDone) {
                synced.mark();
            }
            trigger.send(changed);
            watches::set_gauge(&metrics, <K::Velero as VeleroObject>::KIND, store.len());
            ev
        })
        .touched_objects();
    watches::log_errors(s, <K::Velero as VeleroObject>::KIND)
}

/// Per-volume objects of a queued kind's Velero objects (a backup's DataUploads and PodVolumeBackups, a restore's
/// DataDownloads and PodVolumeRestores): counted by owner and phase; a change of a count triggers the tenant
/// object of that owner. Only feeds `counts`, so the stream yields nothing. `synced` is marked after the first
/// list, or when the kind does not exist (no such objects to count).
pub fn volume_count_stream<V: VolumeProgress, K: Tenant>(
    api: Api<V>,
    counts: Arc<Mutex<PhaseCounts>>,
    synced: Synced,
    owners: &KindState<K>,
) -> impl Stream<Item = ()> + Send {
    let trigger = owners.trigger.clone();
    let s = kube::runtime::watcher(api, watches::config().labels(V::OWNER_LABEL))
        .default_backoff()
        .inspect_err({
            let synced = synced.clone();
            move |e| watches::mark_if_missing(&synced, e)
        })
        .map_ok(move |ev| {
            let changed = counts.lock().expect("counts lock").apply(&ev);
            if matches!(ev, Event::InitDone) {
                synced.mark();
            }
            trigger.send(changed);
        });
    watches::log_errors(s, V::WATCH).map(|_| ())
}

/// Runs a queued kind's controller beside the count of its Velero objects' per-volume progress into `volumes`
/// (data mover `D`, file system `F`), which triggers its tenant objects, until `stop`.
pub async fn run_counting<K: Tenant, D: VolumeProgress, F: VolumeProgress>(
    controller: Controller<K>,
    ctx: &Arc<Cx<K::State>>,
    volumes: &Volumes,
    stop: tokio_util::sync::CancellationToken,
) {
    let owners = K::state(ctx);
    let d = volume_count_stream(
        ctx.velero_api::<D>(),
        volumes.data_mover.clone(),
        volumes.data_mover_synced.clone(),
        owners,
    );
    let f = volume_count_stream(
        ctx.velero_api::<F>(),
        volumes.file_system.clone(),
        volumes.file_system_synced.clone(),
        owners,
    );
    let counts = futures::stream::select(d, f)
        .take_until(stop.clone().cancelled_owned())
        .for_each(|_| async {});
    tokio::join!(super::kind::run(controller, ctx, stop), counts);
}
