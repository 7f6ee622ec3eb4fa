//! Which routes cost what: an entrypoint's (merged) price for the route a request came
//! through (the payment gate, `core::pay`, turns it into the x402 terms of that request).

use axum::http::StatusCode;
use protocol::ErrorCode;
use store::registry::EntrypointInfo;

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
