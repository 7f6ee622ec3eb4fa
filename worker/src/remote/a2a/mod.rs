//! Remote A2A v1.0 agents (`--agent a2a+URL`, or a URL whose card is an A2A card): every skill
//! of the agent hosted as an entrypoint of the same key, each run one JSON-RPC call to the
//! agent (`SendStreamingMessage` when its card says `capabilities.streaming`, else
//! `SendMessage`), see [`run`]; how inputs, outputs and task states map is in [`result`], and
//! which failures are retried in [`rpc`].
//!
//! The card (`{URL}/.well-known/agent-card.json`) is untrusted as a Lucid card is: only the
//! configured origin is ever called (the JSON-RPC interface's path is used on it, its scheme,
//! host and port never), sizes are bounded, redirects are not followed, a skill id that is not
//! a plain name or a key already hosted stops the worker at start.

pub mod card;
pub mod result;
pub mod rpc;
pub mod run;

use crate::entrypoint::Entrypoint;
use crate::remote::{AgentError, CARD_TIMEOUT, MAX_CARD_BYTES};

/// The card of the agent at `base`, bounded.
pub async fn fetch_card(client: &reqwest::Client, base: &str) -> Result<Vec<u8>, AgentError> {
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
    crate::remote::invoke::read_bounded(response, MAX_CARD_BYTES)
        .await
        .map_err(|err| failed(err.to_string()))
}

/// The entrypoints of the A2A agent at `base` (its card read anew), or `None` when its card is
/// not an A2A card (`detect`: how an agent given without `a2a+` is recognised; without it, a
/// card that is not A2A is refused).
pub async fn entrypoints(
    client: &reqwest::Client,
    base: &str,
    max_result_bytes: usize,
    detect: bool,
) -> Result<Option<Vec<Entrypoint>>, AgentError> {
    let body = fetch_card(client, base).await?;
    if detect && !card::looks_like_a2a(&body) {
        return Ok(None);
    }
    let card = card::parse(base, &body)?;
    let endpoint = rpc::Endpoint {
        client: client.clone(),
        url: format!("{}{}", origin(base), card.rpc_path),
        max_bytes: crate::remote::invoke::response_bound(max_result_bytes),
    };
    tracing::info!(agent = %base, endpoint = %endpoint.url, skills = card.skills.len(), streaming = card.streaming, "hosting an A2A agent");
    let hosted = card
        .skills
        .into_iter()
        .map(|skill| {
            let handler = run::A2aHandler {
                endpoint: endpoint.clone(),
                skill: skill.id.clone(),
                streaming: card.streaming,
            };
            let mut entrypoint = Entrypoint::new(skill.id, skill.description, handler);
            entrypoint.streaming = card.streaming;
            entrypoint
        })
        .collect();
    Ok(Some(hosted))
}

/// The scheme, host and port of a base URL (`http://h:1/v1` → `http://h:1`).
fn origin(base: &str) -> &str {
    let after_scheme = base.find("://").map_or(0, |at| at + 3);
    match base[after_scheme..].find('/') {
        Some(path) => &base[..after_scheme + path],
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_drop_the_path() {
        assert_eq!(origin("http://h:1/v1/x"), "http://h:1");
        assert_eq!(origin("https://h"), "https://h");
    }
}
