//! Paying for priced calls (x402, and MPP's "Payment" HTTP authentication scheme).
//!
//! A priced `invoke`, `stream` or `send_message` first answers `402 Payment Required` with a
//! challenge: x402 v2 in the `PAYMENT-REQUIRED` header and x402 v1 in the JSON body, either or
//! both. With a [`Payer`] in the call's options the client reads the challenge
//! ([`PaymentRequired`]), asks the payer for a credential and sends the same request once more
//! with it (`PAYMENT-SIGNATURE` for v2, `X-PAYMENT` for v1): same body, same
//! `Task-Access-Token`, same `Idempotency-Key`. A second 402 is an error, never a second
//! payment. Without a payer the 402 is a [`ClientError::PaymentRequired`] naming the price.
//!
//! The 402 is the answering server's word, so a payer signs only for what was requested: the
//! client hands it the requested URL with the challenge ([`PaymentRequired::target`], and
//! [`Payer::sign_in`]'s `target`), and [`KeyPayer`] refuses ([`PayError::Refused`]) an x402
//! resource of another origin or path, an MPP realm other than the requested host, a sign-in
//! offer for another domain or origin, and networks and assets other than the known networks'
//! USDC, before anything is signed; what it signs is valid for at most
//! [`KeyPayer::max_validity`] seconds (300 by default).
//!
//! The signing itself is the `payments` crate's; [`KeyPayer`] wraps its [`LocalPayer`] with a
//! spend cap and a preferred x402 version. Credentials are spendable by whoever holds them: no
//! type here prints one (`PaymentHeader`'s `Debug` redacts the value), and the key is never
//! printed either (`LocalPayer`'s `Debug` shows the address only).

use std::fmt;

use payments::Terms;
use payments::wire::v1::ChallengeV1;
use payments::wire::v2::ChallengeV2;
use reqwest::header::HeaderValue;
use reqwest::{RequestBuilder, Response, StatusCode, Url};
use serde_json::Value;

pub use payments::payer::{Challenge, PaymentHeader};
pub use payments::target::DEFAULT_MAX_VALIDITY_SECONDS;
pub use payments::wire::facilitator::SettleResponse;
pub use payments::{
    Address, Limits, LocalPayer, PayError, Refusal, RequestTarget, U256, X402Version,
};

use super::error::ClientError;
use super::tasks::Settlement;
use super::{Client, read_limited};

/// Answers a 402 with a credential. Called at most once per call, before the retry; an error
/// ends the call without sending anything more.
///
/// What a 402 asks is the server's word: a payer signs only for the request that was made
/// (`required.target()`, `target`), and refuses anything else ([`PayError::Refused`]).
pub trait Payer: Send + Sync + fmt::Debug {
    fn pay(&self, required: &PaymentRequired) -> Result<PaymentHeader, PayError>;

    /// A `SIGN-IN-WITH-X` header answering `offer` (a 401's or 402's
    /// `extensions["sign-in-with-x"]`), made in answer to a request for `target`, when this
    /// payer signs in: an auth-only entrypoint then runs, and a priced one runs unpaid for a
    /// payer entitled to it. `Ok(None)`: no sign-in; an error ends the call, nothing sent.
    fn sign_in(
        &self,
        offer: &Value,
        target: &RequestTarget,
    ) -> Result<Option<PaymentHeader>, PayError> {
        let _ = (offer, target);
        Ok(None)
    }
}

/// A [`LocalPayer`] with a spend cap, a bound on how long what it signs stays valid and a
/// preferred x402 version. It signs only for the request the 402 answered (see [`Payer`]).
///
/// Version choice: the preferred version's challenge when the 402 carries it, else the other
/// one (a server speaking only v1 still gets paid by a v2-preferring payer, and back).
#[derive(Debug, Clone)]
pub struct KeyPayer {
    key: LocalPayer,
    limits: Limits,
    version: X402Version,
}

