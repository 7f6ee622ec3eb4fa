//! Reading an A2A v1.0 agent card: its skills, whether it streams, and the path of its JSON-RPC
//! interface. Only those are read; the interface's scheme, host and port are ignored (the card
//! may point anywhere: we call only the origin we were given).

use serde::Deserialize;

use crate::remote::AgentError;

/// One skill as the card describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub id: String,
    pub description: String,
}

/// The parts of an A2A card we use.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    pub skills: Vec<Skill>,
    /// `capabilities.streaming`: runs use `SendStreamingMessage`, else `SendMessage`.
    pub streaming: bool,
    /// The JSON-RPC interface's path (`/` when its URL has none), to be put on the configured
    /// origin.
    pub rpc_path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(default)]
    supported_interfaces: Vec<WireInterface>,
    #[serde(default)]
    capabilities: WireCapabilities,
    #[serde(default)]
    skills: Vec<WireSkill>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireInterface {
    #[serde(default)]
    url: String,
    #[serde(default)]
    protocol_binding: String,
    #[serde(default)]
    protocol_version: String,
}

#[derive(Deserialize, Default)]
struct WireCapabilities {
    #[serde(default)]
    streaming: Option<bool>,
}

#[derive(Deserialize)]
struct WireSkill {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
}

/// Whether `body` is an A2A card (it names interfaces and no Lucid entrypoints): how an agent
/// given without `a2a+` is recognised.
pub fn looks_like_a2a(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        #[serde(default)]
        supported_interfaces: Vec<serde_json::Value>,
        entrypoints: Option<serde_json::Value>,
    }
    serde_json::from_slice::<Probe>(body)
        .is_ok_and(|probe| !probe.supported_interfaces.is_empty() && probe.entrypoints.is_none())
}

/// Parses a card's bytes: it must offer a JSON-RPC interface of protocol 1.x and at least one
/// skill, every skill id a plain name.
pub fn parse(base: &str, body: &[u8]) -> Result<Card, AgentError> {
    let failed = |reason: String| AgentError::Card {
        url: base.to_owned(),
        reason,
    };
    let wire: Wire =
        serde_json::from_slice(body).map_err(|err| failed(format!("not an A2A card: {err}")))?;
    let interface = wire
        .supported_interfaces
        .iter()
        .find(|interface| {
            interface.protocol_binding.eq_ignore_ascii_case("JSONRPC")
                && (interface.protocol_version.is_empty()
                    || interface.protocol_version.starts_with("1."))
        })
        .ok_or_else(|| {
            failed(
                "its A2A card offers no JSON-RPC interface of protocol 1.x (the only binding \
                 hosted)"
                    .to_owned(),
            )
        })?;
    let rpc_path = path_of(&interface.url).ok_or_else(|| {
        failed(format!(
            "its JSON-RPC interface URL {:?} is not http(s)",
            interface.url
        ))
    })?;
    if wire.skills.is_empty() {
        return Err(AgentError::Empty {
            url: base.to_owned(),
        });
    }
    let mut skills = Vec::with_capacity(wire.skills.len());
    for skill in wire.skills {
        if !super::super::card::plain_key(&skill.id) {
            return Err(AgentError::BadKey {
                url: base.to_owned(),
                key: skill.id,
            });
        }
        let description = if skill.description.trim().is_empty() {
            skill.name
        } else {
            skill.description
        };
        skills.push(Skill {
            id: skill.id,
            description,
        });
    }
    Ok(Card {
        skills,
        streaming: wire.capabilities.streaming.unwrap_or(false),
        rpc_path,
    })
}

/// The path of an http(s) URL (`/` when it has none), without its query or fragment; `None`
/// for anything else or a path that could climb out of the origin's root.
fn path_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let path = match rest.find('/') {
        Some(start) => &rest[start..],
        None => "/",
    };
    let safe = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.' | '~' | ':'))
        && !path.split('/').any(|segment| segment == "..");
    safe.then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "http://127.0.0.1:9000";

    fn card(interfaces: &str, skills: &str) -> String {
        format!(
            r#"{{"name":"a","supportedInterfaces":{interfaces},"capabilities":{{"streaming":true}},
               "skills":{skills},"version":"1"}}"#
        )
    }

    #[test]
    fn reads_skills_streaming_and_the_json_rpc_path_only() -> Result<(), AgentError> {
        let body = card(
            r#"[{"url":"http://elsewhere.example/g","protocolBinding":"GRPC","protocolVersion":"1.0"},
                {"url":"https://public.example/a2a/rpc?x=1","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]"#,
            r#"[{"id":"upper","name":"Upper","description":"Uppercases"},{"id":"n","name":"Named"}]"#,
        );
        let card = parse(BASE, body.as_bytes())?;
        assert_eq!(card.rpc_path, "/a2a/rpc");
        assert!(card.streaming);
        assert_eq!(
            card.skills,
            [
                Skill {
                    id: "upper".into(),
                    description: "Uppercases".into()
                },
                Skill {
                    id: "n".into(),
                    description: "Named".into()
                }
            ]
        );
        assert!(looks_like_a2a(body.as_bytes()));
        assert!(!looks_like_a2a(br#"{"entrypoints":{}}"#));
        Ok(())
    }

    #[test]
    fn cards_without_json_rpc_skills_or_plain_ids_are_refused() {
        let grpc_only = card(
            r#"[{"url":"http://a/","protocolBinding":"GRPC","protocolVersion":"1.0"}]"#,
            r#"[{"id":"x"}]"#,
        );
        assert!(matches!(
            parse(BASE, grpc_only.as_bytes()),
            Err(AgentError::Card { .. })
        ));
        let old = card(
            r#"[{"url":"http://a/","protocolBinding":"JSONRPC","protocolVersion":"0.3"}]"#,
            r#"[{"id":"x"}]"#,
        );
        assert!(matches!(
            parse(BASE, old.as_bytes()),
            Err(AgentError::Card { .. })
        ));
        let jsonrpc = r#"[{"url":"http://a","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]"#;
        let none = card(jsonrpc, "[]");
        assert!(matches!(
            parse(BASE, none.as_bytes()),
            Err(AgentError::Empty { .. })
        ));
        let bad = card(jsonrpc, r#"[{"id":"../admin"}]"#);
        assert!(matches!(
            parse(BASE, bad.as_bytes()),
            Err(AgentError::BadKey { .. })
        ));
        let climbing = card(
            r#"[{"url":"http://a/x/../../y","protocolBinding":"JSONRPC"}]"#,
            r#"[{"id":"x"}]"#,
        );
        assert!(matches!(
            parse(BASE, climbing.as_bytes()),
            Err(AgentError::Card { .. })
        ));
    }

    #[test]
    fn paths_default_to_the_root() {
        assert_eq!(path_of("http://a").as_deref(), Some("/"));
        assert_eq!(path_of("http://a:1/").as_deref(), Some("/"));
        assert_eq!(path_of("ftp://a/"), None);
    }
}
