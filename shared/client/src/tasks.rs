//! Owned tasks: `POST {base}/tasks`, `GET {base}/tasks`, `GET {base}/tasks/{id}`,
//! `POST {base}/tasks/{id}/cancel`, `GET {base}/tasks/{id}/subscribe`, and waiting for the end.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use payments::wire::HeaderError;
use reqwest::header::{ACCEPT, HeaderMap};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::card::{AgentCard, endpoint};
use super::error::{ClientError, CreationFailure, TaskCreationError};
use super::invoke::EventStream;
use super::pay::{Payer, PaymentHeader, SettleResponse, with_credential};
use super::{ACCESS_TOKEN_HEADER, Client, IDEMPOTENCY_KEY_HEADER};
use protocol::token::AccessToken;
use protocol::{Task, TaskEvent, TaskEventData, TaskEventKind, TaskStatus};

/// How often `wait_for_task` polls when it cannot subscribe.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// A fresh access token (64 hex characters from the OS's CSPRNG).
pub fn generate_token() -> String {
    AccessToken::generate().expose().to_owned()
}

#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    /// The owner token; generated when absent. Reuse one to list several tasks together.
    pub access_token: Option<String>,
    /// `Idempotency-Key` (a payment provider's deduplication key); generated when absent.
    pub idempotency_key: Option<String>,
    pub context_id: Option<String>,
    pub metadata: Option<Value>,
    /// Pays a 402 (x402) and sends the request once more with the credential, with the same
    /// token and idempotency key; without one a 402 fails the creation. See [`super::pay`].
    pub payer: Option<Arc<dyn Payer>>,
}

/// Payment evidence copied from the creation response's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settlement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_receipt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_response: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_payment_response: Option<String>,
}

impl Settlement {
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let get = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        Settlement {
            payment_receipt: get("payment-receipt"),
            payment_response: get("payment-response"),
            x_payment_response: get("x-payment-response"),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.payment_receipt.is_none()
            && self.payment_response.is_none()
            && self.x_payment_response.is_none()
    }

    /// The x402 settlement receipt (`PAYMENT-RESPONSE`, else `X-PAYMENT-RESPONSE`), decoded;
    /// `None` when neither header came. `success: false` is a settlement that failed.
    pub fn receipt(&self) -> Option<Result<SettleResponse, HeaderError>> {
        self.payment_response
            .as_deref()
            .or(self.x_payment_response.as_deref())
            .map(payments::wire::decode::<SettleResponse>)
    }
}

/// The capability `send_message` returns. Keep `access_token` secret: `Debug` redacts it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAccess {
    pub task_id: String,
    pub access_token: String,
    pub status: TaskStatus,
    pub idempotency_key: String,
    #[serde(default, skip_serializing_if = "Settlement::is_empty")]
    pub settlement: Settlement,
}

impl TaskAccess {
    pub fn access_token(&self) -> &str {
        &self.access_token
    }
}

impl fmt::Debug for TaskAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskAccess")
            .field("task_id", &self.task_id)
            .field("access_token", &"<redacted>")
            .field("status", &self.status)
            .field("idempotency_key", &self.idempotency_key)
            .field("settlement", &self.settlement)
            .finish()
    }
}

/// `GET /tasks` filters.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub context_id: Option<String>,
    /// Any of these statuses (empty: all).
    pub status: Vec<TaskStatus>,
    /// 0..=1000, the server's default 50.
    pub limit: Option<usize>,
    pub offset: Option<usize>,
}

/// `{tasks, total?, hasMore?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskList {
    pub tasks: Vec<Task>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
}

/// The `POST /tasks` success body, read leniently so a partial one still tells what it can.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Created {
    task_id: Option<String>,
    access_token: Option<String>,
    status: Option<TaskStatus>,
}

/// A task's events: `statusUpdate`, `resultUpdate`, `error`.
#[derive(Debug)]
pub struct TaskEventStream {
    events: EventStream,
}

impl TaskEventStream {
    /// The next task event; `None` once the server closed the stream (after a terminal
    /// event, or its safety timeout). Events of other names are skipped.
    pub async fn next(&mut self) -> Result<Option<TaskEvent>, ClientError> {
        while let Some(event) = self.events.next_sse().await? {
            let Some(kind) = TaskEventKind::parse(&event.event) else {
                continue;
            };
            let data: TaskEventData =
                serde_json::from_str(&event.data).map_err(|err| ClientError::Malformed {
                    status: 200,
                    reason: format!("{} event: {err}", event.event),
                    body: event.data.clone(),
                })?;
            return Ok(Some(TaskEvent { kind, data }));
        }
        Ok(None)
    }
}

