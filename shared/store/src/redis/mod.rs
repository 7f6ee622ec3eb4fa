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
//! - [`pool`], [`replay`], [`spans`], [`persistence`], [`schema`], [`memory`],
//!   [`subscriber`]: connections (one server or a cluster), the replay guard, script spans, the
//!   durability decision, the layout stamp, memory fill, pub/sub.

mod batch;
mod event_log;
mod feed;
pub mod fields;
mod finish;
mod keys;
mod listing;
mod memory;
mod persistence;
mod pool;
mod replay;
pub(crate) mod replies;
mod schema;
mod scripts;
mod shards;
mod spans;
mod subscriber;
mod sweep;
mod take;
mod tasks;

pub use keys::Keys;
pub use replay::REPLAY_TTL;
pub(crate) use scripts::guarded as guarded_script;
pub use shards::{MAX_SHARDS, capacity_per_shard, shard_index, shard_tag, tag_slot};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use redis::Value;

use self::batch::Batcher;
use self::pool::Connections;
use self::scripts::{PubSub, Scripts};
use self::shards::Shard;
use self::spans::Peer;
use self::subscriber::{Dispatcher, Source};
use super::{
    DEFAULT_MAX_LIVE_PER_ADDRESS, DEFAULT_MAX_LIVE_PER_OWNER, DEFAULT_MAX_RETAINED,
    DEFAULT_MAX_RETAINED_BYTES, DEFAULT_MAX_RETAINED_PER_OWNER, DEFAULT_MAX_TASKS,
    DEFAULT_RETENTION, Durability, StoreError,
};

pub use self::persistence::DurabilitySetting;

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone)]
pub struct RedisStoreConfig {
    pub url: String,
    /// Seed nodes of a Redis Cluster (`redis://host:port` each); when given, the store runs on
    /// the cluster and `url` is unused.
    pub cluster_urls: Vec<String>,
    /// Hash tag of every key; clusters sharing one Redis use different namespaces.
    pub namespace: String,
    /// Shards the namespace is split into ([`shards`]); every process of a namespace must use
    /// the same count, which the layout stamp records.
    pub shards: u16,
    /// Cap on non-terminal tasks, split evenly over the shards ([`capacity_per_shard`]).
    pub max_tasks: u64,
    /// Cap on stored tasks, terminal ones included, split over the shards like `max_tasks`:
    /// creation evicts the terminal tasks that expire first to stay under it (0: no cap).
    pub max_retained: u64,
    /// Cap on one owner's stored tasks, live and terminal, per shard its share (0: no cap):
    /// creation evicts the owner's oldest terminal task to stay under it.
    pub max_retained_per_owner: u64,
    /// Cap on one owner's non-terminal tasks, per shard its share (0: no cap).
    pub max_live_per_owner: u64,
    /// Cap on one client address's non-terminal tasks (those created with a `source`), per
    /// shard its share (0: no cap).
    pub max_live_per_address: u64,
    /// Cap on the bytes terminal tasks keep (record and event log, as `MEMORY USAGE`
    /// measures them when the task finishes), split over the shards like `max_tasks`:
    /// creation evicts the terminal tasks that expire first to stay under it (0: no cap).
    pub max_retained_bytes: u64,
    /// How long terminal tasks are kept.
    pub retention: Duration,
    /// Events kept per task for late subscribers and reconnects.
    pub event_log_len: usize,
    /// How long a subscription waits without hearing anything before it re-reads its task's
    /// log anyway: the bound on how late an event reaches a subscriber when its pub/sub
    /// message was lost without a sign (a subscription caught on a Redis Cluster node while
    /// that node stopped serving the channel's slot).
    pub idle_recheck: Duration,
    pub pool_size: usize,
    /// Bound on connecting, waiting for a pooled connection and each reply.
    pub timeout: Duration,
    /// What the store declares about its writes: read from the server's persistence settings
    /// at connect ([`DurabilitySetting::Detect`]), or stated by the operator where `CONFIG` is
    /// disabled (managed Redis).
    pub durability: DurabilitySetting,
    /// Replicas every script's writes must reach (WAIT) before the store acknowledges them, on
    /// a Redis Cluster. `None`: one when the operator declares the cluster `durable` (so that a
    /// failover, which promotes a replica, keeps every acknowledged write), none otherwise.
    pub wait_replicas: Option<usize>,
}

