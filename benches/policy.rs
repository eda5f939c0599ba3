//! Policy evaluation and the whole in-process review path, side by side in one criterion group so their
//! relative costs are visible: `cargo bench --bench policy`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nac::admission::{decode_review, handle_body, AdmissionState, Endpoint, ProxyKind};
use nac::metrics::Metrics;
use nac::policy::live::{Offer, PolicyStore};
use nac::policy::{evaluate_backup, evaluate_restore, policy_text_of, Policy};
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::sync::Arc;

const STRICT_CONFIGMAP: &str = include_str!("../policies/strict.yaml");
const NAB_CREATE: &[u8] = include_bytes!("../tests/fixtures/nab-create.json");
const NAR_CREATE: &[u8] = include_bytes!("../tests/fixtures/nar-create.json");

fn strict_text() -> String {
    policy_text_of(STRICT_CONFIGMAP).expect("policies/strict.yaml holds a policy")
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("spec literals are objects"),
    }
}

/// What a tenant typically asks for: a selector, a TTL in bounds, the enforced values restated.
fn typical_backup() -> Map<String, Value> {
    object(json!({
        "includedNamespaces": ["team-a"],
        "labelSelector": {"matchLabels": {"app": "shop"}},
        "includedResources": ["deployments", "persistentvolumeclaims", "configmaps", "secrets"],
        "ttl": "720h0m0s",
        "defaultVolumesToFsBackup": true,
        "snapshotVolumes": false,
        "hooks": {"resources": [{"name": "freeze", "pre": [{"exec": {"command": ["/bin/sync"]}}]}]}
    }))
}

/// Breaks most rules at once: every check runs and every message is formatted.
fn violating_backup() -> Map<String, Value> {
    object(json!({
        "includedNamespaces": ["team-a", "team-b"],
        "excludedNamespaces": ["kube-system"],
        "includeClusterResources": true,
        "includedClusterScopedResources": ["nodes"],
        "volumeSnapshotLocations": ["aws"],
        "storageLocation": "mine",
        "ttl": "9999h",
        "snapshotVolumes": true,
        "defaultVolumesToFsBackup": false
    }))
}

fn typical_restore() -> Map<String, Value> {
    object(json!({
        "backupName": "nightly",
        "includedResources": ["deployments", "persistentvolumeclaims"],
        "restorePVs": true
    }))
}

fn state(policy: &str) -> AdmissionState {
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(PolicyStore::new(Some(metrics.clone())));
    assert!(matches!(store.offer(policy, "bench"), Offer::Applied(_)));
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
}

fn benches(c: &mut Criterion) {
    let text = strict_text();
    let policy = Policy::parse(&text).expect("strict policy parses");
    let (typical, violating, restore) = (typical_backup(), violating_backup(), typical_restore());
    assert!(evaluate_backup(&typical, &policy, "team-a").allowed());
    assert!(!evaluate_backup(&violating, &policy, "team-a").allowed());
    assert!(evaluate_restore(&restore, &policy, "team-a").allowed());

    let st = state(&text);
    let mutate_nab = Endpoint::Mutate(ProxyKind::BACKUP);
    let validate_nab = Endpoint::Validate(ProxyKind::BACKUP);
    let mutate_nar = Endpoint::Mutate(ProxyKind::RESTORE);
    for (ep, body) in [
        (mutate_nab, NAB_CREATE),
        (validate_nab, NAB_CREATE),
        (mutate_nar, NAR_CREATE),
    ] {
        let out = futures::executor::block_on(handle_body(&st, ep, body)).expect("fixture is a valid review");
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["response"]["allowed"], true, "{ep:?}: {v}");
    }

    let mut g = c.benchmark_group("policy");
    g.throughput(Throughput::Elements(1));
    g.bench_function("evaluate_backup/typical", |b| {
        b.iter(|| evaluate_backup(black_box(&typical), black_box(&policy), black_box("team-a")))
    });
    g.bench_function("evaluate_backup/violating", |b| {
        b.iter(|| evaluate_backup(black_box(&violating), black_box(&policy), black_box("team-a")))
    });
    g.bench_function("evaluate_restore/typical", |b| {
        b.iter(|| evaluate_restore(black_box(&restore), black_box(&policy), "team-a"))
    });
    g.bench_function("parse/strict", |b| b.iter(|| Policy::parse(black_box(&text))));
    g.bench_function("decode_review/nab-create", |b| {
        b.iter(|| decode_review(black_box(NAB_CREATE)))
    });
    g.bench_function("handle_body/mutate-nab", |b| {
        b.iter(|| futures::executor::block_on(handle_body(&st, mutate_nab, black_box(NAB_CREATE))))
    });
    g.bench_function("handle_body/validate-nab", |b| {
        b.iter(|| futures::executor::block_on(handle_body(&st, validate_nab, black_box(NAB_CREATE))))
    });
    g.bench_function("handle_body/mutate-nar", |b| {
        b.iter(|| futures::executor::block_on(handle_body(&st, mutate_nar, black_box(NAR_CREATE))))
    });
    g.finish();
}

criterion_group!(policy, benches);
criterion_main!(policy);
