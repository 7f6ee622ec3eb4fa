//! Metered prices (`--price summarize=upto:0.01`) against real processes (a private
//! redis-server with AOF, the dev `facilitator` settling x402's `upto` scheme, a `worker`
//! whose built-in `summarize` reports `usage.charge` at one millionth of a USDC per word, two
//! `gateway`s).
//!
//! What is proven: the 402 offers `upto` with the maximum and the facilitator's address; a
//! payer's Permit2 authorization of the maximum is settled, after the run, for what the run
//! reported, the receipt showing both (`amount`, `maxAmount`), the payer's balance moving by
//! that much only; the official x402 client (@x402/fetch with @x402/evm's `UptoEvmScheme`)
//! pays the same route; an `exact` credential on the `upto` route and an `upto` one on an
//! `exact` route are refused with a fresh challenge.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use harness::TestResult;
use harness::paid::{PAYER, PAYER_KEY, PaidCluster};
use payments::LocalPayer;
use payments::payer::Challenge;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `summarize`'s maximum in atomic USDC (0.01).
const MAX: u128 = 10_000;
const TEXT: &str = "Metered work costs what it uses. Nine words are in this text here.";
/// The words of [`TEXT`]: what `summarize` reports, in atomic USDC.
const WORDS: u128 = 13;
const SETUP: &str = "Node.js 20 or later is needed; run `bash scripts/a2a-js-sdk` to install the \
                     pinned x402 packages into tests/js/node_modules";
/// A guard against a client that hangs, not a measure.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

async fn cluster() -> TestResult<PaidCluster> {
    PaidCluster::start(
        &[("WORKER_PRICES", "summarize=upto:0.01,echo=0.001".to_owned())],
        &[],
        // The card says the price is a maximum, settled after the run.
        |card| {
            let summarize = &card["entrypoints"]["summarize"]["pricing"];
            summarize["invoke"] == "0.01"
                && summarize["scheme"] == "upto"
                && summarize["settle"] == "after"
                && card["entrypoints"]["echo"]["pricing"]["invoke"].is_string()
        },
    )
    .await
}

fn decode(header: &str) -> TestResult<Value> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(header.trim())?;
    Ok(serde_json::from_slice(&bytes)?)
}

fn encode(document: &Value) -> TestResult<String> {
    Ok(base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(document)?))
}

/// The decoded `PAYMENT-REQUIRED` of an unpaid invoke of `entrypoint`.
async fn required(cluster: &PaidCluster, entrypoint: &str, body: &Value) -> TestResult<Value> {
    let unpaid = cluster
        .http
        .post(format!(
            "{}/entrypoints/{entrypoint}/invoke",
            cluster.base(0)
        ))
        .json(body)
        .send()
        .await?;
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let header = unpaid
        .headers()
        .get(payments::PAYMENT_REQUIRED)
        .ok_or("no PAYMENT-REQUIRED")?
        .to_str()?
        .to_owned();
    decode(&header)
}

