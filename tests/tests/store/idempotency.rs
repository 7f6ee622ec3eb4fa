//! The `IdempotencyStore` contract, against `MemoryIdempotency` and against `RedisIdempotency`
//! on a private redis-server: claims, conflicts, replays, releases, fenced stale claims, expiry
//! of in-progress and finished records, one winner among concurrent claimers, and (Redis) no
//! key outliving its retention.

use harness::TestResult;
use std::sync::Arc;
use std::time::Duration;

use harness::redis_server::RedisServer;
use store::idempotency::{
    Begin, Claim, IdempotencyLimits, IdempotencyStore, MemoryIdempotency, RedisIdempotency,
    StoredResponse,
};
use store::{RedisStore, RedisStoreConfig};

const SCOPE: &str = "entrypoint:echo:invoke";
const KEY: &str = "bench-key-0123456789abcdef";
const LONG: Duration = Duration::from_secs(60);
/// Short TTLs for expiry tests, and how long to wait for them to pass.
const SHORT: Duration = Duration::from_millis(150);
const PAST_SHORT: Duration = Duration::from_millis(400);

fn response(body: &str) -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: vec![(
            "content-type".into(),
            "application/json; charset=utf-8".into(),
        )],
        body: body.to_owned(),
    }
}

async fn started(
    store: &dyn IdempotencyStore,
    scope: &str,
    key: &str,
    fingerprint: &str,
    ttl: Duration,
) -> TestResult<Claim> {
    match store.begin(scope, key, fingerprint, ttl).await? {
        Begin::Started(claim) => Ok(claim),
        other => Err(format!("expected a claim, got {other:?}").into()),
    }
}

// ----- the contract, for any store -----

