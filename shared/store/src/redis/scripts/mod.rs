//! The task store's Lua scripts, one Rust module per script (BullMQ pairs each
//! `moveToActive-*.lua` with one method the same way). Each module:
//!
//! - opens with the script's contract (KEYS, ARGV, reply), repeated from its Lua header, so the
//!   two are read side by side;
//! - names the script once (`lua_script!`, `lua.rs`): the same `NAME` picks the resolved Lua
//!   text (includes pasted in by `build.rs`, in OUT_DIR) and names the call's span;
//! - packs all of the script's KEYS and ARGV, batched items (`ScriptItem`) included: no other
//!   file builds them;
//! - reads the reply into a typed value (an enum or struct implementing
//!   [`redis::FromRedisValue`]); a reply that does not fit is [`StoreError::Corrupt`];
//! - holds the call itself where one call is one script run, so that `tasks.rs` only maps
//!   typed replies to the [`crate::TaskStore`] contract.
//!
//! [`Scripts`] is the loaded set, built from the modules' sources: each script a function of the
//! store's Redis Functions library (`functions.rs`, called by `FCALL`), or, on a server without
//! functions, its text (`EVALSHA`). Either reloads what the server lost (`NOSCRIPT`, `Function
//! not found`), so a Redis restart, SCRIPT FLUSH or FUNCTION FLUSH costs one extra round trip,
//! never an error (`invocation.rs`). Every script runs inside the replay guard (`replay.rs`).
//!
//! The push outbox's scripts (`push_*.rs`) are task-store scripts too: their keys are the
//! task's shard's. The namespace-wide scripts (credentials, nonces, idempotency, registry, rate
//! limits) live with their own stores and load themselves through [`guarded`].

use std::sync::Arc;

use redis::Value;

use super::functions::Library;
use super::invocation::{ScriptCall, StoreScript};
use super::{Core, Keys};
use crate::StoreError;

pub(crate) mod activate;
pub(crate) mod attach_receipt;
pub(crate) mod await_input;
pub(crate) mod cas;
pub(crate) mod claim;
pub(crate) mod create;
pub(crate) mod due;
pub(crate) mod emit;
pub(crate) mod finish_take;
pub(crate) mod hand_off;
pub(crate) mod hold;
pub(crate) mod layout;
pub(crate) mod list_page;
pub(crate) mod push_advance;
pub(crate) mod push_claim;
pub(crate) mod push_delete;
pub(crate) mod push_put;
pub(crate) mod push_release;
pub(crate) mod record_receipt;
pub(crate) mod recover;
pub(crate) mod renew;
pub(crate) mod resume;
pub(crate) mod retry_later;
pub(crate) mod take;

/// Declares the loaded set from the script modules: one field per module, loaded from its
/// `SOURCE`, so a script's name is written in its module only.
macro_rules! loaded_scripts {
    ($($module:ident),* $(,)?) => {
        /// Every task-store script, loaded for one pub/sub flavour.
        pub struct Scripts {
            $(pub $module: StoreScript,)*
        }

        impl Scripts {
            /// The scripts for `pubsub`, each called as its function in `library` when
            /// given (`Library::build(&Scripts::bodies(), pubsub)`), else by `EVALSHA`.
            pub fn load(pubsub: PubSub, library: Option<&Arc<Library>>) -> Self {
                Scripts {
                    $($module: script($module::SOURCE, $module::NAME, pubsub, library),)*
                }
            }

            /// Every script's name and body (its text without includes), for the library.
            pub fn bodies() -> Vec<(&'static str, &'static str)> {
                vec![$(($module::NAME, $module::BODY),)*]
            }
        }
    };
}

loaded_scripts!(
    create,
    claim,
    take,
    renew,
    activate,
    hand_off,
    hold,
    record_receipt,
    attach_receipt,
    emit,
    await_input,
    retry_later,
    resume,
    cas,
    finish_take,
    due,
    recover,
    layout,
    list_page,
    push_put,
    push_delete,
    push_claim,
    push_advance,
    push_release,
);

