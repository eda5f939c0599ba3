//! What happens around finished backups: which files of them tenants may download, and how often nac sweeps
//! for Velero objects whose tenant object is gone.

use super::duration::GoDuration;
use super::{duration_value, problem, PolicyProblem};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Downloads (NonAdminDownloadRequests) of files of backups stored on admin locations. A tenant's own location
/// is always open to its tenant: the bucket is theirs anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AdminDownloads {
    /// None (OADP's behaviour).
    #[default]
    Deny,
    /// All of them.
    Allow,
    /// Those on these Velero BSLs.
    Only(Vec<String>),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Downloads {
    pub admin_locations: AdminDownloads,
}

impl Downloads {
    /// Whether files of backups on the admin location `name` may be downloaded by their tenant.
    pub fn admin_location_open(&self, name: &str) -> bool {
        match &self.admin_locations {
            AdminDownloads::Deny => false,
            AdminDownloads::Allow => true,
            AdminDownloads::Only(names) => names.iter().any(|n| n == name),
        }
    }
}

/// The periodic sweep for orphans; collection is otherwise driven by the tenant objects' delete events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GarbageCollection {
    /// Zero disables the sweep (not the event-driven collection).
    pub period: GoDuration,
}

/// OADP's default sweep period.
pub const DEFAULT_GC_PERIOD: GoDuration = GoDuration(24 * 3600 * 1_000_000_000);

impl Default for GarbageCollection {
    fn default() -> Self {
        GarbageCollection {
            period: DEFAULT_GC_PERIOD,
        }
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDownloads {
    /// `deny`, `allow`, or a list of Velero BSL names.
    admin_locations: Option<Value>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawGarbageCollection {
    period: Option<Value>,
}

pub(super) fn parse_downloads(raw: RawDownloads, problems: &mut Vec<PolicyProblem>) -> Downloads {
    const FIELD: &str = "downloads.adminLocations";
    let admin_locations = match raw.admin_locations {
        None => AdminDownloads::Deny,
        Some(Value::String(s)) if s == "deny" => AdminDownloads::Deny,
        Some(Value::String(s)) if s == "allow" => AdminDownloads::Allow,
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                match item {
                    Value::String(n) if crate::naming::is_object_name(&n) => {
                        if !names.contains(&n) {
                            names.push(n)
                        }
                    }
                    other => problems.push(problem(
                        format!("{FIELD}[{i}]"),
                        format!("{other} is not a BackupStorageLocation name"),
                    )),
                }
            }
            AdminDownloads::Only(names)
        }
        Some(other) => {
            problems.push(problem(
                FIELD,
                format!("{other} is not one of deny, allow or a list of BackupStorageLocation names"),
            ));
            AdminDownloads::Deny
        }
    };
    Downloads { admin_locations }
}

pub(super) fn parse_gc(raw: RawGarbageCollection, problems: &mut Vec<PolicyProblem>) -> GarbageCollection {
    let mut gc = GarbageCollection::default();
    if let Some(d) = duration_value("garbageCollection.period", raw.period, problems) {
        gc.period = d;
    }
    gc
}

#[cfg(test)]
mod tests {
    use crate::policy::{AdminDownloads, Policy, DEFAULT_GC_PERIOD};

    #[test]
    fn downloads_from_admin_locations_are_closed_unless_opened() {
        let p = Policy::parse("").unwrap();
        assert_eq!(p.downloads.admin_locations, AdminDownloads::Deny);
        assert!(!p.downloads.admin_location_open("default"));
        let p = Policy::parse("downloads: {adminLocations: allow}").unwrap();
        assert!(p.downloads.admin_location_open("anything"));
        let p = Policy::parse("downloads: {adminLocations: [default, default]}").unwrap();
        assert_eq!(
            p.downloads.admin_locations,
            AdminDownloads::Only(vec!["default".into()])
        );
        assert!(p.downloads.admin_location_open("default"));
        assert!(!p.downloads.admin_location_open("archive"));
    }

    #[test]
    fn broken_download_and_gc_settings_name_their_field() {
        let e = Policy::parse("downloads: {adminLocations: sometimes}").unwrap_err();
        assert_eq!(e.0[0].field, "downloads.adminLocations");
        let e = Policy::parse("downloads: {adminLocations: [Bad_Name]}").unwrap_err();
        assert_eq!(e.0[0].field, "downloads.adminLocations[0]");
        let e = Policy::parse("garbageCollection: {period: soon}").unwrap_err();
        assert_eq!(e.0[0].field, "garbageCollection.period");
        let e = Policy::parse("garbageCollection: {every: 1h}").unwrap_err();
        assert!(e.to_string().contains("every"), "{e}");
    }

    #[test]
    fn the_sweep_runs_daily_unless_told_otherwise() {
        assert_eq!(Policy::parse("").unwrap().garbage_collection.period, DEFAULT_GC_PERIOD);
        let p = Policy::parse("garbageCollection: {period: 0}").unwrap();
        assert!(p.garbage_collection.period.is_zero());
        let p = Policy::parse("garbageCollection: {period: 1h}").unwrap();
        assert_eq!(p.garbage_collection.period.to_string(), "1h0m0s");
    }
}
