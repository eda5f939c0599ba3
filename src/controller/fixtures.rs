//! Reconcile flows against a mocked API server (`tower_test::mock`): each scenario drives one reconcile and
//! asserts the exact API calls it makes, in order, so write counts are promises checked in `make test`, not only
//! figures of the scale run. The API server side answers like a real one would (created objects echoed back with
//! a uid and resourceVersion).

use super::cx::Cx;
use super::events::Recorder;
use super::view::Registry;
use super::write::HasStatus;
use super::Options;
use crate::api::{
    NonAdminBackup, NonAdminBackupStorageLocation, NonAdminDownloadRequest, NonAdminRestore, NonAdminSchedule,
};
use crate::metrics::Metrics;
use crate::naming::{nacuuid_with, NAB_FINALIZER, NAB_ORIGIN_NACUUID_LABEL};
use crate::policy::live::{Offer, PolicyStore};
use crate::velero::{Backup, Restore};
use axum::http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use kube::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tower_test::mock::{self, Handle};

const UUID: &str = "0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";
type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// One API call as the mocked server saw it; calls compare by method and path (verb and resource), the body and
/// the answer are there to inspect.
#[derive(Debug, Clone)]
struct Call {
    method: Method,
    path: String,
    body: Value,
    /// What the server answered.
    answer: Value,
}

impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        (&self.method, &self.path) == (&other.method, &other.path)
    }
}

impl Call {
    /// The reason and status of condition `ty` in the status this call wrote.
    fn condition(&self, ty: &str) -> Option<(String, String)> {
        let c = self.body["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == ty)?;
        Some((c["status"].as_str()?.to_string(), c["reason"].as_str()?.to_string()))
    }
}

struct Fixture {
    nab: Arc<Cx<super::backup::State>>,
    nar: Arc<Cx<super::restore::State>>,
    nas: Arc<Cx<super::schedule::State>>,
    nabsl: Arc<Cx<super::location::State>>,
    nadr: Arc<Cx<super::download::State>>,
    nabs: reflector::store::Writer<NonAdminBackup>,
    locations: reflector::store::Writer<crate::velero::BackupStorageLocation>,
    download_requests: reflector::store::Writer<crate::velero::DownloadRequest>,
    backups: reflector::store::Writer<Backup>,
    restores: reflector::store::Writer<Restore>,
    /// What GETs of these paths answer (others: 404), for objects the API server has.
    reads: std::collections::HashMap<String, Value>,
}

fn fixture(policy: &str) -> (Fixture, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(PolicyStore::new(None));
    assert!(matches!(store.offer(policy, "test"), Offer::Applied(_)));
    let mut opts = Options::from_settings(&crate::config::Settings::default());
    opts.velero_namespace = "openshift-adp".into();
    let recorder = Arc::new(Recorder::new(client.clone(), "nac", "test"));
    // Rights from a table, and a backup whose contents hold a ConfigMap and a Pod: no network in these tests.
    let access = Arc::new(crate::rights::Fixed {
        denied: vec![
            ("mallory".into(), "create".into(), "pods".into()),
            ("mallory".into(), "list".into(), "secrets".into()),
            ("trudy".into(), "list".into(), "configmaps".into()),
        ],
        ..crate::rights::Fixed::common()
    });
    let shared = Arc::new(super::context::Shared::new(
        client, opts, store, metrics, recorder, access,
    ));
    // Every kind registers its stores, as in a term; the other kinds' watches never run here.
    let mut reg = Registry::default();
    let (locations, locations_writer) = reg.watched::<crate::velero::BackupStorageLocation>();
    let (nab, nab_wiring) = super::term::build::<NonAdminBackup>(&shared, &mut reg);
    let (mut nar, nar_wiring) = super::term::build::<NonAdminRestore>(&shared, &mut reg);
    let items = [
        ("", "configmaps", "cfg"),
        ("", "configmaps", "new-cfg"),
        ("", "pods", "root"),
    ];
    let mut contents = crate::rights::contents::Contents::default();
    for (g, r, n) in items {
        let key = (g.to_string(), r.to_string());
        contents.kinds.insert(key.clone());
        contents.names.entry(key).or_default().insert(n.to_string());
    }
    nar.contents = super::contents::ContentsSource::Fixed(contents);
    let (nabsl, _) = super::term::build::<NonAdminBackupStorageLocation>(&shared, &mut reg);
    let (nadr, nadr_wiring) = super::term::build::<NonAdminDownloadRequest>(&shared, &mut reg);
    let (nas, _) = super::term::build::<NonAdminSchedule>(&shared, &mut reg);
    for synced in [
        &nabsl.requests.synced,
        &nabsl.copies.synced,
        &nas.velero.synced,
        &nadr.velero.synced,
        &nab.queued.synced,
        &nar.queued.synced,
        &nar.volumes.data_mover_synced,
        &nar.volumes.file_system_synced,
        &nab.delete_requests.synced,
        &nab.volumes.data_mover_synced,
        &nab.volumes.file_system_synced,
        &locations.synced,
    ] {
        synced.mark();
    }
    let view = Arc::new(reg.into_view());
    (
        Fixture {
            nab: Cx::new(&shared, &view, nab),
            nar: Cx::new(&shared, &view, nar),
            nas: Cx::new(&shared, &view, nas),
            nabsl: Cx::new(&shared, &view, nabsl),
            nadr: Cx::new(&shared, &view, nadr),
            nabs: nab_wiring.queued.objects,
            locations: locations_writer,
            download_requests: nadr_wiring.velero,
            backups: nab_wiring.queued.velero,
            restores: nar_wiring.velero,
            reads: Default::default(),
        },
        handle,
    )
}

/// A NonAdminBackup as the mutating webhook leaves it: identity label and finalizer, no status yet.
fn nab(backup_spec: Value) -> NonAdminBackup {
    nab_by(backup_spec, "alice")
}

/// A NonAdminBackup as the webhook leaves it when `user` creates it (the rights record says nothing is left out).
fn nab_by(backup_spec: Value, user: &str) -> NonAdminBackup {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackup",
        "metadata": {
            "name": "nightly", "namespace": "team-a", "uid": "nab-uid", "resourceVersion": "1",
            "labels": {NAB_ORIGIN_NACUUID_LABEL: nacuuid_with("team-a", "nightly", UUID)},
            "annotations": {
                crate::rights::BACKUP_RIGHTS_ANNOTATION: r#"{"mode":"exclude","excluded":[]}"#,
                crate::rights::REQUESTER_ANNOTATION: json!({"username": user}).to_string(),
            },
            "finalizers": [NAB_FINALIZER],
        },
        "spec": {"backupSpec": backup_spec}
    }))
    .unwrap()
}

