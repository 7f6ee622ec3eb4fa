//! `x-request-id` values for requests that bring none: random (version 4) UUIDs, lower-case and
//! hyphenated, as tower-http's `MakeRequestUuid` makes them, but drawn from a per-thread
//! generator seeded once from the operating system instead of one `getrandom` system call and
//! two allocations per request. The ids correlate log lines and responses; nothing relies on
//! them being unguessable.

use std::cell::Cell;

use axum::http::{HeaderName, HeaderValue, Request};
use tower_http::request_id::{MakeRequestId, RequestId};

/// The header that carries a request's id, in and out.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[derive(Debug, Clone, Copy, Default)]
pub struct MakeRequestUuid;

impl MakeRequestId for MakeRequestUuid {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        let uuid = uuid::Builder::from_random_bytes(random().to_le_bytes()).into_uuid();
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = uuid.hyphenated().encode_lower(&mut text);
        HeaderValue::from_str(text).ok().map(RequestId::new)
    }
}

/// 128 bits from this thread's SplitMix64 stream (two steps).
fn random() -> u128 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    STATE.with(|state| {
        let high = splitmix64(state);
        let low = splitmix64(state);
        (u128::from(high) << 64) | u128::from(low)
    })
}

/// A seed from the operating system's generator (through `uuid`'s own v4 path, once per thread).
fn seed() -> u64 {
    let bits = uuid::Uuid::new_v4().as_u128();
    (bits as u64) ^ ((bits >> 64) as u64)
}

fn splitmix64(state: &Cell<u64>) -> u64 {
    let next = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
    state.set(next);
    let mut z = next;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_lower_case_v4_uuids() {
        let request = Request::new(());
        let mut make = MakeRequestUuid;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let id = make
                .make_request_id(&request)
                .map(|id| id.into_header_value());
            let text = id
                .as_ref()
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let parsed = uuid::Uuid::parse_str(&text);
            assert!(
                parsed.is_ok_and(|uuid| uuid.get_version_num() == 4),
                "{text}"
            );
            assert_eq!(text, text.to_lowercase());
            assert_eq!(text.len(), 36);
            assert!(seen.insert(text));
        }
    }
}
