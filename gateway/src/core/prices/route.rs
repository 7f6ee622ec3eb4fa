//! Which routes cost what: an entrypoint's (merged) price for the route a request came
//! through, turned into the x402 terms of that request by the payment gate ([`Gate::terms`]).

use axum::http::StatusCode;
use payments::Terms;
use payments::wire::v2::ResourceInfo;
use protocol::ErrorCode;
use store::registry::EntrypointInfo;

use crate::core::pay::Gate;
use crate::http::error::ApiError;

/// The route a priced request came through. Task creation costs the invoke price, as
/// upstream charges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priced {
    Invoke,
    Stream,
    Task,
}

/// The decimal USDC price of `route` on `entrypoint`, if it has one.
pub fn price_of(entrypoint: &EntrypointInfo, route: Priced) -> Option<&str> {
    let price = entrypoint.price.as_ref()?;
    match route {
        Priced::Invoke | Priced::Task => price.invoke.as_deref(),
        Priced::Stream => price.stream.as_deref(),
    }
}

/// A priced route on a gateway that takes no payments.
pub fn payments_disabled() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::PaymentCapabilityUnsupported,
        "This entrypoint is priced, but this gateway takes no payments (start it with --pay-to and --facilitator-url)",
    )
}

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
