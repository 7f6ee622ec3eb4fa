//! Paying priced entrypoints (x402) from `invoke`, `stream` and `send`.
//!
//! The key comes from `--pay KEYFILE` (a file holding a hex private key), else from
//! `TASKCTL_PAY_KEY` (the hex key itself). Without either a 402 is an error that names the price.
//! A spend cap (`--max-amount`, 1.0 USDC unless given) refuses a dearer price before anything
//! is signed. The key is never printed, not even in part: errors name its source only.
//!
//! The agent's 402 is not trusted: taskctl signs only for the URL it requested (an x402
//! resource of the same origin and path, an MPP realm naming the requested host, a
//! Sign-In-With-X offer for the requested host and origin), only known networks' USDC, and
//! what it signs is valid for at most `--max-validity-seconds` (`TASKCTL_MAX_VALIDITY_SECONDS`,
//! 300 unless given), whatever the agent asks.

use std::path::PathBuf;
use std::sync::Arc;

use client::Settlement;
use client::pay::{DEFAULT_MAX_VALIDITY_SECONDS, KeyPayer, LocalPayer, Payer, X402Version};
use serde_json::{Value, json};

use crate::Failure;

/// The environment variable holding a hex private key, used when `--pay` is absent.
pub const KEY_VAR: &str = "TASKCTL_PAY_KEY";

/// The spend cap when `--max-amount` is not given, in USDC: enough for ordinary calls, small
/// enough that a mispriced agent cannot take much.
pub const DEFAULT_MAX_AMOUNT: &str = "1.0";

/// The environment variable standing for `--max-validity-seconds`.
pub const MAX_VALIDITY_VAR: &str = "TASKCTL_MAX_VALIDITY_SECONDS";

#[derive(Debug, Clone, clap::Args)]
pub struct PayArgs {
    /// Pay a priced call (x402) with the hex private key in this file. Without it, the key in
    /// TASKCTL_PAY_KEY (the hex key itself) is used when set.
    #[arg(long, value_name = "KEYFILE")]
    pub pay: Option<PathBuf>,
    /// The most one call may cost, in USDC (1.0 unless given); a higher price is refused before
    /// anything is signed or sent.
    #[arg(
        long,
        value_name = "USDC",
        default_value = DEFAULT_MAX_AMOUNT,
        value_parser = parse_usdc,
    )]
    pub max_amount: String,
    /// The x402 version to pay with when the agent offers both (the other when it offers one).
    #[arg(
        long = "x402-version",
        value_name = "1|2",
        default_value_t = 2,
        value_parser = clap::value_parser!(u8).range(1..=2),
    )]
    pub x402_version: u8,
    /// The longest a signed payment stays valid, in seconds: validBefore is at most this far
    /// from now, whatever the agent's maxTimeoutSeconds (or MPP expiry) asks.
    #[arg(
        long,
        value_name = "SECS",
        env = MAX_VALIDITY_VAR,
        default_value_t = DEFAULT_MAX_VALIDITY_SECONDS,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub max_validity_seconds: u64,
}

impl PayArgs {
    /// The payer these flags and `TASKCTL_PAY_KEY` describe; `None` when no key was given.
    pub fn payer(&self) -> Result<Option<Arc<dyn Payer>>, Failure> {
        resolve(self, std::env::var(KEY_VAR).ok().as_deref())
    }
}

/// `--max-amount`: a positive decimal USDC amount with at most six decimals.
fn parse_usdc(text: &str) -> Result<String, String> {
    payments::amount::to_atomic(text)
        .map(|_| text.trim().to_owned())
        .map_err(|err| err.to_string())
}

/// The payer of `args`, with `env` standing for `TASKCTL_PAY_KEY` (the flag wins). A key that
/// cannot be read is a usage error naming where it came from, never what it holds.
pub fn resolve(args: &PayArgs, env: Option<&str>) -> Result<Option<Arc<dyn Payer>>, Failure> {
    let key = if let Some(path) = &args.pay {
        LocalPayer::from_file(path)
            .map_err(|err| Failure::usage(format!("--pay {}: {err}", path.display())))?
    } else if let Some(text) = env.filter(|text| !text.trim().is_empty()) {
        LocalPayer::from_hex(text).map_err(|err| Failure::usage(format!("{KEY_VAR}: {err}")))?
    } else {
        return Ok(None);
    };
    let cap = payments::amount::to_atomic(&args.max_amount)
        .map_err(|err| Failure::usage(format!("--max-amount: {err}")))?;
    let version = match args.x402_version {
        1 => X402Version::V1,
        _ => X402Version::V2,
    };
    Ok(Some(Arc::new(
        KeyPayer::new(key, Some(cap))
            .prefer(version)
            .max_validity(args.max_validity_seconds),
    )))
}

/// The `settlement` member of JSON output: the decoded x402 receipt (`success`, `transaction`,
/// `network`, `payer`, ...), with the raw headers when it does not decode and any
/// `Payment-Receipt`. `None` when the answer carried no payment evidence.
pub fn settlement_json(settlement: &Settlement) -> Option<Value> {
    if settlement.is_empty() {
        return None;
    }
    let mut document = match settlement.receipt() {
        Some(Ok(receipt)) => serde_json::to_value(receipt).unwrap_or_else(|_| json!({})),
        Some(Err(err)) => json!({
            "error": format!("the receipt does not decode: {err}"),
            "paymentResponse": settlement.payment_response,
            "xPaymentResponse": settlement.x_payment_response,
        }),
        None => json!({}),
    };
    if let Some(receipt) = &settlement.payment_receipt {
        document["paymentReceipt"] = json!(receipt);
    }
    Some(document)
}

/// The settlement for people, one line: `success, transaction 0x…, network base-sepolia,
/// payer 0x…`. `None` when the answer carried no payment evidence.
pub fn settlement_text(settlement: &Settlement) -> Option<String> {
    if settlement.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    match settlement.receipt() {
        Some(Ok(receipt)) => {
            parts.push(if receipt.success {
                "success".to_owned()
            } else {
                format!(
                    "failed ({})",
                    receipt.error_reason.as_deref().unwrap_or("no reason given")
                )
            });
            if let Some(amount) = receipt
                .amount
                .as_deref()
                .and_then(|atomic| atomic.parse::<client::pay::U256>().ok())
            {
                parts.push(format!(
                    "amount {} USDC",
                    payments::amount::to_decimal(amount)
                ));
            }
            if !receipt.transaction.is_empty() {
                parts.push(format!("transaction {}", receipt.transaction));
            }
            if !receipt.network.is_empty() {
                parts.push(format!("network {}", receipt.network));
            }
            if let Some(payer) = &receipt.payer {
                parts.push(format!("payer {payer}"));
            }
        }
        Some(Err(err)) => parts.push(format!("receipt does not decode: {err}")),
        None => {}
    }
    if let Some(receipt) = &settlement.payment_receipt {
        parts.push(format!("payment receipt {receipt}"));
    }
    Some(parts.join(", "))
}
