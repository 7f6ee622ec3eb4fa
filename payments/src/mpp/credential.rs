//! A Payment credential: `Authorization: Payment <base64url-nopad JSON>` holding
//! `{challenge: {…}, source?, payload: {…}}` (draft-httpauth-payment, "Credentials").
//!
//! Read strictly and boundedly: the size is checked before anything is decoded, the scheme
//! must be `Payment` followed by one base64url token and nothing else, the JSON must have the
//! shape (wrong types and missing fields are errors; unknown fields are ignored, as the spec
//! asks). Every failure here is the spec's `malformed-credential`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::challenge::Challenge;
use super::problem::Problem;
use super::{MAX_CREDENTIAL_BYTES, SCHEME, b64};

/// Why an `Authorization` value is not a usable Payment credential. Messages quote nothing of
/// the header: it can be spent by whoever holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("Authorization is larger than {MAX_CREDENTIAL_BYTES} bytes")]
    TooLarge,
    #[error("Authorization is not of the Payment scheme")]
    Scheme,
    #[error("the Payment credential is not base64url")]
    NotBase64Url,
    #[error("the Payment credential is not a JSON document of the expected shape: {0}")]
    NotJson(String),
    #[error("the credential's challenge id is empty")]
    EmptyId,
    #[error("the credential's payload is not a JSON object")]
    Payload,
}

impl CredentialError {
    pub fn problem(&self) -> Problem {
        Problem::MalformedCredential
    }
}

/// A decoded credential. Its `payload` is the method's (see [`super::evm`]).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentCredential {
    /// The challenge, echoed as it was issued.
    pub challenge: Challenge,
    /// The payer, a DID (mppx's EVM client sends `did:pkh:eip155:<chainId>:<address>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub payload: Value,
}

impl std::fmt::Debug for PaymentCredential {
    /// The payload is what pays: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentCredential")
            .field("challenge_id", &self.challenge.id)
            .field("method", &self.challenge.method)
            .field("source", &self.source)
            .field("payload", &"<redacted>")
            .finish()
    }
}

impl PaymentCredential {
    /// Reads an `Authorization` header value.
    pub fn parse_authorization(header: &str) -> Result<Self, CredentialError> {
        if header.len() > MAX_CREDENTIAL_BYTES {
            return Err(CredentialError::TooLarge);
        }
        let header = header.trim_matches([' ', '\t']);
        let (scheme, rest) = header
            .split_once([' ', '\t'])
            .ok_or(CredentialError::Scheme)?;
        if !scheme.eq_ignore_ascii_case(SCHEME) {
            return Err(CredentialError::Scheme);
        }
        let token = rest.trim_start_matches([' ', '\t']);
        if token.is_empty() {
            return Err(CredentialError::NotBase64Url);
        }
        let bytes = b64::decode(token).ok_or(CredentialError::NotBase64Url)?;
        let credential: PaymentCredential = serde_json::from_slice(&bytes)
            .map_err(|err| CredentialError::NotJson(crate::wire::describe(&err)))?;
        if credential.challenge.id.is_empty() {
            return Err(CredentialError::EmptyId);
        }
        if !credential.payload.is_object() {
            return Err(CredentialError::Payload);
        }
        Ok(credential)
    }

    /// The `Authorization` header value: `Payment <base64url-nopad JSON>`.
    pub fn to_authorization(&self) -> String {
        // Serializing strings and a JSON value cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{SCHEME} {}", b64::encode(&json))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn encode(value: &Value) -> String {
        b64::encode(&serde_json::to_vec(value).unwrap_or_default())
    }

    fn good_document() -> Value {
        json!({
            "challenge": {
                "id": "x7Tg2pLqR9mKvNwY3hBcZa",
                "realm": "api.example.com",
                "method": "example",
                "intent": "charge",
                "request": "eyJhbW91bnQiOiIxMDAwIiwiY3VycmVuY3kiOiJVU0QiLCJyZWNpcGllbnQiOiJhY2N0XzEyMyJ9",
                "expires": "2025-01-15T12:05:00Z"
            },
            "payload": {"proof": "0xabc123..."}
        })
    }

