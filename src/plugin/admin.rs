//! The cluster admin's verbs: tenants' storage-location requests (NonAdminBackupStorageLocationRequest, in
//! Velero's namespace) listed, described, approved and rejected, and tenants' backups and restores across
//! namespaces. They need rights a namespace user lacks; without them a command fails naming the right.

use super::kinds::Kind;
use super::show::{self, Output};
use super::{Error, Result, Session};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{json, Value};
use std::fmt::Write;

/// The annotation OADP's CLI records an admin's reason in; nac's CLI writes the same, so both read it.
pub const REASON_ANNOTATION: &str = "openshift.io/oadp-approval-reason";

const REQUEST_KIND: &str = "NonAdminBackupStorageLocationRequest";

fn request_resource() -> ApiResource {
    ApiResource {
        group: "oadp.openshift.io".into(),
        version: "v1alpha1".into(),
        api_version: "oadp.openshift.io/v1alpha1".into(),
        kind: REQUEST_KIND.into(),
        plural: "nonadminbackupstoragelocationrequests".into(),
    }
}

/// An API error of an admin verb: a missing right is named with what it takes.
fn admin_error(what: &str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => Error::Api(format!(
            "{what}: you lack the right: {} (this command is for cluster admins)",
            s.message
        )),
        e => super::api_error(what, e),
    }
}

fn requests(s: &Session, velero_namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(s.client.clone(), velero_namespace, &request_resource())
}

async fn list_requests(s: &Session, velero_namespace: &str) -> Result<Vec<Value>> {
    let list = requests(s, velero_namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| admin_error(&format!("listing {REQUEST_KIND}s in namespace {velero_namespace}"), e))?;
    let mut items: Vec<Value> = list
        .items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect();
    items.sort_by_key(|o| (location_of(o), o["metadata"]["name"].as_str().unwrap_or("").to_string()));
    Ok(items)
}

/// Namespace and name of the tenant's location a request is for: from its status, or, in the moment between
/// nac making a request and writing its status, from the origin annotations nac makes it with.
fn origin(o: &Value) -> (&str, &str) {
    let l = &o["status"]["nonAdminBackupStorageLocation"];
    let a = &o["metadata"]["annotations"];
    let part = |field: &str, annotation: &str| l[field].as_str().or_else(|| a[annotation].as_str()).unwrap_or("?");
    (
        part("namespace", crate::naming::NABSL_ORIGIN_NAMESPACE_ANNOTATION),
        part("name", crate::naming::NABSL_ORIGIN_NAME_ANNOTATION),
    )
}

/// `namespace/name` of the tenant's location a request is for.
fn location_of(o: &Value) -> String {
    let (namespace, name) = origin(o);
    format!("{namespace}/{name}")
}

fn phase_of(o: &Value) -> &str {
    o["status"]["phase"].as_str().unwrap_or("Pending")
}