impl RedisStoreConfig {
    pub fn new(url: impl Into<String>) -> Self {
        RedisStoreConfig {
            url: url.into(),
            cluster_urls: Vec::new(),
            namespace: "tc".into(),
            shards: 1,
            max_tasks: DEFAULT_MAX_TASKS,
            max_retained: DEFAULT_MAX_RETAINED,
            max_retained_per_owner: DEFAULT_MAX_RETAINED_PER_OWNER,
            max_live_per_owner: DEFAULT_MAX_LIVE_PER_OWNER,
            max_live_per_address: DEFAULT_MAX_LIVE_PER_ADDRESS,
            max_retained_bytes: DEFAULT_MAX_RETAINED_BYTES,
            retention: DEFAULT_RETENTION,
            event_log_len: 64,
            idle_recheck: Duration::from_secs(15),
            pool_size: 32,
            timeout: Duration::from_secs(2),
            durability: DurabilitySetting::Detect,
            wait_replicas: None,
        }
    }
}

/// The durable store. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    client: redis::Client,
    dispatcher: Dispatcher,
    /// Connections reserved for blocking reads (BLPOP on doorbells): a blocked connection
    /// cannot carry other commands, so these never serve anything else.
    blocking: Mutex<Vec<Blocking>>,
    /// Decided once at connect (see [`persistence`]).
    durability: Durability,
    /// The batch lanes of each shard's single-slot scripts, by shard index.
    lanes: Vec<ShardLanes>,
    /// This process's name in its notify channels (`Keys::notify_channel`): random, so that
    /// no two processes share one.
    process: String,
    /// Takes go through one lane for every shard: it visits the shards in turn.
    takes: Batcher<take::TakeRequest, take::TakeOutcome>,
    shutdown: CancellationToken,
}

/// One shard's batchers: a batch is one script call, so it never mixes shards.
struct ShardLanes {
    creates: Batcher<ScriptItem, Value>,
    activations: Batcher<ScriptItem, Value>,
    swaps: Batcher<ScriptItem, Value>,
    finishes: Batcher<finish::FinishRequest, finish::FinishOutcome>,
}

/// What the batch lanes share with the store: connections, key names, scripts, settings.
pub(crate) struct Core {
    config: RedisStoreConfig,
    connections: Connections,
    /// Namespace-wide keys (registry, layout stamp, idempotency, credentials); tasks' keys and
    /// channels are their shard's.
    keys: Keys,
    /// The namespace's shards, by index ([`shards`]).
    shards: Vec<Shard>,
    scripts: Scripts,
    /// Replicas each script's writes must reach before it returns (WAIT; Redis Cluster only).
    wait_replicas: usize,
    /// Counts finishes: every [`FINISH_ROTATION`]th one takes from the shards in turn instead
    /// of from its own shard.
    finish_turns: AtomicUsize,
    /// Counts takes: each starts its visit of the shards one further along, so that no shard
    /// is always served last.
    take_turns: AtomicUsize,
    /// The server, as script spans name it.
    peer: Peer,
}

/// With several shards, a finish takes the next task from its own shard (one call), except
/// every this many finishes, which take from the shards in turn: a worker kept busy by one
/// shard still visits the others, so no shard's queue starves.
const FINISH_ROTATION: usize = 4;

/// A connection reserved for blocking reads.
enum Blocking {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Blocking {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self {
            Blocking::Single(conn) => cmd.query_async(conn).await,
            Blocking::Cluster(conn) => cmd.query_async(conn).await,
        }
    }
}

/// One item of a batched script call: its own keys and arguments, after the call's shared ones.
pub(crate) struct ScriptItem {
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

impl Core {
    /// The shard that holds task `id`.
    pub(crate) fn shard_of(&self, id: &str) -> &Shard {
        let index = shards::shard_index(id, self.shards.len());
        &self.shards[index.min(self.shards.len() - 1)]
    }

