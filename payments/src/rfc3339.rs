//! RFC 3339 date-times as MPP (`expires`, receipt `timestamp`) and SIWX (`issuedAt`,
//! `expirationTime`, `notBefore`) carry them, to and from Unix seconds.
//!
//! Reading is strict about the shape, `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`: the one
//! mppx's schema accepts and JavaScript's `Date.toISOString()` writes. chrono alone would also
//! take a lowercase `t`/`z` or a space for the `T`, which no client here sends.

use chrono::{DateTime, SecondsFormat, Utc};

/// Longest date-time read: 19 characters, a fraction of up to 12 digits, an offset.
const MAX_LEN: usize = 40;

/// Unix seconds of `text`, the fraction dropped (so an instant compares as the whole second it
/// falls in). `None` when the text is not an RFC 3339 date-time of the shape above, or is
/// before 1970.
pub(crate) fn parse(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes.len() > MAX_LEN {
        return None;
    }
    let digits = |from: usize, to: usize| {
        bytes
            .get(from..to)
            .is_some_and(|run| run.iter().all(u8::is_ascii_digit))
    };
    let at = |index: usize, byte: u8| bytes.get(index) == Some(&byte);
    let shaped = digits(0, 4)
        && at(4, b'-')
        && digits(5, 7)
        && at(7, b'-')
        && digits(8, 10)
        && at(10, b'T')
        && digits(11, 13)
        && at(13, b':')
        && digits(14, 16)
        && at(16, b':')
        && digits(17, 19);
    if !shaped {
        return None;
    }
    let mut rest = bytes.get(19..)?;
    if let Some((b'.', fraction)) = rest.split_first() {
        let count = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
        if count == 0 {
            return None;
        }
        rest = fraction.get(count..)?;
    }
    let zone_ok = match rest {
        [b'Z'] => true,
        [sign, h1, h2, b':', m1, m2] => {
            (*sign == b'+' || *sign == b'-') && [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit())
        }
        _ => false,
    };
    if !zone_ok {
        return None;
    }
    let parsed = DateTime::parse_from_rfc3339(text).ok()?;
    u64::try_from(parsed.timestamp()).ok()
}

/// `unix` as `YYYY-MM-DDTHH:MM:SSZ` (MPP's examples), `None` past chrono's range.
pub(crate) fn format_seconds(unix: u64) -> Option<String> {
    let seconds = i64::try_from(unix).ok()?;
    let time = DateTime::<Utc>::from_timestamp(seconds, 0)?;
    Some(time.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// `unix` as `YYYY-MM-DDTHH:MM:SS.000Z`, what JavaScript's `toISOString()` writes (x402's SIWX
/// server issues `issuedAt` this way).
pub(crate) fn format_millis(unix: u64) -> Option<String> {
    let seconds = i64::try_from(unix).ok()?;
    let time = DateTime::<Utc>::from_timestamp(seconds, 0)?;
    Some(time.to_rfc3339_opts(SecondsFormat::Millis, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shapes_clients_send() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse("2025-01-15T12:05:00Z"), Some(1_736_942_700));
        assert_eq!(parse("2025-01-15T12:05:00.999Z"), Some(1_736_942_700));
        assert_eq!(parse("2025-01-15T13:05:00+01:00"), Some(1_736_942_700));
        assert_eq!(parse("2025-01-15T07:05:00.5-05:00"), Some(1_736_942_700));
        for bad in [
            "",
            "2025-01-15",
            "2025-01-15 12:05:00Z",
            "2025-01-15t12:05:00Z",
            "2025-01-15T12:05:00z",
            "2025-01-15T12:05:00",
            "2025-01-15T12:05:00.Z",
            "2025-01-15T12:05:00+0100",
            "2025-13-15T12:05:00Z",
            "2025-01-15T25:05:00Z",
            "1969-12-31T23:59:59Z",
            "２０２５-01-15T12:05:00Z",
            "2025-01-15T12:05:00.0000000000000000000000Z",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn writes_seconds_and_millis() {
        assert_eq!(
            format_seconds(1_736_942_700).as_deref(),
            Some("2025-01-15T12:05:00Z")
        );
        assert_eq!(
            format_millis(1_736_942_700).as_deref(),
            Some("2025-01-15T12:05:00.000Z")
        );
        assert_eq!(format_seconds(u64::MAX), None);
        for unix in [0, 1, 1_736_942_700, 4_102_444_800] {
            let text = format_seconds(unix).unwrap_or_default();
            assert_eq!(parse(&text), Some(unix));
            let text = format_millis(unix).unwrap_or_default();
            assert_eq!(parse(&text), Some(unix));
        }
    }
}
