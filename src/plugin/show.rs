//! Output: tables in the shape of `velero ... get`, descriptions in the shape of `velero ... describe`, and
//! `-o json|yaml`.

use super::kinds::Kind;
use super::{Error, Result};
use serde_json::Value;
use std::fmt::Write;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    #[default]
    Table,
    Json,
    Yaml,
}

/// Objects as JSON or YAML: one object as itself, several as a `List`, as kubectl prints them.
pub fn structured(objects: &[Value], output: Output) -> Result<String> {
    let v = match objects {
        [one] => one.clone(),
        many => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": many}),
    };
    match output {
        Output::Json => serde_json::to_string_pretty(&v)
            .map(|s| s + "\n")
            .map_err(|e| Error::User(e.to_string())),
        Output::Yaml => serde_yaml::to_string(&v).map_err(|e| Error::User(e.to_string())),
        Output::Table => unreachable!("tables are printed by the caller"),
    }
}

/// Columns padded to their widest cell, three spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let last = cells.len() - 1;
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                let _ = write!(out, "{c:<w$}   ");
            }
        }
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// A table of `items` (one row each, in order) with their namespaces as a first column.
pub fn with_namespace_column(items: &[Value], table: &str) -> String {
    let namespaces: Vec<String> = std::iter::once("NAMESPACE".to_string())
        .chain(items.iter().map(|o| s(&o["metadata"]["namespace"])))
        .collect();
    let width = namespaces.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (ns, line) in namespaces.iter().zip(table.lines()) {
        let _ = writeln!(out, "{ns:<width$}   {line}");
    }
    out
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn or_none(v: &Value) -> String {
    match s(v) {
        x if x.is_empty() => "<none>".into(),
        x => x,
    }
}

fn list(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a.iter().map(s).collect::<Vec<_>>().join(", "),
        _ => String::new(),
    }
}

/// A label selector as `k=v,k2 in (a,b)`.
pub fn selector(v: &Value) -> String {
    let mut parts: Vec<String> = v["matchLabels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(v))).collect())
        .unwrap_or_default();
    for e in v["matchExpressions"].as_array().into_iter().flatten() {
        let key = s(&e["key"]);
        let values = list(&e["values"]).replace(", ", ",");
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key,
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({values})"),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

/// `velero backup get`'s table.
pub fn backups(items: &[Value], kind: &Kind) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|o| {
            let vs = kind.velero_status(o);
            let spec = &o["spec"]["backupSpec"];
            vec![
                s(&o["metadata"]["name"]),
                kind.phase(o).to_string(),
                vs["errors"].as_i64().unwrap_or(0).to_string(),
                vs["warnings"].as_i64().unwrap_or(0).to_string(),
                s(&o["metadata"]["creationTimestamp"]),
                expires(&vs["expiration"]),
                or_default(&spec["storageLocation"]),
                selector(&spec["labelSelector"]),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "STATUS",
            "ERRORS",
            "WARNINGS",
            "CREATED",
            "EXPIRES",
            "STORAGE LOCATION",
            "SELECTOR",
        ],
        &rows,
    )
}

/// `velero restore get`'s table.
pub fn restores(items: &[Value], kind: &Kind) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|o| {
            let vs = kind.velero_status(o);
            vec![
                s(&o["metadata"]["name"]),
                s(&o["spec"]["restoreSpec"]["backupName"]),
                kind.phase(o).to_string(),
                or_none(&vs["startTimestamp"]),
                or_none(&vs["completionTimestamp"]),
                vs["errors"].as_i64().unwrap_or(0).to_string(),
                vs["warnings"].as_i64().unwrap_or(0).to_string(),
                s(&o["metadata"]["creationTimestamp"]),
                selector(&o["spec"]["restoreSpec"]["labelSelector"]),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "BACKUP",
            "STATUS",
            "STARTED",
            "COMPLETED",
            "ERRORS",
            "WARNINGS",
            "CREATED",
            "SELECTOR",
        ],
        &rows,
    )
}

/// When a schedule's last backup started: `status.lastBackup` is OADP's object (the newest run); nac wrote the time
/// alone before, and Velero's Schedule has it too.
fn last_backup_time(st: &Value) -> String {
    match &st["lastBackup"] {
        Value::String(t) => t.clone(),
        b => [&b["startTimestamp"], &st["veleroSchedule"]["status"]["lastBackup"]]
            .into_iter()
            .map(s)
            .find(|t| !t.is_empty())
            .unwrap_or_default(),
    }
}

/// `velero schedule get`'s table.
pub fn schedules(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|o| {
            let st = &o["status"];
            vec![
                s(&o["metadata"]["name"]),
                st["phase"].as_str().unwrap_or("New").to_string(),
                s(&o["metadata"]["creationTimestamp"]),
                s(&o["spec"]["schedule"]),
                or_none(&o["spec"]["template"]["backupSpec"]["ttl"]),
                or_none(&Value::String(last_backup_time(st))),
                or_none(&st["nextRun"]),
                o["spec"]["paused"].as_bool().unwrap_or(false).to_string(),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "STATUS",
            "CREATED",
            "SCHEDULE",
            "BACKUP TTL",
            "LAST BACKUP",
            "NEXT RUN",
            "PAUSED",
        ],
        &rows,
    )
}

fn approved(o: &Value) -> String {
    o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "ClusterAdminApproved")
        .map_or("<pending>".into(), |c| s(&c["status"]))
}

