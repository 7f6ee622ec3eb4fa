//! RedisStore: the durable task store of the cluster.
//!
//! - every transition is one Lua script (`shared/store/lua/`), timed by Redis `TIME`;
//! - every key a script touches is declared in KEYS and carries the namespace hash tag
//!   ([`keys`]);
//! - leases are fenced by owner and a per-task epoch; their deadlines live in a sorted set that
//!   the recovery sweep reads ([`TaskStore::recover_expired`]);
//! - the live set counts non-terminal tasks exactly: only the scripts that finish a task remove
//!   from it, once;
//! - events are numbered per task, kept in a short log and published on a channel named from
//!   the owner hash and task id ([`subscriber`]).
//!
//! Round trips: create 1; take 2 (peek, claim) for up to `max` tasks, claimed and activated
//! together by `take_active`; terminal write 1, which also takes and activates the worker's
//! next task (`finish_and_take`, [`finish`]), so a busy worker makes about one per task;
//! heartbeat 1 per worker per tick whatever its number of leases. Concurrent creates,
//! activations, compare-and-sets and finishes of one process share calls ([`batch`]).
//!
//! Module map:
//! - [`scripts`]: one module per task-store Lua script (`scripts/create.rs` for `create.lua`,
//!   ...): the script's contract, its KEYS/ARGV packing (batch items and lanes included), its
//!   typed reply, and the call; `scripts/mod.rs` holds the loaded set and the replay-guard
//!   wrapping ([`scripts::guarded`], also used by the credential, idempotency, registry and
//!   rate-limit stores);
//! - [`tasks`]: the [`crate::TaskStore`] impl, glue from typed replies to the contract;
//!   [`listing`] (owner listings), [`feed`] (subscriptions and gap-free event streams),
//!   [`sweep`] (recovery and reaping over the shards);
//! - [`take`] and [`finish`]: the batched take and finish-and-take paths, with the per-shard
//!   hints of where work may be queued; [`batch`]: the batch lanes;
//! - [`keys`], [`shards`], [`fields`], [`replies`], [`event_log`]: key names, shard routing,
//!   record field names, record parsing, events rebuilt from records;
//! - [`config`], [`connect`], [`doorbell`]: the settings, the store with what its clones and
//!   lanes share (connect, commands, script calls), and a worker's waits (queue doorbells,
//!   cancellations);
//! - [`pool`], [`replay`], [`spans`], [`persistence`], [`schema`], [`memory`],
//!   [`subscriber`]: connections (one server or a cluster), the replay guard, script spans, the
//!   durability decision, the layout stamp, memory fill, pub/sub.

mod batch;
mod config;
mod connect;
mod doorbell;
mod event_log;
mod failed;
mod feed;
pub mod fields;
mod finish;
mod functions;
mod invocation;
mod keys;
mod listing;
mod memory;
mod persistence;
mod pool;
mod replay;
pub(crate) mod replies;
mod schema;
pub(crate) mod scripts;
mod shards;
mod spans;
mod subscriber;
mod sweep;
mod take;
mod tasks;

pub use config::RedisStoreConfig;
pub use connect::RedisStore;
pub(crate) use connect::{Core, ScriptItem};
pub use invocation::{ScriptCall, StoreScript};
pub use keys::Keys;
pub use persistence::DurabilitySetting;
pub use replay::REPLAY_TTL;
pub(crate) use scripts::guarded as guarded_script;
pub use shards::{MAX_SHARDS, capacity_per_shard, shard_index, shard_tag, tag_slot};

// For the script modules that batch (`scripts::{create, activate, cas}::lane`).
use connect::batched;
