//! One leadership term's state: the [`Shared`] core, and beside it one state per kind (its watch-fed stores,
//! indexes, triggers and waiters), each built by the kind itself. The stores are read across kinds (a restore
//! reads backups; sync and collection read everything) through this one view.

use super::context::{Shared, Watched};
use super::counts::Volumes;
use super::kind::Kind;
use super::tenant::{KindState, KindWiring};
use super::{download, gc, location, schedule};
use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::velero::{BackupStorageLocation, DeleteBackupRequest};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use kube::runtime::reflector::store::Writer;

/// The reconcilers' context for one leadership term.
pub struct Ctx {
    pub shared: Shared,
    pub nab: KindState<NonAdminBackup>,
    pub nar: KindState<NonAdminRestore>,
    pub nabsl: location::State,
    pub nadr: download::State,
    pub nas: schedule::State,
    /// nac's DeleteBackupRequests (NonAdminBackups follow them).
    pub delete_requests: Watched<DeleteBackupRequest>,
    /// Velero's storage locations (restores wait for theirs to be Available; tenants' locations mirror theirs).
    pub locations: Watched<BackupStorageLocation>,
    /// Per-volume progress of backups.
    pub volumes: Volumes,
}

/// The write ends of a term's stores, for the watch streams.
pub struct Wiring {
    pub nab: KindWiring<NonAdminBackup>,
    pub nar: KindWiring<NonAdminRestore>,
    pub nabsl: location::Wiring,
    pub nadr: download::Wiring,
    pub nas: schedule::Wiring,
    pub delete_requests: Writer<DeleteBackupRequest>,
    pub locations: Writer<BackupStorageLocation>,
}

impl Ctx {
    /// A fresh context (empty stores and indexes) around `shared`, and the write ends that feed it.
    pub fn new(shared: Shared) -> (Self, Wiring) {
        let (nab, nab_wiring) = KindState::new(&shared.metrics, &shared.opts.velero_namespace);
        let (nar, nar_wiring) = KindState::new(&shared.metrics, &shared.opts.velero_namespace);
        let (nabsl, nabsl_wiring) = location::State::new();
        let (nadr, nadr_wiring) = download::State::new();
        let (nas, nas_wiring) = schedule::State::new();
        let (delete_requests, delete_requests_writer) = Watched::new();
        let (locations, locations_writer) = Watched::new();
        let ctx = Ctx {
            shared,
            nab,
            nar,
            nabsl,
            nadr,
            nas,
            delete_requests,
            locations,
            volumes: Volumes::default(),
        };
        let wiring = Wiring {
            nab: nab_wiring,
            nar: nar_wiring,
            nabsl: nabsl_wiring,
            nadr: nadr_wiring,
            nas: nas_wiring,
            delete_requests: delete_requests_writer,
            locations: locations_writer,
        };
        (ctx, wiring)
    }

    /// Wakes every object of every kind waiting for `dependency`.
    pub fn wake(&self, dependency: &str) {
        self.nab.wake(dependency);
        self.nar.wake(dependency);
        self.nadr.wake(dependency);
    }
}

impl std::ops::Deref for Ctx {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// Where the kinds' watches send what the background jobs act on: the collector's triggers and the names of Velero
/// Backups for backup sync.
#[derive(Clone)]
pub struct Jobs {
    pub gc: UnboundedSender<gc::Trigger>,
    pub sync: UnboundedSender<String>,
}

impl Jobs {
    pub fn new() -> (Self, UnboundedReceiver<gc::Trigger>, UnboundedReceiver<String>) {
        let (gc, gc_rx) = futures::channel::mpsc::unbounded();
        let (sync, sync_rx) = futures::channel::mpsc::unbounded();
        (Jobs { gc, sync }, gc_rx, sync_rx)
    }

    /// A tenant object went: the collector looks at what was made for it.
    pub fn gone<K: Kind>(&self, obj: &K) {
        let _ = self.gc.unbounded_send(gc::gone(K::ORIGIN, obj));
    }

    /// A Velero object whose tenant object is not in the store: the collector decides.
    pub fn orphan(&self, made: gc::Made, name: String) {
        let _ = self
            .gc
            .unbounded_send(gc::Trigger::Object(gc::Candidate { made, name }));
    }

    /// Backup sync looks at Velero Backup `name`.
    pub fn sync(&self, name: String) {
        let _ = self.sync.unbounded_send(name);
    }
}
