//! The per-client-address bound on live tasks in the Redis store (issue 29,
//! `MAX_LIVE_PER_ADDRESS`), on a private redis-server, unsharded and sharded: an address at its
//! bound is refused with `AddressCapacity` whatever the tasks' owners (anonymous callers get a
//! fresh owner per task), another address and a task without one are not, a finished task
//! frees its place and leaves the address's set, and ids that are no longer live are dropped
//! from the set before a refusal.

use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{ids_in_shard, queued_task};
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use store::{CasOutcome, NewTask, RedisStore, RedisStoreConfig, StoreError, TaskStore, Transition};

const ADDRESS: &str = "198.51.100.1";
const OTHER_ADDRESS: &str = "2001:db8:1:2::/64";

fn owner() -> OwnerHash {
    AccessToken::generate().owner_hash()
}

fn config(server: &RedisServer, shards: u16, max_live_per_address: u64) -> RedisStoreConfig {
    let mut config = RedisStoreConfig::new(server.url());
    config.shards = shards;
    config.max_retained = 0;
    config.max_retained_per_owner = 0;
    config.max_live_per_owner = 0;
    config.max_live_per_address = max_live_per_address;
    config
}

/// Task `id` of a fresh owner, created from `source`.
fn from(id: &str, source: &str) -> NewTask {
    NewTask {
        source: Some(source.to_owned()),
        ..queued_task(id, &owner(), "echo")
    }
}

async fn cancel(store: &RedisStore, id: &str) -> TestResult {
    let outcome = store
        .compare_and_set(id, &[TaskStatus::Running], Transition::cancelled(), None)
        .await?;
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    Ok(())
}

/// An address at its bound in one shard (`ceil(4 / shards)` there) is refused, others are not,
/// and a finished task makes room again.
async fn bound_holds(shards: u16) -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(config(&server, shards, 4)).await?;
    let per_shard = 4_u64.div_ceil(u64::from(shards));
    let ids = ids_in_shard("t", 0, usize::from(shards), 8);
    let count = usize::try_from(per_shard)?;
    for id in &ids[..count] {
        store.create(from(id, ADDRESS)).await?;
    }
    let refused = store.create(from(&ids[count], ADDRESS)).await;
    assert!(
        matches!(refused, Err(StoreError::AddressCapacity { max }) if max == per_shard),
        "{refused:?}"
    );
    // Another address, and an internal task without one, in the same shard.
    store.create(from(&ids[count + 1], OTHER_ADDRESS)).await?;
    store
        .create(queued_task(&ids[count + 2], &owner(), "echo"))
        .await?;
    // A finished task frees its place.
    cancel(&store, &ids[0]).await?;
    store.create(from(&ids[count], ADDRESS)).await?;
    Ok(())
}

#[tokio::test]
async fn an_address_at_its_live_bound_is_refused_unsharded() -> TestResult {
    bound_holds(1).await
}

#[tokio::test]
async fn an_address_at_its_live_bound_is_refused_sharded() -> TestResult {
    bound_holds(2).await
}

#[tokio::test]
async fn a_finished_task_is_dropped_from_its_address_set_at_the_bound() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(config(&server, 1, 2)).await?;
    let set = format!("{{tc}}:src-live:{ADDRESS}");
    store.create(from("a", ADDRESS)).await?;
    store.create(from("b", ADDRESS)).await?;
    cancel(&store, "a").await?;
    let mut conn = server.client().await?;
    let ttl: i64 = redis::cmd("PTTL").arg(&set).query_async(&mut conn).await?;
    assert!(ttl > 0, "the address's set expires: {ttl}");
    // The record does not name the set: the scripts that finish a task leave it alone (their
    // callers could not declare it), and the next creation at the bound drops finished ids.
    let named: Option<String> = redis::cmd("HGET")
        .arg("{tc}:task:a")
        .arg("sl")
        .query_async(&mut conn)
        .await?;
    assert_eq!(named, None);
    store.create(from("c", ADDRESS)).await?;
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&set)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    assert_eq!(members, vec!["b".to_owned(), "c".to_owned()]);
    // An id that is not live fills the set to its bound: it is dropped before the creation is
    // refused, and the set never holds more than the bound.
    let _: i64 = redis::cmd("ZADD")
        .arg(&set)
        .arg(0)
        .arg("ghost")
        .query_async(&mut conn)
        .await?;
    let refused = store.create(from("d", ADDRESS)).await;
    assert!(
        matches!(refused, Err(StoreError::AddressCapacity { max: 2 })),
        "{refused:?}"
    );
    let count: usize = redis::cmd("ZCARD").arg(&set).query_async(&mut conn).await?;
    assert_eq!(count, 2);
    Ok(())
}

#[tokio::test]
async fn with_the_bound_off_nothing_is_tracked() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(config(&server, 1, 0)).await?;
    for n in 0..5 {
        store.create(from(&format!("t-{n}"), ADDRESS)).await?;
    }
    let mut conn = server.client().await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*src-live*")
        .query_async(&mut conn)
        .await?;
    assert!(keys.is_empty(), "{keys:?}");
    Ok(())
}
