//! Admission benchmark (a measurement, nothing timed is asserted): NonAdminBackup creates through the local API
//! server under each admission configuration, interleaved round by round so drift of the machine hits all alike:
//!
//! - `none`: no admission for NonAdminBackups;
//! - `nac`: nac as registered by the chart and `make run`: one mutating webhook call per create, which also
//!   applies the validating rules (nac running with its controllers off);
//! - `nac-two-calls`: the same plus a validating webhook call (`/validate/nonadminbackups`), as nac registered
//!   itself before: what the second call costs;
//! - `nac-h1`: `nac` with nac offering only HTTP/1.1 (`webhook.http2: false`);
//! - `nac-rights-off`: `nac` with the policy's `rights.backup: off`;
//! - `nac-tiers`: `nac` with three tiers (the bench's namespace selected by the third, after two that do not
//!   match) and every quota set, in the base and the tier (limits far above what the run makes);
//! - `webhook-floor`: nac's validating call alone (no mutation, no patch): the least any webhook costs;
//! - `none-nac-sized`: no admission, each create sending the object as nac stores it: what storing nac's larger
//!   object costs without any call;
//! - `cel-mutation-and-floor`: `cel`'s MutatingAdmissionPolicy with nac's validating call (no patch from nac);
//! - `nac-baseline`: `nac` from another build (ADMISSION_BASELINE_BIN=<path to a nac binary>), side by side;
//! - `cel`: a MutatingAdmissionPolicy and a ValidatingAdmissionPolicy (in-process CEL) expressing the same tenant
//!   rules, TTL default and bound, and `includedNamespaces` (what an admin could write instead of nac, without the
//!   nacuuid, the warnings, the live policy or lookups).
//!
//! The order of the configurations rotates by one each round; besides the pooled percentiles, each
//! configuration's ratio to `cel` within each round is printed as the median over the rounds with its range (the
//! machine drifts within a run; a ratio within a round is less exposed to it).
//!
//! Each configuration is checked to be in effect before it is measured (a probe create shows its mutation), then
//! warmed up, then ADMISSION_CREATES creates (default 2,000) with ADMISSION_IN_FLIGHT (16) in flight, as a tenant
//! user, into a fresh namespace. Prints p50/p99 of the create call and creates/s per configuration and round, and
//! the ratios the issue asks about.
//!
//! Each run is also charged with the CPU time of the API server, etcd, nac and the client per create (on a
//! 2-core machine a create is CPU-bound: that is where its latency goes). ADMISSION_CONFIGS=a,b runs a subset
//! (`none`, `nac` and `cel` always); ADMISSION_PERF=<dir> records `perf` profiles of the API server and nac.
//!
//! ADMISSION_TENANTS=N (N > 1) runs the many-tenant configuration instead (`many_tenants`): `nac` and `cel` with
//! each round's creates spread over N tenants, the reviews nac asks per create and the API server's CPU per create.
//!
//! `make admission-bench` (its own control plane in .cluster-admission, started and stopped there).
#![cfg(all(feature = "e2e", feature = "scale"))]

mod common;

use common::e2e::*;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use nac::api::NonAdminBackup;
use serde_json::json;
use std::time::{Duration, Instant};

const POLICY: &str = "backup:\n  maxTtl: 2160h\n  defaultTtl: 168h\n";

/// `POLICY` with every quota and three tiers; the third selects every namespace and sets a TTL of its own, which
/// shows the configuration in effect.
const TIERS: &str = "quotas: {maxBackups: 1000000, maxSchedules: 1000, maxRestoresPerHour: 1000, maxStoredBytes: 1Pi}
tiers:
- name: gold
  namespaceSelector: {matchLabels: {nac-bench/tier: gold}}
  backup: {maxTtl: 4320h, defaultTtl: 720h}
- name: sandbox
  namespaceSelector:
    matchExpressions: [{key: nac-bench/tier, operator: In, values: [sandbox, dev]}]
  backup: {maxTtl: 168h, defaultTtl: 24h}
