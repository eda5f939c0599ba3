//! Memory per object in nac's stores: a promise, so counted exactly (bytes and allocations asked of the allocator,
//! not RSS). 1,000 settled NonAdminBackups with their Velero Backups, as the API server sends them (managedFields
//! of nac and Velero; the webhook's requester and rights records, some 60 kinds left out; the Velero Backup with
//! nac's and the requester's exclusions and a completed status), held as nac's watches keep them, against the
//! same objects held whole. The scale run (BENCHMARKS.md §3) measures the process at 10,000.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nac::api::{NonAdminBackup, NonAdminBackupSpec};
use nac::controller::backup::{mirrored, velero_backup_for, BackupView};
use nac::controller::status::{created, Placed};
use nac::controller::tenant::{tenant_store_copy, velero_store_copy};
use nac::naming::{nacuuid_with, NAB};
use nac::policy::Policy;
use nac::velero::Backup;
use serde_json::{json, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;

struct Counting;

static BYTES: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        BYTES.fetch_add(l.size() as isize, Relaxed);
        BLOCKS.fetch_add(1, Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        BYTES.fetch_sub(l.size() as isize, Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        BYTES.fetch_add(new as isize - l.size() as isize, Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: usize = 1000;
const VELERO_NS: &str = "openshift-adp";

/// Kinds a namespace `admin` may not list on a cluster with Velero and OADP installed (the scale run's tenants
/// leave out about 60).
fn unreadable_kinds() -> Vec<String> {
    let velero = [
        "backuprepositories",
        "backups",
        "backupstoragelocations",
        "datadownloads",
        "datauploads",
        "deletebackuprequests",
        "downloadrequests",
        "podvolumebackups",
        "podvolumerestores",
        "restores",
        "schedules",
        "serverstatusrequests",
        "volumesnapshotlocations",
    ];
    let oadp = [
        "cloudstorages",
        "dataprotectionapplications",
        "dataprotectiontests",
        "nonadminbackupstoragelocationrequests",
        "nonadmindownloadrequests",
        "nonadminschedules",
        "nonadminbackupstoragelocations",
    ];
    let other = [
        "leases.coordination.k8s.io",
        "endpointslices.discovery.k8s.io",
        "events.events.k8s.io",
        "csistoragecapacities.storage.k8s.io",
        "controllerrevisions.apps",
        "podtemplates",
        "resourcequotas",
        "limitranges",
        "bindings",
        "localsubjectaccessreviews.authorization.k8s.io",
        "roles.rbac.authorization.k8s.io",
        "rolebindings.rbac.authorization.k8s.io",
        "resourceclaims.resource.k8s.io",
        "resourceclaimtemplates.resource.k8s.io",
        "volumesnapshots.snapshot.storage.k8s.io",
        "volumesnapshotcontents.snapshot.storage.k8s.io",
        "podmonitors.monitoring.coreos.com",
        "servicemonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
        "alertmanagerconfigs.monitoring.coreos.com",
        "certificates.cert-manager.io",
        "certificaterequests.cert-manager.io",
        "issuers.cert-manager.io",
        "orders.acme.cert-manager.io",
        "challenges.acme.cert-manager.io",
        "networkpolicies.crd.projectcalico.org",
        "ippools.whereabouts.cni.cncf.io",
        "network-attachment-definitions.k8s.cni.cncf.io",
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "datavolumes.cdi.kubevirt.io",
        "routes.route.openshift.io",
        "buildconfigs.build.openshift.io",
        "imagestreams.image.openshift.io",
        "templates.template.openshift.io",
        "deploymentconfigs.apps.openshift.io",
        "egressnetworkpolicies.network.openshift.io",
        "rolebindingrestrictions.authorization.openshift.io",
        "appliedclusterresourcequotas.quota.openshift.io",
        "operatorgroups.operators.coreos.com",
    ];
    let mut k: Vec<String> = velero.iter().map(|r| format!("{r}.velero.io")).collect();
    k.extend(oadp.iter().map(|r| format!("{r}.oadp.openshift.io")));
    k.extend(other.iter().map(|r| r.to_string()));
    k
}

fn managed_fields(manager: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-25T10:00:00Z",
           "fieldsType": "FieldsV1", "fieldsV1": fields})
}

/// A settled NonAdminBackup and its completed Velero Backup as the API server sends them (JSON).
fn pair(i: usize) -> (String, String) {
    let ns = format!("tenant-{:04}", i / 10);
    let name = format!("b{}", i % 10);
    let uuid = format!("0d0b7b2c-ee76-412d-a867-{i:012}");
    let nacuuid = nacuuid_with(&ns, &name, &uuid);
    // The record is the mode alone; the Velero Backup leaves out the kinds the reconciler found unreadable.
    let rights = json!({"mode": "exclude"}).to_string();
    let listed = json!({"mode": "exclude", "excluded": unreadable_kinds()}).to_string();
    let requester =
        json!({"username": format!("user-{ns}"), "uid": "", "groups": ["system:authenticated"]}).to_string();
    let mut nab = NonAdminBackup::new(
        &name,
        NonAdminBackupSpec {
            backup_spec: serde_json::from_value(json!({"includedNamespaces": [ns], "ttl": "720h0m0s"})).unwrap(),
            delete_backup: false,
            unset: false,
        },
    );
    nab.metadata.namespace = Some(ns.clone());
    nab.metadata.annotations = Some(BTreeMap::from([
        (nac::rights::REQUESTER_ANNOTATION.to_string(), requester),
        (nac::rights::BACKUP_RIGHTS_ANNOTATION.to_string(), rights),
    ]));
    let mut decided = nab.clone();
    decided
        .annotations_mut()
        .insert(nac::rights::BACKUP_RIGHTS_ANNOTATION.to_string(), listed);
    let mut vb: Backup = velero_backup_for(&decided, &nacuuid, VELERO_NS, &Policy::default()).unwrap();
    let mut v = serde_json::to_value(&vb).unwrap();
    v["metadata"]["uid"] = json!(format!("6a1e5c1e-0000-4000-8000-{i:012}"));
    v["metadata"]["resourceVersion"] = json!(format!("{}", 100_000 + i));
    v["metadata"]["generation"] = json!(4);
    v["metadata"]["creationTimestamp"] = json!("2026-11-25T10:00:00Z");
    v["metadata"]["labels"]["velero.io/storage-location"] = json!("default");
    v["metadata"]["managedFields"] = json!([
        managed_fields(
            "nac",
            json!({"f:metadata": {"f:annotations": {".": {}}, "f:labels": {".": {}}}, "f:spec": {".": {}, "f:excludedResources": {}, "f:includedNamespaces": {}, "f:ttl": {}}})
        ),
        managed_fields(
            "velero-server",
            json!({"f:metadata": {"f:labels": {"f:velero.io/storage-location": {}}}, "f:spec": {"f:csiSnapshotTimeout": {}, "f:hooks": {}, "f:itemOperationTimeout": {}, "f:metadata": {}, "f:storageLocation": {}}, "f:status": {".": {}, "f:completionTimestamp": {}, "f:expiration": {}, "f:formatVersion": {}, "f:phase": {}, "f:progress": {".": {}, "f:itemsBackedUp": {}, "f:totalItems": {}}, "f:startTimestamp": {}, "f:version": {}}})
        ),
    ]);
    let spec = v["spec"].as_object_mut().unwrap();
    spec.insert("storageLocation".into(), json!("default"));
    spec.insert("csiSnapshotTimeout".into(), json!("10m0s"));
    spec.insert("itemOperationTimeout".into(), json!("4h0m0s"));
    spec.insert("hooks".into(), json!({}));
    spec.insert("metadata".into(), json!({}));
    v["status"] = json!({
        "phase": "Completed", "version": 1, "formatVersion": "1.1.0",
        "expiration": "2026-12-25T10:00:00Z", "startTimestamp": "2026-11-25T10:00:01Z",
        "completionTimestamp": "2026-11-25T10:00:04Z",
        "progress": {"totalItems": 23, "itemsBackedUp": 23}, "hookStatus": {}
    });
    vb = serde_json::from_value(v.clone()).unwrap();

    let view = BackupView {
        placed: Placed {
            nacuuid: nacuuid.clone(),
            name: nacuuid.clone(),
            namespace: VELERO_NS.into(),
            queue_position: 0,
        },
        mirrored: mirrored(&vb, Some(&nacuuid)),
        ..Default::default()
    };
    let now = Timestamp::from_second(1_795_000_000).unwrap();
    nab.status = Some(created::<NonAdminBackup>(None, &view, now));
    let mut n = serde_json::to_value(&nab).unwrap();
    n["metadata"]["uid"] = json!(format!("7b2f6d2f-0000-4000-8000-{i:012}"));
    n["metadata"]["resourceVersion"] = json!(format!("{}", 200_000 + i));
    n["metadata"]["generation"] = json!(1);
    n["metadata"]["creationTimestamp"] = json!("2026-11-25T10:00:00Z");
    n["metadata"]["labels"] = json!({NAB.nacuuid_label: nacuuid});
    n["metadata"]["finalizers"] = json!([NAB.finalizer]);
    n["metadata"]["managedFields"] = json!([
        managed_fields(
            "kubectl-create",
            json!({"f:spec": {".": {}, "f:backupSpec": {".": {}, "f:includedNamespaces": {}, "f:ttl": {}}}})
        ),
        managed_fields(
            "nac",
            json!({"f:status": {".": {}, "f:conditions": {}, "f:phase": {}, "f:queueInfo": {}, "f:veleroBackup": {}}})
        ),
    ]);
    (n.to_string(), v.to_string())
}

/// The counting allocator counts every thread: each test holds this while it runs, so another test's allocations
/// are not counted as its own.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Live bytes and allocations of what `hold` keeps of the 1,000 pairs, per pair.
fn per_pair<T>(pairs: &[(String, String)], hold: impl Fn(&str, &str) -> T) -> (f64, f64) {
    let (bytes, blocks) = (BYTES.load(Relaxed), BLOCKS.load(Relaxed));
    let held: Vec<T> = pairs.iter().map(|(n, v)| hold(n, v)).collect();
    let (b, k) = (BYTES.load(Relaxed) - bytes, BLOCKS.load(Relaxed) - blocks);
    // The Vec of handles is not part of what a store keeps per object.
    let vec = (held.capacity() * std::mem::size_of::<T>()) as isize;
    drop(held);
    ((b - vec) as f64 / N as f64, (k - 1) as f64 / N as f64)
}

#[test]
fn a_settled_backup_costs_less_than_a_third_of_its_whole_copies_in_the_stores() {
    let _serial = one_at_a_time();
    let pairs: Vec<(String, String)> = (0..N).map(pair).collect();
    let whole = per_pair(&pairs, |n, v| {
        let mut nab: NonAdminBackup = serde_json::from_str(n).unwrap();
        let mut vb: Backup = serde_json::from_str(v).unwrap();
        nab.metadata.managed_fields = None;
        vb.metadata.managed_fields = None;
        (Arc::new(nab), Arc::new(vb))
    });
    // What the stores kept before Velero Backups and settled NonAdminBackups had compact copies (for the record).
    let status_only = per_pair(&pairs, |n, v| {
        use nac::controller::write::CompactStatus;
        let mut nab: NonAdminBackup = serde_json::from_str(n).unwrap();
        let mut vb: Backup = serde_json::from_str(v).unwrap();
        nab.metadata.managed_fields = None;
        nab.status.as_mut().unwrap().make_compact();
        vb.metadata.managed_fields = None;
        (Arc::new(nab), Arc::new(vb))
    });
    let stored = per_pair(&pairs, |n, v| {
        let mut nab: NonAdminBackup = serde_json::from_str(n).unwrap();
        let mut vb: Backup = serde_json::from_str(v).unwrap();
        tenant_store_copy::<NonAdminBackup>(&mut nab);
        velero_store_copy::<NonAdminBackup>(&mut vb);
        (Arc::new(nab), Arc::new(vb))
    });
    println!(
        "per NonAdminBackup with its Velero Backup: whole (no managedFields) {:.0} bytes in {:.1} allocations; \
         the NonAdminBackup's status copy compact {:.0} bytes in {:.1}; as stored {:.0} bytes in {:.1}",
        whole.0, whole.1, status_only.0, status_only.1, stored.0, stored.1
    );
    // Exact counts for this code and these objects; the bounds leave room for dependency updates only.
    assert!(stored.0 * 3.0 <= whole.0, "stored {stored:?} against whole {whole:?}");
    assert!(stored.0 <= 3_300.0, "{} bytes per settled backup", stored.0);
    assert!(stored.1 <= 35.0, "{} allocations per settled backup", stored.1);
}

/// The quota usage watch (every NonAdminBackup, on every replica) decodes each object it lists or hears of only
/// as far as the counts read it: what one decoded NonAdminBackup holds, whole against counted.
#[test]
fn the_usage_watch_decodes_a_backup_as_far_as_the_counts_read_it() {
    let _serial = one_at_a_time();
    use nac::policy::live::usage::CountedBackup;
    let pairs: Vec<(String, String)> = (0..N).map(pair).collect();
    let whole = per_pair(&pairs, |n, _| serde_json::from_str::<NonAdminBackup>(n).unwrap());
    let counted = per_pair(&pairs, |n, _| serde_json::from_str::<CountedBackup>(n).unwrap());
    println!(
        "per NonAdminBackup decoded by the usage watch: whole {:.0} bytes in {:.1} allocations; counted {:.0} bytes \
         in {:.1}",
        whole.0, whole.1, counted.0, counted.1
    );
    assert!(
        counted.0 * 10.0 <= whole.0,
        "counted {counted:?} against whole {whole:?}"
    );
}

/// A tenant namespace's RoleBindings as the API server sends them: nac's editor role and Kubernetes' `admin` for
/// its owner, each applied with kubectl (its last-applied annotation, a label, managedFields).
fn namespace_bindings(i: usize) -> Vec<String> {
    let ns = format!("tenant-{i:04}");
    [("nonadminbackup-editor-role", "editor"), ("admin", "admin")]
        .into_iter()
        .enumerate()
        .map(|(j, (role, short))| {
            let name = format!("alice-{short}");
            let spec = json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("alice-{ns}")}],
            });
            let mut rb = spec.clone();
            rb["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
            rb["kind"] = json!("RoleBinding");
            let mut applied = rb.clone();
            applied["metadata"] = json!({"name": name, "namespace": ns, "labels": {"team": ns}});
            rb["metadata"] = json!({
                "name": name, "namespace": ns,
                "uid": format!("5c1d2e3f-0000-4000-8000-{:012}", i * 2 + j),
                "resourceVersion": format!("{}", 300_000 + i * 2 + j),
                "creationTimestamp": "2026-11-25T09:00:00Z",
                "labels": {"team": ns},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()},
                "managedFields": [managed_fields("kubectl-client-side-apply", json!({
                    "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                                   "f:labels": {".": {}, "f:team": {}}},
                    "f:roleRef": {}, "f:subjects": {}}))],
            });
            rb.to_string()
        })
        .collect()
}

