//! What every module of the suite uses: the [`Cluster`] fixture (`cluster`), the suite's
//! expectations about refusals (`replies`) and about a stream's shape (`sse`); the A2A client
//! of both bindings, its replies and streams, from the harness ([`harness::a2a`]); and here the
//! tokens and the requests the tests send.

mod cluster;
mod replies;
mod sse;

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

pub use cluster::{Cluster, worker};
pub use harness::a2a::{
    A2a, BINDINGS, Binding, CONTENT_TYPE_NOT_SUPPORTED, EXTENDED_CARD_NOT_CONFIGURED,
    INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, PUSH_NOT_SUPPORTED,
    TASK_NOT_CANCELABLE, TASK_NOT_FOUND, UNSUPPORTED_OPERATION, VERSION_NOT_SUPPORTED, ensure,
    error_info, event_state, kind, ok, reason_of, rest_reply, skill_ids, state, wait_for_state,
};
/// Bound on any one wait, and between two looks at a condition being polled for.
pub use harness::cluster::{PATIENCE, POLL};
pub use replies::{expect_error, expect_unauthenticated};
pub use sse::{artifact_updates, check_stream};

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

/// The text of a task's status message.
pub fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}
