//! The Redis of a chaos run: one `redis-server`, or a Redis Cluster of masters and replicas;
//! how the services and the checks reach it, and the key namespaces (hash tags) they use there.

use std::path::PathBuf;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use store::{DurabilitySetting, RedisStoreConfig};

use super::{ChaosConfig, ChaosError, NAMESPACE};
use crate::redis_cluster::{ClusterOptions, RedisCluster};
use crate::redis_server::{RedisOptions, RedisServer};

/// How long a cluster node may be unreachable before its replica takes over; failover takes
/// about twice this, so the run's one failover stays within a few seconds.
const NODE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// `REDIS_TIMEOUT_MS` of the services and the checks' store on a cluster: above a failover's
/// length, so that calls wait one out instead of failing.
const CLUSTER_TIMEOUT: Duration = Duration::from_millis(5_000);

/// Which Redis a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisTopology {
    /// One `redis-server` with AOF (`appendfsync always`); its fault is a crash (SIGKILL) and
    /// a restart from the AOF.
    Single,
    /// A Redis Cluster of `masters` masters (at least 3) with `replicas` replicas each, every
    /// node with AOF (`appendfsync always`); its fault is a master's SIGKILL and a replica's
    /// takeover (which needs `replicas >= 1`), the dead node restarted later as a replica.
    Cluster { masters: usize, replicas: usize },
}

impl std::fmt::Display for RedisTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisTopology::Single => write!(f, "one redis-server (AOF, appendfsync always)"),
            RedisTopology::Cluster { masters, replicas } => write!(
                f,
                "Redis Cluster of {masters} masters, {replicas} replica(s) per master (AOF, appendfsync always, node timeout {NODE_TIMEOUT:?})"
            ),
        }
    }
}

/// The hash tags the services put the namespace's keys under: with one shard everything is
/// under `{tc}`; with more, the per-shard keys (tasks, event logs, live set, leases, queues,
/// owner indexes) go under `{tc:0}`, `{tc:1}`, ... and the registry and layout stay under
/// `{tc}`.
pub fn key_tags(shards: u16) -> Vec<String> {
    let mut tags = vec![NAMESPACE.to_owned()];
    if shards > 1 {
        tags.extend(shard_tags(shards));
    }
    tags
}

/// The tag of each shard: where its live set and its task records are.
pub fn shard_tags(shards: u16) -> Vec<String> {
    if shards <= 1 {
        return vec![NAMESPACE.to_owned()];
    }
    (0..shards)
        .map(|shard| store::redis::shard_tag(NAMESPACE, usize::from(shard), usize::from(shards)))
        .collect()
}

/// The running Redis of a run.
pub enum RedisNodes {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl RedisNodes {
    pub async fn start(config: &ChaosConfig) -> Result<RedisNodes, ChaosError> {
        // The harnesses start and wait synchronously (bounded).
        tokio::task::block_in_place(|| match config.redis {
            RedisTopology::Single => Ok(RedisNodes::Single(RedisServer::start_with(
                RedisOptions::default().with_aof(true),
            )?)),
            RedisTopology::Cluster { masters, replicas } => {
                if config.restart_redis && replicas == 0 {
                    return Err(ChaosError::Setup(
                        "a master failover needs at least one replica per master".into(),
                    ));
                }
                // The harness runs nodes with `appendfsync everysec`; the later argument wins,
                // so that, as with the single server, an acknowledged write is on the master's
                // disk and only replication can lose it.
                let options = ClusterOptions::new(masters, replicas)
                    .with_node_timeout(NODE_TIMEOUT)
                    .arg("--appendfsync")
                    .arg("always");
                Ok(RedisNodes::Cluster(RedisCluster::start_with(options)?))
            }
        })
    }

    /// How gateway or worker number `index` reaches Redis. On a cluster each process gets the
    /// seeds in another order, so that their pub/sub connections (through the first seed)
    /// spread over the nodes and some of them meet the failover.
    pub fn service_env(&self, index: usize, shards: u16) -> Vec<(&'static str, String)> {
        let mut env = vec![("REDIS_SHARDS", shards.to_string())];
        match self {
            RedisNodes::Single(server) => env.push(("REDIS_URL", server.url())),
            RedisNodes::Cluster(cluster) => {
                let mut seeds = cluster.urls();
                if !seeds.is_empty() {
                    let len = seeds.len();
                    seeds.rotate_left(index % len);
                }
                env.push(("REDIS_CLUSTER_URLS", seeds.join(",")));
                // AOF on every node is not enough for durability on a cluster (replication is
                // asynchronous); the run declares it so that the services behave as on a
                // cluster whose operator made it durable, which is what the run then tests.
                env.push(("REDIS_DURABILITY", "durable".to_owned()));
                env.push(("REDIS_TIMEOUT_MS", CLUSTER_TIMEOUT.as_millis().to_string()));
            }
        }
        env
    }

    /// The checks' own view of the store, as a service would open it.
    pub fn store_config(&self, shards: u16) -> RedisStoreConfig {
        let mut config = match self {
            RedisNodes::Single(server) => RedisStoreConfig::new(server.url()),
            RedisNodes::Cluster(cluster) => {
                let mut config = RedisStoreConfig::new("");
                config.cluster_urls = cluster.urls();
                config.timeout = CLUSTER_TIMEOUT;
                config
            }
        };
        config.namespace = NAMESPACE.to_owned();
        // The checks only read; no need to look at the servers' persistence settings.
        config.durability = DurabilitySetting::Process;
        // The same count as the services: the store finds a task's shard from it (and refuses
        // a namespace whose layout stamp records another).
        config.shards = shards;
        config
    }

    /// A connection that sends each command to the node serving its first key.
    pub async fn routed(&self) -> Result<Routed, ChaosError> {
        Ok(match self {
            RedisNodes::Single(server) => Routed::Single(server.client().await?),
            RedisNodes::Cluster(cluster) => Routed::Cluster(
                cluster
                    .client_builder()
                    .connection_timeout(CLUSTER_TIMEOUT)
                    .response_timeout(CLUSTER_TIMEOUT)
                    .build()?
                    .get_async_connection()
                    .await?,
            ),
        })
    }

    /// One connection to every node holding keys (every master of a cluster): `SCAN` and
    /// `KEYS` see one node's keys only.
    pub async fn key_holders(&self) -> Result<Vec<MultiplexedConnection>, ChaosError> {
        match self {
            RedisNodes::Single(server) => Ok(vec![server.client().await?]),
            RedisNodes::Cluster(cluster) => {
                let masters = tokio::task::block_in_place(|| cluster.masters())?;
                let mut connections = Vec::with_capacity(masters.len());
                for master in masters {
                    connections.push(cluster.node_connection(master).await?);
                }
                Ok(connections)
            }
        }
    }

    /// Each server's log: `(name, path)`.
    pub fn log_files(&self) -> Vec<(String, PathBuf)> {
        match self {
            RedisNodes::Single(server) => vec![("redis".to_owned(), server.log_path())],
            RedisNodes::Cluster(cluster) => (0..cluster.len())
                .filter_map(|index| {
                    let node = cluster.node(index).ok()?;
                    Some((format!("redis-node-{index}"), node.log_path()))
                })
                .collect(),
        }
    }

    /// Stops a single server (a cluster's nodes are killed when it is dropped).
    pub fn stop(&mut self) {
        if let RedisNodes::Single(server) = self {
            let _ = server.stop();
        }
    }
}

/// A connection to one server, or to a cluster through the cluster client.
pub enum Routed {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}
