//! The x402 paid flows against real processes: a private redis-server, the dev `facilitator`
//! (in-memory play-money ledger funding the Anvil accounts), `worker`s pricing the built-ins and
//! `gateway`s taking payments. Each test pays with Anvil #0's key through the `payments` crate's
//! client, exactly as a paying program would: send unpaid, read the 402, sign, send again.
//!
//! What is proven: the challenge (both x402 versions) reserves nothing; one credential buys one
//! execution and one settlement across gateways; receipts reach the payer (and again through
//! `GET /tasks/{id}`); hostile headers are 402s that are never logged; facilitator faults
//! release the credential only while no funds can have moved; capacity is checked before the
//! facilitator is asked; a gateway dying mid-admission loses no paid task once the receipt is
//! stored (and, between settle and receipt, loses the receipt but never reuses the credential).

use base64::Engine;
use harness::TestResult;
use harness::cluster::{POLL, free_port};
use harness::paid::{
    Facilitator, FacilitatorStats, PATIENCE, PAYEE, PAYER, PAYER_KEY, PaidGateway, http,
};
use harness::process::ServiceProcess;
use harness::redis_server::{RedisOptions, RedisServer};
use payments::payer::{Challenge, PaymentHeader};
use payments::{Address, LocalPayer, X402Version};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

/// Every built-in but `fail` is priced: `fail` shows that free routes stay free.
const PRICES: &str = "echo=0.001,count=0.002,sleep=0.001,summarize=0.001";
/// `echo` and `sleep` cost 0.001 USDC, in atomic units (6 decimals).
const ECHO_PRICE: u128 = 1_000;
const COUNT_PRICE: u128 = 2_000;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123";
const OTHER_TOKEN: &str = "fedcba9876543210fedcba9876543210fedc";

const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
/// Gateways behind one public name: their x402 resource URLs are the same, so a credential
/// made at one is presented at the other (the races across gateways).
const SHARED_PUBLIC_URL: (&str, &str) = ("PUBLIC_URL", "http://agents.example.test");

fn shared_public_url() -> (&'static str, String) {
    (SHARED_PUBLIC_URL.0, SHARED_PUBLIC_URL.1.to_owned())
}
const CREDENTIAL_REQUIRED: &str = "X-PAYMENT header is required";

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

/// A distinct task-access token per owner (20..256 characters).
fn token(tag: &str) -> String {
    format!("{tag}-0123456789abcdef0123456789")
}

fn worker(redis: &RedisServer, id: &str, extra: &[(&str, String)]) -> TestResult<ServiceProcess> {
    let mut envs = vec![
        ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
        ("WORKER_PRICES", PRICES.to_owned()),
    ];
    envs.extend(extra.iter().cloned());
    harness::cluster::worker(redis, id, &envs)
}

/// Waits until `gateway`'s card lists `skill` (its worker registered, with its price).
async fn wait_for_skill(gateway: &PaidGateway, skill: &str) -> TestResult {
    harness::cluster::wait_for_skill(&gateway.process, &gateway.base, skill).await
}

/// One Redis, one facilitator, one worker, one paying gateway. Fields drop in order: the
/// gateway goes first, Redis last.
struct Cluster {
    gateway: PaidGateway,
    facilitator: Facilitator,
    _worker: ServiceProcess,
    redis: RedisServer,
    client: reqwest::Client,
}

impl Cluster {
    /// On a Redis that fsyncs its AOF: paid tasks need a durable store.
    async fn start(gateway_env: &[(&str, String)]) -> TestResult<Cluster> {
        Cluster::start_on(RedisOptions::default().with_aof(true), gateway_env).await
    }

    async fn start_on(redis: RedisOptions, gateway_env: &[(&str, String)]) -> TestResult<Cluster> {
        Cluster::start_with(redis, gateway_env, &[]).await
    }

    /// [`Cluster::start_on`] with `worker_env` added to the worker's settings.
    async fn start_with(
        redis: RedisOptions,
        gateway_env: &[(&str, String)],
        worker_env: &[(&str, String)],
    ) -> TestResult<Cluster> {
        let redis = RedisServer::start_with(redis)?;
        let facilitator = Facilitator::start().await?;
        let worker = worker(&redis, "w1", worker_env)?;
        let gateway =
            PaidGateway::start("g1", &redis.url(), &facilitator.base, gateway_env).await?;
        wait_for_skill(&gateway, "echo").await?;
        Ok(Cluster {
            gateway,
            facilitator,
            _worker: worker,
            redis,
            client: http()?,
        })
    }

    /// Another paying gateway on the same Redis and facilitator.
    async fn another_gateway(
        &self,
        name: &str,
        extra: &[(&str, String)],
    ) -> TestResult<PaidGateway> {
        PaidGateway::start(name, &self.redis.url(), &self.facilitator.base, extra).await
    }

    fn invoke(&self, entrypoint: &str, input: Value) -> Ask {
        Ask::invoke(&self.gateway.base, entrypoint, input)
    }

    fn task(&self, skill: &str, input: &Value, token: &str) -> Ask {
        Ask::task(&self.gateway.base, skill, input, token)
    }

    async fn keys(&self, pattern: &str) -> TestResult<Vec<String>> {
        let mut conn = self.redis.client().await?;
        Ok(redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await?)
    }

    /// Non-terminal tasks, as the capacity bound counts them.
    async fn live_tasks(&self) -> TestResult<u64> {
        let mut conn = self.redis.client().await?;
        Ok(redis::cmd("SCARD")
            .arg("{tc}:live")
            .query_async(&mut conn)
            .await?)
    }
}

/// One priced request the suite sends: where, what, as which task owner.
#[derive(Debug, Clone)]
struct Ask {
    url: String,
    body: Value,
    token: Option<String>,
}

impl Ask {
    fn invoke(base: &str, entrypoint: &str, input: Value) -> Ask {
        Ask {
            url: format!("{base}/entrypoints/{entrypoint}/invoke"),
            body: json!({ "input": input }),
            token: None,
        }
    }

    fn stream(base: &str, entrypoint: &str, input: Value) -> Ask {
        Ask {
            url: format!("{base}/entrypoints/{entrypoint}/stream"),
            body: json!({ "input": input }),
            token: None,
        }
    }

    fn task(base: &str, skill: &str, input: &Value, token: &str) -> Ask {
        Ask {
            url: format!("{base}/tasks"),
            body: json!({
                "skillId": skill,
                "message": {"role": "user", "content": {"text": input.to_string()}},
            }),
            token: Some(token.to_owned()),
        }
    }

    /// The same request on another gateway.
    fn on(&self, from: &str, to: &str) -> Ask {
        Ask {
            url: self.url.replacen(from, to, 1),
            ..self.clone()
        }
    }

