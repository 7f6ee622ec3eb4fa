//! Remote agents (`--agent URL`): every entrypoint of an agent that speaks the Lucid HTTP
//! profile, hosted as if it were built in. The card is read at start and then every
//! `--agent-refresh-secs` ([`card`], [`refresh`]); each run is one
//! `POST {base}/entrypoints/:key/invoke` ([`invoke`]), or `/stream` for a streaming
//! entrypoint, its SSE relayed onto the task's events ([`stream`]), under the task's
//! cancellation and run deadline (the runtime drops the handler's future on a cancel or a lost
//! lease, which closes the connection at once). A configured bearer token goes with every
//! request; failures that may pass (unreachable, 429, 502 to 504) ask for another attempt.
//!
//! The card is untrusted input: only the configured origin is ever called (URLs the card
//! names are ignored), its size and every answer's size are bounded, redirects are not
//! followed, and a priced or colliding entrypoint stops the worker at start (a refresh that
//! finds one leaves it out, with a warning).

pub mod a2a;
pub mod card;
pub mod invoke;
pub mod refresh;
pub mod stream;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use server::secret::Secret;

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
    #[error("the agents' bearer token is not a valid HTTP header value")]
    Token,
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

/// One HTTP client per agent: no redirects (an agent may not send us elsewhere), and the
/// agent's bearer token, when one is configured, on every request (card and runs), marked
/// sensitive so that no debug print of a request shows it.
fn client(url: &str, token: Option<&Secret>) -> Result<reqwest::Client, AgentError> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        let mut value =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.expose().trim()))
                .map_err(|_| AgentError::Token)?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .default_headers(headers)
        .build()
        .map_err(|source| AgentError::Client {
            url: url.to_owned(),
            source,
        })
}

/// One configured agent and the last card read from it.
struct Agent {
    base: String,
    client: reqwest::Client,
    card: card::Card,
}

/// The agents a worker hosts, beside its local entrypoints: their cards (the last good one of
/// each) and who owns which key, so that a refresh keeps every key with its owner.
pub struct Agents {
    local: Entrypoints,
    agents: Vec<Agent>,
    max_bytes: usize,
    /// The agent (index in `agents`) of each key hosted after the last compose.
    owners: BTreeMap<String, usize>,
    /// The refusals logged after the last compose.
    reported: BTreeSet<String>,
}

impl Agents {
    /// Reads every agent's card. Any that cannot be read, lists no entrypoints or prices one
    /// stops the worker: at start, a mistake is best refused loudly.
    pub async fn start(
        local: Entrypoints,
        urls: &[String],
        token: Option<&Secret>,
        max_result_bytes: usize,
    ) -> Result<Agents, AgentError> {
        let mut local = local;
        let mut agents = Vec::new();
        for url in urls {
            // `a2a+URL`: an A2A v1.0 agent (see [`a2a`]), also recognised from its card. Its
            // skills are read once, here, and hosted beside the built-ins (not refreshed).
            let (a2a_only, url) = match url.trim().strip_prefix("a2a+") {
                Some(url) => (true, url),
                None => (false, url.as_str()),
            };
            let base = base_url(url)?;
            let client = client(&base, token)?;
            let card = if a2a_only {
                card::Card::default()
            } else {
                card::read(&client, &base).await?
            };
            if card.entrypoints.is_empty() && card.priced.is_empty() {
                let skills = a2a::entrypoints(&client, &base, max_result_bytes, !a2a_only).await?;
                let skills = skills.ok_or_else(|| AgentError::Empty { url: base.clone() })?;
                for entrypoint in skills {
                    if local.get(&entrypoint.key).is_some() {
                        return Err(AgentError::Collision {
                            url: base,
                            key: entrypoint.key,
                            other: "a built-in or another A2A agent".to_owned(),
                        });
                    }
                    local = local.with(entrypoint);
                }
                continue;
            }
            if let Some(key) = card.priced.first() {
                return Err(AgentError::Priced {
                    url: base,
                    key: key.clone(),
                });
            }
            if card.entrypoints.is_empty() {
                return Err(AgentError::Empty { url: base });
            }
            agents.push(Agent { base, client, card });
        }
        Ok(Agents {
            local,
            agents,
            max_bytes: invoke::response_bound(max_result_bytes),
            owners: BTreeMap::new(),
            reported: BTreeSet::new(),
        })
    }

    /// Reads every card again; one that cannot be read keeps its last good one (a warning).
    pub async fn refresh(&mut self) {
        for agent in &mut self.agents {
            match card::read(&agent.client, &agent.base).await {
                Ok(card) => agent.card = card,
                Err(err) => {
                    tracing::warn!(error = %err, "keeping the agent's last card");
                }
            }
        }
    }

