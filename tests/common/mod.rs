//! Shared helpers for integration tests: a real HTTPS webhook server on loopback with generated certificates.
#![allow(dead_code)]

// Development code outside the library (the development CA, the HTTPS client), shared with the nac binary.
#[path = "../../src/devtools/dev_ca.rs"]
pub mod dev_ca;
#[path = "../../src/devtools/https_client.rs"]
pub mod https_client;

#[cfg(feature = "e2e")]
pub mod e2e;
#[cfg(feature = "e2e")]
pub mod faults;
#[cfg(feature = "e2e")]
pub mod oadp;
pub mod oadp_objects;
#[cfg(feature = "e2e")]
pub mod velero;

/// OADP's namespace, where Velero and nac's Velero objects are, in every test environment.
pub const VELERO_NAMESPACE: &str = "openshift-adp";

pub use dev_ca::DevCa;
pub use https_client::{client_config, Conn};
use nac::admission::{self, AdmissionState};
use nac::metrics::Metrics;
use nac::policy::live::PolicyStore;
use nac::runtime::tls::CertStore;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub const STRICT_POLICY: &str = "
enforceBackupSpec:
  ttl: 720h0m0s
  defaultVolumesToFsBackup: true
  snapshotVolumes: false
enforceRestoreSpec:
  restorePVs: true
backup:
  maxTtl: 2160h
  minTtl: 1h
";

pub struct TestServer {
    pub addr: SocketAddr,
    pub ca: DevCa,
    pub dir: tempfile::TempDir,
    pub policy: Arc<PolicyStore>,
    pub metrics: Arc<Metrics>,
    pub certs: Arc<CertStore>,
    stop: CancellationToken,
}

pub fn hosts() -> Vec<String> {
    vec!["127.0.0.1".to_string(), "localhost".to_string()]
}