/// A location spec's `config`, as `key=value, ...`.
pub(super) fn config_list(spec: &Value) -> String {
    key_values(&spec["config"], ", ")
}

/// An object's entries as `key=value`, joined by `sep` (empty for anything but an object).
fn key_values(v: &Value, sep: &str) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", s(v)))
                .collect::<Vec<_>>()
                .join(sep)
        })
        .unwrap_or_default()
}

/// A location spec's `bucket/prefix` (the bucket alone without a prefix).
pub(super) fn bucket_prefix(spec: &Value) -> String {
    let (bucket, prefix) = (s(&spec["objectStorage"]["bucket"]), s(&spec["objectStorage"]["prefix"]));
    if prefix.is_empty() {
        bucket
    } else {
        format!("{bucket}/{prefix}")
    }
}

/// `velero backup-location get`'s table, with the admin's approval.
pub fn locations(items: &[Value], kind: &Kind) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|o| {
            let spec = &o["spec"]["backupStorageLocationSpec"];
            vec![
                s(&o["metadata"]["name"]),
                s(&spec["provider"]),
                bucket_prefix(spec),
                kind.phase(o).to_string(),
                approved(o),
                or_none(&kind.velero_status(o)["lastValidationTime"]),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "PROVIDER",
            "BUCKET/PREFIX",
            "PHASE",
            "APPROVED",
            "LAST VALIDATED",
        ],
        &rows,
    )
}

/// `velero backup-location describe`, for a NonAdminBackupStorageLocation.
pub fn describe_location(o: &Value, kind: &Kind) -> String {
    let mut out = String::new();
    head(&mut out, o, kind);
    let spec = &o["spec"]["backupStorageLocationSpec"];
    let _ = writeln!(out, "\nApproved by the cluster admin:  {}", approved(o));
    let _ = writeln!(out, "\nProvider:  {}", s(&spec["provider"]));
    let _ = writeln!(out, "Bucket/prefix:  {}", bucket_prefix(spec));
    let _ = writeln!(out, "Config:  {}", or_none(&Value::String(config_list(spec))));
    let _ = writeln!(
        out,
        "Credential:  secret {} key {}",
        or_none(&spec["credential"]["name"]),
        or_none(&spec["credential"]["key"])
    );
    let vs = kind.velero_status(o);
    let _ = writeln!(
        out,
        "\nVelero location:  {}",
        or_none(&o["status"]["veleroBackupStorageLocation"]["name"])
    );
    let _ = writeln!(out, "Last validated:  {}", or_none(&vs["lastValidationTime"]));
    if let Some(m) = vs["message"].as_str() {
        let _ = writeln!(out, "Message:  {m}");
    }
    conditions(&mut out, o);
    out
}

/// `2026-12-25T00:00:00Z` as "29d", "5h", "expired".
fn expires(v: &Value) -> String {
    let Some(t) = v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "n/a".into();
    };
    let left = t.duration_since(jiff::Timestamp::now()).as_secs();
    match left {
        l if l <= 0 => "expired".into(),
        l if l >= 86_400 => format!("{}d", l / 86_400),
        l if l >= 3_600 => format!("{}h", l / 3_600),
        l => format!("{}m", (l / 60).max(1)),
    }
}

