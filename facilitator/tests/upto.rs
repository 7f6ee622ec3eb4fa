//! The `upto` scheme through the facilitator's HTTP API (memory ledger): a permit of a maximum
//! is verified, settled once for the actual amount the payee asks (at most the maximum), a
//! zero settlement moves nothing, and the settlement lookup reports what was settled.

mod common;

use alloy_primitives::{Address, U256};
use common::{
    anvil_payer, settle_for, start, start_default, terms, unfunded_payer, upto_request, upto_terms,
};
use facilitator::config::{FacilitatorConfig, default_address};
use facilitator::ledger::transaction_hash;
use facilitator::verify::reason;
use payments::{Credential, Facilitator, X402Version};
use serde_json::json;

/// 1000 USDC, what every Anvil account starts with.
const STARTING_BALANCE: u64 = 1_000_000_000;
const MAX: u64 = 5000;

#[tokio::test]
async fn a_permit_is_verified_for_its_maximum_and_settled_for_less() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x51);
    let request = upto_request(&payer, &upto_terms(MAX, payee, default_address())?)?;

    let verified = server.client.verify(&request).await?;
    assert!(verified.is_valid, "{verified:?}");
    assert_eq!(verified.payer, Some(payer.address().to_checksum(None)));
    // Verifying moves nothing, and neither does a lookup.
    assert_eq!(server.client.settlement(&request).await?, None);
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE)
    );

    let settled = server.client.settle(&settle_for(&request, 1234)).await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount.as_deref(), Some("1234"));
    assert_eq!(settled.settled_amount(), Some(U256::from(1234u64)));
    assert_eq!(settled.network, "eip155:84532");
    assert_eq!(settled.payer, Some(payer.address().to_checksum(None)));
    let credential = Credential::from_document(X402Version::V2, request.payment_payload.clone())?;
    assert_eq!(
        settled.transaction,
        transaction_hash(&credential.nonce_key()).to_string()
    );
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE - 1234)
    );
    assert_eq!(server.balance(payee).await?, U256::from(1234u64));

    // The lookup names the amount settled, whichever amount the lookup's requirements ask.
    for asked in [&request, &settle_for(&request, 1234)] {
        let found = server.client.settlement(asked).await?;
        assert_eq!(
            found.as_ref().and_then(|s| s.amount.as_deref()),
            Some("1234")
        );
        assert_eq!(
            found.map(|s| s.transaction),
            Some(settled.transaction.clone())
        );
    }

    // One permit, one settlement: the rest of the maximum is never moved.
    for actual in [1234, 1, MAX] {
        let again = server.client.settle(&settle_for(&request, actual)).await?;
        assert!(!again.success);
        assert_eq!(
            again.error_reason.as_deref(),
            Some(reason::PERMIT2_NONCE_USED)
        );
    }
    let verified = server.client.verify(&request).await?;
    assert_eq!(
        verified.invalid_reason.as_deref(),
        Some(reason::PERMIT2_NONCE_USED)
    );
    assert_eq!(server.balance(payee).await?, U256::from(1234u64));
    assert_eq!(
        server.stats().await?,
        json!({"verify": 2, "settle": 4, "settled": 1})
    );
    Ok(())
}

#[tokio::test]
async fn more_than_the_maximum_is_refused_and_the_maximum_settles() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x52);
    let request = upto_request(&payer, &upto_terms(MAX, payee, default_address())?)?;

    let over = server.client.settle(&settle_for(&request, MAX + 1)).await?;
    assert!(!over.success);
    assert_eq!(
        over.error_reason.as_deref(),
        Some(reason::SETTLEMENT_EXCEEDS_AMOUNT)
    );
    assert_eq!(over.transaction, "");
    assert_eq!(server.balance(payee).await?, U256::ZERO);

    // The refusal spent nothing: the whole maximum still settles.
    let settled = server.client.settle(&settle_for(&request, MAX)).await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.settled_amount(), Some(U256::from(MAX)));
    assert_eq!(server.balance(payee).await?, U256::from(MAX));

    // A settle request whose amount is not a decimal is refused, nothing moved.
    let mut garbled = settle_for(&request, 1);
    garbled.payment_requirements["amount"] = json!("0x10");
    let refused = server.client.settle(&garbled).await?;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::INVALID_REQUIREMENTS)
    );
    Ok(())
}

