//! Velero's backup queue standing still. Velero 1.18 lines backups up and starts the next when one ends (and
//! looks again once a minute). Two things stop it for good: Velero down, and in Velero 1.18.0 to 1.18.3 its
//! in-memory count of running backups keeping one that is gone (velero#10519: a backup deleted the moment it
//! became ready to start, or one that finished before the queue had counted it). Then every tenant's backup waits,
//! `Queued`, with nothing to say why, until the Velero server restarts.
//!
//! nac sees all of Velero's Backups (its queue index counts the admins' too), so it tells: once the queue has
//! stood still for `controllers.queue_stall_secs` (backups queued, none starting, running or ending), a warning
//! in the log, `nac_velero_backup_queue_stalled` at 1, and a `VeleroQueueStalled` Event on each NonAdminBackup
//! among the first [`EXACT_POSITIONS`] in line, once per standstill (one queued later is told at the next look).
//! When the queue moves again, the gauge goes back to 0.

use crate::api::NonAdminBackup;
use crate::controller::context::Shared;
use crate::controller::events::Note;
use crate::controller::index::queue::{Standstill, EXACT_POSITIONS};
use crate::controller::tenant::KindState;
use crate::naming::NAB;
use kube::runtime::reflector::ObjectRef;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Reason of the Event on a waiting NonAdminBackup.
pub const REASON: &str = "VeleroQueueStalled";

/// Looks at Velero's backup queue (the NonAdminBackups' `state`) every sixth of `queue_stall` (1 to 30 s) until
/// `stop`.
pub async fn watch(ctx: &Shared, state: &KindState<NonAdminBackup>, stop: CancellationToken) {
    let after = ctx.opts.queue_stall;
    if after.is_zero() {
        return;
    }
    let every = (after / 6).clamp(Duration::from_secs(1), Duration::from_secs(30));
    // The standstill reported, by when it began, and the Velero Backups whose tenants were told of it: one queued
    // after the report is told at the next look.
    let mut reported: Option<Instant> = None;
    let mut told = std::collections::HashSet::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => break,
        }
        let still = state.queue.lock().expect("queue lock").standstill();
        match still {
            Some(s) if reported == Some(s.since) => tell(ctx, state, &s, &mut told),
            Some(s) if s.since.elapsed() >= after => {
                reported = Some(s.since);
                told.clear();
                ctx.metrics.queue_stalled.set(1);
                report(&s);
                tell(ctx, state, &s, &mut told);
            }
            _ => {
                if reported.take().is_some() {
                    ctx.metrics.queue_stalled.set(0);
                    tracing::info!("Velero's backup queue moves again");
                }
            }
        }
    }
    // The next leader judges for itself.
    ctx.metrics.queue_stalled.set(0);
}

fn report(s: &Standstill) {
    let waited = Duration::from_secs(s.since.elapsed().as_secs());
    let n = s.queued.len();
    tracing::warn!(
        queued = n,
        first = %s.queued[..n.min(EXACT_POSITIONS as usize)].join(", "),
        "Velero's backup queue has not moved for {waited:?}: backups are queued and none runs. Velero is down, or \
         its count of running backups is stuck (velero#10519, Velero 1.18.0 to 1.18.3): restart the Velero server"
    );
}

/// A `VeleroQueueStalled` Event on each NonAdminBackup among the first in line not `told` of this standstill yet.
fn tell(ctx: &Shared, state: &KindState<NonAdminBackup>, s: &Standstill, told: &mut std::collections::HashSet<String>) {
    let waited = Duration::from_secs(s.since.elapsed().as_secs());
    let n = s.queued.len();
    for (i, name) in s.queued.iter().take(EXACT_POSITIONS as usize).enumerate() {
        if told.contains(name) {
            continue;
        }
        let Some(velero) = state.velero.get(&ctx.velero_ref(name)) else {
            // An admin's backup: the log and the gauge tell the admin.
            continue;
        };
        let Some(nab) = NAB
            .owner::<NonAdminBackup>(&*velero)
            .and_then(|r: ObjectRef<NonAdminBackup>| state.objects.get(&r))
        else {
            continue;
        };
        told.insert(name.clone());
        ctx.publish(&*nab, vec![note(waited, i + 1, n)]);
    }
}

/// What a waiting tenant is told.
pub fn note(waited: Duration, position: usize, queued: usize) -> Note {
    Note {
        warning: true,
        reason: REASON.into(),
        message: format!(
            "Velero has started no backup for {waited:?}: {queued} wait in its queue, this one at position \
             {position}, and none runs. Velero is down or stuck; the cluster admin restarts the Velero server"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_is_told_where_its_backup_waits_and_who_can_help() {
        let n = note(Duration::from_secs(180), 2, 5);
        assert!(n.warning);
        assert_eq!(n.reason, "VeleroQueueStalled");
        assert_eq!(
            n.message,
            "Velero has started no backup for 180s: 5 wait in its queue, this one at position 2, and none runs. \
             Velero is down or stuck; the cluster admin restarts the Velero server"
        );
    }
}
