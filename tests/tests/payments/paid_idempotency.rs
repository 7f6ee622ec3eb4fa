//! `Idempotency-Key` on a paid invoke, against real processes (a private redis-server with AOF,
//! the dev `facilitator`, a `worker` pricing `echo`, two `gateway`s): a key belongs to the
//! payer whose signed credential made its record.
//!
//! What is proven: another payer reusing a payer's key and body (with a self-signed, unfunded
//! credential, or a funded one) gets `409 idempotency_key_conflict` and never the stored paid
//! result, and nothing settles for it; the payer's own retry with a fresh credential is
//! replayed without a second settlement; a refused payment under a key is never recorded, so
//! an attacker who uses a key first cannot pin a refusal on its payer.

use harness::TestResult;
use harness::paid::{Invoked, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use payments::payer::PaymentHeader;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Upstream's own example key, which anyone can guess.
const KEY: &str = "summary:document-42-of-the-victim";
/// Anvil #2: funded, but not the victim.
const OTHER_FUNDED_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
/// A valid key the facilitator never funded: its credentials pass every offline check.
const UNFUNDED_KEY: &str = "0x1111111111111111111111111111111111111111111111111111111111111111";

fn body() -> Value {
    json!({"input": {"text": "the victim's confidential document 42"}})
}

async fn cluster() -> TestResult<PaidCluster> {
    PaidCluster::start(&[("WORKER_PRICES", "echo=0.001".to_owned())], &[], |card| {
        card["entrypoints"]["echo"]["pricing"]["invoke"].is_string()
    })
    .await
}

/// A fresh credential by `key` for the 402 of `echo` at gateway `gateway`.
async fn credential(cluster: &PaidCluster, gateway: usize, key: &str) -> TestResult<PaymentHeader> {
    let challenge = cluster.x402_challenge(gateway, "echo", &body()).await?;
    Ok(LocalPayer::from_hex(key)?.answer(&challenge, None, payments::unix_now())?)
}

async fn invoke(
    cluster: &PaidCluster,
    gateway: usize,
    payment: &PaymentHeader,
) -> TestResult<Invoked> {
    cluster
        .invoke(
            gateway,
            "echo",
            &body(),
            payment,
            &[("idempotency-key", KEY)],
        )
        .await
}

#[tokio::test]
async fn another_payer_reusing_a_key_gets_a_conflict_never_the_paid_result() -> TestResult {
    let cluster = cluster().await?;
    let paid = invoke(&cluster, 0, &credential(&cluster, 0, PAYER_KEY).await?).await?;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.body);
    assert!(paid.body.contains("confidential document 42"));
    assert_eq!(cluster.settled().await?, 1);

    // The attack: the same key and body, with a self-signed credential of an unfunded wallet
    // (it passes the offline checks), then with a funded stranger's, at either gateway.
    for (gateway, key) in [(0, UNFUNDED_KEY), (1, UNFUNDED_KEY), (1, OTHER_FUNDED_KEY)] {
        let stolen = invoke(
            &cluster,
            gateway,
            &credential(&cluster, gateway, key).await?,
        )
        .await?;
        assert_eq!(stolen.status, StatusCode::CONFLICT, "{}", stolen.body);
        assert_eq!(stolen.code()?, "idempotency_key_conflict");
        assert!(!stolen.replayed);
        assert!(!stolen.body.contains("confidential"), "{}", stolen.body);
    }
    assert_eq!(
        cluster.settled().await?,
        1,
        "nothing settled for the attacker"
    );

    // The payer's own retry, with a fresh credential, is the same request: replayed, unpaid.
    let retry = invoke(&cluster, 1, &credential(&cluster, 1, PAYER_KEY).await?).await?;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.body);
    assert!(retry.replayed);
    assert_eq!(retry.body, paid.body);
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test]
async fn a_refused_payment_under_a_key_does_not_poison_it() -> TestResult {
    let cluster = cluster().await?;
    // The attacker goes first, with the victim's key and body and a credential that cannot pay:
    // the facilitator refuses it, and that refusal must not become the key's answer.
    let refused = invoke(&cluster, 0, &credential(&cluster, 0, UNFUNDED_KEY).await?).await?;
    assert_eq!(
        refused.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        refused.body
    );
    let again = invoke(&cluster, 1, &credential(&cluster, 1, UNFUNDED_KEY).await?).await?;
    assert_eq!(again.status, StatusCode::PAYMENT_REQUIRED, "{}", again.body);
    assert!(!again.replayed, "a payment refusal was recorded");

    let paid = invoke(&cluster, 1, &credential(&cluster, 1, PAYER_KEY).await?).await?;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.body);
    assert!(!paid.replayed);
    assert!(paid.body.contains("confidential document 42"));
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}
