//! Which kinds hold objects in a namespace, for the wording of the left-out warning only (what a backup reads is
//! decided by rights, never by this): a warning names first the kinds that hold objects, and counts those that
//! hold none.
//!
//! nac looks with its own rights and asks for nothing more: a kind is looked at only when nac may list it in every
//! namespace (Secrets, nac's own kinds as the chart installs it); of the others it does not know. One
//! metadata-only list of at most one object per kind and namespace, reused [`SEEN_TTL`].

use super::rbac::{Epochs, Stamp};
use super::Kind;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long whether a kind holds objects in a namespace is reused (it only words a warning).
pub const SEEN_TTL: Duration = Duration::from_secs(300);
/// How long whether nac may list a kind is reused while no ClusterRole or ClusterRoleBinding changes.
const LISTABLE_TTL: Duration = Duration::from_secs(600);

type KindKey = (String, String);

/// Which kinds hold objects, asked of the API server with nac's own rights.
pub struct KubeOccupancy {
    client: kube::Client,
    epochs: Arc<Epochs>,
    /// Whether nac may list a kind in every namespace, under the RBAC state it was asked in.
    listable: Mutex<HashMap<KindKey, (Stamp, Instant, bool)>>,
    /// Whether a kind held objects in a namespace, and when that was seen.
    seen: Mutex<HashMap<(String, KindKey), (bool, Instant)>>,
}

impl KubeOccupancy {
    pub fn new(client: kube::Client, epochs: Arc<Epochs>) -> KubeOccupancy {
        KubeOccupancy {
            client,
            epochs,
            listable: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether nac may list `kind` in every namespace (a SelfSubjectAccessReview; a failed one: no).
    async fn listable(&self, kind: &Kind) -> bool {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let key = (kind.group.clone(), kind.resource.clone());
        let stamp = self.epochs.stamp("");
        if let Some((s, at, yes)) = self.listable.lock().expect("occupancy").get(&key) {
            if *s == stamp && at.elapsed() < LISTABLE_TTL {
                return *yes;
            }
        }
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("list".into()),
                    group: Some(kind.group.clone()),
                    resource: Some(kind.resource.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let yes = Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed);
        let mut listable = self.listable.lock().expect("occupancy");
        listable.insert(key, (stamp, Instant::now(), yes));
        yes
    }

    /// For each of `kinds`: whether it holds objects in `namespace`; `None` when nac cannot tell.
    pub async fn occupied(&self, namespace: &str, kinds: &[&Kind]) -> Vec<Option<bool>> {
        futures::future::join_all(kinds.iter().map(|k| self.holds(namespace, k))).await
    }

    async fn holds(&self, namespace: &str, kind: &Kind) -> Option<bool> {
        let key = (namespace.to_string(), (kind.group.clone(), kind.resource.clone()));
        if let Some((yes, at)) = self.seen.lock().expect("occupancy").get(&key) {
            if at.elapsed() < SEEN_TTL {
                return Some(*yes);
            }
        }
        if !self.listable(kind).await {
            return None;
        }
        let api_version = if kind.group.is_empty() {
            kind.version.clone()
        } else {
            format!("{}/{}", kind.group, kind.version)
        };
        let ar = ApiResource {
            group: kind.group.clone(),
            version: kind.version.clone(),
            api_version,
            kind: kind.kind.clone(),
            plural: kind.resource.clone(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &ar);
        let yes = match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(list) => !list.items.is_empty(),
            Err(e) => {
                tracing::debug!(kind = %kind.filter_name(), namespace, error = %e, "whether a kind holds objects is unknown");
                return None;
            }
        };
        let mut seen = self.seen.lock().expect("occupancy");
        if seen.len() > 10_000 {
            seen.retain(|_, (_, at)| at.elapsed() < SEEN_TTL);
        }
        seen.insert(key, (yes, Instant::now()));
        Some(yes)
    }
}

/// The left-out kinds in the order a warning names them: those that hold objects, those nac cannot tell, those
/// that hold none; alphabetically within each. Also how many hold none.
pub fn by_occupancy(denied: &[String], occupied: &[Option<bool>]) -> (Vec<String>, usize) {
    let rank = |o: Option<bool>| -> u8 {
        match o {
            Some(true) => 0,
            None => 1,
            Some(false) => 2,
        }
    };
    let mut ranked: Vec<(u8, &String)> = denied
        .iter()
        .zip(occupied.iter().copied().chain(std::iter::repeat(None)))
        .map(|(d, o)| (rank(o), d))
        .collect();
    ranked.sort();
    let empty = ranked.iter().filter(|(r, _)| *r == 2).count();
    (ranked.into_iter().map(|(_, d)| d.clone()).collect(), empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_holding_objects_come_first_and_empty_ones_last() {
        let denied: Vec<String> = ["backups.velero.io", "events", "secrets", "configmaps"]
            .map(String::from)
            .to_vec();
        let (order, empty) = by_occupancy(&denied, &[None, Some(false), Some(true), Some(true)]);
        assert_eq!(order, ["configmaps", "secrets", "backups.velero.io", "events"]);
        assert_eq!(empty, 1);
    }
}
