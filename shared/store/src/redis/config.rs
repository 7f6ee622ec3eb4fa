//! [`RedisStoreConfig`]: what a [`super::RedisStore`] connects to and the bounds it keeps.

use std::time::Duration;

use super::persistence::DurabilitySetting;
use crate::{
    DEFAULT_MAX_LIVE_PER_ADDRESS, DEFAULT_MAX_LIVE_PER_OWNER, DEFAULT_MAX_RETAINED,
    DEFAULT_MAX_RETAINED_BYTES, DEFAULT_MAX_RETAINED_PER_OWNER, DEFAULT_MAX_TASKS,
    DEFAULT_RETENTION,
};

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
    /// Whether the store may load its task scripts as a Redis Functions library and call them
    /// by `FCALL` (`functions.rs`); it still uses `EVALSHA` where the server cannot. `false`:
    /// `EVALSHA` always.
    pub functions: bool,
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
            functions: true,
        }
    }
}
