//! `lua/credential_release.lua`: gives a claimed credential back (verification refused it or
//! failed before anything was settled), so the payer may retry it. A credential sent to
//! settlement is never released.
//!
//! - KEYS: the record.
//! - ARGV: holder id.
//! - Reply: 1 when released, 0 when not held by this holder in state `claimed` ([`Reply`]).

use redis::{FromRedisValue, ParsingError, Value};

use super::RedisCredentials;
use crate::StoreError;
use crate::lua::lua_script;

lua_script!(static "credential_release");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: the record is gone.
    Released,
    /// Anything else: not `claimed` by this holder.
    NotHeld,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Released,
            _ => Reply::NotHeld,
        })
    }
}

/// Gives credential `key` back if `holder` holds it, `claimed`. True when released.
pub(super) async fn call(
    ledger: &RedisCredentials,
    key: &str,
    holder: &str,
) -> Result<bool, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation.key(ledger.record_key(key)).arg(holder);
    let reply: Reply = ledger.store.eval(NAME, &mut invocation).await?;
    Ok(reply == Reply::Released)
}
