//! The payment gate: what happens to a `PAYMENT-SIGNATURE` (x402 v2) or `X-PAYMENT` (x402 v1)
//! on a priced invoke, stream or `POST /tasks`, in order:
//!
//! 1. [`crate::core::prices::route`]: is the route priced? [`terms`]: on what terms (network,
//!    amount in USDC atomic units, payee, resource URL)?
//! 2. no credential: [`challenge`] answers `402` with the v2 `PAYMENT-REQUIRED` header and the
//!    v1 JSON body. Nothing is reserved, no capacity is used.
//! 3. [`credential`]: the header is read (size bound, base64, JSON, version) and checked
//!    offline: the EIP-712 signature of the EIP-3009 authorization recovers to `from`, and
//!    payee, exact amount, asset, chain and validity window match. Anything wrong: `402` with
//!    the reason and a fresh challenge, never a `5xx`, and the header is never logged.
//! 4. [`admission`]: the credential's EIP-3009 nonce (per chain, asset and payer) is claimed
//!    in Redis, so one credential buys one execution across every gateway; a task is reserved
//!    and claimed (`prepared`) by this gateway, the claim renewed while the facilitator
//!    verifies and settles; the receipt is stored with the task, which commits it to run, and
//!    the task is handed to the queue.
//! 5. [`recovery`]: a sweep that recovers receipts whose settle answer was lost (a gateway
//!    died mid-settlement, or the facilitator never answered) by looking the settlement up.
//! 6. [`receipt`]: the receipt header (`PAYMENT-RESPONSE` or `X-PAYMENT-RESPONSE`) on the
//!    answer, and again on `GET /tasks/{id}` for the payer who lost the first answer.
//!
//! An A2A client of the x402 extension carries the credential as a JSON document in its
//! message instead of a header ([`inband`]): read by [`credential::read_document`], it meets
//! the same checks and the same [`admission`].
//!
//! The wire types, the cryptography and the facilitator client are the `payments` crate's.

pub mod admission;
pub mod challenge;
pub mod credential;
pub mod inband;
pub mod mpp;
pub mod payer_rate;
pub mod pending;
pub mod receipt;
pub mod reconcile;
pub mod recovery;
pub mod siwx;
mod terms;

use std::sync::Arc;
use std::time::Duration;

use payments::{Address, Facilitator, HttpFacilitator, Network};
use store::credentials::CredentialLedger;

use crate::core::config::GatewayConfig;

pub use crate::core::prices::Priced;

/// Everything a priced route needs: who is paid, on which network, who verifies and settles,
/// and where spent credentials are recorded.
pub struct Gate {
    pub pay_to: Address,
    pub network: &'static Network,
    pub max_timeout_seconds: u64,
    pub facilitator: Arc<dyn Facilitator>,
    pub credentials: Arc<dyn CredentialLedger>,
    /// An unclaimed paid reservation is reaped after this long.
    pub admission_ttl: Duration,
    /// The gateway's claim on a paid task while it settles (renewed every third of it).
    pub admission_lease: Duration,
    /// Crash testing: where a paid admission aborts the process (`--fault-point`).
    pub fault_point: Option<FaultPoint>,
    /// The MPP challenge key, for routes priced with `:mpp` (`--mpp-secret-file`).
    pub mpp: Option<mpp::MppKey>,
    /// How long a payer of a SIWX entrypoint may sign in instead of paying again.
    pub entitlement_ttl: Duration,
    /// Bounds on credentials not yet known to pay (see [`pending`]).
    pub pending: pending::PendingPayments,
    /// Paid creations per payer and second (see [`payer_rate`]); `None`: unlimited.
    pub payer_rate: Option<payer_rate::PayerRate>,
    /// What the last settlement recovery sweep left unreconciled (see [`recovery`]), for the
    /// operator console: the sweep's own count, so the console adds no reads of its own.
    pub unreconciled: recovery::LastCount,
    /// The facilitator's `upto` settler address, once asked (see [`Gate::upto_facilitator`]).
    pub upto_facilitator: tokio::sync::OnceCell<Address>,
}

