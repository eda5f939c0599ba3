//! Tiers: named parts of the policy that replace the base's parts for the namespaces a label selector picks.
//!
//! A tier is parsed into a whole effective policy (the base with the tier's parts in place of the base's) when the
//! policy is, so a tier is refused for exactly what the base would be refused for, and evaluation stays the same
//! pure function of (spec, effective policy). A namespace takes the first tier whose selector matches its labels,
//! else the base.

use super::{problem, PolicyProblem};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The parts of the policy a tier may replace. Cluster-wide parts (backup sync, garbage collection) stay the
/// base's: they are not about one namespace.
pub const TIER_PARTS: &[&str] = &[
    "enforceBackupSpec",
    "enforceRestoreSpec",
    "backup",
    "restore",
    "nonAdminBSL",
    "schedule",
    "rights",
    "downloads",
    "quotas",
    "recoveryPointObjective",
];

/// One tier: its name, which namespaces it takes, and the whole policy they get.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    pub name: String,
    pub selector: Selector,
    /// The base with this tier's parts in place of the base's; its `tier` is this tier's name.
    pub policy: Arc<super::Policy>,
}

/// A namespace selector as Kubernetes writes it (`matchLabels`, `matchExpressions`), all terms ANDed; an empty
/// selector selects every namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Expression>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expression {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    /// Whether a namespace with these labels is selected, as Kubernetes' label selectors match.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let got = labels.get(&e.key);
                match e.operator {
                    Operator::In => got.is_some_and(|v| e.values.contains(v)),
                    Operator::NotIn => got.is_none_or(|v| !e.values.contains(v)),
                    Operator::Exists => got.is_some(),
                    Operator::DoesNotExist => got.is_none(),
                }
            })
    }

    /// The label keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.match_labels
            .keys()
            .map(String::as_str)
            .chain(self.match_expressions.iter().map(|e| e.key.as_str()))
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut terms: Vec<String> = self.match_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for e in &self.match_expressions {
            terms.push(match e.operator {
                Operator::In => format!("{} in ({})", e.key, e.values.join(",")),
                Operator::NotIn => format!("{} notin ({})", e.key, e.values.join(",")),
                Operator::Exists => e.key.clone(),
                Operator::DoesNotExist => format!("!{}", e.key),
            });
        }
        if terms.is_empty() {
            write!(f, "every namespace")
        } else {
            write!(f, "{}", terms.join(","))
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSelector {
    match_labels: Option<BTreeMap<String, String>>,
    match_expressions: Option<Vec<RawExpression>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpression {
    key: String,
    operator: Operator,
    values: Option<Vec<String>>,
}

/// Whether `s` is a label name (the part after an optional prefix): 1–63 alphanumerics, `-`, `_`, `.`, starting
/// and ending alphanumeric.
fn is_label_name(s: &str) -> bool {
    is_name(s, |c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// 1-63 bytes that `allowed` accepts, starting and ending alphanumeric.
fn is_name(s: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| allowed(*c))
}

/// Why `key` is not a label key (`[prefix/]name`, the prefix a DNS subdomain), if it is not.
fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !crate::naming::is_object_name(p) {
            return Some(format!(
                "{key:?} is not a label key: its prefix {p:?} is not a DNS subdomain"
            ));
        }
    }
    (!is_label_name(name)).then(|| {
        format!(
            "{key:?} is not a label key: the name must be 1-63 characters, alphanumeric, '-', '_' or '.', \
             starting and ending alphanumeric"
        )
    })
}

fn label_value_problem(value: &str) -> Option<String> {
    (!value.is_empty() && !is_label_name(value)).then(|| {
        format!(
            "{value:?} is not a label value: at most 63 characters, alphanumeric, '-', '_' or '.', starting and \
             ending alphanumeric"
        )
    })
}

/// Parses a selector, recording problems under `field`.
fn parse_selector(field: &str, v: Value, problems: &mut Vec<PolicyProblem>) -> Selector {
    let raw: RawSelector = match serde_path_to_error::deserialize(v) {
        Ok(r) => r,
        Err(e) => {
            let path = e.path().to_string();
            let at = if path == "." {
                field.to_string()
            } else {
                format!("{field}.{path}")
            };
            problems.push(problem(at, e.into_inner().to_string()));
            return Selector::default();
        }
    };
    let mut s = Selector::default();
    for (k, v) in raw.match_labels.unwrap_or_default() {
        let at = format!("{field}.matchLabels.{k}");
        if let Some(p) = label_key_problem(&k).or_else(|| label_value_problem(&v)) {
            problems.push(problem(at, p));
        }
        s.match_labels.insert(k, v);
    }
    for (i, e) in raw.match_expressions.unwrap_or_default().into_iter().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        if let Some(p) = label_key_problem(&e.key) {
            problems.push(problem(format!("{at}.key"), p));
        }
        let values = e.values.unwrap_or_default();
        match e.operator {
            Operator::In | Operator::NotIn if values.is_empty() => problems.push(problem(
                format!("{at}.values"),
                format!("must not be empty for operator {:?}", e.operator),
            )),
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => problems.push(problem(
                format!("{at}.values"),
                format!("must be empty for operator {:?}", e.operator),
            )),
            _ => {}
        }
        for v in &values {
            if let Some(p) = label_value_problem(v) {
                problems.push(problem(format!("{at}.values"), p));
            }
        }
        s.match_expressions.push(Expression {
            key: e.key,
            operator: e.operator,
            values,
        });
    }
    s
}

