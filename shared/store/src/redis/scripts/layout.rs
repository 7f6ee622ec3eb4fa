//! `layout.lua`: stamps a namespace with the store layout this code writes, or says which one
//! it holds. Every process runs it at connect. An unstamped namespace that already holds live
//! work, deadlines or registered workers was written by a version from before the stamp: it is
//! refused, never read as if it were empty.
//!
//! KEYS: layout, live, leases, admissions, registry (the namespace's own keys).
//! ARGV: the layout this code writes.
//! Reply: the namespace's layout (after stamping an empty one) | 'unstamped' (older data).

use redis::Value;

use super::{run_unreplicated, text};
use crate::StoreError;
use crate::lua::lua_script;
use crate::redis::Core;

lua_script!("layout");

/// What `layout.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LayoutReply {
    /// The namespace's stamp (this code's when it was empty).
    Stamped(String),
    /// Live data from before stamps existed.
    Unstamped,
}

impl redis::FromRedisValue for LayoutReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let found = text(&v)?;
        Ok(if found == "unstamped" {
            LayoutReply::Unstamped
        } else {
            LayoutReply::Stamped(found)
        })
    }
}

/// Stamps the namespace with `expected`, or reads its stamp. Not replicated: the next process
/// to connect writes the stamp again.
pub(crate) async fn call(core: &Core, expected: &str) -> Result<LayoutReply, StoreError> {
    let keys = &core.keys;
    let mut invocation = core.scripts.layout.prepare_invoke();
    invocation
        .key(keys.layout())
        .key(keys.live())
        .key(keys.leases())
        .key(keys.admissions())
        .key(keys.registry())
        .arg(expected);
    run_unreplicated(core, NAME, keys, &mut invocation).await
}