    /// True when this finish should take from the shards in turn rather than its own.
    pub(crate) fn finish_rotates(&self) -> bool {
        self.shards.len() > 1
            && self
                .finish_turns
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(FINISH_ROTATION)
    }

    /// Marks the queue of `entrypoint` in task `id`'s shard as holding work: this process
    /// just queued the task there (a create, a hand-off), so its own next take need not wait
    /// for the doorbell to learn it.
    pub(crate) fn queued_here(&self, id: &str, entrypoint: &str) {
        self.shard_of(id).hints.rang(entrypoint);
    }

    /// The shard a take starts its visit at (modulo the shard count).
    pub(crate) fn next_take_turn(&self) -> usize {
        self.take_turns.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs one pipeline per shard concurrently (each pipeline's keys in its own shard), in
    /// shard order.
    pub(crate) async fn pipe_per_shard<T: redis::FromRedisValue>(
        &self,
        pipes: Vec<redis::Pipeline>,
    ) -> Result<Vec<T>, StoreError> {
        futures::future::try_join_all(pipes.iter().map(|pipe| async move {
            if pipe.is_empty() {
                // Nothing to ask this shard: the empty reply, without a round trip.
                return redis::from_redis_value(Value::Array(Vec::new()))
                    .map_err(|err| StoreError::Corrupt(err.to_string()));
            }
            self.pipe(pipe).await
        }))
        .await
    }

    /// Runs a pipeline.
    async fn pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        self.connections.pipe(pipe).await
    }

    /// Runs one command.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        self.connections.query(cmd).await
    }

    /// Runs a script invocation (EVALSHA, reloading on NOSCRIPT) on a pooled connection, in a
    /// CLIENT span named `script` when the caller is traced. `keys` names the slot the script
    /// writes (the namespace's or a shard's): where it must be replicated before the reply.
    async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        keys: &Keys,
        invocation: &mut redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let replicated = (self.wait_replicas > 0).then(|| pool::Replicated {
            route_key: keys.tag(),
            replicas: self.wait_replicas,
            // Half the reply bound: WAIT answers (with a count short of the replicas) before
            // the client gives up on the reply.
            timeout: (self.config.timeout / 2).max(Duration::from_millis(1)),
        });
        self.connections
            .eval(invocation, keys.tag(), replicated)
            .instrument(self.peer.script_span(script))
            .await
    }

    /// [`Self::eval`] without waiting for replicas: for reads, and for writes a failover may
    /// lose harmlessly (the registry's heartbeats, which the next tick writes again; the layout
    /// stamp, which the next process writes again).
    async fn eval_unreplicated<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        keys: &Keys,
        invocation: &mut redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.connections
            .eval(invocation, keys.tag(), None)
            .instrument(self.peer.script_span(script))
            .await
    }

    /// A traced caller's span around a batched call of `script` (the batch itself runs on a
    /// lane task that has no caller).
    pub(crate) fn script_span(&self, script: &'static str) -> tracing::Span {
        self.peer.script_span(script)
    }
}

/// A batcher for one script: shared keys and arguments first, then each item's.
fn batched(
    core: &Arc<Core>,
    shard: usize,
    lanes: usize,
    script: &'static str,
    pick: fn(&Scripts) -> &redis::Script,
    shared_keys: Vec<String>,
    shared_args: Vec<String>,
) -> Batcher<ScriptItem, Value> {
    let core = core.clone();
    let shared = Arc::new((shared_keys, shared_args));
    Batcher::start(lanes, 256, move |items: Vec<ScriptItem>| {
        let core = core.clone();
        let shared = shared.clone();
        async move {
            let mut invocation = pick(&core.scripts).prepare_invoke();
            for key in &shared.0 {
                invocation.key(key);
            }
            for arg in &shared.1 {
                invocation.arg(arg);
            }
            for item in &items {
                for key in &item.keys {
                    invocation.key(key);
                }
                for arg in &item.args {
                    invocation.arg(arg);
                }
            }
            core.eval::<Vec<Value>>(script, &core.shards[shard].keys, &mut invocation)
                .await
        }
    })
}

