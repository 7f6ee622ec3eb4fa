//! `lua/push_claim.lua`: claims up to `limit` of a shard's due tasks, each scored by its
//! claim's expiry, so no other deliverer takes it while the claim lasts.
//!
//! - KEYS: due.
//! - ARGV: lease ms, limit.
//! - Reply: the claimed task ids.
//!
//! Unreplicated: a claim a failover loses only lets a second deliverer send what the first
//! sends too (at least once).

use std::time::Duration;

use crate::lua::lua_script;
use crate::redis::Keys;
use crate::{RedisStore, StoreError};

lua_script!("push_claim");

pub(super) async fn call(
    store: &RedisStore,
    keys: &Keys,
    lease: Duration,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.push_due())
        .arg(lease.as_millis().max(1).to_string())
        .arg(limit.max(1));
    store.eval_unreplicated(keys, NAME, &mut invocation).await
}
