//! The base every tenant kind runs on, written once: the reconcile entry (span, queue-depth gauge, metrics),
//! finalizer handling, the wait for the stores a kind reads, the stale-cache guard, the error policy, the status
//! write with its Events, and the identity lookup. A kind brings only what differs through [`Kind`]; the kinds
//! queued in Velero (backups, restores) add the second tier, [`Tenant`](super::tenant::Tenant), on top.

use super::context::{key_of, Error, QueueDepth, Shared, Waiters};
use super::cx::Cx;
use super::events::Note;
use super::index::synced::Synced;
use super::jobs::Jobs;
use super::view::Registry;
use super::watches;
use super::write::{update_status, with_finalizer, HasStatus, StatusUpdate};
use crate::naming::{generate_nacuuid, is_nacuuid_for, Origin};
use futures::channel::mpsc::UnboundedSender;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::controller::Action;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::finalizer::Event as Finalizer;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What a tenant kind brings to the base.
pub trait Kind: HasStatus + Resource<Scope = NamespaceResourceScope> {
    /// Identity scheme (nacuuid label, origin annotations, finalizer: none when empty), shared with the webhooks,
    /// backup sync and garbage collection.
    const ORIGIN: Origin;
    /// Controller name in metrics and logs.
    const CONTROLLER: &'static str;
    /// What the kind keeps for a term: its stores, indexes, triggers and waiters ([`Stores`](super::stores::Stores) for one Velero
    /// object per tenant object, [`KindState`](super::tenant::KindState) for a queued kind).
    type State: Build;

    /// What the kind registers beyond its state's stores and waiters: its hooks on others' watches, what it makes
    /// for the collector when its state does not say.
    fn wire(_state: &Self::State, _reg: &mut Registry) {}

    /// Its controller for the term (its watches, fed into its state), run until `stop` (by [`run`]).
    fn controller(
        ctx: Arc<Cx<Self::State>>,
        wiring: <Self::State as Build>::Wiring,
        jobs: &Jobs,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> + Send;

    /// The nacuuid the status records (none for a kind whose identity is not a nacuuid).
    fn recorded_nacuuid(status: &Self::Status) -> Option<&str>;

    /// The identity its Velero objects carry (garbage collection keeps those whose origin has it): by default
    /// its nacuuid.
    fn identity(obj: &Self) -> Option<String> {
        nacuuid(obj)
    }

    /// The Events of a status transition.
    fn notes(old: Option<&Self::Status>, new: &Self::Status) -> Vec<Note>;

    /// The kind's queue-depth gauge, when it keeps one.
    fn depth(_ctx: &Cx<Self::State>) -> Option<&QueueDepth> {
        None
    }

    /// The objects of this kind waiting for others, when it has waits.
    fn waiting(_ctx: &Cx<Self::State>) -> Option<&Waiters<Self>> {
        None
    }

    /// Waits (bounded) until the stores the kind's decisions read have their first list.
    fn ready(ctx: &Cx<Self::State>) -> impl Future<Output = Result<(), Error>> + Send;

    /// The create/update path of a live object, as fresh as nac's own last write of it.
    fn apply(
        api: &Api<Self>,
        obj: Arc<Self>,
        ctx: &Cx<Self::State>,
    ) -> impl Future<Output = Result<Action, Error>> + Send;

    /// The finalizer's cleanup: the kind's delete path (never called for a kind without a finalizer).
    fn cleanup(
        api: &Api<Self>,
        obj: Arc<Self>,
        ctx: &Cx<Self::State>,
    ) -> impl Future<Output = Result<Action, Error>> + Send;
}

/// A kind's state for a new term, built with the write ends its watches feed, registering in the term's registry
/// what others read of it (its stores) and what wakes it (its waiters).
pub trait Build: Sized + Send + Sync + 'static {
    /// The write ends of the state, for its watches and triggers.
    type Wiring: Send + 'static;
    fn build(shared: &Shared, reg: &mut Registry) -> (Self, Self::Wiring);
}

