//! Status planning: from the current status and what the reconciler observed, the status the object should have.
//!
//! Pure functions of (old status, observation, now). The reconciler writes the result only when it differs from
//! what is stored, so a settled object costs no writes; on a write conflict it re-reads the object and plans again
//! from the fresh status.

use super::conditions::{advance_phase, find, set_condition};
use super::counts::PhaseTally;
use crate::api::condition::*;
use crate::api::{
    DataMoverDataUploads, FileSystemPodVolumeBackups, NonAdminBackupStatus, NonAdminPhase, NonAdminRestoreStatus,
    QueueInfo, VeleroBackupRef, VeleroDeleteBackupRequestRef, VeleroRestoreRef,
};
use crate::velero::{BackupSpec, BackupStatus, DeleteBackupRequestStatus, RestoreStatus};
use k8s_openapi::jiff::Timestamp;

pub const BACKUP_ACCEPTED_MESSAGE: &str = "backup accepted";
pub const BACKUP_SCHEDULED_MESSAGE: &str = "Created Velero Backup object";
pub const RESTORE_ACCEPTED_MESSAGE: &str = "restore accepted";
pub const RESTORE_SCHEDULED_MESSAGE: &str = "Created Velero Restore object";
/// Deleting message of the `spec.deleteBackup: true` path.
pub const BACKUP_DELETE_REQUESTED_MESSAGE: &str = "backup accepted for deletion";
/// Deleting message of a plain `kubectl delete` of a NonAdminBackup.
pub const BACKUP_DIRECT_DELETE_MESSAGE: &str = "permanent backup deletion requires setting spec.deleteBackup to true";
pub const RESTORE_DELETE_MESSAGE: &str = "restore accepted for deletion";

/// A Velero Backup as the NonAdminBackup status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackupView {
    pub nacuuid: String,
    pub name: String,
    pub namespace: String,
    pub spec: Option<BackupSpec>,
    pub status: Option<BackupStatus>,
    pub queue_position: i64,
    pub data_uploads: PhaseTally,
    pub pod_volume_backups: PhaseTally,
}

/// A DeleteBackupRequest as the NonAdminBackup status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteRequestView {
    pub nacuuid: String,
    pub name: String,
    pub namespace: String,
    pub status: Option<DeleteBackupRequestStatus>,
}

/// A Velero Restore as the NonAdminRestore status reflects it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestoreView {
    pub nacuuid: String,
    pub name: String,
    pub namespace: String,
    pub status: Option<RestoreStatus>,
    pub queue_position: i64,
}

fn count(t: &PhaseTally, phase: &str) -> i64 {
    t.get(phase).copied().unwrap_or(0)
}

/// DataUpload counts by phase, as OADP's controller reports them.
pub fn data_uploads(t: &PhaseTally) -> DataMoverDataUploads {
    DataMoverDataUploads {
        total: t.values().sum(),
        new: count(t, "New"),
        accepted: count(t, "Accepted"),
        prepared: count(t, "Prepared"),
        in_progress: count(t, "InProgress"),
        canceling: count(t, "Canceling"),
        canceled: count(t, "Canceled"),
        failed: count(t, "Failed"),
        completed: count(t, "Completed"),
    }
}

/// PodVolumeBackup counts by phase, as OADP's controller reports them.
pub fn pod_volume_backups(t: &PhaseTally) -> FileSystemPodVolumeBackups {
    FileSystemPodVolumeBackups {
        total: t.values().sum(),
        new: count(t, "New"),
        in_progress: count(t, "InProgress"),
        failed: count(t, "Failed"),
        completed: count(t, "Completed"),
    }
}

// ---- NonAdminBackup ----

/// No valid policy to validate against yet: only the first-sight phase.
pub fn nab_first_sight(old: Option<&NonAdminBackupStatus>) -> NonAdminBackupStatus {
    let mut s = old.cloned().unwrap_or_default();
    if s.phase.is_none() {
        s.phase = Some(NonAdminPhase::New);
    }
    s
}

