//! The push notification outbox (`store::push`) on a real redis-server, and on a real Redis
//! Cluster: every event a task with configs publishes is kept in its shard, in order, by the
//! script that publishes it; a config put ahead of its task is kept by the task's first event
//! and expires otherwise; claims hide a task from other deliverers until they expire; cursors
//! move only from what was read; a claim takes an owner's tasks only up to its share and moves
//! the rest of them ahead; a release trims what every config is done with and reschedules
//! the rest; a finished task's configs take the task's expiry; a full outbox's drops are
//! counted and taken once.

use std::time::Duration;

use harness::TestResult;
use harness::redis_cluster::RedisCluster;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{cluster_store_config, ids_in_shard, queued_task, start_running};
use protocol::TaskResult;
use protocol::TaskStatus;
use protocol::token::AccessToken;
use serde_json::json;
use store::push::{OwnerShare, PushCursor, PushOutbox, PutMode, PutOutcome, Release};
use store::{EventPayload, Lease, RedisStore, RedisStoreConfig, TaskStore, Transition};

const SHARDS: usize = 3;
const LEASE: Duration = Duration::from_secs(60);
const CLAIM: Duration = Duration::from_secs(60);

async fn sharded(server: &RedisServer) -> Result<RedisStore, store::StoreError> {
    let mut config = RedisStoreConfig::new(server.url());
    config.shards = SHARDS as u16;
    RedisStore::connect(config).await
}

/// The ids of up to 10 due tasks of `shard`, claimed without an owner's share in the way.
async fn claim(outbox: &PushOutbox, shard: usize) -> Result<Vec<String>, store::StoreError> {
    let share = OwnerShare {
        share: 100,
        cap: 100,
        under_way: Vec::new(),
        postpone: Duration::from_secs(1),
    };
    let claimed = outbox.claim_due(shard, CLAIM, 10, &share).await?;
    Ok(claimed.into_iter().map(|task| task.id).collect())
}

async fn progress(store: &RedisStore, lease: &Lease, step: u64) -> TestResult {
    let event = EventPayload {
        event: "progress".into(),
        data: json!({ "step": step }),
    };
    store.emit(lease, event).await?.ok_or("emit refused")?;
    Ok(())
}

async fn complete(store: &RedisStore, id: &str, lease: &Lease) -> TestResult {
    store
        .compare_and_set(
            id,
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(json!({ "done": true }))),
            Some(lease),
        )
        .await?
        .applied()
        .ok_or("completion refused")?;
    Ok(())
}

/// Creates, starts and runs task `id` to completion with two progress events.
async fn run(store: &RedisStore, id: &str) -> TestResult {
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task(id, &owner, "echo")).await?;
    let lease = start_running(store, id, "w1", LEASE).await?;
    progress(store, &lease, 1).await?;
    progress(store, &lease, 2).await?;
    complete(store, id, &lease).await
}

/// Every event of a task with a config, its terminal one included, in order, in its shard.
async fn assert_kept_in_order(outbox: &PushOutbox, store: &RedisStore, id: &str) -> TestResult {
    let batch = outbox.load(id).await?;
    let names: Vec<&str> = batch.events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(&names[..2], ["progress", "progress"]);
    let seqs: Vec<u64> = batch.events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    let stored = store.get(id).await?.ok_or("task gone")?;
    assert_eq!(seqs.last().copied(), Some(stored.seq));
    // Each stamped with its script's time (Redis clock), so a late delivery says when its
    // event happened: in order, the terminal one the task's own last update.
    let stamps: Vec<u64> = batch.events.iter().filter_map(|e| e.at_ms).collect();
    assert_eq!(stamps.len(), 3, "{:?}", batch.events);
    assert!(
        stamps.windows(2).all(|pair| pair[0] <= pair[1]),
        "{stamps:?}"
    );
    assert!(
        stamps.last().copied() >= Some(stored.task.updated_at.0),
        "{stamps:?} against the task's {}",
        stored.task.updated_at.0
    );
    assert_eq!(batch.outbox_len, 3);
    assert_eq!(batch.configs.len(), 1);
    Ok(())
}

