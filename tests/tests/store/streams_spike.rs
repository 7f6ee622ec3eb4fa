//! The fences of the P25 Streams spike (`harness::streams_spike`, docs/store.md "Toward P25") on a
//! real redis-server: a completion or renewal by a consumer that no longer holds an entry (or
//! holds it under an older delivery count) is refused, a renewal keeps the delivery count and
//! resets the idle time, and `XAUTOCLAIM` past the lease takes an entry over and raises its count.
//! Lease ages are set with `XCLAIM ... IDLE`, so no test waits for a clock.

use harness::redis_server::RedisServer;
use harness::streams_spike::{Lease, ResultMode, SpikeQueue, take_fair};
use redis::aio::MultiplexedConnection;

type Res = Result<(), Box<dyn std::error::Error>>;

const TTL_MS: u64 = 30_000;
const RETENTION_MS: u64 = 3_600_000;

async fn queue(
    server: &RedisServer,
    mode: ResultMode,
) -> Result<(SpikeQueue, MultiplexedConnection), Box<dyn std::error::Error>> {
    let mut conn = server.client().await?;
    let q = SpikeQueue::new("spike", mode, RETENTION_MS);
    q.create(&mut conn).await?;
    Ok((q, conn))
}

/// Makes an entry look older than the lease TTL without changing owner or count.
async fn age(conn: &mut MultiplexedConnection, q: &SpikeQueue, owner: &str, lease: &Lease) -> Res {
    let _: Vec<String> = redis::cmd("XCLAIM")
        .arg(q.stream())
        .arg("workers")
        .arg(owner)
        .arg(0)
        .arg(&lease.entry)
        .arg("IDLE")
        .arg(2 * TTL_MS)
        .arg("JUSTID")
        .query_async(conn)
        .await?;
    Ok(())
}

async fn finish_writes_once(mode: ResultMode) -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, mode).await?;
    for i in 0..3 {
        q.add(&mut conn, &format!("t{i}"), "in").await?;
    }
    let leases = q.take(&mut conn, "w1-e1", 16).await?;
    assert_eq!(leases.len(), 3);
    assert!(leases.iter().all(|l| l.count == 1));
    let items: Vec<(&Lease, &str)> = leases.iter().map(|l| (l, "out")).collect();
    assert_eq!(q.finish(&mut conn, "w1-e1", &items).await?, vec![true; 3]);
    for lease in &leases {
        assert_eq!(q.result(&mut conn, lease).await?.as_deref(), Some("out"));
        let ttl = q.result_ttl_ms(&mut conn, lease).await?;
        assert!(
            ttl > 0 && ttl <= RETENTION_MS as i64,
            "result kept with an expiry, ttl {ttl}"
        );
        assert_eq!(q.pending(&mut conn, &lease.entry).await?, None);
    }
    let len: u64 = redis::cmd("XLEN")
        .arg(q.stream())
        .query_async(&mut conn)
        .await?;
    assert_eq!(len, 0, "finished entries are deleted from the stream");
    // A second terminal write of the same tasks is refused: exactly one terminal status.
    let again: Vec<(&Lease, &str)> = leases.iter().map(|l| (l, "other")).collect();
    assert_eq!(q.finish(&mut conn, "w1-e1", &again).await?, vec![false; 3]);
    assert_eq!(
        q.result(&mut conn, &leases[0]).await?.as_deref(),
        Some("out")
    );
    Ok(())
}

#[tokio::test]
async fn finish_writes_each_result_once_record_mode() -> Res {
    finish_writes_once(ResultMode::Record).await
}

#[tokio::test]
async fn a_finished_batch_leaves_the_live_set_and_enters_the_retained_set_once() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Record).await?;
    for i in 0..4 {
        q.add(&mut conn, &format!("t{i}"), "in").await?;
    }
    let live: u64 = redis::cmd("SCARD")
        .arg(q.live_key())
        .query_async(&mut conn)
        .await?;
    assert_eq!(live, 4);
    let leases = q.take(&mut conn, "w1-e1", 16).await?;
    // Three finish; the fourth stays live (its worker still runs it).
    let items: Vec<(&Lease, &str)> = leases[..3].iter().map(|l| (l, "out")).collect();
    assert_eq!(q.finish(&mut conn, "w1-e1", &items).await?, vec![true; 3]);
    // A stale retry of the batch changes nothing.
    assert_eq!(q.finish(&mut conn, "w1-e1", &items).await?, vec![false; 3]);
    let live: Vec<String> = redis::cmd("SMEMBERS")
        .arg(q.live_key())
        .query_async(&mut conn)
        .await?;
    assert_eq!(live, vec![leases[3].task.clone()]);
    let retained: u64 = redis::cmd("ZCARD")
        .arg(q.terminal_key())
        .query_async(&mut conn)
        .await?;
    assert_eq!(retained, 3);
    let status: Option<String> = redis::cmd("HGET")
        .arg(format!("{{{}}}:task:{}", "spike", leases[0].task))
        .arg("st")
        .query_async(&mut conn)
        .await?;
    assert_eq!(status.as_deref(), Some("completed"));
    Ok(())
}

