//! `lua/nonce_take.lua`: spends a nonce this cluster issued (`nonce_issue`), once: the first
//! request that presents it spends it, every later one (at any gateway) is refused, and so is
//! a nonce never issued here, expired, or dropped by the cap.
//!
//! - KEYS: the set of issued nonces.
//! - ARGV: nonce.
//! - Reply: 1 when spent now, else 0 ([`Reply`]).

use redis::{FromRedisValue, ParsingError, Value};

use super::RedisCredentials;
use crate::StoreError;
use crate::lua::lua_script;

lua_script!(static "nonce_take");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: spent now, by this request.
    Spent,
    /// Anything else: never issued here, expired, dropped, or spent already.
    Refused,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Spent,
            _ => Reply::Refused,
        })
    }
}

/// Spends `nonce`. True when this call spent it.
pub(super) async fn call(ledger: &RedisCredentials, nonce: &str) -> Result<bool, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation.key(&ledger.nonces).arg(nonce);
    let reply: Reply = ledger.store.eval(NAME, &mut invocation).await?;
    Ok(reply == Reply::Spent)
}
