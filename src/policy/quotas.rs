//! Quotas per namespace: how many backups, schedules and restores an hour a namespace may have, and how many bytes
//! its backups may hold. Pure: the caller brings the namespace's use (counted from nac's caches) and gets a refusal
//! naming the quota, the use and the limit.

use super::{problem, PolicyProblem};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The limits of one namespace; `None`: no limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// NonAdminBackups holding (or about to hold) a backup, scheduled runs included.
    pub max_backups: Option<u64>,
    /// NonAdminSchedules.
    pub max_schedules: Option<u64>,
    /// The key that set `max_schedules`: `quotas.maxSchedules`, or its old name `schedule.maxPerNamespace`.
    pub max_schedules_key: &'static str,
    /// NonAdminRestores created in the last hour.
    pub max_restores_per_hour: Option<u64>,
    /// Bytes the namespace's finished backups hold, as Velero reports them.
    pub max_stored_bytes: Option<u64>,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            max_backups: None,
            max_schedules: None,
            max_schedules_key: MAX_SCHEDULES,
            max_restores_per_hour: None,
            max_stored_bytes: None,
        }
    }
}

impl Quotas {
    /// One line per quota set, for `nac policy check`.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(n) = self.max_schedules {
            lines.push(format!(
                "at most {n} schedules per namespace ({})",
                self.max_schedules_key
            ));
        }
        if let Some(n) = self.max_backups {
            lines.push(format!(
                "at most {n} backups per namespace, scheduled runs included (quotas.maxBackups)"
            ));
        }
        if let Some(n) = self.max_stored_bytes {
            lines.push(format!(
                "no new backup once a namespace's backups hold {} (quotas.maxStoredBytes)",
                human_bytes(n)
            ));
        }
        if let Some(n) = self.max_restores_per_hour {
            lines.push(format!(
                "at most {n} restores per namespace an hour (quotas.maxRestoresPerHour)"
            ));
        }
        lines
    }

    /// Whether any quota limits new objects of `what`.
    pub fn limits(&self, what: Counted) -> bool {
        match what {
            Counted::Backup => self.max_backups.is_some() || self.max_stored_bytes.is_some(),
            Counted::Schedule => self.max_schedules.is_some(),
            Counted::Restore => self.max_restores_per_hour.is_some(),
        }
    }
}

pub const MAX_SCHEDULES: &str = "quotas.maxSchedules";
pub const MAX_PER_NAMESPACE: &str = "schedule.maxPerNamespace";

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawQuotas {
    max_backups: Option<u64>,
    max_schedules: Option<u64>,
    max_restores_per_hour: Option<u64>,
    /// Bytes: an integer or a Kubernetes quantity (`100Gi`, `500M`).
    max_stored_bytes: Option<Value>,
}

/// Parses the `quotas` section; `per_namespace` is the old `schedule.maxPerNamespace`, folded into
/// `quotas.maxSchedules`.
pub(super) fn parse_quotas(raw: RawQuotas, per_namespace: Option<u32>, problems: &mut Vec<PolicyProblem>) -> Quotas {
    let max_stored_bytes = raw.max_stored_bytes.and_then(|v| match bytes_value(&v) {
        Ok(b) => Some(b),
        Err(e) => {
            problems.push(problem("quotas.maxStoredBytes", e));
            None
        }
    });
    let (max_schedules, max_schedules_key) = match (raw.max_schedules, per_namespace) {
        (Some(n), Some(old)) if n != u64::from(old) => {
            problems.push(problem(
                MAX_PER_NAMESPACE,
                format!(
                    "{old} differs from quotas.maxSchedules {n}: it is the old name of quotas.maxSchedules; keep one"
                ),
            ));
            (Some(n), MAX_SCHEDULES)
        }
        (Some(n), _) => (Some(n), MAX_SCHEDULES),
        (None, Some(old)) => (Some(u64::from(old)), MAX_PER_NAMESPACE),
        (None, None) => (None, MAX_SCHEDULES),
    };
    Quotas {
        max_backups: raw.max_backups,
        max_schedules,
        max_schedules_key,
        max_restores_per_hour: raw.max_restores_per_hour,
        max_stored_bytes,
    }
}

/// Bytes from an integer or a Kubernetes quantity (decimal `k`, `M`, `G`, `T`, `P`, `E` or binary `Ki` … `Ei`).
pub fn bytes_value(v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{n} is not a number of bytes (a whole number, or a quantity such as 100Gi)")),
        Value::String(s) => parse_quantity(s),
        other => Err(format!(
            "{other} is not a number of bytes (a whole number, or a quantity such as 100Gi)"
        )),
    }
}

fn parse_quantity(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let bad = || format!("{s:?} is not a number of bytes (a whole number, or a quantity such as 100Gi or 500M)");
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => return Err(bad()),
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{s:?} is more bytes than nac can count"))
}

