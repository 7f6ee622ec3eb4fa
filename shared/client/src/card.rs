//! The Agent Card as a client reads it: untrusted input. Known fields are typed, every other
//! field is kept in `extra` (and written back when the card is serialized).

use std::collections::BTreeMap;

use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::ClientError;

/// Card locations tried after the URL itself, relative to it.
pub const CARD_PATHS: [&str; 3] = [
    ".well-known/agent-card.json",
    ".well-known/agent.json",
    "agentcard.json",
];

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Deprecated in favour of `supportedInterfaces`; the fallback base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_interfaces: Vec<AgentInterface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<AgentSkill>,
    /// The Lucid entrypoints map, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entrypoints: BTreeMap<String, CardEntrypoint>,
    /// Every other field, as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    pub url: String,
    #[serde(default)]
    pub protocol_binding: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSkill {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub streaming: bool,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CardEntrypoint {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub streaming: bool,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AgentCard {
    /// A minimal card for an agent known by its base URL alone.
    pub fn for_url(url: &str) -> Self {
        AgentCard {
            url: Some(url.to_owned()),
            ..AgentCard::default()
        }
    }

    /// The advertised service URL: the first `supportedInterfaces` entry with an HTTP binding,
    /// else `url`.
    pub fn service_url(&self) -> Option<&str> {
        self.supported_interfaces
            .iter()
            .find(|interface| is_http_binding(&interface.protocol_binding))
            .map(|interface| interface.url.as_str())
            .or(self.url.as_deref())
            .filter(|url| !url.trim().is_empty())
    }

    /// Whether the card says the entrypoint `key` streams.
    pub fn streams(&self, key: &str) -> bool {
        self.entrypoints.get(key).is_some_and(|e| e.streaming)
            || self.skills.iter().any(|s| s.id == key && s.streaming)
    }
}

/// `HTTP+JSON` (the profile's), `HTTP`, `HTTP+SSE`...; not `JSONRPC` or `GRPC`.
fn is_http_binding(binding: &str) -> bool {
    let binding = binding.trim().to_ascii_uppercase();
    binding == "HTTP" || binding.starts_with("HTTP+") || binding.starts_with("HTTP/")
}

/// Which URLs the client may talk to.
#[derive(Debug, Clone, Default)]
pub struct UrlPolicy {
    /// When set, only these origins (`scheme://host[:port]`, as `Url::origin` prints them)
    /// are allowed, for the card fetch and the service URL alike.
    pub allowed_origins: Option<Vec<String>>,
}

impl UrlPolicy {
    /// Parses `text` and checks it: http or https only, no credentials, an allowed origin.
    pub fn check(&self, text: &str) -> Result<Url, ClientError> {
        let url = Url::parse(text.trim()).map_err(|err| ClientError::InvalidUrl {
            url: text.to_owned(),
            reason: err.to_string(),
        })?;
        self.check_url(url)
    }

    pub fn check_url(&self, url: Url) -> Result<Url, ClientError> {
        let refused = |reason: &str| ClientError::RefusedUrl {
            url: redacted(&url),
            reason: reason.to_owned(),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused("only http and https URLs are allowed"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(refused("the URL has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refused("URLs with credentials are not allowed"));
        }
        if let Some(allowed) = &self.allowed_origins {
            let origin = url.origin().ascii_serialization();
            let listed = allowed
                .iter()
                .any(|entry| normalize_origin(entry).is_some_and(|entry| entry == origin));
            if !listed {
                return Err(refused(&format!("origin {origin} is not in the allowlist")));
            }
        }
        Ok(url)
    }

    /// Checks a card fetched from `card_url` and returns its base URL. Every URL the card names
    /// that a client could follow (its HTTP interfaces and `url`, not only the one used) must
    /// be an allowed http(s) URL at an allowed origin: without an allowlist, the card's own
    /// origin (scheme, host and port) only; with one, a listed origin. A card that points
    /// elsewhere is refused whole, so a swapped `url` cannot wait for a client that reads it.
    pub fn check_card(&self, card: &AgentCard, card_url: &Url) -> Result<Url, ClientError> {
        let base = self.base_url(card, Some(card_url))?;
        let named = card
            .supported_interfaces
            .iter()
            .filter(|interface| is_http_binding(&interface.protocol_binding))
            .map(|interface| interface.url.as_str())
            .chain(card.url.as_deref())
            .filter(|url| !url.trim().is_empty());
        for text in named {
            let url = self.check_url(resolve(text, Some(card_url))?)?;
            self.check_origin(&url, card_url)?;
        }
        Ok(base)
    }

    /// Without an allowlist, `url` must share the card's origin (with one, `check_url` has
    /// already required a listed origin).
    fn check_origin(&self, url: &Url, card_url: &Url) -> Result<(), ClientError> {
        if self.allowed_origins.is_some() || url.origin() == card_url.origin() {
            return Ok(());
        }
        Err(ClientError::RefusedUrl {
            url: redacted(url),
            reason: format!(
                "origin {} is not the card's origin {} (allow it explicitly: allowed_origins, \
                 taskctl --allow-origin)",
                url.origin().ascii_serialization(),
                card_url.origin().ascii_serialization()
            ),
        })
    }

    /// The base URL operations use for `card`: its service URL (resolved against
    /// `card_url` when relative), checked, with a trailing slash so that paths join below it
    /// and a base path is kept. Query and fragment are dropped.
    pub fn base_url(&self, card: &AgentCard, card_url: Option<&Url>) -> Result<Url, ClientError> {
        let Some(service) = card.service_url() else {
            return Err(ClientError::InvalidCard {
                url: card_url.map(redacted).unwrap_or_default(),
                reason: "the card has no HTTP interface and no url".into(),
            });
        };
        let parsed = resolve(service, card_url)?;
        let mut base = self.check_url(parsed)?;
        if let Some(card_url) = card_url {
            self.check_origin(&base, card_url)?;
        }
        base.set_query(None);
        base.set_fragment(None);
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Ok(base)
    }
}

/// A URL named by a card: absolute, or relative to the card's own URL.
fn resolve(text: &str, card_url: Option<&Url>) -> Result<Url, ClientError> {
    let invalid = |err: url::ParseError| ClientError::InvalidUrl {
        url: text.to_owned(),
        reason: err.to_string(),
    };
    match (Url::parse(text.trim()), card_url) {
        (Ok(url), _) => Ok(url),
        (Err(url::ParseError::RelativeUrlWithoutBase), Some(base)) => {
            base.join(text.trim()).map_err(invalid)
        }
        (Err(err), _) => Err(invalid(err)),
    }
}

/// `scheme://host[:port]` of an allowlist entry (which may be written as a full URL).
fn normalize_origin(entry: &str) -> Option<String> {
    Url::parse(entry.trim())
        .ok()
        .map(|url| url.origin().ascii_serialization())
}

/// A URL fit for an error message: without query, fragment or credentials.
pub(crate) fn redacted(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// `base` joined with path segments, each percent-encoded (a task id cannot escape its segment).
pub(crate) fn endpoint(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}

/// Where to look for a card given the URL the caller named: the URL itself, then the
/// well-known locations below it (a base path kept).
pub(crate) fn card_candidates(url: &Url) -> Vec<Url> {
    let mut candidates = vec![url.clone()];
    let mut dir = url.clone();
    dir.set_query(None);
    dir.set_fragment(None);
    if !dir.path().ends_with('/') {
        let path = format!("{}/", dir.path());
        dir.set_path(&path);
    }
    for path in CARD_PATHS {
        if let Ok(candidate) = dir.join(path)
            && !candidates.contains(&candidate)
        {
            candidates.push(candidate);
        }
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(value: Value) -> AgentCard {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn base_url_prefers_the_first_http_interface_and_keeps_the_base_path() {
        let card = card(json!({
            "name": "a",
            "url": "http://fallback.example/",
            "supportedInterfaces": [
                {"url": "https://grpc.example/", "protocolBinding": "GRPC"},
                {"url": "https://api.example/agents/a", "protocolBinding": "HTTP+JSON"},
            ],
            "x-extra": {"kept": true},
        }));
        let base = UrlPolicy::default()
            .base_url(&card, None)
            .map(|u| u.to_string());
        assert_eq!(base.ok().as_deref(), Some("https://api.example/agents/a/"));
        assert_eq!(card.extra.get("x-extra"), Some(&json!({"kept": true})));
        let round_trip = serde_json::to_value(&card).unwrap_or_default();
        assert_eq!(round_trip["x-extra"], json!({"kept": true}));
        let base = Url::parse("https://api.example/agents/a/").ok();
        let tasks = base.map(|b| endpoint(&b, &["tasks", "a/b?c"]).to_string());
        assert_eq!(
            tasks.as_deref(),
            Some("https://api.example/agents/a/tasks/a%2Fb%3Fc")
        );
    }

    #[test]
    fn falls_back_to_url_and_refuses_other_schemes_and_origins() {
        let fallback = card(json!({"name": "a", "url": "http://h.example:8080/x/"}));
        assert_eq!(
            UrlPolicy::default()
                .base_url(&fallback, None)
                .map(|u| u.to_string())
                .ok()
                .as_deref(),
            Some("http://h.example:8080/x/")
        );
        for bad in [
            "file:///etc/passwd",
            "ftp://h.example/",
            "javascript:alert(1)",
        ] {
            let bad = card(json!({"name": "a", "url": bad}));
            assert!(matches!(
                UrlPolicy::default().base_url(&bad, None),
                Err(ClientError::RefusedUrl { .. })
            ));
        }
        let policy = UrlPolicy {
            allowed_origins: Some(vec!["https://ok.example".into()]),
        };
        assert!(policy.check("https://ok.example/a/b").is_ok());
        assert!(policy.check("https://ok.example:444/").is_err());
        assert!(policy.check("http://ok.example/").is_err());
        assert!(policy.check("https://user:pw@ok.example/").is_err());
    }

    #[test]
    fn a_card_may_name_only_its_own_origin_unless_allowed() -> Result<(), url::ParseError> {
        let card_url = Url::parse("https://a.example/.well-known/agent-card.json")?;
        let named = |url: &str, interface: &str| {
            card(json!({"name": "a", "url": url,
                        "supportedInterfaces": [{"url": interface, "protocolBinding": "HTTP+JSON"}]}))
        };
        let policy = UrlPolicy::default();
        let base = policy.check_card(&named("/", "/agents/a"), &card_url);
        assert_eq!(
            base.map(|u| u.to_string()).ok().as_deref(),
            Some("https://a.example/agents/a/")
        );
        for (url, interface) in [
            ("https://a.example/", "http://a.example/"),
            ("https://a.example/", "https://a.example:8443/"),
            ("http://b.example/", "https://a.example/"),
        ] {
            assert!(matches!(
                policy.check_card(&named(url, interface), &card_url),
                Err(ClientError::RefusedUrl { .. })
            ));
        }
        // A non-HTTP binding is not followed, so not checked.
        let grpc = card(json!({"name": "a", "supportedInterfaces": [
            {"url": "https://a.example/", "protocolBinding": "HTTP+JSON"},
            {"url": "grpc://elsewhere.example/", "protocolBinding": "GRPC"}]}));
        assert!(policy.check_card(&grpc, &card_url).is_ok());
        let listed = UrlPolicy {
            allowed_origins: Some(vec!["https://a.example".into(), "http://b.example".into()]),
        };
        assert!(
            listed
                .check_card(&named("http://b.example/", "https://a.example/"), &card_url)
                .is_ok()
        );
        Ok(())
    }

    #[test]
    fn candidates_keep_the_base_path() {
        let url = Url::parse("http://h.example/agents/a").ok();
        let list: Vec<String> = url
            .map(|u| card_candidates(&u).iter().map(Url::to_string).collect())
            .unwrap_or_default();
        assert_eq!(
            list,
            [
                "http://h.example/agents/a",
                "http://h.example/agents/a/.well-known/agent-card.json",
                "http://h.example/agents/a/.well-known/agent.json",
                "http://h.example/agents/a/agentcard.json",
            ]
        );
    }
}