/// The reconcile entry point of every tenant controller: span, queue-depth gauge, metrics, finalizer.
pub async fn reconcile<K: Kind>(obj: Arc<K>, ctx: Arc<Cx<K::State>>) -> Result<Action, Error> {
    let key = key_of(&*obj);
    let span = tracing::info_span!("reconcile", controller = K::CONTROLLER, object = %key);
    let depth = K::depth(&ctx);
    if let Some(d) = depth {
        d.start(&key);
    }
    let start = Instant::now();
    let res = async {
        tracing::debug!("reconcile started");
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
        let finalizer = K::ORIGIN.finalizer;
        let res = if finalizer.is_empty() {
            live(&api, obj, &ctx).await
        } else {
            with_finalizer(&api, finalizer, obj, &ctx.recent, &ctx.metrics, |ev| async {
                match ev {
                    Finalizer::Apply(o) => live(&api, o, &ctx).await,
                    Finalizer::Cleanup(o) => {
                        // Whatever it waited for, it waits no more.
                        if let Some(w) = K::waiting(&ctx) {
                            w.forget(&ObjectRef::from_obj(&*o));
                        }
                        K::cleanup(&api, o, &ctx).await
                    }
                }
            })
            .await
        };
        tracing::debug!(ok = res.is_ok(), "reconcile finished");
        res
    }
    .instrument(span)
    .await;
    if let Some(d) = depth {
        d.finish();
    }
    ctx.record(K::CONTROLLER, &key, &res, start.elapsed());
    res
}

/// A live object: once the stores are listed, and never planned from a cache behind nac's own last write (the
/// reconcile that the write's watch event triggers plans instead).
async fn live<K: Kind>(api: &Api<K>, obj: Arc<K>, ctx: &Cx<K::State>) -> Result<Action, Error> {
    K::ready(ctx).await?;
    match ctx.fresh(api, obj).await? {
        Ok(obj) => K::apply(api, obj, ctx).await,
        Err(wait) => Ok(Action::requeue(wait)),
    }
}

/// Retry pacing after a failed reconcile: a fixed pace while waiting for Velero, backoff on errors.
pub fn error_policy<K: Kind>(obj: Arc<K>, err: &Error, ctx: Arc<Cx<K::State>>) -> Action {
    let key = key_of(&*obj);
    let controller = K::CONTROLLER;
    if err.is_waiting() {
        tracing::debug!(controller, object = %key, reason = %err, "waiting");
        return Action::requeue(ctx.opts.deletion_poll);
    }
    let delay = ctx.next_backoff(controller, &key);
    tracing::warn!(controller, object = %key, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Writes the status `plan` computes (only when it changes) and publishes the Events of the transition.
pub async fn set_status<K: Kind>(
    api: &Api<K>,
    obj: &K,
    ctx: &Shared,
    plan: impl Fn(Option<&K::Status>) -> K::Status,
) -> Result<StatusUpdate<K>, Error> {
    let up = update_status(api, obj, &ctx.recent, &ctx.metrics, plan).await?;
    if let Some(new) = up.status() {
        ctx.publish(&up.object, K::notes(up.old.as_ref(), new));
    }
    Ok(up)
}

/// The nacuuid of a tenant object: the one recorded in its status, else the label the webhook stamped (trusted
/// only when it has the shape nac gives this object's nacuuid).
pub fn nacuuid<K: Kind>(obj: &K) -> Option<String> {
    if let Some(u) = obj.status_ref().and_then(K::recorded_nacuuid).filter(|u| !u.is_empty()) {
        return Some(u.to_string());
    }
    let v = obj.labels().get(K::ORIGIN.nacuuid_label)?;
    let ns = obj.namespace().unwrap_or_default();
    if is_nacuuid_for(v, &ns, &obj.name_any()) {
        Some(v.clone())
    } else {
        tracing::warn!(object = %obj.name_any(), namespace = %ns, value = %v, "ignoring a nacuuid label nac did not generate for this object");
        None
    }
}

/// The object's nacuuid, or (no webhook label) a new one persisted in its status through `record` before anything
/// is made, so a crash cannot lead to a second Velero object. `record` writes the given nacuuid into a status.
/// The object is read fresh first: the cache may not show a nacuuid written moments ago.
pub async fn ensure_nacuuid<K: Kind>(
    api: &Api<K>,
    obj: Arc<K>,
    ctx: &Shared,
    record: impl Fn(Option<&K::Status>, &str) -> K::Status,
) -> Result<(Arc<K>, String), Error> {
    if let Some(u) = nacuuid(&*obj) {
        return Ok((obj, u));
    }
    let fresh = api.get(&obj.name_any()).await?;
    if let Some(u) = nacuuid(&fresh) {
        return Ok((Arc::new(fresh), u));
    }
    let generated = generate_nacuuid(&fresh.namespace().unwrap_or_default(), &fresh.name_any());
    let up = set_status(api, &fresh, ctx, |s| {
        let recorded = s.and_then(K::recorded_nacuuid).filter(|u| !u.is_empty());
        record(s, recorded.unwrap_or(&generated))
    })
    .await?;
    let nacuuid = nacuuid(&up.object)
        .ok_or_else(|| Error::Inconsistent(format!("no nacuuid on {} after recording one", key_of(&*obj))))?;
    tracing::info!(object = %key_of(&*obj), %nacuuid, label = K::ORIGIN.nacuuid_label, "no nacuuid label; generated one");
    Ok((Arc::new(up.object), nacuuid))
}

/// The metadata of the Velero object nac makes for `obj`: named by its nacuuid, in the Velero namespace, with the
/// kind's identity (nacuuid label, origin annotations).
pub fn made_meta<K: Kind>(
    obj: &K,
    nacuuid: &str,
    velero_namespace: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    let namespace = obj.namespace().unwrap_or_default();
    K::ORIGIN.stamp(nacuuid, velero_namespace, nacuuid, &namespace, &obj.name_any(), &[])
}

/// `velero` as nac makes it for `obj`, with the metadata of [`made_meta`].
pub fn made_for<K: Kind, V: Resource>(obj: &K, nacuuid: &str, velero_namespace: &str, mut velero: V) -> V {
    *velero.meta_mut() = made_meta(obj, nacuuid, velero_namespace);
    velero
}

/// Runs a kind's controller until `stop`, on the base above.
pub async fn run<K: Kind>(controller: Controller<K>, ctx: &Arc<Cx<K::State>>, stop: CancellationToken) {
    controller
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile::<K>, error_policy::<K>, ctx.clone())
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, controller = K::CONTROLLER, "controller");
            }
        })
        .await
}

