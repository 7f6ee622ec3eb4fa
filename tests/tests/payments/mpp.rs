//! MPP (the "Payment" HTTP authentication scheme) against real processes: a private
//! redis-server with AOF, the dev `facilitator`, a `worker` pricing `echo` and `sleep` with
//! `:mpp`, and two `gateway`s sharing one MPP secret. Credentials are signed for real with
//! Anvil #0's key by the `payments` crate's paying side, as an `mppx`-style client would.
//!
//! What is proven: the challenge (headers, problem body, the card) reserves nothing; a
//! challenge issued by one gateway is paid at the other (stateless HMAC ids); one credential
//! buys one execution and one settlement, also when 50 identical requests race over two
//! gateways; a replayed challenge is `invalid-challenge`; the receipt comes in
//! `Payment-Receipt` with `Cache-Control: private`; hostile `Authorization` headers are 402s,
//! never 5xx, and never reach the logs; the Rust client pays MPP by itself; a credential made
//! for one entrypoint's challenge does not pay another of the same price (the challenge's
//! `opaque` names the route and entrypoint, under its HMAC).

use std::sync::Arc;

use base64::Engine;
use client::{Client, ClientOptions, InvokeOptions, KeyPayer};
use harness::TestResult;
use harness::paid::{PATIENCE, PAYEE, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `count` costs what `echo` costs: a credential for one must still not pay the other.
const PRICES: &str = "echo=0.001:mpp,sleep=0.002:mpp,summarize=0.001,count=0.001:mpp";
const SECRET: &str = "an-mpp-secret-of-at-least-32-bytes-for-the-tests";
const PROBLEMS: &str = "https://paymentauth.org/problems/";

/// The suite's cluster: the shared paying cluster, plus this suite's requests.
struct Cluster(PaidCluster);

impl std::ops::Deref for Cluster {
    type Target = PaidCluster;

    fn deref(&self) -> &PaidCluster {
        &self.0
    }
}

impl Cluster {
    async fn start() -> TestResult<Cluster> {
        let ready = |card: &Value| card["entrypoints"]["echo"]["payment_protocol"] == "mpp";
        Ok(Cluster(
            PaidCluster::start(
                &[("WORKER_PRICES", PRICES.to_owned())],
                &[
                    ("MPP_SECRET", SECRET.to_owned()),
                    // Both gateways name the same protection space, as behind one host: the
                    // host both listen on, without a port (a paying client checks that the
                    // realm names the host it requested).
                    ("MPP_REALM", "127.0.0.1".to_owned()),
                ],
                ready,
            )
            .await?,
        ))
    }

    async fn invoke(
        &self,
        gateway: usize,
        key: &str,
        authorization: Option<&str>,
    ) -> TestResult<reqwest::Response> {
        let mut request = self
            .http
            .post(format!("{}/entrypoints/{key}/invoke", self.base(gateway)))
            .json(&json!({"input": {"ms": 1, "text": "hi"}}));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        Ok(request.send().await?)
    }

    /// The `WWW-Authenticate` of an unpaid invoke of `key` at `gateway`.
    async fn challenge(&self, gateway: usize, key: &str) -> TestResult<String> {
        let response = self.invoke(gateway, key, None).await?;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        Ok(response
            .headers()
            .get("www-authenticate")
            .ok_or("no WWW-Authenticate")?
            .to_str()?
            .to_owned())
    }
}

fn payer() -> TestResult<LocalPayer> {
    Ok(LocalPayer::from_hex(PAYER_KEY)?)
}

fn pay(www_authenticate: &str) -> TestResult<String> {
    Ok(payer()?
        .answer_mpp(www_authenticate, None, payments::unix_now())?
        .authorization)
}

/// `name="value"` of a `WWW-Authenticate: Payment …` value.
fn param<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    let start = header.find(&format!("{name}=\""))? + name.len() + 2;
    let end = header[start..].find('"')?;
    Some(&header[start..start + end])
}

async fn problem(response: reqwest::Response) -> TestResult<(StatusCode, Value)> {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: Value = response.json().await?;
    assert!(
        content_type.starts_with("application/problem+json"),
        "{content_type}"
    );
    Ok((status, body))
}

