//! The admission webhooks: AdmissionReview in, AdmissionResponse out.
//!
//! One generic HTTP handler decodes and checks the review, then hands it to the endpoint's reviewer. Bad input
//! (malformed JSON, wrong apiVersion/kind, no request, over-large body, wrong content type) is an HTTP 400 with
//! a one-line reason; a well-formed review always gets a response echoing its uid.

mod configmap;
mod proxy;
pub mod velero_guard;

pub use proxy::ProxyKind;
pub use velero_guard::{GuardedKind, LocationLookup};

use crate::metrics::{Metrics, Verdict};
use crate::policy::live::PolicyStore;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};
use std::sync::Arc;
use std::time::Instant;

/// Largest AdmissionReview body accepted (the API server's own limit for objects is about 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Shared state of the webhook handlers.
pub struct AdmissionState {
    pub policy: Arc<PolicyStore>,
    pub metrics: Arc<Metrics>,
    /// Users allowed to set and change identity labels (nac's own service account).
    pub privileged_users: Vec<String>,
    /// Name and namespace of the policy ConfigMap `/validate/policies` guards.
    pub policy_configmap: String,
    pub policy_namespace: String,
    /// Velero's storage locations, for the guard on Velero's own objects (`velero_guard`); without it (no
    /// cluster connection) the guard refuses what it would have to look up.
    pub locations: Option<Arc<dyn LocationLookup>>,
    /// Users' rights, for what their backups may read (`crate::rights`); without it, checks fail closed.
    pub access: Option<Arc<dyn crate::rights::Access>>,
    /// Name resolution and the cluster's networks, for tenants' storage endpoints (`crate::endpoints`).
    pub endpoints: Arc<crate::endpoints::Endpoints>,
}

/// The webhook endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Mutate(ProxyKind),
    Validate(ProxyKind),
    ValidatePolicy,
    /// The guard on Velero's unfinished Backups and PodVolumeBackups (`velero_guard`).
    Guard(GuardedKind),
    /// The guard on the VolumeSnapshotContents Velero creates for a backup (`velero_guard::review_snapshot_content`).
    GuardSnapshots,
    /// The guard on Velero's DeleteBackupRequests (`velero_guard::review_delete_request`).
    GuardDeleteRequests,
}

impl Endpoint {
    pub const ALL: [Endpoint; 15] = [
        Endpoint::Mutate(ProxyKind::BACKUP),
        Endpoint::Validate(ProxyKind::BACKUP),
        Endpoint::Mutate(ProxyKind::RESTORE),
        Endpoint::Validate(ProxyKind::RESTORE),
        Endpoint::Mutate(ProxyKind::STORAGE_LOCATION),
        Endpoint::Validate(ProxyKind::STORAGE_LOCATION),
        Endpoint::Mutate(ProxyKind::SCHEDULE),
        Endpoint::Validate(ProxyKind::SCHEDULE),
        Endpoint::Mutate(ProxyKind::DOWNLOAD),
        Endpoint::Validate(ProxyKind::DOWNLOAD),
        Endpoint::ValidatePolicy,
        Endpoint::Guard(GuardedKind::Backup),
        Endpoint::Guard(GuardedKind::PodVolumeBackup),
        Endpoint::GuardSnapshots,
        Endpoint::GuardDeleteRequests,
    ];

    pub fn path(&self) -> &'static str {
        match self {
            Endpoint::Mutate(kind) => kind.mutate_path,
            Endpoint::Validate(kind) => kind.validate_path,
            Endpoint::ValidatePolicy => "/validate/policies",
            Endpoint::Guard(GuardedKind::Backup) => "/validate/velero-backups",
            Endpoint::Guard(GuardedKind::PodVolumeBackup) => "/validate/velero-podvolumebackups",
            Endpoint::GuardSnapshots => "/validate/volumesnapshotcontents",
            Endpoint::GuardDeleteRequests => "/validate/velero-deletebackuprequests",
        }
    }
}

