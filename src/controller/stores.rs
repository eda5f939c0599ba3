//! The base of a kind with one Velero object per tenant object (download requests, schedules): its state for a
//! term ([`Stores`]) and its controller.

use super::context::{Shared, Waiters, Watched};
use super::gc::MadeBy;
use super::jobs::Jobs;
use super::kind::{controller, made, owner_or_orphan, wake_on, Build, Kind, VeleroSide};
use super::view::Registry;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use std::sync::Arc;

/// The controller of a kind with one Velero object per tenant object ([`Stores`]): its objects, and the Velero
/// objects nac made for them (`what`: the two watches' names), those whose tenant object is gone going to the
/// collector. Its triggers are handed back for the kind to pace.
pub fn one_to_one<K: Kind, V: VeleroSide>(
    ctx: &Shared,
    stores: &Stores<K, V>,
    wiring: StoresWiring<K, V>,
    jobs: &Jobs,
    what: [&'static str; 2],
) -> (Controller<K>, UnboundedReceiver<ObjectRef<K>>) {
    let velero = made::<K, V>(ctx, wiring.velero, stores.velero.synced.clone(), what[1]);
    let orphans = owner_or_orphan::<K, V>(stores.objects.store.clone(), jobs);
    let controller =
        controller(ctx, wiring.objects, stores.objects.synced.clone(), jobs, what[0]).watches_stream(velero, orphans);
    (controller, wiring.triggers)
}

/// What a kind with one Velero object per tenant object keeps for a term: its objects, the Velero objects nac made
/// for them, the objects waiting for others, and the channel that triggers its reconciles.
pub struct Stores<K: Kind, V: Resource<DynamicType = ()> + Clone + 'static> {
    pub objects: Watched<K>,
    pub velero: Watched<V>,
    pub waiting: Arc<Waiters<K>>,
    pub trigger: UnboundedSender<ObjectRef<K>>,
}

/// The write ends of [`Stores`], for its watches and triggers.
pub struct StoresWiring<K: Kind, V: Resource<DynamicType = ()> + Clone + 'static> {
    pub objects: Writer<K>,
    pub velero: Writer<V>,
    pub triggers: UnboundedReceiver<ObjectRef<K>>,
}

impl<K, V> Build for Stores<K, V>
where
    K: Kind + Clone + kube::runtime::reflector::Lookup<DynamicType = ()>,
    V: VeleroSide + kube::runtime::reflector::Lookup<DynamicType = ()> + crate::naming::Tags,
{
    type Wiring = StoresWiring<K, V>;

    /// Its stores (shared through the view), its waiters (woken through the view) and what the collector
    /// collects of it: the Velero objects, once their tenant object is gone.
    fn build(_shared: &Shared, reg: &mut Registry) -> (Self, StoresWiring<K, V>) {
        let (objects, objects_writer) = reg.watched();
        let (velero, velero_writer) = reg.watched();
        let (trigger, triggers) = futures::channel::mpsc::unbounded();
        let waiting = Arc::new(Waiters::default());
        wake_on(reg, &waiting, &trigger);
        reg.made(MadeBy::<K, V>::always());
        let wiring = StoresWiring {
            objects: objects_writer,
            velero: velero_writer,
            triggers,
        };
        let stores = Stores {
            objects,
            velero,
            waiting,
            trigger,
        };
        (stores, wiring)
    }
}
