//! The gateway's cached view of the worker registry (`gateway/src/core/catalog.rs`), with real
//! `gateway` and `worker` processes on a private redis-server: the card follows a worker that
//! joins, leaves cleanly, or is killed (its entry merely expires) within the documented bound
//! (`REGISTRY_REFRESH_MS`); its ETag moves with it and `If-None-Match` answers 304 otherwise;
//! and however stale the card may be, admission never outlives the entrypoint grace.
//!
//! Each change is awaited by polling with a deadline of its bound plus [`MARGIN`]; when the
//! change starts (a worker listed in, or gone from, Redis) is read from Redis itself.

use std::time::Duration;

use harness::TestResult;
use harness::cluster;
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use nix::sys::signal::Signal;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig};

/// Bounds what is not under test: processes starting, workers registering.
const PATIENCE: Duration = Duration::from_secs(30);
/// Added to a bound under test: a loaded machine schedules processes late.
const MARGIN: Duration = Duration::from_secs(3);
/// The staleness bound the card gateway runs with.
const REFRESH: Duration = Duration::from_millis(300);
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123";

/// Polls `probe` until it yields a value, failing after `deadline`.
async fn until<T>(
    deadline: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> TestResult<Option<T>>,
) -> TestResult<T> {
    let start = tokio::time::Instant::now();
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if start.elapsed() > deadline {
            return Err(format!("{what}: not within {deadline:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gateway and the client the suite asks it with.
struct Gateway {
    gateway: cluster::Gateway,
    client: reqwest::Client,
}

impl Gateway {
    /// Starts a gateway with `envs` once `/health` answers (which does not read the registry,
    /// so nothing is cached yet).
    async fn start(name: &str, redis: &RedisServer, envs: &[(&str, &str)]) -> TestResult<Self> {
        let mut all = vec![("REDIS_URL", redis.url())];
        all.extend(envs.iter().map(|(k, v)| (*k, (*v).to_owned())));
        Ok(Gateway {
            gateway: cluster::gateway(name, &[], &all).await?,
            client: reqwest::Client::builder().timeout(PATIENCE).build()?,
        })
    }

    async fn card(
        &self,
        if_none_match: Option<&str>,
    ) -> TestResult<(StatusCode, HeaderMap, String)> {
        let mut request = self
            .client
            .get(format!("{}/.well-known/agent-card.json", self.gateway.base));
        if let Some(tag) = if_none_match {
            request = request.header(header::IF_NONE_MATCH, tag);
        }
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        Ok((status, headers, response.text().await?))
    }

    /// The skill ids of the card, sorted, with its ETag.
    async fn skills(&self) -> TestResult<(Vec<String>, String)> {
        let (status, headers, body) = self.card(None).await?;
        assert_eq!(status, StatusCode::OK);
        let card: Value = serde_json::from_str(&body)?;
        let mut skills: Vec<String> = card["skills"]
            .as_array()
            .ok_or("no skills array")?
            .iter()
            .filter_map(|skill| skill["id"].as_str().map(str::to_owned))
            .collect();
        skills.sort();
        let etag = headers
            .get(header::ETAG)
            .ok_or("no ETag")?
            .to_str()?
            .to_owned();
        Ok((skills, etag))
    }

    /// Polls the card until its skills are `expected`, within `deadline`; its ETag.
    async fn await_skills(&self, expected: &[&str], deadline: Duration) -> TestResult<String> {
        until(deadline, &format!("card skills {expected:?}"), async || {
            let (skills, etag) = self.skills().await?;
            Ok((skills == expected).then_some(etag))
        })
        .await
    }

    async fn create_task(&self, skill: &str) -> TestResult<(StatusCode, Value)> {
        let response = self
            .client
            .post(format!("{}/tasks", self.gateway.base))
            .header("Task-Access-Token", TOKEN)
            .json(
                &json!({"skillId": skill, "message": {"role": "user", "content": {"text": "{}"}}}),
            )
            .send()
            .await?;
        Ok((response.status(), response.json().await?))
    }
}

/// A worker hosting only `entrypoints`, its entry expiring 1 s after its last heartbeat.
fn worker(redis: &RedisServer, id: &str, entrypoints: &str) -> TestResult<ServiceProcess> {
    cluster::worker(
        redis,
        id,
        &[
            ("WORKER_ENTRYPOINTS", entrypoints.to_owned()),
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
        ],
    )
}

/// The ids the registry in Redis lists.
async fn listed(registry: &RedisRegistry) -> TestResult<Vec<String>> {
    Ok(registry
        .workers()
        .await?
        .into_iter()
        .map(|entry| entry.worker_id)
        .collect())
}

async fn await_listed(registry: &RedisRegistry, expected: &[&str]) -> TestResult {
    until(
        PATIENCE,
        &format!("registry lists {expected:?}"),
        async || Ok((listed(registry).await? == expected).then_some(())),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_card_follows_workers_within_the_refresh_bound() -> TestResult {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(redis.url())).await?;
    let registry = store.registry();
    let refresh = REFRESH.as_millis().to_string();
    let gateway = Gateway::start("g-card", &redis, &[("REGISTRY_REFRESH_MS", &refresh)]).await?;
    let bound = REFRESH + MARGIN;

    let mut echo = worker(&redis, "w-echo", "echo")?;
    await_listed(&registry, &["w-echo"]).await?;
    let echo_tag = gateway.await_skills(&["echo"], bound).await?;

    // Unchanged: 304 with the same validators and caching headers, no body.
    let (status, full, _) = gateway.card(None).await?;
    assert_eq!(status, StatusCode::OK);
    let (status, not_modified, body) = gateway.card(Some(&echo_tag)).await?;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(body, "");
    for name in [
        header::ETAG,
        header::CACHE_CONTROL,
        header::VARY,
        header::CONTENT_TYPE,
        header::X_CONTENT_TYPE_OPTIONS,
    ] {
        assert_eq!(not_modified.get(&name), full.get(&name), "{name}");
    }

    // A worker joins with another entrypoint: a new card, a new tag; the old tag gets it all.
    let mut sleep = worker(&redis, "w-sleep", "sleep")?;
    await_listed(&registry, &["w-echo", "w-sleep"]).await?;
    let both_tag = gateway.await_skills(&["echo", "sleep"], bound).await?;
    assert_ne!(both_tag, echo_tag);
    let (status, _, body) = gateway.card(Some(&echo_tag)).await?;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"sleep\""), "{body}");

    // It leaves cleanly (deregisters before exiting): the card of before, byte for byte.
    sleep.signal(Signal::SIGTERM)?;
    sleep.wait_exit(PATIENCE)?;
    assert_eq!(listed(&registry).await?, ["w-echo"]);
    let tag = gateway.await_skills(&["echo"], bound).await?;
    assert_eq!(tag, echo_tag);

    // Killed: no script runs; its entry expires in Redis, and the card follows.
    echo.kill()?;
    await_listed(&registry, &[]).await?;
    let empty_tag = gateway.await_skills(&[], bound).await?;
    assert_ne!(empty_tag, echo_tag);
    let (status, _, _) = gateway.card(Some(&empty_tag)).await?;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    Ok(())
}

/// With a card allowed to be a minute stale, admission still follows the registry within the
/// grace period (1 s), and with no grace at all it refuses as soon as Redis lists nobody.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_cache_never_admits_past_the_grace() -> TestResult {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(redis.url())).await?;
    let registry = store.registry();
    let grace = Duration::from_secs(1);
    let grace_ms = grace.as_millis().to_string();
    let remembering = Gateway::start(
        "g-grace",
        &redis,
        &[
            ("REGISTRY_REFRESH_MS", "60000"),
            ("ENTRYPOINT_GRACE_MS", &grace_ms),
        ],
    )
    .await?;
    let strict = Gateway::start(
        "g-strict",
        &redis,
        &[
            ("REGISTRY_REFRESH_MS", "60000"),
            ("ENTRYPOINT_GRACE_MS", "0"),
        ],
    )
    .await?;

    let mut only = worker(&redis, "w1", "echo")?;
    await_listed(&registry, &["w1"]).await?;
    for gateway in [&remembering, &strict] {
        let (status, body) = gateway.create_task("echo").await?;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    only.kill()?;
    await_listed(&registry, &[]).await?;
    let (status, body) = strict.create_task("echo").await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "skill_not_found");

    until(grace + MARGIN, "echo refused past the grace", async || {
        let (status, _) = remembering.create_task("echo").await?;
        Ok((status == StatusCode::NOT_FOUND).then_some(()))
    })
    .await?;
    // Refused for good: no cached listing brings it back.
    for _ in 0..5 {
        let (status, body) = remembering.create_task("echo").await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    Ok(())
}
