//! Which kinds hold objects in a namespace, for the wording of the left-out warning only (what a backup reads is
//! decided by rights, never by this): a warning names first the kinds that hold objects, and counts those that
//! hold none.
//!
//! nac looks with its own rights: a kind is looked at when nac may list it in every namespace (as the chart
//! installs it, every kind with `rights.listEveryKind`, else Secrets, the RBAC kinds and nac's own); of the others
//! the warning says nac may not look. One metadata-only list of at most one object per left-out kind, in the
//! requester's namespace only, reused [`SEEN_TTL`]: concurrent creates in a namespace share it, so a burst costs
//! at most one list per kind. The warning waits at most [`BUDGET`] for the answers; a lookup still running then
//! goes on and serves the next create, and the warning says nac could not tell. At most [`WAITS_PER_SECOND`]
//! creates a second wait; in a burst beyond that (a schedule firing in many namespaces, a GitOps tool applying
//! many) a create does not wait at all: it gets what is known, the lookups run on for the next ones, and a burst
//! is never slowed for the wording of a warning. Nor is the API server: nac sends at most [`LISTS_PER_SECOND`]
//! lists a second (beyond a first [`LISTS_PER_SECOND`]), so a hundred new namespaces at once do not turn into a
//! thousand lists at once.

use super::rbac::{Epochs, Stamp};
use super::{Kind, Swept};
use futures::future::{BoxFuture, FutureExt, Shared};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long whether a kind holds objects in a namespace is reused (it only words a warning).
pub const SEEN_TTL: Duration = Duration::from_secs(60);
/// How long a create waits for the lookups: the warning says what is known by then.
pub const BUDGET: Duration = Duration::from_secs(1);
/// The lists a second nac sends at most, after a first burst of as many.
pub const LISTS_PER_SECOND: f64 = 50.0;
/// How many creates a second may wait for the lookups; beyond that one does not wait.
pub const WAITS_PER_SECOND: usize = 4;
/// How long whether nac may list a kind is reused while no ClusterRole or ClusterRoleBinding changes.
const LISTABLE_TTL: Duration = Duration::from_secs(600);

/// What nac knows of whether a kind holds objects in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seen {
    Holds,
    Empty,
    /// nac may not list the kind (or is set not to look: `rights.warning_lookups: false`).
    NotAllowed,
    /// The lookup failed or did not answer within the budget.
    Unknown,
}

/// A lookup and when it ended; shared by everyone who asks while it runs or while its answer is kept.
type Flight<V> = Shared<BoxFuture<'static, (V, Instant)>>;

/// Lookups by key: one runs at a time per key, as its own task (so it ends, and its answer is kept, even when
/// nobody waits for it any more).
struct Flights<K, V: Clone> {
    map: Mutex<Swept<K, Flight<V>>>,
}

impl<K: Hash + Eq, V: Clone + Send + Sync + 'static> Flights<K, V> {
    fn new() -> Self {
        Flights {
            map: Mutex::new(Swept::new()),
        }
    }

    /// The running or kept lookup of `key`, or a new one (`start`) when the kept answer fails `keep`. `failed`
    /// stands for the answer of a lookup whose task died.
    fn get(
        &self,
        key: K,
        keep: impl Fn(&V, Instant) -> bool,
        failed: V,
        start: impl FnOnce() -> BoxFuture<'static, V>,
    ) -> Flight<V> {
        let mut flights = self.map.lock().expect("occupancy flights");
        if let Some(f) = flights.map.get(&key) {
            match f.peek() {
                None => return f.clone(),
                Some((v, at)) if keep(v, *at) => return f.clone(),
                Some(_) => {}
            }
        }
        // Answers no longer kept go when the map grows.
        flights.sweep_if_large(|_, f| f.peek().is_none_or(|(v, at)| keep(v, *at)));
        let task = tokio::spawn(start().map(|v| (v, Instant::now())));
        let flight = async move { task.await.unwrap_or((failed, Instant::now())) }
            .boxed()
            .shared();
        flights.map.insert(key, flight.clone());
        flight
    }
}

type KindKey = (String, String);

