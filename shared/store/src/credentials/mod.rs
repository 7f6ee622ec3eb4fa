//! Single-use payment credentials: a record per credential (its replay key, e.g. an EIP-3009
//! nonce per chain, asset and payer), taken atomically by the first request that presents it,
//! so that one credential buys at most one execution and one settlement, across every gateway.
//!
//! ```text
//! claim -> claimed --release--> (gone: the payer may retry)
//!             \--advance--> settling --advance--> settled (receipt kept)
//!             |                 \--resolve (settlement recovery)--> settled | void
//!             \--reserve--> reserved --advance (the run succeeded)--> settling
//!                               \--advance (it did not) / resolve (due, unsettled)--> void
//! ```
//!
//! A credential that reached `settling` is never given back: the facilitator may have moved
//! the funds even when its answer was lost. A record left in `settling` (its gateway died, or
//! the facilitator never answered) keeps the facilitator request, so that a gateway's recovery
//! sweep can ask the facilitator whether it was settled and attach the receipt to the task. Records expire after the caller's TTL (past the
//! credential's own validity, when it can no longer be settled anyway).

mod memory;
mod redis;

pub use memory::MemoryCredentials;
pub use redis::RedisCredentials;

use std::time::Duration;

use async_trait::async_trait;

use crate::StoreError;

/// Where a credential is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialState {
    Claimed,
    /// Verified and held for a run that settles only once it succeeds (settle=after): moves
    /// to `settling` when it did, to `void` when it did not (nothing charged).
    Reserved,
    Settling,
    Settled,
    /// Settling ended without a settlement (the facilitator says it never settled); still
    /// never reused.
    Void,
}

impl CredentialState {
    pub fn parse(text: &str) -> Option<Self> {
        [
            CredentialState::Claimed,
            CredentialState::Reserved,
            CredentialState::Settling,
            CredentialState::Settled,
            CredentialState::Void,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CredentialState::Claimed => "claimed",
            CredentialState::Reserved => "reserved",
            CredentialState::Settling => "settling",
            CredentialState::Settled => "settled",
            CredentialState::Void => "void",
        }
    }
}

/// What [`CredentialLedger::claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Taken now, by this holder.
    Taken,
    /// Another request holds it (or spent it), in this state.
    Held(CredentialState),
}

#[async_trait]
pub trait CredentialLedger: Send + Sync + 'static {
    /// Takes the credential for `holder`, unless some request already holds or spent it.
    async fn claim(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome, StoreError>;

    /// Gives a `claimed` credential back; false when not held by `holder` in that state.
    async fn release(&self, key: &str, holder: &str) -> Result<bool, StoreError>;

    /// `expected -> next`, storing `data` when given: the facilitator request on the way to
    /// `settling`, the receipt on the way to `settled`. False when not `holder`'s or not in
    /// `expected`.
    async fn advance(
        &self,
        key: &str,
        holder: &str,
        expected: CredentialState,
        next: CredentialState,
        data: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// `claimed -> reserved` (settle=after): the payment is verified and held for a run,
    /// `request` kept as on the way to `settling`. The record falls due `due_in` from now:
    /// from then on [`CredentialLedger::stuck`] lists it (a run nobody settled, released by
    /// the recovery sweep). False when not `holder`'s or not `claimed`.
    async fn reserve(
        &self,
        key: &str,
        holder: &str,
        request: &str,
        due_in: Duration,
    ) -> Result<bool, StoreError>;

    /// Records in `settling` for longer than `older_than` (settle answers that were lost),
    /// and `reserved` ones due for longer than that (runs nobody settled), oldest first.
    /// Records gone meanwhile are skipped.
    async fn stuck(&self, older_than: Duration, limit: usize) -> Result<Vec<Stuck>, StoreError>;

    /// Sets (or renews) mark `key` for `ttl` (an entitlement).
    async fn mark(&self, key: &str, ttl: Duration) -> Result<(), StoreError>;

    /// Records `nonce` as issued by this cluster, valid for `ttl` (a Sign-In-With-X offer's
    /// nonce). What unauthenticated callers can make us store is bounded: one set per
    /// namespace, trimmed of expired nonces on every issue and capped at [`MAX_ISSUED_NONCES`]
    /// (the oldest dropped first), in one atomic step.
    async fn issue_nonce(&self, nonce: &str, ttl: Duration) -> Result<(), StoreError>;

    /// Spends an issued nonce: true once, for a nonce [`CredentialLedger::issue_nonce`]
    /// recorded and that has not expired (nor been dropped by the cap); false when it was
    /// never issued, expired or was spent already. Atomic across gateways.
    async fn take_nonce(&self, nonce: &str) -> Result<bool, StoreError>;

    /// Whether mark `key` is set and unexpired.
    async fn marked(&self, key: &str) -> Result<bool, StoreError>;

    /// `from -> next` of a stuck record (`from`: its state, `settling` or `reserved`), by its
    /// id, storing `receipt` when given.
    async fn resolve(
        &self,
        id: &str,
        holder: &str,
        from: CredentialState,
        next: CredentialState,
        receipt: Option<&str>,
    ) -> Result<bool, StoreError>;
}

/// The most nonces [`CredentialLedger::issue_nonce`] keeps outstanding per namespace: past it
/// the oldest are dropped (their sign-in is refused, with a fresh offer). With 32-character
/// nonces that is about 14 MB of Redis at most (`MEMORY USAGE` of a full set), whatever a
/// flood of unpaid requests does.
pub const MAX_ISSUED_NONCES: usize = 100_000;

/// A credential left in `settling`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// The record's id (what [`CredentialLedger::resolve`] takes).
    pub id: String,
    /// `settling` (a settle answer lost) or `reserved` (a run nobody settled).
    pub state: CredentialState,
    /// The request that holds it: the paid task's id.
    pub holder: String,
    /// The facilitator request sent to settle it.
    pub request: String,
    /// How long it has been `settling` (for `reserved`: how long it has been due).
    pub age: Duration,
}