#[tokio::test]
async fn a_cancelled_running_task_is_taken_from_its_worker() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Record).await?;
    let first = q.add(&mut conn, "t0", "in").await?;
    q.add(&mut conn, "t1", "in").await?;
    let leases = q.take(&mut conn, "w1-e1", 16).await?;
    assert_eq!(leases.len(), 2);
    assert!(q.cancel(&mut conn, "t0", &first).await?);
    assert!(
        !q.cancel(&mut conn, "t0", &first).await?,
        "a task is cancelled once"
    );
    // The holder's renewal comes back without the cancelled entry: its signal to stop.
    let renewed = q
        .renew(&mut conn, "w1-e1", &[&leases[0], &leases[1]])
        .await?;
    assert_eq!(renewed, vec![leases[1].entry.clone()]);
    // Its finish of the cancelled task is refused; the other lands.
    let items: Vec<(&Lease, &str)> = leases.iter().map(|l| (l, "out")).collect();
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &items).await?,
        vec![false, true]
    );
    let status: Option<String> = redis::cmd("HGET")
        .arg("{spike}:task:t0")
        .arg("st")
        .query_async(&mut conn)
        .await?;
    assert_eq!(status.as_deref(), Some("cancelled"), "one terminal status");
    let live: u64 = redis::cmd("SCARD")
        .arg(q.live_key())
        .query_async(&mut conn)
        .await?;
    assert_eq!(live, 0);
    Ok(())
}

#[tokio::test]
async fn a_cancelled_queued_task_is_never_delivered() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Record).await?;
    let first = q.add(&mut conn, "t0", "in").await?;
    q.add(&mut conn, "t1", "in").await?;
    assert!(q.cancel(&mut conn, "t0", &first).await?);
    let leases = q.take(&mut conn, "w1-e1", 16).await?;
    let tasks: Vec<&str> = leases.iter().map(|l| l.task.as_str()).collect();
    assert_eq!(tasks, vec!["t1"]);
    Ok(())
}

#[tokio::test]
async fn trimming_drops_only_acknowledged_entries() -> Res {
    let server = RedisServer::start()?;
    let mut conn = server.client().await?;
    let q = SpikeQueue::new("spike", ResultMode::Key, RETENTION_MS).trimming();
    q.create(&mut conn).await?;
    for i in 0..300 {
        q.add(&mut conn, &format!("t{i}"), "in").await?;
    }
    // 150 delivered; all but the 120th finished, in two batches (the trim runs after each).
    let leases = q.take(&mut conn, "w1-e1", 150).await?;
    let held = &leases[119];
    for part in [&leases[..119], &leases[120..]] {
        let items: Vec<(&Lease, &str)> = part.iter().map(|l| (l, "out")).collect();
        assert!(
            q.finish(&mut conn, "w1-e1", &items)
                .await?
                .iter()
                .all(|&w| w)
        );
    }
    let len: u64 = redis::cmd("XLEN")
        .arg(q.stream())
        .query_async(&mut conn)
        .await?;
    assert!(
        len < 300,
        "acknowledged entries left the stream (length {len})"
    );
    // The pending entry below the batch's top and every undelivered entry stay.
    let kept: Vec<redis::Value> = redis::cmd("XRANGE")
        .arg(q.stream())
        .arg(&held.entry)
        .arg(&held.entry)
        .query_async(&mut conn)
        .await?;
    assert_eq!(kept.len(), 1, "a pending entry is never trimmed");
    let rest = q.take(&mut conn, "w2-e1", 1000).await?;
    assert_eq!(
        rest.len(),
        150,
        "every undelivered entry is still delivered"
    );
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(held, "out")]).await?,
        vec![true]
    );
    Ok(())
}

