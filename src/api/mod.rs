//! nac's own resources in `oadp.openshift.io/v1alpha1`, wire-compatible with OADP's non-admin controller.

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

/// All CRDs nac installs, in install order.
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    vec![
        NonAdminBackup::crd(),
        NonAdminRestore::crd(),
        NonAdminBackupStorageLocation::crd(),
        NonAdminBackupStorageLocationRequest::crd(),
        NonAdminDownloadRequest::crd(),
        NonAdminSchedule::crd(),
    ]
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