/// Points of a paid admission where crash tests stop the gateway dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// settle=after: the run ended, its payment not yet moved to `settling`.
    AfterRun,
    AfterSettle,
    AfterReceipt,
}

impl FaultPoint {
    fn parse(text: &str) -> Option<FaultPoint> {
        match text.trim() {
            "after-run" => Some(FaultPoint::AfterRun),
            "after-settle" => Some(FaultPoint::AfterSettle),
            "after-receipt" => Some(FaultPoint::AfterReceipt),
            _ => None,
        }
    }

    /// Aborts the process (no unwinding, no cleanup: what SIGKILL does) when `at` is armed.
    pub(crate) fn trip(armed: Option<FaultPoint>, at: FaultPoint) {
        if armed == Some(at) {
            eprintln!("gateway: fault point {at:?} reached; aborting");
            std::process::abort();
        }
    }
}

/// Why the payment settings cannot be used; the gateway refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum GateConfigError {
    #[error(
        "payments need both --pay-to (PAY_TO) and --facilitator-url (FACILITATOR_URL); only {0} is set"
    )]
    Incomplete(&'static str),
    #[error("--pay-to (PAY_TO) is not an EVM address")]
    PayTo,
    #[error("--payment-network (PAYMENT_NETWORK) {0:?} is not one of: {1}")]
    Network(String, String),
    #[error("--facilitator-url (FACILITATOR_URL): {0}")]
    Facilitator(payments::FacilitatorError),
    #[error(transparent)]
    Mpp(#[from] mpp::MppConfigError),
}

impl Gate {
    /// The gate the settings describe: `None` when neither payee nor facilitator is set (the
    /// gateway then answers priced routes with 503); an error when only one is, or either is
    /// unusable.
    pub fn from_config(
        config: &GatewayConfig,
        credentials: Arc<dyn CredentialLedger>,
    ) -> Result<Option<Gate>, GateConfigError> {
        let (pay_to, url) = match (&config.pay_to, &config.facilitator_url) {
            (None, None) => return Ok(None),
            (Some(_), None) => return Err(GateConfigError::Incomplete("--pay-to")),
            (None, Some(_)) => return Err(GateConfigError::Incomplete("--facilitator-url")),
            (Some(pay_to), Some(url)) => (pay_to, url),
        };
        let pay_to: Address = pay_to.trim().parse().map_err(|_| GateConfigError::PayTo)?;
        let network = Network::find(config.payment_network.trim()).ok_or_else(|| {
            GateConfigError::Network(config.payment_network.clone(), Network::known())
        })?;
        let facilitator = HttpFacilitator::new(
            url.expose(),
            Duration::from_millis(config.facilitator_timeout_ms.max(1)),
        )
        .map_err(GateConfigError::Facilitator)?;
        let mut gate = Gate::new(pay_to, network, Arc::new(facilitator), credentials, config);
        gate.mpp = mpp::MppKey::from_config(config)?;
        Ok(Some(gate))
    }

    /// A gate over any facilitator (tests use in-process ones).
    pub fn new(
        pay_to: Address,
        network: &'static Network,
        facilitator: Arc<dyn Facilitator>,
        credentials: Arc<dyn CredentialLedger>,
        config: &GatewayConfig,
    ) -> Gate {
        Gate {
            pay_to,
            network,
            max_timeout_seconds: config.payment_timeout_seconds.max(1),
            facilitator,
            credentials,
            admission_ttl: Duration::from_millis(config.paid_admission_ttl_ms.max(1)),
            admission_lease: Duration::from_millis(config.admission_lease_ms.max(3)),
            fault_point: config.fault_point.as_deref().and_then(FaultPoint::parse),
            mpp: None,
            entitlement_ttl: Duration::from_secs(config.entitlement_ttl_seconds.max(1)),
            pending: pending::PendingPayments::from_config(config),
            payer_rate: None,
            unreconciled: recovery::LastCount::default(),
            upto_facilitator: tokio::sync::OnceCell::new(),
        }
    }
}

/// A priced request that carries a credential which passed the offline checks.
pub struct Payment<'a> {
    pub gate: &'a Gate,
    pub terms: payments::Terms,
    pub checked: credential::Checked,
    pub rail: Rail<'a>,
    /// A SIWX entrypoint: its settled payment entitles the payer to sign in next time.
    pub entitles: bool,
}

