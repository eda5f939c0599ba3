//! A backup manifest, as Velero's backup-manifest design defines it: every item of a backup by kind and namespace
//! (API group, version, namespace, name, labels, annotations, owners), an index by UID, set operations to compare
//! two backups. Built from a Velero backup tarball as a stream (what `kubectl nac backup manifest` prints) or
//! from live objects (a dry-run preview), and serialised as `manifest.json`.
//!
//! The design's "API group" of an item is the tarball's directory name, the group-qualified resource
//! (`deployments.apps`, `configmaps` for the core group): what Velero's filters and paths name.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

/// One object of a backup: what selects it, not the object itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// The group-qualified resource (`deployments.apps`; `configmaps` for the core group).
    pub api_group: String,
    pub api_version: String,
    /// Empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// UIDs of the objects that own it (its ownerReferences).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
}

impl Item {
    /// The item's path as the design writes it: `<APIGroup>/<Namespace>/<APIVersion>/<name>.json` (cluster-scoped
    /// items have an empty namespace part).
    pub fn path(&self) -> String {
        format!(
            "{}/{}/{}/{}.json",
            self.api_group, self.namespace, self.api_version, self.name
        )
    }
}

/// Why an item cannot be added.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("item already exists in manifest: {0}")]
    ItemAlreadyExists(String),
    #[error("another item has UID {uid}: {path}")]
    UidAlreadyExists { uid: String, path: String },
}

/// group resource → namespace ("" for cluster-scoped) → name → item.
pub type Kinds = BTreeMap<String, BTreeMap<String, BTreeMap<String, Item>>>;

/// Every item of a backup, and an index by UID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub kinds: Kinds,
    /// UID → the item's path (the design's index; paths rather than copies in `manifest.json`).
    pub index: BTreeMap<String, String>,
}

impl Manifest {
    /// Adds `item`; an item of the same kind, namespace and name (or the same UID) is refused.
    pub fn add(&mut self, item: Item) -> Result<(), ManifestError> {
        let path = item.path();
        if !item.uid.is_empty() {
            if let Some(other) = self.index.get(&item.uid) {
                return Err(ManifestError::UidAlreadyExists {
                    uid: item.uid.clone(),
                    path: other.clone(),
                });
            }
        }
        let slot = self
            .kinds
            .entry(item.api_group.clone())
            .or_default()
            .entry(item.namespace.clone())
            .or_default();
        if slot.contains_key(&item.name) {
            return Err(ManifestError::ItemAlreadyExists(path));
        }
        if !item.uid.is_empty() {
            self.index.insert(item.uid.clone(), path);
        }
        slot.insert(item.name.clone(), item);
        Ok(())
    }

    /// The item of `api_group`, `namespace` and `name`.
    pub fn get(&self, api_group: &str, namespace: &str, name: &str) -> Option<&Item> {
        self.kinds.get(api_group)?.get(namespace)?.get(name)
    }

    /// The item with `uid`.
    pub fn by_uid(&self, uid: &str) -> Option<&Item> {
        // A path is `<group resource>/<namespace>/<version>/<name>.json`; none of its parts holds a `/`.
        let path = self.index.get(uid)?;
        let mut parts = path.splitn(4, '/');
        let (group, ns, _version, file) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        self.get(group, ns, file.strip_suffix(".json")?)
    }

    /// Every item, by kind, namespace and name.
    pub fn items(&self) -> impl Iterator<Item = &Item> {
        self.kinds.values().flat_map(|ns| ns.values().flat_map(|n| n.values()))
    }

