//! Fair admission: the GCRA script against a real redis-server, and two real gateways on one
//! Redis sharing each client address's, owner's and payer's quota of task creations (the
//! payer's with the dev facilitator and Anvil test keys: a refused payer settles nothing).
//!
//! The rates are tiny (one request per 100 s), so that a quota never refills during a test:
//! exactly the burst is admitted, whatever the machine's speed.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{Cluster, Gateway, jsonrpc_request};
use harness::paid::{PAYER_KEY, PaidCluster};
use harness::redis_server::RedisServer;
use payments::LocalPayer;
use serde_json::json;
use store::ratelimit::{Quota, RateLimiter, RedisRateLimiter, Subject, Verdict};
use store::{RedisStore, RedisStoreConfig};

const OWNER_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const OWNER_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn subject(key: &str, burst: u32) -> TestResult<Subject> {
    Ok(Subject {
        policy: "per-address",
        key: key.to_owned(),
        quota: Quota::new(0.01, burst).ok_or("no quota")?,
    })
}

#[tokio::test]
async fn gcra_script_admits_the_burst_then_denies_with_retry_after() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.namespace = "rate-test".into();
    let store = RedisStore::connect(config).await?;
    let limiter = RedisRateLimiter::new(&store);
    let a = [subject("addr:192.0.2.1", 3)?];
    for _ in 0..3 {
        assert!(matches!(limiter.check(&a).await?, Verdict::Admitted));
    }
    match limiter.check(&a).await? {
        Verdict::Limited {
            subject,
            retry_after,
        } => {
            assert_eq!(subject.key, "addr:192.0.2.1");
            // One request per 100 s: the next one is due within 100 s, not now.
            assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(100));
        }
        Verdict::Admitted => return Err("the request past the burst was admitted".into()),
    }
    // The key is under the namespace's hash tag and expires (its SET carries PX) when the
    // quota is whole.
    let key = limiter.key("addr:192.0.2.1");
    assert_eq!(key, "{rate-test}:rate:addr:192.0.2.1");
    let mut conn = server.client().await?;
    let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await?;
    assert!(pttl > 0 && pttl <= 300_000, "PTTL {pttl}");
    // A denied request charged nobody: another subject checked with it is still whole.
    let b = subject("owner:b", 3)?;
    let both = [b.clone(), subject("addr:192.0.2.1", 3)?];
    assert!(matches!(
        limiter.check(&both).await?,
        Verdict::Limited { .. }
    ));
    let untouched: Option<String> = redis::cmd("GET")
        .arg(limiter.key("owner:b"))
        .query_async(&mut conn)
        .await?;
    assert_eq!(untouched, None);
    for _ in 0..3 {
        assert!(matches!(
            limiter.check(std::slice::from_ref(&b)).await?,
            Verdict::Admitted
        ));
    }
    Ok(())
}

/// Redis and a gateway named each of `names` with `settings` added, once healthy.
async fn cluster(names: &[&str], settings: &[(&str, &str)]) -> TestResult<Cluster> {
    // The limiter admits when Redis does not answer in time (fail open, by design): on a
    // loaded 2-core machine a 2 s stall once let a request past its quota here. These tests
    // assert the quota, not that fallback, so Redis gets all the time it needs.
    let mut all = vec![("REDIS_TIMEOUT_MS", "60000")];
    all.extend_from_slice(settings);
    let mut builder = Cluster::builder();
    for name in names {
        builder = builder.gateway(name, &all);
    }
    builder.start().await
}

