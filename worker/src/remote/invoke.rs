//! One run of a remote entrypoint: `POST {base}/entrypoints/:key/invoke` with `{"input": ...}`.
//!
//! The request carries the task's id, attempt and time left (headers) and an `Idempotency-Key`
//! derived from the task id, the same on every attempt of one task, so the agent can
//! deduplicate side effects. The answer's size is bounded; the agent's error code becomes the
//! task's error. A cancel or a lost lease drops this future (the runtime stops waiting), which
//! closes the connection; the run deadline bounds the request as well.

use std::time::Duration;

use serde_json::{Value, json};

use crate::handler::{Handler, HandlerError, HandlerFuture, HandlerOutput, TaskContext};

/// Headers a remote handler may use to stay safe.
pub const TASK_ID_HEADER: &str = "X-Task-Id";
pub const ATTEMPT_HEADER: &str = "X-Task-Attempt";
/// Milliseconds left before the run deadline when the request was sent.
pub const DEADLINE_HEADER: &str = "X-Task-Deadline-Ms";
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// How long a call may go unanswered before the worker emits the `{"agent": "invoked"}`
/// progress event.
pub const INVOKED_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

/// The profile's bounds on an `Idempotency-Key`.
const IDEMPOTENCY_KEY_LEN: std::ops::RangeInclusive<usize> = 20..=256;
/// Room for the envelope around an output (`run_id`, `usage`, `model`).
const ENVELOPE_BYTES: usize = 64 * 1024;

/// The most bytes of an invoke answer read for outputs of at most `max_result_bytes`.
pub fn response_bound(max_result_bytes: usize) -> usize {
    max_result_bytes.saturating_add(ENVELOPE_BYTES)
}

/// The handler of a remote entrypoint.
pub struct RemoteHandler {
    pub client: reqwest::Client,
    /// `{base}/entrypoints/{key}/invoke`, built from the configured origin only.
    pub url: String,
    pub max_bytes: usize,
    /// `url` is the entrypoint's `/stream`: the answer is SSE, relayed onto the task's events.
    pub stream: bool,
}

impl Handler for RemoteHandler {
    fn call(&self, input: Value, ctx: TaskContext) -> HandlerFuture {
        let client = self.client.clone();
        let url = self.url.clone();
        let max_bytes = self.max_bytes;
        let stream = self.stream;
        Box::pin(async move { run(client, url, max_bytes, stream, input, ctx).await })
    }
}

/// The idempotency key of every attempt of task `task_id`, or none where the profile's length
/// bounds cannot hold it.
pub fn idempotency_key(task_id: &str) -> Option<String> {
    let key = format!("taskcluster-task-id:{task_id}");
    IDEMPOTENCY_KEY_LEN.contains(&key.len()).then_some(key)
}

async fn run(
    client: reqwest::Client,
    url: String,
    max_bytes: usize,
    stream: bool,
    input: Value,
    ctx: TaskContext,
) -> Result<HandlerOutput, HandlerError> {
    let remaining = ctx.remaining();
    let mut request = client
        .post(&url)
        .timeout(remaining)
        .header(TASK_ID_HEADER, &ctx.task_id)
        .header(ATTEMPT_HEADER, ctx.attempt.to_string())
        .header(DEADLINE_HEADER, remaining.as_millis().to_string())
        .json(&json!({"input": input}));
    if let Some(key) = idempotency_key(&ctx.task_id) {
        request = request.header(IDEMPOTENCY_HEADER, key);
    }
    // Tells watchers the run was handed to the agent, once the agent has not answered
    // within INVOKED_AFTER: a fast call then costs no event write. Written on every call, this
    // unbatched Redis script was most of the remote path's cost (scripts/bench-remote, see
    // docs/performance.md: 0.34-0.42x the built-in echo's throughput with it, 0.53-0.60x
    // without). A fenced-out write means the run is over already, which the runtime sees.
    let send = request.send();
    tokio::pin!(send);
    let sent = tokio::select! {
        sent = &mut send => sent,
        () = tokio::time::sleep(INVOKED_AFTER) => {
            let _ = ctx
                .events
                .progress(json!({"agent": "invoked", "attempt": ctx.attempt}))
                .await;
            send.await
        }
    };
    let response = sent.map_err(unavailable)?;
    let status = response.status();
    if stream && status.is_success() {
        return super::stream::relay(response, max_bytes, &ctx).await;
    }
    let retry_after = retry_after(response.headers(), std::time::SystemTime::now());
    let body = read_bounded(response, max_bytes)
        .await
        .map_err(|err| match err {
            ReadError::TooLarge(limit) => HandlerError::new(
                "result_too_large",
                format!("the agent's answer exceeds {limit} bytes"),
            ),
            ReadError::Http(err) => unavailable(err),
        })?;
    let answer: Option<Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        // A proxy in front of the agent may answer HTML: the status still says what failed.
        return Err(failed(status, &answer.unwrap_or(Value::Null), retry_after));
    }
    let mut answer = answer.ok_or_else(|| {
        HandlerError::new(
            "agent_invalid_response",
            format!("the agent answered {status} with a body that is not JSON"),
        )
    })?;
    // Taken, not cloned: the output may be up to MAX_RESULT_BYTES.
    let mut output = HandlerOutput::new(
        answer
            .get_mut("output")
            .map(Value::take)
            .unwrap_or(Value::Null),
    );
    output.usage = answer
        .get("usage")
        .filter(|usage| !usage.is_null())
        .cloned();
    output.model = answer
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(output)
}

