//! A file of a backup or restore is handed out only to a user who may read what it exposes. Velero signs the
//! download URL with its own rights; without this, anyone who may create NonAdminDownloadRequests in a namespace
//! would download, say, the Secrets a more privileged user of the namespace backed up (`BackupContents`), or the
//! output of the commands that user's hooks ran in the namespace's pods (`BackupLog`).
//!
//! The rule, for the download request's requester (recorded by nac's webhook) in the request's namespace:
//!
//! | file | right asked |
//! |---|---|
//! | of a backup (contents, resource list, results, volume and item files) | `list` on every kind the Velero Backup includes |
//! | `BackupLog` | the same, and `create pods/exec` and `get pods` when the backup ran hooks (exec hooks in its spec, or pods, whose hook annotations Velero runs) |
//! | of a restore (results, resource list, item and volume files) | `list` on every kind the Velero Restore includes of its backup (the objects it made are in the namespace: listing them shows the same) |
//! | `RestoreLog` | the same, and `create pods/exec` and `get pods` when the restore ran hooks (exec post-hooks in its spec, or pods restored) |
//!
//! The kinds are those of the Velero object's own spec, which already leaves out what the backup's requester
//! could not read (`crate::rights`): the backup's requester gets their own files; another user of the namespace
//! gets them when they hold the same rights. Checked at admission (the webhook refuses, naming the right) and
//! again by the reconciler before it makes the Velero DownloadRequest. Under `rights.backup: off` (backup files)
//! or `rights.restore: off` (restore files) nothing is checked, as in OADP.

use super::features::{backup_exec_hooks, restore_exec_hooks};
use super::{backup_kinds, unreadable, Access, Kind, Question, Requester, RightsMode};
use crate::api::DownloadTargetKind;
use crate::policy::Policy;
use serde_json::{Map, Value};

const KIND: &str = "NonAdminDownloadRequest";
/// The field naming the file, for refusals.
pub const FIELD: &str = "spec.target";

/// What one file exposes: read from the Velero Backup (and Restore) it belongs to, whole (not a store's compact
/// copy, which lacks the resource lists).
#[derive(Clone, Debug, PartialEq)]
pub struct Exposure {
    pub kind: DownloadTargetKind,
    /// The NonAdminBackup or NonAdminRestore named by the request.
    pub name: String,
    /// The Velero Backup's spec (for a restore file: the backup it restored).
    pub backup_spec: Map<String, Value>,
    /// The Velero Restore's spec, for a restore file.
    pub restore_spec: Option<Map<String, Value>>,
}

fn as_map<T: serde::Serialize>(spec: &T) -> Map<String, Value> {
    match serde_json::to_value(spec) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

impl Exposure {
    /// A file of NonAdminBackup `name`, whose Velero Backup is `backup`.
    pub fn of_backup(kind: DownloadTargetKind, name: &str, backup: &crate::velero::Backup) -> Exposure {
        Exposure {
            kind,
            name: name.into(),
            backup_spec: as_map(&*backup.spec),
            restore_spec: None,
        }
    }

    /// A file of NonAdminRestore `name`, whose Velero Restore is `restore`, of Velero Backup `backup`.
    pub fn of_restore(
        kind: DownloadTargetKind,
        name: &str,
        restore: &crate::velero::Restore,
        backup: &crate::velero::Backup,
    ) -> Exposure {
        Exposure {
            kind,
            name: name.into(),
            backup_spec: as_map(&*backup.spec),
            restore_spec: Some(as_map(&restore.spec)),
        }
    }

    fn what(&self) -> String {
        let owner = if self.kind.is_restore() {
            "NonAdminRestore"
        } else {
            "NonAdminBackup"
        };
        format!("{} of {owner} {}", self.kind.as_str(), self.name)
    }

    /// The kinds the file exposes, of the cluster's kinds `all`.
    fn kinds<'a>(&self, all: &'a [Kind]) -> Vec<&'a Kind> {
        let held = backup_kinds(&self.backup_spec, all);
        match &self.restore_spec {
            None => held,
            // The restore's own filters (nac binds `includedResources` to the kinds it checked) over the backup's.
            Some(spec) => held
                .into_iter()
                .filter(|k| backup_kinds(spec, std::slice::from_ref(*k)).len() == 1)
                .collect(),
        }
    }

    /// Whether the file holds the output of commands Velero ran in the namespace's pods.
    fn ran_hooks(&self, kinds: &[&Kind]) -> bool {
        let pods = kinds.iter().any(|k| k.group.is_empty() && k.resource == "pods");
        match self.kind {
            DownloadTargetKind::BackupLog => pods || backup_exec_hooks(&self.backup_spec),
            DownloadTargetKind::RestoreLog => pods || self.restore_spec.as_ref().is_some_and(restore_exec_hooks),
            _ => false,
        }
    }
}

