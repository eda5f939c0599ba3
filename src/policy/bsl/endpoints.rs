//! Where a tenant's storage location makes Velero (and nac, fetching signed URLs) send requests from inside the
//! cluster: the endpoints in its config (`s3Url`, `publicUrl`, any URL-valued key), judged against the policy's
//! `nonAdminBSL.allowedEndpoints` or, without one, against the ranges no tenant endpoint may reach (loopback,
//! link-local, unspecified, the cluster's own networks). Pure: the caller resolves the names this module lists
//! ([`names_to_resolve`]) and hands in the answers and the cluster's networks ([`Network`]).

use super::super::{problem, PolicyProblem, Violation};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::str::FromStr;

/// `nonAdminBSL.allowedEndpoints`: the only endpoints tenants' locations may name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedEndpoints {
    pub hosts: Vec<HostRule>,
    pub cidrs: Vec<IpNet>,
}

/// One entry of `allowedEndpoints.hosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostRule {
    /// A host name, lower case, without a trailing dot.
    Name(String),
    /// `*.example.com`: any name below `example.com` (kept as `.example.com`), not the domain itself.
    Below(String),
    /// An address written as a host.
    Ip(IpAddr),
}

impl HostRule {
    fn allows(&self, host: &Host) -> bool {
        match (self, host) {
            (HostRule::Name(n), Host::Name(h)) => n == h,
            (HostRule::Below(suffix), Host::Name(h)) => h.ends_with(suffix.as_str()) && h.len() > suffix.len(),
            (HostRule::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }
}

impl std::fmt::Display for HostRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostRule::Name(n) => f.write_str(n),
            HostRule::Below(s) => write!(f, "*{s}"),
            HostRule::Ip(a) => write!(f, "{a}"),
        }
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(in crate::policy) struct RawAllowedEndpoints {
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    cidrs: Vec<String>,
}

const SECTION: &str = "nonAdminBSL.allowedEndpoints";

pub(in crate::policy) fn parse_allowed(
    raw: RawAllowedEndpoints,
    problems: &mut Vec<PolicyProblem>,
) -> AllowedEndpoints {
    let mut out = AllowedEndpoints::default();
    for (i, h) in raw.hosts.iter().enumerate() {
        match host_rule(h) {
            Some(r) if !out.hosts.contains(&r) => out.hosts.push(r),
            Some(_) => {}
            None => problems.push(problem(
                format!("{SECTION}.hosts[{i}]"),
                format!(
                    "{h:?} is not a host name, `*.` and a domain, or an IP address (no scheme, port or path: the \
                     host of an s3Url)"
                ),
            )),
        }
    }
    for (i, c) in raw.cidrs.iter().enumerate() {
        let c = c.trim();
        let net = IpNet::from_str(c)
            .or_else(|_| IpAddr::from_str(c).map(IpNet::from))
            .map(|n| n.trunc());
        match net {
            Ok(n) if !out.cidrs.contains(&n) => out.cidrs.push(n),
            Ok(_) => {}
            Err(_) => problems.push(problem(
                format!("{SECTION}.cidrs[{i}]"),
                format!("{c:?} is not a CIDR (such as 203.0.113.0/24 or 2001:db8::/32)"),
            )),
        }
    }
    out
}

fn host_rule(s: &str) -> Option<HostRule> {
    let s = s.trim().trim_end_matches('.').to_ascii_lowercase();
    let unbracketed = s.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = IpAddr::from_str(unbracketed) {
        return Some(HostRule::Ip(canonical(ip)));
    }
    match s.strip_prefix("*.") {
        Some(domain) if is_dns_name(domain) => Some(HostRule::Below(format!(".{domain}"))),
        Some(_) => None,
        None => is_dns_name(&s).then_some(HostRule::Name(s)),
    }
}

fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 address it reaches.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The host of an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Ip(a) => write!(f, "{a}"),
            Host::Name(n) => f.write_str(n),
        }
    }
}

/// Config keys that hold endpoints whatever their value looks like: the aws plugin's `s3Url` and `publicUrl`,
/// and, for other providers, any key naming a URL, URI or endpoint.
fn is_endpoint_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("url") || k.contains("uri") || k.contains("endpoint")
}