#[tokio::test]
async fn the_challenge_is_a_payment_auth_offer_that_reserves_nothing() -> TestResult {
    let cluster = Cluster::start().await?;
    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base(0)))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(card["entrypoints"]["echo"]["payment_protocol"], "mpp");
    assert_eq!(card["entrypoints"]["summarize"]["payment_protocol"], "x402");
    assert_eq!(card["entrypoints"]["echo"]["pricing"]["invoke"], "0.001");

    let response = cluster.invoke(0, "echo", None).await?;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let header = response.headers()["www-authenticate"].to_str()?.to_owned();
    assert!(header.starts_with("Payment "), "{header}");
    assert_eq!(param(&header, "realm"), Some("127.0.0.1"));
    assert_eq!(param(&header, "method"), Some("evm"));
    assert_eq!(param(&header, "intent"), Some("charge"));
    assert!(param(&header, "expires").is_some() && param(&header, "opaque").is_some());
    let request = param(&header, "request").ok_or("no request")?;
    let terms: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(request)?)?;
    assert_eq!(terms["amount"], "1000");
    assert_eq!(
        terms["recipient"].as_str().map(str::to_lowercase),
        Some(PAYEE.to_lowercase())
    );
    let (status, body) = problem(response).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(body["type"], format!("{PROBLEMS}payment-required"));
    assert_eq!(body["challengeId"].as_str(), param(&header, "id"));

    // Two challenges are two ids; neither reserved a task or a credential record.
    let again = cluster.challenge(0, "echo").await?;
    assert_ne!(param(&again, "id"), param(&header, "id"));
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);
    assert_eq!(cluster.count("{tc}:cred:*").await?, 0);
    assert_eq!(cluster.settled().await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_challenge_from_one_gateway_is_paid_at_the_other_once() -> TestResult {
    let cluster = Cluster::start().await?;
    let challenge = cluster.challenge(0, "echo").await?;
    let authorization = pay(&challenge)?;

    let response = cluster.invoke(1, "echo", Some(&authorization)).await?;
    let status = response.status();
    let headers = response.headers().clone();
    let body: Value = response.json().await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], json!({"ms": 1, "text": "hi"}));
    assert_eq!(headers["cache-control"], "private");
    let receipt = headers["payment-receipt"].to_str()?;
    let receipt = payments::mpp::Receipt::decode(receipt)?;
    assert_eq!(receipt.status, "success");
    assert_eq!(receipt.method, "evm");
    assert_eq!(receipt.challenge_id.as_deref(), param(&challenge, "id"));
    assert_eq!(cluster.settled().await?, 1);

    // The same credential again, at either gateway: the challenge id is spent.
    for gateway in [0, 1] {
        let (status, body) = problem(
            cluster
                .invoke(gateway, "echo", Some(&authorization))
                .await?,
        )
        .await?;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(
            body["type"],
            format!("{PROBLEMS}invalid-challenge"),
            "{body}"
        );
    }
    assert_eq!(cluster.settled().await?, 1);
    // Nothing of the credential reached a log.
    let signature_tail = &authorization[authorization.len().saturating_sub(24)..];
    assert!(!cluster.logs().contains(signature_tail));
    Ok(())
}

