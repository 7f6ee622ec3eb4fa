//! Behaviour only the memory store has (eviction, retention against a hand-moved clock,
//! listener bookkeeping). Behaviour every store shares is in the conformance suite.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use super::*;
use crate::{Admission, Invocation, NewTask, Phase};
use protocol::TaskResult;
use protocol::token::AccessToken;

#[derive(Default)]
struct ManualClock(AtomicU64);

impl ManualClock {
    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn store(max_tasks: u64, retention: Duration) -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_000_000)));
    let config = MemoryStoreConfig {
        max_tasks,
        retention,
        ..MemoryStoreConfig::default()
    };
    (MemoryStore::with_clock(config, clock.clone()), clock)
}

fn owner() -> OwnerHash {
    AccessToken::generate().owner_hash()
}

fn new_task(id: &str, owner: &OwnerHash, admission: Admission) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: "echo".into(),
            input: json!({"id": id}),
            context_id: None,
            metadata: None,
            trace_context: Default::default(),
        },
        admission,
        max_attempts: 3,
        retention: None,
        source: None,
        private_owner: false,
    }
}

async fn complete(store: &MemoryStore, id: &str) {
    let outcome = store
        .compare_and_set(
            id,
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(json!(id))),
            None,
        )
        .await;
    assert!(matches!(outcome, Ok(CasOutcome::Applied(_))), "{outcome:?}");
}

async fn exists(store: &MemoryStore, id: &str) -> bool {
    matches!(store.get(id).await, Ok(Some(_)))
}

#[tokio::test]
async fn capacity_evicts_the_least_recently_updated_terminal_task_first() {
    let (store, clock) = store(2, DEFAULT_RETENTION);
    let me = owner();
    for id in ["a", "b"] {
        assert!(
            store
                .create(new_task(id, &me, Admission::Queued))
                .await
                .is_ok()
        );
        clock.advance(10);
    }
    // "b" finishes before "a": "b" is the older terminal task although created later.
    complete(&store, "b").await;
    clock.advance(10);
    complete(&store, "a").await;
    clock.advance(10);

    assert!(
        store
            .create(new_task("c", &me, Admission::Queued))
            .await
            .is_ok()
    );
    assert!(
        !exists(&store, "b").await,
        "oldest-updated terminal task is evicted"
    );
    assert!(exists(&store, "a").await);

    // Store full with one terminal and one live task: "a" goes next.
    assert!(
        store
            .create(new_task("d", &me, Admission::Queued))
            .await
            .is_ok()
    );
    assert!(!exists(&store, "a").await);

    // Only live tasks left: refused.
    let refused = store.create(new_task("e", &me, Admission::Queued)).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { max: 2 })),
        "{refused:?}"
    );
    assert_eq!(store.live_count().await.ok(), Some(2));
}

#[tokio::test]
async fn terminal_tasks_are_purged_once_retention_has_passed() {
    let (store, clock) = store(10, Duration::from_millis(1_000));
    let me = owner();
    for id in ["done", "live"] {
        assert!(
            store
                .create(new_task(id, &me, Admission::Queued))
                .await
                .is_ok()
        );
    }
    complete(&store, "done").await;

    clock.advance(999);
    assert!(
        exists(&store, "done").await,
        "kept until retention has passed"
    );
    clock.advance(1);
    assert!(
        !exists(&store, "done").await,
        "purged at updated_at + retention"
    );
    assert!(
        exists(&store, "live").await,
        "running tasks are never purged"
    );

    let page = store.list(&me, &ListQuery::default()).await.ok();
    assert_eq!(page.map(|page| page.total), Some(1));
}

