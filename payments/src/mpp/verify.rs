//! Checking a credential's echoed challenge, statelessly: was it issued here (the HMAC over
//! what it echoes, compared in constant time), for this route (realm, method, intent, request
//! and digest equal to what the route issues, the route's `opaque` entries present), and is it
//! still open (`expires` required, and in the future). The order is mppx's
//! (`src/server/Mppx.ts`): HMAC, then the route's fields, then the expiry.
//!
//! Single use is the gateway's (an atomic claim of the challenge id, and of the EIP-3009
//! nonce, in Redis); [`ChallengeRejection::Replayed`] is its answer when the claim fails, so
//! that every rejection maps to a problem type in one place.

use super::challenge::{Challenge, ChallengeParams, ChallengeSecret};
use super::credential::CredentialError;
use super::evm::ChargeRejection;
use super::problem::Problem;

/// Why an echoed challenge is refused. Messages quote nothing of the credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeRejection {
    #[error("the challenge was not issued by this server")]
    Unknown,
    #[error("the challenge's {0} does not match this route's")]
    Mismatch(&'static str),
    #[error("the challenge has no expiry")]
    MissingExpires,
    #[error("the challenge's expiry is not an RFC 3339 date-time")]
    MalformedExpires,
    #[error("the challenge has expired")]
    Expired,
    #[error("the challenge was already used")]
    Replayed,
}

impl ChallengeRejection {
    pub fn problem(&self) -> Problem {
        match self {
            ChallengeRejection::Expired => Problem::PaymentExpired,
            _ => Problem::InvalidChallenge,
        }
    }
}

/// Checks `echoed` against `secret` and the route's `expected` parameters at `now` (Unix
/// seconds); its expiry (Unix seconds) on success, for the gateway's single-use record.
pub fn verify_challenge(
    echoed: &Challenge,
    secret: &ChallengeSecret,
    expected: &ChallengeParams,
    now: u64,
) -> Result<u64, ChallengeRejection> {
    if !echoed.id_matches(secret) {
        return Err(ChallengeRejection::Unknown);
    }
    for (field, ours, theirs) in [
        (
            "realm",
            Some(expected.realm.as_str()),
            Some(echoed.realm.as_str()),
        ),
        (
            "method",
            Some(expected.method.as_str()),
            Some(echoed.method.as_str()),
        ),
        (
            "intent",
            Some(expected.intent.as_str()),
            Some(echoed.intent.as_str()),
        ),
        (
            "request",
            Some(expected.request.as_str()),
            Some(echoed.request.as_str()),
        ),
        (
            "digest",
            expected.digest.as_deref(),
            echoed.digest.as_deref(),
        ),
    ] {
        if ours != theirs {
            return Err(ChallengeRejection::Mismatch(field));
        }
    }
    // `opaque` holds the route's entries and the challenge's own nonce: the route's must all
    // be there (the HMAC already vouches that the rest is ours).
    let opaque = echoed.opaque_map().unwrap_or_default();
    if expected
        .opaque
        .iter()
        .any(|(key, value)| opaque.get(key) != Some(value))
    {
        return Err(ChallengeRejection::Mismatch("opaque"));
    }
    let expires = echoed
        .expires
        .as_deref()
        .ok_or(ChallengeRejection::MissingExpires)?;
    let expires_at = crate::rfc3339::parse(expires).ok_or(ChallengeRejection::MalformedExpires)?;
    if now >= expires_at {
        return Err(ChallengeRejection::Expired);
    }
    Ok(expires_at)
}

