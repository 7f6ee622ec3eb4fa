//! The expectations the tests state about refusals: the error of a code on either binding,
//! and an authentication refusal.

use harness::TestResult;
use harness::a2a::{Binding, Failure, Reply, ensure, reason_of};
use reqwest::StatusCode;

/// Expects `reply` to be the error of `code` (JSON-RPC: HTTP 200 and that code; HTTP+JSON:
/// `rest_status`), with the code's reason on either binding.
pub fn expect_error(
    binding: Binding,
    reply: Reply,
    code: i64,
    rest_status: u16,
    what: &str,
) -> TestResult<Failure> {
    let failure = match reply {
        Ok(value) => {
            return Err(format!("{what} ({binding:?}): expected error {code}, got {value}").into());
        }
        Err(failure) => failure,
    };
    let right = match binding {
        Binding::JsonRpc => failure.http == StatusCode::OK && failure.code == Some(code),
        Binding::Rest => failure.http.as_u16() == rest_status,
    };
    ensure(right && failure.reason == reason_of(code), || {
        format!(
            "{what} ({binding:?}): expected error {code} / HTTP {rest_status} ({}), got HTTP {}: {}",
            reason_of(code),
            failure.http,
            failure.body
        )
    })?;
    Ok(failure)
}

/// Expects an authentication refusal: `401` with `WWW-Authenticate: Bearer` on both bindings.
pub fn expect_unauthenticated(binding: Binding, reply: Reply, what: &str) -> TestResult {
    let failure = match reply {
        Ok(value) => return Err(format!("{what} ({binding:?}): expected 401, got {value}").into()),
        Err(failure) => failure,
    };
    ensure(
        failure.http == StatusCode::UNAUTHORIZED
            && failure
                .challenge
                .as_deref()
                .is_some_and(|challenge| challenge.to_ascii_lowercase().starts_with("bearer"))
            && failure.reason == "UNAUTHENTICATED",
        || format!("{what} ({binding:?}): expected 401 with a Bearer challenge, got {failure:?}"),
    )
}
