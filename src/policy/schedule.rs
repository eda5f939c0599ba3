//! Schedules (NonAdminSchedule): the admin's bounds on tenants' schedules, and the evaluation of a schedule's spec.
//! The template gets exactly the backup policy (under its own field names); the cron expression is checked as
//! Velero's cron library parses it, against the policy's shortest interval.

use super::duration::GoDuration;
use super::eval::{evaluate_backup_as, Outcome, Violation};
use super::{duration_value, problem, Policy, PolicyProblem};
use crate::cron;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const NAS: &str = "NonAdminSchedule";
pub const TEMPLATE_PREFIX: &str = "spec.template.backupSpec";

/// What tenants' schedules may ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleRules {
    /// The shortest time between two runs a schedule may ask for.
    pub min_interval: Option<GoDuration>,
    /// `spec.skipImmediately` of schedules that leave it out, on creation and on unpause (the counterpart of
    /// Velero's `--schedule-skip-immediately`).
    pub skip_immediately: bool,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawScheduleRules {
    min_interval: Option<Value>,
    max_per_namespace: Option<u32>,
    skip_immediately: Option<bool>,
}

/// The rules, and the old `maxPerNamespace` (now `quotas.maxSchedules`, where the caller folds it).
pub(super) fn parse_schedule(raw: RawScheduleRules, problems: &mut Vec<PolicyProblem>) -> (ScheduleRules, Option<u32>) {
    let min_interval = duration_value("schedule.minInterval", raw.min_interval, problems).filter(|d| !d.is_zero());
    if raw.max_per_namespace == Some(0) {
        // Zero would be "no schedules at all": say so rather than guess.
        problems.push(problem(
            "schedule.maxPerNamespace",
            "0 would refuse every schedule; leave it out for no limit",
        ));
    }
    let rules = ScheduleRules {
        min_interval,
        skip_immediately: raw.skip_immediately.unwrap_or(false),
    };
    (rules, raw.max_per_namespace.filter(|n| *n > 0))
}

fn violation(field: &str, detail: String) -> Violation {
    Violation {
        field: field.to_string(),
        message: format!("{NAS} {field} {detail}"),
    }
}

/// Checks a cron expression as Velero would parse it, and against the policy's shortest interval. `now` is where
/// the interval is measured from (a schedule's runs are a year's worth of its expression from now).
pub fn check_expression(
    expression: &str,
    rules: &ScheduleRules,
    by: &str,
    now: jiff::Timestamp,
) -> Result<cron::Schedule, String> {
    let parsed = cron::Schedule::parse(expression).map_err(|e| format!("is invalid: {e}"))?;
    // Velero treats a schedule without a next run as always due: it would back up at every look.
    if parsed.next(now).is_none() {
        return Err(format!("is invalid: {expression:?} has no run in the next five years"));
    }
    if let Some(min) = rules.min_interval {
        // Fewer than two runs within a year (`@yearly`, `0 0 29 2 *`): a year at least between them.
        let every = parsed
            .min_interval(now)
            .unwrap_or(jiff::SignedDuration::from_hours(366 * 24));
        let every = GoDuration(every.as_nanos().unsigned_abs());
        if every < min {
            return Err(format!(
                "{expression:?} runs every {every} at its most frequent, more often than the minimum interval {min} \
                 set by {by} (schedule.minInterval)"
            ));
        }
    }
    Ok(parsed)
}

