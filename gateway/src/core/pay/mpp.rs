//! MPP on the gate: routes priced with `--price KEY=AMOUNT:mpp` speak the "Payment" HTTP
//! authentication scheme instead of x402, on the same durable admission.
//!
//! - No `Authorization: Payment` credential: `402` with `WWW-Authenticate: Payment id=…,
//!   realm=…, method="evm", intent="charge", request=…, expires=…, opaque=…`,
//!   `Cache-Control: no-store` and an `application/problem+json` body. The id is an HMAC of the
//!   terms under the cluster's MPP secret, so nothing is stored and nothing reserved: any
//!   gateway checks any gateway's challenge.
//! - A credential: the echoed challenge is checked (HMAC in constant time, expiry, terms equal
//!   to this route's, and its `opaque` naming this route's path and entrypoint), then its `evm`
//!   authorization offline (recipient, amount, chain, nonce bound to the challenge id,
//!   signature). The `opaque` is under the id's HMAC, and the EIP-3009 nonce the payer signs
//!   is a hash of the id: a credential made for one route or entrypoint cannot pay another of
//!   the same price, and nobody can rewrite it to. Anything wrong: `402` with the problem type
//!   the spec names and a fresh challenge; never a `5xx`, and the header is never logged.
//! - Then it is an EIP-3009 authorization like any x402 one ([`payments::mpp::VerifiedCharge::to_x402`]):
//!   [`super::admission`] claims its nonce in Redis (the nonce is the challenge's hash, so the
//!   claim also spends the challenge id: a replayed id is refused with `invalid-challenge`),
//!   verifies and settles through the facilitator, and the answer carries `Payment-Receipt`
//!   with `Cache-Control: private`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payments::Terms;
use payments::mpp::{self, ChallengeParams, ChallengeSecret, Problem};
use protocol::ErrorCode;

use super::credential::Checked;
use crate::core::config::GatewayConfig;
use crate::http::error::ApiError;

/// The cluster's MPP key and realm.
pub struct MppKey {
    secret: ChallengeSecret,
    realm: Option<String>,
}

/// Why the MPP settings cannot be used; the gateway refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum MppConfigError {
    #[error("--mpp-secret-file (MPP_SECRET_FILE) {0}: {1}")]
    File(String, std::io::Error),
    #[error("the MPP secret must be at least {min} bytes")]
    Short { min: usize },
    #[error("--mpp-realm (MPP_REALM) cannot go in a WWW-Authenticate header")]
    Realm,
}

impl MppKey {
    /// The key the settings name, if any (the file wins over the variable).
    pub fn from_config(config: &GatewayConfig) -> Result<Option<MppKey>, MppConfigError> {
        let bytes = match (&config.mpp_secret_file, &config.mpp_secret) {
            (Some(path), _) => std::fs::read(path)
                .map_err(|err| MppConfigError::File(path.display().to_string(), err))?,
            (None, Some(secret)) => secret.expose().as_bytes().to_vec(),
            (None, None) => return Ok(None),
        };
        let trimmed = String::from_utf8_lossy(&bytes).trim().as_bytes().to_vec();
        let secret = ChallengeSecret::new(trimmed).map_err(|_| MppConfigError::Short {
            min: ChallengeSecret::MIN_BYTES,
        })?;
        let realm = config
            .mpp_realm
            .as_deref()
            .map(str::trim)
            .map(str::to_owned);
        if let Some(realm) = &realm
            && mpp::challenge::quoted_string("realm", realm).is_err()
        {
            return Err(MppConfigError::Realm);
        }
        Ok(Some(MppKey { secret, realm }))
    }
}

/// What an MPP challenge is bound to besides its terms: the route's path (with the base path)
/// and the entrypoint it buys, carried in `opaque` (`route`, `entrypoint`).
#[derive(Debug, Clone, Copy)]
pub struct Bound<'a> {
    pub route: &'a str,
    pub entrypoint: &'a str,
}

impl Bound<'_> {
    /// The challenge's `opaque` entries.
    fn opaque(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("route".to_owned(), self.route.to_owned()),
            ("entrypoint".to_owned(), self.entrypoint.to_owned()),
        ])
    }
}

