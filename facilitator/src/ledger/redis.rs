//! [`RedisLedger`]: the ledger in Redis, so that it outlives the process and several
//! facilitators can share it. Keys, all under one hash tag:
//!
//! - `{ns}:balance:<address hex>`: atomic units, decimal (what `INCRBY` keeps);
//! - `{ns}:nonce:<chain>:<contract>:<from>:<nonce>`: a spent authorization (the contract is the
//!   token for `exact`, Permit2 for `upto`), a hash of its `transaction` hash and the `amount`
//!   it settled.
//!
//! Amounts are Redis integers, so the ledger holds at most `i64::MAX` atomic units per address
//! (about 9.2 trillion USDC); larger amounts are refused, never wrapped.

use std::time::Duration;

use alloy_primitives::{Address, U256};
use async_trait::async_trait;
use payments::NonceKey;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use super::{Ledger, LedgerError, SettleOutcome, Transfer};

/// Bound on connecting and on each command: a stuck Redis must fail the request, not hang it.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct RedisLedger {
    connection: ConnectionManager,
    prefix: String,
    settle: Script,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedger")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLedger {
    /// Connects (and fails now when Redis cannot be reached).
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, LedgerError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT));
        let connection = ConnectionManager::new_with_config(client, config).await?;
        Ok(RedisLedger {
            connection,
            prefix: format!("{{{namespace}}}:"),
            settle: Script::new(include_str!("../../lua/settle.lua")),
        })
    }

    pub fn balance_key(&self, address: Address) -> String {
        format!("{}balance:{address:x}", self.prefix)
    }

    pub fn nonce_key(&self, key: &NonceKey) -> String {
        format!("{}nonce:{key}", self.prefix)
    }
}

/// `amount` as a Redis integer argument.
fn redis_amount(amount: U256) -> Result<i64, LedgerError> {
    i64::try_from(amount).map_err(|_| LedgerError::TooLarge)
}

fn parse_balance(stored: Option<String>) -> Result<U256, LedgerError> {
    match stored {
        None => Ok(U256::ZERO),
        Some(text) => U256::from_str_radix(&text, 10)
            .map_err(|_| LedgerError::Reply(format!("balance {text:?} is not a decimal"))),
    }
}

#[async_trait]
impl Ledger for RedisLedger {
    async fn balance(&self, address: Address) -> Result<U256, LedgerError> {
        let mut connection = self.connection.clone();
        let stored: Option<String> = connection.get(self.balance_key(address)).await?;
        parse_balance(stored)
    }

    async fn nonce_used(&self, key: &NonceKey) -> Result<bool, LedgerError> {
        let mut connection = self.connection.clone();
        Ok(connection.exists(self.nonce_key(key)).await?)
    }

    async fn settled_amount(&self, key: &NonceKey) -> Result<Option<U256>, LedgerError> {
        let mut connection = self.connection.clone();
        let stored: Option<String> = connection.hget(self.nonce_key(key), "amount").await?;
        stored
            .map(|text| {
                U256::from_str_radix(&text, 10)
                    .map_err(|_| LedgerError::Reply(format!("amount {text:?} is not a decimal")))
            })
            .transpose()
    }

    async fn credit(&self, address: Address, amount: U256) -> Result<U256, LedgerError> {
        let amount = redis_amount(amount)?;
        let mut connection = self.connection.clone();
        let balance: i64 = connection.incr(self.balance_key(address), amount).await?;
        Ok(U256::from(balance.max(0).unsigned_abs()))
    }

    async fn fund_if_absent(&self, address: Address, amount: U256) -> Result<bool, LedgerError> {
        let amount = redis_amount(amount)?;
        let mut connection = self.connection.clone();
        Ok(connection.set_nx(self.balance_key(address), amount).await?)
    }

    async fn settle(&self, transfer: &Transfer) -> Result<SettleOutcome, LedgerError> {
        let amount = redis_amount(transfer.amount)?;
        let mut invocation = self.settle.prepare_invoke();
        invocation
            .key(self.nonce_key(&transfer.key))
            .key(self.balance_key(transfer.from))
            .key(self.balance_key(transfer.to))
            .arg(amount)
            .arg(transfer.transaction().to_string())
            .arg(i64::MAX - amount);
        let mut connection = self.connection.clone();
        let outcome: i64 = invocation.invoke_async(&mut connection).await?;
        match outcome {
            1 => Ok(SettleOutcome::Settled),
            0 => Ok(SettleOutcome::NonceUsed),
            -1 => Ok(SettleOutcome::InsufficientFunds),
            -2 => Err(LedgerError::TooLarge),
            other => Err(LedgerError::Reply(format!(
                "settle script returned {other}"
            ))),
        }
    }
}
