//! Helpers of the end-to-end tests with the real Velero and S3 server (`tests/e2e_velero*.rs`): the tenant's
//! objects, waits on Velero's phases, and the bucket read as plain files (versitygw's posix backend).

use super::e2e::*;
use kube::api::{Api, ListParams};
use kube::Client;
use nac::api::{NonAdminBackup, NonAdminRestore};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Velero works through backups one at a time; tests of a binary run in parallel and queue behind each other.
pub const T: Duration = Duration::from_secs(120);
pub const TTL: &str = "72h0m0s";

pub const POLICY: &str = "
enforceBackupSpec:
  ttl: 72h0m0s
  snapshotVolumes: false
  storageLocation: default
enforceRestoreSpec:
  existingResourcePolicy: none
backup:
  maxTtl: 2160h
backupSync:
  adminLocations: [default]
nonAdminBSL:
  enabled: true
  requireApproval: true
  allowedEndpoints: {hosts: [127.0.0.1]}
";

pub fn nab(name: &str, backup_spec: Value) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {"name": name}, "spec": {"backupSpec": backup_spec}
    }))
    .unwrap()
}

pub fn nar(name: &str, backup: &str) -> NonAdminRestore {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
        "metadata": {"name": name}, "spec": {"restoreSpec": {"backupName": backup}}
    }))
    .unwrap()
}

/// A small application, created by the admin (the tenant's role covers only nac's kinds): two ConfigMaps, a
/// Secret, a Deployment (its pods stay Pending: no scheduler) and a Service.
pub async fn workload(admin: &Client, ns: &str) {
    let yaml = format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: app-config, namespace: {ns}, labels: {{app: shop}}}}
data: {{mode: production, greeting: hello}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: app-data, namespace: {ns}, labels: {{app: shop}}}}
data: {{items: "1,2,3"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: app-secret, namespace: {ns}, labels: {{app: shop}}}}
type: Opaque
stringData: {{password: s3cr3t}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, labels: {{app: shop}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: shop}}}}
  template:
    metadata: {{labels: {{app: shop}}}}
    spec: {{containers: [{{name: web, image: registry.example/shop:1.0}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}, labels: {{app: shop}}}}
spec:
  selector: {{app: shop}}
  ports: [{{port: 80}}]
"#
    );
    apply_yaml(admin, &yaml).await;
}

/// What [`workload`] holds in `ns`, as a restore must bring it back, by object (`null` when absent): the
/// ConfigMaps' and the Secret's data, the Deployment's containers, the Service's ports.
pub async fn workload_data(admin: &Client, ns: &str) -> BTreeMap<&'static str, Value> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
    let mut data = BTreeMap::new();
    for name in ["app-config", "app-data"] {
        data.insert(name, field_of::<ConfigMap>(admin, ns, name, "/data").await);
    }
    data.insert("app-secret", field_of::<Secret>(admin, ns, "app-secret", "/data").await);
    let containers = field_of::<Deployment>(admin, ns, "web", "/spec/template/spec/containers").await;
    data.insert("deployment web", containers);
    data.insert(
        "service web",
        field_of::<Service>(admin, ns, "web", "/spec/ports").await,
    );
    data
}

/// The field at `pointer` of object `name` in `ns`, `null` when the object or the field is absent.
async fn field_of<K>(admin: &Client, ns: &str, name: &str, pointer: &str) -> Value
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let object = Api::<K>::namespaced(admin.clone(), ns).get_opt(name).await.unwrap();
    object
        .and_then(|o| serde_json::to_value(o).unwrap().pointer(pointer).cloned())
        .unwrap_or(Value::Null)
}

/// Waits until Velero's phase of the NAB's backup is one of `phases` and returns the NAB.
pub async fn velero_phase(api: &Api<NonAdminBackup>, name: &str, phases: &[&str]) -> Value {
    wait_for(api, name, T, &format!("NAB {name}: Velero phase in {phases:?}"), |o| {
        let n = o?.clone();
        let p = n
            .status
            .as_ref()?
            .velero_backup
            .as_ref()?
            .status
            .as_ref()?
            .phase
            .clone()?;
        phases.contains(&p.as_str()).then(|| serde_json::to_value(&n).unwrap())
    })
    .await
}