/// Serves requests like an API server until none comes for `quiet`, recording each call: creates and status
/// replaces are echoed back with a uid and the next resourceVersion; a patch (JSON or merge) applies to `object`,
/// the tenant object under reconcile, and so does a status replace of it (which a read of it then answers); other
/// reads answer from `reads`, else 404.
async fn serve(
    mut handle: ApiHandle,
    quiet: Duration,
    mut object: Value,
    reads: std::collections::HashMap<String, Value>,
) -> (Vec<Call>, ApiHandle) {
    let mut calls = Vec::new();
    let mut version = 100;
    // The tenant object's path, once a status replace named it.
    let mut own_path: Option<String> = None;
    while let Ok(Some((req, send))) = tokio::time::timeout(quiet, handle.next_request()).await {
        let (parts, body) = req.into_parts();
        let body = body.collect_bytes().await.unwrap();
        version += 1;
        let (status, out) = match parts.method {
            Method::PATCH => {
                let patch: Value = serde_json::from_slice(&body).unwrap();
                if patch.is_array() {
                    let p: json_patch::Patch = serde_json::from_value(patch).unwrap();
                    json_patch::patch(&mut object, &p).unwrap();
                } else {
                    json_patch::merge(&mut object, &patch);
                }
                object["metadata"]["resourceVersion"] = json!(version.to_string());
                (StatusCode::OK, object.clone())
            }
            Method::DELETE => (
                StatusCode::OK,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ),
            Method::POST | Method::PUT => {
                let mut obj: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
                obj["metadata"]["uid"] = json!(format!("uid-{version}"));
                obj["metadata"]["resourceVersion"] = json!(version.to_string());
                let code = if parts.method == Method::POST {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                let path = parts.uri.path();
                if parts.method == Method::PUT
                    && path.ends_with("/status")
                    && obj["metadata"]["name"] == object["metadata"]["name"]
                    && obj["kind"] == object["kind"]
                {
                    object = obj.clone();
                    own_path = path.strip_suffix("/status").map(str::to_string);
                }
                (code, obj)
            }
            Method::GET if own_path.as_deref() == Some(parts.uri.path()) => (StatusCode::OK, object.clone()),
            Method::GET if reads.contains_key(parts.uri.path()) => (StatusCode::OK, reads[parts.uri.path()].clone()),
            _ => (
                StatusCode::NOT_FOUND,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
            ),
        };
        send.send_response(
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&out).unwrap()))
                .unwrap(),
        );
        calls.push(Call {
            method: parts.method.clone(),
            path: parts.uri.path().to_string(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            answer: out,
        });
    }
    (calls, handle)
}

fn call(method: Method, path: &str) -> Call {
    Call {
        method,
        path: path.to_string(),
        body: Value::Null,
        answer: Value::Null,
    }
}

const NAB_STATUS: &str = "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminbackups/nightly/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/team-a/events";

/// The happy path's budget, by verb and resource: the Velero Backup, and one status write straight to Created. No
/// read, no Event (a routine step: the conditions say it).
#[tokio::test]
async fn happy_path_is_two_writes_the_velero_backup_and_the_status() {
    let (f, handle) = fixture("enforceBackupSpec:\n  ttl: 72h0m0s\n");
    let (calls, events) = run(&f, handle, nab(json!({}))).await;
    assert_eq!(
        calls,
        vec![
            call(Method::POST, "/apis/velero.io/v1/namespaces/openshift-adp/backups"),
            call(Method::PUT, NAB_STATUS),
        ],
        "the happy path: the Velero Backup, then one status write straight to Created"
    );
    assert_eq!(events, 0, "no Event: two writes in all");
}

/// The store's copies as the watches keep them (`tenant::tenant_store_copy`, `tenant::velero_store_copy`) of what
/// the API server answered.
fn stored_copies(nab: &Value, backup: &Value) -> (NonAdminBackup, Backup) {
    let mut n: NonAdminBackup = serde_json::from_value(nab.clone()).unwrap();
    super::tenant::tenant_store_copy(&mut n);
    let mut b: Backup = serde_json::from_value(backup.clone()).unwrap();
    super::tenant::velero_store_copy::<NonAdminBackup>(&mut b);
    (n, b)
}

/// After the happy path's two writes their watch events trigger more reconciles: none of them costs a request.
/// The Velero Backup's event comes first, while the cache still shows the NonAdminBackup before nac's status
/// write: that reconcile waits for the cache (the status write's own event triggers the next) instead of reading
/// the object. The next, from the cache as nac wrote it, finds nothing to change.
#[tokio::test]
async fn the_reconciles_after_the_happy_path_make_no_request() {
    let (mut f, handle) = fixture("{}");
    let first = nab(json!({}));
    let (calls, _, _, handle) = run_on(&f, handle, first.clone()).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    let (written, backup) = stored_copies(&calls[1].answer, &calls[0].answer);
    f.backups.apply_watcher_event(&Event::Apply(backup));

    let (calls, events, action, handle) = run_on(&f, handle, first).await;
    assert_eq!(calls, vec![], "a cache behind nac's own write: no read");
    assert_eq!(events, 0);
    // Woken by the write's own watch event; at the latest when the wait for the cache is over (a requeue within
    // `CACHE_WAIT`, which then reads the object).
    assert_ne!(action, kube::runtime::controller::Action::await_change());
    assert!(format!("{action:?}").contains("requeue_after: Some("), "{action:?}");

    assert!(written.is_compact(), "the store's copy of a Created backup is compact");
    f.nabs.apply_watcher_event(&Event::Apply(written.clone()));
    let (calls, events, _, _) = run_on(&f, handle, written).await;
    assert_eq!(calls, vec![], "the cache as nac wrote it: nothing to change");
    assert_eq!(events, 0);
}

/// The other order: the status write's watch event comes before the Velero Backup's. The reconcile it triggers
/// finds the NonAdminBackup Created and its Velero Backup not in the cache yet: nac made it a moment ago, so it waits
/// for the Backup's own watch event (which triggers it again) instead of reading the Backup.
#[tokio::test]
async fn a_velero_watch_behind_nacs_own_create_costs_no_read() {
    let (mut f, handle) = fixture("{}");
    let (calls, _, _, handle) = run_on(&f, handle, nab(json!({}))).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    let (written, backup) = stored_copies(&calls[1].answer, &calls[0].answer);
    f.nabs.apply_watcher_event(&Event::Apply(written.clone()));

    let (calls, events, action, handle) = run_on(&f, handle, written.clone()).await;
    assert_eq!(
        calls,
        vec![],
        "the Velero Backup nac just made, not in the cache yet: no read"
    );
    assert_eq!(events, 0);
    assert!(format!("{action:?}").contains("requeue_after: Some("), "{action:?}");

    f.backups.apply_watcher_event(&Event::Apply(backup));
    let (calls, events, _, _) = run_on(&f, handle, written).await;
    assert_eq!(calls, vec![], "the cache caught up: nothing to change");
    assert_eq!(events, 0);
}

