//! Status planning for every tenant kind: from the current status and what the reconciler observed, the status
//! the object should have, and the Events of the transition.
//!
//! Pure functions of (old status, observation, now). The reconciler writes the result only when it differs from
//! what is stored, so a settled object costs no writes; on a write conflict it re-reads the object and plans again
//! from the fresh status. A kind supplies its words ([`Words`]), its status accessors ([`TenantStatus`]) and its
//! mirror of the Velero object ([`Mirrors::mirror`]).

use super::conditions::{advance_phase, find, set_condition};
use super::events::Note;
use super::kind::Kind;
use super::write::HasStatus;
use crate::api::condition::*;
use crate::api::{NonAdminPhase, QueueInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

pub use crate::api::condition::Words;

/// The status fields every tenant kind has, and its Velero object reference.
pub trait TenantStatus: Clone + Default + PartialEq + std::fmt::Debug + Send + Sync {
    fn phase(&self) -> Option<NonAdminPhase>;
    fn phase_mut(&mut self) -> &mut Option<NonAdminPhase>;
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    fn queue_info_mut(&mut self) -> &mut Option<QueueInfo>;
    /// The nacuuid and Velero object name recorded in the status.
    fn recorded(&self) -> (Option<&str>, Option<&str>);
    /// Records the nacuuid (and the Velero object's name and namespace) before the Velero object exists.
    fn record(&mut self, nacuuid: &str, velero_namespace: &str);
    /// What the events are made from.
    fn summary(&self) -> Summary<'_>;
}

/// What the status of every queued kind mirrors of its Velero object, whatever the kind: which object it is and
/// its place in Velero's queue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placed {
    pub nacuuid: String,
    pub name: String,
    pub namespace: String,
    pub queue_position: i64,
}

impl Placed {
    /// The status's reference to the Velero object, carrying `status`.
    pub fn reference<S>(&self, status: Option<S>) -> crate::api::VeleroRef<S> {
        crate::api::VeleroRef {
            nacuuid: Some(self.nacuuid.clone()),
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            status: status.map(Box::new),
        }
    }
}

/// What status planning needs of a queued kind: its words, and how its status mirrors the observations of its
/// Velero object. The queued tier ([`Tenant`](super::tenant::Tenant)) builds on it.
pub trait Mirrors: Kind + HasStatus<Status: TenantStatus> {
    /// Reasons and messages of its conditions and events.
    const WORDS: Words;
    /// What the status mirrors of the Velero object (with its identity and queue position).
    type View: Send + Sync + AsRef<Placed>;

    /// Copies a view into the status (the Velero object reference and the kind's counters).
    fn mirror(status: &mut Self::Status, view: &Self::View);

    /// When to look again though nothing changes: a view that could not read all it needs now.
    fn retry_after(_view: &Self::View) -> Option<std::time::Duration> {
        None
    }
}

/// First sight (and no valid policy to validate against yet): only the phase New.
pub fn first_sight<S: TenantStatus>(old: Option<&S>) -> S {
    let mut s = old.cloned().unwrap_or_default();
    if s.phase().is_none() {
        *s.phase_mut() = Some(NonAdminPhase::New);
    }
    s
}

fn set_accepted<K: Mirrors>(s: &mut K::Status, now: Timestamp) {
    let w = K::WORDS;
    set_condition(
        s.conditions_mut(),
        ACCEPTED,
        true,
        w.accepted_reason,
        w.accepted_message,
        now,
    );
}

/// Queued=False reason of an object waiting for what it depends on (a restore for its backup).
pub const WAITING_FOR_BACKUP: &str = "WaitingForBackup";
/// A condition warning about a Created restore: its backup finished PartiallyFailed (an Event says so once).
pub const BACKUP_PARTIALLY_FAILED: &str = "BackupPartiallyFailed";

