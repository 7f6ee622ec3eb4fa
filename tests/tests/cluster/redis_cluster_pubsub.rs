//! Sharded pub/sub on a real Redis Cluster: task events and cancellations are published with
//! `SPUBLISH` on channels in their shard's slot, so they reach the subscriber through the one
//! master that owns the shard, never the cluster bus; and a subscription keeps delivering every
//! event across its master's failover.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::redis_cluster::RedisCluster;
use harness::store_fixtures::{cluster_store_config, ids_in_shard, queued_task, start_running};
use protocol::token::{AccessToken, OwnerHash};
use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::{
    EventPayload, EventStream, Lease, RedisStore, StoreError, StoredEvent, Subscription, TaskStore,
    Transition,
};

const SHARDS: usize = 3;
const WORKER: &str = "w1";
/// Long enough that no lease lapses during a failover.
const LEASE: Duration = Duration::from_secs(120);
/// A bound on waiting for one event, so that a lost one fails the test instead of hanging it.
const EVENT_BOUND: Duration = Duration::from_secs(30);
/// Tries of a store call while the client learns a new topology.
const TRIES: usize = 60;

async fn store(cluster: &RedisCluster) -> Result<RedisStore, StoreError> {
    let timeout = Duration::from_millis(1_500);
    RedisStore::connect(cluster_store_config(cluster.urls(), SHARDS as u16, timeout)).await
}

/// A task created, claimed and started by [`WORKER`], and its owner's subscription.
async fn running_task(
    store: &RedisStore,
    id: &str,
    owner: &OwnerHash,
) -> TestResult<(Lease, Subscription)> {
    store.create(queued_task(id, owner, "echo")).await?;
    let lease = start_running(store, id, WORKER, LEASE).await?;
    let subscription = store
        .subscribe(id, owner, None)
        .await?
        .ok_or("subscription refused")?;
    Ok((lease, subscription))
}

async fn next_event(events: &mut EventStream) -> TestResult<StoredEvent> {
    match tokio::time::timeout(EVENT_BOUND, events.next()).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err("the event stream ended".into()),
        Err(_) => Err("an event never arrived".into()),
    }
}

fn step(n: u64) -> EventPayload {
    EventPayload {
        event: "progress".into(),
        data: json!({ "step": n }),
    }
}

/// `INFO commandstats` calls of `command` on node `index`.
async fn calls(cluster: &RedisCluster, index: usize, command: &str) -> TestResult<u64> {
    let mut conn = cluster.node_connection(index).await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    let prefix = format!("cmdstat_{command}:calls=");
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map(str::parse)
        .transpose()?
        .unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_cancellations_stay_on_their_shards_master() -> TestResult {
    let cluster = RedisCluster::start(3, 0)?;
    let store = store(&cluster).await?;
    let owner = AccessToken::generate().owner_hash();
    let mut cancellations = store.watch_cancellations(WORKER).await?;

    // One running task and one cancelled task per shard; each shard has its own master.
    let mut master_of = BTreeMap::new();
    for shard in 0..SHARDS {
        let [run, cancel] =
            <[String; 2]>::try_from(ids_in_shard("t", shard, SHARDS, 2)).map_err(|_| "two ids")?;
        let master = cluster.master_of_key(&store.shard_keys(&run).live())?;
        master_of.insert(shard, master);

        let channel = store.shard_keys(&run).task_channel(&owner, &run);
        let (lease, mut subscription) = running_task(&store, &run, &owner).await?;
        // The subscription lives on the shard's master, as a shard channel only.
        let mut conn = cluster.node_connection(master).await?;
        let (_, sharded): (String, u64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await?;
        assert_eq!(
            sharded, 1,
            "shard {shard}'s channel is not subscribed on its master"
        );
        let (_, classic): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await?;
        assert_eq!(classic, 0);

        let seq = store.emit(&lease, step(1)).await?.ok_or("emit fenced")?;
        let event = next_event(&mut subscription.events).await?;
        assert_eq!((event.seq, event.data["step"].clone()), (seq, json!(1)));
        let done = Transition::completed(TaskResult::output(json!("ok")));
        store
            .compare_and_set(&run, &[TaskStatus::Running], done, Some(&lease))
            .await?;
        let event = next_event(&mut subscription.events).await?;
        assert_eq!(event.event, "resultUpdate");

        // The owner cancels a task the worker holds: the worker hears it on its channel in
        // this shard's slot.
        running_task(&store, &cancel, &owner).await?;
        store
            .compare_and_set(
                &cancel,
                &[TaskStatus::Running],
                Transition::cancelled(),
                None,
            )
            .await?;
        let heard = tokio::time::timeout(EVENT_BOUND, cancellations.recv())
            .await?
            .ok_or("the cancellation feed ended")?;
        assert_eq!(heard, cancel);
    }

    // Every shard published on its own master, and nothing was broadcast.
    let mut masters: Vec<usize> = master_of.values().copied().collect();
    masters.sort_unstable();
    masters.dedup();
    assert_eq!(
        masters.len(),
        SHARDS,
        "the shards share masters: {master_of:?}"
    );
    for master in masters {
        assert!(calls(&cluster, master, "spublish").await? > 0);
        assert_eq!(calls(&cluster, master, "publish").await?, 0);
    }
    Ok(())
}

/// Retries a store call while the cluster client learns the topology after a failover.
macro_rules! settled {
    ($call:expr) => {{
        let mut outcome = $call.await;
        for _ in 0..TRIES {
            match outcome {
                Err(StoreError::Unavailable(_)) => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    outcome = $call.await;
                }
                _ => break,
            }
        }
        outcome
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_delivers_every_event_across_its_masters_failover() -> TestResult {
    let mut cluster = RedisCluster::start(3, 1)?;
    let store = store(&cluster).await?;
    let owner = AccessToken::generate().owner_hash();
    let mut cancellations = store.watch_cancellations(WORKER).await?;
    let [run, cancel] =
        <[String; 2]>::try_from(ids_in_shard("f", 0, SHARDS, 2)).map_err(|_| "two ids")?;
    let (lease, mut subscription) = running_task(&store, &run, &owner).await?;
    running_task(&store, &cancel, &owner).await?;
    store.emit(&lease, step(1)).await?.ok_or("emit fenced")?;
    assert_eq!(next_event(&mut subscription.events).await?.data["step"], 1);

    let master = cluster.master_of_key(&store.shard_keys(&run).live())?;
    cluster.kill_node(master)?;
    cluster.wait_for_failover(master)?;

    // Published on the promoted replica, perhaps before anyone subscribed there again: the
    // subscription still delivers it, in order, once.
    settled!(store.emit(&lease, step(2)))?.ok_or("emit fenced")?;
    let done = Transition::completed(TaskResult::output(json!("ok")));
    settled!(store.compare_and_set(&run, &[TaskStatus::Running], done.clone(), Some(&lease)))?;
    let mut steps = Vec::new();
    loop {
        let event = next_event(&mut subscription.events).await?;
        if event.event == "resultUpdate" {
            break;
        }
        steps.push(event.data["step"].clone());
    }
    assert_eq!(steps, [json!(2)]);

    // The worker's cancellation channel in that shard was moved over too.
    settled!(store.compare_and_set(
        &cancel,
        &[TaskStatus::Running],
        Transition::cancelled(),
        None
    ))?;
    let heard = tokio::time::timeout(EVENT_BOUND, cancellations.recv())
        .await?
        .ok_or("the cancellation feed ended")?;
    assert_eq!(heard, cancel);
    Ok(())
}
