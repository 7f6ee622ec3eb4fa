//! What a delivery attempt that reached the wire came to, and whether trying again can help.
//! An outbox stores the outcome of an exhausted delivery for inspection, so each one prints as
//! a line an operator can read.

use std::fmt;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};

/// The longest `Location` kept from a redirect: enough to see where it pointed.
const MAX_LOCATION_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// A 2xx answer.
    Delivered { status: u16 },
    /// A 3xx answer. Redirects are not followed (the target would escape the address checks
    /// and a 307 would resend the credentials), so this is permanent.
    Redirected {
        status: u16,
        location: Option<String>,
    },
    /// A 4xx answer other than 408 and 429, or any other status outside 2xx-5xx: the receiver
    /// will not take this request as it is. Permanent.
    Rejected { status: u16 },
    /// 408, 429 or 5xx: the receiver may take it later. Retryable; `retry_after` is the
    /// receiver's `Retry-After` when given in seconds.
    Unavailable {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No complete answer within the configured time (connect or total). Retryable.
    TimedOut,
    /// The connection failed or broke (refused, reset, DNS failure, TLS error). Retryable.
    Transport { detail: String },
}

impl DeliveryOutcome {
    /// Classifies an answer by its status.
    pub fn from_response(status: StatusCode, headers: &HeaderMap) -> Self {
        let code = status.as_u16();
        match code {
            200..=299 => Self::Delivered { status: code },
            300..=399 => Self::Redirected {
                status: code,
                location: headers
                    .get(LOCATION)
                    .map(|v| truncate(&String::from_utf8_lossy(v.as_bytes()), MAX_LOCATION_LEN)),
            },
            408 | 429 | 500..=599 => Self::Unavailable {
                status: code,
                retry_after: headers
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs),
            },
            _ => Self::Rejected { status: code },
        }
    }

    pub fn is_delivered(&self) -> bool {
        matches!(self, Self::Delivered { .. })
    }

    /// Whether sending the same request again may give a different answer.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::TimedOut | Self::Transport { .. }
        )
    }

    /// The HTTP status, when the receiver answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Delivered { status }
            | Self::Redirected { status, .. }
            | Self::Rejected { status }
            | Self::Unavailable { status, .. } => Some(*status),
            Self::TimedOut | Self::Transport { .. } => None,
        }
    }
}

impl fmt::Display for DeliveryOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Delivered { status } => write!(f, "delivered ({status})"),
            Self::Redirected { status, location } => {
                write!(f, "redirect {status} not followed")?;
                match location {
                    Some(location) => write!(f, " (Location: {location})"),
                    None => Ok(()),
                }
            }
            Self::Rejected { status } => write!(f, "rejected by the receiver ({status})"),
            Self::Unavailable {
                status,
                retry_after,
            } => {
                write!(f, "receiver unavailable ({status})")?;
                match retry_after {
                    Some(after) => write!(f, ", retry after {}s", after.as_secs()),
                    None => Ok(()),
                }
            }
            Self::TimedOut => f.write_str("timed out"),
            Self::Transport { detail } => write!(f, "connection failed: {detail}"),
        }
    }
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn classify(
        code: u16,
        headers: &[(reqwest::header::HeaderName, &str)],
    ) -> Result<DeliveryOutcome, Box<dyn std::error::Error>> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(name.clone(), HeaderValue::from_str(value)?);
        }
        Ok(DeliveryOutcome::from_response(
            StatusCode::from_u16(code)?,
            &map,
        ))
    }

    #[test]
    fn statuses_are_classified() -> Result<(), Box<dyn std::error::Error>> {
        for code in [200, 201, 202, 204, 299] {
            let outcome = classify(code, &[])?;
            assert!(outcome.is_delivered() && !outcome.is_retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 405, 409, 410, 413, 422, 499, 100, 600] {
            let outcome = classify(code, &[])?;
            assert_eq!(outcome, DeliveryOutcome::Rejected { status: code });
            assert!(!outcome.is_retryable());
        }
        for code in [408, 429, 500, 502, 503, 504, 599] {
            let outcome = classify(code, &[])?;
            assert!(outcome.is_retryable(), "{code}");
            assert_eq!(outcome.status(), Some(code));
        }
        assert!(DeliveryOutcome::TimedOut.is_retryable());
        assert!(
            DeliveryOutcome::Transport {
                detail: String::new()
            }
            .is_retryable()
        );
        Ok(())
    }

    #[test]
    fn redirects_are_permanent_and_name_their_target() -> Result<(), Box<dyn std::error::Error>> {
        let outcome = classify(302, &[(LOCATION, "http://10.0.0.1/")])?;
        assert!(!outcome.is_retryable() && !outcome.is_delivered());
        assert_eq!(
            outcome.to_string(),
            "redirect 302 not followed (Location: http://10.0.0.1/)"
        );
        let long = format!("http://x/{}", "a".repeat(1000));
        match classify(307, &[(LOCATION, &long)])? {
            DeliveryOutcome::Redirected {
                location: Some(location),
                ..
            } => {
                assert_eq!(location.chars().count(), MAX_LOCATION_LEN + 1);
            }
            other => panic!("{other:?}"),
        }
        Ok(())
    }

    #[test]
    fn retry_after_in_seconds_is_kept() -> Result<(), Box<dyn std::error::Error>> {
        assert_eq!(
            classify(429, &[(RETRY_AFTER, "7")])?,
            DeliveryOutcome::Unavailable {
                status: 429,
                retry_after: Some(Duration::from_secs(7))
            }
        );
        // An HTTP date is not worth a clock comparison here; the backoff applies instead.
        assert_eq!(
            classify(503, &[(RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT")])?,
            DeliveryOutcome::Unavailable {
                status: 503,
                retry_after: None
            }
        );
        assert_eq!(
            classify(503, &[(RETRY_AFTER, "7")])?.to_string(),
            "receiver unavailable (503), retry after 7s"
        );
        Ok(())
    }
}
