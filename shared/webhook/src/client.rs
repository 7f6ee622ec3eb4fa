//! [`WebhookClient`]: one `POST` to a webhook, made so that a caller-supplied URL cannot turn it
//! into a request against our own network. Each guard closes one way around the address check:
//! the resolver checks names at every connection, [`validate_url`] checks IP literals (which
//! never reach a resolver), no proxy (it would dial for us, unchecked), no redirects (the
//! target would be dialled without the URL checks, and a 307 would resend the credentials),
//! and a bounded response read with a total timeout (a receiver cannot hold a sender or fill
//! its memory). Allowlist entries admit some ports only, and a resolver is not told the port,
//! so a URL goes through the connection pool of its port's view of the policy
//! ([`WebhookPolicy::for_port`]): a handful for any allowlist, built on first use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};

/// The header that carries a push config's token (a2a-python and a2a-go send it so).
const NOTIFICATION_TOKEN: HeaderName = HeaderName::from_static("x-a2a-notification-token");
use reqwest::{Response, redirect};

use crate::authorization::{authorization_header, token_header};
use crate::error::WebhookError;
use crate::outcome::DeliveryOutcome;
use crate::policy::{DialPort, WebhookPolicy};
use crate::resolve::{DialRefused, GuardedResolver};
use crate::target::validate_url;

/// Limits of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// The whole attempt: connect, send, answer and the bounded body read. A2A asks for 10 s.
    pub timeout: Duration,
    /// Resolving and connecting (TCP and TLS), within `timeout`.
    pub connect_timeout: Duration,
    /// How much of a response body is read before the connection is dropped. Receivers have
    /// nothing to tell us in a body; reading a little lets a keep-alive connection be reused.
    pub max_response_body: usize,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            max_response_body: 64 * 1024,
        }
    }
}

/// The SSRF-guarded client push notifications are delivered with. Cheap to clone (the
/// connection pools are shared).
#[derive(Debug, Clone)]
pub struct WebhookClient {
    /// One HTTP client for each view of the policy met so far, by view: at most one more than
    /// the ports the allowlist names, times two (a scheme's default port or not).
    views: Arc<Mutex<HashMap<WebhookPolicy, reqwest::Client>>>,
    policy: Arc<WebhookPolicy>,
    config: WebhookConfig,
}

impl WebhookClient {
    pub fn new(policy: WebhookPolicy, config: WebhookConfig) -> Result<Self, WebhookError> {
        // The public-only view (ports no entry names) now, so that a TLS set-up that cannot
        // work fails at start.
        let public = WebhookPolicy::public_only();
        let http = build(public.clone(), &config)?;
        Ok(Self {
            views: Arc::new(Mutex::new(HashMap::from([(public, http)]))),
            policy: Arc::new(policy),
            config,
        })
    }

    /// The HTTP client whose resolver holds `dial`'s view of the policy.
    fn http_for(&self, dial: DialPort) -> Result<reqwest::Client, WebhookError> {
        let view = self.policy.for_port(dial);
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(http) = views.get(&view) {
            return Ok(http.clone());
        }
        let http = build(view.clone(), &self.config)?;
        views.insert(view, http.clone());
        Ok(http)
    }

    pub fn policy(&self) -> &WebhookPolicy {
        &self.policy
    }

    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    /// POSTs `body` to `url`, with `Authorization: {scheme} {credentials}` when given.
    ///
    /// `Err` means the request was not sent or was stopped by the policy, and sending it again
    /// would not change that; `Ok` carries what the receiver (or the network) answered, and
    /// [`DeliveryOutcome::is_retryable`] says whether another attempt may help.
    pub async fn post(
        &self,
        url: &str,
        authorization: Option<(&str, &str)>,
        content_type: &str,
        body: Bytes,
    ) -> Result<DeliveryOutcome, WebhookError> {
        self.post_with_token(url, authorization, None, content_type, body)
            .await
    }

    /// [`WebhookClient::post`], with `X-A2A-Notification-Token: {token}` when given (the
    /// token an A2A push config names, for the receiver to check; never logged).
    pub async fn post_with_token(
        &self,
        url: &str,
        authorization: Option<(&str, &str)>,
        token: Option<&str>,
        content_type: &str,
        body: Bytes,
    ) -> Result<DeliveryOutcome, WebhookError> {
        let authorization = authorization
            .map(|(scheme, credentials)| authorization_header(scheme, credentials))
            .transpose()?;
        let token = token.map(token_header).transpose()?;
        let content_type =
            HeaderValue::from_str(content_type).map_err(|_| WebhookError::InvalidContentType)?;
        let url = validate_url(url, &self.policy)?;
        let host = url.host_str().unwrap_or_default().to_owned();
        // validate_url accepts http and https URLs only: they have a port.
        let dial = DialPort::of(&url).ok_or_else(|| WebhookError::InvalidUrl {
            reason: "has no port".to_owned(),
        })?;

        let mut request = self
            .http_for(dial)?
            .post(url)
            .header(CONTENT_TYPE, content_type)
            .body(body);
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        if let Some(token) = token {
            request = request.header(NOTIFICATION_TOKEN, token);
        }
        let outcome = match request.send().await {
            Ok(response) => {
                let outcome = DeliveryOutcome::from_response(response.status(), response.headers());
                drain_bounded(response, self.config.max_response_body).await;
                outcome
            }
            Err(error) => send_failure(error)?,
        };
        tracing::debug!(%host, %outcome, "webhook delivery attempt");
        Ok(outcome)
    }
}

/// A client that resolves through `view` (a [`WebhookPolicy::for_port`] view).
fn build(view: WebhookPolicy, config: &WebhookConfig) -> Result<reqwest::Client, WebhookError> {
    reqwest::Client::builder()
        .dns_resolver(GuardedResolver::new(Arc::new(view)))
        .no_proxy()
        .redirect(redirect::Policy::none())
        .timeout(config.timeout)
        .connect_timeout(config.connect_timeout)
        .user_agent(concat!("taskcluster-webhook/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(WebhookError::Client)
}

/// Turns a failed send into an outcome, or into the policy refusal that caused it.
fn send_failure(error: reqwest::Error) -> Result<DeliveryOutcome, WebhookError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<DialRefused>() {
            return Err(WebhookError::Refused {
                host: refused.host.clone(),
                refusals: refused.refusals.clone(),
            });
        }
        source = cause.source();
    }
    if error.is_timeout() {
        return Ok(DeliveryOutcome::TimedOut);
    }
    // The URL may carry a token in its path or query.
    let error = error.without_url();
    let mut detail = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    Ok(DeliveryOutcome::Transport { detail })
}

/// Reads at most about `limit` bytes of the body (the chunk that crosses it is the last) and
/// drops the rest with the connection. A body that ends within the limit leaves the connection
/// reusable. Errors here do not change the outcome: the status already said it.
async fn drain_bounded(mut response: Response, limit: usize) {
    let declared = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return;
    }
    let mut read = 0usize;
    while read < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) | Err(_) => return,
        }
    }
}
