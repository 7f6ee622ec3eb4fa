//! What a retained task leaves in Redis: its record alone, without a copy of its result in an
//! event log, and without the fields only a runnable task needs. A worker's own events (progress,
//! stream output) are the only ones kept in a log. Sizes are printed, not asserted: the
//! benchmark (`scripts/bench-report`) measures memory per retained task.

use std::collections::BTreeSet;
use std::time::Duration;

use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::start_next_echo;
use protocol::token::AccessToken;
use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::redis::{Keys, fields};
use store::{
    Admission, EventPayload, Invocation, NewTask, RedisStore, RedisStoreConfig, StoreError,
    TaskStore, Transition,
};

const LEASE: Duration = Duration::from_secs(10);

/// Creates, runs (emitting `progress` events first) and completes one `echo` task.
async fn finish_one(store: &RedisStore, id: &str, progress: u64) -> TestResult {
    let owner = AccessToken::generate().owner_hash();
    store
        .create(NewTask {
            task_id: id.to_owned(),
            owner,
            invocation: Invocation {
                entrypoint: "echo".into(),
                input: json!({ "i": 1 }),
                context_id: None,
                metadata: None,
                trace_context: Default::default(),
            },
            admission: Admission::Queued,
            max_attempts: 3,
            retention: None,
            source: None,
            private_owner: false,
        })
        .await?;
    let activation = take_one(store).await?;
    for step in 0..progress {
        let event = EventPayload {
            event: "progress".into(),
            data: json!({ "step": step }),
        };
        store.emit(&activation.lease, event).await?;
    }
    complete(store, id, &activation.lease).await
}

/// Completes task `id` under `lease`, as a worker's finish does.
async fn complete(store: &RedisStore, id: &str, lease: &store::Lease) -> TestResult {
    store
        .compare_and_set(
            id,
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(json!({ "i": 1 }))),
            Some(lease),
        )
        .await?
        .applied()
        .ok_or_else(|| format!("{id}: completion refused"))?;
    Ok(())
}

#[tokio::test]
async fn a_retained_task_is_its_record_alone() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "fp".into();
    let store = RedisStore::connect(config).await?;
    let keys = Keys::new("fp");
    finish_one(&store, "plain", 0).await?;
    finish_one(&store, "chatty", 2).await?;

    let mut conn = server.client().await?;
    let exists = |key: String| redis::cmd("EXISTS").arg(key).to_owned();
    let plain_log: u32 = exists(keys.events("plain")).query_async(&mut conn).await?;
    let chatty_log: Vec<String> = redis::cmd("LRANGE")
        .arg(keys.events("chatty"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    assert_eq!(
        plain_log, 0,
        "a task without events of its own keeps no log"
    );
    let logged: Vec<&str> = chatty_log
        .iter()
        .filter_map(|entry| entry.split('|').nth(1))
        .collect();
    assert_eq!(logged, ["progress", "progress"], "{chatty_log:?}");

    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(keys.task("plain"))
        .query_async(&mut conn)
        .await?;
    let fields: BTreeSet<&str> = fields.iter().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [
        fields::STATUS,
        fields::OWNER,
        fields::CREATED,
        fields::UPDATED,
        fields::INVOCATION,
        fields::ATTEMPT,
        fields::MAX_ATTEMPTS,
        fields::SEQ,
        fields::RESULT,
    ]
    .into();
    assert_eq!(fields, expected);
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(keys.task("plain"))
        .query_async(&mut conn)
        .await?;
    println!("a retained echo task's record: {bytes} bytes (MEMORY USAGE)");

    // The record still answers every read: the full replay ends with the result.
    let events = store.events_after("plain", 0).await?;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, ["statusUpdate", "resultUpdate"]);
    assert_eq!(events[1].data["result"]["output"], json!({ "i": 1 }));
    Ok(())
}