#[tokio::test]
async fn a_dropped_subscription_unregisters_its_listener() {
    let (store, _clock) = store(10, DEFAULT_RETENTION);
    let me = owner();
    assert!(
        store
            .create(new_task("t", &me, Admission::Queued))
            .await
            .is_ok()
    );
    let listeners = |store: &MemoryStore| store.with_state(|state, _| state.listener_count("t"));

    let first = store.subscribe("t", &me, None).await.ok().flatten();
    let second = store.subscribe("t", &me, None).await.ok().flatten();
    assert_eq!(listeners(&store), 2);
    drop(first);
    assert_eq!(listeners(&store), 1);

    let mut second = second.map(|sub| sub.events);
    store.close().await;
    assert_eq!(listeners(&store), 0);
    // Closing ends the stream rather than leaving it pending.
    let next = match second.as_mut() {
        Some(events) => tokio::time::timeout(Duration::from_secs(5), events.next()).await,
        None => Ok(None),
    };
    assert!(matches!(next, Ok(None)), "{next:?}");
}

#[tokio::test]
async fn a_claimed_task_expires_on_the_store_clock() {
    let (store, clock) = store(10, DEFAULT_RETENTION);
    let me = owner();
    let ttl = Duration::from_millis(500);
    let created = store
        .create(new_task("t", &me, Admission::Reserved { ttl }))
        .await;
    assert!(created.is_ok());
    let claim = store
        .claim_execution("t", "w1", Duration::from_millis(100))
        .await
        .ok()
        .flatten();
    let Some(claim) = claim else {
        panic!("claim failed");
    };
    assert_eq!(claim.lease.expires_at_ms, clock.now_ms() + 100);
    clock.advance(100);
    assert_eq!(store.hand_off(&claim.lease).await.ok(), Some(false));
    assert_eq!(store.reap_expired_admissions().await.ok(), Some(1));
    let task = store.get("t").await.ok().flatten();
    assert_eq!(
        task.as_ref().map(|t| t.task.status),
        Some(TaskStatus::Cancelled)
    );
    assert_eq!(task.map(|t| t.phase), Some(Phase::Terminal));
}

/// A terminal task keeps its values as text and rebuilds its first and last events (see
/// `frozen.rs`): everything read back must be what was written and sent.
#[tokio::test]
async fn a_frozen_terminal_task_reads_back_exactly_as_it_was()
-> Result<(), Box<dyn std::error::Error>> {
    let (store, _clock) = store(100, Duration::from_secs(600));
    let owner = owner();
    let mut new = new_task("frozen", &owner, Admission::Queued);
    new.invocation.metadata = Some(json!({"m": [1, 2]}));
    new.invocation.context_id = Some("ctx".into());
    new.invocation
        .trace_context
        .insert("traceparent".into(), "00-abc-def-01".into());
    let invocation = new.invocation.clone();
    store.create(new).await?;
    let mut live = store
        .subscribe("frozen", &owner, Some(0))
        .await?
        .ok_or("own task")?;
    let mut sent = live.replay.clone();
    let claim = store
        .claim_execution("frozen", "w1", Duration::from_secs(30))
        .await?
        .ok_or("claimed")?;
    store
        .activate_execution(
            &claim.lease,
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
        .await?
        .ok_or("active")?;
    store
        .emit(
            &claim.lease,
            EventPayload {
                event: "progress".into(),
                data: json!({"pct": 50}),
            },
        )
        .await?;
    store
        .compare_and_set(
            "frozen",
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(json!({"out": "put"}))),
            Some(&claim.lease),
        )
        .await?;
    while let Some(event) = live.events.next().await {
        let done = event.event == "resultUpdate";
        sent.push(event);
        if done {
            break;
        }
    }
    assert_eq!(sent.len(), 3, "{sent:?}");

    let stored = store.get("frozen").await?.ok_or("kept")?;
    assert_eq!(stored.invocation, invocation);
    assert_eq!(
        stored.task.result,
        Some(TaskResult::output(json!({"out": "put"})))
    );
    let again = store
        .subscribe("frozen", &owner, Some(0))
        .await?
        .ok_or("own task")?;
    assert_eq!(again.replay, sent, "the log replays what was sent");
    assert_eq!(again.snapshot, stored.task);
    let listed = store.list(&owner, &ListQuery::default()).await?;
    assert_eq!(listed.tasks, vec![stored.task.clone()]);

    // A later terminal write thaws it first: the old terminal event stays as it was sent.
    let moved = store
        .compare_and_set(
            "frozen",
            &[TaskStatus::Completed],
            Transition::cancelled(),
            None,
        )
        .await?;
    assert!(matches!(moved, CasOutcome::Applied(_)), "{moved:?}");
    let last = store
        .subscribe("frozen", &owner, Some(0))
        .await?
        .ok_or("own task")?;
    assert_eq!(last.replay.len(), 4);
    assert_eq!(last.replay[..3], sent[..]);
    assert_eq!(last.replay[3].data["status"], "cancelled");
    let after = store.get("frozen").await?.ok_or("kept")?;
    assert_eq!(after.invocation, invocation);
    Ok(())
}