    fn request(&self, client: &reqwest::Client) -> reqwest::RequestBuilder {
        let mut request = client.post(&self.url).json(&self.body);
        if let Some(token) = &self.token {
            request = request.header("Task-Access-Token", token);
        }
        request
    }

    async fn send(
        &self,
        client: &reqwest::Client,
        payment: Option<&PaymentHeader>,
    ) -> TestResult<Answer> {
        let mut request = self.request(client);
        if let Some(payment) = payment {
            request = request.header(payment.name, &payment.value);
        }
        Answer::read(request.send().await?).await
    }

    /// Sends the request unpaid, expects the 402, and answers its challenge as a payer of
    /// `version` would (v2 from the `PAYMENT-REQUIRED` header, v1 from the body).
    async fn pay(
        &self,
        client: &reqwest::Client,
        version: X402Version,
    ) -> TestResult<PaymentHeader> {
        let unpaid = self.send(client, None).await?;
        if unpaid.status != StatusCode::PAYMENT_REQUIRED {
            return Err(format!("unpaid {} answered {unpaid:?}", self.url).into());
        }
        let challenge = match version {
            X402Version::V2 => {
                Challenge::from_response(unpaid.header(payments::PAYMENT_REQUIRED), b"")?
            }
            X402Version::V1 => Challenge::from_response(None, unpaid.text.as_bytes())?,
        };
        Ok(LocalPayer::from_hex(PAYER_KEY)?.answer(&challenge, None, unix_now())?)
    }
}

/// A whole answer: status, headers and body text.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.text)
    }
}

impl Answer {
    async fn read(response: reqwest::Response) -> TestResult<Answer> {
        let status = response.status();
        let headers = response.headers().clone();
        let text = tokio::time::timeout(PATIENCE, response.text()).await??;
        Ok(Answer {
            status,
            headers,
            text,
        })
    }

