//! NonAdminSchedule: a namespace user's backup schedule, OADP's API (oadp-non-admin's `NonAdminSchedule`). nac makes
//! one Velero Schedule for it; each run Velero makes appears in the namespace as a NonAdminBackup named as the
//! run's Velero Backup is.

use crate::velero::{BackupSpec, ScheduleStatus};
use macro_rules_attribute::apply;
use serde::{Deserialize, Deserializer};

#[apply(crate::wire::tenant_kind!)]
#[kube(kind = "NonAdminSchedule", shortname = "nas", status = "NonAdminScheduleStatus")]
#[kube(doc = "A namespace user's schedule of Velero backups of their own namespace")]
#[kube(printcolumn = r#"{"name":"Request-Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Velero-Phase","type":"string","jsonPath":".status.veleroSchedule.status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Next-Run","type":"date","jsonPath":".status.nextRun"}"#)]
#[kube(printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused"}"#)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
// nac's own columns, shown by `kubectl get -o wide` only: the columns above are OADP's, in OADP's order.
#[kube(printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule","priority":1}"#)]
#[kube(printcolumn = r#"{"name":"Last-Backup","type":"string","jsonPath":".status.lastBackup.name","priority":1}"#)]
#[kube(attr = "cfg_attr(all(), serde(default = \"NonAdminSchedule::without_spec\"))")]
pub struct NonAdminScheduleSpec {
    /// When backups run: a cron expression (five fields, in UTC) or a descriptor such as `@daily` or `@every 6h`.
    pub schedule: String,
    /// Set to true to stop new runs; backups already made stay.
    #[serde(default, skip_serializing_if = "crate::velero::is_false")]
    pub paused: bool,
    /// Skip a run that is due at once, as when an overdue schedule is unpaused: the next run is then the next time
    /// the expression names after the skip. A new schedule is never due at its creation, so there it only records
    /// `status.lastSkipped`. Consumed once: nac removes it after handing it to Velero.
    pub skip_immediately: Option<bool>,
    /// The backup each run makes.
    pub template: NonAdminScheduleTemplate,
    /// True when the object came without a spec (see the [`api`](super) module): never acted on.
    #[serde(skip)]
    #[schemars(skip)]
    pub unset: bool,
}

super::without_spec!(NonAdminSchedule, NonAdminScheduleSpec);

#[apply(crate::wire::tenant_struct!)]
pub struct NonAdminScheduleTemplate {
    /// The Velero BackupSpec of each run; the admin policy decides what may be set, as for a NonAdminBackup.
    pub backup_spec: BackupSpec,
}

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminScheduleStatus {
    pub velero_schedule: Option<VeleroScheduleRef>,
    /// When the next backup runs, as Velero computes it (also while paused: the run that follows the unpause,
    /// unless it is overdue by then).
    #[schemars(with = "Option<crate::wire::Time>")]
    pub next_run: Option<String>,
    /// The newest backup of this schedule (the first of `recentBackups`). Read in nac's earlier form too, the time
    /// the last backup started; always written in this one.
    #[serde(default, deserialize_with = "last_backup")]
    pub last_backup: Option<RecentBackup>,
    /// When a run due at once was last skipped (`spec.skipImmediately`): nac's copy of
    /// `veleroSchedule.status.lastSkipped`.
    #[schemars(with = "Option<crate::wire::Time>")]
    pub last_skipped: Option<String>,
    /// The newest backups of this schedule, newest first (at most five).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_backups: Vec<RecentBackup>,
}

/// One backup a schedule made (OADP's `NonAdminScheduledBackup`).
#[apply(crate::wire::tenant_struct!)]
pub struct RecentBackup {
    /// The NonAdminBackup standing for it in this namespace.
    pub name: String,
    /// The Velero Backup (the same name for the runs nac names; a run named in nac's earlier form differs).
    pub velero_backup_name: String,
    /// Velero's phase of the backup.
    pub phase: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub start_timestamp: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub completion_timestamp: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub expiration: Option<String>,
}

/// `status.lastBackup` in either form: OADP's object, or nac's earlier timestamp (read as a backup known only by
/// its start).
fn last_backup<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RecentBackup>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Object(RecentBackup),
        Time(String),
    }
    Ok(match Option::<Either>::deserialize(d)? {
        Some(Either::Object(b)) => Some(b),
        Some(Either::Time(t)) => Some(RecentBackup {
            start_timestamp: Some(t),
            ..Default::default()
        }),
        None => None,
    })
}

/// The Velero Schedule behind a NonAdminSchedule.
pub type VeleroScheduleRef = super::VeleroRef<ScheduleStatus>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn last_backup_is_read_in_both_forms_and_written_in_oadp_s() {
        let old: NonAdminScheduleStatus =
            serde_json::from_value(json!({"phase": "Created", "lastBackup": "2026-11-25T01:00:00Z"})).unwrap();
        let b = old.last_backup.clone().unwrap();
        assert_eq!(b.start_timestamp.as_deref(), Some("2026-11-25T01:00:00Z"));
        let written = serde_json::to_value(&old).unwrap();
        assert!(written["lastBackup"].is_object(), "{written}");
        let new: NonAdminScheduleStatus = serde_json::from_value(json!({"lastBackup": {
            "name": "u-20261125010000", "veleroBackupName": "u-20261125010000", "phase": "Completed",
            "startTimestamp": "2026-11-25T01:00:00Z"}}))
        .unwrap();
        assert_eq!(new.last_backup.unwrap().name, "u-20261125010000");
        let none: NonAdminScheduleStatus = serde_json::from_value(json!({"lastBackup": null})).unwrap();
        assert_eq!(none.last_backup, None);
        assert!(serde_json::from_value::<NonAdminScheduleStatus>(json!({"lastBackup": 5})).is_err());
    }
}