/// The host of `value`, a URL (`http(s)://host[:port][/path]`) or, in an endpoint key, `host[:port]`.
pub fn host_of(value: &str) -> Result<Host, String> {
    let v = value.trim();
    let with_scheme = if v.contains("://") {
        v.to_string()
    } else {
        format!("http://{v}")
    };
    let uri: hyper::Uri = with_scheme.parse().map_err(|e| format!("not a URL ({e})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(format!("scheme {other} is not http or https")),
        None => return Err("not a URL".into()),
    }
    let host = uri.host().filter(|h| !h.is_empty()).ok_or("no host")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    Ok(match IpAddr::from_str(&host) {
        Ok(ip) => Host::Ip(canonical(ip)),
        Err(_) => Host::Name(host),
    })
}

/// The endpoints in a location spec's config, each with its host or why it has none. Values the policy itself
/// pins (`enforceBSLSpec.config`) are the administrator's and are not listed.
pub fn endpoints(
    spec: &Map<String, Value>,
    enforced: &Map<String, Value>,
) -> Vec<(String, String, Result<Host, String>)> {
    let Some(config) = spec.get("config").and_then(Value::as_object) else {
        return Vec::new();
    };
    let pinned = enforced.get("config").and_then(Value::as_object);
    config
        .iter()
        .filter_map(|(k, v)| Some((k, v.as_str()?)))
        .filter(|(k, v)| !v.trim().is_empty() && (is_endpoint_key(k) || v.contains("://")))
        .filter(|(k, v)| pinned.and_then(|p| p.get(*k)).and_then(Value::as_str) != Some(*v))
        .map(|(k, v)| (k.clone(), v.to_string(), host_of(v)))
        .collect()
}

/// What the caller learned for the judgement: the cluster's own networks and what the listed names resolve to.
#[derive(Clone, Debug, Default)]
pub struct Network {
    /// Networks no tenant endpoint may reach without an allow-list, each with what it is.
    pub cluster: Vec<(IpNet, String)>,
    /// The addresses of each name [`names_to_resolve`] listed, or why it could not be resolved.
    pub resolved: BTreeMap<String, Result<Vec<IpAddr>, String>>,
    /// The nodes' own addresses, each with what it is: refused like [`METADATA`] (a node's kubelet and host
    /// services answer there), whatever the networks.
    pub nodes: Vec<(IpAddr, String)>,
}

/// Cloud metadata services outside the link-local range, refused whatever the networks detected or the CIDRs
/// allowed, unless `allowedEndpoints.hosts` names the address itself: they hand out the node's cloud identity.
pub const METADATA: &[(&str, &str)] = &[
    (
        "169.254.169.254/32",
        "a cloud metadata service (AWS, GCP, Azure, OpenStack)",
    ),
    (
        "169.254.170.2/32",
        "a cloud metadata service (AWS container credentials)",
    ),
    ("169.254.170.23/32", "a cloud metadata service (AWS EKS Pod Identity)"),
    ("fd00:ec2::254/128", "a cloud metadata service (AWS, IPv6)"),
    (
        "fd00:ec2::23/128",
        "a cloud metadata service (AWS EKS Pod Identity, IPv6)",
    ),
    ("fd20:ce::254/128", "a cloud metadata service (GCP, IPv6)"),
    ("100.100.100.200/32", "a cloud metadata service (Alibaba Cloud)"),
    ("168.63.129.16/32", "a cloud platform service (Azure WireServer)"),
    ("192.0.0.192/32", "a cloud metadata service (Oracle Cloud)"),
];

/// Why `ip` is protected (a metadata service, or a node), if it is; an IPv4 address carried in an IPv6 one
/// (NAT64's well-known prefix, 6to4) is judged as the IPv4 address it reaches.
fn protected(ip: IpAddr, net: &Network) -> Option<String> {
    let mut candidates = vec![ip];
    candidates.extend(embedded_v4(ip));
    candidates.into_iter().find_map(|ip| {
        METADATA
            .iter()
            .find_map(|(n, what)| {
                let n = IpNet::from_str(n).expect("literal CIDR");
                n.contains(&ip).then(|| format!("{ip} is {what}"))
            })
            .or_else(|| {
                net.nodes
                    .iter()
                    .find(|(a, _)| *a == ip)
                    .map(|(a, what)| format!("{a} is {what}"))
            })
    })
}

/// The IPv4 address an IPv6 address reaches through NAT64 (`64:ff9b::/96`, the local-use `64:ff9b:1::/48`) or
/// 6to4 (`2002::/16`).
fn embedded_v4(ip: IpAddr) -> Option<IpAddr> {
    let IpAddr::V6(v6) = ip else { return None };
    let s = v6.segments();
    let o = v6.octets();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..3] == [0x64, 0xff9b, 1] {
        return Some(IpAddr::from([o[12], o[13], o[14], o[15]]));
    }
    (s[0] == 0x2002).then(|| IpAddr::from([o[2], o[3], o[4], o[5]]))
}

