//! An A2A v1.0 client for the suites, on both HTTP bindings: JSON-RPC (`POST /a2a/jsonrpc`)
//! and HTTP+JSON (`/a2a/v1`).
//!
//! - [`A2a`] (`client`): requests with the caller's `A2A-Version` and credentials, answered
//!   as a [`Reply`]; raw exchanges for tests that compare whole answers; polling a task's
//!   state ([`wait_for_state`]);
//! - `replies`: a result or the A2A error of either binding ([`Failure`]: the JSON-RPC
//!   `error` or the AIP-193 body), each error's `google.rpc.ErrorInfo` checked, and the spec's
//!   error codes with their reasons;
//! - `sse`: an event stream read as A2A `StreamResponse`s ([`Sse`]), whichever binding opened
//!   it.
//!
//! What a suite asserts about these answers (a stream's shape, the refusal a test expects)
//! stays with the suite.

mod client;
mod replies;
mod sse;

use serde_json::Value;

use crate::TestResult;

pub use client::{A2a, wait_for_state};
pub use replies::{
    CONTENT_TYPE_NOT_SUPPORTED, EXTENDED_CARD_NOT_CONFIGURED, Failure, INVALID_PARAMS,
    INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, PUSH_NOT_SUPPORTED, Reply, TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND, UNSUPPORTED_OPERATION, VERSION_NOT_SUPPORTED, challenge_of, error_info, ok,
    reason_of, rest_reply, rpc_reply,
};
pub use sse::{Sse, event_state, kind};

/// The two official HTTP bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    JsonRpc,
    Rest,
}

/// Both bindings, for tests that exercise an operation on each.
pub const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::Rest];

impl Binding {
    /// A short name for ids and messages: `rpc` or `rest`.
    pub fn tag(self) -> &'static str {
        match self {
            Binding::JsonRpc => "rpc",
            Binding::Rest => "rest",
        }
    }
}

/// An HTTP client for A2A calls. Generous: an SSE response counts as one request until its
/// stream ends, so the bound is twice the [`PATIENCE`](crate::cluster::PATIENCE) of one wait.
pub fn http() -> TestResult<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(crate::cluster::PATIENCE * 2)
        .build()?)
}

/// `Ok` when `condition` holds, else the error `what` describes.
pub fn ensure(condition: bool, what: impl FnOnce() -> String) -> TestResult {
    if condition {
        Ok(())
    } else {
        Err(what().into())
    }
}

/// The state of a task (`TASK_STATE_...`; empty when it has none).
pub fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The ids of an A2A or Lucid card's skills.
pub fn skill_ids(card: &Value) -> Vec<String> {
    card["skills"]
        .as_array()
        .map(|skills| {
            skills
                .iter()
                .filter_map(|skill| skill["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