/// A queue move of a Created backup (another backup ahead of it in Velero's queue) is one status write of the
/// fields that changed, on the version in the cache: no read first, though the cache's copy is compact.
#[tokio::test]
async fn a_queue_move_is_one_status_patch_and_no_read() {
    let (mut f, handle) = fixture("{}");
    let (calls, _, _, handle) = run_on(&f, handle, nab(json!({}))).await;
    let (written, backup) = stored_copies(&calls[1].answer, &calls[0].answer);
    assert_eq!(
        written
            .status
            .as_ref()
            .unwrap()
            .queue_info
            .as_ref()
            .unwrap()
            .estimated_queue_position,
        1
    );
    f.backups.apply_watcher_event(&Event::Apply(backup));
    f.nabs.apply_watcher_event(&Event::Apply(written.clone()));
    // An admin's Backup, created earlier, ahead of it in the queue.
    let ahead: Backup = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "Backup",
        "metadata": {"name": "admin-nightly", "namespace": "openshift-adp",
                     "creationTimestamp": "2026-11-28T00:00:00Z"},
        "spec": {}
    }))
    .unwrap();
    f.nab.own.queued.note(&ahead);

    let (calls, events, _, _) = run_on(&f, handle, written.clone()).await;
    assert_eq!(calls, vec![call(Method::PATCH, NAB_STATUS)]);
    assert_eq!(events, 0);
    let ops = calls[0].body.as_array().unwrap();
    assert_eq!(
        ops[0],
        json!({"op": "replace", "path": "/metadata/resourceVersion",
               "value": written.metadata.resource_version.clone().unwrap()}),
        "on the version it was planned from"
    );
    let paths: Vec<&str> = ops[1..].iter().map(|o| o["path"].as_str().unwrap()).collect();
    assert_eq!(paths, vec!["/status/queueInfo"], "only what changed");
    // Not the Velero Backup's copy, which the compact copy left out: the server keeps it as it is.
    assert_eq!(ops[1]["value"]["estimatedQueuePosition"], 2);
}

#[tokio::test]
async fn a_record_that_leaves_out_too_little_is_completed_before_the_velero_backup_is_made() {
    // As if written by hand with nac's mutating webhook bypassed: nothing left out, though mallory may not list
    // Secrets. nac asks again and leaves them out.
    let (f, handle) = fixture("{}");
    let (calls, _) = run(&f, handle, nab_by(json!({}), "mallory")).await;
    assert_eq!(
        calls[0],
        call(Method::POST, "/apis/velero.io/v1/namespaces/openshift-adp/backups")
    );
    let excluded = calls[0].body["spec"]["excludedResources"].as_array().unwrap();
    assert!(excluded.contains(&json!("secrets")), "{excluded:?}");
    // Refused under rights.backup: deny, as the webhook would have.
    let (f, handle) = fixture("rights: {backup: deny}");
    let (calls, _) = run(&f, handle, nab_by(json!({}), "mallory")).await;
    assert_eq!(calls, vec![call(Method::PUT, NAB_STATUS)]);
    assert!(
        calls[0].body.to_string().contains("mallory may not list secrets"),
        "{}",
        calls[0].body
    );
}

#[tokio::test]
async fn a_spec_crossing_the_tenant_boundary_writes_only_its_status_and_event() {
    let (f, handle) = fixture("{}");
    let (calls, events) = run(&f, handle, nab(json!({"includedNamespaces": ["kube-system"]}))).await;
    assert_eq!(
        calls,
        vec![call(Method::PUT, NAB_STATUS)],
        "BackingOff with the reason, and no Velero object"
    );
    assert_eq!(events, 1);
}

#[tokio::test]
async fn an_existing_velero_backup_is_adopted_not_created_again() {
    let (mut f, handle) = fixture("{}");
    // A previous attempt created the Velero Backup (crash before the status write): it is in the watch store.
    stored_backup(&mut f, None);
    let (calls, events) = run(&f, handle, nab(json!({}))).await;
    assert_eq!(calls, vec![call(Method::PUT, NAB_STATUS)]);
    assert_eq!(events, 0);
}

fn stored_backup(f: &mut Fixture, phase: Option<&str>) -> String {
    let id = nacuuid_with("team-a", "nightly", UUID);
    let mut vb = crate::controller::backup::velero_backup(
        &nab(json!({})),
        &id,
        "openshift-adp",
        crate::velero::BackupSpec::default(),
    );
    vb.metadata.uid = Some("vb-uid".into());
    vb.metadata.resource_version = Some("7".into());
    vb.status = phase.map(|p| crate::velero::BackupStatus {
        phase: Some(p.into()),
        ..Default::default()
    });
    f.backups.apply_watcher_event(&Event::Apply(vb));
    id
}

/// A NonAdminBackup that reached Created for the stored Velero Backup (what the happy path wrote).
fn created_nab(spec_extra: Value) -> NonAdminBackup {
    let mut n = nab(json!({}));
    let id = nacuuid_with("team-a", "nightly", UUID);
    n.status = Some(
        serde_json::from_value(json!({
            "phase": "Created",
            "veleroBackup": {"nacuuid": id, "name": id, "namespace": "openshift-adp"},
            "conditions": [
                {"type": "Accepted", "status": "True", "reason": "BackupAccepted", "message": "backup accepted",
                 "lastTransitionTime": "2026-11-23T00:00:00Z"},
                {"type": "Queued", "status": "True", "reason": "BackupScheduled",
                 "message": "Created Velero Backup object", "lastTransitionTime": "2026-11-23T00:00:00Z"}
            ]
        }))
        .unwrap(),
    );
    let mut v = serde_json::to_value(&n).unwrap();
    json_patch::merge(&mut v, &spec_extra);
    serde_json::from_value(v).unwrap()
}

/// Runs one reconcile of `obj` against the mocked API server; returns the API writes and reads in order, and
/// the number of Events (published in the background, so their place in the order is not fixed).
async fn drive<K, Fut>(
    handle: ApiHandle,
    obj: K,
    reads: std::collections::HashMap<String, Value>,
    reconcile: impl FnOnce(Arc<K>) -> Fut,
) -> (Vec<Call>, usize)
where
    K: serde::Serialize,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, super::Error>>,
{
    let (calls, events, _, _) = drive_on(handle, obj, reads, reconcile).await;
    (calls, events)
}