    /// The spec's example credential, byte for byte.
    #[test]
    fn reads_the_spec_example() -> TestResult {
        let header = "Payment eyJjaGFsbGVuZ2UiOnsiaWQiOiJ4N1RnMnBMcVI5bUt2TndZM2hCY1phIiwicmVhbG0iOiJhcGkuZXhhbXBsZS5jb20iLCJtZXRob2QiOiJleGFtcGxlIiwiaW50ZW50IjoiY2hhcmdlIiwicmVxdWVzdCI6ImV5SmhiVzkxYm5RaU9pSXhNREF3SWl3aVkzVnljbVZ1WTNraU9pSlZVMFFpTENKeVpXTnBjR2xsYm5RaU9pSmhZMk4wWHpFeU15SjkiLCJleHBpcmVzIjoiMjAyNS0wMS0xNVQxMjowNTowMFoifSwicGF5bG9hZCI6eyJwcm9vZiI6IjB4YWJjMTIzLi4uIn19";
        let credential = PaymentCredential::parse_authorization(header)?;
        assert_eq!(serde_json::to_value(&credential)?, good_document());
        assert_eq!(credential.source, None);
        let again = PaymentCredential::parse_authorization(&credential.to_authorization())?;
        assert_eq!(again, credential);
        assert!(!credential.to_authorization().contains('='));
        assert!(!format!("{credential:?}").contains("abc123"));
        // Scheme without regard to case, surrounding whitespace ignored, padding tolerated.
        let token = header.trim_start_matches("Payment ");
        let lower = format!(" payment \t {token} ");
        assert_eq!(PaymentCredential::parse_authorization(&lower)?, credential);
        for source in ["a", "ab", "abc"] {
            let sourced = PaymentCredential {
                source: Some(source.into()),
                ..credential.clone()
            };
            let token = sourced.to_authorization().split_off("Payment ".len());
            let padding = "=".repeat((4 - token.len() % 4) % 4);
            let padded = format!("Payment {token}{padding}");
            assert_eq!(PaymentCredential::parse_authorization(&padded)?, sourced);
        }
        Ok(())
    }

