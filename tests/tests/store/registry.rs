//! The worker registry, the same behaviours against both implementations: [`MemoryRegistry`]
//! and [`RedisRegistry`] (a private redis-server). Expiry is real time here: the tests sleep
//! past a short TTL because expiry is what they test. For Redis, no key of a dead worker may
//! remain once a later heartbeat has pruned the index, and the index itself expires with its
//! last worker. The reporter lease (which worker reports the cluster gauges) has one holder at
//! a time, passes on when its holder stops renewing, and is freed by its holder only. Operators'
//! pauses are listed until resumed and move the version; the audit log is newest first and
//! bounded. A drain request is written only for a live worker, the first one stands, and it
//! goes with its worker (deregistered, expired and pruned, or replaced by a new process under
//! its id): Redis keeps no field of it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use harness::TestResult;
use harness::redis_server::RedisServer;
use serde_json::json;
use store::registry::{
    AUDIT_KEPT, AuditEntry, Drain, EntrypointInfo, MemoryRegistry, Pause, PauseMode, Price,
    RedisRegistry, WorkerEntry, WorkerRegistry,
};
use store::{Clock, RedisStore, RedisStoreConfig};

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(100);
/// Comfortably past [`SHORT`].
const PAST_SHORT: Duration = Duration::from_millis(250);

fn entry(id: &str) -> WorkerEntry {
    WorkerEntry {
        worker_id: id.to_owned(),
        host: format!("{id}.example:8080"),
        started_at_ms: 1_700_000_000_123,
        concurrency: 8,
        entrypoints: vec![
            EntrypointInfo {
                key: "echo".into(),
                description: "Echoes its input".into(),
                input_schema: json!({ "type": "object", "properties": { "text": { "type": "string" } } }),
                output_schema: json!({ "type": "object" }),
                streaming: false,
                price: Some(Price {
                    invoke: Some("0.01".into()),
                    stream: None,
                    protocol: Default::default(),
                    settle: Default::default(),
                    scheme: Default::default(),
                }),
                retry_safe: false,
                siwx: None,
                private: false,
                paused: None,
            },
            EntrypointInfo {
                key: "chat".into(),
                description: "Streams a reply".into(),
                input_schema: json!({}),
                output_schema: json!({ "type": "string" }),
                streaming: true,
                price: None,
                retry_safe: false,
                siwx: None,
                private: false,
                paused: None,
            },
        ],
    }
}

fn ids(entries: &[WorkerEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.worker_id.as_str()).collect()
}

// The behaviours, written once against the trait.

async fn heartbeat_then_list_shows_the_entry(registry: &dyn WorkerRegistry) -> TestResult {
    assert!(registry.workers().await?.is_empty());
    let entry = entry("w1");
    registry.heartbeat(&entry, LONG).await?;
    assert_eq!(registry.workers().await?, vec![entry]);
    Ok(())
}

async fn workers_are_listed_by_id(registry: &dyn WorkerRegistry) -> TestResult {
    registry.heartbeat(&entry("w2"), LONG).await?;
    // A shorter ttl gives w1 the earlier deadline: the order must not follow deadlines.
    registry.heartbeat(&entry("w1"), LONG / 2).await?;
    registry.heartbeat(&entry("w3"), LONG).await?;
    let listed = registry.workers().await?;
    assert_eq!(ids(&listed), ["w1", "w2", "w3"]);
    assert_eq!(listed[1], entry("w2"));
    Ok(())
}

async fn a_heartbeat_replaces_the_entry(registry: &dyn WorkerRegistry) -> TestResult {
    registry.heartbeat(&entry("w1"), LONG).await?;
    let mut changed = entry("w1");
    changed.concurrency = 1;
    changed.entrypoints.truncate(1);
    registry.heartbeat(&changed, LONG).await?;
    assert_eq!(registry.workers().await?, vec![changed]);
    Ok(())
}

async fn deregister_removes_at_once(registry: &dyn WorkerRegistry) -> TestResult {
    registry.heartbeat(&entry("w1"), LONG).await?;
    registry.heartbeat(&entry("w2"), LONG).await?;
    registry.deregister("w1").await?;
    assert_eq!(ids(&registry.workers().await?), ["w2"]);
    registry.deregister("w2").await?;
    assert!(registry.workers().await?.is_empty());
    // Unknown workers are no error.
    registry.deregister("w2").await?;
    registry.deregister("never").await?;
    Ok(())
}