/// [`drive`], also returning the reconcile's outcome and the mocked server's handle (for the next reconcile).
async fn drive_on<K, Fut>(
    handle: ApiHandle,
    obj: K,
    reads: std::collections::HashMap<String, Value>,
    reconcile: impl FnOnce(Arc<K>) -> Fut,
) -> (Vec<Call>, usize, kube::runtime::controller::Action, ApiHandle)
where
    K: serde::Serialize,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, super::Error>>,
{
    let server = tokio::spawn(serve(
        handle,
        Duration::from_millis(300),
        serde_json::to_value(&obj).unwrap(),
        reads,
    ));
    let res = reconcile(Arc::new(obj)).await;
    // Waiting for Velero is a normal outcome (requeued), not a failure.
    assert!(res.as_ref().map_or_else(|e| e.is_waiting(), |_| true), "{res:?}");
    let action = res.unwrap_or_else(|_| kube::runtime::controller::Action::await_change());
    let (calls, handle) = server.await.unwrap();
    let (calls, events) = split(calls);
    (calls, events, action, handle)
}

async fn run(f: &Fixture, handle: ApiHandle, obj: NonAdminBackup) -> (Vec<Call>, usize) {
    drive(handle, obj, f.reads.clone(), |o| {
        super::kind::reconcile(o, f.nab.clone())
    })
    .await
}

/// [`run`], handing the mocked server back for the next reconcile, with the reconcile's outcome.
async fn run_on(
    f: &Fixture,
    handle: ApiHandle,
    obj: NonAdminBackup,
) -> (Vec<Call>, usize, kube::runtime::controller::Action, ApiHandle) {
    drive_on(handle, obj, f.reads.clone(), |o| {
        super::kind::reconcile(o, f.nab.clone())
    })
    .await
}

async fn run_nar(f: &Fixture, handle: ApiHandle, obj: NonAdminRestore) -> (Vec<Call>, usize) {
    drive(handle, obj, f.reads.clone(), |o| {
        super::kind::reconcile(o, f.nar.clone())
    })
    .await
}

fn split(calls: Vec<Call>) -> (Vec<Call>, usize) {
    let events = calls.iter().filter(|c| c.path == EVENTS).count();
    (calls.into_iter().filter(|c| c.path != EVENTS).collect(), events)
}

/// One reconcile of a NonAdminBackup being deleted whose Velero Backup is in `phase`: its API calls and Events.
async fn deleting_over(phase: &str) -> (Vec<Call>, usize) {
    let (mut f, handle) = fixture("{}");
    stored_backup(&mut f, Some(phase));
    let obj = created_nab(json!({"metadata": {"deletionTimestamp": "2026-11-23T00:00:01Z"}}));
    run(&f, handle, obj).await
}

const VELERO_BACKUP: &str =
    "/apis/velero.io/v1/namespaces/openshift-adp/backups/team-a-nightly-0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";
const NAB_PATH: &str = "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminbackups/nightly";

#[tokio::test]
async fn a_plain_delete_removes_the_velero_backup_then_the_finalizer() {
    let (calls, events) = deleting_over("Completed").await;
    assert_eq!(
        calls,
        vec![
            call(Method::PUT, NAB_STATUS),
            call(Method::DELETE, VELERO_BACKUP),
            call(Method::PATCH, NAB_PATH)
        ],
        "Deleting, the Velero Backup object deleted (no DeleteBackupRequest: the data stays), the finalizer removed"
    );
    assert_eq!(events, 1);
}

#[tokio::test]
async fn the_velero_backup_is_deleted_only_in_the_version_judged_deletable() {
    // Velero may move a Queued backup to ReadyToStart between nac's read of the store and its delete; deleted
    // then, Velero's queue stalls (seen on a node: every tenant's backups Queued until Velero restarted). The
    // API server refuses the delete once the object changed.
    let (calls, _) = deleting_over("Queued").await;
    let delete = calls
        .iter()
        .find(|c| c.method == Method::DELETE)
        .expect("the Velero Backup deleted");
    assert_eq!(delete.path, VELERO_BACKUP);
    assert_eq!(
        delete.body["preconditions"],
        json!({"uid": "vb-uid", "resourceVersion": "7"}),
        "the version nac judged"
    );
}

#[tokio::test]
async fn a_backup_velero_is_starting_or_running_is_deleted_only_once_it_ends() {
    // Velero 1.18 never uncounts a ReadyToStart backup deleted before it starts, and keeps counting an InProgress
    // one deleted under it for its resource timeout: either way its queue stalls for every tenant.
    for phase in ["ReadyToStart", "InProgress"] {
        let (calls, _) = deleting_over(phase).await;
        assert_eq!(
            calls,
            vec![call(Method::PUT, NAB_STATUS)],
            "Deleting written; the Velero Backup is left alone while {phase}"
        );
    }
}

#[tokio::test]
async fn delete_backup_true_marks_deleting_and_deletes_the_nonadminbackup() {
    let (mut f, handle) = fixture("{}");
    stored_backup(&mut f, Some("Completed"));
    let (calls, events) = run(&f, handle, created_nab(json!({"spec": {"deleteBackup": true}}))).await;
    // The finalizer's cleanup (next reconcile, object now deleting) asks Velero for the DeleteBackupRequest.
    assert_eq!(
        calls,
        vec![call(Method::PUT, NAB_STATUS), call(Method::DELETE, NAB_PATH)]
    );
    assert_eq!(events, 1);
}

#[tokio::test]
async fn a_vanished_velero_backup_is_confirmed_then_reported() {
    let (f, handle) = fixture("{}");
    let (calls, events) = run(&f, handle, created_nab(json!({}))).await;
    assert_eq!(
        calls,
        vec![call(Method::GET, VELERO_BACKUP), call(Method::PUT, NAB_STATUS)],
        "one read past the cache before reporting VeleroBackupNotFound"
    );
    assert_eq!(events, 1);
}

const NAR_UUID: &str = "7a1f3c52-9d0e-4b1a-8c6d-2e4f5a6b7c8d";
const NAR_STATUS: &str = "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminrestores/undo/status";

/// A NonAdminRestore of `backup` as the mutating webhook leaves it.
fn nar(backup: &str) -> NonAdminRestore {
    nar_by(backup, "alice")
}