impl KeyPayer {
    /// Pays from `key`, never more than `max_amount` atomic USDC units per call (`None`: no
    /// cap), preferring x402 v2, signing authorizations valid for at most
    /// [`DEFAULT_MAX_VALIDITY_SECONDS`].
    pub fn new(key: LocalPayer, max_amount: Option<U256>) -> Self {
        KeyPayer {
            key,
            limits: Limits {
                cap: max_amount,
                max_validity_seconds: DEFAULT_MAX_VALIDITY_SECONDS,
            },
            version: X402Version::V2,
        }
    }

    /// Prefers `version`'s challenge when the 402 carries both.
    pub fn prefer(mut self, version: X402Version) -> Self {
        self.version = version;
        self
    }

    /// Signs authorizations valid for at most `seconds` (at least 1) from now, whatever the
    /// challenge's `maxTimeoutSeconds` (or MPP `expires`) allows.
    pub fn max_validity(mut self, seconds: u64) -> Self {
        self.limits.max_validity_seconds = seconds.max(1);
        self
    }

    /// The spend cap and validity bound.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The paying address.
    pub fn address(&self) -> Address {
        self.key.address()
    }
}

impl Payer for KeyPayer {
    fn pay(&self, required: &PaymentRequired) -> Result<PaymentHeader, PayError> {
        let Some(challenge) = required.challenge(self.version) else {
            // No x402 offer: an MPP one ("Payment" scheme), else nothing to pay.
            if let Some(www_authenticate) = required.mpp() {
                return self.pay_mpp(www_authenticate, required.target_or_refuse()?);
            }
            return Err(required
                .header_error
                .clone()
                .unwrap_or(PayError::NoChallenge));
        };
        self.key.answer_for(
            &challenge,
            required.target_or_refuse()?,
            &self.limits,
            payments::unix_now(),
        )
    }

    fn sign_in(
        &self,
        offer: &Value,
        target: &RequestTarget,
    ) -> Result<Option<PaymentHeader>, PayError> {
        self.sign_siwx(offer, target)
    }
}

impl KeyPayer {
    /// Signs the SIWX offer with the key (EIP-4361 message, EIP-191 signature): `Ok(None)` for
    /// an offer it cannot read or sign (no EVM chain), an error for one it refuses (another
    /// domain or origin than `target`'s, unknown chains).
    fn sign_siwx(
        &self,
        offer: &Value,
        target: &RequestTarget,
    ) -> Result<Option<PaymentHeader>, PayError> {
        let Ok(extension) = serde_json::from_value::<payments::siwx::SiwxExtension>(offer.clone())
        else {
            return Ok(None);
        };
        let value = match self.key.sign_in_with_x_for(&extension, target) {
            Ok(value) => value,
            Err(payments::siwx::SiwxSignError::Refused(refusal)) => {
                return Err(PayError::Refused(refusal));
            }
            Err(_) => return Ok(None),
        };
        Ok(Some(PaymentHeader {
            version: X402Version::V2,
            name: payments::siwx::SIGN_IN_WITH_X,
            value,
            amount: U256::ZERO,
            pay_to: Address::ZERO,
            payer: self.key.address(),
            nonce: Default::default(),
        }))
    }

    /// Answers an MPP challenge (`WWW-Authenticate: Payment …`) with an `evm` charge
    /// credential in `Authorization: Payment …`.
    fn pay_mpp(
        &self,
        www_authenticate: &str,
        target: &RequestTarget,
    ) -> Result<PaymentHeader, PayError> {
        let payment = self
            .key
            .answer_mpp_for(www_authenticate, target, &self.limits, payments::unix_now())
            .map_err(|err| match err {
                payments::mpp::MppPayError::Refused(refusal) => PayError::Refused(refusal),
                other => PayError::Mpp(other.to_string()),
            })?;
        Ok(PaymentHeader {
            // Not an x402 credential; the field only matters to x402 headers.
            version: X402Version::V2,
            name: payments::mpp::AUTHORIZATION,
            value: payment.authorization,
            amount: payment.amount,
            pay_to: payment.recipient,
            payer: payment.payer,
            nonce: payment.nonce,
        })
    }
}

