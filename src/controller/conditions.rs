//! Condition and phase bookkeeping shared by the NonAdminBackup and NonAdminRestore status planners.
//!
//! `lastTransitionTime` moves only when a condition's status changes, so re-computing an unchanged status yields
//! an identical value and no write.

use crate::api::NonAdminPhase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The status of a condition as the API spells it.
pub fn status_str(value: bool) -> &'static str {
    if value {
        "True"
    } else {
        "False"
    }
}

/// Sets condition `type_`: adds it, or updates reason and message in place; the transition time changes only when
/// the status does. Returns whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    let status = status_str(value);
    let message = &*within_limit(message);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let mut changed = false;
            if c.status != status {
                c.status = status.to_string();
                c.last_transition_time = Time(now);
                changed = true;
            }
            if c.reason != reason {
                c.reason = reason.to_string();
                changed = true;
            }
            if c.message != message {
                c.message = message.to_string();
                changed = true;
            }
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message: message.to_string(),
                last_transition_time: Time(now),
                observed_generation: None,
            });
            true
        }
    }
}

/// The longest condition message `metav1.Condition` allows (bytes).
pub const MAX_MESSAGE_BYTES: usize = 32768;

/// `message` within [`MAX_MESSAGE_BYTES`], cut on a character boundary and marked, so a status write never fails on
/// it.
fn within_limit(message: &str) -> std::borrow::Cow<'_, str> {
    const CUT: &str = " ... (cut)";
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.into();
    }
    let mut end = MAX_MESSAGE_BYTES - CUT.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT}", &message[..end]).into()
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether condition `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Moves `phase` to `next` when that keeps it moving forward; returns whether it changed.
pub fn advance_phase(phase: &mut Option<NonAdminPhase>, next: NonAdminPhase) -> bool {
    match *phase {
        Some(p) if p == next || !p.may_become(next) => false,
        _ => {
            *phase = Some(next);
            true
        }
    }
}

/// `now` cut to whole seconds, as the API server stores `metav1.Time`, so a computed condition equals the one read
/// back.
pub fn now_seconds() -> Timestamp {
    truncate_to_seconds(Timestamp::now())
}

pub fn truncate_to_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use NonAdminPhase::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn a_message_over_the_condition_limit_is_cut_on_a_character_boundary_and_written_once() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let mut c = Vec::new();
        assert!(set_condition(&mut c, "Accepted", false, "Refused", &long, t(0)));
        let m = &c[0].message;
        assert!(
            m.len() <= MAX_MESSAGE_BYTES && m.ends_with(" ... (cut)") && m.starts_with("éé"),
            "{}",
            m.len()
        );
        assert!(
            !set_condition(&mut c, "Accepted", false, "Refused", &long, t(1)),
            "the same cut message"
        );
        let written = c[0].message.clone();
        assert!(!set_condition(&mut c, "Accepted", false, "Refused", &written, t(2)));
    }

    #[test]
    fn a_new_condition_is_added_with_the_current_time() {
        let mut c = Vec::new();
        assert!(set_condition(
            &mut c,
            "Accepted",
            true,
            "BackupAccepted",
            "backup accepted",
            t(0)
        ));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, "True");
        assert_eq!(c[0].last_transition_time, Time(t(0)));
    }

    #[test]
    fn setting_the_same_condition_again_changes_nothing() {
        let mut c = Vec::new();
        set_condition(&mut c, "Accepted", true, "BackupAccepted", "backup accepted", t(0));
        let before = c.clone();
        assert!(!set_condition(
            &mut c,
            "Accepted",
            true,
            "BackupAccepted",
            "backup accepted",
            t(60)
        ));
        assert_eq!(c, before);
    }

    #[test]
    fn a_new_message_keeps_the_transition_time() {
        let mut c = Vec::new();
        set_condition(&mut c, "Deleting", true, "DeletionPending", "a", t(0));
        assert!(set_condition(&mut c, "Deleting", true, "DeletionPending", "b", t(60)));
        assert_eq!(c[0].message, "b");
        assert_eq!(c[0].last_transition_time, Time(t(0)));
    }

    #[test]
    fn a_status_change_moves_the_transition_time() {
        let mut c = Vec::new();
        set_condition(&mut c, "Queued", true, "BackupScheduled", "created", t(0));
        assert!(set_condition(
            &mut c,
            "Queued",
            false,
            "VeleroBackupNotFound",
            "gone",
            t(60)
        ));
        assert_eq!(c[0].status, "False");
        assert_eq!(c[0].last_transition_time, Time(t(60)));
        assert!(!is_true(&c, "Queued"));
    }

    #[test]
    fn conditions_of_other_types_are_left_alone() {
        let mut c = Vec::new();
        set_condition(&mut c, "Accepted", true, "BackupAccepted", "backup accepted", t(0));
        set_condition(&mut c, "Queued", true, "BackupScheduled", "created", t(1));
        assert_eq!(c.len(), 2);
        assert!(is_true(&c, "Accepted") && is_true(&c, "Queued"));
        assert_eq!(find(&c, "Accepted").unwrap().last_transition_time, Time(t(0)));
    }

    #[test]
    fn phases_only_move_forward() {
        let mut p = None;
        assert!(advance_phase(&mut p, New));
        assert!(advance_phase(&mut p, Created));
        assert!(!advance_phase(&mut p, New));
        assert!(
            !advance_phase(&mut p, BackingOff),
            "nac never falls back from Created to BackingOff"
        );
        assert_eq!(p, Some(Created));
        assert!(advance_phase(&mut p, Deleting));
        assert!(!advance_phase(&mut p, Created));
        assert_eq!(p, Some(Deleting));
    }

    #[test]
    fn a_fixed_spec_leaves_backing_off_for_created_only() {
        let mut p = Some(BackingOff);
        assert!(!advance_phase(&mut p, New));
        assert!(advance_phase(&mut p, Created));
    }

    #[test]
    fn transition_times_are_whole_seconds() {
        let t = Timestamp::from_nanosecond(1_700_000_000_123_456_789).unwrap();
        assert_eq!(truncate_to_seconds(t), Timestamp::from_second(1_700_000_000).unwrap());
    }
}
