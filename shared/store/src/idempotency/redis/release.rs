//! `lua/idempotency_release.lua`: drops a claimed, unfinished record so that a retry of the
//! same request runs (after a 5xx or a timeout), and its id from the running index. Only the
//! current claim may release it.
//!
//! - KEYS: the record, running ids (zset), then each subject's ids (zset).
//! - ARGV: claim owner id, fingerprint, the record's id.
//! - Reply: 1 when released, 0 when the claim is no longer current ([`Reply`]).

use redis::{FromRedisValue, ParsingError, Value};

use super::RedisIdempotency;
use crate::StoreError;
use crate::idempotency::Claim;
use crate::lua::lua_script;

lua_script!(static "idempotency_release");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: the record is gone.
    Released,
    /// Anything else: the claim is no longer the record's.
    Stale,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Released,
            _ => Reply::Stale,
        })
    }
}

/// Drops the record `claim` holds. True when released.
pub(super) async fn call(records: &RedisIdempotency, claim: &Claim) -> Result<bool, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    let record = records.record_key(&claim.scope, &claim.key);
    invocation.key(&record).key(&records.running);
    for subject in &claim.subjects {
        invocation.key(records.subject_key(subject));
    }
    invocation
        .arg(&claim.owner)
        .arg(&claim.fingerprint)
        .arg(records.record_id(&record));
    let reply: Reply = records.store.eval(NAME, &mut invocation).await?;
    Ok(reply == Reply::Released)
}