/// A NonAdminRestore as the webhook leaves it when `user` creates it.
fn nar_by(backup: &str, user: &str) -> NonAdminRestore {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminRestore",
        "metadata": {
            "name": "undo", "namespace": "team-a", "uid": "nar-uid", "resourceVersion": "1",
            "labels": {crate::naming::NAR_ORIGIN_NACUUID_LABEL: nacuuid_with("team-a", "undo", NAR_UUID)},
            "annotations": {crate::rights::REQUESTER_ANNOTATION: json!({"username": user}).to_string()},
            "finalizers": [crate::naming::NAR_FINALIZER],
        },
        "spec": {"restoreSpec": {"backupName": backup}}
    }))
    .unwrap()
}

/// The NonAdminBackup "nightly", Created, and its Velero Backup in `phase`, in the watch stores.
fn completed_source(f: &mut Fixture, phase: &str) {
    stored_backup(f, Some(phase));
    let vb = f.nab.own.queued.velero.state().pop().expect("the stored Velero Backup");
    f.reads
        .insert(VELERO_BACKUP.to_string(), serde_json::to_value(&*vb).unwrap());
    f.nabs.apply_watcher_event(&Event::Apply(created_nab(json!({}))));
}

/// The same budget as a backup's: the Velero Restore and one status write to Created, no read, no Event.
#[tokio::test]
async fn a_restore_of_a_completed_backup_is_two_writes() {
    let (mut f, handle) = fixture("{}");
    completed_source(&mut f, "Completed");
    let (calls, events) = run_nar(&f, handle, nar("nightly")).await;
    assert_eq!(
        calls,
        vec![
            call(Method::POST, "/apis/velero.io/v1/namespaces/openshift-adp/restores"),
            call(Method::PUT, NAR_STATUS),
        ]
    );
    assert_eq!(events, 0);
}

/// A restore whose backup's contents cannot be read for now (Velero answers with a URL, the storage refuses the
/// connection): the status says why and that nac retries, with one Warning Event; nothing is created, and the
/// reconcile fails so that the error policy retries it with backoff.
#[tokio::test]
async fn a_restore_whose_contents_cannot_be_read_yet_says_why_and_is_retried() {
    let (mut f, handle) = fixture("{}");
    completed_source(&mut f, "Completed");
    Arc::get_mut(&mut f.nar).expect("the only handle").own.contents =
        super::contents::ContentsSource::Velero(Default::default());
    // The backup names no location: Velero's default, an admin's (nac's fetch is not guarded).
    let bsl: crate::velero::BackupStorageLocation = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
        "metadata": {"name": "default", "namespace": "openshift-adp"},
        "spec": {"provider": "aws", "default": true, "objectStorage": {"bucket": "b"}}
    }))
    .unwrap();
    f.locations.apply_watcher_event(&Event::Apply(bsl));
    // A port nothing listens on any more: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let request = "/apis/velero.io/v1/namespaces/openshift-adp/downloadrequests/rights-nar-uid";
    f.reads.insert(
        request.to_string(),
        json!({
            "apiVersion": "velero.io/v1", "kind": "DownloadRequest",
            "metadata": {"name": "rights-nar-uid", "namespace": "openshift-adp"},
            "spec": {"target": {"kind": "BackupContents", "name": format!("team-a-nightly-{UUID}")}},
            "status": {"phase": "Processed", "downloadURL": format!("http://{closed}/backup.tar.gz")}
        }),
    );
    let server = tokio::spawn(serve(
        handle,
        Duration::from_millis(300),
        serde_json::to_value(nar("nightly")).unwrap(),
        f.reads.clone(),
    ));
    let res = super::kind::reconcile(Arc::new(nar("nightly")), f.nar.clone()).await;
    let err = res.expect_err("the reconcile fails, to be retried with backoff");
    assert!(
        matches!(&err, super::Error::Finalizer(f)
            if matches!(f.as_ref(), kube::runtime::finalizer::Error::ApplyFailed(super::Error::NotReady(_)))),
        "{err:?}"
    );
    assert!(!err.is_waiting(), "retried by the backoff, not the waiting poll");
    let (calls, events) = split(server.await.unwrap().0);
    assert_eq!(
        calls,
        vec![
            call(
                Method::POST,
                "/apis/velero.io/v1/namespaces/openshift-adp/downloadrequests"
            ),
            call(Method::GET, request),
            call(Method::DELETE, request),
            call(Method::PUT, NAR_STATUS),
        ]
    );
    let status = calls.last().unwrap();
    assert_eq!(
        status.condition("Queued"),
        Some(("False".into(), "AdmissionRetrying".into()))
    );
    assert_eq!(status.body["status"]["phase"], "New");
    let message = status.body["status"]["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("retries with backoff") && message.contains(&closed.to_string()),
        "{message}"
    );
    assert_eq!(events, 1, "one Warning Event");
}

#[tokio::test]
async fn a_restore_leaves_out_what_its_requester_may_not_create_and_says_so() {
    let (mut f, handle) = fixture("{}");
    completed_source(&mut f, "Completed");
    let (calls, events) = run_nar(&f, handle, nar_by("nightly", "mallory")).await;
    assert_eq!(
        calls,
        vec![
            call(Method::POST, "/apis/velero.io/v1/namespaces/openshift-adp/restores"),
            call(Method::PUT, NAR_STATUS),
        ]
    );
    let restore = &calls[0].body;
    let excluded = restore["spec"]["excludedResources"].as_array().unwrap();
    assert!(excluded.contains(&json!("pods")), "{restore}");
    assert!(!excluded.contains(&json!("configmaps")), "{restore}");
    let record = restore["metadata"]["annotations"][crate::rights::restore::RESTORE_RIGHTS_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(record.contains("mallory"), "{record}");
    let conditions = calls[1].body["status"]["conditions"].as_array().unwrap();
    let left_out = conditions
        .iter()
        .find(|c| c["type"] == "ResourcesLeftOut")
        .expect("the condition");
    assert_eq!(left_out["reason"], "RequesterRightsExceeded");
    assert!(
        left_out["message"]
            .as_str()
            .unwrap()
            .starts_with("pods left out of the restore into namespace team-a, created with the rights of mallory"),
        "{left_out}"
    );
    assert_eq!(events, 1, "the warning (created is routine)");

    // The same refused under rights.restore: deny, and a restore nobody is recorded for.
    for (policy, nar) in [
        ("rights: {restore: deny}", nar_by("nightly", "mallory")),
        ("{}", {
            let mut n = nar("nightly");
            n.metadata.annotations = None;
            n
        }),
    ] {
        let (mut f, handle) = fixture(policy);
        completed_source(&mut f, "Completed");
        let (calls, _) = run_nar(&f, handle, nar).await;
        assert_eq!(calls, vec![call(Method::PUT, NAR_STATUS)], "{policy}");
        let status = &calls[0].body["status"];
        assert_eq!(status["phase"], "BackingOff");
        assert!(status.to_string().contains("RequesterRightsExceeded"), "{status}");
    }
}

/// A preview of a restore of `nightly`, by `user`.
fn preview_by(user: &str) -> NonAdminRestore {
    let mut obj = nar_by("nightly", user);
    obj.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::rights::preview::PREVIEW_ANNOTATION.into(), "true".into());
    obj
}

