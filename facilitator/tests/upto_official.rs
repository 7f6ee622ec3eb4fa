//! The `upto` scheme against the official x402 TypeScript implementation (@x402/evm and
//! @x402/core 2.27.0 with viem, pinned in tests/js and installed by `scripts/a2a-js-sdk`),
//! through `tests/js/x402_upto.mjs`:
//!
//! - the official client (`x402Client` + `UptoEvmScheme`, viem's `privateKeyToAccount` for
//!   Anvil key #0) answers our upto challenge; its `PAYMENT-SIGNATURE` passes our offline
//!   precheck and our dev facilitator verifies it and settles the actual amount;
//! - our Rust payer's credential passes the official facilitator's `UptoEvmScheme` (over a
//!   stub signer with no chain: ECDSA recovery for the payer, simulations that succeed), which
//!   settles it the way ours does (above the maximum refused, zero with an empty transaction,
//!   the actual amount sent to the proxy), and both facilitators refuse the same tampered
//!   permits with the same reasons.
//!
//! Skipped, saying why, when Node.js or tests/js/node_modules is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use alloy_primitives::{Address, U256};
use anyhow::{Context, bail};
use common::{ANVIL_KEY_0, anvil_payer, start_default, unix_now, upto_terms};
use facilitator::config::default_address;
use payments::payer::Challenge;
use payments::{Credential, Facilitator, X402Version, precheck};
use serde_json::{Value, json};

/// How to get Node.js and the pinned packages, said when the test is skipped.
const SETUP: &str = "Node.js 20 or later is needed; run `bash scripts/a2a-js-sdk` to install \
                     the pinned x402 packages into tests/js/node_modules";
/// A guard against a script that hangs, not a measure: each run takes about a second.
const SCRIPT_LIMIT: Duration = Duration::from_secs(60);
const MAX: u64 = 5000;

/// tests/js, where the script and the packages live.
fn js_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/js")
}

/// Why the official implementation cannot be run here, if it cannot.
fn unavailable() -> Option<String> {
    let js = js_dir();
    if !js.join("node_modules/@x402/evm/package.json").is_file() {
        return Some(format!("@x402/evm is not installed in {}", js.display()));
    }
    let node = std::env::var_os("NODE").unwrap_or("node".into());
    match std::process::Command::new(&node)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(output) if output.status.success() => None,
        _ => Some(format!("{} does not run", Path::new(&node).display())),
    }
}

/// Skips the calling test, saying why, when the official implementation cannot run.
macro_rules! official_or_skip {
    () => {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}. {SETUP}");
            return Ok(());
        }
    };
}

