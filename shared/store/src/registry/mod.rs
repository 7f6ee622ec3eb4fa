//! The live worker registry: each worker publishes what it hosts under a short TTL and
//! refreshes it by heartbeat, so a dead worker disappears by itself. The gateway builds the
//! Agent Card (skills, entrypoints, schemas, prices) from it.
//!
//! A [`RegistryVersion`] tells a reader whether a listing it holds is still current, for the
//! price of one cheap read: gateways cache the listing and the card built from it, and list
//! again only when the version moves.
//!
//! The registry also holds the cluster's reporter lease ([`WorkerRegistry::hold_reporter`]):
//! the one worker that reports the cluster gauges (queue depth, leases, workers, capacity,
//! store memory), so that a dashboard sees each cluster value once, not once per worker.

mod memory;
mod operator;
mod redis;

pub use memory::MemoryRegistry;
pub use operator::{AUDIT_KEPT, AuditEntry, Drain, Pause, PauseMode};
pub use redis::RedisRegistry;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::StoreError;

/// Price of an entrypoint, in the payment rail's units (decimal strings, e.g. "0.01").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Price {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoke: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// How it is paid. Absent (x402, and every worker from before MPP) reads as x402.
    #[serde(default, skip_serializing_if = "PaymentProtocol::is_x402")]
    pub protocol: PaymentProtocol,
    /// When a priced invoke is settled. Absent (every worker from before settle=after) reads
    /// as before the run.
    #[serde(default, skip_serializing_if = "SettlePolicy::is_before")]
    pub settle: SettlePolicy,
    /// How the amount reads: the price (`exact`) or the most one call may cost (`upto`, x402's
    /// metered scheme: the handler reports what the call used). Absent reads as exact.
    #[serde(default, skip_serializing_if = "PriceScheme::is_exact")]
    pub scheme: PriceScheme,
}

/// How a price's amount reads (`--price KEY=upto:MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriceScheme {
    /// The amount is what every call costs.
    #[default]
    Exact,
    /// The amount is the most an invoke may cost; it settles, after the run, for what the
    /// handler reports it used (`usage.charge`), never more.
    Upto,
}

impl PriceScheme {
    pub fn is_exact(&self) -> bool {
        *self == PriceScheme::Exact
    }

    /// The x402 scheme name.
    pub fn as_str(self) -> &'static str {
        match self {
            PriceScheme::Exact => "exact",
            PriceScheme::Upto => "upto",
        }
    }
}

/// When a priced invoke's payment is settled (`--price KEY=AMOUNT:settle=after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SettlePolicy {
    /// Settled before the run, as upstream does: a run that then fails keeps the payment.
    #[default]
    Before,
    /// Verified and reserved before the run, settled only once it succeeded: a failed,
    /// cancelled or timed-out run charges nothing.
    After,
}

impl SettlePolicy {
    pub fn is_before(&self) -> bool {
        *self == SettlePolicy::Before
    }

    /// The name `--price KEY=AMOUNT:settle=NAME` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SettlePolicy::Before => "before",
            SettlePolicy::After => "after",
        }
    }
}

/// The payment protocol a priced entrypoint asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentProtocol {
    /// x402 (`PAYMENT-SIGNATURE` / `X-PAYMENT`).
    #[default]
    X402,
    /// MPP, the "Payment" HTTP authentication scheme (`Authorization: Payment`).
    Mpp,
}

impl PaymentProtocol {
    pub fn is_x402(&self) -> bool {
        *self == PaymentProtocol::X402
    }

    /// The name the card's `payment_protocol` and the worker's `--price KEY=AMOUNT:NAME` use.
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentProtocol::X402 => "x402",
            PaymentProtocol::Mpp => "mpp",
        }
    }
}

/// One entrypoint as a worker advertises it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntrypointInfo {
    pub key: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub streaming: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// The handler may run again after its worker died mid-run (it is idempotent or has no
    /// side effects): a direct invoke or stream whose worker is lost then gets another
    /// attempt. Otherwise a direct run gets exactly one attempt. Absent (older workers) reads
    /// as false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry_safe: bool,
    /// Sign-In-With-X (`--siwx KEY[:auth-only]`): the entrypoint takes a `SIGN-IN-WITH-X`
    /// wallet signature, running for a payer already entitled to it (priced) or for any
    /// signed-in caller (auth-only). Absent: no SIWX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub siwx: Option<SiwxPolicy>,
    /// Private (`--private KEY`): listed on no public surface (cards, `/entrypoints`, OpenAPI)
    /// and run only for members of the gateway (`--member-tokens-file`); anyone else is told
    /// it does not exist. Absent (older workers) reads as public.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
    /// Paused cluster-wide by an operator ([`WorkerRegistry::pause`]). Never advertised by a
    /// worker: the gateway sets it on its merged listing from [`WorkerRegistry::paused`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Pause>,
}

