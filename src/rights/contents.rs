//! What a backup's contents hold for one namespace: the kinds with items there and the RBAC objects, read from
//! the gzipped tarball Velero restores from, as a stream and within limits.
//!
//! The tarball, not the backup's resource list: the list is a separate file, and in a bucket the tenant controls
//! (their own storage location) it can say anything. What Velero restores is what is in the tarball.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

/// Bounds on what a scan reads (the manifest's): a crafted tarball cannot make nac read forever or hold much in
/// memory.
pub use crate::manifest::Limits;

/// One RBAC object of the namespace in the backup: its name and what it says, or why it could not be read.
pub type Item<T> = (String, Result<T, String>);

/// The namespace's part of a backup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Contents {
    /// (group, resource) of every kind with an item in the namespace.
    pub kinds: BTreeSet<(String, String)>,
    /// The names of the namespace's items, per (group, resource) (every API version's copy counted once): what a
    /// restore preview compares with what the namespace holds now.
    pub names: BTreeMap<(String, String), BTreeSet<String>>,
    /// Roles and their rules (every copy: Velero stores an object once per API version).
    pub roles: Vec<Item<Vec<PolicyRule>>>,
    /// RoleBindings and the role each refers to.
    pub role_bindings: Vec<Item<RoleRef>>,
    /// What the backup holds beyond the namespace's own items (see [`Foreign`]).
    pub foreign: Foreign,
}

/// Most items of [`Foreign`] named in a refusal (the rest are counted).
pub const FOREIGN_NAMED: usize = 20;

/// Items of a backup that Velero would restore even when a restore includes neither their kind nor their
/// namespace (Velero v1.18 `pkg/restore/restore.go`: `resourceMustHave` restores every DataUpload and
/// VolumeSnapshotContent whatever `includedResources`/`includedNamespaces` say, and an item's namespace is
/// created first from `resources/namespaces/cluster/<ns>.json`, labels and annotations included), or that lie
/// outside the namespace: cluster-scoped items, items of other namespaces, DataUploads and
/// VolumeSnapshotContents anywhere. The namespace's own Namespace object is not one of them: the restore's
/// namespace exists (the NonAdminRestore is in it), so Velero never creates it from the tarball.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Foreign {
    /// The first [`FOREIGN_NAMED`] of them, as `resource.group namespace/name` (cluster-scoped: `name`).
    pub named: Vec<String>,
    /// How many there are in all.
    pub total: usize,
}

impl Foreign {
    fn add(&mut self, group_resource: &str, namespace: &str, name: &str) {
        self.total += 1;
        if self.named.len() < FOREIGN_NAMED {
            let at = if namespace.is_empty() {
                format!("{name} (cluster-scoped)")
            } else {
                format!("{namespace}/{name}")
            };
            self.named.push(format!("{group_resource} {at}"));
        }
    }

    /// The items as a sentence's list: the named ones, then how many more.
    pub fn describe(&self) -> String {
        let mut s = self.named.join(", ");
        if self.total > self.named.len() {
            s.push_str(&format!(" and {} more", self.total - self.named.len()));
        }
        s
    }
}

/// Kinds Velero restores whatever a restore includes (its `resourceMustHave`).
const ALWAYS_RESTORED: [&str; 2] = [
    "datauploads.velero.io",
    "volumesnapshotcontents.snapshot.storage.k8s.io",
];

/// Whether the item at (`group_resource`, `ns`, `name`) is foreign to a restore into `namespace`.
fn foreign(group_resource: &str, ns: &str, name: &str, namespace: &str) -> bool {
    if ALWAYS_RESTORED.contains(&group_resource) {
        return true;
    }
    if ns.is_empty() {
        // The namespace's own Namespace object: it exists, so Velero does not create it.
        return !(group_resource == "namespaces" && name == namespace);
    }
    ns != namespace
}

const RBAC: &str = "rbac.authorization.k8s.io";

