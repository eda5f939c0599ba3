//! `kubectl nac status`: the namespace's policy tier, each quota's use and limit, and its newest completed backup
//! with its age. Nothing beyond the namespace: the tier and quotas come from nac's webhook answering a dry-run
//! create in this namespace (a tenant cannot read the policy), the backups from the namespace's own list.

use super::{kinds, Error, Result, Session};
use serde_json::{json, Value};

/// Asks nac and prints the namespace's status.
pub async fn status(s: &Session) -> Result<()> {
    let probe = json!({
        "apiVersion": "oadp.openshift.io/v1alpha1",
        "kind": "NonAdminBackup",
        "metadata": {
            // A name of its own (a dry run stores nothing; webhooks see no name of a generateName create).
            "name": format!("nac-status-{:x}", jiff::Timestamp::now().as_nanosecond() & 0xff_ffff_ffff),
            "annotations": {crate::policy::STATUS_PROBE_ANNOTATION: "true"}
        },
        "spec": {"backupSpec": {}}
    });
    let req = axum::http::Request::post(format!("{}?dryRun=All", s.path(&kinds::BACKUP, None)))
        .header("content-type", "application/json");
    let (_, warnings) = s.send(req, &probe, "asking nac for the namespace's status").await?;
    let answer = warnings
        .iter()
        .find_map(|w| w.strip_prefix("nac-status: "))
        .and_then(|j| serde_json::from_str::<Value>(j).ok())
        .ok_or_else(|| {
            Error::Api("nac's webhook gave no status for this namespace (is nac older than this plugin?)".into())
        })?;
    let backups = s.list(&kinds::BACKUP, None).await?;
    print!("{}", render(&s.namespace, &answer, &backups, jiff::Timestamp::now()));
    Ok(())
}

/// The report (pure): `answer` is nac's `nac-status` JSON, `backups` the namespace's NonAdminBackups.
pub fn render(namespace: &str, answer: &Value, backups: &[Value], now: jiff::Timestamp) -> String {
    let mut out = format!("Namespace:  {namespace}\n");
    if let Some(e) = answer["error"].as_str() {
        out.push_str(&format!("Policy:     unknown: {e}\n"));
    } else {
        let tier = answer["tier"]
            .as_str()
            .map_or("(none: the base policy)".to_string(), |t| format!("{t:?}"));
        out.push_str(&format!("Tier:       {tier}\n"));
        out.push_str("Quotas:\n");
        for q in answer["quotas"].as_array().into_iter().flatten() {
            let key = q["quota"].as_str().unwrap_or_default();
            let bytes = key.ends_with("StoredBytes");
            let show = |v: &Value| match v.as_u64() {
                Some(n) if bytes => crate::policy::quotas::human_bytes(n),
                Some(n) => n.to_string(),
                None => String::new(),
            };
            let used = if q["use"].is_null() {
                "not counted yet".to_string()
            } else {
                show(&q["use"])
            };
            let limit = if q["limit"].is_null() {
                "no limit".to_string()
            } else {
                show(&q["limit"])
            };
            out.push_str(&format!("  {key:<28} {used} of {limit}\n"));
        }
    }
    let newest = backups
        .iter()
        .filter(|b| b["status"]["veleroBackup"]["status"]["phase"] == "Completed")
        .filter_map(|b| {
            let done = b["status"]["veleroBackup"]["status"]["completionTimestamp"].as_str()?;
            Some((done.parse::<jiff::Timestamp>().ok()?, b["metadata"]["name"].as_str()?))
        })
        .max();
    match newest {
        Some((at, name)) => {
            let age = now.duration_since(at).as_secs().max(0);
            out.push_str(&format!(
                "Newest completed backup: {name}, completed {at} ({} ago)\n",
                age_text(age)
            ));
        }
        None => out.push_str("Newest completed backup: none\n"),
    }
    let objective = answer["recoveryPointObjective"]
        .as_str()
        .and_then(|d| crate::duration::GoDuration::parse(d).ok());
    if let Some(objective) = objective {
        // As nac names who set a rule (the answer carries no quotes: a warning header would escape them).
        let by = answer["tier"]
            .as_str()
            .map_or("cluster policy".to_string(), |t| format!("cluster policy tier {t:?}"));
        let s = crate::policy::objective::standing(objective, newest.map(|(at, _)| at.as_second()), now.as_second());
        let verdict = match s.age {
            _ if !s.breached => "met".to_string(),
            Some(age) => format!("BREACHED: the newest completed backup is {} old", age_text(age)),
            None => "BREACHED: no completed backup".to_string(),
        };
        out.push_str(&format!(
            "Recovery point objective: {objective} (set by {by}): {verdict}\n"
        ));
    } else if answer["error"].is_null() {
        out.push_str("Recovery point objective: none (not tracked)\n");
    }
    out
}

