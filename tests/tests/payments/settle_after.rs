//! settle=after against real processes (a private redis-server with AOF, the dev `facilitator`,
//! a `worker` pricing `echo`, `fail` and `sleep` with `:settle=after`, two sweeping `gateway`s
//! and, per test, one more gateway set to time out early or to die at a fault point).
//!
//! What is proven, each against the facilitator's ledger and the credential's record in Redis:
//! a run that succeeds is settled once, after it ran, and answered with its result and receipt;
//! a failed or timed-out run charges nothing and says so (`payment-settlement: not-charged`);
//! a settlement the facilitator refuses withholds the result (a 402 as x402 says); a gateway
//! SIGKILLed (aborted at a fault point) after the run and before `settling` leaves the payment
//! `reserved`, which a surviving gateway's sweep releases once due (nothing charged, the
//! credential never reused); one killed after the facilitator settled leaves a record the sweep
//! looks up and resolves as settled once, with the receipt stored with the task.

use std::time::Duration;

use harness::TestResult;
use harness::paid::{PAYER, PAYER_KEY, PaidCluster};
use payments::payer::PaymentHeader;
use payments::{Credential, LocalPayer};
use reqwest::StatusCode;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, TaskStore};

const PATIENCE: Duration = Duration::from_secs(40);
/// `echo`'s price in atomic USDC.
const PRICE: u128 = 1_000;

/// Every gateway sweeps often, and a settle call counts as lost 1 s + 2 s after it started.
fn sweeping() -> Vec<(&'static str, String)> {
    vec![
        ("FACILITATOR_TIMEOUT_MS", "1000".to_owned()),
        ("SETTLEMENT_RECOVERY_MS", "200".to_owned()),
    ]
}

async fn cluster() -> TestResult<PaidCluster> {
    PaidCluster::start(
        &[(
            "WORKER_PRICES",
            "echo=0.001:settle=after,fail=0.001:settle=after,sleep=0.001:settle=after".to_owned(),
        )],
        &sweeping(),
        |card| {
            ["echo", "fail", "sleep"]
                .iter()
                .all(|key| card["entrypoints"][key]["pricing"]["invoke"].is_string())
        },
    )
    .await
}

/// A fresh credential for `entrypoint` with `body` at gateway `gateway`.
async fn pay(
    cluster: &PaidCluster,
    gateway: usize,
    entrypoint: &str,
    body: &Value,
) -> TestResult<PaymentHeader> {
    let challenge = cluster.x402_challenge(gateway, entrypoint, body).await?;
    Ok(LocalPayer::from_hex(PAYER_KEY)?.answer(&challenge, None, payments::unix_now())?)
}

/// A paid invoke: status, headers, body.
async fn invoke(
    cluster: &PaidCluster,
    gateway: usize,
    entrypoint: &str,
    body: &Value,
    payment: &PaymentHeader,
) -> TestResult<(StatusCode, reqwest::header::HeaderMap, Value)> {
    let answer = cluster
        .http
        .post(format!(
            "{}/entrypoints/{entrypoint}/invoke",
            cluster.base(gateway)
        ))
        .header(payment.name, &payment.value)
        .json(body)
        .send()
        .await?;
    let status = answer.status();
    let headers = answer.headers().clone();
    let text = answer.text().await?;
    Ok((
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    ))
}

/// The credential record of `payment`: its state and what it keeps (receipt or note).
async fn record(
    cluster: &PaidCluster,
    store: &RedisStore,
    payment: &PaymentHeader,
) -> TestResult<(Option<String>, Option<String>)> {
    let (state, kept, _) = record_fields(cluster, store, payment).await?;
    Ok((state, kept))
}

/// The record's state, what it keeps and its holder (the paid task's id).
async fn record_fields(
    cluster: &PaidCluster,
    store: &RedisStore,
    payment: &PaymentHeader,
) -> TestResult<(Option<String>, Option<String>, Option<String>)> {
    let key = Credential::decode(payment.version, &payment.value)?
        .nonce_key()
        .to_string();
    let record = store.credentials().record_key(&key);
    let mut conn = cluster.redis.client().await?;
    let fields = redis::cmd("HMGET")
        .arg(&record)
        .arg("state")
        .arg("receipt")
        .arg("holder")
        .query_async(&mut conn)
        .await?;
    Ok(fields)
}