pub async fn completed(api: &Api<NonAdminBackup>, name: &str) -> Value {
    let n = velero_phase(
        api,
        name,
        &["Completed", "PartiallyFailed", "Failed", "FailedValidation"],
    )
    .await;
    assert_eq!(
        n["status"]["veleroBackup"]["status"]["phase"], "Completed",
        "backup {name} did not complete: {:#}",
        n["status"]
    );
    n
}

/// Where Velero keeps a backup in the bucket (versitygw's posix backend: one file per object).
pub fn bucket_dir(backup: &str) -> PathBuf {
    bucket_dir_of(&Cluster::load(), backup)
}

/// [`bucket_dir`] in environment `c` (the node suite's is not the one [`Cluster::load`] reads).
pub fn bucket_dir_of(c: &Cluster, backup: &str) -> PathBuf {
    PathBuf::from(c.get("S3_DATA_DIR"))
        .join(c.get("S3_BUCKET"))
        .join(c.get("S3_PREFIX"))
        .join("backups")
        .join(backup)
}

pub fn bucket_files(backup: &str) -> Vec<String> {
    bucket_files_of(&Cluster::load(), backup)
}

pub fn bucket_files_of(c: &Cluster, backup: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(bucket_dir_of(c, backup))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// What is wrong with backup `backup`'s data in `dir` (its directory in a bucket), if anything: its tarball must
/// read to its end as a gzipped tar of Kubernetes objects and hold exactly the items of the resource list Velero
/// wrote beside it (by namespace and name; a data-mover backup's DataUploads besides), which may not be empty.
pub fn backup_data_problem(dir: &std::path::Path, backup: &str) -> Option<String> {
    use std::io::Read;
    let read = |file: &str| std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"));
    let check = || -> Result<(), String> {
        let tarball = read(&format!("{backup}.tar.gz"))?;
        let manifest = nac::manifest::Manifest::from_tarball(tarball.as_slice(), &Default::default())
            .map_err(|e| format!("{backup}.tar.gz: {e}"))?;
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(read(&format!("{backup}-resource-list.json.gz"))?.as_slice())
            .read_to_end(&mut text)
            .map_err(|e| format!("{backup}-resource-list.json.gz: {e}"))?;
        // "apps/v1/Deployment": ["ns/name", ...]; cluster-scoped items by name alone.
        let list: BTreeMap<String, Vec<String>> =
            serde_json::from_slice(&text).map_err(|e| format!("{backup}-resource-list.json.gz: {e}"))?;
        let mut listed: Vec<String> = list.into_values().flatten().collect();
        // Velero adds a data-mover backup's DataUploads (in its own namespace) to the tarball as it finalizes the
        // backup, unlisted: a restore reads the uploads' results from there.
        let mut held: Vec<String> = manifest
            .items()
            .filter(|i| i.api_group != "datauploads.velero.io")
            .map(|i| match i.namespace.as_str() {
                "" => i.name.clone(),
                ns => format!("{ns}/{}", i.name),
            })
            .collect();
        listed.sort();
        held.sort();
        if listed.is_empty() || listed != held {
            return Err(format!(
                "the tarball holds {held:?}, the resource list names {listed:?}"
            ));
        }
        Ok(())
    };
    check()
        .err()
        .map(|e| format!("the data of backup {backup} in the bucket: {e}"))
}

pub fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(path)
        .output()
        .expect("running gzip");
    assert!(
        out.status.success(),
        "gzip -dc {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The backup's resource list as Velero wrote it to the bucket: `group/version/Kind` → `namespace/name` (or
/// `name` for cluster-scoped items).
pub fn resource_list(backup: &str) -> BTreeMap<String, Vec<String>> {
    let path = bucket_dir(backup).join(format!("{backup}-resource-list.json.gz"));
    serde_json::from_slice(&gunzip(&path)).unwrap()
}

/// Names of the `K` objects now in namespace `ns`.
pub async fn live_names<K>(admin: &Client, ns: &str) -> BTreeSet<String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let items = Api::<K>::namespaced(admin.clone(), ns)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items;
    items.into_iter().filter_map(|o| o.meta().name.clone()).collect()
}

pub fn listed(list: &BTreeMap<String, Vec<String>>, kind: &str, ns: &str) -> BTreeSet<String> {
    list.get(kind)
        .into_iter()
        .flatten()
        .filter_map(|item| item.strip_prefix(&format!("{ns}/")).map(str::to_string))
        .collect()
}

pub fn seconds(ts: &Value) -> i64 {
    ts.as_str()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .unwrap_or_else(|| panic!("not a timestamp: {ts}"))
        .as_second()
}

/// A NonAdminRestore of `backup` asking to wait up to `wait` for it.
pub fn waiting_nar(name: &str, backup: &str, wait: &str) -> NonAdminRestore {
    let mut r = nar(name, backup);
    r.metadata.annotations = Some([(nac::policy::WAIT_TIMEOUT_ANNOTATION.to_string(), wait.to_string())].into());
    r
}

/// The (status, reason, message) of a NonAdminRestore's condition `ty`.
pub fn nar_condition(n: &NonAdminRestore, ty: &str) -> Option<(String, String, String)> {
    let c = n.status.as_ref()?.conditions.iter().find(|c| c.type_ == ty)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the NonAdminRestore waits for its backup (phase New, Queued=False WaitingForBackup); returns the
/// condition message.
pub async fn waiting(api: &Api<NonAdminRestore>, name: &str) -> String {
    wait_for(api, name, T, &format!("NAR {name} waiting for its backup"), |o| {
        let n = o?;
        let (status, reason, message) = nar_condition(n, "Queued")?;
        let new = n.status.as_ref()?.phase == Some(nac::api::NonAdminPhase::New);
        (new && status == "False" && reason == "WaitingForBackup").then_some(message)
    })
    .await
}

/// Waits until the NonAdminRestore is BackingOff; returns it.
pub async fn backing_off(api: &Api<NonAdminRestore>, name: &str) -> NonAdminRestore {
    wait_for(api, name, T, &format!("NAR {name} BackingOff"), |o| {
        let n = o?;
        (n.status.as_ref()?.phase == Some(nac::api::NonAdminPhase::BackingOff)).then(|| n.clone())
    })
    .await
}

/// Seconds from a NonAdminRestore's creation to its Accepted condition's last transition.
pub fn accepted_after_creation(n: &NonAdminRestore) -> f64 {
    let created = n.metadata.creation_timestamp.as_ref().unwrap().0;
    let c = n
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Accepted")
        .unwrap();
    c.last_transition_time.0.duration_since(created).as_secs_f64()
}

/// Creates a bucket on the local S3 server (a signed PUT, as hack/velero-up.sh makes Velero's).
pub fn create_bucket(name: &str) {
    let c = Cluster::load();
    let out = std::process::Command::new("curl")
        .args(["-sS", "--fail-with-body", "--max-time", "10", "--aws-sigv4"])
        .arg(format!("aws:amz:{}:s3", c.get("S3_REGION")))
        .arg("--user")
        .arg(format!("{}:{}", c.get("S3_ACCESS_KEY"), c.get("S3_SECRET_KEY")))
        .args([
            "-H",
            "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "-X",
            "PUT",
        ])
        .arg(format!("http://127.0.0.1:{}/{name}", c.get("S3_PORT")))
        .output()
        .expect("curl runs");
    // Made by an earlier run against the same environment: the bucket is there, as asked.
    let owned = String::from_utf8_lossy(&out.stdout).contains("BucketAlreadyOwnedByYou");
    assert!(
        out.status.success() || owned,
        "creating bucket {name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The files of a backup in `bucket` under `prefix` (versitygw's posix backend: one file per object).
pub fn files_in(bucket: &str, prefix: &str, backup: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(backup_dir_in(bucket, prefix, backup))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Where a backup lies in `bucket` under `prefix`.
pub fn backup_dir_in(bucket: &str, prefix: &str, backup: &str) -> PathBuf {
    PathBuf::from(Cluster::load().get("S3_DATA_DIR"))
        .join(bucket)
        .join(prefix)
        .join("backups")
        .join(backup)
}

/// An AWS credentials file for the local S3 server; `secret` overrides the secret key (wrong credentials).
pub fn s3_credentials(secret: Option<&str>) -> String {
    let c = Cluster::load();
    format!(
        "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
        c.get("S3_ACCESS_KEY"),
        secret.unwrap_or(c.get("S3_SECRET_KEY"))
    )
}

/// A tenant's storage location on `bucket` of the local S3 server, with the credential in Secret `secret`.
pub fn nabsl(name: &str, bucket: &str, prefix: &str, secret: &str) -> nac::api::NonAdminBackupStorageLocation {
    let c = Cluster::load();
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1",
        "kind": "NonAdminBackupStorageLocation",
        "metadata": {"name": name},
        "spec": {"backupStorageLocationSpec": {
            "provider": "aws",
            "objectStorage": {"bucket": bucket, "prefix": prefix},
            "config": {
                "region": c.get("S3_REGION"),
                "s3ForcePathStyle": "true",
                "s3Url": format!("http://127.0.0.1:{}", c.get("S3_PORT")),
            },
            "credential": {"name": secret, "key": "cloud"},
        }}
    }))
    .unwrap()
}

/// Writes object `key` of `bucket` on the local S3 server (a signed PUT), as a tenant can in their own bucket.
pub fn put_object(bucket: &str, key: &str, body: &[u8]) {
    use sha2::Digest;
    let c = Cluster::load();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let hash = hex(&sha2::Sha256::digest(body));
    let out = std::process::Command::new("curl")
        .args(["-sS", "--fail-with-body", "--max-time", "10", "--aws-sigv4"])
        .arg(format!("aws:amz:{}:s3", c.get("S3_REGION")))
        .arg("--user")
        .arg(format!("{}:{}", c.get("S3_ACCESS_KEY"), c.get("S3_SECRET_KEY")))
        .arg("-H")
        .arg(format!("x-amz-content-sha256: {hash}"))
        .arg("-X")
        .arg("PUT")
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("http://127.0.0.1:{}/{bucket}/{key}", c.get("S3_PORT")))
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "writing {bucket}/{key}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decompresses gzip data (Velero's logs and lists are gzipped).
pub fn gunzip_bytes(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running gzip");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "gzip -dc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// GET of a signed URL of the local S3 server (plain HTTP on loopback): status and body.
pub async fn fetch_url(url: &str) -> (u16, Vec<u8>) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<hyper::body::Bytes>>();
    let resp = client
        .get(url.parse().unwrap_or_else(|e| panic!("URL {url}: {e}")))
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// Asks for one file of the tenant's backup or restore with a NonAdminDownloadRequest `name`, waits for Velero's
/// answer, and returns the file, un-gzipped.
pub async fn download(api: &Api<nac::api::NonAdminDownloadRequest>, name: &str, kind: &str, target: &str) -> Vec<u8> {
    let req: nac::api::NonAdminDownloadRequest = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": name}, "spec": {"target": {"kind": kind, "name": target}}
    }))
    .unwrap();
    api.create(&kube::api::PostParams::default(), &req).await.unwrap();
    let n = wait_json(api, name, T, &format!("{kind} of {target} answered"), |n| {
        n["status"]["phase"] == "Created" || n["status"]["phase"] == "BackingOff"
    })
    .await;
    assert_eq!(condition_of(&n, "Processed"), ("True".into(), "Success".into()), "{n}");
    let url = n["status"]["velero"]["status"]["downloadURL"].as_str().unwrap();
    let (status, body) = fetch_url(url).await;
    assert_eq!(status, 200, "GET {url}: {}", String::from_utf8_lossy(&body));
    gunzip_bytes(&body)
}

