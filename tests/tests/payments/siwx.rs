//! Sign-In-With-X against real processes: a private redis-server with AOF, the dev
//! `facilitator`, a `worker` hosting `echo` (priced, `--siwx echo`: a payer may sign in
//! instead of paying again) and `summarize` (`--siwx summarize:auth-only`: free, but only for
//! a signed-in caller), and two `gateway`s. Signatures are real (Anvil #0 and #2's keys).
//!
//! What is proven: the card shows `authorization.siwx`; an auth-only entrypoint answers 401
//! `auth_required` with a sign-in offer, runs for a valid signature, and refuses a replayed
//! nonce (at either gateway), another domain's signature and another key's claim; a priced SIWX
//! entrypoint offers sign-in in its 402, refuses a signer who never paid (402), and, once
//! paid, runs for its payer's signature without a second settlement; the Rust client and
//! `taskctl` sign in by themselves.
//!
//! Sign-ins are bound to this server: a message signed for another site is refused whatever
//! `Host` / `X-Forwarded-Host` the request claims (forwarded headers are not trusted unless
//! configured); only nonces this cluster issued pass, once, at any gateway; an entitlement
//! paid on one network is not honoured by a gateway taking payments on another; the issued
//! nonces Redis keeps are bounded.

use std::sync::Arc;

use base64::Engine;
use client::{Client, ClientOptions, InvokeOptions, KeyPayer};
use harness::TestResult;
use harness::paid::{PATIENCE, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use reqwest::StatusCode;
use serde_json::{Value, json};

const PRICES: &str = "echo=0.001";
/// `echo` is priced and takes SIWX (entitlements); `summarize` is free but auth-only.
const SIWX: &str = "echo,summarize:auth-only";
/// Anvil #2: a wallet that never paid.
const OTHER_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";

/// The suite's cluster: the shared paying cluster, plus this suite's requests.
struct Cluster(PaidCluster);

impl std::ops::Deref for Cluster {
    type Target = PaidCluster;

    fn deref(&self) -> &PaidCluster {
        &self.0
    }
}

/// The card lists `echo` with its SIWX policy: the worker registered.
fn ready(card: &Value) -> bool {
    card["entrypoints"]["echo"]["authorization"]["siwx"]["enabled"] == true
}

impl Cluster {
    async fn start() -> TestResult<Cluster> {
        Cluster::start_with(&[]).await
    }

    /// The cluster with `gateway_env` added to both gateways' settings.
    async fn start_with(gateway_env: &[(&str, String)]) -> TestResult<Cluster> {
        Ok(Cluster(
            PaidCluster::start(
                &[
                    ("WORKER_PRICES", PRICES.to_owned()),
                    ("WORKER_SIWX", SIWX.to_owned()),
                ],
                gateway_env,
                ready,
            )
            .await?,
        ))
    }

    async fn invoke(
        &self,
        gateway: usize,
        key: &str,
        sign_in: Option<&str>,
    ) -> TestResult<reqwest::Response> {
        let mut request = self
            .http
            .post(format!("{}/entrypoints/{key}/invoke", self.base(gateway)))
            .json(&json!({"input": {"text": "hello there"}}));
        if let Some(value) = sign_in {
            request = request.header("sign-in-with-x", value);
        }
        Ok(request.send().await?)
    }
}

fn payer() -> TestResult<LocalPayer> {
    Ok(LocalPayer::from_hex(PAYER_KEY)?)
}

/// A 402's sign-in offer (in `PAYMENT-REQUIRED`'s `extensions`).
fn offer_of_402(response: &reqwest::Response) -> TestResult<payments::siwx::SiwxExtension> {
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let header = response
        .headers()
        .get("payment-required")
        .ok_or("no PAYMENT-REQUIRED")?
        .to_str()?;
    let challenge: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header)?)?;
    Ok(serde_json::from_value(
        challenge["extensions"]["sign-in-with-x"].clone(),
    )?)
}

/// A refused sign-in: `401 auth_required` whose message contains `why`, with a fresh offer.
async fn refused_because(response: reqwest::Response, why: &str) -> TestResult {
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "auth_required", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains(why)),
        "{body}"
    );
    assert!(body["extensions"]["sign-in-with-x"]["info"]["nonce"].is_string());
    Ok(())
}

/// Whether the cluster's Redis holds `nonce` as issued and unspent.
async fn issued(cluster: &PaidCluster, nonce: &str) -> TestResult<bool> {
    let mut conn = cluster.redis.client().await?;
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("{tc}:nonces")
        .arg(nonce)
        .query_async(&mut conn)
        .await?;
    Ok(score.is_some())
}

