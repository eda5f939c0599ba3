//! Settings from `--config FILE` and `NAC_*` environment variables (`NAC_WEBHOOK__LISTEN=...`), validated at
//! start-up: an unknown key or a bad value stops nac with a message that names it.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub webhook: WebhookSettings,
    pub metrics: MetricsSettings,
    pub policy: PolicySettings,
    pub controllers: ControllerSettings,
    pub log: LogSettings,
    pub rights: RightsSettings,
    pub endpoints: EndpointSettings,
    pub api: ApiSettings,
}

/// What nac knows of the cluster's networks, for judging tenants' storage endpoints (`crate::endpoints`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EndpointSettings {
    /// The cluster's Service and pod networks (CIDRs), refused to tenants' endpoints without the policy's
    /// allow-list. Empty: read from the cluster (ServiceCIDRs, Nodes' pod CIDRs), the private ranges standing in
    /// for what cannot be read.
    pub cluster_networks: Vec<String>,
}

/// How nac talks to the Kubernetes API server.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSettings {
    /// HTTP/2, as client-go speaks to the API server: one connection carries every watch and request (less
    /// memory and CPU; measured, NonAdminBackups reach Created seconds later under load: BENCHMARKS.md §4). False
    /// (the default): HTTP/1.1, a connection per watch and per request in flight.
    pub http2: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookSettings {
    pub listen: SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// How often the certificate files are checked for replacement.
    pub cert_reload_secs: u64,
    /// Users (e.g. nac's own service account) allowed to set or change identity labels.
    pub privileged_users: Vec<String>,
    /// Namespaces the API server does not send to nac's webhooks (the chart's `webhook.excludedNamespaces` and
    /// nac's own): no restore copies into them.
    pub excluded_namespaces: Vec<String>,
    /// Offer HTTP/2 to the API server (ALPN `h2`); false: HTTP/1.1 with keep-alive only.
    pub http2: bool,
    /// Seconds between SIGTERM and closing the listener, while `/readyz` fails: the time the pod's Service
    /// endpoint takes to leave every node's routing, so no request is sent to a closed port during a rollout.
    pub shutdown_delay_secs: u64,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    pub listen: SocketAddr,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySettings {
    /// Read the policy from this YAML file instead of the ConfigMap (local runs, tests, benchmarks).
    pub file: Option<PathBuf>,
    /// Name of the policy ConfigMap in `namespace`.
    pub configmap: String,
    /// nac's own namespace, where the policy ConfigMap and the leader Lease live.
    pub namespace: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ControllerSettings {
    pub enabled: bool,
    /// Where Velero runs and nac creates Velero objects.
    pub velero_namespace: String,
    pub leader_election: LeaderElectionSettings,
    /// How watches fill their stores: `stream` (the API server sends the objects one by one, WatchList), `paged`
    /// (lists of 500), or `auto`: stream when the API server supports it (asked once at start).
    pub initial_lists: InitialLists,
    /// How long Velero's backup queue may stand still (backups queued, none running, nothing changing) before
    /// nac reports it (0: never).
    pub queue_stall_secs: u64,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum InitialLists {
    #[default]
    Auto,
    Stream,
    Paged,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderElectionSettings {
    pub enabled: bool,
    pub lease_name: String,
    pub lease_duration_secs: u64,
    pub renew_interval_secs: u64,
    /// Identity of this replica in the Lease (default: the host name).
    pub identity: Option<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `nac=debug,kube=info`.
    pub level: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// How long nac reuses the API server's answers about a requester's rights (`crate::rights`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RightsSettings {
    /// Which authorizers can allow a tenant's request in this cluster: `rbac` (the default) when RBAC is the only
    /// one, `other` when one besides RBAC may (a webhook authorizer, whose rules nac cannot see). Answers from the
    /// RBAC objects are never more generous than RBAC, so the default is the fast path and the safe one.
    pub authorizers: Authorizers,
    /// With `authorizers: rbac`: how long an answer is reused at most while nac's watches of the RBAC objects see
    /// no change that could reach it (the safety net should a change go unseen).
    pub cache_lifetime_secs: u64,
    /// Whether the left-out warning looks which left-out kinds hold objects in the namespace (metadata lists of at
    /// most one object, see `rights::occupancy`). Off: nac sends no such list, and the warning names the kinds
    /// alphabetically, saying nac may not look.
    pub warning_lookups: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Authorizers {
    /// Answers kept 10 s (and dropped sooner on an RBAC change nac sees).
    Other,
    /// Answered from the RBAC objects nac watches; the API server's answers kept until an RBAC change could reach
    /// them, at most `cache_lifetime_secs`.
    #[default]
    Rbac,
}

fn default_namespace() -> String {
    std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "nac-system".to_string())
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            listen: "0.0.0.0:9443".parse().expect("literal address"),
            cert_file: "/etc/nac/tls/tls.crt".into(),
            key_file: "/etc/nac/tls/tls.key".into(),
            cert_reload_secs: 2,
            privileged_users: vec![format!("system:serviceaccount:{}:nac", default_namespace())],
            excluded_namespaces: vec!["kube-system".to_string()],
            http2: true,
            shutdown_delay_secs: 0,
        }
    }
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            listen: "0.0.0.0:8080".parse().expect("literal address"),
        }
    }
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            file: None,
            configmap: "nac-policy".into(),
            namespace: default_namespace(),
        }
    }
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            enabled: true,
            velero_namespace: "openshift-adp".into(),
            leader_election: LeaderElectionSettings::default(),
            initial_lists: InitialLists::Auto,
            queue_stall_secs: 180,
        }
    }
}