/// The tenant's Secret `name` with credentials of the local S3 server (`secret_key`: a wrong one).
pub async fn tenant_secret(admin: &Client, ns: &str, name: &str, secret_key: Option<&str>) {
    let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "type": "Opaque",
        "stringData": {"cloud": s3_credentials(secret_key)}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), ns)
        .create(&kube::api::PostParams::default(), &s)
        .await
        .unwrap();
}

/// The admin's decision on a storage location request.
pub async fn decide(admin: &Client, request: &str, decision: &str) {
    Api::<nac::api::NonAdminBackupStorageLocationRequest>::namespaced(admin.clone(), VELERO_NAMESPACE)
        .patch(
            request,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"approvalDecision": decision}})),
        )
        .await
        .unwrap();
}

/// The tenant's storage location `own` on `bucket` (prefix `p`), with its Secret, approved by the admin, Available.
pub async fn own_location(
    admin: &kube::Client,
    nabsls: &Api<nac::api::NonAdminBackupStorageLocation>,
    ns: &str,
    bucket: &str,
) {
    let uuid = requested_location(admin, nabsls, ns, bucket).await;
    decide(admin, &uuid, "approve").await;
    wait_json(nabsls, "own", T, "location Available", |n| {
        n["status"]["veleroBackupStorageLocation"]["status"]["phase"] == "Available"
    })
    .await;
}

