//! The A2A operations over the task runtime, the same for both bindings: each takes the
//! caller and the request as the `a2a` crate types it, and returns a result or an
//! [`A2aError`]. Tasks are the runtime's tasks: created through the same admission (and, for a
//! priced skill, the same payment gate) as the Lucid profile's `POST /tasks`, owned by the
//! caller's bearer token, run by workers, recovered when a worker dies.
//!
//! One module per operation:
//!
//! - [`send`]: `SendMessage` and `SendStreamingMessage` (a new task, or the next turn of one
//!   waiting for input), through the payment gate;
//! - [`inband`]: the A2A x402 extension's payment in messages, for a client that activates it;
//! - [`message`]: what a message must be, and the input it carries for a skill;
//! - [`follow`]: a task as a stream of A2A events (`SubscribeToTask`, and a streamed send);
//! - [`push_config`]: the push notification config operations, and a send's inline config;
//! - [`narrate`]: what run events say in A2A to one listener (streams and push deliveries);
//! - [`list`], `ListTasks`;
//! - [`get_cancel`]: `GetTask` and `CancelTask`.
//!
//! Following a run is the core's [`crate::core::watch`]; the Lucid routes share it.

mod follow;
mod get_cancel;
mod inband;
mod list;
mod message;
pub mod narrate;
pub mod push_config;
mod send;

use std::time::Duration;

use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use futures::StreamExt;
use futures::stream::BoxStream;
use protocol::token::OwnerHash;
use store::StoredTask;

use super::error::A2aError;
use crate::core::pay::receipt::Receipt;
use crate::core::state::AppState;

pub use follow::subscribe;
pub use get_cancel::{cancel, get};
pub use list::list;
pub use message::{ANY_INPUT, INPUT_MODES, input_modes};
pub use send::{send, stream};

/// What skills answer with (the card's `defaultOutputModes`).
pub const OUTPUT_MODES: &[&str] = &["application/json", "text/plain"];

/// The longest id (task, context, message) a request may carry.
const MAX_ID_LEN: usize = 256;

/// Who is calling, and the request's headers and URI (the payment gate reads them).
pub struct Caller<'a> {
    pub state: &'a AppState,
    pub owner: OwnerHash,
    pub headers: &'a HeaderMap,
    pub uri: &'a Uri,
    /// The client address key of a request that may admit a task
    /// ([`crate::http::client_address::Source`]); `None` where no task is created.
    pub source: Option<String>,
}

/// Why a request gets no A2A answer: an A2A error, or the payment gate's own HTTP answer
/// (a `402` challenge, a `401` sign-in offer), sent as it is on either binding.
pub enum Refusal {
    A2a(A2aError),
    Http(Response),
}

impl From<A2aError> for Refusal {
    fn from(err: A2aError) -> Self {
        Refusal::A2a(err)
    }
}

/// An answer with the payment receipt it must carry, if it was paid for.
pub struct Reply<T> {
    pub value: T,
    pub receipt: Option<Receipt>,
}

/// `events` until the gateway shuts down or `--max-stream-ms` passes, whichever comes first:
/// then the stream ends cleanly (the SSE body closes), and a client that still wants the task
/// resubscribes or reads it with `GetTask`.
fn bounded<T: Send + 'static>(
    state: &AppState,
    events: BoxStream<'static, T>,
) -> BoxStream<'static, T> {
    let shutdown = state.shutdown.clone();
    let limit = Duration::from_millis(state.config.max_stream_ms);
    let end = async move {
        tokio::select! {
            () = shutdown.cancelled() => tracing::debug!("an A2A stream ends: the gateway shuts down"),
            () = tokio::time::sleep(limit) => tracing::debug!(limit_ms = limit.as_millis(), "an A2A stream ends: its maximum duration passed"),
        }
    };
    events.take_until(end).boxed()
}

/// `historyLength`: absent is everything, negative is invalid.
fn history_length(length: Option<i32>) -> Result<Option<usize>, A2aError> {
    match length {
        None => Ok(None),
        Some(length) => usize::try_from(length)
            .map(Some)
            .map_err(|_| A2aError::invalid_params("historyLength must not be negative")),
    }
}

fn check_id(name: &str, id: &str) -> Result<(), A2aError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(A2aError::invalid_params(format!(
            "{name} must have 1 to {MAX_ID_LEN} characters"
        )));
    }
    Ok(())
}

/// The caller's task `task_id`; another owner's task is not found, exactly like a missing one.
async fn read_owned(
    state: &AppState,
    owner: &OwnerHash,
    task_id: &str,
) -> Result<StoredTask, A2aError> {
    match state.store.get(task_id).await? {
        Some(stored) if &stored.owner == owner => Ok(stored),
        _ => Err(A2aError::task_not_found(task_id)),
    }
}
