//! The A2A gRPC binding: the official `lf.a2a.v1.A2AService` (the proto a2a-pb carries), served
//! by tonic on a listener of its own (`--grpc-listen`), over the same operations as the
//! JSON-RPC and HTTP+JSON bindings ([`super::service`]), so a task answers the same whichever
//! binding reads it.
//!
//! - [`service`]: the `A2aService` implementation, converting with `a2a_pb::pbconv`;
//! - [`admission`]: the rate limits of task creation, shared with the HTTP bindings;
//! - [`convert`]: a message's numbers as the JSON bindings read them;
//! - [`caller`]: who is calling and in which protocol version, from the request's metadata;
//! - [`status`]: A2A errors as `google.rpc.Status` with an `ErrorInfo` detail;
//! - [`streaming`]: the streamed methods' events as a gRPC server stream.
//!
//! A port of its own rather than the gateway's by content type: gRPC's paths sit at the root
//! (`/lf.a2a.v1.A2AService/...`), outside the base path, and the HTTP router's answers (a
//! `429` body, a `413`) are HTTP's, not gRPC's trailers. The bounds are the same ones: the
//! connection loop ([`server::serve`]: first-request deadline, connection caps), the body read
//! deadline and size, the client address (trusted proxies) and the rate limits ([`router`]).

pub mod admission;
pub mod caller;
pub mod convert;
pub mod service;
pub mod status;
pub mod streaming;

use std::sync::Arc;
use std::time::Duration;

use a2a_pb::a2a_service_server::A2aServiceServer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::core::config::GatewayConfig;
use crate::core::ratelimit::Limits;
use crate::core::state::AppState;
use crate::http::client_address;

/// The gRPC service as a router for [`server::serve::serve`], under the HTTP listener's bounds:
/// a request message is at most `--body-limit-bytes` and must arrive within
/// `--body-timeout-ms` of its last frame (a stream that stops mid-message is answered, and its
/// buffer freed, then); the client address is read as on HTTP (`--trusted-proxies`); creating
/// calls pass the rate limits in `limiter`, the HTTP router's.
pub fn router(state: AppState, limiter: Arc<dyn store::ratelimit::RateLimiter>) -> axum::Router {
    let limit = state.config.body_limit_bytes;
    let body_timeout = Duration::from_millis(state.config.body_timeout_ms);
    let limits = Limits::new(&state.config, limiter);
    let forwarding = Arc::new(state.config.forwarding());
    let service = A2aServiceServer::new(service::Grpc::new(state)).max_decoding_message_size(limit);
    tonic::service::Routes::new(service)
        .prepare()
        .into_axum_router()
        .layer(axum::middleware::from_fn_with_state(
            limits,
            admission::admit,
        ))
        // Outside the rate limit, which reads the client address it leaves.
        .layer(axum::middleware::from_fn_with_state(
            forwarding,
            client_address::tag,
        ))
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
}

/// The card's GRPC interface address for a card built at `base_url`, when gRPC is served:
/// `--grpc-url`, else the host of `base_url` with `--grpc-listen`'s port.
pub fn card_url(config: &GatewayConfig, base_url: &str) -> Option<String> {
    let listen = config.grpc_listen.as_deref()?;
    if let Some(url) = &config.grpc_url {
        return Some(url.clone());
    }
    let (_, port) = listen.rsplit_once(':')?;
    let authority = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    Some(format!("{}:{port}", host_of(authority)))
}

/// `host` of `host:port`, `[v6]` of `[v6]:port`.
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: Option<&str>, url: Option<&str>) -> GatewayConfig {
        let mut config = GatewayConfig::for_tests();
        config.grpc_listen = listen.map(str::to_owned);
        config.grpc_url = url.map(str::to_owned);
        config
    }

    #[test]
    fn the_card_url_is_the_request_host_with_the_grpc_port() {
        assert_eq!(card_url(&config(None, None), "http://h:8080/base"), None);
        let on = config(Some("0.0.0.0:50051"), None);
        assert_eq!(
            card_url(&on, "http://agent.example:8080/base").as_deref(),
            Some("agent.example:50051")
        );
        assert_eq!(
            card_url(&on, "https://[::1]:8443").as_deref(),
            Some("[::1]:50051")
        );
        assert_eq!(
            card_url(&on, "http://agent.example").as_deref(),
            Some("agent.example:50051")
        );
        let fixed = config(Some("127.0.0.1:1"), Some("https://g.example:443"));
        assert_eq!(
            card_url(&fixed, "http://h").as_deref(),
            Some("https://g.example:443")
        );
    }
}