/// A namespace written under other field names is refused at connect, never read as empty:
/// one stamped with another layout, and an unstamped one (from before the stamp) that holds live
/// work. An empty namespace is stamped with this build's layout.
#[tokio::test]
async fn a_namespace_of_another_layout_is_refused() -> TestResult {
    let server = RedisServer::start()?;
    let mut conn = server.client().await?;
    let connect = |namespace: &str| {
        let mut config = RedisStoreConfig::new(server.url());
        config.namespace = namespace.into();
        RedisStore::connect(config)
    };

    connect("fresh").await?;
    let stamp: String = redis::cmd("GET")
        .arg(Keys::new("fresh").layout())
        .query_async(&mut conn)
        .await?;
    assert_eq!(stamp, "3");
    connect("fresh").await?;

    // Layout 2 (the lease in four fields) and a later one.
    for other_layout in ["2", "4"] {
        let namespace = format!("layout-{other_layout}");
        let _: () = redis::cmd("SET")
            .arg(Keys::new(&namespace).layout())
            .arg(other_layout)
            .query_async(&mut conn)
            .await?;
        match connect(&namespace).await {
            Err(StoreError::Incompatible(message)) => {
                assert!(
                    message.contains(&format!("layout {other_layout}")),
                    "{message}"
                )
            }
            other => {
                return Err(format!(
                    "a layout-{other_layout} namespace was not refused: {:?}",
                    other.err()
                )
                .into());
            }
        }
    }

    let _: () = redis::cmd("SADD")
        .arg(Keys::new("older").live())
        .arg("a-task-of-layout-1")
        .query_async(&mut conn)
        .await?;
    match connect("older").await {
        Err(StoreError::Incompatible(message)) => {
            assert!(message.contains("earlier version"), "{message}")
        }
        other => {
            return Err(format!(
                "an unstamped busy namespace was not refused: {:?}",
                other.err()
            )
            .into());
        }
    }
    let stamped: u32 = redis::cmd("EXISTS")
        .arg(Keys::new("older").layout())
        .query_async(&mut conn)
        .await?;
    assert_eq!(stamped, 0, "a refused namespace is left as it was");
    Ok(())
}

/// The fields a terminal record may hold: what every task keeps, and what some paths add (a
/// context, a receipt, earlier turns, a retry's count and last error, a push address while the
/// task has push configs).
const TERMINAL_FIELDS: [&str; 15] = [
    fields::STATUS,
    fields::OWNER,
    fields::CONTEXT,
    fields::CREATED,
    fields::UPDATED,
    fields::INVOCATION,
    fields::ATTEMPT,
    fields::MAX_ATTEMPTS,
    fields::SEQ,
    fields::RESULT,
    fields::ERROR,
    fields::RECEIPT,
    fields::TURNS,
    fields::RETRIES,
    fields::LAST_ERROR,
];

fn new_task(id: &str, admission: Admission) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        owner: AccessToken::generate().owner_hash(),
        invocation: Invocation {
            entrypoint: "echo".into(),
            input: json!({ "i": 1 }),
            context_id: Some(format!("ctx-{id}")),
            metadata: None,
            trace_context: Default::default(),
        },
        admission,
        max_attempts: 3,
        retention: Some(Duration::from_secs(600)),
        source: None,
        private_owner: false,
    }
}

/// Takes and activates the one queued `echo` task.
async fn take_one(store: &RedisStore) -> TestResult<store::Activation> {
    take_as(store, "w1").await
}

/// Takes and activates the one queued `echo` task as worker `holder`.
async fn take_as(store: &RedisStore, holder: &str) -> TestResult<store::Activation> {
    Ok(start_next_echo(store, holder).await?.1)
}

