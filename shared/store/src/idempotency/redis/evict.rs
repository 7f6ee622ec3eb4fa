//! `lua/idempotency_evict.lua`: drops one done record to make room at the record bound
//! ([`super::begin`] names it). Only a record still listed as done goes: one a concurrent
//! request already evicted, or that expired, is left alone.
//!
//! - KEYS: the record, done ids (zset).
//! - ARGV: the record's id (its key without the prefix).
//! - Reply: 1 when evicted, 0 when it was no longer listed as done ([`Reply`]).

use redis::{FromRedisValue, ParsingError, Value};

use super::{RedisIdempotency, corrupt};
use crate::StoreError;
use crate::lua::lua_script;

lua_script!("idempotency_evict");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: the record is gone.
    Evicted,
    /// Anything else: no longer listed as done.
    Gone,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Evicted,
            _ => Reply::Gone,
        })
    }
}

/// Drops the done record `id` named by a begin; false when it was gone already.
pub(super) async fn call(records: &RedisIdempotency, id: &str) -> Result<bool, StoreError> {
    // Ids are the 64 hex digits of a record's name; anything else is not ours to delete.
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(corrupt(format!("bad record id {id:?}")));
    }
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(format!("{}{id}", records.prefix))
        .key(&records.done)
        .arg(id);
    let reply: Reply = records.store.eval(NAME, &mut invocation).await?;
    Ok(reply == Reply::Evicted)
}
