//! The client's errors: [`ClientError`] for every operation, [`TaskCreationError`] for
//! `send_message`, which also carries the keys the caller needs to reconcile.

use std::fmt;

use serde_json::Value;

use payments::{PayError, Terms};

use super::pay::describe_terms;
use super::tasks::Settlement;
use protocol::TaskStatus;

/// What went wrong talking to an agent. Never contains an access token.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A URL that does not parse, or cannot be a base URL.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// A URL refused by policy: not http/https, or an origin outside the allowlist.
    #[error("refused URL {url:?}: {reason}")]
    RefusedUrl { url: String, reason: String },
    /// Every card location answered 404.
    #[error("no agent card found at {url}")]
    CardNotFound { url: String },
    /// A card that is not a JSON object with a usable service URL.
    #[error("invalid agent card from {url}: {reason}")]
    InvalidCard { url: String, reason: String },
    /// A card whose signature is missing (when required), unknown or wrong.
    #[error("card signature refused: {0}")]
    Signature(#[from] crate::trust::SignatureError),
    /// A response body over the configured size limit.
    #[error("response from {url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// Connecting, sending or reading failed (including per-request timeouts).
    #[error("network error: {0}")]
    Network(#[source] reqwest::Error),
    /// The operation did not finish in time (`wait_for_task`, idle streams).
    #[error("timed out: {0}")]
    Timeout(String),
    /// A non-2xx answer, with the profile's error code and message when the body had them.
    #[error("{}", remote_message(*status, code.as_deref(), message.as_deref()))]
    Remote {
        status: u16,
        code: Option<String>,
        message: Option<String>,
        body: String,
    },
    /// A final 402 from a priced call: no payer was set (`paid: false`), or the credential
    /// sent was refused (`paid: true`). `terms` is the price the challenge asks, when it is one
    /// this client reads; `reason` the challenge's `error` (or the profile error's message);
    /// `code` the profile error code (`settlement_failed`) when the body is one.
    #[error("{}", payment_message(*paid, terms.as_deref(), code.as_deref(), reason.as_deref()))]
    PaymentRequired {
        paid: bool,
        terms: Option<Box<Terms>>,
        reason: Option<String>,
        code: Option<String>,
        body: String,
    },
    /// The payer would not answer a 402 (a price over the spend cap, no offer it can pay, an
    /// unreadable challenge): no credential was built and nothing more was sent.
    #[error("cannot pay: {0}")]
    Payment(#[source] PayError),
    /// A 2xx answer whose body is not what the profile says.
    #[error("malformed response (status {status}): {reason}")]
    Malformed {
        status: u16,
        reason: String,
        body: String,
    },
}

fn remote_message(status: u16, code: Option<&str>, message: Option<&str>) -> String {
    match (code, message) {
        (Some(code), Some(message)) => format!("HTTP {status} {code}: {message}"),
        (Some(code), None) => format!("HTTP {status} {code}"),
        (None, Some(message)) => format!("HTTP {status}: {message}"),
        (None, None) => format!("HTTP {status}"),
    }
}

fn payment_message(
    paid: bool,
    terms: Option<&Terms>,
    code: Option<&str>,
    reason: Option<&str>,
) -> String {
    let mut message = if paid {
        "HTTP 402: the payment was refused".to_owned()
    } else {
        "HTTP 402: payment required".to_owned()
    };
    if let Some(code) = code {
        message.push_str(&format!(" ({code})"));
    }
    if let Some(terms) = terms {
        message.push_str(&format!(": {}", describe_terms(terms)));
    }
    if let Some(reason) = reason {
        message.push_str(&format!("; {reason}"));
    }
    message
}

impl ClientError {
    /// A network-level failure (the request may or may not have reached the agent), as
    /// opposed to an answer the agent gave.
    pub fn is_network(&self) -> bool {
        matches!(self, ClientError::Network(_) | ClientError::Timeout(_))
    }

    /// The HTTP status of a remote or malformed answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Remote { status, .. } | ClientError::Malformed { status, .. } => {
                Some(*status)
            }
            ClientError::PaymentRequired { .. } => Some(402),
            _ => None,
        }
    }

    /// The profile error code of a remote answer (`task_not_found`, ...).
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Remote { code, .. } | ClientError::PaymentRequired { code, .. } => {
                code.as_deref()
            }
            _ => None,
        }
    }

    /// A non-2xx answer: its code and message read from `{"error":{"code","message"}}`.
    pub(crate) fn remote(status: u16, body: String) -> Self {
        let parsed: Option<Value> = serde_json::from_str(&body).ok();
        let error = parsed.as_ref().and_then(|value| value.get("error"));
        let code = error
            .and_then(|error| error.get("code"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let message = error
            .and_then(|error| error.get("message"))
            .and_then(Value::as_str)
            .or_else(|| parsed.as_ref()?.get("detail")?.as_str())
            .map(str::to_owned)
            .or_else(|| {
                error
                    .and_then(|error| error.get("issues"))
                    .and_then(issues_message)
            });
        ClientError::Remote {
            status,
            code,
            message,
            body,
        }
    }

    pub(crate) fn network(error: reqwest::Error) -> Self {
        ClientError::Network(error.without_url_query())
    }
}

/// The first issues of an `invalid_input` answer (`[{"path": [...], "message": "..."}]`) as
/// one line, `ms: 100000 is greater than the maximum of 60000`: a 400 says what was wrong.
/// Bounded (the body comes from the agent): five issues, 200 characters each.
fn issues_message(issues: &Value) -> Option<String> {
    const MAX_ISSUES: usize = 5;
    const MAX_CHARS: usize = 200;
    let list = issues.as_array()?;
    let mut parts: Vec<String> = list
        .iter()
        .take(MAX_ISSUES)
        .filter_map(|issue| {
            let message = issue.get("message")?.as_str()?;
            let path = issue
                .get("path")
                .and_then(Value::as_array)
                .map(|path| {
                    path.iter()
                        .map(|part| match part {
                            Value::String(text) => text.clone(),
                            other => other.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join(".")
                })
                .unwrap_or_default();
            let line = if path.is_empty() {
                message.to_owned()
            } else {
                format!("{path}: {message}")
            };
            Some(line.chars().take(MAX_CHARS).collect())
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    if list.len() > MAX_ISSUES {
        parts.push(format!("and {} more", list.len() - MAX_ISSUES));
    }
    Some(parts.join("; "))
}

/// Strips the query of a URL kept in an error: nothing secret is sent there, but callers'
/// own query parameters stay out of messages too.
trait WithoutQuery {
    fn without_url_query(self) -> Self;
}

impl WithoutQuery for reqwest::Error {
    fn without_url_query(mut self) -> Self {
        if let Some(url) = self.url_mut() {
            url.set_query(None);
        }
        self
    }
}

/// Why [`TaskCreationError`] happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreationFailure {
    /// Nothing was sent: the card's service URL is missing or refused by the policy.
    NotSent,
    /// The request or its response was lost: the task may exist.
    Network,
    /// A 2xx answer that did not parse as `{taskId, accessToken, status}`.
    Malformed,
    /// A non-2xx answer.
    Status,
}

/// `send_message` failed. Carries both keys the request was sent with, so the caller can
/// reconcile (`list_tasks` with the same token) before retrying with the same idempotency key,
/// and whatever the response told: status, body, task id and status, payment evidence.
///
/// `Debug` and `Display` never show the access token; read it with
/// [`TaskCreationError::access_token`].
#[derive(thiserror::Error)]
#[error("task creation failed: {cause}")]
pub struct TaskCreationError {
    pub(crate) access_token: String,
    pub idempotency_key: String,
    pub failure: CreationFailure,
    #[source]
    pub cause: ClientError,
    pub response_status: Option<u16>,
    pub body: Option<String>,
    pub task_id: Option<String>,
    pub task_status: Option<TaskStatus>,
    pub settlement: Settlement,
}

impl TaskCreationError {
    /// The access token the request carried (the caller's, or the one generated for it).
    pub fn access_token(&self) -> &str {
        &self.access_token
    }
}

impl fmt::Debug for TaskCreationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCreationError")
            .field("access_token", &"<redacted>")
            .field("idempotency_key", &self.idempotency_key)
            .field("failure", &self.failure)
            .field("cause", &format_args!("{}", self.cause))
            .field("response_status", &self.response_status)
            .field(
                "body",
                &self
                    .body
                    .as_ref()
                    .map(|body| body.replace(&self.access_token, "<redacted>")),
            )
            .field("task_id", &self.task_id)
            .field("task_status", &self.task_status)
            .field("settlement", &self.settlement)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::ClientError;

    #[test]
    fn an_invalid_input_answer_says_what_was_wrong() {
        let body = r#"{"error":{"code":"invalid_input","issues":[{"code":"custom","path":["ms"],"message":"100000 is greater than the maximum of 60000"},{"path":[],"message":"extra"}]}}"#;
        let error = ClientError::remote(400, body.to_owned());
        assert_eq!(
            error.to_string(),
            "HTTP 400 invalid_input: ms: 100000 is greater than the maximum of 60000; extra"
        );
        let many = format!(
            r#"{{"error":{{"code":"invalid_input","issues":[{}]}}}}"#,
            [r#"{"path":["a"],"message":"bad"}"#; 7].join(",")
        );
        assert!(
            ClientError::remote(400, many)
                .to_string()
                .ends_with("a: bad; and 2 more")
        );
        // A message, when the body has one, wins; a body without either says the code only.
        let plain = r#"{"error":{"code":"task_not_found","message":"no such task"}}"#;
        assert_eq!(
            ClientError::remote(404, plain.to_owned()).to_string(),
            "HTTP 404 task_not_found: no such task"
        );
    }
}