/// Ranges refused to tenants' endpoints whatever nac knows of the cluster.
const ALWAYS: &[(&str, &str)] = &[
    ("127.0.0.0/8", "loopback"),
    ("::1/128", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata services answer there)"),
    ("fe80::/10", "link-local"),
    ("0.0.0.0/8", "unspecified (this host)"),
    ("::/128", "unspecified (this host)"),
    ("224.0.0.0/4", "multicast"),
    ("ff00::/8", "multicast"),
    ("255.255.255.255/32", "broadcast"),
];

/// Private ranges: they stand in for the cluster's pod network when nac does not know it.
pub const PRIVATE: &[&str] = &[
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
];

fn always_refused(ip: IpAddr) -> Option<(IpNet, &'static str)> {
    ALWAYS.iter().find_map(|(net, what)| {
        let net = IpNet::from_str(net).expect("literal CIDR");
        net.contains(&ip).then_some((net, *what))
    })
}

/// The names among a spec's endpoints whose addresses decide: every name without an allow-list, the names the
/// allow-list's hosts do not name when it has CIDRs.
pub fn names_to_resolve(spec: &Map<String, Value>, rules: &super::NonAdminBsl) -> Vec<String> {
    let mut out: Vec<String> = endpoints(spec, &rules.enforce_bsl_spec)
        .into_iter()
        .filter_map(|(_, _, h)| match h {
            Ok(Host::Name(n)) => Some(Host::Name(n)),
            _ => None,
        })
        .filter(|h| match &rules.allowed_endpoints {
            None => true,
            Some(a) => !a.cidrs.is_empty() && !a.hosts.iter().any(|r| r.allows(h)),
        })
        .map(|h| h.to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The endpoint rule on a spec: a violation per endpoint the policy does not allow, naming field, value and rule.
pub fn check(spec: &Map<String, Value>, rules: &super::NonAdminBsl, net: &Network) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, value, host) in endpoints(spec, &rules.enforce_bsl_spec) {
        let field = format!("{}.config.{key}", super::PREFIX);
        let refuse = |why: String| Violation {
            field: field.clone(),
            message: format!("{} {field} {value:?} is refused: {why}", super::NABSL),
        };
        let host = match host {
            Ok(h) => h,
            Err(e) => {
                out.push(refuse(format!("{e}; an endpoint is an http or https URL")));
                continue;
            }
        };
        if let Some(why) = judge_host(&host, rules, net) {
            out.push(refuse(why));
        }
    }
    out
}

/// Why `host` may not be a tenant's endpoint, if it may not (its addresses, for a name, from `net`).
pub fn judge_host(host: &Host, rules: &super::NonAdminBsl, net: &Network) -> Option<String> {
    match &rules.allowed_endpoints {
        Some(allowed) => by_allow_list(host, allowed, net),
        None => by_default_rule(host, net),
    }
}

/// The addresses of `host`: itself, or what its name resolved to (`Err`: the message part).
fn addresses(host: &Host, net: &Network) -> Result<Vec<IpAddr>, String> {
    match host {
        Host::Ip(ip) => Ok(vec![*ip]),
        Host::Name(n) => match net.resolved.get(n) {
            Some(Ok(a)) if !a.is_empty() => Ok(a.iter().map(|ip| canonical(*ip)).collect()),
            Some(Ok(_)) => Err(format!("host {n} resolves to no address")),
            Some(Err(e)) => Err(format!("host {n} cannot be resolved ({e})")),
            None => Err(format!("host {n} was not resolved")),
        },
    }
}

