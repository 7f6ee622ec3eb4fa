//! Shared by the integration tests: the facilitator started in-process on a free loopback
//! port, its x402 client (`payments::HttpFacilitator`) and credentials signed with Anvil key #0.

#![allow(dead_code)]

use std::time::Duration;

use alloy_primitives::{Address, U256};
use anyhow::{Context, bail};
use facilitator::config::FacilitatorConfig;
use payments::payer::Challenge;
use payments::wire::facilitator::FacilitatorRequest;
use payments::wire::v2::ResourceInfo;
use payments::{HttpFacilitator, LocalPayer, Network, Terms};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Anvil's well-known account #0 (funded with 1000 USDC by default).
pub const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A running facilitator; stopped when dropped.
pub struct Running {
    pub base: String,
    pub client: HttpFacilitator,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), facilitator::StartError>>>,
}

/// Starts `config` on `127.0.0.1:0`. The listener is bound before this returns, so requests
/// sent right away wait in its backlog until the server accepts them.
pub async fn start(config: FacilitatorConfig) -> anyhow::Result<Running> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        facilitator::serve(&config, listener, async move {
            let _ = stopped.await;
        })
        .await
    });
    Ok(Running {
        client: HttpFacilitator::new(&base, Duration::from_secs(10))?,
        http: reqwest::Client::new(),
        base,
        stop: Some(stop),
        task: Some(task),
    })
}

/// The default configuration with the memory ledger.
pub async fn start_default() -> anyhow::Result<Running> {
    start(FacilitatorConfig::for_tests()).await
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Atomic units held by `address`, from `GET /balances/{address}`.
    pub async fn balance(&self, address: Address) -> anyhow::Result<U256> {
        let reply: Value = self
            .http
            .get(self.url(&format!("/balances/{address}")))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let text = reply["balance"].as_str().context("balance is a string")?;
        Ok(U256::from_str_radix(text, 10)?)
    }

    pub async fn set_faults(&self, change: Value) -> anyhow::Result<Value> {
        Ok(self
            .http
            .post(self.url("/control/faults"))
            .json(&change)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    pub async fn stats(&self) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(self.url("/control/stats"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Stops the server and waits for its drain; the error it ended with, if any.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => Ok(task.await??),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn anvil_payer() -> anyhow::Result<LocalPayer> {
    Ok(LocalPayer::from_hex(ANVIL_KEY_0)?)
}

pub fn unix_now() -> u64 {
    facilitator::state::unix_now()
}

/// `amount` atomic units on base-sepolia, paid to `pay_to`.
pub fn terms(amount: u64, pay_to: Address) -> anyhow::Result<Terms> {
    let Some(network) = Network::find("base-sepolia") else {
        bail!("base-sepolia is a known network")
    };
    Ok(Terms {
        scheme: payments::Scheme::Exact,
        network,
        amount: U256::from(amount),
        pay_to,
        max_timeout_seconds: 300,
        resource: ResourceInfo {
            url: "http://127.0.0.1:8080/entrypoints/echo/invoke".into(),
            description: "echo".into(),
            mime_type: "application/json".into(),
        },
    })
}

/// A fresh credential (new random nonce) from `payer` for `terms`, as a facilitator request of
/// x402 version `version` (1 or 2).
pub fn request(
    payer: &LocalPayer,
    terms: &Terms,
    version: u8,
) -> anyhow::Result<FacilitatorRequest> {
    let (challenge, requirements) = match version {
        1 => (
            Challenge::V1(terms.challenge_v1("X-PAYMENT header is required")),
            serde_json::to_value(terms.requirements_v1())?,
        ),
        _ => (
            Challenge::V2(terms.challenge_v2(None)),
            serde_json::to_value(terms.requirements_v2())?,
        ),
    };
    let header = payer.answer(&challenge, None, unix_now())?;
    let payload: Value = payments::wire::decode(&header.value)?;
    Ok(FacilitatorRequest {
        x402_version: version,
        payment_payload: payload,
        payment_requirements: requirements,
    })
}

/// At most `max` atomic units on base-sepolia, paid to `pay_to`, settled by `facilitator`.
pub fn upto_terms(max: u64, pay_to: Address, facilitator: Address) -> anyhow::Result<Terms> {
    let exact = terms(max, pay_to)?;
    Ok(Terms::upto(
        exact.network,
        exact.amount,
        pay_to,
        facilitator,
        exact.max_timeout_seconds,
        exact.resource,
    ))
}

/// A fresh upto permit (new random nonce) from `payer` for `terms`, as the v2 `/verify`
/// request (the requirements ask for the maximum).
pub fn upto_request(payer: &LocalPayer, terms: &Terms) -> anyhow::Result<FacilitatorRequest> {
    let header = payer.answer(&Challenge::V2(terms.challenge_v2(None)), None, unix_now())?;
    let credential = payments::Credential::decode(header.version, &header.value)?;
    Ok(payments::facilitator::request(&credential, terms))
}

/// `request` asking to settle `actual` atomic units (the payee's settle of an upto permit).
pub fn settle_for(request: &FacilitatorRequest, actual: u64) -> FacilitatorRequest {
    let mut settle = request.clone();
    settle.payment_requirements["amount"] = Value::String(actual.to_string());
    settle
}

/// A key no account list funds.
pub fn unfunded_payer() -> anyhow::Result<LocalPayer> {
    Ok(LocalPayer::from_hex(&"11".repeat(32))?)
}

pub fn json_error(value: &Value) -> Option<&str> {
    value.get("error").and_then(|error| error.as_str())
}
