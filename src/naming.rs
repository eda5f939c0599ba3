//! Names and identity labels shared by the webhooks and the reconciler.
//!
//! The nacuuid is `<namespace>-<name>-<uuid4>`, at most 63 characters (a label value and a Velero object name),
//! shortened by trimming the name first and then the namespace, as OADP's non-admin controller does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{Lookup, ObjectRef};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Label on a NonAdminBackup and its Velero objects carrying the backup's identity.
pub const NAB_ORIGIN_NACUUID_LABEL: &str = "openshift.io/oadp-nab-origin-nacuuid";
/// Label on a NonAdminRestore and its Velero Restore carrying the restore's identity.
pub const NAR_ORIGIN_NACUUID_LABEL: &str = "openshift.io/oadp-nar-origin-nacuuid";
/// On each object a copy restored into another namespace: the namespace whose backup it came from (beside
/// [`NAB_ORIGIN_NACUUID_LABEL`], naming that backup). nac's own; OADP has no copies.
pub const COPIED_FROM_NAMESPACE_LABEL: &str = "nac.oadp.openshift.io/copied-from-namespace";
pub const NAB_ORIGIN_NAME_ANNOTATION: &str = "openshift.io/oadp-nab-origin-name";
pub const NAB_ORIGIN_NAMESPACE_ANNOTATION: &str = "openshift.io/oadp-nab-origin-namespace";
pub const NAR_ORIGIN_NAME_ANNOTATION: &str = "openshift.io/oadp-nar-origin-name";
pub const NAR_ORIGIN_NAMESPACE_ANNOTATION: &str = "openshift.io/oadp-nar-origin-namespace";
/// Label on a NonAdminBackupStorageLocation and on everything made for it in Velero's namespace (Secret copy,
/// Velero BSL, approval request).
pub const NABSL_ORIGIN_NACUUID_LABEL: &str = "openshift.io/oadp-nabsl-origin-nacuuid";
pub const NABSL_ORIGIN_NAME_ANNOTATION: &str = "openshift.io/oadp-nabsl-origin-name";
pub const NABSL_ORIGIN_NAMESPACE_ANNOTATION: &str = "openshift.io/oadp-nabsl-origin-namespace";
/// Label on the Velero DownloadRequest made for a NonAdminDownloadRequest, holding the request's uid.
pub const NADR_ORIGIN_NACUUID_LABEL: &str = "openshift.io/oadp-nadr-origin-nacuuid";
pub const NADR_ORIGIN_NAME_ANNOTATION: &str = "openshift.io/oadp-nadr-origin-name";
pub const NADR_ORIGIN_NAMESPACE_ANNOTATION: &str = "openshift.io/oadp-nadr-origin-namespace";
pub const OADP_LABEL: &str = "openshift.io/oadp";
pub const OADP_LABEL_VALUE: &str = "True";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of `app.kubernetes.io/managed-by` on Velero objects nac creates (OADP's controller id).
pub const MANAGED_BY_VALUE: &str = "oadp-nac-controller";
pub const VELERO_BACKUP_NAME_LABEL: &str = "velero.io/backup-name";
/// Velero's label naming the Restore a per-volume object (PodVolumeRestore, DataDownload) belongs to.
pub const VELERO_RESTORE_NAME_LABEL: &str = "velero.io/restore-name";
pub const VELERO_BACKUP_UID_LABEL: &str = "velero.io/backup-uid";
/// Finalizers nac puts on its proxy objects (same strings as OADP's controller).
pub const NAB_FINALIZER: &str = "nonadminbackup.oadp.openshift.io/finalizer";
pub const NAR_FINALIZER: &str = "nonadminrestore.oadp.openshift.io/finalizer";
pub const NABSL_FINALIZER: &str = "nonadminbackupstoragelocation.oadp.openshift.io/finalizer";
/// Label on a NonAdminSchedule and on the Velero Schedule made for it; Velero copies the Schedule's labels and
/// annotations onto every Backup it makes, so each run carries it too.
pub const NAS_ORIGIN_NACUUID_LABEL: &str = "openshift.io/oadp-nas-origin-nacuuid";
pub const NAS_ORIGIN_NAME_ANNOTATION: &str = "openshift.io/oadp-nas-origin-name";
pub const NAS_ORIGIN_NAMESPACE_ANNOTATION: &str = "openshift.io/oadp-nas-origin-namespace";
pub const NAS_FINALIZER: &str = "nonadminschedule.oadp.openshift.io/finalizer";
/// Label on a NonAdminBackup that nac re-created from a backup found in object storage (backup sync), holding the
/// backup's nacuuid. Only nac may set it: it makes the reconciler adopt the existing Velero Backup.
pub const NAB_SYNCED_FROM_NACUUID_LABEL: &str = "openshift.io/oadp-nab-synced-from-nacuuid";

/// Where nac reads the labels and annotations of an object: its metadata, or what a compact store copy kept of
/// them (a B-tree map holds half a KiB however few entries it has; a Velero Backup of nac's carries two).
pub trait Tags {
    fn label(&self, key: &str) -> Option<&str>;
    fn annotation(&self, key: &str) -> Option<&str>;
}

impl Tags for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

/// `Tags` of objects nac reads from their metadata (all but those with a compact copy of their own).
#[macro_export]
macro_rules! tags_from_meta {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::naming::Tags for $t {
            fn label(&self, key: &str) -> Option<&str> {
                $crate::naming::Tags::label(kube::Resource::meta(self), key)
            }
            fn annotation(&self, key: &str) -> Option<&str> {
                $crate::naming::Tags::annotation(kube::Resource::meta(self), key)
            }
        }
    )*};
}