/// Runs `x402_upto.mjs <mode>` with `input` on stdin; its one JSON line.
async fn official(mode: &str, input: &Value) -> anyhow::Result<Value> {
    use tokio::io::AsyncWriteExt;
    let node = std::env::var_os("NODE").unwrap_or("node".into());
    let mut child = tokio::process::Command::new(&node)
        .arg(js_dir().join("x402_upto.mjs"))
        .arg(mode)
        // Read by the script from its environment, so that it shows in no argument list.
        .env("X402_PAYER_KEY", ANVIL_KEY_0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {}", Path::new(&node).display()))?;
    let mut stdin = child.stdin.take().context("the script's stdin")?;
    stdin.write_all(&serde_json::to_vec(input)?).await?;
    drop(stdin);
    let output = tokio::time::timeout(SCRIPT_LIMIT, child.wait_with_output())
        .await
        .with_context(|| format!("x402_upto.mjs {mode} did not finish in {SCRIPT_LIMIT:?}"))??;
    if !output.status.success() {
        bail!(
            "x402_upto.mjs {mode} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

#[tokio::test]
async fn the_official_client_pays_and_we_verify_and_settle() -> anyhow::Result<()> {
    official_or_skip!();
    let server = start_default().await?;
    let payee = Address::repeat_byte(0x61);
    let terms = upto_terms(MAX, payee, default_address())?;
    let paid = official("pay", &serde_json::to_value(terms.challenge_v2(None))?).await?;
    let header = paid["header"]
        .as_str()
        .context("a PAYMENT-SIGNATURE header")?;

    // Our offline checks, as a gateway does them.
    let credential = Credential::decode(X402Version::V2, header)?;
    let payer = anvil_payer()?.address();
    assert_eq!(precheck(&credential, &terms, unix_now()), Ok(payer));
    assert_eq!(credential.scheme(), "upto");
    assert_eq!(credential.max_amount(), U256::from(MAX));
    let permit = credential.upto().context("an upto permit")?;
    assert_eq!(permit.facilitator, default_address());
    assert_eq!(permit.to, payee);
    // The official client signs from validAfter 0 to now + maxTimeoutSeconds.
    assert_eq!(permit.valid_after, 0);
    assert!(permit.deadline <= unix_now() + terms.max_timeout_seconds);

    // Our dev facilitator: verified for the maximum, settled for the actual amount.
    let verify = payments::facilitator::request(&credential, &terms);
    let verified = server.client.verify(&verify).await?;
    assert!(verified.is_valid, "{verified:?}");
    let settle = payments::facilitator::upto_settlement(&credential, &terms, U256::from(1234u64))?;
    let settled = server.client.settle(&settle).await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.settled_amount(), Some(U256::from(1234u64)));
    assert_eq!(server.balance(payee).await?, U256::from(1234u64));
    Ok(())
}

#[tokio::test]
async fn the_official_facilitator_accepts_our_payer_and_refuses_as_we_do() -> anyhow::Result<()> {
    official_or_skip!();
    let facilitator = default_address();
    let terms = upto_terms(MAX, Address::repeat_byte(0x62), facilitator)?;
    let header =
        anvil_payer()?.answer(&Challenge::V2(terms.challenge_v2(None)), None, unix_now())?;
    let credential = Credential::decode(header.version, &header.value)?;
    let request = payments::facilitator::request(&credential, &terms);
    let input = |payload: &Value, settle: &[&str]| {
        json!({
            "paymentPayload": payload,
            "paymentRequirements": request.payment_requirements,
            "facilitator": facilitator.to_checksum(None),
            "settleAmounts": settle,
        })
    };

    let answer = official(
        "facilitate",
        &input(&request.payment_payload, &["5001", "0", "1234"]),
    )
    .await?;
    assert_eq!(answer["verify"]["isValid"], true, "{answer}");
    assert_eq!(
        answer["verify"]["payer"],
        anvil_payer()?.address().to_checksum(None)
    );
    let settles = &answer["settles"];
    assert_eq!(
        settles[0]["response"]["errorReason"],
        "invalid_upto_evm_payload_settlement_exceeds_amount"
    );
    assert_eq!(settles[1]["response"]["success"], true);
    assert_eq!(settles[1]["response"]["transaction"], "");
    assert_eq!(settles[1]["response"]["amount"], "0");
    assert_eq!(settles[1]["written"], Value::Null);
    assert_eq!(settles[2]["response"]["success"], true);
    assert_eq!(settles[2]["response"]["amount"], "1234");
    assert_eq!(settles[2]["written"], "1234");

    // Tampered permits: both facilitators refuse each with the same reason.
    let later = (unix_now() + 3600).to_string();
    let now = unix_now().to_string();
    let other = Address::repeat_byte(0x99).to_checksum(None);
    let tamperings: [(&str, &str, Value, &str); 8] = [
        (
            "spender",
            "/spender",
            json!(other),
            "invalid_permit2_spender",
        ),
        (
            "payee",
            "/witness/to",
            json!(other),
            "invalid_permit2_recipient_mismatch",
        ),
        (
            "facilitator",
            "/witness/facilitator",
            json!(other),
            "upto_facilitator_mismatch",
        ),
        (
            "deadline",
            "/deadline",
            json!(now),
            "permit2_deadline_expired",
        ),
        (
            "validAfter",
            "/witness/validAfter",
            json!(later),
            "permit2_not_yet_valid",
        ),
        (
            "amount",
            "/permitted/amount",
            json!("5001"),
            "permit2_amount_mismatch",
        ),
        (
            "token",
            "/permitted/token",
            json!(other),
            "permit2_token_mismatch",
        ),
        ("nonce", "/nonce", json!("1"), "invalid_permit2_signature"),
    ];
    let mut cases = Vec::new();
    for (_, path, value, _) in &tamperings {
        let mut payload = request.payment_payload.clone();
        let field = payload
            .pointer_mut(&format!("/payload/permit2Authorization{path}"))
            .context("a permit field")?;
        *field = value.clone();
        cases.push(payload);
    }
    let inputs: Vec<Value> = cases.iter().map(|payload| input(payload, &[])).collect();
    let answers = official("facilitate", &Value::Array(inputs)).await?;
    let server = start_default().await?;
    for (index, (what, _, _, reason)) in tamperings.iter().enumerate() {
        assert_eq!(
            answers[index]["verify"]["invalidReason"], *reason,
            "official, {what}: {}",
            answers[index]
        );
        let mut ours = request.clone();
        ours.payment_payload = cases[index].clone();
        let verified = server.client.verify(&ours).await?;
        assert_eq!(
            verified.invalid_reason.as_deref(),
            Some(*reason),
            "ours, {what}"
        );
    }
    Ok(())
}
