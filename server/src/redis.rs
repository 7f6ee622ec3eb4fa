//! The `REDIS_*` settings every process of a cluster takes (gateway, worker), as one clap
//! struct flattened into each process's settings, and mapped to the store's configuration in
//! one place ([`RedisFlags::store_config`]).

use std::time::Duration;

use crate::secret::Secret;
use store::{DurabilitySetting, RedisStoreConfig};

#[derive(Debug, Clone, clap::Args)]
pub struct RedisFlags {
    /// Redis of the cluster. A gateway without it (and without --redis-cluster-urls) runs the
    /// embedded single-process mode (in-memory store and an in-process worker hosting the
    /// built-in entrypoints); a worker requires one of the two.
    #[arg(
        id = "redis_url",
        long = "redis-url",
        value_name = "REDIS_URL",
        env = "REDIS_URL",
        hide_env_values = true
    )]
    pub url: Option<Secret>,

    /// Seed nodes of a Redis Cluster holding the tasks, comma separated
    /// (`redis://127.0.0.1:7000,redis://127.0.0.1:7001`), instead of --redis-url.
    #[arg(
        id = "redis_cluster_urls",
        long = "redis-cluster-urls",
        value_name = "REDIS_CLUSTER_URLS",
        env = "REDIS_CLUSTER_URLS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub cluster_urls: Vec<Secret>,

    /// Bound on connecting to Redis and on each reply, in milliseconds: a call past it fails
    /// (503 at the gateway) instead of hanging. On a Redis Cluster, set it above the time a
    /// failover takes if calls should wait one out.
    #[arg(
        long = "redis-timeout-ms",
        value_name = "REDIS_TIMEOUT_MS",
        env = "REDIS_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub timeout_ms: u64,

    /// On a Redis Cluster: replicas each write must reach (Redis WAIT) before it is
    /// acknowledged, so that a failover keeps it. Default: 1 with REDIS_DURABILITY=durable,
    /// else 0. A write that cannot reach them in --redis-timeout-ms fails (503 at the gateway).
    #[arg(
        long = "redis-wait-replicas",
        value_name = "REDIS_WAIT_REPLICAS",
        env = "REDIS_WAIT_REPLICAS"
    )]
    pub wait_replicas: Option<usize>,

    /// Shards the namespace's tasks are split into, each under its own hash tag, so that a
    /// Redis Cluster spreads them over its masters (1 to 256). Every gateway and worker of a
    /// namespace must use the same count; a process started with another is refused.
    #[arg(long = "shards",
        value_name = "SHARDS", env = "REDIS_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub shards: u16,

    /// Key namespace (hash tag) shared by the cluster's gateways and workers.
    #[arg(
        long = "namespace",
        value_name = "NAMESPACE",
        env = "REDIS_NAMESPACE",
        default_value = "tc"
    )]
    pub namespace: String,

    /// What the Redis task store's writes are worth: `detect` reads the server's persistence
    /// (durable only with `appendonly yes` and `appendfsync always|everysec`), `durable` vouches
    /// for it where CONFIG is disabled, `process` never claims it. Paid tasks need durable. On
    /// a Redis Cluster, `durable` makes every write wait for a replica (see
    /// --redis-wait-replicas); set it on the workers as on the gateways.
    #[arg(
        long = "redis-durability",
        value_name = "REDIS_DURABILITY",
        env = "REDIS_DURABILITY",
        default_value = "detect"
    )]
    pub durability: DurabilitySetting,

    /// How the task store calls its Lua scripts: `auto` loads them as one Redis Functions
    /// library (`FUNCTION LOAD`, called by `FCALL`: cheaper per call) where the server allows
    /// it (Redis 7 and an ACL with `FUNCTION`), else `EVALSHA`; `off` always uses `EVALSHA`.
    #[arg(
        long = "redis-functions",
        value_name = "REDIS_FUNCTIONS",
        env = "REDIS_FUNCTIONS",
        default_value = "auto"
    )]
    pub functions: FunctionsSetting,
}

/// `--redis-functions`: whether the task store may load its scripts as a Redis Functions
/// library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FunctionsSetting {
    /// Functions where the server allows them, else EVALSHA.
    Auto,
    /// Always EVALSHA.
    Off,
}

impl RedisFlags {
    /// Whether a Redis (one server or a cluster) is configured at all.
    pub fn configured(&self) -> bool {
        self.url.is_some() || !self.cluster_urls.is_empty()
    }

    /// The store's configuration these settings describe; the rest (bounds, retention, pool)
    /// keeps the store's defaults for the caller to set.
    pub fn store_config(&self) -> RedisStoreConfig {
        let mut config = RedisStoreConfig::new(
            self.url
                .as_ref()
                .map(|url| url.expose().to_owned())
                .unwrap_or_default(),
        );
        config.cluster_urls = self
            .cluster_urls
            .iter()
            .map(|url| url.expose().to_owned())
            .collect();
        config.timeout = Duration::from_millis(self.timeout_ms.max(1));
        config.namespace = self.namespace.clone();
        config.shards = self.shards;
        config.wait_replicas = self.wait_replicas;
        config.durability = self.durability;
        config.functions = self.functions == FunctionsSetting::Auto;
        config
    }
}