#[tokio::test]
async fn every_event_of_a_task_with_a_config_is_kept_in_its_shard_and_claimed_from_it() -> TestResult
{
    let server = RedisServer::start()?;
    let store = sharded(&server).await?;
    let outbox = store.push_outbox(4);
    for shard in 0..SHARDS {
        let [with, without] = <[String; 2]>::try_from(ids_in_shard("push", shard, SHARDS, 2))
            .map_err(|_| "two ids")?;
        let owner = AccessToken::generate().owner_hash();
        store.create(queued_task(&with, &owner, "echo")).await?;
        let put = outbox
            .put_config(
                &with,
                "c1",
                r#"{"url":"https://hooks.example/a"}"#,
                PutMode::Existing,
                None,
            )
            .await?;
        assert_eq!(put, PutOutcome::Stored);
        let lease = start_running(&store, &with, "w1", LEASE).await?;
        progress(&store, &lease, 1).await?;
        progress(&store, &lease, 2).await?;
        complete(&store, &with, &lease).await?;
        assert_kept_in_order(&outbox, &store, &with).await?;

        // A task without configs keeps nothing.
        run(&store, &without).await?;
        let batch = outbox.load(&without).await?;
        assert!(batch.events.is_empty() && batch.configs.is_empty());

        // Due in its own shard only, once: a claim hides it until it expires.
        for other in (0..SHARDS).filter(|other| *other != shard) {
            let claimed = claim(&outbox, other).await?;
            assert!(!claimed.contains(&with), "shard {other} claimed {with}");
        }
        assert_eq!(claim(&outbox, shard).await?, vec![with.clone()]);
        assert!(claim(&outbox, shard).await?.is_empty());
    }
    // Each shard's keys hold its own tasks' outboxes.
    let mut redis = server.client().await?;
    for shard in 0..SHARDS {
        let id = &ids_in_shard("push", shard, SHARDS, 1)[0];
        let key = store.shard_keys(id).push_outbox(id);
        let len: u64 = redis::cmd("LLEN").arg(&key).query_async(&mut redis).await?;
        assert_eq!(len, 3, "{key}");
    }
    Ok(())
}

#[tokio::test]
async fn a_config_put_ahead_of_its_task_is_kept_by_its_first_event_and_expires_otherwise()
-> TestResult {
    let server = RedisServer::start()?;
    let store = sharded(&server).await?;
    let outbox = store.push_outbox(4);
    let mut redis = server.client().await?;
    let pending = PutMode::Pending(Duration::from_secs(60));
    let config = r#"{"url":"https://hooks.example/a"}"#;

    // Created: every event from the first is kept, and the config no longer expires.
    assert_eq!(
        outbox
            .put_config("early", "c1", config, pending, None)
            .await?,
        PutOutcome::Stored
    );
    run(&store, "early").await?;
    assert_kept_in_order(&outbox, &store, "early").await?;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(store.shard_keys("early").push_configs("early"))
        .query_async(&mut redis)
        .await?;
    assert_eq!(
        ttl, -1,
        "a created task's config must not expire while it is delivered"
    );

    // Never created: it expires.
    assert_eq!(
        outbox
            .put_config("never", "c1", config, pending, None)
            .await?,
        PutOutcome::Stored
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(store.shard_keys("never").push_configs("never"))
        .query_async(&mut redis)
        .await?;
    assert!(ttl > 0, "{ttl}");

    // An existing put needs its task; a task has at most its configs.
    let outcome = outbox
        .put_config("missing", "c1", config, PutMode::Existing, None)
        .await?;
    assert_eq!(outcome, PutOutcome::NoTask);
    let small = store.push_outbox(1);
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task("one", &owner, "echo")).await?;
    assert_eq!(
        small
            .put_config("one", "a", config, PutMode::Existing, None)
            .await?,
        PutOutcome::Stored
    );
    assert_eq!(
        small
            .put_config("one", "b", config, PutMode::Existing, None)
            .await?,
        PutOutcome::Full
    );
    // Replacing a config is not adding one.
    assert_eq!(
        small
            .put_config("one", "a", config, PutMode::Existing, None)
            .await?,
        PutOutcome::Stored
    );
    Ok(())
}