/// A credential for the (possibly edited) challenge `required`.
fn pay(required: &Value) -> TestResult<payments::payer::PaymentHeader> {
    let challenge = Challenge::from_response(Some(&encode(required)?), b"")?;
    Ok(LocalPayer::from_hex(PAYER_KEY)?.answer(&challenge, None, payments::unix_now())?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_metered_invoke_settles_what_the_run_used_up_to_its_maximum() -> TestResult {
    let cluster = cluster().await?;
    let facilitator = cluster.facilitator();
    let payer_before = facilitator.balance(PAYER).await?;
    let body = json!({"input": {"text": TEXT}});

    // The offer: upto, the maximum, and who may settle it.
    let offer = required(&cluster, "summarize", &body).await?;
    let accepted = &offer["accepts"][0];
    assert_eq!(accepted["scheme"], "upto", "{offer}");
    assert_eq!(accepted["amount"], MAX.to_string());
    assert!(
        accepted["extra"]["facilitatorAddress"].is_string(),
        "{offer}"
    );

    // x402 v1 has no upto: its body offers nothing to pay.
    let v1: Value = cluster
        .http
        .post(format!("{}/entrypoints/summarize/invoke", cluster.base(0)))
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(v1["accepts"], json!([]), "{v1}");

    // Paid with a Permit2 authorization of the maximum; settled for the words summarized.
    let payment = pay(&offer)?;
    let answer = cluster.invoke(0, "summarize", &body, &payment, &[]).await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let result: Value = serde_json::from_str(&answer.body)?;
    assert_eq!(result["usage"]["words"], json!(WORDS as u64), "{result}");
    assert_eq!(result["usage"]["charge"], "0.000013");
    let replay = cluster
        .http
        .post(format!("{}/entrypoints/summarize/invoke", cluster.base(1)))
        .header(payment.name, &payment.value)
        .json(&body)
        .send()
        .await?;
    // The authorization is spent: a second use is refused (and carries no receipt).
    assert_ne!(replay.status(), StatusCode::OK);
    assert_eq!(facilitator.stats().await?.settled, 1);
    assert_eq!(facilitator.balance(PAYER).await?, payer_before - WORDS);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_receipt_shows_the_amount_charged_and_the_maximum() -> TestResult {
    let cluster = cluster().await?;
    let body = json!({"input": {"text": TEXT}});
    let payment = pay(&required(&cluster, "summarize", &body).await?)?;
    let answer = cluster
        .http
        .post(format!("{}/entrypoints/summarize/invoke", cluster.base(0)))
        .header(payment.name, &payment.value)
        .json(&body)
        .send()
        .await?;
    assert_eq!(answer.status(), StatusCode::OK);
    let receipt = decode(
        answer
            .headers()
            .get(payments::PAYMENT_RESPONSE)
            .ok_or("no receipt")?
            .to_str()?,
    )?;
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["amount"], WORDS.to_string(), "{receipt}");
    assert_eq!(receipt["maxAmount"], MAX.to_string(), "{receipt}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_of_the_other_scheme_is_refused() -> TestResult {
    let cluster = cluster().await?;
    let body = json!({"input": {"text": TEXT}});

    // An exact (EIP-3009) authorization of the maximum, for the upto route.
    let mut offer = required(&cluster, "summarize", &body).await?;
    offer["accepts"][0]["scheme"] = json!("exact");
    let exact = pay(&offer)?;
    let refused = cluster.invoke(0, "summarize", &body, &exact, &[]).await?;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{refused:?}");
    assert!(
        refused
            .body
            .contains(r#"is an \"exact\" credential; this route is paid with \"upto\""#),
        "{refused:?}"
    );

    // An upto (Permit2) authorization for the exact route.
    let echo = json!({"input": {"x": 1}});
    let mut offer = required(&cluster, "echo", &echo).await?;
    let facilitator =
        required(&cluster, "summarize", &body).await?["accepts"][0]["extra"]["facilitatorAddress"]
            .clone();
    offer["accepts"][0]["scheme"] = json!("upto");
    offer["accepts"][0]["extra"]["facilitatorAddress"] = facilitator;
    let upto = pay(&offer)?;
    let refused = cluster.invoke(0, "echo", &echo, &upto, &[]).await?;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{refused:?}");
    assert!(
        refused
            .body
            .contains(r#"is an \"upto\" credential; this route is paid with \"exact\""#),
        "{refused:?}"
    );

    assert_eq!(cluster.facilitator().stats().await?.settled, 0);
    Ok(())
}

/// What `tests/js/x402_upto_invoke.mjs` reports.
#[derive(Debug, serde::Deserialize)]
struct Report {
    status: u16,
    body: String,
    receipt: Option<Value>,
}

fn js_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("js")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_client_pays_a_metered_invoke() -> TestResult {
    let js = js_dir();
    if !js.join("node_modules/@x402/fetch/package.json").is_file() {
        return Err(format!(
            "the x402 client is not installed in {}: {SETUP}",
            js.display()
        )
        .into());
    }
    let cluster = cluster().await?;
    let payer_before = cluster.facilitator().balance(PAYER).await?;
    let url = format!("{}/entrypoints/summarize/invoke", cluster.base(0));
    let body = json!({"input": {"text": TEXT}}).to_string();
    let node = std::env::var_os("NODE").unwrap_or("node".into());
    let run = tokio::process::Command::new(&node)
        .arg(js.join("x402_upto_invoke.mjs"))
        .arg(&url)
        .arg(&body)
        .env("X402_PAYER_KEY", PAYER_KEY)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_LIMIT, run)
        .await
        .map_err(|_| format!("the x402 client did not finish within {SCRIPT_LIMIT:?}"))?
        .map_err(|err| format!("cannot run {} ({err}): {SETUP}", Path::new(&node).display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the x402 client exited with {}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let report: Report = serde_json::from_str(stdout.trim())?;
    assert_eq!(report.status, 200, "{report:?}");
    let result: Value = serde_json::from_str(&report.body)?;
    assert_eq!(result["usage"]["charge"], "0.000013", "{result}");
    let receipt = report.receipt.ok_or("the client read no receipt")?;
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["amount"], WORDS.to_string(), "{receipt}");
    assert_eq!(
        cluster.facilitator().balance(PAYER).await?,
        payer_before - WORDS
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_agent_reports_its_usage_as_built_ins_do() -> TestResult {
    // The remote agent: an embedded gateway serving the built-ins over the Lucid profile; its
    // `summarize` answers with `usage.charge`, which the worker relays like any handler's.
    let agent = harness::cluster::gateway("remote-agent", &[], &[]).await?;
    let cluster = PaidCluster::start(
        &[
            ("WORKER_AGENTS", agent.base.clone()),
            ("WORKER_PRICES", "summarize=upto:0.01".to_owned()),
        ],
        &[],
        |card| card["entrypoints"]["summarize"]["pricing"]["invoke"].is_string(),
    )
    .await?;
    let payer_before = cluster.facilitator().balance(PAYER).await?;
    let body = json!({"input": {"text": TEXT}});
    let payment = pay(&required(&cluster, "summarize", &body).await?)?;
    let answer = cluster.invoke(0, "summarize", &body, &payment, &[]).await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        cluster.facilitator().balance(PAYER).await?,
        payer_before - WORDS
    );
    Ok(())
}
