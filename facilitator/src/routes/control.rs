//! The dev controls: faults, counters, balances and funding, and the health check. Unguarded:
//! this server holds play money and listens on loopback by default.

use alloy_primitives::{Address, U256};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ApiError, parse_json};
use crate::faults::{FaultChange, FaultSettings};
use crate::state::{AppState, StatsSnapshot};

/// `GET /balances/{address}` and `POST /control/fund` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalanceResponse {
    /// Checksummed.
    pub address: String,
    /// Atomic units, decimal.
    pub balance: String,
}

impl BalanceResponse {
    fn new(address: Address, balance: U256) -> Self {
        BalanceResponse {
            address: address.to_checksum(None),
            balance: balance.to_string(),
        }
    }
}

/// `POST /control/fund`: adds `amount` (decimal USDC, a string or a number) to `address`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FundRequest {
    address: String,
    amount: Value,
}

pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn balance(
    State(state): State<AppState>,
    Path(address): Path<String>,
) -> Result<Json<BalanceResponse>, ApiError> {
    let address = parse_address(&address)?;
    let balance = state.ledger.balance(address).await?;
    Ok(Json(BalanceResponse::new(address, balance)))
}

pub async fn fund(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<BalanceResponse>, ApiError> {
    let request: FundRequest = parse_json(&body, "{\"address\", \"amount\"}")?;
    let address = parse_address(&request.address)?;
    let decimal = match &request.amount {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        _ => {
            return Err(ApiError::BadRequest(
                "amount must be decimal USDC, e.g. \"10.5\"".into(),
            ));
        }
    };
    let amount = payments::amount::to_atomic(&decimal)
        .map_err(|err| ApiError::BadRequest(err.to_string()))?;
    let balance = state.ledger.credit(address, amount).await?;
    tracing::info!(%address, %amount, %balance, "funded");
    Ok(Json(BalanceResponse::new(address, balance)))
}

pub async fn get_faults(State(state): State<AppState>) -> Json<FaultSettings> {
    Json(state.faults.get())
}

pub async fn set_faults(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<FaultSettings>, ApiError> {
    let change: FaultChange = parse_json(
        &body,
        "{\"settle\"?, \"verify\"?: none|refuse|http500|slow|drop, \"slowMs\"?}",
    )?;
    let now = state.faults.apply(change);
    tracing::info!(settle = ?now.settle, verify = ?now.verify, slow_ms = now.slow_ms, "faults set");
    Ok(Json(now))
}

pub async fn stats(State(state): State<AppState>) -> Json<StatsSnapshot> {
    Json(state.stats.snapshot())
}

fn parse_address(text: &str) -> Result<Address, ApiError> {
    text.trim()
        .parse::<Address>()
        .map_err(|_| ApiError::BadRequest("address is not a 20-byte hex address".into()))
}
