//! The push notification outbox: a task's A2A push configs and the deliveries owed to them,
//! in the task's shard, so that a delivery survives the death of any process.
//!
//! - `{shard}:push:<id>` (hash): config id -> the config as its binding stored it (opaque);
//! - `{shard}:push-out:<id>` (list): the task's events not yet delivered to every config,
//!   appended by the very script that publishes each event (`lua/includes/push_outbox.lua`),
//!   each stamped with that script's time ([`OutboxEvent`]), bounded;
//! - `{shard}:push-cur:<id>` (hash): config id -> [`PushCursor`], how far that config got;
//! - `{shard}:push-due` (sorted set): tasks with deliveries to make, by when (Redis clock);
//! - `{shard}:push-exhausted` (list): deliveries given up, newest first, bounded;
//! - `{shard}:push-dropped` (counter): events a full outbox dropped, not yet taken by a
//!   deliverer ([`PushBatch::dropped`]).
//!
//! A deliverer [`PushOutbox::claim_due`]s tasks (a lease: each claimed task is scored by its
//! claim's expiry; each client address's up to its share of the deliverer's slots,
//! [`OwnerShare`]), [`PushOutbox::load`]s one, sends each config's events after its cursor in
//! order, [`PushOutbox::advance`]s the cursor after each answer (compare and set), and
//! [`PushOutbox::release`]s the task: delivered events leave the outbox, and the task is due
//! again when something is left. A deliverer killed at any point leaves the cursor where the
//! last confirmed delivery put it, and the task due once its claim expires: the next
//! deliverer sends again what was not confirmed (at least once, in order per config).
//!
//! Configs live as long as their task: they never expire while it runs, and once its terminal
//! event is delivered they take the task's remaining retention. They are bytes the task keeps:
//! counted in its retained size (`lua/includes/push_bytes.lua`), and deleted with it when it
//! is evicted or its retention ends (`lua/includes/evict_terminal.lua`).
//!
//! The outbox's writes are Lua scripts of the task store (`redis/scripts/push_*.rs`, each with
//! its contract and typed reply: a reply that does not fit is [`StoreError::Corrupt`]).
//!
//! Redis only: the embedded store keeps nothing across a restart, so it has no outbox, and
//! push notifications need `REDIS_URL`.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::redis::replies;
use crate::redis::scripts::{push_advance, push_claim, push_delete, push_put, push_release};
use crate::{RedisStore, StoreError, StoredEvent};

/// Most exhausted deliveries each shard keeps for inspection.
pub const EXHAUSTED_KEPT: usize = 1000;

/// What [`PushOutbox::load`] reads in one round trip: configs, cursors, outbox entries, the
/// shard's dropped events.
type Loaded = (
    HashMap<String, String>,
    HashMap<String, String>,
    Vec<String>,
    Option<u64>,
);

/// How far one config's deliveries got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PushCursor {
    /// The last event delivered (or given up); 0: none yet.
    #[serde(rename = "s")]
    pub seq: u64,
    /// Failed attempts at the event after `seq`.
    #[serde(rename = "f", default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// When the next attempt may be made (Unix ms, the deliverer's clock), after a failure.
    #[serde(rename = "w", default, skip_serializing_if = "is_zero_u64")]
    pub retry_at_ms: u64,
    /// The deliverer's own state for this config (what it has told the receiver so far).
    #[serde(rename = "st", default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// One config of a task, with its cursor as stored (`raw`, for the compare and set).
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub id: String,
    pub config: String,
    pub cursor: PushCursor,
    pub raw_cursor: String,
}

/// One outbox entry: a task's event, and when the script that published it ran (Unix ms,
/// Redis clock). Entries read `<ms>|<seq>|<event>|<data json>` (`push_outbox.lua`); one
/// written before entries were stamped (`<seq>|<event>|<data json>`) has no time.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEvent {
    pub seq: u64,
    pub event: String,
    pub data: serde_json::Value,
    pub at_ms: Option<u64>,
}

impl OutboxEvent {
    /// Parses an outbox entry; an entry that does not parse keeps its place as event 0, which
    /// nothing delivers and every release trims.
    pub fn parse(entry: &str) -> OutboxEvent {
        // A stamped entry's second field is the seq (digits); an unstamped one's is the event's
        // name, never digits alone.
        let stamped = entry.split_once('|').and_then(|(at, rest)| {
            let at = at.parse::<u64>().ok()?;
            let (seq, _) = rest.split_once('|')?;
            seq.parse::<u64>().ok()?;
            Some((at, rest))
        });
        let (at_ms, event) = match stamped {
            Some((at, rest)) => (Some(at), replies::event(rest)),
            None => (None, replies::event(entry)),
        };
        match event {
            Ok(event) => OutboxEvent {
                seq: event.seq,
                event: event.event,
                data: event.data,
                at_ms,
            },
            Err(_) => OutboxEvent {
                seq: 0,
                event: String::new(),
                data: serde_json::Value::Null,
                at_ms,
            },
        }
    }

    /// The event as the rest of the store speaks of it.
    pub fn stored(&self) -> StoredEvent {
        StoredEvent {
            seq: self.seq,
            event: self.event.clone(),
            data: self.data.clone(),
        }
    }
}