    /// The local entrypoints and every agent's, with what was refused: a priced entrypoint
    /// (not hosted), a key another owner holds (kept by its first owner: a built-in, then
    /// whoever hosted it before, then the agents in order). `strict`: any refusal is the error.
    pub fn compose(&mut self, strict: bool) -> Result<Entrypoints, Vec<AgentError>> {
        let mut hosted = self.local.clone();
        let mut owners: BTreeMap<String, usize> = BTreeMap::new();
        let mut refused = Vec::new();
        // Keys keep the agent that hosted them, if its card still lists them.
        for (key, index) in &self.owners {
            let listed = self.agents.get(*index).is_some_and(|agent| {
                agent
                    .card
                    .entrypoints
                    .iter()
                    .any(|remote| &remote.key == key)
            });
            if listed && hosted.get(key).is_none() {
                owners.insert(key.clone(), *index);
            }
        }
        for (index, agent) in self.agents.iter().enumerate() {
            for key in &agent.card.priced {
                refused.push(AgentError::Priced {
                    url: agent.base.clone(),
                    key: key.clone(),
                });
            }
            for remote in &agent.card.entrypoints {
                let other = match owners.get(&remote.key) {
                    Some(owner) if *owner == index => None,
                    Some(owner) => Some(format!("agent {}", self.agents[*owner].base)),
                    None if self.local.get(&remote.key).is_some() => Some("a built-in".to_owned()),
                    None => {
                        owners.insert(remote.key.clone(), index);
                        None
                    }
                };
                if let Some(other) = other {
                    refused.push(AgentError::Collision {
                        url: agent.base.clone(),
                        key: remote.key.clone(),
                        other,
                    });
                    continue;
                }
                hosted = hosted.with(self.entrypoint(agent, remote));
            }
        }
        if strict && !refused.is_empty() {
            return Err(refused);
        }
        // Each refusal once, not again at every refresh that finds it still there.
        let messages: BTreeSet<String> = refused.iter().map(ToString::to_string).collect();
        for message in messages.difference(&self.reported) {
            tracing::warn!(error = %message, "not hosting an entrypoint of an agent");
        }
        self.reported = messages;
        self.owners = owners;
        Ok(hosted)
    }

    fn entrypoint(&self, agent: &Agent, remote: &card::RemoteEntrypoint) -> Entrypoint {
        let route = if remote.streaming { "stream" } else { "invoke" };
        let handler = invoke::RemoteHandler {
            client: agent.client.clone(),
            url: format!("{}/entrypoints/{}/{route}", agent.base, remote.key),
            max_bytes: self.max_bytes,
            stream: remote.streaming,
        };
        let mut entrypoint =
            Entrypoint::new(remote.key.clone(), remote.description.clone(), handler)
                .input_schema(remote.input_schema.clone())
                .output_schema(remote.output_schema.clone());
        entrypoint.streaming = remote.streaming;
        entrypoint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(key: &str) -> card::RemoteEntrypoint {
        card::RemoteEntrypoint {
            key: key.to_owned(),
            description: format!("{key} remotely"),
            input_schema: serde_json::json!({}),
            output_schema: serde_json::json!({}),
            streaming: false,
        }
    }

    fn agent(base: &str, keys: &[&str], priced: &[&str]) -> Agent {
        Agent {
            base: base.to_owned(),
            client: reqwest::Client::new(),
            card: card::Card {
                entrypoints: keys.iter().map(|key| remote(key)).collect(),
                priced: priced.iter().map(|key| (*key).to_owned()).collect(),
            },
        }
    }

    fn agents(local: &[&str], agents: Vec<Agent>) -> Agents {
        let builtins = crate::builtins::all();
        let keys: Vec<String> = local.iter().map(|key| (*key).to_owned()).collect();
        Agents {
            local: builtins.only(&keys).unwrap_or_default(),
            agents,
            max_bytes: 1024,
            owners: BTreeMap::new(),
            reported: BTreeSet::new(),
        }
    }

    #[test]
    fn a_collision_is_refused_at_start_and_left_out_on_refresh() {
        let mut host = agents(&["echo"], vec![agent("http://a", &["echo", "draw"], &[])]);
        let refused = host.compose(true).err().unwrap_or_default();
        assert!(
            matches!(&refused[..], [AgentError::Collision { key, other, .. }] if key == "echo" && other == "a built-in")
        );
        let hosted = host.compose(false).unwrap_or_default();
        assert_eq!(hosted.keys(), ["draw", "echo"]);
        assert_eq!(
            hosted
                .get("echo")
                .map(|entrypoint| entrypoint.description.clone()),
            crate::builtins::all()
                .get("echo")
                .map(|entrypoint| entrypoint.description.clone())
        );
    }

    #[test]
    fn a_refresh_keeps_each_key_with_its_owner_and_follows_the_cards() {
        let mut host = agents(
            &[],
            vec![
                agent("http://a", &["x"], &[]),
                agent("http://b", &["y"], &[]),
            ],
        );
        assert_eq!(host.compose(true).unwrap_or_default().keys(), ["x", "y"]);
        // Agent a now lists y too (b holds it), drops x, adds a priced z.
        host.agents[0] = agent("http://a", &["y", "w"], &["z"]);
        let hosted = host.compose(false).unwrap_or_default();
        assert_eq!(hosted.keys(), ["w", "y"]);
        let owner = hosted.get("y").map(|entrypoint| entrypoint.info());
        assert_eq!(
            owner.map(|info| info.description),
            Some("y remotely".to_owned())
        );
        assert_eq!(host.owners.get("y"), Some(&1));
        assert_eq!(host.reported.len(), 2, "{:?}", host.reported);
        // b drops y: a gets it.
        host.agents[1] = agent("http://b", &[], &[]);
        let hosted = host.compose(false).unwrap_or_default();
        assert_eq!(hosted.keys(), ["w", "y"]);
        assert_eq!(host.owners.get("y"), Some(&0));
    }

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