/// Parses the `tiers` list of a policy document whose other keys are `base` (already valid): each tier becomes the
/// base with its parts in place of the base's, parsed by `parse` as a whole policy.
pub(super) fn parse_tiers(
    base: &Map<String, Value>,
    tiers: Value,
    parse: impl Fn(Value) -> Result<super::Policy, super::PolicyError>,
    problems: &mut Vec<PolicyProblem>,
) -> Vec<Tier> {
    let Value::Array(list) = tiers else {
        if !tiers.is_null() {
            problems.push(problem("tiers", "must be a list of tiers"));
        }
        return Vec::new();
    };
    let mut out: Vec<Tier> = Vec::new();
    for (i, t) in list.into_iter().enumerate() {
        let at = format!("tiers[{i}]");
        let Value::Object(mut t) = t else {
            problems.push(problem(
                at,
                "must be a map with name, namespaceSelector and parts of the policy",
            ));
            continue;
        };
        let name = match t.remove("name") {
            Some(Value::String(n)) if is_tier_name(&n) => n,
            Some(Value::String(n)) => {
                problems.push(problem(
                    format!("{at}.name"),
                    format!("{n:?} is not a tier name: 1-63 lowercase alphanumerics or '-', starting and ending alphanumeric"),
                ));
                continue;
            }
            _ => {
                problems.push(problem(format!("{at}.name"), "is required (a string)"));
                continue;
            }
        };
        if out.iter().any(|o| o.name == name) {
            problems.push(problem(format!("{at}.name"), format!("{name:?} names two tiers")));
            continue;
        }
        let before = problems.len();
        let selector = match t.remove("namespaceSelector") {
            Some(v) => parse_selector(&format!("{at}.namespaceSelector"), v, problems),
            None => {
                problems.push(problem(
                    format!("{at}.namespaceSelector"),
                    "is required (write {} to select every namespace)",
                ));
                Selector::default()
            }
        };
        let mut doc = base.clone();
        for (k, v) in t {
            if !TIER_PARTS.contains(&k.as_str()) {
                problems.push(problem(
                    format!("{at}.{k}"),
                    format!(
                        "unknown field (a tier has name, namespaceSelector and any of: {})",
                        TIER_PARTS.join(", ")
                    ),
                ));
                continue;
            }
            doc.insert(k, v);
        }
        match parse(Value::Object(doc)) {
            Ok(mut p) => {
                p.tier = Some(name.clone());
                if problems.len() == before {
                    out.push(Tier {
                        name,
                        selector,
                        policy: Arc::new(p),
                    });
                }
            }
            Err(e) => problems.extend(e.0.into_iter().map(|p| PolicyProblem {
                field: if p.field.is_empty() {
                    at.clone()
                } else {
                    format!("{at}.{}", p.field)
                },
                reason: p.reason,
            })),
        }
    }
    out
}

fn is_tier_name(n: &str) -> bool {
    is_name(n, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn selector(v: Value) -> Result<Selector, Vec<PolicyProblem>> {
        let mut problems = Vec::new();
        let s = parse_selector("s", v, &mut problems);
        if problems.is_empty() {
            Ok(s)
        } else {
            Err(problems)
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_label_selectors_do() {
        let s = selector(json!({
            "matchLabels": {"tier": "gold"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "stage"]},
                {"key": "sandbox", "operator": "NotIn", "values": ["true"]},
                {"key": "example.com/owner", "operator": "Exists"},
                {"key": "frozen", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        let all = [("tier", "gold"), ("env", "prod"), ("example.com/owner", "a")];
        assert!(s.matches(&labels(&all)));
        // NotIn matches a missing key and other values, not the listed one.
        assert!(s.matches(&labels(&[all[0], all[1], all[2], ("sandbox", "false")])));
        assert!(!s.matches(&labels(&[all[0], all[1], all[2], ("sandbox", "true")])));
        assert!(!s.matches(&labels(&[all[0], all[1], all[2], ("frozen", "")])));
        assert!(!s.matches(&labels(&[all[0], ("env", "dev"), all[2]])));
        assert!(!s.matches(&labels(&[("tier", "silver"), all[1], all[2]])));
        assert!(!s.matches(&labels(&[all[0], all[1]])));
        assert!(selector(json!({})).unwrap().matches(&labels(&[])));
        assert_eq!(
            s.to_string(),
            "tier=gold,env in (prod,stage),sandbox notin (true),example.com/owner,!frozen"
        );
    }

    #[test]
    fn broken_selectors_are_refused_naming_the_field() {
        for (bad, field) in [
            (json!({"matchLabels": {"bad key!": "x"}}), "s.matchLabels.bad key!"),
            (json!({"matchLabels": {"tier": "not ok!"}}), "s.matchLabels.tier"),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "s.matchExpressions[0].values",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "s.matchExpressions[0].values",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                "s.matchExpressions[0].operator",
            ),
            (
                json!({"matchExpressions": [{"key": "-a", "operator": "Exists"}]}),
                "s.matchExpressions[0].key",
            ),
            (json!({"matchExpression": []}), "s.matchExpression"),
            (
                json!({"matchLabels": {"Bad_Prefix.example/x": "y"}}),
                "s.matchLabels.Bad_Prefix.example/x",
            ),
        ] {
            let problems = selector(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(problems[0].field, field, "{bad}: {problems:?}");
        }
    }
}
