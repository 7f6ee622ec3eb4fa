//! Durable writes on a real Redis Cluster: a store declared `durable` acknowledges a write only
//! once a replica holds it (WAIT), so the write survives the master's failover; with its
//! replica gone it refuses to acknowledge instead of pretending.

use std::time::Duration;

use harness::TestResult;
use harness::redis_cluster::RedisCluster;
use harness::store_fixtures::{cluster_store_config, ids_in_shard, queued_task};
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use store::{Durability, DurabilitySetting, RedisStore, StoreError, TaskStore};

async fn durable_store(cluster: &RedisCluster, shards: u16) -> Result<RedisStore, StoreError> {
    let mut config = cluster_store_config(cluster.urls(), shards, Duration::from_millis(1_500));
    config.durability = DurabilitySetting::Durable;
    RedisStore::connect(config).await
}

/// Creates a task named after `prefix`, retrying (under a new id each time, since a refused
/// write may still have been applied) while the store refuses: the cluster is settling.
async fn create_when_durable(
    store: &RedisStore,
    prefix: &str,
    owner: &OwnerHash,
) -> TestResult<String> {
    let mut last = None;
    for id in ids_in_shard(prefix, 0, SHARDS, 40) {
        match store.create(queued_task(&id, owner, "echo")).await {
            Ok(_) => return Ok(id),
            Err(err) => last = Some(err),
        }
    }
    Err(format!("no durable write within 40 tries: {last:?}").into())
}

const SHARDS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_failover_and_unreplicable_ones_are_refused() -> TestResult {
    let mut cluster = RedisCluster::start(3, 1)?;
    let store = durable_store(&cluster, SHARDS as u16).await?;
    assert_eq!(store.declared_durability(), Durability::Durable);
    let owner = AccessToken::generate().owner_hash();
    let kept = ids_in_shard("kept", 0, SHARDS, 20);
    for id in &kept {
        store.create(queued_task(id, &owner, "echo")).await?;
    }

    // Shard 0's master dies the moment after the acknowledgements; its replica takes over.
    let shard_key = store.shard_keys(&kept[0]).live();
    let master = cluster.master_of_key(&shard_key)?;
    let other_shard_key = store
        .shard_keys(&ids_in_shard("other", 1, SHARDS, 1).concat())
        .live();
    let other_master = cluster.master_of_key(&other_shard_key)?;
    cluster.kill_node(master)?;
    cluster.wait_for_failover(master)?;

    // Nothing acknowledged was lost.
    for id in &kept {
        let mut found = None;
        for _ in 0..20 {
            match store.get(id).await {
                Ok(task) => {
                    found = task;
                    break;
                }
                // The client is still learning the new topology.
                Err(StoreError::Unavailable(_)) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        let task = found.ok_or(format!("{id} was lost in the failover"))?;
        assert_eq!(task.task.status, TaskStatus::Running);
    }
    // The promoted replica has no replica of its own yet: a write to its shard cannot be made
    // durable and is refused rather than acknowledged.
    let refused = ids_in_shard("unreplicated", 0, SHARDS, 1).concat();
    match store.create(queued_task(&refused, &owner, "echo")).await {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("replicas"), "{message}");
        }
        other => return Err(format!("a write with no replica was acknowledged: {other:?}").into()),
    }
    if other_master != master {
        // The other shard's master still has its replica: its writes go on.
        let id = ids_in_shard("elsewhere", 1, SHARDS, 1).concat();
        store.create(queued_task(&id, &owner, "echo")).await?;
    }

    // The old master comes back as the new master's replica: writes are durable again.
    cluster.restart_node(master)?;
    let again = create_when_durable(&store, "replicated-again", &owner).await?;
    assert!(store.get(&again).await?.is_some());
    Ok(())
}
