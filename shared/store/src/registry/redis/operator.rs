//! The operators' state in Redis: `{ns}:paused` (hash: entrypoint key -> pause JSON) and
//! `{ns}:audit` (list, newest first, trimmed to [`AUDIT_KEPT`]). Both sit in the namespace's
//! slot beside `{ns}:registry-version`, so a pause or resume and the version bump it needs
//! are one script (`lua/operator_pause.lua`, bumping as the registry scripts do): a gateway
//! that sees the new version lists the new pauses.

use std::collections::BTreeMap;

use crate::lua::lua_script;
use crate::registry::{AUDIT_KEPT, AuditEntry, Pause};
use crate::{RedisStore, StoreError};

lua_script!(static "operator_pause");

pub(super) async fn pause(store: &RedisStore, key: &str, pause: &Pause) -> Result<(), StoreError> {
    let json =
        serde_json::to_string(pause).map_err(|err| StoreError::Corrupt(format!("pause: {err}")))?;
    set(store, key, &json).await?;
    Ok(())
}

pub(super) async fn resume(store: &RedisStore, key: &str) -> Result<bool, StoreError> {
    set(store, key, "").await
}

/// `lua/operator_pause.lua`: sets (`pause` JSON) or lifts (empty) a pause and bumps the
/// registry version; true when it changed something.
async fn set(store: &RedisStore, key: &str, pause: &str) -> Result<bool, StoreError> {
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.paused())
        .key(keys.registry_version())
        .arg(key)
        .arg(pause);
    let done: u64 = store.eval(NAME, &mut invocation).await?;
    Ok(done == 1)
}

pub(super) async fn paused(store: &RedisStore) -> Result<BTreeMap<String, Pause>, StoreError> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(store.keys().paused());
    let stored: BTreeMap<String, String> = store.query(&mut cmd).await?;
    stored
        .into_iter()
        .map(|(key, json)| {
            let pause = serde_json::from_str(&json)
                .map_err(|err| StoreError::Corrupt(format!("pause of {key}: {err}")))?;
            Ok((key, pause))
        })
        .collect()
}

pub(super) async fn audit(store: &RedisStore, entry: &AuditEntry) -> Result<(), StoreError> {
    let keys = store.keys();
    let json = serde_json::to_string(entry)
        .map_err(|err| StoreError::Corrupt(format!("audit entry: {err}")))?;
    let kept = isize::try_from(AUDIT_KEPT).unwrap_or(isize::MAX) - 1;
    let mut pipe = redis::pipe();
    pipe.atomic()
        .lpush(keys.audit(), json)
        .ignore()
        .ltrim(keys.audit(), 0, kept)
        .ignore();
    store.pipe::<()>(&pipe).await
}

pub(super) async fn audit_log(
    store: &RedisStore,
    limit: usize,
) -> Result<Vec<AuditEntry>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let last = isize::try_from(limit.min(AUDIT_KEPT)).unwrap_or(isize::MAX) - 1;
    let mut cmd = redis::cmd("LRANGE");
    cmd.arg(store.keys().audit()).arg(0).arg(last);
    let stored: Vec<String> = store.query(&mut cmd).await?;
    stored
        .iter()
        .map(|json| {
            serde_json::from_str(json)
                .map_err(|err| StoreError::Corrupt(format!("audit entry: {err}")))
        })
        .collect()
}