/// A condition on a restore that leaves out kinds its requester may not create (an Event says so once).
pub const RESOURCES_LEFT_OUT: &str = "ResourcesLeftOut";
/// Its reason, and the Accepted=False reason of a restore refused for the same (`rights.restore: deny`).
pub const REQUESTER_RIGHTS_EXCEEDED: &str = "RequesterRightsExceeded";
/// A condition on a finished restore: whether Velero restored anything nac did not check and allow (True: an
/// Event for the admin says so once, and nac removes what it can); set once, when nac has compared Velero's
/// restore resource list with what it allowed.
pub const RESOURCES_OUTSIDE_RIGHTS: &str = "ResourcesOutsideRights";
/// Its reason when Velero restored items of kinds nac did not allow.
pub const UNCHECKED_RESOURCES_RESTORED: &str = "UncheckedResourcesRestored";
/// Its reason when every item Velero restored is of a kind nac allowed.
pub const RESTORED_AS_CHECKED: &str = "RestoredAsChecked";
/// Its reason (status True: not known to be clean) while what Velero made cannot be confirmed from the API server;
/// nac tries again with backoff, a Warning Event says so and `nac_restores_not_verified` counts the tries.
pub const RESTORE_NOT_VERIFIED: &str = "RestoreNotVerified";
/// Its reason when the API server shows objects Velero made in this restore outside the restore's namespace (a
/// Namespace, a DataUpload, ...): for the cluster administrator.
pub const RESTORED_OUTSIDE_NAMESPACE: &str = "RestoredOutsideNamespace";
/// Accepted=False reason of a restore refused because its backup's tarball, on a tenant's own storage location,
/// holds items Velero would restore outside the namespace (Namespaces, DataUploads, VolumeSnapshotContents,
/// other cluster-scoped items, items of other namespaces).
pub const BACKUP_HOLDS_FOREIGN_ITEMS: &str = "BackupHoldsItemsOutsideNamespace";

/// A condition on a finished backup or restore that Velero ended with errors or warnings: the first of Velero's
/// messages for the namespace, read from its results file once the final phase is in the status (an Event says so
/// once). Set once. A tenant cannot read Velero's namespace: without it, it would see only counts (and a
/// "Completed" backup with a warning can be one whose volume data was not copied).
pub const VELERO_RESULTS: &str = "VeleroResults";
/// Its reason when Velero reported errors (and perhaps warnings).
pub const ERRORS_REPORTED: &str = "ErrorsReported";
/// Its reason when Velero reported warnings only.
pub const WARNINGS_REPORTED: &str = "WarningsReported";
/// Its reason when the results file could not be read.
pub const RESULTS_NOT_READ: &str = "ResultsNotRead";

/// The Queued=False reason while nac cannot finish admitting an object for a reason that may pass (a backup's
/// contents not readable from its storage for now, Velero not answering, a rights lookup failing): the message
/// says why, and nac retries with backoff. A Warning Event says so once.
pub const ADMISSION_RETRYING: &str = "AdmissionRetrying";

/// The spec breaks the policy or the kind's rules: BackingOff until the user changes it.
pub fn rejected<K: Mirrors>(old: Option<&K::Status>, message: &str, now: Timestamp) -> K::Status {
    refused::<K>(old, K::WORDS.invalid_reason, message, now)
}

/// Refused with `reason` (a spec problem, a source that cannot be used, a wait that timed out): BackingOff until
/// the user changes the object. A wait that led here is over: its Queued condition goes.
pub fn refused<K: Mirrors>(old: Option<&K::Status>, reason: &str, message: &str, now: Timestamp) -> K::Status {
    let mut s = first_sight(old);
    advance_phase(s.phase_mut(), NonAdminPhase::BackingOff);
    set_condition(s.conditions_mut(), ACCEPTED, false, reason, message, now);
    s.conditions_mut()
        .retain(|c| !(c.type_ == QUEUED && [WAITING_FOR_BACKUP, ADMISSION_RETRYING].contains(&c.reason.as_str())));
    s
}

/// Not admitted yet for a reason that may pass (`why`): phase New (or as it was), Queued=False
/// [`ADMISSION_RETRYING`]; Accepted is left as it was (the checks did not finish). Written once a spell: a later
/// try that fails for another reason leaves the status as it is (nac's log has each), since every status write
/// triggers the next reconcile at once, around the backoff.
pub fn retrying<K: Mirrors>(old: Option<&K::Status>, why: &str, now: Timestamp) -> K::Status {
    let mut s = first_sight(old);
    let already = |c: &Condition| c.type_ == QUEUED && c.reason == ADMISSION_RETRYING && c.status == "False";
    if s.conditions().iter().any(already) {
        return s;
    }
    let message = format!(
        "nac could not finish checking this NonAdmin{} and retries with backoff: {why}",
        K::WORDS.kind
    );
    set_condition(s.conditions_mut(), QUEUED, false, ADMISSION_RETRYING, &message, now);
    *s.queue_info_mut() = None;
    s
}

/// Valid, and waiting for what it depends on: phase New, Accepted, Queued=False with what it waits for and until
/// when; no queue position (it is in no queue yet).
pub fn waiting<K: Mirrors>(old: Option<&K::Status>, reason: &str, message: &str, now: Timestamp) -> K::Status {
    let mut s = validated::<K>(old, now);
    set_condition(s.conditions_mut(), QUEUED, false, reason, message, now);
    *s.queue_info_mut() = None;
    s
}

/// The spec is valid but the Velero object could not be created yet (the reconcile failed and is retried).
pub fn validated<K: Mirrors>(old: Option<&K::Status>, now: Timestamp) -> K::Status {
    let mut s = first_sight(old);
    set_accepted::<K>(&mut s, now);
    s
}

