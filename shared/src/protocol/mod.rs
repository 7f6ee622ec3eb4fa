//! Wire types of the Lucid HTTP profile. Field names, casing and field order follow
//! `reference/lucid-profile-wire.md`: upstream clients parse these byte for byte.

mod error_code;
mod events;
mod message;
mod task;
mod timestamp;

pub use error_code::{ErrorBody, ErrorCode, ErrorEnvelope};
pub use events::{TaskEvent, TaskEventData, TaskEventKind};
pub use message::{MessageContent, MessagePart, MessageRole, SendMessageRequest, TaskMessage};
pub use task::{Task, TaskError, TaskResult, TaskStatus, UnknownStatus};
pub use timestamp::Timestamp;
