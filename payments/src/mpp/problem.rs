//! The problem types (RFC 9457, `application/problem+json`) a Payment rejection is answered
//! with: draft-httpauth-payment's "Error Codes" table, under
//! `https://paymentauth.org/problems/`, with mppx's titles (`src/Errors.ts`). Every one but
//! `method-unsupported` goes out as a 402 with a fresh challenge.

use serde_json::{Value, json};

/// `Content-Type` of a problem body.
pub const CONTENT_TYPE: &str = "application/problem+json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Problem {
    /// No credential: the resource requires payment.
    PaymentRequired,
    /// The amount paid is too low.
    PaymentInsufficient,
    /// The challenge (or the authorization) has expired.
    PaymentExpired,
    /// The payment proof is invalid.
    VerificationFailed,
    /// The method is not accepted (400, no challenge needed).
    MethodUnsupported,
    /// The credential could not be read (base64url, JSON, shape).
    MalformedCredential,
    /// The challenge id is unknown (not issued here), does not match this route, or was used.
    InvalidChallenge,
}

impl Problem {
    /// The last segment of the type URI.
    pub fn code(self) -> &'static str {
        match self {
            Problem::PaymentRequired => "payment-required",
            Problem::PaymentInsufficient => "payment-insufficient",
            Problem::PaymentExpired => "payment-expired",
            Problem::VerificationFailed => "verification-failed",
            Problem::MethodUnsupported => "method-unsupported",
            Problem::MalformedCredential => "malformed-credential",
            Problem::InvalidChallenge => "invalid-challenge",
        }
    }

    pub fn type_uri(self) -> &'static str {
        match self {
            Problem::PaymentRequired => "https://paymentauth.org/problems/payment-required",
            Problem::PaymentInsufficient => "https://paymentauth.org/problems/payment-insufficient",
            Problem::PaymentExpired => "https://paymentauth.org/problems/payment-expired",
            Problem::VerificationFailed => "https://paymentauth.org/problems/verification-failed",
            Problem::MethodUnsupported => "https://paymentauth.org/problems/method-unsupported",
            Problem::MalformedCredential => "https://paymentauth.org/problems/malformed-credential",
            Problem::InvalidChallenge => "https://paymentauth.org/problems/invalid-challenge",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Problem::PaymentRequired => "Payment Required",
            Problem::PaymentInsufficient => "Payment Insufficient",
            Problem::PaymentExpired => "Payment Expired",
            Problem::VerificationFailed => "Verification Failed",
            Problem::MethodUnsupported => "Method Unsupported",
            Problem::MalformedCredential => "Malformed Credential",
            Problem::InvalidChallenge => "Invalid Challenge",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Problem::MethodUnsupported => 400,
            _ => 402,
        }
    }

    /// The problem+json body: `{type, title, status, detail[, challengeId]}`, the challenge id
    /// being the fresh one sent with it (as in the spec's example).
    pub fn body(self, detail: &str, challenge_id: Option<&str>) -> Value {
        let mut body = json!({
            "type": self.type_uri(),
            "title": self.title(),
            "status": self.status(),
            "detail": detail,
        });
        if let (Some(id), Some(object)) = (challenge_id, body.as_object_mut()) {
            object.insert("challengeId".into(), Value::String(id.to_owned()));
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_the_specs() {
        for problem in [
            Problem::PaymentRequired,
            Problem::PaymentInsufficient,
            Problem::PaymentExpired,
            Problem::VerificationFailed,
            Problem::MethodUnsupported,
            Problem::MalformedCredential,
            Problem::InvalidChallenge,
        ] {
            assert_eq!(
                problem.type_uri(),
                format!("https://paymentauth.org/problems/{}", problem.code())
            );
        }
        assert_eq!(
            Problem::PaymentRequired.body("Payment required for access.", Some("qB3w")),
            json!({
                "type": "https://paymentauth.org/problems/payment-required",
                "title": "Payment Required",
                "status": 402,
                "detail": "Payment required for access.",
                "challengeId": "qB3w"
            })
        );
        assert_eq!(Problem::MethodUnsupported.status(), 400);
        assert!(
            Problem::InvalidChallenge
                .body("x", None)
                .get("challengeId")
                .is_none()
        );
    }
}