/// The spec is valid and has a nacuuid, the Velero object is not created yet (the nacuuid is persisted first).
pub fn accepted<K: Mirrors>(
    old: Option<&K::Status>,
    nacuuid: &str,
    velero_namespace: &str,
    now: Timestamp,
) -> K::Status {
    let mut s = validated::<K>(old, now);
    s.record(nacuuid, velero_namespace);
    s
}

/// The Velero object exists: phase Created, Queued, and the kind's mirror of it.
pub fn created<K: Mirrors>(old: Option<&K::Status>, view: &K::View, now: Timestamp) -> K::Status {
    let mut s = first_sight(old);
    advance_phase(s.phase_mut(), NonAdminPhase::Created);
    set_accepted::<K>(&mut s, now);
    let w = K::WORDS;
    set_condition(
        s.conditions_mut(),
        QUEUED,
        true,
        w.scheduled_reason,
        w.scheduled_message,
        now,
    );
    *s.queue_info_mut() = Some(QueueInfo {
        estimated_queue_position: view.as_ref().queue_position,
    });
    K::mirror(&mut s, view);
    s
}

/// Condition `PolicyCompliant=False` on an object whose Velero object exists while the current policy would
/// refuse its spec (`refused`), removed when it would not: nothing is undone, the status only says so.
pub fn refused_now<S: TenantStatus>(s: &mut S, refused: Option<&str>, now: Timestamp) {
    use crate::api::condition::{POLICY_COMPLIANT, REFUSED_BY_CURRENT_POLICY};
    match refused {
        Some(m) => {
            set_condition(
                s.conditions_mut(),
                POLICY_COMPLIANT,
                false,
                REFUSED_BY_CURRENT_POLICY,
                m,
                now,
            );
        }
        None => {
            s.conditions_mut().retain(|c| c.type_ != POLICY_COMPLIANT);
        }
    }
}

/// The Velero object nac created is gone, deleted outside nac. Reported, never re-created.
pub fn missing<K: Mirrors>(old: Option<&K::Status>, velero_namespace: &str, name: &str, now: Timestamp) -> K::Status {
    let mut s = first_sight(old);
    let w = K::WORDS;
    let message = format!(
        "Velero {} {velero_namespace}/{name} was not found: it was deleted outside nac. Create a new {} to {}",
        w.kind,
        K::ORIGIN.kind,
        w.again
    );
    set_condition(s.conditions_mut(), QUEUED, false, w.not_found_reason, &message, now);
    *s.queue_info_mut() = Some(QueueInfo {
        estimated_queue_position: 0,
    });
    s
}

/// Being deleted, with the message of the path taken.
pub fn deleting<S: TenantStatus>(old: Option<&S>, message: &str, now: Timestamp) -> S {
    let mut s = first_sight(old);
    advance_phase(s.phase_mut(), NonAdminPhase::Deleting);
    set_condition(s.conditions_mut(), DELETING, true, DELETION_PENDING, message, now);
    s
}

// ---- Events ----

fn note(warning: bool, reason: &str, message: impl Into<String>) -> Note {
    Note {
        warning,
        reason: reason.to_string(),
        message: message.into(),
    }
}

/// What an event-worthy summary of a status looks like.
pub struct Summary<'a> {
    pub phase: Option<NonAdminPhase>,
    pub conditions: &'a [Condition],
    pub velero_phase: Option<&'a str>,
    pub failure: Option<String>,
    /// `namespace/name` of the Velero object.
    pub velero_name: Option<String>,
    /// Velero's counts of the finished run: a "Completed" with warnings can mean skipped data (e.g. pod volumes
    /// that file-system backup could not reach), which the user must hear about.
    pub errors: i64,
    pub warnings: i64,
}

fn cond<'a>(s: &'a Summary, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
    find(s.conditions, t).map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// Events for a status transition of a tenant object.
pub fn notes<K: Mirrors>(old: Option<&K::Status>, new: &K::Status) -> Vec<Note> {
    let empty = Summary {
        phase: None,
        conditions: &[],
        velero_phase: None,
        failure: None,
        velero_name: None,
        errors: 0,
        warnings: 0,
    };
    let old = old.map(TenantStatus::summary).unwrap_or(empty);
    summary_notes(K::WORDS.kind, &old, &new.summary())
}

