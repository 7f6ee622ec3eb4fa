//! [`WebhookError`]: why a delivery was not attempted or was stopped by policy. Every variant is
//! permanent: sending the same request again gives the same answer, so an outbox should stop
//! retrying. What happened on the wire (statuses, timeouts, resets) is a
//! [`DeliveryOutcome`](crate::DeliveryOutcome) instead.
//!
//! Nothing here carries the URL's path or query (a receiver may put a token there) or the
//! credentials; the host is enough to find the config.

use crate::authorization::{AuthorizationError, TokenError};
use crate::policy::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Not a URL a webhook can have: unparseable, not http/https, no host, or with a user name
    /// or password.
    #[error("invalid webhook URL: {reason}")]
    InvalidUrl { reason: String },
    /// Every address of the host is refused by the policy: the URL's own IP address, or all
    /// that its name resolved to when the connection was made.
    #[error("webhook host {host} is not allowed: {}", list(refusals))]
    Refused {
        host: String,
        refusals: Vec<Refusal>,
    },
    #[error("invalid Authorization for the webhook: {0}")]
    InvalidAuthorization(#[from] AuthorizationError),
    #[error("invalid notification token for the webhook: {0}")]
    InvalidToken(#[from] TokenError),
    #[error("invalid Content-Type for the webhook: not a valid header value")]
    InvalidContentType,
    /// The HTTP client could not be built (the TLS set-up failed).
    #[error("could not build the webhook HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

fn list(refusals: &[Refusal]) -> String {
    let each: Vec<String> = refusals.iter().map(ToString::to_string).collect();
    format!(
        "{} (public addresses only unless on the push notification allowlist, for the URL's port)",
        each.join(", ")
    )
}
