//! The play-money ledger: one USDC balance per address (whatever the network) and the spent
//! nonces (EIP-3009's for `exact`, Permit2's for `upto`: [`NonceKey`] keeps them apart), each
//! with the amount it settled. A settlement checks the nonce, marks it spent, debits the payer
//! and credits the payee in one atomic step, so that one authorization moves funds at most
//! once however many settles race for it. An upto permit settles once too, for the amount the
//! payee asked (at most its maximum): the rest of the maximum is never moved.
//!
//! - [`memory`]: a `Mutex` around two maps, for one process;
//! - [`redis`]: keys under `{namespace}:`, the settlement one Lua script.

pub mod memory;
pub mod redis;

use alloy_primitives::{Address, B256, U256, keccak256};
use async_trait::async_trait;
use payments::NonceKey;

pub use self::memory::MemoryLedger;
pub use self::redis::RedisLedger;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger storage failed: {0}")]
    Redis(#[from] ::redis::RedisError),
    #[error("ledger storage answered something unexpected: {0}")]
    Reply(String),
    #[error("amount is larger than this ledger can hold")]
    TooLarge,
}

/// One transfer to settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub key: NonceKey,
    pub from: Address,
    pub to: Address,
    /// Atomic units.
    pub amount: U256,
}

impl Transfer {
    /// The settlement's "transaction hash": keccak256 of the nonce key's canonical spelling, so
    /// that retries and every replica name the same settlement the same way.
    pub fn transaction(&self) -> B256 {
        transaction_hash(&self.key)
    }
}

pub fn transaction_hash(key: &NonceKey) -> B256 {
    keccak256(key.to_string().as_bytes())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Nonce spent now, funds moved.
    Settled,
    /// Someone spent this nonce before; nothing moved.
    NonceUsed,
    /// The payer's balance is below the amount; nothing moved, the nonce stays unspent.
    InsufficientFunds,
}

#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// Atomic units held by `address` (zero when it never held any).
    async fn balance(&self, address: Address) -> Result<U256, LedgerError>;

    /// Whether `key` has been settled.
    async fn nonce_used(&self, key: &NonceKey) -> Result<bool, LedgerError>;

    /// The amount `key` settled (atomic units), `None` when it has not been settled.
    async fn settled_amount(&self, key: &NonceKey) -> Result<Option<U256>, LedgerError>;

    /// Adds `amount` to `address`; the new balance.
    async fn credit(&self, address: Address, amount: U256) -> Result<U256, LedgerError>;

    /// Sets `address` to `amount` only when it has no balance yet (startup funding survives
    /// restarts with a Redis ledger); whether it was set.
    async fn fund_if_absent(&self, address: Address, amount: U256) -> Result<bool, LedgerError>;

    /// Checks the nonce, marks it spent (recording `amount`), debits `from` and credits `to`,
    /// atomically.
    async fn settle(&self, transfer: &Transfer) -> Result<SettleOutcome, LedgerError>;
}
