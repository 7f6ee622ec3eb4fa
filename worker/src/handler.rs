//! The handler API: what an entrypoint's code receives and returns.
//!
//! A handler gets the task's input and a [`TaskContext`] (task id, attempt, deadline,
//! cancellation, a fenced [`Emitter`]) and returns a [`HandlerOutput`] or a [`HandlerError`]
//! with a code. Most entrypoints are plain async functions over typed input and output, see
//! [`crate::entrypoint::Entrypoint::typed`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::emitter::Emitter;

/// What a successful run returns: the task's `result`, or a request for more input.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerOutput {
    pub output: Value,
    pub usage: Option<Value>,
    pub model: Option<String>,
    /// The run ends without finishing the task: `output` is what it asks its caller for
    /// (A2A's `input-required`). The task waits, holding no worker, until the caller answers
    /// (the task is resumed with the answer as its input) or cancels it.
    pub awaits_input: bool,
}

impl HandlerOutput {
    pub fn new(output: Value) -> Self {
        HandlerOutput {
            output,
            usage: None,
            model: None,
            awaits_input: false,
        }
    }

    /// Reports what the run used, in decimal USDC (`usage.charge`, e.g. `"0.0025"`): an
    /// entrypoint priced `upto:MAX` settles for it, at most MAX (and for MAX when a run
    /// reports nothing). Other `usage` members are kept.
    pub fn with_charge(mut self, amount: impl Into<String>) -> Self {
        let mut usage = match self.usage.take() {
            Some(Value::Object(usage)) => usage,
            _ => serde_json::Map::new(),
        };
        usage.insert("charge".into(), Value::String(amount.into()));
        self.usage = Some(Value::Object(usage));
        self
    }

    /// Ends the run asking the caller for more input with `request` (for A2A callers, an
    /// agent message `{"parts": [...]}`).
    pub fn input_required(request: Value) -> Self {
        HandlerOutput {
            awaits_input: true,
            ..HandlerOutput::new(request)
        }
    }
}

impl From<Value> for HandlerOutput {
    fn from(output: Value) -> Self {
        HandlerOutput::new(output)
    }
}

/// A failed run: becomes the task's `error` (`{code, message, details?}`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct HandlerError {
    pub code: String,
    pub message: String,
    pub details: Option<Value>,
    /// The failure may pass (an upstream answering 429 or 503, a reset connection): the task
    /// gets another attempt after a backoff, within its entrypoint's retry policy
    /// (`--retry KEY=N`), instead of failing now. After the last attempt it fails with this
    /// code.
    pub retry: Option<Retry>,
}

/// A retryable failure's wish about when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retry {
    /// The earliest the next attempt should start (an upstream's `Retry-After`); the backoff
    /// waits at least this long. `None`: the policy's exponential backoff with jitter alone.
    pub after: Option<Duration>,
}

impl HandlerError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        HandlerError {
            code: code.into(),
            message: message.into(),
            details: None,
            retry: None,
        }
    }

    /// A failure that may pass: the task is tried again after a backoff (see
    /// [`HandlerError::retry`]).
    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> Self {
        HandlerError::new(code, message).retryable()
    }

    /// Marks this failure retryable.
    pub fn retryable(mut self) -> Self {
        self.retry.get_or_insert_with(Retry::default);
        self
    }

    /// Marks this failure retryable no sooner than `after` (an upstream's `Retry-After`).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry = Some(Retry { after: Some(after) });
        self
    }

    /// Whether the task may get another attempt for this failure.
    pub fn is_retryable(&self) -> bool {
        self.retry.is_some()
    }

    /// The input did not match the entrypoint's schema or type.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        HandlerError::new("invalid_input", message)
    }

    /// The run was cancelled (the handler saw [`TaskContext::cancelled`]).
    pub fn cancelled() -> Self {
        HandlerError::new("cancelled", "Task was cancelled")
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// Everything a handler may know about the run it is doing.
#[derive(Clone)]
pub struct TaskContext {
    pub task_id: String,
    /// 1 for the first run; higher after the task was recovered from a lost worker or retried
    /// after a retryable failure.
    pub attempt: u32,
    pub max_attempts: u32,
    /// The failure that ended the previous attempt, when it asked for a retry
    /// ([`HandlerError::transient`]); `None` on a first attempt or after a lost worker.
    pub last_error: Option<protocol::TaskError>,
    /// When the run deadline (`maxRunMs`) passes; the runtime aborts the handler then.
    pub deadline: tokio::time::Instant,
    pub context_id: Option<String>,
    pub metadata: Option<Value>,
    /// Cancelled when the task is cancelled, its lease is lost, its deadline passes or the
    /// worker stops hard. Long handlers should watch it; the runtime stops waiting for them
    /// either way.
    pub cancel: CancellationToken,
    /// Fenced writer of progress and stream events.
    pub events: Emitter,
}

impl TaskContext {
    /// Time left before the run deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Resolves when the run should stop.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }
}

pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<HandlerOutput, HandlerError>> + Send>>;

/// An entrypoint's code. Implemented for closures `Fn(Value, TaskContext) -> Future`.
pub trait Handler: Send + Sync + 'static {
    fn call(&self, input: Value, ctx: TaskContext) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(Value, TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HandlerOutput, HandlerError>> + Send + 'static,
{
    fn call(&self, input: Value, ctx: TaskContext) -> HandlerFuture {
        Box::pin(self(input, ctx))
    }
}
