//! Remote agents (`--agent URL`): every entrypoint of an agent that speaks the Lucid HTTP
//! profile, hosted as if it were built in. The card is read once at start ([`card`]); each run
//! is one `POST {base}/entrypoints/:key/invoke` ([`invoke`]), or `/stream` for a streaming
//! entrypoint, its SSE relayed onto the task's events ([`stream`]), under the task's cancellation and
//! run deadline (the runtime drops the handler's future on a cancel or a lost lease, which
//! closes the connection at once).
//!
//! The card is untrusted input: only the configured origin is ever called (URLs the card
//! names are ignored), its size and every answer's size are bounded, redirects are not
//! followed, and a priced or colliding entrypoint stops the worker at start.

pub mod a2a;
pub mod card;
pub mod invoke;
pub mod stream;

use std::time::Duration;

use crate::entrypoint::{Entrypoint, Entrypoints};

/// The most bytes of an agent's card that are read.
pub const MAX_CARD_BYTES: usize = 1024 * 1024;
/// How long reading the card (connect included) may take.
pub const CARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to an agent for a run may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a remote agent cannot be hosted.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("--agent {url}: not an http(s) URL without credentials, query or fragment")]
    BadUrl { url: String },
    #[error("--agent {url}: cannot build an HTTP client: {source}")]
    Client { url: String, source: reqwest::Error },
    #[error("--agent {url}: cannot read its card: {reason}")]
    Card { url: String, reason: String },
    #[error(
        "--agent {url}: entrypoint {key} is priced upstream; paying an upstream agent is not supported, host it without pricing"
    )]
    Priced { url: String, key: String },
    #[error(
        "--agent {url}: entrypoint key {key:?} is not a plain name (letters, digits, '-', '_', '.')"
    )]
    BadKey { url: String, key: String },
    #[error("--agent {url}: entrypoint {key} is already hosted by this worker ({other})")]
    Collision {
        url: String,
        key: String,
        other: String,
    },
    #[error("--agent {url}: its card lists no entrypoints")]
    Empty { url: String },
}

/// The base URL of an agent: scheme, host, port and path, without a trailing slash.
fn base_url(url: &str) -> Result<String, AgentError> {
    let bad = || AgentError::BadUrl {
        url: url.to_owned(),
    };
    let trimmed = url.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(bad)?;
    // No credentials in the URL: they would show in logs and error messages.
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') || rest.contains(['?', '#', ' ']) {
        return Err(AgentError::BadUrl {
            url: if authority.contains('@') {
                "(a URL with credentials)".to_owned()
            } else {
                url.to_owned()
            },
        });
    }
    Ok(trimmed.to_owned())
}

/// One HTTP client for every agent: no redirects (an agent may not send us elsewhere).
fn client(url: &str) -> Result<reqwest::Client, AgentError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|source| AgentError::Client {
            url: url.to_owned(),
            source,
        })
}

/// Adds every entrypoint of the agents at `urls` to `hosted`. A key already hosted (a built-in
/// or another agent's) is refused: two handlers for one key would take each other's tasks.
pub async fn host(
    hosted: Entrypoints,
    urls: &[String],
    max_result_bytes: usize,
) -> Result<Entrypoints, AgentError> {
    let mut hosted = hosted;
    let mut owners: Vec<(String, String)> = hosted
        .keys()
        .into_iter()
        .map(|key| (key, "a built-in".to_owned()))
        .collect();
    for url in urls {
        // `a2a+URL`: an A2A v1.0 agent (see [`a2a`]), also recognised from its card.
        let (a2a_only, url) = match url.trim().strip_prefix("a2a+") {
            Some(url) => (true, url),
            None => (false, url.as_str()),
        };
        let base = base_url(url)?;
        let client = client(&base)?;
        let card = if a2a_only {
            card::Card::default()
        } else {
            card::read(&client, &base).await?
        };
        if card.entrypoints.is_empty() {
            let skills = a2a::entrypoints(&client, &base, max_result_bytes, !a2a_only).await?;
            let skills = skills.ok_or_else(|| AgentError::Empty { url: base.clone() })?;
            for entrypoint in skills {
                if let Some((_, other)) = owners.iter().find(|(key, _)| *key == entrypoint.key) {
                    return Err(AgentError::Collision {
                        url: base,
                        key: entrypoint.key,
                        other: other.clone(),
                    });
                }
                owners.push((entrypoint.key.clone(), format!("agent {base}")));
                hosted = hosted.with(entrypoint);
            }
            continue;
        }
        for remote in card.entrypoints {
            if let Some((_, other)) = owners.iter().find(|(key, _)| *key == remote.key) {
                return Err(AgentError::Collision {
                    url: base,
                    key: remote.key,
                    other: other.clone(),
                });
            }
            owners.push((remote.key.clone(), format!("agent {base}")));
            let route = if remote.streaming { "stream" } else { "invoke" };
            let handler = invoke::RemoteHandler {
                client: client.clone(),
                url: format!("{base}/entrypoints/{}/{route}", remote.key),
                max_bytes: invoke::response_bound(max_result_bytes),
                stream: remote.streaming,
            };
            let mut entrypoint = Entrypoint::new(remote.key, remote.description, handler)
                .input_schema(remote.input_schema)
                .output_schema(remote.output_schema);
            entrypoint.streaming = remote.streaming;
            hosted = hosted.with(entrypoint);
        }
    }
    Ok(hosted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_plain_http_origins_with_paths() {
        assert_eq!(
            base_url("http://127.0.0.1:8787/").ok().as_deref(),
            Some("http://127.0.0.1:8787")
        );
        assert_eq!(
            base_url("https://agents.example/v1").ok().as_deref(),
            Some("https://agents.example/v1")
        );
        for bad in [
            "ftp://x",
            "127.0.0.1:80",
            "http://",
            "http://x/?a=1",
            "http://x#f",
        ] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
    }
}
