//! The scripts of the store's non-task parts, each run at least once through its public API:
//! credentials and nonces, idempotency records (a subject's quota included), the worker registry and
//! reporter lease, rate limits, and push notifications (put, the outbox its task's events
//! fill, claim, advance, release, delete; on a finished task too, whose retained bytes they
//! move; an outbox past its bound, which counts its drops). The task scripts run through the
//! conformance suite.

use std::time::Duration;

use harness::store_fixtures::{ids_in_shard, queued_task, start_running};
use protocol::token::AccessToken;
use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::credentials::{ClaimOutcome, CredentialLedger, CredentialState};
use store::idempotency::{Begin, IdempotencyLimits, IdempotencyStore, StoredResponse};
use store::push::{OwnerShare, PushCursor, PutMode, Release};
use store::ratelimit::{Quota, RateLimiter, RedisRateLimiter, Subject};
use store::registry::{WorkerEntry, WorkerRegistry};
use store::{EventPayload, RedisStore, RedisStoreConfig, TaskStore, Transition};

use crate::BoxError;

const LONG: Duration = Duration::from_secs(60);

/// Runs every workload on a namespace of its own on the server at `url`, split in `shards`.
pub async fn run(url: &str, shards: u16) -> Result<(), BoxError> {
    let mut config = RedisStoreConfig::new(url.to_owned());
    config.namespace = format!("w{}", AccessToken::generate().expose());
    config.shards = shards;
    let store = RedisStore::connect(config).await?;
    credentials(&store).await?;
    idempotency(&store).await?;
    registry(&store).await?;
    rate_limit(&store).await?;
    push(&store).await?;
    bounds(url, shards).await?;
    Ok(())
}

/// `PUSH_OUTBOX_MAX` of `lua/includes/push_outbox.lua`.
const PUSH_OUTBOX_MAX: usize = 1000;

/// A task with a config emits past its outbox's bound: the oldest event is dropped and the
/// drop counted (the shard's `push-dropped`, taken by the next load).
async fn outbox_past_its_bound(store: &RedisStore) -> Result<(), BoxError> {
    let outbox = store.push_outbox(4);
    let id = ids_in_shard("lua-keys-drop", 0, store.shard_count(), 1)
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
    let lease = start_running(store, &id, "w1", LONG)
        .await
        .map_err(|err| err.to_string())?;
    for step in 0..=PUSH_OUTBOX_MAX {
        let event = EventPayload {
            event: "progress".into(),
            data: json!({ "step": step }),
        };
        store.emit(&lease, event).await?.ok_or("emit refused")?;
    }
    assert!(outbox.load(&id).await?.dropped > 0, "a drop is counted");
    Ok(())
}

/// The creation bounds' paths: tasks from a client address (its live set, left when they
/// finish) and a retained bound that evicts the oldest finished task, with its push configs.
async fn bounds(url: &str, shards: u16) -> Result<(), BoxError> {
    let mut config = RedisStoreConfig::new(url.to_owned());
    config.namespace = format!("b{}", AccessToken::generate().expose());
    config.shards = shards;
    config.max_retained = 2;
    config.max_live_per_address = 10;
    let store = RedisStore::connect(config).await?;
    let owner = AccessToken::generate().owner_hash();
    let outbox = store.push_outbox(4);
    let ids = ids_in_shard("lua-keys-bounds", 0, store.shard_count(), 4);
    for id in &ids {
        let mut task = queued_task(id, &owner, "echo");
        task.source = Some("192.0.2.7".into());
        store.create(task).await?;
        outbox
            .put_config(
                id,
                "c1",
                r#"{"url":"https://hooks.example/a"}"#,
                PutMode::Existing,
                None,
            )
            .await?;
        store
            .compare_and_set(id, &[TaskStatus::Running], Transition::cancelled(), None)
            .await?
            .applied()
            .ok_or("cancel refused")?;
    }
    Ok(())
}

async fn credentials(store: &RedisStore) -> Result<(), BoxError> {
    let ledger = store.credentials();
    let outcome = ledger.claim("cred-1", "task-1", LONG).await?;
    assert_eq!(outcome, ClaimOutcome::Taken);
    assert!(ledger.release("cred-1", "task-1").await?);
    assert_eq!(
        ledger.claim("cred-1", "task-2", LONG).await?,
        ClaimOutcome::Taken
    );
    let moved = ledger
        .advance(
            "cred-1",
            "task-2",
            CredentialState::Claimed,
            CredentialState::Settling,
            Some("{}"),
        )
        .await?;
    assert!(moved);
    // settle=after: claimed -> reserved -> settling, re-indexed on the way.
    assert_eq!(
        ledger.claim("cred-2", "task-3", LONG).await?,
        ClaimOutcome::Taken
    );
    assert!(ledger.reserve("cred-2", "task-3", "{}", LONG).await?);
    assert!(
        ledger
            .advance(
                "cred-2",
                "task-3",
                CredentialState::Reserved,
                CredentialState::Settling,
                None,
            )
            .await?
    );
    ledger.issue_nonce("nonce-1", LONG).await?;
    assert!(ledger.take_nonce("nonce-1").await?);
    Ok(())
}