/// Labels or annotations as `ObjectMeta` holds them.
pub type TagMap = BTreeMap<String, String>;

/// Labels and annotations in one allocation, each entry its kind (`L` or `A`), then key and value, each after its
/// length (u32, little-endian): lengths, not separators, so no key or value (an annotation may hold any text, and
/// a synced Backup's come from a bucket a tenant controls) can make up an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactTags(Box<[u8]>);

impl CompactTags {
    pub fn new(labels: Option<&BTreeMap<String, String>>, annotations: Option<&BTreeMap<String, String>>) -> Self {
        let mut buf = Vec::new();
        for (kind, map) in [(b'L', labels), (b'A', annotations)] {
            for (k, v) in map.into_iter().flatten() {
                buf.push(kind);
                for part in [k, v] {
                    buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
                    buf.extend_from_slice(part.as_bytes());
                }
            }
        }
        CompactTags(buf.into_boxed_slice())
    }

    /// Every entry: its kind, key and value.
    pub fn entries(&self) -> impl Iterator<Item = (u8, &str, &str)> {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let (&kind, after) = rest.split_first()?;
            let (k, after) = Self::part(after)?;
            let (v, after) = Self::part(after)?;
            rest = after;
            Some((kind, k, v))
        })
    }

    fn part(b: &[u8]) -> Option<(&str, &[u8])> {
        let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        let s = std::str::from_utf8(b.get(4..4 + len)?).ok()?;
        Some((s, &b[4 + len..]))
    }

    fn find(&self, kind: u8, key: &str) -> Option<&str> {
        self.entries()
            .find(|(c, k, _)| *c == kind && *k == key)
            .map(|(_, _, v)| v)
    }

    /// The maps again, as the metadata had them (an empty one as none).
    pub fn maps(&self) -> (Option<TagMap>, Option<TagMap>) {
        let of = |kind: u8| {
            let m: BTreeMap<String, String> = self
                .entries()
                .filter(|(c, _, _)| *c == kind)
                .map(|(_, k, v)| (k.to_string(), v.to_string()))
                .collect();
            (!m.is_empty()).then_some(m)
        };
        (of(b'L'), of(b'A'))
    }
}

impl Tags for CompactTags {
    fn label(&self, key: &str) -> Option<&str> {
        self.find(b'L', key)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.find(b'A', key)
    }
}

/// The identity scheme of one tenant kind, shared by the webhooks, the reconciler and backup sync: the label
/// carrying the nacuuid (on the tenant object and on every Velero object made for it), the annotations naming the
/// origin object, and the finalizer. Adding a kind adds one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub kind: &'static str,
    pub nacuuid_label: &'static str,
    pub name_annotation: &'static str,
    pub namespace_annotation: &'static str,
    pub finalizer: &'static str,
}

