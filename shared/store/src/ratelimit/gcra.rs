//! `lua/rate_limit.lua`: fair admission, GCRA over one or more subjects (a client address, an
//! owner), all checked together: a request is admitted only when every subject has room, and
//! only then is each subject charged. The clock is Redis TIME, so every gateway shares it; each
//! key holds its subject's theoretical arrival time (µs) and expires once the subject's quota
//! is whole again.
//!
//! - KEYS: one per subject, `{ns}:rate:<kind>:<subject>`.
//! - ARGV: per subject, in the keys' order: emission interval in µs (1e6 / rate), burst.
//! - Reply: `{0}` when admitted, else `{i, retry_after_us}`: the first subject over its limit
//!   (1-based, in the keys' order) and the µs until it admits one more request ([`Reply`]).

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::{RedisRateLimiter, Subject, Verdict};
use crate::StoreError;
use crate::lua::lua_script;

lua_script!(static "rate_limit");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// `{0}` (or nothing, or a non-positive position): every subject had room.
    Admitted,
    /// `{i, retry_after_us}`.
    Limited {
        /// The subject over its limit: its position in the call's subjects, from 1.
        position: u64,
        /// µs until it admits one more request (0 when missing or negative).
        retry_us: u64,
    },
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let reply = Vec::<i64>::from_redis_value(v)?;
        let index = reply.first().copied().unwrap_or(0);
        Ok(match u64::try_from(index) {
            Ok(position) if position > 0 => Reply::Limited {
                position,
                retry_us: u64::try_from(reply.get(1).copied().unwrap_or(0)).unwrap_or(0),
            },
            _ => Reply::Admitted,
        })
    }
}

/// Checks `subjects` together and charges each one when all have room.
pub(super) async fn call(
    limiter: &RedisRateLimiter,
    subjects: &[Subject],
) -> Result<Verdict, StoreError> {
    // Nothing to check: no round trip.
    if subjects.is_empty() {
        return Ok(Verdict::Admitted);
    }
    let mut invocation = SCRIPT.prepare_invoke();
    for subject in subjects {
        invocation
            .key(limiter.key(&subject.key))
            .arg(subject.quota.interval_us())
            .arg(subject.quota.burst);
    }
    match limiter.store.eval(NAME, &mut invocation).await? {
        Reply::Admitted => Ok(Verdict::Admitted),
        Reply::Limited { position, retry_us } => {
            let subject = usize::try_from(position - 1)
                .ok()
                .and_then(|i| subjects.get(i))
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("rate_limit answered {:?}", [position, retry_us]))
                })?;
            Ok(Verdict::Limited {
                subject: subject.clone(),
                retry_after: Duration::from_micros(retry_us),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: &[i64]) -> Result<Reply, ParsingError> {
        Reply::from_redis_value(Value::Array(items.iter().map(|&i| Value::Int(i)).collect()))
    }

    #[test]
    fn replies_parse() -> Result<(), ParsingError> {
        assert_eq!(reply(&[0])?, Reply::Admitted);
        assert_eq!(reply(&[])?, Reply::Admitted);
        assert_eq!(reply(&[-1, 5])?, Reply::Admitted);
        assert_eq!(
            reply(&[2, 1500])?,
            Reply::Limited {
                position: 2,
                retry_us: 1500
            }
        );
        assert_eq!(
            reply(&[1, -3])?,
            Reply::Limited {
                position: 1,
                retry_us: 0
            }
        );
        Ok(())
    }
}
