//! CLIENT spans for script calls, following the database semantic conventions
//! (`db.system.name=redis`, `db.operation.name` = the script's name, `server.address`/`port`).
//!
//! A span is made only when traces are exported and the call has a traced caller (a request, a
//! task run): the background loops (the fetch loop's takes, heartbeats, recovery sweeps) call
//! Redis several times a second per worker and would otherwise start a trace per call. When
//! traces are off the cost is one atomic load per call.

use tracing::Span;

/// Where the store's Redis is, as the span attributes name it.
pub(crate) struct Peer {
    address: String,
    port: u16,
    /// The Redis database index (`db.namespace`).
    database: String,
}

impl Peer {
    pub(crate) fn from_url(url: &str) -> Peer {
        let parsed = url::Url::parse(url).ok();
        let address = parsed
            .as_ref()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_else(|| "localhost".to_owned());
        let port = parsed.as_ref().and_then(url::Url::port).unwrap_or(6379);
        let database = parsed
            .as_ref()
            .map(|url| url.path().trim_start_matches('/').to_owned())
            .filter(|db| !db.is_empty())
            .unwrap_or_else(|| "0".to_owned());
        Peer {
            address,
            port,
            database,
        }
    }

    /// The span of one call of `script` (`items` calls share it when batched), or a disabled
    /// span.
    pub(crate) fn script_span(&self, script: &'static str) -> Span {
        if !telemetry::traces_enabled() || Span::current().is_none() {
            return Span::none();
        }
        tracing::info_span!(
            "redis script",
            otel.name = script,
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.name = script,
            db.namespace = %self.database,
            server.address = %self.address,
            server.port = self.port,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_comes_from_the_url() {
        let peer = Peer::from_url("redis://:secret@10.0.0.5:6390/2");
        assert_eq!(
            (peer.address.as_str(), peer.port, peer.database.as_str()),
            ("10.0.0.5", 6390, "2")
        );
        let default = Peer::from_url("redis://cache");
        assert_eq!(
            (
                default.address.as_str(),
                default.port,
                default.database.as_str()
            ),
            ("cache", 6379, "0")
        );
    }
}