impl TestServer {
    /// Starts the webhook server on an ephemeral loopback port with `policy` (None: no valid policy yet).
    pub async fn start(policy: Option<&str>) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let ca = DevCa::new(1).unwrap();
        let (cert, key) = ca.issue(&hosts(), 1).unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
        std::fs::write(dir.path().join("tls.key"), key).unwrap();
        let certs = CertStore::load(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).unwrap();
        tokio::spawn(certs.clone().watch(std::time::Duration::from_secs(1)));
        let metrics = Arc::new(Metrics::new());
        let store = Arc::new(PolicyStore::new(Some(metrics.clone())));
        if let Some(p) = policy {
            assert!(matches!(store.offer(p, "test"), nac::policy::live::Offer::Applied(_)));
        }
        let state = Arc::new(AdmissionState {
            policy: store.clone(),
            metrics: metrics.clone(),
            privileged_users: vec!["system:serviceaccount:nac-system:nac".into()],
            policy_configmap: "nac-policy".into(),
            policy_namespace: "nac-system".into(),
            locations: Some(Arc::new(FakeLocations)),
            access: Some(Arc::new(nac::rights::Fixed {
                denied: vec![
                    ("restricted".into(), "list".into(), "secrets".into()),
                    ("restricted".into(), "get".into(), "secrets".into()),
                ],
                ..nac::rights::Fixed::common()
            })),
            endpoints: Arc::new(nac::endpoints::Endpoints::fixed(
                &[
                    ("s3.example.com", &["203.0.113.7"]),
                    ("metadata.internal", &["169.254.169.254"]),
                ],
                &["10.96.0.0/12", "10.244.0.0/16"],
            )),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(nac::runtime::serve_tls(
            listener,
            certs.clone(),
            admission::router(state),
            true,
            stop.clone(),
        ));
        TestServer {
            addr,
            ca,
            dir,
            policy: store,
            metrics,
            certs,
            stop,
        }
    }

    /// Gives the server counts of namespaces' use of quotas, as read in full: namespace `full` has three
    /// NonAdminSchedules, others nothing.
    pub fn count_usage(&self) -> Arc<nac::policy::live::UsageIndex> {
        let usage = Arc::new(nac::policy::live::UsageIndex::default());
        for i in 0..3 {
            usage.put_schedule(&kube::core::ObjectMeta {
                name: Some(format!("s{i}")),
                namespace: Some("full".into()),
                uid: Some(format!("uid-s{i}")),
                ..Default::default()
            });
        }
        usage.mark_synced();
        self.policy.count_usage(usage.clone());
        usage
    }

    pub fn cert_path(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }

    pub async fn connect_with(&self, alpn: &[&[u8]], tls12_only: bool) -> Conn {
        let cfg = client_config(self.ca.cert_pem.as_bytes(), alpn, tls12_only).unwrap();
        Conn::connect(self.addr, Arc::new(cfg)).await.unwrap()
    }

    pub async fn connect(&self) -> Conn {
        self.connect_with(&[b"http/1.1"], false).await
    }

    /// POSTs a review and returns the status and parsed JSON (or text for errors).
    pub async fn post_json(&self, path: &str, review: &Value) -> (u16, Value) {
        let mut c = self.connect().await;
        let (status, body) = c
            .post(path, "application/json", serde_json::to_vec(review).unwrap())
            .await
            .unwrap();
        let v = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
        (status, v)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub fn fixture(name: &str) -> Value {
    let p = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// Applies the response's JSON patch to the request object and returns the result.
pub fn patched_object(review: &Value, response: &Value) -> Value {
    let mut obj = review["request"]["object"].clone();
    // The wire format is base64 (Go's decoder also takes an array of numbers, kube's own encoding, but reads
    // it several times slower: nac must not send that).
    let bytes: Option<Vec<u8>> = match &response["response"]["patch"] {
        Value::String(p) => {
            use base64::Engine;
            Some(base64::engine::general_purpose::STANDARD.decode(p).unwrap())
        }
        Value::Null => None,
        other => panic!("the patch must be a base64 string, got {other}"),
    };
    if let Some(bytes) = bytes {
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut obj, &patch).unwrap();
    }
    obj
}

/// Velero storage locations as the guard's lookup sees them: `tenant-loc` made by nac for team-a's `own`,
/// `admin-loc` an admin's, `broken` an API error, anything else missing.
pub struct FakeLocations;

impl nac::admission::LocationLookup for FakeLocations {
    fn location<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>, String>,
    > {
        Box::pin(async move {
            match name {
                "tenant-loc" => Ok(Some(nac::naming::NABSL.stamp(
                    name,
                    "velero",
                    "team-a-own-uuid",
                    "team-a",
                    "own",
                    &[],
                ))),
                "admin-loc" => Ok(Some(Default::default())),
                "broken" => Err("connection refused".into()),
                _ => Ok(None),
            }
        })
    }

    /// Secrets of any namespace: `static-keys` holds static keys, `process` a `credential_process` line,
    /// `unreadable` cannot be read; others do not exist (key `cloud` in each).
    fn secret<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<k8s_openapi::api::core::v1::Secret>, String>> {
        let file: Option<&str> = match name {
            "static-keys" => Some("[default]\naws_access_key_id = A\naws_secret_access_key = B\n"),
            "process" => Some("[default]\ncredential_process = /bin/sh -c 'touch /tmp/owned'\n"),
            _ => None,
        };
        Box::pin(async move {
            if name == "unreadable" {
                return Err("connection refused".into());
            }
            Ok(file.map(|f| k8s_openapi::api::core::v1::Secret {
                data: Some([("cloud".to_string(), k8s_openapi::ByteString(f.as_bytes().to_vec()))].into()),
                ..Default::default()
            }))
        })
    }

    /// `team-a-nightly-...`: a Velero Schedule nac made for team-a's NonAdminSchedule `nightly`, whose template
    /// is team-a's own namespace on its location `tenant-loc`.
    /// Velero Backups: `on-tenant` on team-a's location, recording snapshot `mine` of driver `d`; `on-admin` on an
    /// admin's location; `garbled` on team-a's with an unreadable record; `lost-location` on a location that does
    /// not exist; `broken` cannot be read; others: none.
    fn velero_backup<'a>(
        &'a self,
        label: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<nac::velero::Backup>, String>> {
        Box::pin(async move {
            let (location, record) = match label {
                "on-tenant" => ("tenant-loc", r#"[{"driver":"d","snapshotHandle":"mine"}]"#),
                "on-admin" => ("admin-loc", "[]"),
                "garbled" => ("tenant-loc", "everything"),
                "lost-location" => ("missing", "[]"),
                "broken" => return Err("connection refused".into()),
                _ => return Ok(None),
            };
            let b = serde_json::from_value(serde_json::json!({
                "metadata": {"name": label, "namespace": "velero",
                    "annotations": {nac::velero::snapshot::SNAPSHOTS_ANNOTATION: record}},
                "spec": {"storageLocation": location}
            }))
            .unwrap();
            Ok(Some(b))
        })
    }

    /// Velero has VolumeSnapshotLocation `ebs`.
    fn snapshot_location(&self) -> futures::future::BoxFuture<'_, Result<Option<String>, String>> {
        Box::pin(async { Ok(Some("ebs".to_string())) })
    }

    fn velero_schedule<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<nac::velero::Schedule>, String>> {
        Box::pin(async move {
            if name != VELERO_SCHEDULE {
                return Ok(None);
            }
            let mut s = nac::velero::Schedule::new(
                name,
                nac::velero::ScheduleSpec {
                    schedule: "@daily".into(),
                    template: serde_json::from_value(serde_json::json!({
                        "includedNamespaces": ["team-a"], "storageLocation": "tenant-loc"
                    }))
                    .unwrap(),
                    ..Default::default()
                },
            );
            s.metadata = nac::naming::NAS.stamp(name, "velero", name, "team-a", "nightly", &[]);
            Ok(Some(s))
        })
    }

    /// team-a's NonAdminBackup `nightly`: a finished backup of every kind; `unfinished` has no Velero Backup yet;
    /// `broken` cannot be read; anything else: none.
    fn download_file<'a>(
        &'a self,
        namespace: &'a str,
        target: &'a nac::api::NonAdminDownloadTarget,
    ) -> futures::future::BoxFuture<'a, Result<Option<nac::rights::download::Exposure>, String>> {
        Box::pin(async move {
            match (namespace, target.name.as_str()) {
                ("team-a", "nightly") => {
                    let b = nac::velero::Backup::new("team-a-nightly", Default::default());
                    Ok(Some(nac::rights::download::Exposure::of_backup(
                        target.kind,
                        &target.name,
                        &b,
                    )))
                }
                (_, "broken") => Err("connection refused".into()),
                _ => Ok(None),
            }
        })
    }
}

/// The Velero Schedule [`FakeLocations`] knows.
pub const VELERO_SCHEDULE: &str = "team-a-nightly-0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";