async fn claims_conflicts_and_replays(store: &dyn IdempotencyStore) -> TestResult {
    let claim = started(store, SCOPE, KEY, "fp-a", LONG).await?;
    assert_eq!(claim.scope(), SCOPE);
    assert_eq!(claim.key(), KEY);
    assert_eq!(claim.fingerprint(), "fp-a");
    assert_eq!(
        store.begin(SCOPE, KEY, "fp-a", LONG).await?,
        Begin::InProgress
    );
    assert_eq!(
        store.begin(SCOPE, KEY, "fp-b", LONG).await?,
        Begin::Conflict
    );

    let done = response(r#"{"run_id":"r1","status":"succeeded","output":{"x":1}}"#);
    assert!(store.complete(&claim, &done, LONG).await?);
    assert_eq!(
        store.begin(SCOPE, KEY, "fp-a", LONG).await?,
        Begin::Replay(done.clone())
    );
    assert_eq!(
        store.begin(SCOPE, KEY, "fp-b", LONG).await?,
        Begin::Conflict
    );
    // Finished: the claim can neither complete again nor release the record.
    assert!(!store.complete(&claim, &response("other"), LONG).await?);
    assert!(!store.release(&claim).await?);
    assert_eq!(
        store.begin(SCOPE, KEY, "fp-a", LONG).await?,
        Begin::Replay(done)
    );

    // Another scope or key is another record.
    started(store, "entrypoint:sleep:invoke", KEY, "fp-b", LONG).await?;
    started(store, SCOPE, "another-key-0123456789abcdef", "fp-b", LONG).await?;
    Ok(())
}

async fn error_statuses_replay_too(store: &dyn IdempotencyStore) -> TestResult {
    let claim = started(store, SCOPE, KEY, "fp", LONG).await?;
    let rejected = StoredResponse {
        status: 400,
        headers: vec![],
        body: r#"{"error":{"code":"invalid_input","message":"no"}}"#.into(),
    };
    assert!(store.complete(&claim, &rejected, LONG).await?);
    assert_eq!(
        store.begin(SCOPE, KEY, "fp", LONG).await?,
        Begin::Replay(rejected)
    );
    Ok(())
}

async fn released_claims_let_a_retry_run(store: &dyn IdempotencyStore) -> TestResult {
    let claim = started(store, SCOPE, KEY, "fp", LONG).await?;
    assert!(store.release(&claim).await?);
    assert!(!store.release(&claim).await?, "released once");
    assert!(
        !store.complete(&claim, &response("late"), LONG).await?,
        "a released claim cannot complete"
    );
    let retry = started(store, SCOPE, KEY, "fp", LONG).await?;
    assert_ne!(retry, claim, "each claim is its own");
    // After a release, another request may take the key.
    assert!(store.release(&retry).await?);
    started(store, SCOPE, KEY, "fp-other", LONG).await?;
    Ok(())
}

async fn in_progress_records_lapse(store: &dyn IdempotencyStore) -> TestResult {
    let stale = started(store, SCOPE, KEY, "fp", SHORT).await?;
    assert_eq!(
        store.begin(SCOPE, KEY, "fp", LONG).await?,
        Begin::InProgress
    );
    tokio::time::sleep(PAST_SHORT).await;
    // Lapsed: a retry claims it, even a different request.
    let retry = started(store, SCOPE, KEY, "fp", LONG).await?;
    // The stale claim is fenced out: it touches nothing of the retry's.
    assert!(!store.complete(&stale, &response("stale"), LONG).await?);
    assert!(!store.release(&stale).await?);
    assert_eq!(
        store.begin(SCOPE, KEY, "fp", LONG).await?,
        Begin::InProgress
    );
    assert!(store.complete(&retry, &response("fresh"), LONG).await?);
    assert_eq!(
        store.begin(SCOPE, KEY, "fp", LONG).await?,
        Begin::Replay(response("fresh"))
    );

    let other = started(store, SCOPE, "lapsing-key-0123456789abcd", "fp-1", SHORT).await?;
    tokio::time::sleep(PAST_SHORT).await;
    started(store, SCOPE, "lapsing-key-0123456789abcd", "fp-2", LONG).await?;
    assert!(!store.release(&other).await?);
    Ok(())
}

async fn finished_records_expire_after_retention(store: &dyn IdempotencyStore) -> TestResult {
    let claim = started(store, SCOPE, KEY, "fp", LONG).await?;
    assert!(store.complete(&claim, &response("kept"), SHORT).await?);
    assert_eq!(
        store.begin(SCOPE, KEY, "fp", LONG).await?,
        Begin::Replay(response("kept"))
    );
    tokio::time::sleep(PAST_SHORT).await;
    // Gone: the key is free, even for a different request.
    started(store, SCOPE, KEY, "fp-other", LONG).await?;
    Ok(())
}

async fn one_of_many_concurrent_claimers_wins(store: Arc<dyn IdempotencyStore>) -> TestResult {
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.begin(SCOPE, KEY, "fp", LONG).await
        }));
    }
    let mut claims = 0;
    for task in tasks {
        match task.await?? {
            Begin::Started(_) => claims += 1,
            Begin::InProgress => {}
            other => return Err(format!("unexpected {other:?}").into()),
        }
    }
    assert_eq!(claims, 1);
    Ok(())
}

// ----- MemoryIdempotency -----

#[tokio::test]
async fn memory_claims_conflicts_and_replays() -> TestResult {
    claims_conflicts_and_replays(&MemoryIdempotency::default()).await
}

#[tokio::test]
async fn memory_error_statuses_replay_too() -> TestResult {
    error_statuses_replay_too(&MemoryIdempotency::default()).await
}

#[tokio::test]
async fn memory_released_claims_let_a_retry_run() -> TestResult {
    released_claims_let_a_retry_run(&MemoryIdempotency::default()).await
}

#[tokio::test]
async fn memory_in_progress_records_lapse() -> TestResult {
    in_progress_records_lapse(&MemoryIdempotency::default()).await
}

#[tokio::test]
async fn memory_finished_records_expire_after_retention() -> TestResult {
    finished_records_expire_after_retention(&MemoryIdempotency::default()).await
}

#[tokio::test]
async fn memory_one_of_many_concurrent_claimers_wins() -> TestResult {
    one_of_many_concurrent_claimers_wins(Arc::new(MemoryIdempotency::default())).await
}

#[tokio::test]
async fn memory_is_bounded_by_subject_quotas_without_eviction() -> TestResult {
    let store = MemoryIdempotency::with_limits(BOUNDED);
    bounded_without_eviction(&store).await?;
    assert_eq!(store.len(), BOUNDED.max_records);
    Ok(())
}