/// Reads the gzipped tarball from `r` and gathers what it holds for `namespace`.
pub fn scan(r: impl Read, namespace: &str, limits: &Limits) -> Result<Contents, String> {
    let gz = flate2::read::GzDecoder::new(r);
    let mut counted = Counted {
        inner: gz,
        read: 0,
        max: limits.max_bytes,
    };
    let mut archive = tar::Archive::new(&mut counted);
    let mut out = Contents::default();
    for entry in crate::manifest::tar_entries(&mut archive, limits)? {
        let (path, mut entry) = entry?;
        let Some((group_resource, ns, name)) = crate::manifest::parse_path(&path) else {
            continue;
        };
        if foreign(&group_resource, &ns, &name, namespace) {
            out.foreign.add(&group_resource, &ns, &name);
        }
        if ns != namespace {
            continue;
        }
        let (resource, group) = group_resource.split_once('.').unwrap_or((&group_resource, ""));
        let (group, resource) = (group.to_string(), resource.to_string());
        let rbac = group == RBAC && (resource == "roles" || resource == "rolebindings");
        out.kinds.insert((group.clone(), resource.clone()));
        out.names
            .entry((group, resource.clone()))
            .or_default()
            .insert(name.clone());
        if !rbac {
            continue;
        }
        let body = crate::manifest::read_item(&mut entry, limits)?;
        let too_big = body.len() as u64 > limits.max_item_bytes;
        let fail = |e: String| {
            if too_big {
                format!("it is larger than {} bytes", limits.max_item_bytes)
            } else {
                format!("it is not a valid object: {e}")
            }
        };
        if resource == "roles" {
            let rules = serde_json::from_slice::<Role>(&body)
                .map(|r| r.rules.unwrap_or_default())
                .map_err(|e| fail(e.to_string()));
            out.roles.push((name, rules));
        } else {
            let role_ref = serde_json::from_slice::<RoleBinding>(&body)
                .map(|b| b.role_ref)
                .map_err(|e| fail(e.to_string()));
            out.role_bindings.push((name, role_ref));
        }
    }
    if counted.read > counted.max {
        return Err(format!(
            "the backup's contents are larger than {} bytes uncompressed; nac does not check more",
            limits.max_bytes
        ));
    }
    Ok(out)
}

