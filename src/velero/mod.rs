//! Typed Velero objects nac reads and writes, faithful to Velero's v1 CRDs.
//!
//! Every struct keeps fields it does not know in `extra`, so a newer Velero's fields survive a round trip.

mod backup;
pub mod exclusions;
mod hooks;
mod other;
mod restore;
mod schedule;
pub mod snapshot;
pub mod validation;

pub use backup::*;
pub use hooks::*;
pub use other::*;
pub use restore::*;
pub use schedule::*;

crate::tags_from_meta!(
    Restore,
    DeleteBackupRequest,
    BackupStorageLocation,
    DownloadRequest,
    Schedule,
    k8s_openapi::api::core::v1::Secret,
);

use macro_rules_attribute::apply;

/// Fields of a Velero object that nac does not model: kept verbatim.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// Velero's `TypedLocalObjectReference` (resource policies, resource modifiers), replaced as a whole by
/// server-side apply.
#[apply(crate::wire::tenant_struct!)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct TypedLocalObjectReference {
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