/// What nac keeps per tenant namespace whatever the namespace holds: its labels (policy tiers select by them) and,
/// in the rules stores that answer rights questions, its RoleBindings (rules only), against the same RoleBindings
/// kept whole.
#[test]
fn a_tenant_namespace_costs_its_labels_and_its_bindings_without_their_metadata() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kube::runtime::watcher::Event;
    use nac::rights::rules::ByNamespaceWriter;
    let _serial = one_at_a_time();
    let bindings: Vec<Vec<String>> = (0..N).map(namespace_bindings).collect();
    let held = |strip: bool| -> (f64, f64) {
        let (bytes, blocks) = (BYTES.load(Relaxed), BLOCKS.load(Relaxed));
        let labels = nac::policy::live::NamespaceLabels::default();
        let mut writer = ByNamespaceWriter::<RoleBinding>::default();
        for (i, rbs) in bindings.iter().enumerate() {
            let ns = format!("tenant-{i:04}");
            labels.set(
                &ns,
                Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    ns.clone(),
                )])),
            );
            for rb in rbs {
                let mut rb: RoleBinding = serde_json::from_str(rb).unwrap();
                if strip {
                    nac::rights::rbac::rules_store_copy(&mut rb);
                }
                writer.apply_watcher_event(&Event::Apply(rb));
            }
        }
        let (b, k) = (BYTES.load(Relaxed) - bytes, BLOCKS.load(Relaxed) - blocks);
        drop((labels, writer));
        (b as f64 / N as f64, k as f64 / N as f64)
    };
    let whole = held(false);
    let stored = held(true);
    println!(
        "per tenant namespace (its labels, 2 RoleBindings): bindings whole {:.0} bytes in {:.1} allocations; as \
         stored {:.0} bytes in {:.1}",
        whole.0, whole.1, stored.0, stored.1
    );
    assert!(stored.0 * 2.0 <= whole.0, "stored {stored:?} against whole {whole:?}");
    assert!(
        stored.0 <= STORED_PER_NAMESPACE,
        "{} bytes per tenant namespace",
        stored.0
    );
}

/// The bound of [`a_tenant_namespace_costs_its_labels_and_its_bindings_without_their_metadata`]: this code's count
/// with room for dependency updates only.
const STORED_PER_NAMESPACE: f64 = 2_700.0;