impl Default for LeaderElectionSettings {
    fn default() -> Self {
        LeaderElectionSettings {
            enabled: true,
            lease_name: "nac-leader".into(),
            lease_duration_secs: 15,
            renew_interval_secs: 5,
            identity: None,
        }
    }
}

impl Default for RightsSettings {
    fn default() -> Self {
        RightsSettings {
            authorizers: Authorizers::Rbac,
            cache_lifetime_secs: 3600,
            warning_lookups: true,
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid settings: {0}")]
pub struct SettingsError(String);

impl Settings {
    /// Loads settings: defaults, then the file (if any), then `NAC_*` variables (`__` separates levels).
    pub fn load(file: Option<&std::path::Path>) -> Result<Settings, SettingsError> {
        Self::load_from(file, std::env::vars())
    }

    pub fn load_from(
        file: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        let mut b = config::Config::builder();
        if let Some(f) = file {
            if !f.exists() {
                return Err(SettingsError(format!("config file {} does not exist", f.display())));
            }
            b = b.add_source(config::File::from(f).format(config::FileFormat::Yaml));
        }
        // A setting is `NAC_<SECTION>__<KEY>`: an unrelated variable that merely starts with `NAC_` (a script's
        // `NAC_BIN`) is not one, while a misspelt setting (`NAC_WEBHOK__LISTEN`) still is, and is refused by name.
        let vars: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.strip_prefix("NAC_").is_some_and(|rest| rest.contains("__")))
            .collect();
        b = b.add_source(
            config::Environment::with_prefix("NAC")
                .prefix_separator("_")
                .separator("__")
                .list_separator(",")
                .with_list_parse_key("webhook.privileged_users")
                .with_list_parse_key("webhook.excluded_namespaces")
                .with_list_parse_key("endpoints.cluster_networks")
                .try_parsing(true)
                .source(Some(vars)),
        );
        let cfg = b.build().map_err(|e| SettingsError(e.to_string()))?;
        let s: Settings = cfg.try_deserialize().map_err(|e| SettingsError(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let bad = |k: &str, why: &str| Err(SettingsError(format!("{k}: {why}")));
        if self.webhook.cert_reload_secs == 0 || self.webhook.cert_reload_secs > 10 {
            return bad(
                "webhook.cert_reload_secs",
                "must be between 1 and 10 (rotations apply within 10 s)",
            );
        }
        if self.policy.file.is_none() && self.policy.configmap.is_empty() {
            return bad("policy.configmap", "must be set when policy.file is not");
        }
        if self.policy.namespace.is_empty() {
            return bad("policy.namespace", "must not be empty");
        }
        if self.controllers.enabled && self.controllers.velero_namespace.is_empty() {
            return bad("controllers.velero_namespace", "must not be empty");
        }
        if !(10..=86_400).contains(&self.rights.cache_lifetime_secs) {
            return bad("rights.cache_lifetime_secs", "must be between 10 and 86400");
        }
        for n in &self.endpoints.cluster_networks {
            if let Err(e) = crate::endpoints::parse_cidr(n) {
                return bad("endpoints.cluster_networks", &e);
            }
        }
        let le = &self.controllers.leader_election;
        if le.enabled && le.renew_interval_secs * 2 > le.lease_duration_secs {
            return bad(
                "controllers.leader_election.renew_interval_secs",
                "must be at most half of lease_duration_secs",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults() {
        let s = Settings::load_from(None, env(&[])).unwrap();
        assert_eq!(s.webhook.listen.to_string(), "0.0.0.0:9443");
        assert_eq!(s.metrics.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(s.policy.configmap, "nac-policy");
        // Rights answered from the RBAC objects: no review for a tenant's create, never more than RBAC allows.
        assert_eq!(s.rights.authorizers, Authorizers::Rbac);
        assert_eq!(s.rights.cache_lifetime_secs, 3600);
    }

    #[test]
    fn file_then_env() {
        let mut f = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
        writeln!(
            f,
            "webhook:\n  listen: 127.0.0.1:1\ncontrollers:\n  enabled: false\npolicy:\n  file: /p.yaml"
        )
        .unwrap();
        let s = Settings::load_from(
            Some(f.path()),
            env(&[
                ("NAC_WEBHOOK__LISTEN", "127.0.0.1:2"),
                ("NAC_WEBHOOK__PRIVILEGED_USERS", "a,b"),
                ("NAC_WEBHOOK__EXCLUDED_NAMESPACES", "kube-system,ops"),
            ]),
        )
        .unwrap();
        assert_eq!(s.webhook.listen.to_string(), "127.0.0.1:2");
        assert!(!s.controllers.enabled);
        assert_eq!(s.webhook.privileged_users, vec!["a", "b"]);
        assert_eq!(s.webhook.excluded_namespaces, vec!["kube-system", "ops"]);
    }

    #[test]
    fn unrelated_nac_variables_are_not_settings() {
        let s = Settings::load_from(None, env(&[("NAC_BIN", "/usr/bin/nac"), ("NAC_E2E_CHART", "1")])).unwrap();
        assert_eq!(s.webhook.listen.to_string(), "0.0.0.0:9443");
        let e = Settings::load_from(None, env(&[("NAC_WEBHOK__LISTEN", "127.0.0.1:1")])).unwrap_err();
        assert!(e.to_string().contains("webhok"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = Settings::load_from(None, env(&[("NAC_WEBHOOK__LISTN", "x")])).unwrap_err();
        assert!(e.to_string().contains("listn"), "{e}");
        let e = Settings::load_from(None, env(&[("NAC_WEBHOOK__LISTEN", "not-an-address")])).unwrap_err();
        assert!(e.to_string().contains("webhook.listen"), "{e}");
        let e = Settings::load_from(None, env(&[("NAC_WEBHOOK__CERT_RELOAD_SECS", "60")])).unwrap_err();
        assert!(e.to_string().contains("webhook.cert_reload_secs"), "{e}");
        let e = Settings::load_from(None, env(&[("NAC_RIGHTS__AUTHORIZERS", "abac")])).unwrap_err();
        assert!(e.to_string().contains("abac"), "{e}");
        let e = Settings::load_from(None, env(&[("NAC_RIGHTS__CACHE_LIFETIME_SECS", "1")])).unwrap_err();
        assert!(e.to_string().contains("rights.cache_lifetime_secs"), "{e}");
        let e =
            Settings::load_from(None, env(&[("NAC_ENDPOINTS__CLUSTER_NETWORKS", "10.96.0.0/12,pods")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("endpoints.cluster_networks: \"pods\" is not a CIDR"),
            "{e}"
        );
        let s = Settings::load_from(
            None,
            env(&[("NAC_ENDPOINTS__CLUSTER_NETWORKS", "10.96.0.0/12,10.244.0.0/16")]),
        )
        .unwrap();
        assert_eq!(s.endpoints.cluster_networks, ["10.96.0.0/12", "10.244.0.0/16"]);
        let s = Settings::load_from(None, env(&[("NAC_RIGHTS__AUTHORIZERS", "other")])).unwrap();
        assert_eq!(s.rights.authorizers, Authorizers::Other);
        let mut f = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
        writeln!(f, "metrcs: {{}}").unwrap();
        let e = Settings::load_from(Some(f.path()), env(&[])).unwrap_err();
        assert!(e.to_string().contains("metrcs"), "{e}");
    }
}