- name: everyone
  namespaceSelector:
    matchExpressions: [{key: kubernetes.io/metadata.name, operator: Exists}]
  backup: {maxTtl: 2160h, defaultTtl: 335h}
  quotas: {maxBackups: 1000000, maxSchedules: 1000, maxRestoresPerHour: 1000, maxStoredBytes: 1Pi}
";

/// The same rules as in-process policies: the TTL default and bound, the own namespace, no cluster resources,
/// no excluded namespaces, and an immutable spec.
const CEL: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: nac-bench-nab}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: [oadp.openshift.io], apiVersions: [v1alpha1], operations: [CREATE], resources: [nonadminbackups]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        [JSONPatch{op: "add", path: "/spec/backupSpec/includedNamespaces", value: [object.metadata.namespace]}] +
        (has(object.spec.backupSpec.ttl) ? [] :
          [JSONPatch{op: "add", path: "/spec/backupSpec/ttl", value: "168h0m0s"}])
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: nac-bench-nab}
spec: {policyName: nac-bench-nab}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: nac-bench-nab}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [oadp.openshift.io], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [nonadminbackups]}
  validations:
  - expression: "!has(object.spec.backupSpec.includedNamespaces) || object.spec.backupSpec.includedNamespaces == [object.metadata.namespace]"
    message: spec.backupSpec.includedNamespaces may name only the backup's own namespace
  - expression: "!has(object.spec.backupSpec.excludedNamespaces)"
    message: spec.backupSpec.excludedNamespaces is not allowed
  - expression: "!has(object.spec.backupSpec.includeClusterResources) || !object.spec.backupSpec.includeClusterResources"
    message: spec.backupSpec.includeClusterResources may not be true
  - expression: "!has(object.spec.backupSpec.ttl) || duration(object.spec.backupSpec.ttl) <= duration('2160h')"
    message: spec.backupSpec.ttl exceeds the maximum 2160h
  - expression: "oldObject == null || object.spec.backupSpec == oldObject.spec.backupSpec"
    message: spec.backupSpec cannot change after creation
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: nac-bench-nab}
spec: {policyName: nac-bench-nab, validationActions: [Deny]}
"#;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Config {
    None,
    Nac,
    NacTwoCalls,
    NacH1,
    /// `nac` with the policy's `rights.backup: off` (no SubjectAccessReviews for the requester's rights).
    NacRightsOff,
    /// `nac` with three tiers and every quota set (`TIERS`).
    NacTiers,
    /// The least any webhook costs: nac's validating call alone (no mutation, no patch, no rights check), the
    /// object stored as sent.
    Floor,
    /// `nac` run from another build (ADMISSION_BASELINE_BIN): a change against its parent in one run.
    Baseline,
    /// No admission, each create sending the object as nac stores it (its label, finalizer, annotations and
    /// filled-in fields): what storing nac's larger object costs, without any call.
    NoneNacSized,
    /// The fill-ins as the in-process MutatingAdmissionPolicy of `cel` and nac's validating call alone: what a
    /// create would cost if nac rendered its mutation as a policy and kept its call for the checks.
    MapAndFloor,
    /// `nac` with `rights.warning_lookups: false`: no list of which left-out kinds hold objects (what those
    /// lookups cost, side by side).
    NacNoLookups,
    Cel,
}

impl Config {
    const ALL: [Config; 12] = [
        Config::None,
        Config::Nac,
        Config::NacTwoCalls,
        Config::NacH1,
        Config::NacRightsOff,
        Config::NacTiers,
        Config::Floor,
        Config::Baseline,
        Config::NoneNacSized,
        Config::MapAndFloor,
        Config::NacNoLookups,
        Config::Cel,
    ];
    fn name(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Nac => "nac",
            Config::NacTwoCalls => "nac-two-calls",
            Config::NacH1 => "nac-h1",
            Config::NacRightsOff => "nac-rights-off",
            Config::NacTiers => "nac-tiers",
            Config::Floor => "webhook-floor",
            Config::Baseline => "nac-baseline",
            Config::NoneNacSized => "none-nac-sized",
            Config::MapAndFloor => "cel-mutation-and-floor",
            Config::NacNoLookups => "nac-no-lookups",
            Config::Cel => "cel",
        }
    }
}

