//! The Velero objects nac makes for the queued kinds (Backups, Restores), as the stores keep them and the queue
//! index observes them.

use super::queue::{Observed, QueueIndex};
use super::watches::WatchIndex;
use k8s_openapi::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::sync::Arc;

/// What nac's store keeps of a Velero object nac made. By default all of it; a kind whose objects carry what the
/// reconcilers read only to mirror it (a Backup's resource lists) keeps a compact copy with a fingerprint of the
/// rest, and the status mirror reads the object itself when it has to write.
pub trait StoreCopy {
    fn make_compact(&mut self) {}
    fn is_compact(&self) -> bool {
        false
    }
}

/// A Velero object nac creates for a tenant object and whose queue it indexes.
pub trait VeleroObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + StoreCopy
    + crate::naming::Tags
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    type Spec: Send + Sync;
    /// Velero's kind ("Backup"), for messages and the write counter.
    const KIND: &'static str;
    /// What the queue index needs of it.
    fn observe(&self) -> Observed;
    /// Drops everything but the queue fields (Velero objects nac did not make are only counted in the queue).
    fn keep_queue_fields_only(&mut self);
    /// Velero's phase of it.
    fn phase(&self) -> Option<&str>;
}

/// The spec a Velero object nac did not make keeps in the store (it is only counted in the queue).
pub trait EmptySpec {
    fn empty() -> Self;
}

impl EmptySpec for crate::velero::RestoreSpec {
    fn empty() -> Self {
        Default::default()
    }
}

impl EmptySpec for Arc<crate::velero::BackupSpec> {
    fn empty() -> Self {
        crate::velero::empty_backup_spec()
    }
}

/// Velero's queue, keyed by Velero object name.
impl<V: VeleroObject> WatchIndex<V> for QueueIndex {
    fn upsert_object(&mut self, o: &V) -> Vec<String> {
        self.upsert(o.observe())
    }
    fn remove_object(&mut self, o: &V) -> Vec<String> {
        self.remove(&o.name_any())
    }
    fn relist_start(&mut self) {
        self.start_relist()
    }
    fn relist_object(&mut self, o: &V) {
        self.relist_item(o.observe())
    }
    fn relist_done(&mut self) -> Vec<String> {
        self.finish_relist()
    }
}