async fn idempotency(store: &RedisStore) -> Result<(), BoxError> {
    let limits = IdempotencyLimits {
        max_records: 2,
        max_records_per_subject: 1,
        ..IdempotencyLimits::default()
    };
    let records = store::idempotency::RedisIdempotency::with_limits(store, limits);
    let response = StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: "{}".into(),
    };
    let subjects = ["address:192.0.2.1".to_owned(), "token:aa".to_owned()];
    let Begin::Started(first) = records
        .begin_for("scope", "key-1", "fp", &subjects, LONG)
        .await?
    else {
        return Err("the first record was not started".into());
    };
    assert!(records.complete(&first, &response, LONG).await?);
    // Past the subject's quota: refused, nothing evicted.
    let over = records
        .begin_for("scope", "key-2", "fp", &subjects, LONG)
        .await?;
    assert!(matches!(over, Begin::OverQuota { .. }), "{over:?}");
    // Another subject, uncharged: started, then released.
    let Begin::Started(second) = records.begin("scope", "key-3", "fp", LONG).await? else {
        return Err("the second record was not started".into());
    };
    assert!(records.release(&second).await?);
    Ok(())
}

async fn registry(store: &RedisStore) -> Result<(), BoxError> {
    let registry = store.registry();
    let entry = WorkerEntry {
        worker_id: "w1".into(),
        host: "w1.example:8080".into(),
        started_at_ms: 1_700_000_000_000,
        concurrency: 1,
        entrypoints: Vec::new(),
    };
    registry.heartbeat(&entry, LONG).await?;
    registry.version().await?;
    // An operator's drain request (written only for a live worker), removed by the deregister.
    let drain = store::registry::Drain {
        by: "operator".to_owned(),
        at_ms: 1,
    };
    assert!(registry.drain("w1", &drain).await?.is_some());
    assert!(registry.drain("nobody", &drain).await?.is_none());
    registry.deregister("w1").await?;
    assert!(registry.hold_reporter("w1", LONG).await?);
    registry.release_reporter("w1").await?;
    // An operator's pause and resume (one script each way, moving the registry version).
    let pause = store::registry::Pause {
        mode: store::registry::PauseMode::Queue,
        by: "operator".to_owned(),
        at_ms: 1,
    };
    registry.pause("echo", &pause).await?;
    assert!(registry.resume("echo").await?);
    Ok(())
}

async fn rate_limit(store: &RedisStore) -> Result<(), BoxError> {
    let quota = Quota::new(10.0, 2).ok_or("a quota")?;
    let subject = Subject {
        policy: "per-address",
        key: "addr:192.0.2.1".into(),
        quota,
    };
    RedisRateLimiter::new(store).check(&[subject]).await?;
    Ok(())
}

/// A task with a config runs to its end, so its events fill the outbox; a deliverer claims,
/// advances and releases it; a config is deleted and one is put ahead of its task.
async fn push(store: &RedisStore) -> Result<(), BoxError> {
    let outbox = store.push_outbox(4);
    let shards = store.shard_count();
    let id = ids_in_shard("lua-keys-push", 0, shards, 1)
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
            Some("192.0.2.9"),
        )
        .await?;
    outbox
        .put_config(
            &id,
            "c2",
            r#"{"url":"https://hooks.example/b"}"#,
            PutMode::Existing,
            None,
        )
        .await?;
    let lease = start_running(store, &id, "w1", LONG)
        .await
        .map_err(|err| err.to_string())?;
    let event = EventPayload {
        event: "progress".into(),
        data: json!({ "step": 1 }),
    };
    store.emit(&lease, event).await?.ok_or("emit refused")?;
    store
        .compare_and_set(
            &id,
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(json!({ "done": true }))),
            Some(&lease),
        )
        .await?
        .applied()
        .ok_or("completion refused")?;
    // The task is finished and counted in the retained bytes: a config put on it now, the
    // delete and the release below move its size (push_bytes.lua).
    outbox
        .put_config(
            &id,
            "c3",
            r#"{"url":"https://hooks.example/c"}"#,
            PutMode::Existing,
            None,
        )
        .await?;
    let share = OwnerShare {
        share: 100,
        cap: 100,
        under_way: Vec::new(),
        postpone: Duration::from_secs(1),
    };
    let claimed = outbox.claim_due(0, LONG, 10, &share).await?;
    assert!(claimed.iter().any(|task| task.id == id), "{claimed:?}");
    let batch = outbox.load(&id).await?;
    let config = batch.configs.first().ok_or("a config")?;
    let last = batch.events.last().ok_or("an event")?.seq;
    let next = PushCursor {
        seq: last,
        ..PushCursor::default()
    };
    assert!(
        outbox
            .advance(&id, &config.id, &config.raw_cursor, &next)
            .await?
    );
    assert!(outbox.delete_config(&id, "c2").await?);
    let release = Release {
        trim: batch.outbox_len,
        loaded: batch.outbox_len,
        retry_in: None,
        finished: true,
    };
    outbox.release(&id, release).await?;
    outbox_past_its_bound(store).await?;
    let ahead = ids_in_shard("lua-keys-ahead", 0, shards, 1)
        .pop()
        .ok_or("an id")?;
    outbox
        .put_config(
            &ahead,
            "c1",
            r#"{"url":"https://hooks.example/a"}"#,
            PutMode::Pending(LONG),
            None,
        )
        .await?;
    Ok(())
}