fn resolves_to(host: &Host, ip: IpAddr) -> String {
    match host {
        Host::Ip(_) => format!("{ip}"),
        Host::Name(n) => format!("host {n} resolves to {ip}, which"),
    }
}

fn by_allow_list(host: &Host, allowed: &AllowedEndpoints, net: &Network) -> Option<String> {
    if allowed.hosts.iter().any(|r| r.allows(host)) {
        return None;
    }
    // A CIDR never opens a metadata service or a node: only the address itself, listed in hosts. (Without CIDRs,
    // anything hosts does not name is refused below anyway.)
    if let (false, Ok(addrs)) = (allowed.cidrs.is_empty(), addresses(host, net)) {
        let always = |ip: IpAddr| always_refused(ip).map(|(n, what)| format!("{ip} is in {n}, {what}"));
        let opened = |ip: &IpAddr| allowed.cidrs.iter().any(|c| c.contains(ip));
        let named = |ip: &IpAddr| {
            allowed
                .cidrs
                .iter()
                .any(|c| c.prefix_len() == c.max_prefix_len() && c.addr() == *ip)
        };
        if let Some(why) = addrs
            .into_iter()
            .filter(|ip| opened(ip) && !named(ip))
            .find_map(|ip| protected(ip, net).or_else(|| always(ip)).map(|w| (ip, w)))
        {
            return Some(protected_refusal(host, why));
        }
    }
    let listed = || {
        let hosts: Vec<String> = allowed.hosts.iter().map(|h| h.to_string()).collect();
        let cidrs: Vec<String> = allowed.cidrs.iter().map(|c| c.to_string()).collect();
        format!(
            "policy {SECTION} allows hosts [{}] and cidrs [{}]",
            hosts.join(", "),
            cidrs.join(", ")
        )
    };
    if allowed.cidrs.is_empty() {
        return Some(format!("host {host} is not allowed ({})", listed()));
    }
    let addrs = match addresses(host, net) {
        Ok(a) => a,
        Err(e) => {
            return Some(format!(
                "{e}, and nac judges a name not in {SECTION}.hosts by its addresses ({})",
                listed()
            ))
        }
    };
    addrs
        .into_iter()
        .find(|ip| !allowed.cidrs.iter().any(|c| c.contains(ip)))
        .map(|ip| format!("{} is not allowed ({})", resolves_to(host, ip), listed()))
}

fn by_default_rule(host: &Host, net: &Network) -> Option<String> {
    let addrs = match addresses(host, net) {
        Ok(a) => a,
        Err(e) => {
            return Some(format!(
                "{e}: nac judges an endpoint by the addresses its name resolves to (retry, or ask the cluster \
                 administrator to list it in policy {SECTION}.hosts)"
            ))
        }
    };
    if let Some(why) = addrs.iter().find_map(|ip| protected(*ip, net).map(|w| (*ip, w))) {
        return Some(protected_refusal(host, why));
    }
    for ip in addrs {
        let hit = always_refused(ip).map(|(n, what)| (n, what.to_string())).or_else(|| {
            net.cluster
                .iter()
                .find(|(n, _)| n.contains(&ip))
                .map(|(n, what)| (*n, what.clone()))
        });
        if let Some((n, what)) = hit {
            return Some(format!(
                "{} is in {n}, {what}: tenants' endpoints may not reach it (policy nonAdminBSL has no \
                 allowedEndpoints that allows it)",
                resolves_to(host, ip)
            ));
        }
    }
    None
}

fn protected_refusal(host: &Host, (ip, why): (IpAddr, String)) -> String {
    let lead = match host {
        Host::Ip(_) => String::new(),
        Host::Name(n) => format!("host {n} resolves to {ip}: "),
    };
    format!(
        "{lead}{why}: tenants' endpoints may not reach it whatever the networks or CIDRs allowed (only the \
         address itself in policy {SECTION}, in hosts or as a single-address CIDR, allows it)"
    )
}