fn conditions(out: &mut String, o: &Value) {
    let cs = o["status"]["conditions"].as_array().cloned().unwrap_or_default();
    if cs.is_empty() {
        return;
    }
    out.push_str("\nConditions:\n");
    for c in cs {
        let _ = writeln!(
            out,
            "  {}={} ({}): {}",
            s(&c["type"]),
            s(&c["status"]),
            s(&c["reason"]),
            s(&c["message"])
        );
    }
}

fn head(out: &mut String, o: &Value, kind: &Kind) {
    let _ = writeln!(out, "Name:         {}", s(&o["metadata"]["name"]));
    let _ = writeln!(out, "Namespace:    {}", s(&o["metadata"]["namespace"]));
    let labels = Some(key_values(&o["metadata"]["labels"], "\n              "))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "<none>".into());
    let _ = writeln!(out, "Labels:       {labels}");
    let _ = writeln!(out, "\nPhase:  {}", kind.phase(o));
    let _ = writeln!(
        out,
        "  {kind} phase:  {}",
        o["status"]["phase"].as_str().unwrap_or("New"),
        kind = kind.kind
    );
    if let Some(p) = o["status"]["queueInfo"]["estimatedQueuePosition"]
        .as_i64()
        .filter(|p| *p > 0)
    {
        let _ = writeln!(out, "  Queue position:  {p} (estimated)");
    }
}

/// The namespace and resource filters of `spec`, each line behind `indent`. `asked`: the resources the user
/// excluded, when `spec` is the Velero spec nac made (the rest of its exclusions are nac's: shown as a count).
fn spec_filters(out: &mut String, spec: &Value, indent: &str, asked: Option<&Value>) {
    let _ = writeln!(out, "\n{indent}Namespaces:");
    let _ = writeln!(out, "{indent}  Included:  {}", or_star(&spec["includedNamespaces"]));
    let _ = writeln!(
        out,
        "{indent}  Excluded:  {}",
        or_none(&Value::String(list(&spec["excludedNamespaces"])))
    );
    let _ = writeln!(out, "\n{indent}Resources:");
    let _ = writeln!(out, "{indent}  Included:  {}", or_star(&spec["includedResources"]));
    let excluded: Vec<String> = spec["excludedResources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    match asked {
        Some(asked) => {
            let asked: Vec<String> = asked.as_array().into_iter().flatten().map(s).collect();
            let _ = writeln!(
                out,
                "{indent}  Excluded:  {}",
                or_none(&Value::String(asked.join(", ")))
            );
            let nacs = excluded.iter().filter(|e| !asked.contains(e)).count();
            if nacs > 0 {
                let _ = writeln!(
                    out,
                    "{indent}  Left out by nac:  {nacs} kinds (nac's own, cluster security kinds, and kinds you may \
                     not list; -o yaml lists them)"
                );
            }
        }
        None => {
            let _ = writeln!(
                out,
                "{indent}  Excluded:  {}",
                or_none(&Value::String(excluded.join(", ")))
            );
        }
    }
    let _ = writeln!(out, "\n{indent}Label selector:  {}", selector(&spec["labelSelector"]));
}

fn or_star(v: &Value) -> String {
    match list(v) {
        x if x.is_empty() => "*".into(),
        x => x,
    }
}