    pub fn len(&self) -> usize {
        self.items().count()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The items in this manifest that own `item` (owners outside the backup are not found).
    pub fn owners(&self, item: &Item) -> Vec<&Item> {
        item.owners.iter().filter_map(|u| self.by_uid(u)).collect()
    }

    /// The items that name `item` as an owner.
    pub fn children(&self, item: &Item) -> Vec<&Item> {
        if item.uid.is_empty() {
            return Vec::new();
        }
        self.items().filter(|i| i.owners.contains(&item.uid)).collect()
    }

    /// Every item's path: compare two manifests with set operations.
    pub fn set(&self) -> BTreeSet<String> {
        self.items().map(Item::path).collect()
    }

    /// Reads a Velero backup tarball (gzipped) as a stream: every item under `resources/`, each once (Velero
    /// stores an object once per API version directory; the first copy is kept).
    pub fn from_tarball(r: impl Read, limits: &Limits) -> Result<Manifest, String> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(r));
        let mut m = Manifest::default();
        let mut read: u64 = 0;
        for entry in tar_entries(&mut archive, limits)? {
            let (path, mut entry) = entry?;
            let Some((api_group, namespace, name)) = parse_path(&path) else {
                continue;
            };
            if m.get(&api_group, &namespace, &name).is_some() {
                continue;
            }
            let body = read_item(&mut entry, limits)?;
            read += body.len() as u64;
            if body.len() as u64 > limits.max_item_bytes || read > limits.max_bytes {
                return Err(format!(
                    "{path} is larger than nac reads ({} bytes per item)",
                    limits.max_item_bytes
                ));
            }
            let object: Object =
                serde_json::from_slice(&body).map_err(|e| format!("{path} is not a Kubernetes object: {e}"))?;
            let item = object.item(api_group, namespace, name);
            m.add(item).map_err(|e| format!("{path}: {e}"))?;
        }
        Ok(m)
    }
}

/// The entries of a backup tarball with their paths: at most `limits.max_entries` of them; an unreadable entry or
/// path is an error.
pub fn tar_entries<'a, R: Read + 'a>(
    archive: &'a mut tar::Archive<R>,
    limits: &'a Limits,
) -> Result<impl Iterator<Item = Result<(String, tar::Entry<'a, R>), String>> + 'a, String> {
    let entries = archive
        .entries()
        .map_err(|e| format!("the backup's contents are not a tarball: {e}"))?;
    Ok(entries.enumerate().map(|(n, entry)| {
        if n as u64 >= limits.max_entries {
            return Err(format!(
                "the backup's contents have more than {} entries; nac reads no more",
                limits.max_entries
            ));
        }
        let entry = entry.map_err(|e| format!("the backup's contents could not be read: {e}"))?;
        let path = entry
            .path()
            .map_err(|e| format!("the backup's contents have an unreadable path: {e}"))?
            .to_string_lossy()
            .into_owned();
        Ok((path, entry))
    }))
}

/// One item's bytes, at most one more than `limits.max_item_bytes`: a longer body reads as too big, never
/// further.
pub fn read_item(entry: &mut impl Read, limits: &Limits) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    entry
        .take(limits.max_item_bytes + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("the backup's contents could not be read: {e}"))?;
    Ok(body)
}

/// Bounds on reading a tarball.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_entries: u64,
    /// Bytes of one item (the API server keeps no object above 1.5 MiB, so a real one always fits).
    pub max_item_bytes: u64,
    /// Bytes of all items read.
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 2_000_000,
            max_item_bytes: 4 << 20,
            max_bytes: 8 << 30,
        }
    }
}

/// `resources/<group resource>/[<version dir>/](namespaces/<ns>|cluster)/<name>.json` → (group resource, namespace,
/// name).
pub(crate) fn parse_path(path: &str) -> Option<(String, String, String)> {
    let path = path.strip_prefix("./").unwrap_or(path);
    let mut parts: Vec<&str> = path.split('/').collect();
    if parts.first() != Some(&"resources") || parts.len() < 4 {
        return None;
    }
    let group_resource = parts[1];
    if !matches!(parts[2], "namespaces" | "cluster") {
        parts.remove(2);
    }
    let (namespace, file) = match parts.as_slice() {
        [_, _, "namespaces", ns, file] => (*ns, *file),
        [_, _, "cluster", file] => ("", *file),
        _ => return None,
    };
    let name = file.strip_suffix(".json")?;
    if group_resource.is_empty() || name.is_empty() {
        return None;
    }
    Some((group_resource.to_string(), namespace.to_string(), name.to_string()))
}