/// `request` carrying `credential` in its header (`PAYMENT-SIGNATURE` or `X-PAYMENT`), the
/// value marked sensitive so that HTTP-level `Debug` output hides it.
pub(crate) fn with_credential(
    request: RequestBuilder,
    credential: Option<&PaymentHeader>,
) -> RequestBuilder {
    let Some(credential) = credential else {
        return request;
    };
    match HeaderValue::from_str(&credential.value) {
        Ok(mut value) => {
            value.set_sensitive(true);
            request.header(credential.name, value)
        }
        // Base64 always is a valid header value; were it not, reqwest fails the send with an
        // error that does not quote the value.
        Err(_) => request.header(credential.name, credential.value.as_str()),
    }
}

/// What a 402 asks for: the v2 challenge of its `PAYMENT-REQUIRED` header and the v1 challenge
/// of its body, whichever it carried in a shape this client reads, and the URL of the request
/// it answered ([`PaymentRequired::for_request`]): the only one a payer signs for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PaymentRequired {
    v2: Option<ChallengeV2>,
    v1: Option<ChallengeV1>,
    /// Why a `PAYMENT-REQUIRED` header that was there could not be read (reported when there
    /// is nothing else to pay).
    header_error: Option<PayError>,
    /// A `WWW-Authenticate` value offering the "Payment" scheme (MPP).
    mpp: Option<String>,
    /// The request the 402 answered.
    target: Option<RequestTarget>,
}

impl PaymentRequired {
    /// Reads a 402's `PAYMENT-REQUIRED` header and body. Parts that are missing or unreadable
    /// are left out; see [`PaymentRequired::is_empty`].
    pub fn parse(payment_required: Option<&str>, body: &[u8]) -> Self {
        let mut required = PaymentRequired::default();
        if let Some(header) = payment_required {
            match Challenge::from_response(Some(header), &[]) {
                Ok(Challenge::V2(challenge)) => required.v2 = Some(challenge),
                Ok(Challenge::V1(_)) => {}
                Err(err) => required.header_error = Some(err),
            }
        }
        if let Ok(Challenge::V1(challenge)) = Challenge::from_response(None, body) {
            required.v1 = Some(challenge);
        }
        required
    }

    /// Ties the 402 to the request it answered, sent to `url`: payers sign only for it.
    pub fn for_request(mut self, url: &Url) -> Self {
        self.target = Some(RequestTarget::new(url.clone()));
        self
    }

    /// The request the 402 answered, when known.
    pub fn target(&self) -> Option<&RequestTarget> {
        self.target.as_ref()
    }

    /// [`PaymentRequired::target`], or the refusal to sign for a 402 tied to no request.
    pub fn target_or_refuse(&self) -> Result<&RequestTarget, PayError> {
        self.target
            .as_ref()
            .ok_or(PayError::Refused(Refusal::NoTarget))
    }

    /// Adds the 402's `WWW-Authenticate` value when it offers the "Payment" scheme (MPP).
    pub fn with_www_authenticate(mut self, value: Option<&str>) -> Self {
        self.mpp = value
            .filter(|value| {
                value
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .any(|word| word.eq_ignore_ascii_case(payments::mpp::SCHEME))
            })
            .map(str::to_owned);
        self
    }

    /// The Sign-In-With-X offer of the v2 challenge (`extensions["sign-in-with-x"]`), if any.
    pub fn siwx(&self) -> Option<&Value> {
        self.v2
            .as_ref()
            .and_then(|challenge| challenge.extensions.get(payments::siwx::SIGN_IN_WITH_X))
    }

    /// The MPP offer (`WWW-Authenticate` value), if the 402 made one.
    pub fn mpp(&self) -> Option<&str> {
        self.mpp.as_deref()
    }

    /// No challenge at all: a 402 that is an error document, not an offer.
    pub fn is_empty(&self) -> bool {
        self.v2.is_none() && self.v1.is_none() && self.mpp.is_none()
    }

    pub fn v2(&self) -> Option<&ChallengeV2> {
        self.v2.as_ref()
    }

    pub fn v1(&self) -> Option<&ChallengeV1> {
        self.v1.as_ref()
    }

