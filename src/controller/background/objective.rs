//! The recovery-point objective, watched: every few seconds the leader looks at each namespace the policy tracks
//! (a tier with `recoveryPointObjective`, or the base's for namespaces that use nac), sets the
//! `nac_namespace_*` gauges, and when a breach starts publishes one `RecoveryPointObjectiveBreached` Event in the
//! namespace. All from nac's caches (namespace labels, the NonAdminBackups' usage index): no read.

use crate::controller::context::Shared;
use crate::controller::events::Note;
use crate::metrics::TrackedLabels;
use crate::policy::objective::{self, Standing};
use k8s_openapi::api::core::v1::ObjectReference;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the namespaces are looked at: a breach shows within this of its start.
const EVERY: Duration = Duration::from_secs(5);

/// Watches until `stop` (leadership lost), then clears the gauges: the next leader reports.
pub async fn watch(ctx: &Shared, stop: CancellationToken) {
    let mut exported: BTreeMap<TrackedLabels, ()> = BTreeMap::new();
    // The breach each namespace was last announced for (its start; `None`: no completed backup).
    let mut announced: HashMap<String, Option<i64>> = HashMap::new();
    loop {
        let now = jiff::Timestamp::now().as_second();
        let standings = survey(ctx, now);
        let current: BTreeMap<TrackedLabels, ()> = standings.iter().map(|(l, ..)| (l.clone(), ())).collect();
        for gone in exported.keys().filter(|l| !current.contains_key(*l)) {
            forget(ctx, gone);
        }
        exported = current;
        for (labels, s, newest) in &standings {
            let m = &ctx.metrics;
            m.objective_seconds
                .get_or_create(labels)
                .set(s.objective.as_std().as_secs() as i64);
            m.objective_breached.get_or_create(labels).set(i64::from(s.breached));
            match s.age {
                Some(age) => {
                    m.last_backup_age.get_or_create(labels).set(age);
                }
                None => {
                    m.last_backup_age.remove(labels);
                }
            }
            let ns = &labels.namespace;
            if !s.breached {
                announced.remove(ns);
            } else if announced.get(ns) != Some(&s.since) {
                announced.insert(ns.clone(), s.since);
                announce(ctx, ns, s, newest.as_deref()).await;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            () = stop.cancelled() => break,
        }
    }
    for l in exported.keys() {
        forget(ctx, l);
    }
}

fn forget(ctx: &Shared, l: &TrackedLabels) {
    ctx.metrics.objective_seconds.remove(l);
    ctx.metrics.objective_breached.remove(l);
    ctx.metrics.last_backup_age.remove(l);
}

/// Each tracked namespace's standing and its newest completed backup's name; empty until the namespace labels
/// and the usage index have read their first lists (a namespace is not judged on half a picture).
fn survey(ctx: &Shared, now: i64) -> Vec<(TrackedLabels, Standing, Option<String>)> {
    let (Some(base), Some(namespaces), Some(usage)) =
        (ctx.policy.current(), ctx.policy.namespaces(), ctx.policy.usage())
    else {
        return Vec::new();
    };
    let any = base.recovery_point_objective.is_some()
        || base.tiers.iter().any(|t| t.policy.recovery_point_objective.is_some());
    if !any || !namespaces.synced() || !usage.synced() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (ns, labels) in namespaces.all() {
        let policy = base.for_labels(&labels);
        let Some(d) = objective::tracked(&policy, usage.uses_nac(&ns)) else {
            continue;
        };
        let newest = usage.newest_completed(&ns);
        let s = objective::standing(d, newest.as_ref().map(|(t, _)| *t), now);
        let labels = TrackedLabels {
            namespace: ns,
            tier: policy.tier.clone().unwrap_or_default(),
        };
        out.push((labels, s, newest.map(|(_, n)| n)));
    }
    out
}

/// One Warning Event in the namespace, on the Namespace, named after the breach (namespace and start): a new
/// leader that finds the breach already announced publishes nothing.
async fn announce(ctx: &Shared, ns: &str, s: &Standing, newest: Option<&str>) {
    let Some(base) = ctx.policy.current() else {
        return;
    };
    let labels = ctx.policy.namespaces().and_then(|n| n.labels(ns)).unwrap_or_default();
    let policy = base.for_labels(&labels);
    let note = Note {
        warning: true,
        reason: objective::BREACHED.to_string(),
        message: objective::breach_message(ns, &policy, s, newest),
    };
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Namespace".into()),
        name: Some(ns.to_string()),
        // The Event lives in the namespace itself, where its users list Events.
        namespace: Some(ns.to_string()),
        ..Default::default()
    };
    // A stable digest: leaders of other builds name the same breach alike.
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{ns}/{:?}", s.since));
    let name = format!("{ns}.rpo-{}", hex16(&digest));
    ctx.metrics.write("Event");
    match ctx.recorder.publish_once(&note, &regarding, &name).await {
        Ok(true) => tracing::info!(namespace = ns, "{}", note.message),
        Ok(false) => {}
        Err(e) => tracing::warn!(namespace = ns, error = %e, "publishing the recovery-point breach failed"),
    }
}

fn hex16(b: &[u8]) -> String {
    b.iter().take(8).map(|x| format!("{x:02x}")).collect()
}
