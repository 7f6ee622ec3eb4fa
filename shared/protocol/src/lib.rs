//! Wire types of the Lucid HTTP profile, and the rules every process applies to what crosses
//! it. Plain data with serde; no I/O, so the client, the store and the binaries share it.
//!
//! - the task and its parts: [`Task`], [`TaskStatus`], [`TaskResult`], [`TaskError`], the
//!   `POST /tasks` request ([`SendMessageRequest`]) and its messages, RFC 3339 [`Timestamp`]s;
//! - [`TaskEvent`]: the events of a task's log, as its SSE stream carries them;
//! - [`ErrorCode`] and the error envelope every non-2xx answer carries;
//! - [`token`]: access-token rules and the owner hash, all a store ever keeps of a token;
//! - [`limits`]: the byte bounds of a task's input and result.
//!
//! Field names, casing and field order follow `reference/lucid-profile-wire.md`: upstream
//! clients parse these byte for byte.

pub mod limits;
pub mod token;
pub mod worker_id;

mod error_code;
mod events;
mod message;
mod task;
mod timestamp;

pub use error_code::{ErrorBody, ErrorCode, ErrorEnvelope, UnknownErrorCode};
pub use events::{TaskEvent, TaskEventData, TaskEventKind};
pub use message::{MessageContent, MessagePart, MessageRole, SendMessageRequest, TaskMessage};
pub use task::{Task, TaskError, TaskResult, TaskStatus, UnknownStatus};
pub use timestamp::Timestamp;
