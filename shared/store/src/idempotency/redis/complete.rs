//! `lua/idempotency_complete.lua`: stores the response of a claimed request for replay, if the
//! claim is still the record's (not lapsed, not released, not taken over by a retry after
//! lapsing). The record is then kept for the retention, and its id moves from the running
//! index to the done one. A body over the limit is not kept: the record says so (`kept` 0).
//!
//! - KEYS: the record, running ids (zset), done ids (zset), then each subject's ids (zset).
//! - ARGV: claim owner id, fingerprint, status, headers json, body, retention ms (>= 1), the
//!   record's id, max body bytes.
//! - Reply: 1 when recorded, 0 when the claim is no longer current ([`Reply`]).

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::{RedisIdempotency, corrupt, millis};
use crate::StoreError;
use crate::idempotency::{Claim, StoredResponse};
use crate::lua::lua_script;

lua_script!(static "idempotency_complete");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: stored (or recorded as not kept).
    Recorded,
    /// Anything else: the claim is no longer the record's.
    Stale,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Recorded,
            _ => Reply::Stale,
        })
    }
}

/// Records `response` under `claim` for `retention`. True when recorded.
pub(super) async fn call(
    records: &RedisIdempotency,
    claim: &Claim,
    response: &StoredResponse,
    retention: Duration,
) -> Result<bool, StoreError> {
    let headers = serde_json::to_string(&response.headers)
        .map_err(|err| corrupt(format!("headers: {err}")))?;
    let mut invocation = SCRIPT.prepare_invoke();
    let record = records.record_key(&claim.scope, &claim.key);
    invocation
        .key(&record)
        .key(&records.running)
        .key(&records.done);
    for subject in &claim.subjects {
        invocation.key(records.subject_key(subject));
    }
    invocation
        .arg(&claim.owner)
        .arg(&claim.fingerprint)
        .arg(response.status)
        .arg(headers)
        .arg(&response.body)
        .arg(millis(retention))
        .arg(records.record_id(&record))
        .arg(records.limits.max_body_bytes);
    let reply: Reply = records.store.eval(NAME, &mut invocation).await?;
    Ok(reply == Reply::Recorded)
}