/// Which kinds hold objects, asked of the API server with nac's own rights. Clones share everything.
#[derive(Clone)]
pub struct KubeOccupancy {
    client: kube::Client,
    epochs: Arc<Epochs>,
    budget: Duration,
    /// Whether nac may list a kind (`("*", "*")`: every kind) in every namespace: the RBAC state it was asked
    /// in and the answer (`None`: the review failed, not kept).
    listable: Arc<Flights<KindKey, (Stamp, Option<bool>)>>,
    /// Whether a kind held objects in a namespace.
    seen: Arc<Flights<(String, KindKey), Seen>>,
    /// The waits of the current second: when it began, and how many.
    waits: Arc<Mutex<(Instant, usize)>>,
    /// The lists that may be sent now ([`LISTS_PER_SECOND`]), and when that was counted.
    tokens: Arc<Mutex<(f64, Instant)>>,
    /// The lists sent (`nac_rights_occupancy_lists_total`).
    lists: Counter,
    /// `rights.warning_lookups`: off, nothing is looked into.
    on: bool,
}

impl KubeOccupancy {
    pub fn new(client: kube::Client, epochs: Arc<Epochs>) -> KubeOccupancy {
        KubeOccupancy {
            client,
            epochs,
            budget: BUDGET,
            listable: Arc::new(Flights::new()),
            seen: Arc::new(Flights::new()),
            waits: Arc::new(Mutex::new((Instant::now(), 0))),
            tokens: Arc::new(Mutex::new((LISTS_PER_SECOND, Instant::now()))),
            lists: Counter::default(),
            on: true,
        }
    }

    /// Looks into nothing: every kind is one nac may not look into.
    pub fn off(mut self) -> KubeOccupancy {
        self.on = false;
        self
    }

    /// Counts the lists sent on `counter` (a metric's).
    pub fn counting(mut self, counter: Counter) -> KubeOccupancy {
        self.lists = counter;
        self
    }

    #[cfg(test)]
    fn with_budget(mut self, budget: Duration) -> KubeOccupancy {
        self.budget = budget;
        self
    }

    /// Whether nac may list `group`/`resource` in every namespace (a SelfSubjectAccessReview).
    async fn listable(&self, group: &str, resource: &str) -> Option<bool> {
        let epochs = self.epochs.clone();
        let keep = move |v: &(Stamp, Option<bool>), at: Instant| {
            v.1.is_some() && v.0 == epochs.stamp("") && at.elapsed() < LISTABLE_TTL
        };
        // Taken before the review is sent: an RBAC change while it is answered stales the answer.
        let stamp = self.epochs.stamp("");
        let (client, g, r) = (self.client.clone(), group.to_string(), resource.to_string());
        let start = move || async move { (stamp, self_review_list(client, g, r).await) }.boxed();
        let key = (group.to_string(), resource.to_string());
        self.listable.get(key, keep, (stamp, None), start).await.0 .1
    }

    /// For each of `kinds`: what nac knows of whether it holds objects in `namespace`, within the budget (none
    /// past [`WAITS_PER_SECOND`]).
    pub async fn occupied(&self, namespace: &str, kinds: &[&Kind]) -> Vec<Seen> {
        if !self.on {
            return vec![Seen::NotAllowed; kinds.len()];
        }
        if namespace.is_empty() {
            // Never a list across namespaces.
            return vec![Seen::Unknown; kinds.len()];
        }
        let known = self.look(namespace, kinds, Duration::ZERO).await;
        if !known.contains(&Seen::Unknown) {
            return known;
        }
        if !self.may_wait() {
            // The lookups run on their own (answers kept for the next creates); this create takes what is known.
            let (this, ns) = (self.clone(), namespace.to_string());
            let owned: Vec<Kind> = kinds.iter().map(|k| (*k).clone()).collect();
            tokio::spawn(async move {
                let refs: Vec<&Kind> = owned.iter().collect();
                this.look(&ns, &refs, this.budget).await;
            });
            return known;
        }
        self.look(namespace, kinds, self.budget).await
    }

    /// Whether another create may wait this second.
    fn may_wait(&self) -> bool {
        let mut w = self.waits.lock().expect("occupancy waits");
        if w.0.elapsed() >= Duration::from_secs(1) {
            *w = (Instant::now(), 0);
        }
        w.1 += 1;
        w.1 <= WAITS_PER_SECOND
    }

    /// The lookups of `kinds` in `namespace`, waited for `budget` at most: a kept answer is returned at once, one
    /// still unknown then is [`Seen::Unknown`].
    async fn look(&self, namespace: &str, kinds: &[&Kind], budget: Duration) -> Vec<Seen> {
        let deadline = tokio::time::Instant::now() + budget;
        let every = async { self.listable("*", "*").await == Some(true) }.shared();
        futures::future::join_all(kinds.iter().map(|k| {
            let every = every.clone();
            async move {
                let look = async {
                    if !every.await {
                        match self.listable(&k.group, &k.resource).await {
                            Some(true) => {}
                            Some(false) => return Seen::NotAllowed,
                            None => return Seen::Unknown,
                        }
                    }
                    self.holds(namespace, k).await
                };
                tokio::time::timeout_at(deadline, look).await.unwrap_or(Seen::Unknown)
            }
        }))
        .await
    }