/// The tenant's storage location `own` on `bucket` (prefix `p`), with its Secret, its approval request made and
/// not yet decided; returns the request's name (the location's nacuuid).
pub async fn requested_location(
    admin: &kube::Client,
    nabsls: &Api<nac::api::NonAdminBackupStorageLocation>,
    ns: &str,
    bucket: &str,
) -> String {
    tenant_secret(admin, ns, "s3", None).await;
    nabsls
        .create(&kube::api::PostParams::default(), &nabsl("own", bucket, "p", "s3"))
        .await
        .unwrap();
    let n = wait_json(nabsls, "own", T, "location requested", |n| {
        n["status"]["veleroBackupStorageLocation"]["nacuuid"].is_string()
    })
    .await;
    let uuid = n["status"]["veleroBackupStorageLocation"]["nacuuid"].as_str().unwrap();
    let requests: Api<nac::api::NonAdminBackupStorageLocationRequest> =
        Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    wait_for(&requests, uuid, T, "the admin's request", |r| r.map(|_| ())).await;
    uuid.to_string()
}

/// `hack/velero-up.sh ARGS` for the test cluster: `--restart` (stop Velero if it runs, start it; it syncs backups
/// from the bucket at start), `--stop-velero`, or with no argument it starts what of Velero and the S3 server is
/// not running (the S3 server again on its port, so every storage location still points at it).
pub fn velero_up(c: &Cluster, args: &[&str]) {
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/velero-up.sh"))
        .args(args)
        .env("CLUSTER_DIR", c.get("CLUSTER_DIR"))
        .output()
        .expect("running hack/velero-up.sh");
    assert!(
        out.status.success(),
        "velero-up.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The run NonAdminBackups of schedule `nas` in `ns` (named as their Velero Backups, `<the schedule's
/// nacuuid>-<timestamp>`), oldest first.
pub async fn runs_of(api: &Api<NonAdminBackup>, nas: &str) -> Vec<NonAdminBackup> {
    let mut runs: Vec<NonAdminBackup> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|n| {
            let ns = n.metadata.namespace.as_deref().unwrap_or_default();
            n.metadata
                .name
                .as_deref()
                .and_then(|x| x.rsplit_once('-'))
                .is_some_and(|(schedule, ts)| {
                    ts.len() == 14
                        && ts.bytes().all(|b| b.is_ascii_digit())
                        && nac::naming::is_nacuuid_for(schedule, ns, nas)
                })
        })
        .collect();
    runs.sort_by_key(|n| n.metadata.name.clone());
    runs
}

/// The message of a NonAdminRestore's ResourcesLeftOut condition.
pub fn left_out(n: &Value) -> String {
    n["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "ResourcesLeftOut"))
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no ResourcesLeftOut condition: {n:#}"))
}

/// A tarball entry of a Velero backup for `ns`: both layouts Velero writes (plain and preferred version).
pub fn item_entries(resource: &str, ns: &str, name: &str, obj: &Value) -> Vec<(String, Vec<u8>)> {
    let body = serde_json::to_vec(obj).unwrap();
    vec![
        (
            format!("resources/{resource}/namespaces/{ns}/{name}.json"),
            body.clone(),
        ),
        (
            format!("resources/{resource}/v1-preferredversion/namespaces/{ns}/{name}.json"),
            body,
        ),
    ]
}

/// `tarball` (gzipped) with `extra` entries appended: what a tenant can write into their own bucket.
pub fn with_entries(tarball: &[u8], extra: Vec<(String, Vec<u8>)>) -> Vec<u8> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tarball));
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut out = tar::Builder::new(gz);
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let mut h = e.header().clone();
        let path = e.path().unwrap().into_owned();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut body).unwrap();
        out.append_data(&mut h, path, body.as_slice()).unwrap();
    }
    for (path, body) in extra {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        out.append_data(&mut h, path, body.as_slice()).unwrap();
    }
    out.into_inner().unwrap().finish().unwrap()
}

