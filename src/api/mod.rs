//! nac's own resources in `oadp.openshift.io/v1alpha1`, wire-compatible with OADP's non-admin controller: the same
//! kinds, fields, enums, printer columns and short names (`tests/oadp_api.rs` compares the CRDs below with OADP's,
//! field by field, against the facts written down in `tests/fixtures/oadp-api.txt`).
//!
//! **Objects without a spec.** OADP's CRDs admit an object with no `spec` at all, and its controller reports it
//! `BackingOff`; nac does the same. kube's derive makes `spec` a required field of the generated type, so each kind
//! decodes a missing spec to its spec's default marked `unset` (through serde's container default, written as
//! `cfg_attr(all(), serde(...))` because kube's derive passes no `serde` attribute on), and its controller acts on
//! nothing of it.

/// A kind's `without_spec`, what an object without `spec` decodes to (see above): its spec's default marked
/// `unset`, with no metadata.
macro_rules! without_spec {
    ($kind:ident, $spec:ident) => {
        impl $kind {
            fn without_spec() -> Self {
                let mut o = $kind::new(
                    "",
                    $spec {
                        unset: true,
                        ..Default::default()
                    },
                );
                o.metadata = Default::default();
                o
            }
        }
    };
}
use without_spec;

mod common;
mod nab;
mod nabsl;
mod nadr;
mod nar;
mod nas;

pub use common::*;
pub use nab::*;
pub use nabsl::*;
pub use nadr::*;
pub use nar::*;
pub use nas::*;

use kube::CustomResourceExt;

pub const GROUP: &str = "oadp.openshift.io";
pub const VERSION: &str = "v1alpha1";

type Crd = k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// All CRDs nac installs, in install order.
pub fn crds() -> Vec<Crd> {
    vec![
        NonAdminBackup::crd(),
        NonAdminRestore::crd(),
        NonAdminBackupStorageLocation::crd(),
        NonAdminBackupStorageLocationRequest::crd(),
        NonAdminDownloadRequest::crd(),
        NonAdminSchedule::crd(),
    ]
    .into_iter()
    .map(as_oadp_declares)
    .collect()
}

/// What the derived schema says differently from OADP's CRDs, set right: `spec` is optional (an object without
/// one is admitted and reported BackingOff); nothing is defaulted by the API server (serde's defaults are for
/// decoding, and a defaulted counter or spec would be written into objects); an optional enum lists its values,
/// not `null`; and the copy of the Velero Backup's spec in a NonAdminBackup's status stays open, as the status
/// copies do (`wire`), so a newer Velero's field is not pruned from nac's status write.
fn as_oadp_declares(mut crd: Crd) -> Crd {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
    fn walk(s: &mut JSONSchemaProps, open: bool) {
        s.default = None;
        if let Some(e) = s.enum_.as_mut() {
            e.retain(|v| !v.0.is_null());
        }
        if open && s.type_.as_deref() == Some("object") && s.additional_properties.is_none() {
            s.x_kubernetes_preserve_unknown_fields = Some(true);
        }
        for p in s.properties.iter_mut().flat_map(|p| p.values_mut()) {
            walk(p, open);
        }
        if let Some(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(i),
        ) = s.items.as_mut()
        {
            walk(i, open);
        }
    }
    for v in crd.spec.versions.iter_mut() {
        let Some(root) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else {
            continue;
        };
        if let Some(r) = root.required.as_mut() {
            r.retain(|f| f != "spec");
            if r.is_empty() {
                root.required = None;
            }
        }
        walk(root, false);
        let copy = root
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("status"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("veleroBackup"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"));
        if let Some(spec_copy) = copy {
            walk(spec_copy, true);
        }
    }
    crd
}

/// The CRDs as a multi-document YAML stream, as `nac crds` prints them.
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|c| serde_yaml::to_string(c).expect("CRD serializes"))
        .collect::<Vec<_>>()
        .join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    #[test]
    fn every_nac_kind_in_a_tenant_namespace_stays_out_of_tenant_backups() {
        // The request objects live in the OADP namespace, which no tenant backup includes.
        let tenant_kinds: Vec<String> = crds()
            .iter()
            .map(|c| c.spec.names.plural.clone())
            .filter(|p| p != "nonadminbackupstoragelocationrequests")
            .collect();
        assert!(tenant_kinds.contains(&"nonadmindownloadrequests".to_string()));
        let excluded = |spec: Value| {
            let Value::Object(mut m) = spec else { unreachable!() };
            crate::velero::exclusions::add_backup_exclusions(&mut m);
            m
        };
        let list = |m: &Map<String, Value>, field: &str| -> Vec<String> {
            m[field]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let old_style = excluded(json!({"includedResources": ["*"]}));
        let new_style = excluded(json!({"includedNamespaceScopedResources": ["*"]}));
        for kind in &tenant_kinds {
            assert!(list(&old_style, "excludedResources").contains(kind), "{kind}");
            assert!(
                list(&new_style, "excludedNamespaceScopedResources").contains(kind),
                "{kind}"
            );
        }
    }
}
