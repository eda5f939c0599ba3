//! A tenant location's credential as Velero reads it. Velero's AWS plugin (object store and volume snapshotter)
//! and its repository code (server, node agent, data mover) hand the copied Secret to the AWS SDK as a shared
//! credentials file *and* a shared config file. A config-file profile does far more than hold keys:
//! `credential_process` runs a command as Velero, `endpoint_url` (or an `s3 =` sub-section) moves the endpoint
//! past the allow-list, `ca_bundle` trusts a CA of the tenant's, `role_arn` with `web_identity_token_file` posts
//! a file of Velero's container to STS, and a profile without static keys makes the SDK fall back to Velero's
//! own identity. So nac accepts static keys only, and what it copies into Velero's namespace is a file it writes
//! from those keys ([`StaticKeys::render`]), never the tenant's bytes. Pure: the caller reads the Secret.

use std::collections::BTreeMap;

/// The keys a tenant's credential may hold, in any profile.
pub const ALLOWED_KEYS: &[&str] = &[
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "region",
];
/// The largest credential judged: a few keys and comments fit many times over.
pub const MAX_BYTES: usize = 64 << 10;
/// The longest value (session tokens run to a few KiB).
const MAX_VALUE: usize = 8 << 10;
/// The profile a location uses without `config.profile`.
pub const DEFAULT_PROFILE: &str = "default";

/// What nac hands Velero: the selected profile's static keys.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKeys {
    pub profile: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    pub region: Option<String>,
}

// Never print the keys (logs, test failures).
impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeys")
            .field("profile", &self.profile)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl StaticKeys {
    /// The credential file nac writes for Velero: one profile, static keys only, `key=value` with values of
    /// [`is_value`]'s characters, which the SDK's reader takes as they are (no comment, quote or space in them).
    pub fn render(&self) -> String {
        let mut out = format!(
            "[{}]\naws_access_key_id={}\naws_secret_access_key={}\n",
            self.profile, self.access_key_id, self.secret_access_key
        );
        if let Some(t) = &self.session_token {
            out.push_str(&format!("aws_session_token={t}\n"));
        }
        if let Some(r) = &self.region {
            out.push_str(&format!("region={r}\n"));
        }
        out
    }
}

/// Whether `v` can be a key's value: ASCII letters, digits and `+/=._-@`. The SDK's INI reader cuts a value at
/// ` #` or ` ;` and strips quotes, so a value such as `#x` or `""` would read as empty: both keys empty, the SDK
/// falls back to Velero's own identity. Keys, secrets and session tokens of S3 and S3-compatible stores are
/// base64 or alphanumeric.
pub fn is_value(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'.' | b'_' | b'-' | b'@'))
}

/// Whether `v` can be a region: ASCII letters, digits, `-` and `_` (Velero's repository code builds a host name
/// from it).
pub fn is_region(v: &str) -> bool {
    !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `name` can be a profile's name: what nac writes back as `[name]` must read as that one section.
pub fn is_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+' | b'@' | b'/' | b':'))
}

fn why_static_only() -> String {
    format!(
        "a storage location's credential may hold only {} (Velero reads it as an AWS config file, where other \
         keys run commands, move the endpoint or assume roles with Velero's own identity)",
        ALLOWED_KEYS.join(", ")
    )
}

