//! `lua/push_claim.lua`: claims up to `limit` of a shard's due tasks, each scored by its
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

use super::{Claimed, OwnerShare};
use crate::lua::lua_script;
use crate::redis::Keys;
use crate::{RedisStore, StoreError};

lua_script!("push_claim");

/// Due tasks looked at per claimed one, at most: enough to pass over a flood of one group's.
const SCAN_FACTOR: usize = 2;

pub(super) async fn call(
    store: &RedisStore,
    keys: &Keys,
    lease: Duration,
    limit: usize,
    share: &OwnerShare,
) -> Result<Vec<Claimed>, StoreError> {
    let limit = limit.max(1);
    let mut invocation = SCRIPT.prepare_invoke();
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
    let flat: Vec<String> = store.eval_unreplicated(keys, NAME, &mut invocation).await?;
    Ok(flat
        .chunks(2)
        .filter_map(|pair| match pair {
            [id, group] => Some(Claimed {
                id: id.clone(),
                group: group.clone(),
            }),
            _ => None,
        })
        .collect())
}