/// The protocol a payment came by, which shapes its refusals and its receipt.
pub enum Rail<'a> {
    /// x402: `402` with `PAYMENT-REQUIRED`, receipt in `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`.
    X402,
    /// MPP: `402` with `WWW-Authenticate: Payment` and a problem body, receipt in
    /// `Payment-Receipt`; `challenge_id` is the challenge the credential answered.
    Mpp {
        route: Box<mpp::MppRoute<'a>>,
        challenge_id: String,
    },
}

impl Rail<'_> {
    /// The `402` of a payment refused after the offline checks: `problem` is MPP's name for
    /// the reason (x402 carries only the words).
    pub fn refused(
        &self,
        terms: &payments::Terms,
        problem: payments::mpp::Problem,
        reason: &str,
    ) -> axum::response::Response {
        match self {
            Rail::X402 => challenge::payment_required(terms, reason),
            Rail::Mpp { route, .. } => route.challenge(problem, reason),
        }
    }

    /// The receipt of `settlement`, in the rail's header.
    pub fn receipt(
        &self,
        terms: &payments::Terms,
        version: payments::X402Version,
        settlement: &payments::wire::facilitator::SettleResponse,
    ) -> receipt::Receipt {
        match self {
            Rail::X402 => receipt::Receipt::of(version, settlement),
            Rail::Mpp { challenge_id, .. } => {
                receipt::Receipt::mpp(challenge_id, terms.network.chain_id, settlement)
            }
        }
    }

    /// The challenge id an MPP payment answered (kept with its credential record, so that a
    /// recovered settlement gets the same receipt).
    pub fn challenge_id(&self) -> Option<&str> {
        match self {
            Rail::X402 => None,
            Rail::Mpp { challenge_id, .. } => Some(challenge_id),
        }
    }
}

/// What the payment gate reads of the gateway's shared state, and no more: `pay` takes this
/// rather than [`crate::core::state::AppState`], which holds the gate
/// ([`crate::core::state::AppState::pay_context`] makes one).
#[derive(Clone, Copy)]
pub struct PayContext<'a> {
    pub config: &'a crate::core::config::GatewayConfig,
    /// `None` when this gateway takes no payments.
    pub gate: Option<&'a Gate>,
    pub store: &'a std::sync::Arc<dyn store::TaskStore>,
    pub store_memory: &'a crate::core::store_memory::MemoryWatch,
}

/// The gate's first word on a request for `entrypoint` through `route`: `Ok(None)` when the
/// route is free, `Ok(Some(payment))` when it is priced and paid for (so far: offline checks
/// only), and the answer to send otherwise (a `402` challenge, or `503` when this gateway
/// takes no payments), boxed: it is a whole HTTP answer. Async: a SIWX entrypoint's `402`
/// carries a sign-in offer whose nonce is recorded first.
pub async fn check<'a>(
    state: PayContext<'a>,
    entrypoint: &store::registry::EntrypointInfo,
    route: Priced,
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
) -> Result<Option<Payment<'a>>, Box<axum::response::Response>> {
    match crate::core::prices::price_of(entrypoint, route) {
        None => Ok(None),
        Some(price) => check_priced(state, entrypoint, price, headers, uri)
            .await
            .map(Some),
    }
}

/// The origin payments and sign-ins are bound to (see
/// [`crate::core::origin::security_origin`]).
pub fn security_origin(
    state: PayContext<'_>,
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
) -> String {
    crate::core::origin::security_origin(state.config, headers, uri)
}

