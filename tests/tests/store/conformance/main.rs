//! The store conformance suite: one set of behaviours every [`TaskStore`] must show, run
//! against each store through a [`Harness`] that builds it.
//!
//! - `support`: the `Harness` trait, `StoreCfg`, the per-test fixture and helpers;
//! - one module per theme: `lifecycle`, `leases`, `capacity`, `subscriptions`, `recovery`,
//!   `settlement`, `list`, `property`, `take_finish`, `turns`, `retries`, `failed`. Each test is `pub async fn name(h: &impl Harness) -> TestResult`.
//!
//! `conformance_tests!(module, harness_expr)` instantiates every test as a `#[tokio::test]`
//! under `module::<theme>::<test>`, evaluating `harness_expr` once per test. A new test is
//! added to its theme file and to the list in `all_tests.rs` (the compiler flags a test
//! function left out of the list as dead code), which `lua_keys` runs too.

mod all_tests;
mod capacity;
mod failed;
mod leases;
mod lifecycle;
mod list;
mod property;
mod recovery;
mod retries;
mod settlement;
mod subscriptions;
mod support;
mod take_finish;
mod turns;

use std::sync::Arc;

use store::{MemoryStore, MemoryStoreConfig, TaskStore};

use crate::support::{BoxError, Harness, StoreCfg};

macro_rules! conformance_tests {
    ($store:ident, $harness:expr) => {
        all_tests::conformance_list!(conformance_tests!(@store $store, $harness;));
    };
    (@store $store:ident, $harness:expr; $($theme:ident { $($test:ident),* $(,)? })*) => {
        mod $store {
            $(
                mod $theme {
                    #[allow(unused_imports)]
                    use crate::*;

                    $(
                        // Multi-threaded: the race tests need real parallelism, and the property
                        // test blocks a worker thread on each case.
                        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                        async fn $test() -> crate::support::TestResult {
                            let harness = $harness;
                            crate::$theme::$test(&harness).await
                        }
                    )*
                }
            )*
        }
    };
}

/// The in-memory store on the system clock.
struct MemoryHarness;

impl Harness for MemoryHarness {
    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let config = MemoryStoreConfig {
            max_tasks: cfg.max_tasks,
            retention: cfg.retention,
            ..MemoryStoreConfig::default()
        };
        Ok(Arc::new(MemoryStore::new(config)))
    }
}

conformance_tests!(memory, MemoryHarness);

/// The Redis store on a private `redis-server` owned by the harness (one per test); each
/// `store()` call gets a namespace of its own, so stores of one test share nothing. `shards`
/// splits each namespace (one server does not check slots: the cluster suite below does).
/// `functions`: the store calls its scripts as its Redis Functions library (`FCALL`), as it
/// does by default, or by `EVALSHA`, as on a server without functions.
struct RedisHarness {
    server: harness::redis_server::RedisServer,
    shards: u16,
    functions: bool,
    /// Namespace of the latest store, for the leak check.
    namespace: std::sync::Mutex<String>,
}

impl RedisHarness {
    fn new() -> Self {
        Self::sharded(1)
    }

    fn sharded(shards: u16) -> Self {
        Self::with(shards, true)
    }

    fn evalsha() -> Self {
        Self::with(1, false)
    }

    fn with(shards: u16, functions: bool) -> Self {
        match harness::redis_server::RedisServer::start() {
            Ok(server) => RedisHarness {
                server,
                shards,
                functions,
                namespace: Default::default(),
            },
            Err(err) => panic!("cannot start redis-server for the suite: {err}"),
        }
    }
}

impl Harness for RedisHarness {
    fn shards(&self) -> usize {
        usize::from(self.shards)
    }

    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let mut config = store::RedisStoreConfig::new(self.server.url());
        config.namespace = format!("t{}", protocol::token::AccessToken::generate().expose());
        config.shards = self.shards;
        config.functions = self.functions;
        if let Ok(mut latest) = self.namespace.lock() {
            latest.clone_from(&config.namespace);
        }
        config.max_tasks = cfg.max_tasks;
        config.retention = cfg.retention;
        config.pool_size = 8;
        Ok(Arc::new(store::RedisStore::connect(config).await?))
    }

    /// With every task terminal, each key left must expire by itself: task records, event logs
    /// owner indexes and the retained-task index within retention, doorbells within a minute; the live set, lease and
    /// admission deadlines, queues and per-owner live counters must be gone. Only the
    /// namespace's layout stamp and the lease index's pin (lease_index.lua) stay.
    async fn check_no_leaks(&self) -> Result<(), BoxError> {
        let namespace = latest(&self.namespace);
        let mut conn = self.server.client().await?;
        for tag in hash_tags(&namespace, self.shards) {
            no_leaks(&tag, &mut conn).await?;
        }
        Ok(())
    }
}

/// The hash tags (as `Keys::new` takes them) of a namespace split into `shards`: its own and,
/// when sharded, each shard's.
fn hash_tags(namespace: &str, shards: u16) -> Vec<String> {
    let mut tags = vec![namespace.to_owned()];
    if shards > 1 {
        let count = usize::from(shards);
        tags.extend((0..count).map(|shard| store::redis::shard_tag(namespace, shard, count)));
    }
    tags
}