/// A preview is judged as the restore would be and changes nothing: the namespace's names listed (from the API
/// server's cache) for the kinds the restore would write, one status write with the table, no Velero Restore,
/// no resource modifier, no Event.
#[tokio::test]
async fn a_restore_preview_lists_the_namespace_writes_its_table_and_makes_nothing() {
    let (mut f, handle) = fixture("{}");
    completed_source(&mut f, "Completed");
    const CONFIGMAPS: &str = "/api/v1/namespaces/team-a/configmaps";
    f.reads.insert(
        CONFIGMAPS.into(),
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {},
               "items": [{"metadata": {"name": "cfg"}}, {"metadata": {"name": "unrelated"}}]}),
    );
    let mut obj = preview_by("mallory");
    obj.metadata.generation = Some(1);
    let (calls, events) = run_nar(&f, handle, obj.clone()).await;
    assert_eq!(
        calls,
        vec![call(Method::GET, CONFIGMAPS), call(Method::PUT, NAR_STATUS)],
        "pods are left out for mallory: only configmaps are listed"
    );
    assert_eq!(events, 0);
    let status = &calls[1].body["status"];
    assert_eq!(status["phase"], "New", "{status}");
    let accepted = &status["conditions"][0];
    assert_eq!(accepted["reason"], "RestorePreviewed");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("create 1, skip 1, update 0 and leave out 1 item(s)"),
        "{accepted}"
    );
    let p = &status["preview"];
    assert_eq!(p["observedGeneration"], 1);
    assert_eq!(p["existingResourcePolicy"], "none");
    assert_eq!(
        p["kinds"],
        json!([
            {"kind": "configmaps", "create": {"count": 1, "names": ["new-cfg"]}, "skip": {"count": 1, "names": ["cfg"]}},
            {"kind": "pods", "leftOut": {"count": 1, "names": ["root"]},
             "reason": "mallory may not create pods (policy rights.restore: exclude)"}
        ])
    );

    // Judged once for its generation: the next reconcile makes no call.
    let mut judged = obj;
    judged.status = serde_json::from_value(status.clone()).unwrap();
    let (f, handle) = fixture("{}");
    let (calls, _) = run_nar(&f, handle, judged).await;
    assert_eq!(calls, vec![]);

    // Where the restore would be refused (rights.restore: deny), the preview still has its table, and says so.
    let (mut f, handle) = fixture("rights: {restore: deny}");
    completed_source(&mut f, "Completed");
    f.reads.insert(CONFIGMAPS.into(), json!({"items": []}));
    let obj = preview_by("mallory");
    let (calls, _) = run_nar(&f, handle, obj).await;
    assert_eq!(calls.last().unwrap().path, NAR_STATUS);
    assert!(calls.iter().all(|c| c.method != Method::POST), "{calls:?}");
    let p = &calls.last().unwrap().body["status"]["preview"];
    assert!(p["refused"].as_str().unwrap().contains("pods left out"), "{p}");
    assert_eq!(p["kinds"][0]["create"]["count"], 2, "{p}");

    // A requester who may not list a kind there learns nothing of which of its names exist: not listed.
    let (mut f, handle) = fixture("{}");
    completed_source(&mut f, "Completed");
    f.reads
        .insert(CONFIGMAPS.into(), json!({"items": [{"metadata": {"name": "cfg"}}]}));
    const PODS: &str = "/api/v1/namespaces/team-a/pods";
    f.reads.insert(PODS.into(), json!({"items": []}));
    let obj = preview_by("trudy");
    let (calls, _) = run_nar(&f, handle, obj).await;
    assert_eq!(
        calls,
        vec![call(Method::GET, PODS), call(Method::PUT, NAR_STATUS)],
        "configmaps not listed for trudy"
    );
    let row = &calls[1].body["status"]["preview"]["kinds"][0];
    assert_eq!(row["kind"], "configmaps", "{row}");
    assert_eq!(row["create"]["count"], 2, "{row}");
    assert!(row.get("skip").is_none(), "{row}");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("trudy may not list configmaps in namespace team-a"),
        "{row}"
    );
}

#[tokio::test]
async fn a_restore_of_an_unfinished_or_missing_backup_writes_only_its_status() {
    for wait in ["{}", "restore: {waitTimeout: 0}"] {
        for (source, phase) in [("nightly", Some("InProgress")), ("missing", None)] {
            let (mut f, handle) = fixture(wait);
            if let Some(p) = phase {
                completed_source(&mut f, p);
            }
            let (calls, events) = run_nar(&f, handle, nar(source)).await;
            let mut expected = vec![call(Method::PUT, NAR_STATUS)];
            if source == "missing" {
                // Not in the cache: one read to be sure.
                expected.insert(
                    0,
                    call(
                        Method::GET,
                        "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminbackups/missing",
                    ),
                );
            } else if wait != "{}" {
                // Refusing at once: the cache may lag behind a backup that completed a moment ago, so one read of
                // the Velero Backup first. A wait needs none: the watch wakes it when the cache catches up.
                expected.insert(0, call(Method::GET, VELERO_BACKUP));
            }
            assert_eq!(calls, expected, "{source}");
            let status = calls.last().unwrap();
            if wait == "{}" {
                // It waits (10m by default): no Velero Restore, Queued=False WaitingForBackup, one Event (the wait).
                assert_eq!(
                    status.condition("Queued"),
                    Some(("False".into(), "WaitingForBackup".into())),
                    "{source}"
                );
                assert_eq!(status.body["status"]["phase"], "New");
                assert_eq!(events, 1, "{source}: the wait");
                assert_eq!(f.nar.own.queued.waiting.len(), 1);
            } else {
                // No wait: refused at once, as OADP does.
                assert_eq!(
                    status.condition("Accepted"),
                    Some(("False".into(), "InvalidRestoreSpec".into())),
                    "{source}"
                );
                assert_eq!(events, 1, "{source}");
                assert!(f.nar.own.queued.waiting.is_empty());
            }
        }
    }
}

