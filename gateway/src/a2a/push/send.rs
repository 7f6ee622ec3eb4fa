//! One POST of a notification, and what it came to.

use std::time::{Duration, Instant};

use a2a::{StreamResponse, TaskPushNotificationConfig};
use webhook::DeliveryOutcome;

use super::Push;

/// The media type of a delivery's body.
const A2A_JSON: &str = "application/a2a+json";

/// What one attempt at sending a payload came to.
pub(super) enum Sent {
    Delivered,
    /// Worth another attempt (a timeout, a 5xx, a 429, a reset), not before the receiver's
    /// `Retry-After` when it gave one.
    Retry(String, Option<Duration>),
    /// Never worth another (a 4xx, refused by the SSRF policy, a config that cannot be sent).
    GiveUp(String),
}

/// One POST of `payload` to the config's URL.
pub(super) async fn send(
    push: &Push,
    config: &TaskPushNotificationConfig,
    payload: &StreamResponse,
) -> Sent {
    let Ok(body) = serde_json::to_vec(payload) else {
        return Sent::GiveUp("the notification could not be serialised".into());
    };
    let authorization = config.authentication.as_ref().and_then(|auth| {
        auth.credentials
            .as_deref()
            .map(|credentials| (auth.scheme.as_str(), credentials))
    });
    let started = Instant::now();
    let result = push
        .client
        .post_with_token(
            &config.url,
            authorization,
            config.token.as_deref(),
            A2A_JSON,
            body.into(),
        )
        .await;
    match result {
        Ok(outcome) if outcome.is_delivered() => {
            telemetry::metrics::push_delivery("delivered", started.elapsed());
            Sent::Delivered
        }
        Ok(outcome) if outcome.is_retryable() => {
            let retry_after = match &outcome {
                DeliveryOutcome::Unavailable { retry_after, .. } => *retry_after,
                _ => None,
            };
            Sent::Retry(outcome.to_string(), retry_after)
        }
        Ok(outcome) => Sent::GiveUp(outcome.to_string()),
        Err(err) => Sent::GiveUp(err.to_string()),
    }
}
