//! Deliveries given up: kept in the shard's exhausted list and counted.

use std::time::Duration;

use a2a::TaskPushNotificationConfig;
use serde_json::json;

use super::Push;

/// A delivery given up: kept for inspection (the URL's host only: its path or query may
/// carry a token) and counted.
#[allow(clippy::too_many_arguments)]
pub(super) async fn give_up(
    push: &Push,
    task_id: &str,
    config_id: &str,
    config: &TaskPushNotificationConfig,
    seq: u64,
    event: &str,
    attempts: u32,
    reason: &str,
) {
    telemetry::metrics::push_delivery("exhausted", Duration::ZERO);
    let host = url::Url::parse(&config.url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default();
    tracing::warn!(task_id, config_id, %host, attempts, reason, "push delivery given up");
    let record = json!({
        "taskId": task_id,
        "configId": config_id,
        "host": host,
        "seq": seq,
        "event": event,
        "attempts": attempts,
        "reason": reason,
        "at": chrono::Utc::now().to_rfc3339(),
    });
    if let Err(err) = push
        .outbox
        .record_exhausted(task_id, &record.to_string())
        .await
    {
        tracing::warn!(task_id, error = %err, "could not keep an exhausted push delivery");
    }
}