fn bounded_store(
    max_retained: u64,
    max_retained_per_owner: u64,
    max_live_per_owner: u64,
) -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_000_000)));
    let config = MemoryStoreConfig {
        max_tasks: 100,
        max_retained,
        max_retained_per_owner,
        max_live_per_owner,
        ..MemoryStoreConfig::default()
    };
    (MemoryStore::with_clock(config, clock.clone()), clock)
}

async fn create_ok(store: &MemoryStore, id: &str, owner: &OwnerHash) {
    let created = store.create(new_task(id, owner, Admission::Queued)).await;
    assert!(created.is_ok(), "{id}: {created:?}");
}

#[tokio::test]
async fn the_retained_budget_evicts_the_oldest_terminal_task_and_refuses_only_live_ones() {
    // Room for 3 stored tasks although 100 may be live.
    let (store, clock) = bounded_store(3, 0, 0);
    let (me, other) = (owner(), owner());
    for id in ["a", "b", "c"] {
        create_ok(&store, id, &me).await;
        clock.advance(10);
    }
    complete(&store, "a").await;
    clock.advance(10);
    complete(&store, "b").await;
    clock.advance(10);
    // Full: another owner's task evicts the terminal task that finished first.
    create_ok(&store, "d", &other).await;
    assert!(!exists(&store, "a").await, "the oldest terminal task goes");
    assert!(exists(&store, "b").await);
    create_ok(&store, "e", &other).await;
    assert!(!exists(&store, "b").await);
    // c, d, e are all live: nothing to evict.
    let refused = store.create(new_task("f", &other, Admission::Queued)).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { max: 3 })),
        "{refused:?}"
    );
    let page = store.list(&me, &ListQuery::default()).await;
    assert_eq!(page.map(|page| page.total).ok(), Some(1), "only c is left");
}

#[tokio::test]
async fn an_owner_over_its_retained_budget_loses_its_own_oldest_terminal_task() {
    let (store, clock) = bounded_store(0, 2, 0);
    let (me, other) = (owner(), owner());
    create_ok(&store, "other", &other).await;
    complete(&store, "other").await;
    create_ok(&store, "a", &me).await;
    clock.advance(10);
    create_ok(&store, "b", &me).await;
    complete(&store, "a").await;
    clock.advance(10);
    create_ok(&store, "c", &me).await;
    assert!(
        !exists(&store, "a").await,
        "the owner's oldest terminal task goes"
    );
    assert!(exists(&store, "other").await, "another owner's task stays");
    // b and c are live: the owner may hold no more.
    let refused = store.create(new_task("d", &me, Admission::Queued)).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::OwnerCapacity {
                max: 2,
                live: false
            })
        ),
        "{refused:?}"
    );
    create_ok(&store, "other-2", &other).await;
}

