//! What every module of the suite uses: the [`Cluster`] fixture (`cluster`), the [`A2a`]
//! client of both bindings (`client`), reading replies and errors (`replies`), reading event
//! streams (`sse`); and here the bounds on waiting, the tokens, [`Binding`]s and the requests
//! the tests send.

mod client;
mod cluster;
mod replies;
mod sse;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use harness::TestResult;
use serde_json::{Value, json};

pub use client::{A2a, wait_for_state};
pub use cluster::{Cluster, skill_ids, worker};
pub use replies::{
    CONTENT_TYPE_NOT_SUPPORTED, EXTENDED_CARD_NOT_CONFIGURED, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, PARSE_ERROR, PUSH_NOT_SUPPORTED, TASK_NOT_CANCELABLE, TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION, VERSION_NOT_SUPPORTED, error_info, expect_error, expect_unauthenticated,
    ok, reason_of, rest_reply,
};
pub use sse::{artifact_updates, check_stream, event_state, kind};

/// Bound on any one wait; reached only when a test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// Between two looks at a condition being polled for.
pub const POLL: Duration = Duration::from_millis(25);
/// Bearer tokens (20 to 256 characters): each one owns the tasks created with it.
pub const TOKEN_A: &str = "a2a-suite-token-alpha-0123456789";
pub const TOKEN_B: &str = "a2a-suite-token-bravo-0123456789";

/// An id no other message, context or task of this test process has.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `Ok` when `condition` holds, else the error `what` describes.
pub fn ensure(condition: bool, what: impl FnOnce() -> String) -> TestResult {
    if condition {
        Ok(())
    } else {
        Err(what().into())
    }
}

/// The two official bindings under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    JsonRpc,
    Rest,
}

pub const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::Rest];

impl Binding {
    pub fn tag(self) -> &'static str {
        match self {
            Binding::JsonRpc => "rpc",
            Binding::Rest => "rest",
        }
    }
}

/// A user message.
pub fn message(message_id: &str, parts: Value) -> Value {
    json!({"messageId": message_id, "role": "ROLE_USER", "parts": parts})
}

/// A `SendMessageRequest` for `message`.
pub fn send_request(message: Value) -> Value {
    json!({"message": message})
}

/// A request to the TCK agent for the behaviour of `prefix` (the messageId's prefix).
pub fn tck(prefix: &str) -> Value {
    send_request(message(&unique(prefix), json!([{"text": "hi"}])))
}

/// A request for `skill` with one part.
pub fn for_skill(skill: &str, part: Value) -> Value {
    let mut request = send_request(message(&unique(skill), json!([part])));
    request["message"]["metadata"] = json!({"skillId": skill});
    request
}

/// A request that returns at once with a `sleep` task of a minute (to cancel).
pub fn sleeping(binding: Binding) -> Value {
    // One binding sends the input as a data part, the other as JSON text.
    let part = match binding {
        Binding::JsonRpc => json!({"data": {"ms": 60_000}}),
        Binding::Rest => json!({"text": "{\"ms\": 60000}"}),
    };
    let mut request = for_skill("sleep", part);
    request["configuration"] = json!({"returnImmediately": true});
    request
}

/// The state of a task.
pub fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The text of a task's status message.
pub fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}
