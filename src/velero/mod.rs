//! Typed Velero objects nac reads and writes, faithful to Velero's v1 CRDs.
//!
//! Every struct keeps fields it does not know in `extra`, so a newer Velero's fields survive a round trip.

mod backup;
pub mod exclusions;
mod other;
mod restore;
mod schedule;
pub mod validation;

pub use backup::*;
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
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Fields of a Velero object that nac does not model: kept verbatim.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// An object whose inner shape nac passes through untouched (hooks, uploader configs of future Velero versions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OpaqueObject(pub serde_json::Map<String, serde_json::Value>);

impl JsonSchema for OpaqueObject {
    fn schema_name() -> Cow<'static, str> {
        "OpaqueObject".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// Velero's `TypedLocalObjectReference` (resource policies, resource modifiers).
#[apply(crate::wire::tenant_struct!)]
pub struct TypedLocalObjectReference {
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
