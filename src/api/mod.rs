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