#[tokio::test]
async fn a_busy_entrypoint_cannot_take_another_ones_turn() -> Res {
    let server = RedisServer::start()?;
    let mut conn = server.client().await?;
    let busy = SpikeQueue::for_entrypoint("spike", "busy", ResultMode::Key, RETENTION_MS);
    let quiet = SpikeQueue::for_entrypoint("spike", "quiet", ResultMode::Key, RETENTION_MS);
    busy.create(&mut conn).await?;
    quiet.create(&mut conn).await?;
    for i in 0..100 {
        busy.add(&mut conn, &format!("b{i}"), "in").await?;
    }
    for i in 0..5 {
        quiet.add(&mut conn, &format!("q{i}"), "in").await?;
    }
    let tasks = |leases: &Vec<Lease>| leases.iter().map(|l| l.task.clone()).collect::<Vec<_>>();
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(take_fair(&mut conn, &[&busy, &quiet], "w1-e1", 4).await?);
    }
    // Each take gives each entrypoint its share, oldest first, until the quiet one runs out.
    assert_eq!(tasks(&taken[0][0]), ["b0", "b1", "b2", "b3"]);
    assert_eq!(tasks(&taken[0][1]), ["q0", "q1", "q2", "q3"]);
    assert_eq!(tasks(&taken[1][0]), ["b4", "b5", "b6", "b7"]);
    assert_eq!(tasks(&taken[1][1]), ["q4"]);
    assert_eq!(tasks(&taken[2][0]), ["b8", "b9", "b10", "b11"]);
    assert!(taken[2][1].is_empty());
    // The taken entries are leases like any other: the finish of each queue's batch lands.
    for (queue, leases) in [(&busy, &taken[0][0]), (&quiet, &taken[0][1])] {
        let items: Vec<(&Lease, &str)> = leases.iter().map(|l| (l, "out")).collect();
        assert_eq!(
            queue.finish(&mut conn, "w1-e1", &items).await?,
            vec![true; 4]
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_retry_runs_as_a_new_entry_that_no_earlier_attempt_can_write() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Record).await?;
    q.add(&mut conn, "t0", "in").await?;
    let first = q.take(&mut conn, "w1-e1", 1).await?.remove(0);
    assert!(q.retry_later(&mut conn, "w1-e1", &first, 0).await?);
    assert!(
        !q.retry_later(&mut conn, "w1-e1", &first, 0).await?,
        "a retry is fenced like a finish"
    );
    // The first attempt's late finish is refused.
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(&first, "late")]).await?,
        vec![false]
    );
    assert_eq!(q.move_due(&mut conn, 100).await?, 1);
    let second = q.take(&mut conn, "w2-e1", 1).await?.remove(0);
    assert_eq!(second.task, "t0");
    assert_eq!(
        second.payload, "in",
        "the payload comes back from the record"
    );
    assert_ne!(second.entry, first.entry, "a new entry, a new lease");
    let retries: Option<u64> = redis::cmd("HGET")
        .arg("{spike}:task:t0")
        .arg("ry")
        .query_async(&mut conn)
        .await?;
    assert_eq!(retries.unwrap_or(0) + second.count, 2, "the second attempt");
    // The first attempt's writes stay refused; the second's lands.
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(&first, "late")]).await?,
        vec![false]
    );
    assert_eq!(
        q.finish(&mut conn, "w2-e1", &[(&second, "out")]).await?,
        vec![true]
    );
    assert_eq!(q.result(&mut conn, &second).await?.as_deref(), Some("out"));
    Ok(())
}

#[tokio::test]
async fn a_retry_not_yet_due_is_not_delivered() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Record).await?;
    q.add(&mut conn, "t0", "in").await?;
    let first = q.take(&mut conn, "w1-e1", 1).await?.remove(0);
    assert!(q.retry_later(&mut conn, "w1-e1", &first, 3_600_000).await?);
    assert_eq!(q.move_due(&mut conn, 100).await?, 0);
    assert!(q.take(&mut conn, "w2-e1", 16).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_subscriber_of_one_task_hears_its_finish() -> Res {
    use futures::StreamExt;
    let server = RedisServer::start()?;
    let mut conn = server.client().await?;
    let q = SpikeQueue::new("spike", ResultMode::Record, RETENTION_MS)
        .trimming()
        .events_each();
    q.create(&mut conn).await?;
    q.add(&mut conn, "t0", "in").await?;
    q.add(&mut conn, "t1", "in").await?;
    let mut pubsub = redis::Client::open(server.url())?
        .get_async_pubsub()
        .await?;
    pubsub.subscribe(q.task_channel("t1")).await?;
    let leases = q.take(&mut conn, "w1-e1", 16).await?;
    let items: Vec<(&Lease, &str)> = leases.iter().map(|l| (l, "out")).collect();
    assert_eq!(q.finish(&mut conn, "w1-e1", &items).await?, vec![true; 2]);
    // The subscription is served in order: its first message is t1's own event, not t0's.
    let mut messages = pubsub.on_message();
    // The bound only keeps a lost message from hanging the test.
    let message = tokio::time::timeout(std::time::Duration::from_secs(30), messages.next())
        .await
        .map_err(|_| "no message for t1")?
        .ok_or("the subscription ended")?;
    assert_eq!(message.get_channel_name(), q.task_channel("t1"));
    assert_eq!(message.get_payload::<String>()?, "2|resultUpdate|out");
    Ok(())
}

#[tokio::test]
async fn finish_writes_each_result_once_key_mode() -> Res {
    finish_writes_once(ResultMode::Key).await
}

#[tokio::test]
async fn finish_writes_each_result_once_bucket_mode() -> Res {
    finish_writes_once(ResultMode::Bucket).await
}

#[tokio::test]
async fn renewal_resets_idle_and_keeps_the_delivery_count() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Key).await?;
    q.add(&mut conn, "t1", "in").await?;
    let leases = q.take(&mut conn, "w1-e1", 1).await?;
    let lease = &leases[0];
    age(&mut conn, &q, "w1-e1", lease).await?;
    let before = q
        .pending(&mut conn, &lease.entry)
        .await?
        .ok_or("not pending")?;
    assert_eq!(
        before.count, 1,
        "ageing with XCLAIM IDLE JUSTID keeps the count"
    );
    assert!(before.idle_ms >= 2 * TTL_MS);

    assert_eq!(
        q.renew(&mut conn, "w1-e1", &[lease]).await?,
        vec![lease.entry.clone()]
    );
    let after = q
        .pending(&mut conn, &lease.entry)
        .await?
        .ok_or("not pending")?;
    assert_eq!(after.consumer, "w1-e1");
    assert_eq!(
        after.count, 1,
        "XCLAIM JUSTID on Redis 7.0 does not raise the delivery count"
    );
    assert!(
        after.idle_ms < TTL_MS,
        "renewal reset the idle time ({} ms)",
        after.idle_ms
    );

    // A renewed lease is not recovered, and the owner still finishes it.
    assert!(q.recover(&mut conn, "w2-e1", TTL_MS, 16).await?.is_empty());
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(lease, "out")]).await?,
        vec![true]
    );
    Ok(())
}