    /// Nothing that comes in panics; everything wrong is a typed error.
    #[test]
    fn refuses_malformed_credentials() {
        let good = good_document();
        let with = |path: &[&str], value: Value| {
            let mut doc = good.clone();
            let mut node = &mut doc;
            for key in &path[..path.len() - 1] {
                node = &mut node[*key];
            }
            if let Some(object) = node.as_object_mut() {
                let last = path[path.len() - 1];
                if value.is_null() {
                    object.remove(last);
                } else {
                    object.insert(last.to_owned(), value);
                }
            }
            format!("Payment {}", encode(&doc))
        };
        // `None`: any `NotJson`.
        let cases: Vec<(String, Option<CredentialError>)> = vec![
            ("".into(), Some(CredentialError::Scheme)),
            ("Payment".into(), Some(CredentialError::Scheme)),
            ("Payment ".into(), Some(CredentialError::Scheme)),
            ("Payment  \t".into(), Some(CredentialError::Scheme)),
            (
                format!("Bearer {}", encode(&good)),
                Some(CredentialError::Scheme),
            ),
            (
                format!("Paymentx {}", encode(&good)),
                Some(CredentialError::Scheme),
            ),
            (
                format!("Payment{}", encode(&good)),
                Some(CredentialError::Scheme),
            ),
            ("Payment !!!".into(), Some(CredentialError::NotBase64Url)),
            (
                "Payment abc def".into(),
                Some(CredentialError::NotBase64Url),
            ),
            (
                "Payment eyJ9, Basic x".into(),
                Some(CredentialError::NotBase64Url),
            ),
            ("Payment ey+/".into(), Some(CredentialError::NotBase64Url)),
            ("Payment e===".into(), Some(CredentialError::NotBase64Url)),
            ("Payment a".into(), Some(CredentialError::NotBase64Url)),
            (
                "Payment \u{00e9}t\u{00e9}".into(),
                Some(CredentialError::NotBase64Url),
            ),
            (format!("Payment {}", b64::encode(b"{nope")), None),
            (format!("Payment {}", b64::encode(b"[]")), None),
            (format!("Payment {}", b64::encode(b"null")), None),
            (
                format!("Payment {}", b64::encode("\u{1f600}".as_bytes())),
                None,
            ),
            (
                format!("Payment {}", b64::encode(&[0xff, 0xfe, 0x00])),
                None,
            ),
            (with(&["payload"], Value::Null), None),
            (with(&["challenge"], Value::Null), None),
            (with(&["challenge"], json!("abc")), None),
            (with(&["challenge", "id"], Value::Null), None),
            (with(&["challenge", "id"], json!(5)), None),
            (
                with(&["challenge", "id"], json!("")),
                Some(CredentialError::EmptyId),
            ),
            (with(&["challenge", "realm"], Value::Null), None),
            (with(&["challenge", "method"], json!(["evm"])), None),
            (with(&["challenge", "intent"], Value::Null), None),
            (
                with(&["challenge", "request"], json!({"amount": "1"})),
                None,
            ),
            (with(&["challenge", "expires"], json!(1_736_942_700)), None),
            (with(&["challenge", "opaque"], json!({"a": "b"})), None),
            (with(&["source"], json!(7)), None),
            (
                with(&["payload"], json!("0xabc")),
                Some(CredentialError::Payload),
            ),
            (
                with(&["payload"], json!([1, 2])),
                Some(CredentialError::Payload),
            ),
            (
                format!("Payment {}", b64::encode(b"{\"payload\":{},\"challenge\":")),
                None,
            ),
            (
                format!("Payment {}", b64::encode("[".repeat(3000).as_bytes())),
                None,
            ),
            (
                format!("Payment {}", "A".repeat(MAX_CREDENTIAL_BYTES)),
                Some(CredentialError::TooLarge),
            ),
            ("x".repeat(1 << 20), Some(CredentialError::TooLarge)),
        ];
        for (header, expected) in &cases {
            match (PaymentCredential::parse_authorization(header), expected) {
                (Ok(_), _) => panic!("accepted {:?}", header.get(..60)),
                (Err(CredentialError::NotJson(_)), None) => {}
                (Err(err), expected) => {
                    assert_eq!(Some(&err), expected.as_ref(), "{:?}", header.get(..60))
                }
            }
        }
        // Extra fields are ignored, `source` is read.
        let mut extra = good.clone();
        extra["future"] = json!({"x": 1});
        extra["challenge"]["future"] = json!(1);
        extra["source"] = json!("did:pkh:eip155:84532:0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
        let Ok(read) =
            PaymentCredential::parse_authorization(&format!("Payment {}", encode(&extra)))
        else {
            panic!("extra fields are ignored")
        };
        assert!(read.source.is_some_and(|s| s.starts_with("did:pkh:")));

        // Random bytes, random base64url, random JSON: an answer and no panic.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"challenge\"",
            "\"payload\"",
            "\"id\"",
            "\"\"",
            "1",
            "null",
            "true",
            "\"x\"",
            "\"request\"",
            "\"\u{1f600}\"",
            "\\",
            "-1e999",
        ];
        for round in 0..3_000 {
            let text: String = (0..next() % 30)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            let header = match round % 3 {
                0 => format!("Payment {}", b64::encode(text.as_bytes())),
                1 => format!("Payment {text}"),
                _ => {
                    let bytes: Vec<u8> = (0..next() % 64).map(|_| next() as u8).collect();
                    format!("Payment {}", String::from_utf8_lossy(&bytes))
                }
            };
            assert!(PaymentCredential::parse_authorization(&header).is_err());
        }
    }
}
