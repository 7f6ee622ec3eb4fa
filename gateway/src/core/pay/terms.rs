//! The x402 terms of one priced request: the entrypoint's price as an amount, on the gate's
//! network, paid to its address, for the route's absolute URL.

use axum::http::StatusCode;
use payments::Terms;
use payments::wire::v2::ResourceInfo;
use protocol::ErrorCode;
use store::registry::{EntrypointInfo, PriceScheme};

use super::Gate;
use crate::http::error::ApiError;

impl Gate {
    /// The terms of one request: `resource_url` is what the payer is paying for (the route's
    /// absolute URL). An `upto` price names the facilitator as the only settler its payer's
    /// permit may allow (asked of the facilitator once, see [`Gate::upto_facilitator`]).
    pub async fn terms(
        &self,
        entrypoint: &EntrypointInfo,
        price: &str,
        resource_url: String,
    ) -> Result<Terms, ApiError> {
        let scheme = match entrypoint.price.as_ref().map(|price| price.scheme) {
            Some(PriceScheme::Upto) => payments::Scheme::Upto {
                facilitator: self.upto_facilitator().await?,
            },
            _ => payments::Scheme::Exact,
        };
        let amount = payments::amount::to_atomic(price).map_err(|err| {
            tracing::error!(entrypoint = %entrypoint.key, %price, error = %err, "a worker advertises a price that is not a USDC amount");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentCapabilityUnsupported,
                "This entrypoint's price is not a valid amount",
            )
        })?;
        Ok(Terms {
            scheme,
            network: self.network,
            amount,
            pay_to: self.pay_to,
            max_timeout_seconds: self.max_timeout_seconds,
            resource: ResourceInfo {
                url: resource_url,
                description: entrypoint.description.clone(),
                mime_type: "application/json".into(),
            },
        })
    }
}

impl Gate {
    /// The address the facilitator settles `upto` payments from (its `/supported` kind's
    /// `extra.facilitatorAddress`), asked once and kept; a facilitator that offers no `upto`
    /// on this network makes every upto-priced route answer `503`, asked again next time.
    pub async fn upto_facilitator(&self) -> Result<payments::Address, ApiError> {
        let unsupported = || {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentCapabilityUnsupported,
                "This entrypoint is priced with x402's upto scheme, which this gateway's facilitator does not offer",
            )
            .retry_after(5)
        };
        self.upto_facilitator
            .get_or_try_init(|| async {
                match self.facilitator.supported().await {
                    Ok(supported) => supported
                        .upto_facilitator(self.network.caip2)
                        .ok_or_else(unsupported),
                    Err(err) => {
                        tracing::warn!(error = %err, "could not ask the facilitator what it supports");
                        Err(unsupported())
                    }
                }
            })
            .await
            .copied()
    }
}