/// `POST /tasks` on `gateway` as `owner`, from `address` (`X-Forwarded-For`).
async fn create(
    client: &reqwest::Client,
    gateway: &Gateway,
    owner: &str,
    address: &str,
) -> TestResult<reqwest::Response> {
    Ok(client
        .post(format!("{}/tasks", gateway.base))
        .header("Task-Access-Token", owner)
        .header("X-Forwarded-For", address)
        .json(&json!({"skillId": "echo", "input": {"text": "hi"}}))
        .send()
        .await?)
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn assert_limited(response: reqwest::Response, policy: &str) -> TestResult {
    assert_eq!(response.status(), 429);
    let retry_after: u64 = header(&response, "retry-after").parse()?;
    assert!(
        (1..=100).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert_eq!(
        header(&response, "ratelimit-policy"),
        format!("\"{policy}\";q=5;w=500")
    );
    assert_eq!(
        header(&response, "ratelimit"),
        format!("\"{policy}\";r=0;t={retry_after}")
    );
    let body: serde_json::Value = response.json().await?;
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    Ok(())
}

#[tokio::test]
async fn two_gateways_share_each_address_quota() -> TestResult {
    let settings = [
        ("RATE_PER_ADDRESS", "0.01"),
        ("RATE_BURST", "5"),
        ("TRUST_FORWARDED_FOR", "true"),
    ];
    let cluster = cluster(&["gateway-a", "gateway-b"], &settings).await?;
    let gateways = &cluster.gateways;
    let client = reqwest::Client::new();
    for i in 0..5 {
        let response = create(&client, &gateways[i % 2], OWNER_A, "203.0.113.7").await?;
        assert_ne!(response.status(), 429, "request {i} within the burst");
    }
    // The sixth, on either gateway: the quota is the same one.
    assert_limited(
        create(&client, &gateways[1], OWNER_A, "203.0.113.7").await?,
        "per-address",
    )
    .await?;
    assert_limited(
        create(&client, &gateways[0], OWNER_B, "203.0.113.7").await?,
        "per-address",
    )
    .await?;
    // Another address has its own quota.
    let other = create(&client, &gateways[1], OWNER_A, "203.0.113.8").await?;
    assert_ne!(other.status(), 429);
    // Reads are never limited.
    let listed = client
        .get(format!("{}/tasks", gateways[0].base))
        .header("Task-Access-Token", OWNER_A)
        .header("X-Forwarded-For", "203.0.113.7")
        .send()
        .await?;
    assert_ne!(listed.status(), 429);
    Ok(())
}

#[tokio::test]
async fn two_gateways_share_each_owner_quota() -> TestResult {
    let settings = [
        ("RATE_PER_OWNER", "0.01"),
        ("RATE_BURST", "5"),
        ("RATE_PER_ADDRESS", "0"),
    ];
    let cluster = cluster(&["gateway-a", "gateway-b"], &settings).await?;
    let gateways = &cluster.gateways;
    let client = reqwest::Client::new();
    for i in 0..5 {
        let response = create(&client, &gateways[i % 2], OWNER_A, "203.0.113.7").await?;
        assert_ne!(response.status(), 429, "request {i} within the burst");
    }
    assert_limited(
        create(&client, &gateways[0], OWNER_A, "203.0.113.7").await?,
        "per-owner",
    )
    .await?;
    let other = create(&client, &gateways[1], OWNER_B, "203.0.113.7").await?;
    assert_ne!(other.status(), 429);
    Ok(())
}

/// A2A JSON-RPC `SendMessage` as `owner` from `address`.
async fn send_message(
    client: &reqwest::Client,
    gateway: &Gateway,
    method: &str,
    address: &str,
) -> TestResult<reqwest::Response> {
    let params = json!({"message": {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "parts": [{"text": "hi"}],
        "metadata": {"skillId": "echo"},
    }});
    Ok(
        jsonrpc_request(client, &gateway.base, Some(OWNER_A), method, params)
            .header("X-Forwarded-For", address)
            .send()
            .await?,
    )
}

#[tokio::test]
async fn a2a_send_message_is_limited_and_other_methods_are_not() -> TestResult {
    let settings = [
        ("RATE_PER_ADDRESS", "0.01"),
        ("RATE_BURST", "5"),
        ("TRUST_FORWARDED_FOR", "true"),
    ];
    let cluster = cluster(&["gateway-a", "gateway-b"], &settings).await?;
    let gateways = &cluster.gateways;
    let client = reqwest::Client::new();
    // Reads (GetTask) never count.
    for i in 0..8 {
        let response = send_message(&client, &gateways[i % 2], "GetTask", "203.0.113.9").await?;
        assert_ne!(response.status(), 429);
    }
    for i in 0..5 {
        let response =
            send_message(&client, &gateways[i % 2], "SendMessage", "203.0.113.9").await?;
        assert_ne!(response.status(), 429, "request {i} within the burst");
    }
    let response = send_message(&client, &gateways[1], "SendMessage", "203.0.113.9").await?;
    assert_eq!(response.status(), 429);
    let retry_after: u64 = header(&response, "retry-after").parse()?;
    assert!((1..=100).contains(&retry_after));
    assert_eq!(
        header(&response, "ratelimit-policy"),
        "\"per-address\";q=5;w=500"
    );
    assert_eq!(
        header(&response, "ratelimit"),
        format!("\"per-address\";r=0;t={retry_after}")
    );
    let body: serde_json::Value = response.json().await?;
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert_eq!(body["error"]["data"][0]["reason"], "RATE_LIMITED", "{body}");
    // The HTTP+JSON binding shares the quota and answers AIP-193's RESOURCE_EXHAUSTED.
    let rest = client
        .post(format!("{}/a2a/v1/message:send", gateways[0].base))
        .header("Authorization", format!("Bearer {OWNER_A}"))
        .header("A2A-Version", "1.0")
        .header("X-Forwarded-For", "203.0.113.9")
        .json(&json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}))
        .send()
        .await?;
    assert_eq!(rest.status(), 429);
    assert!(!header(&rest, "retry-after").is_empty());
    let body: serde_json::Value = rest.json().await?;
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED", "{body}");
    Ok(())
}