#[tokio::test]
async fn fifty_identical_credentials_over_two_gateways_run_and_settle_once() -> TestResult {
    let cluster = Arc::new(Cluster::start().await?);
    let authorization = Arc::new(pay(&cluster.challenge(0, "echo").await?)?);
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..50 {
        let cluster = cluster.clone();
        let authorization = authorization.clone();
        racers.spawn(async move {
            cluster
                .invoke(i % 2, "echo", Some(&authorization))
                .await
                .map(|response| response.status().as_u16())
                .map_err(|err| err.to_string())
        });
    }
    let mut statuses = Vec::new();
    while let Some(joined) = racers.join_next().await {
        statuses.push(joined??);
    }
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(ok, 1, "{statuses:?}");
    assert!(
        // 429: more of this payer's credentials pending at one gateway than it allows.
        statuses.iter().all(|s| matches!(s, 200 | 402 | 409 | 429)),
        "{statuses:?}"
    );
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test]
async fn hostile_authorization_headers_are_402_never_5xx_and_never_logged() -> TestResult {
    let cluster = Cluster::start().await?;
    let challenge = cluster.challenge(0, "echo").await?;
    let good = pay(&challenge)?;
    let b64 = |value: &Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(value).unwrap_or_default())
    };
    let decoded: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(good.trim_start_matches("Payment ").trim())?,
    )?;
    let mut wrong_realm = decoded.clone();
    wrong_realm["challenge"]["realm"] = json!("evil.example");
    let mut injected = decoded.clone();
    injected["challenge"]["realm"] = json!("x\"\r\nSet-Cookie: a=b");
    let hostile = vec![
        ("garbage", "Payment !!!not-base64!!!".to_owned()),
        ("empty", "Payment ".to_owned()),
        (
            "not json",
            format!(
                "Payment {}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"{nope")
            ),
        ),
        (
            "wrong types",
            format!("Payment {}", b64(&json!({"challenge": 7, "payload": []}))),
        ),
        ("overlong", format!("Payment {}", "A".repeat(20_000))),
        ("wrong realm", format!("Payment {}", b64(&wrong_realm))),
        ("header injection", format!("Payment {}", b64(&injected))),
    ];
    for (what, value) in &hostile {
        let response = cluster.invoke(0, "echo", Some(value)).await?;
        let status = response.status();
        assert!(status.is_client_error(), "{what}: {status}");
        if status == StatusCode::PAYMENT_REQUIRED {
            let header = response.headers()["www-authenticate"].to_str()?.to_owned();
            assert!(
                !header.contains('\n') && !header.contains("Set-Cookie"),
                "{what}: {header}"
            );
            let (_, body) = problem(response).await?;
            assert!(
                body["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(PROBLEMS)),
                "{what}: {body}"
            );
        }
    }
    // A credential for echo sent to sleep (another price): not this route's challenge.
    let (status, body) = problem(cluster.invoke(0, "sleep", Some(&good)).await?).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        body["type"],
        format!("{PROBLEMS}invalid-challenge"),
        "{body}"
    );
    // None of it settled, reserved or reached a log.
    assert_eq!(cluster.settled().await?, 0);
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);
    let logs = cluster.logs();
    assert!(!logs.contains(&good[good.len().saturating_sub(24)..]));
    assert!(!logs.contains("not-base64") && !logs.contains(SECRET));
    Ok(())
}

#[tokio::test]
async fn the_rust_client_pays_mpp_by_itself() -> TestResult {
    let cluster = Cluster::start().await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base(1)).await?;
    let payer = KeyPayer::new(payer()?, None);
    let options = InvokeOptions {
        payer: Some(Arc::new(payer)),
        ..InvokeOptions::default()
    };
    let result = client
        .invoke(&card, "echo", &json!({"n": 3}), &options)
        .await?;
    assert_eq!(result.output, json!({"n": 3}));
    let receipt = result
        .settlement
        .payment_receipt
        .as_deref()
        .ok_or("no Payment-Receipt")?;
    let receipt = payments::mpp::Receipt::decode(receipt)?;
    assert_eq!(receipt.status, "success");
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test]
async fn taskctl_pays_mpp_from_its_key() -> TestResult {
    let cluster = Cluster::start().await?;
    let taskctl = harness::process::binary("taskctl")?;
    let output = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(taskctl)
            .args(["invoke", cluster.base(0), "echo", r#"{"k":1}"#, "--json"])
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
    let result: Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(result["output"], json!({"k": 1}), "{result}");
    assert_eq!(cluster.settled().await?, 1);
    assert!(!stdout.contains(PAYER_KEY.trim_start_matches("0x")));
    Ok(())
}

/// A paid task by MPP: the unpaid `POST /tasks` is a challenge that reserves nothing, the paid
/// one answers with the task and its `Payment-Receipt`, and `GET /tasks/{id}` hands the same
/// receipt to the owner again.
#[tokio::test]
async fn a_task_paid_by_mpp_keeps_its_receipt() -> TestResult {
    let cluster = Cluster::start().await?;
    let token = "mpp-task-owner-0123456789abcdef";
    let send = |authorization: Option<String>| {
        let mut request = cluster
            .http
            .post(format!("{}/tasks", cluster.base(0)))
            .header("Task-Access-Token", token)
            .json(&json!({
                "skillId": "echo",
                "message": {"role": "user", "content": {"text": "{\"t\":1}"}},
            }));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send()
    };
    let unpaid = send(None).await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let challenge = unpaid.headers()["www-authenticate"].to_str()?.to_owned();
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);

    let paid = send(Some(pay(&challenge)?)).await?;
    let status = paid.status();
    let receipt = paid
        .headers()
        .get("payment-receipt")
        .map(|value| value.to_str().map(str::to_owned))
        .transpose()?;
    let body: Value = paid.json().await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let receipt = receipt.ok_or("no Payment-Receipt")?;
    let task_id = body["taskId"].as_str().ok_or("no taskId")?;
    assert_eq!(cluster.settled().await?, 1);

    let again = cluster
        .http
        .get(format!("{}/tasks/{task_id}", cluster.base(1)))
        .header("Task-Access-Token", token)
        .send()
        .await?;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["payment-receipt"].to_str()?, receipt);
    assert_eq!(again.headers()["cache-control"], "private");
    Ok(())
}