#[tokio::test]
async fn deleting_a_restore_deletes_its_velero_restore_then_the_finalizer() {
    let (mut f, handle) = fixture("{}");
    let id = nacuuid_with("team-a", "undo", NAR_UUID);
    let mut undo = nar("nightly");
    let vr = crate::controller::restore::velero_restore(&undo, &id, "openshift-adp", Default::default());
    f.restores.apply_watcher_event(&Event::Apply(vr));
    undo.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-23T00:00:01Z".parse().unwrap(),
    ));
    // It was waiting for its backup before it was deleted: that wait ends with it.
    let me = kube::runtime::reflector::ObjectRef::from_obj(&undo);
    f.nar
        .own
        .queued
        .waiting
        .register(me, vec!["NonAdminBackup:team-a/nightly".into()]);
    let (calls, events) = run_nar(&f, handle, undo).await;
    assert!(f.nar.own.queued.waiting.is_empty());
    assert_eq!(
        calls,
        vec![
            call(Method::PUT, NAR_STATUS),
            call(
                Method::DELETE,
                &format!("/apis/velero.io/v1/namespaces/openshift-adp/restores/{id}")
            ),
            call(
                Method::PATCH,
                "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminrestores/undo"
            ),
        ]
    );
    assert_eq!(events, 1);
}

/// A restore deleted before its Velero Restore was made: nac's resource modifier, written before the Velero Restore
/// that would name it, goes with it (a delete that finds nothing costs the same one request).
#[tokio::test]
async fn deleting_a_restore_without_its_velero_restore_deletes_nac_s_resource_modifier() {
    let (f, handle) = fixture("{}");
    let mut undo = nar("nightly");
    undo.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-23T00:00:01Z".parse().unwrap(),
    ));
    let guard = crate::controller::restore::status_guard_name(&undo);
    assert!(guard.starts_with("nac-status-guard-"), "{guard}");
    let id = nacuuid_with("team-a", "undo", NAR_UUID);
    let (calls, _) = run_nar(&f, handle, undo).await;
    assert_eq!(
        calls,
        vec![
            // Not in the store: confirmed absent before the restore lets go.
            call(
                Method::GET,
                &format!("/apis/velero.io/v1/namespaces/openshift-adp/restores/{id}")
            ),
            call(Method::PUT, NAR_STATUS),
            call(
                Method::DELETE,
                &format!("/api/v1/namespaces/openshift-adp/configmaps/{guard}")
            ),
            call(
                Method::PATCH,
                "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminrestores/undo"
            ),
        ]
    );
}

const NAS_UUID: &str = "5c3e9a10-2b4d-4e6f-8a1b-0c2d3e4f5a6b";

/// A NonAdminSchedule as the mutating webhook leaves it (identity label, finalizer, the requester's records).
fn nas(skip_immediately: Option<bool>) -> NonAdminSchedule {
    serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminSchedule",
        "metadata": {
            "name": "nightly", "namespace": "team-a", "uid": "nas-uid", "resourceVersion": "1",
            "labels": {crate::naming::NAS_ORIGIN_NACUUID_LABEL: nacuuid_with("team-a", "nightly", NAS_UUID)},
            "annotations": {
                crate::rights::BACKUP_RIGHTS_ANNOTATION: r#"{"mode":"exclude","excluded":[]}"#,
                crate::rights::REQUESTER_ANNOTATION: json!({"username": "alice"}).to_string(),
            },
            "finalizers": [crate::naming::NAS_FINALIZER],
        },
        "spec": {"schedule": "@daily", "skipImmediately": skip_immediately, "template": {"backupSpec": {}}}
    }))
    .unwrap()
}

const NAS_PATH: &str = "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminschedules/nightly";

/// A NonAdminSchedule's budget: its Velero Schedule and one status write to Created; no read, no Event. One more
/// write when it asks to skip a run: `spec.skipImmediately` consumed once handed to Velero.
#[tokio::test]
async fn a_schedule_is_two_writes_and_a_third_to_consume_its_skip() {
    for (skip, consumed) in [(None, false), (Some(true), true)] {
        let (f, handle) = fixture("{}");
        let (calls, events) = drive(handle, nas(skip), f.reads.clone(), |o| {
            super::kind::reconcile(o, f.nas.clone())
        })
        .await;
        let mut expected = vec![call(
            Method::POST,
            "/apis/velero.io/v1/namespaces/openshift-adp/schedules",
        )];
        if consumed {
            expected.push(call(Method::PATCH, NAS_PATH));
        }
        expected.push(call(Method::PUT, &format!("{NAS_PATH}/status")));
        assert_eq!(calls, expected, "skipImmediately {skip:?}");
        assert_eq!(events, 0, "accepted is routine");
    }
}

/// A fixture for download requests: a completed NonAdminBackup `nightly` whose Velero Backup is on the admin's
/// location `default`, which the policy opens to downloads.
fn download_fixture() -> (Fixture, ApiHandle) {
    let (mut f, handle) = fixture("downloads: {adminLocations: [default]}");
    completed_source(&mut f, "Completed");
    f.reads.insert(
        NAB_PATH.to_string(),
        serde_json::to_value(created_nab(json!({}))).unwrap(),
    );
    let bsl: crate::velero::BackupStorageLocation = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
        "metadata": {"name": "default", "namespace": "openshift-adp"},
        "spec": {"provider": "aws", "objectStorage": {"bucket": "b"}}
    }))
    .unwrap();
    f.locations.apply_watcher_event(&Event::Apply(bsl));
    (f, handle)
}

