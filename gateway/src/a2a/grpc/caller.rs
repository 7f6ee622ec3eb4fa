//! Who is calling over gRPC, by the same rules as the HTTP bindings: the `authorization`
//! metadata (`Bearer <token>`) or `task-access-token` names the owner ([`crate::a2a::caller`]),
//! and `a2a-version` the protocol version ([`crate::a2a::version`]). Metadata is HTTP/2 headers,
//! so both checks read it as the header map it is; the token is never logged.

use axum::http::{HeaderMap, Uri};
use protocol::token::OwnerHash;

use crate::a2a::error::A2aError;
use crate::a2a::{caller, version};
use crate::http::client_address::Source;

/// What a gRPC call brings for [`crate::a2a::service::Caller`].
pub struct Metadata {
    pub owner: OwnerHash,
    pub headers: HeaderMap,
    /// The method's path, for the payment gate's resource (no gRPC request carries a URI).
    pub uri: Uri,
    /// The client address key, for the per-address bound on live tasks.
    pub source: Option<String>,
}

/// Checks the version and identifies the caller of `request` to `method` (`SendMessage`, …).
pub fn of<T>(request: &tonic::Request<T>, method: &str) -> Result<Metadata, A2aError> {
    let headers = request.metadata().clone().into_headers();
    version::check(&headers, None)?;
    let owner = caller::owner(&headers)?;
    let uri = format!("/lf.a2a.v1.A2AService/{method}")
        .parse()
        .map_err(|_| A2aError::internal())?;
    // Left by the router's client address middleware (the TCP peer, or behind a trusted
    // proxy the hop it recorded), as on the HTTP bindings.
    let Source(source) = Source::of(request.extensions());
    Ok(Metadata {
        owner,
        headers,
        uri,
        source,
    })
}

#[cfg(test)]
mod tests {
    use tonic::metadata::MetadataValue;

    use super::*;

    fn request(pairs: &[(&'static str, &'static str)]) -> tonic::Request<()> {
        let mut request = tonic::Request::new(());
        for (name, value) in pairs {
            request
                .metadata_mut()
                .insert(*name, MetadataValue::from_static(value));
        }
        request
    }

    #[test]
    fn a_bearer_and_version_one_identify_the_caller() {
        let called = of(
            &request(&[
                ("authorization", "Bearer a-token-of-enough-length-1"),
                ("a2a-version", "1.0"),
            ]),
            "GetTask",
        );
        assert!(called.is_ok_and(|called| called.uri.path() == "/lf.a2a.v1.A2AService/GetTask"));
    }

    #[test]
    fn no_token_is_unauthenticated_and_another_version_unsupported() {
        let anonymous = of(&request(&[("a2a-version", "1.0")]), "GetTask");
        assert!(anonymous.is_err_and(|err| err.unauthenticated));
        let old = of(
            &request(&[
                ("authorization", "Bearer a-token-of-enough-length-1"),
                ("a2a-version", "0.3"),
            ]),
            "GetTask",
        );
        assert!(old.is_err_and(|err| err.code == a2a::error_code::VERSION_NOT_SUPPORTED));
    }
}