#[tokio::test]
async fn memory_large_bodies_are_not_kept() -> TestResult {
    large_bodies_are_not_kept(&MemoryIdempotency::with_limits(BOUNDED)).await
}

#[tokio::test]
async fn memory_expired_records_make_room_first() -> TestResult {
    // Expired records make room before live ones are evicted.
    let store = MemoryIdempotency::new(2);
    started(&store, SCOPE, "short-lived-0123456789abcdef", "fp", SHORT).await?;
    let kept = started(&store, SCOPE, "long-lived-0123456789abcdefg", "fp", LONG).await?;
    tokio::time::sleep(PAST_SHORT).await;
    started(&store, SCOPE, "newcomer-0123456789abcdefghij", "fp", LONG).await?;
    assert!(store.complete(&kept, &response("kept"), LONG).await?);
    Ok(())
}

// ----- bounds, for any store -----

const BOUNDED: IdempotencyLimits = IdempotencyLimits {
    max_records: 4,
    max_records_per_subject: 2,
    max_body_bytes: 64,
};

fn bounded_key(i: usize) -> String {
    format!("bounded-key-{i:03}-0123456789abcdef")
}

async fn started_for(store: &dyn IdempotencyStore, i: usize, subject: &str) -> TestResult<Claim> {
    match store
        .begin_for(SCOPE, &bounded_key(i), "fp", &[subject.to_owned()], LONG)
        .await?
    {
        Begin::Started(claim) => Ok(claim),
        other => Err(format!("expected a claim for {i}, got {other:?}").into()),
    }
}

/// Filling a store past its bounds evicts nobody's record: a subject at its quota is refused
/// (`OverQuota`, until its oldest record lapses) while others still get records, the store at
/// its ceiling refuses every newcomer (`Full`), and a victim's finished record is replayed
/// throughout. A released record frees its subject's quota.
async fn bounded_without_eviction(store: &dyn IdempotencyStore) -> TestResult {
    let victim = started_for(store, 0, "address:victim").await?;
    assert!(store.complete(&victim, &response("0"), LONG).await?);
    let flood = started_for(store, 1, "address:flood").await?;
    let flood_done = started_for(store, 2, "address:flood").await?;
    assert!(store.complete(&flood_done, &response("2"), LONG).await?);
    let refused = store
        .begin_for(
            SCOPE,
            &bounded_key(3),
            "fp",
            &["address:flood".to_owned()],
            LONG,
        )
        .await?;
    let Begin::OverQuota { retry_after } = refused else {
        return Err(format!("the flood past its quota got {refused:?}").into());
    };
    assert!(
        retry_after > Duration::ZERO && retry_after <= LONG,
        "{retry_after:?}"
    );
    // A record charged to two subjects needs room in both.
    assert!(matches!(
        store
            .begin_for(
                SCOPE,
                &bounded_key(3),
                "fp",
                &["token:other".to_owned(), "address:flood".to_owned()],
                LONG
            )
            .await?,
        Begin::OverQuota { .. }
    ));
    started_for(store, 4, "address:other").await?;
    assert_eq!(
        store
            .begin_for(
                SCOPE,
                &bounded_key(5),
                "fp",
                &["address:late".to_owned()],
                LONG
            )
            .await?,
        Begin::Full,
        "at the ceiling a newcomer is refused, nobody's record evicted"
    );
    assert_eq!(
        store.begin(SCOPE, &bounded_key(0), "fp", LONG).await?,
        Begin::Replay(response("0")),
        "the victim's record was kept"
    );
    assert_eq!(
        store.begin(SCOPE, &bounded_key(1), "fp", LONG).await?,
        Begin::InProgress
    );
    // Released, the flood's running record frees one place of its quota and of the store.
    assert!(store.release(&flood).await?);
    started_for(store, 3, "address:flood").await?;
    Ok(())
}