/// Waits until `payment`'s record is in `state`; returns what it keeps.
async fn record_becomes(
    cluster: &PaidCluster,
    store: &RedisStore,
    payment: &PaymentHeader,
    state: &str,
) -> TestResult<Option<String>> {
    let start = tokio::time::Instant::now();
    loop {
        let (found, kept) = record(cluster, store, payment).await?;
        if found.as_deref() == Some(state) {
            return Ok(kept);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("the record stayed {found:?}, never {state}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn not_charged(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get("payment-settlement")
        .is_some_and(|value| value == "not-charged")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_charged_only_once_it_succeeded_and_a_failed_one_never() -> TestResult {
    let cluster = cluster().await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let payer_before = cluster.facilitator().balance(PAYER).await?;

    // Success: the result with the receipt, settled once, after the run.
    let body = json!({"input": {"paid": "after"}});
    let payment = pay(&cluster, 0, "echo", &body).await?;
    let (status, headers, answer) = invoke(&cluster, 0, "echo", &body, &payment).await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["output"], json!({"paid": "after"}));
    assert!(
        headers.get(payments::PAYMENT_RESPONSE).is_some(),
        "{headers:?}"
    );
    assert!(!not_charged(&headers));
    assert_eq!(cluster.settled().await?, 1);
    let (state, receipt) = record(&cluster, &store, &payment).await?;
    assert_eq!(state.as_deref(), Some("settled"));
    assert!(receipt.is_some());
    let run_id = answer["run_id"].as_str().ok_or("no run id")?;
    let task = store.get(run_id).await?.ok_or("task gone")?;
    assert!(
        task.receipt.is_some(),
        "the receipt is stored with the task"
    );

    // A failed run: its error, nothing charged, and the record says why.
    let body = json!({"input": {"code": "upstream_broke"}});
    let payment = pay(&cluster, 0, "fail", &body).await?;
    let (status, headers, answer) = invoke(&cluster, 0, "fail", &body, &payment).await?;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{answer}");
    assert!(not_charged(&headers), "{headers:?}");
    assert!(headers.get(payments::PAYMENT_RESPONSE).is_none());
    let (state, note) = record(&cluster, &store, &payment).await?;
    assert_eq!(state.as_deref(), Some("void"));
    assert!(
        note.as_deref()
            .is_some_and(|note| note.contains("not charged") && note.contains("failed")),
        "{note:?}"
    );
    // The task record says so too, where a receipt would be.
    let (_, _, holder) = record_fields(&cluster, &store, &payment).await?;
    let task = store
        .get(&holder.ok_or("no holder")?)
        .await?
        .ok_or("task gone")?;
    assert!(
        task.receipt.as_deref().is_some_and(
            |kept| kept.contains("payment-settlement") && kept.contains("not charged")
        ),
        "{:?}",
        task.receipt
    );
    // The released credential is spent all the same: it buys no second run.
    let (status, _, again) = invoke(&cluster, 1, "fail", &body, &payment).await?;
    assert!(
        matches!(status, StatusCode::PAYMENT_REQUIRED | StatusCode::CONFLICT),
        "{status} {again}"
    );

    assert_eq!(cluster.settled().await?, 1);
    assert_eq!(
        cluster.facilitator().balance(PAYER).await?,
        payer_before - PRICE
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_times_out_or_whose_settlement_is_refused_charges_nothing() -> TestResult {
    let mut cluster = cluster().await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let mut impatient = sweeping();
    impatient.push(("INVOKE_TIMEOUT_MS", "300".to_owned()));
    let quick = cluster
        .add_gateway("g-impatient", &impatient, |card| {
            card["entrypoints"]["sleep"]["pricing"]["invoke"].is_string()
        })
        .await?;

    // Timed out: 504, the run cancelled, nothing charged.
    let body = json!({"input": {"ms": 5000}});
    let payment = pay(&cluster, quick, "sleep", &body).await?;
    let (status, headers, answer) = invoke(&cluster, quick, "sleep", &body, &payment).await?;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{answer}");
    assert!(not_charged(&headers), "{headers:?}");
    assert_eq!(
        record(&cluster, &store, &payment).await?.0.as_deref(),
        Some("void")
    );

    // The run succeeds, the facilitator refuses to settle: the result is withheld and the
    // answer is x402's 402 with a fresh challenge.
    cluster
        .facilitator()
        .set_faults(json!({"settle": "refuse"}))
        .await?;
    let body = json!({"input": {"secret": "result"}});
    let payment = pay(&cluster, 0, "echo", &body).await?;
    let (status, headers, answer) = invoke(&cluster, 0, "echo", &body, &payment).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{answer}");
    assert!(
        headers.get(payments::PAYMENT_REQUIRED).is_some(),
        "{headers:?}"
    );
    assert!(not_charged(&headers));
    assert!(
        !answer.to_string().contains("secret"),
        "the result is withheld: {answer}"
    );
    assert_eq!(
        record(&cluster, &store, &payment).await?.0.as_deref(),
        Some("void")
    );
    cluster
        .facilitator()
        .set_faults(json!({"settle": "none"}))
        .await?;

    assert_eq!(cluster.settled().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_killed_between_run_and_settlement_charges_nothing() -> TestResult {
    let mut cluster = cluster().await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let payer_before = cluster.facilitator().balance(PAYER).await?;
    let mut dying = sweeping();
    dying.push(("GATEWAY_FAULT_POINT", "after-run".to_owned()));
    // Due 1 s + 5 s after the reservation: the sweep of the others releases it then.
    dying.push(("INVOKE_TIMEOUT_MS", "1000".to_owned()));
    let doomed = cluster
        .add_gateway("g-after-run", &dying, |card| {
            card["entrypoints"]["echo"]["pricing"]["invoke"].is_string()
        })
        .await?;

    let body = json!({"input": {"never": "delivered"}});
    let payment = pay(&cluster, doomed, "echo", &body).await?;
    let sent = invoke(&cluster, doomed, "echo", &body, &payment).await;
    assert!(sent.is_err(), "the gateway answered: {sent:?}");

    // The run completed; nobody was handed its result, so the sweep releases the payment.
    let note = record_becomes(&cluster, &store, &payment, "void").await?;
    assert!(
        note.as_deref()
            .is_some_and(|note| note.contains("released by the settlement recovery")),
        "{note:?}"
    );
    assert_eq!(cluster.settled().await?, 0);
    assert_eq!(cluster.facilitator().balance(PAYER).await?, payer_before);
    // Spent all the same: no second run on a surviving gateway.
    let (status, _, again) = invoke(&cluster, 0, "echo", &body, &payment).await?;
    assert!(
        matches!(status, StatusCode::PAYMENT_REQUIRED | StatusCode::CONFLICT),
        "{status} {again}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_killed_after_settling_is_resolved_as_settled_once() -> TestResult {
    let mut cluster = cluster().await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let payer_before = cluster.facilitator().balance(PAYER).await?;
    let mut dying = sweeping();
    dying.push(("GATEWAY_FAULT_POINT", "after-settle".to_owned()));
    let doomed = cluster
        .add_gateway("g-after-settle", &dying, |card| {
            card["entrypoints"]["echo"]["pricing"]["invoke"].is_string()
        })
        .await?;

    let body = json!({"input": {"paid": "then lost"}});
    let payment = pay(&cluster, doomed, "echo", &body).await?;
    let sent = invoke(&cluster, doomed, "echo", &body, &payment).await;
    assert!(sent.is_err(), "the gateway answered: {sent:?}");

    // The sweep looks the settlement up: settled, once, the receipt kept.
    let receipt = record_becomes(&cluster, &store, &payment, "settled").await?;
    assert!(receipt.is_some());
    let (_, _, holder) = record_fields(&cluster, &store, &payment).await?;
    let task_id = holder.ok_or("no holder")?;
    let task = store.get(&task_id).await?.ok_or("task gone")?;
    assert!(
        task.receipt.is_some(),
        "the recovered receipt is stored with the task"
    );
    assert_eq!(cluster.settled().await?, 1);
    assert_eq!(
        cluster.facilitator().balance(PAYER).await?,
        payer_before - PRICE
    );
    Ok(())
}