/// The batchers of shard `index`: each script module packs its lane's shared keys and
/// arguments (that shard's).
fn shard_lanes(core: &Arc<Core>, index: usize) -> ShardLanes {
    let lanes = 4;
    ShardLanes {
        creates: scripts::create::lane(core, index, lanes),
        activations: scripts::activate::lane(core, index, lanes),
        swaps: scripts::cas::lane(core, index, lanes),
        // Two lanes: one call in flight while the next batch gathers; each pops its own
        // tasks in the script, so the two never contend for the same ones.
        finishes: {
            let core = core.clone();
            Batcher::start(2, 256, move |requests| {
                finish::finish_batch(core.clone(), index, requests)
            })
        },
    }
}

impl RedisStore {
    /// Connects and checks that Redis answers.
    pub async fn connect(config: RedisStoreConfig) -> Result<RedisStore, StoreError> {
        // Blocking reads use their own connections: to `url`, or to the first cluster seed.
        let first_url = config
            .cluster_urls
            .first()
            .cloned()
            .unwrap_or_else(|| config.url.clone());
        let client = redis::Client::open(first_url.as_str())?;
        // One server: classic pub/sub. A cluster: sharded pub/sub, each task's channel in its
        // shard's slot, so events stay on the master that wrote them.
        let (pubsub, subscribe_from) = if config.cluster_urls.is_empty() {
            (PubSub::Classic, Source::Server(client.clone()))
        } else {
            let urls = config.cluster_urls.clone();
            let timeout = config.timeout;
            (PubSub::Sharded, Source::Cluster { urls, timeout })
        };
        let connections = Connections::open(
            &config.url,
            &config.cluster_urls,
            config.pool_size,
            config.timeout,
        )
        .await?;
        if config.shards == 0 || config.shards > MAX_SHARDS {
            return Err(StoreError::Incompatible(format!(
                "shard count {} is out of range: 1 to {MAX_SHARDS}",
                config.shards
            )));
        }
        let shutdown = CancellationToken::new();
        let keys = Keys::new(&config.namespace);
        let shards = Shard::all(&config.namespace, config.shards);
        let durability_setting = config.durability;
        let wait_replicas = if config.cluster_urls.is_empty() {
            0
        } else {
            config
                .wait_replicas
                .unwrap_or(if durability_setting == DurabilitySetting::Durable {
                    1
                } else {
                    0
                })
        };
        let core = Arc::new(Core {
            wait_replicas,
            keys: keys.clone(),
            shards,
            scripts: Scripts::load(pubsub),
            finish_turns: AtomicUsize::new(0),
            take_turns: AtomicUsize::new(0),
            peer: Peer::from_url(&first_url),
            config,
            connections,
        });
        // Also the first round trip: an unreachable Redis fails here.
        let durability = persistence::decide(&core, durability_setting).await?;
        let lanes = core
            .shards
            .iter()
            .map(|shard| shard_lanes(&core, shard.index))
            .collect();
        let store = RedisStore {
            inner: Arc::new(Inner {
                lanes,
                process: uuid::Uuid::new_v4().simple().to_string(),
                // One lane: the takers of this process never race each other.
                takes: {
                    let core = core.clone();
                    Batcher::start(1, 1_024, move |requests| {
                        take::take_batch(core.clone(), requests)
                    })
                },
                dispatcher: Dispatcher::start(subscribe_from, shutdown.clone()),
                blocking: Mutex::new(Vec::new()),
                durability,
                core,
                client,
                shutdown,
            }),
        };
        store.ping().await?;
        store.check_layout().await?;
        Ok(store)
    }

    /// What this store's acknowledgements are worth, as decided at connect.
    pub fn declared_durability(&self) -> Durability {
        self.inner.durability
    }

    pub fn config(&self) -> &RedisStoreConfig {
        &self.inner.core.config
    }

    /// The namespace-wide keys (registry, layout stamp); a task's keys and channels are its
    /// shard's ([`Self::shard_keys`]).
    pub fn keys(&self) -> &Keys {
        &self.inner.core.keys
    }

    /// The keys of the shard that holds task `id`.
    pub fn shard_keys(&self, id: &str) -> &Keys {
        &self.inner.core.shard_of(id).keys
    }

