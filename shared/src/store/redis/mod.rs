//! RedisStore: the durable task store of the cluster.
//!
//! - every transition is one Lua script (`shared/lua/`), timed by Redis `TIME`;
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

mod batch;
mod event_log;
pub mod fields;
mod finish;
mod keys;
mod persistence;
mod pool;
mod replies;
mod schema;
mod scripts;
mod spans;
mod subscriber;
mod take;
mod tasks;

pub use keys::Keys;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use redis::Value;

use self::batch::Batcher;
use self::pool::Connections;
use self::scripts::Scripts;
use self::spans::Peer;
use self::subscriber::Dispatcher;
use super::{DEFAULT_MAX_TASKS, DEFAULT_RETENTION, Durability, StoreError};

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
    /// Cluster-wide cap on non-terminal tasks.
    pub max_tasks: u64,
    /// How long terminal tasks are kept.
    pub retention: Duration,
    /// Events kept per task for late subscribers and reconnects.
    pub event_log_len: usize,
    pub pool_size: usize,
    /// Bound on connecting, waiting for a pooled connection and each reply.
    pub timeout: Duration,
    /// What the store declares about its writes: read from the server's persistence settings
    /// at connect ([`DurabilitySetting::Detect`]), or stated by the operator where `CONFIG` is
    /// disabled (managed Redis).
    pub durability: DurabilitySetting,
}

impl RedisStoreConfig {
    pub fn new(url: impl Into<String>) -> Self {
        RedisStoreConfig {
            url: url.into(),
            cluster_urls: Vec::new(),
            namespace: "tc".into(),
            max_tasks: DEFAULT_MAX_TASKS,
            retention: DEFAULT_RETENTION,
            event_log_len: 64,
            pool_size: 32,
            timeout: Duration::from_secs(2),
            durability: DurabilitySetting::Detect,
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
    creates: Batcher<ScriptItem, Value>,
    activations: Batcher<ScriptItem, Value>,
    swaps: Batcher<ScriptItem, Value>,
    takes: Batcher<take::TakeRequest, take::TakeOutcome>,
    finishes: Batcher<finish::FinishRequest, finish::FinishOutcome>,
    shutdown: CancellationToken,
}

/// What the batch lanes share with the store: connections, key names, scripts, settings.
pub(crate) struct Core {
    config: RedisStoreConfig,
    connections: Connections,
    keys: Keys,
    scripts: Scripts,
    /// Queue heads the last take or finish saw: candidates of the next finish.
    heads: take::Heads,
    /// The server, as script spans name it.
    peer: Peer,
}

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
    /// CLIENT span named `script` when the caller is traced.
    async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.connections
            .eval(invocation)
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
            core.eval::<Vec<Value>>(script, &invocation).await
        }
    })
}

impl RedisStore {
    /// Connects and checks that Redis answers.
    pub async fn connect(config: RedisStoreConfig) -> Result<RedisStore, StoreError> {
        // Pub/sub and blocking reads use their own connections: to `url`, or to the first
        // cluster seed (classic pub/sub reaches every node of a cluster).
        let subscribe_url = config
            .cluster_urls
            .first()
            .cloned()
            .unwrap_or_else(|| config.url.clone());
        let client = redis::Client::open(subscribe_url.as_str())?;
        let subscribers = if config.cluster_urls.is_empty() {
            vec![client.clone()]
        } else {
            config
                .cluster_urls
                .iter()
                .map(|url| redis::Client::open(url.as_str()))
                .collect::<Result<Vec<_>, _>>()?
        };
        let connections = Connections::open(
            &config.url,
            &config.cluster_urls,
            config.pool_size,
            config.timeout,
        )
        .await?;
        let shutdown = CancellationToken::new();
        let keys = Keys::new(&config.namespace);
        let creates_args = vec![config.max_tasks.to_string()];
        let swaps_args = vec![
            config.retention.as_millis().to_string(),
            config.event_log_len.to_string(),
            keys.worker_channel_prefix(),
        ];
        let durability_setting = config.durability;
        let core = Arc::new(Core {
            keys: keys.clone(),
            scripts: Scripts::load(),
            heads: take::Heads::default(),
            peer: Peer::from_url(&subscribe_url),
            config,
            connections,
        });
        // Also the first round trip: an unreachable Redis fails here.
        let durability = persistence::decide(&core, durability_setting).await?;
        let lanes = 4;
        let store = RedisStore {
            inner: Arc::new(Inner {
                creates: batched(
                    &core,
                    lanes,
                    "create",
                    |s| &s.create,
                    vec![keys.live(), keys.admissions(), keys.leases()],
                    creates_args,
                ),
                activations: batched(
                    &core,
                    lanes,
                    "activate",
                    |s| &s.activate,
                    vec![keys.leases()],
                    vec![],
                ),
                swaps: batched(
                    &core,
                    lanes,
                    "cas",
                    |s| &s.cas,
                    vec![keys.leases(), keys.admissions(), keys.live()],
                    swaps_args,
                ),
                // One lane: the takers of this process never race each other.
                takes: {
                    let core = core.clone();
                    Batcher::start(1, 1_024, move |requests| {
                        take::take_batch(core.clone(), requests)
                    })
                },
                // Two lanes: one call in flight while the next batch gathers; each call takes
                // its candidates out of the shared heads, so the two never try the same ones.
                finishes: {
                    let core = core.clone();
                    Batcher::start(2, 256, move |requests| {
                        finish::finish_batch(core.clone(), requests)
                    })
                },
                dispatcher: Dispatcher::start(subscribers, shutdown.clone()),
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

    pub fn keys(&self) -> &Keys {
        &self.inner.core.keys
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

    /// Runs a script invocation (EVALSHA, reloading on NOSCRIPT) on a pooled connection.
    pub(crate) async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &'static str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.inner.core.eval(script, invocation).await
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

    /// Blocks on the doorbells of `entrypoints` for up to `wait`; true when one rang.
    async fn wait_for_doorbell(
        &self,
        entrypoints: &[String],
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let taken = self.inner.blocking.lock().await.pop();
        let mut conn = match taken {
            Some(conn) => conn,
            // No response timeout here: the server holds the reply for `wait` on purpose; the
            // client-side bound below is `wait` plus the usual timeout.
            None => self.blocking_connection().await?,
        };
        let keys: Vec<String> = entrypoints
            .iter()
            .map(|ep| self.inner.core.keys.wake(ep))
            .collect();
        let seconds = wait.as_secs_f64().max(0.01);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(&keys).arg(seconds);
        let bound = wait + self.inner.core.config.timeout;
        let reply: Result<Result<Option<(String, String)>, redis::RedisError>, _> =
            tokio::time::timeout(bound, conn.query(&cmd)).await;
        match reply {
            Ok(Ok(rang)) => {
                self.inner.blocking.lock().await.push(conn);
                Ok(rang.is_some())
            }
            Ok(Err(err)) => {
                // The spares broke with this one (a Redis restart): open fresh ones next time.
                self.inner.blocking.lock().await.clear();
                Err(err.into())
            }
            Err(_) => Err(StoreError::Unavailable("blocking read timed out".into())),
        }
    }
    /// Listens for cancellations of tasks that `worker_id` holds: yields task ids.
    pub(super) async fn cancellation_feed(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError> {
        let mut listener = self
            .inner
            .dispatcher
            .listen(self.inner.core.keys.worker_channel(worker_id))
            .await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(signal) = listener.signals.recv().await {
                if let subscriber::Signal::Message(id) = signal
                    && tx.send(id).is_err()
                {
                    break;
                }
            }
        });
        Ok(rx)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
