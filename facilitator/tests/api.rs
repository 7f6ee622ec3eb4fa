//! The x402 API against the memory ledger, through `payments::HttpFacilitator`.

mod common;

use alloy_primitives::{Address, U256};
use anyhow::Context;
use common::{anvil_payer, request, start_default, terms, unfunded_payer};
use facilitator::ledger::transaction_hash;
use facilitator::verify::reason;
use payments::{Credential, Facilitator, X402Version};
use serde_json::{Value, json};

/// 1000 USDC, what every Anvil account starts with.
const STARTING_BALANCE: u64 = 1_000_000_000;

#[tokio::test]
async fn verifies_valid_credentials_of_both_versions() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let terms = terms(1000, Address::repeat_byte(0x21))?;
    for version in [1, 2] {
        let answer = server
            .client
            .verify(&request(&payer, &terms, version)?)
            .await?;
        assert!(answer.is_valid, "v{version}: {answer:?}");
        assert_eq!(answer.invalid_reason, None);
        assert_eq!(answer.payer, Some(payer.address().to_checksum(None)));
    }
    // Verifying moves nothing.
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE)
    );
    assert_eq!(
        server.stats().await?,
        json!({"verify": 2, "settle": 0, "settled": 0})
    );
    Ok(())
}

#[tokio::test]
async fn refuses_a_signature_over_other_terms() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let terms = terms(1000, Address::repeat_byte(0x22))?;
    let mut forged = request(&payer, &terms, 2)?;
    // The signature of another authorization (another nonce): valid bytes, wrong signer.
    let other = request(&payer, &terms, 2)?;
    forged.payment_payload["payload"]["signature"] =
        other.payment_payload["payload"]["signature"].clone();
    let answer = server.client.verify(&forged).await?;
    assert!(!answer.is_valid);
    assert_eq!(
        answer.invalid_reason.as_deref(),
        Some("invalid_exact_evm_payload_signature")
    );

    let settled = server.client.settle(&forged).await?;
    assert!(!settled.success);
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE)
    );
    Ok(())
}

#[tokio::test]
async fn refuses_mismatched_requirements_and_versions() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let paid = terms(1000, Address::repeat_byte(0x23))?;

    // The credential pays 1000; the requirements now ask for 2000.
    let mut pricier = request(&payer, &paid, 2)?;
    pricier.payment_requirements =
        serde_json::to_value(terms(2000, paid.pay_to)?.requirements_v2())?;
    let answer = server.client.verify(&pricier).await?;
    assert_eq!(
        answer.invalid_reason.as_deref(),
        Some("invalid_payment_requirements")
    );
    assert_eq!(answer.payer, Some(payer.address().to_checksum(None)));

    let mut unknown = request(&payer, &paid, 2)?;
    unknown.x402_version = 3;
    let answer = server.client.verify(&unknown).await?;
    assert!(!answer.is_valid);
    assert_eq!(
        answer.invalid_reason.as_deref(),
        Some(reason::INVALID_VERSION)
    );

    // A v2 document announced as v1.
    let mut crossed = request(&payer, &paid, 2)?;
    crossed.x402_version = 1;
    let answer = server.client.verify(&crossed).await?;
    assert!(!answer.is_valid);
    assert_eq!(
        answer.invalid_reason.as_deref(),
        Some(reason::INVALID_VERSION)
    );
    Ok(())
}

#[tokio::test]
async fn settles_once_and_moves_the_funds() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x24);
    let terms = terms(1500, payee)?;
    let request = request(&payer, &terms, 2)?;

    let settled = server.client.settle(&request).await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.error_reason, None);
    assert_eq!(settled.payer, Some(payer.address().to_checksum(None)));
    assert_eq!(settled.network, "eip155:84532");
    assert_eq!(settled.amount.as_deref(), Some("1500"));
    let credential = Credential::from_document(X402Version::V2, request.payment_payload.clone())?;
    assert_eq!(
        settled.transaction,
        transaction_hash(&credential.nonce_key()).to_string()
    );
    assert!(settled.transaction.starts_with("0x") && settled.transaction.len() == 66);
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE - 1500)
    );
    assert_eq!(server.balance(payee).await?, U256::from(1500u64));

    // The same credential again: refused, nothing moves.
    let again = server.client.settle(&request).await?;
    assert!(!again.success);
    assert_eq!(again.error_reason.as_deref(), Some(reason::NONCE_USED));
    assert_eq!(again.transaction, "");
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE - 1500)
    );
    assert_eq!(server.balance(payee).await?, U256::from(1500u64));
    let verified = server.client.verify(&request).await?;
    assert_eq!(verified.invalid_reason.as_deref(), Some(reason::NONCE_USED));

    assert_eq!(
        server.stats().await?,
        json!({"verify": 1, "settle": 2, "settled": 1})
    );
    Ok(())
}

