//! `/validate/policies`: a broken edit of the policy ConfigMap is refused at `kubectl apply` time.

use super::{deny, AdmissionState};
use crate::policy::{Policy, POLICY_KEY};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::DynamicObject;

pub(super) fn validate(state: &AdmissionState, req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let resp = AdmissionResponse::from(req);
    if !req.kind.group.is_empty() || req.kind.kind != "ConfigMap" {
        return deny(
            resp,
            format!(
                "this webhook endpoint handles ConfigMaps only, not {} {}: check the webhook configuration",
                req.kind.kind, req.kind.group
            ),
            [],
        );
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return resp;
    }
    // Only the policy ConfigMap is checked; the chart's objectSelector normally sends nothing else.
    if req.name != state.policy_configmap || req.namespace.as_deref() != Some(state.policy_namespace.as_str()) {
        return resp;
    }
    let Some(obj) = &req.object else {
        return deny(resp, "ConfigMap review has no object".into(), []);
    };
    let field = format!("data[{POLICY_KEY}]");
    let Some(text) = obj.data.get("data").and_then(|d| d.get(POLICY_KEY)) else {
        return deny(
            resp,
            format!("the nac policy ConfigMap must have the key {POLICY_KEY} in data"),
            [(field.clone(), "required".into())],
        );
    };
    let Some(text) = text.as_str() else {
        return deny(
            resp,
            format!("{field} must be a string"),
            [(field.clone(), "must be a string".into())],
        );
    };
    match Policy::parse(text) {
        Ok(_) => resp,
        Err(e) => {
            let causes: Vec<(String, String)> =
                e.0.iter()
                    .map(|p| (format!("{field}.{}", p.field), p.reason.clone()))
                    .collect();
            deny(resp, format!("nac policy {field} rejected: {e}"), causes)
        }
    }
}