/// `velero backup describe`, for a NonAdminBackup (its Velero Backup's spec as nac made it, when there is one).
pub fn describe_backup(o: &Value, kind: &Kind, resources: Option<&Value>) -> String {
    let mut out = String::new();
    head(&mut out, o, kind);
    let vs = kind.velero_status(o);
    let spec = match &o["status"]["veleroBackup"]["spec"] {
        Value::Null => &o["spec"]["backupSpec"],
        v => v,
    };
    let _ = writeln!(out, "\nErrors:    {}", vs["errors"].as_i64().unwrap_or(0));
    let _ = writeln!(out, "Warnings:  {}", vs["warnings"].as_i64().unwrap_or(0));
    if let Some(r) = vs["failureReason"].as_str() {
        let _ = writeln!(out, "Failure reason:  {r}");
    }
    spec_filters(&mut out, spec, "", Some(&o["spec"]["backupSpec"]["excludedResources"]));
    let _ = writeln!(
        out,
        "\nStorage Location:  {}",
        or_default(&o["spec"]["backupSpec"]["storageLocation"])
    );
    let _ = writeln!(
        out,
        "\nVelero Backup:  {}",
        or_none(&o["status"]["veleroBackup"]["name"])
    );
    let _ = writeln!(out, "TTL:  {}", or_none(&spec["ttl"]));
    let _ = writeln!(out, "\nSnapshot volumes:  {}", or_auto(&spec["snapshotVolumes"]));
    let _ = writeln!(
        out,
        "Default volumes to fs backup:  {}",
        or_auto(&spec["defaultVolumesToFsBackup"])
    );
    let _ = writeln!(out, "Snapshot move data:  {}", or_auto(&spec["snapshotMoveData"]));
    if let Some(u) = o["status"]["uploaderType"].as_str() {
        let _ = writeln!(out, "Uploader type:  {u}");
    }
    volume_data(&mut out, &o["status"]);
    let _ = writeln!(out, "\nStarted:    {}", or_none(&vs["startTimestamp"]));
    let _ = writeln!(out, "Completed:  {}", or_none(&vs["completionTimestamp"]));
    let _ = writeln!(out, "\nExpiration:  {}", or_none(&vs["expiration"]));
    progress(&mut out, vs, "backed up", "itemsBackedUp");
    if o["spec"]["deleteBackup"] == true {
        out.push_str("\nDeletion requested (spec.deleteBackup): the backup and its data are being deleted\n");
    }
    conditions(&mut out, o);
    match resources {
        Some(list) => {
            out.push_str("\nResource List:\n");
            if let Some(m) = list.as_object() {
                for (kind, items) in m {
                    let _ = writeln!(out, "  {kind}:");
                    for i in items.as_array().into_iter().flatten() {
                        let _ = writeln!(out, "    - {}", s(i));
                    }
                }
            }
        }
        None if kind.phase(o) == "Completed" || kind.phase(o) == "PartiallyFailed" => {
            out.push_str("\nResource List:  <use --details for the list of resources in the backup>\n")
        }
        None => {}
    }
    out
}

/// The bytes of volume data copied of the total (nac's sum over the backup's DataUploads and PodVolumeBackups,
/// which the tenant cannot read), and the data mover's uploads by phase.
fn volume_data(out: &mut String, status: &Value) {
    let p = &status["volumeDataProgress"];
    if let (Some(done), Some(total)) = (p["bytesDone"].as_i64(), p["totalBytes"].as_i64()) {
        let pct = if total > 0 { done.saturating_mul(100) / total } else { 0 };
        let _ = writeln!(
            out,
            "Volume data:  {} of {} ({pct}%)",
            human_bytes(done),
            human_bytes(total)
        );
    }
    let du = &status["dataMoverDataUploads"];
    if let Some(total) = du["total"].as_i64().filter(|t| *t > 0) {
        let phases: Vec<String> = [
            "new",
            "accepted",
            "prepared",
            "inProgress",
            "canceling",
            "canceled",
            "failed",
            "completed",
        ]
        .iter()
        .filter_map(|k| du[*k].as_i64().filter(|n| *n > 0).map(|n| format!("{n} {k}")))
        .collect();
        let _ = writeln!(out, "Data mover uploads:  {total} ({})", phases.join(", "));
    }
}

/// Bytes in binary units, as `kubectl` and Velero's CLI print sizes.
fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

/// Velero's item counts of a run, aligned as `velero backup describe` and `velero restore describe` print them.
fn progress(out: &mut String, vs: &Value, verb: &str, done: &str) {
    let p = &vs["progress"];
    if p.is_null() {
        return;
    }
    let total = format!("Total items to be {verb}:");
    let width = total.len() + 2;
    let _ = writeln!(out, "\n{total:<width$}{}", p["totalItems"].as_i64().unwrap_or(0));
    let _ = writeln!(
        out,
        "{:<width$}{}",
        format!("Items {verb}:"),
        p[done].as_i64().unwrap_or(0)
    );
}