/// An age as `3d4h`, `2h5m`, `40s`.
fn age_text(secs: i64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{}s", secs % 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::GoDuration;

    fn nab(name: &str, phase: &str, done: &str) -> Value {
        json!({"metadata": {"name": name}, "status": {"veleroBackup": {"status": {
            "phase": phase, "completionTimestamp": done}}}})
    }

    #[test]
    fn the_report_names_the_tier_each_quota_and_the_newest_completed_backup() {
        let policy = std::sync::Arc::new(
            crate::policy::Policy::parse(
                "quotas: {maxBackups: 5, maxStoredBytes: 1Gi}\ntiers:\n- name: gold\n  namespaceSelector: {}\n  \
                 quotas: {maxBackups: 10, maxStoredBytes: 10Gi}\n",
            )
            .unwrap(),
        );
        let gold = policy.for_labels(&Default::default());
        let usage = crate::policy::Usage {
            backups: 3,
            stored_bytes: 1536 << 20,
            ..Default::default()
        };
        let answer =
            crate::policy::quotas::status_json(&gold, "team-a", Some(&usage), Some(GoDuration::from_secs(86_400)));
        let now: jiff::Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let out = render(
            "team-a",
            &answer,
            &[
                nab("old", "Completed", "2026-11-26T11:00:00Z"),
                nab("new", "Completed", "2026-11-28T10:00:00Z"),
                nab("failed", "Failed", "2026-11-29T11:00:00Z"),
            ],
            now,
        );
        assert_eq!(
            out,
            "Namespace:  team-a\nTier:       \"gold\"\nQuotas:\n  quotas.maxBackups            3 of 10\n  \
             quotas.maxSchedules          0 of no limit\n  quotas.maxRestoresPerHour    0 of no limit\n  \
             quotas.maxStoredBytes        1.5 GiB (1610612736 bytes) of 10.0 GiB (10737418240 bytes)\n\
             Newest completed backup: new, completed 2026-11-28T10:00:00Z (1d2h ago)\n\
             Recovery point objective: 24h0m0s (set by cluster policy tier \"gold\"): BREACHED: the newest completed \
             backup is 1d2h old\n"
        );
        let met =
            crate::policy::quotas::status_json(&gold, "team-a", Some(&usage), Some(GoDuration::from_secs(2 * 86_400)));
        let out = render("team-a", &met, &[nab("new", "Completed", "2026-11-28T10:00:00Z")], now);
        assert!(
            out.ends_with("Recovery point objective: 48h0m0s (set by cluster policy tier \"gold\"): met\n"),
            "{out}"
        );
        let none = render("team-a", &answer, &[], now);
        assert!(
            none.ends_with("24h0m0s (set by cluster policy tier \"gold\"): BREACHED: no completed backup\n"),
            "{none}"
        );
        let base = crate::policy::quotas::status_json(&crate::policy::Policy::parse("").unwrap(), "ns", None, None);
        let out = render("ns", &base, &[], now);
        assert!(out.contains("Tier:       (none: the base policy)"), "{out}");
        assert!(
            out.contains("quotas.maxBackups            not counted yet of no limit"),
            "{out}"
        );
        assert!(
            out.ends_with("Newest completed backup: none\nRecovery point objective: none (not tracked)\n"),
            "{out}"
        );
    }
}