/// Bytes as people read them: `1.5 GiB (1610612736 bytes)`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} bytes");
    }
    let mut v = b as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {} ({b} bytes)", UNITS[i])
}

/// What a namespace uses of its quotas, counted from nac's caches, without the object being judged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub backups: u64,
    pub schedules: u64,
    pub restores_last_hour: u64,
    pub stored_bytes: u64,
}

/// Why a new object would take its namespace over a quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaRefusal {
    /// The quota's key, e.g. `quotas.maxBackups`.
    pub quota: String,
    pub message: String,
}

/// The condition reason of an object the reconciler refuses for a quota.
pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";

/// Which tenant kind is being created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    Backup,
    Schedule,
    Restore,
}

/// Whether one more object of `what` in `namespace` stays within `policy`'s quotas, given the namespace's use.
pub fn check_quota(policy: &super::Policy, what: Counted, namespace: &str, use_: &Usage) -> Result<(), QuotaRefusal> {
    let q = &policy.quotas;
    let by = policy.by();
    let over = |kind: &str, key: &str, have: String, max: String, then: &str| QuotaRefusal {
        quota: key.to_string(),
        message: format!("{kind} refused: namespace {namespace} {have}, the most {by} allows ({key}: {max}); {then}"),
    };
    match what {
        Counted::Backup => {
            if let Some(max) = q.max_backups.filter(|m| use_.backups >= *m) {
                return Err(over(
                    "NonAdminBackup",
                    "quotas.maxBackups",
                    format!("has {} NonAdminBackups holding a backup", use_.backups),
                    max.to_string(),
                    "delete one first (or wait for one to expire)",
                ));
            }
            if let Some(max) = q.max_stored_bytes.filter(|m| use_.stored_bytes >= *m) {
                return Err(QuotaRefusal {
                    quota: "quotas.maxStoredBytes".into(),
                    message: format!(
                        "NonAdminBackup refused: the backups of namespace {namespace} hold {}, at or over the limit \
                         of {} set by {by} (quotas.maxStoredBytes); delete backups or wait for them to expire",
                        human_bytes(use_.stored_bytes),
                        human_bytes(max)
                    ),
                });
            }
        }
        Counted::Schedule => {
            if let Some(max) = q.max_schedules.filter(|m| use_.schedules >= *m) {
                return Err(over(
                    "NonAdminSchedule",
                    q.max_schedules_key,
                    format!("has {} NonAdminSchedules", use_.schedules),
                    max.to_string(),
                    "delete one first",
                ));
            }
        }
        Counted::Restore => {
            if let Some(max) = q.max_restores_per_hour.filter(|m| use_.restores_last_hour >= *m) {
                return Err(over(
                    "NonAdminRestore",
                    "quotas.maxRestoresPerHour",
                    format!("made {} NonAdminRestores in the last hour", use_.restores_last_hour),
                    max.to_string(),
                    "try again later",
                ));
            }
        }
    }
    Ok(())
}

/// Annotation on a dry-run NonAdminBackup asking nac's webhook for the namespace's tier and quota use
/// (`kubectl nac status`).
pub const STATUS_PROBE_ANNOTATION: &str = "nac.oadp.openshift.io/status-probe";