/// The namespace of the latest store a harness made.
fn latest(namespace: &std::sync::Mutex<String>) -> String {
    namespace.lock().map(|ns| ns.clone()).unwrap_or_default()
}

/// The leak check of one hash tag of a namespace (the namespace's own, or a shard's) on the
/// server (or cluster node) that holds it.
async fn no_leaks(tag: &str, conn: &mut impl ::redis::aio::ConnectionLike) -> Result<(), BoxError> {
    let keys = store::redis::Keys::new(tag);
    let found: Vec<String> = ::redis::cmd("KEYS")
        .arg(keys.all_pattern())
        .query_async(conn)
        .await?;
    let retention_ms = i64::try_from(store::DEFAULT_RETENTION.as_millis())?;
    for key in found {
        let ttl: i64 = ::redis::cmd("PTTL").arg(&key).query_async(conn).await?;
        // `{tag}:kind:...`, where a shard's tag holds a colon too.
        let kind = key
            .split_once("}:")
            .and_then(|(_, rest)| rest.split(':').next())
            .unwrap_or_default();
        if key == keys.layout() && ttl == -1 {
            // The namespace's layout stamp: one key, kept for good (schema.rs).
            continue;
        }
        if key == keys.leases() && ttl == -1 {
            // The lease index, kept for good with its pin (lease_index.lua), and no deadline.
            let deadlines: u64 = ::redis::cmd("ZCOUNT")
                .arg(&key)
                .arg("-inf")
                .arg("(+inf")
                .query_async(conn)
                .await?;
            if deadlines == 0 {
                continue;
            }
            return Err(format!("{key} holds {deadlines} lease deadlines").into());
        }
        let bound = match kind {
            "task" | "events" | "owner" => retention_ms,
            // `terminal`: the retained-task index, expiring with its last entry, up to a
            // second later (TERMINAL_SLACK_MS in finish_task.lua).
            "terminal" => retention_ms + 1_000,
            // `failed`: an entrypoint's failed index, expiring a retention (and a second)
            // after its latest failure (index_failed.lua).
            "failed" => retention_ms + 1_000,
            "wake" => 60_000,
            // A script call's reply key on a cluster (replay.rs), deleted by the next call or
            // by its TTL.
            "rp" => i64::try_from(store::redis::REPLAY_TTL.as_millis())?,
            _ => return Err(format!("{key} outlives every task").into()),
        };
        if !(1..=bound).contains(&ttl) {
            return Err(format!("{key} would not expire (PTTL {ttl})").into());
        }
    }
    Ok(())
}

conformance_tests!(redis, RedisHarness::new());

conformance_tests!(redis_sharded, RedisHarness::sharded(3));

conformance_tests!(redis_evalsha, RedisHarness::evalsha());

/// The Redis store on a real local Redis Cluster (three masters, no replicas: the conformance
/// suite checks the store, the chaos run and the failover tests check the cluster) owned by the
/// harness, one per test. Each namespace is split into three shards, whose hash tags land in
/// slots of different masters as the hash falls: every script and pipeline must stay within
/// one slot (the cluster refuses CROSSSLOT), and the store must work through the cluster
/// client's routing.
struct RedisClusterHarness {
    cluster: harness::redis_cluster::RedisCluster,
    namespace: std::sync::Mutex<String>,
}

impl RedisClusterHarness {
    fn new() -> Self {
        match harness::redis_cluster::RedisCluster::start(3, 0) {
            Ok(cluster) => RedisClusterHarness {
                cluster,
                namespace: Default::default(),
            },
            Err(err) => panic!("cannot start a Redis Cluster for the suite: {err}"),
        }
    }
}

/// Shards of each namespace of the cluster suite.
const CLUSTER_SHARDS: u16 = 3;

impl Harness for RedisClusterHarness {
    fn shards(&self) -> usize {
        usize::from(CLUSTER_SHARDS)
    }

    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let mut config = store::RedisStoreConfig::new(String::new());
        config.cluster_urls = self.cluster.urls();
        config.namespace = format!("t{}", protocol::token::AccessToken::generate().expose());
        config.shards = CLUSTER_SHARDS;
        if let Ok(mut latest) = self.namespace.lock() {
            latest.clone_from(&config.namespace);
        }
        config.max_tasks = cfg.max_tasks;
        config.retention = cfg.retention;
        Ok(Arc::new(store::RedisStore::connect(config).await?))
    }

    async fn check_no_leaks(&self) -> Result<(), BoxError> {
        let namespace = latest(&self.namespace);
        for tag in hash_tags(&namespace, CLUSTER_SHARDS) {
            let layout = store::redis::Keys::new(&tag).layout();
            let owner = self.cluster.master_of_key(&layout)?;
            let mut conn = self.cluster.node(owner)?.client().await?;
            no_leaks(&tag, &mut conn).await?;
        }
        Ok(())
    }
}

conformance_tests!(redis_cluster, RedisClusterHarness::new());
