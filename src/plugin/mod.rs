//! `kubectl nac`: the Velero CLI's experience for namespace users. It works with the user's own kubeconfig and
//! namespace rights only: every tenant command is a read or write of nac's tenant kinds in the user's namespace
//! (NonAdminBackup, NonAdminRestore, NonAdminSchedule, NonAdminDownloadRequest), and files of a backup (its log,
//! its resource list) come through a NonAdminDownloadRequest and the signed URL it answers with.
//!
//! Verbs, flags and output follow `velero backup|restore|schedule ...` where Velero has them. The cluster admin's
//! verbs (`bsl-request`, `get --all-namespaces`) are in `admin`.

mod admin;
mod cli;
mod download;
mod kinds;
mod manifest;
mod show;
mod status;
mod wait;

pub use cli::Cli;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::Client;
use serde_json::{json, Value};
use std::io::Write;

/// What a command failed on, said to the user as it is.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    User(String),
    #[error("{0}")]
    Api(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// An API error said the way a namespace user can act on it: a refusal by nac's webhook as nac worded it, a
/// missing right with what to ask for.
pub fn api_error(what: &str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 403 && s.message.contains("admission webhook") => {
            // "admission webhook \"...\" denied the request: <nac's message>"
            let msg = s
                .message
                .split_once("denied the request: ")
                .map_or(s.message.as_str(), |(_, m)| m);
            Error::Api(format!("{what}: refused: {msg}"))
        }
        kube::Error::Api(s) if s.code == 403 => Error::Api(format!(
            "{what}: you lack the right: {} (ask an admin of the namespace for nac's editor role)",
            s.message
        )),
        kube::Error::Api(s) if s.code == 404 => Error::Api(format!("{what}: {}", s.message)),
        kube::Error::Api(s) => Error::Api(format!("{what}: {} ({})", s.message, s.reason)),
        e => Error::Api(format!("{what}: {e}")),
    }
}

/// The user's client and namespace, from the kubeconfig (and the global flags).
pub struct Session {
    pub client: Client,
    pub namespace: String,
}

impl Session {
    pub async fn connect(cli: &cli::Global) -> Result<Session> {
        let options = kube::config::KubeConfigOptions {
            context: cli.context.clone(),
            ..Default::default()
        };
        let config = match &cli.kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| Error::User(format!("reading kubeconfig {}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| e.to_string())
            }
            None if cli.context.is_some() => kube::Config::from_kubeconfig(&options).await.map_err(|e| e.to_string()),
            None => kube::Config::infer().await.map_err(|e| e.to_string()),
        }
        .map_err(|e| Error::User(format!("no usable kubeconfig: {e}")))?;
        let mut config = config;
        if let Some(user) = &cli.as_user {
            config.auth_info.impersonate = Some(user.clone());
            // As kubectl: an impersonated user is an authenticated one unless groups are given.
            config.auth_info.impersonate_groups = Some(if cli.as_groups.is_empty() {
                vec!["system:authenticated".into()]
            } else {
                cli.as_groups.clone()
            });
        }
        let namespace = cli
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| Error::User(format!("connecting: {e}")))?;
        Ok(Session { client, namespace })
    }

    pub fn api(&self, kind: &kinds::Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &kind.resource())
    }

    /// Creates `object` and returns it with the warnings the API server (nac's webhook) sent back.
    pub async fn create(&self, kind: &kinds::Kind, object: &Value) -> Result<(Value, Vec<String>)> {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let req = axum::http::Request::post(self.path(kind, None)).header("content-type", "application/json");
        self.send(req, object, &format!("creating {} {name}", kind.kind)).await
    }

    /// A server-side dry run of a create: the object as nac's webhook would admit it, and the warnings.
    pub async fn create_dry_run(&self, kind: &kinds::Kind, object: &Value) -> Result<(Value, Vec<String>)> {
        let req = axum::http::Request::post(format!("{}?dryRun=All", self.path(kind, None)))
            .header("content-type", "application/json");
        self.send(req, object, &format!("trying a {} (dry run)", kind.kind))
            .await
    }

    /// A merge patch, with the webhook's warnings.
    pub async fn merge_patch(&self, kind: &kinds::Kind, name: &str, patch: Value) -> Result<(Value, Vec<String>)> {
        let req = axum::http::Request::patch(self.path(kind, Some(name)))
            .header("content-type", "application/merge-patch+json");
        self.send(req, &patch, &format!("updating {} {name}", kind.kind)).await
    }

    fn path(&self, kind: &kinds::Kind, name: Option<&str>) -> String {
        let base = format!(
            "/apis/oadp.openshift.io/v1alpha1/namespaces/{}/{}",
            self.namespace, kind.plural
        );
        match name {
            Some(n) => format!("{base}/{n}"),
            None => base,
        }
    }

    /// Sends a write and reads the answer and its `Warning` headers (kube's typed calls drop those).
    async fn send(&self, req: axum::http::request::Builder, body: &Value, what: &str) -> Result<(Value, Vec<String>)> {
        let body = serde_json::to_vec(body).map_err(|e| Error::User(e.to_string()))?;
        let req = req
            .body(kube::client::Body::from(body))
            .map_err(|e| Error::User(e.to_string()))?;
        let resp = self.client.send(req).await.map_err(|e| api_error(what, e))?;
        let status = resp.status();
        let warnings = warnings(resp.headers());
        let bytes = resp
            .into_body()
            .collect_bytes()
            .await
            .map_err(|e| Error::Api(format!("{what}: {e}")))?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        if !status.is_success() {
            let mut st: kube::core::Status = serde_json::from_value(value).unwrap_or_default();
            st.code = status.as_u16();
            return Err(api_error(what, kube::Error::Api(Box::new(st))));
        }
        Ok((value, warnings))
    }

    pub async fn get(&self, kind: &kinds::Kind, name: &str) -> Result<Value> {
        let o = self
            .api(kind)
            .get(name)
            .await
            .map_err(|e| api_error(&format!("getting {} {name}", kind.kind), e))?;
        serde_json::to_value(o).map_err(|e| Error::User(e.to_string()))
    }

    pub async fn list(&self, kind: &kinds::Kind, selector: Option<&str>) -> Result<Vec<Value>> {
        let mut lp = ListParams::default();
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        let list = self
            .api(kind)
            .list(&lp)
            .await
            .map_err(|e| api_error(&format!("listing {}s", kind.kind), e))?;
        let mut items = values(list);
        items.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
        Ok(items)
    }

    /// The named objects, or all of the namespace's when none is named.
    pub async fn some_or_all(
        &self,
        kind: &kinds::Kind,
        names: &[String],
        selector: Option<&str>,
    ) -> Result<Vec<Value>> {
        if names.is_empty() {
            return self.list(kind, selector).await;
        }
        let mut out = Vec::new();
        for n in names {
            out.push(self.get(kind, n).await?);
        }
        Ok(out)
    }

    pub async fn delete(&self, kind: &kinds::Kind, name: &str) -> Result<()> {
        self.api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .map_err(|e| api_error(&format!("deleting {} {name}", kind.kind), e))?;
        Ok(())
    }
}

