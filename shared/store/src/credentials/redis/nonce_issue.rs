//! `lua/nonce_issue.lua`: records a nonce this cluster hands out (a Sign-In-With-X offer's),
//! so that a sign-in is accepted only with a nonce issued here. Unauthenticated callers make
//! us issue them, so the set is bounded in the same step: expired nonces are dropped, then the
//! oldest past the cap.
//!
//! - KEYS: the set of issued nonces (member: nonce, score: expiry in ms, Redis clock).
//! - ARGV: nonce, validity in ms, the most nonces kept.
//! - Reply: the number of nonces outstanding ([`Reply`]).

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::RedisCredentials;
use crate::StoreError;
use crate::lua::lua_script;

lua_script!(static "nonce_issue");

/// What the script answered: the nonces outstanding once this one is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reply {
    pub(super) outstanding: u64,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(Reply {
            outstanding: u64::from_redis_value(v)?,
        })
    }
}

/// Records `nonce` as issued, valid for `ttl`, within the ledger's cap.
pub(super) async fn call(
    ledger: &RedisCredentials,
    nonce: &str,
    ttl: Duration,
) -> Result<Reply, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(&ledger.nonces)
        .arg(nonce)
        .arg(ttl.as_millis().to_string())
        .arg(ledger.nonce_cap);
    ledger.store.eval(NAME, &mut invocation).await
}
