//! The id of a payment-required task: the gateway keeps nothing for it, so the id itself says
//! what was offered.
//!
//! `x402-{uuid}-{expiry}-{fingerprint}`: a fresh UUID (so that every offer's id is new), the
//! Unix second after which the offer is void, and a SHA-256 fingerprint (128 bits, base64url)
//! of those with the caller (its owner hash), the skill, the context the caller named (if any)
//! and the input. The payment message names the id and carries the original request again; the
//! gateway recomputes the fingerprint from that request and its caller, so a payment is only
//! admitted for the very request that was offered, by the caller it was offered to, while the
//! offer stands. Nothing is stored until the payment is admitted, and the admitted task takes
//! this id, so a second payment for the same offer finds the task and is refused.
//!
//! The fingerprint is not keyed: it binds, it does not authorize. Whoever could compute one
//! is the caller itself (it needs the caller's token), and all it could gain by minting an id
//! is to choose its own task's id: the payment it must still make meets the whole gate, and a
//! task id in use is refused before any credential is claimed.

use base64::Engine;
use sha2::{Digest, Sha256};

use protocol::token::OwnerHash;

const PREFIX: &str = "x402-";
/// Hex digits of a simple (hyphenless) UUID.
const UUID_LEN: usize = 32;
/// Bytes of SHA-256 the fingerprint keeps.
const FINGERPRINT_BYTES: usize = 16;

/// What an offer is for.
pub struct Offered<'a> {
    pub owner: &'a OwnerHash,
    pub skill: &'a str,
    /// The context the request named; `None`: the task is its own context.
    pub context_id: Option<&'a str>,
    pub input: &'a serde_json::Value,
}

/// A new offer's task id, valid until `expiry` (Unix seconds).
pub fn issue(offered: &Offered<'_>, expiry: u64) -> String {
    let uuid = uuid::Uuid::new_v4().simple().to_string();
    let fingerprint = fingerprint(&uuid, expiry, offered);
    format!("{PREFIX}{uuid}-{expiry}-{fingerprint}")
}

/// Whether `task_id` has the shape of an offer's id (only such ids may be paid in-band).
pub fn is_offer(task_id: &str) -> bool {
    parse(task_id).is_some()
}

/// Why an offer's id does not admit a payment.
#[derive(Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Not an offer's id.
    NotAnOffer,
    /// Its time passed.
    Expired,
    /// It was made for another request or caller.
    OtherRequest,
}

/// Checks that `task_id` offered `offered` and still stands at `now`.
pub fn check(task_id: &str, offered: &Offered<'_>, now: u64) -> Result<(), Mismatch> {
    let (uuid, expiry, fingerprint_text) = parse(task_id).ok_or(Mismatch::NotAnOffer)?;
    if fingerprint(uuid, expiry, offered) != fingerprint_text {
        return Err(Mismatch::OtherRequest);
    }
    if expiry <= now {
        return Err(Mismatch::Expired);
    }
    Ok(())
}

fn parse(task_id: &str) -> Option<(&str, u64, &str)> {
    let rest = task_id.strip_prefix(PREFIX)?;
    let uuid = rest.get(..UUID_LEN)?;
    if !uuid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let rest = rest.get(UUID_LEN..)?.strip_prefix('-')?;
    let (expiry, fingerprint) = rest.split_once('-')?;
    if expiry.is_empty() || expiry.len() > 20 || !expiry.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let expiry = expiry.parse().ok()?;
    // 16 bytes are 22 base64url characters.
    (fingerprint.len() == 22).then_some((uuid, expiry, fingerprint))
}

/// Each field is length-prefixed, so no two different offers hash the same bytes.
fn fingerprint(uuid: &str, expiry: u64, offered: &Offered<'_>) -> String {
    let input = serde_json::to_string(offered.input).unwrap_or_default();
    let mut hash = Sha256::new();
    hash.update(b"a2a-x402-offer-v1");
    for field in [
        uuid,
        &expiry.to_string(),
        offered.owner.as_str(),
        offered.skill,
        offered.context_id.map_or("\u{0}none", |context| context),
        &input,
    ] {
        hash.update((field.len() as u64).to_be_bytes());
        hash.update(field.as_bytes());
    }
    let digest = hash.finalize();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..FINGERPRINT_BYTES])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn owner(byte: char) -> OwnerHash {
        OwnerHash::from_hex(&byte.to_string().repeat(64)).unwrap_or_else(OwnerHash::nobody)
    }

    #[test]
    fn an_offer_admits_its_own_request_only() {
        let (alice, bob) = (owner('a'), owner('b'));
        let input = json!({"text": "hello"});
        let offered = Offered {
            owner: &alice,
            skill: "summarize",
            context_id: None,
            input: &input,
        };
        let id = issue(&offered, 1_000);
        assert!(id.len() <= 256, "{id}");
        assert!(is_offer(&id));
        assert_eq!(check(&id, &offered, 999), Ok(()));
        assert_eq!(check(&id, &offered, 1_000), Err(Mismatch::Expired));
        let other_input = json!({"text": "hullo"});
        for other in [
            Offered {
                owner: &bob,
                ..offered
            },
            Offered {
                skill: "count",
                ..offered
            },
            Offered {
                context_id: Some("ctx"),
                ..offered
            },
            Offered {
                input: &other_input,
                ..offered
            },
        ] {
            assert_eq!(check(&id, &other, 999), Err(Mismatch::OtherRequest));
        }
        // A later expiry written into the id does not carry the fingerprint along.
        let stretched = id.replacen("-1000-", "-9000-", 1);
        assert_eq!(
            check(&stretched, &offered, 999),
            Err(Mismatch::OtherRequest)
        );
    }

    #[test]
    fn other_ids_are_not_offers() {
        for id in [
            "",
            "x402-",
            "5f0c1d9e-7f43-4b53-9f7e-0f3b1c2d3e4f",
            "x402-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-1-AAAAAAAAAAAAAAAAAAAAAA",
            "x402-0123456789abcdef0123456789abcdef--AAAAAAAAAAAAAAAAAAAAAA",
            "x402-0123456789abcdef0123456789abcdef-1-short",
        ] {
            assert!(!is_offer(id), "{id}");
        }
        assert!(is_offer(
            "x402-0123456789abcdef0123456789abcdef-1-AAAAAAAAAAAAAAAAAAAAAA"
        ));
    }
}