/// The x402 `resource` a request pays for: the route's URL at the security origin and, when
/// the path does not name the entrypoint (`POST /tasks` and the A2A bindings carry it in the
/// body), the entrypoint as `?skillId=`, so that a credential made for one skill's task does
/// not pay another skill's at the same price.
pub fn resource_url(origin: &str, path: &str, entrypoint: &str) -> String {
    if path.contains("/entrypoints/") {
        return format!("{origin}{path}");
    }
    let skill: String = form_urlencoded::byte_serialize(entrypoint.as_bytes()).collect();
    format!("{origin}{path}?skillId={skill}")
}

/// [`check`] for a route whose `price` the caller already looked up (task creation checks
/// the store and the caller's token between the two).
///
/// What the payment is bound to: the x402 `resource` is this route's URL at the
/// [`security_origin`] ([`resource_url`]: with the entrypoint when the path does not name it;
/// a v2 credential must name it); an MPP challenge's `opaque` carries the
/// route's path and the entrypoint, under the challenge id's HMAC.
pub async fn check_priced<'a>(
    state: PayContext<'a>,
    entrypoint: &store::registry::EntrypointInfo,
    price: &str,
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
) -> Result<Payment<'a>, Box<axum::response::Response>> {
    use axum::response::IntoResponse;

    let Some(gate) = state.gate else {
        return Err(Box::new(
            crate::core::prices::payments_disabled().into_response(),
        ));
    };
    let origin = security_origin(state, headers, uri);
    let resource = resource_url(&origin, uri.path(), &entrypoint.key);
    let terms = gate
        .terms(entrypoint, price, resource)
        .await
        .map_err(|err| Box::new(err.into_response()))?;
    let protocol = entrypoint
        .price
        .as_ref()
        .map(|price| price.protocol)
        .unwrap_or_default();
    if protocol == store::registry::PaymentProtocol::Mpp {
        let Some(key) = gate.mpp.as_ref() else {
            return Err(Box::new(mpp::mpp_disabled().into_response()));
        };
        let bound = mpp::Bound {
            route: uri.path(),
            entrypoint: &entrypoint.key,
        };
        let route = mpp::MppRoute::new(key, &terms, &origin, bound)
            .map_err(|err| Box::new(err.into_response()))?;
        return match route.read(headers, &terms)? {
            Some((checked, challenge_id)) => Ok(Payment {
                gate,
                terms,
                checked,
                rail: Rail::Mpp {
                    route: Box::new(route),
                    challenge_id,
                },
                entitles: entrypoint.siwx.is_some(),
            }),
            None => Err(Box::new(route.challenge(
                payments::mpp::Problem::PaymentRequired,
                "Payment is required",
            ))),
        };
    }
    let refusal = match credential::read(headers, &terms) {
        Ok(Some(checked)) => {
            return Ok(Payment {
                gate,
                terms,
                checked,
                rail: Rail::X402,
                entitles: entrypoint.siwx.is_some(),
            });
        }
        Ok(None) => challenge::CREDENTIAL_REQUIRED.to_owned(),
        Err(reason) => reason,
    };
    // A SIWX entrypoint's 402 also offers to sign in (for a payer entitled already).
    let offer = match entrypoint.siwx {
        Some(_) => siwx::offer_beside_payment(gate, &origin)
            .await
            .map(|offer| (payments::siwx::SIGN_IN_WITH_X, offer)),
        None => None,
    };
    Err(Box::new(challenge::payment_required_with(
        &terms, &refusal, offer,
    )))
}

#[cfg(test)]
mod tests {
    use super::resource_url;

    #[test]
    fn a_resource_names_its_entrypoint() {
        assert_eq!(
            resource_url("https://a.example", "/entrypoints/echo/invoke", "echo"),
            "https://a.example/entrypoints/echo/invoke"
        );
        assert_eq!(
            resource_url("https://a.example", "/tasks", "echo"),
            "https://a.example/tasks?skillId=echo"
        );
        assert_eq!(
            resource_url("http://127.0.0.1:8080", "/a2a/message:send", "a b&c"),
            "http://127.0.0.1:8080/a2a/message:send?skillId=a+b%26c"
        );
    }
}