/// The file `target` of namespace `namespace` names, read whole from the API server (the stores keep compact
/// copies without the resource lists): `None` while it cannot be had yet (no backup or restore of that name in the
/// namespace, none made, or not the namespace's own), which the reconciler answers in its status. `Err` when the
/// API server could not be read.
pub async fn fetch(
    client: &kube::Client,
    velero_namespace: &str,
    namespace: &str,
    target: &crate::api::NonAdminDownloadTarget,
) -> Result<Option<Exposure>, String> {
    use crate::api::{NonAdminBackup, NonAdminRestore};
    use crate::naming::{NAB, NAR};
    use crate::velero::{Backup, Restore};
    use kube::Api;
    let backups: Api<Backup> = Api::namespaced(client.clone(), velero_namespace);
    let name = target.name.as_str();
    // Names go into request paths as they are: one that no object can have (`..`, `/`) names nothing.
    let valid = |n: &str| crate::naming::is_object_name(n);
    if !valid(name) {
        return Ok(None);
    }
    if !target.kind.is_restore() {
        let nab: Option<NonAdminBackup> = read(
            &Api::namespaced(client.clone(), namespace),
            name,
            "NonAdminBackup",
            namespace,
        )
        .await?;
        let Some(velero) = nab.and_then(|n| n.status?.velero_backup?.name).filter(|n| valid(n)) else {
            return Ok(None);
        };
        let backup = read(&backups, &velero, "Velero Backup", velero_namespace).await?;
        return Ok(backup
            .filter(|b| NAB.owns(&b.metadata, namespace, name))
            .map(|b| Exposure::of_backup(target.kind, name, &b)));
    }
    let nar: Option<NonAdminRestore> = read(
        &Api::namespaced(client.clone(), namespace),
        name,
        "NonAdminRestore",
        namespace,
    )
    .await?;
    let Some(velero) = nar.and_then(|n| n.status?.velero_restore?.name).filter(|n| valid(n)) else {
        return Ok(None);
    };
    let restores: Api<Restore> = Api::namespaced(client.clone(), velero_namespace);
    let restore = read(&restores, &velero, "Velero Restore", velero_namespace).await?;
    let Some(restore) = restore.filter(|r| NAR.owns(&r.metadata, namespace, name)) else {
        return Ok(None);
    };
    let Some(backup_name) = restore.spec.backup_name.clone().filter(|n| valid(n)) else {
        return Ok(None);
    };
    let backup = read(&backups, &backup_name, "Velero Backup", velero_namespace).await?;
    Ok(backup
        .filter(|b| NAB.origin_of(&b.metadata).is_some_and(|(ns, _)| ns == namespace))
        .map(|b| Exposure::of_restore(target.kind, name, &restore, &b)))
}

/// One object by name, `None` when it does not exist; an error names what could not be read.
async fn read<K>(api: &kube::Api<K>, name: &str, kind: &str, namespace: &str) -> Result<Option<K>, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|e| format!("reading {kind} {namespace}/{name}: {e}"))
}

/// The policy's mode for a file of this kind: `rights.restore` for restore files, `rights.backup` otherwise.
pub fn mode(policy: &Policy, kind: DownloadTargetKind) -> RightsMode {
    if kind.is_restore() {
        policy.rights.restore
    } else {
        policy.rights.backup
    }
}

fn setting(kind: DownloadTargetKind) -> &'static str {
    if kind.is_restore() {
        "rights.restore"
    } else {
        "rights.backup"
    }
}