/// A claimed task's deliveries: its configs and the events its outbox holds.
#[derive(Debug, Clone, Default)]
pub struct PushBatch {
    pub configs: Vec<LoadedConfig>,
    /// In outbox order, one per entry.
    pub events: Vec<OutboxEvent>,
    /// The outbox's length when read.
    pub outbox_len: usize,
    /// Events full outboxes of the task's shard dropped since a deliverer last looked: taken
    /// (GETDEL) with this load, so each drop is reported by one deliverer, once.
    pub dropped: u64,
}

/// A claimed task, with the group its delivery slots count under: `a:<client address>` (its
/// creator's, or that of its latest config's put), else `o:<owner hash>`; `""` when its record
/// is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: String,
    pub group: String,
}

/// How a claim shares a deliverer's slots among groups ([`Claimed::group`]: client addresses,
/// so that minting tokens buys no more slots): tasks of groups with fewer than `share` under
/// way (`under_way`: the caller's count per group) first, the reserve (the slots past `cap`)
/// only to a group with none under way; then, while the caller's tasks under way stay below
/// `cap`, those of groups at their share; a due task of a group at its share that does not fit
/// is moved `postpone` ahead.
#[derive(Debug, Clone, Default)]
pub struct OwnerShare {
    pub share: usize,
    pub cap: usize,
    pub under_way: Vec<(String, usize)>,
    pub postpone: Duration,
}

/// What [`PushOutbox::put_config`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Stored,
    /// No such task (`existing` puts only).
    NoTask,
    /// The task has [`PushOutbox`]'s most configs already.
    Full,
}

/// Whether the task of a put exists yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    Existing,
    /// Ahead of the task's creation; expires after the given time unless confirmed.
    Pending(Duration),
}

/// How a claim ends: see [`PushOutbox::release`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Release {
    /// Events at the outbox's head that every config is done with.
    pub trim: usize,
    /// The outbox's length when loaded.
    pub loaded: usize,
    /// The earliest retry, when every config with events left waits on one.
    pub retry_in: Option<Duration>,
    /// The task is terminal and every config got (or gave up) its last event, or the task is
    /// gone: the outbox goes, and the configs expire with the task (the script reads its TTL).
    pub finished: bool,
}

/// The outbox in a [`RedisStore`]'s Redis and namespace. Cheap to clone.
#[derive(Clone)]
pub struct PushOutbox {
    store: RedisStore,
    max_configs: usize,
}

impl RedisStore {
    /// The push notification outbox of this store, with at most `max_configs` configs a task.
    pub fn push_outbox(&self, max_configs: usize) -> PushOutbox {
        PushOutbox {
            store: self.clone(),
            max_configs: max_configs.max(1),
        }
    }
}

impl PushOutbox {
    pub fn shard_count(&self) -> usize {
        self.store.shard_count()
    }

    /// Stores (or replaces) config `config_id` of `task_id`, put by a caller from client
    /// address `source` (the task's deliveries share slots by it).
    pub async fn put_config(
        &self,
        task_id: &str,
        config_id: &str,
        config: &str,
        mode: PutMode,
        source: Option<&str>,
    ) -> Result<PutOutcome, StoreError> {
        let push_put::PutReply(outcome) = push_put::call(
            &self.store,
            task_id,
            config_id,
            config,
            self.max_configs,
            mode,
            source,
        )
        .await?;
        Ok(outcome)
    }

    /// One config of a task, as stored.
    pub async fn config(
        &self,
        task_id: &str,
        config_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let keys = self.store.shard_keys(task_id);
        let mut cmd = redis::cmd("HGET");
        cmd.arg(keys.push_configs(task_id)).arg(config_id);
        self.store.query(&mut cmd).await
    }

    /// Every config of a task, by id.
    pub async fn configs(&self, task_id: &str) -> Result<Vec<(String, String)>, StoreError> {
        let keys = self.store.shard_keys(task_id);
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(keys.push_configs(task_id));
        let map: HashMap<String, String> = self.store.query(&mut cmd).await?;
        let mut configs: Vec<(String, String)> = map.into_iter().collect();
        configs.sort();
        Ok(configs)
    }

    /// Deletes one config; true when there was one.
    pub async fn delete_config(&self, task_id: &str, config_id: &str) -> Result<bool, StoreError> {
        let reply = push_delete::call(&self.store, task_id, config_id).await?;
        Ok(reply == push_delete::DeleteReply::Deleted)
    }

    /// Drops every config of a task that was never created (a pending put whose creation was
    /// refused).
    pub async fn discard(&self, task_id: &str) -> Result<(), StoreError> {
        let keys = self.store.shard_keys(task_id);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(keys.push_configs(task_id))
            .arg(keys.push_cursors(task_id))
            .arg(keys.push_outbox(task_id));
        let _: u64 = self.store.query(&mut cmd).await?;
        Ok(())
    }