/// How the scripts publish task events and cancellations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PubSub {
    /// `PUBLISH`: one server (any Redis version) hears it on classic channels.
    Classic,
    /// `SPUBLISH` (Redis 7): on a Redis Cluster the message stays on the master that owns the
    /// channel's slot, which is the script's own shard's (channel names carry the shard's tag).
    Sharded,
}

/// One Lua source serves both flavours: the sharded variant only swaps the publish command,
/// so the scripts cannot drift apart (a Lua script cannot tell by itself whether it runs on
/// a cluster). The library (`Library::build`) swaps it the same way.
fn script(text: &str, name: &str, pubsub: PubSub, library: Option<&Arc<Library>>) -> StoreScript {
    let text = match pubsub {
        PubSub::Classic => super::replay::wrap(text),
        PubSub::Sharded => {
            super::replay::wrap(&text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'"))
        }
    };
    StoreScript::function(&text, name, library)
}

/// A script inside the replay guard ([`super::replay`]), as every script the store runs must
/// be: the store ends each call's keys and arguments with the guard's. Called by `EVALSHA`:
/// the namespace-wide scripts are not in the library.
pub(crate) fn guarded(text: &str) -> StoreScript {
    StoreScript::eval(&super::replay::wrap(text))
}

/// A script reply (or one item's) read as `R`; a reply that does not fit is
/// [`StoreError::Corrupt`].
pub(crate) fn parse<R: redis::FromRedisValue>(reply: Value) -> Result<R, StoreError> {
    redis::from_redis_value(reply).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// Runs a script call in the slot `keys` names, waiting for replicas where the store does
/// (`Core::eval`), and reads its reply as `R`.
pub(crate) async fn run<R: redis::FromRedisValue>(
    core: &Core,
    name: &'static str,
    keys: &Keys,
    invocation: &mut ScriptCall<'_>,
) -> Result<R, StoreError> {
    parse(core.eval::<Value>(name, keys, invocation).await?)
}

/// [`run`] without waiting for replicas (`Core::eval_unreplicated`): reads, and writes the
/// next call writes again.
pub(crate) async fn run_unreplicated<R: redis::FromRedisValue>(
    core: &Core,
    name: &'static str,
    keys: &Keys,
    invocation: &mut ScriptCall<'_>,
) -> Result<R, StoreError> {
    parse(
        core.eval_unreplicated::<Value>(name, keys, invocation)
            .await?,
    )
}

/// A [`StoreError`] met while reading a reply, as the parsing error `FromRedisValue` returns.
pub(crate) fn misfit(err: StoreError) -> redis::ParsingError {
    match err {
        StoreError::Corrupt(what) => what.into(),
        other => other.to_string().into(),
    }
}

/// An integer inside a reply.
pub(crate) fn int(value: &Value) -> Result<u64, redis::ParsingError> {
    redis::from_redis_value_ref(value)
}

/// A string inside a reply.
pub(crate) fn text(value: &Value) -> Result<String, redis::ParsingError> {
    redis::from_redis_value_ref(value)
}

/// Milliseconds of a duration, as the scripts take them.
pub(crate) fn ms(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// JSON text of a value, as the scripts store it.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharded_flavour_publishes_only_on_sharded_channels() {
        let publishers = [
            (emit::NAME, emit::SOURCE),
            (cas::NAME, cas::SOURCE),
            (finish_take::NAME, finish_take::SOURCE),
            (recover::NAME, recover::SOURCE),
            (await_input::NAME, await_input::SOURCE),
            (resume::NAME, resume::SOURCE),
        ];
        for (name, text) in publishers {
            assert!(
                text.contains("redis.call('PUBLISH'"),
                "{name} publishes classically"
            );
            let sharded = text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'");
            assert!(
                !sharded.contains("'PUBLISH'"),
                "{name} keeps a classic publish"
            );
            assert_ne!(
                script(text, name, PubSub::Classic, None).hash(),
                script(text, name, PubSub::Sharded, None).hash()
            );
        }
        let sharded = Library::build(&Scripts::bodies(), PubSub::Sharded);
        assert!(!sharded.code().contains("'PUBLISH'"));
        assert!(sharded.code().contains("redis.call('SPUBLISH'"));
    }
}
