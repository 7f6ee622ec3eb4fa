//! Sharded namespaces on a real redis-server: the shard count is stamped and a process with
//! another count is refused (store and real binaries), a worker busy with one shard still
//! serves the others, capacity is per shard, and tasks really land in every shard's keys.

use std::time::Duration;

use harness::TestResult;
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{ids_in_shard, queued_task};
use protocol::token::AccessToken;
use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::{RedisStore, RedisStoreConfig, StoreError, TakeSpec, TaskStore, Transition};

const LEASE: Duration = Duration::from_secs(10);
const RUN: Duration = Duration::from_secs(60);

async fn store(server: &RedisServer, shards: u16) -> Result<RedisStore, StoreError> {
    let mut config = RedisStoreConfig::new(server.url());
    config.shards = shards;
    RedisStore::connect(config).await
}

fn incompatible(result: Result<RedisStore, StoreError>) -> Result<String, String> {
    match result {
        Err(StoreError::Incompatible(message)) => Ok(message),
        Err(other) => Err(format!("expected Incompatible, got {other}")),
        Ok(_) => Err("a store with another shard count was accepted".into()),
    }
}

#[tokio::test]
async fn another_shard_count_is_refused_in_both_directions() -> TestResult {
    let server = RedisServer::start()?;
    let owner = AccessToken::generate().owner_hash();
    // An unsharded namespace holding a task: nobody may read it as sharded.
    let one = store(&server, 1).await?;
    one.create(queued_task("kept", &owner, "echo")).await?;
    let message = incompatible(store(&server, 2).await).map_err(|e| e.to_string())?;
    assert!(message.contains("split into 1 shard"), "{message}");
    assert!(message.contains("REDIS_SHARDS=1"), "{message}");

    // A namespace stamped with 4 shards refuses 1 and 3, and accepts 4 again.
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "four".into();
    config.shards = 4;
    let four = RedisStore::connect(config.clone()).await?;
    for other in [1, 3] {
        let mut wrong = config.clone();
        wrong.shards = other;
        let message = incompatible(RedisStore::connect(wrong).await).map_err(|e| e.to_string())?;
        assert!(message.contains("split into 4 shard"), "{message}");
    }
    let again = RedisStore::connect(config).await?;
    assert_eq!(again.shard_count(), 4);
    drop(four);

    // Nothing was lost or moved by the refusals.
    let kept = one.get("kept").await?.ok_or("the task vanished")?;
    assert_eq!(kept.task.status, TaskStatus::Running);
    Ok(())
}

#[tokio::test]
async fn a_gateway_and_a_worker_with_another_shard_count_exit_with_the_reason() -> TestResult {
    let server = RedisServer::start()?;
    // Stamp the default namespace with 3 shards.
    let _stamped = store(&server, 3).await?;
    let envs = |shards: &str| {
        vec![
            ("REDIS_URL", server.url()),
            ("REDIS_SHARDS", shards.to_owned()),
            ("LISTEN_ADDR", "127.0.0.1:0".to_owned()),
        ]
    };
    for binary in ["gateway", "worker"] {
        // ServiceProcess::start itself: the point is a process that refuses to start.
        let mut process = ServiceProcess::start(binary, binary, &[], &envs("2"))?;
        let status = process.wait_exit(Duration::from_secs(30))?;
        assert!(
            !status.success(),
            "{binary} started with the wrong shard count"
        );
        let log = harness::process::plain(&process.log());
        assert!(log.contains("split into 3 shard"), "{binary}: {log}");
    }
    Ok(())
}

