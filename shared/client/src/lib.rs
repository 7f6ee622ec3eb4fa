//! A client for agents speaking the Lucid A2A HTTP profile, as used by `taskctl` and the tests.
//! It speaks HTTP only (reqwest); nothing here links Redis.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use client::{Client, SendOptions};
//! let client = Client::new(Default::default())?;
//! let card = client.fetch_card("http://127.0.0.1:8080").await?;
//! let access = client
//!     .send_message(&card, "echo", &serde_json::json!({"x": 1}), SendOptions::default())
//!     .await?;
//! let task = client
//!     .wait_for_task(&card, &access.task_id, access.access_token(), std::time::Duration::from_secs(30))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! - [`card`]: the Agent Card, read as untrusted input, and the URL policy;
//! - [`trust`]: card signatures (A2A §8.4: ES256 JWS over the JCS bytes) and the trust policy;
//! - [`invoke`]: direct invocation and streaming;
//! - [`tasks`]: owned tasks (send, get, list, cancel, subscribe, wait);
//! - [`pay`]: paying priced calls (x402) with a [`Payer`];
//! - [`sse`]: the Server-Sent Events parser both streams use;
//! - [`error`]: [`ClientError`] and [`TaskCreationError`].
//!
//! Access tokens travel only in the `Task-Access-Token` header and never appear in an error's
//! `Display` or `Debug`.
//!
//! Priced calls: a payer goes in the call's options ([`InvokeOptions::payer`] for `invoke`
//! and [`Client::stream_with_options`], [`SendOptions::payer`] for `send_message`). On a 402 it
//! answers the challenge and the request is sent once more with the credential; the receipt
//! comes back as [`Settlement`] (`InvokeResult::settlement`, [`EventStream::settlement`],
//! `TaskAccess::settlement`, and `TaskCreationError::settlement` when creation failed after
//! paying). Without a payer a 402 is [`ClientError::PaymentRequired`] with the price asked.
//!
//! ```no_run
//! # async fn demo(client: client::Client, card: client::AgentCard)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use client::{InvokeOptions, KeyPayer};
//! use client::pay::{LocalPayer, X402Version};
//! let key = LocalPayer::from_env("PAY_KEY")?;
//! // Never more than 0.05 USDC per call; v2 unless the agent only speaks v1.
//! let cap = payments::amount::to_atomic("0.05")?;
//! let payer = KeyPayer::new(key, Some(cap)).prefer(X402Version::V2);
//! let options = InvokeOptions { payer: Some(Arc::new(payer)), ..Default::default() };
//! let result = client.invoke(&card, "echo", &serde_json::json!({}), &options).await?;
//! if let Some(Ok(receipt)) = result.settlement.receipt() {
//!     println!("paid: {}", receipt.transaction);
//! }
//! # Ok(()) }
//! ```

pub mod card;
pub mod error;
pub mod ijson;
pub mod invoke;
pub mod pay;
pub mod sse;
pub mod tasks;
pub mod trust;

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Response, Url};

pub use card::{AgentCard, AgentInterface, AgentSkill, CardEntrypoint, UrlPolicy};
pub use error::{ClientError, CreationFailure, TaskCreationError};
pub use invoke::{EventStream, InvokeOptions, InvokeResult, StreamEvent};
pub use pay::{KeyPayer, Payer, PaymentRequired};
pub use sse::{SseEvent, SseParser};
pub use tasks::{
    ListFilter, SendOptions, Settlement, TaskAccess, TaskEventStream, TaskList, generate_token,
};
pub use trust::{Jwks, KeySource, SignatureError, TrustPolicy, Verification, Verify};

pub const ACCESS_TOKEN_HEADER: &str = "Task-Access-Token";
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// Limits and policy. The defaults suit a command-line client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Connecting to an agent.
    pub connect_timeout: Duration,
    /// A whole task request (send, get, list, cancel), response body included.
    pub request_timeout: Duration,
    /// A whole `invoke`: the agent answers when the run ends (up to its own limit).
    pub invoke_timeout: Duration,
    /// Fetching a card, body included.
    pub card_timeout: Duration,
    /// The largest card accepted.
    pub max_card_bytes: usize,
    /// The largest JSON response accepted.
    pub max_response_bytes: usize,
    /// The largest single server-sent event accepted.
    pub max_event_bytes: usize,
    /// An SSE stream with nothing (not even a keep-alive) for this long fails; `None` waits.
    pub stream_idle_timeout: Option<Duration>,
    /// Which URLs the client may talk to (cards are untrusted: they choose the service URL).
    pub policy: UrlPolicy,
    /// Whether cards must be signed, and by which keys (see [`trust`]).
    pub trust: TrustPolicy,
    pub user_agent: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            invoke_timeout: Duration::from_secs(15 * 60 + 30),
            card_timeout: Duration::from_secs(15),
            max_card_bytes: 1024 * 1024,
            max_response_bytes: 32 * 1024 * 1024,
            max_event_bytes: 16 * 1024 * 1024,
            stream_idle_timeout: Some(Duration::from_secs(60)),
            policy: UrlPolicy::default(),
            trust: TrustPolicy::default(),
            user_agent: concat!("taskcluster-client/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// The client. Cheap to clone (one connection pool).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    options: ClientOptions,
}