/// One request's view of an MPP-priced route: the challenge parameters it issues and checks.
pub struct MppRoute<'a> {
    key: &'a MppKey,
    params: ChallengeParams,
    /// How long a challenge stays payable.
    validity: Duration,
}

impl<'a> MppRoute<'a> {
    /// The route's parameters for `terms`, in the configured realm or else the host of
    /// `origin` (the gateway's security origin), bound to `bound`.
    pub fn new(
        key: &'a MppKey,
        terms: &Terms,
        origin: &str,
        bound: Bound<'_>,
    ) -> Result<Self, ApiError> {
        let realm = key
            .realm
            .as_deref()
            .unwrap_or(crate::http::origin::host_of(origin));
        let params =
            mpp::charge_params(realm, terms).and_then(|params| params.with_opaque(bound.opaque()));
        let params = params.map_err(|err| {
            tracing::error!(error = %err, "could not build an MPP challenge");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentCapabilityUnsupported,
                "This entrypoint's MPP terms cannot be expressed",
            )
        })?;
        Ok(MppRoute {
            key,
            params,
            validity: Duration::from_secs(terms.max_timeout_seconds.max(1)),
        })
    }

    pub fn realm(&self) -> &str {
        &self.params.realm
    }

    /// `402` with a fresh challenge and a problem body: `problem` says what was wrong (or
    /// that payment is required), `detail` in words (never quoting the credential).
    pub fn challenge(&self, problem: Problem, detail: &str) -> Response {
        let expires = payments::unix_now().saturating_add(self.validity.as_secs());
        let issued = self
            .params
            .issue(&self.key.secret, expires)
            .and_then(|challenge| Ok((challenge.to_header()?, challenge.id)));
        let (value, id) = match issued {
            Ok(issued) => issued,
            Err(err) => {
                tracing::error!(error = %err, "could not issue an MPP challenge");
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::PaymentCapabilityUnsupported,
                    "This entrypoint's MPP challenge cannot be issued",
                )
                .into_response();
            }
        };
        let body = serde_json::to_vec(&problem.body(detail, Some(&id))).unwrap_or_default();
        let status = StatusCode::from_u16(problem.status()).unwrap_or(StatusCode::PAYMENT_REQUIRED);
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(mpp::problem::CONTENT_TYPE),
        );
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(mpp::CACHE_CONTROL_CHALLENGE),
        );
        // Every parameter was checked to be a valid quoted-string when the params were built.
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// The request's credential, checked offline: `Ok(None)` without one, the answer to send
    /// when it does not pay this route.
    pub fn read(
        &self,
        headers: &HeaderMap,
        terms: &Terms,
    ) -> Result<Option<(Checked, String)>, Box<Response>> {
        let Some(value) = payment_authorization(headers)
            .map_err(|detail| Box::new(self.challenge(Problem::MalformedCredential, detail)))?
        else {
            return Ok(None);
        };
        let now = payments::unix_now();
        match mpp::verify_authorization_header(value, &self.key.secret, &self.params, now) {
            Ok((credential, charge)) => Ok(Some((
                Checked {
                    credential: charge.to_x402(terms),
                    payer: charge.payer(),
                    // x402's extension; MPP has no such field.
                    payment_id: None,
                },
                credential.challenge.id,
            ))),
            Err(rejection) => Err(Box::new(
                self.challenge(rejection.problem(), &rejection.to_string()),
            )),
        }
    }
}

/// The `Authorization` value when it is a `Payment` credential (the scheme's name compared
/// without regard to case); `None` without one or with another scheme.
fn payment_authorization(headers: &HeaderMap) -> Result<Option<&str>, &'static str> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    if value.len() > mpp::MAX_CREDENTIAL_BYTES {
        return Err("the Authorization header is too large");
    }
    let text = value
        .to_str()
        .map_err(|_| "the Authorization header is not ASCII")?
        .trim();
    let scheme = text.split_whitespace().next().unwrap_or_default();
    if scheme.eq_ignore_ascii_case(mpp::SCHEME) {
        Ok(Some(text))
    } else {
        Ok(None)
    }
}

/// A priced MPP route on a gateway without an MPP secret.
pub fn mpp_disabled() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::PaymentCapabilityUnsupported,
        "This entrypoint is priced for MPP, but this gateway has no MPP secret (start it with --mpp-secret-file)",
    )
}