/// Anvil #2: a second funded payer.
const OTHER_PAYER_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";

/// A paid `echo` invoke at gateway `gateway`, signed by `key` for that gateway's 402.
async fn paid_invoke(
    cluster: &PaidCluster,
    gateway: usize,
    key: &str,
) -> TestResult<reqwest::Response> {
    let body = json!({"input": {"text": "paid"}});
    let challenge = cluster.x402_challenge(gateway, "echo", &body).await?;
    let payment = LocalPayer::from_hex(key)?.answer(&challenge, None, payments::unix_now())?;
    Ok(cluster
        .http
        .post(format!("{}/entrypoints/echo/invoke", cluster.base(gateway)))
        .header(payment.name, &payment.value)
        .json(&body)
        .send()
        .await?)
}

#[tokio::test]
async fn one_payer_over_its_rate_is_refused_before_anything_settles() -> TestResult {
    let cluster = PaidCluster::start(
        &[("WORKER_PRICES", "echo=0.001".to_owned())],
        &[
            ("RATE_PER_PAYER", "0.01".to_owned()),
            ("RATE_BURST", "2".to_owned()),
        ],
        |card| card["entrypoints"]["echo"]["pricing"]["invoke"].is_string(),
    )
    .await?;
    // The burst, one request at each gateway: both paid and run.
    for gateway in [0, 1] {
        let response = paid_invoke(&cluster, gateway, PAYER_KEY).await?;
        assert_eq!(response.status(), 200, "{}", response.text().await?);
    }
    assert_eq!(cluster.settled().await?, 2);
    // The third, at either gateway: the payer's quota is the cluster's.
    let limited = paid_invoke(&cluster, 0, PAYER_KEY).await?;
    assert_eq!(limited.status(), 429);
    let retry_after: u64 = header(&limited, "retry-after").parse()?;
    assert!(
        (1..=100).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert_eq!(
        header(&limited, "ratelimit-policy"),
        "\"per-payer\";q=2;w=200"
    );
    assert_eq!(
        header(&limited, "ratelimit"),
        format!("\"per-payer\";r=0;t={retry_after}")
    );
    assert!(header(&limited, "payment-response").is_empty());
    let body: serde_json::Value = limited.json().await?;
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    assert_eq!(cluster.settled().await?, 2, "the 429 settled nothing");
    // Another payer still gets paid results, at the same gateways.
    for gateway in [1, 0] {
        let response = paid_invoke(&cluster, gateway, OTHER_PAYER_KEY).await?;
        assert_eq!(response.status(), 200, "{}", response.text().await?);
        let body: serde_json::Value = response.json().await?;
        assert_eq!(body["output"]["text"], "paid", "{body}");
    }
    assert_eq!(cluster.settled().await?, 4);
    Ok(())
}

/// `POST /tasks` through an appending proxy: the client wrote `spoofed`, the proxy appended
/// the address it saw, `client` (nginx's `$proxy_add_x_forwarded_for`, Envoy, cloud load
/// balancers). No worker runs `echo`: what is checked is whether the rate limit answers `429`
/// (before anything else), as in the tests above.
async fn create_through_proxy(
    client: &reqwest::Client,
    gateway: &Gateway,
    spoofed: &str,
    real: &str,
) -> TestResult<reqwest::Response> {
    Ok(client
        .post(format!("{}/tasks", gateway.base))
        .header("X-Forwarded-For", format!("{spoofed}, {real}"))
        .json(&json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "hi"}}}))
        .send()
        .await?)
}