/// Whether `who` (the recorded requester; none: the request did not pass nac's webhook) may have `file` under
/// `mode`: `Ok(Err(why))` when not, naming the user, the right and the namespace; `Err` when an answer could not
/// be had (retry). Any failed answer fails the check (closed).
pub async fn check(
    access: &dyn Access,
    who: Option<&Requester>,
    namespace: &str,
    file: &Exposure,
    mode: RightsMode,
) -> Result<Result<(), String>, String> {
    if mode == RightsMode::Off {
        return Ok(Ok(()));
    }
    let what = file.what();
    let setting = setting(file.kind);
    let Some(who) = who else {
        let what = format!("whether its requester may read {what}");
        return Ok(Err(super::no_requester(KIND, &what, Some((setting, mode)))));
    };
    let all = access.kinds().await?;
    let kinds = file.kinds(&all);
    let denied = unreadable(access, who, namespace, &kinds).await?;
    if !denied.is_empty() {
        let list = denied
            .iter()
            .map(|k| format!("list {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Ok(Err(format!(
            "{KIND} refused: {what} exposes objects {} may not read in namespace {namespace}: they may not {list}; \
             a file is handed out only to a user who may list every kind it holds (policy {setting}: {mode})",
            who.username
        )));
    }
    if file.ran_hooks(&kinds) {
        let exec = Question {
            verb: "create".into(),
            resource: "pods".into(),
            subresource: "exec".into(),
            namespace: namespace.into(),
            ..Default::default()
        };
        let get = Question {
            verb: "get".into(),
            resource: "pods".into(),
            namespace: namespace.into(),
            ..Default::default()
        };
        if !(access.ask(who, &exec).await? && access.ask(who, &get).await?) {
            return Ok(Err(format!(
                "{KIND} refused: {what} holds the output of the hooks Velero ran in the namespace's pods: {} may \
                 not create pods/exec and get pods in namespace {namespace}; a log is handed out only to a user who \
                 may run those commands themselves (policy {setting}: {mode})",
                who.username
            )));
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rights::testing::{deny, user};
    use crate::rights::Fixed;
    use crate::velero::{Backup, BackupSpec, Restore, RestoreSpec};
    use serde_json::json;

    fn backup(spec: Value) -> Backup {
        Backup::new("team-a-nightly", serde_json::from_value::<BackupSpec>(spec).unwrap())
    }

    fn restore(spec: Value) -> Restore {
        Restore::new("team-a-back", serde_json::from_value::<RestoreSpec>(spec).unwrap())
    }

    /// A view user: lists everything but Secrets, runs nothing in pods.
    fn viewer_access() -> Fixed {
        let mut a = Fixed::common();
        a.denied = vec![deny("viewer", "list", "secrets"), deny("viewer", "create", "pods/exec")];
        a
    }

    async fn answer(a: &Fixed, who: &str, file: &Exposure) -> Result<(), String> {
        check(a, Some(&user(who)), "team-a", file, RightsMode::Exclude)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn contents_holding_a_kind_the_user_may_not_list_are_refused_naming_the_right() {
        let a = viewer_access();
        let b = backup(json!({"includedNamespaces": ["team-a"]}));
        let file = Exposure::of_backup(DownloadTargetKind::BackupContents, "nightly", &b);
        let no = answer(&a, "viewer", &file).await.unwrap_err();
        assert_eq!(
            no,
            "NonAdminDownloadRequest refused: BackupContents of NonAdminBackup nightly exposes objects viewer may \
             not read in namespace team-a: they may not list secrets; a file is handed out only to a user who may \
             list every kind it holds (policy rights.backup: exclude)"
        );
        // Its owner, who may list everything, gets it.
        assert_eq!(answer(&a, "editor", &file).await, Ok(()));
        // A backup that left Secrets out (the requester's exclusions in the Velero spec) exposes none.
        let b = backup(json!({"excludedResources": ["secrets", "pods"]}));
        let file = Exposure::of_backup(DownloadTargetKind::BackupResourceList, "nightly", &b);
        assert_eq!(answer(&a, "viewer", &file).await, Ok(()));
    }

    #[tokio::test]
    async fn a_log_of_a_backup_that_ran_hooks_takes_the_right_to_run_them() {
        let a = viewer_access();
        // Pods held: Velero runs their hook annotations.
        let b = backup(json!({"includedResources": ["pods", "configmaps"]}));
        let log = Exposure::of_backup(DownloadTargetKind::BackupLog, "nightly", &b);
        let no = answer(&a, "viewer", &log).await.unwrap_err();
        assert!(
            no.contains(
                "BackupLog of NonAdminBackup nightly holds the output of the hooks Velero ran in the namespace's \
                 pods: viewer may not create pods/exec and get pods in namespace team-a"
            ),
            "{no}"
        );
        assert_eq!(answer(&a, "editor", &log).await, Ok(()));
        // Its resource list shows no hook output.
        let list = Exposure::of_backup(DownloadTargetKind::BackupResourceList, "nightly", &b);
        assert_eq!(answer(&a, "viewer", &list).await, Ok(()));
        // Exec hooks in the spec, no pods: the log still holds their output.
        let b = backup(json!({"includedResources": ["configmaps"], "hooks": {"resources": [
            {"name": "h", "pre": [{"exec": {"command": ["true"]}}]}]}}));
        let log = Exposure::of_backup(DownloadTargetKind::BackupLog, "nightly", &b);
        assert!(answer(&a, "viewer", &log).await.is_err());
        // Neither: the log is a list of what was read.
        let b = backup(json!({"includedResources": ["configmaps"]}));
        let log = Exposure::of_backup(DownloadTargetKind::BackupLog, "nightly", &b);
        assert_eq!(answer(&a, "viewer", &log).await, Ok(()));
    }

    #[tokio::test]
    async fn restore_files_take_list_on_what_the_restore_included() {
        let a = viewer_access();
        let b = backup(json!({}));
        // nac binds a Velero Restore's includedResources to the kinds it checked.
        let r = restore(json!({"backupName": "team-a-nightly", "includedResources": ["configmaps", "secrets"]}));
        let file = Exposure::of_restore(DownloadTargetKind::RestoreResults, "back", &r, &b);
        let no = answer(&a, "viewer", &file).await.unwrap_err();
        assert!(
            no.contains(
                "RestoreResults of NonAdminRestore back exposes objects viewer may not read in namespace \
                 team-a: they may not list secrets"
            ) && no.ends_with("(policy rights.restore: exclude)"),
            "{no}"
        );
        let r = restore(json!({"backupName": "team-a-nightly", "includedResources": ["configmaps"]}));
        let file = Exposure::of_restore(DownloadTargetKind::RestoreLog, "back", &r, &b);
        assert_eq!(answer(&a, "viewer", &file).await, Ok(()));
        // A restore of pods: its log holds their post-hooks' output.
        let r = restore(json!({"backupName": "team-a-nightly", "includedResources": ["configmaps", "pods"]}));
        let file = Exposure::of_restore(DownloadTargetKind::RestoreLog, "back", &r, &b);
        assert!(answer(&a, "viewer", &file).await.is_err());
        // What the backup left out is not restored, whatever the restore's filters say.
        let b = backup(json!({"excludedResources": ["secrets"]}));
        let r = restore(json!({"backupName": "team-a-nightly"}));
        let file = Exposure::of_restore(DownloadTargetKind::RestoreResourceList, "back", &r, &b);
        assert_eq!(answer(&a, "viewer", &file).await, Ok(()));
    }

    #[tokio::test]
    async fn a_name_no_object_can_have_is_not_looked_up() {
        type Req = hyper::http::Request<kube::client::Body>;
        type Resp = hyper::http::Response<kube::client::Body>;
        let (service, mut handle) = tower_test::mock::pair::<Req, Resp>();
        let client = kube::Client::new(service, "default");
        for name in ["../../../api/v1/namespaces/team-b/secrets", "a/b", "", "Nightly"] {
            for kind in [DownloadTargetKind::BackupContents, DownloadTargetKind::RestoreLog] {
                let target = crate::api::NonAdminDownloadTarget {
                    kind,
                    name: name.into(),
                };
                // A request sent would wait for an answer the mock never gives.
                let answer = tokio::time::timeout(
                    std::time::Duration::from_secs(1),
                    fetch(&client, "velero", "team-a", &target),
                )
                .await;
                assert_eq!(answer, Ok(Ok(None)), "{name:?}: looked up");
            }
        }
        drop(client);
        assert!(handle.next_request().await.is_none(), "nothing asked of the API server");
    }

    #[tokio::test]
    async fn without_a_requester_or_an_answer_nothing_is_handed_out_unless_the_policy_checks_nothing() {
        let a = viewer_access();
        let b = backup(json!({}));
        let file = Exposure::of_backup(DownloadTargetKind::BackupContents, "nightly", &b);
        let no = check(&a, None, "team-a", &file, RightsMode::Exclude)
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            no.starts_with(
                "NonAdminDownloadRequest has no record of who created it (annotation \
                 nac.oadp.openshift.io/requester): it was not created through nac's admission webhook"
            ),
            "{no}"
        );
        assert!(check(&a, Some(&user("broken")), "team-a", &file, RightsMode::Deny)
            .await
            .is_err());
        assert_eq!(check(&a, None, "team-a", &file, RightsMode::Off).await, Ok(Ok(())));
        assert_eq!(
            check(&a, Some(&user("viewer")), "team-a", &file, RightsMode::Off).await,
            Ok(Ok(()))
        );
    }
}