    /// How many shards the namespace is split into.
    pub fn shard_count(&self) -> usize {
        self.inner.core.shards.len()
    }

    /// The batchers of the shard that holds task `id`.
    fn lanes_of(&self, id: &str) -> &ShardLanes {
        let index = self.inner.core.shard_of(id).index;
        &self.inner.lanes[index]
    }

    /// Round trip to Redis (readiness checks).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("PING");
        let _: String = self.query(&mut cmd).await?;
        Ok(())
    }

    /// Runs one command on a pooled connection.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &mut redis::Cmd,
    ) -> Result<T, StoreError> {
        self.inner.core.query(cmd).await
    }

    /// Runs a pipeline on a pooled connection.
    pub(crate) async fn pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        self.inner.core.pipe(pipe).await
    }

    /// Runs a script invocation (EVALSHA, reloading on NOSCRIPT) on a pooled connection, over
    /// keys of the namespace's own slot (registry, idempotency, credentials, layout).
    pub(crate) async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        invocation: &mut redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let core = &self.inner.core;
        core.eval(script, &core.keys, invocation).await
    }

    /// [`Self::eval`] over keys of the slot `keys` names (a shard's): the push outbox's
    /// writes, which wait for replicas as a task's transitions do.
    pub(crate) async fn eval_in<T: redis::FromRedisValue>(
        &self,
        keys: &Keys,
        script: &'static str,
        invocation: &mut redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.inner.core.eval(script, keys, invocation).await
    }

    /// Every shard's keys, in shard order (one entry when unsharded).
    pub fn all_shard_keys(&self) -> impl Iterator<Item = &Keys> {
        self.inner.core.shards.iter().map(|shard| &shard.keys)
    }

    /// [`Self::eval`] without waiting for replicas (see `Core::eval_unreplicated`), over keys
    /// of the slot `keys` names (the namespace's or a shard's).
    pub(crate) async fn eval_unreplicated<T: redis::FromRedisValue>(
        &self,
        keys: &Keys,
        script: &'static str,
        invocation: &mut redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.inner
            .core
            .eval_unreplicated(script, keys, invocation)
            .await
    }

    /// A new connection for blocking reads: to the server, or a cluster connection of its own
    /// (a blocked node connection cannot carry the store's other commands).
    async fn blocking_connection(&self) -> Result<Blocking, StoreError> {
        let config = &self.inner.core.config;
        if config.cluster_urls.is_empty() {
            let connection = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.timeout))
                .set_response_timeout(None);
            return Ok(Blocking::Single(
                self.inner
                    .client
                    .get_multiplexed_async_connection_with_config(&connection)
                    .await?,
            ));
        }
        let client = pool::cluster_client(&config.cluster_urls, None)?;
        Ok(Blocking::Cluster(client.get_async_connection().await?))
    }

    /// Blocks on the doorbells of `entrypoints` in every shard for up to `wait`; true when one
    /// rang. The shard and entrypoint that rang are marked as holding work ([`take::Hints`]), so
    /// the next take visits that shard; a wait that times out forgets what was known of
    /// `entrypoints` everywhere, so the next take looks at every shard (a task whose ring
    /// another process took is still found). One blocking read covers them all, except on a
    /// Redis Cluster with several shards, where a command cannot name keys of several slots:
    /// there each shard gets its own read, and the first ring ends the wait
    /// ([`Self::wait_for_any_shard`]).
    async fn wait_for_doorbell(
        &self,
        entrypoints: &[String],
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let core = &self.inner.core;
        let wake_keys = |shard: &Shard| -> Vec<String> {
            entrypoints.iter().map(|ep| shard.keys.wake(ep)).collect()
        };
        let clustered = matches!(core.connections, Connections::Cluster { .. });
        let rang = if !clustered || core.shards.len() == 1 {
            let keys: Vec<String> = core.shards.iter().flat_map(wake_keys).collect();
            self.blocking_pop(&keys, wait).await?
        } else {
            self.wait_for_any_shard(core.shards.iter().map(wake_keys).collect(), wait)
                .await?
        };
        let Some(key) = rang else {
            for shard in &core.shards {
                shard.hints.forget(entrypoints);
            }
            return Ok(false);
        };
        // The key that rang names its shard (by its tag) and its entrypoint (after it).
        if let Some((shard, entrypoint)) = core
            .shards
            .iter()
            .find_map(|shard| Some((shard, key.strip_prefix(&shard.keys.wake(""))?)))
        {
            shard.hints.rang(entrypoint);
        }
        Ok(true)
    }

    /// One blocking read per group of keys, concurrently; the key of the first ring. A read
    /// that rings after the wait ended puts its ring back, so that another worker gets it.
    async fn wait_for_any_shard(
        &self,
        groups: Vec<Vec<String>>,
        wait: Duration,
    ) -> Result<Option<String>, StoreError> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(groups.len());
        for keys in groups {
            let store = self.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let popped = store.blocking_pop(&keys, wait).await;
                if let Err(tokio::sync::mpsc::error::SendError(Ok(Some(key)))) =
                    tx.send(popped).await
                {
                    store.ring_again(&key).await;
                }
            });
        }
        drop(tx);
        let mut failure = None;
        let mut rang = None;
        while let Some(popped) = rx.recv().await {
            match popped {
                Ok(Some(key)) => {
                    rang = Some(key);
                    break;
                }
                Ok(None) => {}
                Err(err) => failure = Some(err),
            }
        }
        // Reads still blocked will find the channel closed and put their rings back; rings
        // already delivered but unread are put back here.
        rx.close();
        while let Ok(popped) = rx.try_recv() {
            if let Ok(Some(key)) = popped {
                self.ring_again(&key).await;
            }
        }
        match failure {
            Some(err) if rang.is_none() => Err(err),
            _ => Ok(rang),
        }
    }

    /// Puts back a doorbell ring nobody will act on.
    async fn ring_again(&self, wake_key: &str) {
        let mut pipe = redis::pipe();
        pipe.cmd("LPUSH")
            .arg(wake_key)
            .arg("1")
            .ignore()
            .cmd("PEXPIRE")
            .arg(wake_key)
            .arg(60_000)
            .ignore();
        if let Err(err) = self.pipe::<()>(&pipe).await {
            tracing::debug!(error = %err, "could not put a doorbell ring back");
        }
    }

    /// BLPOP on `keys` for up to `wait`: the key that rang, if one did.
    async fn blocking_pop(
        &self,
        keys: &[String],
        wait: Duration,
    ) -> Result<Option<String>, StoreError> {
        let taken = self.inner.blocking.lock().await.pop();
        let mut conn = match taken {
            Some(conn) => conn,
            // No response timeout here: the server holds the reply for `wait` on purpose; the
            // client-side bound below is `wait` plus the usual timeout.
            None => self.blocking_connection().await?,
        };
        let seconds = wait.as_secs_f64().max(0.01);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(keys).arg(seconds);
        let bound = wait + self.inner.core.config.timeout;
        let reply: Result<Result<Option<(String, String)>, redis::RedisError>, _> =
            tokio::time::timeout(bound, conn.query(&cmd)).await;
        match reply {
            Ok(Ok(rang)) => {
                self.inner.blocking.lock().await.push(conn);
                Ok(rang.map(|(key, _)| key))
            }
            Ok(Err(err)) => {
                // The spares broke with this one (a Redis restart): open fresh ones next time.
                self.inner.blocking.lock().await.clear();
                Err(err.into())
            }
            Err(_) => Err(StoreError::Unavailable("blocking read timed out".into())),
        }
    }

    /// Listens for cancellations of tasks that `worker_id` holds: yields task ids. Each shard
    /// publishes on its own channel for the worker (in the shard's slot), so this listens on
    /// all of them.
    pub(super) async fn cancellation_feed(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError> {
        let listeners = futures::future::try_join_all(self.inner.core.shards.iter().map(|shard| {
            self.inner
                .dispatcher
                .listen(shard.keys.worker_channel(worker_id))
        }))
        .await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for mut listener in listeners {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(signal) = listener.signals.recv().await {
                    if let subscriber::Signal::Message(id) = signal
                        && tx.send(id).is_err()
                    {
                        break;
                    }
                }
            });
        }
        Ok(rx)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