/// The agent's `{"error": {"code", "message"}}` as the task's error.
pub(super) fn agent_error(status: reqwest::StatusCode, answer: &Value) -> HandlerError {
    let error = &answer["error"];
    let code = error["code"]
        .as_str()
        .filter(|code| !code.trim().is_empty())
        .unwrap_or("agent_error");
    let message = error["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("the agent answered {status}"));
    let failed = HandlerError::new(code, message);
    match error.get("issues") {
        Some(issues) if !issues.is_null() => failed.with_details(issues.clone()),
        _ => failed,
    }
}

/// The most a `Retry-After` may hold a task back: an agent cannot park tasks for hours.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// A failed answer as the task's error. Answers that may pass, 429 (too many requests) and
/// 502, 503, 504 (the agent or a proxy in front of it is down or overloaded), ask for another
/// attempt, no sooner than their `Retry-After`; any other (a 4xx: the agent refused this input;
/// a 500: its handler failed) fails the task with the agent's code.
pub(super) fn failed(
    status: reqwest::StatusCode,
    answer: &Value,
    retry_after: Option<Duration>,
) -> HandlerError {
    let mut error = agent_error(status, answer);
    let passing = match status.as_u16() {
        429 => Some("agent_rate_limited"),
        502..=504 => Some("agent_unavailable"),
        _ => None,
    };
    let Some(code) = passing else {
        return error;
    };
    if answer["error"]["code"]
        .as_str()
        .is_none_or(|code| code.trim().is_empty())
    {
        error.code = code.to_owned();
    }
    match retry_after {
        Some(after) => error.retry_after(after),
        None => error.retryable(),
    }
}

/// An answer's `Retry-After` (seconds, or an HTTP date, read against `now`), at most
/// [`MAX_RETRY_AFTER`].
pub(super) fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let after = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(after.min(MAX_RETRY_AFTER))
}

/// A request that got no (whole) answer. Not reaching the agent (refused, reset, a connect
/// timeout) may pass: another attempt. The run deadline passing is the task's timeout.
pub(super) fn unavailable(err: reqwest::Error) -> HandlerError {
    if err.is_timeout() && !err.is_connect() {
        HandlerError::new(
            "task_timeout",
            "the agent did not answer before the run deadline",
        )
    } else {
        HandlerError::transient(
            "agent_unavailable",
            format!("cannot reach the agent: {err}"),
        )
    }
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the answer exceeds {0} bytes")]
    TooLarge(usize),
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// Reads a response body, giving up past `limit` bytes (whatever `Content-Length` says).
pub async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ReadError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(ReadError::TooLarge(limit));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_stable_and_within_the_profiles_bounds() {
        assert_eq!(
            idempotency_key("t1").as_deref(),
            Some("taskcluster-task-id:t1")
        );
        assert_eq!(idempotency_key("t1"), idempotency_key("t1"));
        assert_eq!(idempotency_key(&"x".repeat(300)), None);
    }

    #[test]
    fn the_agents_error_code_and_message_become_the_tasks() {
        let err = agent_error(
            reqwest::StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": {"code": "upstream_unavailable", "message": "later"}}),
        );
        assert_eq!(err, HandlerError::new("upstream_unavailable", "later"));
        let err = agent_error(reqwest::StatusCode::BAD_GATEWAY, &json!({}));
        assert_eq!(err.code, "agent_error");
    }

    #[test]
    fn passing_failures_ask_for_another_attempt_and_others_fail() {
        use reqwest::StatusCode;
        let none = json!(null);
        let busy = failed(StatusCode::SERVICE_UNAVAILABLE, &none, None);
        assert!(busy.is_retryable());
        assert_eq!(busy.code, "agent_unavailable");
        let limited = failed(
            StatusCode::TOO_MANY_REQUESTS,
            &none,
            Some(Duration::from_secs(7)),
        );
        assert_eq!(
            limited.retry.and_then(|retry| retry.after),
            Some(Duration::from_secs(7))
        );
        assert_eq!(limited.code, "agent_rate_limited");
        let coded = json!({"error": {"code": "model_overloaded", "message": "later"}});
        let coded = failed(StatusCode::BAD_GATEWAY, &coded, None);
        assert!(coded.is_retryable());
        assert_eq!(coded.code, "model_overloaded");
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::NOT_FOUND,
            StatusCode::INTERNAL_SERVER_ERROR,
        ] {
            assert!(!failed(status, &none, None).is_retryable(), "{status}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_within_a_bound() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static("x")),
            );
            retry_after(&headers, now)
        };
        assert_eq!(with("3"), Some(Duration::from_secs(3)));
        assert_eq!(with("86400"), Some(MAX_RETRY_AFTER));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(20));
        assert_eq!(with(&later), Some(Duration::from_secs(20)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(20));
        assert_eq!(with(&earlier), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
