//! The run's one Redis fault. A single server is SIGKILLed and restarted from its AOF. On a
//! cluster a master is SIGKILLed, the injector waits for its replica to take over (the services
//! wait it out through `REDIS_TIMEOUT_MS`), then restarts the dead node, which rejoins as a
//! replica of the node that took over.
//!
//! The restart follows the failover at once rather than a few faults later: a durable store
//! WAITs for a replica after every write (`REDIS_WAIT_REPLICAS`, 1 with
//! `REDIS_DURABILITY=durable`), so with one replica per master the promoted master refuses
//! every write until a replica is back; leaving the node down would stall the whole run (and a
//! gateway started meanwhile exits, unable to write) instead of testing the failover.

use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;

use super::cluster::Cluster;
use super::monkey::FaultCounts;
use super::topology::{RedisNodes, shard_tags};
use super::{ChaosConfig, ChaosError};

/// How long a single server stays down when it is crashed.
const REDIS_DOWN_FOR: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct RedisFault {
    injected: bool,
    /// A killed cluster node whose failover failed, still to be restarted.
    down: Option<usize>,
}

impl RedisFault {
    /// One turn of the injector: restarts a node left down by a failed failover, or injects the
    /// fault when it is `due` and has not happened yet.
    pub fn turn(
        &mut self,
        cluster: &mut Cluster,
        config: &ChaosConfig,
        rng: &mut StdRng,
        due: bool,
        counts: &mut FaultCounts,
    ) {
        if let Some(node) = self.down.take() {
            restart_node(cluster, node, counts);
            return;
        }
        if !config.restart_redis || self.injected || !due {
            return;
        }
        self.injected = true;
        let outcome = match &mut cluster.redis {
            RedisNodes::Single(server) => tokio::task::block_in_place(|| {
                counts.redis_fault_at = Some(Instant::now());
                counts.note("SIGKILL redis-server");
                server.kill()?;
                std::thread::sleep(REDIS_DOWN_FOR);
                server.restart()
            })
            .map(|()| {
                counts.redis_restarts += 1;
                counts.note("redis-server restarted from its AOF");
            })
            .map_err(|err| format!("redis restart: {err}")),
            RedisNodes::Cluster(_) => {
                let outcome = fail_over(cluster, rng, counts, &mut self.down);
                if let Some(node) = self.down.take().filter(|_| outcome.is_ok()) {
                    restart_node(cluster, node, counts);
                }
                outcome
            }
        };
        if let Err(err) = outcome {
            counts.errors.push(err);
        }
    }

    /// At the end of the faults: a node still down is restarted, so that the checks see the
    /// whole cluster.
    pub fn finish(&mut self, cluster: &mut Cluster, counts: &mut FaultCounts) {
        if let Some(node) = self.down.take() {
            restart_node(cluster, node, counts);
        }
    }
}

/// SIGKILLs the master of one shard's slot (by the seed among the shards; with one shard, the
/// master of `{tc}`, which holds every task), noting it in `down`, and waits for one of its
/// replicas to take over.
fn fail_over(
    cluster: &mut Cluster,
    rng: &mut StdRng,
    counts: &mut FaultCounts,
    down: &mut Option<usize>,
) -> Result<(), String> {
    let tags = shard_tags(cluster.shards);
    let tag = &tags[rng.random_range(0..tags.len())];
    let key = format!("{{{tag}}}:live");
    let RedisNodes::Cluster(nodes) = &mut cluster.redis else {
        return Err("a failover needs a cluster".into());
    };
    tokio::task::block_in_place(|| {
        let master = nodes.master_of_key(&key)?;
        let killed_at = Instant::now();
        counts.redis_fault_at = Some(killed_at);
        counts.note(format!("SIGKILL Redis master node {master} (serving {key})"));
        nodes.kill_node(master)?;
        *down = Some(master);
        let promoted = nodes.wait_for_failover(master)?;
        counts.master_failovers += 1;
        counts.note_redis(format!(
            "master node {master} (port {}, serving {key}) SIGKILLed; replica node {promoted} took over, settled after {:.1?}",
            nodes.port(master)?,
            killed_at.elapsed()
        ));
        Ok::<_, ChaosError>(())
    })
    .map_err(|err| format!("master failover: {err}"))
}

/// Restarts a killed cluster node and waits until it rejoined (as a replica) and synced.
fn restart_node(cluster: &mut Cluster, node: usize, counts: &mut FaultCounts) {
    let RedisNodes::Cluster(nodes) = &mut cluster.redis else {
        return;
    };
    let started = Instant::now();
    let rejoined = tokio::task::block_in_place(|| -> Result<String, ChaosError> {
        let topology = nodes.restart_node(node)?;
        Ok(topology
            .node(node)
            .map_or_else(|| "unknown".to_owned(), |info| info.role.to_string()))
    });
    match rejoined {
        Ok(role) => counts.note_redis(format!(
            "node {node} restarted, rejoined as {role} after {:.1?}",
            started.elapsed()
        )),
        Err(err) => counts
            .errors
            .push(format!("cluster node {node} restart: {err}")),
    }
}