/// Why a request body is not a usable AdmissionReview (HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadRequest {
    #[error("content type must be application/json, got {0:?}")]
    ContentType(String),
    #[error("request body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("could not read request body: {0}")]
    Body(String),
    #[error("malformed AdmissionReview JSON: {0}")]
    Json(String),
    #[error("unsupported AdmissionReview apiVersion {0:?}: only admission.k8s.io/v1 is served")]
    ApiVersion(String),
    #[error("expected kind AdmissionReview, got {0:?}")]
    Kind(String),
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// Decodes and checks a review body. Pure, so the fuzzer and benchmarks can drive it directly.
pub fn decode_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, BadRequest> {
    if body.len() > MAX_BODY_BYTES {
        return Err(BadRequest::TooLarge);
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| BadRequest::Json(one_line(&e.to_string())))?;
    if review.types.api_version != "admission.k8s.io/v1" {
        return Err(BadRequest::ApiVersion(review.types.api_version));
    }
    if review.types.kind != "AdmissionReview" {
        return Err(BadRequest::Kind(review.types.kind));
    }
    review.try_into().map_err(|_| BadRequest::NoRequest)
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Runs one endpoint's rules on a decoded request: pure apart from reading the current policy, except where a
/// rule needs the cluster (the guard's location lookup).
pub async fn review(
    state: &AdmissionState,
    endpoint: Endpoint,
    req: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    match endpoint {
        Endpoint::Mutate(kind) => proxy::review(state, kind, req, true).await,
        Endpoint::Validate(kind) => proxy::review(state, kind, req, false).await,
        Endpoint::ValidatePolicy => configmap::validate(state, req),
        Endpoint::Guard(kind) => velero_guard::review(state, kind, req).await,
        Endpoint::GuardSnapshots => velero_guard::review_snapshot_content(state, req).await,
        Endpoint::GuardDeleteRequests => velero_guard::review_delete_request(state, req).await,
    }
}

/// Decodes, reviews and encodes: the whole webhook minus HTTP. Returns the response JSON or a 400 reason.
pub async fn handle_body(state: &AdmissionState, endpoint: Endpoint, body: &[u8]) -> Result<Vec<u8>, BadRequest> {
    let req = decode_review(body)?;
    let resp = review(state, endpoint, &req).await;
    Ok(encode_review(&resp))
}

/// The AdmissionReview answering with `resp`, as the API server's decoder reads it fastest.
///
/// kube's `AdmissionResponse` serializes its patch bytes as a JSON array of numbers, which the API server's
/// decoder accepts but reads number by number (one review's patch is ~4 KB that way, and decoding it was the
/// largest single cost of a webhook call in the API server, BENCHMARKS.md §5). The wire format is base64, a
/// third of the size. The status is sent only with a refusal: the API server reads it only then.
pub fn encode_review(resp: &AdmissionResponse) -> Vec<u8> {
    use base64::Engine;
    #[serde_with::skip_serializing_none]
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Response<'a> {
        uid: &'a str,
        allowed: bool,
        status: Option<&'a Status>,
        patch: Option<String>,
        patch_type: Option<&'static str>,
        #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
        audit_annotations: &'a std::collections::HashMap<String, String>,
        warnings: Option<&'a Vec<String>>,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Review<'a> {
        api_version: &'static str,
        kind: &'static str,
        response: Response<'a>,
    }
    let patch = resp
        .patch
        .as_ref()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    let review = Review {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: Response {
            uid: &resp.uid,
            allowed: resp.allowed,
            status: (!resp.allowed).then_some(&resp.result),
            // kube's response carries only JSON patches (its patch type is private).
            patch_type: patch.is_some().then_some("JSONPatch"),
            patch,
            audit_annotations: &resp.audit_annotations,
            warnings: resp.warnings.as_ref(),
        },
    };
    serde_json::to_vec(&review).expect("AdmissionReview serializes")
}

/// A denial carrying the violated fields as status causes, so clients can point at them.
pub(crate) fn deny(
    resp: AdmissionResponse,
    message: String,
    fields: impl IntoIterator<Item = (String, String)>,
) -> AdmissionResponse {
    let mut resp = resp.deny(&message);
    let causes: Vec<StatusCause> = fields
        .into_iter()
        .map(|(field, message)| StatusCause {
            reason: "FieldValueForbidden".into(),
            message,
            field,
        })
        .collect();
    resp.result = Status {
        code: 403,
        reason: "Forbidden".into(),
        message,
        details: (!causes.is_empty()).then(|| StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        }),
        ..Status::failure("", "Forbidden")
    };
    resp
}

pub(crate) fn with_warnings(mut resp: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        resp.warnings = Some(warnings);
    }
    resp
}

fn content_type_ok(headers: &HeaderMap) -> Result<(), BadRequest> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(BadRequest::ContentType(ct.to_string()))
    }
}

