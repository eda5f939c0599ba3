//! The recovery-point objective: how old a namespace's newest completed backup may get. Pure: the caller brings
//! the namespace's effective policy, its newest completion and the time, and gets whether it is tracked and in
//! breach.

use super::{problem, Policy, PolicyProblem};
use crate::duration::GoDuration;

/// The Event reason on a namespace when a breach starts.
pub const BREACHED: &str = "RecoveryPointObjectiveBreached";

/// Parses `recoveryPointObjective`: a positive Go duration.
pub(super) fn parse_objective(s: &str, problems: &mut Vec<PolicyProblem>) -> Option<GoDuration> {
    match GoDuration::parse(s) {
        Ok(d) if d.as_std() >= std::time::Duration::from_secs(1) => Some(d),
        Ok(d) => {
            problems.push(problem(
                "recoveryPointObjective",
                format!("{d} is too short: at least 1s (leave it out to track nothing)"),
            ));
            None
        }
        Err(e) => {
            problems.push(problem("recoveryPointObjective", e.to_string()));
            None
        }
    }
}

/// Where one namespace stands against its objective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    pub objective: GoDuration,
    /// Seconds since the newest completed backup ended; `None`: none completed.
    pub age: Option<i64>,
    pub breached: bool,
    /// When the breach began (seconds): the newest completion plus the objective; `None` for a namespace that
    /// never had a completed backup.
    pub since: Option<i64>,
}

/// Whether a namespace is tracked: under a tier with an objective (the admin selected it by its labels), or
/// under the base's objective once it uses nac (`uses_nac`: it has a NonAdminBackup or NonAdminSchedule), so that
/// the base's objective does not put every system namespace in breach.
pub fn tracked(policy: &Policy, uses_nac: bool) -> Option<GoDuration> {
    let d = policy.recovery_point_objective?;
    (policy.tier.is_some() || uses_nac).then_some(d)
}

/// The standing of a tracked namespace whose newest completed backup ended at `newest` (seconds), at `now`.
pub fn standing(objective: GoDuration, newest: Option<i64>, now: i64) -> Standing {
    let limit = objective.as_std().as_secs() as i64;
    match newest {
        None => Standing {
            objective,
            age: None,
            breached: true,
            since: None,
        },
        Some(done) => {
            let age = (now - done).max(0);
            Standing {
                objective,
                age: Some(age),
                breached: age > limit,
                since: Some(done.saturating_add(limit)),
            }
        }
    }
}

/// The Event message of a breach, naming who set the objective.
pub fn breach_message(namespace: &str, policy: &Policy, s: &Standing, newest: Option<&str>) -> String {
    let by = policy.by();
    match (s.age, newest) {
        (Some(age), Some(name)) => format!(
            "namespace {namespace} has no backup within its recovery-point objective of {} (set by {by}): the \
             newest completed backup, {name}, is {} old; create a NonAdminBackup (or check its NonAdminSchedule)",
            s.objective,
            GoDuration::from_secs(age as u64)
        ),
        _ => format!(
            "namespace {namespace} has no completed backup, and its recovery-point objective is {} (set by {by}); \
             create a NonAdminBackup (or a NonAdminSchedule)",
            s.objective
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objective_is_a_positive_duration_and_a_tier_part() {
        let p = Policy::parse("recoveryPointObjective: 24h").unwrap();
        assert_eq!(p.recovery_point_objective, Some(GoDuration::from_secs(86_400)));
        assert!(p.summary().iter().any(|l| l.contains("older than 24h0m0s")));
        for bad in ["0s", "soon", "-1h"] {
            let e = Policy::parse(&format!("recoveryPointObjective: {bad}")).unwrap_err();
            assert!(e.to_string().contains("recoveryPointObjective"), "{bad}: {e}");
        }
        let p = Policy::parse(
            "recoveryPointObjective: 24h\ntiers:\n- name: gold\n  namespaceSelector: {matchLabels: {t: gold}}\n  \
             recoveryPointObjective: 1h\n- name: scratch\n  namespaceSelector: {matchLabels: {t: scratch}}\n  \
             recoveryPointObjective: null\n",
        )
        .unwrap();
        assert_eq!(
            p.tiers[0].policy.recovery_point_objective,
            Some(GoDuration::from_secs(3600))
        );
        assert_eq!(
            p.tiers[1].policy.recovery_point_objective, None,
            "a tier may track nothing"
        );
        let e = Policy::parse(
            "tiers:\n- name: gold\n  namespaceSelector: {matchLabels: {t: gold}}\n  recoveryPointObjective: 0s\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("tiers[0].recoveryPointObjective"), "{e}");
    }

    #[test]
    fn tracked_under_a_tier_or_once_the_namespace_uses_nac() {
        let base = std::sync::Arc::new(
            Policy::parse(
                "recoveryPointObjective: 24h\ntiers:\n- name: gold\n  namespaceSelector: {matchLabels: {t: gold}}\n  \
                 recoveryPointObjective: 1h\n- name: scratch\n  namespaceSelector: {matchLabels: {t: scratch}}\n  \
                 quotas: {maxBackups: 1}\n",
            )
            .unwrap(),
        );
        let labels = |t: &str| [("t".to_string(), t.to_string())].into_iter().collect();
        let gold = base.for_labels(&labels("gold"));
        assert_eq!(tracked(&gold, false), Some(GoDuration::from_secs(3600)));
        assert_eq!(
            tracked(&base, false),
            None,
            "the base tracks only namespaces that use nac"
        );
        assert_eq!(tracked(&base, true), Some(GoDuration::from_secs(86_400)));
        // A tier that names other parts keeps the base's objective, and selected namespaces are tracked.
        let scratch = base.for_labels(&labels("scratch"));
        assert_eq!(tracked(&scratch, false), Some(GoDuration::from_secs(86_400)));
        assert_eq!(tracked(&Policy::default(), true), None);
    }

    #[test]
    fn breach_begins_when_the_newest_backup_outlives_the_objective() {
        let hour = GoDuration::from_secs(3600);
        let s = standing(hour, Some(1_000), 1_000 + 3600);
        assert_eq!((s.age, s.breached, s.since), (Some(3600), false, Some(4600)));
        let s = standing(hour, Some(1_000), 1_000 + 3601);
        assert!(s.breached);
        let s = standing(hour, None, 5);
        assert_eq!((s.age, s.breached, s.since), (None, true, None));
        // A clock behind the completion: age 0, not negative.
        assert_eq!(standing(hour, Some(100), 50).age, Some(0));
        let p = Policy::parse("recoveryPointObjective: 1h").unwrap();
        let m = breach_message("team-a", &p, &standing(hour, Some(0), 7200), Some("nightly-1"));
        assert!(
            m.contains("recovery-point objective of 1h0m0s (set by cluster policy)"),
            "{m}"
        );
        assert!(m.contains("nightly-1, is 2h0m0s old"), "{m}");
        let m = breach_message("team-a", &p, &standing(hour, None, 0), None);
        assert!(m.contains("has no completed backup"), "{m}");
    }
}