#[tokio::test]
async fn a_zero_settlement_moves_nothing_and_spends_nothing() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x53);
    let request = upto_request(&payer, &upto_terms(MAX, payee, default_address())?)?;

    for _ in 0..2 {
        let zero = server.client.settle(&settle_for(&request, 0)).await?;
        assert!(zero.success, "{zero:?}");
        assert_eq!(zero.transaction, "");
        assert_eq!(zero.amount.as_deref(), Some("0"));
        assert_eq!(zero.payer, Some(payer.address().to_checksum(None)));
    }
    assert_eq!(server.client.settlement(&request).await?, None);
    assert_eq!(
        server.balance(payer.address()).await?,
        U256::from(STARTING_BALANCE)
    );
    // As on a chain, the permit stays usable until its deadline.
    let settled = server.client.settle(&settle_for(&request, 7)).await?;
    assert!(settled.success, "{settled:?}");
    assert_eq!(server.balance(payee).await?, U256::from(7u64));
    // A spent permit is refused even for zero (its verification fails first).
    let zero = server.client.settle(&settle_for(&request, 0)).await?;
    assert_eq!(
        zero.error_reason.as_deref(),
        Some(reason::PERMIT2_NONCE_USED)
    );
    assert_eq!(
        server.stats().await?,
        json!({"verify": 0, "settle": 4, "settled": 3})
    );
    Ok(())
}

#[tokio::test]
async fn the_witness_must_name_this_facilitator() -> anyhow::Result<()> {
    let ours = Address::repeat_byte(0x77);
    let mut config = FacilitatorConfig::for_tests();
    config.address = Some(ours);
    let server = start(config).await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x54);

    let supported = server.client.supported().await?;
    assert_eq!(supported.upto_facilitator("eip155:84532"), Some(ours));
    assert_eq!(
        supported.signers,
        json!({"eip155:*": [ours.to_checksum(None)]})
    );

    let theirs = upto_request(&payer, &upto_terms(MAX, payee, default_address())?)?;
    let refused = server.client.verify(&theirs).await?;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some("upto_facilitator_mismatch")
    );
    let refused = server.client.settle(&settle_for(&theirs, 1)).await?;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some("upto_facilitator_mismatch")
    );

    // The requirements' `extra.facilitatorAddress` is not what is checked: the witness is.
    let mut request = upto_request(&payer, &upto_terms(MAX, payee, ours)?)?;
    request.payment_requirements["extra"]["facilitatorAddress"] =
        json!(Address::repeat_byte(0x99).to_checksum(None));
    assert!(server.client.verify(&request).await?.is_valid);
    request.payment_requirements["extra"] = json!({"name": "USDC", "version": "2"});
    assert!(server.client.verify(&request).await?.is_valid);
    Ok(())
}

#[tokio::test]
async fn schemes_do_not_cross_and_the_payer_must_hold_the_maximum() -> anyhow::Result<()> {
    let server = start_default().await?;
    let payer = anvil_payer()?;
    let payee = Address::repeat_byte(0x55);
    let request = upto_request(&payer, &upto_terms(MAX, payee, default_address())?)?;

    // An upto permit against exact requirements, and an exact credential against upto ones.
    let mut as_exact = request.clone();
    as_exact.payment_requirements = serde_json::to_value(terms(MAX, payee)?.requirements_v2())?;
    let refused = server.client.verify(&as_exact).await?;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some("invalid_exact_evm_scheme")
    );
    let exact = common::request(&payer, &terms(MAX, payee)?, 2)?;
    let mut as_upto = exact.clone();
    as_upto.payment_requirements = request.payment_requirements.clone();
    let refused = server.client.verify(&as_upto).await?;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some("invalid_upto_evm_scheme")
    );
    let refused = server.client.settle(&settle_for(&as_upto, 1)).await?;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some("invalid_upto_evm_scheme")
    );

    // The maximum must be there, however little is settled (@x402/evm simulates the maximum).
    let poor = unfunded_payer()?;
    let request = upto_request(&poor, &upto_terms(MAX, payee, default_address())?)?;
    let refused = server.client.settle(&settle_for(&request, 1)).await?;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::INSUFFICIENT_FUNDS)
    );
    Ok(())
}
