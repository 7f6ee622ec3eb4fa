//! `push_claim.lua`: claims up to `limit` of a shard's due tasks, each scored by its
//! claim's expiry, so no other deliverer takes it while the claim lasts: first the tasks of
//! groups (client addresses, else owners) under their share of the caller's slots, then,
//! below the caller's cap, the others; those left are moved a little ahead.
//!
//! - KEYS: due.
//! - ARGV: lease ms, limit, scan, share, postpone ms, tasks under way at the caller, cap, then
//!   pairs of group and tasks of it under way at the caller.
//! - Reply: id, group, id, group, ... of the claimed tasks.
//!
//! Unreplicated: a claim a failover loses only lets a second deliverer send what the first
//! sends too (at least once).

use std::time::Duration;

use redis::Value;

use super::{run_unreplicated, text};
use crate::lua::lua_script;
use crate::push::{Claimed, OwnerShare};
use crate::redis::Keys;
use crate::{RedisStore, StoreError};

lua_script!("push_claim");

/// Due tasks looked at per claimed one, at most: enough to pass over a flood of one group's.
const SCAN_FACTOR: usize = 2;

/// What `push_claim.lua` answered: the claimed tasks, in the order it claimed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClaimReply(pub Vec<Claimed>);

impl redis::FromRedisValue for ClaimReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let Value::Array(items) = v else {
            return Err("push_claim reply is not an array".into());
        };
        if items.len() % 2 != 0 {
            return Err("push_claim reply has an id without its group".into());
        }
        items
            .chunks_exact(2)
            .map(|pair| {
                Ok(Claimed {
                    id: text(&pair[0])?,
                    group: text(&pair[1])?,
                })
            })
            .collect::<Result<_, redis::ParsingError>>()
            .map(ClaimReply)
    }
}

/// Claims up to `limit` due tasks of the shard whose keys are `keys` for `lease`.
pub(crate) async fn call(
    store: &RedisStore,
    keys: &Keys,
    lease: Duration,
    limit: usize,
    share: &OwnerShare,
) -> Result<ClaimReply, StoreError> {
    let core = &store.inner.core;
    let limit = limit.max(1);
    let mut invocation = core.scripts.push_claim.prepare_invoke();
    invocation
        .key(keys.push_due())
        .arg(lease.as_millis().max(1).to_string())
        .arg(limit)
        .arg(limit.saturating_mul(SCAN_FACTOR))
        .arg(share.share.max(1))
        .arg(share.postpone.as_millis().max(1).to_string())
        .arg(share.under_way.iter().map(|(_, n)| *n).sum::<usize>())
        .arg(share.cap);
    for (group, under_way) in &share.under_way {
        invocation.arg(group).arg(*under_way);
    }
    run_unreplicated(core, NAME, keys, &mut invocation).await
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::ClaimReply;
    use crate::StoreError;
    use crate::push::Claimed;
    use crate::redis::scripts::parse;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn claimed_tasks_read_as_id_and_group_pairs_in_order() -> Result<(), StoreError> {
        let reply = Value::Array(vec![bulk("t1"), bulk("a:10.0.0.1"), bulk("t2"), bulk("")]);
        let ClaimReply(claimed) = parse(reply)?;
        assert_eq!(
            claimed,
            vec![
                Claimed {
                    id: "t1".into(),
                    group: "a:10.0.0.1".into()
                },
                Claimed {
                    id: "t2".into(),
                    group: String::new()
                },
            ]
        );
        assert_eq!(
            parse::<ClaimReply>(Value::Array(Vec::new()))?,
            ClaimReply::default()
        );
        Ok(())
    }

    #[test]
    fn an_id_without_its_group_is_corrupt_not_dropped() {
        for malformed in [
            Value::Array(vec![bulk("t1"), bulk("a:x"), bulk("t2")]),
            Value::Array(vec![bulk("t1"), Value::Array(Vec::new())]),
            Value::Int(1),
        ] {
            assert!(matches!(
                parse::<ClaimReply>(malformed),
                Err(StoreError::Corrupt(_))
            ));
        }
    }
}