#[tokio::test]
async fn an_owner_over_its_live_limit_is_refused_until_one_finishes() {
    let (store, _clock) = bounded_store(0, 0, 2);
    let (me, other) = (owner(), owner());
    create_ok(&store, "a", &me).await;
    create_ok(&store, "b", &me).await;
    let refused = store.create(new_task("c", &me, Admission::Queued)).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::OwnerCapacity { max: 2, live: true })
        ),
        "{refused:?}"
    );
    create_ok(&store, "x", &other).await;
    complete(&store, "a").await;
    create_ok(&store, "c", &me).await;
}

fn from(id: &str, owner: &OwnerHash, source: &str) -> NewTask {
    NewTask {
        source: Some(source.to_owned()),
        ..new_task(id, owner, Admission::Queued)
    }
}

#[tokio::test]
async fn a_client_address_over_its_live_limit_is_refused_whatever_the_owner() {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_000_000)));
    let config = MemoryStoreConfig {
        max_live_per_address: 2,
        ..MemoryStoreConfig::default()
    };
    let store = MemoryStore::with_clock(config, clock);
    // A fresh owner per task, as anonymous `POST /tasks` makes.
    for id in ["a", "b"] {
        let created = store.create(from(id, &owner(), "198.51.100.1")).await;
        assert!(created.is_ok(), "{id}: {created:?}");
    }
    let refused = store.create(from("c", &owner(), "198.51.100.1")).await;
    assert!(
        matches!(refused, Err(StoreError::AddressCapacity { max: 2 })),
        "{refused:?}"
    );
    // Another address, and a task without one, are not held back.
    let other = store.create(from("x", &owner(), "198.51.100.2")).await;
    assert!(other.is_ok(), "{other:?}");
    create_ok(&store, "internal", &owner()).await;
    // A finished task frees its place.
    complete(&store, "a").await;
    let again = store.create(from("c", &owner(), "198.51.100.1")).await;
    assert!(again.is_ok(), "{again:?}");
}

#[tokio::test]
async fn a_task_with_its_own_retention_is_purged_after_it() {
    let (store, clock) = store(100, DEFAULT_RETENTION);
    let me = owner();
    let mut short = new_task("short", &me, Admission::Queued);
    short.retention = Some(Duration::from_millis(50));
    assert!(store.create(short).await.is_ok());
    create_ok(&store, "long", &me).await;
    complete(&store, "short").await;
    complete(&store, "long").await;
    clock.advance(49);
    assert!(exists(&store, "short").await);
    clock.advance(1);
    assert!(
        !exists(&store, "short").await,
        "gone after its own retention"
    );
    assert!(
        exists(&store, "long").await,
        "the store's retention for the rest"
    );
}

#[tokio::test]
async fn retained_bytes_evict_the_first_terminal_tasks_to_expire_never_refusing() {
    // Room for about two terminal tasks of 100 KB; count bounds far away.
    let clock = Arc::new(ManualClock(AtomicU64::new(1_000_000)));
    let config = MemoryStoreConfig {
        max_tasks: 100,
        max_retained: 0,
        max_retained_per_owner: 0,
        max_live_per_owner: 0,
        max_retained_bytes: 250_000,
        ..MemoryStoreConfig::default()
    };
    let store = MemoryStore::with_clock(config, clock.clone());
    let me = owner();
    let blob = "x".repeat(100_000);
    for id in ["a", "b", "c"] {
        let mut task = new_task(id, &me, Admission::Queued);
        task.invocation.input = json!({ "blob": blob });
        assert!(store.create(task).await.is_ok(), "{id}");
        complete(&store, id).await;
        clock.advance(10);
    }
    // Three terminal tasks of 100 KB are over the bound: the next creation (small) evicts
    // the first to expire, and only as many as needed.
    create_ok(&store, "d", &me).await;
    assert!(!exists(&store, "a").await, "the first to expire goes");
    assert!(exists(&store, "b").await && exists(&store, "c").await);
    // Live tasks are never refused for bytes.
    create_ok(&store, "e", &me).await;
}
