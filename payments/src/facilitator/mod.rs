//! The facilitator contract: verify a credential against requirements, settle it, list what it
//! supports. The gateway holds a `dyn Facilitator`; [`HttpFacilitator`] speaks x402's HTTP API;
//! [`request`] builds what is sent ([`upto_settlement`]: an upto credential settled for the
//! actual amount).
//!
//! Every failure is an error the gateway must treat as "not paid" (fail closed): a redirect,
//! a timeout, a non-2xx status and an unreadable answer all refuse the payment. A settle that
//! failed that way may still have moved funds, so the caller must not let the credential be
//! used again (see [`FacilitatorError`]).

mod http;
mod request;

pub use http::HttpFacilitator;
pub use request::{UptoSettleError, request, upto_settlement};

use async_trait::async_trait;

use crate::wire::facilitator::{
    FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FacilitatorError {
    #[error("facilitator URL is not usable: {0}")]
    Config(String),
    #[error("facilitator did not answer in time")]
    Timeout,
    #[error("facilitator is unreachable")]
    Unreachable,
    #[error("facilitator answered with a redirect ({0}); redirects are refused")]
    Redirected(u16),
    #[error("facilitator answered HTTP {0}")]
    Status(u16),
    #[error("facilitator's answer is not readable")]
    BadReply,
    #[error("facilitator offers no settlement lookup")]
    Unsupported,
}

#[async_trait]
pub trait Facilitator: Send + Sync + 'static {
    /// Checks a credential without moving funds.
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError>;

    /// Moves the funds. `Ok` with `success: false` is a refused settlement; `Err` means the
    /// outcome is unknown.
    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError>;

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError>;

    /// Whether the request's credential was settled, and how, WITHOUT ever settling it: what a
    /// gateway asks to recover a receipt whose settle answer it lost. `Ok(None)`: not settled.
    /// x402 defines no such call; facilitators without it answer `Unsupported`.
    async fn settlement(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<Option<SettleResponse>, FacilitatorError> {
        let _ = request;
        Err(FacilitatorError::Unsupported)
    }
}
