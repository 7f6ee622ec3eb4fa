//! `lua/registry_version.lua` (read-only): what a gateway compares to know whether its cached
//! registry listing is still the registry's, in one round trip and no listing. The pair moves
//! on every join, leave, content change and pruning (the stored version), and when an entry
//! simply expires (the count of passed deadlines, by the Redis clock that set them).
//!
//! - KEYS: registry index (zset: worker id -> expiry ms), registry version.
//! - ARGV: none.
//! - Reply: `{version (digits; "0" when absent), members whose deadline passed}` ([`Reply`]).

use redis::{FromRedisValue, ParsingError, Value};

use crate::lua::lua_script;
use crate::registry::RegistryVersion;
use crate::{RedisStore, StoreError};

lua_script!(static "registry_version");

/// What the script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    Version(RegistryVersion),
    /// A stored version that is not a number: it, and why.
    Unreadable {
        stamp: String,
        error: String,
    },
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let (stamp, expired) = <(String, u64)>::from_redis_value(v)?;
        Ok(match stamp.parse::<u64>() {
            Ok(version) => Reply::Version(RegistryVersion::new(version, expired)),
            Err(err) => Reply::Unreadable {
                stamp,
                error: err.to_string(),
            },
        })
    }
}

/// The registry's version now.
pub(super) async fn call(store: &RedisStore) -> Result<RegistryVersion, StoreError> {
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation.key(keys.registry()).key(keys.registry_version());
    match store.eval_unreplicated(keys, NAME, &mut invocation).await? {
        Reply::Version(version) => Ok(version),
        Reply::Unreadable { stamp, error } => Err(StoreError::Corrupt(format!(
            "registry version {stamp:?}: {error}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() -> Result<(), ParsingError> {
        let pair = |stamp: &str, expired: i64| {
            Value::Array(vec![
                Value::BulkString(stamp.as_bytes().to_vec()),
                Value::Int(expired),
            ])
        };
        assert_eq!(
            Reply::from_redis_value(pair("7", 2))?,
            Reply::Version(RegistryVersion::new(7, 2))
        );
        assert!(matches!(
            Reply::from_redis_value(pair("x", 0))?,
            Reply::Unreadable { .. }
        ));
        assert!(Reply::from_redis_value(Value::Int(1)).is_err());
        Ok(())
    }
}