#[tokio::test]
async fn recovery_past_the_lease_fences_out_the_old_owner() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Key).await?;
    q.add(&mut conn, "stale", "in").await?;
    q.add(&mut conn, "live", "in").await?;
    let leases = q.take(&mut conn, "w1-e1", 2).await?;
    let (stale, live) = (&leases[0], &leases[1]);
    // The first lease ran out (its worker stopped renewing); the second is fresh.
    age(&mut conn, &q, "w1-e1", stale).await?;

    let recovered = q.recover(&mut conn, "w2-e1", TTL_MS, 16).await?;
    assert_eq!(recovered.len(), 1, "only the expired lease is recovered");
    let taken = &recovered[0];
    assert_eq!(
        (taken.entry.as_str(), taken.task.as_str()),
        (stale.entry.as_str(), "stale")
    );
    assert_eq!(
        taken.count, 2,
        "XAUTOCLAIM raised the delivery count (the entry's epoch)"
    );

    // The old owner wakes up: its renewal does not take the entry back, its write is refused.
    assert!(q.renew(&mut conn, "w1-e1", &[stale]).await?.is_empty());
    let owner = q
        .pending(&mut conn, &stale.entry)
        .await?
        .ok_or("not pending")?;
    assert_eq!((owner.consumer.as_str(), owner.count), ("w2-e1", 2));
    let written = q
        .finish(&mut conn, "w1-e1", &[(stale, "stale write"), (live, "out")])
        .await?;
    assert_eq!(
        written,
        vec![false, true],
        "stale item refused, live item of the same batch kept"
    );
    assert_eq!(q.result(&mut conn, stale).await?, None);

    // The new owner finishes it; then the old owner's retry is still refused.
    assert_eq!(
        q.finish(&mut conn, "w2-e1", &[(taken, "new write")])
            .await?,
        vec![true]
    );
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(stale, "stale write")])
            .await?,
        vec![false]
    );
    assert_eq!(
        q.result(&mut conn, stale).await?.as_deref(),
        Some("new write")
    );
    Ok(())
}

#[tokio::test]
async fn a_reclaim_by_the_same_consumer_still_fences_by_count() -> Res {
    let server = RedisServer::start()?;
    let (q, mut conn) = queue(&server, ResultMode::Bucket).await?;
    q.add(&mut conn, "t1", "in").await?;
    let leases = q.take(&mut conn, "w1-e1", 1).await?;
    let old = &leases[0];
    age(&mut conn, &q, "w1-e1", old).await?;
    let again = q.recover(&mut conn, "w1-e1", TTL_MS, 16).await?;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].count, 2);
    // The owner name is the same, the count is not: the earlier delivery's write is refused.
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(old, "old")]).await?,
        vec![false]
    );
    assert_eq!(
        q.renew(&mut conn, "w1-e1", &[old]).await?,
        Vec::<String>::new()
    );
    assert_eq!(
        q.finish(&mut conn, "w1-e1", &[(&again[0], "new")]).await?,
        vec![true]
    );
    assert_eq!(q.result(&mut conn, old).await?.as_deref(), Some("new"));
    Ok(())
}