/// Applies the policy and the tenant rules to a NonAdminSchedule's `spec`: the template as a backup of
/// `namespace` (enforced fields filled with warnings, the tenant boundary), plus the schedule's own rules. The
/// template may not carry `metadata`: Velero would put its labels on each run instead of nac's identity labels.
pub fn evaluate_schedule(spec: &Map<String, Value>, policy: &Policy, namespace: &str, now: jiff::Timestamp) -> Outcome {
    let mut out = Outcome {
        spec: spec.clone(),
        ..Outcome::default()
    };
    match spec.get("schedule") {
        Some(Value::String(s)) if !s.trim().is_empty() => {
            if let Err(e) = check_expression(s, &policy.schedule, &policy.by(), now) {
                out.violations.push(violation("spec.schedule", e));
            }
        }
        Some(Value::String(_)) | None | Some(Value::Null) => out.violations.push(violation(
            "spec.schedule",
            "is required: a cron expression such as \"0 2 * * *\" or \"@every 6h\"".into(),
        )),
        Some(other) => out
            .violations
            .push(violation("spec.schedule", format!("must be a string (got {other})"))),
    }
    let template = match spec.get("template").and_then(|t| t.get("backupSpec")) {
        Some(Value::Object(m)) => m.clone(),
        None | Some(Value::Null) => {
            out.violations.push(Violation {
                field: TEMPLATE_PREFIX.into(),
                message: format!("{NAS} {TEMPLATE_PREFIX} is not set"),
            });
            return out;
        }
        Some(_) => {
            out.violations
                .push(violation(TEMPLATE_PREFIX, "must be an object".into()));
            return out;
        }
    };
    if template.get("metadata").is_some_and(|m| !super::is_empty_value(m)) {
        out.violations.push(violation(
            &format!("{TEMPLATE_PREFIX}.metadata"),
            "is restricted: each run carries nac's identity labels, not labels of the template".into(),
        ));
    }
    let backup = evaluate_backup_as(&template, policy, namespace, NAS, TEMPLATE_PREFIX);
    out.warnings.extend(backup.warnings);
    out.violations.extend(backup.violations);
    let mut t = spec
        .get("template")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    t.insert("backupSpec".into(), Value::Object(backup.spec));
    out.spec.insert("template".into(), Value::Object(t));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2026-11-25T10:00:00Z".parse().unwrap()
    }

    use crate::wire::object as spec;

    #[test]
    fn the_template_gets_the_backup_policy_under_its_own_field_names() {
        let policy = Policy::parse("enforceBackupSpec: {ttl: 720h0m0s}\nbackup: {maxTtl: 2160h}").unwrap();
        let out = evaluate_schedule(
            &spec(json!({"schedule": "0 2 * * *", "template": {"backupSpec": {}}})),
            &policy,
            "team-a",
            now(),
        );
        assert!(out.allowed(), "{:?}", out.violations);
        assert_eq!(
            out.spec["template"]["backupSpec"]["includedNamespaces"],
            json!(["team-a"])
        );
        assert_eq!(out.spec["template"]["backupSpec"]["ttl"], json!("720h0m0s"));
        assert_eq!(
            out.warnings,
            vec!["spec.template.backupSpec.ttl set to 720h0m0s by cluster policy"]
        );

        let out = evaluate_schedule(
            &spec(json!({"schedule": "0 2 * * *", "template": {"backupSpec": {
                "includedNamespaces": ["team-b"], "ttl": "24h", "metadata": {"labels": {"a": "b"}}}}})),
            &policy,
            "team-a",
            now(),
        );
        let fields: Vec<&str> = out.violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.backupSpec.metadata",
                "spec.template.backupSpec.includedNamespaces",
                "spec.template.backupSpec.ttl"
            ]
        );
        assert!(
            out.message()
                .contains("NonAdminSchedule spec.template.backupSpec.includedNamespaces is restricted"),
            "{}",
            out.message()
        );
    }

    #[test]
    fn expressions_are_checked_as_velero_parses_them_and_against_the_shortest_interval() {
        let policy = Policy::parse("schedule: {minInterval: 1h}").unwrap();
        let eval = |s: Value| {
            evaluate_schedule(
                &spec(json!({"schedule": s, "template": {"backupSpec": {}}})),
                &policy,
                "ns",
                now(),
            )
        };
        for ok in [
            "0 * * * *",
            "@hourly",
            "@every 1h",
            "0 2 * * *",
            "@daily",
            "15 */2 * * MON-FRI",
        ] {
            assert!(eval(json!(ok)).allowed(), "{ok}: {:?}", eval(json!(ok)).violations);
        }
        let out = eval(json!("*/30 * * * *"));
        assert_eq!(out.violations[0].field, "spec.schedule");
        assert!(out.message().contains("runs every 30m0s"), "{}", out.message());
        assert!(out.message().contains("schedule.minInterval"), "{}", out.message());
        assert!(!eval(json!("@every 59m")).allowed());
        // Once a year (or every four): fine under any minimum interval of less than a year, on any day.
        for yearly in ["@yearly", "0 0 15 6 *", "0 0 29 2 *"] {
            assert!(eval(json!(yearly)).allowed(), "{yearly}");
        }
        assert!(eval(json!("0 0 30 2 *"))
            .message()
            .contains("has no run in the next five years"));
        assert!(eval(json!("61 * * * *"))
            .message()
            .starts_with("NonAdminSchedule spec.schedule is invalid: "));
        for bad in [json!(""), json!(null), json!(5)] {
            assert_eq!(eval(bad.clone()).violations[0].field, "spec.schedule", "{bad}");
        }
        let out = evaluate_schedule(&spec(json!({"schedule": "@daily"})), &policy, "ns", now());
        assert_eq!(out.message(), "NonAdminSchedule spec.template.backupSpec is not set");
    }

    #[test]
    fn policy_section_is_checked() {
        let p = Policy::parse("schedule: {minInterval: 30m, maxPerNamespace: 3, skipImmediately: true}").unwrap();
        assert_eq!(p.schedule.min_interval, Some(GoDuration::from_secs(1800)));
        assert_eq!(p.quotas.max_schedules, Some(3));
        assert!(p.schedule.skip_immediately);
        for bad in [
            "schedule: {minInterval: soon}",
            "schedule: {maxPerNamespace: 0}",
            "schedule: {every: 1h}",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }
}