/// Whether a config value turns TLS verification off, as Velero's plugins parse it (Go's `strconv.ParseBool`;
/// anything it does not read as false is taken as on, so an odd spelling cannot slip through).
pub fn skips_tls_verify(v: &str) -> bool {
    !matches!(v.trim(), "" | "0" | "f" | "F" | "false" | "FALSE" | "False")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{evaluate_bsl, evaluate_bsl_endpoints, Policy};
    use serde_json::json;

    fn policy(extra: &str) -> Policy {
        Policy::parse(&format!("nonAdminBSL:\n  enabled: true\n{extra}")).unwrap()
    }

    fn spec(config: Value) -> Map<String, Value> {
        json!({"provider": "aws", "objectStorage": {"bucket": "b"}, "credential": {"name": "s3", "key": "cloud"},
               "config": config})
        .as_object()
        .unwrap()
        .clone()
    }

    fn net(names: &[(&str, &[&str])]) -> Network {
        Network {
            cluster: vec![
                ("10.0.0.0/24".parse().unwrap(), "the cluster's Service network".into()),
                ("10.244.0.0/16".parse().unwrap(), "the cluster's pod network".into()),
            ],
            resolved: names
                .iter()
                .map(|(n, a)| (n.to_string(), Ok(a.iter().map(|a| a.parse().unwrap()).collect())))
                .collect(),
            nodes: vec![("192.0.2.10".parse().unwrap(), "the address of node worker-1".into())],
        }
    }

    fn refusal(p: &Policy, s: &Map<String, Value>, n: &Network) -> Option<(String, String)> {
        let out = evaluate_bsl_endpoints(s, p, n);
        out.violations.first().map(|v| (v.field.clone(), v.message.clone()))
    }

    #[test]
    fn without_an_allow_list_loopback_link_local_unspecified_and_the_clusters_networks_are_refused() {
        let p = policy("");
        let n = net(&[("localhost", &["127.0.0.1"]), ("s3.example.com", &["203.0.113.7"])]);
        for (url, what) in [
            ("http://169.254.169.254/latest", "a cloud metadata service"),
            ("http://127.0.0.1:9000", "loopback"),
            ("http://[::1]:9000", "loopback"),
            ("http://[::ffff:127.0.0.1]", "loopback"),
            ("http://0.0.0.0:9000", "unspecified"),
            ("http://[fe80::1]", "link-local"),
            ("http://10.0.0.10", "Service network"),
            ("https://10.244.3.4:443", "pod network"),
            ("http://localhost:9000", "host localhost resolves to 127.0.0.1"),
        ] {
            let (field, msg) = refusal(&p, &spec(json!({"s3Url": url})), &n).unwrap_or_else(|| panic!("{url}"));
            assert_eq!(field, "spec.backupStorageLocationSpec.config.s3Url");
            assert!(msg.contains(what) && msg.contains(url), "{url}: {msg}");
        }
        assert_eq!(
            refusal(&p, &spec(json!({"s3Url": "http://169.254.169.254/latest"})), &n)
                .unwrap()
                .1,
            "NonAdminBackupStorageLocation spec.backupStorageLocationSpec.config.s3Url \"http://169.254.169.254/latest\" \
             is refused: 169.254.169.254 is a cloud metadata service (AWS, GCP, Azure, OpenStack): tenants' \
             endpoints may not reach it whatever the networks or CIDRs allowed (only the address itself in policy \
             nonAdminBSL.allowedEndpoints, in hosts or as a single-address CIDR, allows it)"
        );
        // A public address, by name or as an address, passes; no endpoint at all passes.
        assert!(refusal(&p, &spec(json!({"s3Url": "https://s3.example.com"})), &n).is_none());
        assert!(refusal(&p, &spec(json!({"s3Url": "https://203.0.113.9:8443/x"})), &n).is_none());
        assert!(refusal(&p, &spec(json!({"region": "eu-west-1"})), &n).is_none());
    }

    #[test]
    fn every_endpoint_key_counts_and_a_name_that_does_not_resolve_is_refused() {
        let p = policy("");
        let n = net(&[("s3.example.com", &["203.0.113.7"]), ("meta", &["169.254.169.254"])]);
        let (field, _) = refusal(
            &p,
            &spec(json!({"s3Url": "https://s3.example.com", "publicUrl": "http://meta"})),
            &n,
        )
        .unwrap();
        assert_eq!(field, "spec.backupStorageLocationSpec.config.publicUrl");
        // Another provider's URL key, and a URL under any key.
        for config in [
            json!({"storageAccountURI": "http://127.0.0.1"}),
            json!({"whatever": "https://169.254.169.254"}),
        ] {
            assert!(refusal(&p, &spec(config.clone()), &n).is_some(), "{config}");
        }
        // A name whose addresses are unknown cannot be judged: refused, saying so.
        let (_, msg) = refusal(&p, &spec(json!({"s3Url": "http://nowhere.invalid"})), &n).unwrap();
        assert!(msg.contains("host nowhere.invalid was not resolved"), "{msg}");
        let mut failed = n.clone();
        failed
            .resolved
            .insert("nowhere.invalid".into(), Err("no such host".into()));
        let (_, msg) = refusal(&p, &spec(json!({"s3Url": "http://nowhere.invalid"})), &failed).unwrap();
        assert!(msg.contains("cannot be resolved (no such host)"), "{msg}");
        // Not http(s), or no host at all.
        for bad in ["file:///etc/passwd", "unix:///var/run/x", "http://"] {
            assert!(refusal(&p, &spec(json!({"s3Url": bad})), &n).is_some(), "{bad}");
        }
        assert_eq!(
            names_to_resolve(
                &spec(json!({"s3Url": "https://S3.Example.com.", "publicUrl": "http://meta"})),
                &p.non_admin_bsl
            ),
            ["meta", "s3.example.com"]
        );
    }

    #[test]
    fn metadata_services_and_nodes_are_refused_whatever_the_networks_unless_listed_by_address() {
        // The networks known (nothing private stands in), the default rule.
        let p = policy("");
        let n = net(&[("imds.example", &["fd00:ec2::254"]), ("node.example", &["192.0.2.10"])]);
        for (url, says) in [
            (
                "http://168.63.129.16",
                "168.63.129.16 is a cloud platform service (Azure WireServer)",
            ),
            ("http://100.100.100.200/latest", "Alibaba Cloud"),
            (
                "http://[fd00:ec2::254]",
                "fd00:ec2::254 is a cloud metadata service (AWS, IPv6)",
            ),
            ("http://[fd20:ce::254]", "GCP, IPv6"),
            ("http://192.0.0.192", "Oracle Cloud"),
            (
                "http://[64:ff9b::a83f:8110]",
                "168.63.129.16 is a cloud platform service",
            ),
            (
                "http://[2002:a9fe:a9fe::1]",
                "169.254.169.254 is a cloud metadata service",
            ),
            (
                "http://imds.example",
                "host imds.example resolves to fd00:ec2::254: fd00:ec2::254 is",
            ),
            ("http://192.0.2.10:10250", "192.0.2.10 is the address of node worker-1"),
            ("http://node.example", "host node.example resolves to 192.0.2.10"),
        ] {
            let (_, msg) = refusal(&p, &spec(json!({"s3Url": url})), &n).unwrap_or_else(|| panic!("{url}"));
            assert!(msg.contains(says), "{url}: {msg}");
            assert!(msg.contains("whatever the networks or CIDRs allowed"), "{url}: {msg}");
        }
        // A CIDR that holds them does not open them; the address itself in hosts does.
        let wide = policy("  allowedEndpoints:\n    cidrs: [168.63.129.0/24, 192.0.2.0/24, 203.0.113.0/24]\n");
        for url in ["http://168.63.129.16", "http://192.0.2.10"] {
            assert!(refusal(&wide, &spec(json!({"s3Url": url})), &n).is_some(), "{url}");
        }
        assert_eq!(refusal(&wide, &spec(json!({"s3Url": "http://203.0.113.9"})), &n), None);
        // Nor does 0.0.0.0/0 open loopback or link-local: only the address in hosts.
        let all = policy("  allowedEndpoints:\n    cidrs: ['0.0.0.0/0', '::/0']\n");
        for url in [
            "http://127.0.0.1:9000",
            "http://169.254.1.1",
            "http://[64:ff9b:1::a9fe:aa17]",
        ] {
            assert!(refusal(&all, &spec(json!({"s3Url": url})), &n).is_some(), "{url}");
        }
        let listed = policy("  allowedEndpoints:\n    hosts: [168.63.129.16]\n    cidrs: [192.0.2.0/24]\n");
        assert_eq!(
            refusal(&listed, &spec(json!({"s3Url": "http://168.63.129.16"})), &n),
            None
        );
        assert!(refusal(&listed, &spec(json!({"s3Url": "http://192.0.2.10"})), &n).is_some());
    }

    #[test]
    fn with_an_allow_list_only_what_it_names_passes() {
        let p = policy(
            "  allowedEndpoints:\n    hosts: [s3.example.com, '*.store.example', 127.0.0.1]\n    cidrs: [203.0.113.0/24]\n",
        );
        let n = net(&[
            ("s3.example.com", &["10.0.0.5"]),
            ("other.example", &["203.0.113.50"]),
            ("evil.example", &["198.51.100.1", "203.0.113.1"]),
            ("store.example", &["198.51.100.9"]),
        ]);
        for ok in [
            "https://s3.example.com",
            "https://a.b.store.example:9000",
            "http://127.0.0.1:7070",
            "https://203.0.113.200",
            "https://other.example",
        ] {
            assert!(refusal(&p, &spec(json!({"s3Url": ok})), &n).is_none(), "{ok}");
        }
        for (bad, says) in [
            (
                "https://store.example",
                "host store.example resolves to 198.51.100.9, which is not allowed",
            ),
            ("http://127.0.0.2", "127.0.0.2 is not allowed"),
            (
                "https://evil.example",
                "host evil.example resolves to 198.51.100.1, which is not allowed",
            ),
        ] {
            let (_, msg) = refusal(&p, &spec(json!({"s3Url": bad})), &n).unwrap_or_else(|| panic!("{bad}"));
            assert!(msg.contains(says), "{bad}: {msg}");
            assert!(
                msg.contains("policy nonAdminBSL.allowedEndpoints allows hosts [s3.example.com, *.store.example, 127.0.0.1] and cidrs [203.0.113.0/24]"),
                "{msg}"
            );
        }
        // Names on the list are not resolved; with no CIDRs, no name is.
        assert_eq!(
            names_to_resolve(
                &spec(json!({"s3Url": "https://s3.example.com", "publicUrl": "https://x.example"})),
                &p.non_admin_bsl
            ),
            ["x.example"]
        );
        let hosts_only = policy("  allowedEndpoints: {hosts: [s3.example.com]}\n");
        assert!(names_to_resolve(&spec(json!({"s3Url": "https://x.example"})), &hosts_only.non_admin_bsl).is_empty());
        assert!(refusal(
            &hosts_only,
            &spec(json!({"s3Url": "https://x.example"})),
            &Network::default()
        )
        .is_some());
        // An empty allow-list: no endpoint of the tenant's own.
        let none = policy("  allowedEndpoints: {}\n");
        assert!(refusal(&none, &spec(json!({"s3Url": "https://s3.example.com"})), &n).is_some());
        assert!(refusal(&none, &spec(json!({"region": "x"})), &n).is_none());
    }

    #[test]
    fn what_the_policy_pins_is_the_administrators_and_passes() {
        let p = policy("  enforceBSLSpec:\n    config: {s3Url: 'http://minio.minio.svc:9000'}\n");
        let s = spec(json!({"s3Url": "http://minio.minio.svc:9000"}));
        assert!(names_to_resolve(&s, &p.non_admin_bsl).is_empty());
        assert!(refusal(&p, &s, &net(&[])).is_none());
        // Filled in by the policy when left out: the same.
        let mut s = spec(json!({}));
        s.remove("config");
        let out = evaluate_bsl(&s, &p);
        assert!(out.allowed(), "{:?}", out.violations);
        assert!(evaluate_bsl_endpoints(&out.spec, &p, &net(&[])).allowed());
    }

    #[test]
    fn tls_verification_and_ca_certificates_are_the_administrators_to_allow() {
        let p = policy("");
        for config in [
            json!({"insecureSkipTLSVerify": "true"}),
            json!({"insecureSkipTLSVerify": "1"}),
            json!({"insecureSkipTLSVerify": "yes please"}),
        ] {
            let out = evaluate_bsl(&spec(config.clone()), &p);
            assert_eq!(
                out.violations[0].field, "spec.backupStorageLocationSpec.config.insecureSkipTLSVerify",
                "{config}"
            );
            assert!(
                out.message().contains("policy nonAdminBSL.allowInsecureSkipTLSVerify"),
                "{}",
                out.message()
            );
        }
        assert!(evaluate_bsl(&spec(json!({"insecureSkipTLSVerify": "false"})), &p).allowed());
        let mut with_ca = spec(json!({}));
        with_ca["objectStorage"]["caCert"] = json!("LS0tLS1CRUdJTg==");
        let out = evaluate_bsl(&with_ca, &p);
        assert_eq!(
            out.violations[0].field,
            "spec.backupStorageLocationSpec.objectStorage.caCert"
        );
        assert!(
            out.message().contains("policy nonAdminBSL.allowCACert"),
            "{}",
            out.message()
        );
        let out = evaluate_bsl(&spec(json!({"caCert": "LS0t"})), &p);
        assert_eq!(out.violations[0].field, "spec.backupStorageLocationSpec.config.caCert");
        // Allowed by the policy; a CA the policy pins itself is the administrator's.
        let open = policy("  allowInsecureSkipTLSVerify: true\n  allowCACert: true\n");
        assert!(evaluate_bsl(&spec(json!({"insecureSkipTLSVerify": "true"})), &open).allowed());
        assert!(evaluate_bsl(&with_ca, &open).allowed());
        let pinned = policy("  enforceBSLSpec: {objectStorage: {caCert: LS0tLS1CRUdJTg==}}\n");
        assert!(evaluate_bsl(&with_ca, &pinned).allowed());
    }

    #[test]
    fn broken_allow_lists_are_policy_problems() {
        for (yaml, field) in [
            (
                "allowedEndpoints: {hosts: ['http://s3.example.com']}",
                "nonAdminBSL.allowedEndpoints.hosts[0]",
            ),
            (
                "allowedEndpoints: {hosts: [ok.example, 's3.example.com:9000']}",
                "nonAdminBSL.allowedEndpoints.hosts[1]",
            ),
            (
                "allowedEndpoints: {hosts: ['*.']}",
                "nonAdminBSL.allowedEndpoints.hosts[0]",
            ),
            (
                "allowedEndpoints: {cidrs: [10.0.0.0/33]}",
                "nonAdminBSL.allowedEndpoints.cidrs[0]",
            ),
            (
                "allowedEndpoints: {cidrs: [everything]}",
                "nonAdminBSL.allowedEndpoints.cidrs[0]",
            ),
            ("allowedEndpoints: {host: [x]}", "nonAdminBSL.allowedEndpoints"),
            ("allowCACert: maybe", "nonAdminBSL.allowCACert"),
        ] {
            let e = Policy::parse(&format!("nonAdminBSL: {{{yaml}}}")).unwrap_err();
            assert!(e.0.iter().any(|p| p.field.starts_with(field)), "{yaml}: {e}");
        }
        let p = Policy::parse(
            "nonAdminBSL: {allowedEndpoints: {hosts: [S3.Example.COM., '[::1]'], cidrs: [10.1.2.3/8, 192.0.2.1]}}",
        )
        .unwrap();
        let a = p.non_admin_bsl.allowed_endpoints.unwrap();
        assert_eq!(
            a.hosts,
            [
                HostRule::Name("s3.example.com".into()),
                HostRule::Ip("::1".parse().unwrap())
            ]
        );
        assert_eq!(
            a.cidrs,
            ["10.0.0.0/8".parse::<IpNet>().unwrap(), "192.0.2.1/32".parse().unwrap()]
        );
    }

    proptest::proptest! {
        /// No config value makes the rule panic, and an address in a refused range is never allowed.
        #[test]
        fn any_config_is_judged_and_refused_ranges_stay_refused(
            value in "[a-z0-9:/\\[\\].@%-]{0,30}",
            a in 0u8..=255, b in 0u8..=255,
        ) {
            let p = policy("");
            let n = net(&[]);
            let _ = evaluate_bsl_endpoints(&spec(json!({"s3Url": value})), &p, &n);
            for ip in [format!("127.{a}.{b}.1"), format!("169.254.{a}.{b}"), format!("10.244.{a}.{b}")] {
                let s = spec(json!({"s3Url": format!("http://{ip}:9000")}));
                proptest::prop_assert!(!evaluate_bsl_endpoints(&s, &p, &n).allowed(), "{}", ip);
            }
        }
    }
}