pub const NAB: Origin = Origin {
    kind: "NonAdminBackup",
    nacuuid_label: NAB_ORIGIN_NACUUID_LABEL,
    name_annotation: NAB_ORIGIN_NAME_ANNOTATION,
    namespace_annotation: NAB_ORIGIN_NAMESPACE_ANNOTATION,
    finalizer: NAB_FINALIZER,
};

pub const NAR: Origin = Origin {
    kind: "NonAdminRestore",
    nacuuid_label: NAR_ORIGIN_NACUUID_LABEL,
    name_annotation: NAR_ORIGIN_NAME_ANNOTATION,
    namespace_annotation: NAR_ORIGIN_NAMESPACE_ANNOTATION,
    finalizer: NAR_FINALIZER,
};

pub const NABSL: Origin = Origin {
    kind: "NonAdminBackupStorageLocation",
    nacuuid_label: NABSL_ORIGIN_NACUUID_LABEL,
    name_annotation: NABSL_ORIGIN_NAME_ANNOTATION,
    namespace_annotation: NABSL_ORIGIN_NAMESPACE_ANNOTATION,
    finalizer: NABSL_FINALIZER,
};

pub const NAS: Origin = Origin {
    kind: "NonAdminSchedule",
    nacuuid_label: NAS_ORIGIN_NACUUID_LABEL,
    name_annotation: NAS_ORIGIN_NAME_ANNOTATION,
    namespace_annotation: NAS_ORIGIN_NAMESPACE_ANNOTATION,
    finalizer: NAS_FINALIZER,
};

/// A download request's identity is its uid (OADP's scheme). It has no finalizer: the one thing made for it,
/// its Velero DownloadRequest, is collected when the request is gone (`controller::gc`).
pub const NADR: Origin = Origin {
    kind: "NonAdminDownloadRequest",
    nacuuid_label: NADR_ORIGIN_NACUUID_LABEL,
    name_annotation: NADR_ORIGIN_NAME_ANNOTATION,
    namespace_annotation: NADR_ORIGIN_NAMESPACE_ANNOTATION,
    finalizer: "",
};

impl Origin {
    /// Metadata of a Velero object `name` in `velero_namespace` made for the origin object `namespace`/`origin`
    /// with `nacuuid`: nac's labels (plus `extra_labels`) and the origin annotations.
    pub fn stamp(
        &self,
        name: &str,
        velero_namespace: &str,
        nacuuid: &str,
        namespace: &str,
        origin: &str,
        extra_labels: &[(&str, &str)],
    ) -> ObjectMeta {
        let mut labels = BTreeMap::from([
            (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
            (OADP_LABEL.to_string(), OADP_LABEL_VALUE.to_string()),
            (self.nacuuid_label.to_string(), nacuuid.to_string()),
        ]);
        labels.extend(extra_labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(velero_namespace.to_string()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (self.name_annotation.to_string(), origin.to_string()),
                (self.namespace_annotation.to_string(), namespace.to_string()),
            ])),
            ..ObjectMeta::default()
        }
    }

    /// Whether a Velero object carries this kind's identity label.
    pub fn is_tagged<T: Tags + ?Sized>(&self, meta: &T) -> bool {
        self.nacuuid(meta).is_some()
    }

    /// The nacuuid in this kind's identity label.
    pub fn nacuuid<'m, T: Tags + ?Sized>(&self, meta: &'m T) -> Option<&'m str> {
        meta.label(self.nacuuid_label)
    }

    /// `(namespace, name)` of the origin object named by the annotations.
    pub fn origin_of<'m, T: Tags + ?Sized>(&self, meta: &'m T) -> Option<(&'m str, &'m str)> {
        let name = meta.annotation(self.name_annotation).filter(|s| !s.is_empty())?;
        let ns = meta.annotation(self.namespace_annotation).filter(|s| !s.is_empty())?;
        Some((ns, name))
    }

    /// The origin object a tagged Velero object was made for.
    pub fn owner<K>(&self, meta: &(impl Tags + ?Sized)) -> Option<ObjectRef<K>>
    where
        K: Lookup,
        K::DynamicType: Default,
    {
        self.nacuuid(meta)?;
        let (ns, name) = self.origin_of(meta)?;
        Some(ObjectRef::new(name).within(ns))
    }

    /// Whether a Velero object found under a nacuuid really belongs to `namespace`/`name` (a guard against a
    /// forged or copied nacuuid pointing at someone else's object).
    pub fn owns<T: Tags + ?Sized>(&self, meta: &T, namespace: &str, name: &str) -> bool {
        self.origin_of(meta) == Some((namespace, name))
    }
}