/// The spec breaks the policy: BackingOff until the user changes it.
pub fn nab_rejected(old: Option<&NonAdminBackupStatus>, message: &str, now: Timestamp) -> NonAdminBackupStatus {
    let mut s = nab_first_sight(old);
    advance_phase(&mut s.phase, NonAdminPhase::BackingOff);
    set_condition(&mut s.conditions, ACCEPTED, false, INVALID_BACKUP_SPEC, message, now);
    s
}

/// The spec is valid but the Velero Backup could not be created yet (the reconcile failed and is retried).
pub fn nab_validated(old: Option<&NonAdminBackupStatus>, now: Timestamp) -> NonAdminBackupStatus {
    let mut s = nab_first_sight(old);
    set_condition(
        &mut s.conditions,
        ACCEPTED,
        true,
        BACKUP_ACCEPTED,
        BACKUP_ACCEPTED_MESSAGE,
        now,
    );
    s
}

/// The spec is valid and has a nacuuid, the Velero Backup is not created yet (the nacuuid is persisted first).
pub fn nab_accepted(
    old: Option<&NonAdminBackupStatus>,
    nacuuid: &str,
    velero_namespace: &str,
    now: Timestamp,
) -> NonAdminBackupStatus {
    let mut s = nab_first_sight(old);
    set_condition(
        &mut s.conditions,
        ACCEPTED,
        true,
        BACKUP_ACCEPTED,
        BACKUP_ACCEPTED_MESSAGE,
        now,
    );
    let r = s.velero_backup.get_or_insert_with(VeleroBackupRef::default);
    r.nacuuid = Some(nacuuid.to_string());
    r.name.get_or_insert_with(|| nacuuid.to_string());
    r.namespace = Some(velero_namespace.to_string());
    s
}

/// The Velero Backup exists: phase Created, Queued, and a mirror of the Velero Backup.
pub fn nab_created(old: Option<&NonAdminBackupStatus>, vb: &BackupView, now: Timestamp) -> NonAdminBackupStatus {
    let mut s = nab_first_sight(old);
    advance_phase(&mut s.phase, NonAdminPhase::Created);
    set_condition(
        &mut s.conditions,
        ACCEPTED,
        true,
        BACKUP_ACCEPTED,
        BACKUP_ACCEPTED_MESSAGE,
        now,
    );
    set_condition(
        &mut s.conditions,
        QUEUED,
        true,
        BACKUP_SCHEDULED,
        BACKUP_SCHEDULED_MESSAGE,
        now,
    );
    s.velero_backup = Some(VeleroBackupRef {
        nacuuid: Some(vb.nacuuid.clone()),
        name: Some(vb.name.clone()),
        namespace: Some(vb.namespace.clone()),
        spec: vb.spec.clone(),
        status: vb.status.clone(),
    });
    s.queue_info = Some(QueueInfo {
        estimated_queue_position: vb.queue_position,
    });
    s.data_mover_data_uploads = Some(data_uploads(&vb.data_uploads));
    s.file_system_pod_volume_backups = Some(pod_volume_backups(&vb.pod_volume_backups));
    s
}

/// The Velero Backup nac created is gone, deleted outside nac. Reported, never re-created.
pub fn nab_velero_backup_missing(
    old: Option<&NonAdminBackupStatus>,
    velero_namespace: &str,
    name: &str,
    now: Timestamp,
) -> NonAdminBackupStatus {
    let mut s = nab_first_sight(old);
    let message = format!(
        "Velero Backup {velero_namespace}/{name} was not found: it was deleted outside nac. Create a new \
         NonAdminBackup to back up again"
    );
    set_condition(&mut s.conditions, QUEUED, false, VELERO_BACKUP_NOT_FOUND, &message, now);
    s.queue_info = Some(QueueInfo {
        estimated_queue_position: 0,
    });
    s
}

/// Being deleted (either path); mirrors the DeleteBackupRequest when there is one.
pub fn nab_deleting(
    old: Option<&NonAdminBackupStatus>,
    message: &str,
    request: Option<&DeleteRequestView>,
    now: Timestamp,
) -> NonAdminBackupStatus {
    let mut s = nab_first_sight(old);
    advance_phase(&mut s.phase, NonAdminPhase::Deleting);
    set_condition(&mut s.conditions, DELETING, true, DELETION_PENDING, message, now);
    if let Some(r) = request {
        s.velero_delete_backup_request = Some(VeleroDeleteBackupRequestRef {
            nacuuid: Some(r.nacuuid.clone()),
            name: Some(r.name.clone()),
            namespace: Some(r.namespace.clone()),
            status: r.status.clone(),
        });
    }
    s
}