    /// The challenge of `preferred`, else the other one.
    pub fn challenge(&self, preferred: X402Version) -> Option<Challenge> {
        let v2 = || self.v2.clone().map(Challenge::V2);
        let v1 = || self.v1.clone().map(Challenge::V1);
        match preferred {
            X402Version::V2 => v2().or_else(v1),
            X402Version::V1 => v1().or_else(v2),
        }
    }

    /// The first offer this client could pay (v2 first): price, network, payee.
    pub fn terms(&self) -> Option<Terms> {
        let v2 = self.v2.as_ref().and_then(|challenge| {
            challenge.accepts.iter().find_map(|requirement| {
                Terms::from_v2(requirement, challenge.resource.clone()).ok()
            })
        });
        v2.or_else(|| {
            self.v1.as_ref().and_then(|challenge| {
                challenge
                    .accepts
                    .iter()
                    .find_map(|requirement| Terms::from_v1(requirement).ok())
            })
        })
    }

    /// The server's reason (the challenge's `error`), v2 first.
    pub fn reason(&self) -> Option<&str> {
        self.v2
            .as_ref()
            .and_then(|challenge| challenge.error.as_deref())
            .or_else(|| self.v1.as_ref().map(|challenge| challenge.error.as_str()))
            .filter(|reason| !reason.trim().is_empty())
    }
}

/// A price for messages: `0.001 USDC on base-sepolia to 0x…`.
pub(crate) fn describe_terms(terms: &Terms) -> String {
    format!(
        "{} USDC on {} to {}",
        payments::amount::to_decimal(terms.amount),
        terms.network.name,
        terms.pay_to
    )
}

/// How a call that met a 402 (or failed before any answer) ended: the error, and what the last
/// answer said, for callers that report more than the error (`send_message`).
#[derive(Debug)]
pub(crate) struct Unanswered {
    /// The last answer's status; `None` when no answer came.
    pub status: Option<u16>,
    /// The last answer's body, when it could be read.
    pub body: Option<String>,
    pub settlement: Settlement,
    pub error: ClientError,
}

impl Unanswered {
    fn network(error: reqwest::Error) -> Self {
        Unanswered {
            status: None,
            body: None,
            settlement: Settlement::default(),
            error: ClientError::network(error),
        }
    }
}

impl Client {
    /// Sends `request(None)` (a request to `url`); on a 402 with a payer, pays and sends
    /// `request(Some(credential))` once. Returns the answer that is not a 402, whatever its
    /// status, for the caller to read.
    pub(crate) async fn send_paying(
        &self,
        url: &Url,
        request: impl Fn(Option<&PaymentHeader>) -> RequestBuilder,
        payer: Option<&dyn Payer>,
    ) -> Result<Response, Unanswered> {
        let target = RequestTarget::new(url.clone());
        let mut response = request(None).send().await.map_err(Unanswered::network)?;
        if let Some(payer) = payer
            && response.status() == StatusCode::UNAUTHORIZED
        {
            response = self
                .sign_in_after_401(response, payer, &target, &request)
                .await?;
        }
        if response.status() != StatusCode::PAYMENT_REQUIRED {
            return Ok(response);
        }
        let (mut required, mut body, mut settlement) = self.read_402(response, url).await?;
        // A SIWX entrypoint: a payer entitled to it signs in instead of paying again; one that
        // is not gets a fresh 402 and pays. An offer the payer refuses ends the call.
        let sign_in = match payer.zip(required.siwx()) {
            Some((payer, offer)) => payer.sign_in(offer, &target).map_err(|err| Unanswered {
                status: Some(402),
                body: Some(body.clone()),
                settlement: settlement.clone(),
                error: ClientError::Payment(err),
            })?,
            None => None,
        };
        if let Some(sign_in) = sign_in {
            let response = request(Some(&sign_in))
                .send()
                .await
                .map_err(Unanswered::network)?;
            if response.status() != StatusCode::PAYMENT_REQUIRED {
                return Ok(response);
            }
            (required, body, settlement) = self.read_402(response, url).await?;
        }
        let Some(payer) = payer else {
            return Err(Unanswered {
                status: Some(402),
                error: payment_required(false, &required, &body),
                body: Some(body),
                settlement,
            });
        };
        // The payer refusing (over the cap, nothing payable) ends the call here: the credential
        // is never built, so nothing more is sent.
        let credential = payer.pay(&required).map_err(|err| Unanswered {
            status: Some(402),
            body: Some(body.clone()),
            settlement: settlement.clone(),
            error: ClientError::Payment(err),
        })?;
        tracing::debug!(
            version = credential.version.number(),
            amount = %payments::amount::to_decimal(credential.amount),
            payer = %credential.payer,
            "paying a 402"
        );
        let response = request(Some(&credential))
            .send()
            .await
            .map_err(Unanswered::network)?;
        if response.status() != StatusCode::PAYMENT_REQUIRED {
            return Ok(response);
        }
        let (required, body, settlement) = self.read_402(response, url).await?;
        Err(Unanswered {
            status: Some(402),
            error: payment_required(true, &required, &body),
            body: Some(body),
            settlement,
        })
    }

