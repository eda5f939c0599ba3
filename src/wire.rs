//! The attributes every wire type of a group shares, written once: each of nac's own kinds
//! (`oadp.openshift.io/v1alpha1`, OADP's), each Velero kind nac reads or writes (`velero.io/v1`), and the structs
//! inside them. Absent fields are left out when written (`skip_serializing_none`), field names are camelCase, and
//! Velero's structs keep the fields of newer Velero versions (`x-kubernetes-preserve-unknown-fields`).
//!
//! A kind adds its own `#[kube(kind = ..., status = ...)]` under `#[apply(tenant_kind!)]` or
//! `#[apply(velero_kind!)]`; a tenant kind's status is declared with `#[apply(tenant_status!)]`.

use macro_rules_attribute::attribute_alias;

attribute_alias! {
    #[apply(tenant_kind!)] =
        #[serde_with::skip_serializing_none]
        #[derive(kube::CustomResource, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[kube(group = "oadp.openshift.io", version = "v1alpha1", namespaced)]
        #[serde(rename_all = "camelCase")];

    #[apply(tenant_struct!)] =
        #[serde_with::skip_serializing_none]
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")];

    #[apply(velero_kind!)] =
        #[serde_with::skip_serializing_none]
        #[derive(kube::CustomResource, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[kube(group = "velero.io", version = "v1", namespaced)]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))];

    #[apply(velero_struct!)] =
        #[serde_with::skip_serializing_none]
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))];
}

/// A tenant kind's status: the phase and conditions every kind reports (as OADP's do, first), then the kind's own
/// fields, with the attributes of [`tenant_struct!`].
macro_rules! tenant_status {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($fields:tt)* }) => {
        #[macro_rules_attribute::apply(crate::wire::tenant_struct!)]
        $(#[$meta])*
        $vis struct $name {
            pub phase: Option<crate::api::NonAdminPhase>,
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub conditions: crate::api::Conditions,
            $($fields)*
        }
    };
}
pub(crate) use tenant_status;
