//! x402's facilitator HTTP API over reqwest: `POST {base}/verify`, `POST {base}/settle`,
//! `GET {base}/supported`, JSON both ways, with a timeout per call and no redirects.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::redirect::Policy;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Facilitator, FacilitatorError};
use crate::wire::facilitator::{
    FacilitatorRequest, SettleResponse, SettlementLookup, SupportedResponse, VerifyResponse,
};

/// Largest facilitator answer read, in bytes: answers are a few hundred bytes.
const MAX_REPLY_BYTES: usize = 64 * 1024;

#[derive(Clone)]
pub struct HttpFacilitator {
    client: reqwest::Client,
    base: String,
}

/// The base URL may carry credentials (`https://user:key@host`): a print shows neither.
impl std::fmt::Debug for HttpFacilitator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFacilitator")
            .field("base", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl HttpFacilitator {
    /// `base` is the facilitator's URL (`http(s)://host[:port][/path]`); `timeout` bounds each call.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, FacilitatorError> {
        let trimmed = base.trim().trim_end_matches('/');
        let url = reqwest::Url::parse(trimmed)
            .map_err(|err| FacilitatorError::Config(err.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(FacilitatorError::Config(
                "it must be an http or https URL with a host".into(),
            ));
        }
        let client = reqwest::Client::builder()
            // A redirect must never turn into a silent pass: the answer to a redirected
            // verify could come from anyone.
            .redirect(Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|err| FacilitatorError::Config(err.to_string()))?;
        Ok(HttpFacilitator {
            client,
            base: trimmed.to_owned(),
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, FacilitatorError> {
        let url = format!("{}{path}", self.base);
        let request = match body {
            Some(body) => self.client.post(&url).json(body),
            None => self.client.get(&url),
        };
        let mut response = request.send().await.map_err(classify)?;
        let status = response.status();
        if status.is_redirection() {
            return Err(FacilitatorError::Redirected(status.as_u16()));
        }
        if !status.is_success() {
            return Err(FacilitatorError::Status(status.as_u16()));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
            if bytes.len() + chunk.len() > MAX_REPLY_BYTES {
                return Err(FacilitatorError::BadReply);
            }
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).map_err(|_| FacilitatorError::BadReply)
    }
}

fn classify(err: reqwest::Error) -> FacilitatorError {
    if err.is_timeout() {
        FacilitatorError::Timeout
    } else if err.is_decode() || err.is_body() {
        FacilitatorError::BadReply
    } else {
        FacilitatorError::Unreachable
    }
}

#[async_trait]
impl Facilitator for HttpFacilitator {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.call("/verify", Some(request)).await
    }

    async fn settlement(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<Option<SettleResponse>, FacilitatorError> {
        let lookup: SettlementLookup = match self.call("/settlement", Some(request)).await {
            Err(FacilitatorError::Status(404 | 405)) => return Err(FacilitatorError::Unsupported),
            other => other?,
        };
        match (lookup.settled, lookup.settlement) {
            (false, _) => Ok(None),
            (true, Some(settlement)) if settlement.success => Ok(Some(settlement)),
            (true, _) => Err(FacilitatorError::BadReply),
        }
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.call("/settle", Some(request)).await
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.call::<(), _>("/supported", None).await
    }
}