/// The Deleting message for the `deleteBackup` path, with Velero's errors once it reports some.
pub fn delete_request_message(request: Option<&DeleteRequestView>) -> String {
    let errors = request
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.errors.as_ref())
        .filter(|e| !e.is_empty());
    match errors {
        Some(e) => format!(
            "{BACKUP_DELETE_REQUESTED_MESSAGE}; Velero reported errors deleting it: {}",
            e.join("; ")
        ),
        None => BACKUP_DELETE_REQUESTED_MESSAGE.to_string(),
    }
}

// ---- NonAdminRestore ----

pub fn nar_first_sight(old: Option<&NonAdminRestoreStatus>) -> NonAdminRestoreStatus {
    let mut s = old.cloned().unwrap_or_default();
    if s.phase.is_none() {
        s.phase = Some(NonAdminPhase::New);
    }
    s
}

pub fn nar_rejected(old: Option<&NonAdminRestoreStatus>, message: &str, now: Timestamp) -> NonAdminRestoreStatus {
    let mut s = nar_first_sight(old);
    advance_phase(&mut s.phase, NonAdminPhase::BackingOff);
    set_condition(&mut s.conditions, ACCEPTED, false, INVALID_RESTORE_SPEC, message, now);
    s
}

pub fn nar_validated(old: Option<&NonAdminRestoreStatus>, now: Timestamp) -> NonAdminRestoreStatus {
    let mut s = nar_first_sight(old);
    set_condition(
        &mut s.conditions,
        ACCEPTED,
        true,
        RESTORE_ACCEPTED,
        RESTORE_ACCEPTED_MESSAGE,
        now,
    );
    s
}

pub fn nar_accepted(
    old: Option<&NonAdminRestoreStatus>,
    nacuuid: &str,
    velero_namespace: &str,
    now: Timestamp,
) -> NonAdminRestoreStatus {
    let mut s = nar_first_sight(old);
    set_condition(
        &mut s.conditions,
        ACCEPTED,
        true,
        RESTORE_ACCEPTED,
        RESTORE_ACCEPTED_MESSAGE,
        now,
    );
    let r = s.velero_restore.get_or_insert_with(VeleroRestoreRef::default);
    r.nacuuid = Some(nacuuid.to_string());
    r.name.get_or_insert_with(|| nacuuid.to_string());
    r.namespace = Some(velero_namespace.to_string());
    s
}

pub fn nar_created(old: Option<&NonAdminRestoreStatus>, vr: &RestoreView, now: Timestamp) -> NonAdminRestoreStatus {
    let mut s = nar_first_sight(old);
    advance_phase(&mut s.phase, NonAdminPhase::Created);
    set_condition(
        &mut s.conditions,
        ACCEPTED,
        true,
        RESTORE_ACCEPTED,
        RESTORE_ACCEPTED_MESSAGE,
        now,
    );
    set_condition(
        &mut s.conditions,
        QUEUED,
        true,
        RESTORE_SCHEDULED,
        RESTORE_SCHEDULED_MESSAGE,
        now,
    );
    s.velero_restore = Some(VeleroRestoreRef {
        nacuuid: Some(vr.nacuuid.clone()),
        name: Some(vr.name.clone()),
        namespace: Some(vr.namespace.clone()),
        status: vr.status.clone(),
    });
    s.queue_info = Some(QueueInfo {
        estimated_queue_position: vr.queue_position,
    });
    s
}

pub fn nar_velero_restore_missing(
    old: Option<&NonAdminRestoreStatus>,
    velero_namespace: &str,
    name: &str,
    now: Timestamp,
) -> NonAdminRestoreStatus {
    let mut s = nar_first_sight(old);
    let message = format!(
        "Velero Restore {velero_namespace}/{name} was not found: it was deleted outside nac. Create a new \
         NonAdminRestore to restore again"
    );
    set_condition(
        &mut s.conditions,
        QUEUED,
        false,
        VELERO_RESTORE_NOT_FOUND,
        &message,
        now,
    );
    s.queue_info = Some(QueueInfo {
        estimated_queue_position: 0,
    });
    s
}

