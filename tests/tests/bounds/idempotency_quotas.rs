//! Idempotency records nobody else can evict (issue 36, item 6), through real processes on a
//! private redis-server: a victim's keyed invoke is still replayed (`Idempotency-Replayed`,
//! the same body, run once) after a flood of keyed invokes from other callers (fresh tokens)
//! past the store's ceiling, which are refused instead of evicting it; and a caller past its
//! own quota of records gets `429 idempotency_quota_exceeded` with Retry-After while a call
//! without a key, and the replay of a recorded one, still go through.

use harness::TestResult;
use harness::cluster::Cluster;
use serde_json::{Value, json};

/// A worker serving `echo` and a gateway with `settings`.
async fn cluster(settings: &[(&str, &str)]) -> TestResult<Cluster> {
    Cluster::builder()
        .worker("w-idem", &[("WORKER_ENTRYPOINTS", "echo")])
        .gateway("g-idem", settings)
        .skills(&["echo"])
        .start()
        .await
}

/// `POST /entrypoints/echo/invoke` as `token` (none: anonymous) with `key`: the status, the
/// `Idempotency-Replayed` header, the `Retry-After` header and the body.
async fn invoke(
    base: &str,
    token: Option<&str>,
    key: Option<&str>,
    text: &str,
) -> TestResult<(u16, bool, Option<String>, Value)> {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/entrypoints/echo/invoke"))
        .json(&json!({"input": {"text": text}}));
    if let Some(token) = token {
        request = request.header("Task-Access-Token", token);
    }
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let replayed = header("idempotency-replayed").as_deref() == Some("true");
    let retry_after = header("retry-after");
    let body = response.json().await.unwrap_or(Value::Null);
    Ok((status, replayed, retry_after, body))
}

fn token(i: usize) -> String {
    format!("flood-token-{i:04}-0123456789abcdefghijklmnop")
}

fn key(i: usize) -> String {
    format!("flood-key-{i:04}-0123456789abcdef")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_keyed_calls_from_other_callers_leaves_a_victims_replay_intact() -> TestResult {
    // The ceiling the reproduction used: before per-caller quotas, five anonymous
    // keyed invokes evicted the victim's record and its retry ran again.
    let cluster = cluster(&[("IDEMPOTENCY_MAX_ENTRIES", "5")]).await?;
    let base = cluster.base();
    let victim = "victim-token-0123456789abcdefghijklmnopq";
    let victim_key = "victim-key-0123456789abcdef";
    let (status, replayed, _, first) =
        invoke(base, Some(victim), Some(victim_key), "pay me once").await?;
    assert_eq!(status, 200, "{first}");
    assert!(!replayed);

    let mut refused = 0;
    for i in 0..12 {
        let (status, _, _, body) = invoke(base, Some(&token(i)), Some(&key(i)), "flood").await?;
        match status {
            200 => {}
            // At the ceiling the flood is refused; nobody's record is evicted for it.
            503 => refused += 1,
            other => panic!("flood call {i}: {other} {body}"),
        }
    }

    let (status, replayed, _, again) =
        invoke(base, Some(victim), Some(victim_key), "pay me once").await?;
    assert_eq!(status, 200, "{again}");
    assert!(replayed, "the victim's retry ran again: {again}");
    assert_eq!(again, first, "the replay is the first run's answer");
    assert!(refused > 0, "the flood never reached the ceiling");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_past_its_quota_is_refused_with_429_and_retry_after() -> TestResult {
    let cluster = cluster(&[("IDEMPOTENCY_MAX_ENTRIES_PER_SUBJECT", "3")]).await?;
    let base = cluster.base();
    let flooder = token(0);
    for i in 0..3 {
        let (status, _, _, body) = invoke(base, Some(&flooder), Some(&key(i)), "mine").await?;
        assert_eq!(status, 200, "call {i}: {body}");
    }
    let (status, _, retry_after, body) =
        invoke(base, Some(&flooder), Some(&key(3)), "mine").await?;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["error"]["code"], "idempotency_quota_exceeded",
        "{body}"
    );
    let seconds: u64 = retry_after.ok_or("no Retry-After")?.parse()?;
    assert!(seconds >= 1, "Retry-After {seconds}");
    // Its recorded calls still replay, and a call without a key still runs.
    let (status, replayed, _, body) = invoke(base, Some(&flooder), Some(&key(0)), "mine").await?;
    assert_eq!((status, replayed), (200, true), "{body}");
    let (status, _, _, body) = invoke(base, Some(&flooder), None, "mine").await?;
    assert_eq!(status, 200, "{body}");
    Ok(())
}