/// Waits until Velero finished the NAR's restore and returns its phase.
pub async fn restore_finished(nars: &Api<NonAdminRestore>, name: &str) -> String {
    // Behind other tests' backups and restores in Velero's one queue.
    wait_for(
        nars,
        name,
        Duration::from_secs(300),
        &format!("NAR {name}: Velero restore finished"),
        |o| {
            let p = o?
                .status
                .as_ref()?
                .velero_restore
                .as_ref()?
                .status
                .as_ref()?
                .phase
                .clone()?;
            ["Completed", "PartiallyFailed", "Failed", "FailedValidation"]
                .contains(&p.as_str())
                .then_some(p)
        },
    )
    .await
}

/// How long Velero's backup queue may hold queued backups, with none running and nothing changing, before the
/// tests call it stalled: Velero looks at its queue when a backup ends and once a minute besides.
const QUEUE_STALL: Duration = Duration::from_secs(75);

/// Velero 1.18.0 to 1.18.3 can stop starting backups for good: its in-memory count of running backups keeps one
/// that was deleted the moment it became ready to start, or that finished before the queue had counted it
/// (velero#10519, fixed in 1.18.4, which the Go module proxy does not serve). From then on every queued backup
/// waits, whoever asked for it, until the Velero server restarts. nac never deletes a backup in that phase
/// (`velero::deletable_now`), but the second race is Velero's alone, and on a busy 2-core machine it happens.
/// The tests check nac, not Velero: a thread of each test binary with the real Velero looks at Velero's Backups
/// every 5 seconds, and when they show exactly that stall (queued ones, none running, nothing changing for
/// [`QUEUE_STALL`]) while Velero runs, it prints what Velero logged on its queue and restarts Velero, as an
/// admin would.
pub fn watch_velero_queue(c: &Cluster) {
    static WATCHED: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
    let dir = c.get("CLUSTER_DIR").to_string();
    if !WATCHED.lock().unwrap().insert(dir.clone()) {
        return;
    }
    let c = Cluster { env: c.env.clone() };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let admin = c.admin().await;
            let backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
            let mut watch = QueueWatch::default();
            loop {
                if let Ok(list) = backups.list(&ListParams::default()).await {
                    if let Some(queued) = watch.stalled(&list.items, std::time::Instant::now()) {
                        if let Some(velero) = VeleroServer::running(&dir, &admin).await {
                            // Straight to stderr: the test harness would keep a print for one test's output.
                            let _ = writeln!(
                                std::io::stderr(),
                                "Velero's backup queue stalled in {dir}: queued for {QUEUE_STALL:?}, none running: \
                                 {queued}\nVelero's last lines on its queue:\n{}\nrestarting Velero (velero#10519)",
                                velero.queue_log(&admin).await
                            );
                            velero.restart(&dir, &admin).await;
                            // Counted for the suite's summary, which fails over a few (hack/test.sh).
                            if let Ok(log) = std::env::var("VELERO_RESTARTS_LOG") {
                                use std::io::Write as _;
                                if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
                                    let _ = writeln!(f, "{dir}: queued for {QUEUE_STALL:?}, none running: {queued}");
                                }
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
    });
}

/// Velero's Backups as its queue sees them (phase, queue position, namespaces, being deleted) and its last lines
/// on its queue: what a test prints when backups it waits for do not finish.
pub async fn velero_queue_report(c: &Cluster, admin: &Client) -> String {
    let backups: Api<nac::velero::Backup> = Api::namespaced(admin.clone(), VELERO_NAMESPACE);
    let mut out = String::from("Velero's Backups (name phase queuePosition namespaces):\n");
    match backups.list(&ListParams::default()).await {
        Ok(list) => {
            for b in list.items {
                let s = b.status.clone().unwrap_or_default();
                out += &format!(
                    "  {} {} {} {:?}{}\n",
                    b.metadata.name.as_deref().unwrap_or_default(),
                    s.phase.as_deref().unwrap_or("(none)"),
                    s.queue_position.unwrap_or_default(),
                    b.spec.included_namespaces.clone().unwrap_or_default(),
                    if b.metadata.deletion_timestamp.is_some() {
                        " (being deleted)"
                    } else {
                        ""
                    }
                );
            }
        }
        Err(e) => out += &format!("  (cannot be listed: {e})\n"),
    }
    let log = match VeleroServer::running(c.get("CLUSTER_DIR"), admin).await {
        Some(v) => v.queue_log(admin).await,
        None => "(Velero is not running)".to_string(),
    };
    out + "Velero's last lines on its queue:\n" + &log
}

/// Velero's queue as last seen: the queued backups with their positions, and since when they have stood so.
#[derive(Default)]
struct QueueWatch {
    standing: Option<(String, std::time::Instant)>,
}

impl QueueWatch {
    /// The queued backups, once they have stood unchanged with none in progress for [`QUEUE_STALL`] (then the
    /// watch starts over). One left ReadyToStart that long is stalled too: Velero starts those at once.
    fn stalled(&mut self, backups: &[nac::velero::Backup], now: std::time::Instant) -> Option<String> {
        let phase = |b: &nac::velero::Backup| b.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        // The queue's own phases: a backup being deleted, finalized or waiting for plugins holds no place in it.
        let in_queue: Vec<&nac::velero::Backup> = backups
            .iter()
            .filter(|b| matches!(phase(b).as_str(), "" | "New" | "Queued" | "ReadyToStart" | "InProgress"))
            .collect();
        if !in_queue.iter().any(|b| phase(b) == "Queued") || in_queue.iter().any(|b| phase(b) == "InProgress") {
            self.standing = None;
            return None;
        }
        let mut queued: Vec<String> = in_queue
            .iter()
            .map(|b| {
                let position = b.status.as_ref().and_then(|s| s.queue_position).unwrap_or_default();
                format!(
                    "{} {} at {position}",
                    b.metadata.name.as_deref().unwrap_or_default(),
                    phase(b)
                )
            })
            .collect();
        queued.sort();
        let queued = queued.join(", ");
        match self.standing.take() {
            Some((q, since)) if q == queued && now.duration_since(since) >= QUEUE_STALL => Some(queued),
            Some((q, since)) if q == queued => {
                self.standing = Some((q, since));
                None
            }
            _ => {
                self.standing = Some((queued, now));
                None
            }
        }
    }
}

/// The Velero server of an environment, as it runs now.
enum VeleroServer {
    /// A process on the machine (`make cluster-up`).
    Process { log: String },
    /// The Deployment's pod on the node (`make node-up`).
    Pod(String),
}

impl VeleroServer {
    /// The server of the environment in `dir`, if it runs and is not paused (a test stopping or pausing Velero
    /// does so on purpose).
    async fn running(dir: &str, admin: &Client) -> Option<VeleroServer> {
        // The env file as it is now: a restart records a new pid.
        let env = parse_env(&std::fs::read_to_string(format!("{dir}/env")).ok()?);
        if env.get("VELERO_IN_PODS").map(String::as_str) == Some("1") {
            let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), VELERO_NAMESPACE)
                .list(&ListParams::default().labels("deploy=velero"))
                .await
                .ok()?
                .items;
            let ready = pods.iter().find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })?;
            return Some(VeleroServer::Pod(ready.metadata.name.clone()?));
        }
        let pid = env.get("VELERO_PID").filter(|p| !p.is_empty())?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The state follows the command's closing parenthesis: T when stopped, Z when gone.
        let state = stat.rsplit_once(") ")?.1.chars().next()?;
        (state != 'T' && state != 'Z').then(|| VeleroServer::Process {
            log: env.get("VELERO_LOG").cloned().unwrap_or_default(),
        })
    }

    /// The last lines Velero logged about its backup queue.
    async fn queue_log(&self, admin: &Client) -> String {
        let text = match self {
            VeleroServer::Process { log } => std::fs::read_to_string(log).unwrap_or_default(),
            VeleroServer::Pod(name) => {
                let lp = kube::api::LogParams {
                    tail_lines: Some(5000),
                    ..Default::default()
                };
                Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), VELERO_NAMESPACE)
                    .logs(name, &lp)
                    .await
                    .unwrap_or_else(|e| format!("(no log: {e})"))
            }
        };
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("backup_queue_controller")).collect();
        lines[lines.len().saturating_sub(12)..].join("\n")
    }

    async fn restart(self, dir: &str, admin: &Client) {
        match self {
            VeleroServer::Process { .. } => {
                let env = parse_env(&std::fs::read_to_string(format!("{dir}/env")).unwrap_or_default());
                velero_up(&Cluster { env }, &["--restart"]);
            }
            VeleroServer::Pod(name) => {
                let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), VELERO_NAMESPACE);
                if let Err(e) = pods.delete(&name, &Default::default()).await {
                    let _ = writeln!(std::io::stderr(), "deleting Velero's pod {name}: {e}");
                }
            }
        }
    }
}

/// Waits until `api` lists nothing (selected by `params`), within [`T`].
pub async fn none_left<K>(api: &Api<K>, params: &ListParams, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(T, what, || async {
        api.list(params).await.ok()?.items.is_empty().then_some(())
    })
    .await
}