pub fn nar_deleting(old: Option<&NonAdminRestoreStatus>, message: &str, now: Timestamp) -> NonAdminRestoreStatus {
    let mut s = nar_first_sight(old);
    advance_phase(&mut s.phase, NonAdminPhase::Deleting);
    set_condition(&mut s.conditions, DELETING, true, DELETION_PENDING, message, now);
    s
}

/// The Deleting message while Velero's own finalizer holds the Velero Restore longer than expected.
pub fn restore_finalizer_stalled_message(namespace: &str, name: &str, finalizers: &[String], since: &str) -> String {
    format!(
        "{RESTORE_DELETE_MESSAGE}; Velero Restore {namespace}/{name} is marked for deletion since {since} but \
         Velero has not removed its finalizer ({}). Is Velero running? The NonAdminRestore is deleted as soon as \
         the Velero Restore is gone",
        finalizers.join(", ")
    )
}

// ---- Events ----

/// A Kubernetes Event to publish on the object after a status transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

fn note(warning: bool, reason: &str, message: impl Into<String>) -> Note {
    Note {
        warning,
        reason: reason.to_string(),
        message: message.into(),
    }
}

/// What an event-worthy summary of either status looks like.
struct Summary<'a> {
    phase: Option<NonAdminPhase>,
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    velero_phase: Option<&'a str>,
    failure: Option<String>,
    velero_name: Option<String>,
    /// Velero's counts of the finished run: a "Completed" with warnings can mean skipped data (e.g. pod volumes
    /// that file-system backup could not reach), which the user must hear about.
    errors: i64,
    warnings: i64,
}

fn cond<'a>(s: &'a Summary, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    find(s.conditions, t).map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// `kind` is "Backup" or "Restore".
fn notes(kind: &str, old: &Summary, new: &Summary) -> Vec<Note> {
    let mut out = Vec::new();
    let created = |s: &Summary| s.phase == Some(NonAdminPhase::Created);
    let deleting = |s: &Summary| s.phase == Some(NonAdminPhase::Deleting);

    if let Some(("False", reason, message)) = cond(new, ACCEPTED) {
        if cond(old, ACCEPTED).map(|c| (c.0, c.2)) != Some(("False", message)) {
            out.push(note(true, reason, message));
        }
    }
    if created(new) && !created(old) {
        let target = new.velero_name.clone().unwrap_or_default();
        out.push(note(
            false,
            &format!("Velero{kind}Created"),
            format!("{} accepted; created Velero {kind} {target}", kind),
        ));
    } else if matches!(cond(new, ACCEPTED), Some(("True", ..))) && !matches!(cond(old, ACCEPTED), Some(("True", ..))) {
        let reason = cond(new, ACCEPTED).map(|c| c.1).unwrap_or_default();
        out.push(note(false, reason, format!("{} accepted", kind.to_lowercase())));
    }
    if let Some(("False", reason, message)) = cond(new, QUEUED) {
        if !matches!(cond(old, QUEUED), Some(("False", ..))) {
            out.push(note(true, reason, message));
        }
    }
    if new.velero_phase != old.velero_phase {
        let failure = new.failure.clone().map(|f| format!(": {f}")).unwrap_or_default();
        let log = format!(
            "Velero's {} log lists them (velero {} logs {})",
            kind.to_lowercase(),
            kind.to_lowercase(),
            new.velero_name
                .as_deref()
                .and_then(|n| n.split_once('/'))
                .map(|n| n.1)
                .unwrap_or_default()
        );
        match new.velero_phase {
            Some("Completed") if new.warnings > 0 => out.push(note(
                true,
                &format!("{kind}CompletedWithWarnings"),
                format!("Velero {kind} completed with {} warning(s); {log}", new.warnings),
            )),
            Some("Completed") => out.push(note(
                false,
                &format!("{kind}Completed"),
                format!("Velero {kind} completed"),
            )),
            Some(p @ ("Failed" | "PartiallyFailed" | "FailedValidation")) => {
                let counts = if new.errors + new.warnings > 0 {
                    format!(" with {} error(s) and {} warning(s); {log}", new.errors, new.warnings)
                } else {
                    String::new()
                };
                out.push(note(
                    true,
                    &format!("{kind}{p}"),
                    format!("Velero {kind} {p}{failure}{counts}"),
                ))
            }
            _ => {}
        }
    }
    if deleting(new) {
        let message = cond(new, DELETING).map(|c| c.2).unwrap_or_default();
        if !deleting(old) {
            out.push(note(false, &format!("{kind}Deleting"), message));
        } else if cond(old, DELETING).map(|c| c.2) != Some(message) {
            out.push(note(true, "DeletionDelayed", message));
        }
    }
    out
}

