//! Reading a remote agent's Lucid card: its `entrypoints` map, bounded and checked. Nothing
//! else of the card is used (its `url` and `supportedInterfaces` may point anywhere; we call
//! only the origin we were given).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AgentError, CARD_TIMEOUT, MAX_CARD_BYTES};

/// One entrypoint as the card describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteEntrypoint {
    pub key: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub streaming: bool,
}

/// The parts of a card we read.
#[derive(Debug, Default)]
pub struct Card {
    pub entrypoints: Vec<RemoteEntrypoint>,
    /// Keys of entrypoints priced upstream: never hosted (paying an upstream agent is not
    /// supported), refused at start, left out (with a warning) when a refresh finds them.
    pub priced: Vec<String>,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    entrypoints: Map<String, Value>,
}

#[derive(Deserialize)]
struct WireEntrypoint {
    #[serde(default)]
    description: String,
    #[serde(default)]
    streaming: bool,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    pricing: Option<Value>,
}

/// Fetches `{base}/.well-known/agent-card.json` and parses it.
pub async fn read(client: &reqwest::Client, base: &str) -> Result<Card, AgentError> {
    let failed = |reason: String| AgentError::Card {
        url: base.to_owned(),
        reason,
    };
    let response = client
        .get(format!("{base}/.well-known/agent-card.json"))
        .timeout(CARD_TIMEOUT)
        .send()
        .await
        .map_err(|err| failed(err.to_string()))?;
    if !response.status().is_success() {
        return Err(failed(format!("answered {}", response.status())));
    }
    let body = super::invoke::read_bounded(response, MAX_CARD_BYTES)
        .await
        .map_err(|err| failed(err.to_string()))?;
    parse(base, &body)
}

/// Parses a card's bytes: keys must be plain names; priced entrypoints are set apart.
pub fn parse(base: &str, body: &[u8]) -> Result<Card, AgentError> {
    let wire: Wire = serde_json::from_slice(body).map_err(|err| AgentError::Card {
        url: base.to_owned(),
        reason: format!("not a Lucid card: {err}"),
    })?;
    let mut entrypoints = Vec::new();
    let mut priced = Vec::new();
    for (key, value) in wire.entrypoints {
        if !plain_key(&key) {
            return Err(AgentError::BadKey {
                url: base.to_owned(),
                key,
            });
        }
        let entry: WireEntrypoint =
            serde_json::from_value(value).map_err(|err| AgentError::Card {
                url: base.to_owned(),
                reason: format!("entrypoint {key}: {err}"),
            })?;
        if entry.pricing.as_ref().is_some_and(|price| !price.is_null()) {
            priced.push(key);
            continue;
        }
        entrypoints.push(RemoteEntrypoint {
            key,
            description: entry.description,
            input_schema: entry.input_schema.unwrap_or_else(|| json!({})),
            output_schema: entry.output_schema.unwrap_or_else(|| json!({})),
            streaming: entry.streaming,
        });
    }
    Ok(Card {
        entrypoints,
        priced,
    })
}

/// A key that is safe as one URL path segment and as a queue name.
pub(super) fn plain_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "http://agent";

    #[test]
    fn reads_entrypoints_with_schemas_and_streaming() -> Result<(), AgentError> {
        let card = parse(
            BASE,
            br#"{"url":"http://elsewhere/","entrypoints":{
                "echo":{"description":"Returns its input","streaming":false},
                "count":{"description":"Counts","streaming":true,"input_schema":{"type":"object"}}}}"#,
        )?;
        assert_eq!(card.entrypoints.len(), 2);
        let get = |key: &str| card.entrypoints.iter().find(|entry| entry.key == key);
        let count = get("count").ok_or(AgentError::Empty { url: BASE.into() })?;
        assert!(count.streaming);
        assert_eq!(count.input_schema, json!({"type": "object"}));
        let echo = get("echo").ok_or(AgentError::Empty { url: BASE.into() })?;
        assert!(!echo.streaming);
        assert_eq!(echo.description, "Returns its input");
        assert_eq!(echo.output_schema, json!({}));
        Ok(())
    }

    #[test]
    fn priced_entrypoints_are_set_apart_bad_keys_and_garbage_refused() {
        let priced = br#"{"entrypoints":{"paid":{"pricing":{"invoke":"0.01"}},"free":{}}}"#;
        let card = parse(BASE, priced).ok();
        assert_eq!(
            card.as_ref().map(|card| card.priced.clone()),
            Some(vec!["paid".to_owned()])
        );
        assert_eq!(card.map(|card| card.entrypoints.len()), Some(1));
        let bad = br#"{"entrypoints":{"../admin":{}}}"#;
        assert!(matches!(parse(BASE, bad), Err(AgentError::BadKey { .. })));
        assert!(matches!(
            parse(BASE, b"<html>"),
            Err(AgentError::Card { .. })
        ));
    }
}