    fn json(&self) -> TestResult<Value> {
        Ok(serde_json::from_str(&self.text)?)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// A base64 JSON header (`PAYMENT-REQUIRED`, `PAYMENT-RESPONSE`...), decoded.
    fn decoded(&self, name: &str) -> TestResult<Value> {
        let value = self
            .header(name)
            .ok_or_else(|| format!("no {name} header on {self:?}"))?;
        Ok(payments::wire::decode::<Value>(value)?)
    }

    /// The error code of an `{"error": {"code"}}` body.
    fn code(&self) -> TestResult<String> {
        let body = self.json()?;
        Ok(body["error"]["code"]
            .as_str()
            .ok_or_else(|| format!("no error code in {self:?}"))?
            .to_owned())
    }
}

async fn get(client: &reqwest::Client, url: &str, token: &str) -> TestResult<Answer> {
    let response = client
        .get(url)
        .header("Task-Access-Token", token)
        .send()
        .await?;
    Answer::read(response).await
}

fn is_terminal(status: &Value) -> bool {
    matches!(status.as_str(), Some("completed" | "failed" | "cancelled"))
}

/// Polls `GET /tasks/{id}` until the task is `want`; its last answer (headers included).
async fn wait_for_task(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    task_id: &str,
    want: &str,
) -> TestResult<Answer> {
    let start = tokio::time::Instant::now();
    loop {
        let answer = get(client, &format!("{base}/tasks/{task_id}"), token).await?;
        if answer.status == StatusCode::OK {
            let task = answer.json()?;
            if task["status"] == want {
                return Ok(answer);
            }
            if is_terminal(&task["status"]) {
                return Err(format!("task {task_id} ended as {task}, not {want}").into());
            }
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("task {task_id} never became {want}: {answer:?}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `GET /tasks` for `token`: the owner's tasks.
async fn list_tasks(client: &reqwest::Client, base: &str, token: &str) -> TestResult<Vec<Value>> {
    let answer = get(client, &format!("{base}/tasks"), token).await?;
    if answer.status != StatusCode::OK {
        return Err(format!("GET /tasks answered {answer:?}").into());
    }
    Ok(answer.json()?["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Polls `GET /tasks` until the owner has exactly one task and it is `want`; that task.
async fn wait_listed(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    want: &str,
) -> TestResult<Value> {
    let start = tokio::time::Instant::now();
    loop {
        let tasks = list_tasks(client, base, token).await?;
        if let [task] = tasks.as_slice() {
            if task["status"] == want {
                return Ok(task.clone());
            }
            if is_terminal(&task["status"]) {
                return Err(format!("the task ended as {task}, not {want}").into());
            }
        }
        if tasks.len() > 1 {
            return Err(format!("one task expected, listed: {tasks:?}").into());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("no single {want} task was listed: {tasks:?}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A successful settlement receipt, paid by Anvil #0 on `network`.
fn assert_receipt(receipt: &Value, network: &str) -> TestResult {
    assert_eq!(receipt["success"], true, "receipt: {receipt}");
    assert!(
        receipt["transaction"]
            .as_str()
            .is_some_and(|tx| !tx.is_empty()),
        "receipt: {receipt}"
    );
    assert_eq!(receipt["network"], network, "receipt: {receipt}");
    let payer: Address = receipt["payer"]
        .as_str()
        .ok_or("receipt names no payer")?
        .parse()?;
    assert_eq!(payer, PAYER.parse::<Address>()?);
    Ok(())
}

/// A credential that was not accepted again: a 402 challenge or a 409 `payment_in_progress`.
fn assert_not_reaccepted(answer: &Answer) -> TestResult {
    match answer.status {
        StatusCode::PAYMENT_REQUIRED => {}
        StatusCode::CONFLICT => assert_eq!(answer.code()?, "payment_in_progress"),
        // Too many of this payer's credentials pending at once at one gateway.
        StatusCode::TOO_MANY_REQUESTS => assert_eq!(answer.code()?, "rate_limited"),
        _ => return Err(format!("a spent credential was answered {answer:?}").into()),
    }
    assert!(
        answer.header(payments::PAYMENT_RESPONSE).is_none(),
        "no receipt for a refused replay: {answer:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_challenge_offers_both_versions_and_reserves_nothing() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    let client = &cluster.client;

    let answer = cluster
        .invoke("echo", json!({"x": 1}))
        .send(client, None)
        .await?;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");

    let v2 = answer.decoded(payments::PAYMENT_REQUIRED)?;
    assert_eq!(v2["x402Version"], 2);
    let accepted = &v2["accepts"][0];
    assert_eq!(accepted["scheme"], "exact");
    assert_eq!(accepted["network"], "eip155:84532");
    assert_eq!(accepted["amount"], "1000");
    assert_eq!(accepted["asset"], BASE_SEPOLIA_USDC);
    assert_eq!(accepted["payTo"], PAYEE, "checksummed payee");
    assert!(
        accepted["maxTimeoutSeconds"]
            .as_u64()
            .is_some_and(|seconds| seconds > 0),
        "{accepted}"
    );
    assert_eq!(accepted["extra"], json!({"name": "USDC", "version": "2"}));
    assert!(
        v2["resource"]["url"]
            .as_str()
            .is_some_and(|url| url.ends_with("/entrypoints/echo/invoke")),
        "{v2}"
    );

    let v1 = answer.json()?;
    assert_eq!(v1["x402Version"], 1);
    assert_eq!(v1["error"], CREDENTIAL_REQUIRED);
    assert_eq!(v1["accepts"][0]["maxAmountRequired"], "1000");
    assert_eq!(v1["accepts"][0]["network"], "base-sepolia");
    assert_eq!(v1["accepts"][0]["payTo"], PAYEE);

    // A task's challenge (the caller already holds its capability) reserves nothing either.
    let task = cluster
        .task("echo", &json!({"x": 1}), TOKEN)
        .send(client, None)
        .await?;
    assert_eq!(task.status, StatusCode::PAYMENT_REQUIRED, "{task:?}");

    // Nothing was asked of the facilitator, nothing stored, no capacity used.
    assert_eq!(
        cluster.facilitator.stats().await?,
        FacilitatorStats {
            verify: 0,
            settle: 0,
            settled: 0
        }
    );
    assert_eq!(cluster.keys("{tc}:task:*").await?, Vec::<String>::new());
    assert_eq!(cluster.keys("{tc}:cred:*").await?, Vec::<String>::new());
    assert_eq!(cluster.live_tasks().await?, 0);
    assert!(
        list_tasks(client, &cluster.gateway.base, TOKEN)
            .await?
            .is_empty()
    );

    // The free entrypoint runs without any payment: its own failure comes back, not a 402.
    let free = cluster
        .invoke(
            "fail",
            json!({"code": "free_failure", "message": "failed for free"}),
        )
        .send(client, None)
        .await?;
    assert_eq!(free.status, StatusCode::INTERNAL_SERVER_ERROR, "{free:?}");
    assert_eq!(free.json()?["error"]["message"], "failed for free");
    assert!(free.header(payments::PAYMENT_REQUIRED).is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paid_v2_invoke_settles_once_and_its_credential_cannot_be_replayed() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    let client = &cluster.client;
    let (payer_before, payee_before) = cluster.facilitator.balances().await?;

    let ask = cluster.invoke("echo", json!({"hello": "paid"}));
    let payment = ask.pay(client, X402Version::V2).await?;
    assert_eq!(payment.name, payments::PAYMENT_SIGNATURE);
    let answer = ask.send(client, Some(&payment)).await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let body = answer.json()?;
    assert_eq!(body["status"], "succeeded");
    assert_eq!(body["output"], json!({"hello": "paid"}));
    assert_receipt(&answer.decoded(payments::PAYMENT_RESPONSE)?, "eip155:84532")?;

    assert_eq!(
        cluster.facilitator.balances().await?,
        (payer_before - ECHO_PRICE, payee_before + ECHO_PRICE)
    );
    let stats = cluster.facilitator.stats().await?;
    assert_eq!((stats.verify, stats.settle, stats.settled), (1, 1, 1));

    // The same header again: refused by the gateway, before the facilitator hears of it.
    let replay = ask.send(client, Some(&payment)).await?;
    assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED, "{replay:?}");
    let reason = replay.json()?["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("already used"), "{replay:?}");
    assert!(replay.header(payments::PAYMENT_REQUIRED).is_some());
    assert!(replay.header(payments::PAYMENT_RESPONSE).is_none());
    assert_eq!(
        cluster.facilitator.balances().await?,
        (payer_before - ECHO_PRICE, payee_before + ECHO_PRICE)
    );
    assert_eq!(cluster.facilitator.stats().await?, stats);
    Ok(())
}

/// A v2 credential names the resource it pays for (echoed from the 402): made for `echo`, it
/// does not pay `sleep`, which costs the same; one naming no resource pays nothing. The
/// refusals happen before anything is claimed or asked of the facilitator, so the credential
/// still pays `echo`.
#[tokio::test(flavor = "multi_thread")]
async fn a_v2_credential_pays_only_the_resource_it_names() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    let client = &cluster.client;
    let echo = cluster.invoke("echo", json!({"bound": true}));
    let payment = echo.pay(client, X402Version::V2).await?;
    let document: Value = payments::wire::decode(&payment.value)?;
    assert_eq!(
        document["resource"]["url"],
        format!("{}/entrypoints/echo/invoke", cluster.gateway.base)
    );

    let sleep = cluster.invoke("sleep", json!({"ms": 1}));
    let elsewhere = sleep.send(client, Some(&payment)).await?;
    assert_eq!(
        elsewhere.status,
        StatusCode::PAYMENT_REQUIRED,
        "{elsewhere:?}"
    );
    let reason = elsewhere.json()?["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("another resource"), "{elsewhere:?}");
    assert!(
        reason.contains("/entrypoints/sleep/invoke"),
        "{elsewhere:?}"
    );
    assert!(elsewhere.header(payments::PAYMENT_REQUIRED).is_some());

    let mut unnamed = document.clone();
    unnamed
        .as_object_mut()
        .ok_or("not an object")?
        .remove("resource");
    let stripped = echo
        .request(client)
        .header(payment.name, payments::wire::encode(&unnamed))
        .send()
        .await?;
    let stripped = Answer::read(stripped).await?;
    assert_eq!(
        stripped.status,
        StatusCode::PAYMENT_REQUIRED,
        "{stripped:?}"
    );
    assert!(
        stripped.json()?["error"]
            .as_str()
            .is_some_and(|reason| reason.contains("names no resource")),
        "{stripped:?}"
    );
    let stats = cluster.facilitator.stats().await?;
    assert_eq!((stats.verify, stats.settle), (0, 0));
    assert!(cluster.keys("{tc}:cred:*").await?.is_empty());

    let paid = echo.send(client, Some(&payment)).await?;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    assert_eq!(paid.json()?["output"], json!({"bound": true}));
    assert_eq!(cluster.facilitator.stats().await?.settled, 1);

    // `POST /tasks` names its skill in the body: the resource carries it, so a credential for
    // an `echo` task does not pay a `sleep` task of the same price.
    let echo_task = cluster.task("echo", &json!({"bound": "task"}), TOKEN);
    let payment = echo_task.pay(client, X402Version::V2).await?;
    let document: Value = payments::wire::decode(&payment.value)?;
    assert_eq!(
        document["resource"]["url"],
        format!("{}/tasks?skillId=echo", cluster.gateway.base)
    );
    let sleep_task = cluster.task("sleep", &json!({"ms": 1}), TOKEN);
    let elsewhere = sleep_task.send(client, Some(&payment)).await?;
    assert_eq!(
        elsewhere.status,
        StatusCode::PAYMENT_REQUIRED,
        "{elsewhere:?}"
    );
    assert!(
        elsewhere.json()?["error"]
            .as_str()
            .is_some_and(|reason| reason.contains("/tasks?skillId=sleep")),
        "{elsewhere:?}"
    );
    let paid = echo_task.send(client, Some(&payment)).await?;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    assert_eq!(cluster.facilitator.stats().await?.settled, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paid_v1_invoke_gets_an_x_payment_response() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    let client = &cluster.client;
    let payer_before = cluster.facilitator.balance(PAYER).await?;

    let ask = cluster.invoke("echo", json!({"version": 1}));
    let payment = ask.pay(client, X402Version::V1).await?;
    assert_eq!(payment.name, payments::X_PAYMENT);
    let answer = ask.send(client, Some(&payment)).await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.json()?["output"], json!({"version": 1}));
    assert_receipt(
        &answer.decoded(payments::X_PAYMENT_RESPONSE)?,
        "base-sepolia",
    )?;
    assert!(
        answer.header(payments::PAYMENT_RESPONSE).is_none(),
        "a v1 payer gets the v1 receipt header only"
    );
    assert_eq!(
        cluster.facilitator.balance(PAYER).await?,
        payer_before - ECHO_PRICE
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paid_stream_carries_the_receipt_and_runs_to_the_end() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    wait_for_skill(&cluster.gateway, "count").await?;
    let client = &cluster.client;
    let payer_before = cluster.facilitator.balance(PAYER).await?;

    let ask = Ask::stream(&cluster.gateway.base, "count", json!({"n": 3}));
    let payment = ask.pay(client, X402Version::V2).await?;
    let answer = ask.send(client, Some(&payment)).await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert!(
        answer
            .header("content-type")
            .is_some_and(|value| value.starts_with("text/event-stream")),
        "{:?}",
        answer.headers
    );
    assert_receipt(&answer.decoded(payments::PAYMENT_RESPONSE)?, "eip155:84532")?;

    let events = harness::sse::events(&answer.text)?;
    let deltas = events.iter().filter(|(name, _)| name == "delta").count();
    assert_eq!(deltas, 3, "events: {events:?}");
    let (name, end) = events.last().ok_or("no events")?;
    assert_eq!(name, "run-end", "events: {events:?}");
    assert_eq!(end["status"], "succeeded");
    assert_eq!(end["output"], json!({"count": 3}));
    assert_eq!(
        cluster.facilitator.balance(PAYER).await?,
        payer_before - COUNT_PRICE
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paid_task_needs_its_token_first_and_keeps_its_receipt() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let ask = cluster.task("echo", &json!({"x": 1}), TOKEN);

    // The capability must exist before anyone pays for it.
    let anonymous = Ask {
        token: None,
        ..ask.clone()
    }
    .send(client, None)
    .await?;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{anonymous:?}");
    assert_eq!(anonymous.code()?, "task_access_required");

    let unpaid = ask.send(client, None).await?;
    assert_eq!(unpaid.status, StatusCode::PAYMENT_REQUIRED, "{unpaid:?}");
    assert!(list_tasks(client, base, TOKEN).await?.is_empty());

    let payment = ask.pay(client, X402Version::V2).await?;
    let created = ask.send(client, Some(&payment)).await?;
    assert_eq!(created.status, StatusCode::OK, "{created:?}");
    let body = created.json()?;
    assert_eq!(body["accessToken"], TOKEN);
    assert_eq!(body["status"], "running");
    let task_id = body["taskId"].as_str().ok_or("no taskId")?.to_owned();
    let receipt = created
        .header(payments::PAYMENT_RESPONSE)
        .ok_or("no receipt")?
        .to_owned();
    assert_receipt(
        &created.decoded(payments::PAYMENT_RESPONSE)?,
        "eip155:84532",
    )?;

    // The receipt is stored with the task: a payer who lost the first answer reads it again.
    let done = wait_for_task(client, base, TOKEN, &task_id, "completed").await?;
    assert_eq!(done.json()?["result"]["output"], json!({"x": 1}));
    assert_eq!(
        done.header(payments::PAYMENT_RESPONSE),
        Some(receipt.as_str())
    );

    let stranger = get(client, &format!("{base}/tasks/{task_id}"), OTHER_TOKEN).await?;
    assert_eq!(stranger.status, StatusCode::NOT_FOUND, "{stranger:?}");
    assert!(stranger.header(payments::PAYMENT_RESPONSE).is_none());
    Ok(())
}

/// A paid task whose handler fails retryably runs again after a backoff without being charged
/// again: payment happens at admission only, and a retry is no admission.
#[tokio::test(flavor = "multi_thread")]
async fn a_paid_task_retried_twice_is_charged_once() -> TestResult {
    let worker_env = [
        ("WORKER_PRICES", format!("{PRICES},fail=0.001")),
        ("WORKER_RETRY", "fail=2".to_owned()),
        ("WORKER_RETRY_BASE_MS", "10".to_owned()),
        ("WORKER_RETRY_MAX_MS", "40".to_owned()),
        ("WORKER_RECOVERY_INTERVAL_MS", "50".to_owned()),
    ];
    let cluster =
        Cluster::start_with(RedisOptions::default().with_aof(true), &[], &worker_env).await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let input = json!({"code": "upstream_busy", "retryable": true, "times": 2});
    let ask = cluster.task("fail", &input, TOKEN);
    let payment = ask.pay(client, X402Version::V2).await?;
    let created = ask.send(client, Some(&payment)).await?;
    assert_eq!(created.status, StatusCode::OK, "{created:?}");
    let task_id = created.json()?["taskId"]
        .as_str()
        .ok_or("no taskId")?
        .to_owned();
    let receipt = created
        .header(payments::PAYMENT_RESPONSE)
        .ok_or("no receipt")?
        .to_owned();

    let done = wait_for_task(client, base, TOKEN, &task_id, "completed").await?;
    // Two failed attempts, then the third ran: three runs, one payment.
    assert_eq!(
        done.json()?["result"]["output"],
        json!({"attempt": 3, "last_error": "upstream_busy"})
    );
    assert_eq!(
        done.header(payments::PAYMENT_RESPONSE),
        Some(receipt.as_str())
    );
    assert_eq!(
        cluster.facilitator.stats().await?,
        FacilitatorStats {
            verify: 1,
            settle: 1,
            settled: 1
        }
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_without_fsynced_aof_takes_no_paid_task_unless_vouched_for() -> TestResult {
    // Without AOF an acknowledged task (and its receipt) dies with Redis: the store says so.
    let cluster = Cluster::start_on(RedisOptions::default(), &[]).await?;
    let ask = cluster.task("echo", &json!({"x": 1}), TOKEN);
    let refused = ask.send(&cluster.client, None).await?;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    assert_eq!(refused.code()?, "durable_task_store_required");
    // Free routes are unaffected, and so is a paid invoke (it keeps no task to lose).
    let unpaid_invoke = cluster
        .invoke("echo", json!({"x": 1}))
        .send(&cluster.client, None)
        .await?;
    assert_eq!(
        unpaid_invoke.status,
        StatusCode::PAYMENT_REQUIRED,
        "{unpaid_invoke:?}"
    );

    // An operator whose Redis forbids CONFIG vouches for its persistence.
    let vouched = cluster
        .another_gateway("g-vouched", &[("REDIS_DURABILITY", "durable".to_owned())])
        .await?;
    let challenged = ask
        .on(&cluster.gateway.base, &vouched.base)
        .send(&cluster.client, None)
        .await?;
    assert_eq!(
        challenged.status,
        StatusCode::PAYMENT_REQUIRED,
        "{challenged:?}"
    );
    Ok(())
}

/// A hostile payment header: its name, its value, and a piece of it that must never be logged.
struct Hostile {
    name: &'static str,
    value: HeaderValue,
    secret: String,
}

fn hostile_headers(wrong_price: &PaymentHeader) -> TestResult<Vec<Hostile>> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let text = |name: &'static str, value: String| -> TestResult<Hostile> {
        Ok(Hostile {
            name,
            value: HeaderValue::from_str(&value)?,
            secret: value,
        })
    };
    let not_json = b64(b"not json, hostile-2");
    let future_version = b64(br#"{"x402Version":3,"tag":"hostile-3"}"#);
    let wrong_types = b64(
        br#"{"x402Version":2,"resource":[],"accepted":"hostile-4","payload":{"signature":7,"authorization":"x"}}"#,
    );
    let huge = "hostile5".repeat(9 * 1024 / 8);
    let v1_garbage = b64(
        br#"{"x402Version":1,"scheme":"exact","network":"base-sepolia","payload":{"signature":"0xhostile8"}}"#,
    );
    Ok(vec![
        text(payments::PAYMENT_SIGNATURE, "!!!notbase64-hostile-1".into())?,
        text(payments::PAYMENT_SIGNATURE, not_json)?,
        text(payments::PAYMENT_SIGNATURE, future_version)?,
        text(payments::PAYMENT_SIGNATURE, wrong_types)?,
        Hostile {
            name: payments::PAYMENT_SIGNATURE,
            value: HeaderValue::from_str(&huge)?,
            secret: "hostile5hostile5hostile5".into(),
        },
        Hostile {
            name: payments::PAYMENT_SIGNATURE,
            value: HeaderValue::from_bytes(b"hostile-6-\xff\xfe-caf\xc3\xa9")?,
            secret: "hostile-6-".into(),
        },
        text(payments::X_PAYMENT, "###xpayment-hostile-7".into())?,
        text(payments::X_PAYMENT, v1_garbage)?,
        // A real, correctly signed credential for another price: refused offline.
        text(wrong_price.name, wrong_price.value.clone())?,
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_payment_headers_get_402s_and_are_never_logged() -> TestResult {
    let cluster = Cluster::start(&[]).await?;
    wait_for_skill(&cluster.gateway, "count").await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let wrong_price = Ask::invoke(base, "count", json!({"n": 1}))
        .pay(client, X402Version::V2)
        .await?;
    let routes = [
        cluster.invoke("echo", json!({"x": 1})),
        cluster.task("echo", &json!({"x": 1}), TOKEN),
    ];
    let hostile = hostile_headers(&wrong_price)?;

    for ask in &routes {
        for header in &hostile {
            let response = ask
                .request(client)
                .header(header.name, header.value.clone())
                .send()
                .await?;
            let answer = Answer::read(response).await?;
            let case = format!("{} on {}: {answer:?}", header.name, ask.url);
            assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{case}");
            let reason = answer.json()?["error"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                !reason.is_empty() && reason != CREDENTIAL_REQUIRED,
                "the 402 says what was wrong: {case}"
            );
            let challenge = answer.decoded(payments::PAYMENT_REQUIRED)?;
            assert_eq!(challenge["error"], reason.as_str(), "{case}");
            assert!(!answer.text.contains(&header.secret), "echoed: {case}");
        }
    }

    // Nothing reached the facilitator, nothing was reserved, and no log line shows a header.
    assert_eq!(cluster.facilitator.stats().await?.verify, 0);
    assert!(list_tasks(client, base, TOKEN).await?.is_empty());
    assert_eq!(cluster.live_tasks().await?, 0);
    let log = cluster.gateway.process.log();
    assert!(!log.is_empty(), "the gateway logs at info");
    for header in &hostile {
        assert!(
            !log.contains(&header.secret),
            "the gateway log shows a {} value",
            header.name
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_failures_reserve_nothing_and_release_the_credential() -> TestResult {
    // The payer retries right after its refusal: no cooldown (payment_flood.rs tests it).
    let cluster = Cluster::start(&[("REFUSED_PAYER_COOLDOWN_MS", "0".to_owned())]).await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let facilitator = &cluster.facilitator;
    let balances = facilitator.balances().await?;

    // Refused by the facilitator: 402 with its reason, and no task was ever reserved.
    let refused_token = token("verify-refuse");
    let ask = cluster.task("echo", &json!({"case": "refuse"}), &refused_token);
    let payment = ask.pay(client, X402Version::V2).await?;
    facilitator.set_faults(json!({"verify": "refuse"})).await?;
    let refused = ask.send(client, Some(&payment)).await?;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{refused:?}");
    assert!(
        refused.json()?["error"]
            .as_str()
            .is_some_and(|reason| reason.contains("injected_failure")),
        "{refused:?}"
    );
    assert!(refused.header(payments::PAYMENT_RESPONSE).is_none());
    assert!(list_tasks(client, base, &refused_token).await?.is_empty());
    assert_eq!(cluster.live_tasks().await?, 0);

    // Nothing moved, so the same credential is good once the facilitator behaves.
    facilitator.set_faults(json!({"verify": "none"})).await?;
    let retried = ask.send(client, Some(&payment)).await?;
    assert_eq!(retried.status, StatusCode::OK, "{retried:?}");
    assert!(retried.header(payments::PAYMENT_RESPONSE).is_some());

    // The facilitator failing: 503, nothing reserved, the credential given back.
    let failed_token = token("verify-http500");
    let ask = cluster.task("echo", &json!({"case": "http500"}), &failed_token);
    let payment = ask.pay(client, X402Version::V2).await?;
    facilitator.set_faults(json!({"verify": "http500"})).await?;
    let failed = ask.send(client, Some(&payment)).await?;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE, "{failed:?}");
    assert_eq!(failed.code()?, "payment_verification_failed");
    assert!(failed.header(payments::PAYMENT_RESPONSE).is_none());
    assert!(list_tasks(client, base, &failed_token).await?.is_empty());
    facilitator.set_faults(json!({"verify": "none"})).await?;
    let retried = ask.send(client, Some(&payment)).await?;
    assert_eq!(retried.status, StatusCode::OK, "{retried:?}");

    // Only the two retries were charged.
    assert_eq!(
        facilitator.balances().await?,
        (balances.0 - 2 * ECHO_PRICE, balances.1 + 2 * ECHO_PRICE)
    );
    assert_eq!(facilitator.stats().await?.settled, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn settle_failures_never_give_the_credential_back() -> TestResult {
    // Settle calls without an answer are looked up 1 s + 2 s after they began.
    let cluster = Cluster::start(&[
        ("FACILITATOR_TIMEOUT_MS", "1000".to_owned()),
        ("SETTLEMENT_RECOVERY_MS", "200".to_owned()),
    ])
    .await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let facilitator = &cluster.facilitator;
    let start = facilitator.balances().await?;

    // Refused settlement: 402 settlement_failed, the task cancelled, nothing moved.
    let refused_token = token("settle-refuse");
    let ask = cluster.task("echo", &json!({"case": "refuse"}), &refused_token);
    let payment = ask.pay(client, X402Version::V2).await?;
    facilitator.set_faults(json!({"settle": "refuse"})).await?;
    let refused = ask.send(client, Some(&payment)).await?;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{refused:?}");
    assert_eq!(refused.code()?, "settlement_failed");
    assert!(refused.header(payments::PAYMENT_RESPONSE).is_none());
    wait_listed(client, base, &refused_token, "cancelled").await?;
    assert_eq!(facilitator.balances().await?, start);

    // The facilitator failing: the outcome is unknown, so the credential stays spent and the
    // task held until the settlement recovery finds that nothing was settled and cancels it.
    let failed_token = token("settle-http500");
    let ask = cluster.task("echo", &json!({"case": "http500"}), &failed_token);
    let payment = ask.pay(client, X402Version::V2).await?;
    facilitator.set_faults(json!({"settle": "http500"})).await?;
    let failed = ask.send(client, Some(&payment)).await?;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE, "{failed:?}");
    assert_eq!(failed.code()?, "settlement_failed");
    facilitator.set_faults(json!({"settle": "none"})).await?;
    let settles = facilitator.stats().await?.settle;
    assert_not_reaccepted(&ask.send(client, Some(&payment)).await?)?;
    assert_eq!(
        facilitator.stats().await?.settle,
        settles,
        "a replay never reaches the facilitator"
    );
    wait_listed(client, base, &failed_token, "cancelled").await?;
    assert_eq!(facilitator.balances().await?, start);

    // The answer lost after the funds moved: debited once, never again for this credential,
    // and the task runs once the settlement recovery learns it was paid for.
    let dropped_token = token("settle-drop");
    let ask = cluster.task("echo", &json!({"case": "drop"}), &dropped_token);
    let payment = ask.pay(client, X402Version::V2).await?;
    facilitator.set_faults(json!({"settle": "drop"})).await?;
    let dropped = ask.send(client, Some(&payment)).await?;
    assert_eq!(
        dropped.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{dropped:?}"
    );
    assert_eq!(dropped.code()?, "settlement_failed");
    facilitator.set_faults(json!({"settle": "none"})).await?;
    assert_not_reaccepted(&ask.send(client, Some(&payment)).await?)?;
    wait_listed(client, base, &dropped_token, "completed").await?;
    assert_eq!(
        facilitator.balances().await?,
        (start.0 - ECHO_PRICE, start.1 + ECHO_PRICE)
    );
    assert_eq!(facilitator.stats().await?.settled, 1);
    assert_eq!(cluster.live_tasks().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_cluster_refuses_before_verifying_and_releases_the_credential() -> TestResult {
    let cluster = Cluster::start(&[("MAX_TASKS", "1".to_owned())]).await?;
    wait_for_skill(&cluster.gateway, "sleep").await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;

    // A paid, long task takes the only slot.
    let sleeper = cluster.task("sleep", &json!({"ms": 60_000}), TOKEN);
    let payment = sleeper.pay(client, X402Version::V2).await?;
    let sleeping = sleeper.send(client, Some(&payment)).await?;
    assert_eq!(sleeping.status, StatusCode::OK, "{sleeping:?}");
    let sleeping_id = sleeping.json()?["taskId"]
        .as_str()
        .ok_or("no taskId")?
        .to_owned();
    let verified = cluster.facilitator.stats().await?.verify;

    let waiting = cluster.task("echo", &json!({"x": 2}), OTHER_TOKEN);
    let payment = waiting.pay(client, X402Version::V2).await?;
    let full = waiting.send(client, Some(&payment)).await?;
    assert_eq!(full.status, StatusCode::SERVICE_UNAVAILABLE, "{full:?}");
    assert_eq!(full.code()?, "task_capacity_exhausted");
    assert!(full.header(payments::PAYMENT_RESPONSE).is_none());
    assert_eq!(
        cluster.facilitator.stats().await?.verify,
        verified,
        "capacity is checked before the facilitator is asked"
    );

    let cancelled = client
        .post(format!("{base}/tasks/{sleeping_id}/cancel"))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?;
    assert_eq!(cancelled.status(), StatusCode::OK);

    // The refused request's credential was released: the same header now buys the task.
    let admitted = waiting.send(client, Some(&payment)).await?;
    assert_eq!(admitted.status, StatusCode::OK, "{admitted:?}");
    assert!(admitted.header(payments::PAYMENT_RESPONSE).is_some());
    let task_id = admitted.json()?["taskId"]
        .as_str()
        .ok_or("no taskId")?
        .to_owned();
    wait_for_task(client, base, OTHER_TOKEN, &task_id, "completed").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_settlement_keeps_the_gateways_claim_alive() -> TestResult {
    // The claim lapses after 600 ms unless renewed; settlement takes 2.5 s.
    let cluster = Cluster::start(&[("ADMISSION_LEASE_MS", "600".to_owned())]).await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    cluster
        .facilitator
        .set_faults(json!({"settle": "slow", "slowMs": 2500}))
        .await?;

    let ask = cluster.task("echo", &json!({"slow": true}), TOKEN);
    let payment = ask.pay(client, X402Version::V2).await?;
    let created = ask.send(client, Some(&payment)).await?;
    assert_eq!(created.status, StatusCode::OK, "{created:?}");
    let body = created.json()?;
    assert_eq!(
        body["status"], "running",
        "the claim was not reaped meanwhile"
    );
    assert!(created.header(payments::PAYMENT_RESPONSE).is_some());
    let task_id = body["taskId"].as_str().ok_or("no taskId")?;
    let done = wait_for_task(client, base, TOKEN, task_id, "completed").await?;
    assert_eq!(done.json()?["result"]["output"], json!({"slow": true}));
    assert_eq!(cluster.facilitator.stats().await?.settled, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn one_credential_buys_one_run_across_two_gateways() -> TestResult {
    let cluster = Cluster::start(&[shared_public_url()]).await?;
    let second = cluster
        .another_gateway("g2", &[shared_public_url()])
        .await?;
    wait_for_skill(&second, "echo").await?;
    let client = &cluster.client;
    let payer_before = cluster.facilitator.balance(PAYER).await?;

    let ask = cluster.invoke("echo", json!({"race": true}));
    let payment = ask.pay(client, X402Version::V2).await?;
    let mut runs = Vec::new();
    for i in 0..50 {
        let ask = if i % 2 == 0 {
            ask.clone()
        } else {
            ask.on(&cluster.gateway.base, &second.base)
        };
        let client = client.clone();
        let payment = payment.clone();
        runs.push(tokio::spawn(async move {
            ask.send(&client, Some(&payment))
                .await
                .map_err(|err| err.to_string())
        }));
    }
    let mut paid = 0;
    let mut refused = 0;
    let mut in_progress = 0;
    for run in futures::future::join_all(runs).await {
        let answer = run??;
        match answer.status {
            StatusCode::OK => {
                assert_receipt(&answer.decoded(payments::PAYMENT_RESPONSE)?, "eip155:84532")?;
                assert_eq!(answer.json()?["output"], json!({"race": true}));
                paid += 1;
            }
            StatusCode::PAYMENT_REQUIRED => {
                assert_not_reaccepted(&answer)?;
                refused += 1;
            }
            StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS => {
                assert_not_reaccepted(&answer)?;
                in_progress += 1;
            }
            _ => return Err(format!("unexpected answer to a replay: {answer:?}").into()),
        }
    }
    assert_eq!(paid, 1, "402s: {refused}, 409s and 429s: {in_progress}");
    assert_eq!(refused + in_progress, 49);
    assert_eq!(cluster.facilitator.stats().await?.settled, 1);
    assert_eq!(
        cluster.facilitator.balance(PAYER).await?,
        payer_before - ECHO_PRICE
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_dying_after_the_receipt_loses_no_paid_task() -> TestResult {
    let mut cluster = Cluster::start(&[
        ("GATEWAY_FAULT_POINT", "after-receipt".to_owned()),
        ("ADMISSION_LEASE_MS", "1000".to_owned()),
    ])
    .await?;
    let healthy = cluster.another_gateway("g-healthy", &[]).await?;
    let client = &cluster.client;

    let ask = cluster.task("echo", &json!({"survived": true}), TOKEN);
    let payment = ask.pay(client, X402Version::V2).await?;
    let sent = ask
        .request(client)
        .header(payment.name, &payment.value)
        .send()
        .await;
    assert!(sent.is_err(), "the gateway answered: {sent:?}");
    let exit = cluster.gateway.process.wait_exit(PATIENCE)?;
    assert!(!exit.success(), "the gateway aborted: {exit}");

    // The receipt write queued the task in the same script: it runs although the gateway died.
    let task = wait_listed(client, &healthy.base, TOKEN, "completed").await?;
    assert_eq!(task["result"]["output"], json!({"survived": true}));
    let task_id = task["taskId"].as_str().ok_or("no taskId")?;
    let read = get(client, &format!("{}/tasks/{task_id}", healthy.base), TOKEN).await?;
    assert_eq!(read.status, StatusCode::OK, "{read:?}");
    assert_receipt(&read.decoded(payments::PAYMENT_RESPONSE)?, "eip155:84532")?;
    assert_eq!(cluster.facilitator.stats().await?.settled, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_dying_between_settle_and_receipt_loses_nothing() -> TestResult {
    // The dead gateway's claim (600 ms) expires long before the healthy gateway's settlement
    // recovery looks the settlement up (facilitator timeout 1 s + 2 s, swept every 200 ms):
    // the task, held for the settlement, is not reaped meanwhile, and the recovered receipt
    // commits it to run.
    let recovery = [
        ("FACILITATOR_TIMEOUT_MS", "1000".to_owned()),
        ("SETTLEMENT_RECOVERY_MS", "200".to_owned()),
    ];
    let mut cluster = Cluster::start(&[
        ("GATEWAY_FAULT_POINT", "after-settle".to_owned()),
        ("ADMISSION_LEASE_MS", "600".to_owned()),
        recovery[0].clone(),
        recovery[1].clone(),
        shared_public_url(),
    ])
    .await?;
    let healthy = cluster
        .another_gateway(
            "g-healthy",
            &[
                recovery[0].clone(),
                recovery[1].clone(),
                shared_public_url(),
            ],
        )
        .await?;
    let client = &cluster.client;
    let payer_before = cluster.facilitator.balance(PAYER).await?;

    let ask = cluster.task("echo", &json!({"lost": true}), TOKEN);
    let payment = ask.pay(client, X402Version::V2).await?;
    let sent = ask
        .request(client)
        .header(payment.name, &payment.value)
        .send()
        .await;
    assert!(sent.is_err(), "the gateway answered: {sent:?}");
    let exit = cluster.gateway.process.wait_exit(PATIENCE)?;
    assert!(!exit.success(), "the gateway aborted: {exit}");

    // The healthy gateway looked the lost settlement up, stored the receipt with the task and
    // committed it to run; the worker's recovery queued it, the dead claim having expired.
    let task = wait_listed(client, &healthy.base, TOKEN, "completed").await?;
    assert_eq!(task["result"]["output"], json!({"lost": true}));
    let task_id = task["taskId"].as_str().ok_or("no taskId")?;
    let read = get(client, &format!("{}/tasks/{task_id}", healthy.base), TOKEN).await?;
    assert_eq!(read.status, StatusCode::OK, "{read:?}");
    assert_receipt(&read.decoded(payments::PAYMENT_RESPONSE)?, "eip155:84532")?;

    // The funds moved once, and the credential stays spent on every gateway.
    assert_not_reaccepted(
        &ask.on(&cluster.gateway.base, &healthy.base)
            .send(client, Some(&payment))
            .await?,
    )?;
    assert_eq!(cluster.facilitator.stats().await?.settled, 1);
    assert_eq!(
        cluster.facilitator.balance(PAYER).await?,
        payer_before - ECHO_PRICE
    );
    Ok(())
}

/// Gateway settings under which a paid task whose settle call gets no answer must be held: the
/// admission's claim (600 ms) expires long before the settlement recovery may look the
/// settlement up (facilitator timeout 1 s + 2 s, swept every 200 ms).
fn held_settlements() -> [(&'static str, String); 3] {
    [
        ("ADMISSION_LEASE_MS", "600".to_owned()),
        ("FACILITATOR_TIMEOUT_MS", "1000".to_owned()),
        ("SETTLEMENT_RECOVERY_MS", "200".to_owned()),
    ]
}

/// The answer to a paid task whose settle call got no answer: `503 settlement_failed` with
/// Retry-After and no receipt, naming the task it holds (the owner's one task). Its id.
async fn assert_held(
    client: &reqwest::Client,
    base: &str,
    owner: &str,
    answer: &Answer,
) -> TestResult<String> {
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    assert_eq!(answer.code()?, "settlement_failed");
    assert!(answer.header("retry-after").is_some(), "{answer:?}");
    assert!(answer.header(payments::PAYMENT_RESPONSE).is_none());
    let tasks = list_tasks(client, base, owner).await?;
    let [task] = tasks.as_slice() else {
        return Err(format!("one task expected, listed: {tasks:?}").into());
    };
    let task_id = task["taskId"].as_str().ok_or("no taskId")?.to_owned();
    let message = answer.json()?["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains(&task_id) && message.contains("held"),
        "{answer:?}"
    );
    Ok(task_id)
}

/// The state of the credential record that `task_id` holds, if any.
async fn credential_state(cluster: &Cluster, task_id: &str) -> TestResult<Option<String>> {
    let mut conn = cluster.redis.client().await?;
    for key in cluster.keys("{tc}:cred:*").await? {
        let (holder, state): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(&key)
            .arg("holder")
            .arg("state")
            .query_async(&mut conn)
            .await?;
        if holder.as_deref() == Some(task_id) {
            return Ok(state);
        }
    }
    Ok(None)
}

/// Polls until the credential record `task_id` holds is in state `want`.
async fn wait_for_credential(cluster: &Cluster, task_id: &str, want: &str) -> TestResult {
    let start = tokio::time::Instant::now();
    loop {
        let state = credential_state(cluster, task_id).await?;
        if state.as_deref() == Some(want) {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("the credential of {task_id} stayed {state:?}, not {want}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A settle call that got no answer although the funds moved (the connection dropped after
/// the settlement; the facilitator settled after the gateway stopped waiting): the task is
/// held, not cancelled, although the admission's claim expires long before the settlement
/// recovery looks the settlement up; once it learns the payment settled, the task runs and
/// completes with its receipt. One debit each, and the credentials stay spent.
#[tokio::test(flavor = "multi_thread")]
async fn a_settle_answer_lost_after_the_funds_moved_holds_the_task_until_it_runs() -> TestResult {
    let cluster = Cluster::start(&held_settlements()).await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let facilitator = &cluster.facilitator;
    let start = facilitator.balances().await?;

    for (case, faults) in [
        ("drop", json!({"settle": "drop"})),
        // Settled 1.5 s after the call, which the gateway gave up on after 1 s.
        ("timeout", json!({"settle": "slow", "slowMs": 1500})),
    ] {
        let owner = token(&format!("held-{case}"));
        let ask = cluster.task("echo", &json!({"case": case}), &owner);
        let payment = ask.pay(client, X402Version::V2).await?;
        facilitator.set_faults(faults).await?;
        let unknown = ask.send(client, Some(&payment)).await?;
        facilitator.set_faults(json!({"settle": "none"})).await?;
        let task_id = assert_held(client, base, &owner, &unknown).await?;
        assert_not_reaccepted(&ask.send(client, Some(&payment)).await?)?;

        let done = wait_for_task(client, base, &owner, &task_id, "completed").await?;
        assert_eq!(done.json()?["result"]["output"], json!({"case": case}));
        assert_receipt(&done.decoded(payments::PAYMENT_RESPONSE)?, "eip155:84532")?;
        wait_for_credential(&cluster, &task_id, "settled").await?;
        assert_not_reaccepted(&ask.send(client, Some(&payment)).await?)?;
    }
    assert_eq!(facilitator.stats().await?.settled, 2);
    assert_eq!(
        facilitator.balances().await?,
        (start.0 - 2 * ECHO_PRICE, start.1 + 2 * ECHO_PRICE)
    );
    assert_eq!(cluster.live_tasks().await?, 0);
    Ok(())
}

/// The reverse: a settle call that got no answer and moved nothing holds the task until the
/// settlement recovery learns that nothing was settled, which cancels the task and voids the
/// credential (still never reused). Nothing was charged.
#[tokio::test(flavor = "multi_thread")]
async fn a_settle_without_answer_that_moved_nothing_ends_cancelled() -> TestResult {
    let cluster = Cluster::start(&held_settlements()).await?;
    let client = &cluster.client;
    let base = &cluster.gateway.base;
    let facilitator = &cluster.facilitator;
    let start = facilitator.balances().await?;

    let owner = token("held-http500");
    let ask = cluster.task("echo", &json!({"case": "http500"}), &owner);
    let payment = ask.pay(client, X402Version::V2).await?;
    facilitator.set_faults(json!({"settle": "http500"})).await?;
    let unknown = ask.send(client, Some(&payment)).await?;
    facilitator.set_faults(json!({"settle": "none"})).await?;
    let task_id = assert_held(client, base, &owner, &unknown).await?;
    let settles = facilitator.stats().await?.settle;
    assert_not_reaccepted(&ask.send(client, Some(&payment)).await?)?;

    wait_for_task(client, base, &owner, &task_id, "cancelled").await?;
    wait_for_credential(&cluster, &task_id, "void").await?;
    assert_not_reaccepted(&ask.send(client, Some(&payment)).await?)?;
    assert_eq!(
        facilitator.stats().await?.settle,
        settles,
        "a replay never reaches the facilitator"
    );
    assert_eq!(facilitator.stats().await?.settled, 0);
    assert_eq!(facilitator.balances().await?, start);
    assert_eq!(cluster.live_tasks().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn half_configured_payments_stop_the_gateway_with_one_line() -> TestResult {
    // Cluster mode: embedded mode ignores payment settings altogether.
    let redis = RedisServer::start()?;
    for (set, missing) in [
        (("PAY_TO", PAYEE.to_owned()), "FACILITATOR_URL"),
        (
            ("FACILITATOR_URL", "http://127.0.0.1:9".to_owned()),
            "PAY_TO",
        ),
    ] {
        let port = free_port()?;
        // ServiceProcess::start itself: the point is a gateway that refuses to start.
        let mut gateway = ServiceProcess::start(
            "gateway",
            &format!("g-without-{missing}"),
            &[],
            &[
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("REDIS_URL", redis.url()),
                set,
            ],
        )?;
        let exit = gateway.wait_exit(PATIENCE)?;
        let log = gateway.log();
        assert!(!exit.success(), "{exit}: {log}");
        let lines: Vec<&str> = log.lines().filter(|line| line.contains(missing)).collect();
        assert_eq!(lines.len(), 1, "one line names {missing}: {log}");
        assert!(lines[0].starts_with("gateway: "), "{log}");
    }
    Ok(())
}