/// A response over the body bound is recorded as run, but not kept: a replay says so, and
/// the request does not run again.
async fn large_bodies_are_not_kept(store: &dyn IdempotencyStore) -> TestResult {
    let body = "x".repeat(BOUNDED.max_body_bytes);
    let small = started(store, SCOPE, &bounded_key(0), "fp", LONG).await?;
    assert!(store.complete(&small, &response(&body), LONG).await?);
    let large = started(store, SCOPE, &bounded_key(1), "fp", LONG).await?;
    assert!(
        store
            .complete(&large, &response(&format!("{body}y")), LONG)
            .await?
    );
    assert_eq!(
        store.begin(SCOPE, &bounded_key(0), "fp", LONG).await?,
        Begin::Replay(response(&body))
    );
    assert_eq!(
        store.begin(SCOPE, &bounded_key(1), "fp", LONG).await?,
        Begin::NotKept { status: 200 }
    );
    assert_eq!(
        store.begin(SCOPE, &bounded_key(1), "other", LONG).await?,
        Begin::Conflict
    );
    Ok(())
}

// ----- RedisIdempotency -----

struct RedisCase {
    // Dropped last: stops the server.
    server: RedisServer,
    store: RedisStore,
    idempotency: RedisIdempotency,
}

async fn redis() -> TestResult<RedisCase> {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "idem-test".into();
    let store = RedisStore::connect(config).await?;
    let idempotency = store.idempotency();
    Ok(RedisCase {
        server,
        store,
        idempotency,
    })
}

impl RedisCase {
    /// Every idempotency record of the namespace, with its PTTL.
    async fn records(&self) -> TestResult<Vec<(String, i64)>> {
        let mut conn = self.server.client().await?;
        let mut names: Vec<String> = redis::cmd("KEYS")
            .arg(self.idempotency.pattern())
            .query_async(&mut conn)
            .await?;
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let ttl: i64 = redis::cmd("PTTL").arg(&name).query_async(&mut conn).await?;
            out.push((name, ttl));
        }
        Ok(out)
    }

    /// Every key of the namespace.
    /// Every key of the namespace but its layout stamp (kept for good by design).
    async fn all_keys(&self) -> TestResult<Vec<String>> {
        let mut conn = self.server.client().await?;
        let names: Vec<String> = redis::cmd("KEYS")
            .arg(self.store.keys().all_pattern())
            .query_async(&mut conn)
            .await?;
        let layout = self.store.keys().layout();
        Ok(names.into_iter().filter(|name| *name != layout).collect())
    }
}

#[tokio::test]
async fn redis_claims_conflicts_and_replays() -> TestResult {
    let case = redis().await?;
    claims_conflicts_and_replays(&case.idempotency).await
}

#[tokio::test]
async fn redis_error_statuses_replay_too() -> TestResult {
    let case = redis().await?;
    error_statuses_replay_too(&case.idempotency).await
}

#[tokio::test]
async fn redis_released_claims_let_a_retry_run() -> TestResult {
    let case = redis().await?;
    released_claims_let_a_retry_run(&case.idempotency).await
}

#[tokio::test]
async fn redis_in_progress_records_lapse() -> TestResult {
    let case = redis().await?;
    in_progress_records_lapse(&case.idempotency).await
}

#[tokio::test]
async fn redis_finished_records_expire_after_retention() -> TestResult {
    let case = redis().await?;
    finished_records_expire_after_retention(&case.idempotency).await
}

#[tokio::test]
async fn redis_one_of_many_concurrent_claimers_wins() -> TestResult {
    let case = redis().await?;
    one_of_many_concurrent_claimers_wins(Arc::new(case.idempotency.clone())).await
}

#[tokio::test]
async fn redis_is_bounded_by_subject_quotas_without_eviction() -> TestResult {
    let case = redis().await?;
    let store = RedisIdempotency::with_limits(&case.store, BOUNDED);
    bounded_without_eviction(&store).await?;
    // The bound holds in Redis itself: as many record keys as listed ids, no more.
    let records = case.records().await?;
    assert_eq!(records.len(), BOUNDED.max_records, "{records:?}");
    let mut conn = case.server.client().await?;
    let mut listed = 0;
    for index in store.index_keys() {
        let count: usize = redis::cmd("ZCARD")
            .arg(index)
            .query_async(&mut conn)
            .await?;
        listed += count;
    }
    assert_eq!(listed, BOUNDED.max_records);
    // Each subject's set lists its live records.
    for (subject, held) in [
        ("address:victim", 1),
        ("address:flood", 2),
        ("address:other", 1),
    ] {
        let count: usize = redis::cmd("ZCARD")
            .arg(store.subject_key(subject))
            .query_async(&mut conn)
            .await?;
        assert_eq!(count, held, "{subject}");
    }
    Ok(())
}

