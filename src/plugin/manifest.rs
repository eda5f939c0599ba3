//! Backup manifests for users (Velero's backup-manifest design): of a finished backup (its contents read through a
//! NonAdminDownloadRequest as a stream), of a dry run (what a backup with these filters would hold now, computed
//! from the live namespace with the user's own rights), and the overlap of two.

use super::download::{self, Tls};
use super::kinds::{BACKUP, FINAL};
use super::{object, Error, Result, Session};
use crate::manifest::{diff, Diff, Item, Limits, Manifest};
use crate::rights::{backup_kinds, discover, BackupRights};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{json, Map, Value};
use std::fmt::Write;

/// The manifest of finished backup `name`, read from its contents as a stream (never held whole).
pub async fn of_backup(s: &Session, name: &str, tls: &Tls) -> Result<Manifest> {
    let url = download::signed_url(s, "BackupContents", name).await?;
    let stream = crate::download::get(&url, tls.config()?).await.map_err(Error::Api)?;
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    tokio::task::spawn_blocking(move || Manifest::from_tarball(reader, &Limits::default()))
        .await
        .map_err(|e| Error::Api(format!("reading the contents of {name}: {e}")))?
        .map_err(|e| Error::Api(format!("the contents of {name}: {e}")))
}

/// What a backup with `backup_spec` would hold now: nac's answer to a dry run of the NonAdminBackup (the policy's
/// enforced fields, the kinds the user may not read left out), nac's own exclusions, then Velero's resource filters
/// and label selector over the namespace's live objects. Also the policy's warnings.
pub async fn preview(s: &Session, backup_spec: Value) -> Result<(Manifest, Vec<String>)> {
    let mut o = object(&BACKUP, "", json!({ "backupSpec": backup_spec }));
    o["metadata"] = json!({"generateName": "preview-"});
    let (admitted, warnings) = s.create_dry_run(&BACKUP, &o).await?;
    let mut spec = admitted["spec"]["backupSpec"].as_object().cloned().unwrap_or_default();
    let annotations = serde_json::from_value(admitted["metadata"]["annotations"].clone()).ok();
    if let Ok(Some(r)) = BackupRights::of(annotations.as_ref()) {
        crate::rights::exclude(&mut spec, &r.excluded);
    }
    crate::velero::exclusions::add_backup_exclusions(&mut spec);
    Ok((live(s, &spec).await?, warnings))
}

/// The namespace's live objects a Velero BackupSpec selects (namespaced kinds; Velero adds the namespace itself
/// and what related cluster objects it needs).
pub async fn live(s: &Session, spec: &Map<String, Value>) -> Result<Manifest> {
    let kinds = discover(&s.client).await.map_err(Error::Api)?;
    let mut lp = ListParams::default();
    if let Some(sel) = spec.get("labelSelector").filter(|v| !v.is_null()) {
        let text = super::show::selector(sel);
        if text != "<none>" {
            lp = lp.labels(&text.replace(", ", ","));
        }
    }
    let mut m = Manifest::default();
    for k in backup_kinds(spec, &kinds) {
        let ar = k.api_resource();
        let api: Api<DynamicObject> = Api::namespaced_with(s.client.clone(), &s.namespace, &ar);
        let list = match api.list(&lp).await {
            Ok(l) => l,
            // What the user may not read is not theirs to back up (nac leaves it out too).
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 || e.code == 405 => continue,
            Err(e) => return Err(super::api_error(&format!("listing {}", k.filter_name()), e)),
        };
        for obj in list.items {
            let meta = obj.metadata;
            let item = Item {
                api_group: k.filter_name(),
                api_version: k.version.clone(),
                namespace: s.namespace.clone(),
                name: meta.name.unwrap_or_default(),
                uid: meta.uid.unwrap_or_default(),
                labels: meta.labels.unwrap_or_default(),
                annotations: meta.annotations.unwrap_or_default(),
                owners: meta
                    .owner_references
                    .unwrap_or_default()
                    .into_iter()
                    .map(|o| o.uid)
                    .collect(),
            };
            // The same object served under two names (a kind in two groups) counts once.
            let _ = m.add(item);
        }
    }
    Ok(m)
}

/// A manifest as a tree: kind, namespace, name (with its owners).
pub fn tree(m: &Manifest) -> String {
    let mut out = String::new();
    for (kind, namespaces) in &m.kinds {
        let count: usize = namespaces.values().map(|n| n.len()).sum();
        let _ = writeln!(out, "{kind} ({count})");
        for (ns, names) in namespaces {
            let _ = writeln!(out, "  {}", if ns.is_empty() { "(cluster)" } else { ns });
            for item in names.values() {
                let owners: Vec<String> = m
                    .owners(item)
                    .iter()
                    .map(|o| format!("{}/{}", o.api_group, o.name))
                    .collect();
                if owners.is_empty() {
                    let _ = writeln!(out, "    {}", item.name);
                } else {
                    let _ = writeln!(out, "    {}  <- {}", item.name, owners.join(", "));
                }
            }
        }
    }
    let _ = writeln!(out, "{} items", m.len());
    out
}

/// A manifest named on the command line: a `manifest.json` file, or a backup of the namespace.
pub async fn load(s: &Session, what: &str, tls: &Tls) -> Result<Manifest> {
    let path = std::path::Path::new(what);
    if what.ends_with(".json") && path.is_file() {
        let f = std::fs::File::open(path).map_err(|e| Error::User(format!("reading {what}: {e}")))?;
        return serde_json::from_reader(std::io::BufReader::new(f))
            .map_err(|e| Error::User(format!("{what} is not a manifest.json: {e}")));
    }
    of_backup(s, what, tls).await
}

/// `backup diff`'s text: what both hold, and what only one does.
pub fn diff_text(a: &str, b: &str, d: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "In both:   {} items", d.both.len());
    for (name, only, sign) in [(a, &d.only_a, '-'), (b, &d.only_b, '+')] {
        let _ = writeln!(out, "Only in {name}:   {} items", only.len());
        for p in only {
            let _ = writeln!(out, "  {sign} {p}");
        }
    }
    out
}

/// Backups still running in the namespace that cover items a new backup with `spec` would hold: a warning each.
pub async fn overlaps(s: &Session, spec: &Value) -> Result<Vec<String>> {
    let running: Vec<Value> = s
        .list(&BACKUP, None)
        .await?
        .into_iter()
        .filter(|o| {
            let phase = BACKUP.phase(o);
            !FINAL.contains(&phase)
                && o["status"]["phase"] != "BackingOff"
                && o["metadata"]["deletionTimestamp"].is_null()
        })
        .collect();
    if running.is_empty() {
        return Ok(Vec::new());
    }
    let (new, _) = preview(s, spec.clone()).await?;
    let mut out = Vec::new();
    for r in running {
        let Some(their) = r["status"]["veleroBackup"]["spec"].as_object() else {
            continue;
        };
        let d = diff(&new, &live(s, their).await?);
        if !d.both.is_empty() {
            out.push(format!(
                "backup {} ({}) is still running and covers {} of the {} items this backup would hold",
                r["metadata"]["name"].as_str().unwrap_or_default(),
                BACKUP.phase(&r),
                d.both.len(),
                new.len()
            ));
        }
    }
    Ok(out)
}