/// An entrypoint's Sign-In-With-X policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiwxPolicy {
    /// Signing in is all it takes (no price); without a signature it answers 401.
    #[serde(default)]
    pub auth_only: bool,
}

/// A worker's registry entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerEntry {
    pub worker_id: String,
    pub host: String,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    pub concurrency: usize,
    pub entrypoints: Vec<EntrypointInfo>,
}

/// Where a registry stands: equal versions (of one registry) list the same live entries. It
/// moves when a worker joins or leaves, when an entry's content changes, and when an entry
/// expires, but not when a heartbeat merely refreshes an unchanged entry. Compare for equality
/// only; there is no order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegistryVersion {
    /// The stored version (Redis), or the registry instance (memory).
    stamp: u64,
    /// Expired entries not yet pruned (Redis), or the count of changes (memory).
    moves: u64,
}

impl RegistryVersion {
    pub(crate) fn new(stamp: u64, moves: u64) -> Self {
        RegistryVersion { stamp, moves }
    }
}

#[async_trait]
pub trait WorkerRegistry: Send + Sync + 'static {
    /// Publishes or refreshes `entry`; it vanishes `ttl` after the last refresh. Returns the
    /// drain request standing for this worker process ([`Self::drain`]), so that a worker learns
    /// of one on its heartbeat with no read of its own.
    async fn heartbeat(
        &self,
        entry: &WorkerEntry,
        ttl: Duration,
    ) -> Result<Option<Drain>, StoreError>;

    /// Removes an entry at once (clean shutdown).
    async fn deregister(&self, worker_id: &str) -> Result<(), StoreError>;

    /// Every live entry, ordered by worker id.
    async fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError>;

    /// The registry's current version. A listing taken after reading a version is at least
    /// as new as that version, so a reader that reads the version first never misses a change.
    async fn version(&self) -> Result<RegistryVersion, StoreError>;

    /// Takes the cluster's reporter lease for `holder` when nobody holds it, or renews it when
    /// `holder` does, for `ttl`; true when `holder` holds it afterwards. At most one holder at
    /// a time; a holder that stops renewing loses it `ttl` after its last renewal.
    async fn hold_reporter(&self, holder: &str, ttl: Duration) -> Result<bool, StoreError>;

    /// Gives the reporter lease up if `holder` holds it (a clean shutdown: the next process to
    /// ask takes it at once instead of after the ttl); anyone else's lease stays.
    async fn release_reporter(&self, holder: &str) -> Result<(), StoreError>;

    /// Pauses entrypoint `key` cluster-wide (replacing an earlier pause of it) and moves the
    /// version, so that every gateway lists again.
    async fn pause(&self, key: &str, pause: &Pause) -> Result<(), StoreError>;

    /// Lifts the pause of `key`, moving the version; true when it was paused.
    async fn resume(&self, key: &str) -> Result<bool, StoreError>;

    /// The paused entrypoints, by key.
    async fn paused(&self) -> Result<BTreeMap<String, Pause>, StoreError>;

    /// Asks live worker `worker_id` to drain ([`Drain`]); an earlier request of it stands.
    /// The request standing afterwards, or `None` when no live worker has that id (nothing is
    /// written then). It goes when the worker deregisters or its entry expires, and a new
    /// process registering under the id (another `started_at_ms`) starts without it.
    async fn drain(&self, worker_id: &str, drain: &Drain) -> Result<Option<Drain>, StoreError>;

    /// The drain request standing for `worker_id`, if any (the worker itself learns it from
    /// [`Self::heartbeat`]'s reply).
    async fn drain_requested(&self, worker_id: &str) -> Result<Option<Drain>, StoreError>;

    /// Every standing drain request, by worker id.
    async fn drains(&self) -> Result<BTreeMap<String, Drain>, StoreError>;

    /// Appends `entry` to the audit log, which keeps the latest [`AUDIT_KEPT`].
    async fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;

    /// The audit log, newest first, at most `limit` entries.
    async fn audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_is_written_only_when_set_and_absent_reads_as_public() -> Result<(), serde_json::Error>
    {
        // An entry as a worker from before `--private` wrote it.
        let older: EntrypointInfo = serde_json::from_value(serde_json::json!({
            "key": "echo", "description": "", "inputSchema": {}, "outputSchema": {},
            "streaming": false,
        }))?;
        assert!(!older.private);
        assert!(serde_json::to_value(&older)?.get("private").is_none());
        let private = EntrypointInfo {
            private: true,
            ..older
        };
        assert_eq!(serde_json::to_value(&private)?["private"], true);
        Ok(())
    }
}