#[tokio::test]
async fn redis_large_bodies_are_not_kept() -> TestResult {
    let case = redis().await?;
    let store = RedisIdempotency::with_limits(&case.store, BOUNDED);
    large_bodies_are_not_kept(&store).await?;
    // The large body is not in Redis at all.
    let mut conn = case.server.client().await?;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(store.record_key(SCOPE, &bounded_key(1)))
        .query_async(&mut conn)
        .await?;
    assert!(!fields.iter().any(|field| field == "body"), "{fields:?}");
    Ok(())
}

#[tokio::test]
async fn redis_records_are_hashed_names_with_ttls_and_leave_nothing_behind() -> TestResult {
    let case = redis().await?;
    let store = &case.idempotency;
    let running = started(store, SCOPE, KEY, "fp-1", SHORT).await?;
    let finished = started(store, SCOPE, "finished-key-0123456789abcd", "fp-2", LONG).await?;
    assert!(store.complete(&finished, &response("done"), SHORT).await?);
    let released = started(store, SCOPE, "released-key-0123456789abcd", "fp-3", LONG).await?;
    assert!(store.release(&released).await?);

    let records = case.records().await?;
    assert_eq!(records.len(), 2, "{records:?}");
    for (name, ttl) in &records {
        // `{ns}:idem:<64 hex>`: the client's key never appears in a key name.
        let hash = name
            .strip_prefix("{idem-test}:idem:")
            .ok_or_else(|| format!("unexpected name {name}"))?;
        assert_eq!(hash.len(), 64);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!name.contains(KEY));
        assert!(
            *ttl > 0 && *ttl <= SHORT.as_millis() as i64,
            "{name} ttl {ttl}"
        );
    }
    assert!(
        records
            .iter()
            .any(|(name, _)| *name == store.record_key(SCOPE, KEY))
    );

    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(case.records().await?, vec![]);
    assert_eq!(
        case.all_keys().await?,
        Vec::<String>::new(),
        "no key leaked"
    );
    drop(running);

    // A long retention is what the record carries once done.
    let kept = started(store, SCOPE, "kept-key-0123456789abcdefgh", "fp-4", SHORT).await?;
    assert!(store.complete(&kept, &response("kept"), LONG).await?);
    let ttl = case
        .records()
        .await?
        .into_iter()
        .find(|(name, _)| *name == store.record_key(SCOPE, "kept-key-0123456789abcdefgh"))
        .map(|(_, ttl)| ttl)
        .ok_or("the finished record is missing")?;
    assert!(
        ttl > SHORT.as_millis() as i64,
        "retention replaced the in-progress ttl: {ttl}"
    );
    Ok(())
}

#[tokio::test]
async fn redis_scripts_survive_a_script_flush() -> TestResult {
    let case = redis().await?;
    let store = &case.idempotency;
    let claim = started(store, SCOPE, KEY, "fp", LONG).await?;
    let mut conn = case.server.client().await?;
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;
    assert!(
        store
            .complete(&claim, &response("after flush"), LONG)
            .await?
    );
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;
    assert_eq!(
        store.begin(SCOPE, KEY, "fp", LONG).await?,
        Begin::Replay(response("after flush"))
    );
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;
    let other = started(store, SCOPE, "another-key-0123456789abcdef", "fp", LONG).await?;
    assert!(store.release(&other).await?);
    Ok(())
}

#[tokio::test]
async fn redis_unavailable_is_an_error_not_a_hang() -> TestResult {
    let mut case = redis().await?;
    case.server.stop()?;
    let begun = tokio::time::timeout(
        Duration::from_secs(10),
        case.idempotency.begin(SCOPE, KEY, "fp", LONG),
    )
    .await?;
    assert!(begun.is_err(), "{begun:?}");
    Ok(())
}