#[tokio::test]
async fn settles_v1_credentials_with_the_network_name() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x25);
    let settled = server
        .client
        .settle(&request(&payer, &terms(7, payee)?, 1)?)
        .await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.network, "base-sepolia");
    assert_eq!(server.balance(payee).await?, U256::from(7u64));
    Ok(())
}

#[tokio::test]
async fn concurrent_settles_of_one_credential_move_funds_once() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x26);
    let request = request(&payer, &terms(1000, payee)?, 2)?;
    let attempts = (0..16).map(|_| server.client.settle(&request));
    let answers = futures::future::join_all(attempts).await;
    let mut successes = 0;
    for answer in answers {
        if answer?.success {
            successes += 1;
        }
    }
    assert_eq!(successes, 1);
    assert_eq!(server.balance(payee).await?, U256::from(1000u64));
    Ok(())
}

#[tokio::test]
async fn refuses_insufficient_funds_until_funded() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = unfunded_payer()?;
    let payee = Address::repeat_byte(0x27);
    let request = request(&payer, &terms(2_000_000, payee)?, 2)?;

    let verified = server.client.verify(&request).await?;
    assert!(!verified.is_valid);
    assert_eq!(
        verified.invalid_reason.as_deref(),
        Some(reason::INSUFFICIENT_FUNDS)
    );
    let settled = server.client.settle(&request).await?;
    assert!(!settled.success);
    assert_eq!(
        settled.error_reason.as_deref(),
        Some(reason::INSUFFICIENT_FUNDS)
    );
    assert_eq!(server.balance(payee).await?, U256::ZERO);

    let funded: Value = server
        .http
        .post(server.url("/control/fund"))
        .json(&json!({"address": payer.address().to_string(), "amount": "2.5"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(
        funded,
        json!({"address": payer.address().to_checksum(None), "balance": "2500000"})
    );
    // The refused attempt left the nonce unspent: the same credential now settles.
    let settled = server.client.settle(&request).await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(500_000u64)
    );
    assert_eq!(server.balance(payee).await?, U256::from(2_000_000u64));
    Ok(())
}

#[tokio::test]
async fn lists_base_sepolia_for_both_versions() -> anyhow::Result<()> {
    let server = start_default().await?;
    let supported = server.client.supported().await?;
    let kinds: Vec<(u8, &str, &str)> = supported
        .kinds
        .iter()
        .map(|kind| {
            (
                kind.x402_version,
                kind.scheme.as_str(),
                kind.network.as_str(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, "exact", "base-sepolia"),
            (2, "exact", "eip155:84532"),
            (2, "upto", "eip155:84532")
        ]
    );
    Ok(())
}

#[tokio::test]
async fn malformed_bodies_are_400_json() -> anyhow::Result<()> {
    let server = start_default().await?;
    for (path, body) in [
        ("/verify", "{not json"),
        ("/settle", "{\"x402Version\": \"two\"}"),
        ("/settle", ""),
        ("/control/faults", "{\"settle\": \"explode\"}"),
        (
            "/control/fund",
            "{\"address\": \"0x12\", \"amount\": \"1\"}",
        ),
        (
            "/control/fund",
            "{\"address\": \"0x0000000000000000000000000000000000000001\", \"amount\": \"-1\"}",
        ),
    ] {
        let response = server
            .http
            .post(server.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        assert_eq!(response.status(), 400, "{path} {body}");
        let error: Value = response.json().await?;
        assert!(common::json_error(&error).is_some(), "{path}: {error}");
    }
    let response = server.http.get(server.url("/balances/nope")).send().await?;
    assert_eq!(response.status(), 400);
    let health = server.http.get(server.url("/health")).send().await?;
    assert_eq!(health.status(), 200);
    // Nothing of the above was a facilitator request.
    let stats = server.stats().await?;
    assert_eq!(stats["verify"].as_u64().context("verify count")?, 0);
    server.stop().await
}