/// `velero restore describe`, for a NonAdminRestore.
pub fn describe_restore(o: &Value, kind: &Kind) -> String {
    let mut out = String::new();
    head(&mut out, o, kind);
    let vs = kind.velero_status(o);
    let spec = &o["spec"]["restoreSpec"];
    let _ = writeln!(out, "\nStarted:    {}", or_none(&vs["startTimestamp"]));
    let _ = writeln!(out, "Completed:  {}", or_none(&vs["completionTimestamp"]));
    let _ = writeln!(out, "\nErrors:    {}", vs["errors"].as_i64().unwrap_or(0));
    let _ = writeln!(out, "Warnings:  {}", vs["warnings"].as_i64().unwrap_or(0));
    if let Some(r) = vs["failureReason"].as_str() {
        let _ = writeln!(out, "Failure reason:  {r}");
    }
    let _ = writeln!(out, "\nBackup:  {}", s(&spec["backupName"]));
    let _ = writeln!(
        out,
        "Velero Restore:  {}",
        or_none(&o["status"]["veleroRestore"]["name"])
    );
    spec_filters(&mut out, spec, "", None);
    let _ = writeln!(out, "\nRestore PVs:  {}", or_auto(&spec["restorePVs"]));
    progress(&mut out, vs, "restored", "itemsRestored");
    conditions(&mut out, o);
    out
}