async fn an_entry_not_refreshed_vanishes_after_its_ttl(
    registry: &dyn WorkerRegistry,
) -> TestResult {
    registry.heartbeat(&entry("short"), SHORT).await?;
    registry.heartbeat(&entry("long"), LONG).await?;
    assert_eq!(ids(&registry.workers().await?), ["long", "short"]);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(ids(&registry.workers().await?), ["long"]);
    Ok(())
}

async fn refreshing_keeps_an_entry_alive(registry: &dyn WorkerRegistry) -> TestResult {
    // A 200 ms ttl refreshed every 50 ms for 400 ms: twice past the first deadline, with room
    // for a loaded machine to oversleep.
    let ttl = Duration::from_millis(200);
    registry.heartbeat(&entry("w1"), ttl).await?;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        registry.heartbeat(&entry("w1"), ttl).await?;
    }
    assert_eq!(ids(&registry.workers().await?), ["w1"]);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(registry.workers().await?.is_empty());
    Ok(())
}

async fn the_version_moves_with_the_live_set_not_with_refreshes(
    registry: &dyn WorkerRegistry,
) -> TestResult {
    let empty = registry.version().await?;
    assert_eq!(registry.version().await?, empty, "reading moves nothing");

    registry.heartbeat(&entry("w1"), LONG).await?;
    let joined = registry.version().await?;
    assert_ne!(joined, empty, "a worker joined");
    registry.heartbeat(&entry("w1"), LONG).await?;
    assert_eq!(registry.version().await?, joined, "a plain refresh");

    let mut changed = entry("w1");
    changed.entrypoints.truncate(1);
    registry.heartbeat(&changed, LONG).await?;
    let updated = registry.version().await?;
    assert_ne!(updated, joined, "an entry changed");

    registry.heartbeat(&entry("w2"), LONG).await?;
    let two = registry.version().await?;
    assert_ne!(two, updated, "a second worker joined");
    registry.deregister("w2").await?;
    let left = registry.version().await?;
    assert_ne!(left, two, "a worker left");
    registry.deregister("w2").await?;
    assert_eq!(registry.version().await?, left, "nobody left");

    registry.deregister("w1").await?;
    let gone = registry.version().await?;
    registry.heartbeat(&entry("w1"), LONG).await?;
    assert_ne!(registry.version().await?, gone, "back after everyone left");
    Ok(())
}

async fn the_version_moves_when_an_entry_expires(registry: &dyn WorkerRegistry) -> TestResult {
    registry.heartbeat(&entry("long"), LONG).await?;
    registry.heartbeat(&entry("short"), SHORT).await?;
    let both = registry.version().await?;
    // Expiry is what is tested: no script runs, the deadline just passes.
    tokio::time::sleep(PAST_SHORT).await;
    let expired = registry.version().await?;
    assert_ne!(expired, both, "an entry expired");
    assert_eq!(ids(&registry.workers().await?), ["long"]);
    // Pruning the expired member (on the next heartbeat) must not bring back a version that
    // listed `short`.
    registry.heartbeat(&entry("long"), LONG).await?;
    let pruned = registry.version().await?;
    assert_ne!(pruned, both);
    registry.heartbeat(&entry("long"), LONG).await?;
    assert_eq!(registry.version().await?, pruned, "a plain refresh");
    Ok(())
}

async fn one_process_holds_the_reporter_lease(registry: &dyn WorkerRegistry) -> TestResult {
    assert!(registry.hold_reporter("w1", LONG).await?, "free: taken");
    assert!(!registry.hold_reporter("w2", LONG).await?, "held by w1");
    assert!(
        registry.hold_reporter("w1", LONG).await?,
        "renewed by its holder"
    );
    // Someone else's release leaves it; the holder's frees it for the next caller at once.
    registry.release_reporter("w2").await?;
    assert!(!registry.hold_reporter("w2", LONG).await?);
    registry.release_reporter("w1").await?;
    assert!(registry.hold_reporter("w2", LONG).await?);
    assert!(!registry.hold_reporter("w1", LONG).await?);
    Ok(())
}

