//! `list_page.lua`: one shard's part of an owner listing. Drops the shard's terminal entries
//! past their retention first (so the owner's index counts only kept tasks), then answers the
//! index's size and its newest `top` ids.
//!
//! KEYS: owner_index, terminal, terminal sizes, terminal bytes, push due (an evicted task
//! leaves it). ARGV: key prefix (the shard's hash tag), top (0: none, -1:
//! every id), most expired entries to drop in this call.
//! Reply: `{count, {id, created_ms, id, created_ms, ...}}` newest first.

use protocol::token::OwnerHash;
use redis::Value;

use super::run_unreplicated;
use crate::StoreError;
use crate::lua::lua_script;
use crate::redis::Core;
use crate::redis::shards::Shard;

lua_script!("list_page");

/// One shard's listing part: the owner's retained task count there and its newest ids with
/// their creation times (ms), newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ListPageReply {
    pub count: u64,
    pub ids: Vec<(String, f64)>,
}

impl redis::FromRedisValue for ListPageReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (count, flat): (u64, Vec<String>) = redis::from_redis_value(v)?;
        let mut ids = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks(2) {
            let [id, score] = pair else {
                return Err("owner listing: odd index reply".into());
            };
            let score: f64 = score
                .parse()
                .map_err(|_| "owner listing: a score is not a number")?;
            ids.push((id.clone(), score));
        }
        Ok(ListPageReply { count, ids })
    }
}

/// `owner`'s part of a listing in `shard`: the newest `top` ids, after dropping at most
/// `prune` expired terminal entries. Not replicated: the prune is redone by the next call.
pub(crate) async fn call(
    core: &Core,
    shard: &Shard,
    owner: &OwnerHash,
    top: i64,
    prune: usize,
) -> Result<ListPageReply, StoreError> {
    let keys = &shard.keys;
    let mut invocation = core.scripts.list_page.prepare_invoke();
    invocation
        .key(keys.owner_index(owner))
        .key(&keys.retained())
        .key(keys.push_due())
        .arg(keys.tag())
        .arg(top)
        .arg(prune);
    run_unreplicated(core, NAME, keys, &mut invocation).await
}