/// Longest Kubernetes label value and DNS label.
pub const MAX_NAME_LEN: usize = 63;
const UUID_LEN: usize = 36;

/// A fresh nacuuid for an object `name` in `namespace`.
pub fn generate_nacuuid(namespace: &str, name: &str) -> String {
    nacuuid_with(namespace, name, &Uuid::new_v4().to_string())
}

/// The nacuuid for a given uuid: deterministic, so it can be tested.
pub fn nacuuid_with(namespace: &str, name: &str, uuid: &str) -> String {
    debug_assert_eq!(uuid.len(), UUID_LEN);
    // Room for "<ns>-<name>-" in front of the uuid.
    let budget = MAX_NAME_LEN - uuid.len();
    let mut ns = namespace;
    let mut nm = name;
    // Each non-empty part costs its length plus one hyphen.
    let cost = |ns: &str, nm: &str| part_cost(ns) + part_cost(nm);
    if cost(ns, nm) > budget {
        let keep = budget.saturating_sub(part_cost(ns)).saturating_sub(1);
        nm = trim_part(nm, keep);
    }
    if cost(ns, nm) > budget {
        let keep = budget.saturating_sub(1);
        ns = trim_part(ns, keep);
    }
    let mut out = String::with_capacity(MAX_NAME_LEN);
    for part in [ns, nm] {
        if !part.is_empty() {
            out.push_str(part);
            out.push('-');
        }
    }
    out.push_str(uuid);
    out
}

fn part_cost(p: &str) -> usize {
    if p.is_empty() {
        0
    } else {
        p.len() + 1
    }
}

/// Keep at most `keep` leading characters, dropping trailing separators so the result stays a clean DNS prefix.
fn trim_part(p: &str, keep: usize) -> &str {
    let mut end = keep.min(p.len());
    while !p.is_char_boundary(end) {
        end -= 1;
    }
    p[..end].trim_end_matches(['-', '.'])
}

/// Whether `name` is a valid Kubernetes object name (RFC 1123 subdomain).
pub fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// The nacuuid OADP's non-admin controller gives an object for a given uuid. It differs from nac's
/// ([`nacuuid_with`]) only when shortened: it cuts the namespace to 25 characters and drops the name when the
/// namespace is longer than 25 (nac keeps 26), and it does not drop a hyphen or dot left at the end of a cut
/// name. Objects that controller made keep their names when nac takes them over, so both shapes are recognised.
pub fn oadp_nacuuid_with(namespace: &str, name: &str, uuid: &str) -> String {
    let join = |parts: &[&str]| {
        let mut out: Vec<&str> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
        out.push(uuid);
        out.join("-")
    };
    let whole = join(&[namespace, name]);
    if whole.len() <= MAX_NAME_LEN {
        return whole;
    }
    // Room for the parts in front of the uuid, less two separators.
    let room = MAX_NAME_LEN - uuid.len() - 2;
    if namespace.len() > room {
        return join(&[cut(namespace, room)]);
    }
    join(&[namespace, cut(name, room - namespace.len())])
}

