//! `lua/reporter_release.lua`: gives the reporter lease up on a clean shutdown: deletes
//! `{ns}:reporter` only when the caller holds it (compare and delete in one script), so the
//! next hold takes it at once instead of after its ttl, and a lease another process took
//! meanwhile stays.
//!
//! - KEYS: the reporter lease.
//! - ARGV: the caller's id.
//! - Reply: 1 when the caller held the lease (now deleted), else 0.

use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!(static "reporter_release");

/// Deletes the lease if `holder` holds it; true when it did.
pub(super) async fn call(store: &RedisStore, holder: &str) -> Result<bool, StoreError> {
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation.key(keys.reporter()).arg(holder);
    let released: u64 = store.eval_unreplicated(keys, NAME, &mut invocation).await?;
    Ok(released == 1)
}