/// `velero schedule describe`, for a NonAdminSchedule.
pub fn describe_schedule(o: &Value) -> String {
    let mut out = String::new();
    let st = &o["status"];
    let _ = writeln!(out, "Name:         {}", s(&o["metadata"]["name"]));
    let _ = writeln!(out, "Namespace:    {}", s(&o["metadata"]["namespace"]));
    let _ = writeln!(out, "\nPhase:  {}", st["phase"].as_str().unwrap_or("New"));
    let _ = writeln!(out, "\nPaused:  {}", o["spec"]["paused"].as_bool().unwrap_or(false));
    let _ = writeln!(out, "\nSchedule:  {}", s(&o["spec"]["schedule"]));
    let _ = writeln!(out, "Velero Schedule:  {}", or_none(&st["veleroSchedule"]["name"]));
    let last = &st["lastBackup"];
    let last = match last["name"].as_str() {
        Some(name) => format!(
            "{name} ({}, started {})",
            last["phase"].as_str().unwrap_or("New"),
            or_none(&last["startTimestamp"])
        ),
        None => or_none(&Value::String(last_backup_time(st))),
    };
    let _ = writeln!(out, "\nLast Backup:   {last}");
    let _ = writeln!(out, "Last Skipped:  {}", or_none(&st["lastSkipped"]));
    let _ = writeln!(out, "Next Run:      {}", or_none(&st["nextRun"]));
    let spec = &o["spec"]["template"]["backupSpec"];
    out.push_str("\nBackup Template:");
    spec_filters(&mut out, spec, "  ", None);
    let _ = writeln!(out, "  Storage Location:  {}", or_default(&spec["storageLocation"]));
    let _ = writeln!(out, "  TTL:  {}", or_none(&spec["ttl"]));
    let recent = st["recentBackups"].as_array().cloned().unwrap_or_default();
    if !recent.is_empty() {
        out.push_str("\nRecent Backups:\n");
        let rows: Vec<Vec<String>> = recent
            .iter()
            .map(|r| {
                vec![
                    s(&r["name"]),
                    r["phase"].as_str().unwrap_or("New").to_string(),
                    or_none(&r["startTimestamp"]),
                    or_none(&r["completionTimestamp"]),
                    or_none(&r["expiration"]),
                ]
            })
            .collect();
        for line in table(&["NAME", "STATUS", "STARTED", "COMPLETED", "EXPIRES"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    conditions(&mut out, o);
    out
}

fn or_default(v: &Value) -> String {
    match s(v) {
        x if x.is_empty() => "<default>".into(),
        x => x,
    }
}

fn or_auto(v: &Value) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        _ => "auto".into(),
    }
}

/// Whether nac has judged a preview NonAdminRestore: its table is in status for the current generation, or it
/// refused it.
pub fn preview_done(o: &Value) -> bool {
    let judged = o["status"]["preview"]["observedGeneration"] == o["metadata"]["generation"];
    (o["status"]["preview"].is_object() && judged) || o["status"]["phase"] == "BackingOff"
}

/// A preview (`status.preview`) as a table: one row per kind, its counts with the first names, then why kinds are
/// left out, the notes and the verdict.
pub fn preview_table(p: &Value) -> String {
    let part = |v: &Value| -> String {
        let Some(count) = v["count"].as_i64() else {
            return "0".into();
        };
        let names: Vec<&str> = v["names"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let more = if (names.len() as i64) < count { ", ..." } else { "" };
        format!("{count} ({}{more})", names.join(", "))
    };
    let update = p["existingResourcePolicy"] == "update";
    let existing = if update { "UPDATE" } else { "SKIP (EXISTS)" };
    let mut rows = Vec::new();
    let mut reasons = String::new();
    for k in p["kinds"].as_array().into_iter().flatten() {
        let kind = k["kind"].as_str().unwrap_or_default().to_string();
        let there = if update { &k["update"] } else { &k["skip"] };
        rows.push(vec![kind.clone(), part(&k["create"]), part(there), part(&k["leftOut"])]);
        if let Some(r) = k["reason"].as_str() {
            let _ = writeln!(reasons, "  {kind}: {r}");
        }
    }
    let namespace = p["namespace"].as_str().unwrap_or_default();
    let mut out = format!("Restore preview into namespace {namespace} (nothing was changed):\n");
    out.push_str(&table(&["KIND", "CREATE", existing, "LEFT OUT"], &rows));
    if !reasons.is_empty() {
        out.push_str("Why:\n");
        out.push_str(&reasons);
    }
    for n in p["notes"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        let _ = writeln!(out, "Note: {n}");
    }
    match p["refused"].as_str() {
        Some(r) => {
            let _ = writeln!(out, "The restore would be refused: {r}");
        }
        None => out.push_str("A restore with these flags would do the above.\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_preview_prints_a_row_per_kind_with_counts_names_and_reasons() {
        let p = serde_json::json!({
            "namespace": "team-a", "existingResourcePolicy": "none",
            "kinds": [
                {"kind": "configmaps", "create": {"count": 7, "names": ["a", "b", "c", "d", "e"]},
                 "skip": {"count": 1, "names": ["f"]}},
                {"kind": "secrets", "leftOut": {"count": 2, "names": ["s1", "s2"]},
                 "reason": "alice may not create secrets (policy rights.restore: exclude)"}
            ],
            "notes": ["the restore's label selectors are not applied"]
        });
        let t = super::preview_table(&p);
        assert!(
            t.starts_with("Restore preview into namespace team-a (nothing was changed):\n"),
            "{t}"
        );
        assert!(t.contains("SKIP (EXISTS)"), "{t}");
        let cm = t.lines().find(|l| l.starts_with("configmaps")).unwrap();
        assert!(cm.contains("7 (a, b, c, d, e, ...)") && cm.contains("1 (f)"), "{cm}");
        let sec = t.lines().find(|l| l.starts_with("secrets")).unwrap();
        assert!(sec.contains("2 (s1, s2)"), "{sec}");
        assert!(t.contains("  secrets: alice may not create secrets"), "{t}");
        assert!(t.contains("Note: the restore's label selectors"), "{t}");
        assert!(t.ends_with("A restore with these flags would do the above.\n"), "{t}");
        let refused = serde_json::json!({"namespace": "team-a", "existingResourcePolicy": "update", "refused": "no"});
        let t = super::preview_table(&refused);
        assert!(
            t.contains("UPDATE") && t.ends_with("The restore would be refused: no\n"),
            "{t}"
        );
    }

    #[test]
    fn a_preview_is_done_once_judged_for_its_generation_or_refused() {
        let o = |status: serde_json::Value| serde_json::json!({"metadata": {"generation": 2}, "status": status});
        assert!(!super::preview_done(&o(serde_json::json!({"phase": "New"}))));
        assert!(!super::preview_done(&o(
            serde_json::json!({"preview": {"observedGeneration": 1}})
        )));
        assert!(super::preview_done(&o(
            serde_json::json!({"preview": {"observedGeneration": 2}})
        )));
        assert!(super::preview_done(&o(serde_json::json!({"phase": "BackingOff"}))));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn tables_pad_columns() {
        let t = table(&["A", "BB"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "A      BB\nlong   x\n");
    }

    #[test]
    fn a_backup_is_described_from_its_velero_spec_and_status() {
        use crate::plugin::kinds::BACKUP;
        let o = json!({
            "metadata": {"name": "b", "namespace": "team-a"},
            "spec": {"backupSpec": {"storageLocation": "mine", "excludedResources": ["secrets"]}},
            "status": {"phase": "Created", "uploaderType": "kopia",
                "volumeDataProgress": {"bytesDone": 1572864, "totalBytes": 3145728},
                "dataMoverDataUploads": {"total": 2, "inProgress": 1, "completed": 1}, "conditions": [
                {"type": "Accepted", "status": "True", "reason": "BackupAccepted", "message": "backup accepted"}],
                "veleroBackup": {"name": "team-a-b-u", "spec": {"includedNamespaces": ["team-a"],
                    "excludedResources": ["secrets", "nonadminbackups"], "ttl": "720h0m0s",
                    "storageLocation": "team-a-mine-u"},
                "status": {"phase": "Completed", "errors": 0, "warnings": 2,
                    "progress": {"totalItems": 12, "itemsBackedUp": 12}}}}});
        let text = describe_backup(&o, &BACKUP, Some(&json!({"v1/ConfigMap": ["team-a/app"]})));
        for want in [
            "Phase:  Completed",
            "NonAdminBackup phase:  Created",
            "Warnings:  2",
            "Included:  team-a",
            "Excluded:  secrets\n",
            "Left out by nac:  1 kinds",
            // The user's name of their location, not the Velero one.
            "Storage Location:  mine",
            "TTL:  720h0m0s",
            "Uploader type:  kopia",
            "Volume data:  1.5 MiB of 3.0 MiB (50%)",
            "Data mover uploads:  2 (1 inProgress, 1 completed)",
            "Items backed up:              12",
            "Accepted=True (BackupAccepted): backup accepted",
            "  v1/ConfigMap:\n    - team-a/app",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        let rows = backups(&[o], &BACKUP);
        let row: Vec<&str> = rows.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row, ["b", "Completed", "0", "2", "n/a", "mine", "<none>"], "{rows}");
    }

    #[test]
    fn a_schedule_shows_its_last_run_in_oadp_s_form_and_in_nac_s_earlier_one() {
        let nas = |last: Value| {
            json!({"metadata": {"name": "nightly", "namespace": "team-a", "creationTimestamp": "2026-11-20T00:00:00Z"},
                   "spec": {"schedule": "0 2 * * *", "template": {"backupSpec": {}}},
                   "status": {"phase": "Created", "lastBackup": last, "nextRun": "2026-11-21T02:00:00Z",
                              "veleroSchedule": {"name": "u", "status": {"lastBackup": "2026-11-20T02:00:00Z"}}}})
        };
        let run = json!({"name": "u-20261120020000", "veleroBackupName": "u-20261120020000", "phase": "Completed",
                         "startTimestamp": "2026-11-20T02:00:01Z"});
        let text = describe_schedule(&nas(run.clone()));
        assert!(
            text.contains("Last Backup:   u-20261120020000 (Completed, started 2026-11-20T02:00:01Z)"),
            "{text}"
        );
        let rows = schedules(&[nas(run)]);
        assert!(rows.lines().nth(1).unwrap().contains("2026-11-20T02:00:01Z"), "{rows}");
        // nac's earlier form, a time; none yet: Velero's own time of the last run.
        let rows = schedules(&[nas(json!("2026-11-19T02:00:00Z"))]);
        assert!(rows.lines().nth(1).unwrap().contains("2026-11-19T02:00:00Z"), "{rows}");
        let text = describe_schedule(&nas(Value::Null));
        assert!(text.contains("Last Backup:   2026-11-20T02:00:00Z"), "{text}");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(100 * 1024 * 1024), "100.0 MiB");
    }

    #[test]
    fn selectors_read_like_kubectl() {
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "skip", "operator": "DoesNotExist"}]});
        assert_eq!(selector(&sel), "app=web,tier in (a,b),!skip");
        assert_eq!(selector(&Value::Null), "<none>");
    }
}