fn nab_summary(s: Option<&NonAdminBackupStatus>) -> Summary<'_> {
    let vb = s.and_then(|s| s.velero_backup.as_ref());
    let vs = vb.and_then(|v| v.status.as_ref());
    Summary {
        phase: s.and_then(|s| s.phase),
        conditions: s.map(|s| s.conditions.as_slice()).unwrap_or_default(),
        velero_phase: vs.and_then(|v| v.phase.as_deref()),
        failure: vs.and_then(|v| {
            v.failure_reason
                .clone()
                .or_else(|| v.validation_errors.as_ref().map(|e| e.join("; ")))
        }),
        velero_name: vb.and_then(|v| Some(format!("{}/{}", v.namespace.as_deref()?, v.name.as_deref()?))),
        errors: vs.and_then(|v| v.errors).unwrap_or(0),
        warnings: vs.and_then(|v| v.warnings).unwrap_or(0),
    }
}

fn nar_summary(s: Option<&NonAdminRestoreStatus>) -> Summary<'_> {
    let vr = s.and_then(|s| s.velero_restore.as_ref());
    let vs = vr.and_then(|v| v.status.as_ref());
    Summary {
        phase: s.and_then(|s| s.phase),
        conditions: s.map(|s| s.conditions.as_slice()).unwrap_or_default(),
        velero_phase: vs.and_then(|v| v.phase.as_deref()),
        failure: vs.and_then(|v| {
            v.failure_reason.clone().or_else(|| {
                v.extra
                    .get("validationErrors")
                    .and_then(|e| e.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join("; "))
            })
        }),
        velero_name: vr.and_then(|v| Some(format!("{}/{}", v.namespace.as_deref()?, v.name.as_deref()?))),
        errors: vs.and_then(|v| v.errors).unwrap_or(0),
        warnings: vs.and_then(|v| v.warnings).unwrap_or(0),
    }
}

/// Events for a NonAdminBackup status transition.
pub fn nab_notes(old: Option<&NonAdminBackupStatus>, new: &NonAdminBackupStatus) -> Vec<Note> {
    notes("Backup", &nab_summary(old), &nab_summary(Some(new)))
}