/// A credential for a challenge past its `expires` is `payment-expired`, even with a valid
/// HMAC (the test knows the cluster's secret, so it can re-date a challenge as a gateway
/// would have issued it earlier), and nothing is settled.
#[tokio::test]
async fn an_expired_challenge_is_payment_expired() -> TestResult {
    let cluster = Cluster::start().await?;
    let issued = cluster.challenge(0, "echo").await?;
    let mut challenge = payments::mpp::challenge::parse_www_authenticate(&issued)?
        .into_iter()
        .next()
        .ok_or("no Payment challenge")??;
    let an_hour_ago = payments::unix_now() - 3600;
    challenge.expires = Some(
        chrono::DateTime::from_timestamp(i64::try_from(an_hour_ago)?, 0)
            .ok_or("bad time")?
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    let secret = payments::mpp::ChallengeSecret::new(SECRET.as_bytes().to_vec())?;
    challenge.id = challenge.compute_id(&secret)?;
    // Paid as a client would have paid it when it was fresh.
    let authorization = payer()?
        .answer_mpp(&challenge.to_header()?, None, an_hour_ago - 60)?
        .authorization;
    let (status, body) = problem(cluster.invoke(1, "echo", Some(&authorization)).await?).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(body["type"], format!("{PROBLEMS}payment-expired"), "{body}");
    assert_eq!(cluster.settled().await?, 0);
    Ok(())
}

/// The challenge's `opaque` names the route's path and the entrypoint (beside its nonce), and
/// the HMAC of the id covers it, so the EIP-3009 nonce the payer signs does too: a credential
/// made for `echo`'s challenge is `invalid-challenge` on `count`, which costs the same, over
/// invoke and over `POST /tasks`, and is still good for `echo`.
#[tokio::test]
async fn a_credential_for_one_entrypoint_does_not_pay_another_at_the_same_price() -> TestResult {
    let cluster = Cluster::start().await?;
    let challenge = cluster.challenge(0, "echo").await?;
    let opaque = param(&challenge, "opaque").ok_or("no opaque")?;
    let opaque: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(opaque)?)?;
    assert_eq!(opaque["route"], "/entrypoints/echo/invoke", "{opaque}");
    assert_eq!(opaque["entrypoint"], "echo", "{opaque}");
    let for_echo = pay(&challenge)?;

    let on_count = cluster
        .http
        .post(format!("{}/entrypoints/count/invoke", cluster.base(1)))
        .header("authorization", &for_echo)
        .json(&json!({"input": {"n": 1}}))
        .send()
        .await?;
    let (status, body) = problem(on_count).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        body["type"],
        format!("{PROBLEMS}invalid-challenge"),
        "{body}"
    );
    assert_eq!(cluster.settled().await?, 0);

    // A task's challenge names the skill too (the route, /tasks, is every skill's).
    let token = "mpp-bound-task-owner-0123456789";
    let task = |skill: &str, authorization: Option<&str>| {
        let mut request = cluster
            .http
            .post(format!("{}/tasks", cluster.base(0)))
            .header("Task-Access-Token", token)
            .json(&json!({
                "skillId": skill,
                "message": {"role": "user", "content": {"text": "{\"n\":1}"}},
            }));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send()
    };
    let unpaid = task("echo", None).await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let task_challenge = unpaid.headers()["www-authenticate"].to_str()?.to_owned();
    let for_echo_task = pay(&task_challenge)?;
    let (status, body) = problem(task("count", Some(&for_echo_task)).await?).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        body["type"],
        format!("{PROBLEMS}invalid-challenge"),
        "{body}"
    );
    // Nor does an invoke's credential pay a task of the same entrypoint.
    let (status, _) = problem(task("echo", Some(&for_echo)).await?).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(cluster.settled().await?, 0);
    assert_eq!(cluster.count("{tc}:task:*").await?, 0);

    // The refusals spent nothing: the credential pays what it was made for.
    let response = cluster.invoke(0, "echo", Some(&for_echo)).await?;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}