async fn a_reporter_lease_not_renewed_passes_on(registry: &dyn WorkerRegistry) -> TestResult {
    assert!(registry.hold_reporter("w1", SHORT).await?);
    assert!(!registry.hold_reporter("w2", SHORT).await?);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(
        registry.hold_reporter("w2", LONG).await?,
        "w1 stopped renewing"
    );
    assert!(!registry.hold_reporter("w1", LONG).await?, "w1 lost it");
    // The old holder's release on its way out does not free the new holder's lease.
    registry.release_reporter("w1").await?;
    assert!(!registry.hold_reporter("w3", LONG).await?);
    Ok(())
}

// Both registries.

// Operators' state: pauses and the audit log.

fn pause(mode: PauseMode) -> Pause {
    Pause {
        mode,
        by: "operator token abc".into(),
        at_ms: 1_700_000_000_000,
    }
}

async fn a_pause_is_listed_until_resumed_and_moves_the_version(
    registry: &dyn WorkerRegistry,
) -> TestResult {
    registry.heartbeat(&entry("w1"), LONG).await?;
    assert!(registry.paused().await?.is_empty());
    let before = registry.version().await?;
    registry.pause("echo", &pause(PauseMode::Queue)).await?;
    let paused = registry.version().await?;
    assert_ne!(paused, before, "a gateway must list again after a pause");
    assert_eq!(
        registry.paused().await?,
        BTreeMap::from([("echo".to_owned(), pause(PauseMode::Queue))])
    );
    // A second pause replaces the first.
    registry.pause("echo", &pause(PauseMode::Refuse)).await?;
    registry.pause("chat", &pause(PauseMode::Queue)).await?;
    let listed = registry.paused().await?;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed["echo"].mode, PauseMode::Refuse);
    let before = registry.version().await?;
    assert!(registry.resume("echo").await?);
    assert_ne!(registry.version().await?, before);
    assert!(!registry.resume("echo").await?, "resumed already");
    assert_eq!(
        registry.paused().await?.into_keys().collect::<Vec<_>>(),
        ["chat"]
    );
    // The workers' entries are untouched.
    assert_eq!(registry.workers().await?, vec![entry("w1")]);
    Ok(())
}

async fn the_audit_log_is_newest_first_and_bounded(registry: &dyn WorkerRegistry) -> TestResult {
    assert!(registry.audit_log(10).await?.is_empty());
    let action = |n: usize| AuditEntry {
        at_ms: 1_700_000_000_000 + n as u64,
        actor: "operator token abc".into(),
        action: "pause".into(),
        target: format!("key{n}"),
        detail: json!({"mode": "queue"}),
    };
    for n in 0..AUDIT_KEPT + 5 {
        registry.audit(&action(n)).await?;
    }
    let listed = registry.audit_log(usize::MAX).await?;
    assert_eq!(listed.len(), AUDIT_KEPT, "the oldest are dropped");
    assert_eq!(listed[0], action(AUDIT_KEPT + 4));
    assert_eq!(listed[AUDIT_KEPT - 1], action(5));
    let latest = registry.audit_log(2).await?;
    assert_eq!(latest, vec![action(AUDIT_KEPT + 4), action(AUDIT_KEPT + 3)]);
    assert!(registry.audit_log(0).await?.is_empty());
    Ok(())
}

fn drain(at_ms: u64) -> Drain {
    Drain {
        by: "operator token abc".into(),
        at_ms,
    }
}