/// Events for a NonAdminRestore status transition.
pub fn nar_notes(old: Option<&NonAdminRestoreStatus>, new: &NonAdminRestoreStatus) -> Vec<Note> {
    notes("Restore", &nar_summary(old), &nar_summary(Some(new)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use NonAdminPhase::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn view(phase: Option<&str>, position: i64) -> BackupView {
        BackupView {
            nacuuid: "team-a-nightly-u".into(),
            name: "team-a-nightly-u".into(),
            namespace: "openshift-adp".into(),
            spec: Some(BackupSpec::default()),
            status: phase.map(|p| BackupStatus {
                phase: Some(p.into()),
                ..Default::default()
            }),
            queue_position: position,
            ..Default::default()
        }
    }

    fn reasons(n: &[Note]) -> Vec<&str> {
        n.iter().map(|n| n.reason.as_str()).collect()
    }

    #[test]
    fn an_invalid_spec_backs_off_with_the_reason() {
        let s = nab_rejected(None, "NonAdminBackup spec.backupSpec.ttl is restricted", t(0));
        assert_eq!(s.phase, Some(BackingOff));
        let c = find(&s.conditions, ACCEPTED).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", INVALID_BACKUP_SPEC));
        assert!(c.message.contains("ttl"));
        let n = nab_notes(None, &s);
        assert_eq!(reasons(&n), vec![INVALID_BACKUP_SPEC]);
        assert!(n[0].warning);
    }

    #[test]
    fn re_rejecting_with_the_same_message_is_not_a_change() {
        let s = nab_rejected(None, "bad", t(0));
        assert_eq!(nab_rejected(Some(&s), "bad", t(99)), s);
        assert!(nab_notes(Some(&s), &s).is_empty());
    }

    #[test]
    fn the_happy_path_goes_straight_to_created_in_one_status() {
        let s = nab_created(None, &view(None, 3), t(0));
        assert_eq!(s.phase, Some(Created));
        let a = find(&s.conditions, ACCEPTED).unwrap();
        assert_eq!(
            (a.status.as_str(), a.reason.as_str(), a.message.as_str()),
            ("True", BACKUP_ACCEPTED, "backup accepted")
        );
        let q = find(&s.conditions, QUEUED).unwrap();
        assert_eq!(
            (q.status.as_str(), q.reason.as_str(), q.message.as_str()),
            ("True", BACKUP_SCHEDULED, "Created Velero Backup object")
        );
        let vb = s.velero_backup.as_ref().unwrap();
        assert_eq!(vb.nacuuid.as_deref(), Some("team-a-nightly-u"));
        assert_eq!(vb.namespace.as_deref(), Some("openshift-adp"));
        assert_eq!(s.queue_info.as_ref().unwrap().estimated_queue_position, 3);
        assert_eq!(s.data_mover_data_uploads, Some(DataMoverDataUploads::default()));
        let n = nab_notes(None, &s);
        assert_eq!(
            reasons(&n),
            vec!["VeleroBackupCreated"],
            "one event for accepted + created"
        );
    }

    #[test]
    fn mirroring_an_unchanged_velero_backup_is_not_a_change() {
        let s = nab_created(None, &view(Some("InProgress"), 1), t(0));
        assert_eq!(nab_created(Some(&s), &view(Some("InProgress"), 1), t(500)), s);
    }

    #[test]
    fn velero_progress_is_mirrored_without_touching_condition_times() {
        let s = nab_created(None, &view(None, 2), t(0));
        let mut done = view(Some("Completed"), 0);
        done.data_uploads = [("Completed".to_string(), 2), ("Failed".to_string(), 1)].into();
        let s2 = nab_created(Some(&s), &done, t(100));
        assert_eq!(s2.conditions, s.conditions);
        assert_eq!(
            s2.velero_backup
                .as_ref()
                .unwrap()
                .status
                .as_ref()
                .unwrap()
                .phase
                .as_deref(),
            Some("Completed")
        );
        assert_eq!(s2.queue_info.as_ref().unwrap().estimated_queue_position, 0);
        let du = s2.data_mover_data_uploads.as_ref().unwrap();
        assert_eq!((du.total, du.completed, du.failed), (3, 2, 1));
        assert_eq!(reasons(&nab_notes(Some(&s), &s2)), vec!["BackupCompleted"]);
    }

    #[test]
    fn a_failed_velero_backup_is_a_warning_with_the_reason() {
        let s = nab_created(None, &view(Some("InProgress"), 1), t(0));
        let mut failed = view(Some("Failed"), 0);
        failed.status.as_mut().unwrap().failure_reason = Some("no credentials".into());
        let s2 = nab_created(Some(&s), &failed, t(1));
        let n = nab_notes(Some(&s), &s2);
        assert_eq!(reasons(&n), vec!["BackupFailed"]);
        assert!(n[0].warning && n[0].message.contains("no credentials"));
    }

    #[test]
    fn a_completed_backup_with_warnings_is_a_warning_naming_the_count_and_the_log() {
        let s = nab_created(None, &view(Some("InProgress"), 1), t(0));
        let mut done = view(Some("Completed"), 0);
        done.status.as_mut().unwrap().warnings = Some(1);
        let s2 = nab_created(Some(&s), &done, t(1));
        let n = nab_notes(Some(&s), &s2);
        assert_eq!(reasons(&n), vec!["BackupCompletedWithWarnings"]);
        assert!(n[0].warning);
        assert!(
            n[0].message.contains("1 warning(s)") && n[0].message.contains("velero backup logs team-a-nightly-u"),
            "{}",
            n[0].message
        );
    }

    #[test]
    fn a_partially_failed_backup_names_its_error_and_warning_counts() {
        let s = nab_created(None, &view(Some("InProgress"), 1), t(0));
        let mut done = view(Some("PartiallyFailed"), 0);
        let st = done.status.as_mut().unwrap();
        (st.errors, st.warnings) = (Some(2), Some(3));
        let s2 = nab_created(Some(&s), &done, t(1));
        let n = nab_notes(Some(&s), &s2);
        assert_eq!(reasons(&n), vec!["BackupPartiallyFailed"]);
        assert!(n[0].message.contains("2 error(s) and 3 warning(s)"), "{}", n[0].message);
    }

    #[test]
    fn a_fixed_spec_moves_from_backing_off_to_created() {
        let s = nab_rejected(None, "bad", t(0));
        let s2 = nab_created(Some(&s), &view(None, 1), t(10));
        assert_eq!(s2.phase, Some(Created));
        let a = find(&s2.conditions, ACCEPTED).unwrap();
        assert_eq!(a.status, "True");
        assert_eq!(a.last_transition_time, Time(t(10)));
    }

    #[test]
    fn a_created_backup_never_falls_back_to_backing_off() {
        let s = nab_created(None, &view(None, 1), t(0));
        assert_eq!(nab_rejected(Some(&s), "bad", t(1)).phase, Some(Created));
    }

    #[test]
    fn accepting_records_the_nacuuid_before_anything_is_created() {
        let s = nab_accepted(None, "ns-n-u", "openshift-adp", t(0));
        assert_eq!(s.phase, Some(New));
        let vb = s.velero_backup.as_ref().unwrap();
        assert_eq!(vb.nacuuid.as_deref(), Some("ns-n-u"));
        assert_eq!(vb.name.as_deref(), Some("ns-n-u"));
        assert_eq!(reasons(&nab_notes(None, &s)), vec![BACKUP_ACCEPTED]);
    }

    #[test]
    fn a_valid_backup_that_could_not_be_created_yet_is_new_and_accepted() {
        let s = nab_validated(None, t(0));
        assert_eq!(s.phase, Some(New));
        assert!(super::super::conditions::is_true(&s.conditions, ACCEPTED));
        assert!(s.velero_backup.is_none());
        let r = nar_validated(None, t(0));
        assert_eq!(r.phase, Some(New));
        assert_eq!(find(&r.conditions, ACCEPTED).unwrap().reason, RESTORE_ACCEPTED);
    }

    #[test]
    fn a_vanished_velero_backup_is_reported_and_the_phase_stays() {
        let s = nab_created(None, &view(Some("InProgress"), 1), t(0));
        let s2 = nab_velero_backup_missing(Some(&s), "openshift-adp", "team-a-nightly-u", t(5));
        assert_eq!(s2.phase, Some(Created));
        let q = find(&s2.conditions, QUEUED).unwrap();
        assert_eq!(
            (q.status.as_str(), q.reason.as_str()),
            ("False", VELERO_BACKUP_NOT_FOUND)
        );
        assert!(q.message.contains("openshift-adp/team-a-nightly-u"));
        let n = nab_notes(Some(&s), &s2);
        assert_eq!(reasons(&n), vec![VELERO_BACKUP_NOT_FOUND]);
        // When it comes back (Velero's sync), Queued is true again.
        let s3 = nab_created(Some(&s2), &view(Some("Completed"), 0), t(9));
        assert!(super::super::conditions::is_true(&s3.conditions, QUEUED));
    }

    #[test]
    fn deletion_moves_to_deleting_and_mirrors_the_request() {
        let s = nab_created(None, &view(Some("Completed"), 0), t(0));
        let req = DeleteRequestView {
            nacuuid: "u".into(),
            name: "u".into(),
            namespace: "openshift-adp".into(),
            status: Some(DeleteBackupRequestStatus {
                phase: Some("InProgress".into()),
                ..Default::default()
            }),
        };
        let s2 = nab_deleting(Some(&s), &delete_request_message(Some(&req)), Some(&req), t(1));
        assert_eq!(s2.phase, Some(Deleting));
        let d = find(&s2.conditions, DELETING).unwrap();
        assert_eq!(
            (d.reason.as_str(), d.message.as_str()),
            (DELETION_PENDING, "backup accepted for deletion")
        );
        assert_eq!(
            s2.velero_delete_backup_request
                .as_ref()
                .unwrap()
                .status
                .as_ref()
                .unwrap()
                .phase
                .as_deref(),
            Some("InProgress")
        );
        assert_eq!(reasons(&nab_notes(Some(&s), &s2)), vec!["BackupDeleting"]);
        // Velero's errors land in the message, as a warning.
        let mut failed = req.clone();
        failed.status.as_mut().unwrap().errors = Some(vec!["bucket gone".into()]);
        let s3 = nab_deleting(Some(&s2), &delete_request_message(Some(&failed)), Some(&failed), t(2));
        assert!(find(&s3.conditions, DELETING).unwrap().message.contains("bucket gone"));
        assert_eq!(reasons(&nab_notes(Some(&s2), &s3)), vec!["DeletionDelayed"]);
    }

    #[test]
    fn direct_deletion_explains_how_to_delete_the_data() {
        let s = nab_deleting(None, BACKUP_DIRECT_DELETE_MESSAGE, None, t(0));
        assert!(find(&s.conditions, DELETING)
            .unwrap()
            .message
            .contains("spec.deleteBackup"));
        assert!(s.velero_delete_backup_request.is_none());
    }

    #[test]
    fn first_sight_is_new_and_only_once() {
        let s = nab_first_sight(None);
        assert_eq!(s.phase, Some(New));
        let c = nab_created(None, &view(None, 1), t(0));
        assert_eq!(nab_first_sight(Some(&c)), c);
    }

    #[test]
    fn pod_volume_backup_counts() {
        let t: PhaseTally = [("New".into(), 1), ("InProgress".into(), 2), ("".into(), 1)].into();
        let p = pod_volume_backups(&t);
        assert_eq!((p.total, p.new, p.in_progress, p.completed), (4, 1, 2, 0));
    }

    fn rview(phase: Option<&str>) -> RestoreView {
        RestoreView {
            nacuuid: "r".into(),
            name: "r".into(),
            namespace: "openshift-adp".into(),
            status: phase.map(|p| RestoreStatus {
                phase: Some(p.into()),
                ..Default::default()
            }),
            queue_position: 1,
        }
    }

    #[test]
    fn restores_follow_the_same_model() {
        let r = nar_rejected(None, "NonAdminRestore spec.restoreSpec.backupName is invalid", t(0));
        assert_eq!(r.phase, Some(BackingOff));
        assert_eq!(find(&r.conditions, ACCEPTED).unwrap().reason, INVALID_RESTORE_SPEC);

        let c = nar_created(None, &rview(None), t(0));
        assert_eq!(c.phase, Some(Created));
        assert_eq!(find(&c.conditions, QUEUED).unwrap().reason, RESTORE_SCHEDULED);
        assert_eq!(find(&c.conditions, ACCEPTED).unwrap().reason, RESTORE_ACCEPTED);
        assert_eq!(reasons(&nar_notes(None, &c)), vec!["VeleroRestoreCreated"]);

        let done = nar_created(Some(&c), &rview(Some("Completed")), t(3));
        assert_eq!(reasons(&nar_notes(Some(&c), &done)), vec!["RestoreCompleted"]);

        let gone = nar_velero_restore_missing(Some(&done), "openshift-adp", "r", t(4));
        assert_eq!(find(&gone.conditions, QUEUED).unwrap().reason, VELERO_RESTORE_NOT_FOUND);

        let del = nar_deleting(Some(&done), RESTORE_DELETE_MESSAGE, t(5));
        assert_eq!(del.phase, Some(Deleting));
        let stalled = restore_finalizer_stalled_message(
            "openshift-adp",
            "r",
            &["restores.velero.io/external-resources-finalizer".into()],
            "2024-01-01T00:00:00Z",
        );
        let del2 = nar_deleting(Some(&del), &stalled, t(600));
        assert!(find(&del2.conditions, DELETING)
            .unwrap()
            .message
            .contains("Is Velero running?"));
        assert_eq!(reasons(&nar_notes(Some(&del), &del2)), vec!["DeletionDelayed"]);
    }
}
