//! `lua/reporter_hold.lua`: takes the cluster's reporter lease (`{ns}:reporter`, the id of the
//! process that reports the cluster gauges) when nobody holds it (`SET NX PX`), or renews it
//! when the caller does (compare, then `PEXPIRE`), in one script, so no caller ever renews a
//! lease another process took.
//!
//! - KEYS: the reporter lease.
//! - ARGV: the caller's id, ttl ms (>= 1).
//! - Reply: 1 when the caller holds the lease afterwards (taken or renewed), else 0.
//!
//! Unreplicated: a lease a failover loses is taken again by the next hold (two processes may
//! then both report for one interval, which a dashboard's `max` hides).

use std::time::Duration;

use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!(static "reporter_hold");

/// Takes or renews the lease for `holder`, for `ttl`; true when `holder` holds it.
pub(super) async fn call(
    store: &RedisStore,
    holder: &str,
    ttl: Duration,
) -> Result<bool, StoreError> {
    // PX 0 is an error in Redis.
    let ttl_ms = ttl.as_millis().max(1);
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.reporter())
        .arg(holder)
        .arg(ttl_ms.to_string());
    let held: u64 = store.eval_unreplicated(keys, NAME, &mut invocation).await?;
    Ok(held == 1)
}
