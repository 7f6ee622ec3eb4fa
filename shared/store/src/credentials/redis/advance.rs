//! `lua/credential_advance.lua`: moves a held credential on, keeping its TTL: `claimed ->
//! reserved -> settling | void` (settle=after), `claimed ->
//! settling` (stores the facilitator request, indexes the record for settlement recovery),
//! `settling -> settled` (with the receipt) or `-> void` (leaves the index).
//!
//! - KEYS: the record, the index of records in `settling` (sorted by since when).
//! - ARGV: holder id, expected state, next state, data (the request on the way to
//!   `settling` or `reserved`, the receipt on the way to `settled`, a note on the way to
//!   `void`; `''` for none), and when a `reserved` record falls due (milliseconds from now).
//! - Reply: 1 when moved, 0 when the record is not this holder's or not in the expected state
//!   ([`Reply`]).

use redis::{FromRedisValue, ParsingError, Value};

use super::RedisCredentials;
use crate::StoreError;
use crate::credentials::CredentialState;
use crate::lua::lua_script;

lua_script!(static "credential_advance");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: moved to the next state.
    Moved,
    /// Anything else: not this holder's, or not in the expected state.
    Refused,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Moved,
            _ => Reply::Refused,
        })
    }
}

/// `expected -> next` of the record named `record` (a record key, not a credential), storing
/// `data` when given. True when moved.
pub(super) async fn call(
    ledger: &RedisCredentials,
    record: &str,
    holder: &str,
    expected: CredentialState,
    next: CredentialState,
    data: Option<&str>,
    due_in: std::time::Duration,
) -> Result<bool, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(record)
        .key(&ledger.settling)
        .arg(holder)
        .arg(expected.as_str())
        .arg(next.as_str())
        .arg(data.unwrap_or(""))
        .arg(u64::try_from(due_in.as_millis()).unwrap_or(u64::MAX));
    let reply: Reply = ledger.store.eval(NAME, &mut invocation).await?;
    Ok(reply == Reply::Moved)
}
