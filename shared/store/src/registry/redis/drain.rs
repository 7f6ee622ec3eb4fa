//! Operators' drain requests in Redis: `{ns}:registry-drain` (hash: worker id -> drain JSON).
//!
//! A request is written by `lua/operator_drain.lua`, which checks in the same step that the
//! worker is live (listed in the index with a deadline not yet passed, its entry present), so
//! an id an operator typed (or an attacker wrote) never adds a field. The registry's own
//! scripts remove a worker's request with it: `deregister_worker.lua` on a clean exit (the
//! drain's end), `register_worker.lua` when it prunes a dead worker; the hash expires with the
//! index.
//!
//! - KEYS: registry index, the worker's entry, drain requests.
//! - ARGV: worker id, the request as JSON.
//! - Reply: the standing request's JSON (an earlier one stands), or nil when the worker is not
//!   live.

use std::collections::BTreeMap;

use crate::lua::lua_script;
use crate::registry::Drain;
use crate::{RedisStore, StoreError};

lua_script!(static "operator_drain");

/// Asks live worker `worker_id` to drain; the standing request, or `None` when it is not live.
pub(super) async fn request(
    store: &RedisStore,
    worker_id: &str,
    drain: &Drain,
) -> Result<Option<Drain>, StoreError> {
    let json =
        serde_json::to_string(drain).map_err(|err| StoreError::Corrupt(format!("drain: {err}")))?;
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.registry())
        .key(keys.registry_entry(worker_id))
        .key(keys.registry_drain())
        .arg(worker_id)
        .arg(json);
    let standing: Option<String> = store.eval(NAME, &mut invocation).await?;
    standing.map(|json| parse(worker_id, &json)).transpose()
}

/// The request standing for `worker_id`.
pub(super) async fn requested(
    store: &RedisStore,
    worker_id: &str,
) -> Result<Option<Drain>, StoreError> {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(store.keys().registry_drain()).arg(worker_id);
    let stored: Option<String> = store.query(&mut cmd).await?;
    stored.map(|json| parse(worker_id, &json)).transpose()
}

/// Every standing request, by worker id.
pub(super) async fn all(store: &RedisStore) -> Result<BTreeMap<String, Drain>, StoreError> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(store.keys().registry_drain());
    let stored: BTreeMap<String, String> = store.query(&mut cmd).await?;
    stored
        .into_iter()
        .map(|(id, json)| {
            let drain = parse(&id, &json)?;
            Ok((id, drain))
        })
        .collect()
}

/// A stored request, read back.
pub(super) fn parse(worker_id: &str, json: &str) -> Result<Drain, StoreError> {
    serde_json::from_str(json)
        .map_err(|err| StoreError::Corrupt(format!("drain request of {worker_id}: {err}")))
}
