//! Velero `Schedule` (velero.io/v1): a cron expression and a backup template; Velero's schedule controller makes
//! a Backup from the template at each run. The CRD has no status subresource: Velero writes status with the object.

use super::BackupSpec;
use macro_rules_attribute::apply;

#[apply(crate::wire::velero_kind!)]
#[kube(kind = "Schedule", status = "ScheduleStatus")]
pub struct ScheduleSpec {
    /// The Backup each run makes. Velero copies the Schedule's labels onto each Backup unless
    /// `template.metadata.labels` is set: nac never sets it.
    pub template: BackupSpec,
    /// Cron expression (robfig/cron `ParseStandard`: five fields or a descriptor such as `@every 1h`).
    pub schedule: String,
    pub use_owner_references_in_backup: Option<bool>,
    #[serde(default)]
    pub paused: bool,
    /// Skip the run that is due at once (on creation or unpause); Velero consumes it and records `lastSkipped`.
    pub skip_immediately: Option<bool>,
}

#[apply(crate::wire::velero_struct!)]
pub struct ScheduleStatus {
    /// New, Enabled or FailedValidation.
    pub phase: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub last_backup: Option<String>,
    #[schemars(with = "Option<crate::wire::Time>")]
    pub last_skipped: Option<String>,
    pub validation_errors: Option<Vec<String>>,
}

/// Label Velero puts on every Backup a Schedule makes, naming the Schedule.
pub const SCHEDULE_NAME_LABEL: &str = "velero.io/schedule-name";

/// The timestamp suffix Velero gives a scheduled Backup's name (`<schedule>-<YYYYMMDDhhmmss>`), when `backup` is
/// named that way after `schedule`.
pub fn run_timestamp<'a>(backup: &'a str, schedule: &str) -> Option<&'a str> {
    let ts = backup.strip_prefix(schedule)?.strip_prefix('-')?;
    (ts.len() == 14 && ts.bytes().all(|b| b.is_ascii_digit())).then_some(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_backup_names_carry_velero_s_timestamp() {
        assert_eq!(run_timestamp("s-1-20261125010000", "s-1"), Some("20261125010000"));
        for bad in [
            "s-1",
            "s-1-",
            "s-1-2026112501000",
            "s-1-2026112501000x",
            "s-2-20261125010000",
            "s-120261125010000",
        ] {
            assert_eq!(run_timestamp(bad, "s-1"), None, "{bad}");
        }
    }
}