/// A worker's finish of an active task names only the fields an active record can hold
/// (`finish_task.lua`), so every way a task comes to run must leave none of the others: a
/// queued task taken; a waiting task resumed; a retry's backoff ended by the sweep; a paid
/// reservation claimed and activated; and one held for its settlement, then queued by its
/// receipt. Each is completed under its lease, and its terminal record must hold no field of
/// a runnable task (phase, lease, admission deadline, hold, input request, ...).
#[tokio::test]
async fn every_way_into_a_run_leaves_a_terminal_record_without_run_fields() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "runs".into();
    let store = RedisStore::connect(config).await?;
    let keys = Keys::new("runs");
    let reserve = Admission::Reserved {
        ttl: Duration::from_secs(60),
    };

    store.create(new_task("queued", Admission::Queued)).await?;
    let queued = take_one(&store).await?;

    store.create(new_task("resumed", Admission::Queued)).await?;
    let first = take_one(&store).await?;
    let waited = store
        .await_input(
            &first.lease,
            json!({ "ask": "more" }),
            Duration::from_secs(60),
        )
        .await?;
    assert!(waited, "await_input refused");
    let owner = store.get("resumed").await?.ok_or("no task")?.owner;
    let resumed = store
        .resume("resumed", &owner, json!({ "i": 2 }), None)
        .await?;
    assert!(
        matches!(resumed, store::Resumed::Queued { .. }),
        "{resumed:?}"
    );
    let resumed = take_one(&store).await?;

    store.create(new_task("retried", Admission::Queued)).await?;
    let first = take_one(&store).await?;
    let error = protocol::TaskError {
        code: "busy".into(),
        message: "try again".into(),
        details: None,
    };
    assert!(
        store
            .retry_later(&first.lease, &error, Duration::ZERO)
            .await?
    );
    let report = store.recover_expired(10).await?;
    assert_eq!(report.retried, ["retried"], "{report:?}");
    let retried = take_one(&store).await?;

    store.create(new_task("claimed", reserve)).await?;
    let claim = store
        .claim_execution("claimed", "gateway", LEASE)
        .await?
        .ok_or("claim refused")?;
    let claimed = store
        .activate_execution(&claim.lease, LEASE, Duration::from_secs(60))
        .await?
        .ok_or("activation refused")?;

    store.create(new_task("held", reserve)).await?;
    let claim = store
        .claim_execution("held", "gateway", LEASE)
        .await?
        .ok_or("claim refused")?;
    assert!(store.hold_for_settlement(&claim.lease).await?);
    store.record_receipt(&claim.lease, "receipt-1").await?;
    let held = take_one(&store).await?;

    let mut conn = server.client().await?;
    for (id, run) in [
        ("queued", queued),
        ("resumed", resumed),
        ("retried", retried),
        ("claimed", claimed),
        ("held", held),
    ] {
        complete(&store, id, &run.lease).await?;
        let held: Vec<String> = redis::cmd("HKEYS")
            .arg(keys.task(id))
            .query_async(&mut conn)
            .await?;
        let extra: Vec<&String> = held
            .iter()
            .filter(|field| !TERMINAL_FIELDS.contains(&field.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{id}: the terminal record keeps {extra:?}"
        );
    }
    Ok(())
}

/// The lease index is a skiplist from its first lease (lease_index.lua), and its pin is no
/// lease: the count says 0 once every task ended, and recovery finds nothing due.
#[tokio::test]
async fn the_lease_index_is_a_skiplist_and_its_pin_is_no_lease() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "pin".into();
    let store = RedisStore::connect(config).await?;
    let keys = Keys::new("pin");
    let mut conn = server.client().await?;

    store.create(new_task("one", Admission::Queued)).await?;
    let run = take_one(&store).await?;
    assert_eq!(encoding(&mut conn, &keys.leases()).await?, "skiplist");
    assert_eq!(store.lease_count().await?, 1);

    complete(&store, "one", &run.lease).await?;
    assert_eq!(store.lease_count().await?, 0);
    let report = store.recover_expired(10).await?;
    assert_eq!(report, store::RecoveryReport::default());
    Ok(())
}

/// A task's record stays one listpack while a worker with a long id runs it, and once it is
/// retained: a value over `hash-max-listpack-value` (64 bytes) would turn the record into a
/// hash table for good, several times its memory. The lease's deadlines share one field
/// (`lease_field.lua`) and the holder keeps its own, so a worker id as long as a Kubernetes pod
/// name and a process suffix leaves the record as small as a short one does. The record also
/// reads back whole: the holder, the epoch and both deadlines.
#[tokio::test]
async fn a_record_stays_a_listpack_under_a_long_holder_id() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "long".into();
    let store = RedisStore::connect(config).await?;
    let keys = Keys::new("long");
    let mut conn = server.client().await?;
    let holder = "taskcluster-worker-7d9c8b5f4-x2x9k-1234567-0a1b2c3d";
    assert!(holder.len() > 48);
    let record = keys.task("long");

    store.create(new_task("long", Admission::Queued)).await?;
    let run = take_as(&store, holder).await?;
    assert_eq!(encoding(&mut conn, &record).await?, "listpack");
    let stored = store.get("long").await?.ok_or("no task")?;
    let lease = stored.lease.ok_or("no lease read back")?;
    assert_eq!(lease.holder, holder);
    assert_eq!(lease.epoch, run.lease.epoch);
    assert_eq!(lease.expires_at_ms, run.lease.expires_at_ms);
    assert_eq!(stored.run_deadline_ms, Some(run.run_deadline_ms));

    complete(&store, "long", &run.lease).await?;
    assert_eq!(encoding(&mut conn, &record).await?, "listpack");
    Ok(())
}

/// `OBJECT ENCODING` of `key`.
async fn encoding(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> TestResult<String> {
    Ok(redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(conn)
        .await?)
}
