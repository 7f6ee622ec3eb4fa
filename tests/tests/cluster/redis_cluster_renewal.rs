//! Lease renewal over shards that fail apart, on a real Redis Cluster: while one shard's master
//! is down, the leases of the other shards are still renewed (and a lost one still reported
//! lost); only the dead shard's are left unconfirmed, so a worker stops only those handlers, and
//! only once their TTL has passed.

use std::time::Duration;

use harness::TestResult;
use harness::redis_cluster::{ClusterOptions, RedisCluster};
use harness::store_fixtures::{cluster_store_config, ids_in_shard, queued_task, start_running};
use protocol::TaskStatus;
use protocol::token::AccessToken;
use store::{Lease, RedisStore, Renewal, StoreError, TaskStore, Transition};

const SHARDS: usize = 3;
const WORKER: &str = "w1";
const LEASE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_leaves_only_its_own_leases_unconfirmed() -> TestResult {
    // No replicas, and the live masters keep serving their slots while one is down.
    let mut cluster = RedisCluster::start_with(
        ClusterOptions::new(3, 0)
            .arg("--cluster-require-full-coverage")
            .arg("no"),
    )?;
    let timeout = Duration::from_millis(1_000);
    let store =
        RedisStore::connect(cluster_store_config(cluster.urls(), SHARDS as u16, timeout)).await?;
    let owner = AccessToken::generate().owner_hash();

    // Two running tasks per shard, held by one worker.
    let mut leases: Vec<Lease> = Vec::new();
    for shard in 0..SHARDS {
        for id in ids_in_shard("r", shard, SHARDS, 2) {
            store.create(queued_task(&id, &owner, "echo")).await?;
            leases.push(start_running(&store, &id, WORKER, LEASE).await?);
        }
    }
    assert_eq!(
        store.renew_each(&leases, LEASE).await?,
        vec![Renewal::Renewed; leases.len()]
    );

    // Shard 1 loses one lease (its task is cancelled); shard 0's master dies.
    let cancelled = &leases[2].task_id;
    store
        .compare_and_set(
            cancelled,
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?;
    let dead = cluster.master_of_key(&store.shard_keys(&leases[0].task_id).live())?;
    for lease in &leases[2..] {
        let master = cluster.master_of_key(&store.shard_keys(&lease.task_id).live())?;
        assert_ne!(master, dead, "shards 1 and 2 share shard 0's master");
    }
    cluster.kill_node(dead)?;

    let renewed = store.renew_each(&leases, LEASE).await?;
    assert_eq!(
        renewed,
        [
            Renewal::Unconfirmed,
            Renewal::Unconfirmed,
            Renewal::Lost,
            Renewal::Renewed,
            Renewal::Renewed,
            Renewal::Renewed,
        ]
    );
    // The all-or-nothing form cannot vouch for the dead shard's leases.
    match store.renew_leases(&leases, LEASE).await {
        Err(StoreError::Unavailable(_)) => {}
        other => return Err(format!("renew_leases answered {other:?}").into()),
    }
    // With only the dead shard's leases, nothing answers: an error, as before sharding.
    match store.renew_each(&leases[..2], LEASE).await {
        Err(StoreError::Unavailable(_)) => {}
        other => return Err(format!("renew_each answered {other:?}").into()),
    }
    Ok(())
}