/// A controller over a kind's objects (all namespaces, reflected into `writer`; each delete event goes to the
/// collector).
pub fn controller<K: Kind>(
    ctx: &Shared,
    writer: Writer<K>,
    synced: Synced,
    jobs: &Jobs,
    what: &'static str,
) -> Controller<K> {
    let store = writer.as_reader();
    let jobs = jobs.clone();
    let objects = watches::origin_stream(
        Api::<K>::all(ctx.client.clone()),
        watches::config(),
        writer,
        synced,
        what,
        move |o| jobs.gone(K::ORIGIN, o),
    );
    Controller::for_stream(objects, store).with_config(ControllerConfig::default().concurrency(ctx.opts.concurrency))
}

/// What nac makes in the Velero namespace for a tenant object.
pub trait VeleroSide: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Owned {}
impl<V: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Owned> VeleroSide for V {}

/// Readable from the API and shareable between tasks.
pub trait Owned: DeserializeOwned + Debug + Send + Sync + 'static {}
impl<V: DeserializeOwned + Debug + Send + Sync + 'static> Owned for V {}

/// The Velero objects nac made for a kind (label-selected in the Velero namespace, reflected into `writer`), for
/// a controller's `watches_stream`.
pub fn made<K: Kind, V: VeleroSide>(
    ctx: &Shared,
    writer: Writer<V>,
    synced: Synced,
    what: &'static str,
) -> impl futures::Stream<Item = Result<V, kube::runtime::watcher::Error>> + Send {
    let api = Api::<V>::namespaced(ctx.client.clone(), &ctx.opts.velero_namespace);
    watches::store_stream(
        api,
        watches::config().labels(K::ORIGIN.nacuuid_label),
        writer,
        synced,
        what,
    )
}

/// Maps a Velero object nac made back to its tenant object; one whose tenant object is not in `objects` goes to
/// the collector.
pub fn owner_or_orphan<K: Kind, V: Resource<DynamicType = ()>>(
    objects: Store<K>,
    jobs: &Jobs,
) -> impl Fn(V) -> Option<ObjectRef<K>> + Send + Sync + 'static {
    let jobs = jobs.clone();
    move |v: V| {
        let r = K::ORIGIN.owner(v.meta())?;
        if objects.get(&r).is_none() {
            jobs.orphan::<V>(v.meta().name.clone().unwrap_or_default());
        }
        Some(r)
    }
}

/// Registers `waiting`'s objects to be triggered through `trigger` when what they wait for changes.
pub fn wake_on<K: Kind + kube::runtime::reflector::Lookup<DynamicType = ()>>(
    reg: &mut Registry,
    waiting: &Arc<Waiters<K>>,
    trigger: &UnboundedSender<ObjectRef<K>>,
) {
    let (waiting, trigger) = (waiting.clone(), trigger.clone());
    reg.waker(move |dependency| {
        for r in waiting.waiting_for(dependency) {
            let _ = trigger.unbounded_send(r);
        }
    });
}
