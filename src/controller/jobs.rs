//! What the kinds' watches send the background jobs: the collector's triggers and the Velero Backups backup sync
//! looks at.

use crate::naming::Origin;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use kube::Resource;

/// What a sweep or a trigger looks at: one Velero object, by kind ([`Collect::kind`](super::view::Collect::kind)) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Candidate {
    pub kind: String,
    pub name: String,
}

/// What makes the collector look.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// A tenant object went: the objects made for it.
    Gone {
        origin: Origin,
        namespace: String,
        name: String,
    },
    /// A Velero object whose origin the store does not have.
    Object(Candidate),
}

/// Where the kinds' watches send what the background jobs act on: the collector's triggers and the names of Velero
/// Backups for backup sync.
#[derive(Clone)]
pub struct Jobs {
    pub gc: UnboundedSender<Trigger>,
    pub sync: UnboundedSender<String>,
}

impl Jobs {
    pub fn new() -> (Self, UnboundedReceiver<Trigger>, UnboundedReceiver<String>) {
        let (gc, gc_rx) = futures::channel::mpsc::unbounded();
        let (sync, sync_rx) = futures::channel::mpsc::unbounded();
        (Jobs { gc, sync }, gc_rx, sync_rx)
    }

    /// A tenant object of origin `origin` went: the collector looks at what was made for it.
    pub fn gone<K: Resource>(&self, origin: Origin, obj: &K) {
        let _ = self.gc.unbounded_send(Trigger::Gone {
            origin,
            namespace: obj.meta().namespace.clone().unwrap_or_default(),
            name: obj.meta().name.clone().unwrap_or_default(),
        });
    }

    /// A Velero object of type `V` whose tenant object is not in the store: the collector decides.
    pub fn orphan<V: Resource<DynamicType = ()>>(&self, name: String) {
        let kind = V::kind(&()).into_owned();
        let _ = self.gc.unbounded_send(Trigger::Object(Candidate { kind, name }));
    }

    /// Backup sync looks at Velero Backup `name`.
    pub fn sync(&self, name: String) {
        let _ = self.sync.unbounded_send(name);
    }
}

/// Waits until `at`, or forever when nothing is due (a job's next timed look, beside its triggers).
pub async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending::<()>().await,
    }
}
