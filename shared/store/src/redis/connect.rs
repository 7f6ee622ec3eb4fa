//! The store itself: [`RedisStore`] (cheap to clone), what its clones share ([`Inner`]: the
//! batch lanes, the pub/sub dispatcher, the blocking connections) and what the lanes share
//! ([`Core`]: connections, key names, shards, the loaded scripts), with [`RedisStore::connect`]
//! and the calls every other file runs commands and scripts through.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::Value;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::batch::Batcher;
use super::doorbell::Blocking;
use super::functions::{self, Library};
use super::pool::{self, Connections};
use super::scripts::{self, PubSub, Scripts};
use super::shards::{self, MAX_SHARDS, Shard};
use super::spans::Peer;
use super::subscriber::{Dispatcher, Source};
use super::{DurabilitySetting, Keys, RedisStoreConfig, finish, persistence, take};
use crate::{Durability, StoreError};

/// The durable store. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct RedisStore {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) core: Arc<Core>,
    pub(super) client: redis::Client,
    pub(super) dispatcher: Dispatcher,
    /// Connections reserved for blocking reads (BLPOP on doorbells): a blocked connection
    /// cannot carry other commands, so these never serve anything else.
    pub(super) blocking: Mutex<Vec<Blocking>>,
    /// Decided once at connect (see [`persistence`]).
    pub(super) durability: Durability,
    /// The batch lanes of each shard's single-slot scripts, by shard index.
    pub(super) lanes: Vec<ShardLanes>,
    /// This process's name in its notify channels (`Keys::notify_channel`): random, so that
    /// no two processes share one.
    pub(super) process: String,
    /// Takes go through one lane for every shard: it visits the shards in turn.
    pub(super) takes: Batcher<take::TakeRequest, take::TakeOutcome>,
    pub(super) shutdown: CancellationToken,
}

/// One shard's batchers: a batch is one script call, so it never mixes shards.
pub(super) struct ShardLanes {
    pub(super) creates: Batcher<ScriptItem, Value>,
    pub(super) activations: Batcher<ScriptItem, Value>,
    pub(super) swaps: Batcher<ScriptItem, Value>,
    pub(super) finishes: Batcher<finish::FinishRequest, finish::FinishOutcome>,
}

/// What the batch lanes share with the store: connections, key names, scripts, settings.
pub(crate) struct Core {
    pub(super) config: RedisStoreConfig,
    pub(super) connections: Connections,
    /// Namespace-wide keys (registry, layout stamp, idempotency, credentials); tasks' keys and
    /// channels are their shard's.
    pub(super) keys: Keys,
    /// The namespace's shards, by index ([`shards`]).
    pub(super) shards: Vec<Shard>,
    pub(super) scripts: Scripts,
    /// Replicas each script's writes must reach before it returns (WAIT; Redis Cluster only).
    pub(super) wait_replicas: usize,
    /// Counts finishes: every [`FINISH_ROTATION`]th one takes from the shards in turn instead
    /// of from its own shard.
    pub(super) finish_turns: AtomicUsize,
    /// Counts takes: each starts its visit of the shards one further along, so that no shard
    /// is always served last.
    pub(super) take_turns: AtomicUsize,
    /// The server, as script spans name it.
    pub(super) peer: Peer,
}

/// With several shards, a finish takes the next task from its own shard (one call), except
/// every this many finishes, which take from the shards in turn: a worker kept busy by one
/// shard still visits the others, so no shard's queue starves.
pub(super) const FINISH_ROTATION: usize = 4;

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
    pub(super) async fn pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        self.connections.pipe(pipe).await
    }

    /// Runs one command.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        self.connections.query(cmd).await
    }

    /// Runs a script invocation (EVALSHA, reloading on NOSCRIPT) on a pooled connection, in a
    /// CLIENT span named `script` when the caller is traced. `keys` names the slot the script
    /// writes (the namespace's or a shard's): where it must be replicated before the reply.
    pub(super) async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        keys: &Keys,
        invocation: &mut super::invocation::ScriptCall<'_>,
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
    pub(super) async fn eval_unreplicated<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        keys: &Keys,
        invocation: &mut super::invocation::ScriptCall<'_>,
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
pub(super) fn batched(
    core: &Arc<Core>,
    shard: usize,
    lanes: usize,
    script: &'static str,
    pick: fn(&Scripts) -> &super::invocation::StoreScript,
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
        // Boxed: connect's own future stays the size it was (callers hold it on their stack).
        let library = Box::pin(load_library(&connections, pubsub, config.functions)).await?;
        let core = Arc::new(Core {
            wait_replicas,
            keys: keys.clone(),
            shards,
            scripts: Scripts::load(pubsub, library.as_ref()),
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
    pub(super) fn lanes_of(&self, id: &str) -> &ShardLanes {
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
        invocation: &mut super::invocation::ScriptCall<'_>,
    ) -> Result<T, StoreError> {
        let core = &self.inner.core;
        core.eval(script, &core.keys, invocation).await
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
        invocation: &mut super::invocation::ScriptCall<'_>,
    ) -> Result<T, StoreError> {
        self.inner
            .core
            .eval_unreplicated(script, keys, invocation)
            .await
    }
}

/// The store's Redis Functions library, loaded (`functions.rs`); `None` where the store calls
/// its scripts by `EVALSHA`: functions turned off, or a server that cannot run them. Also the
/// first round trip: a pool that cannot connect fails here (an unreachable Redis otherwise
/// fails at the next one).
async fn load_library(
    connections: &Connections,
    pubsub: PubSub,
    enabled: bool,
) -> Result<Option<Arc<Library>>, StoreError> {
    if !enabled {
        tracing::info!("Redis Functions turned off: scripts run by EVALSHA");
        return Ok(None);
    }
    let library = Library::build(&Scripts::bodies(), pubsub);
    match connections
        .query_answer::<String>(&library.load_command())
        .await?
    {
        Ok(_) => {
            tracing::debug!(library = library.name(), "Redis Functions library loaded");
            Ok(Some(Arc::new(library)))
        }
        Err(err) if functions::already_loaded(&err) => {
            tracing::debug!(
                library = library.name(),
                "Redis Functions library already loaded"
            );
            Ok(Some(Arc::new(library)))
        }
        Err(err) if functions::unsupported(&err) => {
            tracing::info!(
                reason = %err,
                "this Redis cannot load the store's functions: scripts run by EVALSHA"
            );
            Ok(None)
        }
        // A cluster master down or failing over at this moment: the library stays in use, and
        // the first call on each master that lacks it loads it there.
        Err(err) => {
            tracing::warn!(reason = %err, "the Redis Functions library is not loaded yet");
            Ok(Some(Arc::new(library)))
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