async fn read_body(body: Body) -> Result<Bytes, BadRequest> {
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| {
        // `to_bytes` reports the limit as a length-limit error somewhere in its source chain.
        let mut src: Option<&dyn std::error::Error> = Some(&e);
        while let Some(s) = src {
            if s.to_string().contains("length limit") {
                return BadRequest::TooLarge;
            }
            src = s.source();
        }
        BadRequest::Body(one_line(&e.to_string()))
    })
}

async fn handle(state: Arc<AdmissionState>, endpoint: Endpoint, headers: HeaderMap, body: Body) -> Response {
    let start = Instant::now();
    let result = match content_type_ok(&headers) {
        Err(e) => Err(e),
        Ok(()) => match read_body(body).await {
            Err(e) => Err(e),
            Ok(bytes) => decode_review(&bytes),
        },
    };
    let (response, verdict) = match result {
        Err(e) => {
            tracing::warn!(endpoint = endpoint.path(), error = %e, "bad admission request");
            (
                (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
                Verdict::BadRequest,
            )
        }
        Ok(req) => {
            let resp = review(&state, endpoint, &req).await;
            let verdict = if resp.allowed {
                Verdict::Allowed
            } else {
                Verdict::Denied
            };
            tracing::debug!(
                endpoint = endpoint.path(),
                uid = %req.uid,
                namespace = req.namespace.as_deref().unwrap_or(""),
                name = %req.name,
                allowed = resp.allowed,
                "admission review"
            );
            if !resp.allowed {
                tracing::info!(
                    endpoint = endpoint.path(),
                    namespace = req.namespace.as_deref().unwrap_or(""),
                    name = %req.name,
                    user = req.user_info.username.as_deref().unwrap_or(""),
                    reason = %resp.result.message,
                    "admission denied"
                );
            }
            let body = encode_review(&resp);
            (
                ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
                verdict,
            )
        }
    };
    state
        .metrics
        .observe_request(endpoint.path(), verdict, start.elapsed().as_secs_f64());
    response
}

/// The webhook router: one POST route per endpoint.
pub fn router(state: Arc<AdmissionState>) -> Router {
    let mut r = Router::new();
    for ep in Endpoint::ALL {
        let st = state.clone();
        r = r.route(
            ep.path(),
            post(move |headers: HeaderMap, body: Body| handle(st.clone(), ep, headers, body)),
        );
    }
    // axum's own body limit would answer 413; ours answers 400 with a reason, so lift axum's.
    r.layer(axum::extract::DefaultBodyLimit::disable()).with_state(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::AdmissionRequest;
    use serde_json::{json, Value};

    fn request() -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "operation": "CREATE", "userInfo": {"username": "alice"},
                "kind": {"group": "oadp.openshift.io", "version": "v1alpha1", "kind": "NonAdminBackup"},
                "resource": {"group": "oadp.openshift.io", "version": "v1alpha1", "resource": "nonadminbackups"},
                "name": "b", "namespace": "team-a", "dryRun": false, "options": null, "oldObject": null,
                "object": {"apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup", "metadata": {"name": "b"}}
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    #[test]
    fn the_patch_goes_out_base64_and_the_status_only_with_a_refusal() {
        let ops: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}])).unwrap();
        let allowed = AdmissionResponse::from(&request()).with_patch(ops.clone()).unwrap();
        let allowed = with_warnings(allowed, vec!["filled".into()]);
        let out: Value = serde_json::from_slice(&encode_review(&allowed)).unwrap();
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["kind"], "AdmissionReview");
        let r = &out["response"];
        assert_eq!((r["uid"].as_str(), r["allowed"].as_bool()), (Some("u-1"), Some(true)));
        assert_eq!(r["patchType"], "JSONPatch");
        assert_eq!(r["warnings"], json!(["filled"]));
        assert!(r.get("status").is_none(), "{r}");
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(r["patch"].as_str().expect("a base64 string, not an array of numbers"))
            .unwrap();
        assert_eq!(serde_json::from_slice::<json_patch::Patch>(&bytes).unwrap(), ops);

        let denied = deny(
            AdmissionResponse::from(&request()),
            "no".into(),
            [("spec.x".into(), "no".into())],
        );
        let out: Value = serde_json::from_slice(&encode_review(&denied)).unwrap();
        let r = &out["response"];
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 403);
        assert_eq!(r["status"]["message"], "no");
        assert_eq!(r["status"]["details"]["causes"][0]["field"], "spec.x");
        assert!(r.get("patch").is_none() && r.get("patchType").is_none());
    }
}
