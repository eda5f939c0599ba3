//! Arbitrary bytes as an AdmissionReview body, through every endpoint with the strict policy loaded: the webhook
//! minus HTTP must answer (a response or a 400 reason) and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nac::admission::{handle_body, AdmissionState, Endpoint};
use nac::metrics::Metrics;
use nac::policy::live::{Offer, PolicyStore};
use std::sync::{Arc, OnceLock};

const STRICT_CONFIGMAP: &str = include_str!("../../policies/strict.yaml");

fn state() -> &'static AdmissionState {
    static STATE: OnceLock<AdmissionState> = OnceLock::new();
    STATE.get_or_init(|| {
        let text = nac::policy::policy_text_of(STRICT_CONFIGMAP).expect("strict.yaml holds a policy");
        let metrics = Arc::new(Metrics::new());
        let store = Arc::new(PolicyStore::new(Some(metrics.clone())));
        assert!(matches!(store.offer(&text, "fuzz"), Offer::Applied(_)));
        AdmissionState {
            policy: store,
            metrics,
            privileged_users: vec!["system:serviceaccount:nac-system:nac".into()],
            policy_configmap: "nac-policy".into(),
            policy_namespace: "nac-system".into(),
            locations: None,
        access: Some(Arc::new(nac::rights::Fixed::common())),
            endpoints: Arc::new(nac::endpoints::Endpoints::fixed(&[], &["10.96.0.0/12"])),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let st = state();
    for ep in Endpoint::ALL {
        if let Ok(out) = futures::executor::block_on(handle_body(st, ep, data)) {
            // A response is always a JSON AdmissionReview.
            let v: serde_json::Value = serde_json::from_slice(&out).expect("response is JSON");
            assert!(v["response"]["allowed"].is_boolean(), "{}: {v}", ep.path());
        }
    }
});
