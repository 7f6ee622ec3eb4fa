//! A subscription whose pub/sub message is lost without a sign still gets the event: after
//! `idle_recheck` without hearing anything it re-reads its task's log. (On a Redis Cluster a
//! subscription can sit on a node while that node stops serving the channel's slot; here the
//! loss is made directly: an event is logged the way the scripts log it, and never published.)

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{queued_task, start_running};
use protocol::token::AccessToken;
use redis::AsyncCommands;
use store::redis::fields;
use store::{RedisStore, RedisStoreConfig, TaskStore};

const LEASE: Duration = Duration::from_secs(60);
/// A bound on waiting, so that a never-delivered event fails the test instead of hanging it.
const EVENT_BOUND: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_event_whose_message_was_lost_arrives_at_the_next_idle_recheck() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.idle_recheck = Duration::from_millis(200);
    let store = RedisStore::connect(config).await?;
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task("t", &owner, "echo")).await?;
    start_running(&store, "t", "w1", LEASE).await?;
    let mut subscription = store
        .subscribe("t", &owner, None)
        .await?
        .ok_or("subscription refused")?;

    // The next event, logged as emit.lua logs it, but its message never sent.
    let keys = store.shard_keys("t");
    let mut redis = server.client().await?;
    let seq: u64 = redis.hincr(keys.task("t"), fields::SEQ, 1).await?;
    let _: u64 = redis
        .rpush(keys.events("t"), format!("{seq}|progress|{{\"step\":7}}"))
        .await?;

    let event = tokio::time::timeout(EVENT_BOUND, subscription.events.next())
        .await?
        .ok_or("the event stream ended")?;
    assert_eq!((event.seq, event.event.as_str()), (seq, "progress"));
    assert_eq!(event.data["step"], 7);
    Ok(())
}