async fn a_drain_is_asked_of_live_workers_only_and_goes_with_them(
    registry: &dyn WorkerRegistry,
) -> TestResult {
    assert_eq!(registry.drain("nobody", &drain(1)).await?, None);
    assert!(registry.drains().await?.is_empty(), "nothing written");
    assert_eq!(registry.drain_requested("nobody").await?, None);

    registry.heartbeat(&entry("w1"), LONG).await?;
    registry.heartbeat(&entry("w2"), LONG).await?;
    let before = registry.version().await?;
    assert_eq!(registry.drain("w1", &drain(1)).await?, Some(drain(1)));
    // The first request stands.
    assert_eq!(registry.drain("w1", &drain(2)).await?, Some(drain(1)));
    assert_eq!(registry.drain_requested("w1").await?, Some(drain(1)));
    assert_eq!(registry.drain_requested("w2").await?, None);
    assert_eq!(
        registry.drains().await?,
        BTreeMap::from([("w1".to_owned(), drain(1))])
    );
    assert_eq!(registry.version().await?, before, "cards do not change");
    // A heartbeat of the draining worker keeps its request, and answers with it: that is how
    // the worker learns of it. Another worker's heartbeat answers none.
    assert_eq!(
        registry.heartbeat(&entry("w1"), LONG).await?,
        Some(drain(1))
    );
    assert_eq!(registry.drain_requested("w1").await?, Some(drain(1)));
    assert_eq!(registry.heartbeat(&entry("w2"), LONG).await?, None);

    // A new process under the id (another start time) is not the one that was asked.
    let restarted = WorkerEntry {
        started_at_ms: entry("w2").started_at_ms + 1,
        ..entry("w2")
    };
    assert_eq!(registry.drain("w2", &drain(5)).await?, Some(drain(5)));
    assert_eq!(
        registry.heartbeat(&restarted, LONG).await?,
        None,
        "the new process is not told to drain"
    );
    assert_eq!(registry.drain_requested("w2").await?, None);
    registry.heartbeat(&entry("w2"), LONG).await?;

    // Deregistered: the request is gone, and a worker of the same id starts clean.
    registry.deregister("w1").await?;
    assert_eq!(registry.drain_requested("w1").await?, None);
    assert!(registry.drains().await?.is_empty());
    registry.heartbeat(&entry("w1"), LONG).await?;
    assert_eq!(registry.drain_requested("w1").await?, None);

    // Expired: its request goes once the entry is pruned (a later heartbeat, or a listing).
    registry.heartbeat(&entry("short"), SHORT).await?;
    assert_eq!(registry.drain("short", &drain(3)).await?, Some(drain(3)));
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(registry.drain("short", &drain(4)).await?, None, "not live");
    registry.heartbeat(&entry("w2"), LONG).await?;
    assert_eq!(registry.drain_requested("short").await?, None);
    assert!(registry.drains().await?.is_empty());
    Ok(())
}

async fn on_memory(test: impl AsyncFnOnce(&dyn WorkerRegistry) -> TestResult) -> TestResult {
    test(&MemoryRegistry::new()).await
}

async fn on_redis(test: impl AsyncFnOnce(&dyn WorkerRegistry) -> TestResult) -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(server.url())).await?;
    test(&store.registry()).await
}

macro_rules! both {
    ($($behaviour:ident),* $(,)?) => {
        mod memory_registry {
            $(
                #[tokio::test]
                async fn $behaviour() -> super::TestResult {
                    super::on_memory(async |r| super::$behaviour(r).await).await
                }
            )*
        }
        mod redis_registry {
            $(
                #[tokio::test]
                async fn $behaviour() -> super::TestResult {
                    super::on_redis(async |r| super::$behaviour(r).await).await
                }
            )*
        }
    };
}

both!(
    heartbeat_then_list_shows_the_entry,
    workers_are_listed_by_id,
    a_heartbeat_replaces_the_entry,
    deregister_removes_at_once,
    an_entry_not_refreshed_vanishes_after_its_ttl,
    refreshing_keeps_an_entry_alive,
    the_version_moves_with_the_live_set_not_with_refreshes,
    the_version_moves_when_an_entry_expires,
    one_process_holds_the_reporter_lease,
    a_reporter_lease_not_renewed_passes_on,
    a_pause_is_listed_until_resumed_and_moves_the_version,
    the_audit_log_is_newest_first_and_bounded,
    a_drain_is_asked_of_live_workers_only_and_goes_with_them,
);

// Redis only: no key leaks.

/// `{ns}:registry*` keys with their PTTL, sorted by name.
async fn registry_keys(
    conn: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
) -> TestResult<Vec<(String, i64)>> {
    let pattern = format!("{}*", store.keys().registry());
    let mut names: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(conn).await?;
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let pttl: i64 = redis::cmd("PTTL").arg(&name).query_async(conn).await?;
        out.push((name, pttl));
    }
    Ok(out)
}

