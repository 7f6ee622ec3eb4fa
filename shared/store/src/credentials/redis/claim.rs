//! `lua/credential_claim.lua`: takes a payment credential (its replay key) for one request,
//! atomically, so that one credential buys at most one execution across every gateway.
//!
//! - KEYS: the record (hash: `holder`, `state`, ...).
//! - ARGV: holder id (the request's admission id), TTL in ms (past the credential's validity).
//! - Reply: `''` when taken now, else the state of the request that already holds or spent it
//!   ([`Reply`]).

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::RedisCredentials;
use crate::StoreError;
use crate::credentials::{ClaimOutcome, CredentialState};
use crate::lua::lua_script;

lua_script!(static "credential_claim");

/// What the script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// `''`: taken now, by this holder.
    Taken,
    /// Another request holds or spent it, in this state.
    Held(CredentialState),
    /// A state this code does not know: the record is unreadable.
    Unknown(String),
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let held = String::from_redis_value(v)?;
        Ok(if held.is_empty() {
            Reply::Taken
        } else {
            match CredentialState::parse(&held) {
                Some(state) => Reply::Held(state),
                None => Reply::Unknown(held),
            }
        })
    }
}

/// Claims the credential `key` for `holder`, its record expiring after `ttl`.
pub(super) async fn call(
    ledger: &RedisCredentials,
    key: &str,
    holder: &str,
    ttl: Duration,
) -> Result<ClaimOutcome, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(ledger.record_key(key))
        .arg(holder)
        .arg(ttl.as_millis().max(1).to_string());
    match ledger.store.eval(NAME, &mut invocation).await? {
        Reply::Taken => Ok(ClaimOutcome::Taken),
        Reply::Held(state) => Ok(ClaimOutcome::Held(state)),
        Reply::Unknown(held) => Err(StoreError::Corrupt(format!(
            "credential record in state {held:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() -> Result<(), ParsingError> {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        assert_eq!(Reply::from_redis_value(bulk(""))?, Reply::Taken);
        assert_eq!(
            Reply::from_redis_value(bulk("settling"))?,
            Reply::Held(CredentialState::Settling)
        );
        assert_eq!(
            Reply::from_redis_value(bulk("lost"))?,
            Reply::Unknown("lost".into())
        );
        assert!(Reply::from_redis_value(Value::Nil).is_err());
        Ok(())
    }
}