/// A 401's sign-in offer.
async fn offer_of_401(response: reqwest::Response) -> TestResult<payments::siwx::SiwxExtension> {
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "auth_required", "{body}");
    Ok(serde_json::from_value(
        body["extensions"]["sign-in-with-x"].clone(),
    )?)
}

#[tokio::test]
async fn auth_only_runs_for_a_signed_in_caller_once_per_nonce() -> TestResult {
    let cluster = Cluster::start().await?;
    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base(0)))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        card["entrypoints"]["summarize"]["authorization"],
        json!({"siwx": {"enabled": true, "auth_only": true}})
    );
    assert_eq!(
        card["entrypoints"]["echo"]["authorization"],
        json!({"siwx": {"enabled": true, "auth_only": false}})
    );

    let offer = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    let signed = payer()?.sign_in_with_x(&offer)?;
    let ran = cluster.invoke(0, "summarize", Some(&signed)).await?;
    assert_eq!(ran.status(), StatusCode::OK);

    // The same signature again, at either gateway: its nonce is spent.
    for gateway in [0, 1] {
        offer_of_401(cluster.invoke(gateway, "summarize", Some(&signed)).await?).await?;
    }
    // Signed for another domain, or garbage: refused, never a 5xx.
    let mut elsewhere = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    elsewhere.info.domain = "evil.example".into();
    let foreign = payer()?.sign_in_with_x(&elsewhere)?;
    offer_of_401(cluster.invoke(0, "summarize", Some(&foreign)).await?).await?;
    offer_of_401(
        cluster
            .invoke(0, "summarize", Some("!!not base64!!"))
            .await?,
    )
    .await?;
    // A signature by one key claiming another address: refused.
    let fresh = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    let by_other = LocalPayer::from_hex(OTHER_KEY)?.sign_in_with_x(&fresh)?;
    let mut claim: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(&by_other)?)?;
    claim["address"] = json!(payer()?.address().to_checksum(None));
    let impostor = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&claim)?);
    offer_of_401(cluster.invoke(0, "summarize", Some(&impostor)).await?).await?;
    // Nothing of the headers reached a log.
    let logs = cluster.logs();
    assert!(!logs.contains(&signed[signed.len().saturating_sub(24)..]));
    Ok(())
}

#[tokio::test]
async fn a_payer_signs_in_instead_of_paying_twice() -> TestResult {
    let cluster = Cluster::start().await?;
    // The 402 of a priced SIWX entrypoint offers sign-in beside the payment.
    let unpaid = cluster.invoke(0, "echo", None).await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let header = unpaid.headers()["payment-required"].to_str()?;
    let challenge: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header)?)?;
    let offer: payments::siwx::SiwxExtension =
        serde_json::from_value(challenge["extensions"]["sign-in-with-x"].clone())?;
    // A signer who never paid is told to pay.
    let stranger = LocalPayer::from_hex(OTHER_KEY)?.sign_in_with_x(&offer)?;
    assert_eq!(
        cluster.invoke(0, "echo", Some(&stranger)).await?.status(),
        StatusCode::PAYMENT_REQUIRED
    );

    // The Rust client pays once (its sign-in is refused first: not entitled yet)...
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base(0)).await?;
    let options = InvokeOptions {
        payer: Some(Arc::new(KeyPayer::new(payer()?, None))),
        ..InvokeOptions::default()
    };
    let first = client
        .invoke(&card, "echo", &json!({"n": 1}), &options)
        .await?;
    assert_eq!(first.output, json!({"n": 1}));
    assert_eq!(cluster.settled().await?, 1);
    // ...then signs in at the other gateway and runs without paying again.
    let card = client.fetch_card(cluster.base(1)).await?;
    let second = client
        .invoke(&card, "echo", &json!({"n": 2}), &options)
        .await?;
    assert_eq!(second.output, json!({"n": 2}));
    assert!(second.settlement.is_empty());
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test]
async fn taskctl_signs_in_for_an_auth_only_entrypoint() -> TestResult {
    let cluster = Cluster::start().await?;
    let taskctl = harness::process::binary("taskctl")?;
    let output = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(taskctl)
            .args([
                "invoke",
                cluster.base(0),
                "summarize",
                r#"{"text":"sign me in"}"#,
                "--json",
            ])
            .env("TASKCTL_PAY_KEY", PAYER_KEY)
            .output(),
    )
    .await??;
    let stdout = String::from_utf8(output.stdout)?;
    assert!(
        output.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(cluster.settled().await?, 0);
    Ok(())
}

