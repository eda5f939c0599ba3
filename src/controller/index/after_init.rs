//! The objects of a reflected watch for a controller, each yielded only once the store holds it.
//!
//! A reflector store takes a (re-)list's objects all at once, at its end (`InitDone`); kube's `touched_objects`
//! yields each as it arrives (`InitApply`). The controller looks a triggered object up in the store and drops the
//! reconcile when it is not there ("not found in local store"), and nothing triggers it again. At the first list
//! the controller waits for the store; at a re-list (after an API server restart, an expired resource version) it
//! does not, so an object created while the watch was down was never reconciled. Here a list's objects are held
//! until its end.

use futures::future::Either;
use futures::{stream, Stream, StreamExt};
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher::{Error, Event};

/// Like `touched_objects`, but the objects of a list come after its `InitDone`, read from `store` (which has them
/// then): during a list only their references are held, and afterwards each object is copied out of the store
/// only as the controller takes it, never the whole list at once.
pub fn touched_after_init<K, S>(events: S, store: Store<K>) -> impl Stream<Item = Result<K, Error>> + Send
where
    K: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<Event<K>, Error>> + Send,
{
    events
        .scan(Vec::<ObjectRef<K>>::new(), |listing, ev| {
            // Nothing collected: a list's references are turned into yields one at a time as the controller
            // takes them, and an event is passed on as it is (no allocation per event).
            let out = match ev {
                Ok(Event::Init) => {
                    listing.clear();
                    Either::Right(stream::iter(None))
                }
                Ok(Event::InitApply(o)) => {
                    listing.push(o.to_object_ref(()));
                    Either::Right(stream::iter(None))
                }
                Ok(Event::InitDone) => {
                    Either::Left(stream::iter(std::mem::take(listing).into_iter().map(Yield::Listed)))
                }
                Ok(Event::Apply(o)) | Ok(Event::Delete(o)) => Either::Right(stream::iter(Some(Yield::Event(Ok(o))))),
                Err(e) => Either::Right(stream::iter(Some(Yield::Event(Err(e))))),
            };
            futures::future::ready(Some(out))
        })
        .flatten()
        .filter_map(move |y| {
            futures::future::ready(match y {
                // Gone since the list ended: its delete event follows.
                Yield::Listed(r) => store.get(&r).map(|o| Ok(K::clone(&o))),
                Yield::Event(e) => Some(e),
            })
        })
}

/// What a watch event yields: a listed object's reference (read from the store as it is taken), or an object.
/// Made one at a time, never collected: each is as large as the largest variant (a whole NonAdminBackup, 1,056
/// bytes), and a relist's 10,000 collected took 10 MiB (BENCHMARKS.md §4).
enum Yield<K: Lookup<DynamicType = ()>> {
    Listed(ObjectRef<K>),
    Event(Result<K, Error>),
}

/// Like `applied_objects` (no deleted objects), with the objects of a list after its `InitDone`.
pub fn applied_after_init<K, S>(events: S, store: Store<K>) -> impl Stream<Item = Result<K, Error>> + Send
where
    K: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<Event<K>, Error>> + Send,
{
    touched_after_init(
        events.filter(|ev| futures::future::ready(!matches!(ev, Ok(Event::Delete(_))))),
        store,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::{store, ObjectRef};
    use kube::runtime::WatchStreamExt;

    fn cm(name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c
    }

    /// The defect: at a re-list, an object new to the store was yielded before the store had it.
    #[tokio::test]
    async fn every_object_is_in_the_store_when_yielded_also_at_a_relist() {
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("b"))),
            // A re-list: "c" was created while the watch was down.
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a"))),
            Ok(Event::InitApply(cm("c"))),
            Ok(Event::InitDone),
            Ok(Event::Delete(cm("a"))),
        ];
        let (reader, writer) = store::<ConfigMap>();
        let out: Vec<String> = touched_after_init(stream::iter(events).reflect(writer), reader.clone())
            .map(|o| {
                let o = o.unwrap();
                let name = o.metadata.name.clone().unwrap();
                let held = reader.get(&ObjectRef::new(&name).within("ns")).is_some();
                // A deleted object is gone from the store, and is yielded for the controller's cleanup.
                assert!(held || name == "a", "{name} yielded before the store had it");
                name
            })
            .collect()
            .await;
        assert_eq!(out, ["a", "b", "a", "c", "a"]);
    }

    #[tokio::test]
    async fn applied_leaves_out_deletes() {
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a"))),
            Ok(Event::InitDone),
            Ok(Event::Delete(cm("a"))),
            Ok(Event::Apply(cm("b"))),
        ];
        let (reader, writer) = store::<ConfigMap>();
        let out: Vec<String> = applied_after_init(stream::iter(events).reflect(writer), reader)
            .map(|o| o.unwrap().metadata.name.unwrap())
            .collect()
            .await;
        assert_eq!(out, ["a", "b"]);
    }
}