/// The texts of `Warning` headers (`299 - "text"`).
fn warnings(headers: &axum::http::HeaderMap) -> Vec<String> {
    headers
        .get_all("warning")
        .iter()
        .filter_map(|w| w.to_str().ok())
        .map(|w| {
            let w = w.trim();
            let text = w.strip_prefix("299 - ").unwrap_or(w);
            unquote(text)
        })
        .collect()
}

/// The text of an HTTP quoted-string (`"..."`, `\` escaping the next character, as the API server escapes `"`
/// and `\`); anything else as it is.
fn unquote(s: &str) -> String {
    let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
        return s.to_string();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Prints the webhook's warnings the way kubectl does.
pub fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("Warning: {w}");
    }
}

/// Runs the command line; the exit code.
pub async fn run(cli: Cli) -> i32 {
    match cli::dispatch(cli).await {
        Ok(()) => 0,
        Err(e) => {
            let _ = std::io::stdout().flush();
            eprintln!("Error: {e}");
            1
        }
    }
}

/// `{"apiVersion", "kind", "metadata": {"name"}, "spec"}` of a tenant kind.
pub fn object(kind: &kinds::Kind, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "oadp.openshift.io/v1alpha1",
        "kind": kind.kind,
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// A list's objects as JSON (the plugin prints and filters them as such).
pub(crate) fn values(list: kube::core::ObjectList<kube::api::DynamicObject>) -> Vec<Value> {
    list.items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn warning_headers_are_unquoted_as_the_api_server_quotes_them() {
        let mut h = axum::http::HeaderMap::new();
        // What the API server sends for the text `{"by": "tier \"gold\"", "path": "a\b"}`.
        h.append(
            "warning",
            r#"299 - "{\"by\": \"tier \\\"gold\\\"\", \"path\": \"a\\\\b\"}""#
                .parse()
                .unwrap(),
        );
        h.append("warning", "299 - plain".parse().unwrap());
        let got = super::warnings(&h);
        let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
        assert_eq!(v["by"], "tier \"gold\"");
        assert_eq!(v["path"], "a\\b");
        assert_eq!(got[1], "plain");
    }
}
