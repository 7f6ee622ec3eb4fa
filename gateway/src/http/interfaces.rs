//! Where each protocol's endpoints live under the public origin and base path. The URL
//! builders are here, not in an adapter, because each protocol's card names the other's
//! endpoints: the Lucid card lists the A2A interfaces, and no adapter imports another.

/// Where the A2A bindings live under the base path.
pub const A2A_PREFIX: &str = "/a2a";

/// The A2A JSON-RPC endpoint's URL for a card built at `base_url` (origin and base path).
pub fn a2a_jsonrpc_url(base_url: &str) -> String {
    format!("{base_url}{A2A_PREFIX}/jsonrpc")
}

/// The A2A HTTP+JSON binding's base URL for a card built at `base_url`.
pub fn a2a_rest_url(base_url: &str) -> String {
    format!("{base_url}{A2A_PREFIX}/v1")
}