/// The configurations to run: ADMISSION_CONFIGS (comma-separated names), or all. `none`, `nac` and `cel` are
/// always run, since the ratios are taken against them; `nac-baseline` only with ADMISSION_BASELINE_BIN.
fn configs() -> Vec<Config> {
    let baseline = std::env::var_os("ADMISSION_BASELINE_BIN").is_some();
    let names = std::env::var("ADMISSION_CONFIGS").ok();
    let names: Option<Vec<&str>> = names.as_deref().map(|n| n.split(',').map(str::trim).collect());
    Config::ALL
        .into_iter()
        .filter(|c| match c {
            Config::None | Config::Nac | Config::Cel => true,
            Config::Baseline => baseline,
            c => names.as_ref().is_none_or(|n| n.contains(&c.name())),
        })
        .collect()
}

/// Round `round`'s order: the list rotated by one per round, so that no configuration always runs right after
/// another (the API server and etcd grow through a run, and what ran just before leaves work behind).
fn order(configs: &[Config], round: usize) -> Vec<Config> {
    let mut v = configs.to_vec();
    if !v.is_empty() {
        let k = round % v.len();
        v.rotate_left(k);
    }
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn nab(name: &str) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": {"labelSelector": {"matchLabels": {"app": "shop"}}}}
    }))
    .unwrap()
}

async fn delete_cel(admin: &Client) {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    for kind in [
        "MutatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind));
        let _ = Api::<DynamicObject>::all_with(admin.clone(), &ar)
            .delete("nac-bench-nab", &DeleteParams::default())
            .await;
    }
}

/// The validating webhook call nac registered for NonAdminBackups before it decided in one call.
fn second_call(env: &Env) -> String {
    let ca = std::fs::read(env.cluster.get("WEBHOOK_CA_CERT")).unwrap();
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: nac-bench-validating}}
webhooks:
- name: vnab.nac.oadp.openshift.io
  clientConfig: {{url: "https://{}/validate/nonadminbackups", caBundle: {ca}}}
  rules:
  - {{apiGroups: [oadp.openshift.io], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [nonadminbackups], scope: Namespaced}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
"#,
        env.nac.webhook
    )
}