impl Client {
    /// Creates a task running skill `skill_id` on `input` (a string is sent as the message
    /// text, anything else as its JSON). Always sends an access token and an
    /// `Idempotency-Key`, generated when `options` has none, and returns both.
    pub async fn send_message(
        &self,
        card: &AgentCard,
        skill_id: &str,
        input: &Value,
        options: SendOptions,
    ) -> Result<TaskAccess, TaskCreationError> {
        let access_token = options.access_token.unwrap_or_else(generate_token);
        let idempotency_key = options
            .idempotency_key
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let fail = |failure, cause| TaskCreationError {
            access_token: access_token.clone(),
            idempotency_key: idempotency_key.clone(),
            failure,
            cause,
            response_status: None,
            body: None,
            task_id: None,
            task_status: None,
            settlement: Settlement::default(),
        };
        let base = self
            .base_url(card)
            .map_err(|cause| fail(CreationFailure::NotSent, cause))?;
        let text = match input {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let mut body = json!({
            "skillId": skill_id,
            "message": {"role": "user", "content": {"text": text}},
        });
        if let Some(context_id) = options.context_id {
            body["contextId"] = Value::String(context_id);
        }
        if let Some(metadata) = options.metadata {
            body["metadata"] = metadata;
        }
        let url = endpoint(&base, &["tasks"]);
        let request = |credential: Option<&PaymentHeader>| {
            let request = self
                .http
                .post(url.clone())
                .header(ACCESS_TOKEN_HEADER, access_token.as_str())
                .header(IDEMPOTENCY_KEY_HEADER, idempotency_key.as_str())
                .json(&body)
                .timeout(self.options.request_timeout);
            with_credential(request, credential)
        };
        let response = match self
            .send_paying(&url, request, options.payer.as_deref())
            .await
        {
            Ok(response) => response,
            Err(unanswered) => {
                // No body: nothing was answered, or the answer was lost in transit (the task
                // may exist). A 402 read whole created nothing.
                let failure = if unanswered.body.is_some() {
                    CreationFailure::Status
                } else {
                    CreationFailure::Network
                };
                let created: Option<Created> = unanswered
                    .body
                    .as_deref()
                    .and_then(|body| serde_json::from_str(body).ok());
                return Err(TaskCreationError {
                    response_status: unanswered.status,
                    task_id: created.as_ref().and_then(|c| c.task_id.clone()),
                    task_status: created.as_ref().and_then(|c| c.status),
                    body: unanswered.body,
                    settlement: unanswered.settlement,
                    ..fail(failure, unanswered.error)
                });
            }
        };
        let status = response.status();
        let settlement = Settlement::from_headers(response.headers());
        let text = match super::read_limited(response, self.options.max_response_bytes).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(cause) => {
                return Err(TaskCreationError {
                    response_status: Some(status.as_u16()),
                    settlement,
                    ..fail(CreationFailure::Network, cause)
                });
            }
        };
        let created: Option<Created> = serde_json::from_str(&text).ok();
        let task_id = created.as_ref().and_then(|c| c.task_id.clone());
        let task_status = created.as_ref().and_then(|c| c.status);
        let error = |failure, cause| TaskCreationError {
            response_status: Some(status.as_u16()),
            body: Some(text.clone()),
            task_id: task_id.clone(),
            task_status,
            settlement: settlement.clone(),
            ..fail(failure, cause)
        };
        if !status.is_success() {
            return Err(error(
                CreationFailure::Status,
                ClientError::remote(status.as_u16(), text.clone()),
            ));
        }
        match (&task_id, task_status) {
            (Some(task_id), Some(task_status)) => Ok(TaskAccess {
                task_id: task_id.clone(),
                access_token: created
                    .and_then(|c| c.access_token)
                    .filter(|token| !token.is_empty())
                    .unwrap_or_else(|| access_token.clone()),
                status: task_status,
                idempotency_key: idempotency_key.clone(),
                settlement,
            }),
            _ => Err(error(
                CreationFailure::Malformed,
                ClientError::Malformed {
                    status: status.as_u16(),
                    reason: "expected {taskId, accessToken, status}".into(),
                    body: text.clone(),
                },
            )),
        }
    }

    pub async fn get_task(
        &self,
        card: &AgentCard,
        task_id: &str,
        access_token: &str,
    ) -> Result<Task, ClientError> {
        let url = endpoint(&self.base_url(card)?, &["tasks", task_id]);
        let response = self
            .http
            .get(url)
            .header(ACCESS_TOKEN_HEADER, access_token)
            .timeout(self.options.request_timeout)
            .send()
            .await
            .map_err(ClientError::network)?;
        self.json(response).await
    }