    async fn holds(&self, namespace: &str, kind: &Kind) -> Seen {
        let key = (namespace.to_string(), (kind.group.clone(), kind.resource.clone()));
        let keep = |v: &Seen, at: Instant| *v != Seen::Unknown && at.elapsed() < SEEN_TTL;
        let ar = kind.api_resource();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &ar);
        let (lists, name, ns) = (self.lists.clone(), kind.filter_name(), namespace.to_string());
        let tokens = self.tokens.clone();
        let start = move || {
            async move {
                take_token(&tokens).await;
                lists.inc();
                match api.list_metadata(&ListParams::default().limit(1)).await {
                    Ok(list) if list.items.is_empty() => Seen::Empty,
                    Ok(_) => Seen::Holds,
                    Err(e) => {
                        tracing::debug!(kind = %name, namespace = %ns, error = %e, "whether a kind holds objects is unknown");
                        Seen::Unknown
                    }
                }
            }
            .boxed()
        };
        self.seen.get(key, keep, Seen::Unknown, start).await.0
    }
}

/// Waits until a list may be sent ([`LISTS_PER_SECOND`]) and takes its token.
async fn take_token(tokens: &Mutex<(f64, Instant)>) {
    loop {
        let wait = {
            let mut t = tokens.lock().expect("occupancy tokens");
            let now = Instant::now();
            t.0 = (t.0 + now.duration_since(t.1).as_secs_f64() * LISTS_PER_SECOND).min(LISTS_PER_SECOND);
            t.1 = now;
            if t.0 >= 1.0 {
                t.0 -= 1.0;
                return;
            }
            Duration::from_secs_f64((1.0 - t.0) / LISTS_PER_SECOND)
        };
        tokio::time::sleep(wait).await;
    }
}

/// Whether nac may list `group`/`resource` in every namespace; `None` when the review fails.
async fn self_review_list(client: kube::Client, group: String, resource: String) -> Option<bool> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("list".into()),
                group: Some(group),
                resource: Some(resource),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<SelfSubjectAccessReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(r) => Some(r.status.is_some_and(|s| s.allowed)),
        Err(e) => {
            tracing::debug!(error = %e, "whether nac may list a kind is unknown");
            None
        }
    }
}

/// What a warning says of the left-out kinds: the order it names them in (those that hold objects, those nac
/// cannot tell of, those that hold none; alphabetically within each) and how many are in each group.
#[derive(Debug, PartialEq, Eq)]
pub struct Ranked {
    pub names: Vec<String>,
    pub holding: usize,
    pub empty: usize,
    /// Those nac may not list.
    pub not_allowed: usize,
    /// Those whose lookup failed or did not answer in time.
    pub unknown: usize,
}

