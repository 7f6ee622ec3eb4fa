//! `POST /verify`, `POST /settle`, `GET /supported`, with the faults in force applied.
//!
//! Logs name the payer, the amount and the outcome only: the payload carries a signature that
//! makes the authorization spendable.

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use payments::terms::{SCHEME_EXACT, SCHEME_UPTO};
use payments::wire::facilitator::{
    FacilitatorRequest, SettleResponse, SettlementLookup, SupportedKind, SupportedResponse,
    VerifyResponse,
};
use serde_json::json;

use crate::error::{ApiError, parse_json};
use crate::faults::{Fault, INJECTED_FAILURE};
use crate::settle;
use crate::state::{AppState, unix_now};
use crate::verify::{self, Verdict, request_network, supported_networks};

const REQUEST: &str = "a facilitator request {x402Version, paymentPayload, paymentRequirements}";

pub async fn verify(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let request: FacilitatorRequest = parse_json(&body, REQUEST)?;
    state.stats.verify();
    let faults = state.faults.get();
    match faults.verify {
        Fault::Refuse => {
            tracing::info!(fault = "refuse", "verify refused by injected fault");
            return Ok(Json(VerifyResponse {
                is_valid: false,
                invalid_reason: Some(INJECTED_FAILURE.into()),
                payer: None,
            })
            .into_response());
        }
        Fault::Http500 => {
            tracing::info!(fault = "http500", "verify failed by injected fault");
            return Err(ApiError::Injected);
        }
        Fault::Slow => tokio::time::sleep(faults.slow()).await,
        Fault::None | Fault::Drop => {}
    }
    let response = match verify::verify(&*state.ledger, state.address, &request, unix_now()).await?
    {
        Verdict::Valid(checked) => {
            tracing::info!(
                payer = %checked.payer,
                amount = %checked.transfer.amount,
                outcome = "valid",
                "verify"
            );
            VerifyResponse {
                is_valid: true,
                invalid_reason: None,
                payer: Some(checked.payer.to_checksum(None)),
            }
        }
        Verdict::Invalid(invalid) => {
            tracing::info!(
                payer = %invalid.payer.map(|payer| payer.to_string()).unwrap_or_else(|| "-".into()),
                outcome = invalid.reason,
                "verify"
            );
            VerifyResponse {
                is_valid: false,
                invalid_reason: Some(invalid.reason.into()),
                payer: invalid.payer.map(|payer| payer.to_checksum(None)),
            }
        }
    };
    if faults.verify == Fault::Drop {
        tracing::info!(fault = "drop", "verify answer dropped by injected fault");
        return Ok(dropped_connection());
    }
    Ok(Json(response).into_response())
}

pub async fn settle(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let request: FacilitatorRequest = parse_json(&body, REQUEST)?;
    state.stats.settle();
    let faults = state.faults.get();
    match faults.settle {
        Fault::Refuse => {
            tracing::info!(fault = "refuse", "settle refused by injected fault");
            let refusal = settle::refusal(INJECTED_FAILURE, None, request_network(&request));
            return Ok(Json(refusal).into_response());
        }
        Fault::Http500 => {
            tracing::info!(fault = "http500", "settle failed by injected fault");
            return Err(ApiError::Injected);
        }
        Fault::None | Fault::Slow | Fault::Drop => {}
    }
    // In a task of its own: like a transaction sent to a chain, the settlement completes even
    // when the client gives up waiting (the "facilitator timeout after debit" case).
    let worker = state.clone();
    let work = tokio::spawn(async move {
        if faults.settle == Fault::Slow {
            tokio::time::sleep(faults.slow()).await;
        }
        let response =
            settle::settle(&*worker.ledger, worker.address, &request, unix_now()).await?;
        if response.success {
            worker.stats.settled();
        }
        Ok::<SettleResponse, ApiError>(response)
    });
    let response = work.await.map_err(|_| ApiError::Internal)??;
    tracing::info!(
        payer = response.payer.as_deref().unwrap_or("-"),
        amount = response.amount.as_deref().unwrap_or("-"),
        outcome = response.error_reason.as_deref().unwrap_or("settled"),
        "settle"
    );
    if faults.settle == Fault::Drop {
        tracing::info!(fault = "drop", "settle answer dropped by injected fault");
        return Ok(dropped_connection());
    }
    Ok(Json(response).into_response())
}

/// `exact` on each network for v1 and v2, `upto` for v2 with `extra.facilitatorAddress` (what
/// a payee copies into its upto requirements, as @x402/evm's server does), and this
/// facilitator's address under `signers` (x402 v2's list of a facilitator's addresses per CAIP
/// family).
pub async fn supported(State(state): State<AppState>) -> Json<SupportedResponse> {
    let address = state.address.to_checksum(None);
    let kinds = supported_networks()
        .flat_map(|network| {
            let exact =
                [(1, network.name), (2, network.caip2)].map(|(version, name)| SupportedKind {
                    x402_version: version,
                    scheme: SCHEME_EXACT.into(),
                    network: name.into(),
                    extra: None,
                });
            let upto = SupportedKind {
                x402_version: 2,
                scheme: SCHEME_UPTO.into(),
                network: network.caip2.into(),
                extra: Some(json!({"facilitatorAddress": address})),
            };
            exact.into_iter().chain([upto])
        })
        .collect();
    Json(SupportedResponse {
        kinds,
        extensions: Vec::new(),
        // No key signs on a chain here (the ledger is play money): the address is what upto
        // permits name.
        signers: json!({"eip155:*": [address]}),
    })
}

/// A response whose body fails on its first read: hyper then aborts the connection before the
/// buffered status line is flushed, so the client sees the connection close with no answer.
fn dropped_connection() -> Response {
    let failing = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("injected connection drop"))
    });
    Response::new(Body::from_stream(failing))
}

/// `POST /settlement` (this project's extension; x402 has no such call): was the request's
/// credential settled, and with what answer? It never settles anything, so a gateway that lost
/// a settle answer can recover the receipt without risking a settlement nobody asked for.
pub async fn settlement(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let request: FacilitatorRequest = parse_json(&body, REQUEST)?;
    let version = match request.x402_version {
        1 => payments::X402Version::V1,
        2 => payments::X402Version::V2,
        _ => return Ok(Json(SettlementLookup::default()).into_response()),
    };
    // No time or terms checks: an authorization that expired since it was settled still names
    // its settlement.
    let Ok(credential) =
        payments::Credential::from_document(version, request.payment_payload.clone())
    else {
        return Ok(Json(SettlementLookup::default()).into_response());
    };
    let key = credential.nonce_key();
    // Exact moves its whole value; upto what its settle asked, as the ledger recorded it. An
    // upto permit settled for zero spent nothing and reads as unsettled (settling it for zero
    // again answers the same).
    let amount = match credential.upto() {
        None if state.ledger.nonce_used(&key).await? => Some(credential.max_amount()),
        None => None,
        Some(_) => state.ledger.settled_amount(&key).await?,
    };
    let Some(amount) = amount else {
        return Ok(Json(SettlementLookup::default()).into_response());
    };
    Ok(Json(SettlementLookup {
        settled: true,
        settlement: Some(SettleResponse {
            success: true,
            error_reason: None,
            payer: Some(credential.payer().to_checksum(None)),
            transaction: crate::ledger::transaction_hash(&key).to_string(),
            network: request_network(&request),
            amount: Some(amount.to_string()),
        }),
    })
    .into_response())
}
