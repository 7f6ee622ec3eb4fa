//! x402's `payment-identifier` extension on a paid invoke, against real processes (a private
//! redis-server with AOF, the dev `facilitator`, a `worker` pricing `echo`, two `gateway`s).
//!
//! What is proven: the invoke route's `402` declares the extension (task creation's does not:
//! it keeps no answers to replay); a payer's retry with a fresh credential and the same id is
//! the first answer again (`Idempotency-Replayed: true`) and nothing settles twice, on either
//! gateway; another payer with the same id and body gets `409 idempotency_key_conflict`,
//! never the paid result; the same payer with the same id and another body gets the same
//! conflict; an id of the wrong shape is a `402` saying why, and nothing is charged.

use harness::TestResult;
use harness::paid::{Invoked, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use payments::payer::PaymentHeader;
use payments::payment_identifier;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Anvil #2: funded, but another payer.
const OTHER_PAYER_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
const ID: &str = "pay_7d5d747be160e280504c099d984bcfe0";

fn body(text: &str) -> Value {
    json!({"input": {"text": text}})
}

async fn cluster() -> TestResult<PaidCluster> {
    PaidCluster::start(&[("WORKER_PRICES", "echo=0.001".to_owned())], &[], |card| {
        card["entrypoints"]["echo"]["pricing"]["invoke"].is_string()
    })
    .await
}

/// A fresh credential by `key` for the 402 of `echo` with `body` at gateway `gateway`, its v2
/// payload carrying `id` as its payment identifier (as an x402 client's hook adds it: the
/// signature does not cover extensions).
async fn credential(
    cluster: &PaidCluster,
    gateway: usize,
    key: &str,
    body: &Value,
    id: &str,
) -> TestResult<PaymentHeader> {
    let challenge = cluster.x402_challenge(gateway, "echo", body).await?;
    let mut header = LocalPayer::from_hex(key)?.answer(&challenge, None, payments::unix_now())?;
    let mut document: Value = payments::wire::decode(&header.value)?;
    payment_identifier::attach(&mut document, id);
    header.value = payments::wire::encode(&document);
    Ok(header)
}

async fn invoke(
    cluster: &PaidCluster,
    gateway: usize,
    body: &Value,
    payment: &PaymentHeader,
) -> TestResult<Invoked> {
    cluster.invoke(gateway, "echo", body, payment, &[]).await
}

/// The `extensions` of the v2 challenge (`PAYMENT-REQUIRED`) of an unpaid POST to `url`.
async fn challenge_extensions(cluster: &PaidCluster, url: &str, body: &Value) -> TestResult<Value> {
    let unpaid = cluster
        .http
        .post(url)
        .header("Task-Access-Token", "payment-identifier-suite-token-0123")
        .json(body)
        .send()
        .await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED, "{url}");
    let header = unpaid
        .headers()
        .get("payment-required")
        .and_then(|value| value.to_str().ok())
        .ok_or("no PAYMENT-REQUIRED header")?;
    let challenge: Value = payments::wire::decode(header)?;
    Ok(challenge["extensions"].clone())
}

#[tokio::test]
async fn the_invoke_challenge_declares_the_extension_and_task_creation_does_not() -> TestResult {
    let cluster = cluster().await?;
    let base = cluster.base(0);
    let invoke = challenge_extensions(
        &cluster,
        &format!("{base}/entrypoints/echo/invoke"),
        &body("x"),
    )
    .await?;
    assert_eq!(
        invoke[payment_identifier::NAME]["info"]["required"],
        false,
        "{invoke}"
    );
    let task = challenge_extensions(
        &cluster,
        &format!("{base}/tasks"),
        &json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "x"}}}),
    )
    .await?;
    assert!(task.get(payment_identifier::NAME).is_none(), "{task}");
    Ok(())
}

#[tokio::test]
async fn a_retry_with_the_same_id_is_replayed_and_charged_once() -> TestResult {
    let cluster = cluster().await?;
    let request = body("order 42, paid once");
    let first = credential(&cluster, 0, PAYER_KEY, &request, ID).await?;
    let paid = invoke(&cluster, 0, &request, &first).await?;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.body);
    assert!(!paid.replayed);
    assert!(paid.body.contains("order 42"), "{}", paid.body);
    assert_eq!(cluster.settled().await?, 1);

    // The client's retry: a fresh credential (new nonce), the same id, on either gateway.
    for gateway in [0, 1] {
        let retry = credential(&cluster, gateway, PAYER_KEY, &request, ID).await?;
        let again = invoke(&cluster, gateway, &request, &retry).await?;
        assert_eq!(again.status, StatusCode::OK, "{}", again.body);
        assert!(again.replayed, "gateway {gateway}");
        assert_eq!(again.body, paid.body);
    }
    assert_eq!(cluster.settled().await?, 1, "the retries paid nothing");

    // Another payer with the same id and body: a conflict, never the payer's result.
    let stranger = credential(&cluster, 1, OTHER_PAYER_KEY, &request, ID).await?;
    let stolen = invoke(&cluster, 1, &request, &stranger).await?;
    assert_eq!(stolen.status, StatusCode::CONFLICT, "{}", stolen.body);
    assert_eq!(stolen.code()?, "idempotency_key_conflict");
    assert!(!stolen.body.contains("order 42"), "{}", stolen.body);

    // The payer with the same id and another body: the same conflict (the id is one request).
    let other = body("order 43");
    let changed = credential(&cluster, 0, PAYER_KEY, &other, ID).await?;
    let conflict = invoke(&cluster, 0, &other, &changed).await?;
    assert_eq!(conflict.status, StatusCode::CONFLICT, "{}", conflict.body);
    assert_eq!(conflict.code()?, "idempotency_key_conflict");
    assert_eq!(cluster.settled().await?, 1, "nothing settled for either");
    Ok(())
}

#[tokio::test]
async fn an_id_of_the_wrong_shape_is_refused_before_anything_is_charged() -> TestResult {
    let cluster = cluster().await?;
    let request = body("x");
    for bad in ["too-short", "pay 7d5d747be160e280504c099d984bcfe0"] {
        let payment = credential(&cluster, 0, PAYER_KEY, &request, bad).await?;
        let refused = invoke(&cluster, 0, &request, &payment).await?;
        assert_eq!(
            refused.status,
            StatusCode::PAYMENT_REQUIRED,
            "{bad}: {}",
            refused.body
        );
        assert!(
            refused.body.contains("payment-identifier"),
            "{}",
            refused.body
        );
    }
    assert_eq!(cluster.settled().await?, 0);
    Ok(())
}
