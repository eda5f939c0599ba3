//! One leadership term's state: the [`Shared`] core, and beside it one state per kind (its watch-fed stores,
//! indexes, triggers and waiters), each built by the kind itself. The stores are read across kinds (a restore
//! reads backups; sync and collection read everything) through this one view.

use super::context::{Shared, Watched};
use super::counts::Volumes;
use super::tenant::{KindState, KindWiring};
use super::{download, location, schedule};
use crate::api::{NonAdminBackup, NonAdminRestore};
use crate::velero::{BackupStorageLocation, DeleteBackupRequest};
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