/// Puts `config` in place and waits until a create shows it is in effect. `h1`: the nac process that offers only
/// HTTP/1.1.
async fn configure(env: &Env, procs: &Procs, admin: &Client, config: Config, probe: &Api<NonAdminBackup>) {
    delete_webhooks(admin).await;
    delete_cel(admin).await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete("nac-bench-validating", &DeleteParams::default())
        .await;
    let nac = procs.of(env, config);
    let rights_off = config == Config::NacRightsOff;
    let policy = if rights_off {
        format!("{POLICY}rights: {{backup: off}}\n")
    } else if config == Config::NacTiers {
        format!("{POLICY}{TIERS}")
    } else {
        POLICY.to_string()
    };
    set_policy(admin, &policy).await.unwrap();
    match config {
        Config::None | Config::NoneNacSized => {}
        Config::Nac
        | Config::NacH1
        | Config::NacRightsOff
        | Config::NacTiers
        | Config::Baseline
        | Config::NacNoLookups => register_webhooks(&env.cluster, admin, nac).await,
        Config::NacTwoCalls => {
            register_webhooks(&env.cluster, admin, nac).await;
            apply_yaml(admin, &second_call(env)).await;
        }
        Config::Floor => apply_yaml(admin, &second_call(env)).await,
        Config::MapAndFloor => {
            // The MutatingAdmissionPolicy and its binding: the first two documents of CEL.
            apply_yaml(admin, &CEL.split("\n---\n").take(2).collect::<Vec<_>>().join("\n---\n")).await;
            apply_yaml(admin, &second_call(env)).await;
        }
        Config::Cel => apply_yaml(admin, CEL).await,
    }
    let want = match config {
        Config::NacH1 | Config::Baseline | Config::NacNoLookups => Config::Nac,
        Config::NoneNacSized => Config::None,
        c => c,
    };
    let rights_mode = |o: &NonAdminBackup| {
        let record = o.annotations().get(nac::rights::BACKUP_RIGHTS_ANNOTATION)?;
        Some(serde_json::from_str::<nac::rights::BackupRights>(record).ok()?.mode)
    };
    // nac's mutating webhook stamps the nacuuid label, a validating call counts in nac's metrics; the CEL policy
    // sets includedNamespaces and nothing else.
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        let before = validate_calls(nac).await;
        let o = probe
            .create(&PostParams::default(), &nab(&format!("probe-{}-{i}", config.name())))
            .await;
        let validated = validate_calls(nac).await > before;
        let seen = o.as_ref().map(|o| {
            let labelled = o
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(nac::naming::NAB_ORIGIN_NACUUID_LABEL));
            let scoped = o.spec.backup_spec.included_namespaces.is_some();
            let off = rights_mode(o) == Some(nac::rights::RightsMode::Off);
            let tiered = o.spec.backup_spec.ttl.as_deref() == Some("335h0m0s");
            match (labelled, validated, scoped) {
                (false, false, false) => Some(Config::None),
                (true, false, _) if off => Some(Config::NacRightsOff),
                (true, false, _) if tiered => Some(Config::NacTiers),
                (true, false, _) => Some(Config::Nac),
                (true, true, _) => Some(Config::NacTwoCalls),
                (false, false, true) => Some(Config::Cel),
                (false, true, true) => Some(Config::MapAndFloor),
                (false, true, false) => Some(Config::Floor),
            }
        });
        if let Ok(o) = &o {
            if seen.as_ref().ok() == Some(&Some(want)) {
                // What the configuration makes of the same request: the object as stored.
                let size = serde_json::to_vec(o).unwrap().len();
                let notes: usize = o.annotations().iter().map(|(k, v)| k.len() + v.len()).sum();
                println!(
                    "{}: the created object is {size} bytes of JSON, {notes} of them annotations",
                    config.name()
                );
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{config:?} not in effect after 60 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many reviews nac's validating webhook for NonAdminBackups has answered.
async fn validate_calls(nac: &NacProcess) -> f64 {
    nac.metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("nac_webhook_requests_total") && l.contains("/validate/nonadminbackups"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The object nac stored for a plain create (`nab`), as a request: what `none-nac-sized` sends.
async fn as_nac_stores(env: &Env, procs: &Procs, admin: &Client) -> NonAdminBackup {
    let (ns, user, _) = new_tenant("adm-template").await;
    let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
    configure(env, procs, admin, Config::Nac, &api).await;
    let mut o = api.create(&PostParams::default(), &nab("template")).await.unwrap();
    let m = &mut o.metadata;
    (
        m.uid,
        m.resource_version,
        m.creation_timestamp,
        m.managed_fields,
        m.generation,
        m.namespace,
    ) = (None, None, None, None, None, None);
    o.status = None;
    o
}

/// `n` creates, `in_flight` at a time: each call's latency, and the wall time of them all. Each create sends
/// `template` under its own name, create `i` as the tenant `apis[i % apis.len()]`.
async fn measure(
    apis: &[Api<NonAdminBackup>],
    prefix: &str,
    n: usize,
    in_flight: usize,
    template: &NonAdminBackup,
) -> (Vec<Duration>, Duration) {
    let start = Instant::now();
    let mut lat: Vec<Duration> = futures::stream::iter(0..n)
        .map(|i| {
            let api = apis[i % apis.len()].clone();
            let name = format!("{prefix}{i}");
            let mut o = template.clone();
            o.metadata.name = Some(name.clone());
            async move {
                let t = Instant::now();
                api.create(&PostParams::default(), &o)
                    .await
                    .unwrap_or_else(|e| panic!("create {name}: {e}"));
                t.elapsed()
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let wall = start.elapsed();
    lat.sort();
    (lat, wall)
}

/// The nac processes beside the main one: HTTP/1.1 only, and another build.
struct Procs {
    h1: NacProcess,
    no_lookups: NacProcess,
    baseline: Option<NacProcess>,
}

impl Procs {
    /// The nac process a configuration runs against.
    fn of<'a>(&'a self, env: &'a Env, config: Config) -> &'a NacProcess {
        match config {
            Config::NacH1 => &self.h1,
            Config::NacNoLookups => &self.no_lookups,
            Config::Baseline => self
                .baseline
                .as_ref()
                .expect("nac-baseline runs with ADMISSION_BASELINE_BIN"),
            _ => &env.nac,
        }
    }
}

/// The processes whose CPU time a run is charged with: where the time of a create goes.
struct Cpu {
    procs: Vec<(&'static str, u32)>,
}

impl Cpu {
    fn new(env: &Env, nac: &NacProcess) -> Cpu {
        let pid = |k: &str| env.cluster.get(k).parse::<u32>().unwrap();
        Cpu {
            procs: vec![
                ("kube-apiserver", pid("APISERVER_PID")),
                ("etcd", pid("ETCD_PID")),
                ("nac", nac.nac_pid().expect("nac runs")),
                ("client", std::process::id()),
            ],
        }
    }
    fn sample(&self) -> Vec<f64> {
        self.procs
            .iter()
            .map(|(_, p)| process_cpu_ms(*p).unwrap_or(0.0))
            .collect()
    }
}

/// With ADMISSION_PERF=<dir>: `perf record` of the API server and nac during a measured run, into
/// `<dir>/<process>-<run>.data` (where a create's CPU time goes; `perf report -i ...`).
fn perf_start(cpu: &Cpu, run: &str) -> Vec<std::process::Child> {
    let Ok(dir) = std::env::var("ADMISSION_PERF") else {
        return Vec::new();
    };
    std::fs::create_dir_all(&dir).unwrap();
    cpu.procs
        .iter()
        .filter(|(name, _)| matches!(*name, "kube-apiserver" | "nac"))
        .filter_map(|(name, pid)| {
            // nac's Rust frames unwind only with DWARF (no frame pointers); the Go API server's with them.
            let graph = if *name == "nac" { "dwarf,16384" } else { "fp" };
            std::process::Command::new("perf")
                .args([
                    "record",
                    "-q",
                    "-F",
                    "499",
                    "--call-graph",
                    graph,
                    "-p",
                    &pid.to_string(),
                    "-o",
                ])
                .arg(format!("{dir}/{name}-{run}.data"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()
        })
        .collect()
}

fn perf_stop(children: Vec<std::process::Child>) {
    for mut c in children {
        // SAFETY: kill has no memory preconditions; perf writes its file on SIGINT.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let _ = c.wait();
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0
}

/// SubjectAccessReviews (nac's questions about requesters' rights) and SelfSubjectAccessReviews (nac's about its
/// own, see `rights::occupancy`) the API server has answered so far.
async fn reviews_answered(admin: &Client) -> (f64, f64) {
    let req = axum::http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(req).await.unwrap();
    let count = |resource: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{") && l.contains(&format!("resource=\"{resource}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (count("subjectaccessreviews"), count("selfsubjectaccessreviews"))
}

/// The lists a nac process has sent to learn which left-out kinds hold objects (`rights::occupancy`).
async fn occupancy_lists(nac: &NacProcess) -> f64 {
    nac.metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("nac_rights_occupancy_lists_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The many-tenant configuration (ADMISSION_TENANTS=N, N > 1): `nac` and `cel` only (and `nac-baseline`), each round's creates spread
/// over N tenants made once (each its own user in its own namespace, Kubernetes' `admin` role and nac's editor
/// role there), create `i` by tenant `i % N`; reviews asked per create and the API server's CPU per create, per
/// round. The run lasts several of nac's rights-answer lifetimes (`rights.cache_lifetime_secs`, set by
/// ADMISSION_RIGHTS_LIFETIME, default 60 s, shorter than the default so a short run passes it).
async fn many_tenants(env: &Env, procs: &Procs, admin: &Client, tenants: usize, n: usize, in_flight: usize) {
    let rounds = env_usize("ADMISSION_ROUNDS", 5);
    let made = Instant::now();
    let mut apis = Vec::new();
    for t in 0..tenants {
        let (ns, user, _) = new_tenant(&format!("adm-t{t}")).await;
        apis.push(Api::<NonAdminBackup>::namespaced(user, &ns));
    }
    println!(
        "{tenants} tenants made in {:.0} s; {n} creates per run spread over them, {in_flight} in flight, {rounds} rounds, \
         nac and cel interleaved (the order rotated each round)",
        made.elapsed().as_secs_f64()
    );
    println!("| round | s since start | configuration | p50 ms | p99 ms | creates/s | reviews/create | self-reviews/create | lists/create | API server CPU ms/create |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let plain = nab("template");
    // With ADMISSION_BASELINE_BIN, that build too (before and after a change in one run).
    let many: Vec<Config> = configs()
        .into_iter()
        .filter(|c| matches!(c, Config::Nac | Config::Baseline | Config::NacNoLookups | Config::Cel))
        .collect();
    // Each configuration warmed with 200 creates in a tenant of its own (as the one-tenant runs are): the
    // processes' connections and the API server's webhook clients are warm, while every one of the N tenants is
    // still first seen in round 0. This also lets the API server and controller manager finish with the N new
    // namespaces and bindings before anything is timed.
    let (warm_ns, warm_user, _) = new_tenant("adm-warm").await;
    let warm = Api::<NonAdminBackup>::namespaced(warm_user, &warm_ns);
    for config in &many {
        configure(env, procs, admin, *config, &warm).await;
        measure(
            std::slice::from_ref(&warm),
            &format!("warm-{}-", config.name()),
            200,
            in_flight,
            &plain,
        )
        .await;
    }
    println!("each configuration warmed with 200 creates in a tenant of its own");
    let start = Instant::now();
    let mut per_round: Vec<(usize, Config, f64, f64)> = Vec::new();
    for round in 0..rounds {
        for config in order(&many, round) {
            configure(env, procs, admin, config, &apis[0]).await;
            let cpu = Cpu::new(env, procs.of(env, config));
            let (before, reviews) = (cpu.sample(), reviews_answered(admin).await);
            let lists = occupancy_lists(procs.of(env, config)).await;
            let at = start.elapsed().as_secs_f64();
            let (lat, wall) = measure(&apis, &format!("r{round}-{}-", config.name()), n, in_flight, &plain).await;
            let (after, reviews_after) = (cpu.sample(), reviews_answered(admin).await);
            let lists = occupancy_lists(procs.of(env, config)).await - lists;
            let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
            println!(
                "| {round} | {at:.0} | {} | {p50:.1} | {p99:.1} | {:.0} | {:.3} | {:.3} | {:.3} | {:.2} |",
                config.name(),
                n as f64 / wall.as_secs_f64(),
                (reviews_after.0 - reviews.0) / n as f64,
                (reviews_after.1 - reviews.1) / n as f64,
                lists / n as f64,
                (after[0] - before[0]) / n as f64,
            );
            per_round.push((round, config, p50, p99));
        }
    }
    println!("\nAgainst cel within each round, p50 and p99:");
    for r in 0..rounds {
        let of = |k: Config| per_round.iter().find(|x| x.0 == r && x.1 == k).unwrap();
        let cel = of(Config::Cel);
        for c in many.iter().filter(|c| **c != Config::Cel) {
            let x = of(*c);
            println!("  round {r}, {}: {:.2}x, {:.2}x", c.name(), x.2 / cel.2, x.3 / cel.3);
        }
    }
    delete_cel(admin).await;
}

#[tokio::test]
async fn admission_configurations_side_by_side() {
    let n = env_usize("ADMISSION_CREATES", 2000);
    let in_flight = env_usize("ADMISSION_IN_FLIGHT", 16);
    let rounds = env_usize("ADMISSION_ROUNDS", 3);
    let tenants = env_usize("ADMISSION_TENANTS", 1);
    // nac logs as installed (info), not at the tests' debug level: a line per review is not what runs.
    let info = || vec![("NAC_LOG__LEVEL".to_string(), "info".to_string())];
    let lifetime = std::env::var("ADMISSION_RIGHTS_LIFETIME").unwrap_or_else(|_| "60".into());
    let env = Env::start(
        POLICY,
        NacOptions {
            controllers: false,
            extra_env: [
                info(),
                vec![("NAC_RIGHTS__CACHE_LIFETIME_SECS".into(), lifetime.clone())],
            ]
            .concat(),
            ..Default::default()
        },
    )
    .await;
    let admin = env.cluster.admin().await;
    // The same nac offering only HTTP/1.1 (the API server then keeps a pool of connections instead of
    // multiplexing every review over one HTTP/2 connection).
    let h1 = NacProcess::spawn(
        &env.cluster,
        NacOptions {
            controllers: false,
            extra_env: [info(), vec![("NAC_WEBHOOK__HTTP2".into(), "false".into())]].concat(),
            ..Default::default()
        },
    );
    h1.wait_ready().await;
    let no_lookups = NacProcess::spawn(
        &env.cluster,
        NacOptions {
            controllers: false,
            extra_env: [
                info(),
                vec![
                    ("NAC_RIGHTS__WARNING_LOOKUPS".into(), "false".into()),
                    ("NAC_RIGHTS__CACHE_LIFETIME_SECS".into(), lifetime.clone()),
                ],
            ]
            .concat(),
            ..Default::default()
        },
    );
    no_lookups.wait_ready().await;
    // Another build of nac beside this one (its parent, say), registered the same way.
    let baseline = std::env::var("ADMISSION_BASELINE_BIN").ok().map(|bin| {
        NacProcess::spawn(
            &env.cluster,
            NacOptions {
                controllers: false,
                extra_env: [info(), vec![("NAC_E2E_BIN".into(), bin)]].concat(),
                ..Default::default()
            },
        )
    });
    if let Some(b) = &baseline {
        b.wait_ready().await;
    }
    let procs = Procs {
        h1,
        no_lookups,
        baseline,
    };
    if tenants > 1 {
        return many_tenants(&env, &procs, &admin, tenants, n, in_flight).await;
    }
    let plain = nab("template");
    let sized = if configs().contains(&Config::NoneNacSized) {
        as_nac_stores(&env, &procs, &admin).await
    } else {
        plain.clone()
    };
    let mut all: Vec<(Config, Vec<Duration>, Duration)> = Vec::new();
    // p50 and p99 per configuration and round, for the ratios within each round.
    let mut per_round: Vec<(usize, Config, f64, f64)> = Vec::new();
    // CPU ms per create, summed over rounds, per configuration and process.
    let mut spent: Vec<(Config, Vec<f64>)> = configs().iter().map(|c| (*c, vec![0.0; 4])).collect();
    println!("{n} creates per run, {in_flight} in flight, {rounds} rounds; configurations interleaved, the order rotated each round");
    println!("| round | configuration | p50 ms | p99 ms | creates/s |");
    println!("|---|---|---|---|---|");
    for round in 0..rounds {
        for config in order(&configs(), round) {
            let (ns, user, _) = new_tenant(&format!("adm-{}-{round}", config.name())).await;
            let api: Api<NonAdminBackup> = Api::namespaced(user, &ns);
            configure(&env, &procs, &admin, config, &api).await;
            let template = if config == Config::NoneNacSized { &sized } else { &plain };
            let api = std::slice::from_ref(&api);
            measure(api, "warm-", 200, in_flight, template).await;
            let cpu = Cpu::new(&env, procs.of(&env, config));
            let before = cpu.sample();
            let perf = perf_start(&cpu, &format!("{}-{round}", config.name()));
            let (lat, wall) = measure(api, "b-", n, in_flight, template).await;
            perf_stop(perf);
            let after = cpu.sample();
            let slot = &mut spent.iter_mut().find(|s| s.0 == config).unwrap().1;
            for (i, (a, b)) in after.iter().zip(&before).enumerate() {
                slot[i] += (a - b) / n as f64;
            }
            let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
            println!(
                "| {round} | {} | {p50:.1} | {p99:.1} | {:.0} |",
                config.name(),
                n as f64 / wall.as_secs_f64()
            );
            per_round.push((round, config, p50, p99));
            all.push((config, lat, wall));
        }
    }
    println!("\nAll rounds together:");
    println!("| configuration | p50 ms | p99 ms | creates/s |");
    println!("|---|---|---|---|");
    let mut summary = Vec::new();
    for config in configs() {
        let mut lat: Vec<Duration> = all
            .iter()
            .filter(|(c, _, _)| *c == config)
            .flat_map(|(_, l, _)| l.iter().copied())
            .collect();
        lat.sort();
        let wall: f64 = all
            .iter()
            .filter(|(c, _, _)| *c == config)
            .map(|(_, _, w)| w.as_secs_f64())
            .sum();
        let (p50, p99, rate) = (pct(&lat, 0.5), pct(&lat, 0.99), lat.len() as f64 / wall);
        println!("| {} | {p50:.1} | {p99:.1} | {rate:.0} |", config.name());
        summary.push((config, p50, p99));
    }
    println!("\nCPU per create, ms (average over rounds; a 2-core machine: the sum bounds creates/s):");
    println!(
        "| configuration | {} | total |",
        Cpu::new(&env, &env.nac)
            .procs
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|---|---|---|---|---|");
    for (c, ms) in &spent {
        let ms: Vec<f64> = ms.iter().map(|m| m / rounds as f64).collect();
        println!(
            "| {} | {} | {:.3} |",
            c.name(),
            ms.iter().map(|m| format!("{m:.3}")).collect::<Vec<_>>().join(" | "),
            ms.iter().sum::<f64>()
        );
    }
    let get = |c: Config| summary.iter().find(|s| s.0 == c).copied().unwrap();
    let (nac, cel, none) = (get(Config::Nac), get(Config::Cel), get(Config::None));
    println!(
        "\nnac / none: p50 {:.2}x, p99 {:.2}x; against cel (p50, p99):",
        nac.1 / none.1,
        nac.2 / none.2
    );
    for (c, p50, p99) in &summary {
        println!("  {}: {:.2}x, {:.2}x", c.name(), p50 / cel.1, p99 / cel.2);
    }
    // Each round's configurations ran minutes apart at most, against the same cluster: a ratio within a round is
    // less exposed to the machine's drift than the pooled one. Their median over the rounds, and the spread.
    println!("\nAgainst cel within each round (median over {rounds} rounds [min, max]), p50 and p99:");
    for c in configs() {
        let ratios = |col: fn(&(usize, Config, f64, f64)) -> f64| -> Vec<f64> {
            (0..rounds)
                .filter_map(|r| {
                    let of = |k: Config| per_round.iter().find(|x| x.0 == r && x.1 == k);
                    Some(col(of(c)?) / col(of(Config::Cel)?))
                })
                .collect()
        };
        let (a, b) = (ratios(|x| x.2), ratios(|x| x.3));
        let span = |v: &[f64]| {
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("[{min:.2}, {max:.2}]")
        };
        println!(
            "  {}: {:.2}x {}, {:.2}x {}",
            c.name(),
            median(a.clone()),
            span(&a),
            median(b.clone()),
            span(&b)
        );
    }
    delete_cel(&admin).await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete("nac-bench-validating", &DeleteParams::default())
        .await;
    if let Some(kib) = env.nac.peak_rss_kib() {
        println!("nac peak RSS {:.1} MiB", kib as f64 / 1024.0);
    }
}