/// A reader that stops (with an error) after `max` bytes.
struct Counted<R> {
    inner: R,
    read: u64,
    max: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.read > self.max {
            return Err(std::io::Error::other(format!(
                "larger than {} bytes uncompressed",
                self.max
            )));
        }
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A gzipped tarball of (path, JSON) entries, as Velero writes one.
    pub fn tarball(entries: &[(&str, Value)]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for (path, v) in entries {
            let body = serde_json::to_vec(v).unwrap();
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, path, body.as_slice()).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    pub fn binding(name: &str, kind: &str, role: &str) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": "team-a"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
               "subjects": [{"kind": "User", "name": "mallory", "apiGroup": "rbac.authorization.k8s.io"}]})
    }

    #[test]
    fn the_namespaces_kinds_and_rbac_objects_are_found_in_both_layouts() {
        let t = tarball(&[
            ("metadata/version", json!("1.1.0")),
            ("resources/configmaps/namespaces/team-a/cfg.json", json!({})),
            (
                "resources/configmaps/v1-preferredversion/namespaces/team-a/cfg.json",
                json!({}),
            ),
            ("resources/secrets/namespaces/team-b/theirs.json", json!({})),
            ("resources/namespaces/cluster/team-a.json", json!({})),
            (
                "resources/deployments.apps/v1-preferredversion/namespaces/team-a/web.json",
                json!({}),
            ),
            (
                "resources/rolebindings.rbac.authorization.k8s.io/v1-preferredversion/namespaces/team-a/all.json",
                binding("all", "ClusterRole", "cluster-admin"),
            ),
            (
                "resources/roles.rbac.authorization.k8s.io/namespaces/team-a/reader.json",
                json!({"metadata": {"name": "reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            ),
            (
                "resources/rolebindings.rbac.authorization.k8s.io/namespaces/team-a/broken.json",
                json!(["not", "an", "object"]),
            ),
        ]);
        let c = scan(t.as_slice(), "team-a", &Limits::default()).unwrap();
        let kinds: Vec<_> = c.kinds.iter().map(|(g, r)| format!("{r}.{g}")).collect();
        assert_eq!(
            kinds,
            [
                "configmaps.",
                "deployments.apps",
                "rolebindings.rbac.authorization.k8s.io",
                "roles.rbac.authorization.k8s.io"
            ]
        );
        let cfg = &c.names[&(String::new(), "configmaps".to_string())];
        assert_eq!(
            cfg.iter().collect::<Vec<_>>(),
            ["cfg"],
            "one name for both versions' copies"
        );
        assert_eq!(c.names.len(), c.kinds.len());
        assert_eq!(c.roles.len(), 1);
        assert_eq!(c.roles[0].1.as_ref().unwrap()[0].verbs, ["get"]);
        assert_eq!(c.role_bindings.len(), 2);
        assert_eq!(c.role_bindings[0].1.as_ref().unwrap().name, "cluster-admin");
        assert!(c.role_bindings[1]
            .1
            .as_ref()
            .unwrap_err()
            .contains("not a valid object"));
    }

    #[test]
    fn what_velero_restores_beyond_the_namespace_is_reported_and_the_namespace_itself_is_not() {
        let own = tarball(&[
            ("resources/namespaces/cluster/team-a.json", json!({})),
            (
                "resources/namespaces/v1-preferredversion/cluster/team-a.json",
                json!({}),
            ),
            ("resources/configmaps/namespaces/team-a/cfg.json", json!({})),
        ]);
        let c = scan(own.as_slice(), "team-a", &Limits::default()).unwrap();
        assert_eq!(c.foreign, Foreign::default(), "a namespace's own backup is not foreign");

        let crafted = tarball(&[
            ("resources/namespaces/cluster/team-a.json", json!({})),
            ("resources/namespaces/cluster/evil.json", json!({})),
            ("resources/configmaps/namespaces/evil/cfg.json", json!({})),
            (
                "resources/datauploads.velero.io/v2alpha1-preferredversion/namespaces/openshift-adp/du.json",
                json!({}),
            ),
            ("resources/datauploads.velero.io/namespaces/team-a/mine.json", json!({})),
            (
                "resources/volumesnapshotcontents.snapshot.storage.k8s.io/cluster/vsc.json",
                json!({}),
            ),
            (
                "resources/clusterrolebindings.rbac.authorization.k8s.io/cluster/all.json",
                json!({}),
            ),
            ("resources/configmaps/namespaces/team-a/cfg.json", json!({})),
        ]);
        let c = scan(crafted.as_slice(), "team-a", &Limits::default()).unwrap();
        assert_eq!(
            c.foreign.named,
            [
                "namespaces evil (cluster-scoped)",
                "configmaps evil/cfg",
                "datauploads.velero.io openshift-adp/du",
                "datauploads.velero.io team-a/mine",
                "volumesnapshotcontents.snapshot.storage.k8s.io vsc (cluster-scoped)",
                "clusterrolebindings.rbac.authorization.k8s.io all (cluster-scoped)",
            ]
        );
        assert_eq!(c.foreign.total, 6);
        assert!(c.kinds.contains(&("".into(), "configmaps".into())));
    }

    #[test]
    fn many_foreign_items_are_counted_and_only_the_first_named() {
        let entries: Vec<(String, Value)> = (0..FOREIGN_NAMED + 5)
            .map(|i| (format!("resources/namespaces/cluster/ns-{i}.json"), json!({})))
            .collect();
        let refs: Vec<(&str, Value)> = entries.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        let c = scan(tarball(&refs).as_slice(), "team-a", &Limits::default()).unwrap();
        assert_eq!(c.foreign.named.len(), FOREIGN_NAMED);
        assert_eq!(c.foreign.total, FOREIGN_NAMED + 5);
        assert!(
            c.foreign.describe().ends_with(" and 5 more"),
            "{}",
            c.foreign.describe()
        );
    }

    #[test]
    fn garbage_and_oversized_contents_are_errors_not_panics() {
        assert!(scan(&b"not gzip at all"[..], "team-a", &Limits::default()).is_err());
        let t = tarball(&[(
            "resources/configmaps/namespaces/team-a/cfg.json",
            json!({"data": "x".repeat(4096)}),
        )]);
        let (mut small, mut few) = (Limits::default(), Limits::default());
        (small.max_bytes, few.max_entries) = (1024, 0);
        for (limits, error) in [(small, "larger than 1024"), (few, "more than 0 entries")] {
            let e = scan(t.as_slice(), "team-a", &limits).unwrap_err();
            assert!(e.contains(error), "{e}");
        }
        let t = tarball(&[(
            "resources/roles.rbac.authorization.k8s.io/namespaces/team-a/big.json",
            json!({"metadata": {"name": "big", "annotations": {"a": "x".repeat(4096)}}}),
        )]);
        let tight = Limits {
            max_item_bytes: 100,
            ..Limits::default()
        };
        let c = scan(t.as_slice(), "team-a", &tight).unwrap();
        assert!(c.roles[0].1.as_ref().unwrap_err().contains("larger than 100 bytes"));
    }
}