#[tokio::test]
async fn a_spoofed_left_most_hop_gets_no_fresh_quota() -> TestResult {
    // The test client is the trusted proxy (127.0.0.1); the deprecated switch too, so that a
    // gateway without --trusted-proxies reads the header as well (and this test shows it
    // taking the client's own word).
    let settings = [
        ("RATE_PER_ADDRESS", "0.01"),
        ("RATE_BURST", "5"),
        ("TRUSTED_PROXIES", "127.0.0.1/32"),
        ("TRUST_FORWARDED_FOR", "true"),
    ];
    let cluster = cluster(&["gateway-a"], &settings).await?;
    let gateway = &cluster.gateways[0];
    let client = reqwest::Client::new();
    for i in 0..5 {
        let spoofed = format!("203.0.113.{i}");
        let response = create_through_proxy(&client, gateway, &spoofed, "198.51.100.7").await?;
        assert_ne!(response.status(), 429, "request {i} within the burst");
    }
    // A fresh left-most address every time: the quota is still the real client's.
    for i in 5..8 {
        let spoofed = format!("203.0.113.{i}");
        assert_limited(
            create_through_proxy(&client, gateway, &spoofed, "198.51.100.7").await?,
            "per-address",
        )
        .await?;
    }
    // Another real client behind the same proxy has its own quota.
    let other = create_through_proxy(&client, gateway, "203.0.113.1", "198.51.100.8").await?;
    assert_ne!(other.status(), 429);
    Ok(())
}

#[tokio::test]
async fn the_forwarded_header_counts_its_right_most_untrusted_for() -> TestResult {
    let settings = [
        ("RATE_PER_ADDRESS", "0.01"),
        ("RATE_BURST", "5"),
        ("TRUSTED_PROXIES", "127.0.0.1,10.0.0.0/8"),
        ("CLIENT_ADDRESS_HEADER", "forwarded"),
    ];
    let cluster = cluster(&["gateway-a"], &settings).await?;
    let gateway = &cluster.gateways[0];
    let client = reqwest::Client::new();
    let post = |forwarded: String, i: u8| {
        client
            .post(format!("{}/tasks", gateway.base))
            .header("Forwarded", forwarded)
            // Not read with CLIENT_ADDRESS_HEADER=forwarded: a fresh one each time changes
            // nothing.
            .header("X-Forwarded-For", format!("192.0.2.{i}"))
            .json(
                &json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "hi"}}}),
            )
            .send()
    };
    // Two proxies: an inner one (10.1.1.1) behind the outer one that saw the client, an IPv6
    // host picking a new address of its /64 each time.
    for i in 0..5u8 {
        let forwarded = format!(
            "for=203.0.113.{i}, for=\"[2001:db8:1:2::{i}]:4711\";proto=https, for=10.1.1.1"
        );
        let response = post(forwarded, i).await?;
        assert_ne!(response.status(), 429, "request {i} within the burst");
    }
    assert_limited(
        post(
            "for=203.0.113.9, for=\"[2001:db8:1:2::ff]\", for=10.1.1.1".to_owned(),
            9,
        )
        .await?,
        "per-address",
    )
    .await?;
    Ok(())
}
