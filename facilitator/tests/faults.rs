//! Each injected fault, as `payments::HttpFacilitator` (the gateway's client) observes it.

mod common;

use alloy_primitives::{Address, U256};
use common::{anvil_payer, request, start, start_default, terms};
use facilitator::config::FacilitatorConfig;
use payments::{Facilitator, FacilitatorError};
use serde_json::json;

const STARTING_BALANCE: u64 = 1_000_000_000;

#[tokio::test]
async fn refuse_answers_success_false_and_moves_nothing() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x31);
    let request = request(&payer, &terms(1000, payee)?, 2)?;
    let now = server.set_faults(json!({"settle": "refuse"})).await?;
    assert_eq!(
        now,
        json!({"settle": "refuse", "verify": "none", "slowMs": 2000})
    );

    let settled = server.client.settle(&request).await?;
    assert!(!settled.success);
    assert_eq!(settled.error_reason.as_deref(), Some("injected_failure"));
    assert_eq!(settled.network, "eip155:84532");
    assert_eq!(server.balance(payee).await?, U256::ZERO);

    // Switched back, the same credential settles: the refusal spent nothing.
    server.set_faults(json!({"settle": "none"})).await?;
    assert!(server.client.settle(&request).await?.success);
    assert_eq!(
        server.stats().await?,
        json!({"verify": 0, "settle": 2, "settled": 1})
    );
    Ok(())
}

#[tokio::test]
async fn http500_is_a_status_error_and_moves_nothing() -> anyhow::Result<()> {
    let mut config = FacilitatorConfig::for_tests();
    config.fault = facilitator::faults::Fault::Http500;
    let server = start(config).await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x32);
    let request = request(&payer, &terms(1000, payee)?, 2)?;
    assert_eq!(
        server.client.settle(&request).await,
        Err(FacilitatorError::Status(500))
    );
    assert_eq!(server.balance(payee).await?, U256::ZERO);
    let faults: serde_json::Value = server
        .http
        .get(server.url("/control/faults"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(faults["settle"], "http500");
    Ok(())
}

#[tokio::test]
async fn drop_settles_for_real_but_answers_nothing() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x33);
    let request = request(&payer, &terms(1000, payee)?, 2)?;
    server.set_faults(json!({"settle": "drop"})).await?;

    let outcome = server.client.settle(&request).await;
    assert!(
        matches!(outcome, Err(FacilitatorError::Unreachable)),
        "{outcome:?}"
    );
    // The funds moved before the connection was dropped: the client cannot know it.
    assert_eq!(server.balance(payee).await?, U256::from(1000u64));
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE - 1000)
    );
    server.set_faults(json!({"settle": "none"})).await?;
    let again = server.client.settle(&request).await?;
    assert!(!again.success);
    Ok(())
}

#[tokio::test]
async fn slow_still_settles() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x34);
    server
        .set_faults(json!({"settle": "slow", "slowMs": 50}))
        .await?;
    let settled = server
        .client
        .settle(&request(&payer, &terms(1000, payee)?, 2)?)
        .await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(server.balance(payee).await?, U256::from(1000u64));
    Ok(())
}

#[tokio::test]
async fn verify_faults_are_separate() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let request = request(&payer, &terms(1000, Address::repeat_byte(0x35))?, 2)?;

    server.set_faults(json!({"verify": "refuse"})).await?;
    let refused = server.client.verify(&request).await?;
    assert!(!refused.is_valid);
    assert_eq!(refused.invalid_reason.as_deref(), Some("injected_failure"));

    server.set_faults(json!({"verify": "http500"})).await?;
    assert_eq!(
        server.client.verify(&request).await,
        Err(FacilitatorError::Status(500))
    );

    server.set_faults(json!({"verify": "drop"})).await?;
    assert!(server.client.verify(&request).await.is_err());

    server
        .set_faults(json!({"verify": "slow", "slowMs": 10}))
        .await?;
    assert!(server.client.verify(&request).await?.is_valid);

    // Settling was never affected.
    assert!(server.client.settle(&request).await?.success);
    Ok(())
}