/// The static keys of profile `profile` (none: `default`) in an AWS credentials file, or why the file is refused.
/// Every profile is judged, not only the one used, so that a refusal names every key nac will not accept.
pub fn aws_static_keys(bytes: &[u8], profile: Option<&str>) -> Result<StaticKeys, String> {
    let wanted = profile.filter(|p| !p.is_empty()).unwrap_or(DEFAULT_PROFILE);
    if !is_profile_name(wanted) {
        return Err(format!("profile {wanted:?} is not a profile name"));
    }
    if bytes.len() > MAX_BYTES {
        return Err(format!(
            "it holds {} bytes, more than the {MAX_BYTES} a credentials file of static keys needs",
            bytes.len()
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8 text (an AWS credentials file)".to_string())?;
    let mut section: Option<String> = None;
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    for (i, raw) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if line.starts_with(|c: char| c.is_whitespace()) {
            return Err(format!(
                "line {n} is indented: the SDK reads an indented line as a nested setting (such as `s3 =` with \
                 `endpoint_url` below it); {}",
                why_static_only()
            ));
        }
        if let Some(inner) = trimmed.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err(format!("line {n} opens a section without closing it"));
            };
            let inner = inner.trim_matches([' ', '\t']);
            // The SDK separates a section's type from its name by ASCII space or tab only: any other white space
            // is part of a name (which is then not a profile name).
            let name = match inner.split_once([' ', '\t']) {
                None => inner,
                Some(("profile", rest)) => rest.trim(),
                Some((other, _)) => {
                    return Err(format!(
                        "line {n}: section [{inner}] is a {other} section, not a profile; {}",
                        why_static_only()
                    ))
                }
            };
            if !is_profile_name(name) {
                return Err(format!("line {n}: [{inner}] is not a profile name"));
            }
            section = Some(name.to_string());
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(format!("line {n} is neither a section, a comment nor `key = value`"));
        };
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim();
        let Some(profile) = &section else {
            return Err(format!("line {n}: key {key:?} comes before any [profile] section"));
        };
        if !ALLOWED_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "key {key:?} (line {n}, profile [{profile}]) is not a static key: {}",
                why_static_only()
            ));
        }
        if value.len() > MAX_VALUE {
            return Err(format!("key {key} (line {n}) is longer than {MAX_VALUE} bytes"));
        }
        let fits = if key == "region" {
            is_region(value)
        } else {
            is_value(value)
        };
        if !value.is_empty() && !fits {
            return Err(format!(
                "key {key} (line {n}) holds a character a {} may not hold (quotes, #, ;, spaces and the like, which \
                 the SDK's reader would take as a comment or quote)",
                if key == "region" {
                    "region (letters, digits, - and _)"
                } else {
                    "key (letters, digits and +/=._-@)"
                }
            ));
        }
        if profile != wanted {
            continue;
        }
        if chosen.insert(key.clone(), value.to_string()).is_some() {
            return Err(format!("key {key} is set twice in profile [{wanted}] (line {n})"));
        }
    }
    let take = |k: &str| chosen.get(k).filter(|v| !v.is_empty()).cloned();
    match (take("aws_access_key_id"), take("aws_secret_access_key")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(StaticKeys {
            profile: wanted.to_string(),
            access_key_id,
            secret_access_key,
            session_token: take("aws_session_token"),
            region: take("region"),
        }),
        _ => Err(format!(
            "profile [{wanted}] has no aws_access_key_id and aws_secret_access_key: without static keys the SDK \
             would use Velero's own identity (its instance role or web identity)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "[default]\naws_access_key_id = AKIA1\naws_secret_access_key=s3cr3t/+=\n";

    #[test]
    fn static_keys_are_read_and_written_back_alone() {
        let k = aws_static_keys(GOOD.as_bytes(), None).unwrap();
        assert_eq!(k.access_key_id, "AKIA1");
        assert_eq!(k.secret_access_key, "s3cr3t/+=");
        assert_eq!(
            k.render(),
            "[default]\naws_access_key_id=AKIA1\naws_secret_access_key=s3cr3t/+=\n"
        );
        // Comments, CRLF, a named profile in either form, a token and a region; other profiles are not copied.
        let file = "# mine\r\n[default]\r\naws_access_key_id=A\r\naws_secret_access_key=B\r\n\r\n; other\n\
                    [profile team]\nAWS_ACCESS_KEY_ID = C\naws_secret_access_key = D\naws_session_token = T\n\
                    region = eu-west-1\n";
        let k = aws_static_keys(file.as_bytes(), Some("team")).unwrap();
        assert_eq!(
            k.render(),
            "[team]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token=T\nregion=eu-west-1\n"
        );
        assert!(!format!("{k:?}").contains('D'), "{k:?}");
    }

    #[test]
    fn anything_but_static_keys_is_refused_naming_the_key() {
        for (file, says) in [
            (
                "[default]\ncredential_process = /bin/sh -c 'touch /tmp/x'\n",
                "key \"credential_process\" (line 2, profile [default]) is not a static key",
            ),
            (
                "[default]\naws_access_key_id=A\naws_secret_access_key=B\nendpoint_url = http://127.0.0.1:9\n",
                "key \"endpoint_url\" (line 4",
            ),
            (
                "[default]\naws_access_key_id=A\naws_secret_access_key=B\ns3 =\n  endpoint_url = http://x\n",
                "key \"s3\"",
            ),
            (
                "[default]\naws_access_key_id=A\naws_secret_access_key=B\nca_bundle=/etc/x\n",
                "ca_bundle",
            ),
            (
                "[default]\nrole_arn = arn:aws:iam::1:role/x\nweb_identity_token_file = /var/run/secrets/token\n",
                "role_arn",
            ),
            (
                "[sso-session s]\nsso_region = x\n",
                "is a sso-session section, not a profile",
            ),
            ("[services s]\ns3 =\n", "is a services section"),
            // Another profile's keys are judged too, though they would not be copied.
            (
                "[default]\naws_access_key_id=A\naws_secret_access_key=B\n[profile other]\ncredential_process=x\n",
                "profile [other]",
            ),
            (
                "[default]\naws_access_key_id=A\n  aws_secret_access_key=B\n",
                "line 3 is indented",
            ),
            ("aws_access_key_id=A\n", "before any [profile] section"),
            (
                "[default]\nregion = eu-west-1\n",
                "has no aws_access_key_id and aws_secret_access_key",
            ),
            ("", "has no aws_access_key_id"),
            ("[default]\naws_access_key_id=A\naws_access_key_id=B\n", "set twice"),
            (
                "[default]\naws_access_key_id=A B\naws_secret_access_key=B\n",
                "holds a character a key",
            ),
            // Values the SDK's reader would take as a comment or a quote: empty keys, Velero's own identity.
            (
                "[default]\naws_access_key_id=#x\naws_secret_access_key=;y\n",
                "holds a character a key",
            ),
            (
                "[default]\naws_access_key_id=\"\"\naws_secret_access_key=''\n",
                "holds a character a key",
            ),
            (
                "[default]\naws_access_key_id=A\naws_secret_access_key=B\naws_session_token=\"\n",
                "holds a character",
            ),
            (
                "[default]\naws_access_key_id=A\naws_secret_access_key=B\nregion=x@10.0.0.5:8443#\n",
                "region",
            ),
            // A section the SDK names otherwise (no ASCII space between type and name).
            (
                "[profile\u{a0}default]\naws_access_key_id=A\naws_secret_access_key=B\n",
                "is not a profile name",
            ),
            ("[default\naws_access_key_id=A\n", "without closing it"),
            ("[default]\njust words\n", "neither a section"),
            ("[a b c]\n", "is a a section"),
        ] {
            let e = aws_static_keys(file.as_bytes(), None).unwrap_err();
            assert!(e.contains(says), "{file:?}: {e}");
        }
        assert!(aws_static_keys(GOOD.as_bytes(), Some("team"))
            .unwrap_err()
            .contains("profile [team] has no"));
        assert!(aws_static_keys(GOOD.as_bytes(), Some("x]\n[y")).is_err());
        assert!(aws_static_keys(&[0xff, 0xfe], None).unwrap_err().contains("not UTF-8"));
        assert!(aws_static_keys(&vec![b'#'; MAX_BYTES + 1], None).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_judged_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            if let Ok(k) = aws_static_keys(&bytes, None) {
                // What nac writes reads back as the same keys.
                proptest::prop_assert_eq!(aws_static_keys(k.render().as_bytes(), None).unwrap(), k);
            }
        }
    }
}
