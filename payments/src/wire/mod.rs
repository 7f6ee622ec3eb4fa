//! The x402 documents on the wire, and their header encoding (standard base64 of JSON).
//!
//! Field names are x402's (camelCase); unknown fields are ignored on input so that newer
//! clients keep working, and nothing is added on output that the specs do not name.

pub mod exact;
pub mod facilitator;
pub mod upto;
pub mod v1;
pub mod v2;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::MAX_HEADER_BYTES;

/// Standard alphabet; padding written, and optional when read (some clients strip it).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a header could not be read as a JSON document. The messages quote nothing of the
/// header itself: it may be a payment credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header is larger than {MAX_HEADER_BYTES} bytes")]
    TooLarge,
    #[error("header is not valid base64")]
    NotBase64,
    #[error("header is not a JSON document of the expected shape: {0}")]
    NotJson(String),
}

/// `value` as a header: standard base64 of its JSON.
pub fn encode<T: Serialize>(value: &T) -> String {
    // Serializing plain structs of strings and numbers cannot fail.
    let json = serde_json::to_vec(value).unwrap_or_default();
    BASE64.encode(json)
}

/// A header's JSON document.
pub fn decode<T: DeserializeOwned>(header: &str) -> Result<T, HeaderError> {
    if header.len() > MAX_HEADER_BYTES {
        return Err(HeaderError::TooLarge);
    }
    let bytes = BASE64
        .decode(header.trim())
        .map_err(|_| HeaderError::NotBase64)?;
    serde_json::from_slice(&bytes).map_err(|err| HeaderError::NotJson(describe(&err)))
}

/// serde's message without the input echoed back (it only ever names the position and the
/// expectation, but keep it to the classification and position to be sure).
pub(crate) fn describe(err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match err.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "malformed JSON",
        Category::Data => "wrong fields or types",
        Category::Eof => "truncated JSON",
    };
    format!("{what} (line {}, column {})", err.line(), err.column())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn round_trips_and_refuses_garbage() {
        let doc = json!({"x402Version": 2, "a": "b"});
        let header = encode(&doc);
        assert_eq!(decode::<Value>(&header), Ok(doc.clone()));
        assert_eq!(decode::<Value>(header.trim_end_matches('=')), Ok(doc));
        assert_eq!(decode::<Value>("%%%"), Err(HeaderError::NotBase64));
        assert!(matches!(
            decode::<Value>(&BASE64.encode("{nope")),
            Err(HeaderError::NotJson(_))
        ));
        let huge = "A".repeat(MAX_HEADER_BYTES + 1);
        assert_eq!(decode::<Value>(&huge), Err(HeaderError::TooLarge));
    }
}
