//! A flood of credentials that cannot pay, against real processes (a private redis-server with
//! AOF, the dev `facilitator`, a `worker` pricing `echo`, two `gateway`s with room for only
//! four live tasks): self-signed authorizations from wallets the facilitator never funded pass
//! every offline check, so only the facilitator can tell them apart.
//!
//! What is proven: 1,000 of them (800 from one wallet, 200 from 200 fresh wallets) never hold
//! a task slot (a paying caller in the middle of the flood runs, with `MAX_TASKS=4`), and the
//! one wallet's 800 cost the facilitator at most a handful of verify calls (its refusal is
//! remembered); nothing of the flood is a 5xx other than a busy gateway's 503 with
//! Retry-After, and nothing settles but the payer's call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use harness::TestResult;
use harness::paid::{PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use payments::payer::PaymentHeader;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A wallet the facilitator never funded.
const UNFUNDED_KEY: &str = "0x1111111111111111111111111111111111111111111111111111111111111111";
const FROM_ONE_WALLET: usize = 800;
const FRESH_WALLETS: usize = 200;
/// Requests of the flood in flight at once.
const CONCURRENCY: usize = 48;

async fn facilitator_verifies(cluster: &PaidCluster) -> TestResult<u64> {
    let stats: Value = cluster
        .http
        .get(format!("{}/control/stats", cluster.facilitator_base()))
        .send()
        .await?
        .json()
        .await?;
    stats["verify"]
        .as_u64()
        .ok_or_else(|| "no verify count".into())
}

async fn send(
    http: &reqwest::Client,
    base: &str,
    payment: &PaymentHeader,
    n: usize,
) -> TestResult<(StatusCode, Value)> {
    let response = http
        .post(format!("{base}/entrypoints/echo/invoke"))
        .header(payment.name, &payment.value)
        .json(&json!({"input": {"n": n}}))
        .send()
        .await?;
    let status = response.status();
    let retry_after = response.headers().contains_key("retry-after");
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_server_error() {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(retry_after, "a 503 without Retry-After: {body}");
        assert_ne!(body["error"]["code"], "task_capacity_exhausted", "{body}");
    }
    Ok((status, body))
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_credentials_hold_no_slot_and_cost_the_facilitator_little() -> TestResult {
    let cluster = PaidCluster::start(
        &[("WORKER_PRICES", "echo=0.001".to_owned())],
        &[("MAX_TASKS", "4".to_owned())],
        |card| card["entrypoints"]["echo"]["pricing"]["invoke"].is_string(),
    )
    .await?;
    let challenge = cluster
        .x402_challenge(0, "echo", &json!({"input": {"n": 0}}))
        .await?;
    let now = payments::unix_now();
    let one_wallet = LocalPayer::from_hex(UNFUNDED_KEY)?;
    let mut forged = Vec::with_capacity(FROM_ONE_WALLET + FRESH_WALLETS);
    for _ in 0..FROM_ONE_WALLET {
        forged.push(one_wallet.answer(&challenge, None, now)?);
    }
    for i in 0..FRESH_WALLETS {
        let fresh = LocalPayer::from_hex(&format!("0x{:064x}", 0x5eed_0000 + i))?;
        forged.push(fresh.answer(&challenge, None, now)?);
    }

    // The flood, over both gateways; the payer calls once a tenth of it was answered.
    let answered = Arc::new(AtomicUsize::new(0));
    let (tenth_tx, tenth_rx) = tokio::sync::oneshot::channel::<()>();
    let tenth_tx = Arc::new(std::sync::Mutex::new(Some(tenth_tx)));
    let bases = [cluster.base(0).to_owned(), cluster.base(1).to_owned()];
    let http = cluster.http.clone();
    let flood = tokio::spawn({
        let answered = answered.clone();
        async move {
            let results: Vec<Result<(StatusCode, Value), String>> =
                futures::stream::iter(forged.into_iter().enumerate())
                    .map(|(i, payment)| {
                        let http = http.clone();
                        let base = bases[i % 2].clone();
                        let answered = answered.clone();
                        let tenth_tx = tenth_tx.clone();
                        async move {
                            let result = send(&http, &base, &payment, i).await;
                            let done = answered.fetch_add(1, Ordering::SeqCst) + 1;
                            if done == (FROM_ONE_WALLET + FRESH_WALLETS) / 10
                                && let Some(tx) = tenth_tx
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                                    .take()
                            {
                                let _ = tx.send(());
                            }
                            result.map_err(|err| err.to_string())
                        }
                    })
                    .buffer_unordered(CONCURRENCY)
                    .collect()
                    .await;
            results
        }
    });
    tenth_rx.await?;
    let payer = LocalPayer::from_hex(PAYER_KEY)?;
    let paid = payer.answer(&challenge, None, payments::unix_now())?;
    let (status, body) = send(&cluster.http, cluster.base(0), &paid, 4242).await?;
    assert_eq!(
        status,
        StatusCode::OK,
        "the paying caller was refused: {body}"
    );
    assert_eq!(body["output"], json!({"n": 4242}));

    let mut counts = std::collections::BTreeMap::new();
    for result in flood.await? {
        let (status, body) =
            result.map_err(|err| -> Box<dyn std::error::Error + Send + Sync> { err.into() })?;
        assert_ne!(status, StatusCode::OK, "a forged credential ran: {body}");
        *counts.entry(status.as_u16()).or_insert(0usize) += 1;
    }
    // Refused (402), told to slow down (429), or a busy gateway's 503; nothing else.
    for status in counts.keys() {
        assert!([402, 429, 503].contains(status), "{counts:?}");
    }
    assert_eq!(cluster.settled().await?, 1);
    // The one wallet's 800: at most its eight pending places per gateway before the first
    // refusal is remembered. The fresh wallets: one each at most. The payer: one.
    let verifies = facilitator_verifies(&cluster).await?;
    assert!(
        verifies <= (8 * 2 + FRESH_WALLETS + 1) as u64,
        "{verifies} verify calls for {counts:?}"
    );
    Ok(())
}