/// `kind` is "Backup" or "Restore". Only what a user or admin may have to act on, or wait for knowingly, is an
/// Event: a refusal, a wait, a failed or incomplete run, a deletion. The routine steps (accepted, its Velero
/// object made, completed) are not: each would be one more write per object to the API server, fanned out to its
/// watches, and the status conditions say the same to `kubectl describe`.
fn summary_notes(kind: &str, old: &Summary, new: &Summary) -> Vec<Note> {
    let mut out = Vec::new();
    let deleting = |s: &Summary| s.phase == Some(NonAdminPhase::Deleting);

    if let Some(("False", reason, message)) = cond(new, ACCEPTED) {
        if cond(old, ACCEPTED).map(|c| (c.0, c.2)) != Some(("False", message)) {
            out.push(note(true, reason, message));
        }
    }
    if let Some(("False", reason, message)) = cond(new, QUEUED) {
        if cond(old, QUEUED).map(|c| (c.0, c.1)) != Some(("False", reason)) {
            // Waiting is expected, not a problem; anything else keeping it out of the queue is.
            out.push(note(reason != WAITING_FOR_BACKUP, reason, message));
        }
    }
    for warning in [
        BACKUP_PARTIALLY_FAILED,
        RESOURCES_LEFT_OUT,
        RESOURCES_OUTSIDE_RIGHTS,
        VELERO_RESULTS,
    ] {
        if let Some(("True", reason, message)) = cond(new, warning) {
            // Once when it turns True, and again when its reason changes (a restore not verified at first, then
            // found to hold what is outside the namespace).
            if !matches!(cond(old, warning), Some(("True", r, _)) if r == reason) {
                out.push(note(true, reason, message));
            }
        }
    }
    if new.velero_phase != old.velero_phase {
        let failure = new.failure.clone().map(|f| format!(": {f}")).unwrap_or_default();
        let lower = kind.to_lowercase();
        let log = format!(
            "Velero's {lower} log lists them (its owner: kubectl nac {lower} logs; an admin: velero {lower} logs {})",
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
            Some(p @ ("Failed" | "PartiallyFailed" | "FailedValidation")) => {
                let counts = if new.errors + new.warnings > 0 {
                    format!(" with {} error(s) and {} warning(s); {log}", new.errors, new.warnings)
                } else {
                    String::new()
                };
                let retry = if p == "PartiallyFailed" {
                    String::new()
                } else {
                    retry_advice(kind, new.failure.as_deref())
                };
                out.push(note(
                    true,
                    &format!("{kind}{p}"),
                    format!("Velero {kind} {p}{failure}{counts}{retry}"),
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

/// Velero's reason for a run it found unfinished at its start (Velero 1.18: "found a backup with status
/// \"InProgress\" during the server starting, mark it as \"Failed\"").
const VELERO_RESTARTED: &str = "during the server starting";

/// What a user of a failed run can do: Velero never runs a failed Backup or Restore again, so a new tenant object
/// is the retry; when Velero failed it only because Velero itself stopped mid-run, the message says so in plain
/// words, as nothing about the object needs changing.
fn retry_advice(kind: &str, failure: Option<&str>) -> String {
    let cause = if failure.is_some_and(|f| f.contains(VELERO_RESTARTED)) {
        format!(
            ". Velero stopped while this {} ran (it marks such runs Failed when it starts again); nothing in it \
             needs changing",
            kind.to_lowercase()
        )
    } else {
        String::new()
    };
    format!("{cause}. To try again, create a new NonAdmin{kind}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataMoverDataUploads, NonAdminBackup, NonAdminRestore};
    use crate::controller::backup::{
        self, delete_request_message, BackupView, DeleteRequestView, BACKUP_DIRECT_DELETE_MESSAGE,
    };
    use crate::controller::counts::{pod_volume_backups, PhaseTally};
    use crate::controller::restore::{restore_finalizer_stalled_message, RestoreView, RESTORE_DELETE_MESSAGE};
    use crate::velero::{BackupStatus, DeleteBackupRequestStatus, RestoreStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use NonAdminPhase::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn view(phase: Option<&str>, position: i64) -> BackupView {
        BackupView {
            placed: Placed {
                nacuuid: "team-a-nightly-u".into(),
                name: "team-a-nightly-u".into(),
                namespace: "openshift-adp".into(),
                queue_position: position,
            },
            mirrored: crate::api::VeleroBackupRef {
                spec: Some(Box::default()),
                status: phase.map(|p| {
                    Box::new(BackupStatus {
                        phase: Some(p.into()),
                        ..Default::default()
                    })
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The notes of a backup that was InProgress and that Velero ended in `phase`, with `edit` applied to
    /// Velero's status.
    fn ended(phase: &str, edit: impl FnOnce(&mut BackupStatus)) -> Vec<Note> {
        let s = created::<NonAdminBackup>(None, &view(Some("InProgress"), 1), t(0));
        let mut done = view(Some(phase), 0);
        edit(done.mirrored.status.as_mut().unwrap());
        notes::<NonAdminBackup>(Some(&s), &created::<NonAdminBackup>(Some(&s), &done, t(1)))
    }

    fn reasons(n: &[Note]) -> Vec<&str> {
        n.iter().map(|n| n.reason.as_str()).collect()
    }

    #[test]
    fn a_warning_condition_is_an_event_when_it_turns_true_and_when_its_reason_changes() {
        fn summary(conditions: &[Condition]) -> Summary<'_> {
            Summary {
                phase: None,
                conditions,
                velero_phase: None,
                failure: None,
                velero_name: None,
                errors: 0,
                warnings: 0,
            }
        }
        let with = |reason: &str| {
            let mut cs = Vec::new();
            set_condition(&mut cs, RESOURCES_OUTSIDE_RIGHTS, true, reason, "m", t(0));
            cs
        };
        let notes_between = |old: &[Condition], new: &[Condition]| -> Vec<String> {
            reasons(&summary_notes("Restore", &summary(old), &summary(new)))
                .into_iter()
                .map(str::to_string)
                .collect()
        };
        let unverified = with(RESTORE_NOT_VERIFIED);
        let outside = with(RESTORED_OUTSIDE_NAMESPACE);
        assert_eq!(notes_between(&[], &unverified), [RESTORE_NOT_VERIFIED]);
        assert!(
            notes_between(&unverified, &unverified).is_empty(),
            "a retry is no new event"
        );
        assert_eq!(notes_between(&unverified, &outside), [RESTORED_OUTSIDE_NAMESPACE]);
    }

    #[test]
    fn an_invalid_spec_backs_off_with_the_reason() {
        let s = rejected::<NonAdminBackup>(None, "NonAdminBackup spec.backupSpec.ttl is restricted", t(0));
        assert_eq!(s.phase, Some(BackingOff));
        let c = find(&s.conditions, ACCEPTED).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", INVALID_BACKUP_SPEC));
        assert!(c.message.contains("ttl"));
        let n = notes::<NonAdminBackup>(None, &s);
        assert_eq!(reasons(&n), vec![INVALID_BACKUP_SPEC]);
        assert!(n[0].warning);
    }

    #[test]
    fn re_rejecting_with_the_same_message_is_not_a_change() {
        let s = rejected::<NonAdminBackup>(None, "bad", t(0));
        assert_eq!(rejected::<NonAdminBackup>(Some(&s), "bad", t(99)), s);
        assert!(notes::<NonAdminBackup>(Some(&s), &s).is_empty());
    }

    #[test]
    fn the_happy_path_goes_straight_to_created_in_one_status() {
        let s = created::<NonAdminBackup>(None, &view(None, 3), t(0));
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
        // A routine step: no Event (the conditions say it), one write fewer per backup.
        assert!(notes::<NonAdminBackup>(None, &s).is_empty());
    }

    #[test]
    fn mirroring_an_unchanged_velero_backup_is_not_a_change() {
        let s = created::<NonAdminBackup>(None, &view(Some("InProgress"), 1), t(0));
        assert_eq!(
            created::<NonAdminBackup>(Some(&s), &view(Some("InProgress"), 1), t(500)),
            s
        );
    }

    #[test]
    fn velero_progress_is_mirrored_without_touching_condition_times() {
        let s = created::<NonAdminBackup>(None, &view(None, 2), t(0));
        let mut done = view(Some("Completed"), 0);
        done.data_uploads = [("Completed".to_string(), 2), ("Failed".to_string(), 1)].into();
        let s2 = created::<NonAdminBackup>(Some(&s), &done, t(100));
        assert_eq!(s2.conditions, s.conditions);
        assert_eq!(
            serde_json::to_value(&s2).unwrap()["veleroBackup"]["status"]["phase"],
            "Completed"
        );
        assert_eq!(s2.queue_info.as_ref().unwrap().estimated_queue_position, 0);
        let du = s2.data_mover_data_uploads.as_ref().unwrap();
        assert_eq!((du.total, du.completed, du.failed), (3, 2, 1));
        assert!(notes::<NonAdminBackup>(Some(&s), &s2).is_empty(), "completed: routine");
    }

    #[test]
    fn a_failed_velero_backup_is_a_warning_with_the_reason() {
        let n = ended("Failed", |st| st.failure_reason = Some("no credentials".into()));
        assert_eq!(reasons(&n), vec!["BackupFailed"]);
        assert!(n[0].warning && n[0].message.contains("no credentials"));
        assert!(
            n[0].message.ends_with("To try again, create a new NonAdminBackup"),
            "{}",
            n[0].message
        );
        assert!(!n[0].message.contains("Velero stopped"), "{}", n[0].message);
    }

    #[test]
    fn a_backup_failed_by_a_restart_of_velero_says_so_and_how_to_retry() {
        let n = ended("Failed", |st| {
            st.failure_reason = Some(
                r#"found a backup with status "InProgress" during the server starting, mark it as "Failed""#.into(),
            );
        });
        assert_eq!(reasons(&n), vec!["BackupFailed"]);
        assert!(
            n[0].message.contains("Velero stopped while this backup ran")
                && n[0].message.ends_with("To try again, create a new NonAdminBackup"),
            "{}",
            n[0].message
        );
    }

    #[test]
    fn a_completed_backup_with_warnings_is_a_warning_naming_the_count_and_the_log() {
        let n = ended("Completed", |st| st.warnings = Some(1));
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
        let n = ended("PartiallyFailed", |st| (st.errors, st.warnings) = (Some(2), Some(3)));
        assert_eq!(reasons(&n), vec!["BackupPartiallyFailed"]);
        assert!(n[0].message.contains("2 error(s) and 3 warning(s)"), "{}", n[0].message);
    }

    #[test]
    fn a_fixed_spec_moves_from_backing_off_to_created() {
        let s = rejected::<NonAdminBackup>(None, "bad", t(0));
        let s2 = created::<NonAdminBackup>(Some(&s), &view(None, 1), t(10));
        assert_eq!(s2.phase, Some(Created));
        let a = find(&s2.conditions, ACCEPTED).unwrap();
        assert_eq!(a.status, "True");
        assert_eq!(a.last_transition_time, Time(t(10)));
    }

    #[test]
    fn a_created_backup_never_falls_back_to_backing_off() {
        let s = created::<NonAdminBackup>(None, &view(None, 1), t(0));
        assert_eq!(rejected::<NonAdminBackup>(Some(&s), "bad", t(1)).phase, Some(Created));
    }

    #[test]
    fn accepting_records_the_nacuuid_before_anything_is_created() {
        let s = accepted::<NonAdminBackup>(None, "ns-n-u", "openshift-adp", t(0));
        assert_eq!(s.phase, Some(New));
        let vb = s.velero_backup.as_ref().unwrap();
        assert_eq!(vb.nacuuid.as_deref(), Some("ns-n-u"));
        assert_eq!(vb.name.as_deref(), Some("ns-n-u"));
        assert!(notes::<NonAdminBackup>(None, &s).is_empty());
    }

    #[test]
    fn a_valid_backup_that_could_not_be_created_yet_is_new_and_accepted() {
        let s = validated::<NonAdminBackup>(None, t(0));
        assert_eq!(s.phase, Some(New));
        assert!(super::super::conditions::is_true(&s.conditions, ACCEPTED));
        assert!(s.velero_backup.is_none());
        let r = validated::<NonAdminRestore>(None, t(0));
        assert_eq!(r.phase, Some(New));
        assert_eq!(find(&r.conditions, ACCEPTED).unwrap().reason, RESTORE_ACCEPTED);
    }

    #[test]
    fn a_vanished_velero_backup_is_reported_and_the_phase_stays() {
        let s = created::<NonAdminBackup>(None, &view(Some("InProgress"), 1), t(0));
        let s2 = missing::<NonAdminBackup>(Some(&s), "openshift-adp", "team-a-nightly-u", t(5));
        assert_eq!(s2.phase, Some(Created));
        let q = find(&s2.conditions, QUEUED).unwrap();
        assert_eq!(
            (q.status.as_str(), q.reason.as_str()),
            ("False", VELERO_BACKUP_NOT_FOUND)
        );
        assert!(q.message.contains("openshift-adp/team-a-nightly-u"));
        let n = notes::<NonAdminBackup>(Some(&s), &s2);
        assert_eq!(reasons(&n), vec![VELERO_BACKUP_NOT_FOUND]);
        // When it comes back (Velero's sync), Queued is true again.
        let s3 = created::<NonAdminBackup>(Some(&s2), &view(Some("Completed"), 0), t(9));
        assert!(super::super::conditions::is_true(&s3.conditions, QUEUED));
    }

    #[test]
    fn deletion_moves_to_deleting_and_mirrors_the_request() {
        let s = created::<NonAdminBackup>(None, &view(Some("Completed"), 0), t(0));
        let req = DeleteRequestView {
            nacuuid: "u".into(),
            name: "u".into(),
            namespace: "openshift-adp".into(),
            status: Some(DeleteBackupRequestStatus {
                phase: Some("InProgress".into()),
                ..Default::default()
            }),
        };
        let s2 = backup::deleting(Some(&s), &delete_request_message(Some(&req)), Some(&req), t(1));
        assert_eq!(s2.phase, Some(Deleting));
        let d = find(&s2.conditions, DELETING).unwrap();
        assert_eq!(
            (d.reason.as_str(), d.message.as_str()),
            (DELETION_PENDING, "backup accepted for deletion")
        );
        assert_eq!(
            serde_json::to_value(&s2).unwrap()["veleroDeleteBackupRequest"]["status"]["phase"],
            "InProgress"
        );
        assert_eq!(reasons(&notes::<NonAdminBackup>(Some(&s), &s2)), vec!["BackupDeleting"]);
        // Velero's errors land in the message, as a warning.
        let mut failed = req.clone();
        failed.status.as_mut().unwrap().errors = Some(vec!["bucket gone".into()]);
        let s3 = backup::deleting(Some(&s2), &delete_request_message(Some(&failed)), Some(&failed), t(2));
        assert!(find(&s3.conditions, DELETING).unwrap().message.contains("bucket gone"));
        assert_eq!(
            reasons(&notes::<NonAdminBackup>(Some(&s2), &s3)),
            vec!["DeletionDelayed"]
        );
    }

    #[test]
    fn direct_deletion_explains_how_to_delete_the_data() {
        let s = backup::deleting(None, BACKUP_DIRECT_DELETE_MESSAGE, None, t(0));
        assert!(find(&s.conditions, DELETING)
            .unwrap()
            .message
            .contains("spec.deleteBackup"));
        assert!(s.velero_delete_backup_request.is_none());
    }

    #[test]
    fn first_sight_is_new_and_only_once() {
        let s: crate::api::NonAdminBackupStatus = first_sight(None);
        assert_eq!(s.phase, Some(New));
        let c = created::<NonAdminBackup>(None, &view(None, 1), t(0));
        assert_eq!(first_sight(Some(&c)), c);
    }

    #[test]
    fn pod_volume_backup_counts() {
        let t: PhaseTally = [("New".into(), 1), ("InProgress".into(), 2), ("".into(), 1)].into();
        let p = pod_volume_backups(&t);
        assert_eq!((p.total, p.new, p.in_progress, p.completed), (4, 1, 2, 0));
    }

    fn rview(phase: Option<&str>) -> RestoreView {
        RestoreView {
            placed: Placed {
                nacuuid: "r".into(),
                name: "r".into(),
                namespace: "openshift-adp".into(),
                queue_position: 1,
            },
            status: phase.map(|p| RestoreStatus {
                phase: Some(p.into()),
                ..Default::default()
            }),
            source_warning: None,
            left_out: None,
            verdict: None,
            verify_retry: None,
            results: Default::default(),
            data_downloads: Default::default(),
            pod_volume_restores: Default::default(),
        }
    }

    #[test]
    fn restores_follow_the_same_model() {
        let r = rejected::<NonAdminRestore>(None, "NonAdminRestore spec.restoreSpec.backupName is invalid", t(0));
        assert_eq!(r.phase, Some(BackingOff));
        assert_eq!(find(&r.conditions, ACCEPTED).unwrap().reason, INVALID_RESTORE_SPEC);

        let c = created::<NonAdminRestore>(None, &rview(None), t(0));
        assert_eq!(c.phase, Some(Created));
        assert_eq!(find(&c.conditions, QUEUED).unwrap().reason, RESTORE_SCHEDULED);
        assert_eq!(find(&c.conditions, ACCEPTED).unwrap().reason, RESTORE_ACCEPTED);
        assert!(notes::<NonAdminRestore>(None, &c).is_empty());

        let done = created::<NonAdminRestore>(Some(&c), &rview(Some("Completed")), t(3));
        assert!(notes::<NonAdminRestore>(Some(&c), &done).is_empty());

        let gone = missing::<NonAdminRestore>(Some(&done), "openshift-adp", "r", t(4));
        assert_eq!(find(&gone.conditions, QUEUED).unwrap().reason, VELERO_RESTORE_NOT_FOUND);

        let del = deleting(Some(&done), RESTORE_DELETE_MESSAGE, t(5));
        assert_eq!(del.phase, Some(Deleting));
        let stalled = restore_finalizer_stalled_message(
            "openshift-adp",
            "r",
            &["restores.velero.io/external-resources-finalizer".into()],
            "2024-01-01T00:00:00Z",
        );
        let del2 = deleting(Some(&del), &stalled, t(600));
        assert!(find(&del2.conditions, DELETING)
            .unwrap()
            .message
            .contains("Is Velero running?"));
        assert_eq!(
            reasons(&notes::<NonAdminRestore>(Some(&del), &del2)),
            vec!["DeletionDelayed"]
        );
    }

    #[test]
    fn an_admission_that_may_pass_says_why_with_one_warning_until_it_ends() {
        let r = retrying::<NonAdminRestore>(None, "downloading from http://s3:9000/x: connection refused", t(0));
        assert_eq!(r.phase, Some(New));
        assert!(find(&r.conditions, ACCEPTED).is_none(), "the checks did not finish");
        let q = find(&r.conditions, QUEUED).unwrap();
        assert_eq!((q.status.as_str(), q.reason.as_str()), ("False", ADMISSION_RETRYING));
        assert_eq!(
            q.message,
            "nac could not finish checking this NonAdminRestore and retries with backoff: downloading from \
             http://s3:9000/x: connection refused"
        );
        let n = notes::<NonAdminRestore>(None, &r);
        assert!(n.iter().any(|n| n.reason == ADMISSION_RETRYING && n.warning), "{n:?}");
        // Each retry that fails, alike or for another reason, writes nothing new and publishes no Event.
        for why in [
            "downloading from http://s3:9000/x: connection refused",
            "Velero did not answer",
        ] {
            let again = retrying::<NonAdminRestore>(Some(&r), why, t(7));
            assert_eq!(again, r);
            assert!(notes::<NonAdminRestore>(Some(&r), &again).is_empty());
        }
        // It ends either way: created (Queued true), refused (the condition goes), or a wait.
        let c = created::<NonAdminRestore>(Some(&r), &rview(None), t(9));
        assert_eq!(find(&c.conditions, QUEUED).unwrap().reason, RESTORE_SCHEDULED);
        let no = refused::<NonAdminRestore>(Some(&r), REQUESTER_RIGHTS_EXCEEDED, "no", t(9));
        assert!(find(&no.conditions, QUEUED).is_none());
        let w = waiting::<NonAdminRestore>(Some(&r), WAITING_FOR_BACKUP, "waiting", t(9));
        assert_eq!(find(&w.conditions, QUEUED).unwrap().reason, WAITING_FOR_BACKUP);
    }

    #[test]
    fn a_waiting_restore_is_new_accepted_and_not_queued_with_a_normal_event() {
        let w = waiting::<NonAdminRestore>(None, WAITING_FOR_BACKUP, "waiting for NonAdminBackup b: x", t(0));
        assert_eq!(w.phase, Some(New));
        assert_eq!(find(&w.conditions, ACCEPTED).unwrap().reason, RESTORE_ACCEPTED);
        let q = find(&w.conditions, QUEUED).unwrap();
        assert_eq!((q.status.as_str(), q.reason.as_str()), ("False", WAITING_FOR_BACKUP));
        assert!(w.queue_info.is_none());
        let n = notes::<NonAdminRestore>(None, &w);
        assert!(n.iter().any(|n| n.reason == WAITING_FOR_BACKUP && !n.warning), "{n:?}");
        // Progress of the awaited backup changes the message, not the event.
        let w2 = waiting::<NonAdminRestore>(Some(&w), WAITING_FOR_BACKUP, "waiting for NonAdminBackup b: y", t(5));
        assert!(notes::<NonAdminRestore>(Some(&w), &w2).is_empty());
        let mut r = NonAdminRestore::new("r", Default::default());
        r.status = Some(w2.clone());
        assert!(!crate::controller::tenant::was_created(&r), "a wait is not a creation");

        // The wait ends either way: created (Queued true) or refused (the wait's condition goes).
        let c = created::<NonAdminRestore>(Some(&w2), &rview(None), t(9));
        assert_eq!(find(&c.conditions, QUEUED).unwrap().reason, RESTORE_SCHEDULED);
        let gave_up = refused::<NonAdminRestore>(Some(&w2), "BackupWaitTimedOut", "gave up", t(9));
        assert_eq!(gave_up.phase, Some(BackingOff));
        assert!(find(&gave_up.conditions, QUEUED).is_none());
        assert_eq!(
            find(&gave_up.conditions, ACCEPTED).unwrap().reason,
            "BackupWaitTimedOut"
        );
    }

    #[test]
    fn a_partially_failed_source_is_a_warning_once() {
        let mut v = rview(Some("InProgress"));
        v.source_warning = Some("restoring from Velero Backup b that finished PartiallyFailed".into());
        let c = created::<NonAdminRestore>(None, &v, t(0));
        let w = find(&c.conditions, BACKUP_PARTIALLY_FAILED).unwrap();
        assert_eq!(
            (w.status.as_str(), w.reason.as_str()),
            ("True", BACKUP_PARTIALLY_FAILED)
        );
        let n = notes::<NonAdminRestore>(None, &c);
        assert!(
            n.iter().any(|n| n.reason == BACKUP_PARTIALLY_FAILED && n.warning),
            "{n:?}"
        );
        let again = created::<NonAdminRestore>(Some(&c), &v, t(5));
        assert_eq!(again, c);
    }
}
