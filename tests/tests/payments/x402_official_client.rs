//! x402's `payment-identifier` extension on a paid invoke, driven by the official x402
//! TypeScript client (`@x402/fetch`, `@x402/evm`, `@x402/extensions`, viem; pinned in
//! tests/js and installed by `scripts/a2a-js-sdk`) against real processes (a private
//! redis-server with AOF, the dev `facilitator`, a `worker` pricing `echo`, two `gateway`s).
//!
//! `tests/js/x402_payment_identifier.mjs` pays the invoke as the client's users do: an
//! `onBeforePaymentCreation` hook appends the id to the extensions our 402 declares, and
//! `wrapFetchWithPayment` answers each 402 with a fresh credential. What is proven: the
//! client's retry with the same id is the first answer again (`Idempotency-Replayed: true`),
//! another id is another paid invoke, and the facilitator settles exactly the two of them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use harness::TestResult;
use harness::paid::{PAYER_KEY, PaidCluster};
use serde::Deserialize;

const ID: &str = "pay_0f1c2d3e4a5b6c7d8e9f00112233aabb";
/// How to get Node.js and the pinned packages, said with every failure to run the script.
const SETUP: &str = "Node.js 20 or later is needed; run `bash scripts/a2a-js-sdk` to install the \
                     pinned x402 packages into tests/js/node_modules";
/// A guard against a client that hangs, not a measure: three paid calls take seconds.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

async fn cluster() -> TestResult<PaidCluster> {
    PaidCluster::start(&[("WORKER_PRICES", "echo=0.001".to_owned())], &[], |card| {
        card["entrypoints"]["echo"]["pricing"]["invoke"].is_string()
    })
    .await
}

/// One call as the script reports it.
#[derive(Debug, Deserialize)]
struct Call {
    id: String,
    /// Whether the 402 the client answered declared `payment-identifier`.
    declared: bool,
    status: u16,
    /// The `Idempotency-Replayed` header, if any.
    replayed: Option<String>,
    body: String,
}

#[derive(Debug, Deserialize)]
struct Report {
    calls: Vec<Call>,
}

/// tests/js, where the script and the packages `scripts/a2a-js-sdk` installs live.
fn js_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("js")
}

/// Runs the script on `url` with `id`, paying as [`PAYER_KEY`] (passed in the environment, as
/// the script reads it, so that it shows in no argument list), and returns its report.
async fn official_client(url: &str, id: &str) -> TestResult<Report> {
    let js = js_dir();
    if !js.join("node_modules/@x402/fetch/package.json").is_file() {
        return Err(format!(
            "the x402 client is not installed in {}: {SETUP}",
            js.display()
        )
        .into());
    }
    let node = std::env::var_os("NODE").unwrap_or("node".into());
    let run = tokio::process::Command::new(&node)
        .arg(js.join("x402_payment_identifier.mjs"))
        .arg(url)
        .arg(id)
        .env("X402_PAYER_KEY", PAYER_KEY)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_LIMIT, run)
        .await
        .map_err(|_| format!("the x402 client did not finish within {SCRIPT_LIMIT:?}"))?
        .map_err(|err| {
            let node = Path::new(&node).display();
            format!("cannot run {node} ({err}): {SETUP}")
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the x402 client exited with {}\nstdout:\n{}\nstderr:\n{}\n{SETUP} if a package is \
             missing",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(serde_json::from_str(stdout.trim())
        .map_err(|err| format!("unreadable report ({err}): {stdout}"))?)
}

#[tokio::test]
async fn the_official_client_retrying_with_the_same_id_gets_the_first_answer_and_pays_once()
-> TestResult {
    let cluster = cluster().await?;
    let url = format!("{}/entrypoints/echo/invoke", cluster.base(0));
    let report = official_client(&url, ID).await?;
    let [first, retry, other] = report.calls.as_slice() else {
        return Err(format!("expected three calls: {report:?}").into());
    };
    for call in [first, retry, other] {
        assert!(
            call.declared,
            "the 402 did not declare the extension: {call:?}"
        );
    }

    // The first call with the id: paid, a fresh answer.
    assert_eq!(first.id, ID);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.replayed, None, "{first:?}");
    assert!(first.body.contains("official x402 client"), "{first:?}");

    // The client's retry: a fresh credential, the same id, the first answer again.
    assert_eq!(retry.id, ID);
    assert_eq!(retry.status, 200, "{retry:?}");
    assert_eq!(retry.replayed.as_deref(), Some("true"), "{retry:?}");
    assert_eq!(retry.body, first.body);

    // Another id: another logical request, paid and answered afresh.
    assert_ne!(other.id, ID);
    assert_eq!(other.status, 200, "{other:?}");
    assert_eq!(other.replayed, None, "{other:?}");
    assert_ne!(other.body, first.body, "another run answers it");

    assert_eq!(cluster.settled().await?, 2, "the retry paid nothing");
    Ok(())
}
