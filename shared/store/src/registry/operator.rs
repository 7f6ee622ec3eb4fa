//! What operators set on the cluster beside the workers' entries: entrypoints paused
//! cluster-wide ([`Pause`]), workers asked to drain ([`Drain`]) and the audit log of their
//! actions ([`AuditEntry`]).
//!
//! A pause lives in the registry because everyone who reads the registry needs it: gateways
//! (admission and the cards) read it with their listing, which a pause or resume moves the
//! version of, and workers read it on their heartbeat. It survives restarts of both.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most audit entries kept: older ones are dropped as new ones come.
pub const AUDIT_KEPT: usize = 1000;

/// What a paused entrypoint does with new tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PauseMode {
    /// New tasks are accepted and wait in the queue until it is resumed.
    #[default]
    Queue,
    /// New tasks are refused (503 with Retry-After) until it is resumed.
    Refuse,
}

impl PauseMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseMode::Queue => "queue",
            PauseMode::Refuse => "refuse",
        }
    }
}

/// One entrypoint's pause: workers take none of its tasks while it stands (runs under way
/// finish; queued tasks wait).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    pub mode: PauseMode,
    /// Who paused it (the operator key's fingerprint).
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// An operator's request that one live worker drain: take no more tasks, finish the runs it
/// holds, deregister and exit, as on SIGTERM. Kept beside the registry entries rather than in
/// the worker's own entry: the worker rewrites its entry on every heartbeat and would
/// overwrite a request written there. It goes when the worker deregisters or its entry
/// expires, so it never outlives the worker it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    /// Who asked (the operator key's fingerprint).
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// One operator action, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Who acted (the operator key's fingerprint).
    pub actor: String,
    /// What was done (`pause`, `resume`, `drain`, `settlement.void`, ...).
    pub action: String,
    /// What it was done to (an entrypoint key, a worker id, a task id).
    pub target: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}
