//! NonAdminSchedule: a namespace user's backup schedule. nac makes one Velero Schedule for it; each run Velero
//! makes appears in the namespace as a NonAdminBackup.

use crate::velero::{BackupSpec, ScheduleStatus};
use macro_rules_attribute::apply;

#[apply(crate::wire::tenant_kind!)]
#[kube(kind = "NonAdminSchedule", shortname = "nas", status = "NonAdminScheduleStatus")]
#[kube(doc = "A namespace user's schedule of Velero backups of their own namespace")]
#[kube(printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#)]
#[kube(printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused"}"#)]
#[kube(printcolumn = r#"{"name":"Last backup","type":"date","jsonPath":".status.lastBackup"}"#)]
#[kube(printcolumn = r#"{"name":"Next run","type":"string","jsonPath":".status.nextRun"}"#)]
#[kube(printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#)]
#[kube(printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#)]
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
}

#[apply(crate::wire::tenant_struct!)]
pub struct NonAdminScheduleTemplate {
    /// The Velero BackupSpec of each run; the admin policy decides what may be set, as for a NonAdminBackup.
    pub backup_spec: BackupSpec,
}

#[apply(crate::wire::tenant_status!)]
pub struct NonAdminScheduleStatus {
    pub velero_schedule: Option<VeleroScheduleRef>,
    /// When the next backup runs (absent while paused).
    pub next_run: Option<String>,
    /// When the last backup was started.
    pub last_backup: Option<String>,
    /// When a run due at once was last skipped (`spec.skipImmediately`).
    pub last_skipped: Option<String>,
    /// The newest backups of this schedule, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_backups: Vec<RecentBackup>,
}

/// One backup a schedule made.
#[apply(crate::wire::tenant_struct!)]
pub struct RecentBackup {
    /// The NonAdminBackup standing for it in this namespace.
    pub name: String,
    pub velero_backup_name: String,
    pub phase: Option<String>,
    pub start_timestamp: Option<String>,
    pub completion_timestamp: Option<String>,
    pub expiration: Option<String>,
}

/// The Velero Schedule behind a NonAdminSchedule.
pub type VeleroScheduleRef = super::VeleroRef<ScheduleStatus>;