#[tokio::test]
async fn a_worker_chained_on_one_shard_still_serves_the_others() -> TestResult {
    let server = RedisServer::start()?;
    let store = store(&server, 2).await?;
    let owner = AccessToken::generate().owner_hash();
    let spec = TakeSpec {
        entrypoints: vec!["work".into()],
        holder: "w1".into(),
        lease_ttl: LEASE,
        max_run: RUN,
        max: 1,
    };
    // Twenty tasks in shard 0, and the worker's slot starts on them; then one task in shard 1,
    // then twenty more in shard 0, newer than it. A slot that always took its next task from
    // the shard it just finished in would run the lone task last, behind all of them.
    let crowded = ids_in_shard("crowded", 0, 2, 40);
    for id in &crowded[..20] {
        store.create(queued_task(id, &owner, "work")).await?;
    }
    let mut running = store.take_active(&spec, Duration::ZERO).await?;
    let lone = ids_in_shard("lone", 1, 2, 1).concat();
    store.create(queued_task(&lone, &owner, "work")).await?;
    for id in &crowded[20..] {
        store.create(queued_task(id, &owner, "work")).await?;
    }

    let mut order = Vec::new();
    while let Some(started) = running.pop() {
        order.push(started.claim.lease.task_id.clone());
        let done = Transition::completed(TaskResult::output(json!(null)));
        let finished = store
            .finish_and_take(&started.activation.lease, done, Some(&spec))
            .await?;
        running.extend(finished.next);
    }
    assert_eq!(order.len(), 41, "every task ran once: {order:?}");
    let position = order
        .iter()
        .position(|id| id == &lone)
        .ok_or("the lone task never ran")?;
    // Every few finishes (4) leave the take to the shards' turn, which starts at another
    // shard each time: the lone task runs within a couple of turns, neither behind the twenty
    // newer tasks of the crowded shard nor behind the twenty older ones (queues are FIFO per
    // shard; across shards the turns decide).
    assert!(position < 8, "the lone task ran {position}th: {order:?}");
    Ok(())
}

#[tokio::test]
async fn capacity_is_per_shard_and_tasks_use_every_shard() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.shards = 2;
    config.max_tasks = 4;
    let store = RedisStore::connect(config).await?;
    let owner = AccessToken::generate().owner_hash();
    // Each shard admits ceil(4 / 2) = 2.
    let first = ids_in_shard("first", 0, 2, 3);
    store.create(queued_task(&first[0], &owner, "echo")).await?;
    store.create(queued_task(&first[1], &owner, "echo")).await?;
    match store.create(queued_task(&first[2], &owner, "echo")).await {
        Err(StoreError::Capacity { max: 2 }) => {}
        other => return Err(format!("a third task in a full shard: {other:?}").into()),
    }
    let second = ids_in_shard("second", 1, 2, 2);
    for id in &second {
        store.create(queued_task(id, &owner, "echo")).await?;
    }
    assert_eq!(store.live_count().await?, 4);
    assert_eq!(store.queue_depth("echo").await?, 4);

    // Each shard's live set holds its own tasks, under its own hash tag.
    let mut conn = server.client().await?;
    for (shard, ids) in [(0, &first[..2]), (1, &second[..])] {
        let live: Vec<String> = redis::cmd("SMEMBERS")
            .arg(format!(
                "{{{}}}:live",
                store::redis::shard_tag("tc", shard, 2)
            ))
            .query_async(&mut conn)
            .await?;
        let mut live = live;
        live.sort();
        let mut expected = ids.to_vec();
        expected.sort();
        assert_eq!(live, expected, "shard {shard}");
    }
    // The owner's listing merges both shards, newest first.
    let page = store.list(&owner, &Default::default()).await?;
    assert_eq!(page.total, 4);
    let mut listed: Vec<String> = page.tasks.iter().map(|t| t.task_id.clone()).collect();
    assert!(
        page.tasks
            .windows(2)
            .all(|pair| pair[0].created_at >= pair[1].created_at),
        "{listed:?}"
    );
    listed.sort();
    let mut all: Vec<String> = first[..2].iter().chain(&second).cloned().collect();
    all.sort();
    assert_eq!(listed, all);
    Ok(())
}

#[tokio::test]
async fn shards_spread_evenly_over_the_masters_of_a_cluster() -> TestResult {
    use store::redis::{shard_tag, tag_slot};
    for masters in [2usize, 3] {
        let cluster = harness::redis_cluster::RedisCluster::start(masters, 0)?;
        for shards in [masters, 2 * masters] {
            let mut per_master = std::collections::BTreeMap::<usize, usize>::new();
            for shard in 0..shards {
                let tag = shard_tag("tc", shard, shards);
                let key = format!("{{{tag}}}:live");
                // The store's slot arithmetic is the cluster's.
                assert_eq!(
                    usize::from(cluster.key_slot(&key)?),
                    tag_slot(&tag),
                    "{key}"
                );
                *per_master.entry(cluster.master_of_key(&key)?).or_default() += 1;
            }
            // S a multiple of P: S / P shards on each master.
            assert_eq!(per_master.len(), masters, "{shards} shards: {per_master:?}");
            assert!(
                per_master.values().all(|&n| n == shards / masters),
                "{shards} shards: {per_master:?}"
            );
        }
    }
    Ok(())
}