/// The request named `name`: its own name (the location's nacuuid), `namespace/location`, or a location name
/// that only one namespace uses.
async fn find_request(s: &Session, velero_namespace: &str, name: &str) -> Result<Value> {
    if let Ok(Some(o)) = requests(s, velero_namespace).get_opt(name).await {
        return serde_json::to_value(o).map_err(|e| Error::User(e.to_string()));
    }
    let all = list_requests(s, velero_namespace).await?;
    let matching: Vec<&Value> = all
        .iter()
        .filter(|o| {
            let loc = location_of(o);
            loc == name || loc.split_once('/').is_some_and(|(_, n)| n == name)
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Error::User(format!(
            "no {REQUEST_KIND} {name:?} in namespace {velero_namespace} (name a request, NAMESPACE/LOCATION or a \
             location's name; `kubectl nac bsl-request get` lists them)"
        ))),
        many => Err(Error::User(format!(
            "{name:?} names the locations of several namespaces ({}): say NAMESPACE/{name}",
            many.iter().map(|o| location_of(o)).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// `kubectl nac bsl-request get`.
pub async fn get(s: &Session, velero_namespace: &str, names: &[String], pending: bool, output: Output) -> Result<()> {
    let mut items = if names.is_empty() {
        list_requests(s, velero_namespace).await?
    } else {
        let mut v = Vec::new();
        for n in names {
            v.push(find_request(s, velero_namespace, n).await?);
        }
        v
    };
    if pending {
        items.retain(|o| phase_of(o) == "Pending");
    }
    match output {
        Output::Table if items.is_empty() => eprintln!(
            "No {}storage location requests found in namespace {velero_namespace}.",
            if pending { "pending " } else { "" }
        ),
        Output::Table => print!("{}", requests_table(&items)),
        o => print!("{}", show::structured(&items, o)?),
    }
    Ok(())
}

fn requests_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|o| {
            let spec = &o["status"]["nonAdminBackupStorageLocation"]["requestedSpec"];
            let (namespace, name) = origin(o);
            vec![
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                namespace.to_string(),
                name.to_string(),
                phase_of(o).to_string(),
                spec["provider"].as_str().unwrap_or("").to_string(),
                show::bucket_prefix(spec),
                o["metadata"]["creationTimestamp"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    show::table(
        &[
            "NAME",
            "NAMESPACE",
            "LOCATION",
            "PHASE",
            "PROVIDER",
            "BUCKET/PREFIX",
            "CREATED",
        ],
        &rows,
    )
}

/// `kubectl nac bsl-request describe`: what the tenant asks for, and where the decision stands.
pub async fn describe(s: &Session, velero_namespace: &str, names: &[String], output: Output) -> Result<()> {
    let items = if names.is_empty() {
        list_requests(s, velero_namespace).await?
    } else {
        let mut v = Vec::new();
        for n in names {
            v.push(find_request(s, velero_namespace, n).await?);
        }
        v
    };
    if output != Output::Table {
        print!("{}", show::structured(&items, output)?);
        return Ok(());
    }
    let texts: Vec<String> = items.iter().map(describe_request).collect();
    print!("{}", texts.join("\n"));
    Ok(())
}

pub fn describe_request(o: &Value) -> String {
    let mut out = String::new();
    let l = &o["status"]["nonAdminBackupStorageLocation"];
    let spec = &l["requestedSpec"];
    let text = |v: &Value| match v {
        Value::Null => "<none>".to_string(),
        Value::String(s) if s.is_empty() => "<none>".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let _ = writeln!(out, "Name:         {}", text(&o["metadata"]["name"]));
    let _ = writeln!(out, "Namespace:    {}", text(&o["metadata"]["namespace"]));
    let _ = writeln!(out, "Created:      {}", text(&o["metadata"]["creationTimestamp"]));
    let _ = writeln!(out, "\nFor location: {}", location_of(o));
    let _ = writeln!(out, "Phase:        {}", phase_of(o));
    let _ = writeln!(out, "Decision:     {}", text(&o["spec"]["approvalDecision"]));
    let _ = writeln!(
        out,
        "Reason:       {}",
        text(&o["metadata"]["annotations"][REASON_ANNOTATION])
    );
    let _ = writeln!(out, "\nRequested:");
    let _ = writeln!(out, "  Provider:        {}", text(&spec["provider"]));
    let _ = writeln!(out, "  Bucket/prefix:   {}", show::bucket_prefix(spec));
    let _ = writeln!(
        out,
        "  Config:          {}",
        text(&Value::String(show::config_list(spec)))
    );
    let _ = writeln!(
        out,
        "  Credential:      secret {} key {} (in {})",
        text(&spec["credential"]["name"]),
        text(&spec["credential"]["key"]),
        text(&l["namespace"])
    );
    let has_ca = spec["objectStorage"]["caCert"].as_str().is_some_and(|c| !c.is_empty());
    let _ = writeln!(out, "  CA certificate:  {}", if has_ca { "given" } else { "<none>" });
    for (label, key) in [
        ("Access mode", "accessMode"),
        ("Sync period", "backupSyncPeriod"),
        ("Validation", "validationFrequency"),
    ] {
        if !spec[key].is_null() {
            let _ = writeln!(out, "  {label}:{}{}", " ".repeat(16 - label.len()), text(&spec[key]));
        }
    }
    out
}

/// `kubectl nac bsl-request approve|reject`: the decision, and the reason when given.
pub async fn decide(
    s: &Session,
    velero_namespace: &str,
    name: &str,
    decision: &str,
    reason: Option<&str>,
) -> Result<()> {
    let o = find_request(s, velero_namespace, name).await?;
    let request = o["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let mut patch = json!({"spec": {"approvalDecision": decision}});
    if let Some(r) = reason {
        patch["metadata"] = json!({"annotations": {REASON_ANNOTATION: r}});
    }
    requests(s, velero_namespace)
        .patch(&request, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| admin_error(&format!("updating {REQUEST_KIND} {request}"), e))?;
    let done = if decision == "approve" { "approved" } else { "rejected" };
    println!("Request {request} for storage location {} {done}.", location_of(&o));
    Ok(())
}

/// Tenants' objects of `kind` in every namespace, optionally with these labels, of one phase or storage location.
pub async fn list_all(
    s: &Session,
    kind: &Kind,
    selector: Option<&str>,
    phase: Option<&str>,
    location: Option<&str>,
) -> Result<Vec<Value>> {
    let api: Api<DynamicObject> = Api::all_with(s.client.clone(), &kind.resource());
    let mut lp = ListParams::default();
    if let Some(sel) = selector {
        lp = lp.labels(sel);
    }
    let list = api
        .list(&lp)
        .await
        .map_err(|e| admin_error(&format!("listing {}s in all namespaces", kind.kind), e))?;
    let mut items: Vec<Value> = super::values(list)
        .into_iter()
        .filter(|o| phase.is_none_or(|p| kind.phase(o).eq_ignore_ascii_case(p)))
        .filter(|o| location.is_none_or(|l| o["spec"]["backupSpec"]["storageLocation"].as_str() == Some(l)))
        .collect();
    items.sort_by_key(|o| {
        (
            o["metadata"]["namespace"].as_str().unwrap_or("").to_string(),
            o["metadata"]["name"].as_str().unwrap_or("").to_string(),
        )
    });
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(ns: &str, name: &str, phase: Option<&str>) -> Value {
        json!({"metadata": {"name": format!("{ns}-{name}-uuid"), "namespace": "openshift-adp",
                            "creationTimestamp": "2026-11-26T10:00:00Z",
                            "annotations": {REASON_ANNOTATION: "bucket is ours"}},
               "spec": {"approvalDecision": "pending"},
               "status": {"phase": phase, "nonAdminBackupStorageLocation": {"namespace": ns, "name": name,
                   "requestedSpec": {"provider": "aws", "objectStorage": {"bucket": "b", "prefix": "p"},
                                     "config": {"region": "eu-1"}, "credential": {"name": "creds", "key": "cloud"},
                                     "backupSyncPeriod": "0s"}}}})
    }

    #[test]
    fn requests_list_by_location_and_describe_what_they_ask_for() {
        let t = requests_table(&[request("team-a", "mine", Some("Pending")), request("team-b", "x", None)]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAME") && lines[0].contains("LOCATION"), "{t}");
        assert!(
            lines[1].contains("team-a") && lines[1].contains("Pending") && lines[1].contains("b/p"),
            "{t}"
        );
        assert!(lines[2].contains("team-b") && lines[2].contains("Pending"), "{t}");
        // Made, its status not written yet: found by the annotations nac made it with.
        let mut fresh = request("team-c", "new", None);
        fresh["status"] = Value::Null;
        fresh["metadata"]["annotations"] = json!({crate::naming::NABSL_ORIGIN_NAMESPACE_ANNOTATION: "team-c",
                                                  crate::naming::NABSL_ORIGIN_NAME_ANNOTATION: "new"});
        assert_eq!(location_of(&fresh), "team-c/new");
        assert!(requests_table(&[fresh])
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("team-c") && l.contains("new")));
        let d = describe_request(&request("team-a", "mine", Some("Approved")));
        for want in [
            "For location: team-a/mine",
            "Phase:        Approved",
            "Reason:       bucket is ours",
            "Provider:        aws",
            "Bucket/prefix:   b/p",
            "Config:          region=eu-1",
            "Credential:      secret creds key cloud (in team-a)",
            "Sync period:     0s",
        ] {
            assert!(d.contains(want), "{want}\n{d}");
        }
    }
}