/// Any reason a Payment credential is refused, with its problem type: what the gateway turns
/// into a 402 (a fresh challenge and a problem+json body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MppRejection {
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error(transparent)]
    Challenge(#[from] ChallengeRejection),
    #[error(transparent)]
    Charge(#[from] ChargeRejection),
}

impl MppRejection {
    pub fn problem(&self) -> Problem {
        match self {
            MppRejection::Credential(err) => err.problem(),
            MppRejection::Challenge(err) => err.problem(),
            MppRejection::Charge(err) => err.problem(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const NOW: u64 = 1_800_000_000;

    fn setup() -> Result<(ChallengeSecret, ChallengeParams, Challenge), Box<dyn std::error::Error>>
    {
        let secret = ChallengeSecret::new(*b"an example secret of 32+ bytes!!")?;
        let params = ChallengeParams::new(
            "api.example.com",
            "evm",
            "charge",
            &json!({"amount": "1000", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e"}),
        )?;
        let challenge = params.issue(&secret, NOW + 300)?;
        Ok((secret, params, challenge))
    }

    #[test]
    fn accepts_what_it_issued_until_expiry() -> TestResult {
        let (secret, params, challenge) = setup()?;
        assert_eq!(
            verify_challenge(&challenge, &secret, &params, NOW),
            Ok(NOW + 300)
        );
        assert_eq!(
            verify_challenge(&challenge, &secret, &params, NOW + 299),
            Ok(NOW + 300)
        );
        assert_eq!(
            verify_challenge(&challenge, &secret, &params, NOW + 300),
            Err(ChallengeRejection::Expired)
        );
        assert_eq!(
            ChallengeRejection::Expired.problem(),
            Problem::PaymentExpired
        );
        Ok(())
    }

    #[test]
    fn refuses_forged_foreign_and_unbounded_challenges() -> TestResult {
        let (secret, params, challenge) = setup()?;
        // Another server's secret.
        let other = ChallengeSecret::new([1u8; 32])?;
        assert_eq!(
            verify_challenge(&challenge, &other, &params, NOW),
            Err(ChallengeRejection::Unknown)
        );
        // Any echoed field changed breaks the HMAC: cheaper request, later expiry, new id.
        let cheaper = ChallengeParams::new(
            "api.example.com",
            "evm",
            "charge",
            &json!({"amount": "1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e"}),
        )?;
        for tampered in [
            Challenge {
                request: cheaper.request.clone(),
                ..challenge.clone()
            },
            Challenge {
                expires: Some("2099-01-01T00:00:00Z".into()),
                ..challenge.clone()
            },
            Challenge {
                id: "X6v1eo7fJ76gAxqY0xN9Jd__4lUyDDYmriryOM-5FO4".into(),
                ..challenge.clone()
            },
            Challenge {
                id: "!!".into(),
                ..challenge.clone()
            },
            Challenge {
                realm: "other.example.com".into(),
                ..challenge.clone()
            },
            Challenge {
                digest: Some("sha-256=:x:".into()),
                ..challenge.clone()
            },
        ] {
            assert_eq!(
                verify_challenge(&tampered, &secret, &params, NOW),
                Err(ChallengeRejection::Unknown)
            );
        }
        // A genuine challenge of another route (here: another price) is not this route's.
        let elsewhere = cheaper.issue(&secret, NOW + 300)?;
        assert_eq!(
            verify_challenge(&elsewhere, &secret, &params, NOW),
            Err(ChallengeRejection::Mismatch("request"))
        );
        let tagged = params
            .clone()
            .with_opaque(BTreeMap::from([("route".to_owned(), "a".to_owned())]))?;
        let other_route = params
            .clone()
            .with_opaque(BTreeMap::from([("route".to_owned(), "b".to_owned())]))?;
        let for_a = tagged.issue(&secret, NOW + 300)?;
        assert_eq!(
            verify_challenge(&for_a, &secret, &tagged, NOW),
            Ok(NOW + 300)
        );
        assert_eq!(
            verify_challenge(&for_a, &secret, &other_route, NOW),
            Err(ChallengeRejection::Mismatch("opaque"))
        );
        assert_eq!(
            verify_challenge(&challenge, &secret, &tagged, NOW),
            Err(ChallengeRejection::Mismatch("opaque"))
        );
        let bound = params.clone().with_digest("sha-256=:abc=:".into())?;
        assert_eq!(
            verify_challenge(&challenge, &secret, &bound, NOW),
            Err(ChallengeRejection::Mismatch("digest"))
        );
        // No expiry, or an unreadable one, is refused even with a valid id.
        let mut open = challenge.clone();
        open.expires = None;
        open.id = open.compute_id(&secret)?;
        assert_eq!(
            verify_challenge(&open, &secret, &params, NOW),
            Err(ChallengeRejection::MissingExpires)
        );
        open.expires = Some("tomorrow".into());
        open.id = open.compute_id(&secret)?;
        assert_eq!(
            verify_challenge(&open, &secret, &params, NOW),
            Err(ChallengeRejection::MalformedExpires)
        );
        for rejection in [
            ChallengeRejection::Unknown,
            ChallengeRejection::Mismatch("request"),
            ChallengeRejection::MissingExpires,
            ChallengeRejection::Replayed,
        ] {
            assert_eq!(rejection.problem(), Problem::InvalidChallenge);
        }
        Ok(())
    }
}