/// The first `keep` bytes of `s` (Kubernetes names are ASCII; a char boundary is kept all the same).
fn cut(s: &str, keep: usize) -> &str {
    let mut end = keep.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether `value` has the shape of a nacuuid nac, or OADP's non-admin controller before it, would generate for
/// this object (any uuid).
pub fn is_nacuuid_for(value: &str, namespace: &str, name: &str) -> bool {
    if value.len() < UUID_LEN || value.len() > MAX_NAME_LEN {
        return false;
    }
    let (prefix, uuid) = value.split_at(value.len() - UUID_LEN);
    if Uuid::parse_str(uuid).is_err() {
        return false;
    }
    [
        nacuuid_with(namespace, name, uuid),
        oadp_nacuuid_with(namespace, name, uuid),
    ]
    .iter()
    .any(|v| v.strip_suffix(uuid) == Some(prefix))
}

/// The value Velero gives a label naming an object (`velero.io/backup-name` on the objects of a backup): the name
/// itself when it fits a label value, else its first 57 characters and 6 hex digits of its SHA-256. Scheduled
/// runs have names longer than that, so labels naming them must be written, and read, in this form.
pub fn velero_label_value(name: &str) -> std::borrow::Cow<'_, str> {
    use sha2::Digest;
    if name.len() <= MAX_NAME_LEN {
        return name.into();
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().take(3).map(|b| format!("{b:02x}")).collect();
    let mut keep = MAX_NAME_LEN - hex.len();
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{hex}", &name[..keep]).into()
}

/// Length of the timestamp Velero appends to a scheduled Backup's name (`-YYYYMMDDhhmmss`, dash excluded).
pub const RUN_TIMESTAMP_LEN: usize = 14;

/// The name nac gave, before it took OADP's naming, to the NonAdminBackup of one run of NonAdminSchedule
/// `schedule`: the schedule's name with the run's timestamp. A run's NonAdminBackup is now named as its Velero
/// Backup is (`<the schedule's nacuuid>-<timestamp>`, as OADP's controller names it); those named the earlier way
/// keep their names.
pub fn legacy_run_name(schedule: &str, timestamp: &str) -> String {
    format!("{schedule}-{timestamp}")
}

/// Whether Velero Backup `value` is the scheduled run NonAdminBackup `name` of `namespace` stands for: a Backup a
/// Velero Schedule named by a NonAdminSchedule's nacuuid made (`<nacuuid>-<timestamp>`), where `name` is that
/// Backup's own name (OADP's naming), or the NonAdminSchedule's name with the same timestamp (nac's earlier
/// naming). Checked by shape, like [`is_nacuuid_for`]. (The run's own nacuuid is an ordinary one: a run's name is
/// longer than a label value may be.)
pub fn is_run_backup_of(value: &str, namespace: &str, name: &str) -> bool {
    let split = |s: &str| -> Option<(String, String)> {
        let (head, ts) = s.rsplit_once('-')?;
        (ts.len() == RUN_TIMESTAMP_LEN && ts.bytes().all(|b| b.is_ascii_digit()))
            .then(|| (head.to_string(), ts.to_string()))
    };
    let Some((schedule_id, ts)) = split(value) else {
        return false;
    };
    if value == name {
        return is_nacuuid_in(&schedule_id, namespace);
    }
    let Some((schedule, ts2)) = split(name) else {
        return false;
    };
    ts == ts2 && is_nacuuid_for(&schedule_id, namespace, &schedule)
}

/// Whether `value` has the shape of a nacuuid nac generates for some object of `namespace` (any name, any uuid):
/// how a Velero object nac made for a tenant is told from an admin's when only its name is left.
pub fn is_nacuuid_in(value: &str, namespace: &str) -> bool {
    if value.len() <= UUID_LEN || value.len() > MAX_NAME_LEN {
        return false;
    }
    let (prefix, uuid) = value.split_at(value.len() - UUID_LEN);
    // The namespace is the first part, cut to what fits beside the uuid (by nac, or by OADP's controller, which
    // keeps one character less).
    let room = MAX_NAME_LEN - UUID_LEN - 1;
    let starts = |ns: &str| !ns.is_empty() && prefix.starts_with(&format!("{ns}-"));
    Uuid::parse_str(uuid).is_ok() && (starts(trim_part(namespace, room)) || starts(cut(namespace, room - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_tags_read_as_the_maps_did_and_no_value_makes_up_an_entry() {
        let mut m = NAB.stamp(
            "u1",
            "velero",
            "u1",
            "team-a",
            "nightly",
            &[("velero.io/storage-location", "default")],
        );
        // A value crafted to look like an encoded origin-namespace entry (annotations may hold any text; a synced
        // Backup's come from a bucket a tenant controls).
        let mut forged = vec![b'A'];
        for part in [NAB_ORIGIN_NAMESPACE_ANNOTATION, "team-b"] {
            forged.extend_from_slice(&(part.len() as u32).to_le_bytes());
            forged.extend_from_slice(part.as_bytes());
        }
        let forged = String::from_utf8(forged).unwrap();
        m.annotations.as_mut().unwrap().insert("a-note".into(), forged.clone());
        m.labels.as_mut().unwrap().insert("zz".into(), "\u{0}".into());
        let t = CompactTags::new(m.labels.as_ref(), m.annotations.as_ref());
        assert_eq!(t.maps(), (m.labels.clone(), m.annotations.clone()));
        assert_eq!(NAB.nacuuid(&t), NAB.nacuuid(&m));
        assert_eq!(NAB.origin_of(&t), Some(("team-a", "nightly")));
        assert_eq!(t.annotation("a-note"), Some(forged.as_str()));
        assert_eq!(t.label("velero.io/storage-location"), Some("default"));
        assert_eq!(
            t.label(NAB_ORIGIN_NAME_ANNOTATION),
            None,
            "an annotation is not a label"
        );
        assert_eq!(
            t.annotation(NAB_ORIGIN_NACUUID_LABEL),
            None,
            "a label is not an annotation"
        );
        // Nothing at all: no entries, no maps.
        let empty = CompactTags::new(None, Some(&BTreeMap::new()));
        assert_eq!(empty.maps(), (None, None));
        assert_eq!(empty.entries().count(), 0);
    }

    /// OADP's non-admin controller's names, as its `GenerateNacObjectUUID` cuts them (read from its source).
    #[test]
    fn nacuuids_oadps_controller_made_are_recognised() {
        // Short: the same as nac's.
        assert_eq!(
            oadp_nacuuid_with("team-a", "nightly", U),
            nacuuid_with("team-a", "nightly", U)
        );
        // A namespace of 26 characters and more: cut to 25, the name dropped (nac keeps 26).
        let ns = "n".repeat(40);
        let oadp = oadp_nacuuid_with(&ns, "backup", U);
        assert_eq!(oadp, format!("{}-{U}", "n".repeat(25)));
        assert_ne!(oadp, nacuuid_with(&ns, "backup", U));
        let ns26 = "m".repeat(26);
        assert_eq!(oadp_nacuuid_with(&ns26, "b", U), format!("{}-{U}", "m".repeat(25)));
        // A cut that ends in a hyphen keeps it (nac drops it).
        let cut = oadp_nacuuid_with("team-a", "nightly-backup-of-everything", U);
        assert_eq!(cut, format!("team-a-nightly-backup-of-e-{U}"));
        assert_eq!(cut, nacuuid_with("team-a", "nightly-backup-of-everything", U));
        let cut_at_hyphen = oadp_nacuuid_with("team-abcdefghijklmn", "abcde-fgh", U);
        assert_eq!(cut_at_hyphen, format!("team-abcdefghijklmn-abcde--{U}"));
        assert_ne!(cut_at_hyphen, nacuuid_with("team-abcdefghijklmn", "abcde-fgh", U));
        for (ns, name) in [
            (ns.as_str(), "backup"),
            (ns26.as_str(), "b"),
            ("team-abcdefghijklmn", "abcde-fgh"),
            ("team-a", "nightly"),
        ] {
            let oadp = oadp_nacuuid_with(ns, name, U);
            assert!(oadp.len() <= MAX_NAME_LEN, "{oadp}");
            assert!(is_nacuuid_for(&oadp, ns, name), "{oadp}");
            assert!(is_nacuuid_in(&oadp, ns), "{oadp}");
            assert!(!is_nacuuid_for(&oadp, "team-b", name), "{oadp}");
            assert!(!is_nacuuid_in(&oadp, "team-b"), "{oadp}");
        }
    }

    #[test]
    fn a_nacuuid_is_recognised_as_of_its_namespace() {
        let long = "a".repeat(40);
        for (ns, name) in [("team-a", "own"), (long.as_str(), "own"), ("team-a", long.as_str())] {
            let id = generate_nacuuid(ns, name);
            assert!(is_nacuuid_in(&id, ns), "{id}");
            assert!(!is_nacuuid_in(&id, "team-b"), "{id}");
        }
        assert!(!is_nacuuid_in("default", "team-a"));
        assert!(!is_nacuuid_in("team-a-archive", "team-a"));
    }
    use proptest::prelude::*;

    #[test]
    fn object_names() {
        for ok in ["default", "team-a.bsl", "a1"] {
            assert!(is_object_name(ok), "{ok}");
        }
        for bad in ["", "Default", "-a", "a-", "a..b", "a_b", &"x".repeat(254)] {
            assert!(!is_object_name(bad), "{bad}");
        }
    }

    const U: &str = "0d0b7b2c-ee76-412d-a867-2c23b8aa51ab";

    #[test]
    fn short_names_are_kept_whole() {
        assert_eq!(nacuuid_with("team-a", "nightly", U), format!("team-a-nightly-{U}"));
    }

    #[test]
    fn long_name_is_trimmed_first() {
        // As in the design's sample: namespace kept, name cut to fit 63 characters.
        let v = nacuuid_with("mongo-persistent", "anotherteambackupwithalongname", U);
        assert_eq!(v, format!("mongo-persistent-anotherte-{U}"));
        assert_eq!(v.len(), 63);
    }

    #[test]
    fn namespace_is_trimmed_when_name_is_gone() {
        let ns = "n".repeat(40);
        let v = nacuuid_with(&ns, "backup", U);
        assert_eq!(v.len(), 63);
        assert!(v.starts_with(&"n".repeat(26)));
        assert!(!v.contains("backup"));
    }

    #[test]
    fn generated_values_are_unique_and_recognised() {
        let a = generate_nacuuid("ns", "b");
        let b = generate_nacuuid("ns", "b");
        assert_ne!(a, b);
        assert!(is_nacuuid_for(&a, "ns", "b"));
        assert!(!is_nacuuid_for(&a, "other", "b"));
        assert!(!is_nacuuid_for("ns-b-not-a-uuid", "ns", "b"));
    }

    #[test]
    fn long_names_are_labelled_as_velero_labels_them() {
        assert_eq!(velero_label_value("short"), "short");
        let long = format!("{}-20261125143149", "a".repeat(60));
        let v = velero_label_value(&long);
        assert_eq!(v.len(), MAX_NAME_LEN);
        assert!(v.starts_with(&"a".repeat(57)));
        // The first six hex digits of the name's SHA-256.
        use sha2::Digest;
        let sha = sha2::Sha256::digest(long.as_bytes());
        assert_eq!(&v[57..], format!("{:02x}{:02x}{:02x}", sha[0], sha[1], sha[2]));
        assert_ne!(velero_label_value(&format!("{}-20261125143150", "a".repeat(60))), v);
    }

    #[test]
    fn run_identities_are_checked_by_shape() {
        let s = nacuuid_with("team-a", "nightly", U);
        let id = format!("{s}-20261125010000");
        // OADP's naming: the NonAdminBackup is named as the Velero Backup.
        assert!(is_run_backup_of(&id, "team-a", &id));
        assert!(!is_run_backup_of(&id, "team-b", &id));
        assert!(!is_run_backup_of(&s, "team-a", &s));
        // nac's earlier naming.
        assert!(is_run_backup_of(&id, "team-a", "nightly-20261125010000"));
        assert_eq!(legacy_run_name("nightly", "20261125010000"), "nightly-20261125010000");
        // Another namespace, another schedule, another run, or no run at all.
        assert!(!is_run_backup_of(&id, "team-b", "nightly-20261125010000"));
        assert!(!is_run_backup_of(&id, "team-a", "weekly-20261125010000"));
        assert!(!is_run_backup_of(&id, "team-a", "nightly-20261125020000"));
        assert!(!is_run_backup_of(&s, "team-a", "nightly"));
        assert!(!is_run_backup_of(
            &format!("{s}-2026112501000x"),
            "team-a",
            "nightly-2026112501000x"
        ));
    }

    proptest! {
        #[test]
        fn always_a_valid_label_value(ns in "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", name in "[a-z0-9]([a-z0-9.-]{0,200}[a-z0-9])?") {
            let v = generate_nacuuid(&ns, &name);
            prop_assert!(v.len() <= MAX_NAME_LEN);
            prop_assert!(v.starts_with(&ns[..1]));
            prop_assert!(v.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'));
            prop_assert!(is_nacuuid_for(&v, &ns, &name));
        }
    }
}