/// `POST /tasks` goes through the same sign-in: an auth-only skill without a signature is
/// 401, with one it is a task like any free one.
#[tokio::test]
async fn a_task_of_an_auth_only_skill_needs_a_signature() -> TestResult {
    let cluster = Cluster::start().await?;
    let send = |sign_in: Option<String>| {
        let mut request = cluster
            .http
            .post(format!("{}/tasks", cluster.base(0)))
            .json(&json!({
                "skillId": "summarize",
                "message": {"role": "user", "content": {"text": r#"{"text":"a task"}"#}},
            }));
        if let Some(value) = sign_in {
            request = request.header("sign-in-with-x", value);
        }
        request.send()
    };
    let offer = offer_of_401(send(None).await?).await?;
    let created = send(Some(payer()?.sign_in_with_x(&offer)?)).await?;
    let status = created.status();
    let body: Value = created.json().await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["taskId"].is_string() && body["accessToken"].is_string(),
        "{body}"
    );
    Ok(())
}

/// A SIWE message signed for another site, sent with that site's `Host` and
/// `X-Forwarded-Host` (a malicious agent relaying a signature it got elsewhere): the gateway
/// binds sign-ins to its own origin (here its listen address: no `PUBLIC_URL`, forwarded
/// headers not trusted), so it is refused whatever the request's headers claim.
#[tokio::test]
async fn a_signature_for_another_domain_is_refused_whatever_the_host_headers_claim() -> TestResult {
    let cluster = Cluster::start().await?;
    let offer = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    // The offer names the gateway's own origin.
    assert_eq!(offer.info.uri, cluster.base(0));
    assert_eq!(format!("http://{}", offer.info.domain), cluster.base(0));

    let mut elsewhere = offer.clone();
    elsewhere.info.domain = "evil.example".into();
    elsewhere.info.uri = "https://evil.example".into();
    elsewhere.info.resources = Some(vec!["https://evil.example".into()]);
    let foreign = payer()?.sign_in_with_x(&elsewhere)?;
    let relayed = cluster
        .http
        .post(format!("{}/entrypoints/summarize/invoke", cluster.base(0)))
        .header("host", "evil.example")
        .header("x-forwarded-host", "evil.example")
        .header("x-forwarded-proto", "https")
        .header("sign-in-with-x", &foreign)
        .json(&json!({"input": {"text": "hello there"}}))
        .send()
        .await?;
    refused_because(relayed, "domain").await?;
    // The refusal spent nothing: the nonce, signed for this gateway, still signs in.
    let signed = payer()?.sign_in_with_x(&offer)?;
    assert_eq!(
        cluster
            .invoke(0, "summarize", Some(&signed))
            .await?
            .status(),
        StatusCode::OK
    );
    Ok(())
}

/// A well-formed, correctly signed message whose nonce this cluster never issued is refused;
/// the nonce of a real offer is recorded in Redis until it is spent.
#[tokio::test]
async fn a_nonce_never_issued_is_refused() -> TestResult {
    let cluster = Cluster::start().await?;
    let offer = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    assert!(issued(&cluster, &offer.info.nonce).await?);

    let mut made_up = offer.clone();
    made_up.info.nonce = "0123456789abcdef0123456789abcdef".into();
    let signed = payer()?.sign_in_with_x(&made_up)?;
    refused_because(
        cluster.invoke(0, "summarize", Some(&signed)).await?,
        "nonce",
    )
    .await?;
    refused_because(
        cluster.invoke(1, "summarize", Some(&signed)).await?,
        "domain",
    )
    .await?;
    // The same on a priced SIWX entrypoint: refused (401), not waved on to the payment.
    let priced = cluster.invoke(0, "echo", None).await?;
    let mut made_up = offer_of_402(&priced)?;
    assert!(issued(&cluster, &made_up.info.nonce).await?);
    made_up.info.nonce = "fedcba9876543210fedcba9876543210".into();
    let signed = payer()?.sign_in_with_x(&made_up)?;
    refused_because(cluster.invoke(0, "echo", Some(&signed)).await?, "nonce").await?;

    let real = payer()?.sign_in_with_x(&offer)?;
    assert_eq!(
        cluster.invoke(0, "summarize", Some(&real)).await?.status(),
        StatusCode::OK
    );
    assert!(!issued(&cluster, &offer.info.nonce).await?);
    Ok(())
}

/// Behind one public name (both gateways started with the same `PUBLIC_URL`), a nonce one
/// gateway issued signs in at the other, once: the cluster spends it atomically.
#[tokio::test]
async fn an_issued_nonce_signs_in_once_at_any_gateway() -> TestResult {
    let cluster =
        Cluster::start_with(&[("PUBLIC_URL", "https://agents.example.test/".to_owned())]).await?;
    let offer = offer_of_401(cluster.invoke(0, "summarize", None).await?).await?;
    assert_eq!(offer.info.domain, "agents.example.test");
    assert_eq!(offer.info.uri, "https://agents.example.test");

    let signed = payer()?.sign_in_with_x(&offer)?;
    assert_eq!(
        cluster
            .invoke(1, "summarize", Some(&signed))
            .await?
            .status(),
        StatusCode::OK
    );
    for gateway in [0, 1] {
        refused_because(
            cluster.invoke(gateway, "summarize", Some(&signed)).await?,
            "nonce",
        )
        .await?;
    }
    Ok(())
}

/// An entitlement is bound to the network, asset and payee it was paid with: a payer entitled
/// on Base Sepolia signs in for free at a gateway on the same terms, and is asked to pay at a
/// gateway taking payments on Base.
#[tokio::test]
async fn an_entitlement_paid_on_one_network_is_not_honoured_on_another() -> TestResult {
    let mut cluster = Cluster::start().await?;
    let on_base = cluster
        .0
        .add_gateway("g-base", &[("PAYMENT_NETWORK", "base".to_owned())], ready)
        .await?;

    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base(0)).await?;
    let options = InvokeOptions {
        payer: Some(Arc::new(KeyPayer::new(payer()?, None))),
        ..InvokeOptions::default()
    };
    let paid = client
        .invoke(&card, "echo", &json!({"n": 1}), &options)
        .await?;
    assert_eq!(paid.output, json!({"n": 1}));
    assert_eq!(cluster.settled().await?, 1);

    // Same network, asset and payee: the signed-in payer runs without paying.
    let offer = offer_of_402(&cluster.invoke(1, "echo", None).await?)?;
    let signed = payer()?.sign_in_with_x(&offer)?;
    assert_eq!(
        cluster.invoke(1, "echo", Some(&signed)).await?.status(),
        StatusCode::OK
    );
    // Another network: the signature is good, the entitlement is not there.
    let offer = offer_of_402(&cluster.invoke(on_base, "echo", None).await?)?;
    assert_eq!(offer.supported_chains[0].chain_id, "eip155:8453");
    let signed = payer()?.sign_in_with_x(&offer)?;
    let unpaid = cluster.invoke(on_base, "echo", Some(&signed)).await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

/// What unauthenticated callers make Redis keep is bounded: one sorted set of issued nonces,
/// trimmed of expired ones and capped (oldest dropped) on every issue; a nonce passes once,
/// never when it was not issued, expired or dropped.
#[tokio::test]
async fn issued_nonces_are_bounded_and_spent_once_in_redis() -> TestResult {
    use std::time::Duration;
    use store::credentials::CredentialLedger;
    use store::{RedisStore, RedisStoreConfig};

    let redis = harness::redis_server::RedisServer::start()?;
    let store = RedisStore::connect(RedisStoreConfig::new(redis.url())).await?;
    let ledger = store.credentials().with_nonce_cap(3);
    let offer = Duration::from_secs(300);
    let mut conn = redis.client().await?;
    let key = ledger.nonces_key().to_owned();
    assert_eq!(key, "{tc}:nonces");
    let mut zcard = redis::cmd("ZCARD");
    zcard.arg(&key);

    assert!(!ledger.take_nonce("never-issued-0001").await?);
    for n in 0..5 {
        ledger
            .issue_nonce(&format!("capped-nonce-{n}"), offer)
            .await?;
    }
    assert_eq!(zcard.query_async::<u64>(&mut conn).await?, 3);
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await?;
    assert!(ttl > 0, "the set expires with its last nonce: {ttl}");
    for n in 0..2 {
        assert!(
            !ledger.take_nonce(&format!("capped-nonce-{n}")).await?,
            "{n}"
        );
    }
    for n in 2..5 {
        assert!(
            ledger.take_nonce(&format!("capped-nonce-{n}")).await?,
            "{n}"
        );
        assert!(
            !ledger.take_nonce(&format!("capped-nonce-{n}")).await?,
            "{n}"
        );
    }
    // Expired nonces (valid for no time at all) pass never, and leave on the next issue.
    ledger
        .issue_nonce("expired-nonce-01", Duration::ZERO)
        .await?;
    assert!(!ledger.take_nonce("expired-nonce-01").await?);
    for n in 0..2 {
        ledger
            .issue_nonce(&format!("short-nonce-{n}"), Duration::ZERO)
            .await?;
    }
    ledger.issue_nonce("long-nonce-0001", offer).await?;
    assert_eq!(zcard.query_async::<u64>(&mut conn).await?, 1);
    Ok(())
}