    /// A 401 of an auth-only entrypoint: signs its SIWX offer (made for `target`) and sends the
    /// request again; without an offer (or a signature) the 401 is the call's error, and so is
    /// the payer's refusal.
    async fn sign_in_after_401(
        &self,
        response: Response,
        payer: &dyn Payer,
        target: &RequestTarget,
        request: &impl Fn(Option<&PaymentHeader>) -> RequestBuilder,
    ) -> Result<Response, Unanswered> {
        let bytes = read_limited(response, self.options.max_response_bytes)
            .await
            .map_err(|error| Unanswered {
                status: Some(401),
                body: None,
                settlement: Settlement::default(),
                error,
            })?;
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let offer = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|value| {
                value
                    .get("extensions")?
                    .get(payments::siwx::SIGN_IN_WITH_X)
                    .cloned()
            });
        let sign_in = match offer {
            Some(offer) => payer.sign_in(&offer, target).map_err(|err| Unanswered {
                status: Some(401),
                body: Some(body.clone()),
                settlement: Settlement::default(),
                error: ClientError::Payment(err),
            })?,
            None => None,
        };
        match sign_in {
            Some(sign_in) => request(Some(&sign_in))
                .send()
                .await
                .map_err(Unanswered::network),
            None => Err(Unanswered {
                status: Some(401),
                error: ClientError::remote(401, body.clone()),
                body: Some(body),
                settlement: Settlement::default(),
            }),
        }
    }

    /// A 402's challenge (tied to the request for `url` it answered), body and settlement
    /// headers.
    async fn read_402(
        &self,
        response: Response,
        url: &Url,
    ) -> Result<(PaymentRequired, String, Settlement), Unanswered> {
        let settlement = Settlement::from_headers(response.headers());
        let header = response
            .headers()
            .get(payments::PAYMENT_REQUIRED)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let www_authenticate = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let bytes = read_limited(response, self.options.max_response_bytes)
            .await
            .map_err(|error| Unanswered {
                status: Some(402),
                body: None,
                settlement: settlement.clone(),
                error,
            })?;
        let required = PaymentRequired::parse(header.as_deref(), &bytes)
            .with_www_authenticate(www_authenticate.as_deref())
            .for_request(url);
        Ok((
            required,
            String::from_utf8_lossy(&bytes).into_owned(),
            settlement,
        ))
    }
}

/// The error a final 402 stands for: the terms and reason of its challenge, or the profile's
/// `{error:{code,message}}` (`settlement_failed`) when it carries no challenge.
fn payment_required(paid: bool, required: &PaymentRequired, body: &str) -> ClientError {
    let profile_error = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|value| value.get("error").filter(|e| e.is_object()).cloned());
    let field = |name: &str| {
        profile_error
            .as_ref()
            .and_then(|error| error.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    ClientError::PaymentRequired {
        paid,
        terms: required.terms().map(Box::new),
        reason: required
            .reason()
            .map(str::to_owned)
            .or_else(|| field("message")),
        code: field("code"),
        body: body.to_owned(),
    }
}

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