#[tokio::test]
async fn cursors_move_from_what_was_read_and_releases_trim_reschedule_and_finish() -> TestResult {
    let server = RedisServer::start()?;
    let store = sharded(&server).await?;
    let outbox = store.push_outbox(4);
    let config = r#"{"url":"https://hooks.example/a"}"#;
    let id = "cursor";
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task(id, &owner, "echo")).await?;
    outbox
        .put_config(id, "a", config, PutMode::Existing, None)
        .await?;
    outbox
        .put_config(id, "b", config, PutMode::Existing, None)
        .await?;
    let lease = start_running(&store, id, "w1", LEASE).await?;
    progress(&store, &lease, 1).await?;
    progress(&store, &lease, 2).await?;

    let batch = outbox.load(id).await?;
    let [a, b] = <[_; 2]>::try_from(batch.configs.clone()).map_err(|_| "two configs")?;
    let first = batch.events[0].seq;
    let moved = PushCursor {
        seq: first,
        ..PushCursor::default()
    };
    assert!(outbox.advance(id, &a.id, &a.raw_cursor, &moved).await?);
    // A second move from the same read is refused (another deliverer moved it).
    assert!(!outbox.advance(id, &a.id, &a.raw_cursor, &moved).await?);
    assert!(outbox.advance(id, &b.id, &b.raw_cursor, &moved).await?);

    // Both are done with the first event: it goes, and the second is left, due now.
    let shard = store::redis::shard_index(id, SHARDS);
    claim(&outbox, shard).await?;
    let release = Release {
        trim: 1,
        loaded: batch.outbox_len,
        retry_in: None,
        finished: false,
    };
    outbox.release(id, release).await?;
    let left = outbox.load(id).await?;
    assert_eq!(left.events.len(), 1);
    assert_eq!(claim(&outbox, shard).await?, vec![id.to_owned()]);

    // Released to wait on a retry: not due before it.
    let release = Release {
        trim: 0,
        loaded: left.outbox_len,
        retry_in: Some(Duration::from_secs(600)),
        finished: false,
    };
    outbox.release(id, release).await?;
    assert!(claim(&outbox, shard).await?.is_empty());

    // An event arriving during a claim makes the task due again at its release.
    complete(&store, id, &lease).await?;
    let batch = outbox.load(id).await?;
    assert_eq!(batch.events.len(), 2);
    let release = Release {
        trim: 0,
        loaded: 1,
        retry_in: Some(Duration::from_secs(600)),
        finished: true,
    };
    outbox.release(id, release).await?;
    assert_eq!(claim(&outbox, shard).await?, vec![id.to_owned()]);

    // Finished: the outbox goes, the configs take the task's expiry.
    let release = Release {
        trim: 2,
        loaded: 2,
        retry_in: None,
        finished: true,
    };
    outbox.release(id, release).await?;
    let mut redis = server.client().await?;
    let keys = store.shard_keys(id);
    let exists: u64 = redis::cmd("EXISTS")
        .arg(keys.push_outbox(id))
        .query_async(&mut redis)
        .await?;
    assert_eq!(exists, 0);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(keys.push_configs(id))
        .query_async(&mut redis)
        .await?;
    let task_ttl: i64 = redis::cmd("PTTL")
        .arg(keys.task(id))
        .query_async(&mut redis)
        .await?;
    // The task's own retention, read by the script (the task's has ticked on since).
    assert!(
        ttl > 0 && task_ttl > 0 && ttl >= task_ttl,
        "{ttl} {task_ttl}"
    );
    assert!(claim(&outbox, shard).await?.is_empty());

    // Deleting the last config takes everything with it; deleting again is no error.
    assert!(outbox.delete_config(id, "a").await?);
    assert!(outbox.delete_config(id, "b").await?);
    assert!(!outbox.delete_config(id, "b").await?);
    assert!(outbox.configs(id).await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_each_shard_keeps_its_tasks_events() -> TestResult {
    let cluster = RedisCluster::start(3, 0)?;
    let config = cluster_store_config(cluster.urls(), SHARDS as u16, Duration::from_secs(5));
    let store = RedisStore::connect(config).await?;
    let outbox = store.push_outbox(4);
    for shard in 0..SHARDS {
        let id = ids_in_shard("cluster-push", shard, SHARDS, 1)
            .pop()
            .ok_or("an id")?;
        let owner = AccessToken::generate().owner_hash();
        store.create(queued_task(&id, &owner, "echo")).await?;
        outbox
            .put_config(
                &id,
                "c1",
                r#"{"url":"https://hooks.example/a"}"#,
                PutMode::Existing,
                None,
            )
            .await?;
        let lease = start_running(&store, &id, "w1", LEASE).await?;
        progress(&store, &lease, 1).await?;
        progress(&store, &lease, 2).await?;
        complete(&store, &id, &lease).await?;
        assert_kept_in_order(&outbox, &store, &id).await?;
        assert_eq!(claim(&outbox, shard).await?, vec![id.clone()]);
    }
    Ok(())
}

#[tokio::test]
async fn a_claim_takes_an_owners_tasks_up_to_its_share_and_moves_the_rest_ahead() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "share".into();
    let store = RedisStore::connect(config).await?;
    let outbox = store.push_outbox(4);
    let flood = AccessToken::generate().owner_hash();
    let other = AccessToken::generate().owner_hash();
    let config = r#"{"url":"https://hooks.example/a"}"#;
    let mut ids = Vec::new();
    for (n, owner) in [&flood, &flood, &flood, &flood, &other]
        .into_iter()
        .enumerate()
    {
        let id = format!("share-{n}");
        store.create(queued_task(&id, owner, "echo")).await?;
        outbox
            .put_config(&id, "c", config, PutMode::Existing, None)
            .await?;
        let lease = start_running(&store, &id, "w1", LEASE).await?;
        progress(&store, &lease, 1).await?;
        ids.push(id);
    }
    // The flood's owner has one task under way here already; its share is two, and past the
    // shares the caller takes tasks only while it has fewer than four under way.
    let share = OwnerShare {
        share: 2,
        cap: 4,
        under_way: vec![(format!("o:{}", flood.as_str()), 1)],
        postpone: Duration::from_secs(600),
    };
    let claimed = outbox.claim_due(0, CLAIM, 10, &share).await?;
    let of = |owner: &protocol::token::OwnerHash| {
        claimed
            .iter()
            .filter(|task| task.group == format!("o:{}", owner.as_str()))
            .count()
    };
    // The flood's first (up to its share) and the other owner's, in due order; then one more
    // of the flood's past its share (four under way: the cap).
    assert_eq!(of(&flood), 2, "{claimed:?}");
    assert_eq!(of(&other), 1, "{claimed:?}");
    let groups: Vec<&str> = claimed.iter().map(|task| task.group.as_str()).collect();
    let (flood_group, other_group) = (
        format!("o:{}", flood.as_str()),
        format!("o:{}", other.as_str()),
    );
    assert_eq!(groups, [&flood_group, &other_group, &flood_group]);
    // The flood's other two were moved ahead, not claimed: nothing is due now.
    let share = OwnerShare {
        share: 100,
        cap: 100,
        under_way: Vec::new(),
        postpone: Duration::from_secs(1),
    };
    assert!(outbox.claim_due(0, CLAIM, 10, &share).await?.is_empty());
    let mut redis = server.client().await?;
    let due: u64 = redis::cmd("ZCARD")
        .arg(store.shard_keys(&ids[0]).push_due())
        .query_async(&mut redis)
        .await?;
    assert_eq!(due, 5);
    Ok(())
}

#[tokio::test]
async fn events_a_full_outbox_drops_are_counted_and_taken_once() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "drops".into();
    let store = RedisStore::connect(config).await?;
    let outbox = store.push_outbox(4);
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task("chatty", &owner, "echo")).await?;
    outbox
        .put_config(
            "chatty",
            "c",
            r#"{"url":"https://hooks.example/a"}"#,
            PutMode::Existing,
            None,
        )
        .await?;
    let lease = start_running(&store, "chatty", "w1", LEASE).await?;
    // The outbox keeps 1,000 events: three past it drop its three oldest.
    for step in 0..OUTBOX_MAX + 3 {
        progress(&store, &lease, step).await?;
    }
    let batch = outbox.load("chatty").await?;
    assert_eq!(batch.outbox_len as u64, OUTBOX_MAX);
    assert_eq!(batch.dropped, 3, "every drop is counted");
    // Taken once: the next load reports none (no other deliverer counts them again).
    assert_eq!(outbox.load("chatty").await?.dropped, 0);
    Ok(())
}

/// `PUSH_OUTBOX_MAX` of `lua/includes/push_outbox.lua`.
const OUTBOX_MAX: u64 = 1000;