#[tokio::test]
async fn redis_keeps_no_key_of_a_dead_worker() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(server.url())).await?;
    let registry: RedisRegistry = store.registry();
    let keys = store.keys();
    let mut conn = server.client().await?;

    registry.heartbeat(&entry("dead-1"), SHORT).await?;
    registry.heartbeat(&entry("dead-2"), SHORT).await?;
    // An operator asked one to drain: its request expires with them too.
    registry.drain("dead-1", &drain(1)).await?;
    let before = registry_keys(&mut conn, &store).await?;
    assert_eq!(
        before.len(),
        5,
        "index, version, drain requests and two entries: {before:?}"
    );
    for (name, pttl) in &before {
        assert!(
            *pttl > 0 && *pttl <= 100,
            "{name} must expire within the ttl, PTTL {pttl}"
        );
    }

    tokio::time::sleep(PAST_SHORT).await;
    assert!(registry.workers().await?.is_empty());
    // The entries and the index expired by themselves.
    assert_eq!(registry_keys(&mut conn, &store).await?, vec![]);

    // A live worker keeps the index; the dead ones' members are pruned from it by a heartbeat,
    // and their drain requests with them.
    registry.heartbeat(&entry("dead-3"), SHORT).await?;
    registry.heartbeat(&entry("alive"), LONG).await?;
    registry.drain("dead-3", &drain(1)).await?;
    tokio::time::sleep(PAST_SHORT).await;
    registry.heartbeat(&entry("alive"), LONG).await?;
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.registry())
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    assert_eq!(members, ["alive"]);
    let after = registry_keys(&mut conn, &store).await?;
    let names: Vec<&str> = after.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            keys.registry(),
            keys.registry_version(),
            keys.registry_entry("alive")
        ]
    );
    for (name, pttl) in &after {
        assert!(
            *pttl > 0 && *pttl <= 30_000,
            "{name} must expire with the live worker, PTTL {pttl}"
        );
    }

    // Deregistering the last worker leaves nothing behind, its drain request included.
    registry.drain("alive", &drain(1)).await?;
    registry.deregister("alive").await?;
    assert_eq!(registry_keys(&mut conn, &store).await?, vec![]);
    Ok(())
}

#[tokio::test]
async fn redis_index_expiry_follows_the_latest_deadline() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(server.url())).await?;
    let registry = store.registry();
    let index = store.keys().registry();
    let mut conn = server.client().await?;

    registry.heartbeat(&entry("long"), LONG).await?;
    registry.heartbeat(&entry("short"), SHORT).await?;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&index)
        .query_async(&mut conn)
        .await?;
    assert!(
        pttl > 20_000,
        "a short heartbeat must not cut the index short: {pttl}"
    );

    // Once the long-lived worker leaves, the index lives only as long as the short one.
    registry.deregister("long").await?;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&index)
        .query_async(&mut conn)
        .await?;
    assert!(pttl > 0 && pttl <= 100, "PTTL {pttl}");
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(registry_keys(&mut conn, &store).await?, vec![]);
    Ok(())
}

/// A clock moved by hand.
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn memory_registry_follows_its_clock() -> TestResult {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_000)));
    let registry = MemoryRegistry::with_clock(clock.clone());
    registry.heartbeat(&entry("w1"), SHORT).await?;
    registry.heartbeat(&entry("w2"), SHORT * 3).await?;
    clock.0.store(1_099, Ordering::SeqCst);
    assert_eq!(ids(&registry.workers().await?), ["w1", "w2"]);
    clock.0.store(1_100, Ordering::SeqCst); // w1's deadline: gone
    assert_eq!(ids(&registry.workers().await?), ["w2"]);
    registry.heartbeat(&entry("w1"), SHORT).await?; // back until 1_200
    clock.0.store(1_250, Ordering::SeqCst);
    assert_eq!(ids(&registry.workers().await?), ["w2"]);
    clock.0.store(1_300, Ordering::SeqCst);
    assert!(registry.workers().await?.is_empty());
    Ok(())
}

/// Both registries agree on the JSON they would hand the gateway (a smoke test of the Redis
/// round trip through serde).
#[tokio::test]
async fn redis_and_memory_list_the_same_entries() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(server.url())).await?;
    let in_redis = store.registry();
    let in_memory = MemoryRegistry::new();
    for id in ["b", "a", "c"] {
        in_redis.heartbeat(&entry(id), LONG).await?;
        in_memory.heartbeat(&entry(id), LONG).await?;
    }
    assert_eq!(in_redis.workers().await?, in_memory.workers().await?);
    Ok(())
}