/// A NonAdminDownloadRequest's budget: its Velero DownloadRequest, then (once Velero answers) one status write
/// with the URL; no Event. Two reads before the Velero DownloadRequest: the NonAdminBackup and its Velero Backup
/// whole (the stores keep compact copies without the resource lists), whose kinds the requester's rights are
/// checked against (`crate::rights::download`).
#[tokio::test]
async fn a_download_request_is_two_writes_and_two_reads() {
    let (mut f, handle) = download_fixture();
    let request: NonAdminDownloadRequest = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
        "metadata": {"name": "log", "namespace": "team-a", "uid": "nadr-uid", "resourceVersion": "1",
                     "annotations": {crate::rights::REQUESTER_ANNOTATION: json!({"username": "alice"}).to_string()}},
        "spec": {"target": {"kind": "BackupLog", "name": "nightly"}}
    }))
    .unwrap();
    let reconcile = |o| super::kind::reconcile(o, f.nadr.clone());
    let (calls, events, _, handle) = drive_on(handle, request.clone(), f.reads.clone(), reconcile).await;
    assert_eq!(
        calls,
        vec![
            call(Method::GET, NAB_PATH),
            call(Method::GET, VELERO_BACKUP),
            call(
                Method::POST,
                "/apis/velero.io/v1/namespaces/openshift-adp/downloadrequests"
            )
        ]
    );
    assert_eq!(events, 0);
    // Velero answers; its watch event brings the request back.
    let mut answered: crate::velero::DownloadRequest = serde_json::from_value(calls[2].answer.clone()).unwrap();
    let expires = k8s_openapi::jiff::Timestamp::now() + std::time::Duration::from_secs(600);
    answered.status = Some(crate::velero::DownloadRequestStatus {
        phase: Some("Processed".into()),
        download_url: Some("https://s3.example/log".into()),
        expiration: Some(expires.to_string()),
    });
    f.download_requests.apply_watcher_event(&Event::Apply(answered));
    let reconcile = |o| super::kind::reconcile(o, f.nadr.clone());
    let (calls, events, _, _) = drive_on(handle, request, f.reads.clone(), reconcile).await;
    assert_eq!(
        calls,
        vec![call(
            Method::PUT,
            "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadmindownloadrequests/log/status"
        )]
    );
    assert_eq!(
        calls[0].body["status"]["velero"]["status"]["downloadURL"], "https://s3.example/log",
        "{}",
        calls[0].body
    );
    assert_eq!(events, 0);
}

/// A download request whose requester may not read what the file exposes (mallory lists no Secrets), or that
/// has no requester recorded (it did not pass nac's webhook): refused in its status, with a Warning Event, and no
/// Velero DownloadRequest is made.
#[tokio::test]
async fn a_download_request_beyond_its_requesters_rights_makes_no_velero_download_request() {
    for (who, says) in [
        (
            Some("mallory"),
            "mallory may not read in namespace team-a: they may not list secrets",
        ),
        (None, "has no record of who created it"),
    ] {
        let (f, handle) = download_fixture();
        let mut request = json!({
            "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminDownloadRequest",
            "metadata": {"name": "contents", "namespace": "team-a", "uid": "nadr-uid", "resourceVersion": "1"},
            "spec": {"target": {"kind": "BackupContents", "name": "nightly"}}
        });
        if let Some(u) = who {
            request["metadata"]["annotations"] =
                json!({crate::rights::REQUESTER_ANNOTATION: json!({"username": u}).to_string()});
        }
        let request: NonAdminDownloadRequest = serde_json::from_value(request).unwrap();
        let reconcile = |o| super::kind::reconcile(o, f.nadr.clone());
        let (calls, events, _, _) = drive_on(handle, request, f.reads.clone(), reconcile).await;
        let status = "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadmindownloadrequests/contents/status";
        assert_eq!(
            calls,
            vec![
                call(Method::GET, NAB_PATH),
                call(Method::GET, VELERO_BACKUP),
                call(Method::PUT, status)
            ],
            "{who:?}"
        );
        let c = &calls[2].body["status"]["conditions"][0];
        assert_eq!(c["type"], "RequesterRightsExceeded", "{c}");
        assert_eq!(calls[2].body["status"]["phase"], "BackingOff");
        assert!(c["message"].as_str().unwrap().contains(says), "{c}");
        assert_eq!(events, 1, "{who:?}");
    }
}

/// A NonAdminBackupStorageLocation's budget (once per location, approval not required), as it stands: its status
/// (the nacuuid recorded first), its approval request and the request's status, a read of the tenant's Secret (nac
/// watches Secrets' metadata only) and its copy, the Velero BackupStorageLocation, and the status that says so.
/// One read more than it needs: the last status write reads the object again (the first one left the cache behind
/// it). Four Events: accepted, approved, the Secret copied, the location made.
#[tokio::test]
async fn a_storage_location_is_six_writes_two_reads_and_four_events() {
    let (mut f, handle) = fixture("nonAdminBSL: {enabled: true, requireApproval: false}");
    let loc: NonAdminBackupStorageLocation = serde_json::from_value(json!({
        "apiVersion": "oadp.openshift.io/v1alpha1", "kind": "NonAdminBackupStorageLocation",
        "metadata": {
            "name": "own", "namespace": "team-a", "uid": "nabsl-uid", "resourceVersion": "1",
            "labels": {crate::naming::NABSL_ORIGIN_NACUUID_LABEL: nacuuid_with("team-a", "own", NAS_UUID)},
            "finalizers": [crate::naming::NABSL_FINALIZER],
            // As the webhook records it: the requester's rights reach the Secret the location names.
            "annotations": {crate::rights::REQUESTER_ANNOTATION: json!({"username": "alice"}).to_string()},
        },
        "spec": {"backupStorageLocationSpec": {
            "provider": "aws", "objectStorage": {"bucket": "tenants", "prefix": "p"},
            "credential": {"name": "s3", "key": "cloud"}
        }}
    }))
    .unwrap();
    let secret = "/api/v1/namespaces/team-a/secrets/s3";
    f.reads.insert(
        secret.into(),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"cloud": "W2RlZmF1bHRdCmF3c19hY2Nlc3Nfa2V5X2lkID0gQQphd3Nfc2VjcmV0X2FjY2Vzc19rZXkgPSBCCg=="},
               "metadata": {"name": "s3", "namespace": "team-a", "uid": "s-uid", "resourceVersion": "3"}}),
    );
    let own = "/apis/oadp.openshift.io/v1alpha1/namespaces/team-a/nonadminbackupstoragelocations/own";
    let (calls, events) = drive(handle, loc, f.reads.clone(), |o| {
        super::kind::reconcile(o, f.nabsl.clone())
    })
    .await;
    let request = format!(
        "/apis/oadp.openshift.io/v1alpha1/namespaces/openshift-adp/nonadminbackupstoragelocationrequests/{}",
        nacuuid_with("team-a", "own", NAS_UUID)
    );
    assert_eq!(
        calls,
        vec![
            call(Method::PUT, &format!("{own}/status")),
            call(
                Method::POST,
                "/apis/oadp.openshift.io/v1alpha1/namespaces/openshift-adp/nonadminbackupstoragelocationrequests"
            ),
            call(Method::PUT, &format!("{request}/status")),
            call(Method::GET, secret),
            call(Method::POST, "/api/v1/namespaces/openshift-adp/secrets"),
            call(
                Method::POST,
                "/apis/velero.io/v1/namespaces/openshift-adp/backupstoragelocations"
            ),
            call(Method::GET, own),
            call(Method::PUT, &format!("{own}/status")),
        ]
    );
    assert_eq!(events, 4);
}
