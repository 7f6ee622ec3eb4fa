//! The x402 terms of one priced request: the entrypoint's price as an amount, on the gate's
//! network, paid to its address, for the route's absolute URL.

use axum::http::StatusCode;
use payments::Terms;
use payments::wire::v2::ResourceInfo;
use protocol::ErrorCode;
use store::registry::EntrypointInfo;

use super::Gate;
use crate::http::error::ApiError;

impl Gate {
    /// The terms of one request: `resource_url` is what the payer is paying for (the route's
    /// absolute URL).
    pub fn terms(
        &self,
        entrypoint: &EntrypointInfo,
        price: &str,
        resource_url: String,
    ) -> Result<Terms, ApiError> {
        let amount = payments::amount::to_atomic(price).map_err(|err| {
            tracing::error!(entrypoint = %entrypoint.key, %price, error = %err, "a worker advertises a price that is not a USDC amount");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentCapabilityUnsupported,
                "This entrypoint's price is not a valid amount",
            )
        })?;
        Ok(Terms {
            scheme: payments::Scheme::Exact,
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
