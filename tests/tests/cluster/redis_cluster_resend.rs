//! A script call the Redis Cluster client sends twice runs once (the replay guard,
//! `shared/store/src/redis/replay.rs`).
//!
//! The cluster client resends a command whose connection dropped before its reply came. Here a
//! real one-master cluster announces a proxy ([`CutProxy`]) as its address, so every store
//! connection goes through it; the proxy lets one script call (an `FCALL` naming the test's
//! task or worker, after a warm-up has loaded the script) reach Redis, which runs it, and
//! then cuts the connection instead of passing the reply on. The store's client resends the
//! call on a new connection, and the store must answer as if the call had run once: a create
//! created (not a 409), a take that holds its task, a cancel that cancelled.

use std::net::SocketAddr;
use std::time::Duration;

use harness::TestResult;
use harness::cut_proxy::CutProxy;
use harness::redis_cluster::RedisCluster;
use harness::store_fixtures::{cluster_store_config, queued_task};
use protocol::token::AccessToken;
use protocol::{TaskResult, TaskStatus};
use store::{CasOutcome, RedisStore, TaskStore, Transition};

const LEASE: Duration = Duration::from_secs(60);

/// A one-master cluster whose only node announces `proxy` as its address, and a store on it
/// that reaches the node only through the proxy.
/// Tests hold it whole: a destructuring `let` with `..` would drop the cluster at once.
struct Setup {
    store: RedisStore,
    proxy: CutProxy,
    node: redis::aio::MultiplexedConnection,
    _cluster: RedisCluster,
}

async fn setup() -> TestResult<Setup> {
    let cluster = RedisCluster::start(1, 0)?;
    let target: SocketAddr = format!("127.0.0.1:{}", cluster.port(0)?).parse()?;
    let proxy = CutProxy::start(target).await?;
    let mut node = cluster.node_connection(0).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-announce-ip")
        .arg("127.0.0.1")
        .arg("cluster-announce-port")
        .arg(proxy.port())
        .query_async(&mut node)
        .await?;
    // The node takes its announced address into its slot map on its next cron tick.
    wait_for_announced_port(&mut node, proxy.port()).await?;

    let seed = format!("redis://127.0.0.1:{}/", proxy.port());
    let store =
        RedisStore::connect(cluster_store_config(vec![seed], 1, Duration::from_secs(2))).await?;
    Ok(Setup {
        store,
        proxy,
        node,
        _cluster: cluster,
    })
}

/// Polls `CLUSTER SLOTS` until the node reports `port` for its slots (a config change lands on
/// the node's next cron tick; there is no event to await), bounded.
async fn wait_for_announced_port(
    node: &mut redis::aio::MultiplexedConnection,
    port: u16,
) -> TestResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Each range is [start, end, [ip, port, ...], ...]: the master's port is [2][1].
        let slots: Vec<Vec<redis::Value>> =
            redis::cmd("CLUSTER").arg("SLOTS").query_async(node).await?;
        let reported = slots
            .first()
            .and_then(|range| range.get(2))
            .and_then(|master| match master {
                redis::Value::Array(fields) => fields.get(1),
                _ => None,
            })
            .and_then(|port| redis::from_redis_value::<u16>(port.clone()).ok());
        if reported == Some(port) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the node still announces {reported:?}, not {port}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reply keys left in the node.
async fn reply_keys(node: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<usize> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*:rp:*").query_async(node).await?;
    Ok(keys.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_create_answers_created() -> TestResult {
    let setup = setup().await?;
    let (store, proxy) = (&setup.store, &setup.proxy);
    let owner = AccessToken::generate().owner_hash();
    // Loads the script first: a reply cut is only a test of a call that ran, not of a NOSCRIPT.
    store.create(queued_task("warm", &owner, "echo")).await?;

    proxy.cut_reply_to(&[b"FCALL", b"resent-create"]);
    let task = store
        .create(queued_task("resent-create", &owner, "echo"))
        .await?;
    assert_eq!(proxy.cuts(), 1, "the create's reply was never cut");
    assert_eq!(task.status, TaskStatus::Running);
    assert_eq!(store.live_count().await?, 2);
    assert_eq!(store.queue_depth("echo").await?, 2, "queued once");
    store.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_take_holds_the_task_it_took() -> TestResult {
    let setup = setup().await?;
    let (store, proxy) = (&setup.store, &setup.proxy);
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task("warm", &owner, "echo")).await?;
    let warm = store
        .take_next(&["echo".to_owned()], "warm-taker", LEASE, 1, Duration::ZERO)
        .await?;
    assert_eq!(warm.len(), 1);
    store
        .create(queued_task("taken-once", &owner, "echo"))
        .await?;

    proxy.cut_reply_to(&[b"FCALL", b"resent-taker"]);
    let claims = store
        .take_next(
            &["echo".to_owned()],
            "resent-taker",
            LEASE,
            1,
            Duration::ZERO,
        )
        .await?;
    assert_eq!(proxy.cuts(), 1, "the take's reply was never cut");
    let [claim] = claims.as_slice() else {
        return Err(format!("the resent take answered {} claims", claims.len()).into());
    };
    assert_eq!(claim.lease.task_id, "taken-once");
    assert_eq!(
        store.lease_count().await?,
        2,
        "the warm-up's lease and this one"
    );

    // The lease the take answered is the one Redis holds: it runs and completes the task.
    let started = store
        .activate_execution(&claim.lease, LEASE, LEASE)
        .await?
        .ok_or("the taken lease was not the live one")?;
    let done = store
        .compare_and_set(
            "taken-once",
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(serde_json::json!({"ok": true}))),
            Some(&started.lease),
        )
        .await?;
    assert!(matches!(done, CasOutcome::Applied(_)), "{done:?}");
    store.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_cancel_answers_cancelled() -> TestResult {
    let setup = setup().await?;
    let (store, proxy) = (&setup.store, &setup.proxy);
    let owner = AccessToken::generate().owner_hash();
    for id in ["warm", "cancelled-once"] {
        store.create(queued_task(id, &owner, "echo")).await?;
    }
    let cancel = Transition::cancelled;
    let warm = store
        .compare_and_set("warm", &[TaskStatus::Running], cancel(), None)
        .await?;
    assert!(matches!(warm, CasOutcome::Applied(_)));

    proxy.cut_reply_to(&[b"FCALL", b"cancelled-once"]);
    let outcome = store
        .compare_and_set("cancelled-once", &[TaskStatus::Running], cancel(), None)
        .await?;
    assert_eq!(proxy.cuts(), 1, "the cancel's reply was never cut");
    match outcome {
        CasOutcome::Applied(task) => assert_eq!(task.status, TaskStatus::Cancelled),
        other => return Err(format!("the resent cancel answered {other:?}").into()),
    }
    store.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_keys_go_once_their_calls_are_answered() -> TestResult {
    let mut setup = setup().await?;
    let store = &setup.store;
    let owner = AccessToken::generate().owner_hash();
    for n in 0..30 {
        store
            .create(queued_task(&format!("t-{n}"), &owner, "echo"))
            .await?;
    }
    // Each call deletes the keys of the calls answered before it: only the last ones are left
    // (each kept at most REPLAY_TTL otherwise).
    let left = reply_keys(&mut setup.node).await?;
    assert!(left <= 2, "{left} reply keys left after 30 creates");
    store.close().await;
    Ok(())
}
