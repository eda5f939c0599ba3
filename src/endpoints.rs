//! What nac needs to judge tenants' storage endpoints (`policy::evaluate_bsl_endpoints`, pure): the addresses
//! their names resolve to, and the cluster's own Service and pod networks, which no tenant endpoint may reach
//! without the policy's allow-list. The networks are `endpoints.cluster_networks` when set; otherwise read from
//! the cluster (its ServiceCIDR objects and its Nodes' pod CIDRs) at start and every ten minutes, with the
//! private ranges standing in for a network that cannot be read.
//!
//! Velero resolves a location's names again when it connects, so a name can answer differently then (DNS
//! rebinding); nac's own fetches do not have that gap: [`Guard`] resolves once, judges, and connects only to the
//! addresses it judged.

use crate::policy::{evaluate_bsl_endpoints, Host, Network, NonAdminBsl, Outcome, Policy};
use futures::future::BoxFuture;
use ipnet::IpNet;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// How long one name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the cluster's networks are read again when they are not configured.
const REDETECT: Duration = Duration::from_secs(600);

/// Resolves host names to addresses.
pub trait Resolve: Send + Sync {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>>;
}

/// The system's resolver (the pod's DNS, as the rest of the cluster sees names).
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        Box::pin(async move {
            let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, 0)))
                .await
                .map_err(|_| format!("no answer within {}s", RESOLVE_TIMEOUT.as_secs()))?
                .map_err(|e| e.to_string())?;
            let mut addrs: Vec<IpAddr> = found.map(|a| a.ip()).collect();
            addrs.sort();
            addrs.dedup();
            Ok(addrs)
        })
    }
}

/// Fixed answers (tests): names not listed do not resolve.
pub struct FixedResolver(pub BTreeMap<String, Vec<IpAddr>>);

impl Resolve for FixedResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        let found = self.0.get(name).cloned().ok_or_else(|| "no such host".to_string());
        Box::pin(async move { found })
    }
}

/// What nac knows for judging tenants' endpoints.
pub struct Endpoints {
    resolver: Arc<dyn Resolve>,
    cluster: arc_swap::ArcSwap<Vec<(IpNet, String)>>,
    /// The nodes' addresses: read from the cluster whether or not the networks are configured.
    nodes: arc_swap::ArcSwap<Vec<(IpAddr, String)>>,
    /// Configured (`endpoints.cluster_networks`): never read from the cluster.
    configured: bool,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("cluster", &self.cluster.load())
            .finish()
    }
}

/// The private ranges, standing in for the cluster's networks nac does not know.
fn private_ranges(missing: &str) -> Vec<(IpNet, String)> {
    crate::policy::PRIVATE_RANGES
        .iter()
        .map(|r| {
            (
                IpNet::from_str(r).expect("literal CIDR"),
                format!(
                    "a private range, refused because nac does not know the cluster's {missing} (set \
                     endpoints.cluster_networks)"
                ),
            )
        })
        .collect()
}

impl Endpoints {
    /// With `networks` (CIDRs, validated by the settings) as the cluster's networks; none: the private ranges
    /// until [`Endpoints::detect`] reads them.
    pub fn new(resolver: Arc<dyn Resolve>, networks: &[String]) -> Endpoints {
        let configured: Vec<(IpNet, String)> = networks
            .iter()
            .filter_map(|n| parse_cidr(n).ok())
            .map(|n| (n, "the cluster's networks (endpoints.cluster_networks)".to_string()))
            .collect();
        let is_configured = !configured.is_empty();
        let cluster = if is_configured {
            configured
        } else {
            private_ranges("Service and pod networks")
        };
        Endpoints {
            resolver,
            cluster: arc_swap::ArcSwap::from_pointee(cluster),
            nodes: arc_swap::ArcSwap::from_pointee(Vec::new()),
            configured: is_configured,
        }
    }

    /// The system resolver and `networks`.
    pub fn system(networks: &[String]) -> Endpoints {
        Endpoints::new(Arc::new(SystemResolver), networks)
    }

    /// Fixed answers and networks (tests).
    pub fn fixed(names: &[(&str, &[&str])], networks: &[&str]) -> Endpoints {
        let map = names
            .iter()
            .map(|(n, a)| {
                (
                    n.to_string(),
                    a.iter().map(|a| a.parse().expect("test address")).collect(),
                )
            })
            .collect();
        let networks: Vec<String> = networks.iter().map(|s| s.to_string()).collect();
        Endpoints::new(Arc::new(FixedResolver(map)), &networks)
    }

    pub fn cluster(&self) -> Arc<Vec<(IpNet, String)>> {
        self.cluster.load_full()
    }

    pub fn nodes(&self) -> Arc<Vec<(IpAddr, String)>> {
        self.nodes.load_full()
    }

    /// Sets the nodes' addresses (tests; [`Endpoints::watch_cluster`] keeps them current).
    pub fn set_nodes(&self, nodes: Vec<(IpAddr, String)>) {
        self.nodes.store(Arc::new(nodes));
    }