impl Client {
    pub fn new(options: ClientOptions) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .user_agent(options.user_agent.clone())
            // A redirect could leave the allowlist: none are followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(ClientError::network)?;
        Ok(Client { http, options })
    }

    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// Fetches the card of the agent at `url`: the URL itself, then
    /// `.well-known/agent-card.json`, `.well-known/agent.json` and `agentcard.json` below it.
    /// A 404 (or, for the URL itself, a 2xx that is not a JSON card, such as a landing page)
    /// moves on to the next location. The card must name an allowed http(s) service URL.
    pub async fn fetch_card(&self, url: &str) -> Result<AgentCard, ClientError> {
        Ok(self.fetch_card_verified(url).await?.0)
    }

    /// [`Client::fetch_card`], with how its signature came out under the client's
    /// [`TrustPolicy`]. A refused signature is [`ClientError::Signature`].
    pub async fn fetch_card_verified(
        &self,
        url: &str,
    ) -> Result<(AgentCard, Verification), ClientError> {
        let start = self.options.policy.check(url)?;
        for (index, candidate) in card::card_candidates(&start).into_iter().enumerate() {
            let response = self
                .http
                .get(candidate.clone())
                .header(reqwest::header::ACCEPT, "application/json")
                .timeout(self.options.card_timeout)
                .send()
                .await
                .map_err(ClientError::network)?;
            let status = response.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                continue;
            }
            if !status.is_success() {
                let body = self
                    .read_text(response, self.options.max_card_bytes)
                    .await?;
                return Err(ClientError::remote(status.as_u16(), body));
            }
            let bytes = read_limited(response, self.options.max_card_bytes).await?;
            // JSON naming a member twice is refused wherever it was found (I-JSON): the
            // verifier and a consumer could read different values of one signed card.
            if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok() {
                ijson::no_duplicate_members(&bytes).map_err(|reason| ClientError::InvalidCard {
                    url: card::redacted(&candidate),
                    reason,
                })?;
            }
            let parsed: Result<(serde_json::Value, AgentCard), String> =
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .map_err(|err| err.to_string())
                    .and_then(|value| {
                        if value.is_object() {
                            serde_json::from_value(value.clone())
                                .map(|card| (value, card))
                                .map_err(|err| err.to_string())
                        } else {
                            Err("not a JSON object".into())
                        }
                    });
            let usable = matches!(&parsed, Ok((_, card)) if card.service_url().is_some());
            if index == 0 && !usable {
                // The URL itself answered with something else (a landing page): look further.
                continue;
            }
            let (raw, card) = parsed.map_err(|reason| ClientError::InvalidCard {
                url: card::redacted(&candidate),
                reason,
            })?;
            // Refuses a card whose service URL is missing, or names an origin not allowed.
            self.options.policy.check_card(&card, &candidate)?;
            let verification = self.verify(&raw, &candidate).await?;
            return Ok((card, verification));
        }
        Err(ClientError::CardNotFound {
            url: card::redacted(&start),
        })
    }

    /// Checks the card's signatures as the trust policy says; same-origin keys are fetched
    /// from the card's origin.
    async fn verify(
        &self,
        raw: &serde_json::Value,
        card_url: &Url,
    ) -> Result<Verification, ClientError> {
        let trust = &self.options.trust;
        let required = match trust.verify {
            Verify::Off => return Ok(Verification::NotChecked),
            Verify::Optional => false,
            Verify::Required => true,
        };
        let signed = raw
            .get("signatures")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|list| !list.is_empty());
        let fetched;
        let keys = match &trust.keys {
            KeySource::Pinned(keys) => keys,
            // No signature: nothing to fetch keys for (verify_card says Missing or Unsigned).
            KeySource::SameOrigin if !signed => &Jwks::default(),
            KeySource::SameOrigin => {
                fetched = self.fetch_jwks(card_url).await?;
                &fetched
            }
        };
        let check = trust::Check {
            required,
            revoked: &trust.revoked,
            now: trust::now(),
        };
        Ok(trust::verify_card_with(raw, keys, &check)?)
    }

    /// `/.well-known/jwks.json` at the card's origin (64 KiB at most).
    async fn fetch_jwks(&self, card_url: &Url) -> Result<Jwks, ClientError> {
        let url =
            card_url
                .join("/.well-known/jwks.json")
                .map_err(|err| ClientError::InvalidUrl {
                    url: card::redacted(card_url),
                    reason: err.to_string(),
                })?;
        let response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.options.card_timeout)
            .send()
            .await
            .map_err(ClientError::network)?;
        let status = response.status();
        let bytes = read_limited(response, 64 * 1024).await?;
        if !status.is_success() {
            return Err(
                SignatureError::Jwks(format!("the card's origin answered {status}")).into(),
            );
        }
        Ok(Jwks::from_json(&bytes)?)
    }

    /// The base URL operations on `card` use (checked against the policy).
    pub fn base_url(&self, card: &AgentCard) -> Result<Url, ClientError> {
        self.options.policy.base_url(card, None)
    }

    /// A JSON response: 2xx parsed as `T`, anything else a [`ClientError::Remote`].
    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        response: Response,
    ) -> Result<T, ClientError> {
        let status = response.status().as_u16();
        let ok = response.status().is_success();
        let body = self
            .read_text(response, self.options.max_response_bytes)
            .await?;
        if !ok {
            return Err(ClientError::remote(status, body));
        }
        serde_json::from_str(&body).map_err(|err| ClientError::Malformed {
            status,
            reason: err.to_string(),
            body,
        })
    }

    async fn read_text(&self, response: Response, limit: usize) -> Result<String, ClientError> {
        let bytes = read_limited(response, limit).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Reads a body, failing as soon as it passes `limit` bytes.
pub(crate) async fn read_limited(response: Response, limit: usize) -> Result<Vec<u8>, ClientError> {
    let url = card::redacted(response.url());
    let too_large = || ClientError::TooLarge {
        url: url.clone(),
        limit,
    };
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(ClientError::network)?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