/// What the manifest reads of a stored object.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    metadata: Meta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    uid: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerRef>>,
}

#[derive(Deserialize)]
struct OwnerRef {
    #[serde(default)]
    uid: String,
}

impl Object {
    fn item(self, api_group: String, namespace: String, name: String) -> Item {
        let version = self
            .api_version
            .rsplit_once('/')
            .map(|(_, v)| v.to_string())
            .unwrap_or(self.api_version);
        let m = self.metadata;
        Item {
            api_group,
            api_version: version,
            namespace,
            name,
            uid: m.uid.unwrap_or_default(),
            labels: m.labels.unwrap_or_default(),
            annotations: m.annotations.unwrap_or_default(),
            owners: m
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .map(|o| o.uid)
                .filter(|u| !u.is_empty())
                .collect(),
        }
    }
}

/// How two manifests overlap: items in both, and in one only (by path).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    pub both: BTreeSet<String>,
    pub only_a: BTreeSet<String>,
    pub only_b: BTreeSet<String>,
}

pub fn diff(a: &Manifest, b: &Manifest) -> Diff {
    let (sa, sb) = (a.set(), b.set());
    Diff {
        both: sa.intersection(&sb).cloned().collect(),
        only_a: sa.difference(&sb).cloned().collect(),
        only_b: sb.difference(&sa).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rights::contents::tests::tarball;
    use serde_json::json;

    fn item(group: &str, ns: &str, name: &str, uid: &str, owners: &[&str]) -> Item {
        Item {
            api_group: group.into(),
            api_version: "v1".into(),
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            owners: owners.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn items_are_added_once_and_found_by_uid_owner_and_child() {
        let mut m = Manifest::default();
        m.add(item("deployments.apps", "shop", "web", "d1", &[])).unwrap();
        m.add(item("replicasets.apps", "shop", "web-1", "r1", &["d1"])).unwrap();
        m.add(item("pods", "shop", "web-1-a", "p1", &["r1"])).unwrap();
        m.add(item("namespaces", "", "shop", "n1", &[])).unwrap();
        assert_eq!(
            m.add(item("pods", "shop", "web-1-a", "p2", &[])),
            Err(ManifestError::ItemAlreadyExists("pods/shop/v1/web-1-a.json".into()))
        );
        assert!(matches!(
            m.add(item("pods", "shop", "other", "p1", &[])),
            Err(ManifestError::UidAlreadyExists { .. })
        ));
        assert_eq!(m.len(), 4);
        let rs = m.get("replicasets.apps", "shop", "web-1").unwrap();
        assert_eq!(m.owners(rs)[0].name, "web");
        assert_eq!(m.children(rs)[0].name, "web-1-a");
        assert_eq!(m.by_uid("n1").unwrap().path(), "namespaces//v1/shop.json");
        let back: Manifest = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn two_manifests_overlap_by_path() {
        let mut a = Manifest::default();
        let mut b = Manifest::default();
        a.add(item("configmaps", "shop", "cfg", "", &[])).unwrap();
        a.add(item("secrets", "shop", "key", "", &[])).unwrap();
        b.add(item("configmaps", "shop", "cfg", "", &[])).unwrap();
        b.add(item("pods", "shop", "p", "", &[])).unwrap();
        let d = diff(&a, &b);
        assert_eq!(d.both.iter().collect::<Vec<_>>(), ["configmaps/shop/v1/cfg.json"]);
        assert_eq!(d.only_a.iter().collect::<Vec<_>>(), ["secrets/shop/v1/key.json"]);
        assert_eq!(d.only_b.iter().collect::<Vec<_>>(), ["pods/shop/v1/p.json"]);
    }

    #[test]
    fn a_velero_tarball_reads_into_a_manifest() {
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "d1", "labels": {"app": "shop"}}});
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "r1", "ownerReferences": [{"uid": "d1", "kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}]}});
        let t = tarball(&[
            ("metadata/version", json!("1.1.0")),
            ("resources/deployments.apps/namespaces/shop/web.json", deploy.clone()),
            (
                "resources/deployments.apps/v1-preferredversion/namespaces/shop/web.json",
                deploy,
            ),
            (
                "resources/replicasets.apps/v1-preferredversion/namespaces/shop/web-1.json",
                rs,
            ),
            (
                "resources/namespaces/cluster/shop.json",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "uid": "n1"}}),
            ),
        ]);
        let m = Manifest::from_tarball(t.as_slice(), &Limits::default()).unwrap();
        assert_eq!(m.len(), 3);
        let web = m.get("deployments.apps", "shop", "web").unwrap();
        assert_eq!((web.api_version.as_str(), web.labels["app"].as_str()), ("v1", "shop"));
        assert_eq!(m.children(web)[0].name, "web-1");
        assert_eq!(m.get("namespaces", "", "shop").unwrap().uid, "n1");
    }

    #[test]
    fn broken_tarballs_are_errors_not_panics() {
        assert!(Manifest::from_tarball(&b"nope"[..], &Limits::default()).is_err());
        let t = tarball(&[("resources/pods/namespaces/a/p.json", json!(["not", "an", "object"]))]);
        let e = Manifest::from_tarball(t.as_slice(), &Limits::default()).unwrap_err();
        assert!(e.contains("not a Kubernetes object"), "{e}");
        let t = tarball(&[(
            "resources/pods/namespaces/a/p.json",
            json!({"metadata": {"name": "x".repeat(100)}}),
        )]);
        let small = Limits {
            max_item_bytes: 10,
            ..Limits::default()
        };
        assert!(Manifest::from_tarball(t.as_slice(), &small).is_err());
        for p in [
            "metadata/version",
            "resources/pods/namespaces/a/b/c.json",
            "resources/pods/x/y/z/w.yaml",
            "resources/pods/namespaces/a/p.yaml",
            "other/pods/namespaces/a/p.json",
            "resources//namespaces/a/p.json",
        ] {
            assert!(parse_path(p).is_none(), "{p}");
        }
        assert_eq!(parse_path("./resources/pods/cluster/p.json").unwrap().1, "");
        assert_eq!(parse_path("resources/pods/v1/namespaces/a/p.json").unwrap().1, "a");
    }

    proptest::proptest! {
        #[test]
        fn adds_and_diffs_agree_with_plain_sets(
            a in proptest::collection::vec((0..3u8, 0..3u8, 0..6u8), 0..40),
            b in proptest::collection::vec((0..3u8, 0..3u8, 0..6u8), 0..40),
        ) {
            let build = |keys: &[(u8, u8, u8)]| {
                let mut m = Manifest::default();
                let mut distinct = BTreeSet::new();
                for (g, n, x) in keys {
                    let added = m.add(item(&format!("g{g}"), &format!("n{n}"), &format!("x{x}"), "", &[])).is_ok();
                    proptest::prop_assert_eq!(added, distinct.insert((g, n, x)));
                }
                proptest::prop_assert_eq!(m.len(), distinct.len());
                Ok(m)
            };
            let (ma, mb) = (build(&a)?, build(&b)?);
            let d = diff(&ma, &mb);
            let whole_a: BTreeSet<_> = d.both.union(&d.only_a).cloned().collect();
            let whole_b: BTreeSet<_> = d.both.union(&d.only_b).cloned().collect();
            proptest::prop_assert_eq!(whole_a, ma.set());
            proptest::prop_assert_eq!(whole_b, mb.set());
            proptest::prop_assert!(d.only_a.is_disjoint(&d.only_b));
        }
    }
}