    pub async fn list_tasks(
        &self,
        card: &AgentCard,
        access_token: &str,
        filter: &ListFilter,
    ) -> Result<TaskList, ClientError> {
        let mut url = endpoint(&self.base_url(card)?, &["tasks"]);
        {
            let mut query = url.query_pairs_mut();
            if let Some(context_id) = &filter.context_id {
                query.append_pair("contextId", context_id);
            }
            if !filter.status.is_empty() {
                let statuses: Vec<&str> = filter.status.iter().map(|s| s.as_str()).collect();
                query.append_pair("status", &statuses.join(","));
            }
            if let Some(limit) = filter.limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(offset) = filter.offset {
                query.append_pair("offset", &offset.to_string());
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let response = self
            .http
            .get(url)
            .header(ACCESS_TOKEN_HEADER, access_token)
            .timeout(self.options.request_timeout)
            .send()
            .await
            .map_err(ClientError::network)?;
        self.json(response).await
    }

    /// Cancels a running task; returns it, now `cancelled`. A task already finished answers
    /// `400 invalid_state` ([`ClientError::Remote`]).
    pub async fn cancel_task(
        &self,
        card: &AgentCard,
        task_id: &str,
        access_token: &str,
    ) -> Result<Task, ClientError> {
        let url = endpoint(&self.base_url(card)?, &["tasks", task_id, "cancel"]);
        let response = self
            .http
            .post(url)
            .header(ACCESS_TOKEN_HEADER, access_token)
            .timeout(self.options.request_timeout)
            .send()
            .await
            .map_err(ClientError::network)?;
        self.json(response).await
    }

    /// The task's events: a snapshot first, then live updates until a terminal one.
    pub async fn subscribe_task(
        &self,
        card: &AgentCard,
        task_id: &str,
        access_token: &str,
    ) -> Result<TaskEventStream, ClientError> {
        let url = endpoint(&self.base_url(card)?, &["tasks", task_id, "subscribe"]);
        let response = self
            .http
            .get(url)
            .header(ACCESS_TOKEN_HEADER, access_token)
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(ClientError::network)?;
        let events = self
            .event_stream(response, self.options.stream_idle_timeout)
            .await?;
        Ok(TaskEventStream { events })
    }

    /// Waits until the task is `completed`, `failed` or `cancelled` and returns it. Follows
    /// the subscription first; if that cannot be had or breaks off, polls every 100 ms.
    /// Fails with [`ClientError::Timeout`] after `timeout`; an answer such as
    /// `task_not_found` is returned at once.
    pub async fn wait_for_task(
        &self,
        card: &AgentCard,
        task_id: &str,
        access_token: &str,
        timeout: Duration,
    ) -> Result<Task, ClientError> {
        let deadline = Instant::now() + timeout;
        let timed_out = || {
            ClientError::Timeout(format!(
                "task {task_id} did not finish within {}ms",
                timeout.as_millis()
            ))
        };
        let followed = tokio::time::timeout_at(deadline, self.follow(card, task_id, access_token))
            .await
            .map_err(|_| timed_out())?;
        // The agent answered: no point polling (task_not_found, a bad token...).
        if let Err(
            err @ ClientError::Remote {
                status: 400..=499, ..
            },
        ) = followed
        {
            return Err(err);
        }
        loop {
            let task =
                tokio::time::timeout_at(deadline, self.get_task(card, task_id, access_token))
                    .await
                    .map_err(|_| timed_out())?;
            match task {
                Ok(task) if task.status.is_terminal() => return Ok(task),
                Ok(_) => {}
                Err(
                    err @ ClientError::Remote {
                        status: 400..=499, ..
                    },
                ) => return Err(err),
                // A network hiccup or an unavailable store: try again until the deadline.
                Err(_) => {}
            }
            if Instant::now() + POLL_INTERVAL >= deadline {
                return Err(timed_out());
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Reads the subscription until a terminal event: `Ok(true)` then, `Ok(false)` if the
    /// stream ended without one.
    async fn follow(
        &self,
        card: &AgentCard,
        task_id: &str,
        access_token: &str,
    ) -> Result<bool, ClientError> {
        let mut events = self.subscribe_task(card, task_id, access_token).await?;
        while let Some(event) = events.next().await? {
            if event.data.status.is_some_and(TaskStatus::is_terminal) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