    /// Claims up to `limit` due tasks of shard `shard` for `lease`, sharing them among client
    /// addresses as `share` says.
    pub async fn claim_due(
        &self,
        shard: usize,
        lease: Duration,
        limit: usize,
        share: &OwnerShare,
    ) -> Result<Vec<Claimed>, StoreError> {
        let Some(keys) = self.store.all_shard_keys().nth(shard) else {
            return Ok(Vec::new());
        };
        let push_claim::ClaimReply(claimed) =
            push_claim::call(&self.store, keys, lease, limit, share).await?;
        Ok(claimed)
    }

    /// A claimed task's configs, cursors and outbox.
    pub async fn load(&self, task_id: &str) -> Result<PushBatch, StoreError> {
        let keys = self.store.shard_keys(task_id);
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL")
            .arg(keys.push_configs(task_id))
            .cmd("HGETALL")
            .arg(keys.push_cursors(task_id))
            .cmd("LRANGE")
            .arg(keys.push_outbox(task_id))
            .arg(0)
            .arg(-1)
            .cmd("GETDEL")
            .arg(keys.push_dropped());
        let (configs, cursors, entries, dropped): Loaded = self.store.pipe(&pipe).await?;
        let mut loaded: Vec<LoadedConfig> = configs
            .into_iter()
            .map(|(id, config)| {
                let raw_cursor = cursors.get(&id).cloned().unwrap_or_default();
                // A config without a readable cursor starts from the outbox's first event.
                let cursor = serde_json::from_str(&raw_cursor).unwrap_or_default();
                LoadedConfig {
                    id,
                    config,
                    cursor,
                    raw_cursor,
                }
            })
            .collect();
        loaded.sort_by(|a, b| a.id.cmp(&b.id));
        let outbox_len = entries.len();
        let events = entries
            .iter()
            .map(|entry| OutboxEvent::parse(entry))
            .collect();
        Ok(PushBatch {
            configs: loaded,
            events,
            outbox_len,
            dropped: dropped.unwrap_or(0),
        })
    }

    /// Moves config `config_id`'s cursor from `read` (as loaded) to `next`; false when it
    /// changed meanwhile (another deliverer, a deleted config): the caller stops.
    pub async fn advance(
        &self,
        task_id: &str,
        config_id: &str,
        read: &str,
        next: &PushCursor,
    ) -> Result<bool, StoreError> {
        let next = serde_json::to_string(next)
            .map_err(|err| StoreError::Corrupt(format!("push cursor: {err}")))?;
        let reply = push_advance::call(&self.store, task_id, config_id, read, &next).await?;
        Ok(reply == push_advance::AdvanceReply::Moved)
    }

    /// Ends the claim on `task_id`.
    pub async fn release(&self, task_id: &str, release: Release) -> Result<(), StoreError> {
        push_release::call(&self.store, task_id, release).await?;
        Ok(())
    }

    /// Keeps an exhausted delivery (`record`: JSON, no credentials) for inspection.
    pub async fn record_exhausted(&self, task_id: &str, record: &str) -> Result<(), StoreError> {
        let keys = self.store.shard_keys(task_id);
        let mut pipe = redis::pipe();
        pipe.cmd("LPUSH")
            .arg(keys.push_exhausted())
            .arg(record)
            .ignore()
            .cmd("LTRIM")
            .arg(keys.push_exhausted())
            .arg(0)
            .arg(EXHAUSTED_KEPT - 1)
            .ignore();
        let () = self.store.pipe(&pipe).await?;
        Ok(())
    }

    /// The kept exhausted deliveries of every shard, newest first within each shard.
    pub async fn exhausted(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for keys in self.store.all_shard_keys() {
            let mut cmd = redis::cmd("LRANGE");
            cmd.arg(keys.push_exhausted()).arg(0).arg(-1);
            let records: Vec<String> = self.store.query(&mut cmd).await?;
            out.extend(records);
        }
        Ok(out)
    }

    /// Tasks with deliveries owed in every shard (due now or later, or claimed).
    pub async fn owed(&self) -> Result<u64, StoreError> {
        let mut total = 0;
        for keys in self.store.all_shard_keys() {
            let mut cmd = redis::cmd("ZCARD");
            cmd.arg(keys.push_due());
            let n: u64 = self.store.query(&mut cmd).await?;
            total += n;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::OutboxEvent;

    #[test]
    fn an_outbox_entry_carries_its_time_and_an_unstamped_one_none() {
        let stamped = OutboxEvent::parse(r#"1765000000123|7|progress|{"n":1}"#);
        assert_eq!(
            stamped,
            OutboxEvent {
                seq: 7,
                event: "progress".into(),
                data: json!({"n": 1}),
                at_ms: Some(1_765_000_000_123),
            }
        );
        let unstamped = OutboxEvent::parse(r#"7|statusUpdate|{"a":"x|y"}"#);
        assert_eq!(unstamped.seq, 7);
        assert_eq!(unstamped.event, "statusUpdate");
        assert_eq!(unstamped.data, json!({"a": "x|y"}));
        assert_eq!(unstamped.at_ms, None);
        for broken in ["", "x", "1|2", "12|3|delta|not json"] {
            assert_eq!(OutboxEvent::parse(broken).seq, 0, "{broken}");
        }
    }
}
