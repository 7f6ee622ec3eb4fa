//! The Lua scripts of the store's non-task parts (credentials, idempotency, registry, rate
//! limits), one Rust module per script (`credentials/redis/claim.rs` for
//! `lua/credential_claim.lua`, ...). [`lua_script!`] names each script once. The task store's
//! scripts have their own loader (`redis/scripts/mod.rs`: `script_source!`), because each
//! store loads them for its pub/sub flavour (PUBLISH or SPUBLISH), where these are static.

/// `lua_script!("name")` defines, in the module that calls it, `NAME` (the span name every call
/// records) and `SCRIPT` (`lua/name.lua`, its includes resolved by `build.rs`, inside the
/// replay guard that every store script runs in), from one literal, so the source a call runs
/// and the name it is traced under cannot drift apart. The script is built once per process,
/// on first use (its text never changes).
macro_rules! lua_script {
    ($name:literal) => {
        /// The script's name: its file in `lua/`, and its span name.
        const NAME: &str = $name;

        /// The script, inside the replay guard.
        static SCRIPT: ::std::sync::LazyLock<::redis::Script> = ::std::sync::LazyLock::new(|| {
            $crate::redis::guarded_script(include_str!(concat!(
                env!("OUT_DIR"),
                "/",
                $name,
                ".lua"
            )))
        });
    };
}

pub(crate) use lua_script;