    pub async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        self.resolver.resolve(name).await
    }

    /// The network facts for a spec: the names the rule needs resolved, resolved (at once).
    pub async fn network(&self, spec: &Map<String, Value>, rules: &NonAdminBsl) -> Network {
        let names = crate::policy::names_to_resolve(spec, rules);
        let answers = futures::future::join_all(names.iter().map(|n| self.resolve(n))).await;
        Network {
            cluster: (*self.cluster()).clone(),
            resolved: names.into_iter().zip(answers).collect(),
            nodes: (*self.nodes()).clone(),
        }
    }

    /// The policy and the endpoint rule on a tenant location's spec.
    pub async fn evaluate(&self, spec: &Map<String, Value>, policy: &Policy) -> Outcome {
        let net = self.network(spec, &policy.non_admin_bsl).await;
        evaluate_bsl_endpoints(spec, policy, &net)
    }

    /// Reads the nodes' addresses, and the cluster's networks unless configured, now and every ten minutes
    /// after.
    pub fn watch_cluster(self: &Arc<Self>, client: kube::Client) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if !me.configured {
                    let found = detect(&client).await;
                    tracing::info!(networks = ?found.iter().map(|(n, w)| format!("{n} ({w})")).collect::<Vec<_>>(),
                        "the cluster's networks, refused to tenants' endpoints without an allow-list");
                    me.cluster.store(Arc::new(found));
                }
                match node_addresses(&client).await {
                    Ok(found) => {
                        tracing::info!(
                            nodes = found.len(),
                            "the nodes' addresses, refused to tenants' endpoints"
                        );
                        me.nodes.store(Arc::new(found));
                    }
                    // The last addresses read stay: a passing API failure opens nothing.
                    Err(e) => tracing::warn!(error = %e, "cannot read the nodes' addresses; the last ones read stay"),
                }
                tokio::time::sleep(REDETECT).await;
            }
        });
    }
}

/// A CIDR, or one address.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    IpNet::from_str(s)
        .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("{s:?} is not a CIDR (such as 10.96.0.0/12)"))
}

/// The cluster's Service networks (ServiceCIDR objects) and pod networks (Nodes' pod CIDRs); the private ranges
/// for what cannot be read.
pub async fn detect(client: &kube::Client) -> Vec<(IpNet, String)> {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::networking::v1::ServiceCIDR;
    use kube::api::{Api, ListParams};
    let mut out = Vec::new();
    let mut missing = Vec::new();
    match Api::<ServiceCIDR>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let found: Vec<IpNet> = list
                .items
                .iter()
                .flat_map(|s| s.spec.as_ref().and_then(|s| s.cidrs.clone()).unwrap_or_default())
                .filter_map(|c| parse_cidr(&c).ok())
                .collect();
            if found.is_empty() {
                missing.push("Service network");
            }
            out.extend(
                found
                    .into_iter()
                    .map(|n| (n, "the cluster's Service network".to_string())),
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cluster's ServiceCIDRs; private ranges stand in");
            missing.push("Service network");
        }
    }
    match Api::<Node>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => {
            let found: Vec<IpNet> = list
                .items
                .iter()
                .flat_map(|n| {
                    let spec = n.spec.clone().unwrap_or_default();
                    spec.pod_cidrs.unwrap_or_default().into_iter().chain(spec.pod_cidr)
                })
                .filter_map(|c| parse_cidr(&c).ok())
                .collect();
            if found.is_empty() {
                missing.push("pod network");
            }
            for n in found {
                if !out.iter().any(|(have, _)| *have == n) {
                    out.push((n, "the cluster's pod network".to_string()));
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the Nodes' pod CIDRs; private ranges stand in");
            missing.push("pod network");
        }
    }
    if !missing.is_empty() {
        out.extend(private_ranges(&missing.join(" and ")));
    }
    out
}

/// Every address of every Node (`status.addresses`: internal and external IPs), each with the node it belongs to.
pub async fn node_addresses(client: &kube::Client) -> Result<Vec<(IpAddr, String)>, kube::Error> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, ListParams};
    let list = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
    let mut out: Vec<(IpAddr, String)> = Vec::new();
    for n in &list.items {
        let name = n.metadata.name.clone().unwrap_or_default();
        for a in n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
        {
            if let Ok(ip) = IpAddr::from_str(a.address.trim()) {
                let ip = ip.to_canonical();
                if !out.iter().any(|(have, _)| *have == ip) {
                    out.push((ip, format!("the address of node {name}")));
                }
            }
        }
    }
    Ok(out)
}

/// The rule for nac's own connections to a tenant's storage (a signed URL of a backup on it): the policy's
/// rules for tenants' locations, with the addresses judged at connect time.
#[derive(Clone)]
pub struct Guard {
    pub rules: Arc<NonAdminBsl>,
    pub endpoints: Arc<Endpoints>,
}

impl Guard {
    /// Why nac may not connect to `host` at `addrs` (resolved from it, or the address itself), if it may not.
    pub fn refuse(&self, host: &Host, addrs: &[IpAddr]) -> Option<String> {
        let mut net = Network {
            cluster: (*self.endpoints.cluster()).clone(),
            resolved: BTreeMap::new(),
            nodes: (*self.endpoints.nodes()).clone(),
        };
        if let Host::Name(n) = host {
            net.resolved.insert(n.clone(), Ok(addrs.to_vec()));
        }
        crate::policy::judge_host(host, &self.rules, &net)
    }

    /// The addresses nac may connect to for `name`: resolved once and judged, so the connection goes to an
    /// address that was checked.
    pub async fn addresses(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        let host = crate::policy::host_of(name)?;
        let addrs = match &host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(n) => self
                .endpoints
                .resolve(n)
                .await
                .map_err(|e| format!("resolving {n}: {e}"))?,
        };
        match self.refuse(&host, &addrs) {
            Some(why) => Err(why),
            None => Ok(addrs),
        }
    }
}