pub fn by_occupancy(denied: &[String], seen: &[Seen]) -> Ranked {
    let rank = |s: Seen| -> u8 {
        match s {
            Seen::Holds => 0,
            Seen::NotAllowed | Seen::Unknown => 1,
            Seen::Empty => 2,
        }
    };
    let seen: Vec<Seen> = seen
        .iter()
        .copied()
        .chain(std::iter::repeat(Seen::Unknown))
        .take(denied.len())
        .collect();
    let count = |s: Seen| seen.iter().filter(|x| **x == s).count();
    let mut ranked: Vec<(u8, &String)> = denied.iter().zip(&seen).map(|(d, s)| (rank(*s), d)).collect();
    ranked.sort();
    Ranked {
        names: ranked.into_iter().map(|(_, d)| d.clone()).collect(),
        holding: count(Seen::Holds),
        empty: count(Seen::Empty),
        not_allowed: count(Seen::NotAllowed),
        unknown: count(Seen::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn kinds_holding_objects_come_first_and_empty_ones_last() {
        let denied: Vec<String> = ["backups.velero.io", "events", "secrets", "configmaps", "leases"]
            .map(String::from)
            .to_vec();
        let r = by_occupancy(
            &denied,
            &[Seen::Unknown, Seen::Empty, Seen::Holds, Seen::Holds, Seen::NotAllowed],
        );
        assert_eq!(
            r.names,
            ["configmaps", "secrets", "backups.velero.io", "leases", "events"]
        );
        assert_eq!((r.holding, r.empty, r.not_allowed, r.unknown), (2, 1, 1, 1));
    }

    type MockApi =
        tower_test::mock::Handle<hyper::http::Request<kube::client::Body>, hyper::http::Response<kube::client::Body>>;

    fn reply(send: tower_test::mock::SendResponse<hyper::http::Response<kube::client::Body>>, body: &Value) {
        send.send_response(
            hyper::http::Response::builder()
                .status(if body["kind"] == "SelfSubjectAccessReview" {
                    201
                } else {
                    200
                })
                .body(kube::client::Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap(),
        );
    }

    /// A mock API server: SelfSubjectAccessReviews answered by `may_list(resource)`, lists by whether the
    /// resource is in `holding`, each after `pause`; returns the paths of the lists.
    fn api_server(
        mut handle: MockApi,
        may_list: fn(&str) -> bool,
        holding: &'static [&'static str],
        pause: Duration,
    ) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
        tokio::spawn(async move {
            let (mut reviews, mut lists) = (0, Vec::new());
            while let Some((req, send)) = handle.next_request().await {
                let path = req.uri().to_string();
                if req.uri().path().ends_with("/selfsubjectaccessreviews") {
                    reviews += 1;
                    let body = axum::body::to_bytes(axum::body::Body::new(req.into_body()), 1 << 20)
                        .await
                        .unwrap();
                    let r: Value = serde_json::from_slice(&body).unwrap();
                    let resource = r["spec"]["resourceAttributes"]["resource"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    let allowed = may_list(&resource);
                    reply(
                        send,
                        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                                "spec": {}, "status": {"allowed": allowed}}),
                    );
                    continue;
                }
                let accept = req.headers()["accept"].to_str().unwrap().to_string();
                assert!(
                    accept.contains("as=PartialObjectMetadataList"),
                    "metadata only: {accept}"
                );
                lists.push(path.clone());
                let resource = req.uri().path().rsplit('/').next().unwrap().to_string();
                let items = if holding.contains(&resource.as_str()) {
                    json!([{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"name": "x"}}])
                } else {
                    json!([])
                };
                tokio::time::sleep(pause).await;
                reply(
                    send,
                    &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                            "metadata": {}, "items": items}),
                );
            }
            (reviews, lists)
        })
    }

    fn kinds() -> Vec<Kind> {
        vec![
            Kind::new("", "secrets", "Secret", &[]),
            Kind::new("velero.io", "backups", "Backup", &[]),
            Kind::new("coordination.k8s.io", "leases", "Lease", &[]),
        ]
    }

    #[tokio::test]
    async fn a_burst_of_creates_costs_one_list_per_kind_in_its_namespace_only() {
        let (service, handle) = tower_test::mock::pair();
        let server = api_server(handle, |_| true, &["secrets"], Duration::from_millis(50));
        let occupancy = Arc::new(KubeOccupancy::new(
            kube::Client::new(service, "default"),
            Arc::default(),
        ));
        let all = kinds();
        let k: Vec<&Kind> = all.iter().collect();
        // As many creates at once as may wait, then another after they are answered: one list per kind.
        let answers = futures::future::join_all((0..WAITS_PER_SECOND).map(|_| occupancy.occupied("team-a", &k))).await;
        let expected = vec![Seen::Holds, Seen::Empty, Seen::Empty];
        assert!(answers.iter().all(|a| *a == expected), "{answers:?}");
        assert_eq!(occupancy.occupied("team-a", &k).await, expected);
        assert_eq!(occupancy.lists.get(), 3);
        // Another namespace is looked at on its own (in the next second: this one's waits are used up); none is
        // ever listed across namespaces.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(occupancy.occupied("team-b", &k[..1]).await, [Seen::Holds]);
        assert_eq!(occupancy.occupied("", &k[..1]).await, [Seen::Unknown]);
        drop(occupancy);
        let (reviews, lists) = server.await.unwrap();
        assert_eq!(reviews, 1, "nac may list every kind: one review for all");
        let mut lists = lists;
        lists.sort();
        assert_eq!(
            lists,
            [
                "/api/v1/namespaces/team-a/secrets?&limit=1",
                "/api/v1/namespaces/team-b/secrets?&limit=1",
                "/apis/coordination.k8s.io/v1/namespaces/team-a/leases?&limit=1",
                "/apis/velero.io/v1/namespaces/team-a/backups?&limit=1",
            ]
        );
    }

    #[tokio::test]
    async fn a_burst_does_not_wait_for_the_lookups_and_they_serve_the_next_creates() {
        let (service, handle) = tower_test::mock::pair();
        let server = api_server(handle, |_| true, &["secrets"], Duration::from_millis(100));
        let occupancy = KubeOccupancy::new(kube::Client::new(service, "default"), Arc::default());
        let all = kinds();
        let k: Vec<&Kind> = all.iter().collect();
        // Sixteen creates at once in new namespaces: those past the first WAITS_PER_SECOND do not wait.
        let started = Instant::now();
        let timed = |ns: String| {
            let (o, k) = (&occupancy, &k);
            async move {
                let answers = o.occupied(&ns, k).await;
                (answers, started.elapsed())
            }
        };
        let answers = futures::future::join_all((0..16).map(|i| timed(format!("team-{i}")))).await;
        let at_once: Vec<_> = answers.iter().filter(|(_, t)| *t < Duration::from_millis(50)).collect();
        assert_eq!(at_once.len(), 16 - WAITS_PER_SECOND, "{answers:?}");
        assert!(at_once.iter().all(|(a, _)| *a == [Seen::Unknown; 3]), "{at_once:?}");
        // Their lookups went on: each namespace's answers are there for its next create (the mock answers one
        // request at a time, 100 ms each).
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in 0..16 {
            // What is known without waiting, polled until the lists are answered.
            while occupancy
                .look(&format!("team-{i}"), &k, Duration::ZERO)
                .await
                .contains(&Seen::Unknown)
            {
                assert!(Instant::now() < deadline, "team-{i}'s lookups went on");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        for i in 0..16 {
            let t = Instant::now();
            let a = occupancy.occupied(&format!("team-{i}"), &k).await;
            assert_eq!(a, [Seen::Holds, Seen::Empty, Seen::Empty], "team-{i}");
            assert!(t.elapsed() < Duration::from_millis(50));
        }
        assert_eq!(occupancy.lists.get(), 48, "one list per kind and namespace");
        drop(occupancy);
        server.abort();
    }

    #[tokio::test]
    async fn lists_are_sent_at_most_at_their_rate() {
        let tokens = Mutex::new((LISTS_PER_SECOND, Instant::now()));
        let start = Instant::now();
        // The first burst at once, then LISTS_PER_SECOND a second: 25 more take half a second.
        for _ in 0..(LISTS_PER_SECOND as usize + 25) {
            take_token(&tokens).await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(450), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
    }

    #[tokio::test]
    async fn kinds_nac_may_not_list_are_not_listed() {
        let (service, handle) = tower_test::mock::pair();
        // As the chart installs nac without rights.listEveryKind: of these kinds, Secrets only.
        let server = api_server(handle, |r| r == "secrets", &["secrets"], Duration::ZERO);
        let occupancy = KubeOccupancy::new(kube::Client::new(service, "default"), Arc::default());
        let all = kinds();
        let k: Vec<&Kind> = all.iter().collect();
        let expected = [Seen::Holds, Seen::NotAllowed, Seen::NotAllowed];
        assert_eq!(occupancy.occupied("team-a", &k).await, expected);
        assert_eq!(occupancy.occupied("team-a", &k).await, expected);
        drop(occupancy);
        let (reviews, lists) = server.await.unwrap();
        assert_eq!(reviews, 4, "every kind, then each kind once");
        assert_eq!(lists, ["/api/v1/namespaces/team-a/secrets?&limit=1"]);
    }

    #[tokio::test]
    async fn lookups_past_the_budget_are_unknown_and_serve_the_next_create() {
        let (service, handle) = tower_test::mock::pair();
        // The mock answers one request at a time: the three lists take 450 ms.
        let server = api_server(handle, |_| true, &["secrets"], Duration::from_millis(150));
        let occupancy = KubeOccupancy::new(kube::Client::new(service, "default"), Arc::default())
            .with_budget(Duration::from_millis(50));
        let all = kinds();
        let k: Vec<&Kind> = all.iter().collect();
        assert_eq!(occupancy.occupied("team-a", &k).await, [Seen::Unknown; 3]);
        // The lists went on without the create that started them.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            occupancy.occupied("team-a", &k).await,
            [Seen::Holds, Seen::Empty, Seen::Empty]
        );
        drop(occupancy);
        assert_eq!(server.await.unwrap().1.len(), 3);
    }
}