/// A namespace's tier and each quota's use and limit, as `kubectl nac status` reads them; `usage` `None`: not
/// counted yet.
/// `objective`: the recovery-point objective the namespace is tracked against, if any.
pub fn status_json(
    policy: &super::Policy,
    namespace: &str,
    usage: Option<&Usage>,
    objective: Option<crate::duration::GoDuration>,
) -> Value {
    let q = &policy.quotas;
    let row = |key: &str, used: Option<u64>, limit: Option<u64>| serde_json::json!({"quota": key, "use": used, "limit": limit});
    serde_json::json!({
        "namespace": namespace,
        "tier": policy.tier,
        "quotas": [
            row("quotas.maxBackups", usage.map(|u| u.backups), q.max_backups),
            row(q.max_schedules_key, usage.map(|u| u.schedules), q.max_schedules),
            row("quotas.maxRestoresPerHour", usage.map(|u| u.restores_last_hour), q.max_restores_per_hour),
            row("quotas.maxStoredBytes", usage.map(|u| u.stored_bytes), q.max_stored_bytes),
        ],
        "recoveryPointObjective": objective.map(|d| d.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Policy;
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_are_bytes() {
        for (v, want) in [
            (json!(1000), 1000),
            (json!("1000"), 1000),
            (json!("1Ki"), 1024),
            (json!("10Gi"), 10 << 30),
            (json!("5G"), 5_000_000_000),
            (json!("500M"), 500_000_000),
        ] {
            assert_eq!(bytes_value(&v), Ok(want), "{v}");
        }
        for bad in [
            json!("1.5Gi"),
            json!("10 GB"),
            json!("-1"),
            json!(-1),
            json!(true),
            json!("99999999999Ei"),
        ] {
            assert!(bytes_value(&bad).is_err(), "{bad}");
        }
        assert_eq!(human_bytes(1536 << 20), "1.5 GiB (1610612736 bytes)");
        assert_eq!(human_bytes(12), "12 bytes");
    }

    #[test]
    fn each_quota_refuses_at_its_limit_naming_use_and_limit() {
        let p = Policy::parse("quotas: {maxBackups: 2, maxSchedules: 1, maxRestoresPerHour: 3, maxStoredBytes: 1Gi}")
            .unwrap();
        let under = Usage {
            backups: 1,
            schedules: 0,
            restores_last_hour: 2,
            stored_bytes: (1 << 30) - 1,
        };
        for what in [Counted::Backup, Counted::Schedule, Counted::Restore] {
            assert_eq!(check_quota(&p, what, "team-a", &under), Ok(()), "{what:?}");
        }
        let at = Usage {
            backups: 2,
            schedules: 1,
            restores_last_hour: 3,
            stored_bytes: 1 << 30,
        };
        let e = check_quota(&p, Counted::Backup, "team-a", &at).unwrap_err();
        assert_eq!(e.quota, "quotas.maxBackups");
        assert_eq!(
            e.message,
            "NonAdminBackup refused: namespace team-a has 2 NonAdminBackups holding a backup, the most cluster \
             policy allows (quotas.maxBackups: 2); delete one first (or wait for one to expire)"
        );
        let e = check_quota(
            &p,
            Counted::Backup,
            "team-a",
            &Usage {
                backups: 0,
                ..at.clone()
            },
        )
        .unwrap_err();
        assert_eq!(e.quota, "quotas.maxStoredBytes");
        assert!(
            e.message
                .contains("hold 1.0 GiB (1073741824 bytes), at or over the limit of 1.0 GiB"),
            "{}",
            e.message
        );
        let e = check_quota(&p, Counted::Schedule, "team-a", &at).unwrap_err();
        assert_eq!(
            e.message,
            "NonAdminSchedule refused: namespace team-a has 1 NonAdminSchedules, the most cluster policy allows \
             (quotas.maxSchedules: 1); delete one first"
        );
        let e = check_quota(&p, Counted::Restore, "team-a", &at).unwrap_err();
        assert_eq!(e.quota, "quotas.maxRestoresPerHour");
        assert!(
            e.message.contains("made 3 NonAdminRestores in the last hour"),
            "{}",
            e.message
        );
        // No quotas: nothing is counted against.
        let none = Policy::parse("").unwrap();
        let huge = Usage {
            backups: 1 << 40,
            schedules: 1 << 40,
            restores_last_hour: 1 << 40,
            stored_bytes: u64::MAX,
        };
        for what in [Counted::Backup, Counted::Schedule, Counted::Restore] {
            assert_eq!(check_quota(&none, what, "ns", &huge), Ok(()));
        }
    }

    #[test]
    fn the_old_schedule_key_is_an_alias_named_in_refusals() {
        let p = Policy::parse("schedule: {maxPerNamespace: 3}").unwrap();
        assert_eq!(p.quotas.max_schedules, Some(3));
        let e = check_quota(
            &p,
            Counted::Schedule,
            "full",
            &Usage {
                schedules: 3,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.message.contains("(schedule.maxPerNamespace: 3)"), "{}", e.message);
        assert_eq!(
            Policy::parse("schedule: {maxPerNamespace: 3}\nquotas: {maxSchedules: 3}")
                .unwrap()
                .quotas
                .max_schedules,
            Some(3)
        );
        let e = Policy::parse("schedule: {maxPerNamespace: 3}\nquotas: {maxSchedules: 4}").unwrap_err();
        assert_eq!(e.0[0].field, "schedule.maxPerNamespace");
        for bad in [
            "quotas: {maxStoredBytes: lots}",
            "quotas: {maxBackups: -1}",
            "quotas: {maxBytes: 1}",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tier_sets_its_own_quotas() {
        let p = std::sync::Arc::new(
            Policy::parse(
                "quotas: {maxBackups: 10}\ntiers:\n- name: small\n  namespaceSelector: {matchLabels: {size: s}}\n  \
                 quotas: {maxBackups: 1}\n",
            )
            .unwrap(),
        );
        let small = p.for_labels(&[("size".to_string(), "s".to_string())].into());
        let use_ = Usage {
            backups: 1,
            ..Default::default()
        };
        let e = check_quota(&small, Counted::Backup, "ns", &use_).unwrap_err();
        assert!(
            e.message
                .contains("the most cluster policy tier \"small\" allows (quotas.maxBackups: 1)"),
            "{}",
            e.message
        );
        assert_eq!(check_quota(&p, Counted::Backup, "ns", &use_), Ok(()));
    }
}
